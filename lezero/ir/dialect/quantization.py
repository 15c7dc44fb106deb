"""Quantization: ``quantize``, ``dequantize``, ``dynamic_quantize``, ``matmul_integer`` and
``conv_integer``, as ONNX's QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger
and ConvInteger compute them.

A quantized tensor is its 8-bit integers (``i8`` or ``ui8``) with a float ``scale`` and an integer
``zero_point`` of the same element type, per tensor (rank 0) or per channel (rank 1, one per slice
of ``axis``): ``real = (q - zero_point) * scale``.  Symmetric quantization is the zero point 0.
Quantizing divides by the scale, rounds half to even and saturates to the integer type, as ONNX's
reference does (so a kernel that multiplies by a reciprocal instead would round differently).

All five are composites: each has its own numpy reference (the oracle) and decomposes into
primitive ops (``div``, ``round``, ``max``/``min``, ``cast``, an ``i32`` ``matmul``), which every
backend lowers; the exact integer contraction is the i32 matmul, which wraps as int32 does.
``conv_integer`` decomposes into 8-bit im2col and ``matmul_integer``; the CPU keeps both whole
(its int8 GEMM, and for a conv that GEMM over an implicit im2col: codegen/llvm/integer_conv.py),
other backends run the decomposition.
"""
from __future__ import annotations

import numpy as np

from lezero.ir.dialect.axes import normalize_axis
from lezero.ir.dialect.constraints import FLOAT, Domain, check_element_type, check_rank
from lezero.ir.dialect.contraction import Conv2dOp, conv2d_output_shape
from lezero.ir.dialect.windows import check_window_attrs
from lezero.ir.opdef import COMPOSITE, PURE, AttrSpec, OpDef, OpError, lookup, register
from lezero.ir.types import F32, I32, UI8, TensorType, format_shape

_COMPOSITE = frozenset({PURE, COMPOSITE})
EIGHT_BIT = Domain(frozenset({"int"}), "element type i8 or ui8")
RANGES = {"i8": (-128, 127), "ui8": (0, 255)}


def _check_eight_bit(t: TensorType, what: str):
    if t.element_type.name not in RANGES:
        raise OpError(f"{what} must have {EIGHT_BIT.description}, got {t.element_type}")
    return t.element_type


def _check_quantization_params(x: TensorType, scale: TensorType, zero: TensorType, axis: int) -> None:
    """``scale`` and ``zero_point`` are both rank 0, or both rank 1 with one entry per slice of
    ``axis`` of ``x``."""
    if scale.shape != zero.shape:
        raise OpError(f"scale {format_shape(scale.shape)} and zero_point {format_shape(zero.shape)} must have the "
                      "same shape")
    if scale.rank > 1:
        raise OpError(f"scale must be rank 0 (per tensor) or rank 1 (per channel), got {scale}")
    if scale.rank == 1:
        channels = x.shape[normalize_axis(axis, x.rank)]
        if None not in (channels, scale.shape[0]) and channels != scale.shape[0]:
            raise OpError(f"per-channel scale has {scale.shape[0]} entries but axis {axis} of "
                          f"{format_shape(x.shape)} has {channels}")


def _along_axis(array: np.ndarray, rank: int, axis: int) -> np.ndarray:
    """A per-tensor (rank 0) or per-channel (rank 1) parameter shaped to broadcast along ``axis``."""
    if array.ndim == 0:
        return array
    view = [1] * rank
    view[normalize_axis(axis, rank)] = array.shape[0]
    return array.reshape(view)


def _along_axis_ir(b, value, rank: int, axis: int):
    if value.type.rank == 0:
        return value
    view = [1] * rank
    view[normalize_axis(axis, rank)] = value.type.shape[0]
    return b.op("lz.reshape", value, shape=view)


def _scalar(b, value, element_type):
    return b.constant(np.asarray(value, element_type.numpy_dtype), TensorType((), element_type))


def quantize_reference(x: np.ndarray, scale: np.ndarray, zero: np.ndarray) -> np.ndarray:
    """``saturate(round_half_even(x / scale) + zero)`` in ``x``'s float type (ONNX's order)."""
    lo, hi = RANGES["i8" if zero.dtype == np.int8 else "ui8"]
    q = np.round(x / scale.astype(x.dtype)) + zero.astype(x.dtype)
    return np.clip(q, lo, hi).astype(zero.dtype)


def _quantize_ir(b, x, scale, zero, axis: int):
    et = x.type.element_type
    lo, hi = RANGES[zero.type.element_type.name]
    scale = _along_axis_ir(b, b.op("lz.cast", scale, to=et) if scale.type.element_type != et else scale,
                           x.type.rank, axis)
    zero_float = _along_axis_ir(b, b.op("lz.cast", zero, to=et), x.type.rank, axis)
    q = b.op("lz.add", b.op("lz.round", b.op("lz.div", x, scale)), zero_float)
    q = b.op("lz.min", b.op("lz.max", q, _scalar(b, lo, et)), _scalar(b, hi, et))
    return b.op("lz.cast", q, to=zero.type.element_type)


class AffineQuantizationOp(OpDef):
    """What quantize and dequantize share: a tensor, its scale and zero point (per tensor, or per
    slice of ``axis``, default 1: the channels of NCHW or the columns of a matrix)."""

    operands = ("input", "scale", "zero_point")
    traits = _COMPOSITE
    attributes = {"axis": AttrSpec("i64", 1)}


@register
class QuantizeOp(AffineQuantizationOp):
    """``lz.quantize(x, scale, zero_point) {axis = 1}``: ``x`` (float) to the integer type of
    ``zero_point``; ``scale`` has ``x``'s element type."""

    name = "lz.quantize"
    summary = "affine quantization to 8-bit integers"

    def infer(self, operand_types, attrs):
        x, scale, zero = operand_types
        check_element_type(x, FLOAT, "input")
        if scale.element_type != x.element_type:
            raise OpError(f"scale must have the input's element type {x.element_type}, got {scale.element_type}")
        out = _check_eight_bit(zero, "zero_point")
        _check_quantization_params(x, scale, zero, attrs.axis)
        return [x.with_element_type(out)]

    def reference(self, attrs, x, scale, zero):
        return quantize_reference(x, _along_axis(scale, x.ndim, attrs.axis), _along_axis(zero, x.ndim, attrs.axis))

    def decompose(self, b, op, attrs):
        return [_quantize_ir(b, *op.operands, attrs.axis)]


@register
class DequantizeOp(AffineQuantizationOp):
    """``lz.dequantize(q, scale, zero_point) {axis = 1}``: ``(q - zero_point) * scale`` in the
    scale's float type; ``q`` is i8, ui8 or i32 (a bias), ``zero_point`` of ``q``'s type."""

    name = "lz.dequantize"
    summary = "8-bit (or i32) integers back to float"

    def infer(self, operand_types, attrs):
        q, scale, zero = operand_types
        if q.element_type.name not in (*RANGES, "i32"):
            raise OpError(f"input must have element type i8, ui8 or i32, got {q.element_type}")
        if zero.element_type != q.element_type:
            raise OpError(f"zero_point must have the input's element type {q.element_type}, got {zero.element_type}")
        check_element_type(scale, FLOAT, "scale")
        _check_quantization_params(q, scale, zero, attrs.axis)
        return [q.with_element_type(scale.element_type)]

    def reference(self, attrs, q, scale, zero):
        scale = _along_axis(scale, q.ndim, attrs.axis)
        zero = _along_axis(zero, q.ndim, attrs.axis)
        return (q.astype(scale.dtype) - zero.astype(scale.dtype)) * scale

    def decompose(self, b, op, attrs):
        q, scale, zero = op.operands
        et, rank = scale.type.element_type, q.type.rank
        centered = b.op("lz.sub", b.op("lz.cast", q, to=et), _along_axis_ir(b, b.op("lz.cast", zero, to=et), rank,
                                                                              attrs.axis))
        return [b.op("lz.mul", centered, _along_axis_ir(b, scale, rank, attrs.axis))]


@register
class DynamicQuantizeOp(OpDef):
    """``lz.dynamic_quantize(x)``: ``x`` (f32) to ui8 with the scale and zero point of its own
    range stretched to hold 0 (ONNX's DynamicQuantizeLinear): ``scale = (max - min) / 255``,
    ``zero_point = saturate(round(-min / scale))``; results ``(q, scale, zero_point)``."""

    name = "lz.dynamic_quantize"
    operands = ("input",)
    num_results = 3
    traits = _COMPOSITE
    summary = "quantization to ui8 with the tensor's own range"

    def infer(self, operand_types, attrs):
        (x,) = operand_types
        if x.element_type != F32:
            raise OpError(f"input must have element type f32, got {x.element_type}")
        return [x.with_element_type(UI8), TensorType((), F32), TensorType((), UI8)]

    def reference(self, attrs, x):
        high, low = np.float32(max(np.max(x, initial=0), 0)), np.float32(min(np.min(x, initial=0), 0))
        scale = np.float32((high - low) / np.float32(255)) if high != low else np.float32(1 / 255)
        zero = np.asarray(np.clip(np.round(np.float32(0) - low / scale), 0, 255), np.uint8)
        return quantize_reference(x, np.asarray(scale), zero), np.asarray(scale), zero

    def decompose(self, b, op, attrs):
        (x,) = op.operands
        zero = _scalar(b, 0, F32)
        high = b.op("lz.max", _whole_range(b, "lz.reduce_max", x), zero)
        low = b.op("lz.min", _whole_range(b, "lz.reduce_min", x), zero)
        span = b.op("lz.select", b.op("lz.cmp", high, low, predicate="eq"), _scalar(b, 1, F32),
                    b.op("lz.sub", high, low))
        scale = b.op("lz.div", span, _scalar(b, 255, F32))
        initial = b.op("lz.sub", zero, b.op("lz.div", low, scale))
        zero_point = b.op("lz.cast", b.op("lz.min", b.op("lz.max", b.op("lz.round", initial), zero),
                                          _scalar(b, 255, F32)), to=UI8)
        return [_quantize_ir(b, x, scale, zero_point, 0), scale, zero_point]


def _whole_range(b, reduce: str, x):
    """``reduce`` over every dim of ``x``: along the last dim first (a line per row: the rows are
    work items a CPU kernel runs in parallel), then over what is left (one small line)."""
    if x.type.rank < 2:
        return b.op(reduce, x, axes=list(range(x.type.rank)))
    rows = b.op(reduce, x, axes=[x.type.rank - 1])
    return b.op(reduce, rows, axes=list(range(x.type.rank - 1)))


def _check_integer_operands(first, second):
    """Both ``(what, operand, zero_point)`` are 8-bit with a zero point of their type; the first's
    zero point is per tensor."""
    for what, t, z in (first, second):
        et = _check_eight_bit(t, what)
        if z.element_type != et:
            raise OpError(f"{what}_zero_point must have the {what}'s element type {et}, got {z.element_type}")
    what, _, zero = first
    if zero.rank != 0:
        raise OpError(f"{what}_zero_point must be rank 0 (per tensor), got {zero}")


def _centered_i32(b, v, zero, rank: int, axis: int):
    return b.op("lz.sub", b.op("lz.cast", v, to=I32), _along_axis_ir(b, b.op("lz.cast", zero, to=I32), rank, axis))


@register
class MatmulIntegerOp(OpDef):
    """``lz.matmul_integer(a, b, a_zero_point, b_zero_point)``: ``(a - a_zero) @ (b - b_zero)``
    in i32 (numpy matmul semantics, as ``lz.matmul``); ``a`` and ``b`` are i8 or ui8, each zero
    point of its operand's type, ``a``'s per tensor, ``b``'s per tensor or one per column (a 2-D
    or batched ``b``'s last dim)."""

    name = "lz.matmul_integer"
    operands = ("lhs", "rhs", "lhs_zero_point", "rhs_zero_point")
    traits = _COMPOSITE
    summary = "8-bit integer matrix product accumulating in i32"

    def infer(self, operand_types, attrs):
        a, w, a_zero, w_zero = operand_types
        _check_integer_operands(("lhs", a, a_zero), ("rhs", w, w_zero))
        if w_zero.rank > 1 or (w_zero.rank == 1 and w.rank < 2):
            raise OpError(f"rhs_zero_point must be rank 0, or rank 1 (per column) for a rhs of rank 2 or more, "
                          f"got {w_zero} for {w}")
        if w_zero.rank == 1 and None not in (w_zero.shape[0], w.shape[-1]) and w_zero.shape[0] != w.shape[-1]:
            raise OpError(f"per-column rhs_zero_point has {w_zero.shape[0]} entries but the rhs "
                          f"{format_shape(w.shape)} has {w.shape[-1]} columns")
        return lookup("lz.matmul").infer([a.with_element_type(I32), w.with_element_type(I32)], attrs)

    def reference(self, attrs, a, w, a_zero, w_zero):
        product = np.matmul(a.astype(np.int64) - a_zero.astype(np.int64), w.astype(np.int64) - w_zero.astype(np.int64))
        return product.astype(np.int32)  # wraps as int32 accumulation does

    def decompose(self, b, op, attrs):
        a, w, a_zero, w_zero = op.operands
        return [b.op("lz.matmul", _centered_i32(b, a, a_zero, a.type.rank, 0),
                     _centered_i32(b, w, w_zero, w.type.rank, -1))]


@register
class ConvIntegerOp(OpDef):
    """``lz.conv_integer(x, w, x_zero_point, w_zero_point) {strides, pads, dilations, groups}``:
    ``conv2d(x - x_zero, w - w_zero)`` in i32 (ONNX's ConvInteger, the window attributes as
    ``lz.conv2d``'s); ``x`` and ``w`` are i8 or ui8, each zero point of its operand's type, ``x``'s
    per tensor, ``w``'s per tensor or one per output channel.  The padding holds ``x_zero`` (a real
    0), so padded taps add nothing.

    It decomposes into im2col in 8 bits (one ``lz.gather`` of each image's values by a constant
    table of window positions, the padding's taps selected to the zero point; rows ``(n, oh, ow)``,
    columns ``(c, kh, kw)``) and one ``lz.matmul_integer`` per group against the ``(c, kh, kw) x
    out`` weight matrix (a per-channel weight zero point is then per column): other backends run
    it on their i32 matmul.  The CPU keeps the op whole and runs it as one kernel
    (codegen/llvm/integer_conv.py: no im2col tensor, the epilogue fused, NCHW out)."""

    name = "lz.conv_integer"
    operands = ("input", "weight", "input_zero_point", "weight_zero_point")
    traits = _COMPOSITE
    attributes = Conv2dOp.attributes  # strides, pads, dilations, groups
    summary = "8-bit integer 2-D convolution accumulating in i32"

    def infer(self, operand_types, attrs):
        x, w, x_zero, w_zero = operand_types
        check_rank(x, 4, "input", "N x C x H x W")
        check_rank(w, 4, "weight", "O x C/groups x KH x KW")
        _check_integer_operands(("input", x, x_zero), ("weight", w, w_zero))
        if w_zero.rank > 1:
            raise OpError(f"weight_zero_point must be rank 0, or rank 1 (per output channel), got {w_zero}")
        if w_zero.rank == 1 and None not in (w_zero.shape[0], w.shape[0]) and w_zero.shape[0] != w.shape[0]:
            raise OpError(f"per-channel weight_zero_point has {w_zero.shape[0]} entries but the weight "
                          f"{format_shape(w.shape)} has {w.shape[0]} output channels")
        check_window_attrs(2, strides=attrs.strides, pads=attrs.pads, dilations=attrs.dilations)
        return [TensorType(conv2d_output_shape(x, w, attrs), I32)]

    def reference(self, attrs, x, w, x_zero, w_zero):
        centered_x = x.astype(np.int64) - x_zero.astype(np.int64)
        centered_w = w.astype(np.int64) - (w_zero.astype(np.int64).reshape(-1, 1, 1, 1) if w_zero.ndim else
                                           w_zero.astype(np.int64))
        return lookup("lz.conv2d").reference(attrs, centered_x, centered_w).astype(np.int32)  # wraps as i32 does

    def decompose(self, b, op, attrs):
        x, w, x_zero, w_zero = op.operands
        _, c, h, wd = x.type.shape
        o, c_per_group, kh, kw = w.type.shape
        if None in (c, h, wd) or not w.type.is_static:
            raise OpError(f"lz.conv_integer needs static channels, spatial dims and weights, got {x.type} and {w.type}")
        oh, ow = conv2d_output_shape(x.type, w.type, attrs)[2:]
        flat = b.op("lz.reshape", x, shape=[-1, c * h * wd])
        taps = c_per_group * kh * kw
        indices, padding = _im2col_indices((c, h, wd), (kh, kw), (oh, ow), attrs)
        weights = b.op("lz.transpose", b.op("lz.reshape", w, shape=[o, taps]), perm=[1, 0])  # taps x out
        per_group = o // attrs.groups
        if w_zero.type.rank == 0:
            return [_conv_integer_channels_first(b, flat, x_zero, w, w_zero, indices, padding, taps, (oh, ow),
                                                 attrs.groups)]
        products = []
        for g in range(attrs.groups):
            window = slice(g * taps, (g + 1) * taps)
            columns = b.op("lz.gather", flat, b.constant(indices[:, window].copy()), axis=1, negative_indices=False)
            if padding.any():  # the padding holds the zero point
                columns = b.op("lz.select", b.constant(padding[:, window].copy()), x_zero, columns)
            lhs, rhs, zero = columns, weights, w_zero  # N x (OH OW) x taps: the GEMM takes its rows
            if attrs.groups > 1:
                rhs = b.op("lz.slice", weights, starts=[g * per_group], ends=[(g + 1) * per_group], axes=[1])
                if w_zero.type.rank == 1:
                    zero = b.op("lz.slice", w_zero, starts=[g * per_group], ends=[(g + 1) * per_group], axes=[0])
            products.append(b.op("lz.matmul_integer", lhs, rhs, x_zero, zero))
        y = products[0] if len(products) == 1 else b.op("lz.concat", *products, axis=2)  # N x (OH OW) x out
        return [b.op("lz.transpose", b.op("lz.reshape", y, shape=[-1, oh, ow, o]), perm=[0, 3, 1, 2])]


def _conv_integer_channels_first(b, flat, x_zero, w, w_zero, indices, padding, taps, out_size, groups):
    """With one weight zero point the weights can be the lhs: per group ``W (O/g x taps) @
    columns (N x taps x (OH OW))``, the product already ``N x O x (OH OW)`` (no transpose after)."""
    o = w.type.shape[0]
    per_group = o // groups
    weights = b.op("lz.reshape", w, shape=[o, taps])
    products = []
    for g in range(groups):
        window = slice(g * taps, (g + 1) * taps)
        columns = b.op("lz.gather", flat, b.constant(indices[:, window].T.copy()), axis=1, negative_indices=False)
        if padding.any():
            columns = b.op("lz.select", b.constant(padding[:, window].T.copy()), x_zero, columns)
        lhs = weights if groups == 1 else b.op("lz.slice", weights, starts=[g * per_group],
                                                ends=[(g + 1) * per_group], axes=[0])
        products.append(b.op("lz.matmul_integer", lhs, columns, w_zero, x_zero))
    y = products[0] if groups == 1 else b.op("lz.concat", *products, axis=1)  # N x O x (OH OW)
    return b.op("lz.reshape", y, shape=[-1, o, *out_size])


def _im2col_indices(input_size, kernel, out_size, attrs) -> tuple[np.ndarray, np.ndarray]:
    """``(OH OW) x (C KH KW)`` i32 positions in an image's ``C x H x W`` values of each window's
    taps, and where a tap is in the padding (its position is then 0)."""
    (c, h, wd), (kh, kw), (oh, ow) = input_size, kernel, out_size
    (sh, sw), (pt, pl, _, _), (dh, dw) = attrs.strides, attrs.pads, attrs.dilations
    rows = (np.arange(oh) * sh - pt)[:, None, None, None, None] + (np.arange(kh) * dh)[None, None, None, :, None]
    cols = (np.arange(ow) * sw - pl)[None, :, None, None, None] + (np.arange(kw) * dw)[None, None, None, None, :]
    channels = np.arange(c)[None, None, :, None, None]
    inside = np.broadcast_to((rows >= 0) & (rows < h) & (cols >= 0) & (cols < wd), (oh, ow, c, kh, kw))
    at = np.where(inside, (channels * h + rows) * wd + cols, 0)
    return at.reshape(oh * ow, c * kh * kw).astype(np.int32), ~inside.reshape(oh * ow, c * kh * kw)
