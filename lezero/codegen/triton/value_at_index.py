"""The "value at index" walk (``lezero/codegen/value_at_index.py``) emitting Triton.

In Triton an index is a *block*: each loop variable of the LLVM backend is a tensor of lanes
here (``offs // 20 % 4`` unravelled from a flat block of offsets, or ``rows[:, None]`` and
``cols[None, :]`` of a 2-D tile).  ``TritonIndex`` renders ``Affine`` forms as Triton integer
expressions over those names (a group of variables that a flat block covers row-major costs one
multiply of the flat offsets, so a contiguous load stays ``b0 + offs``).  Loads and stores carry
the kernel's lane mask (``mask``: the lanes of the block inside the iteration space); lanes
outside it may compute any index, so every load of them is masked too.  A lane whose index is
out of range (``lezero/codegen/index_checks.py``) sets its check's flag and index in the
``status`` buffer with masked ``tl.atomic_max``, so lanes in range store nothing and the order of
programs does not matter.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from lezero.codegen.affine import Affine, Var, linear_index
from lezero.codegen.errors import LoweringError
from lezero.codegen.index_checks import SLOTS_PER_CHECK, IndexChecks
from lezero.codegen.triton.scalar_builder import TritonScalarBuilder, TValue
from lezero.codegen.value_at_index import Buffer, IndexBindings, ValueAtIndex
from lezero.ir.core import Operation
from lezero.ir.types import I1, I64

if TYPE_CHECKING:  # (the context imports this module)
    from lezero.codegen.triton.context import TritonCode

# Tables of constants are select chains over the position: fine for a few elements only.
MAX_CONSTANT_TABLE = 64


class TritonIndex(IndexBindings):
    """Affine index forms as Triton integer expressions (named temporaries, memoized per scope).

    ``bind(var, expr)`` gives a loop variable its block; ``bind_group(vars, flat)`` binds
    neighbouring variables that a flat block of offsets covers row-major: a form whose
    coefficients on them are a row-major flattening costs one multiply of ``flat``, any other
    use of one of them recovers it by ``//`` and ``%``.
    """

    def __init__(self, code: TritonCode, s: TritonScalarBuilder):
        super().__init__()
        self.code = code
        self.s = s

    def value(self, form) -> str:
        """An expression (a literal, a bound name or a named temporary) for ``form``."""
        form = Affine.of(form)
        if form.is_const:
            return str(form.const)
        if form in self.memo:
            return self.memo[form]
        parts = self.parts(form) + ([str(form.const)] if form.const else [])
        expr = " + ".join(parts).replace("+ -", "- ")
        out = expr if _is_name(expr) else self.code.assign("idx", expr)
        self.memo[form] = out
        return out

    def _scaled(self, value: str, coef: int) -> str:
        return value if coef == 1 else f"{_paren(value)} * {coef}"

    def _grouped_var(self, var: Var, variables, flat: str) -> str:
        key = ("grouped", var)
        if key not in self.memo:
            inner = math.prod(v.extent for v in variables[variables.index(var) + 1:])
            expr = flat if inner == 1 else f"{flat} // {inner}"
            if var is not variables[0]:
                expr = f"{_paren(expr)} % {var.extent}" if inner != 1 else f"{flat} % {var.extent}"
            self.memo[key] = self.code.assign(var.name, expr)
        return self.memo[key]

    def _term(self, term) -> str:
        if isinstance(term, Var):
            if term.payload is not None:
                return term.payload
            if term in self.bound:
                return self.bound[term]
            if term in self.groups:
                variables, flat = self.groups[term]
                return self._grouped_var(term, variables, flat)
            raise LoweringError(f"index variable {term.name} is not bound to a block")
        key = ("derived", term)
        if key not in self.memo:
            operand = self.value(term.operand)
            bounds = term.operand.bounds()
            op = "//" if term.op == "div" else "%"
            if bounds is not None and bounds[0] >= 0:
                v = self.code.assign("idx", f"{_paren(operand)} {op} {term.divisor}")
            else:  # Triton's // and % truncate; floor them
                q = self.code.assign("idx", f"{_paren(operand)} // {term.divisor}")
                r = self.code.assign("idx", f"{_paren(operand)} % {term.divisor}")
                if term.op == "div":
                    v = self.code.assign("idx", f"tl.where({r} < 0, {q} - 1, {q})")
                else:
                    v = self.code.assign("idx", f"tl.where({r} < 0, {r} + {term.divisor}, {r})")
            self.memo[key] = v
        return self.memo[key]

    # --- comparisons and clamps (pad, concat, gather) ---------------------------------------------
    def clamp(self, form: Affine, lo: int, hi: int, name: str = "clamped") -> Affine:
        bnds = form.bounds()
        if bnds is not None and lo <= bnds[0] and bnds[1] <= hi:
            return form
        v = self.value(form)
        if bnds is None or bnds[0] < lo:
            v = f"tl.maximum({v}, {lo})"
        if bnds is None or bnds[1] > hi:
            v = f"tl.minimum({v}, {hi})"
        v = self.code.assign(name, v)
        return Affine.of(Var(name, hi + 1, payload=v)) if lo == 0 else Affine.of(Var(name, None, payload=v))

    def less_than(self, form: Affine, bound: int) -> TValue | None:
        return self._compare(form, "<", bound, lambda lo, hi: hi < bound, lambda lo, hi: lo >= bound)

    def position(self, form: Affine) -> TValue:
        """``form`` as an integer value of the scalar builder (int32 lanes when offsets fit,
        typed i64: a reader casts it before arithmetic that could overflow)."""
        return TValue(self.value(form), I64)

    def at_least(self, form: Affine, bound: int) -> TValue | None:
        return self._compare(form, ">=", bound, lambda lo, hi: lo >= bound, lambda lo, hi: hi < bound)

    def _compare(self, form, op, bound, always, never):
        bnds = form.bounds()
        if bnds is not None and always(*bnds):
            return None
        if bnds is not None and never(*bnds):
            return self.s.constant(False, I1)
        return TValue(self.code.assign("inside", f"{self.value(form)} {op} {bound}"), I1)


def _is_name(expr: str) -> bool:
    return expr.isidentifier() or expr.lstrip("-").isdigit()


def _paren(expr: str) -> str:
    return expr if _is_name(expr) else f"({expr})"


class TritonValueAtIndex(ValueAtIndex):
    """The walk emitting Triton: masked loads (``mask``: the lanes inside the iteration space,
    None for all), masked stores, small non-splat constants as ``tl.where`` chains."""

    def __init__(self, code: TritonCode, s: TritonScalarBuilder, index: TritonIndex, buffers: dict,
                 overrides: dict | None = None, target: str = "cuda", checks: IndexChecks | None = None):
        super().__init__(s, index, buffers, overrides, target, checks)
        self.code = code
        self.mask: str | None = None
        # a block of zeros shaped like the lanes (``offs * 0``): a store at one address from every lane
        self.zero_lanes: str | None = None

    def _offset(self, buffer: Buffer, index) -> str:
        """The offset of ``index`` in ``buffer``; a block even when every lane reads one address
        (the interpreter's scalar loads and masks do not mix)."""
        form = buffer.offset(index)
        offset = self.index.value(form)
        return f"{offset} + {self.zero_lanes}" if form.is_const and self.zero_lanes is not None else offset

    def load(self, buffer: Buffer, index) -> TValue:
        offset = self._offset(buffer, index)
        mask = "" if self.mask is None else f", mask={self.mask}, other=0"
        stored = self.code.assign("x", f"tl.load({buffer.pointer} + {offset}{mask})")
        return self.s.from_storage(stored, buffer.type.element_type)

    def store(self, buffer: Buffer, index, value: TValue) -> None:
        offset = self._offset(buffer, index)
        mask = "" if self.mask is None else f", mask={self.mask}"
        self.code.line(f"tl.store({buffer.pointer} + {offset}, {self.s.to_storage(value)}{mask})")

    def record_bad_index(self, slot: int, bad: TValue, index: TValue) -> None:
        lanes = self.code.assign("bad", bad.value if self.mask is None else f"({self.mask}) & ({bad.value})")
        # one address for every lane (a block shaped like the lanes, as atomics want)
        flag = self.code.assign("status_at", f"status + {SLOTS_PER_CHECK * slot} + {lanes}.to(tl.int32) * 0")
        self.code.line(f"tl.atomic_max({flag}, {lanes}.to(tl.int64), mask={lanes})")
        self.code.line(f"tl.atomic_max({flag} + 1, {index.value}, mask={lanes})")

    def constant_table(self, op: Operation, array, index) -> TValue:
        if array.size > MAX_CONSTANT_TABLE:
            raise self.failure(op, f"a constant of {array.size} elements inside a kernel (at most "
                                   f"{MAX_CONSTANT_TABLE}; larger constants are kernel operands)")
        dtype = op.result.type.element_type
        position = TValue(self.index.value(linear_index(index, array.shape)), dtype)
        values = array.reshape(-1)
        out = self.s.constant(values[-1].item(), dtype)
        for k in range(len(values) - 2, -1, -1):
            out = self.s.select(TValue(f"{position.value} == {k}", I1), self.s.constant(values[k].item(), dtype), out)
        return out
