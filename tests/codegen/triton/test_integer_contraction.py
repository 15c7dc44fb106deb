"""The GPU's int8 contractions (``lezero/codegen/triton/contraction.py``: ``lz.matmul_integer`` and
``lz.conv_integer`` as int8 ``tl.dot``s summing in int32, zero points applied after the K loop) in
Triton's interpreter (``TRITON_INTERPRET=1``, conftest.py), equal to the exact integer reference:
M/N/K tails, batched and broadcast, per-column zero points, every pairing of i8 and ui8 with
values and zero points at the ends of their ranges, an operand read through a reshape; convs with
strides, pads, dilations and groups; the fused dequantize / requantize epilogues (ties, saturation
at both ends); a dynamically quantized seed MLP on "cuda" against the CPU; and the sm_90 PTX, whose
products are Hopper's integer ``wgmma`` (``.s32.s8.s8``), and gfx942's GCN, whose are MFMA's
``v_mfma_i32_*_i8``."""
from __future__ import annotations

import pathlib
import re
import sys

import numpy as np
import pytest
import triton  # noqa: F401  (a missing triton fails this module loudly)

import lezero as lz
import lezero.onnx
from lezero import quantization as Q
from lezero.codegen.schedule import schedule
from lezero.codegen.triton.backend import lower_module, unsupported_reason
from lezero.codegen.triton.jit import build_amdgcn, build_ptx
from lezero.ir import interpret, parse_module, print_module
from lezero.ir.types import ELEMENT_TYPES, F32, tensor

from codegen.triton.triton_testing import check_triton, run_triton
from support.ir_building import build

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "examples"))
import train_mlp  # noqa: E402  (the seed's SimpleMLP)

NP = {"i8": np.int8, "ui8": np.uint8}
PAIRS = [(a, b) for a in ("ui8", "i8") for b in ("i8", "ui8")]


def _extremes(rng, shape, dt):
    """Values of ``dt``, half of them at its two ends (the largest products)."""
    info = np.iinfo(NP[dt])
    v = rng.integers(info.min, info.max, shape, endpoint=True)
    return np.where(rng.random(shape) < 0.5, rng.choice([info.min, info.max], shape), v).astype(NP[dt])


def _gpu_kernels(module):
    return [op for op in schedule(module, target="cuda").functions[0].entry_block.ops
            if op.name == "lz.kernel" and op.attributes["device"].value == "cuda"]


# (a shape, b shape, per-column b zero point)
MATMUL_CASES = {
    "tails": ((5, 40), (40, 7), True),  # one partial tile each way, K one partial step
    "k-steps-tail": ((19, 77), (77, 20), False),  # two K steps, the second of 13
    "batched": ((2, 5, 33), (2, 33, 18), True),
    "broadcast-rhs": ((2, 3, 4, 9), (9, 17), True),
    "vector-lhs": ((40,), (40, 7), True),
    "k-one": ((33, 1), (1, 17), False),
    "vector-rhs": ((2, 5, 40), (40,), False),
    "dot": ((70,), (70,), False),
}


@pytest.mark.parametrize("a_dt, b_dt", PAIRS)
@pytest.mark.parametrize("case", MATMUL_CASES)
def test_matmul_integer_is_exact(case, a_dt, b_dt):
    a_shape, b_shape, per_column = MATMUL_CASES[case]
    rng = np.random.default_rng(sum(a_shape) + 3 * sum(b_shape))
    a, w = _extremes(rng, a_shape, a_dt), _extremes(rng, b_shape, b_dt)
    za = np.asarray(np.iinfo(NP[a_dt]).max, NP[a_dt])
    zb = _extremes(rng, (b_shape[-1],), b_dt) if per_column else np.asarray(np.iinfo(NP[b_dt]).min, NP[b_dt])
    module = build([tensor(a_shape, a_dt), tensor(b_shape, b_dt), tensor((), a_dt), tensor(zb.shape, b_dt)],
                   lambda b, *x: b.op("lz.matmul_integer", *x))
    want = np.matmul(a.astype(np.int64) - za, w.astype(np.int64) - zb.astype(np.int64))
    assert np.abs(want).max() < 2 ** 31
    kernels = []
    (got,) = run_triton(module, [a, w, za, zb], kernels=kernels)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)
    (kernel,) = kernels
    assert "tl.dot(a, b, acc, out_dtype=tl.int32)" in kernel.source


@pytest.mark.parametrize("a_dt, b_dt", PAIRS)
def test_saturated_operands_and_zero_points_are_exact(a_dt, b_dt):
    """Every operand at an end of its range, the zero points at the other ends: the largest centred
    products, (-128 - 127) x (255 - 0) and such, all of one sign along K."""
    lo_a, hi_a = np.iinfo(NP[a_dt]).min, np.iinfo(NP[a_dt]).max
    lo_b, hi_b = np.iinfo(NP[b_dt]).min, np.iinfo(NP[b_dt]).max
    a = np.full((17, 70), lo_a, NP[a_dt])
    a[::2] = hi_a
    w = np.full((70, 19), hi_b, NP[b_dt])
    w[:, ::3] = lo_b
    zb = np.where(np.arange(19) % 2, lo_b, hi_b).astype(NP[b_dt])
    module = build([tensor(a.shape, a_dt), tensor(w.shape, b_dt), tensor((), a_dt), tensor((19,), b_dt)],
                   lambda b, *x: b.op("lz.matmul_integer", *x))
    for za in (lo_a, hi_a):
        check_triton(module, [a, w, np.asarray(za, NP[a_dt]), zb])


# constant zero points (a u8 lhs's, a per-column rhs's of one value): (a zero, b zero, sums left out)
CONSTANT_ZERO_CASES = {"symmetric-weights": (200, 0, ["a_sums"]), "both-centred": (128, 0, ["a_sums", "b_sums"]),
                       "affine": (3, -7, [])}


@pytest.mark.parametrize("case", CONSTANT_ZERO_CASES)
def test_constant_zero_points_are_literals_and_zeros_drop_their_sums(case):
    """A model's constant zero point is a literal in the kernel; one that is 0 once the operand is signed
    (0 for i8, 128 for ui8) multiplies sums that are then not summed: a symmetric weight needs no row
    sums of the activations.  Still exact, with K and N tails."""
    za, zb, dropped = CONSTANT_ZERO_CASES[case]
    module = build([tensor((9, 70), "ui8"), tensor((70, 20), "i8")],
                   lambda b, x, w: b.op("lz.matmul_integer", x, w, b.constant(np.asarray(za, np.uint8)),
                                        b.constant(np.full(20, zb, np.int8))))
    rng = np.random.default_rng(za)
    (kernel,) = check_triton(module, [_extremes(rng, (9, 70), "ui8"), _extremes(rng, (70, 20), "i8")])
    assert "za = tl.load" not in kernel.source and "zb = tl.load" not in kernel.source
    for sums in ("a_sums", "b_sums"):
        assert (sums in kernel.source) == (sums not in dropped), sums


def test_matmul_integer_reads_a_reshaped_operand_in_place():
    """ONNX's Flatten before a quantized Gemm: the GEMM reads the 4-D tensor's bytes as its rows."""
    def body(b, x, w, zx, zw):
        return b.op("lz.matmul_integer", b.op("lz.reshape", x, shape=[3, 40]), w, zx, zw)
    module = build([tensor((3, 2, 4, 5), "ui8"), tensor((40, 10), "i8"), tensor((), "ui8"), tensor((10,), "i8")],
                   body)
    rng = np.random.default_rng(5)
    (kernel,) = check_triton(module, [_extremes(rng, (3, 2, 4, 5), "ui8"), _extremes(rng, (40, 10), "i8"),
                                      np.asarray(130, np.uint8), _extremes(rng, (10,), "i8")])
    assert kernel.kind == "matmul" and "lz.reshape" in kernel.source


def _requantize_module(m, k, n, a_dt, b_dt, out_dt, ties):
    """``matmul_integer`` then ``* scale`` (per column) ``+ bias``, ``quantize`` to ``out_dt`` and a
    relu'd float result: the chain fold-qdq and ``lz.quantization``'s Linear give.  ``ties``: scale
    0.5 and output scale 1 (every odd sum a tie); else a small output scale (both ends saturate)."""
    def body(b, a, w, za, zb, scale, bias):
        y = b.op("lz.add", b.op("lz.mul", b.op("lz.cast", b.op("lz.matmul_integer", a, w, za, zb), to=F32), scale),
                 bias)
        q = b.op("lz.quantize", y, b.constant(np.asarray(1.0 if ties else 0.01, np.float32), tensor((), "f32")),
                 b.constant(np.asarray(3 if out_dt == "ui8" else -5, NP[out_dt]), tensor((), out_dt)))
        return [q, b.op("lz.max", y, b.constant(np.asarray(0, np.float32), tensor((), "f32")))]
    return build([tensor((m, k), a_dt), tensor((k, n), b_dt), tensor((), a_dt), tensor((n,), b_dt),
                  tensor((n,), "f32"), tensor((n,), "f32")], body)


@pytest.mark.parametrize("a_dt, b_dt, out_dt, ties", [("ui8", "i8", "ui8", True), ("ui8", "i8", "i8", False),
                                                      ("i8", "ui8", "i8", True), ("i8", "ui8", "ui8", False)])
def test_fused_requantize_equals_the_unfused_chain(a_dt, b_dt, out_dt, ties):
    m, k, n = 13, 71 if ties else 150, 40
    module = _requantize_module(m, k, n, a_dt, b_dt, out_dt, ties)
    (kernel,) = _gpu_kernels(module)  # one kernel: the epilogue on the i32 tile, no i32 tensor stored
    assert kernel.attributes["kind"].value == "matmul"
    assert all(r.type.element_type.name != "i32" for r in kernel.results)
    rng = np.random.default_rng(m + k + n)
    a, w = _extremes(rng, (m, k), a_dt), _extremes(rng, (k, n), b_dt)
    za = np.asarray(7, NP[a_dt])
    zb = (rng.integers(-3, 4, n) + (128 if b_dt == "ui8" else 0)).astype(NP[b_dt])
    scale = np.full(n, 0.5, np.float32) if ties else (rng.random(n) * 1e-3).astype(np.float32)
    bias = np.zeros(n, np.float32) if ties else rng.standard_normal(n).astype(np.float32)
    arrays = [a, w, za, zb, scale, bias]
    check_triton(module, arrays, rtol=0, atol=0)  # the reference's f32 operations, in its order
    info = np.iinfo(NP[out_dt])
    q = interpret(module, "f", *arrays)[0]
    assert ties or {info.min, info.max} <= set(np.unique(q)), "the case saturates at both ends"


# (x shape, w shape, x type, w type, w zero per channel, window)
CONV_CASES = {
    "u8s8-pads": ((2, 5, 7, 6), (6, 5, 3, 3), "ui8", "i8", False, {"pads": [1, 1, 1, 1]}),
    "s8u8-stride2-per-channel": ((1, 3, 9, 10), (7, 3, 3, 2), "i8", "ui8", True,
                                 {"strides": [2, 2], "pads": [1, 0, 2, 1]}),
    "u8u8-groups-dilation-per-channel": ((2, 4, 8, 7), (6, 2, 2, 3), "ui8", "ui8", True,
                                         {"groups": 2, "dilations": [2, 1], "pads": [0, 1, 1, 0]}),
    "s8s8-pointwise": ((1, 40, 3, 5), (20, 40, 1, 1), "i8", "i8", False, {}),
}


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_integer_is_exact(case):
    x_shape, w_shape, x_dt, w_dt, per_channel, window = CONV_CASES[case]
    rng = np.random.default_rng(sum(x_shape) + 7 * sum(w_shape))
    zw = _extremes(rng, (w_shape[0],), w_dt) if per_channel else np.asarray(np.iinfo(NP[w_dt]).max, NP[w_dt])
    arrays = [_extremes(rng, x_shape, x_dt), _extremes(rng, w_shape, w_dt),
              np.asarray(np.iinfo(NP[x_dt]).min + 1, NP[x_dt]), zw]
    module = build([tensor(x_shape, x_dt), tensor(w_shape, w_dt), tensor((), x_dt), tensor(zw.shape, w_dt)],
                   lambda b, *v: b.op("lz.conv_integer", *v, **window))
    (kernel,) = check_triton(module, arrays)  # one conv kernel: no im2col gather, no i32 matmul
    assert kernel.kind == "conv" and "out_dtype=tl.int32" in kernel.source


def test_conv_integer_requantized_in_its_epilogue():
    """QLinearConv's chain (i32 bias, per-channel scale, round, zero point, clamp, cast) on the conv's
    i32 tile: one kernel, equal to the reference with saturation at both ends."""
    lo, hi = np.iinfo(np.uint8).min, np.iinfo(np.uint8).max

    def body(b, x, w, zx, zw, bias, scale):
        y = b.op("lz.mul", b.op("lz.cast", b.op("lz.add", b.op("lz.conv_integer", x, w, zx, zw, pads=[1, 1, 1, 1]),
                                                bias), to=F32), scale)
        q = b.op("lz.add", b.op("lz.round", y), b.constant(np.asarray(3, np.float32)))
        q = b.op("lz.min", b.op("lz.max", q, b.constant(np.asarray(lo, np.float32))),
                 b.constant(np.asarray(hi, np.float32)))
        return [b.op("lz.cast", q, to=ELEMENT_TYPES["ui8"])]
    module = build([tensor((2, 8, 6, 6), "ui8"), tensor((12, 8, 3, 3), "i8"), tensor((), "ui8"), tensor((), "i8"),
                    tensor((12, 1, 1), "i32"), tensor((12, 1, 1), "f32")], body)
    rng = np.random.default_rng(11)
    arrays = [_extremes(rng, (2, 8, 6, 6), "ui8"), _extremes(rng, (12, 8, 3, 3), "i8"), np.asarray(131, np.uint8),
              np.asarray(0, np.int8), rng.integers(-5000, 5000, (12, 1, 1)).astype(np.int32),
              (rng.random((12, 1, 1)) * 2e-2).astype(np.float32)]
    kernels = check_triton(module, arrays)
    assert [k.kind for k in kernels] == ["conv"]
    assert {lo, hi} <= set(np.unique(interpret(module, "f", *arrays))), "the case saturates at both ends"


def test_int8_contractions_run_on_the_gpu():
    """Placement keeps them on cuda (no CPU fallback, no transfer kernels)."""
    module = build([tensor((8, 64), "ui8"), tensor((64, 32), "i8"), tensor((), "ui8"), tensor((), "i8")],
                   lambda b, *x: b.op("lz.matmul_integer", *x))
    assert unsupported_reason(next(op for op in module.functions[0].entry_block.ops
                                   if op.name == "lz.matmul_integer")) is None
    kernels = [op for op in schedule(module, target="cuda").functions[0].entry_block.ops if op.name == "lz.kernel"]
    assert [(k.attributes["kind"].value, k.attributes["device"].value) for k in kernels] == [("matmul", "cuda")]


def test_dynamically_quantized_mlp_on_cuda_matches_the_cpu():
    """The seed MLP (784-256-10) quantized dynamically (``lz.quantization``): traced and run with
    target cuda, its two integer GEMMs are Triton kernels, and its outputs, traced and eager, equal the
    CPU's."""
    quantized = Q.quantize_dynamic(train_mlp.SimpleMLP(), dtype="int8")
    x = np.random.default_rng(0).random((4, 784), np.float32)
    traced = lz.jit.trace(quantized, example_inputs=lz.from_numpy(x), dynamic_batch=False)
    names = [k.name for k in lower_module(parse_module(print_module(traced.module)))]  # scheduling a copy
    assert sum("matmul_integer" in name for name in names) == 2, names
    with lz.no_grad():
        cpu = traced(lz.from_numpy(x)).numpy()
        quantized.to("cuda")
        cuda = traced(lz.from_numpy(x).to("cuda")).cpu().numpy()
        eager = quantized(lz.from_numpy(x).to("cuda")).cpu().numpy()  # one eager op per layer, on cuda
    np.testing.assert_array_equal(cuda, cpu)  # the same f32 operations around exact integer sums
    np.testing.assert_array_equal(eager, cpu)


# a transformer's projection (768 -> 192 at 64 tokens) and a conv, scheduled for cuda and built for sm_90
PTX_CASES = {
    "matmul": (lambda: build([tensor((64, 768), "ui8"), tensor((768, 192), "i8"), tensor((), "ui8"),
                              tensor((192,), "i8")], lambda b, *x: b.op("lz.matmul_integer", *x))),
    "conv": (lambda: build([tensor((2, 32, 14, 14), "i8"), tensor((64, 32, 3, 3), "ui8"), tensor((), "i8"),
                            tensor((), "ui8")], lambda b, *x: b.op("lz.conv_integer", *x, pads=[1, 1, 1, 1]))),
}


@pytest.mark.parametrize("case", PTX_CASES)
def test_int8_kernels_multiply_on_hopper_integer_tensor_cores(case):
    (kernel,) = lower_module(PTX_CASES[case]())
    ptx = build_ptx(kernel)
    assert re.search(r"^\.target sm_90a?\b", ptx, re.M)
    assert re.search(r"\bwgmma\.mma_async\.[\w.]*\.s32\.s8\.s8\b", ptx), f"{kernel.name}: no integer wgmma"
    assert "cp.async" in ptx, "the tiles' loads are not pipelined (built for the launch's 16-byte aligned buffers)"


def test_int8_gemm_multiplies_on_mi300_integer_matrix_cores():
    """The same kernel for AMD's gfx942 (no AMD GPU runs it here): MFMA's i8 -> i32 products."""
    (kernel,) = lower_module(PTX_CASES["matmul"]())
    assert re.search(r"\bv_mfma_i32_\w+_i8\b", build_amdgcn(kernel)), f"{kernel.name}: no integer MFMA"


def test_an_onnxruntime_quantized_qdq_cnn_on_cuda_matches_the_cpu(tmp_path):
    """A CNN quantized by ONNX Runtime's ``quantize_static`` (QDQ: float Conv/Gemm between
    QuantizeLinear/DequantizeLinear, per-channel int8 weights): fold-qdq makes its convs and Gemm
    ``lz.conv_integer`` / ``lz.matmul_integer`` for cuda as for the CPU, every one a Triton kernel
    (no float conv or matmul left), and the outputs equal the CPU's."""
    import torch
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Batches(CalibrationDataReader):
        def __init__(self, batches):
            self.batches = iter(batches)

        def get_next(self):
            return next(self.batches, None)

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(1, 8, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(8, 16, 3, stride=2, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(16 * 4 * 4, 10)).eval()
    path, quantized = tmp_path / "cnn.onnx", tmp_path / "cnn_qdq.onnx"
    torch.onnx.export(model, (torch.randn(2, 1, 8, 8),), str(path), dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"])
    rng = np.random.default_rng(0)
    quantize_static(str(path), str(quantized), Batches([{"x": rng.standard_normal((2, 1, 8, 8)).astype(np.float32)}]),
                    quant_format=QuantFormat.QDQ, per_channel=True, activation_type=QuantType.QUInt8,
                    weight_type=QuantType.QInt8)
    module = lezero.onnx.import_model(str(quantized))
    entry = module.functions[0].sym_name
    kernels = [op for op in schedule(parse_module(print_module(module)), target="cuda").functions[0].entry_block.ops
               if op.name == "lz.kernel"]  # scheduling a copy
    assert {k.attributes["device"].value for k in kernels} == {"cuda"}  # no CPU fallback, no transfer
    computed = [op.name for k in kernels for op in k.regions[0].blocks[0].ops]
    assert computed.count("lz.conv_integer") == 2 and computed.count("lz.matmul_integer") == 1, computed
    assert not {"lz.conv2d", "lz.matmul"} & set(computed), computed
    x = rng.standard_normal((2, 1, 8, 8)).astype(np.float32)
    cuda = lz.compile(module, entry, target="cuda")(x)
    cpu = lz.compile(module, entry, target="cpu")(x)
    np.testing.assert_array_equal(cuda, cpu)


@pytest.mark.slow  # ~3 s: the export, ORT's quantizer and 30 interpreted kernels
def test_an_onnxruntime_dynamically_quantized_encoder_runs_on_cuda(tmp_path):
    """A transformer encoder layer quantized by ORT's ``quantize_dynamic`` (DynamicQuantizeLinear +
    MatMulInteger): every kernel on cuda, its 4 MatMulIntegers Triton int8 GEMMs; outputs as the CPU's
    (exact integer sums; softmax and layer norm sum floats in another order)."""
    import torch
    from onnxruntime.quantization import QuantType, quantize_dynamic

    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False).eval()
    x = torch.randn(2, 12, 64)
    path, quantized = tmp_path / "encoder.onnx", tmp_path / "encoder_q.onnx"
    torch.onnx.export(model, (x,), str(path), dynamo=False, opset_version=17, input_names=["x"], output_names=["y"])
    quantize_dynamic(str(path), str(quantized), weight_type=QuantType.QInt8)
    module = lezero.onnx.import_model(str(quantized))
    kernels = [op for op in schedule(parse_module(print_module(module)), target="cuda").functions[0].entry_block.ops
               if op.name == "lz.kernel"]
    assert {k.attributes["device"].value for k in kernels} == {"cuda"}
    assert sum(op.name == "lz.matmul_integer" for k in kernels for op in k.regions[0].blocks[0].ops) == 4
    entry = module.functions[0].sym_name
    cuda = lz.compile(module, entry, target="cuda")(x.numpy())
    np.testing.assert_allclose(cuda, lz.compile(module, entry, target="cpu")(x.numpy()), rtol=1e-5, atol=1e-5)
