"""Indexing a tensor: ``x[key]`` and ``x[key] = value``, as PyTorch reads a key.

Ints, slices (positive steps), ``None`` and ``...`` make a view (numpy's own view of the memory,
``lezero.eager.core.view_of``), recorded for autograd as one ``lz.slice`` and a reshape; one
integer-array index is an ``lz.gather`` (a copy; its indices checked here, so an error names the
dim); a boolean mask over leading dims becomes the indices of its true elements.  The common
case, ints and slices only, is parsed by ``_basic_index`` without the general walk.
``x[key] = value`` writes into the memory; when autograd records it, it is ``x[key].copy_(value)``
(an in-place op on a view: PyTorch's semantics).
"""
from __future__ import annotations

import numpy as np

from lezero.eager import device_arrays as _dev
from lezero.eager.core import Mode, Tensor, apply2, reshaped, view_of, wrap
from lezero.eager.core import as_inputs
from lezero.eager.device_arrays import kind, storage
from lezero.eager.ops import INDEX
from lezero.eager.promotion import is_number

# PyTorch's refusal to write through a view whose elements share memory (``expand``)
OVERLAP = ("unsupported operation: more than one element of the written-to tensor refers to a single memory "
           "location. Please clone() the tensor before performing the operation.")


def slice_bounds(k: slice, size: int) -> tuple:
    """``(start, stop, step, length)`` of slice ``k`` over ``size`` elements (PyTorch: no negative steps)."""
    start, stop, step = k.indices(size)
    if step <= 0:
        raise ValueError("step must be greater than zero")
    return start, stop, step, len(range(start, stop, step))


def setitem(self: Tensor, key, value) -> None:
    """``x[key] = value``: written into ``x``'s memory; recorded (``self`` or ``value`` requires
    grad) as ``x[key].copy_(value)`` when the key makes a view, refused for an index array."""
    if Mode.grad and (self.requires_grad or (isinstance(value, Tensor) and value.requires_grad)):
        if any(_is_index_array(k) and not _is_int_index(k) for k in (key if isinstance(key, tuple) else (key,))):
            raise RuntimeError("in-place assignment through an index array to a tensor that requires grad (or of a "
                               "value that does) is not supported: use lz.no_grad(), or build the result out of place")
        getitem(self, key).copy_(value)
        return
    if self._strided and _dev.overlaps(self._data):
        raise RuntimeError(OVERLAP)
    if isinstance(value, Tensor):
        value = value._data
    key = _numpy_key(key)
    a = self._data
    if a.__class__ is np.ndarray:
        a[key] = _dev.host(value) if _dev.is_torch(value) else value
    else:
        a[key] = value if _dev.is_torch(value) or is_number(value) else \
            _dev.like(np.asarray(value, _dev.numpy_dtype(a)), a)
    self._version += 1


def _numpy_key(key):
    if isinstance(key, Tensor):
        return key._data
    if isinstance(key, tuple):
        return tuple(k._data if isinstance(k, Tensor) else k for k in key)
    return key


def _is_int_index(k) -> bool:
    if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
        return True
    array = k._data if isinstance(k, Tensor) else k if isinstance(k, np.ndarray) else None
    return array is not None and array.ndim == 0 and kind(array) in "iu"


def _is_index_array(k) -> bool:
    return isinstance(k, (Tensor, np.ndarray, list))


def _basic_index(x: Tensor, key: tuple):
    """Indexing by ints and slices only (the common case, parsed lean), or None."""
    shape = x._data.shape
    if len(key) > len(shape):
        return None
    starts, ends, axes, steps, out = [], [], [], [], []
    for dim, k in enumerate(key):
        size = shape[dim]
        if k.__class__ is int:
            i = k + size if k < 0 else k
            if not 0 <= i < size:
                raise IndexError(f"index {k} is out of bounds for dimension {dim} with size {size}")
            starts.append(i), ends.append(i + 1), axes.append(dim), steps.append(1)
        elif k.__class__ is slice:
            start, stop, step, n = slice_bounds(k, size)
            if n != size:
                starts.append(start), ends.append(stop if n else start), axes.append(dim), steps.append(step)
            out.append(n)
        else:
            return None
    out.extend(shape[len(key):])
    if not starts:
        return x
    # ``...`` at the end: all ints give a 0-d view, not a numpy scalar
    return view_of(x, x._data[key + (Ellipsis,)], INDEX, True, (("starts", tuple(starts)), ("ends", tuple(ends)),
                                                   ("axes", tuple(axes)), ("steps", tuple(steps)),
                                                   ("gather_axis", None), ("shape", tuple(out))))


def getitem(x: Tensor, key) -> Tensor:
    """ints, slices (positive steps), None, Ellipsis, and one integer-array or boolean-mask index."""
    if not isinstance(key, tuple):
        key = (key,)
    result = _basic_index(x, key)
    if result is not None:
        return result
    key = as_inputs(key, "indexing")  # torch and DLPack index arrays and masks as tensors
    # a boolean mask over the leading dims: the indices of its true elements, gathered
    for i, k in enumerate(key):
        mask = k._data if isinstance(k, Tensor) else k if isinstance(k, np.ndarray) else None
        if mask is not None and kind(mask) == "b":
            if any(_is_index_array(other) for j, other in enumerate(key) if j != i) or \
                    any(kk is Ellipsis or kk is None for kk in key[:i]):
                raise IndexError("a boolean mask index combines only with slices after it")
            lead = x.shape[i:i + mask.ndim]
            if mask.shape != lead:
                raise IndexError(f"the shape of the mask {list(mask.shape)} at index {i} does not match the shape "
                                 f"of the indexed tensor {list(x.shape)}")
            flat = x.reshape(x.shape[:i] + (-1,) + x.shape[i + mask.ndim:])
            positions = wrap(_dev.like(np.flatnonzero(_dev.host(mask)), x._data))
            return flat[key[:i] + (positions,) + key[i + 1:]]
    explicit = sum(1 for k in key if k is not None and k is not Ellipsis)
    if explicit > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    expanded = []
    for k in key:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (x.ndim - explicit))
        else:
            expanded.append(k)
    if Ellipsis not in key:
        expanded.extend([slice(None)] * (x.ndim - explicit))
    starts, ends, axes, steps = [], [], [], []
    shape: list = []
    gather_axis, index_array, sliced_shape = None, None, list(x.shape)
    kinds = ["int" if _is_int_index(k) else "array" if _is_index_array(k) else "other" for k in expanded]
    view_key = []  # the key as numpy (and torch) read it, for a view
    dim = 0
    for k in expanded:
        if k is None:
            shape.append(1)
            view_key.append(None)
            continue
        size = x.shape[dim]
        if _is_int_index(k):
            i = int(k)
            if not -size <= i < size:
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {size}")
            i %= size
            starts.append(i), ends.append(i + 1), axes.append(dim), steps.append(1)
            sliced_shape[dim] = 1
            view_key.append(i)
        elif isinstance(k, slice):
            start, stop, step, n = slice_bounds(k, size)
            if n != size:
                starts.append(start), ends.append(stop if n else start), axes.append(dim), steps.append(step)
            sliced_shape[dim] = n
            shape.append(n)
            view_key.append(k)
        elif _is_index_array(k):
            if index_array is not None:
                raise IndexError("lezero supports one integer-array index per indexing expression")
            array = _dev.host(k._data) if isinstance(k, Tensor) else np.asarray(k)
            if array.dtype.kind not in "iu":
                raise IndexError(f"tensors used as indices must be long, int or bool tensors, got {array.dtype}")
            if array.size and (array.min() < -size or array.max() >= size):
                bad = array[(array < -size) | (array >= size)].flat[0]
                raise IndexError(f"index {bad} is out of bounds for dimension {dim} with size {size}")
            index_array = storage(array, np.int64)
            gather_axis = dim
            shape.extend(array.shape)
        else:
            raise IndexError(f"only integers, slices, None, Ellipsis and integer or boolean tensors are valid "
                             f"indices, got {type(k).__name__}")
        dim += 1
    advanced = [i for i, kind in enumerate(kinds) if kind != "other"]
    if index_array is not None and "other" in kinds[advanced[0]:advanced[-1]]:
        # numpy and PyTorch move the indexed dims to the front when an int and an array index
        # are apart: not supported
        raise IndexError("an integer-array index combines with integer indices only next to them")
    attrs = (("starts", tuple(starts)), ("ends", tuple(ends)), ("axes", tuple(axes)), ("steps", tuple(steps)),
             ("gather_axis", gather_axis), ("shape", tuple(shape)))
    if index_array is None:
        if not starts:
            return reshaped(x, tuple(shape)) if tuple(shape) != x.shape else x
        return view_of(x, x._data[(*view_key, Ellipsis)], INDEX, True, attrs)  # ``...``: 0-d stays an array
    return apply2(INDEX, attrs, x, wrap(_dev.like(index_array, x._data)))
