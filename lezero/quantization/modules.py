"""Quantized modules (PyTorch's ``torch.ao.nn.quantized`` / ``.dynamic`` / ``.qat`` Linear and
Conv2d, ``torch.ao.nn.intrinsic``'s ConvReLU2d):

- ``DynamicQuantizedLinear``: int8 weights (per output channel), activations quantized per call
  from their own range (``lz.dynamic_quantize``), the int8 GEMM, the float output; what
  ``quantize_dynamic`` swaps in;
- ``ObservedLinear``: a float Linear whose input passes an observer (``prepare``);
- ``QATLinear``: a float Linear training through fake quantization of its input and weight, the
  straight-through gradient (``prepare_qat``);
- ``QuantizedLinear``: int8 weights and activations quantized with the calibrated scale and zero
  point (``convert`` of either of the two above);
- ``ObservedConv2d`` / ``QATConv2d`` / ``QuantizedConv2d``: the same for Conv2d and ``ConvReLU2d``
  (a conv with its relu fused, which the quantized layer applies in its own kernel).

Linear weights are stored ``in x out`` (the GEMM's layout), conv weights ``O x C/groups x KH x KW``
(``lz.conv_integer``'s), as int8 buffers with their scales and zero
points, so a saved state holds one byte per weight.
"""
from __future__ import annotations

import numpy as np

from lezero.eager.creation import as_tensor
from lezero.nn import functional as F
from lezero.nn.convolution import Conv2d
from lezero.nn.layers import Linear
from lezero.nn.module import Module
from lezero.quantization.functional import (
    fake_quantize,
    quantized_conv2d,
    quantized_linear,
)
from lezero.quantization.observers import quantization_params


def quantize_per_output_channel(weight: np.ndarray, dtype: str = "int8", symmetric: bool = True):
    """``(q, scale, zero_point)``: a float weight (output channels first: a Linear's ``out x in``,
    a convolution's ``O x C/groups x KH x KW``) as 8-bit integers of the same layout, one scale
    (and zero point) per output channel."""
    rows = weight.reshape(len(weight), -1)
    scale, zero = quantization_params(rows.min(axis=1), rows.max(axis=1), dtype, symmetric)
    lo, hi = (-128, 127) if dtype == "int8" else (0, 255)
    view = (-1,) + (1,) * (weight.ndim - 1)
    q = np.clip(np.round(weight / scale.reshape(view).astype(np.float32)) + zero.reshape(view), lo, hi)
    return q.astype(zero.dtype), scale, zero


def quantize_weight(weight: np.ndarray, dtype: str = "int8", symmetric: bool = True):
    """``(q, scale, zero_point)``: an ``out x in`` float weight as int8 ``in x out`` (the GEMM's
    layout), one scale (and zero point) per output channel."""
    q, scale, zero = quantize_per_output_channel(weight, dtype, symmetric)
    return q.T.copy(), scale, zero


class _QuantizedLinearBase(Module):
    def __init__(self, in_features: int, out_features: int, weight, scale, zero, bias):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        self.register_buffer("weight", as_tensor(weight))
        self.register_buffer("weight_scale", as_tensor(scale))
        self.register_buffer("weight_zero_point", as_tensor(zero))
        self.register_buffer("bias", None if bias is None else as_tensor(np.asarray(bias, np.float32)))

    def dequantized_weight(self) -> np.ndarray:
        """The ``out x in`` float weight the int8 one stands for."""
        q = self.weight.numpy().astype(np.float32) - self.weight_zero_point.numpy().astype(np.float32)
        return (q * self.weight_scale.numpy()).T

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, dtype={self.weight.dtype}"


class DynamicQuantizedLinear(_QuantizedLinearBase):
    @classmethod
    def from_float(cls, linear: Linear, weight_dtype: str = "int8", symmetric: bool = True):
        q, scale, zero = quantize_weight(linear.weight.detach().numpy(), weight_dtype, symmetric)
        bias = None if linear.bias is None else linear.bias.detach().numpy()
        return cls(linear.in_features, linear.out_features, q, scale, zero, bias)

    def forward(self, x):
        return quantized_linear(x, self.weight, self.weight_scale, self.weight_zero_point, self.bias)


class QuantizedLinear(_QuantizedLinearBase):
    def __init__(self, in_features, out_features, weight, scale, zero, bias, input_scale, input_zero_point):
        super().__init__(in_features, out_features, weight, scale, zero, bias)
        self.register_buffer("input_scale", as_tensor(np.asarray(input_scale, np.float32)))
        self.register_buffer("input_zero_point", as_tensor(np.asarray(input_zero_point)))

    @classmethod
    def from_observed(cls, observed: ObservedLinear | QATLinear):
        config = observed.qconfig
        q, scale, zero = quantize_weight(observed.weight.detach().numpy(), config.weight_dtype, config.symmetric)
        input_scale, input_zero = observed.activation_post_process.calculate_qparams()
        bias = None if observed.bias is None else observed.bias.detach().numpy()
        return cls(observed.in_features, observed.out_features, q, scale, zero, bias, input_scale, input_zero)

    def forward(self, x):
        return quantized_linear(x, self.weight, self.weight_scale, self.weight_zero_point, self.bias,
                                self.input_scale, self.input_zero_point)


class ObservedLinear(Linear):
    """A float Linear whose inputs an activation observer watches (static quantization's
    calibration)."""

    @classmethod
    def from_float(cls, linear: Linear, qconfig):
        observed = cls.__new__(cls)
        Module.__init__(observed)
        observed.in_features, observed.out_features = linear.in_features, linear.out_features
        observed.weight, observed.bias = linear.weight, linear.bias
        observed.qconfig = qconfig
        observed.activation_post_process = qconfig.activation_observer()
        return observed

    def forward(self, x):
        return super().forward(self.activation_post_process(x))


class QATLinear(ObservedLinear):
    """Trains through fake quantization: the input with the observer's running parameters, the
    weight per output channel, both with the straight-through gradient."""

    def forward(self, x):
        x = fake_quantize_input(self.activation_post_process, x, self.qconfig)
        return F.linear(x, fake_quantize_weight(self.weight, self.qconfig), self.bias)


def fake_quantize_input(observer, x, qconfig):
    """``x`` observed, then fake-quantized with the observer's running parameters."""
    observer(x)
    scale, zero = observer.calculate_qparams()
    lo, hi = (-128, 127) if qconfig.activation_dtype == "int8" else (0, 255)
    return fake_quantize(x, scale, zero, lo, hi)


def fake_quantize_weight(weight, qconfig):
    """``weight`` fake-quantized per output channel (its first dim) with its current range."""
    rows = weight.detach().numpy().reshape(weight.shape[0], -1)
    scale, zero = quantization_params(rows.min(axis=1), rows.max(axis=1), qconfig.weight_dtype, qconfig.symmetric)
    lo, hi = (-128, 127) if qconfig.weight_dtype == "int8" else (0, 255)
    return fake_quantize(weight, scale, zero, lo, hi, axis=0)


class ConvReLU2d(Conv2d):
    """A Conv2d followed by a relu, as one layer (``fuse_modules`` of a conv and a relu; PyTorch's
    ``torch.ao.nn.intrinsic.ConvReLU2d``): its quantized form applies the relu to the float
    result of the integer convolution, in the same kernel."""

    def forward(self, x):
        return F.relu(super().forward(x))


class ObservedConv2d(Conv2d):
    """A float Conv2d (relu fused or not) whose inputs an activation observer watches."""

    @classmethod
    def from_float(cls, conv: Conv2d, qconfig):
        if conv.padding_mode != "zeros":
            raise ValueError(f"lz.quantization: a Conv2d with padding_mode={conv.padding_mode!r} cannot be quantized "
                             "(the integer convolution pads with zeros)")
        observed = cls.__new__(cls)
        Module.__init__(observed)
        for name in ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "output_padding",
                     "groups", "padding_mode"):
            setattr(observed, name, getattr(conv, name))
        observed.weight, observed.bias = conv.weight, conv.bias
        observed.relu = isinstance(conv, ConvReLU2d)
        observed.qconfig = qconfig
        observed.activation_post_process = qconfig.activation_observer()
        return observed

    def _conv(self, x, weight):
        y = F.conv2d(x, weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
        return F.relu(y) if self.relu else y

    def forward(self, x):
        return self._conv(self.activation_post_process(x), self.weight)


class QATConv2d(ObservedConv2d):
    """Trains through fake quantization of its input and weight (per output channel), with the
    straight-through gradient."""

    def forward(self, x):
        x = fake_quantize_input(self.activation_post_process, x, self.qconfig)
        return self._conv(x, fake_quantize_weight(self.weight, self.qconfig))


class QuantizedConv2d(Module):
    """A Conv2d (relu fused or not) in int8: the weight ``O x C/groups x KH x KW`` with one scale
    and zero point per output channel, the input quantized with the calibrated parameters, one
    eager op per forward (``functional.quantized_conv2d``)."""

    def __init__(self, conv: ObservedConv2d, weight, scale, zero, input_scale, input_zero_point):
        super().__init__()
        for name in ("in_channels", "out_channels", "kernel_size", "stride", "padding", "dilation", "groups", "relu"):
            setattr(self, name, getattr(conv, name))
        self.register_buffer("weight", as_tensor(weight))
        self.register_buffer("weight_scale", as_tensor(scale))
        self.register_buffer("weight_zero_point", as_tensor(zero))
        bias = None if conv.bias is None else conv.bias.detach().numpy().astype(np.float32)
        self.register_buffer("bias", None if bias is None else as_tensor(bias))
        self.register_buffer("input_scale", as_tensor(np.asarray(input_scale, np.float32)))
        self.register_buffer("input_zero_point", as_tensor(np.asarray(input_zero_point)))

    @classmethod
    def from_observed(cls, observed: ObservedConv2d):
        config = observed.qconfig
        q, scale, zero = quantize_per_output_channel(observed.weight.detach().numpy(), config.weight_dtype,
                                                     config.symmetric)
        if config.symmetric:  # one zero point, 0: the integer convolution then multiplies channels first
            zero = zero[:1].reshape(())
        input_scale, input_zero = observed.activation_post_process.calculate_qparams()
        return cls(observed, q, scale, zero, input_scale, input_zero)

    def forward(self, x):
        return quantized_conv2d(x, self.weight, self.weight_scale, self.weight_zero_point, self.bias,
                                self.input_scale, self.input_zero_point, self.stride, self.padding, self.dilation,
                                self.groups, self.relu)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, groups={self.groups}, relu={self.relu}, dtype={self.weight.dtype}")
