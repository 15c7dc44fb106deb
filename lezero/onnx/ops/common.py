"""Helpers the converters share: axes, sizes, broadcasting binary ops, scaling."""
from __future__ import annotations

import math


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


def scaled(ctx, x, factor: float):
    """``x * factor``, or ``x`` when the factor is 1."""
    return x if factor == 1 else ctx.op("lz.mul", x, ctx.scalar(factor, x))
