"""Reductions over a set of axes (``reduce_*``, a table like the unary ops) and argmax.

Gradients: sum and mean broadcast the cotangent back (mean divided by the count); max and min
split it evenly between the elements equal to the result (PyTorch's ``amax``/``amin``; nan
elements get none); prod uses ``y / x`` where no element is 0, and the product of the others for
the one zero of a slice (0 where a slice has two).
"""
from __future__ import annotations

import math

import numpy as np

from lezero.ir.dialect.axes import normalize_axis, reduction_axes
from lezero.ir.dialect.constraints import ANY, FLOAT, NUMERIC, Domain, check_element_type
from lezero.ir.dialect.numerics import accumulator_dtype, highest, lowest
from lezero.ir.gradient import no_gradient
from lezero.ir.opdef import PURE, AttrSpec, OpDef, OpError, register
from lezero.ir.types import I64, TensorType


def reduced_shape(shape, axes, keepdims: bool) -> tuple:
    """``shape`` with ``axes`` (normalized) removed, or kept as 1."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


class ReduceOp(OpDef):
    """``lz.reduce_* {axes = array<i64: ...>, keepdims = false}``; absent or empty axes reduce
    every axis, negative axes count from the end."""

    operands = ("input",)
    traits = frozenset({PURE})
    attributes = {"axes": AttrSpec("i64_array", None), "keepdims": AttrSpec("bool", False)}
    domain: Domain = NUMERIC
    fn = None  # fn(x, axes, keepdims), set per op
    # Lowering facets, through a ScalarBuilder (lezero/ir/scalar.py), in the accumulator type
    # (``accumulator_dtype``: f16 accumulates in f32): acc = combine(s, acc, x) from
    # acc = identity(numpy dtype), then the result is finalize(s, acc, count of reduced elements).
    combine = None
    identity = None
    # Whether combining in any order gives the same result (max, min): the kernels then need no
    # blocked partial results for accuracy (lezero/codegen/accumulation.py).
    exact = False
    # Gradient facet: vjp(b, x, y, dy, axes) -> dx, with y and dy at the input's rank (keepdims).
    vjp = None

    @staticmethod
    def finalize(s, acc, count: int):
        return acc

    def infer(self, operand_types, attrs):
        (x,) = operand_types
        check_element_type(x, self.domain)
        axes = reduction_axes(attrs.axes, x.rank)
        return [x.with_shape(reduced_shape(x.shape, axes, attrs.keepdims))]

    def reference(self, attrs, x):
        return self.fn(x, reduction_axes(attrs.axes, x.ndim), attrs.keepdims)

    def grad(self, b, op, attrs, dy):
        """The table entry's ``vjp(b, x, y, dy, axes)`` with ``y`` and ``dy`` kept at rank (keepdims)."""
        x = op.operands[0]
        axes = reduction_axes(attrs.axes, x.type.rank)
        y = op.result
        if not attrs.keepdims:
            kept = tuple(1 if i in axes else d for i, d in enumerate(x.type.shape))
            y, dy = b.reshape(y, kept), b.reshape(dy, kept)
        return [self.vjp(b, x, y, dy, axes)]


REDUCE_OPS: dict[str, type] = {}


def reduction(name: str, fn, domain: Domain, summary: str, **facets) -> type:
    """Define and register ``lz.<name>``, a ``ReduceOp`` computing ``fn(x, axes, keepdims)``;
    ``facets`` become class attributes (a gradient rule, a lowering)."""
    cls = type("".join(p.capitalize() for p in name.split("_")) + "Op", (ReduceOp,), {
        "name": "lz." + name, "fn": staticmethod(fn), "domain": domain, "summary": summary,
        "__doc__": summary, "__module__": __name__,
        **{k: staticmethod(v) if callable(v) else v for k, v in facets.items()}})
    register(cls)
    REDUCE_OPS[cls.name] = cls
    return cls


def _sum(x, axes, keepdims):
    return np.sum(x, axis=axes, keepdims=keepdims, dtype=accumulator_dtype(x.dtype))


def _prod(x, axes, keepdims):
    return np.prod(x, axis=axes, keepdims=keepdims, dtype=accumulator_dtype(x.dtype))


def _max(x, axes, keepdims):
    return np.max(x, axis=axes, keepdims=keepdims, initial=lowest(x.dtype))


def _min(x, axes, keepdims):
    return np.min(x, axis=axes, keepdims=keepdims, initial=highest(x.dtype))


def _mean(x, axes, keepdims):
    count = math.prod(x.shape[a] for a in axes)
    with np.errstate(invalid="ignore", divide="ignore"):  # nan over no elements, without a warning
        return _sum(x, axes, keepdims) / accumulator_dtype(x.dtype).type(count)


def _unreduce(b, x, dy):
    return b.op("lz.broadcast_to", dy, shape=_static_shape(x)) if dy.type.shape != x.type.shape else dy


def _static_shape(x):
    if not x.type.is_static:
        raise OpError(f"autodiff of a reduction needs a static input shape, got {x.type} (bind the dims first)")
    return x.type.shape


def _count(x, axes) -> int:
    return math.prod(_static_shape(x)[a] for a in axes)


def _extremum_vjp(b, x, y, dy, axes):
    # amax/amin: an even share to every element equal to the result
    hit = b.cmp("eq", x, y)
    ties = b.op("lz.reduce_sum", b.op("lz.cast", hit, to=x.type.element_type), axes=list(axes), keepdims=True)
    return b.where_else_zero(hit, b.div(dy, ties))


def _prod_vjp(b, x, y, dy, axes):
    zero = b.cmp("eq", x, 0)
    zeros = b.op("lz.reduce_sum", b.op("lz.cast", zero, to=x.type.element_type), axes=list(axes), keepdims=True)
    safe_x = b.select(zero, 1, x)
    others = b.op("lz.reduce_prod", safe_x, axes=list(axes), keepdims=True)  # product of the nonzero elements
    at_zero = b.where_else_zero(b.cmp("eq", zeros, 1), b.mul(dy, others))
    return b.select(zero, at_zero, b.mul(dy, b.div(y, safe_x)))


#          name          reference  accepts   summary
reduction("reduce_sum",  _sum,      NUMERIC,  "sum (0 over no elements)",
          combine=lambda s, acc, x: s.add(acc, x), identity=lambda dtype: 0,
          vjp=lambda b, x, y, dy, axes: _unreduce(b, x, dy))
reduction("reduce_prod", _prod,     NUMERIC,  "product (1 over no elements)",
          combine=lambda s, acc, x: s.mul(acc, x), identity=lambda dtype: 1, vjp=_prod_vjp)
reduction("reduce_max",  _max,      NUMERIC,  "maximum (-inf or the smallest integer over no elements)",
          combine=lambda s, acc, x: s.max(acc, x), identity=lowest, exact=True, vjp=_extremum_vjp)
reduction("reduce_min",  _min,      NUMERIC,  "minimum (+inf or the largest integer over no elements)",
          combine=lambda s, acc, x: s.min(acc, x), identity=highest, exact=True, vjp=_extremum_vjp)
reduction("reduce_mean", _mean,     FLOAT,    "arithmetic mean (nan over no elements)",
          combine=lambda s, acc, x: s.add(acc, x), identity=lambda dtype: 0,
          finalize=lambda s, acc, count: s.div(acc, s.constant(count, acc)),
          vjp=lambda b, x, y, dy, axes: _unreduce(b, x, b.div(dy, _count(x, axes))))


@register
class ArgmaxOp(OpDef):
    """``lz.argmax {axis, keepdims = false}``: i64 index of the first maximum (nan counts as the
    maximum, as in numpy and torch)."""

    name = "lz.argmax"
    operands = ("input",)
    traits = frozenset({PURE})
    attributes = {"axis": AttrSpec("i64"), "keepdims": AttrSpec("bool", False)}
    summary = "index of the maximum"

    def infer(self, operand_types, attrs):
        (x,) = operand_types
        check_element_type(x, ANY)
        axis = normalize_axis(attrs.axis, x.rank)
        if x.shape[axis] == 0:
            raise OpError(f"cannot take the argmax of axis {attrs.axis}, which has size 0")
        return [TensorType(reduced_shape(x.shape, (axis,), attrs.keepdims), I64)]

    def reference(self, attrs, x):
        axis = normalize_axis(attrs.axis, x.ndim)
        if x.shape[axis] == 0:
            raise OpError(f"cannot take the argmax of axis {attrs.axis}, which has size 0")
        return np.argmax(x, axis=axis, keepdims=attrs.keepdims)

    grad = staticmethod(no_gradient)


# --- scans and selection --------------------------------------------------------------------------

_CUMULATIVE = {"add": (np.add, lambda dtype: 0), "mul": (np.multiply, lambda dtype: 1),
               "max": (np.maximum, lowest), "min": (np.minimum, highest)}


@register
class CumulativeOp(OpDef):
    """``lz.cumulative {combine = "add"|"mul"|"max"|"min", axis, exclusive = false, reverse =
    false}``: running sums (products, maxima, minima) along ``axis``, each partial result in the
    element type (as numpy's ``cumsum``).  ``exclusive`` leaves the current element out (the first
    result is the identity); ``reverse`` runs from the end."""

    name = "lz.cumulative"
    operands = ("input",)
    traits = frozenset({PURE})
    attributes = {"combine": AttrSpec("str", choices=tuple(_CUMULATIVE)), "axis": AttrSpec("i64"),
                  "exclusive": AttrSpec("bool", False), "reverse": AttrSpec("bool", False)}
    summary = "running sum, product, maximum or minimum along an axis"

    def infer(self, operand_types, attrs):
        (x,) = operand_types
        check_element_type(x, NUMERIC)
        normalize_axis(attrs.axis, x.rank)
        return [x]

    def reference(self, attrs, x):
        from lezero.ir.dialect.numerics import to_storage
        from lezero.ir.types import element_type_of

        combine, identity = _CUMULATIVE[attrs.combine]
        axis = normalize_axis(attrs.axis, x.ndim)
        et = element_type_of(x.dtype)
        moved = np.moveaxis(x, axis, 0)
        out = np.empty_like(moved)
        acc = np.full(moved.shape[1:], identity(x.dtype), x.dtype)
        order = range(moved.shape[0] - 1, -1, -1) if attrs.reverse else range(moved.shape[0])
        with np.errstate(over="ignore", invalid="ignore"):
            for k in order:
                if attrs.exclusive:
                    out[k] = acc
                    acc = to_storage(combine(acc, moved[k]), et)
                else:
                    acc = to_storage(combine(acc, moved[k]), et)
                    out[k] = acc
        return np.moveaxis(out, 0, axis)

    def grad(self, b, op, attrs, dy):
        if attrs.combine == "mul":
            return [_cumulative_product_grad(b, op, attrs, dy)]
        if attrs.combine != "add":
            raise OpError(f"no gradient rule for lz.cumulative with combine = {attrs.combine}")
        return [b.op("lz.cumulative", dy, combine="add", axis=attrs.axis, exclusive=attrs.exclusive,
                     reverse=not attrs.reverse)]


def _cumulative_product_grad(b, op, attrs, dy):
    """``dx_k = sum_j [x_k is a factor of y_j] dy_j prod_{i in y_j's factors, i != k} x_i``, with the
    products formed as a running product over an ``n x n`` copy of each line whose diagonal is 1:
    exact where ``x`` holds zeros (where ``y / x`` is not), as PyTorch's rule, at ``n^2`` elements a line."""
    x = op.operands[0]
    shape = x.type.shape
    if not x.type.is_static:
        raise OpError(f"autodiff of lz.cumulative needs static shapes, got {x.type}")
    rank = x.type.rank
    axis = normalize_axis(attrs.axis, rank)
    n = shape[axis]
    perm = [d for d in range(rank) if d != axis] + [axis]  # the scanned axis last
    inverse = [perm.index(d) for d in range(rank)]
    rows = tuple(shape[d] for d in perm[:-1])
    lines = b.op("lz.broadcast_to", b.reshape(b.transpose(x, perm), rows + (1, n)), shape=rows + (n, n))
    k, j = np.indices((n, n))  # line k leaves out factor k; j runs along the scan
    diagonal = b.constant(k == j)
    others = b.op("lz.cumulative", b.select(diagonal, 1, lines), combine="mul", axis=-1,
                  exclusive=attrs.exclusive, reverse=attrs.reverse)
    if attrs.reverse:
        has_factor = (k > j) if attrs.exclusive else (k >= j)
    else:
        has_factor = (k < j) if attrs.exclusive else (k <= j)
    weighted = b.mul(others, b.reshape(b.transpose(dy, perm), rows + (1, n)))
    dx = b.op("lz.reduce_sum", b.where_else_zero(b.constant(has_factor), weighted), axes=[-1])
    return b.transpose(dx, inverse)


@register
class TopkOp(OpDef):
    """``lz.topk {k, axis = -1, largest = true}``: the ``k`` largest (smallest) elements along
    ``axis``, sorted, and their i64 indices; equal elements keep index order, nan counts as the
    largest value (ONNX's TopK)."""

    name = "lz.topk"
    operands = ("input",)
    num_results = 2
    traits = frozenset({PURE})
    attributes = {"k": AttrSpec("i64"), "axis": AttrSpec("i64", -1), "largest": AttrSpec("bool", True)}
    summary = "the k largest or smallest elements along an axis"

    def infer(self, operand_types, attrs):
        (x,) = operand_types
        check_element_type(x, NUMERIC)
        axis = normalize_axis(attrs.axis, x.rank)
        n = x.shape[axis]
        if attrs.k < 0 or (n is not None and attrs.k > n):
            raise OpError(f"k = {attrs.k} is out of range for axis {attrs.axis} of size {n}")
        shape = x.shape[:axis] + (attrs.k,) + x.shape[axis + 1:]
        return [x.with_shape(shape), TensorType(shape, I64)]

    def reference(self, attrs, x):
        axis = normalize_axis(attrs.axis, x.ndim)
        position = np.indices(x.shape)[axis]
        # lexsort: the last key is primary; ties by index (first index first after any flip)
        order = np.lexsort((-position if attrs.largest else position, x), axis=axis)
        if attrs.largest:
            order = np.flip(order, axis=axis)
        order = np.take(order, np.arange(attrs.k), axis=axis)
        return np.take_along_axis(x, order, axis=axis), order.astype(np.int64)

    # No gradient rule: the autodiff pass differentiates one-result ops (the values' rule would
    # be an lz.scatter_nd of the cotangent at the indices).
    grad = None


REDUCTION_OPS = frozenset(REDUCE_OPS) | {"lz.argmax"}


def reduced_axes(op) -> tuple:
    """The sorted normalized axes a ``reduce_*`` op or ``lz.argmax`` reduces."""
    rank = op.operands[0].type.rank
    attrs = op.definition.attrs(op)
    if op.name == "lz.argmax":
        return (normalize_axis(attrs.axis, rank),)
    return reduction_axes(attrs.axes, rank)
