"""Axis attributes: negative axes count from the end; out-of-range and repeated axes are errors."""
from __future__ import annotations

from lezero.ir.opdef import OpError


def normalize_axis(axis: int, rank: int, what: str = "axis") -> int:
    """``axis`` in ``[0, rank)``; ``-1`` is the last axis."""
    if not -rank <= axis < rank:
        valid = f"[{-rank}, {rank - 1}]" if rank else "none (the operand is a scalar)"
        raise OpError(f"{what} {axis} is out of range for rank {rank} (valid: {valid})")
    return axis % rank


def normalize_axes(axes, rank: int, what: str = "axes") -> tuple:
    """Each axis normalized, order kept; a repeated axis is an error."""
    out = tuple(normalize_axis(a, rank, f"{what} entry") for a in axes)
    if len(set(out)) != len(out):
        raise OpError(f"{what} {list(axes)} name an axis twice")
    return out


def reduction_axes(axes, rank: int) -> tuple:
    """Sorted normalized axes for a reduction; absent or empty means every axis."""
    if not axes:
        return tuple(range(rank))
    return tuple(sorted(normalize_axes(axes, rank)))
