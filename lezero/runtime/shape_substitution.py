"""A scheduled function at new sizes of its dynamic dims, by substitution (issue 11, item 4).

A model imported per input shape (an ONNX export that takes ``Shape`` of a dynamic dim) pays the
import, the pass pipeline and the plan at every new (batch, sequence).  Its kernels' code already
serves every size (``lezero/codegen/row_generic.py``), so what a new shape needs is the same
schedule with other sizes in it: the types, the reshape targets, a few constants, the arena
offsets.  ``SizeFit.between(source, at, partners)`` reads that off schedules of the full path: the
source at sizes ``at`` of some dims and, per dim, a partner that differs from it in that dim
alone; ``fit.substitute(sizes)`` writes the schedule at ``sizes``: no import, no pipeline;
memory-plan runs again for the offsets, and ``Substitution.planned_kernels`` hands the plan its
kernels (the source plan's where a kernel's text did not change, one cache lookup per distinct
new kernel text else).

**What follows the dims.**  The schedules are walked in the same order (ops, operands by value
number, attributes, regions), giving a *skeleton* (op names, wiring, every attribute that is not
an integer) and the *leaves*: every integer (each dim of each value's type, each integer of an
attribute), memory-plan's offsets and arena sizes left out.  The skeletons must be equal.  Each
leaf must be ``c x prod(size[k]^e[k])`` at the source and at every partner, one integer ``c`` and
``e[k]`` in 0..3: ``e[k] = 0`` when the leaf did not change with dim ``k``, so a dim equal to a
dynamic dim by chance (2 heads at batch 2, a 64 hidden size at sequence 64) is not rewritten.  A
leaf of any other form (``s + 1``) means no fit.

**Constants.**  A constant whose type does not follow the dims must be equal, byte for byte, in
every schedule.  One whose type follows them is rewritten only by a rule (``ConstantRule``) that
gives its value in every schedule fitted: a *broadcast* (the same along every axis that follows:
BERT's token-type rows), the *first rows of a table* among the model's initializers (position
rows), a *triangle* (a causal mask).  A broadcast or triangle is made only up to ``grown_limit``
elements (the importer folds no larger, so the full path has a kernel there instead), rows only
up to the table's length; past that, no substitution.

**Checks.**  The substituted function must pass the verifier (every op against its shape rule)
before it is planned: ``CompiledFunction`` verifies what it is given, and an ``IRError`` there
sends the caller down the full path; a size of 1 is refused (a dim of 1 lets the pipeline drop
broadcasts and reshapes that no other size does, so the full path's schedule there differs).
Every refusal is logged with its reason on the ``shapes`` debug channel, and the caller takes the
full path.  tests/onnx/test_dynamic_shapes.py checks that substituted schedules print exactly as
the full path's at many sizes (chance equalities included) and plan the same launches, and that
results equal ONNX Runtime's.  What the fit cannot see: a leaf that is a monomial at the sizes
fitted but not elsewhere (``max(b, 3)``), and a fusion choice of the pipeline that flips at some
size; the tests compare with the full path over the sizes they run.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lezero.ir.attributes import ArrayAttr, DenseArrayAttr, DenseElementsAttr, IntegerAttr
from lezero.ir.core import FuncOp, ModuleOp, Operation
from lezero.ir.diagnostics import IRError
from lezero.ir.types import FunctionType, TensorType
from lezero.passes.memory_plan import OFFSETS_ATTR, MemoryPlan, arena_attributes
from lezero.passes.partition import CONTROL_FLOW_OPS, STAGE_ATTR
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
    count)``, kind ``"type"``, ``"attribute"`` or ``"constant"`` (rewritten by its rule only)."""

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
            if name == STAGE_ATTR:  # where a kernel sits, not what it computes (not in its cache key)
                self.skeleton.append((name, attr))
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


@dataclass(frozen=True)
class ConstantRule:
    """How a constant that follows the dim is made at another size, read off its values at both
    sizes: ``"broadcast"`` (the same along every axis that follows the dim: ``slab`` repeated),
    ``"rows"`` (the first rows of ``table``, one of the model's initializers, along ``axis``: the
    position rows), ``"triangle"`` (a ``[.., n, n]`` mask ``value`` where ``j - i <= k``, else its
    negation: a causal mask)."""

    kind: str
    slab: np.ndarray | None = None
    table: np.ndarray | None = None
    axis: int = 0
    k: int = 0
    value: bool = True

    def at(self, shape: tuple, dtype, grown_limit: int) -> np.ndarray | None:
        """The constant at ``shape``, or None where the full path would not have it (a broadcast
        or a triangle larger than ``grown_limit`` elements: the importer folds no larger; rows
        past the table's end)."""
        if self.kind == "rows":
            if shape[self.axis] > self.table.shape[0]:
                return None
            return np.ascontiguousarray(self.table[:shape[self.axis]]).reshape(shape)
        if math.prod(shape) > grown_limit:
            return None
        if self.kind == "broadcast":
            return np.ascontiguousarray(np.broadcast_to(self.slab, shape))
        n = shape[-1]
        mask = _triangle(n, self.k)
        return np.ascontiguousarray(np.broadcast_to(mask if self.value else ~mask, shape)).astype(dtype)


def _triangle(n: int, k: int) -> np.ndarray:
    """``[n, n]``: True where ``j - i <= k``."""
    i, j = np.indices((n, n))
    return j - i <= k


def _constant_rule(values: list, following: tuple, tables) -> ConstantRule | None:
    """The rule that makes each of ``values`` (one constant in the schedules fitted: the source's
    first) from the dims, ``following``: the axes whose sizes follow them; None when none does."""
    x = values[0]
    slab = x[tuple(slice(0, 1) if a in following else slice(None) for a in range(x.ndim))]
    if all(np.array_equal(np.broadcast_to(slab, v.shape), v) for v in values):
        return ConstantRule("broadcast", slab=slab)
    if len(following) == 1 and all(x.shape[a] == 1 for a in range(following[0])):
        axis = following[0]
        longest = max(v.shape[axis] for v in values)
        for table in tables:
            if (table.dtype == x.dtype and table.shape[1:] == x.shape[axis + 1:] and table.shape[0] >= longest
                    and all(np.array_equal(table[:v.shape[axis]].reshape(v.shape), v) for v in values)):
                return ConstantRule("rows", table=table, axis=axis)
    if following == (x.ndim - 2, x.ndim - 1) and x.dtype == np.bool_ and all(d == 1 for d in x.shape[:-2]):
        for k in range(-1, 2):
            for value in (True, False):
                if all(np.array_equal(v.reshape(v.shape[-2:]), _triangle(v.shape[-1], k) == value) for v in values):
                    return ConstantRule("triangle", k=k, value=value)
    return None


def _fit_leaves(u: int, others: list, at: tuple, partner_at: tuple) -> tuple | None:
    """``(c, exponents)`` with ``u = c x prod(at[k]^e[k])`` and each ``others[k]`` that with
    ``partner_at[k]`` for ``at[k]``, or None: a monomial in the dims."""
    exponents = []
    for v, x, y in zip(others, at, partner_at):
        form = _fit_leaf(u, v, x, y)
        if form is None:
            return None
        exponents.append(form[1])
    scale = math.prod(x ** e for x, e in zip(at, exponents))
    return (u // scale, tuple(exponents)) if u % scale == 0 else None


@dataclass
class SizeFit:
    """How each integer of ``source`` (a scheduled module at sizes ``at`` of some dynamic dims)
    follows those dims, ``c x prod(size[k]^e[k])`` (``forms``), and how each constant that follows
    them is made (``rules``: the constant's index in walk order -> ``ConstantRule``)."""

    source: ModuleOp
    at: tuple
    leaves: list  # the source's integers
    forms: list  # (c, exponents) per leaf
    rules: dict
    grown_limit: int = 0

    @classmethod
    def between(cls, source: ModuleOp, at: tuple, partners: list, tables=(),
                grown_limit: int = 0) -> "SizeFit | None":
        """The fit of ``source`` (scheduled at sizes ``at`` of the dims) against ``partners``, one
        ``(schedule, size)`` per dim: the same model scheduled with that dim at ``size``, the others
        as in ``source``; None when it does not fit (the reason logged on ``SHAPES_LOG``).
        ``tables``: arrays a constant may take its first rows of (the model's initializers);
        ``grown_limit``: the most elements a broadcast or triangle constant may grow to (the
        importer's folding limit)."""
        partner_at = tuple(size for _, size in partners)

        def refuse(reason: str) -> None:
            SHAPES_LOG.debug("no substitution from sizes %s (against %s): %s", at, partner_at, reason)
            return None

        if min(at + partner_at) < 2 or any(x == y for x, y in zip(at, partner_at)) or len(at) != len(partners):
            return refuse("each dim's two sizes must differ and be at least 2")
        walks = [_Walk(source)] + [_Walk(module) for module, _ in partners]
        a = walks[0]
        for b in walks:
            if b.reason:
                return refuse(b.reason)
            if b.skeleton != a.skeleton or len(b.leaves) != len(a.leaves):
                first = next((i for i, (x, y) in enumerate(zip(a.skeleton, b.skeleton)) if x != y), None)
                return refuse("the schedules differ in structure (at "
                              f"{a.skeleton[first] if first is not None else 'the end'} vs "
                              f"{b.skeleton[first] if first is not None else ''})")
        forms = []
        for i, u in enumerate(a.leaves):
            form = _fit_leaves(u, [b.leaves[i] for b in walks[1:]], at, partner_at)
            if form is None:
                return refuse(f"an integer {u} at {at} is {[b.leaves[i] for b in walks[1:]]} at {partner_at}: "
                              "not c x prod(size^e)")
            forms.append(form)
        rules, position, index = {}, 0, 0
        for kind, _, _, count in a.sites:
            if kind == "constant":
                values = [b.constants[index] for b in walks]
                following = tuple(i for i, (_, e) in enumerate(forms[position:position + count]) if any(e))
                if following:
                    rule = _constant_rule(values, following, tables)
                    if rule is None:
                        return refuse(f"a constant of shape {values[0].shape} follows the dims by no rule")
                    rules[index] = rule
                elif any(v.dtype != values[0].dtype or not np.array_equal(v, values[0]) for v in values):
                    return refuse(f"a constant of shape {values[0].shape} differs between the sizes")
                index += 1
            position += count
        return cls(source, tuple(at), list(a.leaves), forms, rules, grown_limit)

    def substitute(self, sizes: tuple) -> "Substitution | None":
        """The source schedule at ``sizes`` of the dims, memory-planned, or None (logged); verify it
        before planning it (``CompiledFunction`` does)."""
        if min(sizes) < 2:
            SHAPES_LOG.debug("no substitution to sizes %s: a dim of 1 schedules differently", sizes)
            return None
        module = self.source.clone()
        walk = _Walk(module)
        values = [c * math.prod(x ** e for x, e in zip(sizes, exponents)) for c, exponents in self.forms]
        position, index = 0, 0
        for kind, where, name, count in walk.sites:
            ints = tuple(values[position:position + count])
            position += count
            if kind == "type":
                where.type = TensorType(tuple(None if d == -1 else d for d in ints), where.type.element_type)
            elif kind == "attribute":
                where.attributes[name] = _with_ints(where.attributes[name], ints)
            else:  # a constant: rewritten only by its rule
                rule = self.rules.get(index)
                index += 1
                if rule is None:
                    continue
                old = where.attributes[name]
                array = rule.at(ints, old.array.dtype, self.grown_limit)
                if array is None:
                    SHAPES_LOG.debug("no substitution to sizes %s: a %s constant would be %s", sizes, rule.kind, ints)
                    return None
                where.attributes[name] = DenseElementsAttr(TensorType(ints, old.type.element_type), array)
        for func in module.functions:
            func.function_type = FunctionType([a.type for a in func.arguments],
                                              [v.type for v in func.entry_block.terminator.operands])
        try:
            MemoryPlan().run(module)
        except IRError as e:
            SHAPES_LOG.debug("no substitution to sizes %s (from %s): %s", sizes, self.at, e.message)
            return None
        kernels = [(op, tuple(values[start:end]), values[start:end] == self.leaves[start:end])
                   for op, start, end in walk.kernels]
        return Substitution(module, tuple(sizes), kernels)


@dataclass
class Substitution:
    """A schedule made by ``SizeFit.substitute``: ``module``, and per kernel of its functions' bodies
    (in order) the kernel, its integers at ``sizes`` and whether they are all the source's (the
    kernel's text is then the source kernel's)."""

    module: ModuleOp
    sizes: tuple
    kernels: list

    def planned_kernels(self, source_kernels: list, cache, cpu) -> list:
        """Per kernel, a planned kernel of the same text (``CachedKernel``; ``source_kernels``: the
        source plan's, in the same order): the source's where the kernel did not change, else one
        cache lookup per distinct (source kernel, integers), shared by the kernels that have them
        (a model's repeated layers): the same source text with the same integers is the same text.
        A row-generic source kernel whose rows form the new one shares is not printed again
        (``KernelCache.plan_kernel_resized``)."""
        planned, looked_up = [], {}
        for (op, ints, unchanged), source in zip(self.kernels, source_kernels):
            if source is None or unchanged:  # no kernel to share (a transfer): the plan looks it up
                planned.append(source)
                continue
            key = (source.content_key, ints)
            if key not in looked_up:
                looked_up[key] = cache.plan_kernel_resized(op, cpu, source)
            planned.append(looked_up[key])
        return planned

