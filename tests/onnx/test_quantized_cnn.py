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
    quantize_static(str(float_cnn), str(quantized), _Batches(calibration), quant_format=quant_format,
                    per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
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
