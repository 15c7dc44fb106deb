"""Eager forms of the quantization ops (``lz.quantize``, ``lz.dequantize``,
``lz.dynamic_quantize``, ``lz.matmul_integer``, ``lz.conv_integer``) and the compositions the
quantized modules run: fake quantization (quantize then dequantize, with the straight-through
gradient), the quantized linear layer (one eager op: the activations quantized, from their own
range or with calibrated parameters, the int8 GEMM, its dequantize epilogue and the bias) and the
quantized convolution (the same with ``lz.conv_integer`` and a fused relu), so a forward is one
compiled function and a traced model holds the same IR."""
from __future__ import annotations

import numpy as np

from lezero.eager.core import Tensor, apply
from lezero.eager.creation import as_tensor
from lezero.eager.dispatch import EagerOp, lz_op
from lezero.nn.convolution import conv_padding, ntuple

QUANTIZED_DTYPES = {"int8": (np.int8, -128, 127), "uint8": (np.uint8, 0, 255)}


def _tensor(value, dtype) -> Tensor:
    return value if isinstance(value, Tensor) else as_tensor(np.asarray(value, dtype))


def quantize(x: Tensor, scale, zero_point, axis: int = 1, dtype: str = "int8") -> Tensor:
    """``saturate(round_half_even(x / scale) + zero_point)`` as int8 or uint8; ``scale`` and
    ``zero_point`` are numbers (per tensor) or 1-D (per channel along ``axis``)."""
    np_dtype = QUANTIZED_DTYPES[_dtype_name(dtype)][0]
    scale = _tensor(scale, x.dtype.numpy)
    return apply(lz_op("lz.quantize"), (("axis", axis),), x, scale, _tensor(zero_point, np_dtype))


def dequantize(q: Tensor, scale, zero_point, axis: int = 1) -> Tensor:
    """``(q - zero_point) * scale`` in the scale's float type (float32 for numbers)."""
    return apply(lz_op("lz.dequantize"), (("axis", axis),), q, _tensor(scale, np.float32),
                 _tensor(zero_point, q.dtype.numpy))


_DYNAMIC_QUANTIZE = EagerOp("dynamic_quantize", lambda b, attrs, x: b.create("lz.dynamic_quantize", [x]).results,
                            num_results=3)


def dynamic_quantize(x: Tensor):
    """``(q, scale, zero_point)``: ``x`` (float32) as uint8 with its own range (ONNX's
    DynamicQuantizeLinear)."""
    return apply(_DYNAMIC_QUANTIZE, (), x)


def matmul_integer(a: Tensor, b: Tensor, a_zero_point=0, b_zero_point=0) -> Tensor:
    """``(a - a_zero_point) @ (b - b_zero_point)`` in int32 for int8/uint8 ``a`` and ``b``."""
    return apply(lz_op("lz.matmul_integer"), (), a, b, _tensor(a_zero_point, a.dtype.numpy),
                 _tensor(b_zero_point, b.dtype.numpy))


def conv_integer(x: Tensor, weight: Tensor, x_zero_point=0, weight_zero_point=0, stride=1, padding=0, dilation=1,
                 groups: int = 1) -> Tensor:
    """``conv2d(x - x_zero_point, weight - weight_zero_point)`` in int32 for int8/uint8 ``x`` and
    ``weight`` (``weight_zero_point``: a number or one per output channel); ``stride``,
    ``padding`` and ``dilation`` as ``lz.nn.functional.conv2d`` takes them."""
    dilations = ntuple(dilation, 2, "dilation")
    attrs = (("strides", ntuple(stride, 2, "stride")), ("pads", conv_padding(padding, weight.shape[2:], dilations)),
             ("dilations", dilations), ("groups", int(groups)))
    return apply(lz_op("lz.conv_integer"), attrs,
                 x, weight, _tensor(x_zero_point, x.dtype.numpy), _tensor(weight_zero_point, weight.dtype.numpy))


def fake_quantize(x: Tensor, scale, zero_point, quant_min: int, quant_max: int, axis: int | None = None) -> Tensor:
    """``x`` quantized and dequantized (what int8 inference will compute), with the
    straight-through gradient: 1 where ``x`` is inside the representable range, 0 outside
    (PyTorch's ``fake_quantize_per_tensor_affine`` / ``_per_channel_affine``)."""
    scale = np.asarray(scale, np.float32)
    zero_point = np.asarray(zero_point, np.float64)
    dtype = "uint8" if quant_min >= 0 else "int8"
    axis = 0 if axis is None else axis % x.ndim
    view = [1] * x.ndim
    if scale.ndim:
        view[axis] = -1
    view = view if scale.ndim else ()
    low = as_tensor(((quant_min - zero_point) * scale).astype(np.float32).reshape(view))
    high = as_tensor(((quant_max - zero_point) * scale).astype(np.float32).reshape(view))
    clamped = x.maximum(low).minimum(high)
    zero = zero_point.astype(QUANTIZED_DTYPES[dtype][0])
    rounded = dequantize(quantize(clamped.detach(), scale, zero, axis, dtype), scale, zero, axis)
    return clamped + (rounded - clamped).detach()


def _emit_quantized_linear(b, attrs, x, *operands):
    """``x`` (..., K) quantized (``static``: with the calibrated scale and zero point, the first two
    operands; else from its own range), times the int8 ``weight`` (K x N), the i32 product scaled
    by ``scale(x) * weight_scale`` (per output channel), plus the bias if there is one."""
    lead = x.type.shape[:-1]
    rows = b.op("lz.reshape", x, shape=[-1, x.type.shape[-1]]) if len(lead) != 1 else x
    if attrs["static"]:
        scale, zero, weight, weight_scale, weight_zero, *bias = operands
        q = b.op("lz.quantize", rows, scale, zero)
    else:
        weight, weight_scale, weight_zero, *bias = operands
        q, scale, zero = b.create("lz.dynamic_quantize", [rows]).results
    product = b.op("lz.matmul_integer", q, weight, zero, weight_zero)
    y = b.op("lz.mul", b.op("lz.cast", product, to=scale.type.element_type), b.op("lz.mul", scale, weight_scale))
    if bias:
        y = b.op("lz.add", y, bias[0])
    if len(lead) != 1:
        y = b.op("lz.reshape", y, shape=[-1 if d is None else d for d in lead] + [weight.type.shape[-1]])
    return [y]


_QUANTIZED_LINEAR = EagerOp("quantized_linear", _emit_quantized_linear)


def quantized_linear(x: Tensor, weight: Tensor, weight_scale: Tensor, weight_zero_point: Tensor,
                     bias: Tensor | None = None, input_scale: Tensor | None = None,
                     input_zero_point: Tensor | None = None) -> Tensor:
    """``x @ weight + bias`` in int8 as one eager op (``weight``: int8, in x out, per-channel
    ``weight_scale``): ``x`` quantized with ``input_scale``/``input_zero_point`` when given
    (static quantization), else from its own range (dynamic)."""
    static = input_scale is not None
    operands = ([input_scale, input_zero_point] if static else []) + [weight, weight_scale, weight_zero_point]
    return apply(_QUANTIZED_LINEAR, (("static", static),), x, *operands, *([bias] if bias is not None else []))


def _emit_quantized_conv2d(b, attrs, x, scale, zero, weight, weight_scale, weight_zero, *bias):
    """``x`` quantized with the calibrated ``scale`` and ``zero``, the 8-bit convolution with the
    int8 ``weight`` (per output channel ``weight_scale``), the i32 sums scaled by ``scale *
    weight_scale``, plus the bias, then a relu when the layer has one fused."""
    q = b.op("lz.quantize", x, scale, zero)
    window = {key: attrs[key] for key in ("strides", "pads", "dilations", "groups")}
    sums = b.op("lz.conv_integer", q, weight, zero, weight_zero, **window)
    channels = [1, weight.type.shape[0], 1, 1]
    y = b.op("lz.mul", b.op("lz.cast", sums, to=scale.type.element_type),
             b.op("lz.reshape", b.op("lz.mul", scale, weight_scale), shape=channels))
    if bias:
        y = b.op("lz.add", y, b.op("lz.reshape", bias[0], shape=channels))
    if attrs["relu"]:
        y = b.op("lz.max", y, b.constant(np.zeros((), scale.type.element_type.numpy_dtype)))
    return [y]


_QUANTIZED_CONV2D = EagerOp("quantized_conv2d", _emit_quantized_conv2d)


def quantized_conv2d(x: Tensor, weight: Tensor, weight_scale: Tensor, weight_zero_point: Tensor, bias: Tensor | None,
                     input_scale: Tensor, input_zero_point: Tensor, stride=1, padding=0, dilation=1, groups: int = 1,
                     relu: bool = False) -> Tensor:
    """``conv2d(x, weight) + bias`` (then ``relu``) in int8 as one eager op: ``x`` quantized with
    ``input_scale``/``input_zero_point``, ``weight`` int8 ``O x C/groups x KH x KW`` with one scale
    and zero point per output channel."""
    dilations = ntuple(dilation, 2, "dilation")
    attrs = (("strides", ntuple(stride, 2, "stride")), ("pads", conv_padding(padding, weight.shape[2:], dilations)),
             ("dilations", dilations), ("groups", int(groups)), ("relu", bool(relu)))
    return apply(_QUANTIZED_CONV2D, attrs, x, input_scale, input_zero_point, weight, weight_scale, weight_zero_point,
                 *([bias] if bias is not None else []))


def _dtype_name(dtype) -> str:
    name = dtype if isinstance(dtype, str) else getattr(dtype, "name", str(dtype))
    name = name.replace("torch.", "").replace("lz.", "").replace("qint8", "int8").replace("quint8", "uint8")
    if name not in QUANTIZED_DTYPES:
        raise ValueError(f"quantized dtype must be int8 or uint8, got {dtype!r}")
    return name
