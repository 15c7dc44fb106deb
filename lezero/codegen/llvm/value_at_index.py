"""The "value at index" emitter for LLVM: the backend-neutral walk of
``lezero/codegen/value_at_index.py`` (``ValueAtIndex``, the ``MOVEMENT`` table) with loads,
stores and constant tables in LLVM IR (``LLVMValueAtIndex``); one element of any value of a kernel.

Indices are ``Affine`` forms (``lezero/codegen/affine.py``); ``IndexMaterializer`` turns them
into i64 values when a load or a comparison needs one, and can record every form it was asked
for (the loop coalescing analysis reads them).  Both memoize per scope (one loop body), so a
value used twice at the same index is computed once.

Bounds checks (``lezero/codegen/index_checks.py``) cost the loop no branch: each check keeps two
accumulators in the function (``flag |= bad``, ``worst = max(worst, bad ? index : NO_INDEX)``),
an or and a max reduction that LLVM vectorizes (or hoists with an index that is invariant in the
inner loop, as an embedding's row is); ``flush_index_checks`` adds them to the status buffer
with atomic ``or``/``max`` once, before the function returns, only when a flag is set.
"""
from __future__ import annotations

import llvmlite.ir as ir

from lezero.codegen.affine import Affine, RunTimeSize, Var, linear_index
from lezero.codegen.errors import LoweringError
from lezero.codegen.index_checks import NO_INDEX, SLOTS_PER_CHECK, IndexChecks
from lezero.codegen.llvm.ir_types import I64
from lezero.codegen.llvm.scalar_builder import LLVMScalarBuilder, Scalar, storage_type
from lezero.codegen.value_at_index import Buffer, IndexBindings, ValueAtIndex
from lezero.ir.core import Operation
from lezero.ir.types import I1
from lezero.ir.types import I64 as I64_TYPE


def _i64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


class IndexMaterializer(IndexBindings):
    """Affine index forms to i64 values; a group of loop variables is a merged loop
    (``IndexBindings``).  ``recorded``, when a list, collects every form asked for (the loop
    coalescing analysis reads them)."""

    def __init__(self, builder: ir.IRBuilder):
        super().__init__()
        self.b = builder
        self.recorded: list[Affine] | None = None
        # a sequence form's (entry block, pointer to the run-time length), set by its context
        self.run_time_length: tuple | None = None
        self._sizes: dict = {}  # polynomial coefficients -> its value (the function's whole body)

    def size(self, n) -> ir.Value:
        """``n`` as an i64 value: a constant, or a ``RunTimeSize``'s polynomial of the run-time length."""
        if not isinstance(n, RunTimeSize):
            return _i64(n)
        if self.run_time_length is None:
            raise LoweringError(f"a size of the run-time length ({n}) in a kernel that reads none")
        if n.coefs not in self._sizes:
            entry, pointer = self.run_time_length
            b = ir.IRBuilder(entry)
            if "length" not in self._sizes:
                self._sizes["length"] = b.load(pointer, typ=I64, align=8)
            length, total, power = self._sizes["length"], None, None
            for p, c in enumerate(n.coefs):
                power = _i64(1) if p == 0 else length if p == 1 else b.mul(power, length, flags=["nsw"])
                if c:
                    term = power if c == 1 else b.mul(power, _i64(c), flags=["nsw"]) if p else _i64(c)
                    total = term if total is None else b.add(total, term, flags=["nsw"])
            self._sizes[n.coefs] = total
        return self._sizes[n.coefs]

    def value(self, form) -> ir.Value:
        form = Affine.of(form)
        if form.is_const:
            return self.size(form.const)
        key = form
        if key in self.memo:
            return self.memo[key]
        if self.recorded is not None:
            self.recorded.append(form)
        total = None
        for part in self.parts(form) + ([self.size(form.const)] if form.const else []):
            total = part if total is None else self.b.add(total, part, flags=["nsw"])
        self.memo[key] = total
        return total

    def _scaled(self, value, coef: int):
        return value if coef == 1 else self.b.mul(value, self.size(coef), flags=["nsw"])

    def _grouped_var(self, var: Var, variables, flat):
        key = ("grouped", var)
        if key not in self.memo:
            inner = 1
            for v in variables[variables.index(var) + 1:]:
                inner *= v.extent
            q = flat if inner == 1 else self.b.udiv(flat, self.size(inner))
            self.memo[key] = q if var is variables[0] else self.b.urem(q, self.size(var.extent))
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
            divisor = self.size(term.divisor)
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
            v = b.select(b.icmp_signed("<", v, self.size(lo)), self.size(lo), v)
        if bnds is None or bnds[1] > hi:
            v = b.select(b.icmp_signed(">", v, self.size(hi)), self.size(hi), v)
        return Affine.of(Var(name, hi + 1, payload=v)) if lo == 0 else Affine.of(Var(name, None, payload=v))

    def less_than(self, form: Affine, bound: int) -> Scalar | None:
        """An i1 ``form < bound``, folded when the range decides it (None: always true)."""
        bnds = form.bounds()
        if bnds is not None and bnds[1] < bound:
            return None
        if bnds is not None and bnds[0] >= bound:
            return Scalar(ir.Constant(ir.IntType(1), 0), I1)
        return Scalar(self.b.icmp_signed("<", self.value(form), self.size(bound)), I1)

    def position(self, form: Affine) -> Scalar:
        """``form`` as an i64 value of the scalar builder."""
        return Scalar(self.value(form), I64_TYPE)

    def at_least(self, form: Affine, bound: int) -> Scalar | None:
        """An i1 ``form >= bound`` (None: always true)."""
        bnds = form.bounds()
        if bnds is not None and bnds[0] >= bound:
            return None
        if bnds is not None and bnds[1] < bound:
            return Scalar(ir.Constant(ir.IntType(1), 0), I1)
        return Scalar(self.b.icmp_signed(">=", self.value(form), self.size(bound)), I1)


class LLVMValueAtIndex(ValueAtIndex):
    """The walk of ``lezero/codegen/value_at_index.py`` emitting LLVM IR: loads and stores through
    ``getelementptr`` on the buffer pointers, non-splat constants as private global arrays."""

    def __init__(self, s: LLVMScalarBuilder, index: IndexMaterializer, buffers: dict, overrides: dict | None = None,
                 target: str = "cpu", checks: IndexChecks | None = None, status: ir.Value | None = None):
        super().__init__(s, index, buffers, overrides, target, checks)
        self.b = s.b
        self.tables: dict = {}  # constant op -> its global array
        self.status = status  # the status buffer's pointer (kernels with checks)
        self.accumulators: dict[tuple, tuple] = {}  # (function, check slot) -> (flag, worst) stack slots

    def record_bad_index(self, slot: int, bad: Scalar, index: Scalar) -> None:
        b = self.b
        key = (b.function, slot)
        if key not in self.accumulators:
            entry = b.function.entry_basic_block
            at_entry = ir.IRBuilder(entry)
            at_entry.position_at_start(entry)
            flag, worst = at_entry.alloca(I64, name="bad_flag"), at_entry.alloca(I64, name="bad_index")
            at_entry.store(_i64(0), flag)
            at_entry.store(_i64(NO_INDEX), worst)
            self.accumulators[key] = (flag, worst)
        flag, worst = self.accumulators[key]
        b.store(b.or_(b.load(flag, typ=I64), b.zext(bad.value, I64)), flag)
        candidate = b.select(bad.value, index.value, _i64(NO_INDEX))
        current = b.load(worst, typ=I64)
        b.store(b.select(b.icmp_signed(">", candidate, current), candidate, current), worst)

    def flush_index_checks(self) -> None:
        """Add this function's accumulators to the status buffer (at the builder's position, which
        must run once the function's checked loops are done)."""
        b = self.b
        for (function, slot), (flag, worst) in self.accumulators.items():
            if function is not b.function:
                continue
            with b.if_then(b.icmp_unsigned("!=", b.load(flag, typ=I64), _i64(0)), likely=False):
                at = b.gep(self.status, [_i64(SLOTS_PER_CHECK * slot)], source_etype=I64)
                b.atomic_rmw("or", at, _i64(1), "monotonic")
                b.atomic_rmw("max", b.gep(at, [_i64(1)], source_etype=I64), b.load(worst, typ=I64), "monotonic")

    def load(self, buffer: Buffer, index) -> Scalar:
        address = self._address(buffer, index)
        return self.s.load(address, buffer.type.element_type)

    def store(self, buffer: Buffer, index, value: Scalar) -> None:
        address = self._address(buffer, index)
        self.b.store(self.s.to_storage(value), address, align=buffer.type.element_type.itemsize)

    def _address(self, buffer: Buffer, index):
        offset = self.index.value(buffer.offset(index))
        return self.b.gep(buffer.pointer, [offset], inbounds=True, source_etype=storage_type(buffer.type.element_type))

    def constant_table(self, op: Operation, array, index) -> Scalar:
        dtype = op.result.type.element_type
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
