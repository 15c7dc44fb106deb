"""``lz.fft``: discrete Fourier transforms along one dim, as matmuls with the ``cos``/``sin``
matrices of the transform (``O(n^2)`` a line, no FFT kernel), so their gradients are the
matmuls'.

lezero has no complex dtypes.  A complex tensor is the pair PyTorch's ``torch.view_as_real``
gives: a real tensor whose last dim (of size 2) holds the real and the imaginary part.  Every
transform here returns that pair (``lz.fft.fft(x)`` is ``torch.view_as_real(torch.fft.fft(x))``;
``irfft`` returns a real tensor).  ``fft`` and ``rfft`` read a real tensor; ``ifft`` and
``irfft`` read a pair, since their input is a spectrum, and so does ``fft(x, complex_input=True)``
(``ifft(x, complex_input=False)`` reads a real signal).  ``norm`` is PyTorch's: ``"backward"``
(the inverse divides by ``n``), ``"ortho"`` (both by ``sqrt(n)``), ``"forward"`` (the forward by ``n``).
"""
from __future__ import annotations

import math

import numpy as np

from lezero.eager.core import Tensor, axis_of
from lezero.eager.creation import tensor
from lezero.eager.dtypes import get_default_dtype
from lezero.eager.functions import cat, stack

__all__ = ["fft", "ifft", "rfft", "irfft", "fftfreq", "rfftfreq"]

_NORMS = ("backward", "ortho", "forward")


def _scale(norm, n: int, inverse: bool) -> float:
    if norm is None:
        norm = "backward"
    if norm not in _NORMS:
        raise ValueError(f"Invalid normalization mode: {norm}")
    if norm == "ortho":
        return 1 / math.sqrt(n)
    return 1 / n if (norm == "backward") == inverse else 1.0


def _fitted(x: Tensor, axis: int, n: int) -> Tensor:
    """``x`` cut or zero-padded to ``n`` elements along ``axis``."""
    size = x.shape[axis]
    if n == size:
        return x
    if n < size:
        return x.narrow(axis, 0, n)
    pad = list(x.shape)
    pad[axis] = n - size
    return cat([x, tensor(np.zeros(pad), dtype=x.dtype, device=x.device)], axis)


def _trig(n_in: int, n_out: int, like: Tensor, scale: float) -> tuple:
    """``cos`` and ``sin`` of ``2 pi t k / n_in`` (rows ``t`` of the input, columns ``k`` of the output), scaled."""
    t, k = np.indices((n_in, n_out))
    angle = 2 * np.pi * ((t * k) % n_in) / n_in
    return (tensor(np.cos(angle) * scale, dtype=like.dtype, device=like.device),
            tensor(np.sin(angle) * scale, dtype=like.dtype, device=like.device))


def _parts(x: Tensor, complex_input: bool, name: str) -> tuple:
    if not x.is_floating_point():
        x = x.double() if x.dtype.name == "int64" else x.float()
    if not complex_input:
        return x, None
    if x.ndim < 1 or x.shape[-1] != 2:
        raise RuntimeError(f"fft.{name}: a complex input is a (real, imaginary) pair in its last dim (size 2, as "
                           f"torch.view_as_real gives), got shape {list(x.shape)}")
    return x.select(-1, 0), x.select(-1, 1)


def _transform(x: Tensor, n, dim: int, norm, inverse: bool, complex_input: bool, name: str, n_out=None) -> Tensor:
    real, imag = _parts(x, complex_input, name)
    axis = axis_of(dim, real.ndim)
    n = real.shape[axis] if n is None else int(n)
    if n < 1:
        raise RuntimeError(f"Invalid number of data points ({n}) specified")
    real = _fitted(real, axis, n).transpose(axis, -1)
    cos, sin = _trig(n, n if n_out is None else n_out, real, _scale(norm, n, inverse))
    sign = 1 if inverse else -1  # e^{-i theta} forward, e^{+i theta} inverse
    out_real, out_imag = real @ cos, (real @ sin) * sign
    if imag is not None:
        imag = _fitted(imag, axis, n).transpose(axis, -1)
        out_real = out_real - (imag @ sin) * sign
        out_imag = out_imag + imag @ cos
    return stack([out_real.transpose(axis, -1), out_imag.transpose(axis, -1)], -1)


def fft(input: Tensor, n=None, dim: int = -1, norm=None, *, complex_input: bool = False) -> Tensor:  # noqa: A002
    """The discrete Fourier transform along ``dim``, as a (real, imaginary) pair in a new last dim."""
    return _transform(input, n, dim, norm, False, complex_input, "fft")


def ifft(input: Tensor, n=None, dim: int = -1, norm=None, *, complex_input: bool = True) -> Tensor:  # noqa: A002
    """The inverse transform of a spectrum (a pair, ``dim`` counted without the pair's dim)."""
    return _transform(input, n, dim, norm, True, complex_input, "ifft")


def rfft(input: Tensor, n=None, dim: int = -1, norm=None) -> Tensor:  # noqa: A002
    """The transform of a real signal, its ``n // 2 + 1`` non-negative frequencies, as a pair."""
    real, _ = _parts(input, False, "rfft")
    size = real.shape[axis_of(dim, real.ndim)] if n is None else int(n)
    return _transform(real, size, dim, norm, False, False, "rfft", n_out=size // 2 + 1)


def irfft(input: Tensor, n=None, dim: int = -1, norm=None) -> Tensor:  # noqa: A002
    """The real signal of a one-sided spectrum (a pair of ``m`` frequencies): ``n`` (default
    ``2 (m - 1)``) samples; the imaginary parts of the zero and Nyquist frequencies are not read."""
    real, imag = _parts(input, True, "irfft")
    axis = axis_of(dim, real.ndim)
    m = real.shape[axis]
    n = 2 * (m - 1) if n is None else int(n)
    if n < 1:
        raise RuntimeError(f"Invalid number of data points ({n}) specified")
    m = n // 2 + 1
    real, imag = (_fitted(p, axis, m).transpose(axis, -1) for p in (real, imag))
    k, t = np.indices((m, n))
    weight = np.where((k == 0) | ((n % 2 == 0) & (k == n // 2)), 1.0, 2.0) * _scale(norm, n, True)
    angle = 2 * np.pi * ((k * t) % n) / n
    cos = tensor(np.cos(angle) * weight, dtype=real.dtype, device=real.device)
    sin = tensor(np.sin(angle) * weight, dtype=real.dtype, device=real.device)
    return (real @ cos - imag @ sin).transpose(axis, -1)


def fftfreq(n: int, d: float = 1.0, *, dtype=None, device=None) -> Tensor:
    """The sample frequencies of an ``n``-point transform: ``[0, 1, ..., -(n // 2), ..., -1] / (d n)``."""
    k = np.concatenate([np.arange(0, (n - 1) // 2 + 1), np.arange(-(n // 2), 0)])
    return tensor(k / (d * n), dtype=dtype or get_default_dtype(), device=device)


def rfftfreq(n: int, d: float = 1.0, *, dtype=None, device=None) -> Tensor:
    """The non-negative sample frequencies of an ``n``-point real transform."""
    return tensor(np.arange(n // 2 + 1) / (d * n), dtype=dtype or get_default_dtype(), device=device)
