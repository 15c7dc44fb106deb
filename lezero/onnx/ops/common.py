"""Helpers the converters share: axes, broadcasting, scalars, static shapes."""
from __future__ import annotations

import math

import numpy as np

from lezero.ir.types import F64


def axis_of(ctx, axis: int, rank: int, what: str = "axis") -> int:
    if not -rank <= axis < rank:
        raise ctx.error(f"{what} {axis} is out of range for rank {rank}")
    return axis % rank


def axes_of(ctx, axes, rank: int, what: str = "axes") -> list[int]:
    out = [axis_of(ctx, int(a), rank, what) for a in axes]
    if len(set(out)) != len(out):
        raise ctx.error(f"{what} {list(axes)} name an axis twice")
    return out


def product(dims) -> int:
    return math.prod(int(d) for d in dims)


def binary(ctx, name: str, a, b, **attrs):
    """A broadcasting lz binary op; ONNX's type constraints already make the types agree."""
    if ctx.dtype(a) != ctx.dtype(b):
        raise ctx.error(f"operands have different element types ({ctx.dtype(a)} and {ctx.dtype(b)})")
    return ctx.op(name, a, b, **attrs)


def add(ctx, a, b):
    return ctx.op("lz.add", a, b)


def sub(ctx, a, b):
    return ctx.op("lz.sub", a, b)


def mul(ctx, a, b):
    return ctx.op("lz.mul", a, b)


def div(ctx, a, b):
    return ctx.op("lz.div", a, b)


def scaled(ctx, x, factor: float):
    """``x * factor``, or ``x`` when the factor is 1."""
    return x if factor == 1 else ctx.op("lz.mul", x, ctx.scalar(factor, x))


def compute_type(et):
    """The float type arithmetic on ``et`` runs in when it is not a float (integers in f64)."""
    return et if et.is_float else F64


def iota(ctx, shape, axis: int, dtype=np.int64):
    """A constant holding each element's index along ``axis`` (other dims of size 1)."""
    view = [1] * len(shape)
    view[axis] = shape[axis]
    return ctx.constant(np.arange(shape[axis], dtype=dtype).reshape(view))


def float_type(ctx, v):
    et = ctx.dtype(v)
    if not et.is_float:
        raise ctx.unsupported(f"needs a float input, got {v.type}")
    return et

