"""The LLVM implementation of the ``ScalarBuilder`` (``lezero/ir/scalar.py``): one element's
arithmetic, as the numpy reference defines it, in llvmlite IR.

Element types live in three forms:

- storage, in buffers: ``f16`` is ``half``, ``bf16`` is a ``float`` holding a bf16 value (as the
  reference interpreter stores it, and as the runtime's numpy buffers hold it), ``i1`` is an
  ``i8`` 0 or 1 (numpy's bool), ``ui8``..``ui64`` their signless widths;
- compute, in registers: ``f16`` and ``bf16`` compute in ``float``, ``i1`` is ``i1``;
- each op's result is rounded to its element type (``round``): f16 through ``half``, bf16 to
  nearest even, as the reference rounds after every op.

float32 exp, log, tanh, sigmoid, erf, erfc, sin and cos are the branch-free approximations of
``scalar_math`` (they vectorize); float64 ones call libm (``external_symbols`` lists them, an
executable links ``-lm``).  Integer division truncates toward zero and ``x / 0 == 0``
(``INT_MIN / -1`` wraps); integer arithmetic wraps; the ``ui*`` types are unsigned throughout.
"""
from __future__ import annotations

from contextlib import contextmanager

import llvmlite.ir as ir

from lezero.codegen.llvm import scalar_math, vectors
from lezero.codegen.llvm.ir_types import DOUBLE, FLOAT, HALF, I8, I32
from lezero.codegen.llvm.scalar_math import MathBuilder
from lezero.codegen.value_at_index import is_unsigned
from lezero.ir.scalar import ScalarBuilder
from lezero.ir.types import BF16, ELEMENT_TYPES, F16, F64, I1, ElementType

BOOL = ir.IntType(1)


def compute_type(dtype: ElementType) -> ir.Type:
    if dtype.is_float:
        return DOUBLE if dtype == F64 else FLOAT
    return ir.IntType(dtype.bitwidth)


def storage_type(dtype: ElementType) -> ir.Type:
    if dtype == F16:
        return HALF
    if dtype == I1:
        return I8
    return compute_type(dtype)


class Scalar:
    """An LLVM value in the compute form of ``dtype``."""

    __slots__ = ("value", "dtype")

    def __init__(self, value: ir.Value, dtype: ElementType):
        self.value = value
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"Scalar({self.dtype}: {self.value})"


_FLOAT_PREDICATES = {"eq": ("==", True), "ne": ("!=", False), "lt": ("<", True), "le": ("<=", True),
                     "gt": (">", True), "ge": (">=", True)}
_INT_PREDICATES = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


class LLVMScalarBuilder(ScalarBuilder):
    def __init__(self, builder: ir.IRBuilder):
        self.b = builder
        self.m = MathBuilder(builder)
        self.external_symbols: set[str] = set()
        self.float_flags: tuple = ()  # fast-math flags on float add and mul (see ``reassociating``)

    @contextmanager
    def reassociating(self):
        """Float adds and multiplies may be reassociated: a reduction's accumulation, so that LLVM
        vectorizes it (several partial sums, as numpy's pairwise sum also reorders)."""
        saved, self.float_flags = self.float_flags, ("reassoc",)
        try:
            yield
        finally:
            self.float_flags = saved

    # --- values ---------------------------------------------------------------------------------
    def dtype(self, x: Scalar) -> ElementType:
        return x.dtype

    def constant(self, value, like) -> Scalar:
        dtype = like if isinstance(like, ElementType) else like.dtype
        t = compute_type(dtype)
        if dtype.is_float:
            return Scalar(ir.Constant(t, float(value)), dtype)
        if dtype == I1:
            return Scalar(ir.Constant(t, int(bool(value))), dtype)
        bits = dtype.bitwidth
        v = int(value) & ((1 << bits) - 1)  # wrap to the width (ui8 -1 is 255)
        return Scalar(ir.Constant(t, v - (1 << bits) if v >> (bits - 1) else v), dtype)

    def load(self, pointer, dtype: ElementType) -> Scalar:
        """An element of a buffer (storage form) as a compute value."""
        v = self.b.load(pointer, typ=storage_type(dtype), align=dtype.itemsize)
        return Scalar(self.from_storage(v, dtype), dtype)

    def from_storage(self, v, dtype: ElementType):
        if dtype == F16:
            return self.b.fpext(v, FLOAT)
        if dtype == I1:
            return self.b.icmp_unsigned("!=", v, ir.Constant(I8, 0))
        return v

    def to_storage(self, x: Scalar):
        if x.dtype == F16:
            return self.b.fptrunc(x.value, HALF)
        if x.dtype == I1:
            return self.b.zext(x.value, I8)
        return x.value

    def round(self, x: Scalar) -> Scalar:
        """``x`` rounded to its element type (f16, bf16); other types are exact already."""
        if x.dtype == F16:
            return Scalar(vectors.round_to(self.b, x.value, "f16"), F16)
        if x.dtype == BF16:
            return Scalar(vectors.round_to_bf16(self.b, x.value), BF16)
        return x

    def _same(self, x: Scalar, y: Scalar) -> ElementType:
        if x.dtype != y.dtype:
            raise NotImplementedError(f"operands of different element types ({x.dtype} and {y.dtype})")
        return x.dtype

    # --- arithmetic -----------------------------------------------------------------------------
    def neg(self, x):
        if x.dtype.is_float:
            return Scalar(self.b.fneg(x.value), x.dtype)
        return Scalar(self.b.sub(ir.Constant(x.value.type, 0), x.value), x.dtype)

    def abs(self, x):
        if x.dtype.is_float:
            return Scalar(self.m.fabs(x.value), x.dtype)
        if is_unsigned(x.dtype):
            return x
        zero = ir.Constant(x.value.type, 0)
        return Scalar(self.b.select(self.b.icmp_signed("<", x.value, zero), self.b.sub(zero, x.value), x.value),
                      x.dtype)

    def _arith(self, float_op, int_op, x, y):
        dtype = self._same(x, y)
        if dtype.is_float:
            return Scalar(float_op(x.value, y.value, flags=self.float_flags), dtype)
        return Scalar(int_op(x.value, y.value), dtype)

    def add(self, x, y):
        return self._arith(self.b.fadd, self.b.add, x, y)

    def sub(self, x, y):
        return self._arith(self.b.fsub, self.b.sub, x, y)

    def mul(self, x, y):
        return self._arith(self.b.fmul, self.b.mul, x, y)

    def umulhi(self, x, y):
        dtype = self._same(x, y)
        if not is_unsigned(dtype) or dtype == I1:
            raise NotImplementedError(f"umulhi of {dtype} (unsigned integers only)")
        b, t = self.b, x.value.type
        wide = ir.IntType(2 * t.width)
        product = b.mul(b.zext(x.value, wide), b.zext(y.value, wide))
        return Scalar(b.trunc(b.lshr(product, ir.Constant(wide, t.width)), t), dtype)

    def div(self, x, y):
        dtype = self._same(x, y)
        if dtype.is_float:
            return Scalar(self.b.fdiv(x.value, y.value), dtype)
        b, t = self.b, x.value.type
        zero, one = ir.Constant(t, 0), ir.Constant(t, 1)
        by_zero = b.icmp_unsigned("==", y.value, zero)
        if is_unsigned(dtype):
            q = b.udiv(x.value, b.select(by_zero, one, y.value))
            return Scalar(b.select(by_zero, zero, q), dtype)
        # sdiv traps on 0 and on INT_MIN / -1: divide by 1 there, then pick 0 and -x
        by_minus_one = b.icmp_signed("==", y.value, ir.Constant(t, -1))
        q = b.sdiv(x.value, b.select(b.or_(by_zero, by_minus_one), one, y.value))
        q = b.select(by_minus_one, b.sub(zero, x.value), q)
        return Scalar(b.select(by_zero, zero, q), dtype)

    def rem(self, x, y):
        dtype = self._same(x, y)
        b = self.b
        if dtype.is_float:
            # frem is fmod; on the CPU a libcall (fmodf/fmod) that the JIT resolves from libm
            self.external_symbols.add("fmod" if dtype == F64 else "fmodf")
            return Scalar(b.frem(x.value, y.value), dtype)
        t = x.value.type
        zero, one = ir.Constant(t, 0), ir.Constant(t, 1)
        by_zero = b.icmp_unsigned("==", y.value, zero)
        if is_unsigned(dtype):
            r = b.urem(x.value, b.select(by_zero, one, y.value))
            return Scalar(b.select(by_zero, zero, r), dtype)
        # srem traps on 0 and on INT_MIN % -1 (whose remainder is 0): divide by 1 there
        trivial = b.or_(by_zero, b.icmp_signed("==", y.value, ir.Constant(t, -1)))
        r = b.srem(x.value, b.select(trivial, one, y.value))
        return Scalar(b.select(trivial, zero, r), dtype)

    def pow(self, x, y):
        dtype = self._same(x, y)
        if dtype.is_float:
            symbol = "pow" if dtype == F64 else "powf"
            self.external_symbols.add(symbol)
            t = compute_type(dtype)
            return Scalar(self.m.intrinsic(f"llvm.pow.{scalar_math._suffix(t)}", t, [x.value, y.value]), dtype)
        return Scalar(self._int_pow(x.value, y.value, is_unsigned(dtype)), dtype)

    def _int_pow(self, x, y, unsigned: bool):
        """Square and multiply over the exponent's bits (wrapping, as any order of products does);
        a negative exponent gives trunc(1 / x^-y): 1 for x = 1, +-1 for x = -1, else 0."""
        b, t = self.b, x.type
        zero, one = ir.Constant(t, 0), ir.Constant(t, 1)
        result, base = one, x
        for bit in range(t.width if unsigned else t.width - 1):
            set_ = b.icmp_unsigned("!=", b.and_(b.lshr(y, ir.Constant(t, bit)), one), zero)
            result = b.select(set_, b.mul(result, base), result)
            base = b.mul(base, base)
        if unsigned:
            return result
        odd = b.icmp_unsigned("!=", b.and_(y, one), zero)
        minus_one_pow = b.select(odd, ir.Constant(t, -1), one)
        small = b.select(b.icmp_signed("==", x, one), one,
                         b.select(b.icmp_signed("==", x, ir.Constant(t, -1)), minus_one_pow, zero))
        return b.select(b.icmp_signed("<", y, zero), small, result)

    def _minmax(self, which: str, x, y):
        dtype = self._same(x, y)
        t = x.value.type
        if dtype.is_float:
            # llvm.maximum/minimum propagate nan, as np.maximum does, and vectorize (also as reductions)
            name = f"llvm.{'maximum' if which == 'max' else 'minimum'}.{scalar_math._suffix(t)}"
        else:
            name = f"llvm.{'u' if is_unsigned(dtype) else 's'}{which}.i{t.width}"
        return Scalar(self.m.intrinsic(name, t, [x.value, y.value]), dtype)

    def max(self, x, y):
        return self._minmax("max", x, y)

    def min(self, x, y):
        return self._minmax("min", x, y)

    # --- logic ----------------------------------------------------------------------------------
    def _bitwise(self, op, x, y):
        dtype = self._same(x, y)
        if dtype.is_float:
            raise NotImplementedError("bitwise logic on floats")
        return Scalar(op(x.value, y.value), dtype)

    def and_(self, x, y):
        return self._bitwise(self.b.and_, x, y)

    def or_(self, x, y):
        return self._bitwise(self.b.or_, x, y)

    def not_(self, x):
        if x.dtype.is_float:
            raise NotImplementedError("bitwise not of a float")
        return Scalar(self.b.not_(x.value), x.dtype)

    def _shift(self, x, y, left: bool):
        dtype = self._same(x, y)
        if not dtype.is_int:
            raise NotImplementedError(f"shifts of {dtype}")
        b, t = self.b, x.value.type
        width = ir.Constant(t, t.width)
        too_far = b.icmp_unsigned(">=", y.value, width)  # negative amounts are huge unsigned
        amount = b.select(too_far, ir.Constant(t, 0), y.value)
        if left:
            return Scalar(b.select(too_far, ir.Constant(t, 0), b.shl(x.value, amount)), dtype)
        if is_unsigned(dtype):
            return Scalar(b.select(too_far, ir.Constant(t, 0), b.lshr(x.value, amount)), dtype)
        fill = b.ashr(x.value, ir.Constant(t, t.width - 1))  # 0 or -1
        return Scalar(b.select(too_far, fill, b.ashr(x.value, amount)), dtype)

    def shift_left(self, x, y):
        return self._shift(x, y, True)

    def shift_right(self, x, y):
        return self._shift(x, y, False)

    def cmp(self, predicate, x, y):
        dtype = self._same(x, y)
        if dtype.is_float:
            op, ordered = _FLOAT_PREDICATES[predicate]
            fn = self.b.fcmp_ordered if ordered else self.b.fcmp_unordered  # ne: true for nan
            return Scalar(fn(op, x.value, y.value), I1)
        fn = self.b.icmp_unsigned if is_unsigned(dtype) else self.b.icmp_signed
        return Scalar(fn(_INT_PREDICATES[predicate], x.value, y.value), I1)

    def select(self, condition, a, b):
        dtype = self._same(a, b)
        return Scalar(self.b.select(condition.value, a.value, b.value), dtype)

    def cast(self, x, to):
        src, b, v = x.dtype, self.b, x.value
        if src == to:
            return x
        if to == I1:
            if src.is_float:
                return Scalar(b.fcmp_unordered("!=", v, ir.Constant(v.type, 0.0)), I1)  # nan -> true
            return Scalar(b.icmp_unsigned("!=", v, ir.Constant(v.type, 0)), I1)
        if to.is_float:
            if src.is_float:
                return self._float_to_float(v, src, to)
            # int -> float rounds once (an int f16 can hold is exact in f32; bf16 goes through
            # f32, as numpy's does)
            f = b.uitofp(v, compute_type(to)) if is_unsigned(src) else b.sitofp(v, compute_type(to))
            return self.round(Scalar(f, to))
        t = compute_type(to)
        if src.is_float:
            # float -> int truncates; out of range and nan are unspecified: saturate (no poison)
            wide = t if t.width >= 32 else I32
            r = self._float_to_int_saturating(v, wide)
            return Scalar(b.trunc(r, t) if wide != t else r, to)
        if t.width == v.type.width:
            return Scalar(v, to)
        if t.width < v.type.width:
            return Scalar(b.trunc(v, t), to)
        return Scalar(b.zext(v, t) if is_unsigned(src) else b.sext(v, t), to)

    def _float_to_int_saturating(self, v, wide: ir.IntType):
        """``llvm.fptosi.sat`` (truncate; out of range to the nearest limit, nan to 0) as compares,
        selects and a plain ``fptosi`` of an in-range value: LLVM's x86 backend scalarizes a vector
        ``fptosi.sat`` lane by lane with branches (an int8 requantize epilogue spent 6x its
        arithmetic there), while this vectorizes to ``vcvttps2dq`` and blends.  The limits
        ``-2^(w-1)`` and ``2^(w-1)`` are exact floats (inf in f16, whose values all fit)."""
        b = self.b
        low = ir.Constant(v.type, -float(2 ** (wide.width - 1)))
        high = ir.Constant(v.type, float(2 ** (wide.width - 1)))
        above = b.fcmp_ordered(">=", v, high)
        below = b.fcmp_ordered("<", v, low)
        inside = b.and_(b.fcmp_ordered(">=", v, low), b.fcmp_ordered("<", v, high))  # false for nan
        r = b.fptosi(b.select(inside, v, ir.Constant(v.type, 0.0)), wide)
        r = b.select(above, ir.Constant(wide, 2 ** (wide.width - 1) - 1), r)
        return b.select(below, ir.Constant(wide, -2 ** (wide.width - 1)), r)

    def bitcast(self, x, to):
        if x.dtype == to:
            return x
        if to == I1:
            return self.cast(self.bitcast(x, ELEMENT_TYPES["ui8"]), I1)
        stored = self.to_storage(x)
        return Scalar(self.from_storage(self.b.bitcast(stored, storage_type(to)), to), to)

    def _float_to_float(self, v, src, to):
        b = self.b
        if to == F64:
            return Scalar(b.fpext(v, DOUBLE), to)
        if to == F16:
            if src == F64:
                v = self._to_float_round_to_odd(v)
            return Scalar(vectors.round_to(b, v, "f16"), to)
        if src == F64:
            v = b.fptrunc(v, FLOAT)  # then bf16 rounds again, as numpy's f64 -> f32 -> bf16
        return self.round(Scalar(v, to))

    def _to_float_round_to_odd(self, v):
        """f64 -> f32 rounding to odd, so that rounding on to f16 gives the correctly rounded f16
        (f32 has more than two bits beyond f16's).  A direct f64 -> half fptrunc would be a
        libcall (``__truncdfhf2``) that a JIT cannot resolve."""
        b = self.b
        t = b.fptrunc(v, FLOAT)
        back = b.fpext(t, DOUBLE)
        bits = b.bitcast(t, I32)
        even = b.icmp_unsigned("==", b.and_(bits, ir.Constant(I32, 1)), ir.Constant(I32, 0))
        inexact = b.fcmp_ordered("!=", back, v)
        away = b.fcmp_ordered(">", self.m.fabs(v), self.m.fabs(back))  # |v| beyond |t|: the odd neighbour is above
        odd = b.select(away, b.add(bits, ir.Constant(I32, 1)), b.sub(bits, ir.Constant(I32, 1)))
        return b.bitcast(b.select(b.and_(inexact, even), odd, bits), FLOAT)

    # --- float math -----------------------------------------------------------------------------
    def _float(self, x, what: str):
        if not x.dtype.is_float:
            raise NotImplementedError(f"{what} of an integer")
        return x.value

    def sqrt(self, x):
        return Scalar(self.m.unary_intrinsic("sqrt", self._float(x, "sqrt")), x.dtype)

    def floor(self, x):
        return Scalar(self.m.floor(self._float(x, "floor")), x.dtype)

    def ceil(self, x):
        return Scalar(self.m.unary_intrinsic("ceil", self._float(x, "ceil")), x.dtype)

    def round_half_even(self, x):
        """One ``llvm.roundeven`` (x86 ``vrndscaleps $8``, AArch64 ``frintn``), not floor arithmetic."""
        return Scalar(self.m.unary_intrinsic("roundeven", self._float(x, "round")), x.dtype)

    def _transcendental(self, x, name: str, approximation, libm: str | None = None):
        v = self._float(x, name)
        if v.type == FLOAT:
            return Scalar(approximation(self.m, v), x.dtype)
        symbol = libm or name
        self.external_symbols.add(symbol)
        return Scalar(self.m.intrinsic(symbol, DOUBLE, [v]), x.dtype)

    def exp(self, x):
        return self._transcendental(x, "exp", scalar_math.exp_f32)

    def log(self, x):
        return self._transcendental(x, "log", scalar_math.log_f32)

    def tanh(self, x):
        return self._transcendental(x, "tanh", scalar_math.tanh_f32)

    def erf(self, x):
        return self._transcendental(x, "erf", scalar_math.erf_f32)

    def erfc(self, x):
        return self._transcendental(x, "erfc", scalar_math.erfc_f32)

    def sin(self, x):
        return self._transcendental(x, "sin", scalar_math.sin_f32)

    def normcdf(self, x):
        v = self._float(x, "normcdf")
        if v.type == FLOAT:
            return Scalar(scalar_math.normcdf_f32(self.m, v), x.dtype)
        half = self.constant(0.5, x)
        return self.mul(half, self.erfc(self.mul(x, self.constant(-0.7071067811865476, x))))

    def cos(self, x):
        return self._transcendental(x, "cos", scalar_math.cos_f32)

    def sigmoid(self, x):
        v = self._float(x, "sigmoid")
        if v.type == FLOAT:
            return Scalar(scalar_math.sigmoid_f32(self.m, v), x.dtype)
        # float64: the reference's own form, with libm's exp
        e = self.exp(self.neg(self.abs(x)))
        one = self.constant(1, x)
        r = self.div(one, self.add(one, e))
        return self.select(self.cmp("ge", x, self.constant(0, x)), r, self.mul(e, r))

