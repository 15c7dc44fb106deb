"""A scheduled function at a new size of one dynamic dim, by substitution (issue 11, item 4).

A model imported per input shape (an ONNX export that takes ``Shape`` of a dynamic dim) pays the
import, the pass pipeline and the plan at every new (batch, sequence).  Its kernels' code already
serves every size (``lezero/codegen/row_generic.py``), so what a new batch needs is the same
schedule with other sizes in it: the types, the reshape targets, the arena offsets.
``SizeFit.between(source, partner, at, partner_at)`` reads that off two schedules of the full path
that differ in one dynamic dim only (``at`` != ``partner_at``, both at least 2), and
``fit.substitute(size)`` writes the schedule at ``size``: no import, no pipeline; memory-plan runs
again for the offsets, and the runtime looks its kernels up in the kernel cache as for any plan.

**What follows the dim.**  Both schedules are walked in the same order (ops, operands by value
number, attributes, regions), giving a *skeleton* (op names, wiring, every attribute that is not an
integer) and the *leaves*: every integer (each dim of each value's type, each integer of an
attribute), memory-plan's offsets and arena sizes left out.  The skeletons must be equal and the
constants' values equal byte for byte (a constant that follows the dim, such as a per-batch
folded table, is not rewritten: no fit).  Each leaf pair ``(u, v)`` must be ``c x d^e`` at both
sizes ``d`` for one integer ``c`` and ``e`` in 0..3: ``e = 0`` when ``u == v``, so a dim equal to
the dynamic dim by chance (2 heads at batch 2, a 64 hidden size at sequence 64) is not rewritten:
it did not change when the dim did.  A leaf that fits no such form (``s + 1``) means no fit.

**Checks.**  The substituted function must pass the verifier (every op against its shape rule)
before it is planned: ``CompiledFunction`` verifies what it is given, and an ``IRError`` there
sends the caller down the full path; a size of 1 is refused (a dim of 1 lets the pipeline drop broadcasts and reshapes that
no other size does, so the full path's schedule there differs).  Every refusal is logged with its
reason on the ``shapes`` debug channel, and the caller takes the full path.
tests/onnx/test_dynamic_shapes.py checks that the substituted schedule prints exactly as the full
path's at many sizes, and that its results equal ONNX Runtime's.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lezero.ir.attributes import ArrayAttr, DenseArrayAttr, DenseElementsAttr, IntegerAttr
from lezero.ir.core import FuncOp, ModuleOp, Operation
from lezero.ir.diagnostics import IRError
from lezero.ir.types import FunctionType, TensorType
from lezero.passes.memory_plan import OFFSETS_ATTR, MemoryPlan, arena_attributes
from lezero.passes.partition import CONTROL_FLOW_OPS
from lezero.passes.pass_base import debug_channel
from lezero.ir.dialect.device import DEVICES

SHAPES_LOG = debug_channel("shapes")
# Attributes memory-plan writes: planned again, never fitted.
_PLANNED_ATTRS = frozenset({OFFSETS_ATTR} | {name for device in DEVICES for name in arena_attributes(device)}
                           | {"lz.arena_peak", "lz.device_arena_peak"})
MAX_EXPONENT = 3


def _int_attribute(attr) -> tuple | None:
    """The integers of an integer attribute (a leaf each), None for any other attribute."""
    if isinstance(attr, IntegerAttr):
        return (attr.value,)
    if isinstance(attr, DenseArrayAttr) and not attr.element_type.is_float and not attr.element_type.is_bool:
        return tuple(attr.values)
    if isinstance(attr, ArrayAttr) and attr.values and all(isinstance(v, IntegerAttr) for v in attr.values):
        return tuple(v.value for v in attr.values)
    return None


def _with_ints(attr, ints: tuple):
    """``attr`` (an integer attribute) holding ``ints``."""
    if isinstance(attr, IntegerAttr):
        return IntegerAttr(ints[0], attr.type)
    if isinstance(attr, DenseArrayAttr):
        return DenseArrayAttr(attr.element_type, ints)
    return ArrayAttr(tuple(IntegerAttr(i, v.type) for i, v in zip(ints, attr.values)))


class _Walk:
    """A scheduled module walked in a fixed order: ``skeleton`` (what must be equal), ``leaves``
    (the integers, in order), ``constants`` (the constants' arrays, in order) and ``sites``, where
    each run of leaves came from, for writing them back: ``(kind, value or op, attribute name,
    count)``, kind ``"type"``, ``"attribute"`` or ``"constant"`` (its type: fitted, never rewritten)."""

    def __init__(self, module: ModuleOp):
        self.skeleton: list = []
        self.leaves: list[int] = []
        self.constants: list[np.ndarray] = []
        self.sites: list[tuple] = []
        self._numbers: dict[int, int] = {}
        self.reason: str | None = None
        self.kernels: list[tuple] = []  # (kernel op, its leaves' span) per lz.kernel of a function's body
        for func in module.functions:
            self._op(func, top=True)

    def _value(self, v) -> None:
        self._numbers[id(v)] = len(self._numbers)
        if isinstance(v.type, TensorType):
            self.skeleton.append(("type", v.type.element_type, v.type.rank))
            self.leaves.extend(d if d is not None else -1 for d in v.type.shape)
            self.sites.append(("type", v, None, v.type.rank))
        else:
            self.skeleton.append(("type", v.type))

    def _op(self, op: Operation, top: bool = False, in_function: bool = False) -> None:
        start = len(self.leaves)
        if op.name in CONTROL_FLOW_OPS:
            self.reason = f"'{op.name}' (control flow: its regions' arenas are not planned again here)"
        self.skeleton.append((op.name, tuple(self._numbers.get(id(v), -1) for v in op.operands), len(op.regions)))
        for name in sorted(op.attributes):
            attr = op.attributes[name]
            if name in _PLANNED_ATTRS or (isinstance(op, FuncOp) and name == "function_type"):
                continue
            ints = _int_attribute(attr)
            if ints is not None:
                self.skeleton.append((name, type(attr), len(ints)))
                self.leaves.extend(ints)
                self.sites.append(("attribute", op, name, len(ints)))
            elif isinstance(attr, DenseElementsAttr):
                self.skeleton.append((name, "constant", attr.type.element_type, attr.type.rank))
                self.leaves.extend(attr.type.shape)
                self.sites.append(("constant", op, name, attr.type.rank))
                self.constants.append(attr.array)
            else:
                self.skeleton.append((name, attr))
        for r in op.results:
            self._value(r)
        for region in op.regions:
            for block in region.blocks:
                self.skeleton.append(("block", len(block.args), len(block.ops)))
                for a in block.args:
                    self._value(a)
                for inner in block.ops:
                    self._op(inner, in_function=top)
        if in_function and op.name == "lz.kernel":
            self.kernels.append((op, start, len(self.leaves)))


def _fit_leaf(u: int, v: int, at: int, partner_at: int) -> tuple[int, int] | None:
    """``(c, e)`` with ``u = c x at^e`` and ``v = c x partner_at^e``, e in 0..MAX_EXPONENT, or None."""
    if u == v:
        return u, 0
    for e in range(1, MAX_EXPONENT + 1):
        if u % at ** e == 0 and u // at ** e * partner_at ** e == v:
            return u // at ** e, e
    return None


@dataclass
class SizeFit:
    """How each integer of ``source`` (a scheduled module at ``at``) follows one dynamic dim."""

    source: ModuleOp
    at: int
    forms: list  # (c, e) per leaf

    @classmethod
    def between(cls, source: ModuleOp, partner: ModuleOp, at: int, partner_at: int) -> "SizeFit | None":
        """The fit of ``source`` (scheduled at size ``at`` of the dim) against ``partner`` (the same
        model scheduled at ``partner_at``), or None (the reason logged on ``SHAPES_LOG``)."""
        def refuse(reason: str) -> None:
            SHAPES_LOG.debug("no substitution from size %d (against %d): %s", at, partner_at, reason)
            return None

        if min(at, partner_at) < 2 or at == partner_at:
            return refuse("the two sizes must differ and be at least 2")
        a, b = _Walk(source), _Walk(partner)
        if a.reason or b.reason:
            return refuse(a.reason or b.reason)
        if a.skeleton != b.skeleton or len(a.leaves) != len(b.leaves):
            first = next((i for i, (x, y) in enumerate(zip(a.skeleton, b.skeleton)) if x != y), None)
            return refuse(f"the schedules differ in structure (at {a.skeleton[first] if first is not None else 'the end'}"
                          f" vs {b.skeleton[first] if first is not None else ''})")
        for x, y in zip(a.constants, b.constants):
            if x.shape != y.shape or x.dtype != y.dtype or not np.array_equal(x, y):
                return refuse(f"a constant of shape {x.shape} differs between the sizes (it follows the dim)")
        forms = []
        for u, v in zip(a.leaves, b.leaves):
            form = _fit_leaf(u, v, at, partner_at)
            if form is None:
                return refuse(f"an integer {u} at {at} is {v} at {partner_at}: not c x size^e")
            forms.append(form)
        position = 0
        for kind, _, _, count in a.sites:
            if kind == "constant" and any(e for _, e in forms[position:position + count]):
                return refuse("a constant's type follows the dim")
            position += count
        return cls(source, at, forms)

    def substitute(self, size: int) -> "Substitution | None":
        """The source schedule at ``size`` of the dim, memory-planned, or None (logged); verify it
        before planning it (``CompiledFunction`` does)."""
        if size < 2:
            SHAPES_LOG.debug("no substitution to size %d: a dim of 1 schedules differently", size)
            return None
        module = self.source.clone()
        walk = _Walk(module)
        values = [c * size ** e for c, e in self.forms]
        position = 0
        for kind, where, name, count in walk.sites:
            ints = tuple(values[position:position + count])
            position += count
            if kind == "type":
                where.type = TensorType(tuple(None if d == -1 else d for d in ints), where.type.element_type)
            elif kind == "attribute":
                where.attributes[name] = _with_ints(where.attributes[name], ints)
        for func in module.functions:
            func.function_type = FunctionType([a.type for a in func.arguments],
                                              [v.type for v in func.entry_block.terminator.operands])
        try:
            MemoryPlan().run(module)
        except IRError as e:
            SHAPES_LOG.debug("no substitution to size %d (from %d): %s", size, self.at, e.message)
            return None
        kernels = [(op, tuple(values[start:end]), all(e == 0 or c == 0 for c, e in self.forms[start:end]))
                   for op, start, end in walk.kernels]
        return Substitution(module, size, kernels)


@dataclass
class Substitution:
    """A schedule made by ``SizeFit.substitute``: ``module``, and per kernel of its functions' bodies
    (in order) the kernel, its integers at ``size`` and whether they are all the source's (the
    kernel's text is then the source kernel's)."""

    module: ModuleOp
    size: int
    kernels: list

    def planned_kernels(self, source_kernels: list, cache, cpu) -> list:
        """Per kernel, a planned kernel of the same text (``CachedKernel``; ``source_kernels``: the
        source plan's, in the same order): the source's where the kernel did not change, else one
        cache lookup per distinct (source kernel, integers), shared by the kernels that have them
        (a model's repeated layers): the same source text with the same integers is the same text."""
        planned, looked_up = [], {}
        for (op, ints, unchanged), source in zip(self.kernels, source_kernels):
            if source is None or unchanged:  # no kernel to share (a transfer): the plan looks it up
                planned.append(source)
                continue
            key = (source.content_key, ints)
            if key not in looked_up:
                looked_up[key] = cache.plan_kernel(op, cpu)
            planned.append(looked_up[key])
        return planned

