"""Numpy broadcasting of static and dynamic (``None``) shapes, the one rule every op shares.

Shapes align on the right; a dim of 1 stretches to the other.  Dynamic dims: ``? with 1 -> ?``,
``? with n -> n`` (the program is only valid if ? is n, or 1), ``? with ? -> ?``.
"""
from __future__ import annotations

from lezero.ir.opdef import OpError
from lezero.ir.types import format_shape

_INCOMPATIBLE = object()


def broadcast_dim(a, b):
    """One output dim from two input dims, or ``_INCOMPATIBLE``."""
    if a == b:
        return a
    if a == 1:
        return b
    if b == 1:
        return a
    if a is None:
        return b
    if b is None:
        return a
    return _INCOMPATIBLE


def try_broadcast_shapes(*shapes) -> tuple | None:
    """The broadcast shape, or None when the shapes do not broadcast."""
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        dim = 1
        for s in shapes:
            j = len(s) - rank + i
            if j >= 0:
                dim = broadcast_dim(dim, s[j])
                if dim is _INCOMPATIBLE:
                    return None
        out.append(dim)
    return tuple(out)


def broadcast_shapes(*shapes, what: str = "operand shapes") -> tuple:
    """The broadcast shape; ``OpError`` ("operand shapes 2x3 and 4x3 are not broadcast-compatible")."""
    out = try_broadcast_shapes(*shapes)
    if out is None:
        raise OpError(f"{what} {join_and([format_shape(s) for s in shapes])} are not broadcast-compatible")
    return out


def broadcasts_to(shape, target) -> bool:
    """Whether ``shape`` broadcasts to exactly ``target`` (numpy's ``broadcast_to`` rule)."""
    if len(shape) > len(target):
        return False
    for d, t in zip(reversed(shape), reversed(target)):
        if not (d == 1 or d is None or t is None or d == t):
            return False
    return True


def join_and(items) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    items = list(items)
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]
