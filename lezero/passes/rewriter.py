"""Rewrite patterns and the greedy driver that applies them to a fixed point.

A ``RewritePattern`` matches one op and rewrites it through a ``PatternRewriter``; the rewriter
keeps use lists right and tells the driver what changed, so the ops a rewrite touched are
looked at again.  Ops the driver finds pure and unused are erased along the way, as MLIR's
greedy driver does.

For the common case of "this op is really that value" there are table rules (``Rule``): one
line each, with its comment, collected in plain lists that combine with ``+``.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from lezero.ir.builder import Builder
from lezero.ir.core import Operation, Value
from lezero.ir.diagnostics import IRError
from lezero.ir.opdef import PURE, TERMINATOR


class ConvergenceError(IRError):
    """The greedy driver hit its iteration bound: some patterns keep undoing each other."""


def is_pure(op: Operation) -> bool:
    definition = op.definition
    return definition is not None and definition.has_trait(PURE) and not definition.has_trait(TERMINATOR)


def is_trivially_dead(op: Operation) -> bool:
    """A pure op none of whose results is used (erasing it changes nothing observable)."""
    return is_pure(op) and not any(r.uses for r in op.results)


class RewritePattern:
    """Match an op and rewrite it.  ``root`` limits it to ops of those names (None: any op)."""

    root: str | tuple[str, ...] | None = None
    benefit: int = 1

    def match_and_rewrite(self, op: Operation, rewriter: "PatternRewriter") -> bool:
        """Rewrite ``op`` through ``rewriter`` and return True, or leave the IR alone and return False."""
        raise NotImplementedError

    @property
    def roots(self) -> tuple[str, ...] | None:
        return (self.root,) if isinstance(self.root, str) else self.root

    def __repr__(self) -> str:
        return type(self).__name__


class PatternRewriter(Builder):
    """A builder whose every change is reported to a listener (the greedy driver's worklist).

    Patterns must change the IR only through it: ``create``/``op``/``constant`` insert before the
    matched op; ``replace_op``, ``replace_all_uses_with``, ``erase_op`` and ``set_operand``
    keep use lists right.
    """

    def __init__(self, listener: "_Listener | None" = None):
        super().__init__()
        self.listener = listener or _Listener()
        self._anchor: Operation | None = None  # insert before it; its index is found when needed

    def set_insertion_point_before(self, op: Operation) -> None:
        self.block, self.index, self.location = op.parent, None, op.location
        self._anchor = op

    def set_insertion_point_after(self, op: Operation) -> None:
        self.block, self.index, self.location = op.parent, op.parent.index_of(op) + 1, op.location
        self._anchor = None

    def _resolve(self) -> None:
        if self._anchor is not None:
            self.index = self.block.index_of(self._anchor)
            self._anchor = None

    def insert(self, op: Operation) -> Operation:
        self._resolve()
        super().insert(op)
        if self.block is not None:
            self.listener.created(op)
        return op

    def replace_all_uses_with(self, old: Value, new: Value) -> None:
        if old is new:
            return
        for user in old.users:
            self.listener.changed(user)
        old.replace_all_uses_with(new)
        self.listener.changed_value(new)

    def replace_op(self, op: Operation, new_values: Value | Sequence[Value]) -> None:
        """Replace every use of ``op``'s results by ``new_values`` (one per result), then erase it."""
        if isinstance(new_values, Value):
            new_values = [new_values]
        new_values = list(new_values)
        if len(new_values) != len(op.results):
            raise ValueError(f"replacing {op.name} ({len(op.results)} results) with {len(new_values)} values")
        for old, new in zip(op.results, new_values):
            self.replace_all_uses_with(old, new)
        self.erase_op(op)

    def erase_op(self, op: Operation) -> None:
        """Erase ``op`` (its results must be unused) and every op nested in it."""
        producers = [v.owner for v in op.operands if hasattr(v, "op")]
        for nested in op.walk():
            self.listener.erased(nested)
        op.erase()
        for p in producers:
            self.listener.changed(p)

    def set_operand(self, op: Operation, index: int, value: Value) -> None:
        old = op.operands[index]
        op.set_operand(index, value)
        self.listener.changed(op)
        if hasattr(old, "op"):
            self.listener.changed(old.op)

    def notify_changed(self, op: Operation) -> None:
        """Say that ``op`` was modified in place (attributes, result types)."""
        self.listener.changed(op)
        for r in op.results:
            for user in r.users:
                self.listener.changed(user)


class _Listener:
    def created(self, op: Operation) -> None:
        pass

    def changed(self, op: Operation) -> None:
        pass

    def changed_value(self, value: Value) -> None:
        pass

    def erased(self, op: Operation) -> None:
        pass


class _Worklist(_Listener):
    def __init__(self):
        self.queue: deque[Operation] = deque()
        self.queued: set[Operation] = set()
        self.erased_ops: set[Operation] = set()
        self.changes = 0

    def push(self, op: Operation) -> None:
        if op not in self.queued and op not in self.erased_ops:
            self.queued.add(op)
            self.queue.append(op)

    def pop(self) -> Operation | None:
        while self.queue:
            op = self.queue.popleft()
            self.queued.discard(op)
            if op not in self.erased_ops:
                return op
        return None

    def created(self, op):
        self.changes += 1
        for nested in op.walk():
            self.push(nested)

    def changed(self, op):
        self.changes += 1
        self.push(op)

    def changed_value(self, value):
        if hasattr(value, "op"):
            self.push(value.op)
        for user in value.users:
            self.push(user)

    def erased(self, op):
        self.changes += 1
        self.erased_ops.add(op)


def apply_patterns_greedily(root: Operation, patterns: Sequence[RewritePattern], *,
                            max_iterations: int = 10, remove_dead: bool = True) -> bool:
    """Apply ``patterns`` to every op under ``root`` until none applies; return whether anything changed.

    Each iteration seeds a worklist with every op (top-down) and drains it, re-queuing what each
    rewrite touched.  If the IR still changes after ``max_iterations`` iterations, raise
    ``ConvergenceError``.
    """
    by_name: dict[str, list[RewritePattern]] = {}
    generic: list[RewritePattern] = []
    for p in patterns:
        if p.roots is None:
            generic.append(p)
        else:
            for name in p.roots:
                by_name.setdefault(name, []).append(p)

    def candidates(name: str) -> list[RewritePattern]:
        found = by_name.get(name, []) + generic
        return sorted(found, key=lambda p: -p.benefit) if len(found) > 1 else found

    changed_any = False
    last_applied: list[str] = []
    for _ in range(max_iterations):
        worklist = _Worklist()
        rewriter = PatternRewriter(worklist)
        for op in root.walk():
            if op is not root:
                worklist.push(op)
        # A whole iteration of rewrites is bounded too, so a cycle inside one drain is caught.
        budget = 64 * (len(worklist.queue) + 16)
        while (op := worklist.pop()) is not None:
            if not _is_attached(op, root):
                continue
            if remove_dead and is_trivially_dead(op):
                rewriter.erase_op(op)
                continue
            for pattern in candidates(op.name):
                rewriter.set_insertion_point_before(op)
                if pattern.match_and_rewrite(op, rewriter):
                    last_applied.append(repr(pattern))
                    del last_applied[:-4]
                    break
            budget -= 1
            if budget < 0:
                break
        if worklist.changes == 0:
            return changed_any
        changed_any = True
    raise ConvergenceError(f"rewrite patterns did not converge in {max_iterations} iterations "
                           f"(last applied: {', '.join(last_applied) or 'none'})", root.location)


def _is_attached(op: Operation, root: Operation) -> bool:
    """Whether ``op`` is still (transitively) inside ``root``."""
    while op is not root:
        block = op.parent
        if block is None or block.parent is None or block.parent.parent is None:
            return False
        op = block.parent.parent
    return True


# --- table rules ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Rule:
    """``op`` is replaced by what ``rewrite(m, *operands)`` returns (a Value), unless it returns None.

    ``m`` is a ``Match``: the op, its typed attributes, and a builder for new ops.  The rule
    fires only when the replacement has exactly the op's result type, so ``x*1`` where the 1
    broadcasts ``x`` to a larger shape is left alone.
    """

    op: str
    rewrite: Callable
    doc: str

    def __str__(self) -> str:
        return f"{self.op}: {self.doc}"


class Match:
    """What a table rule sees: ``m.op``, ``m.attrs``, ``m.type`` (the result type), and builders."""

    def __init__(self, op: Operation, rewriter: PatternRewriter):
        self.op = op
        # New ops go in through a plain builder, and are announced to the driver only if the rule
        # fires: a rule that builds and then gives up leaves no trace (and no phantom change).
        self.rewriter = rewriter
        self._builder: Builder | None = None
        self.created: list[Operation] = []
        self._attrs = None

    @property
    def builder(self) -> Builder:
        if self._builder is None:
            self.rewriter._resolve()
            self._builder = Builder(self.rewriter.block, self.rewriter.index, self.rewriter.location)
        return self._builder

    @property
    def attrs(self):
        if self._attrs is None:
            self._attrs = self.op.definition.attrs(self.op)
        return self._attrs

    @property
    def type(self):
        return self.op.result.type

    def create(self, name: str, operands: Sequence[Value] = (), attributes: dict | None = None,
               result_types=None) -> Operation:
        op = self.builder.create(name, operands, attributes, result_types)
        self.created.append(op)
        return op

    def op_like(self, operands: Sequence[Value], **attributes) -> Value:
        """A copy of the matched op (same name and result type) on other operands and attributes."""
        attrs = dict(self.op.attributes)
        if attributes:
            attrs.update(self.op.definition.make_attributes(attributes))
        return self.create(self.op.name, operands, attrs, self.op.result_types).result

    def constant(self, value, type_=None) -> Value:
        """A constant of the result type (``value`` broadcast), or of ``type_``."""
        from lezero.ir.attributes import DenseElementsAttr

        type_ = type_ or self.type
        return self.create("lz.constant", (), {"value": DenseElementsAttr(type_, value)}, [type_]).result


class RulePattern(RewritePattern):
    """The table rules for one op name, tried in order."""

    def __init__(self, op_name: str, rules: Sequence[Rule]):
        self.root = op_name
        self.rules = list(rules)

    def match_and_rewrite(self, op: Operation, rewriter: PatternRewriter) -> bool:
        if len(op.results) != 1:
            return False
        for rule in self.rules:
            m = Match(op, rewriter)
            new = rule.rewrite(m, *op.operands)
            if new is not None and new.type == op.result.type and new is not op.result:
                for created in m.created:
                    rewriter.listener.created(created)
                rewriter.replace_op(op, [new])
                return True
            for created in reversed(m.created):
                created.erase()
        return False

    def __repr__(self) -> str:
        return f"rules for {self.root}"


def patterns_from_rules(rules: Iterable[Rule]) -> list[RewritePattern]:
    """One ``RulePattern`` per op name, keeping the table's order."""
    grouped: dict[str, list[Rule]] = {}
    for r in rules:
        grouped.setdefault(r.op, []).append(r)
    return [RulePattern(name, rs) for name, rs in grouped.items()]
