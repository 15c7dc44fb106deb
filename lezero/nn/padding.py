"""``F.pad`` in PyTorch's four modes and the ``nn.*Pad1d/2d/3d`` modules.

``constant`` is ``lz.pad`` (a negative pad crops).  ``reflect``, ``replicate`` and ``circular``
are one ``lz.gather`` per padded dim whose indices say, for each output position, which input
position it copies (mirrored without the edge, clamped to the edge, or wrapped around): the
gather's gradient adds each output's cotangent back to the position it came from, which is
exactly the gradient of these pads, and ONNX says it as ``Gather``.
"""
from __future__ import annotations

import numpy as np

from lezero.eager.core import apply1
from lezero.eager.dispatch import EagerOp, lz_op
from lezero.eager.tensor import Tensor
from lezero.nn.module import Module


def source_positions(mode: str, size: int, begin: int, end: int) -> np.ndarray:
    """The input position each of the ``begin + size + end`` output positions copies."""
    p = np.arange(-begin, size + end)
    if mode == "replicate":
        return np.clip(p, 0, size - 1)
    if mode == "circular":
        return p % size
    period = 2 * (size - 1)  # reflect: ... 2 1 | 0 1 2 ... n-1 | n-2 n-3 ...
    return (size - 1) - np.abs((size - 1) - np.abs(p) % period) if period else np.zeros_like(p)


def _emit_index_pad(b, attrs, x):
    mode = attrs["mode"]
    for axis, (begin, end) in attrs["pads"]:
        index = source_positions(mode, x.type.shape[axis], begin, end)
        x = b.op("lz.gather", x, b.constant(index.astype(np.int64)), axis=axis, negative_indices=False)
    return [x]


_INDEX_PAD = EagerOp("pad", _emit_index_pad)
_MODES = ("constant", "reflect", "replicate", "circular")


def pad(x: Tensor, pad, mode: str = "constant", value: float | None = None) -> Tensor:
    """``pad`` lists (begin, end) pairs from the last dim backwards, as PyTorch.  ``constant``
    pads any dims with ``value`` (a negative pad crops); the other modes pad the last 1, 2 or 3
    dims of a batched or unbatched input by less than the dim's size (``circular``: at most it)."""
    if mode not in _MODES:
        raise NotImplementedError(f"pad: mode must be one of {list(_MODES)}, got {mode!r}")
    pad = [int(p) for p in pad]
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise RuntimeError(f"Padding length must be divisible by 2 and at most twice the rank, got {len(pad)} for a "
                           f"{x.ndim}-D input")
    dims = len(pad) // 2
    if mode == "constant":
        begins, ends = [0] * x.ndim, [0] * x.ndim
        for i in range(dims):
            begins[x.ndim - 1 - i], ends[x.ndim - 1 - i] = pad[2 * i], pad[2 * i + 1]
        return apply1(lz_op("lz.pad"), (("pads", tuple(begins + ends)), ("value", float(value or 0.0))), x)
    if value is not None and value != 0:
        raise ValueError(f"Padding mode {mode!r} doesn't take in value argument, got value={value}")
    if dims not in (1, 2, 3) or x.ndim not in (dims + 1, dims + 2):
        raise NotImplementedError(f"pad: mode {mode!r} pads the last 1, 2 or 3 dims of a batched or unbatched input "
                                  f"(a {dims + 1}-D or {dims + 2}-D input for {len(pad)} pads), got a {x.ndim}-D "
                                  f"input of shape {list(x.shape)}")
    per_axis = []
    for i in range(dims):
        axis, begin, end = x.ndim - 1 - i, pad[2 * i], pad[2 * i + 1]
        size = x.shape[axis]
        if begin < 0 or end < 0:
            raise NotImplementedError(f"pad: negative pads crop only in constant mode, got {pad} in mode {mode!r}")
        largest = {"reflect": size - 1, "circular": size}.get(mode, None if size else 0)  # replicate: any
        if largest is not None and max(begin, end) > largest:
            raise RuntimeError(f"pad: in mode {mode!r} the padding must be at most {largest} at dimension {axis} of "
                               f"input {list(x.shape)}, but got padding ({begin}, {end})")
        if begin or end:
            per_axis.append((axis, (begin, end)))
    if not per_axis:
        return x
    return apply1(_INDEX_PAD, (("mode", mode), ("pads", tuple(per_axis))), x)


class _PadNd(Module):
    """``F.pad(x, padding, mode)``; ``padding`` an int (every side) or ``2 x dims`` ints."""

    mode = "constant"
    dims = 0

    def __init__(self, padding, value: float = 0.0):
        super().__init__()
        self.padding = (int(padding),) * (2 * self.dims) if isinstance(padding, (int, np.integer)) else \
            tuple(int(p) for p in padding)
        if len(self.padding) != 2 * self.dims:
            raise ValueError(f"{type(self).__name__} takes an int or {2 * self.dims} pads, got {padding}")
        self.value = value

    def forward(self, x: Tensor) -> Tensor:
        return pad(x, self.padding, self.mode, self.value if self.mode == "constant" else None)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}" if self.mode == "constant" else f"{self.padding}"


class ConstantPad1d(_PadNd):
    dims = 1


class ConstantPad2d(_PadNd):
    dims = 2


class ConstantPad3d(_PadNd):
    dims = 3


class _ZeroPad(_PadNd):
    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad1d(_ZeroPad):
    dims = 1


class ZeroPad2d(_ZeroPad):
    dims = 2


class ZeroPad3d(_ZeroPad):
    dims = 3


class _IndexPad(_PadNd):
    def __init__(self, padding):
        super().__init__(padding)


class ReflectionPad1d(_IndexPad):
    mode, dims = "reflect", 1


class ReflectionPad2d(_IndexPad):
    mode, dims = "reflect", 2


class ReflectionPad3d(_IndexPad):
    mode, dims = "reflect", 3


class ReplicationPad1d(_IndexPad):
    mode, dims = "replicate", 1


class ReplicationPad2d(_IndexPad):
    mode, dims = "replicate", 2


class ReplicationPad3d(_IndexPad):
    mode, dims = "replicate", 3


class CircularPad1d(_IndexPad):
    mode, dims = "circular", 1


class CircularPad2d(_IndexPad):
    mode, dims = "circular", 2


class CircularPad3d(_IndexPad):
    mode, dims = "circular", 3
