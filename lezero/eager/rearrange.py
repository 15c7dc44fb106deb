"""The ``Tensor`` methods that rearrange elements without computing new values — ``flip``,
``roll``, ``repeat_interleave``, ``diag``, ``outer`` — and the whole-tensor comparisons
``allclose`` and ``equal``, as PyTorch defines them.

Each is composed from ops that exist (``index_select``, ``narrow`` and ``cat``, ``scatter``,
broadcasting), so each is differentiable by those ops' rules and reads a view where they do.
``allclose``/``equal`` return Python bools, as torch's do (they read the result on the host).
"""
from __future__ import annotations

import numpy as np

from lezero.eager.core import Tensor, as_input, axis_of
from lezero.eager.creation import tensor
from lezero.eager.functions import cat


def _dims(dims, ndim: int) -> tuple:
    dims = (dims,) if isinstance(dims, int) else tuple(dims)
    axes = tuple(axis_of(d, ndim) for d in dims)
    if len(set(axes)) != len(axes):
        raise RuntimeError(f"dims has duplicates, original flip dims size={len(dims)}, but unique flip dims "
                           f"size={len(set(axes))}")
    return axes


class Rearrangement:
    """Installed onto ``Tensor`` by ``lezero.eager.tensor``."""

    def flip(self, *dims) -> Tensor:
        """The elements in reverse order along each of ``dims``."""
        dims = dims[0] if len(dims) == 1 and not isinstance(dims[0], int) else dims
        out = self
        for axis in _dims(dims, self.ndim):
            n = self.shape[axis]
            out = out.index_select(axis, tensor(np.arange(n - 1, -1, -1)))
        return out

    def fliplr(self) -> Tensor:
        if self.ndim < 2:
            raise RuntimeError("Input must be >= 2-d.")
        return self.flip(1)

    def flipud(self) -> Tensor:
        if self.ndim < 1:
            raise RuntimeError("Input must be >= 1-d.")
        return self.flip(0)

    def roll(self, shifts, dims=None) -> Tensor:
        """The elements shifted by ``shifts`` along ``dims``, those falling off one end coming back
        at the other; without ``dims``, over the flattened tensor (then shaped back)."""
        if dims is None:
            if not isinstance(shifts, int) and len(shifts) != 1:
                raise RuntimeError(f"roll: shifts must be one number without dims, got {shifts}")
            shift = shifts if isinstance(shifts, int) else shifts[0]
            return self.reshape(-1).roll(shift, 0).reshape(self.shape)
        shifts = (shifts,) if isinstance(shifts, int) else tuple(shifts)
        dims = (dims,) if isinstance(dims, int) else tuple(dims)
        if len(shifts) != len(dims):
            raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shifts)}, dims:{len(dims)}")
        out = self
        for shift, dim in zip(shifts, dims):
            axis = axis_of(dim, self.ndim)
            n = self.shape[axis]
            shift = shift % n if n else 0
            if shift:
                out = cat([out.narrow(axis, n - shift, shift), out.narrow(axis, 0, n - shift)], axis)
        return out

    def repeat_interleave(self, repeats, dim=None, *, output_size=None) -> Tensor:
        """Each element repeated ``repeats`` times (a number, or one count per element along
        ``dim``), consecutively; without ``dim``, over the flattened tensor."""
        x = self.reshape(-1) if dim is None else self
        axis = 0 if dim is None else axis_of(dim, x.ndim)
        n = x.shape[axis]
        if isinstance(repeats, int):
            counts = np.full(n, repeats)
        else:
            counts = as_input(repeats, "repeat_interleave").numpy().reshape(-1)
            if counts.size == 1:
                counts = np.full(n, int(counts[0]))
            if counts.size != n:
                raise RuntimeError(f"repeats must have the same size as input along dim, but got repeats.size(0) "
                                   f"= {counts.size} and input.size({axis}) = {n}")
        if (counts < 0).any():
            raise RuntimeError("repeats can not be negative")
        if output_size is not None and output_size != int(counts.sum()):
            raise RuntimeError(f"repeat_interleave: output_size {output_size} is not the total of repeats, "
                               f"{int(counts.sum())}")
        return x.index_select(axis, tensor(np.repeat(np.arange(n), counts)))

    def diag(self, diagonal: int = 0) -> Tensor:
        """A vector's square matrix with it on the ``diagonal``-th diagonal, or a matrix's
        ``diagonal``-th diagonal as a vector."""
        if self.ndim == 2:
            return self.diagonal(diagonal)
        if self.ndim != 1:
            raise RuntimeError("diag(): Supports 1D or 2D tensors. Got " + f"{self.ndim}D")
        m, k = self.shape[0], abs(diagonal)
        n = m + k
        rows = np.arange(m) + (0 if diagonal >= 0 else k)
        cols = np.arange(m) + (diagonal if diagonal >= 0 else 0)
        positions = tensor(rows * n + cols)
        return self.new_zeros(n * n).scatter(0, positions, self).reshape(n, n)

    def outer(self, vec2) -> Tensor:
        """``self[i] * vec2[j]`` for vectors."""
        vec2 = as_input(vec2, "outer")
        if self.ndim != 1 or vec2.ndim != 1:
            raise RuntimeError(f"outer: expected 1-D tensors, got {self.ndim}-D and {vec2.ndim}-D")
        return self.reshape(-1, 1) * vec2.reshape(1, -1)

    ger = outer

    def masked_fill_(self, mask, value) -> Tensor:
        """``masked_fill`` in place."""
        return self._inplace(self._old().masked_fill(mask, value).to(self.dtype))

    def allclose(self, other, rtol: float = 1e-05, atol: float = 1e-08, equal_nan: bool = False) -> bool:
        """Whether ``|self - other| <= atol + rtol * |other|`` everywhere (broadcast), as torch."""
        a, b = self.detach().numpy(), as_input(other, "allclose").detach().numpy()
        return bool(np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=equal_nan))

    def equal(self, other) -> bool:
        """Whether both have the same shape and the same elements."""
        other = as_input(other, "equal")
        return self.shape == other.shape and bool(np.array_equal(self.detach().numpy(), other.detach().numpy()))


GROUPS = (Rearrangement,)
