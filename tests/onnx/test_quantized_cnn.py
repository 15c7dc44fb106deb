"""A CNN quantized by ONNX Runtime's ``quantize_static`` (a calibration reader, per-channel int8
weights, uint8 activations) in both formats, imported and run by lezero within one quantization
step of ONNX Runtime (issue 12): the QOperator form's QLinearConv is ``lz.conv_integer`` (8-bit
im2col and the int8 GEMM) and its com.microsoft QGemm ``lz.matmul_integer``; the QDQ form's
float Convs and Gemm between QuantizeLinear / DequantizeLinear pairs become the same integer ops
(the fold-qdq pass)."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_static,
)

import lezero.onnx
from lezero.codegen.schedule import schedule
from lezero.ir.printer import print_module


class _Batches(CalibrationDataReader):
    def __init__(self, batches):
        self.batches = iter(batches)

    def get_next(self):
        return next(self.batches, None)


@pytest.fixture(scope="module")
def float_cnn(tmp_path_factory):
    """conv (padded) -> relu -> max pool -> conv (strided) -> relu -> flatten -> linear, as ONNX."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                                torch.nn.Conv2d(8, 16, 3, stride=2, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(16 * 2 * 2, 10)).eval()
    path = tmp_path_factory.mktemp("cnn") / "cnn.onnx"
    torch.onnx.export(model, (torch.randn(5, 1, 8, 8),), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    return path


@pytest.mark.parametrize("quant_format, lezero_ops", [
    (QuantFormat.QOperator, {"lz.conv_integer", "lz.matmul_integer"}),
    (QuantFormat.QDQ, {"lz.quantize", "lz.dequantize"}),
], ids=["qoperator", "qdq"])
def test_statically_quantized_cnn_matches_onnxruntime(float_cnn, quant_format, lezero_ops):
    rng = np.random.default_rng(0)
    calibration = [{"x": rng.standard_normal((5, 1, 8, 8)).astype(np.float32)} for _ in range(3)]
    quantized = float_cnn.with_name(f"cnn_{quant_format.name}.onnx")
    # 7-bit weights (reduce_range): ORT's U8S8 kernel on AVX2 without VNNI sums pairs of products in
    # saturating i16 (vpmaddubsw), so with 8-bit weights its results are not the exact integer ones there;
    # lezero's are exact on every CPU (tests/ir/test_dialect_quantization.py, full 8-bit ranges)
    quantize_static(str(float_cnn), str(quantized), _Batches(calibration), quant_format=quant_format,
                    per_channel=True, reduce_range=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    node_types = {n.op_type for n in onnx.load(quantized).graph.node}
    assert ({"QLinearConv", "QGemm"} if quant_format == QuantFormat.QOperator else {"QuantizeLinear", "Conv"}) \
        <= node_types, node_types
    module_text = print_module(lezero.onnx.import_model(str(quantized)))
    assert all(op in module_text for op in lezero_ops), lezero_ops
    x = rng.standard_normal((5, 1, 8, 8)).astype(np.float32)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    want = ort.InferenceSession(str(quantized), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    # both formats compute in integers: fold-qdq makes the QDQ form's convs and Gemm lz.conv_integer and
    # lz.matmul_integer; no float convolution or matmul is left to run
    kernels = schedule(lezero.onnx.import_model(str(quantized))).functions[0].walk()
    computed = {op.name for kernel in kernels if kernel.name == "lz.kernel" for op in kernel.regions[0].blocks[0].ops}
    assert "lz.matmul_integer" in computed and not computed & {"lz.conv2d", "lz.matmul"}, computed
    got = lezero.onnx.compile(str(quantized)).run({"x": x})["y"]
    step = (want.max() - want.min()) / 255
    assert np.abs(got - want).max() <= step, (np.abs(got - want).max(), step)


@pytest.mark.parametrize("x_shape, w_shape, attrs", [
    ((2, 4, 7, 6), (6, 2, 3, 3), {"group": 2, "strides": [2, 1], "pads": [1, 0, 1, 2]}),
    ((2, 3, 11), (5, 3, 3), {"dilations": [2], "pads": [2, 1]}),
], ids=["grouped-2d", "dilated-1d"])
def test_qlinear_conv_node_equals_onnxruntime(x_shape, w_shape, attrs):
    """One QLinearConv (uint8 input, int8 weights per output channel, int32 bias): lezero's integer
    convolution and float32 requantization give ONNX Runtime's bytes."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(len(x_shape))
    x = rng.integers(0, 256, x_shape).astype(np.uint8)
    w = rng.integers(-64, 64, w_shape).astype(np.int8)  # 7 bits: ORT's AVX2 U8S8 kernel saturates past them
    initializers = {"x_scale": np.float32(0.02), "x_zero": np.uint8(120), "w": w,
                    "w_scale": rng.uniform(0.001, 0.01, w_shape[0]).astype(np.float32),
                    "w_zero": np.zeros(w_shape[0], np.int8), "y_scale": np.float32(0.05), "y_zero": np.uint8(100),
                    "bias": rng.integers(-2000, 2000, w_shape[0]).astype(np.int32)}
    node = helper.make_node("QLinearConv", ["x", "x_scale", "x_zero", "w", "w_scale", "w_zero", "y_scale", "y_zero",
                                            "bias"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.UINT8, x_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, None)],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in initializers.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert "lz.conv_integer" in print_module(lezero.onnx.import_model(model))
    got = lezero.onnx.compile(model).run({"x": x})["y"]
    assert got.dtype == np.uint8 and 0 < want.std()
    np.testing.assert_array_equal(got, want)
