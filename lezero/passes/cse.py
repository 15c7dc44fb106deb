"""cse: merge pure ops that compute the same thing.

Two ops are the same when they have the same name, operands (in any order for a commutative
op), attributes and result types.  Each block is walked in order with a table of the ops seen
so far; a nested region starts its own table, so an op is only ever replaced by one that
dominates it in the same region, and nothing reaches across a region boundary (a kernel body
may be isolated from the values around it).
"""
from __future__ import annotations

from dataclasses import dataclass

from lezero.ir.core import Block, ModuleOp, Operation
from lezero.ir.opdef import COMMUTATIVE
from lezero.passes.pass_base import Pass
from lezero.passes.rewriter import is_pure


def _key(op: Operation):
    operands = op.operands
    if op.definition.has_trait(COMMUTATIVE):
        operands = sorted(operands, key=id)
    try:
        attrs = frozenset(op.attributes.items())
        hash(attrs)
    except TypeError:  # an attribute that cannot be hashed: never merged
        return None
    return (op.name, tuple(map(id, operands)), attrs, tuple(op.result_types))


def cse_block(block: Block) -> int:
    """Merge equivalent ops in ``block`` (and, separately, in each region nested in it)."""
    seen: dict = {}
    merged = 0
    for op in list(block.ops):
        for region in op.regions:
            for inner in region.blocks:
                merged += cse_block(inner)
        if op.regions or not op.results or not is_pure(op):
            continue
        key = _key(op)
        if key is None:
            continue
        existing = seen.get(key)
        if existing is None:
            seen[key] = op
            continue
        for old, new in zip(op.results, existing.results):
            old.replace_all_uses_with(new)
        op.erase()
        merged += 1
    return merged


@dataclass
class CommonSubexpressionElimination(Pass):
    name = "cse"
    summary = "Merge pure ops with the same name, operands, attributes and result types"

    def run(self, module: ModuleOp) -> None:
        for region in module.regions:
            for block in region.blocks:
                cse_block(block)
