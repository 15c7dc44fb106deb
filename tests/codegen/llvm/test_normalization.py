"""Softmax, layer norm and the row max/min around them (``lezero/codegen/llvm/reduction.py``) on
every CPU of the cross-target matrix: row lengths 1, odd, not a multiple of any vector width,
at the row cache's limit and past it, and long enough for the blocked sums; -inf and nan in the
rows; softmax's error in ulps against float64 no larger than numpy's float32 softmax; and the
kernels' structure (exp computed once per element, the max as an integer max)."""
from __future__ import annotations

import re

import llvmlite.ir as ir
import numpy as np
import pytest

from codegen.kernel_testing import assert_matches, make_kernel, reference, run_kernel
from lezero.codegen.llvm import jit, reduction, scalar_math
from lezero.codegen.llvm.backend import lower_kernel
from lezero.ir.types import TensorType

# Measured on every x86 CPU of the table: at most 6.0 ulp, mean <= 1.2 (numpy's float32 softmax on
# the same rows: at most 5.3, mean <= 1.03): exp within 1 ulp, the sum's rounding, the division's.
MAX_SOFTMAX_ULP, MEAN_SOFTMAX_ULP = 8, 1.5
ROW_LENGTHS = [1, 5, 17, 197, 1000, reduction.ROW_CACHE, reduction.ROW_CACHE + 1, 30000]


def softmax(b, x):
    m = b.op("lz.reduce_max", x, axes=[1], keepdims=True)
    e = b.op("lz.exp", b.op("lz.sub", x, m))
    return b.op("lz.div", e, b.op("lz.reduce_sum", e, axes=[1], keepdims=True))


def masked_softmax(b, x, mask):
    return softmax(b, b.op("lz.add", x, mask))


def layer_norm(b, x, scale, bias):
    mean = b.op("lz.reduce_mean", x, axes=[1], keepdims=True)
    centered = b.op("lz.sub", x, mean)
    var = b.op("lz.reduce_mean", b.op("lz.mul", centered, centered), axes=[1], keepdims=True)
    eps = b.constant(np.asarray(1e-5, np.float32), TensorType((), x.type.element_type))
    normalized = b.op("lz.mul", centered, b.op("lz.rsqrt", b.op("lz.add", var, eps)))
    return b.op("lz.add", b.op("lz.mul", normalized, scale), bias)


def extremes(b, x):
    return [b.op("lz.reduce_max", x, axes=[1]), b.op("lz.reduce_min", x, axes=[1])]


def rows_of(n: int) -> int:
    return 3 if n > 1000 else 7


def softmax_rows(n: int) -> np.ndarray:
    """Random rows, one all -inf, one holding a nan, one with -inf entries (which give exact zeros)."""
    rng = np.random.default_rng(n)
    x = (rng.standard_normal((rows_of(n) + 2, n)) * 4).astype(np.float32)
    x[-2] = -np.inf
    x[-1, n // 2] = np.nan
    x[0, 1::3] = -np.inf
    return x


def ulp_errors(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """|y - softmax(x)| in float32 ulps of softmax(x), computed in float64 from the float32
    ``x - max`` (the rounding every float32 softmax has, numpy's too: it costs up to ~20 ulps at
    |x| ~ 10, which would hide the kernel's own error)."""
    shifted = (x - x.max(axis=1, keepdims=True)).astype(np.float64)
    e = np.exp(shifted)
    exact = e / e.sum(axis=1, keepdims=True)
    return np.abs(y - exact) / np.spacing(exact.astype(np.float32))


CASES = {f"{kind}_{n}": (kind, n) for kind in ("softmax", "layer_norm", "extremes") for n in ROW_LENGTHS}


@pytest.mark.cross_target(cases=CASES, group=lambda case: case[0])
def test_row_kernels_match_the_reference_on_every_cpu(cpu, case):
    kind, n = case
    rng = np.random.default_rng(n + 1)
    if kind == "softmax":
        x = softmax_rows(n)
        module, kernel = make_kernel([(x.shape, "f32")], softmax, kind="reduction")
        inputs = [x]
    elif kind == "layer_norm":
        x = (rng.standard_normal((rows_of(n), n)) * 3 + 1).astype(np.float32)
        inputs = [x, rng.uniform(0.5, 1.5, n).astype(np.float32), rng.uniform(-1, 1, n).astype(np.float32)]
        module, kernel = make_kernel([(x.shape, "f32"), ((n,), "f32"), ((n,), "f32")], layer_norm, kind="reduction")
    else:
        x = rng.standard_normal((rows_of(n) + 3, n)).astype(np.float32)
        x[-3, n // 3] = np.nan  # nan wins over every number, also over -inf and inf
        x[-2] = -np.inf
        x[-1, ::2] = np.inf
        x[-1, 1::2] = -np.inf
        inputs = [x]
        module, kernel = make_kernel([(x.shape, "f32")], extremes, kind="reduction")
    got = run_kernel(kernel, inputs, 3, cpu=cpu)
    for g, w in zip(got, reference(module, inputs)):
        if kind == "layer_norm":  # sums in another order than numpy's: the mean moves by ulps of x
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5, err_msg=f"cpu {cpu}")
        else:
            assert_matches(g, w)
    if kind == "softmax":
        y = got[0]
        assert np.isnan(y[-2]).all() and np.isnan(y[-1]).all(), "a row of -inf or with a nan is nan, as in numpy"
        assert (y[0, 1::3] == 0).all(), "exp(-inf) is an exact zero"
        ours = ulp_errors(x[:-2], y[:-2])  # exp <= 1 ulp, the blocked sum, the division's rounding
        assert ours.max() <= MAX_SOFTMAX_ULP and ours.mean() <= MEAN_SOFTMAX_ULP, \
            f"cpu {cpu}: softmax {ours.max():.2f} ulp from float64 (mean {ours.mean():.2f})"


def test_extremes_order_signed_zeros_infinities_and_nan_as_numpy():
    """The integer max/min: -0 below +0, infinities at the ends, nan winning; f64, f16 and a
    column reduction (the tile loop innermost) too."""
    x = np.array([[-0.0, 0.0, -1.0], [0.0, -0.0, -2.0], [-np.inf, np.inf, 3.0], [np.nan, -np.inf, 1.0],
                  [-np.inf, -np.inf, -np.inf], [1e-45, -1e-45, 0.0]], np.float32)
    for dtype in ("f32", "f64", "f16"):
        data = x.astype({"f32": np.float32, "f64": np.float64, "f16": np.float16}[dtype])
        module, kernel = make_kernel([(data.shape, dtype)], extremes, kind="reduction")
        got, want = run_kernel(kernel, [data], 2), reference(module, [data])
        for g, w in zip(got, want):
            assert_matches(g, w)
        assert np.signbit(got[0][:2]).tolist() == [False, False] and np.signbit(got[1][:2]).tolist() == [True, True]
    module, kernel = make_kernel([(x.T.shape, "f32")], lambda b, v: [b.op("lz.reduce_max", v, axes=[0]),
                                                                     b.op("lz.reduce_min", v, axes=[0])],
                                 kind="reduction")
    for g, w in zip(run_kernel(kernel, [np.ascontiguousarray(x.T)]), reference(module, [np.ascontiguousarray(x.T)])):
        assert_matches(g, w)


def test_softmax_computes_exp_once_per_element():
    """The sum's pass keeps exp(x - max) in a stack row and the division reads it back; a row past
    ``ROW_CACHE`` computes exp again (one rounding of x / ln2 per exp), as a cheap prologue does (layer norm's
    centered value is recomputed, not cached)."""
    def exps(llvm_ir):  # each exp rounds x / ln2 once, by adding ROUND_SHIFT
        shift = str(ir.Constant(ir.FloatType(), scalar_math.ROUND_SHIFT)).split()[1]
        return len(re.findall(rf"= fadd float %\S+, {shift}$", llvm_ir, re.M))

    def softmax_exps(n):
        _, kernel = make_kernel([((4, n), "f32")], softmax, kind="reduction")
        return exps(lower_kernel(kernel).llvm_ir)

    assert softmax_exps(197) == 1 and softmax_exps(reduction.ROW_CACHE) == 1
    assert softmax_exps(reduction.ROW_CACHE + 1) == 2
    _, kernel = make_kernel([((4, 64), "f32"), ((64,), "f32"), ((64,), "f32")], layer_norm, kind="reduction")
    assert '"row"' not in lower_kernel(kernel).llvm_ir
    _, kernel = make_kernel([((4, 64), "f32"), ((4, 64), "f32")], masked_softmax, kind="reduction")
    assert exps(lower_kernel(kernel).llvm_ir) == 1


def test_row_max_is_a_vectorized_integer_max():
    _, kernel = make_kernel([((64, 1000), "f32")], lambda b, x: b.op("lz.reduce_max", x, axes=[1]), kind="reduction")
    asm = jit.emit_assembly(lower_kernel(kernel).llvm_ir)
    # (SSE2 has no pmaxsd: a compare and a blend)
    assert re.search(r"\bv?(pmaxsd|pcmpgtd)\s+.*%[xyz]mm", asm), "the row max is no packed integer max"
    assert not re.search(r"\bv?maxps\b", asm), "the row max still holds float maxes"


def test_rows_read_by_two_reductions_are_cached_once_within_the_budget():
    """exp(x - max) summed and maxed: one row; rows past the kernel's budget are recomputed."""
    def two_reductions(b, x):
        m = b.op("lz.reduce_max", x, axes=[1], keepdims=True)
        e = b.op("lz.exp", b.op("lz.sub", x, m))
        total = b.op("lz.reduce_sum", e, axes=[1], keepdims=True)
        return b.op("lz.div", e, b.op("lz.add", total, b.op("lz.reduce_max", e, axes=[1], keepdims=True)))

    x = np.random.default_rng(5).standard_normal((6, 300)).astype(np.float32)
    module, kernel = make_kernel([(x.shape, "f32")], two_reductions, kind="reduction")
    assert lower_kernel(kernel).llvm_ir.count('%"row" = alloca') == 1
    assert_matches(run_kernel(kernel, [x], 2)[0], reference(module, [x])[0])


def test_row_cache_over_interleaved_reduced_axes():
    """Reduced axes 0 and 2 around a kept axis 1: the row is the reduced positions in row-major
    order, walked by one loop per reduced dim."""
    def spread_softmax(b, x):
        m = b.op("lz.reduce_max", x, axes=[0, 2], keepdims=True)
        e = b.op("lz.exp", b.op("lz.sub", x, m))
        return b.op("lz.div", e, b.op("lz.reduce_sum", e, axes=[0, 2], keepdims=True))

    x = np.random.default_rng(6).standard_normal((3, 5, 37)).astype(np.float32)
    module, kernel = make_kernel([(x.shape, "f32")], spread_softmax, kind="reduction")
    assert '%"row" = alloca' in lower_kernel(kernel).llvm_ir
    assert_matches(run_kernel(kernel, [x], 2)[0], reference(module, [x])[0])
