"""licm: loop-invariant code motion.  An op in an ``lz.for`` or ``lz.while`` region whose operands
are all invariants (or computed from invariants and constants only) runs once before the loop
instead of once per iteration.

The regions are isolated from above, so a hoisted value cannot simply be used from inside: each
hoisted value the region still needs becomes a new invariant operand (and block argument) of the
loop.  The ops move out in region order (each hoisted op's invariant operands were hoisted, or are
invariants, before it); constants they read are copied out, and stay inside for the others that
use them.  A matrix transpose that only matmuls read stays too (the GEMM reads through it for
free; hoisted, it is a copy of the weight per call).  Ops with regions stay (a nested loop is not moved whole), and so do the index and
carried values and everything computed from them.  Nested loops go innermost first, so an op
hoisted out of an inner loop can leave the outer one as well.

Not this pass's job: the input projection of an RNN (``W_ih @ x_t`` for every step, one GEMM
over all steps) depends on the scanned input; the rnn layer builds it before the loop itself.
Run ``cse`` and ``dce`` after it (``KERNEL_PIPELINE`` does): a forward loop and its gradient loop
hoist the same ``W^T``, merged once outside, and an invariant whose only reader moved out is
dropped.  benchmarks/loop_gradient.py: an Elman RNN's compiled gradient (hidden 256, batch 8, 64
steps) takes 0.79x the time without licm.
"""
from __future__ import annotations

from dataclasses import dataclass

from lezero.ir.builder import Builder
from lezero.ir.core import ModuleOp, Operation
from lezero.passes.pass_base import Pass
from lezero.passes.rewriter import is_pure

# Where a loop's invariants start among each of its regions' arguments (lz.for: after the index).
FIRST_INVARIANT_ARGUMENT = {"lz.for": 1, "lz.while": 0}


def hoist_invariants(loop: Operation) -> int:
    """Move the invariant ops of ``loop``'s regions before it; return how many moved."""
    offset = FIRST_INVARIANT_ARGUMENT[loop.name]
    moved = 0
    for index in range(len(loop.regions)):
        moved += _hoist_from_region(loop, index, offset)
    return moved


def _read_by_gemms_only(op: Operation) -> bool:
    """A matrix transpose that only matmuls read: the GEMM reads its operand through it (partition's
    matmul prologue) at no cost, so it stays; hoisted it would copy the weight on every call (an
    LSTM's W_hh^T, 1 MB at hidden 256, 4 MB at 512; the GEMM per step took the same time either way)."""
    return (op.name == "lz.transpose" and op.result.type.rank == 2
            and all(use.op.name == "lz.matmul" for use in op.result.uses))


def _hoist_from_region(loop: Operation, index: int, offset: int) -> int:
    definition = loop.definition
    ni = definition.attrs(loop).num_invariant
    block = loop.regions[index].blocks[0]
    outer = {arg: loop.operands[k] for k, arg in enumerate(block.args[offset:offset + ni])}  # inner -> outer
    constants = {}  # inner constant op -> its results, copied out only when a hoisted op reads them
    hoisted: list[Operation] = []
    b = Builder.before(loop)
    for op in block.ops[:-1]:
        if op.regions or not is_pure(op) or _read_by_gemms_only(op):
            continue
        if not op.operands:
            constants.update({r: op for r in op.results})
            continue
        if not all(v in outer or v in constants for v in op.operands):
            continue
        for v in op.operands:
            if v not in outer:  # a constant: copied out (it stays inside for the ops that do not move)
                outer.update(zip(constants[v].results, b.insert(constants[v].clone({})).results))
        outer.update(zip(op.results, b.insert(op.clone(dict(outer))).results))
        hoisted.append(op)
    if not hoisted:
        return 0
    hoisted_ids = {id(op) for op in hoisted}
    needed = [r for op in hoisted for r in op.results if any(id(u.op) not in hoisted_ids for u in r.uses)]
    operands = list(loop.operands)
    for k, inner in enumerate(needed):
        operands.insert(ni + k, outer[inner])
        for region in loop.regions:  # every region of the loop takes the same invariants
            arg = region.blocks[0].insert_argument(offset + ni + k, inner.type)
            if region.blocks[0] is block:
                inner.replace_all_uses_with(arg)
    loop.set_operands(operands)
    loop.attributes.update(definition.make_attributes({"num_invariant": ni + len(needed)}))
    for op in reversed(hoisted):
        op.erase()
    return len(hoisted)


@dataclass
class LoopInvariantCodeMotion(Pass):
    name = "licm"
    summary = "Move ops of lz.for / lz.while bodies that depend only on invariants and constants before the loop"

    def run(self, module: ModuleOp) -> None:
        loops = [op for op in module.walk() if op.name in FIRST_INVARIANT_ARGUMENT]
        for loop in reversed(loops):  # innermost first: the walk lists parents before children
            hoist_invariants(loop)
