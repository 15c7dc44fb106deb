"""Composite ops: each has a direct numpy reference and a ``decompose`` into primitive lz ops,
which the decompose pass uses (so composites need no gradient rule or lowering of their own)."""
from __future__ import annotations

import numpy as np

from lezero.ir.dialect.axes import normalize_axis
from lezero.ir.dialect.broadcasting import broadcasts_to
from lezero.ir.dialect.constraints import FLOAT, check_element_type, check_rank, same_element_type
from lezero.ir.dialect.numerics import accumulator_dtype
from lezero.ir.opdef import COMPOSITE, PURE, AttrSpec, OpDef, OpError, register
from lezero.ir.types import TensorType, format_shape

_COMPOSITE = frozenset({PURE, COMPOSITE})


def _scalar(builder, value: float, like: TensorType):
    """A rank-0 constant of ``like``'s element type (it broadcasts against anything)."""
    et = like.element_type
    return builder.constant(np.asarray(value, et.numpy_dtype), TensorType((), et))


class SoftmaxFamily(OpDef):
    """What softmax and log_softmax share: one float operand, ``axis`` (default -1)."""

    operands = ("input",)
    traits = _COMPOSITE
    attributes = {"axis": AttrSpec("i64", -1)}

    def infer(self, operand_types, attrs):
        (x,) = operand_types
        check_element_type(x, FLOAT)
        normalize_axis(attrs.axis, x.rank)
        return [x]

    @staticmethod
    def shifted(builder, x, axis):
        """``x - reduce_max(x)`` along ``axis``: exp of it cannot overflow."""
        m = builder.op("lz.reduce_max", x, axes=[axis], keepdims=True)
        return builder.op("lz.sub", x, m)


@register
class SoftmaxOp(SoftmaxFamily):
    """``lz.softmax {axis = -1}``: ``exp(x - max) / sum(exp(x - max))`` along ``axis``."""

    name = "lz.softmax"
    summary = "normalized exponential"

    def reference(self, attrs, x):
        w = x.astype(accumulator_dtype(x.dtype), copy=False)
        e = np.exp(w - np.max(w, axis=attrs.axis, keepdims=True))
        return e / np.sum(e, axis=attrs.axis, keepdims=True)

    def decompose(self, builder, op, attrs):
        e = builder.op("lz.exp", self.shifted(builder, op.operands[0], attrs.axis))
        s = builder.op("lz.reduce_sum", e, axes=[attrs.axis], keepdims=True)
        return [builder.op("lz.div", e, s)]


@register
class LogSoftmaxOp(SoftmaxFamily):
    """``lz.log_softmax {axis = -1}``: ``(x - max) - log(sum(exp(x - max)))`` along ``axis``."""

    name = "lz.log_softmax"
    summary = "logarithm of softmax"

    def reference(self, attrs, x):
        w = x.astype(accumulator_dtype(x.dtype), copy=False)
        shifted = w - np.max(w, axis=attrs.axis, keepdims=True)
        return shifted - np.log(np.sum(np.exp(shifted), axis=attrs.axis, keepdims=True))

    def decompose(self, builder, op, attrs):
        shifted = self.shifted(builder, op.operands[0], attrs.axis)
        s = builder.op("lz.reduce_sum", builder.op("lz.exp", shifted), axes=[attrs.axis], keepdims=True)
        return [builder.op("lz.sub", shifted, builder.op("lz.log", s))]


@register
class LayerNormOp(OpDef):
    """``lz.layer_norm(x, scale, bias) {axis = -1, epsilon = 1e-5}``: normalize over dims
    ``axis..rank-1`` (biased variance), then ``* scale + bias``; scale and bias broadcast to those
    dims."""

    name = "lz.layer_norm"
    operands = ("input", "scale", "bias")
    traits = _COMPOSITE
    attributes = {"axis": AttrSpec("i64", -1), "epsilon": AttrSpec("f64", 1e-5)}
    summary = "layer normalization"

    def infer(self, operand_types, attrs):
        x, scale, bias = operand_types
        same_element_type(operand_types)
        check_element_type(x, FLOAT, "operands")
        axis = normalize_axis(attrs.axis, x.rank)
        normalized = x.shape[axis:]
        for what, t in (("scale", scale), ("bias", bias)):
            if not broadcasts_to(t.shape, normalized):
                raise OpError(f"{what} shape {format_shape(t.shape)} does not broadcast to the normalized "
                              f"shape {format_shape(normalized)}")
        return [x]

    def reference(self, attrs, x, scale, bias):
        acc = accumulator_dtype(x.dtype)
        w = x.astype(acc, copy=False)
        axes = tuple(range(normalize_axis(attrs.axis, x.ndim), x.ndim))
        mean = np.mean(w, axis=axes, keepdims=True)
        var = np.mean(np.square(w - mean), axis=axes, keepdims=True)
        y = (w - mean) / np.sqrt(var + acc.type(attrs.epsilon))
        return y * scale.astype(acc, copy=False) + bias.astype(acc, copy=False)

    def decompose(self, builder, op, attrs):
        x, scale, bias = op.operands
        axes = list(range(normalize_axis(attrs.axis, x.type.rank), x.type.rank))
        mean = builder.op("lz.reduce_mean", x, axes=axes, keepdims=True)
        centered = builder.op("lz.sub", x, mean)
        var = builder.op("lz.reduce_mean", builder.op("lz.mul", centered, centered), axes=axes, keepdims=True)
        inv_std = builder.op("lz.rsqrt", builder.op("lz.add", var, _scalar(builder, attrs.epsilon, x.type)))
        normalized = builder.op("lz.mul", centered, inv_std)
        return [builder.op("lz.add", builder.op("lz.mul", normalized, scale), bias)]


@register
class BatchNormOp(OpDef):
    """``lz.batch_norm(x, scale, bias, mean, var) {epsilon = 1e-5}``, inference form: channels are
    dim 1 of ``x``; the four parameters are 1-D of size C.
    ``(x - mean) / sqrt(var + epsilon) * scale + bias``."""

    name = "lz.batch_norm"
    operands = ("input", "scale", "bias", "mean", "var")
    traits = _COMPOSITE
    attributes = {"epsilon": AttrSpec("f64", 1e-5)}
    summary = "batch normalization with running statistics"

    def infer(self, operand_types, attrs):
        x, *params = operand_types
        same_element_type(operand_types)
        check_element_type(x, FLOAT, "operands")
        if x.rank < 2:
            raise OpError(f"input must have rank at least 2 (N x C x ...), got {x}")
        channels = x.shape[1]
        for name, t in zip(self.operands[1:], params):
            check_rank(t, 1, name, "C")
            if None not in (t.shape[0], channels) and t.shape[0] != channels:
                raise OpError(f"{name} has {t.shape[0]} elements but the input has {channels} channels")
        return [x]

    def reference(self, attrs, x, scale, bias, mean, var):
        acc = accumulator_dtype(x.dtype)
        column = (-1,) + (1,) * (x.ndim - 2)
        scale, bias, mean, var = (p.astype(acc, copy=False).reshape(column) for p in (scale, bias, mean, var))
        return (x.astype(acc, copy=False) - mean) / np.sqrt(var + acc.type(attrs.epsilon)) * scale + bias

    def decompose(self, builder, op, attrs):
        x, scale, bias, mean, var = op.operands
        # fold the per-channel parameters first: y = x * factor + (bias - mean * factor)
        factor = builder.op("lz.mul", scale, builder.op(
            "lz.rsqrt", builder.op("lz.add", var, _scalar(builder, attrs.epsilon, x.type))))
        shift = builder.op("lz.sub", bias, builder.op("lz.mul", mean, factor))
        column = [-1] + [1] * (x.type.rank - 2)
        factor = builder.op("lz.reshape", factor, shape=column)
        shift = builder.op("lz.reshape", shift, shape=column)
        return [builder.op("lz.add", builder.op("lz.mul", x, factor), shift)]
