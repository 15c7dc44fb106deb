"""lz.quantization on a CNN trained on the digits data (issue 12's must-show): conv + batch norm +
relu fused (``fuse_modules``), then static quantization (min/max calibration) and QAT (fake
quantization, straight-through gradient) each lose under 1 point of accuracy and save (the
``lz.save`` file of the state dict) at least 3.5x smaller; the quantized conv against a numpy
model of its integer arithmetic; the quantized CNN traces, saves and loads, and exports to ONNX
(ConvInteger) that ONNX's reference evaluator and ONNX Runtime (where its int8 kernels are exact)
run with the same outputs, and to full-integer TFLite that ai_edge_litert runs with lezero's
predictions."""
from __future__ import annotations

import io
import pathlib
import sys

import numpy as np
import onnx
import pytest

import lezero as lz
import lezero.onnx
import lezero.tflite
from lezero import nn
from lezero import quantization as Q
from support.quantization_testing import check_onnx_runs
from support.tflite_testing import op_names, run_tflite

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
import digits
from train_cnn import DigitsCNN

FUSIONS = [["features.0", "features.1", "features.2"], ["features.4", "features.5", "features.6"]]


def _train(model, x, y, steps, batch, optimizer):
    criterion = nn.CrossEntropyLoss()
    order = np.random.default_rng(0).permutation(len(x))
    for step in range(steps):
        rows = order[np.arange(step * batch, (step + 1) * batch) % len(x)]  # one shape: compiled once
        optimizer.zero_grad()
        loss = criterion(model(lz.from_numpy(x[rows])), lz.from_numpy(y[rows]))
        loss.backward()
        optimizer.step()


@pytest.fixture(scope="module")
def trained():
    x_train, y_train, x_test, y_test = digits.load(8)
    lz.manual_seed(0)
    model = DigitsCNN()
    _train(model, x_train, y_train, 50, 64, lz.optim.Adam(model.parameters(), lr=5e-3))
    return model.eval(), x_train, y_train, x_test, y_test


def _accuracy(model, x, y):
    with lz.no_grad():
        return float((model(lz.from_numpy(x)).numpy().argmax(1) == y).mean())


def _saved_bytes(model) -> tuple[int, int]:
    """The bytes of ``lz.save(model.state_dict())`` and of its tensors' data alone."""
    buffer = io.BytesIO()
    state = model.state_dict()
    lz.save(state, buffer)
    return len(buffer.getvalue()), sum(v.numpy().nbytes for v in state.values())


def _check_smaller(model, quantized):
    """The saved file at least 3.5x smaller (issue 12's must-show), and its tensors: the quantized
    CNN is 18 tensors (int8 weights, their scales and zero points, float biases, the input's scale
    and zero point) of 6.5 kB, which lz.save's format 02 stores with ~300 bytes of header."""
    (float_file, float_data), (int8_file, int8_data) = _saved_bytes(model), _saved_bytes(quantized)
    assert float_data >= 3.5 * int8_data, (float_data, int8_data)
    assert float_file >= 3.5 * int8_file, (float_file, int8_file)


@pytest.mark.slow
def test_static_quantization_of_a_cnn_keeps_accuracy_and_is_smaller(trained, tmp_path):
    """(Every model runs the test images as one batch: one compiled function per model.)"""
    model, x_train, _, x_test, y_test = trained
    images = lz.from_numpy(x_test)
    float_accuracy = _accuracy(model, x_test, y_test)
    assert float_accuracy > 0.9
    fused = Q.fuse_modules(model, FUSIONS)
    assert isinstance(fused.features[0], Q.ConvReLU2d) and isinstance(fused.features[1], nn.Identity)
    prepared = Q.prepare(fused, Q.QuantConfig())
    with lz.no_grad():
        want = model(images).numpy()
        np.testing.assert_allclose(prepared(lz.from_numpy(x_train[:len(x_test)])).numpy(),
                                   model(lz.from_numpy(x_train[:len(x_test)])).numpy(), rtol=1e-4, atol=1e-4)
    static = Q.convert(prepared)
    assert isinstance(static.features[4], Q.QuantizedConv2d) and static.features[4].weight.dtype == lz.int8
    assert isinstance(static.classifier, Q.QuantizedLinear)
    with lz.no_grad():
        eager = static(images).numpy()
    static_accuracy = float((eager.argmax(1) == y_test).mean())
    assert float_accuracy - static_accuracy < 0.01, (float_accuracy, static_accuracy)
    assert np.abs(eager - want).max() < 0.1 * np.abs(want).max()
    _check_smaller(model, static)
    # traces, and saves / loads
    traced = lz.jit.trace(static, example_inputs=images)
    np.testing.assert_allclose(traced(images).numpy(), eager, rtol=1e-5, atol=1e-5)
    # exports as ONNX's integer ops (QuantizeLinear, ConvInteger, MatMulInteger); ONNX's reference and ONNX
    # Runtime (where its u8 x s8 kernels are exact: not on AVX2-only x86) compute the same
    lezero.onnx.export(traced, str(tmp_path / "cnn_int8.onnx"))
    graph = onnx.load(tmp_path / "cnn_int8.onnx").graph
    assert {"QuantizeLinear", "ConvInteger", "MatMulInteger"} <= {n.op_type for n in graph.node}
    check_onnx_runs(tmp_path / "cnn_int8.onnx", {graph.input[0].name: x_test}, eager, 1e-5)
    # and as a full-integer TFLite model (int8 CONV_2D, int8 activations) that ai_edge_litert runs with
    # lezero's predictions; 2.7x smaller than the float TFLite file (the weights 4x: the per-channel scales
    # and int64 zero points TFLite keeps for 58 filter and bias channels are 1.4 kB beside 6 kB of weights)
    lz.jit.save(traced, tmp_path / "cnn_int8.tflite")
    data = (tmp_path / "cnn_int8.tflite").read_bytes()
    assert op_names(data).count("CONV_2D") == 2 and "QUANTIZE" in op_names(data)
    (tflite_logits,) = run_tflite(data, x_test)
    assert float_accuracy - float((tflite_logits.argmax(1) == y_test).mean()) < 0.01
    assert (tflite_logits.argmax(1) == eager.argmax(1)).mean() > 0.99
    assert len(lezero.tflite.to_tflite(lz.jit.trace(model, example_inputs=images))) > 2.6 * len(data)
    buffer = io.BytesIO()
    lz.save(static.state_dict(), buffer)
    fresh = Q.prepare(Q.fuse_modules(DigitsCNN().eval(), FUSIONS))
    with lz.no_grad():
        fresh(images)
    fresh = Q.convert(fresh)
    buffer.seek(0)
    fresh.load_state_dict(lz.load(buffer))
    with lz.no_grad():
        np.testing.assert_array_equal(fresh(images).numpy(), eager)


@pytest.mark.slow
def test_qat_of_a_cnn_keeps_accuracy_and_is_smaller(trained):
    model, x_train, y_train, x_test, y_test = trained
    float_accuracy = _accuracy(model, x_test, y_test)
    qat = Q.prepare_qat(Q.fuse_modules(model, FUSIONS).train(), Q.QuantConfig())
    assert isinstance(qat.features[0], Q.QATConv2d)
    _train(qat, x_train, y_train, 4, 64, lz.optim.SGD(qat.parameters(), lr=0.01))
    assert np.abs(qat.features[4].weight.grad.numpy()).sum() > 0  # gradients flow through fake quantization
    converted = Q.convert(qat.eval())
    assert float_accuracy - _accuracy(converted, x_test, y_test) < 0.01
    _check_smaller(model, converted)


def test_quantized_conv_computes_its_integer_arithmetic():
    """QuantizedConv2d against numpy: x quantized with the calibrated parameters, the exact integer
    convolution with the int8 weights (per output channel, symmetric), scaled, plus the bias, relu."""
    lz.manual_seed(1)
    conv = nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2)
    x = np.random.default_rng(1).standard_normal((2, 4, 7, 6)).astype(np.float32)
    fused = Q.fuse_modules(nn.Sequential(conv, nn.ReLU()).eval(), ["0", "1"])
    prepared = Q.prepare(fused)
    with lz.no_grad():
        prepared(lz.from_numpy(x))
    layer = Q.convert(prepared)[0]
    scale, zero = float(layer.input_scale.numpy()), int(layer.input_zero_point.numpy())
    q = np.clip(np.round(x / np.float32(scale)) + zero, 0, 255).astype(np.int64)
    w = layer.weight.numpy().astype(np.int64)
    assert np.abs(w).max() >= 127 and (layer.weight_zero_point.numpy() == 0).all()
    padded = np.pad(q - zero, ((0, 0), (0, 0), (1, 1), (1, 1)))
    sums = np.zeros((2, 6, 4, 3), np.int64)
    for o in range(6):
        g = o // 3
        for i in range(3):
            for j in range(3):
                window = padded[:, 2 * g:2 * g + 2, i:i + 7:2, j:j + 6:2]
                sums[:, o] += np.einsum("nchw,c->nhw", window, w[o, :, i, j])
    want = sums.astype(np.float32) * (np.float32(scale) * layer.weight_scale.numpy()).reshape(1, -1, 1, 1)
    want = np.maximum(want + conv.bias.detach().numpy().reshape(1, -1, 1, 1), 0)
    with lz.no_grad():
        got = layer(lz.from_numpy(x)).numpy()
        reference = fused(lz.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.abs(got - reference).max() < 0.1  # and near the float layer: within the quantization error


def test_fuse_modules_checks_what_it_fuses():
    model = nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2), nn.Linear(2, 2))
    with pytest.raises(RuntimeError, match="call model.eval"):
        Q.fuse_modules(model, ["0", "1"])
    with pytest.raises(ValueError, match=r"cannot fuse 0 \(Conv2d\), 2 \(Linear\)"):
        Q.fuse_modules(model.eval(), ["0", "2"])
