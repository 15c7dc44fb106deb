"""Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, MatMulInteger,
QLinearMatMul, QLinearConv, ConvInteger (and ONNX Runtime's com.microsoft QGemm), as ONNX's reference computes them (round half to even,
saturate to the integer type).

8-bit tensors compute in integers (issue 12): QuantizeLinear and DequantizeLinear (per tensor or
per axis) are ``lz.quantize`` / ``lz.dequantize``, DynamicQuantizeLinear ``lz.dynamic_quantize``,
MatMulInteger and QLinearMatMul's product ``lz.matmul_integer`` (the CPU's int8 GEMM) when A's
zero point is per tensor; a per-row A zero point subtracts in i32 and multiplies as an i32
``lz.matmul`` (exact too).  16-bit types and blocked scales take the elementwise form below.
Integer quantized types only: float8, float4 and the 4- and 2-bit integers have no lezero element
type.  ConvInteger and QLinearConv's convolution are ``lz.conv_integer`` (8-bit im2col and the int8
GEMM), a 3-D one runs in float64, which is exact for it.
"""
from __future__ import annotations

import numpy as np

from lezero.ir.types import F32, F64, I32
from lezero.onnx import element_types
from lezero.onnx.ops.nn import (
    _as_2d,
    _from_2d,
    _lift,
    _window_attrs,
    conv2d,
    spatial_rank,
)
from lezero.onnx.ops.tensor import broadcast_to
from lezero.onnx.registry import converter

_RANGES = {"ui8": (0, 255), "i8": (-128, 127), "ui16": (0, 65535), "i16": (-32768, 32767)}


def per_axis(ctx, value, shape, axis, block_size=0):
    """A scale or zero point broadcastable to ``shape``: a scalar, one per slice of ``axis``, or
    (``block_size``) one per block of that many slices."""
    vshape = ctx.shape(value, "the scale")
    if len(vshape) == 0:
        return value
    if np.prod(vshape) == 1:
        return ctx.reshape(value, [])
    rank = len(shape)
    axis = axis % rank
    if not block_size:
        if len(vshape) != 1:
            raise ctx.error(f"a per-axis scale or zero point must be 1-D, got {value.type}")
        view = [1] * rank
        view[axis] = vshape[0]
        return ctx.reshape(value, view)
    blocks = list(vshape)
    expanded = ctx.reshape(value, blocks[:axis + 1] + [1] + blocks[axis + 1:])
    expanded = broadcast_to(ctx, expanded, blocks[:axis + 1] + [block_size] + blocks[axis + 1:])
    merged = ctx.reshape(expanded, blocks[:axis] + [blocks[axis] * block_size] + blocks[axis + 1:])
    if blocks[axis] * block_size != shape[axis]:
        merged = ctx.op("lz.slice", merged, starts=[0], ends=[shape[axis]], axes=[axis])
    return merged


def saturate(ctx, v, et):
    lo, hi = _RANGES[et.name]
    return ctx.op("lz.min", ctx.op("lz.max", v, ctx.scalar(lo, v)), ctx.scalar(hi, v))


def _quantized_type(ctx, code, what):
    et = element_types.from_onnx(code)
    if et is None or et.name not in _RANGES:
        raise ctx.unsupported(f"{what} {element_types.onnx_type_name(code)} (lezero quantizes to 8- and 16-bit "
                              "integers)")
    return et


@converter("QuantizeLinear")
def quantize_linear(ctx):
    x, scale, zero = ctx.input(0), ctx.input(1), ctx.optional(2)
    axis, block = ctx.attr("axis", 1), ctx.attr("block_size", 0)
    ctx.attr("saturate", 1)  # only float8 outputs do not saturate
    output_dtype = ctx.attr("output_dtype", 0)
    precision = ctx.attr("precision", 0)
    shape = ctx.shape(x)
    if zero is not None:
        out = ctx.dtype(zero)
        if out.name not in _RANGES:
            raise ctx.unsupported(f"zero point of type {out}")
    else:
        out = _quantized_type(ctx, output_dtype or 2, "output type")
    if out.name in ("i8", "ui8") and not block and not precision and ctx.dtype(x).is_float:
        return _quantize(ctx, x, scale, zero, out, axis)
    scale = per_axis(ctx, scale, shape, axis, block)
    if precision:
        p = element_types.from_onnx(precision)
        if p is None:
            raise ctx.unsupported(f"precision {element_types.onnx_type_name(precision)}")
        x, scale = ctx.cast(x, p), ctx.cast(scale, p)
    else:
        scale = ctx.cast(scale, ctx.dtype(x))
    q = ctx.cast(ctx.op("lz.round", ctx.op("lz.div", x, scale)), I32)
    if zero is not None:
        q = ctx.op("lz.add", q, ctx.cast(per_axis(ctx, zero, shape, axis, block), I32))
    return ctx.cast(saturate(ctx, q, out), out)


def _per_tensor_or_axis(ctx, value):
    """A scale or zero point as ``lz.quantize`` takes it: rank 0, or rank 1 along the axis."""
    if ctx.rank(value) == 1 and ctx.shape(value)[0] == 1:
        return ctx.reshape(value, [])
    if ctx.rank(value) > 1:
        raise ctx.error(f"a per-axis scale or zero point must be 1-D, got {value.type}")
    return value


def _quantize(ctx, x, scale, zero, out, axis):
    scale = _per_tensor_or_axis(ctx, ctx.cast(scale, ctx.dtype(x)))
    zero = ctx.constant(np.zeros(scale.type.shape), out) if zero is None else _per_tensor_or_axis(ctx, zero)
    return ctx.op("lz.quantize", x, scale, zero, axis=axis)


@converter("DequantizeLinear")
def dequantize_linear(ctx):
    x, scale, zero = ctx.input(0), ctx.input(1), ctx.optional(2)
    axis, block = ctx.attr("axis", 1), ctx.attr("block_size", 0)
    output_dtype = ctx.attr("output_dtype", 0)
    shape = ctx.shape(x)
    if ctx.dtype(x).name in ("i8", "ui8", "i32") and not block and ctx.dtype(scale).is_float:
        scale = _per_tensor_or_axis(ctx, scale)
        zero = ctx.constant(np.zeros(scale.type.shape), ctx.dtype(x)) if zero is None else _per_tensor_or_axis(ctx, zero)
        y = ctx.op("lz.dequantize", x, scale, zero, axis=axis)
        if output_dtype:
            out = element_types.from_onnx(output_dtype)
            if out is None:
                raise ctx.unsupported(f"output_dtype {element_types.onnx_type_name(output_dtype)}")
            y = ctx.cast(y, out)
        return y
    dx = ctx.cast(x, F32)
    if zero is not None:
        dx = ctx.op("lz.sub", dx, ctx.cast(per_axis(ctx, zero, shape, axis, block), F32))
    y = ctx.op("lz.mul", dx, ctx.cast(per_axis(ctx, scale, shape, axis, block), F32))
    out = ctx.dtype(scale)
    if output_dtype:
        out = element_types.from_onnx(output_dtype)
        if out is None:
            raise ctx.unsupported(f"output_dtype {element_types.onnx_type_name(output_dtype)}")
    return ctx.cast(y, out)


@converter("DynamicQuantizeLinear")
def dynamic_quantize_linear(ctx):
    x = ctx.input(0)
    if ctx.dtype(x) != F32:
        raise ctx.error(f"DynamicQuantizeLinear takes float32, got {ctx.dtype(x)}")
    return ctx.create("lz.dynamic_quantize", [x])


def integer_product(ctx, a, b, a_zero, b_zero):
    """``(a - a_zero) @ (b - b_zero)`` in i32: ``lz.matmul_integer`` for 8-bit operands with a
    per-tensor ``a_zero`` (missing zero points are 0), else an i32 ``lz.matmul`` of the
    differences (a per-row ``a_zero``)."""
    eight_bit = all(ctx.dtype(v).name in ("i8", "ui8") for v in (a, b))
    if a_zero is not None and ctx.rank(a_zero) == 1 and ctx.shape(a_zero)[0] == 1:
        a_zero = ctx.reshape(a_zero, [])
    if b_zero is not None and ctx.rank(b_zero) == 1 and ctx.shape(b_zero)[0] == 1:
        b_zero = ctx.reshape(b_zero, [])
    if eight_bit and (a_zero is None or ctx.rank(a_zero) == 0):
        a_zero = ctx.scalar(0, a) if a_zero is None else a_zero
        b_zero = ctx.scalar(0, b) if b_zero is None else b_zero
        return ctx.op("lz.matmul_integer", a, b, a_zero, b_zero)
    if a_zero is not None and ctx.rank(a_zero) == 1:
        a_zero = ctx.reshape(a_zero, [-1, 1])  # one per row of A
    return ctx.op("lz.matmul", _minus_zero(ctx, a, a_zero), _minus_zero(ctx, b, b_zero))


@converter("MatMulInteger")
def matmul_integer(ctx):
    """int32 products of 8-bit operands less their zero points (a per-row point of A, a
    per-column point of B)."""
    return integer_product(ctx, ctx.input(0), ctx.input(1), ctx.optional(2), ctx.optional(3))


def _minus_zero(ctx, v, zero, reshape=None):
    v = ctx.cast(v, I32)
    if zero is None:
        return v
    zero = ctx.cast(zero, I32)
    if reshape is not None:
        zero = reshape(zero)
    return ctx.op("lz.sub", v, zero)


@converter("QLinearMatMul")
def qlinear_matmul(ctx):
    a, a_scale, a_zero, b, b_scale, b_zero, y_scale, y_zero = (ctx.optional(i) for i in range(8))
    product = integer_product(ctx, a, b, a_zero, b_zero)
    factor = ctx.op("lz.div", ctx.op("lz.mul", a_scale, ctx.cast(b_scale, ctx.dtype(a_scale))),
                    ctx.cast(y_scale, ctx.dtype(a_scale)))
    d = ctx.op("lz.mul", ctx.cast(product, F64), ctx.cast(factor, F64))
    out = ctx.dtype(y_zero) if y_zero is not None else ctx.dtype(a)
    if y_zero is not None:
        d = ctx.op("lz.add", d, ctx.cast(y_zero, F64))
    if out.name not in _RANGES:
        raise ctx.unsupported(f"output type {out}")
    return ctx.cast(saturate(ctx, ctx.op("lz.round", d), out), out)


def _integer_conv(ctx, x, w, x_zero, w_zero):
    """``conv(x - x_zero, w - w_zero)`` in i32: ``lz.conv_integer`` for 1-D and 2-D windows (a
    1-D one over a unit height), where ``x_zero`` is per tensor and ``w_zero`` per tensor or per
    output channel (missing zero points are 0); a 3-D convolution of the differences computes in
    float64, which is exact for 8-bit operands."""
    n = spatial_rank(ctx, x, "convolution", most=3)
    kernel = list(ctx.attr("kernel_shape", w.type.shape[2:]))
    strides, pads, dilations = _window_attrs(ctx, x, n, kernel)
    group = ctx.attr("group", 1)
    for what, v in (("input", x), ("weight", w)):
        if ctx.dtype(v).name not in ("i8", "ui8"):
            raise ctx.error(f"the {what} must be int8 or uint8, got {ctx.dtype(v)}")
    x_zero = ctx.scalar(0, x) if x_zero is None else _one_or_per_channel(ctx, x_zero, 1, "the input zero point")
    w_zero = ctx.scalar(0, w) if w_zero is None else _one_or_per_channel(ctx, w_zero, ctx.shape(w)[0],
                                                                         "the weight zero point")
    if n == 3:
        w_centered = _minus_zero(ctx, w, w_zero, lambda z: ctx.reshape(z, [-1, 1, 1, 1, 1]) if ctx.rank(z) else z)
        y = conv2d(ctx, ctx.cast(_minus_zero(ctx, x, x_zero), F64), ctx.cast(w_centered, F64), strides, pads,
                   dilations, group)
        return ctx.cast(y, I32)
    if n == 1:
        strides, pads, dilations = _lift(strides, pads, dilations)
        y = ctx.op("lz.conv_integer", _as_2d(ctx, x), _as_2d(ctx, w), x_zero, w_zero, strides=strides, pads=pads,
                   dilations=dilations, groups=group)
        return _from_2d(ctx, y)
    return ctx.op("lz.conv_integer", x, w, x_zero, w_zero, strides=strides, pads=pads, dilations=dilations,
                  groups=group)


def _one_or_per_channel(ctx, zero, channels, what):
    """A zero point as rank 0 (one value) or rank 1 of ``channels`` values."""
    if ctx.rank(zero) == 0:
        return zero
    shape = ctx.shape(zero, what)
    if ctx.rank(zero) == 1 and shape[0] == 1:
        return ctx.reshape(zero, [])
    if ctx.rank(zero) == 1 and shape[0] == channels and channels != 1:
        values = ctx.constant_of(zero)
        if values is not None and (values == values.flat[0]).all():  # one value (symmetric: 0) for all channels:
            return ctx.constant(np.asarray(values.flat[0]), ctx.dtype(zero))  # the weights can be the GEMM's lhs
        return zero
    raise ctx.error(f"{what} must be a scalar{'' if channels == 1 else f' or hold {channels} values'}, got "
                    f"{zero.type}")


@converter("ConvInteger")
def conv_integer(ctx):
    return _integer_conv(ctx, ctx.input(0), ctx.input(1), ctx.optional(2), ctx.optional(3))


@converter("QLinearConv")
def qlinear_conv(ctx):
    """The i32 convolution plus the i32 bias, scaled by ``x_scale * w_scale / y_scale`` (per output
    channel) in float32, rounded half to even, moved by ``y_zero`` and saturated, as ONNX Runtime's
    requantization computes it."""
    x, x_scale, x_zero, w, w_scale, w_zero, y_scale, y_zero, bias = (ctx.optional(i) for i in range(9))
    acc = _integer_conv(ctx, x, w, x_zero, w_zero)
    rank = ctx.rank(acc)
    if bias is not None:
        acc = ctx.op("lz.add", acc, ctx.reshape(ctx.cast(bias, I32), [-1] + [1] * (rank - 2)))
    if ctx.rank(w_scale) == 1 and ctx.shape(w_scale)[0] > 1:
        w_scale = ctx.reshape(w_scale, [-1] + [1] * (rank - 2))
    factor = ctx.op("lz.div", ctx.op("lz.mul", ctx.cast(x_scale, F32), ctx.cast(w_scale, F32)), ctx.cast(y_scale, F32))
    return _requantize(ctx, acc, factor, y_zero, ctx.dtype(y_zero) if y_zero is not None else ctx.dtype(x))


def _requantize(ctx, acc, factor, y_zero, out):
    """``saturate(round_half_even(acc * factor) + y_zero)`` as ``out`` (i8 or ui8), in float32."""
    if out.name not in ("ui8", "i8"):
        raise ctx.unsupported(f"output type {out}")
    r = ctx.op("lz.round", ctx.op("lz.mul", ctx.cast(acc, F32), factor))
    if y_zero is not None:
        r = ctx.op("lz.add", r, ctx.cast(y_zero, F32))
    return ctx.cast(saturate(ctx, r, out), out)


@converter("QGemm", domain="com.microsoft")
def qgemm(ctx):
    """ONNX Runtime's quantized Gemm (what ``quantize_static`` makes of a Linear in the QOperator
    format): ``alpha (A - a_zero)(B - b_zero) a_scale b_scale`` plus the i32 bias ``C`` (of scale
    ``alpha a_scale b_scale``), as float32, or requantized to ``y_zero``'s type when ``y_scale`` is
    given."""
    a, a_scale, a_zero, b, b_scale, b_zero, bias, y_scale, y_zero = (ctx.optional(i) for i in range(9))
    if ctx.attr("transA", 0):
        a = ctx.op("lz.transpose", a, perm=[1, 0])
    if ctx.attr("transB", 0):
        b = ctx.op("lz.transpose", b, perm=[1, 0])
    acc = integer_product(ctx, a, b, a_zero, b_zero)
    if bias is not None:
        acc = ctx.op("lz.add", acc, ctx.cast(bias, I32))
    scale = ctx.op("lz.mul", ctx.cast(a_scale, F32), ctx.cast(b_scale, F32))
    scale = ctx.op("lz.mul", scale, ctx.scalar(float(ctx.attr("alpha", 1.0)), scale))
    if y_scale is None:
        return ctx.op("lz.mul", ctx.cast(acc, F32), scale)
    factor = ctx.op("lz.div", scale, ctx.cast(y_scale, F32))
    return _requantize(ctx, acc, factor, y_zero, ctx.dtype(y_zero) if y_zero is not None else ctx.dtype(a))
