"""``F.interpolate`` (nearest, nearest-exact, linear, bilinear, trilinear; ``align_corners``),
``F.pixel_shuffle``/``pixel_unshuffle`` and ``nn.Upsample``, ``UpsamplingNearest2d``,
``UpsamplingBilinear2d``, ``PixelShuffle``, ``PixelUnshuffle``.

Resizing is separable: per spatial dim, a ``lz.gather`` of the source rows each output row reads
(nearest) or two gathers blended by constant weights (linear).  The source positions follow
PyTorch's CPU kernels exactly, including their arithmetic precision (nearest computes in float32
whatever the data; linear in the data's type), so the picked rows and the weights match; the
gathers' gradient adds each cotangent back to its rows.  ONNX says it as ``Gather``, ``Mul`` and
``Add``.
"""
from __future__ import annotations

import math

import numpy as np

from lezero.eager.core import apply1
from lezero.eager.dispatch import EagerOp
from lezero.eager.tensor import Tensor
from lezero.ir.gradient import GradBuilder
from lezero.nn.module import Module

_LINEAR_MODES = {"linear": 1, "bilinear": 2, "trilinear": 3}
_NEAREST_MODES = ("nearest", "nearest-exact")


def nearest_sources(mode: str, size: int, out: int, scale_factor: float | None) -> np.ndarray:
    """PyTorch's ``nearest_idx`` (float32 arithmetic): ``floor(dst * scale)``, or
    ``floor((dst + 0.5) * scale)`` for nearest-exact, at most ``size - 1``."""
    if mode == "nearest" and out == size:
        return np.arange(out)
    if mode == "nearest" and out == 2 * size:
        return np.arange(out) >> 1
    scale = np.float32(1.0 / scale_factor) if scale_factor else np.float32(size) / np.float32(out)
    dst = np.arange(out, dtype=np.float32) + np.float32(0.5 if mode == "nearest-exact" else 0)
    return np.minimum(np.floor(dst * scale).astype(np.int64), size - 1)


def linear_sources(size: int, out: int, align_corners: bool, scale_factor: float | None, dtype) -> tuple:
    """PyTorch's ``compute_source_index_and_lambda`` in ``dtype``: the two source rows of each
    output row and their weights."""
    if out == size:
        rows = np.arange(out)
        return rows, rows, np.ones(out, dtype), np.zeros(out, dtype)
    one = dtype.type(1)
    if align_corners:
        scale = dtype.type(size - 1) / dtype.type(out - 1) if out > 1 else dtype.type(0)
        src = scale * np.arange(out, dtype=dtype)
    else:
        scale = dtype.type(1.0 / scale_factor) if scale_factor else dtype.type(size) / dtype.type(out)
        src = np.maximum(scale * (np.arange(out, dtype=dtype) + dtype.type(0.5)) - dtype.type(0.5), 0)
    i0 = np.minimum(np.floor(src).astype(np.int64), size - 1)
    lambda1 = np.clip(src - i0.astype(dtype), 0, 1).astype(dtype)
    i1 = i0 + (i0 < size - 1)
    return i0, i1, (one - lambda1).astype(dtype), lambda1


def _rows(g, x, index: np.ndarray, axis: int):
    return g.op("lz.gather", x, g.constant(index.astype(np.int64)), axis=axis, negative_indices=False)


def _emit_interpolate(b, attrs, x):
    g = GradBuilder(b.block, b.index, b.location)
    mode, rank = attrs["mode"], x.type.rank
    dtype = x.type.element_type.numpy_dtype
    for i, (out, scale_factor) in enumerate(zip(attrs["size"], attrs["scale_factors"])):
        axis = 2 + i
        size = x.type.shape[axis]
        if mode in _NEAREST_MODES:
            x = _rows(g, x, nearest_sources(mode, size, out, scale_factor), axis)
            continue
        i0, i1, lambda0, lambda1 = linear_sources(size, out, attrs["align_corners"], scale_factor, dtype)
        column = [out] + [1] * (rank - axis - 1)
        x = g.add(g.mul(_rows(g, x, i0, axis), g.constant(lambda0.reshape(column))),
                  g.mul(_rows(g, x, i1, axis), g.constant(lambda1.reshape(column))))
    return [x]


_INTERPOLATE = EagerOp("interpolate", _emit_interpolate)


def interpolate(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",  # noqa: A002
                align_corners: bool | None = None, recompute_scale_factor: bool | None = None,
                antialias: bool = False) -> Tensor:
    """Resize the spatial dims (all dims after the first two) to ``size`` or by ``scale_factor``."""
    x = input
    spatial = x.ndim - 2
    if mode not in _NEAREST_MODES and mode not in _LINEAR_MODES:
        raise NotImplementedError(f"interpolate: mode {mode!r} is not supported (nearest, nearest-exact, linear, "
                                  "bilinear, trilinear)")
    if antialias:
        raise NotImplementedError("interpolate(antialias=True) is not supported")
    if mode in _LINEAR_MODES and spatial != _LINEAR_MODES[mode]:
        raise NotImplementedError(f"Got {x.ndim}D input, but {mode} mode needs {_LINEAR_MODES[mode] + 2}D input")
    if spatial < 1:
        raise ValueError(f"interpolate needs an N x C x ... input with at least one spatial dim, got {list(x.shape)}")
    if mode in _NEAREST_MODES and align_corners is not None:
        raise ValueError("align_corners option can only be set with the interpolating modes: linear | bilinear | "
                         "bicubic | trilinear")
    if (size is None) == (scale_factor is None):
        raise ValueError("only one of size or scale_factor should be defined" if size is not None else
                         "either size or scale_factor should be defined")
    inputs = x.shape[2:]
    if size is not None:
        sizes = tuple(int(s) for s in ((size,) * spatial if isinstance(size, int) else size))
        if len(sizes) != spatial:
            raise ValueError(f"Input and output must have the same number of spatial dimensions, but got input with "
                             f"spatial dimensions of {list(inputs)} and output size of {list(sizes)}.")
        factors = (None,) * spatial
    else:
        factors = tuple(float(f) for f in ((scale_factor,) * spatial if isinstance(scale_factor, (int, float))
                                           else scale_factor))
        if len(factors) != spatial:
            raise ValueError(f"Input and scale_factor must have the same number of spatial dimensions, but got input "
                             f"with spatial dimensions of {list(inputs)} and scale_factor of shape {list(factors)}.")
        sizes = tuple(math.floor(n * f) for n, f in zip(inputs, factors))
        if recompute_scale_factor:
            factors = (None,) * spatial
    if any(s <= 0 for s in sizes):
        raise ValueError(f"interpolate: the output size {list(sizes)} must be positive")
    attrs = (("mode", mode), ("size", sizes), ("scale_factors", factors), ("align_corners", bool(align_corners)))
    return apply1(_INTERPOLATE, attrs, x)


def upsample(input: Tensor, size=None, scale_factor=None, mode: str = "nearest",  # noqa: A002
             align_corners: bool | None = None) -> Tensor:
    return interpolate(input, size, scale_factor, mode, align_corners)


def _check_factor(x: Tensor, factor: int, name: str) -> int:
    factor = int(factor)
    if factor <= 0:
        raise RuntimeError(f"{name}: the factor must be positive, got {factor}")
    if x.ndim < 3:
        raise RuntimeError(f"{name} expects input to have at least 3 dimensions, but got input with {x.ndim} "
                           "dimension(s)")
    return factor


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:  # noqa: A002
    """``* x C r^2 x H x W`` to ``* x C x Hr x Wr``."""
    r = _check_factor(input, upscale_factor, "pixel_shuffle")
    *batch, c, h, w = input.shape
    if c % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be divisible by the square of "
                           f"upscale_factor, but input.size(-3)={c} is not divisible by {r * r}")
    n = len(batch)
    x = input.reshape(*batch, c // (r * r), r, r, h, w)
    x = x.permute(*range(n), n, n + 3, n + 1, n + 4, n + 2)
    return x.reshape(*batch, c // (r * r), h * r, w * r)


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:  # noqa: A002
    """``* x C x Hr x Wr`` to ``* x C r^2 x H x W``."""
    r = _check_factor(input, downscale_factor, "pixel_unshuffle")
    *batch, c, h, w = input.shape
    if h % r or w % r:
        raise RuntimeError(f"pixel_unshuffle expects height and width to be divisible by downscale_factor, but got "
                           f"{h} x {w} and {r}")
    n = len(batch)
    x = input.reshape(*batch, c, h // r, r, w // r, r)
    x = x.permute(*range(n), n, n + 2, n + 4, n + 1, n + 3)
    return x.reshape(*batch, c * r * r, h // r, w // r)


# --- modules ------------------------------------------------------------------------------------------------

class Upsample(Module):
    def __init__(self, size=None, scale_factor=None, mode: str = "nearest", align_corners: bool | None = None,
                 recompute_scale_factor: bool | None = None):
        super().__init__()
        self.size = size
        if isinstance(scale_factor, tuple):
            self.scale_factor = tuple(float(f) for f in scale_factor)
        else:
            self.scale_factor = float(scale_factor) if scale_factor else None
        self.mode, self.align_corners, self.recompute_scale_factor = mode, align_corners, recompute_scale_factor

    def forward(self, x: Tensor) -> Tensor:
        return interpolate(x, self.size, self.scale_factor, self.mode, self.align_corners,
                           recompute_scale_factor=self.recompute_scale_factor)

    def extra_repr(self) -> str:
        info = f"scale_factor={self.scale_factor!r}" if self.scale_factor is not None else f"size={self.size!r}"
        return info + f", mode={self.mode!r}"


class UpsamplingNearest2d(Upsample):
    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="nearest")


class UpsamplingBilinear2d(Upsample):
    def __init__(self, size=None, scale_factor=None):
        super().__init__(size, scale_factor, mode="bilinear", align_corners=True)


class PixelShuffle(Module):
    def __init__(self, upscale_factor: int):
        super().__init__()
        self.upscale_factor = upscale_factor

    def forward(self, x: Tensor) -> Tensor:
        return pixel_shuffle(x, self.upscale_factor)

    def extra_repr(self) -> str:
        return f"upscale_factor={self.upscale_factor}"


class PixelUnshuffle(Module):
    def __init__(self, downscale_factor: int):
        super().__init__()
        self.downscale_factor = downscale_factor

    def forward(self, x: Tensor) -> Tensor:
        return pixel_unshuffle(x, self.downscale_factor)

    def extra_repr(self) -> str:
        return f"downscale_factor={self.downscale_factor}"
