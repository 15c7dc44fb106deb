"""constant-fold: evaluate ops whose operands are all constants, with the op's own reference.

The result becomes an ``lz.constant``.  Results larger than ``max-elements`` stay unfolded, so a
``broadcast_to`` of a scalar does not turn into a huge literal; so do results with dynamic
dims and ops whose reference raises.  Constants that folding leaves unused are erased.

A ``broadcast_to`` of a constant whose every user is elementwise stays as it is: fused into their
kernel it is an index, where a literal of its shape costs memory, and it would be folded only up
to ``max-elements``, so a model's schedule would change there with its sizes (BERT's token-type
rows ``[b, s, h]``, issue 11).  Its users still fold: they read its constant broadcast.

A ``broadcast_to`` of a constant that only contractions read (``lz.matmul``, ``lz.conv2d``, also
through transposes and reshapes) folds at any size: a contraction reads that operand from memory
either way, and unfolded it is written there by a kernel of its own on every run.  The light
ONNX models' weights are ``ConstantOfShape`` generators: alexnet's 4096 x 9216 fully connected
weight was broadcast and transposed into a 151 MB buffer per run, then read back; ONNX Runtime
folds them into initializers at session start, and so does this now (issue 11).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lezero.ir.attributes import DenseElementsAttr
from lezero.ir.builder import Builder
from lezero.ir.core import Block, ModuleOp, Operation
from lezero.ir.interpreter import evaluate_op
from lezero.ir.opdef import ELEMENTWISE
from lezero.ir.types import TensorType
from lezero.passes.fusion_cost import CONTRACTIONS
from lezero.passes.pass_base import Pass, option
from lezero.passes.rewriter import is_pure

CONSTANT = "lz.constant"
# Ops through which a contraction's operand is still read as stored (module docstring).
LAYOUT_OPS = ("lz.transpose", "lz.reshape")


def constant_value(value) -> DenseElementsAttr | None:
    """The dense attribute of an ``lz.constant`` result, or None for any other value."""
    op = getattr(value, "op", None)
    if op is None or op.name != CONSTANT:
        return None
    attr = op.attributes.get("value")
    return attr if isinstance(attr, DenseElementsAttr) else None


def _broadcast_constant(value) -> np.ndarray | None:
    """The array of ``value`` when it is a ``broadcast_to`` of a constant (a read-only view), else None."""
    op = getattr(value, "op", None)
    source = constant_value(op.operands[0]) if op is not None and op.name == "lz.broadcast_to" else None
    if source is None or not (isinstance(value.type, TensorType) and value.type.is_static):
        return None
    return np.broadcast_to(source.array, value.type.shape)


def _read_by_elementwise_ops(op: Operation) -> bool:
    uses = [u.op for r in op.results for u in r.uses]
    return bool(uses) and all(u.definition is not None and u.definition.has_trait(ELEMENTWISE) for u in uses)


def _read_by_contractions(op: Operation) -> bool:
    """Whether every use of ``op``'s results is an operand of a contraction, directly or through
    ``LAYOUT_OPS``."""
    uses = [u.op for r in op.results for u in r.uses]
    return bool(uses) and all(u.name in CONTRACTIONS or (u.name in LAYOUT_OPS and _read_by_contractions(u))
                              for u in uses)


def fold_op(op: Operation, max_elements: int | None) -> list[DenseElementsAttr] | None:
    """The constant results of ``op`` if it can be folded, else None."""
    if op.name == CONSTANT or op.regions or not op.results or not is_pure(op):
        return None
    if op.name == "lz.broadcast_to":
        if _read_by_elementwise_ops(op):
            return None  # module docstring
        if _read_by_contractions(op):
            max_elements = None  # module docstring
    inputs = [constant_value(v) for v in op.operands]
    inputs = [a.array if a is not None else _broadcast_constant(v) for a, v in zip(inputs, op.operands)]
    if any(a is None for a in inputs):
        return None
    types = op.result_types
    if not all(isinstance(t, TensorType) and t.is_static and (max_elements is None or t.num_elements <= max_elements)
               for t in types):
        return None
    try:
        with np.errstate(all="ignore"):
            outputs = evaluate_op(op, inputs)
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
        while producers:  # (a broadcast of a constant that was read, then its constant)
            p = producers.pop()
            if p is not None and p.parent is not None and not any(r.uses for r in p.results):
                producers += [v.op for v in p.operands]
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
