"""The CPU's ``lz.matmul_integer`` kernel (lezero/codegen/llvm/integer_gemm.py) against an exact
integer reference on every CPU of the cross-target matrix: K not a multiple of 4 (in one K block
and across several), a last panel of
fewer than 64 columns, row blocks with a tail, batched and broadcast rhs, every pairing of i8 and ui8
with zero points at the ends of their ranges (the largest products), per-column rhs zero points;
and the instruction each x86 CPU gets (AMX tile dots with amx-int8, ``vpdpbusd`` with VNNI, else
``vpmaddwd`` on i16: exact, where ``vpmaddubsw`` would saturate); the AMX kernel's row, column and K
tails and its K blocks.  Its fused epilogue: the
i32 tile dequantized (per-column scale, bias, relu) or requantized to ui8/i8 (ties to even,
saturation at both ends) before it is stored, equal to the reference interpreter's unfused chain
on every CPU, in one kernel that stores no i32 tensor."""
from __future__ import annotations

import numpy as np
import pytest
from support.ir_building import build
from support.quantization_testing import assert_requantized_exactly

import lezero
from lezero.codegen.llvm.backend import lower_kernel
from lezero.codegen.llvm.jit import emit_assembly
from lezero.codegen.schedule import schedule
from lezero.ir.types import F32, tensor

NP = {"i8": np.int8, "ui8": np.uint8}


def _module(a_shape, b_shape, a_dt, b_dt, per_column):
    zb = tensor((b_shape[-1],) if per_column else (), b_dt)
    return build([tensor(a_shape, a_dt), tensor(b_shape, b_dt), tensor((), a_dt), zb],
                 lambda b, *x: b.op("lz.matmul_integer", *x))


def _extremes(rng, shape, dt):
    info = np.iinfo(NP[dt])
    v = rng.integers(info.min, info.max, shape, endpoint=True)
    return np.where(rng.random(shape) < 0.5, rng.choice([info.min, info.max], shape), v).astype(NP[dt])


# every pairing of i8 and ui8 on the edges; the common u8 x s8 also on a transformer's shape
CASES = {f"{a}x{b}-{name}": (shapes, a, b, per_column)
         for a in ("ui8", "i8") for b in ("i8", "ui8")
         for name, shapes, per_column in (("k-tail-partial-panel", ((13, 71), (71, 150)), True),
                                          ("batched-rhs", ((3, 1, 5, 9), (2, 9, 70)), True))}
CASES.update({f"ui8xi8-{name}": (shapes, "ui8", "i8", per_column)
              for name, shapes, per_column in (("transformer", ((32, 768), (768, 192)), False),
                                               ("rows-of-3d-lhs", ((2, 7, 64), (64, 64)), False),
                                               ("k-blocks-tail-partial-panel", ((9, 263), (263, 70)), True))})
# the AMX kernel's edges (and the vector kernels' on other CPUs): row blocks of 32 with a tail of 15 and
# K of whole tile steps; two AMX K blocks (K > 4096: partial sums in memory) whose last has one tile
# step and 3 bytes, 17 rows (a tile of 16 and one of 1), a second column pair of one tile; K = 1
CASES.update({
    "ui8xi8-row-tail-whole-k-steps": (((47, 128), (128, 96)), "ui8", "i8", True),
    "i8xui8-amx-k-blocks-tails": (((17, 4163), (4163, 40)), "i8", "ui8", True),
    "i8xi8-k-one": (((33, 1), (1, 17)), "i8", "i8", False),
    "ui8xui8-batched-row-tails": (((2, 3, 19, 70), (2, 3, 70, 33)), "ui8", "ui8", True),
})


@pytest.mark.cross_target(cases=CASES, group=lambda case: "integer-gemm")
def test_integer_gemm_is_exact_on_every_cpu(cpu, case):
    (a_shape, b_shape), a_dt, b_dt, per_column = case
    rng = np.random.default_rng(sum(a_shape) * 7 + sum(b_shape))
    a, w = _extremes(rng, a_shape, a_dt), _extremes(rng, b_shape, b_dt)
    za = np.asarray(np.iinfo(NP[a_dt]).max, NP[a_dt])
    zb = _extremes(rng, (b_shape[-1],), b_dt) if per_column else np.asarray(np.iinfo(NP[b_dt]).min, NP[b_dt])
    want = np.matmul(a.astype(np.int64) - za, w.astype(np.int64) - zb.astype(np.int64))
    assert np.abs(want).max() < 2 ** 31
    got = lezero.compile(_module(a_shape, b_shape, a_dt, b_dt, per_column), "f", cpu=cpu)(a, w, za, zb)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want, err_msg=f"{case} compiled for {cpu}")


@pytest.mark.parametrize("cpu, instruction", [("znver4", "vpdpbusd"), ("alderlake", "{vex}\tvpdpbusd"),
                                              ("skylake-avx512", "vpmaddwd\t%zmm"), ("znver3", "vpmaddwd\t%ymm"),
                                              ("x86-64", "pmaddwd\t%xmm")])
def test_each_x86_cpu_gets_its_exact_dot_product_instruction(cpu, instruction):
    """VNNI's vpdpbusd (AVX-512 or AVX-VNNI), else vpmaddwd on bytes widened to i16 (exact); never
    vpmaddubsw, whose i16 pair sums saturate."""
    kernel = next(op for op in schedule(_module((8, 64), (64, 64), "ui8", "i8", False)).functions[0].entry_block.ops
                  if op.name == "lz.kernel")
    assembly = emit_assembly(lower_kernel(kernel, cpu=cpu).llvm_ir, cpu)
    assert instruction in assembly
    assert "pmaddubsw" not in assembly
    assert ("vpdpbusd" in assembly) == ("vpdpbusd" in instruction)


# a constant B (a model's weights), which the AMX kernel reads packed by the plan (PackedIntegerGemmB)
CONSTANT_B_CASES = {"ui8xi8-tails": ((37, 71), (71, 150), "ui8", "i8"),
                    "i8xui8-k-blocks": ((5, 4163), (4163, 20), "i8", "ui8"),
                    "ui8xui8-broadcast-rhs": ((2, 3, 33, 64), (64, 64), "ui8", "ui8")}


@pytest.mark.cross_target(cases=CONSTANT_B_CASES, group=lambda case: "integer-gemm-constant-b")
def test_integer_gemm_with_a_constant_rhs_is_exact_on_every_cpu(cpu, case):
    a_shape, b_shape, a_dt, b_dt = case
    rng = np.random.default_rng(sum(a_shape) + 5 * sum(b_shape))
    a, w = _extremes(rng, a_shape, a_dt), _extremes(rng, b_shape, b_dt)
    za, zb = np.asarray(np.iinfo(NP[a_dt]).max, NP[a_dt]), _extremes(rng, (b_shape[-1],), b_dt)
    module = build([tensor(a_shape, a_dt), tensor((), a_dt), tensor(zb.shape, b_dt)],
                   lambda b, x, zx, zw: b.op("lz.matmul_integer", x, b.constant(w, tensor(b_shape, b_dt)), zx, zw))
    want = np.matmul(a.astype(np.int64) - za, w.astype(np.int64) - zb.astype(np.int64))
    got = lezero.compile(module, "f", cpu=cpu)(a, za, zb)
    np.testing.assert_array_equal(got, want, err_msg=f"{case} compiled for {cpu}")


# one rhs zero point of 0 (128 for ui8: 0 once the rhs is made signed): the AMX kernel's sums start
# from the corrections (one K block); a bare product's whole column tiles go straight to the result,
# partial ones (N = 150: 22 columns) through a tile; the fused epilogue reads them as they are
ZERO_RHS_POINT_CASES = {f"{a}x{b}-{name}": (shapes, a, b, epilogue) for a in ("ui8", "i8") for b in ("i8", "ui8")
                        for name, shapes, epilogue in (("row-tail-whole-tiles", ((47, 128), (128, 96)), False),
                                                       ("k-tail-partial-tiles", ((13, 71), (71, 150)), False),
                                                       ("batched", ((2, 3, 19, 70), (2, 3, 70, 48)), False),
                                                       ("requantized", ((37, 100), (100, 70)), True))}


@pytest.mark.cross_target(cases=ZERO_RHS_POINT_CASES, group=lambda case: "integer-gemm-zero-rhs-point")
def test_a_zero_rhs_zero_point_is_exact_on_every_cpu(cpu, case):
    (a_shape, b_shape), a_dt, b_dt, epilogue = case
    rng = np.random.default_rng(sum(a_shape) + 3 * sum(b_shape))
    a, w = _extremes(rng, a_shape, a_dt), _extremes(rng, b_shape, b_dt)
    za, zb = np.asarray(np.iinfo(NP[a_dt]).min + 3, NP[a_dt]), np.asarray(128 if b_dt == "ui8" else 0, NP[b_dt])
    if not epilogue:
        want = np.matmul(a.astype(np.int64) - za, w.astype(np.int64) - zb.astype(np.int64))
        got = lezero.compile(_module(a_shape, b_shape, a_dt, b_dt, False), "f", cpu=cpu)(a, w, za, zb)
        np.testing.assert_array_equal(got, want, err_msg=f"{case} compiled for {cpu}")
        return

    def body(b, x, y, zx, zy, scale):
        product = b.op("lz.mul", b.op("lz.cast", b.op("lz.matmul_integer", x, y, zx, zy), to=F32), scale)
        return [b.op("lz.quantize", product, b.constant(np.asarray(0.01, np.float32), tensor((), "f32")),
                     b.constant(np.asarray(3, np.uint8), tensor((), "ui8")))]
    module = build([tensor(a_shape, a_dt), tensor(b_shape, b_dt), tensor((), a_dt), tensor((), b_dt),
                    tensor((b_shape[-1],), "f32")], body)
    scale = (rng.random(b_shape[-1]) * 1e-3).astype(np.float32)
    assert_requantized_exactly(module, (a, w, za, zb, scale), cpu, np.uint8, saturates=True, what=str(case))


def test_amx_reads_a_constant_rhs_packed_by_the_plan():
    """sapphirerapids: a constant B is packed once (the kernel asks for PackedIntegerGemmB), so the
    kernel has no packing shuffles; icelake-server packs per call as before."""
    w = np.ones((100, 80), np.int8)
    module = build([tensor((40, 100), "ui8"), tensor((), "ui8"), tensor((), "i8")],
                   lambda b, x, zx, zw: b.op("lz.matmul_integer", x, b.constant(w, tensor((100, 80), "i8")), zx, zw))
    kernel = next(op for op in schedule(module).functions[0].entry_block.ops if op.name == "lz.kernel")
    amx_kernel = lower_kernel(kernel, cpu="sapphirerapids")
    assert [type(p).__name__ for p in amx_kernel.packed_operands] == ["PackedIntegerGemmB"]
    assert "vpermt2b" not in emit_assembly(amx_kernel.llvm_ir, "sapphirerapids")
    assert lower_kernel(kernel, cpu="icelake-server").packed_operands == ()


@pytest.mark.parametrize("a_dt, instruction", [("ui8", "tdpbusd"), ("i8", "tdpbssd")])
def test_amx_cpus_multiply_in_tiles(a_dt, instruction):
    """sapphirerapids (amx-int8): the products are tile dots (the signed lhs read as it is), the tiles
    configured and released; not on icelake-server (VNNI, no AMX).  A silent fallback to vpdpbusd fails."""
    kernel = next(op for op in schedule(_module((40, 100), (100, 80), a_dt, "i8", True)).functions[0].entry_block.ops
                  if op.name == "lz.kernel")
    assembly = emit_assembly(lower_kernel(kernel, cpu="sapphirerapids").llvm_ir, "sapphirerapids")
    for expected in (instruction, "tileloadd", "ldtilecfg", "tilerelease"):
        assert expected in assembly, expected
    assert "tdpb" not in emit_assembly(lower_kernel(kernel, cpu="icelake-server").llvm_ir, "icelake-server")


def _epilogue_module(m, k, n, out_dt, a_dt, b_dt, ties):
    """``matmul_integer`` then ``* scale`` (per column) ``+ bias``, relu and ``quantize`` to ``out_dt``:
    the chain the QDQ fold and ``lz.quantization``'s Linear give.  ``ties``: scale 0.5 and an output
    scale 1 (every odd sum a tie); else a small output scale (both ends saturate)."""
    def body(b, a, w, za, zb, scale, bias):
        y = b.op("lz.mul", b.op("lz.cast", b.op("lz.matmul_integer", a, w, za, zb), to=F32), scale)
        y = b.op("lz.add", y, bias)
        out_scale = np.asarray(1.0 if ties else 0.01, np.float32)
        q = b.op("lz.quantize", y, b.constant(out_scale, tensor((), "f32")),
                 b.constant(np.asarray(3 if out_dt == "ui8" else -5, NP[out_dt]), tensor((), out_dt)))
        relu = b.op("lz.max", y, b.constant(np.asarray(0, np.float32), tensor((), "f32")))
        return [q, relu]
    return build([tensor((m, k), a_dt), tensor((k, n), b_dt), tensor((), a_dt), tensor((n,), b_dt),
                  tensor((n,), "f32"), tensor((n,), "f32")], body)


EPILOGUE_CASES = {f"{a}x{b}-to-{out}-{'ties' if ties else 'saturating'}": ((13, 71 if ties else 263, 80), a, b, out,
                                                                         ties)
                  for a, b, out, ties in (("ui8", "i8", "ui8", True), ("ui8", "i8", "i8", False),
                                          ("i8", "ui8", "i8", True), ("i8", "ui8", "ui8", False))}


@pytest.mark.cross_target(cases=EPILOGUE_CASES, group=lambda case: "integer-gemm-epilogue")
def test_fused_dequantize_and_requantize_equal_the_unfused_chain_on_every_cpu(cpu, case):
    (m, k, n), a_dt, b_dt, out_dt, ties = case
    module = _epilogue_module(m, k, n, out_dt, a_dt, b_dt, ties)
    rng = np.random.default_rng(m + k + n)
    a, w = _extremes(rng, (m, k), a_dt), _extremes(rng, (k, n), b_dt)
    za, zb = np.asarray(7, NP[a_dt]), rng.integers(-3, 4, n).astype(np.int64)
    zb = (zb + (128 if b_dt == "ui8" else 0)).astype(NP[b_dt])
    scale = np.full(n, 0.5, np.float32) if ties else (rng.random(n) * 1e-3).astype(np.float32)
    bias = np.zeros(n, np.float32) if ties else rng.standard_normal(n).astype(np.float32)
    arrays = (a, w, za, zb, scale, bias)
    assert_requantized_exactly(module, arrays, cpu, NP[out_dt], saturates=not ties, what=str(case))


def test_the_epilogue_joins_the_integer_gemm_kernel():
    kernels = [op for op in schedule(_epilogue_module(8, 64, 64, "ui8", "ui8", "i8", False)).functions[0]
               .entry_block.ops if op.name == "lz.kernel"]
    assert len(kernels) == 1 and kernels[0].attributes["kind"].value == "matmul"
    assert all(r.type.element_type.name != "i32" for r in kernels[0].results)
