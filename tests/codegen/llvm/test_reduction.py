"""Reduction kernels lowered to LLVM IR against the reference interpreter: every reduce op and
argmax over random axes (leading, trailing, interleaved, all, none of size > 1), keepdims or not,
f16 accumulating in f32, nan handling, fused prologues and epilogues (softmax, layer norm,
log-softmax, a centered batch statistic), and the blocked accumulation's accuracy: float32 sums
of a million same-sign values against the same kernel over float64."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen.kernel_testing import (GROUP_NORM_SHAPES, assert_matches, check_kernel, group_norm_body, make_kernel, random_array,
                            reference, run_kernel)
from lezero.codegen.llvm import jit
from lezero.codegen.llvm.backend import lower_kernel
from lezero.codegen.llvm.target import cpu_target
from lezero.ir.dialect.numerics import to_storage
from lezero.ir.types import ELEMENT_TYPES, TensorType

REDUCE = ["lz.reduce_sum", "lz.reduce_prod", "lz.reduce_max", "lz.reduce_min", "lz.reduce_mean"]
# summation order differs from numpy's pairwise sum: compare sums with a tolerance that grows with n
SUM_TOL = {"f32": (1e-4, 1e-4), "f64": (1e-10, 1e-10), "f16": (2e-3, 2e-3)}

dims = st.sampled_from([1, 2, 3, 5, 8, 17, 64])


@settings(max_examples=30)
@given(st.lists(dims, min_size=1, max_size=4).map(tuple), st.data())
def test_reductions_over_random_axes(shape, draw):
    dtype = draw.draw(st.sampled_from(["f32", "f64", "f16", "i32", "i64"]))
    axes = draw.draw(st.lists(st.integers(0, len(shape) - 1), unique=True, max_size=len(shape)))
    keepdims = draw.draw(st.booleans())
    ops = [op for op in REDUCE if not (op == "lz.reduce_mean" and dtype.startswith("i"))]
    module, kernel = make_kernel([(shape, dtype)], lambda b, x: [b.op(op, x, axes=axes, keepdims=keepdims)
                                                                 for op in ops], kind="reduction")
    rng = np.random.default_rng(0)
    x = random_array(rng, shape, ELEMENT_TYPES[dtype].numpy_dtype)
    if dtype.startswith("f"):
        x = (x * 0.5 + 1).astype(x.dtype)  # products of many values stay finite
    lowered = lower_kernel(kernel)
    for op, g, w in zip(ops, run_kernel(kernel, [x], 3, lowered), reference(module, [x])):
        rtol, atol = SUM_TOL.get(dtype, (None, None)) if op in ("lz.reduce_sum", "lz.reduce_mean", "lz.reduce_prod") \
            else (None, None)
        assert_matches(g, w, rtol, atol * np.sqrt(x.size) if atol else None), op


@settings(max_examples=12)
@given(st.lists(dims, min_size=1, max_size=3).map(tuple), st.data())
def test_argmax(shape, draw):
    dtype = draw.draw(st.sampled_from(["f32", "f16", "i32", "i1", "ui8"]))
    axis = draw.draw(st.integers(-len(shape), len(shape) - 1))
    keepdims = draw.draw(st.booleans())
    module, kernel = make_kernel([(shape, dtype)], lambda b, x: b.op("lz.argmax", x, axis=axis, keepdims=keepdims),
                                 kind="reduction")
    rng = np.random.default_rng(1)
    x = random_array(rng, shape, ELEMENT_TYPES[dtype].numpy_dtype)  # small integers: ties, first wins
    if dtype.startswith("f"):
        x = np.round(x).astype(x.dtype)
        x.reshape(-1)[::7] = np.nan  # nan is the maximum, the first one wins
        x.reshape(-1)[::5] = -np.inf
    check_kernel(module, kernel, [x], splits=2)


def test_nan_propagates_through_max_and_sum():
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    x[1, 3] = np.nan
    x[2, 0] = -np.inf
    module, kernel = make_kernel([((4, 6), "f32")], lambda b, x: [
        b.op("lz.reduce_max", x, axes=[1]), b.op("lz.reduce_min", x, axes=[1]), b.op("lz.reduce_sum", x, axes=[1])],
        kind="reduction")
    check_kernel(module, kernel, [x])


def _softmax(b, x, axis=-1):
    m = b.op("lz.reduce_max", x, axes=[axis], keepdims=True)
    e = b.op("lz.exp", b.op("lz.sub", x, m))
    return b.op("lz.div", e, b.op("lz.reduce_sum", e, axes=[axis], keepdims=True))


def _layer_norm(b, x, scale, bias):
    axes = [x.type.rank - 1]
    mean = b.op("lz.reduce_mean", x, axes=axes, keepdims=True)
    centered = b.op("lz.sub", x, mean)
    var = b.op("lz.reduce_mean", b.op("lz.mul", centered, centered), axes=axes, keepdims=True)
    et = x.type.element_type
    eps = b.constant(np.asarray(1e-5, et.numpy_dtype), TensorType((), et))
    normalized = b.op("lz.mul", centered, b.op("lz.rsqrt", b.op("lz.add", var, eps)))
    return [b.op("lz.add", b.op("lz.mul", normalized, scale), bias), mean]


@pytest.mark.parametrize("shape", [(1, 1), (3, 5), (8, 1000), (2, 3, 33)])
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_softmax_and_layer_norm(shape, dtype):
    """Reductions over the last axis consumed at the input shape: one pass per reduction per
    row, results yielded at both shapes."""
    rng = np.random.default_rng(2)
    et = ELEMENT_TYPES[dtype]
    # f16 and bf16: the sums' order (not numpy's pairwise one) can move a mean or a variance by one
    # f16/bf16 ulp, and scale * x + bias of magnitude ~16 makes that ~1e-2 in the result
    tol = {"f32": 1e-4, "f16": 1e-2, "bf16": 2e-2}[dtype]

    def make(shape):
        return to_storage(rng.standard_normal(shape) * 3, et)

    x = make(shape)
    module, kernel = make_kernel([(shape, dtype)], _softmax, kind="reduction")
    lowered = check_kernel(module, kernel, [x], splits=3, rtol=tol if dtype == "bf16" else None,
                           atol=tol if dtype == "bf16" else None)  # softmax: f16 within 2e-3
    assert lowered.work_items == int(np.prod(shape[:-1]))
    module, kernel = make_kernel([(shape, dtype), (shape[-1:], dtype), (shape[-1:], dtype)], _layer_norm,
                                 kind="reduction")
    check_kernel(module, kernel, [x, make(shape[-1:]), make(shape[-1:])], splits=2, rtol=tol, atol=tol)


def test_softmax_over_a_leading_axis_and_log_softmax():
    """Softmax over axis 0 (a column reduction: the tile loop is innermost) and log-softmax."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((37, 700)).astype(np.float32)
    module, kernel = make_kernel([((37, 700), "f32")], lambda b, x: _softmax(b, x, axis=0), kind="reduction")
    lowered = check_kernel(module, kernel, [x], splits=2)
    assert lowered.work_items == 3  # 700 columns in tiles of at most 256

    def log_softmax(b, x):
        shifted = b.op("lz.sub", x, b.op("lz.reduce_max", x, axes=[1], keepdims=True))
        total = b.op("lz.reduce_sum", b.op("lz.exp", shifted), axes=[1], keepdims=True)
        return b.op("lz.sub", shifted, b.op("lz.log", total))

    module, kernel = make_kernel([((37, 700), "f32")], log_softmax, kind="reduction")
    check_kernel(module, kernel, [x], splits=3, rtol=1e-5, atol=1e-5)


def test_batch_statistics_with_dropped_dims():
    """Mean over the batch without keepdims, broadcast back (reduced axes lead), an epilogue at
    the reduced shape, and interleaved reduced axes with an outer and an inner kept dim."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((16, 3, 10)).astype(np.float32)

    def body(b, x):
        mean = b.op("lz.reduce_mean", x, axes=[0])  # 3x10
        centered = b.op("lz.sub", x, mean)  # broadcast back over the leading axis
        return [centered, b.op("lz.mul", mean, mean)]

    module, kernel = make_kernel([((16, 3, 10), "f32")], body, kind="reduction")
    check_kernel(module, kernel, [x], splits=2)
    x4 = rng.standard_normal((4, 3, 5, 6)).astype(np.float32)
    module, kernel = make_kernel([((4, 3, 5, 6), "f32")], lambda b, x: [
        b.op("lz.reduce_sum", x, axes=[0, 2], keepdims=True), b.op("lz.reduce_max", x, axes=[0, 2])], kind="reduction")
    check_kernel(module, kernel, [x4], splits=3)


def test_reductions_read_operands_through_data_movement():
    """Group norm reading its input and its parameters through reshapes of memory (one reduction
    kernel), and a column sum of a transposed input (the tile loop reads it strided)."""
    rng = np.random.default_rng(5)
    module, kernel = make_kernel([(s, "f32") for s in GROUP_NORM_SHAPES], group_norm_body, kind="reduction")
    check_kernel(module, kernel, [rng.standard_normal(s).astype(np.float32) for s in GROUP_NORM_SHAPES], splits=2,
                 rtol=1e-4, atol=1e-5)
    module, kernel = make_kernel([((5, 7), "f32")], lambda b, x: b.op(
        "lz.reduce_sum", b.op("lz.transpose", x, perm=[1, 0]), axes=[0]), kind="reduction")
    check_kernel(module, kernel, [rng.standard_normal((5, 7)).astype(np.float32)], splits=2, rtol=1e-5, atol=1e-5)


def test_full_and_empty_reductions():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((7, 9)).astype(np.float32)
    module, kernel = make_kernel([((7, 9), "f32")], lambda b, x: [b.op("lz.reduce_sum", x), b.op("lz.reduce_max", x)],
                                 kind="reduction")
    assert check_kernel(module, kernel, [x]).work_items == 1
    empty = np.zeros((3, 0), np.float32)
    module, kernel = make_kernel([((3, 0), "f32")], lambda b, x: [
        b.op("lz.reduce_sum", x, axes=[1]), b.op("lz.reduce_max", x, axes=[1]), b.op("lz.reduce_mean", x, axes=[1])],
        kind="reduction")
    check_kernel(module, kernel, [empty])


def packed(instruction: str) -> str:
    """A packed f32 ``instruction`` on the default target's widest vectors (SSE's xmm, else ymm or zmm)."""
    if cpu_target().vector_bytes == 16:
        return rf"\bv?{instruction}\s+.*%xmm"
    return rf"\bv{instruction}\s+.*%[yz]mm"


def test_row_reductions_vectorize():
    _, kernel = make_kernel([((64, 1000), "f32")], _softmax, kind="reduction")
    asm = jit.emit_assembly(lower_kernel(kernel).llvm_ir)
    assert re.search(packed("(pmaxsd|pcmpgtd)"), asm) and re.search(packed("addps"), asm)  # the max as integers
    _, kernel = make_kernel([((64, 1000), "f32")], lambda b, x: b.op("lz.reduce_sum", x, axes=[0]),
                                 kind="reduction")
    assert re.search(packed("addps"), jit.emit_assembly(lower_kernel(kernel).llvm_ir))


def test_lone_reduction_in_a_single_kernel():
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    module, kernel = make_kernel([((3, 4), "i32")], lambda b, x: b.op("lz.reduce_prod", x, axes=[1]), kind="single")
    got = run_kernel(kernel, [x])[0]
    assert_matches(got, reference(module, [x])[0])


# --- accurate reductions (issue 10): blocked partial sums -----------------------------------------

SAME_SIGN = {"uniform": lambda rng, shape: rng.uniform(0, 1, shape), "constant": lambda rng, shape: np.full(shape, 0.1)}


def _batch_statistics(axes):
    """Sum, mean and variance (``mean((x - mean)^2)``, one kernel: the variance's prologue reads
    the mean) over ``axes``."""
    def body(b, x):
        mean = b.op("lz.reduce_mean", x, axes=axes, keepdims=True)
        centered = b.op("lz.sub", x, mean)
        return [b.op("lz.reduce_sum", x, axes=axes), mean,
                b.op("lz.reduce_mean", b.op("lz.mul", centered, centered), axes=axes, keepdims=True)]
    return body


@pytest.mark.parametrize("data", SAME_SIGN)
@pytest.mark.parametrize("shape,axes", [
    ((1_000_000,), [0]),  # a row: 977 vectorized blocks of 1024, their partial sums blocked
    ((1000, 1000), [0]),  # columns: the tile loop innermost, the rows blocked by 16
    ((4, 250_000, 2), [1]),  # a middle axis: a tile of 2 around a long reduced loop
    ((100, 100, 100), [0, 2]),  # two reduced loops around a kept dim
    ((100, 100, 100), [0, 1, 2]),  # every axis: one flat loop of 1e6
    ((20, 2, 224, 224), [0, 2, 3]),  # BatchNorm's statistics: 1,003,520 values per channel
])
def test_float32_sums_of_a_million_same_sign_values_match_float64(shape, axes, data):
    """Within 1e-6 relative of the same kernel over float64 (the reference interpreter's): one
    running sum per lane, as before, missed by up to 5e-4 (a constant 0.1 over every axis)."""
    rng = np.random.default_rng(0)
    x = SAME_SIGN[data](rng, shape).astype(np.float32)
    _, kernel = make_kernel([(shape, "f32")], _batch_statistics(axes), kind="reduction")
    module64, _ = make_kernel([(shape, "f64")], _batch_statistics(axes), kind="reduction")
    total, mean, var = run_kernel(kernel, [x], splits=2)
    want_total, want_mean, want_var = reference(module64, [x.astype(np.float64)])
    np.testing.assert_allclose(total, want_total, rtol=1e-6, atol=0)
    np.testing.assert_allclose(mean, want_mean, rtol=1e-6, atol=0)
    # the variance of same-sign data is a difference: bounded relative to the mean square
    scale = np.mean(np.square(x.astype(np.float64)), axis=tuple(axes), keepdims=True)
    assert np.all(np.abs(var - want_var) <= 1e-6 * scale), np.max(np.abs(var - want_var) / scale)


@pytest.mark.parametrize("shape,axes", [
    ((3, 100_003), [1]),  # a row of a prime length: a short last block at every level
    ((1009, 7), [0]),  # a column of a prime length
    ((13, 3, 1021), [0, 2]),
    ((7, 11, 13, 17), [0, 1, 2, 3]),
    ((2, 1, 40_000, 1), [2]),  # dims of size 1 around the reduced one
])
def test_blocked_walk_visits_every_position_once(shape, axes):
    """Small integers in float32 sum exactly in any order: the blocked loops' bounds (the last
    block of each level cut short) cover the reduced positions exactly once."""
    x = np.random.default_rng(1).integers(0, 8, shape).astype(np.float32)
    module, kernel = make_kernel([(shape, "f32")], lambda b, v: [
        b.op("lz.reduce_sum", v, axes=axes), b.op("lz.reduce_max", v, axes=axes)], kind="reduction")
    for got, want in zip(run_kernel(kernel, [x], splits=3), reference(module, [x])):
        np.testing.assert_array_equal(got, want)


def test_blocked_reductions_stay_vectorized():
    """Blocking keeps the vector lanes: a long row sum, a long column sum and a BatchNorm-shaped
    mean (H x W walked as one flat contiguous loop) add whole vectors and gather nothing."""
    for shape, axes in [((4, 100_000), [1]), ((20_000, 64), [0]), ((32, 64, 56, 56), [0, 2, 3])]:
        _, kernel = make_kernel([(shape, "f32")], lambda b, x: b.op("lz.reduce_mean", x, axes=axes), kind="reduction")
        asm = jit.emit_assembly(lower_kernel(kernel).llvm_ir)
        assert re.search(packed("addps"), asm), shape
        assert "vgather" not in asm, shape


SHORT_CASES = {
    # name: (shape, axes): the kept dims after the last reduced one are a short tile (a channel
    # block of 16 lanes, a few columns) around the reduced loops, or the rows are one to four vectors
    "blocked_global_mean": ((1, 8, 7, 7, 16), [2, 3]),  # a ResNet head's mean over [N, C/16, H, W, 16]
    "blocked_batch_statistics": ((2, 3, 5, 6, 16), [0, 2, 3]),
    "columns_of_a_block": ((301, 16), [0]),
    "a_tile_of_three": ((4, 37, 3), [1]),
    "a_7x7_global_mean": ((2, 40, 7, 7), [2, 3]),  # rows of 49
    "rows_of_33": ((70, 33), [1]),
}


@pytest.mark.cross_target(cases=SHORT_CASES, group=lambda case: 0)
def test_short_tiles_and_rows_gather_nothing(cpu, case):
    """The reduced loops around a short tile loop are not vectorized themselves, and a row of one
    to four vectors is a loop of vector accumulators: LLVM unrolled the 16 positions of a tile (or
    the 49 of a 7x7 row) and vectorized the loop around them instead, a gather per lane (the
    blocked global mean: 401 KB at 7 GB/s, a [1, 2048, 7, 7] mean 12 GB/s; now ~95 and ~73)."""
    shape, axes = case
    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    for body in (lambda b, v: b.op("lz.reduce_mean", v, axes=axes, keepdims=True), _batch_statistics(axes)):
        module, kernel = make_kernel([(shape, "f32")], body, kind="reduction")
        lowered = lower_kernel(kernel, cpu=cpu)
        assert "gather" not in jit.emit_assembly(lowered.llvm_ir, cpu), shape
        for got, want in zip(run_kernel(kernel, [x], 3, lowered, cpu=cpu), reference(module, [x])):
            assert_matches(got, want, 1e-5, 1e-6)
