"""Operands of one dtype: PyTorch's type promotion for tensors, Python numbers and numpy data.

A binary op on two tensors of one dtype goes straight to ``apply2``; anything else comes here
(``binary``, ``compare``): numbers become rank-0 tensors of the tensor's dtype when their category
(bool < integer < float) does not go above it, dimensioned tensors win over rank-0 ones within a
category, lists become tensors on the other operand's device, and arrays of other libraries (torch,
numpy, DLPack) tensors sharing their memory (a host array moves to a cuda operand's device).
"""
from __future__ import annotations

import numbers

import numpy as np

from lezero.eager import device_arrays as _dev
from lezero.eager import dtypes as _dt
from lezero.eager.core import Tensor, apply2, cast_to, wrap
from lezero.eager.creation import tensor
from lezero.eager.device_arrays import CATEGORY, FLOATS
from lezero.eager.dispatch import EagerOp
from lezero.eager.interop import storage_of
from lezero.eager.ops import CMP, CMP_ATTRS

_new = object.__new__


def is_number(v) -> bool:
    return isinstance(v, (numbers.Number, np.bool_)) and not isinstance(v, complex)


def scalar(value, np_dtype, on=None) -> Tensor:
    """``value`` as a rank-0 tensor of ``np_dtype``, on the device of the array ``on`` (default
    the CPU)."""
    t = _new(Tensor)
    a = np.asarray(value, np_dtype)
    t._data = a if on is None else _dev.like(a, on)
    return t


def scalar_like(value, a) -> Tensor:
    """``value`` as a rank-0 tensor of the array ``a``'s dtype, on its device."""
    t = _new(Tensor)
    t._data = np.asarray(value, a.dtype) if a.__class__ is np.ndarray else _dev.scalar_like(value, a)
    return t


def operands(x: Tensor, other, true_divide: bool = False):
    """``x`` and ``other`` (a tensor, a number, a numpy array) as tensors of one dtype, PyTorch's
    promotion; ``true_divide`` makes integers floats."""
    if isinstance(other, Tensor):
        if x._data.dtype is other._data.dtype and not (true_divide and x._data.dtype not in FLOATS):
            return x, other
        a, b = x.dtype, other.dtype
        dims, zero = [], []
        (dims if x._data.ndim else zero).append(a)
        (dims if other._data.ndim else zero).append(b)
        target = _dt.result_type(dims, zero)
        if true_divide and not target.is_floating_point:
            target = _dt.get_default_dtype()
        return cast_to(x, target), cast_to(other, target)
    if is_number(other):
        a = x._data
        kind = CATEGORY[a.dtype]
        cat = _dt.scalar_category(other)
        if cat <= kind and not (true_divide and kind < 2):
            return x, scalar_like(other, a)
        target = _dt.get_default_dtype() if (cat == 2 or true_divide) else _dt.int64
        x = cast_to(x, target)
        return x, scalar_like(other, x._data)
    if isinstance(other, (list, tuple)):
        return operands(x, tensor(other, device=_dev.device_of(x._data)), true_divide)
    array = storage_of(other, "an operator")  # torch, numpy, DLPack, __array__: shared, not copied
    if array is None:
        return None
    if array.__class__ is np.ndarray and x._data.__class__ is not np.ndarray:
        array = _dev.like(array, x._data)  # host arrays go to the tensor's device, as numbers do
    return operands(x, wrap(array), true_divide)


def binary(op: EagerOp, x: Tensor, other, reverse: bool = False, attrs: tuple = (), true_divide=False):
    """``op`` on ``x`` and ``other`` promoted to one dtype (``NotImplemented`` for other types, so
    Python tries the reflected operator)."""
    pair = operands(x, other, true_divide)
    if pair is None:
        return NotImplemented
    a, b = pair
    if reverse:
        a, b = b, a
    return apply2(op, attrs, a, b)


def compare(x: Tensor, other, predicate: str):
    pair = operands(x, other)
    if pair is None:
        return NotImplemented
    return apply2(CMP, CMP_ATTRS[predicate], *pair)


def float_input(x: Tensor) -> Tensor:
    """Integer inputs of float functions (exp, sqrt, ...) compute in the default float, as PyTorch."""
    if x._data.dtype in FLOATS:
        return x
    return cast_to(x, _dt.get_default_dtype())
