"""Elementwise operators: math, comparisons, logic, activations, casts."""
from __future__ import annotations

import math

import numpy as np

from lezero.ir.types import F64, I1
import lezero.onnx.element_types as element_types
from lezero.onnx.registry import converter
from lezero.onnx.ops.common import binary

# One lz op each.
_UNARY = {
    "Abs": "lz.abs", "Neg": "lz.neg", "Exp": "lz.exp", "Log": "lz.log", "Sqrt": "lz.sqrt", "Tanh": "lz.tanh",
    "Sigmoid": "lz.sigmoid", "Relu": "lz.relu", "Erf": "lz.erf", "Sin": "lz.sin", "Cos": "lz.cos",
    "Tan": "lz.tan", "Asin": "lz.asin", "Acos": "lz.acos", "Atan": "lz.atan", "Sinh": "lz.sinh",
    "Cosh": "lz.cosh", "Asinh": "lz.asinh", "Acosh": "lz.acosh", "Atanh": "lz.atanh",
    "Floor": "lz.floor", "Ceil": "lz.ceil", "Round": "lz.round", "Sign": "lz.sign",
    "Reciprocal": "lz.reciprocal", "Not": "lz.not", "BitwiseNot": "lz.not",
}


@converter(*_UNARY)
def unary(ctx):
    return ctx.op(_UNARY[ctx.op_type], ctx.input(0))


_BINARY = {
    "Add": "lz.add", "Sub": "lz.sub", "Mul": "lz.mul", "Div": "lz.div", "And": "lz.and", "Or": "lz.or",
    "Xor": "lz.xor", "BitwiseAnd": "lz.and", "BitwiseOr": "lz.or", "BitwiseXor": "lz.xor",
}


@converter(*_BINARY)
def binary_op(ctx):
    return binary(ctx, _BINARY[ctx.op_type], ctx.input(0), ctx.input(1))


_COMPARE = {"Equal": "eq", "Less": "lt", "Greater": "gt", "LessOrEqual": "le", "GreaterOrEqual": "ge"}


@converter(*_COMPARE)
def compare(ctx):
    return binary(ctx, "lz.cmp", ctx.input(0), ctx.input(1), predicate=_COMPARE[ctx.op_type])


@converter("Max", "Min", "Sum", "Mean")
def variadic(ctx):
    """Folds the inputs pairwise (each broadcasting); Mean divides the sum by their count."""
    name = {"Max": "lz.max", "Min": "lz.min", "Sum": "lz.add", "Mean": "lz.add"}[ctx.op_type]
    values = [v for v in ctx.inputs if v is not None]
    if not values:
        raise ctx.error("requires at least one input")
    out = values[0]
    for v in values[1:]:
        out = binary(ctx, name, out, v)
    if ctx.op_type == "Mean" and len(values) > 1:
        out = ctx.op("lz.div", out, ctx.scalar(len(values), out))
    return out


@converter("Pow")
def pow_(ctx):
    """The result has the base's type; the exponent may have another (computed in float64 when
    the base is an integer and the exponent a float, then truncated, as the reference does)."""
    x, y = ctx.input(0), ctx.input(1)
    xt, yt = ctx.dtype(x), ctx.dtype(y)
    if xt == yt:
        return ctx.op("lz.pow", x, y)
    if xt.is_float:
        return ctx.op("lz.pow", x, ctx.cast(y, xt))
    if yt.is_float:
        return ctx.cast(ctx.op("lz.pow", ctx.cast(x, F64), ctx.cast(y, F64)), xt)
    return ctx.op("lz.pow", x, ctx.cast(y, xt))


@converter("Mod")
def mod(ctx):
    """``fmod=1``: C's remainder (sign of the dividend); ``fmod=0``: the sign of the divisor."""
    x, y = ctx.input(0), ctx.input(1)
    fmod = ctx.attr("fmod", 0)
    r = binary(ctx, "lz.rem", x, y)
    if fmod:
        return r
    zero = ctx.scalar(0, r)
    adjust = ctx.op("lz.and", ctx.op("lz.cmp", r, zero, predicate="ne"),
                    ctx.op("lz.cmp", ctx.op("lz.cmp", r, zero, predicate="lt"),
                           ctx.op("lz.cmp", y, zero, predicate="lt"), predicate="ne"))
    return ctx.op("lz.select", adjust, ctx.op("lz.add", r, y), r)


@converter("BitShift")
def bit_shift(ctx):
    direction = ctx.attr("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise ctx.error(f"attribute 'direction' must be LEFT or RIGHT, got {direction!r}")
    name = "lz.shift_left" if direction == "LEFT" else "lz.shift_right"
    return binary(ctx, name, ctx.input(0), ctx.input(1))


@converter("Where")
def where(ctx):
    return ctx.op("lz.select", ctx.input(0), ctx.input(1), ctx.input(2))


@converter("Identity")
def identity(ctx):
    return ctx.input(0)


@converter("Cast")
def cast(ctx):
    ctx.ignore_attrs("saturate", "round_mode")
    to = ctx.attr("to")
    et = element_types.from_onnx(to)
    if et is None:
        raise ctx.unsupported(f"cast to {element_types.onnx_type_name(to)}, which lezero does not support")
    return ctx.cast(ctx.input(0), et)


@converter("CastLike")
def cast_like(ctx):
    ctx.ignore_attrs("saturate", "round_mode")
    return ctx.cast(ctx.input(0), ctx.dtype(ctx.input(1)))


@converter("Clip")
def clip(ctx):
    x = ctx.input(0)
    lo, hi = ctx.optional(1), ctx.optional(2)
    if lo is not None:
        x = binary(ctx, "lz.max", x, lo)
    if hi is not None:
        x = binary(ctx, "lz.min", x, hi)
    return x


# --- activations ----------------------------------------------------------------------------------

def _where_positive(ctx, x, positive, negative, predicate="gt"):
    return ctx.op("lz.select", ctx.op("lz.cmp", x, ctx.scalar(0, x), predicate=predicate), positive, negative)


def _mul(ctx, x, factor: float):
    return x if factor == 1 else ctx.op("lz.mul", x, ctx.scalar(factor, x))


def _expm1(ctx, x):
    return ctx.op("lz.sub", ctx.op("lz.exp", x), ctx.scalar(1, x))


@converter("Elu")
def elu(ctx):
    x = ctx.input(0)
    alpha = ctx.attr("alpha", 1.0)
    return _where_positive(ctx, x, x, _mul(ctx, _expm1(ctx, x), alpha))


@converter("Selu")
def selu(ctx):
    x = ctx.input(0)
    alpha = ctx.attr("alpha", 1.67326319217681884765625)
    gamma = ctx.attr("gamma", 1.05070102214813232421875)
    return _mul(ctx, _where_positive(ctx, x, x, _mul(ctx, _expm1(ctx, x), alpha)), gamma)


@converter("Celu")
def celu(ctx):
    x = ctx.input(0)
    alpha = ctx.attr("alpha", 1.0)
    zero = ctx.scalar(0, x)
    negative = _mul(ctx, _expm1(ctx, _mul(ctx, x, 1 / alpha)), alpha)
    return ctx.op("lz.add", ctx.op("lz.max", x, zero), ctx.op("lz.min", negative, zero))


@converter("LeakyRelu")
def leaky_relu(ctx):
    x = ctx.input(0)
    return _where_positive(ctx, x, x, _mul(ctx, x, ctx.attr("alpha", 0.01)), predicate="ge")


@converter("PRelu")
def prelu(ctx):
    x, slope = ctx.input(0), ctx.input(1)
    shape, slope_shape = x.type.shape, slope.type.shape
    if len(slope_shape) == 1 and len(shape) > 2 and slope_shape[0] == shape[1] != shape[-1]:
        # one slope per channel, as opset 6 meant it (models converted from it keep the 1-D slope)
        slope = ctx.reshape(slope, [-1] + [1] * (len(shape) - 2))
    return _where_positive(ctx, x, x, binary(ctx, "lz.mul", x, slope), predicate="ge")


@converter("ThresholdedRelu")
def thresholded_relu(ctx):
    x = ctx.input(0)
    alpha = ctx.attr("alpha", 1.0)
    keep = ctx.op("lz.cmp", x, ctx.scalar(alpha, x), predicate="gt")
    return ctx.op("lz.select", keep, x, ctx.scalar(0, x))


def _hard_sigmoid(ctx, x, alpha, beta):
    y = ctx.op("lz.add", _mul(ctx, x, alpha), ctx.scalar(beta, x))
    return ctx.op("lz.max", ctx.op("lz.min", y, ctx.scalar(1, x)), ctx.scalar(0, x))


@converter("HardSigmoid")
def hard_sigmoid(ctx):
    return _hard_sigmoid(ctx, ctx.input(0), ctx.attr("alpha", 0.2), ctx.attr("beta", 0.5))


@converter("HardSwish")
def hard_swish(ctx):
    x = ctx.input(0)
    return ctx.op("lz.mul", x, _hard_sigmoid(ctx, x, 1 / 6, 0.5))


def softplus_of(ctx, x):
    """``log(1 + e^x)`` as ``max(x, 0) + log(1 + e^-|x|)``: no overflow for large x."""
    tail = ctx.op("lz.log", ctx.op("lz.add", ctx.scalar(1, x), ctx.op("lz.exp", ctx.op("lz.neg", ctx.op("lz.abs", x)))))
    return ctx.op("lz.add", ctx.op("lz.max", x, ctx.scalar(0, x)), tail)


@converter("Softplus")
def softplus(ctx):
    return softplus_of(ctx, ctx.input(0))


@converter("Softsign")
def softsign(ctx):
    x = ctx.input(0)
    return ctx.op("lz.div", x, ctx.op("lz.add", ctx.scalar(1, x), ctx.op("lz.abs", x)))


@converter("Mish")
def mish(ctx):
    x = ctx.input(0)
    return ctx.op("lz.mul", x, ctx.op("lz.tanh", softplus_of(ctx, x)))


@converter("Swish")
def swish(ctx):
    x = ctx.input(0)
    return ctx.op("lz.mul", x, ctx.op("lz.sigmoid", _mul(ctx, x, ctx.attr("alpha", 1.0))))


@converter("Gelu")
def gelu(ctx):
    approximate = ctx.attr("approximate", "none")
    if approximate not in ("none", "tanh"):
        raise ctx.error(f"attribute 'approximate' must be 'none' or 'tanh', got {approximate!r}")
    return ctx.op("lz.gelu", ctx.input(0), approximate=approximate)


@converter("Shrink")
def shrink(ctx):
    x = ctx.input(0)
    bias, lambd = ctx.attr("bias", 0.0), ctx.attr("lambd", 0.5)
    below = ctx.op("lz.cmp", x, ctx.scalar(-lambd, x), predicate="lt")
    above = ctx.op("lz.cmp", x, ctx.scalar(lambd, x), predicate="gt")
    zero = ctx.scalar(0, x)
    return ctx.op("lz.select", below, ctx.op("lz.add", x, ctx.scalar(bias, x)),
                  ctx.op("lz.select", above, ctx.op("lz.sub", x, ctx.scalar(bias, x)), zero))


@converter("IsNaN")
def is_nan(ctx):
    x = ctx.input(0)
    return ctx.op("lz.cmp", x, x, predicate="ne")


@converter("IsInf")
def is_inf(ctx):
    x = ctx.input(0)
    positive, negative = ctx.attr("detect_positive", 1), ctx.attr("detect_negative", 1)
    if positive and negative:
        return ctx.op("lz.cmp", ctx.op("lz.abs", x), ctx.scalar(math.inf, x), predicate="eq")
    if positive:
        return ctx.op("lz.cmp", x, ctx.scalar(math.inf, x), predicate="eq")
    if negative:
        return ctx.op("lz.cmp", x, ctx.scalar(-math.inf, x), predicate="eq")
    return ctx.op("lz.broadcast_to", ctx.constant(np.zeros((), bool), I1), shape=ctx.shape(x))


@converter("Binarizer", domain="ai.onnx.ml")
def binarizer(ctx):
    x = ctx.input(0)
    above = ctx.op("lz.cmp", x, ctx.scalar(ctx.attr("threshold", 0.0), x), predicate="gt")
    return ctx.cast(above, ctx.dtype(x))
