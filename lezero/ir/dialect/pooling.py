"""2-D pooling over NCHW tensors: max_pool2d and avg_pool2d (ONNX's attributes, PyTorch's
ceil-mode and count_include_pad rules), and max_pool2d_grad, max pooling's gradient.

Gradients: avg_pool2d is a depthwise convolution with a window of ones, divided by each window's
count, so its gradient is the transposed convolution of ``dy / counts`` (``transposed_conv2d``).
max_pool2d sends each window's cotangent to the element that won it, which no existing op
expresses cheaply: that is ``lz.max_pool2d_grad``, a primitive of its own.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from lezero.ir.dialect.constraints import FLOAT, NUMERIC, check_element_type, check_rank, same_element_type
from lezero.ir.dialect.contraction import transposed_conv2d
from lezero.ir.dialect.numerics import accumulator_dtype, lowest
from lezero.ir.dialect.windows import check_window_attrs, window_output_size
from lezero.ir.opdef import PURE, AttrSpec, OpDef, OpError, register
from lezero.ir.types import TensorType, format_shape


def _dilations(attrs) -> tuple:
    return attrs.get("dilations", (1, 1))


POOL_OPS = frozenset({"lz.max_pool2d", "lz.avg_pool2d"})
POOL_GRAD_OPS = frozenset({"lz.max_pool2d_grad"})


class PoolGeometry(NamedTuple):
    """The static sizes a code generator needs for a pooling op: input ``N C H W``, output
    ``OH OW``, window ``KH KW``, strides, pads (top, left, bottom, right), dilations."""

    n: int
    c: int
    h: int
    w: int
    oh: int
    ow: int
    kh: int
    kw: int
    sh: int
    sw: int
    pt: int
    pl: int
    pb: int
    pr: int
    dh: int
    dw: int


def pool_geometry(op) -> PoolGeometry:
    """The ``PoolGeometry`` of a pooling op (or ``lz.max_pool2d_grad``, whose output sizes are its
    ``dy``'s) with static shapes."""
    attrs = op.definition.attrs(op)
    n, c, h, w = op.operands[0].type.shape
    oh, ow = op.definition.output_hw((h, w), attrs)
    return PoolGeometry(n, c, h, w, oh, ow, *attrs.kernel, *attrs.strides, *attrs.pads, *_dilations(attrs))


class Pool2dOp(OpDef):
    """What both pools share: NCHW operand, window attributes, output shape, window extraction.

    ``kernel`` is ``[KH, KW]``; ``strides`` default ``[1, 1]`` (as ONNX, not PyTorch's
    ``stride = kernel``); ``pads`` are ``[top, left, bottom, right]``.
    """

    operands = ("input",)
    traits = frozenset({PURE})
    domain = FLOAT
    attributes = {
        "kernel": AttrSpec("i64_array"),
        "strides": AttrSpec("i64_array", (1, 1)),
        "pads": AttrSpec("i64_array", (0, 0, 0, 0)),
        "ceil_mode": AttrSpec("bool", False),
    }

    def infer(self, operand_types, attrs):
        (x,) = operand_types
        check_rank(x, 4, "input", "N x C x H x W")
        check_element_type(x, self.domain)
        check_window_attrs(2, kernel=attrs.kernel, strides=attrs.strides, pads=attrs.pads,
                           dilations=_dilations(attrs))
        n, c, h, w = x.shape
        return [x.with_shape((n, c) + self.output_hw((h, w), attrs))]

    def output_hw(self, hw, attrs) -> tuple:
        (pt, pl, pb, pr), dil = attrs.pads, _dilations(attrs)
        return tuple(window_output_size(size, k, s, begin, end, d, attrs.ceil_mode, dim=2 + i)
                     for i, (size, k, s, begin, end, d)
                     in enumerate(zip(hw, attrs.kernel, attrs.strides, (pt, pl), (pb, pr), dil)))

    def windows(self, x: np.ndarray, attrs, fill, overhang=None) -> np.ndarray:
        """``N x C x OH x OW x KH x KW`` windows of ``x`` padded with ``fill``; the part of a
        ceil-mode window hanging past the end padding holds ``overhang`` (default ``fill``)."""
        out_hw = self.output_hw(x.shape[2:], attrs)
        pt, pl, pb, pr = attrs.pads
        dh, dw = _dilations(attrs)
        (kh, kw), (sh, sw) = attrs.kernel, attrs.strides
        eh, ew = dh * (kh - 1) + 1, dw * (kw - 1) + 1
        xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=fill)
        extra_h = max(0, (out_hw[0] - 1) * sh + eh - xp.shape[2])
        extra_w = max(0, (out_hw[1] - 1) * sw + ew - xp.shape[3])
        xp = np.pad(xp, ((0, 0), (0, 0), (0, extra_h), (0, extra_w)),
                    constant_values=fill if overhang is None else overhang)
        win = sliding_window_view(xp, (eh, ew), axis=(2, 3))[:, :, ::sh, ::sw, ::dh, ::dw]
        return win[:, :, :out_hw[0], :out_hw[1]]


@register
class MaxPool2dOp(Pool2dOp):
    """``lz.max_pool2d {kernel, strides, pads, dilations, ceil_mode}``: padding never wins."""

    name = "lz.max_pool2d"
    domain = NUMERIC
    attributes = {**Pool2dOp.attributes, "dilations": AttrSpec("i64_array", (1, 1))}
    summary = "2-D max pooling"

    def reference(self, attrs, x):
        return self.windows(x, attrs, lowest(x.dtype)).max(axis=(-2, -1))

    def grad(self, b, op, attrs, dy):
        return [b.op("lz.max_pool2d_grad", op.operands[0], dy,
                     **{key: attrs[key] for key in self.attributes})]


@register
class AvgPool2dOp(Pool2dOp):
    """``lz.avg_pool2d {kernel, strides, pads, count_include_pad, ceil_mode}``.

    Each window's sum is divided by its count of input elements, plus its padding elements when
    ``count_include_pad``; the part of a ceil-mode window past the end padding never counts.
    """

    name = "lz.avg_pool2d"
    attributes = {**Pool2dOp.attributes, "count_include_pad": AttrSpec("bool", False)}
    summary = "2-D average pooling"

    def reference(self, attrs, x):
        acc = accumulator_dtype(x.dtype)
        sums = self.windows(x.astype(acc, copy=False), attrs, 0).sum(axis=(-2, -1))
        # the divisor: ones over the input, padding counted as one or zero, overhang as zero
        ones = np.ones((1, 1) + x.shape[2:], acc)
        counts = self.windows(ones, attrs, 1 if attrs.count_include_pad else 0, 0).sum(axis=(-2, -1))
        with np.errstate(invalid="ignore", divide="ignore"):
            return sums / counts

    def counts(self, hw, attrs) -> np.ndarray:
        """Each window's divisor, ``1 x 1 x OH x OW``."""
        ones = np.ones((1, 1) + tuple(hw), np.float64)
        return self.windows(ones, attrs, 1 if attrs.count_include_pad else 0, 0).sum(axis=(-2, -1))

    def grad(self, b, op, attrs, dy):
        """``dy / counts``, spread over each window: the transposed convolution of every plane
        with a window of ones."""
        x = op.operands[0]
        if not x.type.is_static:
            raise OpError(f"autodiff of lz.avg_pool2d needs static shapes, got {x.type} (bind the dims first)")
        n, c, h, w = x.type.shape
        oh, ow = dy.type.shape[2:]
        et = x.type.element_type
        counts = self.counts((h, w), attrs).astype(et.numpy_dtype)
        planes = b.reshape(b.div(dy, b.constant(counts, TensorType(counts.shape, et))), (n * c, 1, oh, ow))
        kh, kw = attrs.kernel
        ones = b.constant(np.ones((1, 1, kh, kw), et.numpy_dtype), TensorType((1, 1, kh, kw), et))
        dx = transposed_conv2d(b, planes, ones, (n * c, 1, h, w), attrs.strides, attrs.pads, (1, 1), 1)
        return [b.reshape(dx, x.type.shape)]


@register
class MaxPool2dGradOp(Pool2dOp):
    """``lz.max_pool2d_grad(x, dy) {kernel, strides, pads, dilations, ceil_mode}``: the gradient of
    ``lz.max_pool2d`` (same attributes) to its input: each ``dy[n, c, oh, ow]`` is added to the
    element of ``x`` that won window ``(oh, ow)``, as PyTorch picks it: the first maximum in
    row-major window order, the last nan if the window holds one, the first element inside the
    image if all are -inf (padding never wins).  The result has ``x``'s type."""

    name = "lz.max_pool2d_grad"
    operands = ("input", "output_grad")
    attributes = MaxPool2dOp.attributes
    summary = "gradient of 2-D max pooling"

    def infer(self, operand_types, attrs):
        x, dy = operand_types
        same_element_type(operand_types)
        (y,) = super().infer([x], attrs)
        check_rank(dy, 4, "output_grad", "N x C x OH x OW")
        if any(a is not None and b is not None and a != b for a, b in zip(y.shape, dy.shape)):
            raise OpError(f"output_grad shape {format_shape(dy.shape)} is not the pooled shape "
                          f"{format_shape(y.shape)}")
        return [x]

    def winners(self, x: np.ndarray, attrs):
        """Per window, the flat index (into ``H x W``) of the element that won it, and whether
        any element of the image is in the window."""
        n, c, h, w = x.shape
        win = self.windows(x, attrs, lowest(x.dtype))                   # N C OH OW KH KW
        inside = self.windows(np.ones((1, 1, h, w), bool), attrs, False)
        rows = self.windows(np.arange(h * w).reshape(1, 1, h, w) // w, attrs, -1)
        cols = self.windows(np.arange(h * w).reshape(1, 1, h, w) % w, attrs, -1)
        oh, ow, kh, kw = win.shape[2:]
        flat = win.reshape(n, c, oh, ow, kh * kw)
        inside = np.broadcast_to(inside.reshape(1, 1, oh, ow, kh * kw), flat.shape)
        nan = np.isnan(flat) & inside
        best = np.where(inside & ~nan, flat, lowest(x.dtype)).max(axis=-1, keepdims=True)
        first_max = np.argmax(inside & (flat == best), axis=-1)
        last_nan = kh * kw - 1 - np.argmax(nan[..., ::-1], axis=-1)
        k = np.where(nan.any(axis=-1), last_nan, first_max)
        position = (rows * w + cols).reshape(1, 1, oh, ow, kh * kw)
        winner = np.take_along_axis(np.broadcast_to(position, flat.shape), k[..., None], axis=-1)[..., 0]
        return winner, inside.any(axis=-1)

    def reference(self, attrs, x, dy):
        n, c, h, w = x.shape
        winner, any_inside = self.winners(x, attrs)
        dx = np.zeros((n * c, h * w), accumulator_dtype(x.dtype))
        planes = np.broadcast_to(np.arange(n * c).reshape(n, c, 1, 1), winner.shape)
        np.add.at(dx, (planes[any_inside], winner[any_inside]), dy[any_inside])
        return dx.reshape(x.shape)
