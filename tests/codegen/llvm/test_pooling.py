"""Pooling as a ``single`` kernel against the reference interpreter: random kernels, strides,
paddings, dilations, ceil mode and count_include_pad, in f32, f64, f16 and (max) integers; and
max pooling's gradient, with ties, nan and -inf; float32 max and average pooling's vector rows on
every cross-target CPU."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from codegen.kernel_testing import assert_matches, check_kernel, make_kernel, random_array, reference, run_kernel
from lezero.codegen.llvm.backend import lower_kernel
from lezero.ir.dialect.windows import window_output_size
from lezero.ir.opdef import OpError, lookup
from lezero.ir.types import ELEMENT_TYPES, tensor


@st.composite
def pool_cases(draw):
    kernel = [draw(st.integers(1, 4)), draw(st.integers(1, 4))]
    strides = [draw(st.integers(1, 3)), draw(st.integers(1, 3))]
    pads = [draw(st.integers(0, k // 2)) for k in kernel * 2]
    dilations = [draw(st.integers(1, 2)), draw(st.integers(1, 2))]
    hw = (draw(st.integers(1, 12)), draw(st.integers(1, 12)))
    ceil_mode = draw(st.booleans())
    return kernel, strides, pads, dilations, hw, ceil_mode


def _valid(hw, kernel, strides, pads, dilations, ceil_mode) -> bool:
    try:
        for i in range(2):
            window_output_size(hw[i], kernel[i], strides[i], pads[i], pads[i + 2], dilations[i], ceil_mode)
    except OpError:
        return False
    return True


@settings(max_examples=12)
@given(pool_cases(), st.sampled_from(["f32", "f16", "i32", "f64"]))
def test_max_pool2d(case, dtype):
    kernel, strides, pads, dilations, hw, ceil_mode = case
    assume(_valid(hw, kernel, strides, pads, dilations, ceil_mode))
    shape = (2, 3) + hw
    module, op = make_kernel([(shape, dtype)], lambda b, x: b.op(
        "lz.max_pool2d", x, kernel=kernel, strides=strides, pads=pads, dilations=dilations, ceil_mode=ceil_mode),
        kind="single")
    x = random_array(np.random.default_rng(0), shape, ELEMENT_TYPES[dtype].numpy_dtype)
    if dtype.startswith("f"):
        x.reshape(-1)[::13] = np.nan
    lowered = check_kernel(module, op, [x], splits=3)
    assert lowered.work_items == 2 * 3 * op.results[0].type.shape[2]


@settings(max_examples=12)
@given(pool_cases(), st.sampled_from(["f32", "f16", "f64"]), st.booleans())
def test_avg_pool2d(case, dtype, count_include_pad):
    kernel, strides, pads, _, hw, ceil_mode = case
    assume(_valid(hw, kernel, strides, pads, (1, 1), ceil_mode))
    shape = (1, 2) + hw
    module, op = make_kernel([(shape, dtype)], lambda b, x: b.op(
        "lz.avg_pool2d", x, kernel=kernel, strides=strides, pads=pads, ceil_mode=ceil_mode,
        count_include_pad=count_include_pad), kind="single")
    x = random_array(np.random.default_rng(1), shape, ELEMENT_TYPES[dtype].numpy_dtype)
    check_kernel(module, op, [x], splits=2)


def test_resnet_stem_max_pool():
    """The 3x3 / stride 2 / pad 1 max pool of a ResNet stem on a 56x56 map."""
    module, op = make_kernel([((1, 8, 56, 56), "f32")], lambda b, x: b.op(
        "lz.max_pool2d", x, kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]), kind="single")
    check_kernel(module, op, [np.random.default_rng(2).standard_normal((1, 8, 56, 56)).astype(np.float32)])


VECTOR_ROW_CASES = {
    # name: (x shape, kernel, strides, pads, dilations, ceil mode): float32 max pooling of column
    # stride 1 or 2 keeps an output row in vector registers (llvm/pooling.py, _row_in_vectors)
    "stem_3x3_s2_p1_two_vectors_and_a_tail": ((1, 3, 13, 75), [3, 3], [2, 2], [1, 1, 1, 1], [1, 1], False),
    "3x3_s1_p1_rows_past_a_vector": ((2, 2, 6, 37), [3, 3], [1, 1], [1, 1, 1, 1], [1, 1], False),
    "2x3_s_3x2_dilated_ceil": ((1, 2, 11, 23), [2, 3], [3, 2], [1, 1, 0, 1], [2, 2], True),
    "4x2_s1_asymmetric_pads": ((1, 3, 7, 5), [4, 2], [1, 1], [2, 0, 1, 1], [1, 1], False),
    # the first output row's window and the first vector's columns wholly in the padding (-inf)
    "windows_wholly_in_the_padding": ((1, 2, 5, 40), [3, 3], [1, 2], [4, 20, 1, 3], [1, 1], False),
    # window rows outside the image replaced by the window's first row inside (rows -2, 0, 2)
    "dilated_rows_outside_the_image": ((1, 2, 6, 50), [3, 2], [1, 1], [2, 1, 2, 0], [2, 3], False),
}


@pytest.mark.cross_target(cases=VECTOR_ROW_CASES, group=lambda case: 0)
def test_max_pool2d_vector_rows(cpu, case):
    """The vector rows match the reference with nan (it propagates), -inf and zeros of both signs
    in the input, windows partly in the padding, rows that end inside a vector, and work items in
    any pieces."""
    shape, kernel, strides, pads, dilations, ceil_mode = case
    module, op = make_kernel([(shape, "f32")], lambda b, x: b.op(
        "lz.max_pool2d", x, kernel=kernel, strides=strides, pads=pads, dilations=dilations, ceil_mode=ceil_mode),
        kind="single")
    x = random_array(np.random.default_rng(sum(shape)), shape, np.float32)
    flat = x.reshape(-1)
    flat[::17], flat[5::23], flat[3::11], flat[7::11] = np.nan, -np.inf, -0.0, 0.0
    lowered = lower_kernel(op, cpu=cpu)
    assert "ow_vector" in lowered.llvm_ir and "llvm.maximum.v" in lowered.llvm_ir
    want = reference(module, [x])[0]
    for splits in (1, 3):
        got = run_kernel(op, [x], splits, lowered, cpu=cpu)[0]
        assert_matches(got, want)


AVG_VECTOR_ROW_CASES = {
    # name: (x shape, kernel, strides, pads, ceil mode, count_include_pad): float32 average pooling
    # of column stride 1 or 2 in vector registers too
    "inception_3x3_s1_p1_a_vector_and_a_tail": ((1, 3, 28, 28), [3, 3], [1, 1], [1, 1, 1, 1], False, False),
    "3x3_s1_p1_counting_the_padding": ((2, 2, 6, 37), [3, 3], [1, 1], [1, 1, 1, 1], False, True),
    "3x3_s2_p1_ceil": ((1, 3, 13, 75), [3, 3], [2, 2], [1, 1, 1, 1], True, False),
    "4x2_s1_asymmetric_pads": ((1, 3, 7, 5), [4, 2], [1, 1], [2, 0, 1, 1], False, True),
    # the first output row's window and the first vector's columns wholly in the padding: 0 / 0
    # without the padding counted (nan, as the reference), 0 with it
    "windows_wholly_in_the_padding": ((1, 2, 5, 40), [3, 3], [1, 2], [4, 20, 1, 3], False, False),
    "windows_wholly_in_the_padding_counted": ((1, 2, 5, 40), [3, 3], [1, 2], [4, 20, 1, 3], False, True),
    # inception's global 7x7 average: one vector, masked
    "7x7_global": ((1, 4, 7, 7), [7, 7], [1, 1], [0, 0, 0, 0], False, False),
}


@pytest.mark.cross_target(cases=AVG_VECTOR_ROW_CASES, group=lambda case: 0)
def test_avg_pool2d_vector_rows(cpu, case):
    """The vector rows of an average (rows outside the image add zeros, end vectors masked, the
    divisor per row and column) match the reference, in any pieces of work items."""
    shape, kernel, strides, pads, ceil_mode, count_include_pad = case
    module, op = make_kernel([(shape, "f32")], lambda b, x: b.op(
        "lz.avg_pool2d", x, kernel=kernel, strides=strides, pads=pads, ceil_mode=ceil_mode,
        count_include_pad=count_include_pad), kind="single")
    x = random_array(np.random.default_rng(sum(shape)), shape, np.float32)
    lowered = lower_kernel(op, cpu=cpu)
    # no stack row of sums: vector adds and a vector division
    assert "ow_vector" in lowered.llvm_ir and "alloca" not in lowered.llvm_ir and "fdiv <" in lowered.llvm_ir
    want = reference(module, [x])[0]
    for splits in (1, 3):
        got = run_kernel(op, [x], splits, lowered, cpu=cpu)[0]
        assert_matches(got, want)


@settings(max_examples=12)
@given(pool_cases(), st.sampled_from(["f32", "f64", "f16"]), st.sampled_from(["normal", "ties", "special"]))
def test_max_pool2d_grad(case, dtype, values):
    """Overlapping windows add into one element; ties go to the first maximum, a nan wins, an
    all -inf window to its first element inside the image (the reference's choices)."""
    kernel, strides, pads, dilations, hw, ceil_mode = case
    assume(_valid(hw, kernel, strides, pads, dilations, ceil_mode))
    shape = (2, 3) + hw
    attrs = dict(kernel=kernel, strides=strides, pads=pads, dilations=dilations, ceil_mode=ceil_mode)
    pool = lookup("lz.max_pool2d")
    pooled = pool.infer_op([tensor(shape)], pool.attrs(pool.make_attributes(attrs)))[0].shape
    module, op = make_kernel([(shape, dtype), (pooled, dtype)],
                             lambda b, x, dy: b.op("lz.max_pool2d_grad", x, dy, **attrs), kind="single")
    rng = np.random.default_rng(3)
    numpy_dtype = ELEMENT_TYPES[dtype].numpy_dtype
    x = random_array(rng, shape, numpy_dtype)
    if values == "ties":
        x = np.round(x).astype(numpy_dtype)
    elif values == "special":
        x.reshape(-1)[::7] = np.nan
        x.reshape(-1)[1::5] = -np.inf
    dy = random_array(rng, pooled, numpy_dtype)
    # f16 rounds after each add where windows overlap; the reference once
    tol = dict(rtol=1e-2, atol=1e-2) if dtype == "f16" else {}
    lowered = check_kernel(module, op, [x, dy], splits=3, **tol)
    assert lowered.work_items == 2 * 3
