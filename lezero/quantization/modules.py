"""Quantized modules (PyTorch's ``torch.ao.nn.quantized`` / ``.dynamic`` / ``.qat`` Linear):

- ``DynamicQuantizedLinear``: int8 weights (per output channel), activations quantized per call
  from their own range (``lz.dynamic_quantize``), the int8 GEMM, the float output; what
  ``quantize_dynamic`` swaps in;
- ``ObservedLinear``: a float Linear whose input passes an observer (``prepare``);
- ``QATLinear``: a float Linear training through fake quantization of its input and weight, the
  straight-through gradient (``prepare_qat``);
- ``QuantizedLinear``: int8 weights and activations quantized with the calibrated scale and zero
  point (``convert`` of either of the two above).

Weights are stored ``in x out`` (the GEMM's layout), as int8 buffers with their scales and zero
points, so a saved state holds one byte per weight.
"""
from __future__ import annotations

import numpy as np

from lezero.eager.creation import as_tensor
from lezero.nn import functional as F
from lezero.nn.layers import Linear
from lezero.nn.module import Module
from lezero.quantization.functional import fake_quantize, quantized_linear
from lezero.quantization.observers import quantization_params


def quantize_weight(weight: np.ndarray, dtype: str = "int8", symmetric: bool = True):
    """``(q, scale, zero_point)``: an ``out x in`` float weight as int8 ``in x out``, one scale
    (and zero point) per output channel."""
    scale, zero = quantization_params(weight.min(axis=1), weight.max(axis=1), dtype, symmetric)
    lo, hi = (-128, 127) if dtype == "int8" else (0, 255)
    q = np.clip(np.round(weight / scale[:, None].astype(np.float32)) + zero[:, None], lo, hi)
    return q.astype(zero.dtype).T.copy(), scale, zero


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
        self.activation_post_process(x)
        scale, zero = self.activation_post_process.calculate_qparams()
        lo, hi = (-128, 127) if self.qconfig.activation_dtype == "int8" else (0, 255)
        x = fake_quantize(x, scale, zero, lo, hi)
        w_scale, w_zero = quantization_params(*_row_range(self.weight), self.qconfig.weight_dtype,
                                              self.qconfig.symmetric)
        wlo, whi = (-128, 127) if self.qconfig.weight_dtype == "int8" else (0, 255)
        weight = fake_quantize(self.weight, w_scale, w_zero, wlo, whi, axis=0)
        return F.linear(x, weight, self.bias)


def _row_range(weight):
    w = weight.detach().numpy()
    return w.min(axis=1), w.max(axis=1)
