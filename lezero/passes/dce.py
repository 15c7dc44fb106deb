"""dce: erase pure ops whose results are unused, and private functions nothing refers to.

Inside loops and branches too, and of the control-flow ops themselves what nothing needs
(``prune_control_flow``): an ``lz.for``'s unused stacked outputs, its carried values whose
result is unused and whose body computes them only for themselves (a counter nobody reads), its
invariants and scanned inputs the body does not read; the same for ``lz.while`` (carried values
the condition does not read) and ``lz.if`` (unused results, operands neither branch reads).  An
op is pruned by rebuilding it with fewer operands and results around the same regions.
"""
from __future__ import annotations

from dataclasses import dataclass

from lezero.ir.attributes import ArrayAttr, SymbolRefAttr
from lezero.ir.core import Block, FuncOp, ModuleOp, Operation
from lezero.passes.pass_base import Pass
from lezero.passes.rewriter import is_pure, is_trivially_dead


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
        elif op.name in _PRUNERS:
            erased += _PRUNERS[op.name](op)
    return erased


# --- the control-flow ops ----------------------------------------------------------------------

def _only_feeds(arg, block: Block, slot: int) -> bool:
    """Whether ``arg`` and everything computed from it in ``block`` reach nothing but operand
    ``slot`` of the block's yield (so dropping that yielded value makes them all dead)."""
    terminator = block.terminator
    reached, frontier = {arg}, [arg]
    while frontier:
        value = frontier.pop()
        for use in value.uses:
            if use.op is terminator:
                if use.index != slot:
                    return False
            elif use.op.parent is not block or not is_pure(use.op):
                return False
            else:
                for r in use.op.results:
                    if r not in reached:
                        reached.add(r)
                        frontier.append(r)
    return True


def _drop_yielded(block: Block, slots: set) -> None:
    terminator = block.terminator
    terminator.set_operands([v for k, v in enumerate(terminator.operands) if k not in slots])


def _drop_arguments(block: Block, indices) -> None:
    for index in sorted(indices, reverse=True):
        block.erase_argument(index)


def _rebuild(op: Operation, operand_keep: list[int], result_keep: list[int], attributes: dict) -> None:
    """Replace ``op`` by the same op with only the kept operands and results, around its regions."""
    new = Operation(op.name, [op.operands[k] for k in operand_keep], [op.results[k].type for k in result_keep],
                    {**op.attributes, **attributes}, (), op.location)
    for region in op.regions:
        new.add_region(region)
    op.regions = []
    op.parent.insert_before(op, new)
    for j, k in enumerate(result_keep):
        op.results[k].replace_all_uses_with(new.results[j])
    op.erase()


def _prune_for(op: Operation) -> int:
    definition = op.definition
    _, ni, nc, ns = definition.counts(op)
    body = op.regions[0].blocks[0]
    ny = len(op.results) - nc
    dead_ys = {nc + k for k in range(ny) if not op.results[nc + k].uses}
    dead_carried = {k for k in range(nc) if not op.results[k].uses and _only_feeds(body.args[1 + ni + k], body, k)}
    if dead_ys or dead_carried:
        _drop_yielded(body, dead_ys | dead_carried)
        _sweep_block(body)
    dead_args = {1 + k for k in range(ni) if not body.args[1 + k].uses}
    dead_args |= {1 + ni + k for k in dead_carried}
    dead_args |= {1 + ni + nc + k for k in range(ns) if not body.args[1 + ni + nc + k].uses}
    if not dead_args and not dead_ys:
        return 0
    _drop_arguments(body, dead_args)
    keep = [k for k in range(len(op.operands)) if 1 + k not in dead_args]
    results = [k for k in range(len(op.results)) if k not in dead_ys and k not in dead_carried]
    num = definition.make_attributes({"num_invariant": sum(k < ni for k in keep),
                                      "num_carried": sum(ni <= k < ni + nc for k in keep)})
    _rebuild(op, keep, results, num)
    return len(dead_args) + len(dead_ys)


def _prune_while(op: Operation) -> int:
    ni = op.definition.carried_start(op)
    condition, body = op.regions[0].blocks[0], op.regions[1].blocks[0]
    nc = len(op.operands) - ni
    dead_carried = {k for k in range(nc) if not op.results[k].uses and not condition.args[ni + k].uses
                    and _only_feeds(body.args[ni + k], body, k)}
    if dead_carried:
        _drop_yielded(body, dead_carried)
        _sweep_block(body)
    dead = {k for k in range(ni) if not condition.args[k].uses and not body.args[k].uses}
    dead |= {ni + k for k in dead_carried}
    if not dead:
        return 0
    for block in (condition, body):
        _drop_arguments(block, dead)
    keep = [k for k in range(len(op.operands)) if k not in dead]
    _rebuild(op, keep, [k for k in range(nc) if k not in dead_carried],
             op.definition.make_attributes({"num_invariant": sum(k < ni for k in keep)}))
    return len(dead)


def _prune_if(op: Operation) -> int:
    branches = [r.blocks[0] for r in op.regions]
    dead_results = {k for k, r in enumerate(op.results) if not r.uses}
    if dead_results:
        for block in branches:
            _drop_yielded(block, dead_results)
            _sweep_block(block)
    dead = {k for k in range(len(op.operands) - 1) if not any(block.args[k].uses for block in branches)}
    if not dead and not dead_results:
        return 0
    for block in branches:
        _drop_arguments(block, dead)
    _rebuild(op, [0] + [1 + k for k in range(len(op.operands) - 1) if k not in dead],
             [k for k in range(len(op.results)) if k not in dead_results], {})
    return len(dead) + len(dead_results)


_PRUNERS = {"lz.for": _prune_for, "lz.while": _prune_while, "lz.if": _prune_if}


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
