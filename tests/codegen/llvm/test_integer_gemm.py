"""The CPU's ``lz.matmul_integer`` kernel (lezero/codegen/llvm/integer_gemm.py) against an exact
integer reference on every CPU of the cross-target matrix: K not a multiple of 4, a last panel of
fewer than 64 columns, row blocks with a tail, batched and broadcast rhs, every pairing of i8 and ui8
with zero points at the ends of their ranges (the largest products), per-column rhs zero points;
and the instruction it is built on where the CPU has it (``vpdpbusd``)."""
from __future__ import annotations

import numpy as np
import pytest
from support.ir_building import build

import lezero
from lezero.codegen.llvm.backend import lower_kernel
from lezero.codegen.llvm.jit import emit_assembly
from lezero.codegen.schedule import schedule
from lezero.ir.types import tensor

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
                                               ("rows-of-3d-lhs", ((2, 7, 64), (64, 64)), False))})


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


def test_vnni_cpus_use_vpdpbusd_and_others_do_not():
    kernel = next(op for op in schedule(_module((8, 64), (64, 64), "ui8", "i8", False)).functions[0].entry_block.ops
                  if op.name == "lz.kernel")
    assert "vpdpbusd" in emit_assembly(lower_kernel(kernel, cpu="znver4").llvm_ir, "znver4")
    assert "vpdpbusd" not in emit_assembly(lower_kernel(kernel, cpu="skylake-avx512").llvm_ir, "skylake-avx512")
