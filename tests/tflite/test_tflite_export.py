"""lezero.tflite: traced models written as TFLite flatbuffers run in the official interpreter
(ai_edge_litert) with lezero's outputs: the seed MLP and a CNN in float32 within 1e-5, the seed
MLP quantized with quantize_dynamic as TFLite dynamic-range int8 within one quantization step,
statically quantized MLP and CNN as full-integer int8 (int8 activations, per-channel int8
weights, int32 biases) within one step of every int8 activation; an op TFLite cannot express is
an error naming it and the user's line."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter
from support.tflite_testing import op_names, run_tflite

import lezero as lz
from lezero import nn
from lezero.tflite import ExportError, to_tflite


def seed_mlp() -> nn.Module:
    """The seed program's SimpleMLP (784 -> 256 -> relu -> 10) as a Sequential; the trained seed
    program itself is exported in tests/examples/test_seed_program.py."""
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10))


class SmallCNN(nn.Module):
    """Every float op of the exporter: conv (padded, strided), depthwise conv, batch norm, relu,
    relu6, tanh, sigmoid, pools, mean, concat, reshape, linear, softmax, scalar arithmetic."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, kernel_size=3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 8, kernel_size=3, padding=1, groups=8), nn.ReLU6(), nn.AvgPool2d(2), nn.Tanh(),
            nn.Conv2d(8, 12, kernel_size=2, stride=2))
        self.classifier = nn.Linear(12, 10)

    def forward(self, x):
        y = self.features(x)
        flat = y.flatten(1)
        logits = self.classifier(flat) * 0.5 - 1.0
        return nn.functional.softmax(logits, dim=-1), lz.cat([flat, y.mean((2, 3))], 1) / 2, lz.sigmoid(y)


def outputs_of(traced, x) -> list[np.ndarray]:
    out = traced(lz.from_numpy(x))
    return [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]


def test_the_seed_mlp_saved_as_tflite_runs_in_the_interpreter_with_lezeros_outputs(tmp_path):
    lz.manual_seed(0)
    traced = lz.jit.trace(seed_mlp().eval(), example_inputs=lz.randn(1, 784))
    path = tmp_path / "mlp.tflite"
    lz.jit.save(traced, path)
    data = path.read_bytes()
    assert data[4:8] == b"TFL3"
    assert op_names(data) == ["FULLY_CONNECTED", "RELU", "FULLY_CONNECTED"]  # the bias adds fused
    x = np.random.default_rng(0).standard_normal((5, 784)).astype(np.float32)
    (got,) = run_tflite(data, x)
    np.testing.assert_allclose(got, outputs_of(traced, x)[0], rtol=1e-5, atol=1e-5)


def test_a_cnn_in_nchw_runs_in_tflite_nhwc_with_lezeros_outputs():
    lz.manual_seed(1)
    model = SmallCNN()
    bn = model.features[1]
    bn.running_mean.copy_(lz.randn(8) * 0.1)
    bn.running_var.copy_(lz.rand(8) + 0.5)
    traced = lz.jit.trace(model.eval(), example_inputs=lz.randn(1, 1, 8, 8))
    data = to_tflite(traced)
    names = op_names(data)
    for op in ("CONV_2D", "DEPTHWISE_CONV_2D", "RELU", "RELU6", "MAX_POOL_2D", "AVERAGE_POOL_2D", "MEAN",
               "CONCATENATION", "SOFTMAX", "FULLY_CONNECTED", "LOGISTIC", "TANH", "RESHAPE"):
        assert op in names, (op, names)
    assert names.count("TRANSPOSE") == 3  # into NHWC once, back for the flatten and for sigmoid's output
    x = np.random.default_rng(1).standard_normal((3, 1, 8, 8)).astype(np.float32)
    got = run_tflite(data, x)
    want = outputs_of(traced, x)
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_the_seed_mlp_quantized_dynamically_is_tflite_dynamic_range_int8_within_a_step():
    lz.manual_seed(2)
    model = seed_mlp().eval()
    config = lz.quantization.QuantConfig(activation_dtype="int8", weight_dtype="int8", scheme="symmetric")
    quantized = lz.quantization.quantize_dynamic(model, qconfig_spec=config, dtype="int8")
    traced = lz.jit.trace(quantized, example_inputs=lz.randn(1, 784))
    data = to_tflite(traced)
    float_size = len(to_tflite(lz.jit.trace(model, example_inputs=lz.randn(1, 784))))
    assert len(data) < float_size / 3.5  # int8 weights
    interpreter = Interpreter(model_content=data)
    weights = [t for t in interpreter.get_tensor_details() if t["dtype"] == np.int8]
    weights.sort(key=lambda t: -t["shape"][0])
    assert [w["shape"].tolist() for w in weights] == [[256, 784], [10, 256]]  # (out, in), as FULLY_CONNECTED's
    scales = weights[0]["quantization_parameters"]["scales"]
    assert scales.shape == (256,) and weights[0]["quantization_parameters"]["quantized_dimension"] == 0
    x = np.random.default_rng(2).standard_normal((4, 784)).astype(np.float32)
    (got,) = run_tflite(data, x)
    (want,) = outputs_of(traced, x)
    float_out = outputs_of(lz.jit.trace(model, example_inputs=lz.randn(1, 784)), x)[0]
    assert op_names(data) == ["FULLY_CONNECTED", "RELU", "FULLY_CONNECTED"]  # hybrid, the bias adds fused
    # TFLite quantizes each input row (lezero the whole tensor), so the two int8 results differ by
    # rounding: at most by the step quantization itself moves the output (lezero int8 against float)
    step = np.abs(want - float_out).max()
    assert 0 < np.abs(got - want).max() <= step, (np.abs(got - want).max(), step)
    assert np.abs(got - float_out).max() <= step


def test_an_op_tflite_cannot_express_is_an_error_naming_it_and_the_users_line():
    class Cumulative(nn.Module):
        def forward(self, x):
            return lz.cumsum(x, 1)  # the line the error names

    traced = lz.jit.trace(Cumulative(), example_inputs=lz.randn(2, 3))
    with pytest.raises(ExportError, match=r"lz\.cumulative.*no TFLite form") as info:
        to_tflite(traced)
    assert "test_tflite_export.py" in str(info.value)


def test_a_matmul_of_two_inputs_is_an_error_not_a_wrong_model():
    class Product(nn.Module):
        def forward(self, a, b):
            return lz.matmul(a, b)

    traced = lz.jit.trace(Product(), example_inputs=(lz.randn(2, 3), lz.randn(3, 4)))
    with pytest.raises(ExportError, match="FULLY_CONNECTED takes a constant weight"):
        to_tflite(traced)


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_and_log_softmax_are_tflites_own_ops(approximate):
    lz.manual_seed(3)
    model = nn.Sequential(nn.Linear(12, 16), nn.GELU(approximate=approximate), nn.Linear(16, 4), nn.LogSoftmax(dim=1))
    traced = lz.jit.trace(model.eval(), example_inputs=lz.randn(1, 12))
    data = to_tflite(traced)
    assert op_names(data) == ["FULLY_CONNECTED", "GELU", "FULLY_CONNECTED", "LOG_SOFTMAX"]
    x = np.random.default_rng(3).standard_normal((6, 12)).astype(np.float32)
    np.testing.assert_allclose(run_tflite(data, x)[0], outputs_of(traced, x)[0], rtol=1e-5, atol=1e-5)


class Elementwise(nn.Module):
    """Each unary op the exporter writes, binary maximum/minimum of two inputs, and a clamp."""

    def forward(self, x, y):
        positive = lz.abs(x) + 0.5
        return (lz.exp(x), lz.neg(x), lz.sqrt(positive), lz.rsqrt(positive), lz.log(positive), lz.maximum(x, y),
                lz.minimum(x, y), lz.clamp(x, -0.5, 0.75), lz.tanh(x) - y)


def test_elementwise_ops_and_clamps_match_lezero():
    traced = lz.jit.trace(Elementwise(), example_inputs=(lz.randn(1, 7), lz.randn(1, 7)))
    data = to_tflite(traced)
    names = op_names(data)
    for op in ("EXP", "NEG", "ABS", "SQRT", "RSQRT", "LOG", "MAXIMUM", "MINIMUM", "TANH", "SUB"):
        assert op in names, (op, names)
    rng = np.random.default_rng(4)
    x, y = (rng.standard_normal((4, 7)).astype(np.float32) for _ in range(2))
    got = run_tflite(data, x, y)
    want = [o.numpy() for o in traced(lz.from_numpy(x), lz.from_numpy(y))]
    assert len(got) == len(want) == 9
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_an_image_plus_a_computed_row_broadcasts_as_in_lezero():
    """After a convolution the image is NHWC inside the TFLite graph; adding a computed (W,) row to
    it must still broadcast along lezero's last axis (W), so that add computes in NCHW."""
    class ConvPlusRow(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(2, 3, kernel_size=1)

        def forward(self, x, row):
            return lz.relu(self.conv(x)) + lz.tanh(row), self.conv(x) * 2.0

    lz.manual_seed(5)
    traced = lz.jit.trace(ConvPlusRow().eval(), example_inputs=(lz.randn(1, 2, 4, 5), lz.randn(5)))
    rng = np.random.default_rng(5)
    x, row = rng.standard_normal((2, 2, 4, 5)).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    got = run_tflite(to_tflite(traced), x, row)
    want = [o.numpy() for o in traced(lz.from_numpy(x), lz.from_numpy(row))]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def _statically_quantized(model, calibration: np.ndarray):
    """``model`` quantized as TFLite's converter would: int8 activations (min/max calibration on
    ``calibration``), symmetric per-channel int8 weights."""
    config = lz.quantization.QuantConfig(activation_dtype="int8", weight_dtype="int8", scheme="symmetric")
    prepared = lz.quantization.prepare(model.eval(), config)
    with lz.no_grad():
        prepared(lz.from_numpy(calibration))
    return lz.quantization.convert(prepared).eval()


def _run_keeping_tensors(data: bytes, x: np.ndarray):
    """(the output, {tensor name: value} of every tensor) of the flatbuffer run on ``x``."""
    with warnings.catch_warnings():  # "intended for debugging purposes": what it is used for here
        warnings.simplefilter("ignore", UserWarning)
        interpreter = Interpreter(model_content=data, experimental_preserve_all_tensors=True)
    (d,) = interpreter.get_input_details()
    interpreter.resize_tensor_input(d["index"], x.shape)
    interpreter.allocate_tensors()
    interpreter.set_tensor(d["index"], x)
    interpreter.invoke()
    (out,) = interpreter.get_output_details()
    return interpreter.get_tensor(out["index"]), {t["name"]: t for t in interpreter.get_tensor_details()}, interpreter


def _check_within_a_step(got, want, layer, steps: np.ndarray):
    """The float result of ``layer`` (a QuantizedLinear) within one step of each int8 input:
    TFLite requantizes between layers in fixed point, lezero in float, so an int8 activation may
    round to the neighbouring step."""
    bound = float(layer.input_scale.numpy()) * np.abs(layer.dequantized_weight()).sum(1).max()
    assert np.abs(steps).max() <= 1, np.abs(steps).max()
    assert np.abs(got - want).max() <= bound, (np.abs(got - want).max(), bound)


def test_a_statically_quantized_mlp_is_full_integer_tflite():
    """Static quantization (int8 activations): the hidden layer is TFLite's int8 FULLY_CONNECTED
    (int8 in and out with the next layer's input scale, per-channel int8 weight, int32 bias, relu
    fused); the last layer, whose result lezero gives in float, DEQUANTIZEs its int8 input and
    weight; QUANTIZE at the input.  ~4x smaller than the float file."""
    lz.manual_seed(6)
    model = seed_mlp()
    x = np.random.default_rng(6).standard_normal((4, 784)).astype(np.float32)  # one shape: one set of kernels
    quantized = _statically_quantized(model, x)
    traced = lz.jit.trace(quantized, example_inputs=lz.from_numpy(x))
    data = to_tflite(traced)
    assert op_names(data) == ["QUANTIZE", "FULLY_CONNECTED", "DEQUANTIZE", "DEQUANTIZE", "FULLY_CONNECTED"]
    assert len(data) < len(to_tflite(lz.jit.trace(model, example_inputs=lz.from_numpy(x)))) / 3.8  # 3.85x
    got, tensors, interpreter = _run_keeping_tensors(data, x)
    hidden = next(t for t in tensors.values() if t["name"].startswith("fc") and t["dtype"] == np.int8)
    second = quantized[2]
    assert hidden["quantization_parameters"]["scales"].tolist() == [np.float32(second.input_scale.numpy())]
    weight = next(t for t in tensors.values() if t["shape"].tolist() == [256, 784])
    assert weight["dtype"] == np.int8 and weight["quantization_parameters"]["scales"].shape == (256,)
    with lz.no_grad():
        h = quantized[1](quantized[0](lz.from_numpy(x))).numpy()
    want_h = np.clip(np.round(h / np.float32(second.input_scale.numpy())) + int(second.input_zero_point.numpy()),
                     -128, 127)
    _check_within_a_step(got, outputs_of(traced, x)[0], second,
                         interpreter.get_tensor(hidden["index"]).astype(np.int64) - want_h)


class QuantizableCNN(nn.Module):
    """Conv (padded) -> relu -> max pool -> depthwise conv (padded, relu) -> 1x1 conv -> linear."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(2, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.ReLU(), nn.Conv2d(8, 6, 1))
        self.classifier = nn.Linear(6 * 3 * 3, 5)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


def test_a_statically_quantized_cnn_is_full_integer_tflite_within_a_step():
    """QuantizedConv2d -> TFLite's int8 CONV_2D / DEPTHWISE_CONV_2D as its converter writes them:
    int8 input and output (the next layer's input scale and zero point; relu fused; max pool and
    the flatten on int8), per-channel int8 filters (quantized dimension 0 of OHWI, 3 of the
    depthwise 1HWO), int32 bias of scale input_scale * filter_scale; QUANTIZE at the input, the
    classifier's float result from DEQUANTIZEd int8; every int8 activation within one step of
    lezero's."""
    lz.manual_seed(8)
    rng = np.random.default_rng(8)
    x = rng.standard_normal((3, 2, 6, 6)).astype(np.float32)
    quantized = _statically_quantized(QuantizableCNN(), x)
    traced = lz.jit.trace(quantized, example_inputs=lz.from_numpy(x))  # x's shape: one set of eager kernels
    data = to_tflite(traced)
    names = op_names(data)
    assert names[0] == "QUANTIZE" and names[-3:] == ["DEQUANTIZE", "DEQUANTIZE", "FULLY_CONNECTED"], names
    assert names.count("CONV_2D") == 2 and names.count("DEPTHWISE_CONV_2D") == 1 and "MAX_POOL_2D" in names
    got, tensors, interpreter = _run_keeping_tensors(data, x)
    convs = [t for t in tensors.values() if t["name"].startswith(("conv", "depthwise"))]
    assert [t["dtype"] for t in convs] == [np.int8] * 3
    filters = [t for t in tensors.values() if t["name"].startswith("weight_int8")]
    assert [(t["shape"].tolist(), t["quantization_parameters"]["quantized_dimension"]) for t in filters] == [
        ([8, 3, 3, 2], 0), ([1, 3, 3, 8], 3), ([6, 1, 1, 8], 0), ([5, 54], 0)]
    layers = [quantized.features[0], quantized.features[3], quantized.features[5]]
    for layer, filt, bias in zip(layers, filters, [t for t in tensors.values() if t["name"].startswith("bias_int32")]):
        assert bias["dtype"] == np.int32
        input_scale = np.float32(layer.input_scale.numpy())
        np.testing.assert_allclose(bias["quantization_parameters"]["scales"],
                                   input_scale * filt["quantization_parameters"]["scales"], rtol=1e-6)
        np.testing.assert_allclose(filt["quantization_parameters"]["scales"], layer.weight_scale.numpy(), rtol=1e-6)
        assert not filt["quantization_parameters"]["zero_points"].any()
    # the int8 activation the classifier reads, against lezero's
    with lz.no_grad():
        h = quantized.features(lz.from_numpy(x)).numpy().reshape(len(x), -1)
    classifier = quantized.classifier
    want_h = np.clip(np.round(h / np.float32(classifier.input_scale.numpy()))
                     + int(classifier.input_zero_point.numpy()), -128, 127)
    flat = next(t for t in tensors.values() if t["name"].startswith("reshape"))
    _check_within_a_step(got, outputs_of(traced, x)[0], classifier,
                         interpreter.get_tensor(flat["index"]).astype(np.int64) - want_h)


def test_a_result_computed_from_weights_only_is_a_folded_constant():
    class WeightNorm(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 2)

        def forward(self, x):
            return self.fc(x), (self.fc.weight * self.fc.weight).sum(1)

    lz.manual_seed(7)
    traced = lz.jit.trace(WeightNorm().eval(), example_inputs=lz.randn(1, 3))
    x = np.random.default_rng(7).standard_normal((2, 3)).astype(np.float32)
    data = to_tflite(traced)
    assert op_names(data) == ["FULLY_CONNECTED"]
    for got, want in zip(run_tflite(data, x), outputs_of(traced, x)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
