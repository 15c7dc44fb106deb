"""canonicalize: local algebra, as tables of one-line rules, applied to a fixed point.

Each rule is ``Rule(op, rewrite, doc)``: ``rewrite(m, *operands)`` returns the value that
replaces the op, or None.  A rule fires only when that value has exactly the op's result type
(``x*1`` where the 1 broadcasts ``x`` to a larger shape is not the identity), which the
``RulePattern`` checks once for all rules.  Tables are plain lists: ``ARITHMETIC + LOGIC``.

Float rules keep IEEE results, with one deliberate exception shared by XLA and Inductor:
``x+0 -> x`` turns ``-0.0 + 0.0`` (``+0.0``) into ``-0.0``.  ``x*0 -> 0`` and ``x-x -> 0`` are
for integers only (for floats, nan and inf make them wrong).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lezero.ir.attributes import i64_array
from lezero.ir.types import ElementType, TensorType
from lezero.passes.constant_fold import constant_value
from lezero.passes.pass_base import Pass, option
from lezero.passes.rewriter import Rule, apply_patterns_greedily, patterns_from_rules


# --- what the rules ask about values -------------------------------------------------------------

def splat(v):
    """The value every element of constant ``v`` holds, or None (not a constant, or not a splat)."""
    attr = constant_value(v)
    return attr.splat_value() if attr is not None else None


def is_splat(v, k) -> bool:
    s = splat(v)
    return s is not None and s == k


def is_int(v) -> bool:
    """Integer elements (not i1, not float): where x*0 and x-x are really 0."""
    return isinstance(v.type, TensorType) and v.type.element_type.is_int


def defined_by(v, name: str):
    """The op defining ``v`` if it is an ``name`` op, else None."""
    op = getattr(v, "op", None)
    return op if op is not None and op.name == name else None


def zeros(m):
    """A zero constant of the matched op's result type (None if the type is dynamic)."""
    return m.constant(0) if m.type.is_static else None


# --- casts -----------------------------------------------------------------------------------------

_INT_BITS = {"i8": 8, "i16": 16, "i32": 32, "i64": 64, "ui8": 8, "ui16": 16, "ui32": 32, "ui64": 64}
_FLOAT_MANTISSA = {"f16": 11, "bf16": 8, "f32": 24, "f64": 53}  # significant bits, implicit one included
_FLOAT_RANGE = {"f16": 15, "bf16": 127, "f32": 127, "f64": 1023}   # largest binary exponent


def cast_is_lossless(src: ElementType, dst: ElementType) -> bool:
    """Whether every ``src`` value is exactly a ``dst`` value (so a later cast sees the same number)."""
    if src == dst or src.is_bool:
        return True
    if dst.is_bool:
        return False
    if src.is_int:
        bits = _INT_BITS[src.name] - (0 if src.name.startswith("ui") else 1)  # magnitude bits
        if dst.is_int:
            dst_bits = _INT_BITS[dst.name] - (0 if dst.name.startswith("ui") else 1)
            unsigned_dst, signed_src = dst.name.startswith("ui"), not src.name.startswith("ui")
            return dst_bits >= bits and not (unsigned_dst and signed_src)
        return _FLOAT_MANTISSA[dst.name] >= bits
    if dst.is_int:
        return False
    return _FLOAT_MANTISSA[dst.name] >= _FLOAT_MANTISSA[src.name] and _FLOAT_RANGE[dst.name] >= _FLOAT_RANGE[src.name]


def _cast_cast(m, x):
    inner = defined_by(x, "lz.cast")
    if inner is None:
        return None
    source = inner.operands[0]
    if not cast_is_lossless(source.type.element_type, x.type.element_type):
        return None
    return m.op_like([source])


# --- data movement ---------------------------------------------------------------------------------

def _perm(op) -> tuple:
    perm = op.definition.attrs(op).perm
    return tuple(perm) if perm is not None else tuple(reversed(range(op.operands[0].type.rank)))


def _is_identity_transpose(m, x):
    return x if _perm(m.op) == tuple(range(x.type.rank)) else None


def _transpose_transpose(m, x):
    inner = defined_by(x, "lz.transpose")
    if inner is None:
        return None
    p_inner, p_outer = _perm(inner), _perm(m.op)
    # result dim i is x's dim p_outer[i], which is the source's dim p_inner[p_outer[i]]
    return m.op_like([inner.operands[0]], perm=[p_inner[i] for i in p_outer])


def _transpose_of_product(m, x):
    """(a^T b)^T -> b^T a for matrices: one transpose of ``b`` instead of one of ``a`` and one of the
    product (autodiff writes the weight gradient of ``x @ w.T`` as ``(x^T dy)^T``)."""
    product = defined_by(x, "lz.matmul")
    if product is None or len(x.uses) != 1 or x.type.rank != 2 or _perm(m.op) != (1, 0):
        return None
    inner = defined_by(product.operands[0], "lz.transpose")
    b = product.operands[1]
    if inner is None or b.type.rank != 2 or _perm(inner) != (1, 0):
        return None
    b_t = m.create("lz.transpose", [b], {"perm": [1, 0]}).result
    return m.create("lz.matmul", [b_t, inner.operands[0]], dict(product.attributes)).result


# ops that may sit between a row product and the reshape back, with an operand broadcasting along
# its last dim only (Gemm's bias, alpha)
_ROW_EPILOGUE_OPS = ("lz.add", "lz.sub", "lz.mul", "lz.div")


def _product_of_rows(m, x):
    """``reshape(matmul(reshape(x'), w) [op b], x'.shape[:-1] + (n,))`` -> ``matmul(x', w) [op b]``
    for a matrix ``w`` and a reshape merging the dims before ``x'``'s last into rows, ``b`` of rank
    <= 1: a Gemm between two reshapes (GPT-2's Conv1D) reads and writes the activations in place,
    so the activation before it and the elementwise ops after it fuse with the GEMM instead of
    making copy kernels of the reshapes (the GEMM folds the batch dims back into rows)."""
    epilogue, product = None, defined_by(x, "lz.matmul")
    if product is None and getattr(x, "op", None) is not None and x.op.name in _ROW_EPILOGUE_OPS:
        epilogue = x.op
        products = [defined_by(v, "lz.matmul") for v in epilogue.operands]
        others = [v for v, p in zip(epilogue.operands, products) if p is None]
        product = next((p for p in products if p is not None), None)
        if product is None or len(others) != 1 or others[0].type.rank > 1 or len(x.uses) != 1:
            return None
    if product is None or len(product.result.uses) != 1:
        return None
    rows, w = product.operands
    inner = defined_by(rows, "lz.reshape")
    if inner is None or w.type.rank != 2 or rows.type.rank != 2:
        return None
    source = inner.operands[0]
    if not (source.type.is_static and m.type.is_static and source.type.rank >= 3
            and source.type.shape[-1] == rows.type.shape[-1]
            and m.type.shape == source.type.shape[:-1] + (w.type.shape[-1],)):
        return None
    out = m.create("lz.matmul", [source, w], dict(product.attributes)).result
    if epilogue is None:
        return out
    operands = [out if v is product.result else v for v in epilogue.operands]
    return m.create(epilogue.name, operands, dict(epilogue.attributes)).result


def _is_identity_reshape(m, x):
    t = x.type
    dynamic = [i for i, d in enumerate(t.shape) if d is None]
    if len(dynamic) > 1:
        return None
    want = tuple(-1 if d is None else d for d in t.shape)
    shape = tuple(m.attrs.shape)
    # static: the verifier made the result type agree with inference, so equal types mean same dims
    if shape == want or (not dynamic and m.type == t):
        return x
    return None


def _collapse_source(m, x, name):
    """``op(op(x'))`` -> ``op(x')`` with the outer op's attributes (reshape, broadcast_to)."""
    inner = defined_by(x, name)
    return m.op_like([inner.operands[0]]) if inner is not None else None


def _is_static_same(m, x):
    return x if x.type.is_static and x.type == m.type else None


_TO_THE_END = 2 ** 31 - 1  # ONNX writes INT_MAX (or INT64_MAX) for "to the end"


def _is_whole_slice(m, x):
    from lezero.ir.dialect.data_movement import SliceOp

    t = x.type
    for d, s in zip(t.shape, SliceOp.slices(m.attrs, t.rank)):
        if d is None:
            if not (s.step in (None, 1) and s.start in (None, 0) and (s.stop is None or s.stop >= _TO_THE_END)):
                return None
        elif range(*s.indices(d)) != range(d):
            return None
    return x


def _is_zero_pad(m, x):
    return x if all(p == 0 for p in m.attrs.pads) else None


def _zero_pad_along(v):
    """``(pad op, axis, begin, end)`` when ``v`` is an ``lz.pad`` by zeros, read once, of a static
    tensor along one axis only (no crop); else None."""
    op = defined_by(v, "lz.pad")
    if op is None or len(v.uses) != 1 or not v.type.is_static:
        return None
    attrs = op.definition.attrs(op)
    rank = v.type.rank
    pads = list(attrs.pads)
    if attrs.value != 0 or any(p < 0 for p in pads):
        return None
    axes = [d for d in range(rank) if pads[d] or pads[rank + d]]
    if len(axes) != 1:
        return None
    return op, axes[0], pads[axes[0]], pads[rank + axes[0]]


def _sum_of_adjacent_pads(m, x, y):
    """pad(a) + pad(b) -> pad(concat(a, b)) when a and b are padded by zeros along one axis into
    places that touch: each sum is one of them plus zero (an RNN step's gate gradients: a slice's
    gradient is a pad, the four gates' sum is the gradient of the step's pre-activations)."""
    px, py = _zero_pad_along(x), _zero_pad_along(y)
    if px is None or py is None or px[1] != py[1] or x.type != y.type:
        return None
    (first, axis, begin, _), (second, _, _, end) = (px, py) if px[2] < py[2] else (py, px)
    if begin + first.operands[0].type.shape[axis] + second.operands[0].type.shape[axis] + end != x.type.shape[axis]:
        return None
    joined = m.create("lz.concat", [first.operands[0], second.operands[0]], {"axis": axis}).result
    pads = [0] * (2 * x.type.rank)
    pads[axis], pads[x.type.rank + axis] = begin, end
    return m.create("lz.pad", [joined], {"pads": pads}).result


def _concat_of_concats(m, *xs):
    """concat(a, concat(b, c), d) along one axis -> concat(a, b, c, d) (the inner one read once)."""
    axis = m.attrs.axis % m.type.rank
    flat, merged = [], False
    for v in xs:
        inner = defined_by(v, "lz.concat")
        if inner is not None and len(v.uses) == 1 and inner.definition.attrs(inner).axis % v.type.rank == axis:
            flat.extend(inner.operands)
            merged = True
        else:
            flat.append(v)
    return m.create("lz.concat", flat, {"axis": axis}).result if merged else None


def _gather_in_order(m, x, indices):
    """gather(x, 0, 1, ..., n-1 along an axis of size n) -> a reshape of x (issue 11 item 4):
    transformers' masks index ``mask[batch_idx, kv_idx]`` with such a constant, which would make a
    kernel whose rows read other rows.  The shape rule put ``indices``' dims at the axis."""
    attr = constant_value(indices)
    if attr is None or not x.type.is_static or not m.type.is_static:
        return None
    axis = m.attrs.axis % max(x.type.rank, 1)
    size = x.type.shape[axis]
    flat = attr.array.reshape(-1)
    if flat.size != size or not np.array_equal(flat, np.arange(size)):
        return None
    return m.create("lz.reshape", [x], {"shape": i64_array(m.type.shape)}, [m.type]).result


# --- constant exponents (strength reduction) --------------------------------------------------------
#
# ``x ** c`` for a splat ``c`` becomes multiplies, a square root or a reciprocal: vector
# instructions instead of a call of libm's ``pow`` per element (GPT-2's GELU: ``Pow(x, 3.0)``).
# IEEE ``pow``'s special values are kept: ``x**0`` is 1 even for nan, ``(-0)**0.5`` is +0 and
# ``(-inf)**0.5`` is +inf (``sqrt`` gives -0 and nan there), ``(-0)**-0.5`` is +inf.  One rounding
# (``x*x``, ``sqrt``, ``1/x``): the correctly rounded power, in every float type.  Two
# (``x*x*x``, ``(x*x)*(x*x)``, ``1/sqrt(x)``) in the element type, as PyTorch and ONNX Runtime
# compute them: float32 within 1 ulp of the correctly rounded power (x**4: 2), float64 within 2,
# both exact wherever the power is representable (float32 in float64 instead cost GPT-2's GELU
# kernel 30%: two conversions and half-width vectors); half types keep ``pow``, as they would
# round each step to their short mantissa.  Integers (wrapping) take the multiplies, exact
# modulo 2^n in any order.  tests/passes/test_strength_reduction.py measures the ulps.

def _exponent(x, y, one_rounding=True):
    """``y``'s splat value when ``x ** y`` may be strength-reduced for ``x``'s element type
    (``one_rounding=False``: by more than one rounding step)."""
    c = splat(y)
    dtype = x.type.element_type
    if c is None or dtype.is_bool or (not one_rounding and dtype.is_float and dtype.name not in ("f32", "f64")):
        return None
    return c


def _unless_minus_inf(m, x, value_there, elsewhere):
    """``elsewhere``, but ``value_there`` where ``x`` is -inf."""
    scalar = TensorType((), x.type.element_type)
    at = m.create("lz.cmp", [x, m.constant(float("-inf"), scalar)], {"predicate": "eq"}).result
    return m.create("lz.select", [at, m.constant(value_there, scalar), elsewhere]).result


def _mul(m, a, b):
    return m.create("lz.mul", [a, b]).result


def _root(m, x):
    """``sqrt(x)`` with +0 at -0 (``pow``'s sign there)."""
    return m.create("lz.abs", [m.create("lz.sqrt", [x]).result]).result


def _pow_zero(m, x, y):
    return m.constant(1) if _exponent(x, y) == 0 and m.type.is_static else None


def _pow_two(m, x, y):
    return _mul(m, x, x) if _exponent(x, y) == 2 else None


def _pow_three(m, x, y):
    if _exponent(x, y, one_rounding=False) != 3:
        return None
    return _mul(m, _mul(m, x, x), x)


def _pow_four(m, x, y):
    if _exponent(x, y, one_rounding=False) != 4:
        return None
    square = _mul(m, x, x)
    return _mul(m, square, square)


def _pow_half(m, x, y):
    if not x.type.element_type.is_float or _exponent(x, y) != 0.5:
        return None
    return _unless_minus_inf(m, x, float("inf"), _root(m, x))


def _pow_minus_one(m, x, y):
    if not x.type.element_type.is_float or _exponent(x, y) != -1:
        return None
    return m.create("lz.reciprocal", [x]).result


def _pow_minus_half(m, x, y):
    if not x.type.element_type.is_float or _exponent(x, y, one_rounding=False) != -0.5:
        return None
    return _unless_minus_inf(m, x, 0.0, m.create("lz.reciprocal", [_root(m, x)]).result)


POWERS = [
    Rule("lz.pow", lambda m, x, y: x if _exponent(x, y) == 1 else None, "x**1 -> x"),
    Rule("lz.pow", _pow_zero, "x**0 -> 1 (nan**0 too)"),
    Rule("lz.pow", _pow_two, "x**2 -> x*x"),
    Rule("lz.pow", _pow_three, "x**3 -> x*x*x (f32, f64, integers)"),
    Rule("lz.pow", _pow_four, "x**4 -> (x*x)*(x*x) (f32, f64, integers)"),
    Rule("lz.pow", _pow_half, "x**0.5 -> |sqrt(x)|, +inf at -inf (floats)"),
    Rule("lz.pow", _pow_minus_one, "x**-1 -> 1/x (floats)"),
    Rule("lz.pow", _pow_minus_half, "x**-0.5 -> 1/|sqrt(x)|, 0 at -inf (f32, f64)"),
]

# --- the tables ----------------------------------------------------------------------------------

ARITHMETIC = [
    Rule("lz.mul", lambda m, x, y: x if is_splat(y, 1) else None, "x*1 -> x"),
    Rule("lz.mul", lambda m, x, y: y if is_splat(x, 1) else None, "1*x -> x"),
    Rule("lz.mul", lambda m, x, y: zeros(m) if is_int(x) and (is_splat(y, 0) or is_splat(x, 0)) else None,
         "x*0 -> 0, 0*x -> 0 (integers only: for floats nan*0 and inf*0 are nan)"),
    Rule("lz.add", lambda m, x, y: x if is_splat(y, 0) else None, "x+0 -> x"),
    Rule("lz.add", lambda m, x, y: y if is_splat(x, 0) else None, "0+x -> x"),
    Rule("lz.sub", lambda m, x, y: x if is_splat(y, 0) else None, "x-0 -> x"),
    Rule("lz.sub", lambda m, x, y: zeros(m) if x is y and is_int(x) else None, "x-x -> 0 (integers only)"),
    Rule("lz.div", lambda m, x, y: x if is_splat(y, 1) else None, "x/1 -> x"),
    Rule("lz.neg", lambda m, x: x.op.operands[0] if defined_by(x, "lz.neg") else None, "neg(neg(x)) -> x"),
    Rule("lz.max", lambda m, x, y: x if x is y else None, "max(x, x) -> x"),
    Rule("lz.min", lambda m, x, y: x if x is y else None, "min(x, x) -> x"),
    Rule("lz.abs", lambda m, x: x if defined_by(x, "lz.abs") else None, "abs(abs(x)) -> abs(x)"),
    Rule("lz.relu", lambda m, x: x if defined_by(x, "lz.relu") else None, "relu(relu(x)) -> relu(x)"),
]

LOGIC = [
    Rule("lz.not", lambda m, x: x.op.operands[0] if defined_by(x, "lz.not") else None, "not(not(x)) -> x"),
    Rule("lz.and", lambda m, x, y: x if x is y else None, "x & x -> x"),
    Rule("lz.or", lambda m, x, y: x if x is y else None, "x | x -> x"),
    Rule("lz.or", lambda m, x, y: x if is_splat(y, 0) else None, "x | 0 -> x (false for i1)"),
    Rule("lz.or", lambda m, x, y: y if is_splat(x, 0) else None, "0 | x -> x"),
    Rule("lz.and", lambda m, x, y: x if x.type.element_type.is_bool and is_splat(y, True) else None,
         "x & true -> x (i1)"),
    Rule("lz.and", lambda m, x, y: y if y.type.element_type.is_bool and is_splat(x, True) else None,
         "true & x -> x (i1)"),
    Rule("lz.select", lambda m, c, a, b: a if is_splat(c, True) else None, "select(true, a, b) -> a"),
    Rule("lz.select", lambda m, c, a, b: b if is_splat(c, False) else None, "select(false, a, b) -> b"),
    Rule("lz.select", lambda m, c, a, b: a if a is b else None, "select(c, a, a) -> a"),
]

CASTS = [
    Rule("lz.cast", lambda m, x: x, "cast of x to its own type -> x"),
    Rule("lz.cast", _cast_cast, "cast(cast(x)) -> cast(x) when the inner cast is lossless"),
]

# also run by fuse-attention first, so that q, k and v read a projection's output in place
ROW_PRODUCTS = [
    Rule("lz.reshape", _product_of_rows, "reshape(matmul(reshape(x), w) [+ b]) back to x's rows -> matmul(x, w) [+ b]"),
]

DATA_MOVEMENT = ROW_PRODUCTS + [
    Rule("lz.transpose", _is_identity_transpose, "transpose with perm 0,1,... -> x"),
    Rule("lz.transpose", _transpose_transpose, "transpose(transpose(x)) -> transpose(x), perms composed"),
    Rule("lz.transpose", _transpose_of_product, "transpose(matmul(transpose(a), b)) -> matmul(transpose(b), a)"),
    Rule("lz.reshape", _is_identity_reshape, "reshape of x to its own shape -> x"),
    Rule("lz.reshape", lambda m, x: _collapse_source(m, x, "lz.reshape"), "reshape(reshape(x)) -> reshape(x)"),
    Rule("lz.broadcast_to", _is_static_same, "broadcast_to of x to its own shape -> x"),
    Rule("lz.broadcast_to", lambda m, x: _collapse_source(m, x, "lz.broadcast_to"),
         "broadcast_to(broadcast_to(x)) -> broadcast_to(x)"),
    Rule("lz.slice", _is_whole_slice, "slice taking the whole tensor in order -> x"),
    Rule("lz.concat", lambda m, *xs: xs[0] if len(xs) == 1 else None, "concat of one operand -> x"),
    Rule("lz.concat", _concat_of_concats, "concat(a, concat(b, c)) along one axis -> concat(a, b, c)"),
    Rule("lz.pad", _is_zero_pad, "pad by zero everywhere -> x"),
    Rule("lz.add", _sum_of_adjacent_pads, "pad(a) + pad(b), zeros along one axis, touching -> pad(concat(a, b))"),
    Rule("lz.gather", _gather_in_order, "gather(x, arange(n)) along an axis of size n -> reshape(x)"),
]

CANONICALIZATION_RULES = ARITHMETIC + POWERS + LOGIC + CASTS + DATA_MOVEMENT


@dataclass
class Canonicalize(Pass):
    name = "canonicalize"
    summary = "Simplify local algebra (x*1, neg(neg x), transpose(transpose x), ...) and erase dead pure ops"
    max_iterations: int = option(10, "rounds of the greedy driver before it reports non-convergence")

    rules = CANONICALIZATION_RULES  # a subclass (or a test) can run another table

    def run(self, module) -> None:
        apply_patterns_greedily(module, patterns_from_rules(self.rules), max_iterations=self.max_iterations)
