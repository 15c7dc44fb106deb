"""constant-fold: evaluate ops whose operands are all constants, with the op's own reference.

The result becomes an ``lz.constant``.  Results larger than ``max-elements`` stay unfolded, so a
``broadcast_to`` of a scalar does not turn into a huge literal; so do results with dynamic
dims and ops whose reference raises.  Constants that folding leaves unused are erased.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lezero.ir.attributes import DenseElementsAttr
from lezero.ir.builder import Builder
from lezero.ir.core import Block, ModuleOp, Operation
from lezero.ir.interpreter import evaluate_op
from lezero.ir.types import TensorType
from lezero.passes.pass_base import Pass, option
from lezero.passes.rewriter import is_pure

CONSTANT = "lz.constant"


def constant_value(value) -> DenseElementsAttr | None:
    """The dense attribute of an ``lz.constant`` result, or None for any other value."""
    op = getattr(value, "op", None)
    if op is None or op.name != CONSTANT:
        return None
    attr = op.attributes.get("value")
    return attr if isinstance(attr, DenseElementsAttr) else None


def fold_op(op: Operation, max_elements: int) -> list[DenseElementsAttr] | None:
    """The constant results of ``op`` if it can be folded, else None."""
    if op.name == CONSTANT or op.regions or not op.results or not is_pure(op):
        return None
    inputs = [constant_value(v) for v in op.operands]
    if any(a is None for a in inputs):
        return None
    types = op.result_types
    if not all(isinstance(t, TensorType) and t.is_static and t.num_elements <= max_elements for t in types):
        return None
    try:
        with np.errstate(all="ignore"):
            outputs = evaluate_op(op, [a.array for a in inputs])
        return [DenseElementsAttr(t, np.asarray(out)) for t, out in zip(types, outputs, strict=True)]
    except Exception:  # noqa: BLE001 - an op the reference cannot evaluate here is just left alone
        return None


def fold_block(block: Block, max_elements: int) -> int:
    folded = 0
    for op in list(block.ops):
        for region in op.regions:
            for inner in region.blocks:
                folded += fold_block(inner, max_elements)
        values = fold_op(op, max_elements)
        if values is None:
            continue
        producers = [v.op for v in op.operands]
        b = Builder.before(op)
        for result, value in zip(op.results, values):
            result.replace_all_uses_with(b.constant(value))
        op.erase()
        folded += 1
        for p in producers:
            if p.parent is not None and not any(r.uses for r in p.results):
                p.erase()
    return folded


@dataclass
class ConstantFold(Pass):
    name = "constant-fold"
    summary = "Evaluate ops whose operands are all constants and replace them by lz.constant"
    max_elements: int = option(1 << 20, "largest result (in elements) to fold")

    def run(self, module: ModuleOp) -> None:
        for region in module.regions:
            for block in region.blocks:
                fold_block(block, self.max_elements)
