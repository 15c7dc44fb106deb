"""The Triton implementation of the ``ScalarBuilder`` (``lezero/ir/scalar.py``): each primitive
writes one statement (``t12 = tl.exp(t11)``) into the kernel body and returns the new name with
its lz element type.  A value is a block of lanes; the arithmetic is the numpy reference's.

Element types live in three forms, as on the CPU:

- storage, in buffers: ``f16`` is ``fp16``, ``bf16`` is ``bf16`` (16 bits: the host's float32
  holding a bf16 value is converted, exactly, where a value crosses to the device), ``i1`` a bool
  byte (``*i1``), the ``ui*`` types Triton's unsigned types;
- compute: ``f16`` and ``bf16`` compute in ``fp32``, ``i1`` is ``int1``;
- each op's result is rounded to its type (``round``): f16 through ``fp16``, bf16 to nearest
  even by integer arithmetic on the bits (the same on the GPU and in the interpreter).

Float32 division and square root are the correctly rounded ``div_rn``/``sqrt_rn`` (``/`` and
``tl.sqrt`` are approximations on the GPU).  libdevice does not run under the interpreter, so
what ``tl`` lacks is written from ``tl`` primitives: ``tanh`` (a polynomial near 0, where
``1 - 2 / (e^2x + 1)`` cancels; float64 through an ``expm1`` series), ``sigmoid`` (never
overflows), ``erfc``/``normcdf`` (float32: ``1 - erf`` below 0.5, else the ``ERFC_Q`` formula
in float64; float64: ``1 - erf`` below 3, else a continued fraction), ``pow`` (``exp2(y log2 |x|)``
in float64 with the signs of negative bases; integers by squaring, in a helper), ``fmod``
(Triton's float ``%`` is C's ``fmod``).  Integer division truncates and ``x / 0 == 0``
(``INT_MIN / -1`` wraps); shifts past the width give 0 (or -1); float -> int casts truncate.
"""
from __future__ import annotations

import math

from lezero.codegen.polynomials import ERFC_Q, TANH_P
from lezero.codegen.value_at_index import is_unsigned
from lezero.ir.scalar import ScalarBuilder
from lezero.ir.types import BF16, ELEMENT_TYPES, F16, F64, I1, ElementType

_INT_TRITON = {"i8": "tl.int8", "i16": "tl.int16", "i32": "tl.int32", "i64": "tl.int64",
               "ui8": "tl.uint8", "ui16": "tl.uint16", "ui32": "tl.uint32", "ui64": "tl.uint64"}
_INT_SIGNATURE = {"i8": "i8", "i16": "i16", "i32": "i32", "i64": "i64", "ui8": "u8", "ui16": "u16", "ui32": "u32",
                  "ui64": "u64"}
UI8 = ELEMENT_TYPES["ui8"]
_PREDICATES = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


def compute_dtype(dtype: ElementType) -> str:
    """The Triton type a value of ``dtype`` computes in."""
    if dtype.is_float:
        return "tl.float64" if dtype == F64 else "tl.float32"
    if dtype == I1:
        return "tl.int1"
    return _INT_TRITON[dtype.name]


def storage_dtype(dtype: ElementType) -> str:
    """The Triton type of a buffer element of ``dtype``."""
    return {F16: "tl.float16", BF16: "tl.bfloat16"}.get(dtype) or compute_dtype(dtype)


def pointer_signature(dtype: ElementType) -> str:
    """The ``triton.compile`` signature of a buffer of ``dtype`` (``*fp32``, ``*bf16``, ``*i1``, ``*u8``)."""
    if dtype.is_float:
        return {F16: "*fp16", BF16: "*bf16", F64: "*fp64"}.get(dtype, "*fp32")
    if dtype == I1:
        return "*i1"
    return "*" + _INT_SIGNATURE[dtype.name]


def float_literal(value: float) -> str:
    if math.isnan(value):
        return 'float("nan")'
    if math.isinf(value):
        return 'float("inf")' if value > 0 else '-float("inf")'
    return repr(float(value))


class TValue:
    """A Triton expression (usually a name) in the compute form of ``dtype``."""

    __slots__ = ("value", "dtype")

    def __init__(self, value: str, dtype: ElementType):
        self.value = value
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"TValue({self.dtype}: {self.value})"


# Helpers a kernel module defines when its code calls them (name -> source).
HELPERS = {
    "lz_int_pow": '''
@triton.jit
def lz_int_pow(x, y, BITS: tl.constexpr, SIGNED: tl.constexpr):
    """x ** y by squaring over the exponent's bits (wrapping); a negative exponent gives
    trunc(1 / x ** -y): 1 for x = 1, +-1 for x = -1, else 0."""
    result = x * 0 + 1
    base = x
    e = y
    for _ in tl.static_range(BITS - 1 if SIGNED else BITS):
        result = tl.where((e & 1) != 0, result * base, result)
        base = base * base
        e = e >> 1
    if SIGNED:
        odd = (y & 1) != 0
        small = tl.where(x == 1, 1, tl.where(x == -1, tl.where(odd, -1, 1), 0))
        result = tl.where(y < 0, small.to(result.dtype), result)
    return result
''',
    "lz_erfc_f64": '''
@triton.jit
def lz_erfc_f64(x):
    """erfc for float64: 1 - erf(x) below 3 (erfc(3) = 2e-5: little cancellation), else
    e^-x^2 / (sqrt(pi) K(x)) with K the continued fraction x + (1/2) / (x + 1 / (x + (3/2) / ...)),
    60 terms (it converges fast for x >= 3); 2 - erfc(-x) for negative x."""
    a = tl.abs(x)
    at = tl.where(a < 3.0, 3.0, tl.minimum(a, 30.0)).to(tl.float64)
    k = at
    for n in tl.static_range(60, 0, -1):
        k = at + (n * 0.5) / k
    tail = tl.exp(-at * at) / (1.7724538509055160273 * k)
    tail = tl.where(a > 30.0, 0.0, tail)
    near = 1.0 - tl.math.erf(a)
    pos = tl.where(a < 3.0, near, tail)
    out = tl.where(x < 0.0, 2.0 - pos, pos)
    return tl.where(x != x, x, out)
''',
}


class TritonScalarBuilder(ScalarBuilder):
    def __init__(self, code):
        self.code = code
        self.helpers: set[str] = set()

    def _emit(self, expr: str, dtype: ElementType) -> TValue:
        return TValue(self.code.assign("t", expr), dtype)

    # --- values ---------------------------------------------------------------------------------
    def dtype(self, x: TValue) -> ElementType:
        return x.dtype

    def constant(self, value, like) -> TValue:
        dtype = like if isinstance(like, ElementType) else like.dtype
        if dtype.is_float:
            literal = float_literal(float(value))
            # a bare literal is a weakly typed fp32: float64 constants are typed (full precision)
            return TValue(f"tl.full([], {literal}, tl.float64)" if dtype == F64 else literal, dtype)
        if dtype == I1:
            return TValue(f"tl.full([], {int(bool(value))}, tl.int1)", dtype)
        bits = dtype.bitwidth
        v = int(value) & ((1 << bits) - 1)
        if not is_unsigned(dtype) and v >> (bits - 1):
            v -= 1 << bits
        if dtype.name == "i32" or (-2 ** 31 <= v < 2 ** 31 and bits >= 32 and not is_unsigned(dtype)):
            return TValue(str(v), dtype)
        return TValue(f"tl.full([], {v}, {compute_dtype(dtype)})", dtype)

    def from_storage(self, stored: str, dtype: ElementType) -> TValue:
        if dtype in (F16, BF16):
            return self._emit(f"{stored}.to(tl.float32)", dtype)
        return TValue(stored, dtype)

    def to_storage(self, x: TValue) -> str:
        """The expression a store writes (a constant gets its type; an f16 or bf16 value, rounded
        to its type already, converts exactly)."""
        if x.dtype in (F16, BF16):
            return f"{self._tensor(x)}.to({storage_dtype(x.dtype)})"
        return self._tensor(x)

    def round(self, x: TValue) -> TValue:
        """``x`` rounded to its element type (f16, bf16); other types are exact already."""
        if x.dtype == F16:
            return self._emit(f"{self._tensor(x)}.to(tl.float16).to(tl.float32)", F16)
        if x.dtype == BF16:
            return TValue(self._round_bf16(self._tensor(x)), BF16)
        return x

    def _round_bf16(self, v: str) -> str:
        bits = self.code.assign("bits", f"{v}.to(tl.int32, bitcast=True)")
        rounded = self.code.assign("bits", f"(({bits} + 0x7FFF + (({bits} >> 16) & 1)) & -65536)"
                                           ".to(tl.float32, bitcast=True)")
        return self.code.assign("t", f"tl.where({v} != {v}, {v}, {rounded})")

    def _same(self, x: TValue, y: TValue) -> ElementType:
        if x.dtype != y.dtype:
            raise NotImplementedError(f"operands of different element types ({x.dtype} and {y.dtype})")
        return x.dtype

    # --- arithmetic -----------------------------------------------------------------------------
    def neg(self, x):
        return self._emit(f"-{x.value}" if x.dtype.is_float or not is_unsigned(x.dtype) else f"0 - {x.value}",
                          x.dtype)

    def abs(self, x):
        if is_unsigned(x.dtype):
            return x
        return self._emit(f"tl.abs({x.value})", x.dtype)

    def add(self, x, y):
        return self._emit(f"{x.value} + {y.value}", self._same(x, y))

    def sub(self, x, y):
        return self._emit(f"{x.value} - {y.value}", self._same(x, y))

    def mul(self, x, y):
        return self._emit(f"{x.value} * {y.value}", self._same(x, y))

    def umulhi(self, x, y):
        dtype = self._same(x, y)
        if not is_unsigned(dtype) or dtype == I1:
            raise NotImplementedError(f"umulhi of {dtype} (unsigned integers only)")
        if dtype.bitwidth == 32:
            return self._emit(f"tl.umulhi({self._tensor(x)}, {self._tensor(y)})", dtype)
        if dtype.bitwidth == 64:
            raise NotImplementedError("umulhi of ui64 (Triton has no 128-bit product)")
        wide = "tl.uint32"  # the narrow types' product fits in 32 bits
        product = f"{self._tensor(x)}.to({wide}) * {self._tensor(y)}.to({wide})"
        return self._emit(f"({product} >> {dtype.bitwidth}).to({compute_dtype(dtype)})", dtype)

    def div(self, x, y):
        dtype = self._same(x, y)
        if dtype.is_float:
            if dtype == F64:
                return self._emit(f"{x.value} / {y.value}", dtype)
            return self._emit(f"tl.math.div_rn({self._tensor(x)}, {self._tensor(y)})", dtype)
        zero, one = self.constant(0, dtype).value, self.constant(1, dtype).value
        if is_unsigned(dtype):
            q = self._emit(f"{x.value} // tl.where({y.value} == 0, {one}, {y.value})", dtype)
            return self._emit(f"tl.where({y.value} == 0, {zero}, {q.value})", dtype)
        # // traps on 0 and overflows on INT_MIN / -1: divide by 1 there, then pick 0 and -x
        minus_one = self.constant(-1, dtype).value
        safe = self._emit(f"tl.where(({y.value} == 0) | ({y.value} == {minus_one}), {one}, {y.value})", dtype)
        q = self._emit(f"tl.where({y.value} == {minus_one}, {zero} - {x.value}, {x.value} // {safe.value})", dtype)
        return self._emit(f"tl.where({y.value} == 0, {zero}, {q.value})", dtype)

    def rem(self, x, y):
        dtype = self._same(x, y)
        if dtype.is_float:
            return self._emit(f"{x.value} % {y.value}", dtype)  # C's fmod on floats
        zero, one = self.constant(0, dtype).value, self.constant(1, dtype).value
        trivial = f"{y.value} == 0" if is_unsigned(dtype) else \
            f"({y.value} == 0) | ({y.value} == {self.constant(-1, dtype).value})"
        safe = self._emit(f"tl.where({trivial}, {one}, {y.value})", dtype)
        return self._emit(f"tl.where({trivial}, {zero}, {x.value} % {safe.value})", dtype)

    def pow(self, x, y):
        dtype = self._same(x, y)
        if not dtype.is_float:
            self.helpers.add("lz_int_pow")
            return self._emit(f"lz_int_pow({x.value}, {y.value}, {dtype.bitwidth}, {not is_unsigned(dtype)})", dtype)
        # |x|^y = 2^(y log2 |x|) in float64; a negative base needs an integer exponent (odd: negative)
        xd, yd = self._f64(x), self._f64(y)
        magnitude = self._emit(f"tl.math.exp2({yd} * tl.math.log2(tl.abs({xd})))", F64)
        whole = self._emit(f"tl.floor({yd}) == {yd}", I1)
        odd = self._emit(f"{whole.value} & (tl.floor({yd} * 0.5) * 2.0 != {yd})", I1)
        signed = self._emit(f"tl.where({xd} < 0.0, tl.where({whole.value}, tl.where({odd.value}, -{magnitude.value}, "
                            f"{magnitude.value}), float(\"nan\")), {magnitude.value})", F64)
        out = self._emit(f"tl.where(({yd} == 0.0) | ({xd} == 1.0), 1.0, {signed.value})", F64)
        return out if dtype == F64 else self._emit(f"{out.value}.to(tl.float32)", dtype)

    def _f64(self, x: TValue) -> str:
        return x.value if x.dtype == F64 else f"{self._tensor(x)}.to(tl.float64)"

    def _tensor(self, x: TValue) -> str:
        """``x`` as a tensor expression (a bare literal has no ``.to``)."""
        if x.value.isidentifier() or x.value.startswith("tl."):
            return x.value
        return f"tl.full([], {x.value}, {compute_dtype(x.dtype)})"

    def _minmax(self, which: str, x, y):
        dtype = self._same(x, y)
        nan = ", propagate_nan=tl.PropagateNan.ALL" if dtype.is_float else ""
        return self._emit(f"tl.{which}({self._tensor(x)}, {self._tensor(y)}{nan})", dtype)

    def max(self, x, y):
        return self._minmax("maximum", x, y)

    def min(self, x, y):
        return self._minmax("minimum", x, y)

    # --- logic ----------------------------------------------------------------------------------
    def _bitwise(self, op: str, x, y):
        dtype = self._same(x, y)
        if dtype.is_float:
            raise NotImplementedError("bitwise logic on floats")
        return self._emit(f"{x.value} {op} {y.value}", dtype)

    def and_(self, x, y):
        return self._bitwise("&", x, y)

    def or_(self, x, y):
        return self._bitwise("|", x, y)

    def not_(self, x):
        if x.dtype.is_float:
            raise NotImplementedError("bitwise not of a float")
        return self._emit(f"~{x.value}", x.dtype)

    def _shift(self, x, y, left: bool):
        dtype = self._same(x, y)
        if not dtype.is_int:
            raise NotImplementedError(f"shifts of {dtype}")
        width = dtype.bitwidth
        zero = self.constant(0, dtype).value
        too_far = f"{y.value} >= {width}" if is_unsigned(dtype) else f"({y.value} >= {width}) | ({y.value} < 0)"
        far = self._emit(too_far, I1)
        amount = self._emit(f"tl.where({far.value}, {zero}, {y.value})", dtype)
        if left:
            return self._emit(f"tl.where({far.value}, {zero}, {x.value} << {amount.value})", dtype)
        if is_unsigned(dtype):
            return self._emit(f"tl.where({far.value}, {zero}, {x.value} >> {amount.value})", dtype)
        fill = f"{x.value} >> {width - 1}"  # 0 or -1
        return self._emit(f"tl.where({far.value}, {fill}, {x.value} >> {amount.value})", dtype)

    def shift_left(self, x, y):
        return self._shift(x, y, True)

    def shift_right(self, x, y):
        return self._shift(x, y, False)

    def cmp(self, predicate, x, y):
        self._same(x, y)
        return self._emit(f"{x.value} {_PREDICATES[predicate]} {y.value}", I1)  # nan: only != holds

    def select(self, condition, a, b):
        dtype = self._same(a, b)
        return self._emit(f"tl.where({condition.value}, {a.value}, {b.value})", dtype)

    def cast(self, x, to):
        src = x.dtype
        if src == to:
            return x
        v = self._tensor(x)
        if to == I1:
            return self._emit(f"{v} != {self.constant(0, src).value}", I1)  # nan -> true
        if to.is_float:
            if src == F64 and to in (F16, BF16):
                v = f"{v}.to(tl.float32)"  # then rounds again, as numpy's f64 -> f32 -> f16/bf16
            if src == F64 and to == F16:  # f64 -> f16 directly: one rounding
                return self._emit(f"{self._tensor(x)}.to(tl.float16).to(tl.float32)", to)
            return self.round(self._emit(f"{v}.to({compute_dtype(to)})", to))
        if src.is_float:
            # truncates; nan (unspecified in the reference) gives 0, narrow types wrap through i32
            wide = compute_dtype(to) if to.bitwidth >= 32 else "tl.int32"
            out = f"tl.where({v} != {v}, 0.0, {v}).to({wide})"
            return self._emit(out if wide == compute_dtype(to) else f"{out}.to({compute_dtype(to)})", to)
        if src == I1:
            return self._emit(f"{v}.to(tl.uint8).to({compute_dtype(to)})", to)
        return self._emit(f"{v}.to({compute_dtype(to)})", to)

    def bitcast(self, x, to):
        if x.dtype == to:
            return x
        if to == I1:
            return self.cast(self.bitcast(x, UI8), I1)
        if x.dtype == I1:
            return self.cast(x, to)  # a bool byte: 0 or 1
        source = self.to_storage(x)
        out = self._emit(f"{source}.to({storage_dtype(to)}, bitcast=True)", to)
        return self._emit(f"{out.value}.to(tl.float32)", to) if to in (F16, BF16) else out

    # --- float math -----------------------------------------------------------------------------
    def _float(self, x, what: str) -> str:
        if not x.dtype.is_float:
            raise NotImplementedError(f"{what} of an integer")
        return self._tensor(x)

    def sqrt(self, x):
        v = self._float(x, "sqrt")
        return self._emit(f"tl.sqrt({v})" if x.dtype == F64 else f"tl.sqrt_rn({v})", x.dtype)

    def floor(self, x):
        return self._emit(f"tl.floor({self._float(x, 'floor')})", x.dtype)

    def ceil(self, x):
        return self._emit(f"tl.ceil({self._float(x, 'ceil')})", x.dtype)

    def exp(self, x):
        return self._emit(f"tl.exp({self._float(x, 'exp')})", x.dtype)

    def log(self, x):
        return self._emit(f"tl.log({self._float(x, 'log')})", x.dtype)

    def sin(self, x):
        return self._emit(f"tl.sin({self._float(x, 'sin')})", x.dtype)

    def cos(self, x):
        return self._emit(f"tl.cos({self._float(x, 'cos')})", x.dtype)

    def erf(self, x):
        return self._emit(f"tl.math.erf({self._float(x, 'erf')})", x.dtype)

    def sigmoid(self, x):
        v = self._float(x, "sigmoid")
        e = self._emit(f"tl.exp(-tl.abs({v}))", x.dtype)
        one = self.constant(1, x).value
        r = self._div_expr(one, f"{one} + {e.value}", x.dtype)
        return self._emit(f"tl.where({v} >= 0, {r.value}, {e.value} * {r.value})", x.dtype)

    def _div_expr(self, a: str, b: str, dtype) -> TValue:
        if dtype == F64:
            return self._emit(f"{a} / ({b})", dtype)
        a = a if a.isidentifier() else f"tl.full([], {a}, tl.float32)"
        return self._emit(f"tl.math.div_rn({a}, {b})", dtype)

    def tanh(self, x):
        v = self._float(x, "tanh")
        a = self._emit(f"tl.abs({v})", x.dtype)
        one, two = self.constant(1, x).value, self.constant(2, x).value
        if x.dtype == F64:
            # tanh = expm1(2x) / (expm1(2x) + 2); expm1 by its series where e^2x - 1 would cancel
            u = self._emit(f"2.0 * {v}", F64)
            series = "0.0"
            for k in range(16, 0, -1):
                series = f"({series} + {1 / math.factorial(k)!r}) * {u.value}" if series != "0.0" else \
                    f"{1 / math.factorial(k)!r} * {u.value}"
            em1 = self._emit(f"tl.where(tl.abs({u.value}) < 0.5, {series}, tl.exp({u.value}) - 1.0)", F64)
            small = self._emit(f"{em1.value} / ({em1.value} + 2.0)", F64)
        else:
            sq = self._emit(f"{v} * {v}", x.dtype)
            poly = repr(TANH_P[-1])
            for c in reversed(TANH_P[:-1]):
                poly = f"({poly}) * {sq.value} + {c!r}"
            small = self._emit(f"{v} + {v} * {sq.value} * ({poly})", x.dtype)
        e = self._emit(f"tl.exp({a.value} * {two})", x.dtype)
        large = self._div_expr(two, f"{e.value} + {one}", x.dtype)
        signed = self._emit(f"tl.where({v} < 0, {large.value} - {one}, {one} - {large.value})", x.dtype)
        return self._emit(f"tl.where({a.value} < 0.625, {small.value}, {signed.value})", x.dtype)

    def erfc(self, x):
        v = self._float(x, "erfc")
        if x.dtype == F64:
            self.helpers.add("lz_erfc_f64")
            return self._emit(f"lz_erfc_f64({v})", x.dtype)
        z = self._emit(f"{v}.to(tl.float64)", F64)
        return self._emit(f"{self._erfc_in_f64(z.value).value}.to(tl.float32)", x.dtype)

    def _erfc_in_f64(self, z: str) -> TValue:
        """erfc to float32 accuracy, computed in float64: 1 - erf(z) below 0.5, else
        t e^(-z^2 + Q(t)), t = 1 / (1 + |z| / 2) (fractional error below 1.2e-7; float64 keeps
        e^-z^2's relative accuracy in the tail)."""
        a = self._emit(f"tl.abs({z})", F64)
        t = self._emit(f"1.0 / (1.0 + 0.5 * {a.value})", F64)
        q = repr(ERFC_Q[-1])
        for c in reversed(ERFC_Q[:-1]):
            q = f"({q}) * {t.value} + {c!r}"
        tail = self._emit(f"{t.value} * tl.exp(-{a.value} * {a.value} + {q})", F64)
        signed = self._emit(f"tl.where({z} < 0, 2.0 - {tail.value}, {tail.value})", F64)
        near = self._emit(f"1.0 - tl.math.erf({z})", F64)
        return self._emit(f"tl.where({a.value} < 0.5, {near.value}, tl.where({z} != {z}, {z}, {signed.value}))", F64)

    def normcdf(self, x):
        v = self._float(x, "normcdf")
        if x.dtype == F64:
            half = self.constant(0.5, x)
            return self.mul(half, self.erfc(self.mul(x, self.constant(-0.7071067811865476, x))))
        # z = -x / sqrt 2 in float64: exact enough that the lower tail keeps its relative accuracy
        z = self._emit(f"{v}.to(tl.float64) * -0.7071067811865476", F64)
        return self._emit(f"(0.5 * {self._erfc_in_f64(z.value).value}).to(tl.float32)", x.dtype)
