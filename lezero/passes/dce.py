"""dce: erase pure ops whose results are unused, and private functions nothing refers to."""
from __future__ import annotations

from dataclasses import dataclass

from lezero.ir.attributes import ArrayAttr, SymbolRefAttr
from lezero.ir.core import Block, FuncOp, ModuleOp, Operation
from lezero.passes.pass_base import Pass
from lezero.passes.rewriter import is_trivially_dead


def erase_dead_ops(root: Operation) -> int:
    """Erase trivially dead ops under ``root`` until none is left; return how many were erased.

    Blocks are walked backwards, nested regions before their op, so a chain of dead ops goes
    in one sweep; the sweep repeats only when a nested region's erasures freed something outside.
    """
    total = 0
    while True:
        erased = sum(_sweep_block(block) for region in root.regions for block in region.blocks)
        total += erased
        if not erased:
            return total


def _sweep_block(block: Block) -> int:
    erased = 0
    for op in reversed(list(block.ops)):
        for region in op.regions:
            for inner in region.blocks:
                erased += _sweep_block(inner)
        if is_trivially_dead(op):
            op.erase()
            erased += 1
    return erased


def referenced_symbols(root: Operation) -> set[str]:
    """Every ``@name`` any attribute under ``root`` mentions (callees, kernels, ...)."""
    names: set[str] = set()

    def visit(attr) -> None:
        if isinstance(attr, SymbolRefAttr):
            names.add(attr.name)
        elif isinstance(attr, ArrayAttr):
            for a in attr.values:
                visit(a)

    for op in root.walk():
        for attr in op.attributes.values():
            visit(attr)
    return names


def is_private(func: FuncOp) -> bool:
    visibility = func.attributes.get("sym_visibility")
    return visibility is not None and getattr(visibility, "value", None) == "private"


def erase_unused_private_functions(module: ModuleOp) -> int:
    """Erase private functions no other function refers to (repeating: one may keep another alive)."""
    total = 0
    while True:
        refs = {id(f): referenced_symbols(f) for f in module.functions}
        outside = {name for op in module.body.ops if not isinstance(op, FuncOp) for name in referenced_symbols(op)}
        outside |= {a.name for a in module.attributes.values() if isinstance(a, SymbolRefAttr)}
        dead = [f for f in module.functions if is_private(f) and f.sym_name not in outside and not any(
            f.sym_name in refs[id(other)] for other in module.functions if other is not f)]
        if not dead:
            return total
        for func in dead:
            func.erase()
        total += len(dead)


@dataclass
class DeadCodeElimination(Pass):
    name = "dce"
    summary = "Erase pure ops whose results are unused, and unreferenced private functions"

    def run(self, module: ModuleOp) -> None:
        erase_dead_ops(module)
        erase_unused_private_functions(module)
