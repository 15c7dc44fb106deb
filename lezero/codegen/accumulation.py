"""Blocked accumulation: how a reduction kernel walks a long reduced extent so that its float
sums stay as accurate as numpy's pairwise ones (docs/architecture.md, "Accurate reductions").

The walk is a nest of loops, each adding at most ``FANOUT`` partial sums of the loop inside it
(the innermost, the elements themselves) into a partial sum of its own, so every value reaches the
result through ``log_FANOUT(n)`` short chains instead of one chain of length ``n``.  The innermost
loop of a row reduction may be longer (``leaf``): the vectorizer splits it across vector lanes,
each lane a partial sum of its own, combined as a tree.  Both backends (the LLVM loops, the
Triton chunk loop) take their loop trip counts from ``block_sizes``.
"""
from __future__ import annotations

from lezero.ir.types import BF16, F16, F32, ElementType

FANOUT = 16  # partial sums one loop adds in sequence: error <= (FANOUT - 1) * eps per level


def block_sizes(extent: int, leaf: int = FANOUT) -> list[int]:
    """The trip counts of the nested loops, outermost first, that walk ``extent`` steps: the
    innermost at most ``leaf`` steps, every other at most ``FANOUT``, split as evenly as possible.
    Their product may pass ``extent``: the caller bounds or masks the steps past it."""
    sizes = []
    capacity = leaf
    while extent > capacity:
        blocks = -(-extent // capacity)
        sizes.append(-(-extent // blocks))
        extent, capacity = blocks, FANOUT
    sizes.append(extent)
    return sizes[::-1]


def accumulator_type(dtype: ElementType) -> ElementType:
    """The element type a reduction of ``dtype`` accumulates in (f16 and bf16 in f32)."""
    return F32 if dtype in (F16, BF16) else dtype
