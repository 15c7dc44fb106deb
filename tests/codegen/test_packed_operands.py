"""``PackedGemmA``/``PackedGemmB``: a constant A (B) laid out as the GEMM's packed slivers, checked
element by element against the layout its docstring states (odd row counts, a shallower last K
block, groups; B stored row-major, transposed or strided, a partial last sliver); an int8 B as the
AMX int8 GEMM's panels (``PackedIntegerGemmB``)."""
from __future__ import annotations

import numpy as np
import pytest

from lezero.codegen.packed_operands import (PACKED_ALIGNMENT, PackedGemmA, PackedGemmB, PackedIntegerGemmB,
                                         packed_operand_from_fields)


@pytest.mark.parametrize("groups,rows,depth,row_tile,depth_block", [
    (1, 13, 10, 6, 4),   # 13 rows: a sliver of 1 row and 5 zeros; K blocks 4, 4, 2
    (2, 6, 9, 6, 9),     # one K block, whole slivers, two groups
    (3, 5, 7, 8, 3),     # fewer rows than one sliver
])
def test_packed_gemm_a_puts_each_element_where_the_micro_kernel_reads_it(groups, rows, depth, row_tile,
                                                                         depth_block):
    spec = PackedGemmA(1, groups, rows, depth, row_tile, depth_block)
    weights = np.arange(1, groups * rows * depth + 1, dtype=np.float32).reshape(groups, rows, depth)
    packed = spec.pack(weights)
    assert packed.shape == (groups * spec.group_floats,)
    padded = spec.padded_rows
    expected = np.zeros(groups * spec.group_floats, np.float32)
    for g in range(groups):
        for k0 in range(0, depth, depth_block):
            kc = min(depth_block, depth - k0)
            for r in range(padded):
                sliver, i = divmod(r, row_tile)
                for k in range(kc):
                    at = g * spec.group_floats + k0 * padded + sliver * row_tile * kc + k * row_tile + i
                    expected[at] = weights[g, r, k0 + k] if r < rows else 0.0
    np.testing.assert_array_equal(packed, expected)


def test_packing_the_wrong_array_names_the_layout():
    spec = PackedGemmA(1, 1, 4, 3, 6, 3)
    with pytest.raises(ValueError, match="expected 12 float32 values"):
        spec.pack(np.zeros((4, 4), np.float32))
    with pytest.raises(ValueError, match="expected 12 float32 values"):
        spec.pack(np.zeros((4, 3), np.float64))


@pytest.mark.parametrize("depth,cols,col_tile,layout", [
    (5, 24, 24, "rows"),       # one whole sliver
    (7, 29, 24, "rows"),       # a sliver of 5 columns and 19 zeros
    (3, 10, 16, "transposed"),  # x @ w.T: w stored cols x depth
    (4, 9, 8, "strided"),      # neither: every second float of a wider buffer
])
def test_packed_gemm_b_puts_each_element_where_the_micro_kernel_reads_it(depth, cols, col_tile, layout):
    stored = np.arange(1, 2 * depth * cols + 1, dtype=np.float32)
    if layout == "rows":
        strides, matrix = (cols, 1), stored[:depth * cols].reshape(depth, cols)
    elif layout == "transposed":
        strides, matrix = (1, depth), stored[:depth * cols].reshape(cols, depth).T
    else:
        strides, matrix = (2 * cols, 2), stored.reshape(depth, 2 * cols)[:, ::2]
    spec = PackedGemmB(1, depth, cols, col_tile, strides)
    packed = spec.pack(stored[:depth * cols] if layout != "strided" else stored)
    assert packed.shape == (spec.group_floats,) and spec.groups == 1
    expected = np.zeros(spec.padded_cols * depth, np.float32)
    for k in range(depth):
        for j in range(spec.padded_cols):
            at = (j // col_tile) * col_tile * depth + k * col_tile + j % col_tile
            expected[at] = matrix[k, j] if j < cols else 0.0
    np.testing.assert_array_equal(packed, expected)
    # a kernel cache entry's facts name the spec by its fields (asdict), lists for tuples
    fields = {"operand": 1, "depth": depth, "cols": cols, "col_tile": col_tile, "strides": list(strides)}
    assert packed_operand_from_fields(fields) == spec
    assert packed_operand_from_fields({"operand": 1, "groups": 1, "rows": 4, "depth": 3, "row_tile": 6,
                                       "depth_block": 3}) == PackedGemmA(1, 1, 4, 3, 6, 3)


def test_packing_b_from_too_small_an_array_names_the_layout():
    with pytest.raises(ValueError, match="reaching element 11"):
        PackedGemmB(0, 3, 4, 8, (4, 1)).pack(np.zeros(11, np.float32))


@pytest.mark.parametrize("depth,cols,unsigned", [(7, 70, True), (64, 64, False), (130, 5, False)])
def test_packed_integer_gemm_b_puts_each_byte_where_the_amx_kernel_reads_it(depth, cols, unsigned):
    """Panels of 64 columns, K padded to whole tile steps of 64 in groups of 4 k per column, an
    unsigned B made signed (top bit flipped), zeros past depth and cols; the bytes as float32 words."""
    rng = np.random.default_rng(depth + cols)
    matrix = rng.integers(0, 256, (depth, cols)).astype(np.uint8 if unsigned else np.int8)
    spec = PackedIntegerGemmB(2, depth, cols, unsigned)
    packed = spec.pack(matrix)
    assert packed.dtype == np.float32 and packed.shape == (spec.group_floats,)
    packed = packed.view(np.int8)
    expected = np.zeros(spec.panels * spec.padded_depth * 64, np.int8)
    signed = (matrix.view(np.uint8) ^ (0x80 if unsigned else 0)).view(np.int8)
    for k in range(depth):
        for j in range(cols):
            expected[(j // 64) * spec.padded_depth * 64 + (k // 4) * 256 + (j % 64) * 4 + k % 4] = signed[k, j]
    np.testing.assert_array_equal(packed, expected)
    assert packed_operand_from_fields({"operand": 2, "depth": depth, "cols": cols, "unsigned": unsigned,
                                       "panel": 64}) == spec
    with pytest.raises(ValueError, match=f"expected {depth * cols} {'u' if unsigned else ''}int8 values"):
        spec.pack(matrix.view(np.int8 if unsigned else np.uint8))


def test_packed_operands_start_on_a_cache_line():
    """Large enough that numpy would put the array 16 bytes into its pages: each packed layout
    still starts PACKED_ALIGNMENT-aligned (a B vector never straddles two lines)."""
    weights = np.arange(512 * 576, dtype=np.float32)
    for packed in (PackedGemmA(0, 1, 512, 576, 8, 256).pack(weights),
                   PackedGemmB(0, 576, 512, 48, (1, 576)).pack(weights),
                   PackedIntegerGemmB(0, 576, 512, False).pack(weights.astype(np.int8))):
        assert packed.ctypes.data % PACKED_ALIGNMENT == 0
