"""Observers: modules that watch the tensors flowing through them during calibration and choose
a scale and zero point from what they saw (PyTorch's ``torch.ao.quantization.observer`` names).

- ``MinMaxObserver``: the running min and max;
- ``MovingAverageMinMaxObserver``: min and max as exponential moving averages (QAT's default:
  one outlier batch moves them little);
- ``PerChannelMinMaxObserver``: min and max per slice of ``ch_axis`` (weights);
- ``HistogramObserver``: the range that keeps all but ``1 - percentile`` of the values seen
  (outliers clipped), from a histogram over the running range.

``calculate_qparams()`` returns ``(scale, zero_point)`` as numpy arrays (rank 0, or rank 1 per
channel): symmetric schemes put the zero point at 0 (int8) or 128 (uint8); affine ones stretch
the range to hold 0 so that 0 is exact, as PyTorch's and ONNX Runtime's do.
"""
from __future__ import annotations

import numpy as np

from lezero.nn.module import Module
from lezero.quantization.functional import QUANTIZED_DTYPES, _dtype_name

SCHEMES = ("per_tensor_affine", "per_tensor_symmetric", "per_channel_affine", "per_channel_symmetric")


def quantization_params(low, high, dtype: str, symmetric: bool):
    """``(scale, zero_point)`` mapping ``[low, high]`` (stretched to hold 0) onto ``dtype``."""
    np_dtype, qmin, qmax = QUANTIZED_DTYPES[dtype]
    low, high = np.minimum(np.asarray(low, np.float64), 0), np.maximum(np.asarray(high, np.float64), 0)
    eps = np.finfo(np.float32).eps
    if symmetric:
        bound = np.maximum(-low, high)
        scale = np.maximum(bound / ((qmax - qmin) / 2), eps)
        zero = np.full(scale.shape, 0 if qmin < 0 else (qmin + qmax + 1) // 2)
    else:
        scale = np.maximum((high - low) / (qmax - qmin), eps)
        zero = np.clip(np.round(qmin - low / scale), qmin, qmax)
    return scale.astype(np.float32), zero.astype(np_dtype)


class ObserverBase(Module):
    """Records statistics in ``forward`` (returning its input unchanged) and turns them into
    quantization parameters in ``calculate_qparams``."""

    def __init__(self, dtype="uint8", qscheme: str = "per_tensor_affine"):
        super().__init__()
        if qscheme not in SCHEMES:
            raise ValueError(f"qscheme must be one of {', '.join(SCHEMES)}, got {qscheme!r}")
        self.dtype = _dtype_name(dtype)
        self.qscheme = qscheme
        self.min_val = self.max_val = None

    @property
    def symmetric(self) -> bool:
        return self.qscheme.endswith("symmetric")

    def forward(self, x):
        self.observe(np.asarray(x.detach().numpy(), np.float64))
        return x

    def observe(self, values: np.ndarray) -> None:
        raise NotImplementedError

    def calculate_qparams(self):
        if self.min_val is None:
            raise RuntimeError(f"{type(self).__name__} has observed nothing: run calibration data through the "
                               "prepared model before convert()")
        return quantization_params(self.min_val, self.max_val, self.dtype, self.symmetric)

    def extra_repr(self) -> str:
        return f"dtype={self.dtype}, qscheme={self.qscheme}, min_val={self.min_val}, max_val={self.max_val}"


class MinMaxObserver(ObserverBase):
    def observe(self, values):
        low, high = values.min(initial=np.inf), values.max(initial=-np.inf)
        self.min_val = low if self.min_val is None else min(self.min_val, low)
        self.max_val = high if self.max_val is None else max(self.max_val, high)


class MovingAverageMinMaxObserver(ObserverBase):
    def __init__(self, averaging_constant: float = 0.01, dtype="uint8", qscheme: str = "per_tensor_affine"):
        super().__init__(dtype, qscheme)
        self.averaging_constant = averaging_constant

    def observe(self, values):
        low, high = values.min(initial=np.inf), values.max(initial=-np.inf)
        if self.min_val is None:
            self.min_val, self.max_val = low, high
        else:
            c = self.averaging_constant
            self.min_val += c * (low - self.min_val)
            self.max_val += c * (high - self.max_val)


class PerChannelMinMaxObserver(ObserverBase):
    def __init__(self, ch_axis: int = 0, dtype="int8", qscheme: str = "per_channel_symmetric"):
        super().__init__(dtype, qscheme)
        self.ch_axis = ch_axis

    def observe(self, values):
        others = tuple(a for a in range(values.ndim) if a != self.ch_axis % values.ndim)
        low, high = values.min(axis=others), values.max(axis=others)
        self.min_val = low if self.min_val is None else np.minimum(self.min_val, low)
        self.max_val = high if self.max_val is None else np.maximum(self.max_val, high)


class HistogramObserver(ObserverBase):
    """A histogram of ``bins`` over the range seen so far (re-binned when it grows); the range
    chosen is the narrowest holding ``percentile`` of the values around their median."""

    def __init__(self, bins: int = 2048, percentile: float = 0.9999, dtype="uint8",
                 qscheme: str = "per_tensor_affine"):
        super().__init__(dtype, qscheme)
        self.bins, self.percentile = bins, percentile
        self.histogram = None

    def observe(self, values):
        low, high = values.min(initial=np.inf), values.max(initial=-np.inf)
        if self.histogram is None:
            self.lo, self.hi = low, max(high, low + 1e-12)
            self.histogram = np.zeros(self.bins)
        elif low < self.lo or high > self.hi:  # re-bin the old counts onto the wider range
            old_edges = np.linspace(self.lo, self.hi, self.bins + 1)
            centers = (old_edges[:-1] + old_edges[1:]) / 2
            self.lo, self.hi = min(low, self.lo), max(high, self.hi)
            self.histogram = np.histogram(centers, self.bins, (self.lo, self.hi), weights=self.histogram)[0]
        self.histogram += np.histogram(values, self.bins, (self.lo, self.hi))[0]
        cdf = np.cumsum(self.histogram) / self.histogram.sum()
        edges = np.linspace(self.lo, self.hi, self.bins + 1)
        tail = (1 - self.percentile) / 2
        self.min_val = edges[np.searchsorted(cdf, tail)]
        self.max_val = edges[min(np.searchsorted(cdf, 1 - tail) + 1, self.bins)]
