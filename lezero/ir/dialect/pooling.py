"""2-D pooling over NCHW tensors: max_pool2d and avg_pool2d (ONNX's attributes, PyTorch's
ceil-mode and count_include_pad rules)."""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from lezero.ir.dialect.constraints import FLOAT, NUMERIC, check_element_type, check_rank
from lezero.ir.dialect.numerics import accumulator_dtype, lowest
from lezero.ir.dialect.windows import check_window_attrs, window_output_size
from lezero.ir.opdef import PURE, AttrSpec, OpDef, register


def _dilations(attrs) -> tuple:
    return attrs.get("dilations", (1, 1))


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
