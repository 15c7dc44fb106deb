"""Elementwise ops: unary math, cast, gelu, broadcasting binary ops, cmp and select.

The unary and binary ops are tables: a family class says what the family shares (operands,
traits, type rules) and each op is one ``unary(...)``/``binary(...)`` entry giving its name, its
numpy reference, the element types it accepts, its ``scalar`` lowering (one element of the
result through a ``ScalarBuilder``, ``lezero/ir/scalar.py``) and its ``grad`` rule (IR through a
``GradBuilder``, ``lezero/ir/gradient.py``).  Adding an op is one entry.

Gradients follow PyTorch's formulas (``derivatives.yaml``), written with the result ``y`` where
PyTorch does: ``relu`` passes the gradient where ``y > 0`` (so 0 at 0), ``abs`` uses ``sign(x)``
(0 at 0), ``max``/``min`` split the gradient evenly between equal operands, ``pow`` gives 0 where
the exponent is 0 (to the base) and where the base is 0 and the exponent >= 0 (to the exponent).

Integer semantics follow C, not numpy: ``div`` truncates toward zero (``-7 / 2 == -3``; ``x / 0 ==
0``), arithmetic wraps on overflow.  Floats follow IEEE (``1 / 0 == inf``, nan propagates).
"""
from __future__ import annotations

import math

import numpy as np

from lezero.ir.dialect.broadcasting import broadcast_shapes
from lezero.ir.dialect.constraints import (ANY, BOOL, FLOAT, INTEGER, LOGICAL, NUMERIC, Domain, check_element_type,
                                           same_element_type)
from lezero.ir.dialect.numerics import to_storage
from lezero.ir.gradient import no_gradient
from lezero.ir.opdef import COMMUTATIVE, ELEMENTWISE, PURE, AttrSpec, OpDef, OpError, register
from lezero.ir.types import I1, TensorType


def _class_name(op_name: str) -> str:
    return "".join(part.capitalize() for part in op_name.split("_")) + "Op"


def _static_facets(facets: dict) -> dict:
    """Facets as class attributes; functions (lowering or gradient lambdas) as static methods."""
    return {k: staticmethod(v) if callable(v) else v for k, v in facets.items()}


# --- unary ---------------------------------------------------------------------------------------

class UnaryOp(OpDef):
    """``y = fn(x)`` elementwise; the result has the operand's type."""

    operands = ("x",)
    traits = frozenset({PURE, ELEMENTWISE})
    domain: Domain = FLOAT
    fn = None  # numpy reference, set per op
    scalar = None  # lowering facet: scalar(s, x) through a ScalarBuilder (lezero/ir/scalar.py)

    def infer(self, operand_types, attrs):
        (x,) = operand_types
        check_element_type(x, self.domain)
        return [x]

    def reference(self, attrs, x):
        return self.fn(x)

    def lower_scalar(self, s, attrs, *operands):
        """One element of the result from one element of each operand (the lowering of every
        elementwise op; ops with attributes override it)."""
        if self.scalar is None:
            raise NotImplementedError(f"{self.name} has no scalar lowering")
        return self.scalar(s, *operands)


UNARY_OPS: dict[str, type] = {}


def unary(name: str, fn, domain: Domain, summary: str, **facets) -> type:
    """Define and register ``lz.<name>``, a ``UnaryOp`` computing ``fn`` on ``domain``'s types;
    ``facets`` become class attributes (how later layers add a gradient rule or a lowering)."""
    cls = type(_class_name(name), (UnaryOp,), {
        "name": "lz." + name, "fn": staticmethod(fn), "domain": domain, "summary": summary,
        "__doc__": summary, "__module__": __name__, **_static_facets(facets)})
    register(cls)
    UNARY_OPS[cls.name] = cls
    return cls


def _rsqrt(x):
    return np.reciprocal(np.sqrt(x))


def _sigmoid(x):
    # exp of -|x| never overflows: 1/(1+e) for x >= 0, e/(1+e) below
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


def _relu(x):
    return np.maximum(x, np.zeros((), x.dtype))  # nan stays nan, as in torch


_erf_objects = np.frompyfunc(math.erf, 1, 1)


def _erf_f64(x) -> np.ndarray:
    # math.erf is exact to double precision; numpy has no erf and scipy is not a dependency
    return np.asarray(_erf_objects(np.asarray(x, np.float64)), np.float64)


def _erf(x):
    return _erf_f64(x).astype(x.dtype)


def _one_over(s, x):
    return s.div(s.constant(1, x), x)


def _sign(s, x):
    zero, one = s.constant(0, x), s.constant(1, x)
    minus_one = s.constant(-1, x)  # never chosen for unsigned types
    return s.select(s.cmp("gt", x, zero), one, s.select(s.cmp("lt", x, zero), minus_one, x))  # 0 and nan stay


# Gradient rules: grad(b, op, attrs, dy) with b a GradBuilder, op the forward op, dy the cotangent.
def _x(op):
    return op.operands[0]


def _y(op):
    return op.result


def _erf_grad(b, op, attrs, dy):
    x = _x(op)
    return [b.mul(dy, b.mul(2 / math.sqrt(math.pi), b.op("lz.exp", b.neg(b.mul(x, x)))))]


#    name          numpy reference   accepts   summary               scalar lowering (s: a ScalarBuilder)
unary("neg",        np.negative,     NUMERIC,  "-x",                  scalar=lambda s, x: s.neg(x),
      grad=lambda b, op, attrs, dy: [b.neg(dy)])
unary("abs",        np.abs,          NUMERIC,  "|x|",                 scalar=lambda s, x: s.abs(x),
      grad=lambda b, op, attrs, dy: [b.mul(dy, b.op("lz.sign", _x(op)))])
unary("exp",        np.exp,          FLOAT,    "e^x",                 scalar=lambda s, x: s.exp(x),
      grad=lambda b, op, attrs, dy: [b.mul(dy, _y(op))])
unary("log",        np.log,          FLOAT,    "natural logarithm",   scalar=lambda s, x: s.log(x),
      grad=lambda b, op, attrs, dy: [b.div(dy, _x(op))])
unary("sqrt",       np.sqrt,         FLOAT,    "square root",         scalar=lambda s, x: s.sqrt(x),
      grad=lambda b, op, attrs, dy: [b.div(dy, b.mul(2, _y(op)))])
unary("rsqrt",      _rsqrt,          FLOAT,    "1 / sqrt(x)",         scalar=lambda s, x: _one_over(s, s.sqrt(x)),
      grad=lambda b, op, attrs, dy: [b.mul(b.mul(-0.5, dy), b.mul(b.mul(_y(op), _y(op)), _y(op)))])
unary("tanh",       np.tanh,         FLOAT,    "hyperbolic tangent",  scalar=lambda s, x: s.tanh(x),
      grad=lambda b, op, attrs, dy: [b.mul(dy, b.sub(1, b.mul(_y(op), _y(op))))])
unary("sigmoid",    _sigmoid,        FLOAT,    "1 / (1 + e^-x)",      scalar=lambda s, x: s.sigmoid(x),
      grad=lambda b, op, attrs, dy: [b.mul(dy, b.mul(_y(op), b.sub(1, _y(op))))])
unary("relu",       _relu,           NUMERIC,  "max(x, 0)",           scalar=lambda s, x: s.max(x, s.constant(0, x)),
      grad=lambda b, op, attrs, dy: [b.where_else_zero(b.cmp("gt", _y(op), 0), dy)])
unary("erf",        _erf,            FLOAT,    "the error function",  scalar=lambda s, x: s.erf(x),
      grad=_erf_grad)
unary("sin",        np.sin,          FLOAT,    "sine",                scalar=lambda s, x: s.sin(x),
      grad=lambda b, op, attrs, dy: [b.mul(dy, b.op("lz.cos", _x(op)))])
unary("cos",        np.cos,          FLOAT,    "cosine",              scalar=lambda s, x: s.cos(x),
      grad=lambda b, op, attrs, dy: [b.mul(dy, b.neg(b.op("lz.sin", _x(op))))])
unary("floor",      np.floor,        FLOAT,    "round toward -inf",   scalar=lambda s, x: s.floor(x),
      grad=no_gradient)
unary("ceil",       np.ceil,         FLOAT,    "round toward +inf",   scalar=lambda s, x: s.ceil(x),
      grad=no_gradient)
unary("sign",       np.sign,         NUMERIC,  "-1, 0 or 1 (nan for nan)", scalar=_sign,
      grad=no_gradient)
unary("reciprocal", np.reciprocal,   FLOAT,    "1 / x",               scalar=_one_over,
      grad=lambda b, op, attrs, dy: [b.mul(dy, b.neg(b.mul(_y(op), _y(op))))])
unary("not",        np.invert,       LOGICAL,  "logical not of i1, bitwise not of integers",
      scalar=lambda s, x: s.not_(x), grad=no_gradient)


# Inverse and hyperbolic trigonometry and rounding, written with the primitives (no backend
# needs new math): atan is Cephes' rational approximation after range reduction (accurate to
# float64), asin and acos go through it, sinh uses a Taylor polynomial near 0 (no cancellation).
_ATAN_P = (-8.750608600031904122785e-1, -1.615753718733365076637e1, -7.500855792314704667340e1,
           -1.228866684490136173410e2, -6.485021904942025371773e1)
_ATAN_Q = (2.485846490142306297962e1, 1.650270098316988542046e2, 4.328810604912902668951e2,
           4.853903996359136964868e2, 1.945506571482613964425e2)
_PIO2_LOW = 6.123233995736765886130e-17  # pi/2 - float64(pi/2)


def _polynomial(s, x, coefficients, leading_one=False):
    acc = s.constant(1 if leading_one else coefficients[0], x)
    for c in coefficients if leading_one else coefficients[1:]:
        acc = s.add(s.mul(acc, x), s.constant(c, x))
    return acc


def _atan(s, x):
    a = s.abs(x)
    c = lambda v: s.constant(v, x)  # noqa: E731
    big = s.cmp("gt", a, c(2.414213562373095))  # tan(3 pi / 8): atan(a) = pi/2 - atan(1/a)
    mid = s.cmp("gt", a, c(0.66))               # atan(a) = pi/4 + atan((a - 1) / (a + 1))
    z = s.select(big, s.neg(s.div(c(1), a)), s.select(mid, s.div(s.sub(a, c(1)), s.add(a, c(1))), a))
    base = s.select(big, c(math.pi / 2), s.select(mid, c(math.pi / 4), c(0)))
    low = s.select(big, c(_PIO2_LOW), s.select(mid, c(0.5 * _PIO2_LOW), c(0)))
    zz = s.mul(z, z)
    r = s.add(s.mul(z, s.div(s.mul(zz, _polynomial(s, zz, _ATAN_P)), _polynomial(s, zz, _ATAN_Q, True))), z)
    y = s.add(base, s.add(r, low))
    return s.select(s.cmp("lt", x, c(0)), s.neg(y), y)


def _asin(s, x):
    one = s.constant(1, x)
    return _atan(s, s.div(x, s.sqrt(s.mul(s.sub(one, x), s.add(one, x)))))  # +-1 -> +-inf -> +-pi/2


def _acos(s, x):
    one = s.constant(1, x)
    return s.mul(s.constant(2, x), _atan(s, s.sqrt(s.div(s.sub(one, x), s.add(one, x)))))


def _sinh(s, x):
    e = s.exp(x)
    wide = s.mul(s.constant(0.5, x), s.sub(e, s.div(s.constant(1, x), e)))
    xx = s.mul(x, x)
    taylor = s.mul(x, _polynomial(s, xx, [1 / math.factorial(k) for k in range(13, 2, -2)] + [1]))
    return s.select(s.cmp("lt", s.abs(x), s.constant(0.5, x)), taylor, wide)


def _cosh(s, x):
    e = s.exp(x)
    return s.mul(s.constant(0.5, x), s.add(e, s.div(s.constant(1, x), e)))


def _log_of_large(s, a, small):
    """``log(a + sqrt(a^2 +- 1))`` for ``a >= 1`` given ``small`` (that value where it is safe);
    ``log(a) + log(2)`` where a^2 would overflow."""
    huge = s.cmp("gt", a, s.constant(1e8, a))
    return s.select(huge, s.add(s.log(a), s.constant(math.log(2), a)), small)


def _log1p(s, u):
    """``log(1 + u)`` accurate for small ``u`` (Goldberg: ``log(w) * u / (w - 1)`` with ``w = 1 + u``)."""
    w = s.add(s.constant(1, u), u)
    exact = s.cmp("eq", w, s.constant(1, u))
    large = s.cmp("gt", u, s.constant(1e6, u))  # the correction is 1 there (and nan for u = inf)
    log_w = s.log(w)
    return s.select(exact, u, s.select(large, log_w, s.mul(log_w, s.div(u, s.sub(w, s.constant(1, u))))))


def _asinh(s, x):
    a = s.abs(x)
    one = s.constant(1, x)
    aa = s.mul(a, a)
    # log(a + sqrt(a^2 + 1)) = log1p(a + a^2 / (1 + sqrt(a^2 + 1)))
    y = _log_of_large(s, a, _log1p(s, s.add(a, s.div(aa, s.add(one, s.sqrt(s.add(aa, one)))))))
    return s.select(s.cmp("lt", x, s.constant(0, x)), s.neg(y), y)


def _acosh(s, x):
    y = _log_of_large(s, x, s.log(s.add(x, s.sqrt(s.sub(s.mul(x, x), s.constant(1, x))))))
    return s.select(s.cmp("lt", x, s.constant(1, x)), s.constant(math.nan, x), y)  # also x^2 = inf for x << 0


def _atanh(s, x):
    one = s.constant(1, x)
    return s.mul(s.constant(0.5, x), _log1p(s, s.div(s.mul(s.constant(2, x), x), s.sub(one, x))))


unary("tan",   np.tan,     FLOAT, "tangent",                   scalar=lambda s, x: s.div(s.sin(x), s.cos(x)),
      grad=lambda b, op, attrs, dy: [b.mul(dy, b.add(1, b.mul(_y(op), _y(op))))])
unary("atan",  np.arctan,  FLOAT, "inverse tangent",           scalar=_atan,
      grad=lambda b, op, attrs, dy: [b.div(dy, b.add(1, b.mul(_x(op), _x(op))))])
unary("asin",  np.arcsin,  FLOAT, "inverse sine",              scalar=_asin,
      grad=lambda b, op, attrs, dy: [b.mul(dy, b.op("lz.rsqrt", b.sub(1, b.mul(_x(op), _x(op)))))])
unary("acos",  np.arccos,  FLOAT, "inverse cosine",            scalar=_acos,
      grad=lambda b, op, attrs, dy: [b.neg(b.mul(dy, b.op("lz.rsqrt", b.sub(1, b.mul(_x(op), _x(op))))))])
unary("sinh",  np.sinh,    FLOAT, "hyperbolic sine",           scalar=_sinh,
      grad=lambda b, op, attrs, dy: [b.mul(dy, b.op("lz.cosh", _x(op)))])
unary("cosh",  np.cosh,    FLOAT, "hyperbolic cosine",         scalar=_cosh,
      grad=lambda b, op, attrs, dy: [b.mul(dy, b.op("lz.sinh", _x(op)))])
unary("asinh", np.arcsinh, FLOAT, "inverse hyperbolic sine",   scalar=_asinh,
      grad=lambda b, op, attrs, dy: [b.mul(dy, b.op("lz.rsqrt", b.add(b.mul(_x(op), _x(op)), 1)))])
unary("acosh", np.arccosh, FLOAT, "inverse hyperbolic cosine", scalar=_acosh,
      grad=lambda b, op, attrs, dy: [b.mul(dy, b.op("lz.rsqrt", b.sub(b.mul(_x(op), _x(op)), 1)))])
unary("atanh", np.arctanh, FLOAT, "inverse hyperbolic tangent", scalar=_atanh,
      grad=lambda b, op, attrs, dy: [b.div(dy, b.sub(1, b.mul(_x(op), _x(op))))])
unary("round", np.round,   FLOAT, "round to nearest, ties to even", scalar=lambda s, x: s.round_half_even(x),
      grad=no_gradient)


@register
class CastOp(UnaryOp):
    """``lz.cast {to = f16}``: convert elements; float -> int truncates toward zero (nan and
    out-of-range values give an unspecified integer), anything -> i1 is ``x != 0``, bf16 rounds to
    nearest even."""

    name = "lz.cast"
    domain = ANY
    attributes = {"to": AttrSpec("type")}
    summary = "convert to another element type"

    def infer(self, operand_types, attrs):
        (x,) = operand_types
        return [x.with_element_type(attrs.to)]

    def reference(self, attrs, x):
        return to_storage(x, attrs.to)

    def lower_scalar(self, s, attrs, x):
        return s.cast(x, attrs.to)

    def grad(self, b, op, attrs, dy):
        """float -> float: the cotangent cast back; nothing flows through integers or i1."""
        x = op.operands[0]
        if x.type.element_type.is_float and attrs.to.is_float:
            return [b.op("lz.cast", dy, to=x.type.element_type)]
        return [None]


def _storage_bits(et) -> int:
    return 8 * et.numpy_dtype.itemsize


@register
class BitcastOp(UnaryOp):
    """``lz.bitcast {to = i32}``: the same bits read as another element type of the same width (i1
    is a byte, 0 or 1; a byte read as i1 is ``!= 0``).  bf16 is not allowed: numpy stores it in
    32 bits."""

    name = "lz.bitcast"
    domain = ANY
    attributes = {"to": AttrSpec("type")}
    summary = "reinterpret the bits as another element type"

    def infer(self, operand_types, attrs):
        (x,) = operand_types
        src, to = x.element_type, attrs.to
        if "bf16" in (src.name, to.name):
            raise OpError("cannot bit cast bf16 (stored as f32)")
        if _storage_bits(src) != _storage_bits(to):
            raise OpError(f"cannot bit cast {src} to {to}: their widths differ")
        return [x.with_element_type(to)]

    def reference(self, attrs, x):
        if attrs.to.is_bool:
            return x.view(np.uint8 if x.dtype.itemsize == 1 else x.dtype) != 0
        return np.ascontiguousarray(x).view(attrs.to.numpy_dtype)

    def lower_scalar(self, s, attrs, x):
        return s.bitcast(x, attrs.to)

    grad = staticmethod(no_gradient)


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


@register
class GeluOp(UnaryOp):
    """``lz.gelu {approximate = "none" | "tanh"}``: ``x * Phi(x)``, exactly (erf) or by tanh."""

    name = "lz.gelu"
    domain = FLOAT
    attributes = {"approximate": AttrSpec("str", "none", choices=("none", "tanh"))}
    summary = "Gaussian error linear unit"

    def reference(self, attrs, x):
        w = x.astype(np.float64)
        if attrs.approximate == "tanh":
            y = 0.5 * w * (1 + np.tanh(_SQRT_2_OVER_PI * (w + 0.044715 * w ** 3)))
        else:
            y = 0.5 * w * (1 + _erf_f64(w / math.sqrt(2)))
        return y.astype(x.dtype)

    def lower_scalar(self, s, attrs, x):
        if attrs.approximate == "tanh":
            # 0.5 (1 + tanh(u)) == sigmoid(2u): no cancellation for very negative x
            cube = s.mul(s.mul(x, x), x)
            u = s.add(x, s.mul(s.constant(0.044715, x), cube))
            return s.mul(x, s.sigmoid(s.mul(s.constant(2 * _SQRT_2_OVER_PI, x), u)))
        return s.mul(x, s.normcdf(x))  # x * Phi(x); normcdf keeps the negative tail accurate

    def grad(self, b, op, attrs, dy):
        x = op.operands[0]
        if attrs.approximate == "tanh":
            # PyTorch's: d/dx 0.5 x (1 + tanh(u)), u = k (x + 0.044715 x^3)
            x_sq = b.mul(x, x)
            inner = b.mul(_SQRT_2_OVER_PI, b.add(x, b.mul(0.044715, b.mul(x_sq, x))))
            t = b.op("lz.tanh", inner)
            left = b.mul(0.5, b.add(1, t))
            right = b.mul(b.mul(b.mul(0.5, x), b.sub(1, b.mul(t, t))),
                          b.mul(_SQRT_2_OVER_PI, b.add(1, b.mul(3 * 0.044715, x_sq))))
            return [b.mul(dy, b.add(left, right))]
        # Phi(x) + x phi(x)
        cdf = b.mul(0.5, b.add(1, b.op("lz.erf", b.mul(x, 1 / math.sqrt(2)))))
        pdf = b.mul(1 / math.sqrt(2 * math.pi), b.op("lz.exp", b.mul(-0.5, b.mul(x, x))))
        return [b.mul(dy, b.add(cdf, b.mul(x, pdf)))]


# --- binary --------------------------------------------------------------------------------------

class BinaryOp(OpDef):
    """``z = fn(x, y)`` elementwise with numpy broadcasting; both operands have one element type."""

    operands = ("lhs", "rhs")
    traits = frozenset({PURE, ELEMENTWISE})
    domain: Domain = NUMERIC
    fn = None
    scalar = None  # lowering facet: scalar(s, x, y)
    lower_scalar = UnaryOp.lower_scalar

    def result_element_type(self, element_type):
        return element_type

    def infer(self, operand_types, attrs):
        lhs, rhs = operand_types
        et = same_element_type(operand_types)
        check_element_type(lhs, self.domain, "operands")
        shape = broadcast_shapes(lhs.shape, rhs.shape)
        return [TensorType(shape, self.result_element_type(et))]

    def reference(self, attrs, lhs, rhs):
        return self.fn(lhs, rhs)


BINARY_OPS: dict[str, type] = {}


def binary(name: str, fn, domain: Domain, summary: str, commutative: bool = False, **facets) -> type:
    """Define and register ``lz.<name>``, a broadcasting ``BinaryOp``; ``facets`` as in ``unary``."""
    traits = BinaryOp.traits | ({COMMUTATIVE} if commutative else set())
    cls = type(_class_name(name), (BinaryOp,), {
        "name": "lz." + name, "fn": staticmethod(fn), "domain": domain, "summary": summary,
        "traits": frozenset(traits), "__doc__": summary, "__module__": __name__, **_static_facets(facets)})
    register(cls)
    BINARY_OPS[cls.name] = cls
    return cls


def _divide(x, y):
    """Float division is IEEE; integer division truncates toward zero (as C, not numpy's floor),
    and an integer divided by zero gives 0."""
    if x.dtype.kind == "f":
        return np.true_divide(x, y)
    q = np.floor_divide(x, y)
    r = np.remainder(x, y)
    # floor and truncation differ when the remainder is nonzero and the signs differ
    fix = (r != 0) & ((x < 0) != (y < 0))
    return np.where(fix, q + np.ones((), q.dtype), q).astype(q.dtype)


def _power(x, y):
    """Float pow is IEEE; integer pow wraps, and a negative exponent gives trunc(1 / x^-y):
    1 for x = 1, +-1 for x = -1, 0 otherwise (0 also for 0^-n)."""
    if x.dtype.kind == "f":
        return np.power(x, y)
    x, y = np.broadcast_arrays(x, y)
    negative = y < 0
    out = np.power(x, np.where(negative, np.zeros((), y.dtype), y))
    one = np.ones((), x.dtype)
    odd = (y % 2) != 0
    minus_one_pow = np.where(odd, -one if x.dtype.kind == "i" else one, one)
    small = np.where(x == 1, one, np.where(x == -1, minus_one_pow, np.zeros((), x.dtype)))
    return np.where(negative, small, out).astype(x.dtype)


def _binary_grad(lhs, rhs):
    """The rule of a broadcasting binary op from its operands' gradients at the result's shape,
    ``lhs(b, x, y, out, g)`` and ``rhs(...)`` (``g`` the cotangent): each summed back over the
    axes broadcasting stretched."""
    def rule(b, op, attrs, g):
        x, y = op.operands
        return [b.sum_to(lhs(b, x, y, op.result, g), x.type.shape),
                b.sum_to(rhs(b, x, y, op.result, g), y.type.shape)]
    return rule


def _pow_base(b, x, y, out, g):
    # y x^(y-1), and 0 where y == 0 (also at x == 0, where the formula gives 0 * inf)
    return b.select(b.cmp("eq", y, 0), 0, b.mul(g, b.mul(y, b.op("lz.pow", x, b.sub(y, 1)))))


def _pow_exponent(b, x, y, out, g):
    # x^y log x, and 0 where x == 0 and y >= 0 (the limit, where the formula gives 0 * -inf)
    base_zero = b.op("lz.and", b.cmp("eq", x, 0), b.cmp("ge", y, 0))
    return b.select(base_zero, 0, b.mul(g, b.mul(out, b.op("lz.log", x))))


def _split_ties(b, x, y, g):
    return b.select(b.cmp("eq", x, y), b.div(g, 2), g)


#     name   numpy reference   accepts   summary
binary("add", np.add,           NUMERIC,  "x + y", commutative=True, scalar=lambda s, x, y: s.add(x, y),
       grad=_binary_grad(lambda b, x, y, out, g: g, lambda b, x, y, out, g: g))
binary("sub", np.subtract,      NUMERIC,  "x - y", scalar=lambda s, x, y: s.sub(x, y),
       grad=_binary_grad(lambda b, x, y, out, g: g, lambda b, x, y, out, g: b.neg(g)))
binary("mul", np.multiply,      NUMERIC,  "x * y", commutative=True, scalar=lambda s, x, y: s.mul(x, y),
       grad=_binary_grad(lambda b, x, y, out, g: b.mul(g, y), lambda b, x, y, out, g: b.mul(g, x)))
binary("div", _divide,          NUMERIC,  "x / y (integers truncate toward zero)", scalar=lambda s, x, y: s.div(x, y),
       grad=_binary_grad(lambda b, x, y, out, g: b.div(g, y),
                         lambda b, x, y, out, g: b.mul(b.neg(g), b.div(out, y))))
binary("pow", _power,           NUMERIC,  "x ^ y", scalar=lambda s, x, y: s.pow(x, y),
       grad=_binary_grad(_pow_base, _pow_exponent))
binary("max", np.maximum,       NUMERIC,  "the larger (nan if either is nan)", commutative=True,
       scalar=lambda s, x, y: s.max(x, y),
       grad=_binary_grad(lambda b, x, y, out, g: b.select(b.cmp("lt", x, y), 0, _split_ties(b, x, y, g)),
                         lambda b, x, y, out, g: b.select(b.cmp("gt", x, y), 0, _split_ties(b, x, y, g))))
binary("min", np.minimum,       NUMERIC,  "the smaller (nan if either is nan)", commutative=True,
       scalar=lambda s, x, y: s.min(x, y),
       grad=_binary_grad(lambda b, x, y, out, g: b.select(b.cmp("gt", x, y), 0, _split_ties(b, x, y, g)),
                         lambda b, x, y, out, g: b.select(b.cmp("lt", x, y), 0, _split_ties(b, x, y, g))))
def _trunc(b, q):
    return b.select(b.cmp("lt", q, 0), b.op("lz.ceil", q), b.op("lz.floor", q))


def _remainder(x, y):
    """C's ``fmod``: the sign of ``x``; an integer remainder by 0 is 0."""
    if x.dtype.kind == "f":
        return np.fmod(x, y)
    zero = y == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.fmod(x, np.where(zero, np.ones((), y.dtype), y))
    return np.where(zero, np.zeros((), r.dtype), r).astype(np.result_type(x, y))


def _shift_amount_too_far(x, y):
    bits = x.dtype.itemsize * 8
    return (y < 0) | (y >= bits) if y.dtype.kind == "i" else y >= bits


def _shift_left(x, y):
    x, y = np.broadcast_arrays(x, y)
    far = _shift_amount_too_far(x, y)
    return np.where(far, np.zeros((), x.dtype), np.left_shift(x, np.where(far, np.zeros((), y.dtype), y)))


def _shift_right(x, y):
    x, y = np.broadcast_arrays(x, y)
    far = _shift_amount_too_far(x, y)
    fill = np.where(x < 0, -np.ones((), x.dtype), np.zeros((), x.dtype)) if x.dtype.kind == "i" else np.zeros((), x.dtype)
    return np.where(far, fill, np.right_shift(x, np.where(far, np.zeros((), y.dtype), y))).astype(x.dtype)


binary("rem", _remainder,       NUMERIC,  "remainder of truncated division (C fmod: the sign of x; x % 0 == 0 "
       "for integers)", scalar=lambda s, x, y: s.rem(x, y),
       grad=_binary_grad(lambda b, x, y, out, g: g,
                         lambda b, x, y, out, g: b.neg(b.mul(g, _trunc(b, b.div(x, y))))))
binary("and", np.bitwise_and,   LOGICAL,  "logical and of i1, bitwise and of integers", commutative=True,
       scalar=lambda s, x, y: s.and_(x, y), grad=no_gradient)
binary("or",  np.bitwise_or,    LOGICAL,  "logical or of i1, bitwise or of integers", commutative=True,
       scalar=lambda s, x, y: s.or_(x, y), grad=no_gradient)
binary("xor", np.bitwise_xor,   LOGICAL,  "logical xor of i1, bitwise xor of integers", commutative=True,
       scalar=lambda s, x, y: s.and_(s.or_(x, y), s.not_(s.and_(x, y))), grad=no_gradient)
binary("shift_left", _shift_left,   INTEGER,  "x << y (0 for shifts of at least the bit width)",
       scalar=lambda s, x, y: s.shift_left(x, y), grad=no_gradient)
binary("shift_right", _shift_right, INTEGER,  "x >> y, arithmetic for signed types (0 or -1 for shifts of at "
       "least the bit width)", scalar=lambda s, x, y: s.shift_right(x, y), grad=no_gradient)


_PREDICATES = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
               "gt": np.greater, "ge": np.greater_equal}


@register
class CmpOp(BinaryOp):
    """``lz.cmp {predicate = "eq"|"ne"|"lt"|"le"|"gt"|"ge"}``: an i1 tensor; nan compares unequal."""

    name = "lz.cmp"
    domain = ANY
    attributes = {"predicate": AttrSpec("str", choices=tuple(_PREDICATES))}
    summary = "compare elementwise"

    def result_element_type(self, element_type):
        return I1

    def reference(self, attrs, lhs, rhs):
        return _PREDICATES[attrs.predicate](lhs, rhs)

    def lower_scalar(self, s, attrs, lhs, rhs):
        return s.cmp(attrs.predicate, lhs, rhs)

    grad = staticmethod(no_gradient)


@register
class SelectOp(OpDef):
    """``lz.select(cond, a, b)``: ``a`` where ``cond`` holds, else ``b``; all three broadcast."""

    name = "lz.select"
    operands = ("condition", "true_value", "false_value")
    traits = frozenset({PURE, ELEMENTWISE})
    summary = "choose elementwise"

    def infer(self, operand_types, attrs):
        cond, a, b = operand_types
        check_element_type(cond, BOOL, "condition")
        et = same_element_type([a, b], "true and false values")
        return [TensorType(broadcast_shapes(cond.shape, a.shape, b.shape), et)]

    def reference(self, attrs, cond, a, b):
        return np.where(cond, a, b)

    def lower_scalar(self, s, attrs, cond, a, b):
        return s.select(cond, a, b)

    def grad(self, b, op, attrs, dy):
        cond, x, y = op.operands
        return [None, b.sum_to(b.where_else_zero(cond, dy), x.type.shape),
                b.sum_to(b.select(cond, 0, dy), y.type.shape)]
