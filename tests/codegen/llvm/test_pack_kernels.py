"""``pack_kernels``: the GEMM's packing routines as kernels give exactly the layout's numpy
``pack`` (the reference), for B stored row-major, transposed (with a padded row stride) or
strided, partial last slivers, and A with groups, partial slivers and a shallower last K block;
over any split of the work items (the thread pool's ranges), on every CPU of the matrix."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from lezero.codegen.llvm.jit import compile_module
from lezero.codegen.llvm.pack_kernels import pack_kernel
from lezero.codegen.llvm.target import cpu_target
from lezero.codegen.packed_operands import PackedGemmA, PackedGemmB, PackedIntegerGemmB, aligned_empty

RNG = np.random.default_rng(0)


def stored_b(depth: int, cols: int, layout: str):
    """(array, strides) of a depth x cols B stored in ``layout``."""
    if layout == "rows":
        return RNG.standard_normal((depth, cols)).astype(np.float32), (cols, 1)
    if layout == "transposed":  # x @ w.T: w is cols x depth, its rows padded by 3
        return RNG.standard_normal((cols, depth + 3)).astype(np.float32), (1, depth + 3)
    return RNG.standard_normal((depth, cols, 2)).astype(np.float32), (2 * cols, 2)  # B[k, j] = X[k, j, 0]


CASES = {f"b-{layout}-{d}x{n}-nr{nr}": ("b", (d, n, nr, layout))
         for layout in ("rows", "transposed", "strided")
         for d, n, nr in ((37, 53, 16), (64, 128, 64), (5, 100, 48), (19, 7, 32), (16, 24, 24))}
CASES.update({f"a-{g}x{r}x{d}-mr{t}-kc{kc}": ("a", (g, r, d, t, kc))
              for g, r, d, t, kc in ((1, 64, 100, 8, 100), (2, 30, 50, 6, 16), (3, 7, 20, 14, 8), (1, 13, 10, 6, 4))})


def run_pack(kernel, array: np.ndarray, floats: int, cpu: str, cuts) -> np.ndarray:
    module = compile_module(kernel.llvm_ir, cpu)
    function = module.ctypes_function(kernel.symbol, None, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64])
    packed = aligned_empty(floats, np.float32)
    packed[:] = np.nan  # every element is written: padding too
    pointers = (ctypes.c_void_p * 2)(array.ctypes.data, packed.ctypes.data)
    for begin, end in zip(cuts, cuts[1:]):
        function(pointers, begin, end)
    return packed


@pytest.mark.cross_target(cases=CASES, group=lambda case: case[0])
def test_a_pack_kernel_lays_out_what_the_numpy_pack_does(cpu, case):
    kind, params = case
    if kind == "b":
        depth, cols, col_tile, layout = params
        array, strides = stored_b(depth, cols, layout)
        spec = PackedGemmB(2, depth, cols, col_tile, strides)
    else:
        groups, rows, depth, row_tile, depth_block = params
        spec = PackedGemmA(1, groups, rows, depth, row_tile, depth_block)
        array = RNG.standard_normal((groups, rows, depth)).astype(np.float32)
    kernel = pack_kernel(spec, cpu_target(cpu))
    items = kernel.work_items
    assert items == (spec.padded_cols // col_tile if kind == "b" else groups * spec.padded_rows // row_tile)
    expected = spec.pack(array)
    for cuts in ([0, items], [0, items // 2, items], list(range(items + 1))):  # one range, two, one item each
        np.testing.assert_array_equal(run_pack(kernel, array, expected.size, cpu, cuts), expected)


def test_layouts_without_a_pack_kernel_say_so():
    assert pack_kernel(PackedIntegerGemmB(0, 64, 64, False), cpu_target("host")) is None
