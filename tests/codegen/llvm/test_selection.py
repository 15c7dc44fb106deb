"""``lz.topk`` on the CPU against the reference interpreter, bit for bit: both ways of lowering it
(``k`` picks for a small ``k``, a merge sort of the line when ``k`` is above ``log2 n``: every
``sort``), over the last and an interior axis, on ties, nan, +-inf and -0.0, lines of one and two
elements, odd and power-of-two lengths and a long line; integer, f16, bf16 and f64 elements."""
from __future__ import annotations

import numpy as np
import pytest

from lezero.codegen.llvm.selection import merge_sorts
from lezero.ir.interpreter import interpret
from lezero.ir.parser import parse_module
from lezero.runtime import compile as compile_module
from support.selection_testing import ties_and_nan


def topk_module(shape, element: str, k: int, axis: int, largest: bool):
    out = list(shape)
    out[axis] = k
    x = f"tensor<{'x'.join(map(str, shape))}x{element}>"
    v, i = (f"tensor<{'x'.join(map(str, out))}x{e}>" for e in (element, "i64"))
    return parse_module(f"""module {{
  func.func @f(%x: {x}) -> ({v}, {i}) {{
    %0:2 = "lz.topk"(%x) {{k = {k} : i64, axis = {axis} : i64, largest = {str(largest).lower()}}} : ({x}) -> ({v}, {i})
    func.return %0#0, %0#1 : {v}, {i}
  }}
}}""")


def check(shape, element, k, axis, largest, x):
    m = topk_module(shape, element, k, axis, largest)
    got = compile_module(m, "f")(x)
    want = interpret(m, "f", x)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        assert np.array_equal(g.view(np.uint8), w.view(np.uint8)), (g, w)


def test_which_way_topk_lowers():
    assert not merge_sorts(1, 1) and merge_sorts(2, 2)      # a line of one has nothing to merge
    assert not merge_sorts(1000, 10) and merge_sorts(1000, 11)  # picks while k <= log2 n
    assert merge_sorts(10 ** 6, 10 ** 6)


@pytest.mark.parametrize("shape, element, k, axis, largest", [
    ((4, 1), "f32", 1, 1, False),
    ((4, 2), "f32", 2, 1, True),
    ((3, 7), "f32", 7, 1, False),      # a sort: merge, odd length
    ((3, 16), "f64", 16, 1, True),     # power of two
    ((5, 33), "f32", 20, 1, False),    # merge, then the first 20
    ((5, 33), "f32", 3, 1, True),      # picks
    ((2, 9, 3), "f32", 9, 1, True),    # an interior axis: lines of stride 3
    ((6, 4), "f16", 6, 0, False),
    ((3, 31), "bf16", 31, 1, True)])
def test_topk_orders_floats_as_the_reference(shape, element, k, axis, largest):
    """Ties go to the first index, nan counts as the largest value, -0.0 equals 0.0."""
    rng = np.random.default_rng(sum(shape) + k)
    dtype = {"f32": np.float32, "f16": np.float16, "bf16": np.float32, "f64": np.float64}[element]
    x = ties_and_nan(shape, dtype, rng)
    if element == "bf16":  # bf16 values in float32 storage
        x = (x.view(np.uint32) & 0xFFFF0000).view(np.float32)
    check(shape, element, k, axis, largest, x)


@pytest.mark.parametrize("element, dtype", [("i32", np.int32), ("i64", np.int64), ("ui8", np.uint8), ("i8", np.int8)])
def test_topk_sorts_integers_as_the_reference(element, dtype):
    rng = np.random.default_rng(7)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, (4, 45), endpoint=True).astype(dtype)
    x[:, ::5] = info.min  # ties at the extremes
    x[:, 1::7] = info.max
    for largest in (False, True):
        check((4, 45), element, 45, 1, largest, x)


def test_a_long_line_sorts_stably():
    n = 100_003
    rng = np.random.default_rng(1)
    x = rng.integers(0, 1000, (2, n)).astype(np.float32)  # ~100 ties of each value
    check((2, n), "f32", n, 1, False, x)
    values, indices = compile_module(topk_module((2, n), "f32", n, 1, False), "f")(x)
    expected = np.argsort(x, axis=1, kind="stable")
    assert np.array_equal(indices, expected) and np.array_equal(values, np.take_along_axis(x, expected, 1))
