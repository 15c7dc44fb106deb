"""``DenseElementsAttr``: an ONNX tensor's read-only raw data is kept without a copy, anything that can
still change is copied; its hash reads a sample of the elements, its equality every byte; its splat
test reads slices of it."""
from __future__ import annotations

import numpy as np

from lezero.ir.attributes import HASHED_ELEMENTS, SPLAT_TEST_ELEMENTS, DenseElementsAttr
from lezero.ir.types import F32, TensorType


def test_read_only_bytes_are_kept_and_anything_mutable_is_copied():
    raw = np.arange(24, dtype=np.float32).tobytes()
    t = TensorType((2, 3, 4), F32)
    onnx_like = np.frombuffer(raw, np.float32).reshape(2, 3, 4)  # what onnx's to_array returns
    assert np.shares_memory(DenseElementsAttr(t, onnx_like).array, onnx_like)
    mutable = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    kept = DenseElementsAttr(t, mutable)
    mutable[0, 0, 0] = 99.0
    assert kept.array[0, 0, 0] == 0.0 and not kept.array.flags.writeable
    transposed = np.frombuffer(raw, np.float32).reshape(4, 3, 2).transpose()  # read-only, not contiguous
    attr = DenseElementsAttr(t, transposed)
    assert not np.shares_memory(attr.array, transposed)
    np.testing.assert_array_equal(attr.array, transposed)


def test_tensors_differing_where_the_hash_does_not_read_stay_apart():
    n = 4 * HASHED_ELEMENTS
    t = TensorType((n,), F32)
    a = np.zeros(n, np.float32)
    b = a.copy()
    b[1] = 1.0  # the hash reads every 4th element: not this one
    first, second, again = DenseElementsAttr(t, a), DenseElementsAttr(t, b), DenseElementsAttr(t, a.copy())
    assert hash(first) == hash(second) and first != second
    assert hash(first) == hash(again) and first == again
    assert len({first: 0, second: 1, again: 2}) == 2


def test_a_splat_is_found_slice_by_slice():
    """Every element of every slice is compared (a difference inside a later slice, not at the ends,
    is seen); a nan splat is one; the answer is the same when asked again."""
    n = 3 * SPLAT_TEST_ELEMENTS + 5
    t = TensorType((n,), F32)
    splat = np.full(n, 0.25, np.float32)
    assert DenseElementsAttr(t, splat).splat_value() == 0.25
    differs = splat.copy()
    differs[2 * SPLAT_TEST_ELEMENTS + 7] = 0.5
    attr = DenseElementsAttr(t, differs)
    assert attr.splat_value() is None and attr.splat_value() is None
    assert np.isnan(DenseElementsAttr(t, np.full(n, np.nan, np.float32)).splat_value())
    nan_inside = splat.copy()
    nan_inside[SPLAT_TEST_ELEMENTS] = np.nan
    assert DenseElementsAttr(t, nan_inside).splat_value() is None
