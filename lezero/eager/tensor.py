"""``lezero.Tensor``, composed: the core tensor (``lezero.eager.core``: state, properties,
conversions) plus its ops, installed from one table.

Most of ``Tensor``'s methods are one line that forwards to the engine (``x.exp()`` is
``apply1(lz.exp, (), float_input(x))``).  They are not written out one by one: ``TABLE`` lists
them by kind (operators, unary math, reductions, shapes, indexing, in-place ops, devices and
casts), each row a *method kind* below applied to its op.  A kind makes the method's function
once, at import, with that one line as its body, so a generated method costs exactly what the
hand-written one did: one Python frame, then the engine (PyTorch generates its bindings; tinygrad
composes ``Tensor`` from mixins).  A row that is a string is an alias: the same function under a
second name (``mm`` is ``matmul``).

Methods with real logic (argument handling, dtype rules, several ops) stay written out, grouped
by kind in ``lezero.eager.methods``; indexing is ``lezero.eager.indexing``.  ``install`` puts the
groups and the table onto ``Tensor``; a name defined twice is an error, so the table cannot
silently override a written method.
"""
from __future__ import annotations

import operator
import types

import numpy as np

from lezero.eager import dtypes as _dt
from lezero.eager.autograd import Hooks
from lezero.eager.core import Tensor, apply1, apply2, axes_of, axis_of, cast_to, reshaped, shape_args
from lezero.eager.device_arrays import FLOATS
from lezero.eager.indexing import getitem, setitem
from lezero.eager.methods import GROUPS, reduction, variance
from lezero.eager.ops import (ADD, AND, ANY_ALL, CLONE, CMP, CMP_ATTRS, DIV, EXPM1, FLOOR_DIVIDE, LOG1P, LOG_SOFTMAX,
                              MAX, MIN, MUL, OR, POW, REMAINDER, SOFTMAX, SUB, UNARY)
from lezero.eager.promotion import binary, compare, float_input
from lezero.eager.rearrange import GROUPS as REARRANGE_GROUPS
from lezero.eager.selection import GROUPS as SELECTION_GROUPS

__all__ = ["Tensor", "TABLE", "install"]


# --- the kinds of one-line method ---------------------------------------------------------------------
# Each returns a new function whose body is the method's one line; ``install`` names it.

def binary_operator(op, reverse: bool = False, true_divide: bool = False):
    """A binary operator: straight to ``apply2`` for two tensors of one dtype, else promote."""
    def method(self, other):
        if other.__class__ is Tensor and self._data.dtype is other._data.dtype and \
                not (true_divide and self._data.dtype not in FLOATS):
            return apply2(op, (), other, self) if reverse else apply2(op, (), self, other)
        return binary(op, self, other, reverse, true_divide=true_divide)
    operands = "``other`` and ``self`` (the reflected operator)" if reverse else "``self`` and ``other``"
    method.__doc__ = f"Elementwise ``lz.{op.name}`` of {operands}, in PyTorch's promoted dtype" + \
        (" (integers divide as floats)." if true_divide else ".")
    return method


def comparison_operator(predicate: str, with_none=NotImplemented):
    """``self <predicate> other`` as an operator; ``with_none`` is the answer for ``other is None``
    (``==`` is False, ``!=`` True, as Python compares with None)."""
    attrs = CMP_ATTRS[predicate]

    def method(self, other):
        if other.__class__ is Tensor and self._data.dtype is other._data.dtype:
            return apply2(CMP, attrs, self, other)
        if other is None:
            return with_none
        return compare(self, other, predicate)
    method.__doc__ = f"Elementwise ``lz.cmp`` ``{predicate}`` of ``self`` and ``other``: a bool tensor."
    return method


def compared(predicate: str):
    def method(self, other):
        return compare(self, other, predicate)
    method.__doc__ = f"Elementwise ``lz.cmp`` ``{predicate}`` of ``self`` and ``other``: a bool tensor."
    return method


def promoted(op):
    def method(self, other):
        return binary(op, self, other)
    method.__doc__ = f"Elementwise ``lz.{op.name}`` of ``self`` and ``other``, in PyTorch's promoted dtype."
    return method


def python_operator(fn, symbol: str):
    """The method form of an operator: exactly ``self <symbol> other`` (reflected operands included)."""
    def method(self, other):
        return fn(self, other)
    method.__doc__ = f"``self {symbol} other``."
    return method


def scaled_operator(fn, symbol: str):
    def method(self, other, alpha=1):
        return fn(self, other * alpha if alpha != 1 else other)
    method.__doc__ = f"``self {symbol} alpha * other``."
    return method


def unary(op):
    def method(self):
        return apply1(op, (), self)
    method.__doc__ = f"Elementwise ``lz.{op.name}``."
    return method


def float_unary(op):
    def method(self):
        return apply1(op, (), float_input(self))
    method.__doc__ = f"Elementwise ``{op.name}`` (integer tensors compute in the default float dtype)."
    return method


def float_rounding(op):
    def method(self):
        return self if self._data.dtype not in FLOATS else apply1(op, (), self)
    method.__doc__ = f"Elementwise ``lz.{op.name}`` (integer tensors are already whole: ``self``)."
    return method


def along_dim(op):
    def method(self, dim):
        return apply1(op, (("axis", axis_of(dim, self.ndim)),), float_input(self))
    method.__doc__ = f"``lz.{op.name}`` along ``dim`` (integer tensors compute in the default float dtype)."
    return method


def reduce(name: str):
    def method(self, dim=None, keepdim=False):
        return reduction(self, name, dim, keepdim)
    method.__doc__ = f"``lz.reduce_{name}`` over ``dim`` (an int, a sequence, or None for every dim)."
    return method


def variance_of(std: bool):
    def method(self, dim=None, unbiased=None, keepdim=False, correction=None):
        return variance(self, dim, unbiased, keepdim, correction, std)
    method.__doc__ = f"The {'standard deviation' if std else 'variance'} over ``dim`` (``correction`` default 1)."
    return method


def any_or_all(any_: bool):
    def method(self, dim=None, keepdim=False):
        return apply1(ANY_ALL, (("any", any_), ("axes", axes_of(dim, self.ndim)), ("keepdims", bool(keepdim))),
                      self)
    method.__doc__ = f"Whether {'any' if any_ else 'every'} element over ``dim`` is nonzero: a bool tensor."
    return method


def cast(dtype: "_dt.dtype"):
    def method(self):
        return cast_to(self, dtype)
    method.__doc__ = f"``self`` as {dtype.name} (``self`` itself when it is)."
    return method


def reshaped_like():
    def method(self, other):
        return reshaped(self, other.shape)
    method.__doc__ = "``self`` in ``other``'s shape, sharing memory (no kernel)."
    return method


def new_filled(fill):
    def method(self, *size, dtype=None):
        return self._new_like(lambda d: fill(shape_args(size), d), dtype)
    method.__doc__ = f"A new tensor of ``size`` on ``self``'s device (``np.{fill.__name__}``), of ``dtype`` or " \
                     f"``self``'s."
    return method


def inplace_operator(fn, symbol: str):
    def method(self, other):
        return self._inplace(cast_to(fn(self._old(), other), self.dtype))
    method.__doc__ = f"``self {symbol}= other`` in place (the result in ``self``'s dtype)."
    return method


def inplace_scaled(fn, symbol: str):
    def method(self, other, alpha=1):
        return self._inplace(cast_to(fn(self._old(), other * alpha if alpha != 1 else other), self.dtype))
    method.__doc__ = f"``self {symbol}= alpha * other`` in place (the result in ``self``'s dtype)."
    return method


def itself():
    def method(self):
        return self
    method.__doc__ = "``self``."
    return method


# --- the table ----------------------------------------------------------------------------------------

TABLE = {
    "arithmetic and comparison operators": {
        "__add__": binary_operator(ADD),
        "__radd__": binary_operator(ADD, reverse=True),
        "__sub__": binary_operator(SUB),
        "__rsub__": binary_operator(SUB, reverse=True),
        "__mul__": binary_operator(MUL),
        "__rmul__": binary_operator(MUL, reverse=True),
        "__truediv__": binary_operator(DIV, true_divide=True),
        "__rtruediv__": binary_operator(DIV, reverse=True, true_divide=True),
        "__floordiv__": binary_operator(FLOOR_DIVIDE),
        "__rfloordiv__": binary_operator(FLOOR_DIVIDE, reverse=True),
        "__mod__": binary_operator(REMAINDER),
        "__rmod__": binary_operator(REMAINDER, reverse=True),
        "__pow__": binary_operator(POW),
        "__rpow__": binary_operator(POW, reverse=True),
        "__eq__": comparison_operator("eq", with_none=False),
        "__ne__": comparison_operator("ne", with_none=True),
        "__lt__": comparison_operator("lt"),
        "__le__": comparison_operator("le"),
        "__gt__": comparison_operator("gt"),
        "__ge__": comparison_operator("ge"),
        "__and__": promoted(AND),
        "__rand__": "__and__",
        "__or__": promoted(OR),
        "__ror__": "__or__",
        "__neg__": unary(UNARY["neg"]),
        "__pos__": itself(),
        "__invert__": unary(UNARY["not"]),
        "__matmul__": "matmul",
        "add": scaled_operator(operator.add, "+"),
        "sub": scaled_operator(operator.sub, "-"),
        "mul": python_operator(operator.mul, "*"),
        "div": python_operator(operator.truediv, "/"),
        "pow": python_operator(operator.pow, "**"),
        "maximum": promoted(MAX),
        "minimum": promoted(MIN),
        "eq": compared("eq"),
        "ne": compared("ne"),
        "lt": compared("lt"),
        "le": compared("le"),
        "gt": compared("gt"),
        "ge": compared("ge"),
        "mm": "matmul",
        "bmm": "matmul",
        "clip": "clamp",
    },
    "unary math": {
        "exp": float_unary(UNARY["exp"]),
        "log": float_unary(UNARY["log"]),
        "sqrt": float_unary(UNARY["sqrt"]),
        "rsqrt": float_unary(UNARY["rsqrt"]),
        "tanh": float_unary(UNARY["tanh"]),
        "sigmoid": float_unary(UNARY["sigmoid"]),
        "erf": float_unary(UNARY["erf"]),
        "sin": float_unary(UNARY["sin"]),
        "cos": float_unary(UNARY["cos"]),
        "reciprocal": float_unary(UNARY["reciprocal"]),
        "log1p": float_unary(LOG1P),
        "expm1": float_unary(EXPM1),
        "relu": unary(UNARY["relu"]),
        "abs": unary(UNARY["abs"]),
        "__abs__": "abs",
        "neg": "__neg__",
        "sign": unary(UNARY["sign"]),
        "floor": float_rounding(UNARY["floor"]),
        "ceil": float_rounding(UNARY["ceil"]),
        "clone": unary(CLONE),
    },
    "reductions": {
        "prod": reduce("prod"),
        "amax": reduce("max"),
        "amin": reduce("min"),
        "var": variance_of(std=False),
        "std": variance_of(std=True),
        "any": any_or_all(True),
        "all": any_or_all(False),
        "softmax": along_dim(SOFTMAX),
        "log_softmax": along_dim(LOG_SOFTMAX),
    },
    "shape and movement": {
        "view_as": reshaped_like(),
        "reshape_as": reshaped_like(),
        "swapaxes": "transpose",
    },
    "indexing": {
        "__getitem__": getitem,
        "__setitem__": setitem,
    },
    "in-place ops": {
        "add_": inplace_scaled(operator.add, "+"),
        "sub_": inplace_scaled(operator.sub, "-"),
        "mul_": inplace_operator(operator.mul, "*"),
        "div_": inplace_operator(operator.truediv, "/"),
        "pow_": inplace_operator(operator.pow, "**"),
        "__iadd__": "add_",
        "__isub__": "sub_",
        "__imul__": "mul_",
        "__itruediv__": "div_",
    },
    "devices and dtype casts": {
        "float": cast(_dt.float32),
        "double": cast(_dt.float64),
        "half": cast(_dt.float16),
        "bfloat16": cast(_dt.bfloat16),
        "long": cast(_dt.int64),
        "int": cast(_dt.int32),
        "bool": cast(_dt.bool_),
        "new_zeros": new_filled(np.zeros),
        "new_ones": new_filled(np.ones),
        "new_empty": new_filled(np.empty),
    },
}


def install(cls: type, groups, table: dict) -> None:
    """Put the written-out ``groups`` and then the ``table``'s methods onto ``cls``."""
    def put(name: str, member) -> None:
        if name in cls.__dict__:
            raise TypeError(f"Tensor.{name} is defined twice")
        setattr(cls, name, member)

    for group in groups:
        for name, member in vars(group).items():
            if isinstance(member, types.FunctionType):
                member.__qualname__ = f"{cls.__name__}.{name}"
                put(name, member)
            elif isinstance(member, property):
                put(name, member)
    for rows in table.values():
        for name, method in rows.items():
            if isinstance(method, str):
                method = cls.__dict__[method]
            elif method.__name__ == "method":  # made by a kind above: name it for help() and tracebacks
                method.__name__, method.__qualname__ = name, f"{cls.__name__}.{name}"
            put(name, method)


install(Tensor, GROUPS + SELECTION_GROUPS + REARRANGE_GROUPS + (Hooks,), TABLE)
