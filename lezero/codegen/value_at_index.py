"""The "value at index" walk, shared by every code generator: one element (or one block of
elements) of any value of a kernel, computed from its operands in memory.

``ValueAtIndex.at(v, index)`` walks back from ``v`` through the kernel's ops:

- a block argument (a kernel operand) is a load from its buffer at the row-major offset of the
  index (``load``); a constant is a literal (a splat) or a table lookup (``constant_table``);
- an elementwise op is its definition's ``lower_scalar`` facet on its operands, each at the index
  broadcast to its shape (size-1 dims read index 0), rounded to the result's element type;
- data movement is index arithmetic (the ``MOVEMENT`` table): transpose permutes, broadcast_to,
  slice and as_strided remap, reshape goes through the row-major position, pad and concat select
  (reading at a clamped index, so no load leaves its buffer), gather loads the index first and checks it
  (``checked_index``: an index out of range is recorded for the runtime to raise, and the load
  reads a clamped address, ``lezero/codegen/index_checks.py``);
- an op with a ``lower_at_position`` facet (``lz.random_uniform``) is computed from its element's
  row-major position and the operand elements it reads;
- anything else (a reduction's result, in a reduction kernel) comes from ``overrides``.

Indices are ``Affine`` forms (``lezero/codegen/affine.py``).  A backend supplies the scalar
builder ``s`` (``lezero/ir/scalar.py``; its values have ``.value`` and ``.dtype``), an index
materializer ``index`` (``value(form)``, ``clamp``, ``less_than`` and ``at_least``, the last two
giving an i1 value of ``s`` or None for "always true"; ``position(form)``, the form as an i64
value of ``s``, for ops computed from their element's position), and the hooks of a subclass: ``load``,
``store``, ``constant_table`` and ``record_bad_index`` (the kernel's status buffer).  The LLVM
backend's index is a loop variable
(``codegen/llvm/value_at_index.py``), the Triton backend's a block of lanes
(``codegen/triton/value_at_index.py``); the walk is the same.
"""
from __future__ import annotations

import numpy as np

from lezero.codegen.affine import Affine, Var, linear_index, unravel
from lezero.codegen.errors import LoweringError
from lezero.codegen.index_checks import IndexChecks
from lezero.ir.core import BlockArgument, Operation, Value
from lezero.ir.dialect.axes import normalize_axis
from lezero.ir.dialect.data_movement import SliceOp, TransposeOp
from lezero.ir.dialect.numerics import to_storage
from lezero.ir.types import I1, I64, ElementType, TensorType


class IndexBindings:
    """Loop variables bound to the backend's index values, and the memo of one scope.

    Variables are bound one by one (``bind``) or as a *group*: neighbouring loops that one flat
    index covers row-major (``bind_group``; a merged loop on the CPU, a flat block of lanes on the
    GPU).  ``parts(form)`` walks a form's terms; backends sum them in ``value(form)`` and supply
    the hooks below.
    """

    def __init__(self):
        self.bound: dict[Var, object] = {}
        self.groups: dict[Var, tuple] = {}  # var -> (group vars, flat value)
        self.memo: dict = {}

    def bind(self, var: Var, value) -> None:
        self.bound[var] = value
        self.groups.pop(var, None)

    def bind_group(self, variables, flat) -> None:
        if len(variables) == 1:
            self.bind(variables[0], flat)
            return
        group = (tuple(variables), flat)
        for v in variables:
            self.bound.pop(v, None)
            self.groups[v] = group

    def new_scope(self) -> None:
        self.memo = {}

    def parts(self, form: Affine) -> list:
        """The backend values whose sum is ``form`` less its constant: a term times its
        coefficient, grouped variables through their flat index (one multiply of it when ``form``
        addresses the group row-major, else each variable recovered by division)."""
        out, done = [], set()
        for term, coef in form.terms.items():
            if term in done:
                continue
            if isinstance(term, Var) and term in self.groups:
                variables, flat = self.groups[term]
                done.update(variables)
                coefs = [form.coef(v) for v in variables]
                if all(coefs[i] == coefs[i + 1] * variables[i + 1].extent for i in range(len(coefs) - 1)):
                    out += [self._scaled(flat, coefs[-1])] if coefs[-1] else []
                else:
                    out += [self._scaled(self._grouped_var(v, variables, flat), c)
                            for v, c in zip(variables, coefs) if c]
                continue
            out.append(self._scaled(self._term(term), coef))
        return out

    # backend hooks: ``value * coef``; a term's value (a bound variable, a payload, a derived
    # ``//``/``%``); one variable of a group recovered from the flat index
    def _scaled(self, value, coef: int):
        raise NotImplementedError

    def _term(self, term):
        raise NotImplementedError

    def _grouped_var(self, var: Var, variables, flat):
        raise NotImplementedError


class Buffer:
    """A kernel operand or result in memory: the backend's pointer and its (static, row-major)
    tensor type."""

    def __init__(self, pointer, type_: TensorType):
        self.pointer = pointer
        self.type = type_
        self.strides = []
        s = 1
        for d in reversed(type_.shape):
            self.strides.append(s)
            s *= d
        self.strides.reverse()

    def offset(self, index) -> Affine:
        out = Affine()
        for i, s, d in zip(index, self.strides, self.type.shape):
            if d != 1:
                out = out + Affine.of(i) * s
        return out.recombined()  # an index split by floordiv and mod (a conv tile's pixels) is one run


class ValueAtIndex:
    """The walk; subclasses implement ``load``, ``store`` and ``constant_table`` for a backend."""

    def __init__(self, s, index, buffers: dict, overrides: dict | None = None, target: str = "cpu",
                 checks: IndexChecks | None = None):
        self.s = s
        self.index = index
        self.buffers = buffers  # Value -> Buffer (the block arguments)
        self.overrides = overrides or {}  # Operation -> fn(op, result value, index) -> a value of s
        self.target = target
        self.checks = checks  # the kernel's bounds checks (None: it has no status buffer)
        self.memo: dict = {}

    def new_scope(self) -> None:
        self.memo = {}
        self.index.new_scope()

    # --- the backend's memory --------------------------------------------------------------------
    def load(self, buffer: Buffer, index):
        raise NotImplementedError

    def store(self, buffer: Buffer, index, value) -> None:
        raise NotImplementedError

    def constant_table(self, op: Operation, array: np.ndarray, index):
        """Element ``index`` of a constant that is not a splat."""
        raise NotImplementedError

    def record_bad_index(self, slot: int, bad, index) -> None:
        """Where ``bad`` (an i1 of ``s``) holds, set check ``slot``'s flag in the status buffer
        and raise its value slot to ``index`` (an i64 of ``s``), race-free."""
        raise NotImplementedError

    # --- bounds checks ----------------------------------------------------------------------------
    def checked_index(self, op: Operation, dim: str, raw, size: int, negative: bool = True):
        """``raw`` (an integer index of ``op`` into ``dim`` of ``size``) as an i64, negative ones
        counted from the end when ``negative``; ``(index, bad)``, ``bad`` an i1 that holds when it
        is out of range, which is recorded for the runtime to raise (the caller must still keep
        its address inside the buffer)."""
        if self.checks is None:
            raise self.failure(op, "its indices need the kernel's status buffer, which this kernel does not have")
        s = self.s
        given = s.cast(raw, I64)  # unsigned types widen by zeros
        index = given
        if negative and not is_unsigned(raw.dtype):
            index = s.select(s.cmp("lt", given, s.constant(0, I64)), s.add(given, s.constant(size, I64)), given)
        bad = s.or_(s.cmp("lt", index, s.constant(0, I64)), s.cmp("ge", index, s.constant(size, I64)))
        self.record_bad_index(self.checks.slot(op, dim, size, negative), bad, given)
        return index, bad

    # --- values -----------------------------------------------------------------------------------
    def at(self, value: Value, index):
        index = tuple(Affine.of(i) for i in index)
        key = (value, index)
        if key in self.memo:
            return self.memo[key]
        if isinstance(value, BlockArgument):
            if value not in self.buffers:
                raise LoweringError(f"failed to lower a kernel for {self.target}: a value read inside it is neither "
                                    "an operand nor defined in it")
            out = self.load(self.buffers[value], index)
        else:
            out = self._op_value(value.owner, value, index)
        self.memo[key] = out
        return out

    def _op_value(self, op: Operation, value: Value, index):
        if op in self.overrides:
            return self.overrides[op](op, value, index)
        emit = MOVEMENT.get(op.name)
        if emit is not None:
            return emit(self, op, op.definition.attrs(op), index)
        if op.name == "lz.constant":
            return self._constant(op, index)
        definition = op.definition
        if hasattr(definition, "lower_at_position"):
            return self._at_position(op, value, index)
        if definition is None or not hasattr(definition, "lower_scalar"):
            raise self.failure(op, "not an elementwise or data movement op, so it has no value at an index here")
        shape = value.type.shape
        operands = [self.at(v, broadcast_index(index, shape, v.type.shape)) for v in op.operands]
        try:
            out = definition.lower_scalar(self.s, definition.attrs(op), *operands)
        except NotImplementedError as e:
            raise self.failure(op, str(e) or "no scalar lowering") from None
        if out.dtype != value.type.element_type:
            raise self.failure(op, f"its scalar lowering gives {out.dtype}, not {value.type.element_type}")
        return self.s.round(out)

    def _at_position(self, op: Operation, value: Value, index):
        """An op whose element is a function of its row-major position and of a few elements of
        its operands (``lz.random_uniform``: the generator state), read on demand."""
        def element(k: int, i: int):
            v = op.operands[k]
            return self.at(v, unravel(Affine.of(i), v.type.shape))

        definition = op.definition
        position = self.index.position(linear_index(index, value.type.shape))
        try:
            out = definition.lower_at_position(self.s, definition.attrs(op), position, element)
        except NotImplementedError as e:
            raise self.failure(op, str(e) or "no lowering") from None
        if out.dtype != value.type.element_type:
            raise self.failure(op, f"its lowering gives {out.dtype}, not {value.type.element_type}")
        return out

    def failure(self, op: Operation, why: str) -> LoweringError:
        dtype = op.results[0].type.element_type if op.results else "none"
        return LoweringError(f"failed to lower {op.name} with {dtype} for {self.target}: {why}", op.location)

    def _constant(self, op: Operation, index):
        array = op.attributes["value"].array
        dtype = op.result.type.element_type
        if array.size == 1 or (array.size and (array == array.flat[0]).all()):
            return self.s.constant(array.flat[0].item(), dtype)
        return self.constant_table(op, array, index)


def broadcast_index(index, shape, operand_shape) -> tuple:
    """The index into an operand of ``operand_shape`` that numpy broadcasting reads for
    ``index`` into ``shape``."""
    lead = len(shape) - len(operand_shape)
    return tuple(Affine() if d == 1 else index[lead + k] for k, d in enumerate(operand_shape))


def is_unsigned(dtype: ElementType) -> bool:
    """Whether integer arithmetic on ``dtype`` is unsigned (the ``ui*`` types and i1)."""
    return dtype.name.startswith("ui") or dtype == I1


def numpy_scalar(value, dtype):
    """A Python number as the reference would store it in ``dtype`` (bf16 rounded)."""
    return to_storage(np.asarray(value), dtype).item()


def _all(s, conditions):
    """The i1 conjunction of ``conditions`` (None entries are "always true"); None if all are."""
    out = None
    for c in conditions:
        if c is not None:
            out = c if out is None else s.and_(out, c)
    return out


# --- data movement ---------------------------------------------------------------------------------

def _reshape(e: ValueAtIndex, op, attrs, index):
    (x,) = op.operands
    return e.at(x, unravel(linear_index(index, op.result.type.shape), x.type.shape))


def _transpose(e: ValueAtIndex, op, attrs, index):
    (x,) = op.operands
    perm = TransposeOp.permutation(attrs, x.type.rank)
    source = [None] * len(perm)
    for out_dim, in_dim in enumerate(perm):
        source[in_dim] = index[out_dim]
    return e.at(x, source)


def _broadcast_to(e: ValueAtIndex, op, attrs, index):
    (x,) = op.operands
    return e.at(x, broadcast_index(index, op.result.type.shape, x.type.shape))


def _slice(e: ValueAtIndex, op, attrs, index):
    (x,) = op.operands
    source = []
    for i, s, d in zip(index, SliceOp.slices(attrs, x.type.rank), x.type.shape):
        start, _, step = s.indices(d)
        source.append(i * step + start)
    return e.at(x, source)


def _as_strided(e: ValueAtIndex, op, attrs, index):
    (x,) = op.operands
    position = Affine() + attrs.offset
    for i, stride in zip(index, attrs.strides):
        position = position + Affine.of(i) * stride
    return e.at(x, unravel(position, x.type.shape))


def _pad(e: ValueAtIndex, op, attrs, index):
    (x,) = op.operands
    shape, dtype = x.type.shape, x.type.element_type
    fill = e.s.constant(numpy_scalar(attrs.value != 0 if dtype == I1 else attrs.value, dtype), dtype)
    if 0 in shape:
        return fill
    source, conditions = [], []
    for k, (i, d) in enumerate(zip(index, shape)):
        j = i - attrs.pads[k]  # a negative pad crops: the index moves the other way
        conditions += [e.index.at_least(j, 0), e.index.less_than(j, d)]
        source.append(e.index.clamp(j, 0, d - 1, f"pad{k}"))
    inside = _all(e.s, conditions)
    loaded = e.at(x, source)
    return loaded if inside is None else e.s.select(inside, loaded, fill)


def _concat(e: ValueAtIndex, op, attrs, index):
    axis = normalize_axis(attrs.axis, op.result.type.rank)
    position = index[axis]
    pieces, offset = [], 0
    for x in op.operands:
        size = x.type.shape[axis]
        if size:
            pieces.append((offset, size, x))
        offset += size
    bounds = position.bounds()
    if bounds is not None:  # the index range may pick some pieces statically
        pieces = [p for p in pieces if p[0] <= bounds[1] and bounds[0] < p[0] + p[1]]
    out = None
    for start, size, x in reversed(pieces):
        local = list(index)
        local[axis] = e.index.clamp(position - start, 0, size - 1, "concat")
        v = e.at(x, local)
        if out is None:
            out = v
        else:
            after = e.index.less_than(position, start + size)  # inside this piece (earlier ones picked later)
            out = v if after is None else e.s.select(after, v, out)
    return out


def _gather(e: ValueAtIndex, op, attrs, index):
    x, indices = op.operands
    axis = normalize_axis(attrs.axis, x.type.rank)
    size = x.type.shape[axis]
    k = indices.type.rank
    picked, _ = e.checked_index(op, f"axis {axis}", e.at(indices, index[axis:axis + k]), size, attrs.negative_indices)
    if size == 0:  # every index is out of range, and there is nothing to read
        return e.s.constant(0, x.type.element_type)
    # an index out of range is recorded (the runtime raises); the load reads a clamped address
    gathered = e.index.clamp(Affine.of(Var("gather", None, payload=picked.value)), 0, size - 1, "gathered")
    return e.at(x, tuple(index[:axis]) + (gathered,) + tuple(index[axis + k:]))


MOVEMENT = {
    "lz.reshape": _reshape,
    "lz.transpose": _transpose,
    "lz.broadcast_to": _broadcast_to,
    "lz.slice": _slice,
    "lz.as_strided": _as_strided,
    "lz.pad": _pad,
    "lz.concat": _concat,
    "lz.gather": _gather,
}
