"""Vectorizable float32 transcendentals in LLVM IR: exp, log, tanh, sigmoid, erf, erfc, sin, cos.

A call to libm (``expf``, ``erff``) stops LLVM's loop vectorizer.  These functions are
branch-free (selects, never branches) and call only intrinsics that have vector forms (``fma``,
``rint``, ``fabs``, ``copysign``), so a loop that uses them vectorizes.  Each is range reduction,
a polynomial (coefficients from ``tools/fit_scalar_math.py``) and exponent bit tricks, and gives
the IEEE answer for inf, nan, zeros, denormals and large inputs.

Measured against float64 references (``tests/codegen/llvm/test_scalar_math.py`` checks the bounds
on every cross-target CPU and on AArch64 under qemu):

    exp <= 1 ulp, log <= 1 ulp, tanh <= 2 ulp, sigmoid <= 3 ulp, erf <= 3 ulp,
    erfc <= 8 ulp (relative, to the underflow threshold), sin/cos <= 1 ulp for every finite input

and over (nearly) every float32 (a sweep of the bit patterns, both signs, against numpy/scipy in
float64): exp 0.98 ulp (every 4th float of [-110, 110]), tanh 1.34 (every other float of
[-20, 20]), sigmoid 2.40 (every 16th of [-200, 200]), erf 2.29 (every 16th of [-5, 5]; 1.83 above 1).

Every exp rounds x / ln2 by adding 1.5 * 2^23 and makes 2^n straight from that sum's bits (no
float -> int conversion, so a nan makes no poison and stays nan).  The functions whose argument is
bounded (tanh's e^2|x| up to e^19, sigmoid's e^-|x|, erf's tail, normcdf) use ``exp_scaled_f32``,
which needs no clamps; ``exp_f32`` clamps x and picks the exponent bias by x's sign.

sin and cos reduce their argument exactly (a table of 2/pi per exponent, Payne-Hanek style, in
float64), so ``sin(1e30)`` is right; they evaluate in float64 and round once.
"""
from __future__ import annotations

import functools
import math

import llvmlite.ir as ir
import mpmath

from lezero.codegen.llvm.ir_types import DOUBLE, FLOAT, I32, I64
from lezero.codegen.polynomials import (
    COS_P,
    ERF_P,
    ERFC_CENTER,
    ERFC_G,
    ERFC_MID,
    ERFC_Q,
    ERF_TAIL,
    EXP_P,
    EXP_SHORT_P,
    LOG_P,
    SIN_P,
    TANH_SHORT_P,
)

LOG2E = 1.4426950408889634
LN2_HI, LN2_LO = 0.693359375, -2.12194440e-4  # ln 2 = HI + LO, HI with few bits (Cephes' split)
EXP_MAX, EXP_MIN = 88.8, -104.0  # past these exp is inf or 0 in float32
TANH_SMALL = 0.6  # tanh's polynomial below, its exp form above
ROUND_SHIFT = 12582912.0  # 1.5 * 2^23: (v + ROUND_SHIFT) - ROUND_SHIFT is v rounded to an integer (|v| < 2^22)


class MathBuilder:
    """An ``ir.IRBuilder`` plus the intrinsics the approximations use, declared on first use."""

    def __init__(self, builder: ir.IRBuilder):
        self.b = builder

    @property
    def module(self) -> ir.Module:
        return self.b.module

    def intrinsic(self, name: str, return_type, args):
        """Call the function ``name`` (an intrinsic or a libm symbol), declaring it once."""
        fn = self.module.globals.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(return_type, [a.type for a in args]), name)
        return self.b.call(fn, args)

    def unary_intrinsic(self, base: str, x):
        return self.intrinsic(f"llvm.{base}.{_suffix(x.type)}", x.type, [x])

    def fma(self, a, b, c):
        return self.intrinsic(f"llvm.fma.{_suffix(a.type)}", a.type, [a, b, c])

    def fabs(self, x):
        return self.unary_intrinsic("fabs", x)

    def rint(self, x):
        return self.unary_intrinsic("rint", x)

    def floor(self, x):
        return self.unary_intrinsic("floor", x)

    def copysign(self, magnitude, sign):
        return self.intrinsic(f"llvm.copysign.{_suffix(magnitude.type)}", magnitude.type, [magnitude, sign])

    def poly(self, x, coefs):
        """Horner's rule with fma; ``coefs`` lowest degree first."""
        acc = ir.Constant(x.type, coefs[-1])
        for c in reversed(coefs[:-1]):
            acc = self.fma(acc, x, ir.Constant(x.type, c))
        return acc

    def select(self, condition, a, b):
        return self.b.select(condition, a, b)

    def lt(self, x, c):
        return self.b.fcmp_ordered("<", x, _const(x, c))

    def gt(self, x, c):
        return self.b.fcmp_ordered(">", x, _const(x, c))

    def is_nan(self, x):
        return self.b.fcmp_unordered("uno", x, x)


def _suffix(t) -> str:
    return {FLOAT: "f32", DOUBLE: "f64"}[t]


def _const(x, value):
    return value if isinstance(value, ir.Value) else ir.Constant(x.type, value)


def _f32(v) -> ir.Constant:
    return ir.Constant(FLOAT, v)


def _i32(v) -> ir.Constant:
    return ir.Constant(I32, v)


# --- exp, log ---------------------------------------------------------------------------------

def _exp_reduced(m: MathBuilder, x, x_lo=None, fused: bool = True, coefs=EXP_P):
    """x = n ln2 + r (two-part ln2, |r| <= ln2 / 2): ``(shifted, e^r - 1)``, where shifted is
    x / ln2 + ROUND_SHIFT rounded, whose low bits hold n (no float -> int conversion: a nan makes
    no poison).  ``x_lo``: the argument is ``x + x_lo``, a float32 pair, for arguments that carry
    more precision than one float.  ``fused``: x / ln2 + ROUND_SHIFT in one fma."""
    b = m.b
    if fused:
        shifted = m.fma(x, _f32(LOG2E), _f32(ROUND_SHIFT))
    else:
        shifted = b.fadd(b.fmul(x, _f32(LOG2E)), _f32(ROUND_SHIFT))
    n = b.fsub(shifted, _f32(ROUND_SHIFT))
    r = m.fma(n, _f32(-LN2_HI), x)
    r = m.fma(n, _f32(-LN2_LO), r)
    if x_lo is not None:
        r = b.fadd(r, x_lo)
    return shifted, m.fma(b.fmul(r, r), m.poly(r, coefs), r)


def _times_pow2(m: MathBuilder, shifted, p, exponent_field, fused: bool = True):
    """2^(n + bias) e^r from ``_exp_reduced``'s pair, ``exponent_field`` = (127 + bias) << 23 (an i32
    constant or vector): n's bits are the low bits of shifted's, and a shift by 23 keeps them alone
    in the exponent field; one rounding (the power of two is exact), in the fma where ``fused``."""
    b = m.b
    scale = b.bitcast(b.add(b.shl(b.bitcast(shifted, I32), _i32(23)), exponent_field), FLOAT)
    return m.fma(scale, p, scale) if fused else b.fmul(scale, b.fadd(p, _f32(1.0)))


def exp_f32(m: MathBuilder, x, x_lo=None):
    """e^x for every x: 2^(n + bias) e^r times 2^-bias, bias 64 below 0 (results down in the
    denormals, n >= -150, are right: 2^-24 relative before their own rounding) and -1 above
    (n = 128 at the overflow threshold); a nan stays nan (the arithmetic keeps it, whatever n's
    bits make of the scale).  Below EXP_MIN the lane computes e^0 and gives 0: a product that
    underflows is a microcode assist on Intel CPUs (exp of a masked score, -3.4e38, cost 7x)."""
    b = m.b
    xc = m.select(m.gt(x, EXP_MAX), _f32(EXP_MAX), x)
    zero = m.lt(xc, EXP_MIN)
    xc = m.select(zero, _f32(0.0), xc)
    negative = m.lt(xc, 0.0)
    # no fmas beyond the polynomial's: on CPUs without FMA, where each is a libcall per lane, two
    # more tip LLVM's cost model against vectorizing softmax's sum (its longer chains lose ulps)
    field = b.select(negative, _i32((127 + 64) << 23), _i32((127 - 1) << 23))
    y = _times_pow2(m, *_exp_reduced(m, xc, x_lo, fused=False), field, fused=False)
    return m.select(zero, _f32(0.0), b.fmul(y, b.select(negative, _f32(2.0 ** -64), _f32(2.0))))


def exp_scaled_f32(m: MathBuilder, x, bias: int = 0, x_lo=None, coefs=EXP_P):
    """e^x for x where e^x * 2^bias is a normal float (x in [-87.3, 88.7] + bias ln2, which the
    caller guarantees): (2^(n + bias) e^r) * 2^-bias, a denormal e^x right as in ``exp_f32``, a nan
    kept; no clamps or sign-dependent bias, as ``exp_f32`` needs for every x."""
    y = _times_pow2(m, *_exp_reduced(m, x, x_lo, coefs=coefs), _i32((127 + bias) << 23))
    return m.b.fmul(y, _f32(2.0 ** -bias)) if bias else y


def log_f32(m: MathBuilder, x):
    """ln x: x = 2^e * (1 + f) with 1 + f in [sqrt(1/2), sqrt(2)), ln(1 + f) by a polynomial."""
    b = m.b
    tiny = m.lt(x, 1.1754943508222875e-38)  # denormal (or <= 0: fixed below): scale up first
    xs = m.select(tiny, b.fmul(x, _f32(8388608.0)), x)
    bits = b.bitcast(xs, I32)
    e = b.sub(b.lshr(bits, _i32(23)), b.select(tiny, _i32(127 + 23), _i32(127)))
    mantissa = b.and_(bits, _i32(0x7FFFFF))
    above = b.icmp_unsigned(">", mantissa, _i32(0x3504F3))  # 1.mantissa > sqrt 2: halve it
    f = b.fsub(b.bitcast(b.or_(mantissa, b.select(above, _i32(0x3F000000), _i32(0x3F800000))), FLOAT),
               _f32(1.0))
    ef = b.sitofp(b.add(e, b.zext(above, I32)), FLOAT)
    z = b.fmul(f, f)
    y = m.fma(b.fmul(f, z), m.poly(f, LOG_P), b.fmul(ef, _f32(LN2_LO)))
    y = m.fma(z, _f32(-0.5), y)
    r = m.fma(ef, _f32(LN2_HI), b.fadd(f, y))
    r = m.select(b.fcmp_ordered("==", x, _f32(math.inf)), _f32(math.inf), r)
    r = m.select(b.fcmp_ordered("==", x, _f32(0.0)), _f32(-math.inf), r)
    return m.select(b.fcmp_unordered("<", x, _f32(0.0)), _f32(math.nan), r)  # x < 0 or nan


# --- tanh, sigmoid -------------------------------------------------------------------------------

def tanh_f32(m: MathBuilder, x):
    """A polynomial below TANH_SMALL, ``1 - 2 / (e^2|x| + 1)`` above, |x| clamped to 9.5 there (tanh
    rounds to 1 beyond; e^19 needs no overflow or nan handling: ``exp_scaled_f32``, with the shorter
    polynomial: the quotient damps e's error by 2/3 or more)."""
    b = m.b
    a = m.fabs(x)
    a2 = b.fmul(a, a)
    small = m.fma(b.fmul(a, a2), m.poly(a2, TANH_SHORT_P), a)
    e = exp_scaled_f32(m, b.fmul(m.select(m.gt(a, 9.5), _f32(9.5), a), _f32(2.0)), coefs=EXP_SHORT_P)  # (nan stays)
    large = b.fsub(_f32(1.0), b.fdiv(_f32(2.0), b.fadd(e, _f32(1.0))))
    return m.copysign(m.select(m.lt(a, TANH_SMALL), small, large), x)  # (tanh(-0) = -0)


def sigmoid_f32(m: MathBuilder, x):
    """``1 / (1 + e)`` for x >= 0, ``e / (1 + e)`` below (one division either way), e = e^-|x|
    with -|x| clamped to -104 (e^-104 rounds to 0; results down to the denormals are right)."""
    b = m.b
    minus_a = b.fneg(m.fabs(x))
    e = exp_scaled_f32(m, m.select(m.lt(minus_a, -104.0), _f32(-104.0), minus_a), bias=64)
    numerator = m.select(b.fcmp_ordered(">=", x, _f32(0.0)), _f32(1.0), e)
    return b.fdiv(numerator, b.fadd(_f32(1.0), e))


# --- erf, erfc -----------------------------------------------------------------------------------

def _erf_parts(m: MathBuilder, x, x_lo=None):
    """|x|, erf(|x|) for |x| < 1 and erfc(|x|) for |x| >= 1.  ``x_lo``: the argument is
    ``x + x_lo`` (a float32 pair), which the tail's e^-x^2 honours: its relative error is about
    2 x^2 times the argument's, so a rounded argument would cost ulps there."""
    b = m.b
    a = m.fabs(x)
    small = b.fmul(a, m.poly(b.fmul(a, a), ERF_P))
    beyond = m.gt(a, 10.5)
    at = m.select(beyond, _f32(10.5), a)  # erfc is 0 beyond; keeps inf out of the fma
    z = b.fmul(at, at)
    z_lo = m.fma(at, at, b.fneg(z))  # at^2 = z + z_lo exactly
    if x_lo is not None:  # (at + a_lo)^2 ~ at^2 + 2 at a_lo, a_lo = x_lo with the sign that makes at = |x|
        a_lo = m.select(beyond, _f32(0.0), m.copysign(m.fabs(x_lo), b.fmul(x, x_lo)))
        z_lo = m.fma(b.fmul(at, _f32(2.0)), a_lo, z_lo)
    ez = exp_f32(m, b.fneg(z))
    ez = m.fma(b.fneg(ez), z_lo, ez)  # e^-(z + z_lo) ~ e^-z (1 - z_lo)
    u = b.fsub(b.fdiv(_f32(1.0), at), _f32(ERFC_CENTER))
    tail = b.fmul(ez, m.poly(u, ERFC_G))
    return a, small, tail


def erf_f32(m: MathBuilder, x):
    """A polynomial below 1, ``1 - e^P(|x| - 2.5)`` up to 4 (P ~ ln erfc, ERF_TAIL; |x| clamped to
    4 there, where erf rounds to 1), with the sign of x."""
    b = m.b
    a = m.fabs(x)
    small = b.fmul(a, m.poly(b.fmul(a, a), ERF_P))
    at = m.select(m.gt(a, 4.0), _f32(4.0), a)
    tail = exp_scaled_f32(m, m.poly(b.fsub(at, _f32(2.5)), ERF_TAIL), coefs=EXP_SHORT_P)  # (1 - tail damps it)
    return m.copysign(m.select(m.lt(a, 1.0), small, b.fsub(_f32(1.0), tail)), x)


def erfc_f32(m: MathBuilder, x, x_lo=None):
    b = m.b
    a, small, tail = _erf_parts(m, x, x_lo)
    inside = m.lt(a, 1.0)
    mid = m.poly(b.fsub(a, _f32(0.75)), ERFC_MID)
    positive = m.select(m.lt(a, 0.5), b.fsub(_f32(1.0), small), m.select(inside, mid, tail))
    negative = m.select(inside, b.fadd(_f32(1.0), small), b.fsub(_f32(2.0), tail))
    return m.select(m.lt(x, 0.0), negative, positive)


SQRT_HALF_HI = 0.7071067690849304  # float32(sqrt(1/2)); SQRT_HALF_LO the rest
SQRT_HALF_LO = 0.7071067811865476 - 0.7071067690849304


def normcdf_f32(m: MathBuilder, x):
    """Phi(x) = erfc(z) / 2, z = -x / sqrt 2, by the one-formula erfc (ERFC_Q), with z and the
    exponent -z^2 + Q(t) carried as float32 pairs: e^-z^2 magnifies an argument's rounding by
    2 z^2, which would cost the lower tail (gelu of negative x) its relative accuracy."""
    b = m.b
    z = b.fmul(x, _f32(-SQRT_HALF_HI))
    z_lo = m.fma(x, _f32(-SQRT_HALF_HI), b.fneg(z))
    z_lo = m.fma(x, _f32(-SQRT_HALF_LO), z_lo)
    a = m.fabs(z)
    beyond = m.gt(a, 10.5)  # erfc is 0 beyond: clamp, and keep inf and nan out of the arithmetic
    at = m.select(b.or_(beyond, m.is_nan(x)), _f32(10.5), a)
    a_lo = m.select(beyond, _f32(0.0), m.select(m.lt(z, 0.0), b.fneg(z_lo), z_lo))  # |z + z_lo| = at + a_lo
    t = b.fdiv(_f32(1.0), m.fma(at, _f32(0.5), _f32(1.0)))
    q = m.poly(t, ERFC_Q)
    square = b.fmul(at, at)
    square_lo = m.fma(b.fmul(at, _f32(2.0)), a_lo, m.fma(at, at, b.fneg(square)))  # (at + a_lo)^2 - square
    # q - square as hi + lo exactly (TwoSum), then the exponent's low part
    hi = b.fsub(q, square)
    q_part = b.fsub(hi, b.fneg(square))
    lo = b.fadd(b.fsub(q, q_part), b.fsub(b.fneg(square), b.fsub(hi, q_part)))
    # erfc(|z|); the exponent is in [-112, 0]: e^-112 * 2^64 is normal
    erfc = b.fmul(t, exp_scaled_f32(m, hi, bias=64, x_lo=b.fsub(lo, square_lo)))
    phi = b.fmul(m.select(m.lt(z, 0.0), b.fsub(_f32(2.0), erfc), erfc), _f32(0.5))
    return m.select(m.is_nan(x), x, phi)


# --- sin, cos ------------------------------------------------------------------------------------

@functools.cache
def _two_over_pi_table() -> tuple[list, list, list]:
    """For each float32 biased exponent E, c = (2/pi * 2^(max(E,1) - 150)) mod 4 as C1 + C2 + C3:
    C1 and C2 have at most 29 significant bits (a 24-bit mantissa times them is exact in
    float64), C1 a multiple of 2^-27, C2 of 2^-56, C3 the float64 rest."""
    bits = 480
    with mpmath.workdps(160):
        fixed = int(mpmath.floor(2 / mpmath.pi * mpmath.mpf(2) ** bits))  # 2/pi * 2^bits
    c1, c2, c3 = [], [], []
    for e in range(256):
        k = max(e, 1) - 150
        c = (fixed << k if k >= 0 else fixed >> -k) % (4 << bits)  # c * 2^bits
        hi = c >> (bits - 27)
        rest = c - (hi << (bits - 27))
        mid = rest >> (bits - 56)
        low = rest - (mid << (bits - 56))
        c1.append(hi / 2 ** 27)
        c2.append(mid / 2 ** 56)
        c3.append(low / (1 << bits))  # int / int rounds correctly, however small
    return c1, c2, c3


def _table(m: MathBuilder, name: str, values) -> ir.GlobalVariable:
    table = m.module.globals.get(name)
    if table is None:
        array_type = ir.ArrayType(DOUBLE, len(values))
        table = ir.GlobalVariable(m.module, array_type, name)
        table.global_constant = True
        table.linkage = "internal"
        table.initializer = ir.Constant(array_type, [ir.Constant(DOUBLE, v) for v in values])
    return table


def _reduce_half_pi(m: MathBuilder, x):
    """|x| = (4k + q) pi/2 + r exactly (|r| <= pi/4): r as a float64, q an i32 in 0..3."""
    b = m.b
    bits = b.bitcast(x, I32)
    exponent = b.and_(b.lshr(bits, _i32(23)), _i32(0xFF))
    mantissa = b.and_(bits, _i32(0x7FFFFF))
    normal = b.icmp_unsigned("!=", exponent, _i32(0))
    mantissa = b.select(normal, b.or_(mantissa, _i32(0x800000)), mantissa)
    md = b.uitofp(mantissa, DOUBLE)  # |x| = md * 2^(max(E,1) - 150)
    index = b.zext(exponent, I64)
    parts = []
    for name, values in zip(("c1", "c2", "c3"), _two_over_pi_table()):
        table = _table(m, f"lz_two_over_pi_{name}", values)
        address = b.gep(table, [ir.Constant(I64, 0), index], inbounds=True, source_etype=table.value_type)
        parts.append(b.load(address, typ=DOUBLE))
    h = b.fmul(md, parts[0])  # exact
    p1 = b.fsub(h, b.fmul(m.floor(b.fmul(h, ir.Constant(DOUBLE, 0.25))), ir.Constant(DOUBLE, 4.0)))  # exact, in [0, 4)
    p2 = b.fmul(md, parts[1])  # exact
    p3 = b.fmul(md, parts[2])
    n = m.rint(b.fadd(p1, p2))
    f = b.fadd(b.fadd(b.fsub(p1, n), p2), p3)
    r = b.fmul(f, ir.Constant(DOUBLE, math.pi / 2))
    q = b.and_(b.fptosi(n, I32), _i32(3))
    return r, q


def _sin_cos_kernels(m: MathBuilder, r):
    b = m.b
    z = b.fmul(r, r)
    sin_r = m.fma(b.fmul(r, z), m.poly(z, SIN_P), r)
    cos_r = b.fadd(m.fma(b.fmul(z, z), m.poly(z, COS_P), b.fmul(z, ir.Constant(DOUBLE, -0.5))), ir.Constant(DOUBLE, 1.0))
    return sin_r, cos_r


def _quadrant(m: MathBuilder, q, values):
    """values[q] for q in 0..3, by selects."""
    b = m.b
    low = b.icmp_unsigned("==", b.and_(q, _i32(1)), _i32(0))
    high = b.icmp_unsigned("==", b.and_(q, _i32(2)), _i32(0))
    return b.select(high, b.select(low, values[0], values[1]), b.select(low, values[2], values[3]))


def _finish_trig(m: MathBuilder, x, y64):
    """Round to float32; nan for inf and nan inputs."""
    b = m.b
    y = b.fptrunc(y64, FLOAT)
    return m.select(m.gt(m.fabs(x), 3.4028234663852886e38), b.fsub(x, x), m.select(m.is_nan(x), x, y))


def sin_f32(m: MathBuilder, x):
    b = m.b
    r, q = _reduce_half_pi(m, x)
    s, c = _sin_cos_kernels(m, r)
    y = _quadrant(m, q, [s, c, b.fneg(s), b.fneg(c)])
    y = _finish_trig(m, x, y)
    sign = b.and_(b.bitcast(x, I32), _i32(-0x80000000))  # sin is odd: the sign of x, bit for bit
    return b.bitcast(b.xor(b.bitcast(y, I32), sign), FLOAT)


def cos_f32(m: MathBuilder, x):
    b = m.b
    r, q = _reduce_half_pi(m, x)
    s, c = _sin_cos_kernels(m, r)
    return _finish_trig(m, x, _quadrant(m, q, [c, b.fneg(s), b.fneg(c), s]))
