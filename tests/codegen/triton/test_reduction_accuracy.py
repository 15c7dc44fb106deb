"""The Triton reductions' blocked accumulation, under ``TRITON_INTERPRET=1``: float32 sums and
means of same-sign values against the same function over float64 (the reference interpreter's),
row, column, multi-axis and BatchNorm-shaped; the blocked chunk loops build to PTX for sm_90.

The lanes of a program's accumulator combine as a tree (``tl.reduce`` on the GPU; the interpreter
runs the same tree, ``jit._tree_reductions``); more than ``FANOUT`` chunks of ``RBLOCK`` columns
are walked blocked.  Extents past ``FANOUT * RBLOCK`` (16384) exercise the blocking; the
interpreter is slow, so only the row case has the full million values.
"""
from __future__ import annotations

import numpy as np
import pytest

from lezero.codegen.triton.jit import build_ptx
from lezero.codegen.triton.backend import lower_module
from lezero.ir import interpret
from lezero.ir.types import tensor

from support.ir_building import build
from codegen.triton.triton_testing import run_triton

SAME_SIGN = {"uniform": lambda rng, shape: rng.uniform(0, 1, shape), "constant": lambda rng, shape: np.full(shape, 0.1)}


def statistics(axes):
    def body(b, x):
        return [b.op("lz.reduce_sum", x, axes=axes), b.op("lz.reduce_mean", x, axes=axes)]
    return body


@pytest.mark.parametrize("data", SAME_SIGN)
@pytest.mark.parametrize("shape,axes", [
    ((1_000_000,), [0]),  # 977 chunks of 1024 lanes: blocked 4 x 16 x 16
    ((20_000, 6), [0]),  # columns: 20 chunks, blocked 2 x 10
    ((30, 8, 30, 30), [0, 2, 3]),  # BatchNorm's statistics: 27,000 values per channel
    ((40, 50, 40), [0, 2]),  # two reduced axes around a kept one: 2 chunks, not blocked
])
def test_float32_sums_of_same_sign_values_match_float64(shape, axes, data):
    """Within 1e-6 relative of float64 (the error measured is ~1e-7); the walk before blocking (one
    running sum per lane, the lanes combined in sequence by the interpreter) missed by up to 7e-6."""
    x = SAME_SIGN[data](np.random.default_rng(0), shape).astype(np.float32)
    got = run_triton(build([tensor(shape, "f32")], statistics(axes)), [x])
    want = interpret(build([tensor(shape, "f64")], statistics(axes)), "f", x.astype(np.float64))
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=0)


def test_blocked_reduction_builds_to_ptx():
    (kernel,) = lower_module(build([tensor((4, 100_000), "f32")], lambda b, x: b.op("lz.reduce_sum", x, axes=[1])))
    # 98 chunks of 1024: 7 blocks of 14, each with a partial sum of its own
    assert "for r1 in range(0, 100000, 14336):" in kernel.source
    assert "for r0 in range(r1, r1 + 14336, RBLOCK):" in kernel.source
    ptx = build_ptx(kernel)
    assert f".entry {kernel.name}(" in ptx
