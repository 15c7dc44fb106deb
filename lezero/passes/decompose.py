"""decompose: replace every composite op (softmax, layer_norm, ...) by the primitives its
``OpDef.decompose`` builds, repeating while a decomposition produced composites of its own."""
from __future__ import annotations

from dataclasses import dataclass

from lezero.ir.builder import Builder
from lezero.ir.core import ModuleOp, Operation, Value
from lezero.ir.diagnostics import IRError
from lezero.ir.opdef import COMPOSITE
from lezero.ir.verifier import types_compatible
from lezero.passes.pass_base import Pass, option

MAX_ROUNDS = 32  # nesting depth of composites built from composites


def decompose_op(op: Operation) -> None:
    """Replace ``op`` by its decomposition (inserted before it) and erase it."""
    definition = op.definition
    block, start = op.parent, op.parent.index_of(op)
    result = definition.decompose(Builder.before(op), op, definition.attrs(op))
    created = set(block.ops[start:block.index_of(op)])
    if result is None:
        raise IRError(f"'{op.name}' op is composite but its definition builds no decomposition", op.location)
    values = [result] if isinstance(result, Value) else list(result)
    if len(values) != len(op.results):
        raise IRError(f"'{op.name}' op decomposition returned {len(values)} values for {len(op.results)} "
                      f"results", op.location)
    for old, new in zip(op.results, values):
        if new.type == old.type:
            continue
        if types_compatible(old.type, new.type) and getattr(new, "op", None) in created:
            new.type = old.type  # keep the declared (less refined) type: func.return wants it exactly
        else:
            raise IRError(f"'{op.name}' op decomposition returned {new.type} for a result of type {old.type}",
                          op.location)
    for old, new in zip(op.results, values):
        old.replace_all_uses_with(new)
    op.erase()


@dataclass
class Decompose(Pass):
    name = "decompose"
    summary = "Replace composite ops (softmax, layer_norm, ...) by the primitives they are made of"
    ops: list[str] = option([], "only these ops (e.g. lz.softmax,lz.layer_norm); all composites if empty")
    keep: list[str] = option([], "composites left whole: a target's kernel computes them (the CPU's lz.attention)")

    def selected(self, op: Operation) -> bool:
        definition = op.definition
        if definition is None or not definition.has_trait(COMPOSITE) or op.name in self.keep:
            return False
        return not self.ops or op.name in self.ops

    def run(self, module: ModuleOp) -> None:
        for _ in range(MAX_ROUNDS):
            todo = [op for op in module.walk() if self.selected(op)]
            if not todo:
                return
            for op in todo:
                decompose_op(op)
        raise IRError(f"decompose did not finish after {MAX_ROUNDS} rounds: composites keep producing "
                      f"composites ({', '.join(sorted({op.name for op in todo}))})", todo[0].location)
