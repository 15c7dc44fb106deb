"""int8 against float32: lezero's int8 GEMM (``lz.matmul_integer``, VNNI where the CPU has it)
against its float32 GEMM at transformer shapes; a dynamically quantized Linear against PyTorch's
(``torch.ao.quantization.quantize_dynamic``: fbgemm / onednn); and a transformer encoder exported
from PyTorch, quantized with ONNX Runtime's ``quantize_dynamic``, run by lezero and by ONNX Runtime,
int8 and float32; a CNN quantized with ONNX Runtime's ``quantize_static`` the same way.

    LEZERO_NUM_THREADS=2 .venv/bin/python benchmarks/quantization.py [--budget 3] [--d-model 768]

Every group is timed alternating in one process (``timing.alternating_medians``, medians; torch
with 2 threads, ONNX Runtime with 2 intra-op threads and spinning off); ratios say how many times
faster the first-named is.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np
import onnxruntime as ort
import torch
from onnxruntime.quantization import (
    CalibrationDataReader,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from onnx_models import cpu_model
from timing import alternating_medians

import lezero
import lezero as lz
import lezero.onnx
from lezero.ir import Builder, FuncOp, FunctionType, ModuleOp
from lezero.ir.types import tensor

GEMM_SHAPES = [(128, 768, 768), (128, 768, 3072), (128, 3072, 768), (512, 1024, 1024)]


def _function(types, body) -> ModuleOp:
    func = FuncOp("f", FunctionType(types, []))
    b = Builder.at_end(func.entry_block)
    b.create("func.return", [body(b, *func.arguments)], result_types=[])
    func.update_function_type()
    return ModuleOp([func])


def _int8_gemm(rng, m: int, k: int, n: int):
    """A compiled ``lz.matmul_integer`` (u8 x s8, zero points 128 and 0) of an argument and a
    constant (a model's weights, as ORT's initializer: each may pack it once), its arguments and
    the weights."""
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    def body(b, x, za, zb):
        return b.op("lz.matmul_integer", x, b.constant(w, tensor((k, n), "i8")), za, zb)
    int8 = lezero.compile(_function([tensor((m, k), "ui8"), tensor((), "ui8"), tensor((), "i8")], body), "f")
    return int8, (a, np.asarray(128, np.uint8), np.asarray(0, np.int8)), w


def gemm(budget: float) -> None:
    print("GEMM (M x K x N, B a constant): lezero int8 (u8 x s8 -> i32) against lezero float32, GOP/s")
    rng = np.random.default_rng(0)
    for m, k, n in GEMM_SHAPES:
        int8, args, w = _int8_gemm(rng, m, k, n)
        wf = w.astype(np.float32)
        fp32 = lezero.compile(_function([tensor((m, k), "f32")],
                                        lambda b, x: b.op("lz.matmul", x, b.constant(wf, tensor((k, n), "f32")))), "f")
        af = args[0].astype(np.float32)
        t = alternating_medians({"int8": lambda f=int8, x=args: f(*x), "fp32": lambda f=fp32, x=af: f(x)}, budget)
        ops = 2 * m * k * n / 1e9
        print(f"  {m}x{k}x{n}: int8 {ops / t['int8']:7.1f}  fp32 {ops / t['fp32']:7.1f}  "
              f"int8 / fp32 {t['fp32'] / t['int8']:5.2f}x")


def gemm_peers(budget: float) -> None:
    """The int8 GEMM against ONNX Runtime's MatMulInteger (u8 x s8 -> i32, B an initializer: packed
    once at session start) and PyTorch's static quantized Linear (fbgemm/onednn u8 x s8, requantized
    to u8), at the GEMM shapes, alternating."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    print(f"int8 GEMM peers (M x K x N): lezero lz.matmul_integer, ORT MatMulInteger, torch quantized.linear "
          f"(engine {torch.backends.quantized.engine}), GOP/s")
    rng = np.random.default_rng(2)
    for m, k, n in GEMM_SHAPES:
        int8, args, w = _int8_gemm(rng, m, k, n)
        a, za, zb = args
        graph = helper.make_graph(
            [helper.make_node("MatMulInteger", ["a", "w", "za", "zb"], ["y"])], "mmi",
            [helper.make_tensor_value_info("a", TensorProto.UINT8, [m, k])],
            [helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])],
            [numpy_helper.from_array(w, "w"), numpy_helper.from_array(za, "za"), numpy_helper.from_array(zb, "zb")])
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "mmi.onnx")
            onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
            session = _session(path)
        qa = torch.quantize_per_tensor(torch.from_numpy(a.astype(np.float32) - 128), 1.0, 128, torch.quint8)
        qw = torch.quantize_per_tensor(torch.from_numpy(w.astype(np.float32).T.copy()), 1.0, 0, torch.qint8)
        packed = torch.ops.quantized.linear_prepack(qw, None)
        t = alternating_medians({"lezero": lambda f=int8, x=args: f(*x),
                                 "ort": lambda run=session.run, feeds={"a": a}: run(None, feeds),
                                 "torch": lambda x=qa, p=packed: torch.ops.quantized.linear(x, p, 64.0, 0)}, budget)
        ops = 2 * m * k * n / 1e9
        print(f"  {m}x{k}x{n}: lezero {ops / t['lezero']:7.1f}  ORT {ops / t['ort']:7.1f}  torch {ops / t['torch']:7.1f}"
              f"   lezero / ORT {t['ort'] / t['lezero']:5.2f}x  lezero / torch {t['torch'] / t['lezero']:5.2f}x")


def linear(budget: float) -> None:
    print("Dynamically quantized Linear (tokens x in -> out): lezero int8 against PyTorch's int8 "
          f"(engine {torch.backends.quantized.engine}) and lezero float32, ms")
    rng = np.random.default_rng(1)
    for tokens, d_in, d_out in [(128, 768, 768), (128, 768, 3072), (128, 3072, 768)]:
        lz.manual_seed(0)
        float_layer = lz.nn.Linear(d_in, d_out)
        layer = lz.quantization.quantize_dynamic(lz.nn.Sequential(float_layer), dtype="int8")
        torch_layer = torch.nn.Linear(d_in, d_out)
        with torch.no_grad():
            torch_layer.weight.copy_(torch.from_numpy(float_layer.weight.detach().numpy()))
            torch_layer.bias.copy_(torch.from_numpy(float_layer.bias.detach().numpy()))
        torch_int8 = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(torch_layer), {torch.nn.Linear},
                                                            dtype=torch.qint8)
        x = rng.standard_normal((tokens, d_in)).astype(np.float32)
        xl, xt = lz.from_numpy(x), torch.from_numpy(x)

        def run_lezero(module):
            with lz.no_grad():
                module(xl)

        def run_torch():
            with torch.no_grad():
                torch_int8(xt)
        t = alternating_medians({"lz": lambda: run_lezero(layer), "torch": run_torch,
                                 "lz_fp32": lambda: run_lezero(float_layer)}, budget, warm_each=True)
        print(f"  {tokens}x{d_in}->{d_out}: lezero int8 {t['lz'] * 1e3:6.2f}  torch int8 {t['torch'] * 1e3:6.2f}  "
              f"lezero fp32 {t['lz_fp32'] * 1e3:6.2f}   torch / lezero {t['torch'] / t['lz']:5.2f}x  "
              f"fp32 / int8 {t['lz_fp32'] / t['lz']:5.2f}x")


def _session(path):
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def encoder(budget: float, d_model: int, layers: int, tokens: int) -> None:
    print(f"Transformer encoder ({layers} layers, d_model {d_model}, {tokens} tokens) exported from PyTorch, "
          "quantized by ONNX Runtime's quantize_dynamic, ms")
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model, d_model // 64, 4 * d_model, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).eval()
    with torch.no_grad():  # the layers are copies of one: made distinct, else the export shares their
        for p in model.parameters():  # weights (Identity nodes) and quantize_dynamic leaves all but the
            p.add_(torch.randn_like(p) * 0.01)  # first layer's MatMuls in float
    x = torch.randn(1, tokens, d_model)
    with tempfile.TemporaryDirectory() as folder:
        float_path, int8_path = os.path.join(folder, "encoder.onnx"), os.path.join(folder, "encoder_int8.onnx")
        torch.onnx.export(model, (x,), float_path, dynamo=False, opset_version=17, input_names=["x"],
                          output_names=["y"])
        quantize_dynamic(float_path, int8_path, weight_type=QuantType.QInt8)
        feeds = {"x": x.numpy()}
        lz_int8, lz_fp32 = lezero.onnx.compile(int8_path), lezero.onnx.compile(float_path)
        ort_int8, ort_fp32 = _session(int8_path), _session(float_path)
        torch_int8 = torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)
        want = ort_int8.run(None, feeds)[0]
        error = np.abs(lz_int8.run(feeds)["y"] - want).max()

        def run_torch():
            with torch.no_grad():
                torch_int8(x)
        t = alternating_medians({"lz_int8": lambda: lz_int8.run(feeds), "ort_int8": lambda: ort_int8.run(None, feeds),
                                 "lz_fp32": lambda: lz_fp32.run(feeds), "ort_fp32": lambda: ort_fp32.run(None, feeds),
                                 "torch_int8": run_torch}, budget, warm_each=True)
    print("  " + "  ".join(f"{name} {seconds * 1e3:7.2f}" for name, seconds in t.items()))
    print(f"  lezero int8 vs ORT int8: {t['ort_int8'] / t['lz_int8']:5.2f}x   vs lezero fp32: "
          f"{t['lz_fp32'] / t['lz_int8']:5.2f}x   vs torch int8 (all Linears): {t['torch_int8'] / t['lz_int8']:5.2f}x"
          f"   max |lezero - ORT| (int8) {error:.2e}, output step {(want.max() - want.min()) / 255:.2e}")


# --- issue 12, qconv: a statically quantized CNN ---------------------------------------------------
class _Calibration(CalibrationDataReader):
    def __init__(self, batches):
        self.batches = iter(batches)

    def get_next(self):
        return next(self.batches, None)


def cnn(budget: float, batch: int, size: int) -> None:
    """A CNN exported from PyTorch, quantized by ORT's ``quantize_static`` (QOperator: QLinearConv,
    QGemm; per-channel int8 weights, uint8 activations), run by lezero (``lz.conv_integer``: 8-bit
    im2col and the int8 GEMM) and by ORT, int8 and float32."""
    print(f"CNN (3 convs 32-64-64 channels, {batch} x 3 x {size} x {size}) exported from PyTorch, quantized by "
          "ONNX Runtime's quantize_static (QOperator, per channel), ms")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(32, 64, 3, stride=2, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(64, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(64 * (size // 2) ** 2, 10)).eval()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 3, size, size)).astype(np.float32)
    with tempfile.TemporaryDirectory() as folder:
        float_path, int8_path = os.path.join(folder, "cnn.onnx"), os.path.join(folder, "cnn_int8.onnx")
        torch.onnx.export(model, (torch.from_numpy(x),), float_path, dynamo=False, opset_version=17,
                          input_names=["x"], output_names=["y"])
        calibration = [{"x": rng.standard_normal(x.shape).astype(np.float32)} for _ in range(4)]
        quantize_static(float_path, int8_path, _Calibration(calibration), quant_format=QuantFormat.QOperator,
                        per_channel=True, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        feeds = {"x": x}
        lz_int8, lz_fp32 = lezero.onnx.compile(int8_path), lezero.onnx.compile(float_path)
        ort_int8, ort_fp32 = _session(int8_path), _session(float_path)
        want = ort_int8.run(None, feeds)[0]
        error = np.abs(lz_int8.run(feeds)["y"] - want).max()
        t = alternating_medians({"lz_int8": lambda: lz_int8.run(feeds), "ort_int8": lambda: ort_int8.run(None, feeds),
                                 "lz_fp32": lambda: lz_fp32.run(feeds), "ort_fp32": lambda: ort_fp32.run(None, feeds)},
                                budget, warm_each=True)
    print("  " + "  ".join(f"{name} {seconds * 1e3:7.2f}" for name, seconds in t.items()))
    print(f"  lezero int8 vs ORT int8: {t['ort_int8'] / t['lz_int8']:5.2f}x   vs lezero fp32: "
          f"{t['lz_fp32'] / t['lz_int8']:5.2f}x   ORT int8 vs ORT fp32: {t['ort_fp32'] / t['ort_int8']:5.2f}x"
          f"   max |lezero - ORT| (int8) {error:.2e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=3.0, help="seconds per group of alternating runs")
    parser.add_argument("--d-model", type=int, default=768)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--only", choices=["gemm", "gemm-peers", "linear", "encoder", "cnn"])
    parser.add_argument("--cnn-batch", type=int, default=16)  # issue 12, qconv: the CNN row
    parser.add_argument("--cnn-size", type=int, default=32)
    args = parser.parse_args()
    torch.set_num_threads(2)
    torch.backends.mha.set_fastpath_enabled(False)  # its checks read .weight, a method of quantized Linears
    print(f"CPU: {cpu_model()}; LEZERO_NUM_THREADS={os.environ.get('LEZERO_NUM_THREADS', 'unset')}")
    if args.only in (None, "gemm"):
        gemm(args.budget)
    if args.only in (None, "gemm-peers"):
        gemm_peers(args.budget)
    if args.only in (None, "linear"):
        linear(args.budget)
    if args.only in (None, "encoder"):
        encoder(args.budget, args.d_model, args.layers, args.tokens)
    if args.only in (None, "cnn"):
        cnn(args.budget, args.cnn_batch, args.cnn_size)


if __name__ == "__main__":
    main()
