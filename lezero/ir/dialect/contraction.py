"""Contractions: matmul (numpy semantics) and conv2d (NCHW input, OIHW weights, groups)."""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from lezero.ir.dialect.broadcasting import broadcast_shapes
from lezero.ir.dialect.constraints import FLOAT, NUMERIC, check_element_type, check_rank, same_element_type
from lezero.ir.dialect.numerics import accumulator_dtype
from lezero.ir.dialect.windows import check_window_attrs, window_output_size
from lezero.ir.opdef import PURE, AttrSpec, OpDef, OpError, register
from lezero.ir.types import TensorType, format_shape


@register
class MatmulOp(OpDef):
    """``lz.matmul(a, b)`` as ``numpy.matmul``: a 1-D lhs is a row, a 1-D rhs a column (the added
    dim is dropped again), leading batch dims broadcast."""

    name = "lz.matmul"
    operands = ("lhs", "rhs")
    traits = frozenset({PURE})
    summary = "matrix product"

    def infer(self, operand_types, attrs):
        a, b = operand_types
        et = same_element_type(operand_types)
        check_element_type(a, NUMERIC, "operands")
        if a.rank == 0 or b.rank == 0:
            raise OpError(f"operands must have rank at least 1, got {a} and {b}")
        a_shape = a.shape if a.rank > 1 else (1,) + a.shape
        b_shape = b.shape if b.rank > 1 else b.shape + (1,)
        k_a, k_b = a_shape[-1], b_shape[-2]
        if k_a is not None and k_b is not None and k_a != k_b:
            raise OpError(f"contracting dimensions differ: {format_shape(a.shape)} has {k_a} columns, "
                          f"{format_shape(b.shape)} has {k_b} rows")
        batch = broadcast_shapes(a_shape[:-2], b_shape[:-2], what="batch shapes")
        rows = a_shape[-2:-1] if a.rank > 1 else ()
        cols = b_shape[-1:] if b.rank > 1 else ()
        return [TensorType(batch + rows + cols, et)]

    def reference(self, attrs, a, b):
        acc = accumulator_dtype(a.dtype)
        return np.matmul(a.astype(acc, copy=False), b.astype(acc, copy=False))


def conv2d_output_shape(x: TensorType, w: TensorType, attrs) -> tuple:
    """``N x O x OH x OW``, checking channels and groups against the weights."""
    n, c, h, wd = x.shape
    o, c_per_group, kh, kw = w.shape
    g = attrs.groups
    if g <= 0:
        raise OpError(f"attribute 'groups' must be positive, got {g}")
    if c is not None and c_per_group is not None and c != c_per_group * g:
        raise OpError(f"input has {c} channels but weights {format_shape(w.shape)} with groups = {g} "
                      f"expect {c_per_group * g}")
    if o is not None and o % g:
        raise OpError(f"{o} output channels are not divisible by groups = {g}")
    sh, sw = attrs.strides
    pt, pl, pb, pr = attrs.pads
    dh, dw = attrs.dilations
    oh = None if kh is None else window_output_size(h, kh, sh, pt, pb, dh, dim=2)
    ow = None if kw is None else window_output_size(wd, kw, sw, pl, pr, dw, dim=3)
    return (n, o, oh, ow)


@register
class Conv2dOp(OpDef):
    """``lz.conv2d(x, w) {strides, pads, dilations, groups}``: 2-D cross-correlation.

    ``x`` is ``N x C x H x W``, ``w`` is ``O x C/groups x KH x KW``; ``pads`` are
    ``[top, left, bottom, right]`` (zero padding).
    """

    name = "lz.conv2d"
    operands = ("input", "weight")
    traits = frozenset({PURE})
    attributes = {
        "strides": AttrSpec("i64_array", (1, 1)),
        "pads": AttrSpec("i64_array", (0, 0, 0, 0)),
        "dilations": AttrSpec("i64_array", (1, 1)),
        "groups": AttrSpec("i64", 1),
    }
    summary = "2-D convolution"

    def infer(self, operand_types, attrs):
        x, w = operand_types
        check_rank(x, 4, "input", "N x C x H x W")
        check_rank(w, 4, "weight", "O x C/groups x KH x KW")
        et = same_element_type(operand_types)
        check_element_type(x, FLOAT, "operands")
        check_window_attrs(2, strides=attrs.strides, pads=attrs.pads, dilations=attrs.dilations)
        return [TensorType(conv2d_output_shape(x, w, attrs), et)]

    def reference(self, attrs, x, w):
        acc = accumulator_dtype(x.dtype)
        x, w = x.astype(acc, copy=False), w.astype(acc, copy=False)
        n, c = x.shape[:2]
        o, c_per_group, kh, kw = w.shape
        g = attrs.groups
        sh, sw = attrs.strides
        pt, pl, pb, pr = attrs.pads
        dh, dw = attrs.dilations
        xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
        # im2col as a strided view: N x C x OH x OW x KH x KW
        windows = sliding_window_view(xp, (dh * (kh - 1) + 1, dw * (kw - 1) + 1), axis=(2, 3))
        windows = windows[:, :, ::sh, ::sw, ::dh, ::dw]
        oh, ow = windows.shape[2:4]
        windows = windows.reshape(n, g, c_per_group, oh, ow, kh, kw)
        wg = w.reshape(g, o // g, c_per_group, kh, kw)
        out = np.einsum("ngchwij,gocij->ngohw", windows, wg, optimize=True)
        return out.reshape(n, o, oh, ow)
