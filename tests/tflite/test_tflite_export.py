"""lezero.tflite: traced models written as TFLite flatbuffers run in the official interpreter
(ai_edge_litert) with lezero's outputs: the seed MLP and a CNN in float32 within 1e-5, the seed
MLP quantized with quantize_dynamic as TFLite dynamic-range int8 within one quantization step; an
op TFLite cannot express is an error naming it and the user's line."""
from __future__ import annotations

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


def test_a_statically_quantized_linear_is_a_clear_error_not_a_float_model():
    lz.manual_seed(6)
    config = lz.quantization.QuantConfig(activation_dtype="int8", weight_dtype="int8", scheme="symmetric")
    prepared = lz.quantization.prepare(seed_mlp().eval(), config)
    prepared(lz.randn(8, 784))  # calibration
    quantized = lz.quantization.convert(prepared)
    traced = lz.jit.trace(quantized.eval(), example_inputs=lz.randn(1, 784))
    with pytest.raises(ExportError, match="statically quantized input"):
        to_tflite(traced)


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
