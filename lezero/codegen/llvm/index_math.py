"""The "value at index" emitter: one element of any value of a kernel, as LLVM IR.

``ValueAtIndex.at(v, index)`` walks back from ``v`` through the kernel's ops:

- a block argument (a kernel operand) is a load from its buffer at the row-major offset of the
  index; a constant is a literal (a splat) or a load from a private global array;
- an elementwise op is its definition's ``lower_scalar`` facet on its operands, each at the index
  broadcast to its shape (size-1 dims read index 0), rounded to the result's element type;
- data movement is index arithmetic (the ``MOVEMENT`` table): transpose permutes, broadcast_to
  and slice remap, reshape goes through the row-major position, pad and concat select (reading
  at a clamped index, so no load leaves its buffer), gather loads the index first;
- anything else (a reduction's result, in a reduction kernel) comes from ``overrides``.

Indices are ``Affine`` forms (``lezero/codegen/affine.py``); ``IndexMaterializer`` turns them
into i64 values when a load or a comparison needs one, and can record every form it was asked
for (the loop coalescing analysis reads them).  Both memoize per scope (one loop body), so a
value used twice at the same index is computed once.
"""
from __future__ import annotations

import llvmlite.ir as ir

from lezero.codegen.affine import Affine, Var, linear_index, unravel
from lezero.codegen.errors import LoweringError
from lezero.codegen.llvm.scalar_builder import LLVMScalarBuilder, Scalar, is_unsigned, numpy_scalar, storage_type
from lezero.ir.core import BlockArgument, Operation, Value
from lezero.ir.dialect.axes import normalize_axis
from lezero.ir.dialect.data_movement import SliceOp, TransposeOp
from lezero.ir.types import I1, TensorType

I64 = ir.IntType(64)


def _i64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


class IndexMaterializer:
    """Affine index forms to i64 values.

    Loop variables are bound one by one (``bind``) or as a *group*: loops merged into one flat
    loop (``bind_group``).  A form whose coefficients on a group's variables are those of a
    row-major flattening (``c_i == c_{i+1} * extent_{i+1}``) costs one multiply of the flat
    index; any other use of a grouped variable recovers it by division.
    """

    def __init__(self, builder: ir.IRBuilder):
        self.b = builder
        self.bound: dict[Var, ir.Value] = {}
        self.groups: dict[Var, tuple] = {}  # var -> (group vars, flat value)
        self.memo: dict = {}
        self.recorded: list[Affine] | None = None

    def bind(self, var: Var, value) -> None:
        self.bound[var] = value
        self.groups.pop(var, None)

    def bind_group(self, variables: list[Var], flat) -> None:
        if len(variables) == 1:
            self.bind(variables[0], flat)
            return
        group = (tuple(variables), flat)
        for v in variables:
            self.bound.pop(v, None)
            self.groups[v] = group

    def new_scope(self) -> None:
        self.memo = {}

    def value(self, form) -> ir.Value:
        form = Affine.of(form)
        if form.is_const:
            return _i64(form.const)
        key = form
        if key in self.memo:
            return self.memo[key]
        if self.recorded is not None:
            self.recorded.append(form)
        b = self.b
        total = None

        def add(term):
            nonlocal total
            total = term if total is None else b.add(total, term, flags=["nsw"])

        done = set()
        for term, coef in form.terms.items():
            if term in done:
                continue
            if isinstance(term, Var) and term in self.groups:
                variables, flat = self.groups[term]
                done.update(variables)
                for part in self._group_terms(form, variables, flat):
                    add(part)
                continue
            add(self._scaled(self._term(term), coef))
        if form.const:
            add(_i64(form.const))
        self.memo[key] = total
        return total

    def _scaled(self, value, coef: int):
        return value if coef == 1 else self.b.mul(value, _i64(coef), flags=["nsw"])

    def _group_terms(self, form: Affine, variables, flat):
        coefs = [form.coef(v) for v in variables]
        row_major = all(coefs[i] == coefs[i + 1] * variables[i + 1].extent for i in range(len(coefs) - 1))
        if row_major:
            return [self._scaled(flat, coefs[-1])] if coefs[-1] else []
        return [self._scaled(self._grouped_var(v, variables, flat), c) for v, c in zip(variables, coefs) if c]

    def _grouped_var(self, var: Var, variables, flat):
        key = ("grouped", var)
        if key not in self.memo:
            inner = 1
            for v in variables[variables.index(var) + 1:]:
                inner *= v.extent
            q = flat if inner == 1 else self.b.udiv(flat, _i64(inner))
            self.memo[key] = q if var is variables[0] else self.b.urem(q, _i64(var.extent))
        return self.memo[key]

    def _term(self, term):
        if isinstance(term, Var):
            if term.payload is not None:
                return term.payload
            if term not in self.bound:
                raise LoweringError(f"index variable {term.name} is not bound to a loop")
            return self.bound[term]
        key = ("derived", term)
        if key not in self.memo:
            operand = self.value(term.operand)
            bounds = term.operand.bounds()
            divisor = _i64(term.divisor)
            if bounds is not None and bounds[0] >= 0:
                v = self.b.udiv(operand, divisor) if term.op == "div" else self.b.urem(operand, divisor)
            else:
                v = self._floor_divmod(operand, divisor, term.op)
            self.memo[key] = v
        return self.memo[key]

    def _floor_divmod(self, a, divisor, op: str):
        b = self.b
        q = b.sdiv(a, divisor)
        r = b.srem(a, divisor)
        fix = b.icmp_signed("<", r, _i64(0))  # divisor > 0: a negative remainder means floor is q - 1
        if op == "div":
            return b.select(fix, b.sub(q, _i64(1)), q)
        return b.select(fix, b.add(r, divisor), r)

    # --- comparisons and clamps (pad, concat, gather) ---------------------------------------------
    def clamp(self, form: Affine, lo: int, hi: int, name: str = "clamped") -> Affine:
        """``form`` clamped to ``[lo, hi]``, as an opaque term with those bounds."""
        bnds = form.bounds()
        if bnds is not None and lo <= bnds[0] and bnds[1] <= hi:
            return form
        v = self.value(form)
        b = self.b
        if bnds is None or bnds[0] < lo:
            v = b.select(b.icmp_signed("<", v, _i64(lo)), _i64(lo), v)
        if bnds is None or bnds[1] > hi:
            v = b.select(b.icmp_signed(">", v, _i64(hi)), _i64(hi), v)
        return Affine.of(Var(name, hi + 1, payload=v)) if lo == 0 else Affine.of(Var(name, None, payload=v))

    def less_than(self, form: Affine, bound: int):
        """An i1 ``form < bound``, folded when the range decides it (None: always true)."""
        bnds = form.bounds()
        if bnds is not None and bnds[1] < bound:
            return None
        if bnds is not None and bnds[0] >= bound:
            return ir.Constant(ir.IntType(1), 0)
        return self.b.icmp_signed("<", self.value(form), _i64(bound))

    def at_least(self, form: Affine, bound: int):
        """An i1 ``form >= bound`` (None: always true)."""
        bnds = form.bounds()
        if bnds is not None and bnds[0] >= bound:
            return None
        if bnds is not None and bnds[1] < bound:
            return ir.Constant(ir.IntType(1), 0)
        return self.b.icmp_signed(">=", self.value(form), _i64(bound))


def _and(b: ir.IRBuilder, conditions):
    out = None
    for c in conditions:
        if c is not None:
            out = c if out is None else b.and_(out, c)
    return out


class Buffer:
    """A kernel operand or result in memory: a pointer and its (static, row-major) tensor type."""

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
        return out


class ValueAtIndex:
    def __init__(self, s: LLVMScalarBuilder, index: IndexMaterializer, buffers: dict, overrides: dict | None = None,
                 target: str = "cpu"):
        self.s = s
        self.b = s.b
        self.index = index
        self.buffers = buffers  # Value -> Buffer (the block arguments)
        self.overrides = overrides or {}  # Operation -> fn(op, result index, index) -> Scalar
        self.target = target
        self.memo: dict = {}
        self.tables: dict = {}  # constant op -> its global array

    def new_scope(self) -> None:
        self.memo = {}
        self.index.new_scope()

    # --- memory -----------------------------------------------------------------------------------
    def load(self, buffer: Buffer, index) -> Scalar:
        address = self._address(buffer, index)
        return self.s.load(address, buffer.type.element_type)

    def store(self, buffer: Buffer, index, value: Scalar) -> None:
        address = self._address(buffer, index)
        self.b.store(self.s.to_storage(value), address, align=buffer.type.element_type.itemsize)

    def _address(self, buffer: Buffer, index):
        offset = self.index.value(buffer.offset(index))
        return self.b.gep(buffer.pointer, [offset], inbounds=True, source_etype=storage_type(buffer.type.element_type))

    # --- values -----------------------------------------------------------------------------------
    def at(self, value: Value, index) -> Scalar:
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

    def _op_value(self, op: Operation, value: Value, index) -> Scalar:
        if op in self.overrides:
            return self.overrides[op](op, value, index)
        emit = MOVEMENT.get(op.name)
        if emit is not None:
            return emit(self, op, op.definition.attrs(op), index)
        if op.name == "lz.constant":
            return self._constant(op, index)
        definition = op.definition
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

    def failure(self, op: Operation, why: str) -> LoweringError:
        dtype = op.results[0].type.element_type if op.results else "none"
        return LoweringError(f"failed to lower {op.name} with {dtype} for {self.target}: {why}", op.location)

    def _constant(self, op: Operation, index) -> Scalar:
        attr = op.attributes["value"]
        array = attr.array
        dtype = op.result.type.element_type
        if array.size == 1 or (array.size and (array == array.flat[0]).all()):
            return self.s.constant(array.flat[0].item(), dtype)
        if op not in self.tables:
            module = self.b.module
            t = storage_type(dtype)
            values = [int(v) if dtype == I1 else v.item() for v in array.reshape(-1)]
            array_type = ir.ArrayType(t, len(values))
            table = ir.GlobalVariable(module, array_type, f"lz_const_{len(self.tables)}")
            table.global_constant = True
            table.linkage = "internal"
            table.initializer = ir.Constant(array_type, [ir.Constant(t, v) for v in values])
            self.tables[op] = table
        table = self.tables[op]
        offset = self.index.value(linear_index(index, array.shape))
        address = self.b.gep(table, [_i64(0), offset], inbounds=True, source_etype=table.value_type)
        return self.s.load(address, dtype)


def broadcast_index(index, shape, operand_shape) -> tuple:
    """The index into an operand of ``operand_shape`` that numpy broadcasting reads for
    ``index`` into ``shape``."""
    lead = len(shape) - len(operand_shape)
    return tuple(Affine() if d == 1 else index[lead + k] for k, d in enumerate(operand_shape))


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
    inside = _and(e.b, conditions)
    loaded = e.at(x, source)
    return loaded if inside is None else Scalar(e.b.select(inside, loaded.value, fill.value), dtype)


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
            out = v if after is None else Scalar(e.b.select(after, v.value, out.value), v.dtype)
    return out


def _gather(e: ValueAtIndex, op, attrs, index):
    x, indices = op.operands
    axis = normalize_axis(attrs.axis, x.type.rank)
    size = x.type.shape[axis]
    k = indices.type.rank
    picked = e.at(indices, index[axis:axis + k])
    b = e.b
    v = picked.value
    if v.type.width < 64:
        v = b.zext(v, I64) if is_unsigned(picked.dtype) else b.sext(v, I64)
    if not is_unsigned(picked.dtype):
        v = b.select(b.icmp_signed("<", v, _i64(0)), b.add(v, _i64(size)), v)  # negative counts from the end
    # out of range is an error in the reference; here it is clamped so that no load leaves the buffer
    gathered = e.index.clamp(Affine.of(Var("gather", None, payload=v)), 0, max(size - 1, 0), "gathered")
    return e.at(x, tuple(index[:axis]) + (gathered,) + tuple(index[axis + k:]))


MOVEMENT = {
    "lz.reshape": _reshape,
    "lz.transpose": _transpose,
    "lz.broadcast_to": _broadcast_to,
    "lz.slice": _slice,
    "lz.pad": _pad,
    "lz.concat": _concat,
    "lz.gather": _gather,
}

