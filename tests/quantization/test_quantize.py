"""lz.quantization on the seed's MLP trained on the digits data: dynamic quantization loses under
1 point of accuracy and saves at least 3.5x smaller; static quantization (min/max calibration) and
QAT (fake quantization, straight-through gradient) convert to int8 models that keep the accuracy;
quantized models trace, save and load; the quantized layer against a numpy model of its integer
arithmetic; observers against PyTorch's."""
from __future__ import annotations

import io
import pathlib
import sys

import numpy as np
import pytest
import torch

import lezero as lz
from lezero import quantization as Q
from support.quantization_testing import check_onnx_runs

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))
import digits
import train_mlp


@pytest.fixture(scope="module")
def trained():
    data = digits.load(28)
    result = train_mlp.train("compiled", epochs=1, progress=False, data=data)
    x_train, y_train, x_test, y_test = data
    return result["model"], x_train.reshape(len(x_train), 784), y_train, x_test.reshape(len(x_test), 784), y_test


def _accuracy(model, x, y):
    with lz.no_grad():
        return float((model(lz.from_numpy(x)).numpy().argmax(1) == y).mean())


def _saved_bytes(model) -> int:
    buffer = io.BytesIO()
    lz.save(model.state_dict(), buffer)
    return len(buffer.getvalue())


@pytest.mark.slow
def test_dynamic_quantization_keeps_accuracy_and_is_smaller(trained):
    model, _, _, x_test, y_test = trained
    config = Q.QuantConfig(activation_dtype="uint8", weight_dtype="int8", scheme="symmetric")
    quantized = Q.quantize_dynamic(model, qconfig_spec={lz.nn.Linear: config}, dtype="int8")
    assert isinstance(quantized.fc1, Q.DynamicQuantizedLinear) and isinstance(model.fc1, lz.nn.Linear)
    assert quantized.fc1.weight.dtype == lz.int8
    float_accuracy, int8_accuracy = _accuracy(model, x_test, y_test), _accuracy(quantized, x_test, y_test)
    assert float_accuracy > 0.9
    assert float_accuracy - int8_accuracy < 0.01, (float_accuracy, int8_accuracy)
    assert _saved_bytes(model) >= 3.5 * _saved_bytes(quantized)
    # traces (one function, the int8 GEMM in it) and saves / loads
    traced = lz.jit.trace(quantized, example_inputs=lz.from_numpy(x_test[:4]))
    with lz.no_grad():
        eager = quantized(lz.from_numpy(x_test[:32])).numpy()
    np.testing.assert_allclose(traced(lz.from_numpy(x_test[:32])).numpy(), eager, rtol=1e-5, atol=1e-5)
    buffer = io.BytesIO()
    lz.save(quantized.state_dict(), buffer)
    fresh = Q.quantize_dynamic(train_mlp.SimpleMLP(), dtype="int8")
    buffer.seek(0)
    fresh.load_state_dict(lz.load(buffer))
    with lz.no_grad():
        np.testing.assert_array_equal(fresh(lz.from_numpy(x_test[:32])).numpy(), eager)


@pytest.mark.slow
def test_static_quantization_and_qat_keep_accuracy(trained):
    model, x_train, y_train, x_test, y_test = trained
    float_accuracy = _accuracy(model, x_test, y_test)
    prepared = Q.prepare(model, Q.QuantConfig())
    with lz.no_grad():
        for i in range(0, 512, 128):
            prepared(lz.from_numpy(x_train[i:i + 128]))
    static = Q.convert(prepared)
    assert isinstance(static.fc2, Q.QuantizedLinear)
    assert float_accuracy - _accuracy(static, x_test, y_test) < 0.01
    qat = Q.prepare_qat(model, Q.QuantConfig())
    optimizer = lz.optim.SGD(qat.parameters(), lr=0.01)
    criterion = lz.nn.CrossEntropyLoss()
    for i in range(0, 640, 64):
        optimizer.zero_grad()
        loss = criterion(qat(lz.from_numpy(x_train[i:i + 64])), lz.from_numpy(y_train[i:i + 64]))
        loss.backward()
        assert np.abs(qat.fc1.weight.grad.numpy()).sum() > 0  # gradients flow through fake quantization
        optimizer.step()
    converted = Q.convert(qat)
    assert float_accuracy - _accuracy(converted, x_test, y_test) < 0.01
    with lz.no_grad():
        agree = (converted(lz.from_numpy(x_test)).numpy().argmax(1) == qat(lz.from_numpy(x_test)).numpy().argmax(1))
    assert agree.mean() > 0.98


def test_dynamic_linear_computes_its_integer_arithmetic():
    """The layer's output against numpy: x quantized to uint8 from its own range (ONNX's rule), an
    exact integer product with the int8 weights, scaled per channel, plus the bias."""
    lz.manual_seed(0)
    linear = lz.nn.Linear(37, 19)
    layer = Q.DynamicQuantizedLinear.from_float(linear)
    x = np.random.default_rng(0).standard_normal((2, 5, 37)).astype(np.float32)
    low, high = min(x.min(), 0), max(x.max(), 0)
    scale = np.float32((np.float32(high) - np.float32(low)) / np.float32(255))
    zero = np.clip(np.round(-low / scale), 0, 255)
    q = np.clip(np.round(x / scale) + zero, 0, 255)
    w = layer.weight.numpy().astype(np.int64)
    assert np.abs(w).max() >= 127 and (layer.weight_zero_point.numpy() == 0).all()  # the whole range, symmetric
    product = (q.astype(np.int64) - int(zero)) @ w
    want = product.astype(np.float32) * (scale * layer.weight_scale.numpy()) + linear.bias.detach().numpy()
    with lz.no_grad():
        got = layer(lz.from_numpy(x)).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # and close to the float layer: within the quantization error
    with lz.no_grad():
        reference = linear(lz.from_numpy(x)).numpy()
    assert np.abs(got - reference).max() < 0.05


def test_fake_quantize_has_the_straight_through_gradient():
    x = lz.tensor(np.asarray([-3.0, -0.26, 0.0, 0.24, 0.5, 3.0], np.float32), requires_grad=True)
    y = Q.functional.fake_quantize(x, 0.1, 0, -10, 10)
    np.testing.assert_allclose(y.detach().numpy(), [-1.0, -0.3, 0.0, 0.2, 0.5, 1.0], atol=1e-6)
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0, 1, 1, 1, 1, 0])
    t = torch.tensor([-3.0, -0.26, 0.0, 0.24, 0.5, 3.0], requires_grad=True)
    torch.fake_quantize_per_tensor_affine(t, 0.1, 0, -10, 10).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), t.grad.numpy())


@pytest.mark.parametrize("dtype, scheme", [("uint8", "per_tensor_affine"), ("int8", "per_tensor_symmetric"),
                                           ("uint8", "per_tensor_symmetric")])
def test_observers_choose_pytorchs_parameters(dtype, scheme):
    rng = np.random.default_rng(2)
    batches = [rng.standard_normal((8, 6)).astype(np.float32) * s + 0.3 for s in (1, 3, 0.5)]
    torch_dtype = torch.quint8 if dtype == "uint8" else torch.qint8
    torch_scheme = getattr(torch, scheme)
    for ours, theirs in ((Q.MinMaxObserver(dtype=dtype, qscheme=scheme),
                          torch.ao.quantization.MinMaxObserver(dtype=torch_dtype, qscheme=torch_scheme)),
                         (Q.MovingAverageMinMaxObserver(0.1, dtype=dtype, qscheme=scheme),
                          torch.ao.quantization.MovingAverageMinMaxObserver(0.1, dtype=torch_dtype,
                                                                            qscheme=torch_scheme))):
        for batch in batches:
            ours(lz.from_numpy(batch))
            theirs(torch.from_numpy(batch))
        scale, zero = ours.calculate_qparams()
        want_scale, want_zero = theirs.calculate_qparams()
        np.testing.assert_allclose(scale, want_scale.numpy(), rtol=1e-6)
        np.testing.assert_array_equal(zero, want_zero.numpy())


def test_per_channel_and_histogram_observers():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((5, 7)).astype(np.float32) * np.arange(1, 6, dtype=np.float32)[:, None]
    ours = Q.PerChannelMinMaxObserver(ch_axis=0)
    theirs = torch.ao.quantization.PerChannelMinMaxObserver(ch_axis=0, dtype=torch.qint8,
                                                            qscheme=torch.per_channel_symmetric)
    ours(lz.from_numpy(w))
    theirs(torch.from_numpy(w))
    np.testing.assert_allclose(ours.calculate_qparams()[0], theirs.calculate_qparams()[0].numpy(), rtol=1e-6)
    histogram = Q.HistogramObserver(percentile=0.99)
    values = np.concatenate([rng.standard_normal(10000), [80.0, -60.0]]).astype(np.float32)
    histogram(lz.from_numpy(values))
    scale, _ = histogram.calculate_qparams()
    minmax = Q.MinMaxObserver()
    minmax(lz.from_numpy(values))
    assert scale < minmax.calculate_qparams()[0] / 10  # the two outliers are clipped
    with pytest.raises(RuntimeError, match="has observed nothing"):
        Q.MinMaxObserver().calculate_qparams()
    with pytest.raises(ValueError, match="scheme must be"):
        Q.QuantConfig(scheme="asymmetric")


def test_quantized_models_export_to_onnx_and_run_in_onnxruntime(tmp_path):
    """A traced quantized model exports as ONNX's integer ops (DynamicQuantizeLinear or
    QuantizeLinear, MatMulInteger): ONNX's reference evaluator computes the same outputs, and so
    does ONNX Runtime where its u8 x s8 MatMulInteger is exact (``check_onnx_runs``: not on an
    AVX2-only x86 CPU, whose ORT kernel saturates)."""
    import onnx

    import lezero.onnx

    lz.manual_seed(0)
    model = lz.nn.Sequential(lz.nn.Linear(20, 32), lz.nn.ReLU(), lz.nn.Linear(32, 5))
    x = np.random.default_rng(0).standard_normal((4, 20)).astype(np.float32)
    prepared = Q.prepare(model)
    with lz.no_grad():
        prepared(lz.from_numpy(x))
    for quantized, quantizer in ((Q.quantize_dynamic(model), "DynamicQuantizeLinear"), (Q.convert(prepared),
                                                                                        "QuantizeLinear")):
        path = tmp_path / f"{quantizer}.onnx"
        lezero.onnx.export(lz.jit.trace(quantized, lz.from_numpy(x)), str(path))
        graph = onnx.load(path).graph
        assert {quantizer, "MatMulInteger"} <= {n.op_type for n in graph.node}
        with lz.no_grad():
            want = quantized(lz.from_numpy(x)).numpy()
        check_onnx_runs(path, {graph.input[0].name: x}, want, 1e-6)
