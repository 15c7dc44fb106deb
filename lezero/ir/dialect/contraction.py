"""Contractions: matmul (numpy semantics) and conv2d (NCHW input, OIHW weights, groups).

Gradients are contractions again: matmul's are matmuls with a transposed operand; conv2d's input
gradient is the transposed convolution (``conv2d_input_grad``: the cotangent with zeros inserted
between rows for the strides, padded, convolved with the flipped, transposed weights, through
``transposed_conv2d``, which avg_pool2d's gradient uses too) and its weight gradient a
convolution of the input with the cotangent as the kernel (``conv2d_weight_grad``: strides and
dilations trade places).
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from lezero.ir.dialect.broadcasting import broadcast_shapes
from lezero.ir.dialect.constraints import FLOAT, NUMERIC, check_element_type, check_rank, same_element_type
from lezero.ir.dialect.numerics import accumulator_dtype
from lezero.ir.dialect.windows import check_window_attrs, window_output_size
from lezero.ir.opdef import PURE, AttrSpec, OpDef, OpError, register
from lezero.ir.types import TensorType, format_shape


def _swap_last_two(b, v):
    r = v.type.rank
    return b.transpose(v, list(range(r - 2)) + [r - 1, r - 2])


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

    def grad(self, b, op, attrs, dy):
        """``da = dy @ w^T``, ``dw = a^T @ dy`` on the operands made 2-D (a 1-D lhs as a row, a 1-D
        rhs as a column), summed over the batch dims broadcasting added, reshaped back."""
        a, w = op.operands
        a2 = b.reshape(a, (1,) + a.type.shape) if a.type.rank == 1 else a
        w2 = b.reshape(w, w.type.shape + (1,)) if w.type.rank == 1 else w
        batch = broadcast_shapes(a2.type.shape[:-2], w2.type.shape[:-2])
        dy2 = b.reshape(dy, batch + (a2.type.shape[-2], w2.type.shape[-1]))
        da = b.sum_to(b.op("lz.matmul", dy2, _swap_last_two(b, w2)), a2.type.shape)
        if w2.type.rank == 2 and a2.type.rank > 2:
            # A weight shared by every batch entry (F.linear on a sequence): one GEMM contracting
            # over the batch dims and rows together, not a batched product summed afterwards,
            # which writes a weight-sized block per batch entry (an LSTM's input projection over
            # 128 steps: 128 MB, 31 ms -> 11 ms).
            rows = b.reshape(a2, (None, a2.type.shape[-1]))
            dw = b.op("lz.matmul", _swap_last_two(b, rows), b.reshape(dy2, (None, dy2.type.shape[-1])))
        else:
            dw = b.sum_to(b.op("lz.matmul", _swap_last_two(b, a2), dy2), w2.type.shape)
        return [b.reshape(da, a.type.shape), b.reshape(dw, w.type.shape)]


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

    def grad(self, b, op, attrs, dy):
        x, w = op.operands
        for v in (x, w, dy):
            if not v.type.is_static:
                raise OpError(f"autodiff of lz.conv2d needs static shapes, got {v.type} (bind the dims first)")
        window = dict(strides=attrs.strides, pads=attrs.pads, dilations=attrs.dilations, groups=attrs.groups)
        return [conv2d_input_grad(b, dy, w, x.type.shape, **window),
                conv2d_weight_grad(b, x, dy, w.type.shape, **window)]


def conv2d_input_grad(b, dy, w, x_shape, strides, pads, dilations, groups):
    """The gradient of ``conv2d(x, w)`` to ``x`` (of shape ``x_shape``) for the cotangent ``dy``:
    the transposed convolution, with ``w``'s channels swapped within each group and its window
    flipped (``transposed_conv2d``)."""
    o, c_per_group, kh, kw = w.type.shape
    if groups == 1:
        wt = b.transpose(w, [1, 0, 2, 3])
    else:
        wt = b.reshape(w, (groups, o // groups, c_per_group, kh, kw))
        wt = b.reshape(b.transpose(wt, [0, 2, 1, 3, 4]), (x_shape[1], o // groups, kh, kw))
    if (kh, kw) != (1, 1):
        wt = b.op("lz.slice", wt, starts=[-1, -1], ends=[-kh - 1, -kw - 1], axes=[2, 3], steps=[-1, -1])
    return transposed_conv2d(b, dy, wt, x_shape, strides, pads, dilations, groups)


def transposed_conv2d(b, dy, wt, x_shape, strides, pads, dilations, groups):
    """``dx[i] = sum_k dy_up[i + pad - k*dil] w[k]``, where ``dy_up`` is ``dy`` with ``stride - 1``
    zeros inserted after each row and column: a correlation of ``dy_up`` padded by
    ``dil*(k-1) - pad`` at the start (cropped where negative), to ``H + dil*(k-1)`` rows, with the
    window ``wt`` (``C x O/groups x KH x KW``, already flipped)."""
    n, o, oh, ow = dy.type.shape
    _, _, h, wd = x_shape
    kh, kw = wt.type.shape[2:]
    (sh, sw), (pt, pl, _, _), (dh, dw) = strides, pads, dilations
    if (sh, sw) != (1, 1):
        # N x O x OH x 1 x OW x 1, padded to OH x sh x OW x sw, is OH*sh x OW*sw with the zeros in
        dy = b.reshape(dy, (n, o, oh, 1, ow, 1))
        dy = b.op("lz.pad", dy, pads=[0] * 6 + [0, 0, 0, sh - 1, 0, sw - 1])
        dy = b.reshape(dy, (n, o, oh * sh, ow * sw))
    begin_h, begin_w = dh * (kh - 1) - pt, dw * (kw - 1) - pl
    end_h, end_w = h + pt - oh * sh, wd + pl - ow * sw  # the trailing stride-1 zeros count toward it
    if any((begin_h, begin_w, end_h, end_w)):
        dy = b.op("lz.pad", dy, pads=[0, 0, begin_h, begin_w, 0, 0, end_h, end_w])
    return _conv2d(b, dy, wt, dilations=dilations, groups=groups)


def _conv2d(b, x, w, **window):
    """``lz.conv2d`` with the window attributes that differ from their defaults."""
    def differs(key, value):
        return (tuple(value) if isinstance(value, (list, tuple)) else value) != Conv2dOp.attributes[key].default
    return b.op("lz.conv2d", x, w, **{k: v for k, v in window.items() if differs(k, v)})


def conv2d_weight_grad(b, x, dy, w_shape, strides, pads, dilations, groups):
    """The gradient of ``conv2d(x, w)`` to ``w`` (of shape ``w_shape``): a convolution of ``x``
    with ``dy`` as the kernel, batch and channels swapped (per group), where the forward strides
    become dilations and the dilations strides; the window may overshoot by less than a stride
    at the end, which is sliced off."""
    n, c, h, wd = x.type.shape
    _, o, oh, ow = dy.type.shape
    _, c_per_group, kh, kw = w_shape
    g = groups
    if g == 1:
        xt = b.transpose(x, [1, 0, 2, 3])     # C x N x H x W: the N images are the channels
        dyt = b.transpose(dy, [1, 0, 2, 3])   # O x N x OH x OW: the kernel
    else:
        xt = b.transpose(b.reshape(x, (n, g, c_per_group, h, wd)), [2, 1, 0, 3, 4])
        xt = b.reshape(xt, (c_per_group, g * n, h, wd))
        dyt = b.transpose(b.reshape(dy, (n, g, o // g, oh, ow)), [1, 2, 0, 3, 4])
        dyt = b.reshape(dyt, (o, n, oh, ow))
    r = _conv2d(b, xt, dyt, strides=dilations, pads=pads, dilations=strides, groups=g)
    if r.type.shape[2:] != (kh, kw):
        r = b.op("lz.slice", r, starts=[0, 0], ends=[kh, kw], axes=[2, 3])
    return b.transpose(r, [1, 0, 2, 3])
