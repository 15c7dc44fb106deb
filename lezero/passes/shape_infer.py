"""shape-infer: refine ``?`` dims that shape inference can tell.

Each registered op's result types are re-inferred from its operand types (an op with regions,
``lz.kernel`` or ``lz.for``, from its regions, whose arguments follow its operands:
``OpDef.region_argument_types``); where the IR says
``?`` and inference knows the size, the result type is refined (never the other way, and never
against a static size: that is the verifier's business).  Function signatures follow their
``func.return``, and calls follow the signatures, until nothing changes.
"""
from __future__ import annotations

from dataclasses import dataclass

from lezero.ir.core import FuncOp, ModuleOp, Operation
from lezero.ir.opdef import OpError
from lezero.ir.types import TensorType
from lezero.passes.pass_base import Pass


def refine(current, inferred):
    """``current`` with its ``?`` dims filled from ``inferred``, or None if that adds nothing."""
    if not (isinstance(current, TensorType) and isinstance(inferred, TensorType)):
        return None
    if current.element_type != inferred.element_type or current.rank != inferred.rank:
        return None
    shape = []
    for have, know in zip(current.shape, inferred.shape):
        if have is None:
            shape.append(know)
        elif know is not None and know != have:
            return None  # a conflict: leave it for the verifier to report
        else:
            shape.append(have)
    refined = current.with_shape(shape)
    return refined if refined != current else None


def _refine_region_arguments(op: Operation) -> bool:
    """Region arguments follow the refined types the op's definition derives from its operands
    (an ``lz.kernel``'s are its operands; an ``lz.for``'s the index, invariants, carried values
    and slices of the scanned inputs)."""
    try:
        wanted = op.definition.region_argument_types(op)
    except OpError:
        return False
    if wanted is None:
        return False
    changed = False
    for region, types in zip(op.regions, wanted):
        for arg, want in zip(region.blocks[0].args if region.blocks else (), types):
            new = refine(arg.type, want)
            if new is not None:
                arg.type = new
                changed = True
    return changed


def infer_op_types(op: Operation) -> bool:
    """Refine ``op``'s result types in place; return whether any changed."""
    definition = op.definition
    if definition is None:
        return False
    changed = _refine_region_arguments(op)
    if not op.results:
        return changed
    try:
        inferred = definition.infer_for_op(op)  # an op with a region (lz.kernel) infers from it
    except (OpError, NotImplementedError):
        return changed
    for result, want in zip(op.results, inferred):
        new = refine(result.type, want)
        if new is not None:
            result.type = new
            changed = True
    return changed


def _refine_calls(module: ModuleOp, signatures: dict[str, FuncOp]) -> bool:
    changed = False
    for op in module.walk():
        if op.name != "func.call":
            continue
        callee = op.attributes.get("callee")
        func = signatures.get(getattr(callee, "name", None))
        if func is None:
            continue
        for result, want in zip(op.results, func.function_type.results):
            new = refine(result.type, want)
            if new is not None:
                result.type = new
                changed = True
    return changed


def infer_shapes(module: ModuleOp, max_rounds: int = 16) -> None:
    for _ in range(max_rounds):
        changed = False
        for op in module.walk():
            changed |= infer_op_types(op)
        for func in module.functions:
            before = func.function_type
            ret = func.return_op
            if ret is None or ret.name != "func.return" or len(ret.operands) != len(before.results):
                continue
            results = [refine(old, new) or old for old, new in zip(before.results, ret.operand_types)]
            if results != list(before.results):
                func.update_function_type()
                changed = True
        changed |= _refine_calls(module, {f.sym_name: f for f in module.functions})
        if not changed:
            return


@dataclass
class ShapeInfer(Pass):
    name = "shape-infer"
    summary = "Refine dynamic (?) dims in result types and signatures where inference knows them"

    def run(self, module: ModuleOp) -> None:
        infer_shapes(module)
