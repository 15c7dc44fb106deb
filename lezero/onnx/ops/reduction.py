"""Reductions (ReduceSum, ReduceMean, ..., ReduceLogSumExp) and ArgMax/ArgMin.

Each ReduceX is an elementwise prologue, an ``lz.reduce_*`` and an epilogue (ReduceL2 is
``sqrt(reduce_sum(x * x))``).  ``axes`` comes from the attribute (older opsets) or the input;
empty axes reduce everything, or nothing with ``noop_with_empty_axes`` (the prologue and epilogue
still apply, as in the reference).
"""
from __future__ import annotations

import numpy as np

from lezero.ir.types import I1, UI8
from lezero.onnx.registry import converter
from lezero.onnx.ops.common import axes_of, axis_of

# op -> (lz reduction, prologue, epilogue); the prologue and epilogue take (ctx, value).
_REDUCTIONS = {
    "ReduceSum": ("lz.reduce_sum", None, None),
    "ReduceMean": ("lz.reduce_mean", None, None),
    "ReduceMax": ("lz.reduce_max", None, None),
    "ReduceMin": ("lz.reduce_min", None, None),
    "ReduceProd": ("lz.reduce_prod", None, None),
    "ReduceL1": ("lz.reduce_sum", lambda ctx, x: ctx.op("lz.abs", x), None),
    "ReduceL2": ("lz.reduce_sum", lambda ctx, x: ctx.op("lz.mul", x, x), lambda ctx, y: _sqrt(ctx, y)),
    "ReduceSumSquare": ("lz.reduce_sum", lambda ctx, x: ctx.op("lz.mul", x, x), None),
    "ReduceLogSum": ("lz.reduce_sum", None, lambda ctx, y: ctx.op("lz.log", y)),
}


def _sqrt(ctx, y):
    if ctx.dtype(y).is_float:
        return ctx.op("lz.sqrt", y)
    # integer ReduceL2: the square root in float64, truncated back (as the reference's astype)
    from lezero.ir.types import F64
    return ctx.cast(ctx.op("lz.sqrt", ctx.cast(y, F64)), ctx.dtype(y))


def reduction_axes(ctx, x, axes):
    """The normalized ``axes`` to reduce, or None for 'reduce nothing' (noop_with_empty_axes)."""
    noop = ctx.attr("noop_with_empty_axes", 0)
    if not axes:
        return None if noop else list(range(ctx.rank(x)))
    return sorted(axes_of(ctx, axes, ctx.rank(x)))


@converter(*_REDUCTIONS, "ReduceLogSumExp")
def reduce_axes_attribute(ctx):
    x = ctx.input(0)
    return reduce(ctx, x, ctx.attr("axes", None))


# ``axes`` became an input in opset 13 for ReduceSum, in opset 18 for the others.
@converter("ReduceSum", since=13)
@converter(*(op for op in (*_REDUCTIONS, "ReduceLogSumExp") if op != "ReduceSum"), since=18)
def reduce_axes_input(ctx):
    x = ctx.input(0)
    return reduce(ctx, x, ctx.ints(1, "axes"))


def reduce(ctx, x, axes):
    keepdims = bool(ctx.attr("keepdims", 1))
    axes = reduction_axes(ctx, x, axes)
    if ctx.op_type == "ReduceLogSumExp":
        return _log_sum_exp(ctx, x, axes, keepdims)
    name, prologue, epilogue = _REDUCTIONS[ctx.op_type]
    boolean = ctx.dtype(x) == I1
    if boolean:  # max/min of i1 (opset 20): as 0/1 bytes
        if name not in ("lz.reduce_max", "lz.reduce_min"):
            raise ctx.unsupported(f"{ctx.op_type} of booleans")
        x = ctx.cast(x, UI8)
    y = prologue(ctx, x) if prologue else x
    if axes is not None:
        y = ctx.op(name, y, axes=axes, keepdims=keepdims)
    y = epilogue(ctx, y) if epilogue else y
    return ctx.cast(y, I1) if boolean else y


def _log_sum_exp(ctx, x, axes, keepdims):
    """``log(sum(exp(x - m))) + m`` with ``m`` the maximum (0 where it is infinite)."""
    if axes is None:
        return ctx.op("lz.log", ctx.op("lz.exp", x))
    m = ctx.op("lz.reduce_max", x, axes=axes, keepdims=True)
    finite = ctx.op("lz.cmp", ctx.op("lz.abs", m), ctx.scalar(np.inf, m), predicate="ne")
    m = ctx.op("lz.select", finite, m, ctx.scalar(0, m))
    s = ctx.op("lz.reduce_sum", ctx.op("lz.exp", ctx.op("lz.sub", x, m)), axes=axes, keepdims=True)
    y = ctx.op("lz.add", ctx.op("lz.log", s), m)
    if not keepdims:
        y = ctx.reshape(y, [d for i, d in enumerate(x.type.shape) if i not in axes])
    return y


@converter("ArgMax", "ArgMin")
def arg_extremum(ctx):
    x = ctx.input(0)
    axis = axis_of(ctx, ctx.attr("axis", 0), ctx.rank(x))
    keepdims = bool(ctx.attr("keepdims", 1))
    last = ctx.attr("select_last_index", 0)
    et = ctx.dtype(x)
    if ctx.op_type == "ArgMin":
        # order-reversing without overflow: ~x = -x - 1 for integers (and i1)
        x = ctx.op("lz.neg", x) if et.is_float else ctx.op("lz.not", x)
    if last:
        n = x.type.shape[axis]
        if n is None:
            raise ctx.dynamic("select_last_index along a dynamic dim")
        x = ctx.op("lz.slice", x, starts=[-1], ends=[-n - 1], axes=[axis], steps=[-1])
        index = ctx.op("lz.argmax", x, axis=axis, keepdims=keepdims)
        return ctx.op("lz.sub", ctx.scalar(n - 1, index), index)
    return ctx.op("lz.argmax", x, axis=axis, keepdims=keepdims)
