"""``PackedGemmA``: a constant A laid out as the GEMM's packed slivers, checked element by element
against the layout its docstring states (odd row counts, a shallower last K block, groups)."""
from __future__ import annotations

import numpy as np
import pytest

from lezero.codegen.packed_operands import PackedGemmA


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
