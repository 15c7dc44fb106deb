"""Gathers, scatters and selection: Gather, GatherElements, GatherND, ReverseSequence, OneHot,
Compress, ArrayFeatureExtractor, ScatterElements, ScatterND, TopK.

Gathers of single elements (GatherElements, GatherND, ReverseSequence) are ``lz.gather`` on the
flattened input with flat indices computed from the index tensor; ScatterElements is ScatterND
with the index tuples spelled out.
"""
from __future__ import annotations

import numpy as np

from lezero.ir.types import I64
from lezero.onnx.ops.common import axis_of, product
from lezero.onnx.ops.tensor import broadcast_to
from lezero.onnx.registry import converter


@converter("Gather")
def gather(ctx):
    x, indices = ctx.input(0), ctx.input(1)
    axis = axis_of(ctx, ctx.attr("axis", 0), ctx.rank(x))
    return ctx.op("lz.gather", x, indices, axis=axis)


def normalized_indices(ctx, indices, size):
    """Indices as i64, negative ones counted from the end (``size`` a number or an i64 value)."""
    indices = ctx.cast(indices, I64)
    size = ctx.scalar(size, I64) if isinstance(size, (int, np.integer)) else size
    negative = ctx.op("lz.cmp", indices, ctx.scalar(0, I64), predicate="lt")
    return ctx.op("lz.select", negative, ctx.op("lz.add", indices, size), indices)


def gather_elements(ctx, x, indices, axis):
    """``out[i, j, k] = x[i, indices[i, j, k], k]`` (for axis 1): ``lz.gather`` on the flattened
    input at ``sum(coordinate * stride)``."""
    shape = ctx.shape(x)
    ishape = ctx.shape(indices, "the indices")
    if len(shape) != len(ishape):
        raise ctx.error(f"indices {indices.type} must have the rank of the data {x.type}")
    strides = [product(shape[d + 1:]) for d in range(len(shape))]
    base = np.zeros(ishape, np.int64)
    for d in range(len(shape)):
        if d != axis:
            view = [1] * len(shape)
            view[d] = ishape[d]
            base = base + np.arange(ishape[d], dtype=np.int64).reshape(view) * strides[d]
    flat = normalized_indices(ctx, indices, shape[axis])
    if strides[axis] != 1:
        flat = ctx.op("lz.mul", flat, ctx.scalar(strides[axis], I64))
    if base.any():
        flat = ctx.op("lz.add", flat, ctx.constant(base))
    return ctx.op("lz.gather", ctx.reshape(x, [product(shape)]), flat, axis=0)


@converter("GatherElements")
def gather_elements_(ctx):
    x = ctx.input(0)
    return gather_elements(ctx, x, ctx.input(1), axis_of(ctx, ctx.attr("axis", 0), ctx.rank(x)))


@converter("GatherND")
def gather_nd(ctx):
    x, indices = ctx.input(0), ctx.input(1)
    b = ctx.attr("batch_dims", 0)
    shape, ishape = ctx.shape(x), ctx.shape(indices, "the indices")
    k = ishape[-1]
    if b + k > len(shape) or ishape[:b] != shape[:b]:
        raise ctx.error(f"indices {indices.type} do not fit data {x.type} with batch_dims={b}")
    batch, picked, rest = shape[:b], shape[b:b + k], shape[b + k:]
    strides = np.asarray([product(picked[j + 1:]) for j in range(k)], np.int64)
    idx = ctx.cast(indices, I64)
    sizes = ctx.constant(np.asarray(picked, np.int64))
    idx = ctx.op("lz.select", ctx.op("lz.cmp", idx, ctx.scalar(0, I64), predicate="lt"),
                 ctx.op("lz.add", idx, sizes), idx)
    flat = ctx.op("lz.reduce_sum", ctx.op("lz.mul", idx, ctx.constant(strides)), axes=[len(ishape) - 1])
    if b:
        view = ishape[:-1]
        base = np.zeros(view, np.int64)
        batch_strides = [product(batch[d + 1:]) for d in range(b)]
        for d in range(b):
            shape_d = [1] * len(view)
            shape_d[d] = view[d]
            base = base + np.arange(view[d], dtype=np.int64).reshape(shape_d) * batch_strides[d]
        flat = ctx.op("lz.add", flat, ctx.constant(base * product(picked)))
    table = ctx.reshape(x, [product(batch) * product(picked)] + list(rest))
    return ctx.op("lz.gather", table, flat, axis=0)


@converter("ReverseSequence")
def reverse_sequence(ctx):
    x, lengths = ctx.input(0), ctx.input(1)
    batch_axis, time_axis = ctx.attr("batch_axis", 1), ctx.attr("time_axis", 0)
    shape = ctx.shape(x)
    rank = len(shape)
    view_t = [1] * rank
    view_t[time_axis] = shape[time_axis]
    view_b = [1] * rank
    view_b[batch_axis] = shape[batch_axis]
    t = ctx.constant(np.arange(shape[time_axis], dtype=np.int64).reshape(view_t))
    n = ctx.reshape(ctx.cast(lengths, I64), view_b)
    reversed_t = ctx.op("lz.sub", ctx.op("lz.sub", n, ctx.scalar(1, I64)), t)
    source = ctx.op("lz.select", ctx.op("lz.cmp", t, n, predicate="lt"), reversed_t, t)
    source = broadcast_to(ctx, source, shape)
    return gather_elements(ctx, x, source, time_axis)


@converter("OneHot")
def one_hot(ctx):
    indices, values = ctx.input(0), ctx.input(2)
    depth = int(np.asarray(ctx.require_const(1, "depth")).reshape(-1)[0])
    rank = ctx.rank(indices) + 1
    axis = axis_of(ctx, ctx.attr("axis", -1), rank)
    idx = ctx.cast(indices, I64) if not ctx.dtype(indices).is_float else ctx.cast(indices, I64)
    idx = normalized_indices(ctx, idx, depth)
    idx = ctx.reshape(idx, list(idx.type.shape[:axis]) + [1] + list(idx.type.shape[axis:]))
    view = [1] * rank
    view[axis] = depth
    hit = ctx.op("lz.cmp", idx, ctx.constant(np.arange(depth, dtype=np.int64).reshape(view)), predicate="eq")
    off = ctx.reshape(ctx.op("lz.slice", values, starts=[0], ends=[1]), [])
    on = ctx.reshape(ctx.op("lz.slice", values, starts=[1], ends=[2]), [])
    return ctx.op("lz.select", hit, on, off)


@converter("Compress")
def compress(ctx):
    x = ctx.input(0)
    condition = np.asarray(ctx.require_const(1, "the condition")).astype(bool).reshape(-1)
    axis = ctx.attr("axis", None)
    if axis is None:
        x = ctx.reshape(x, [product(ctx.shape(x))])
        axis = 0
    axis = axis_of(ctx, axis, ctx.rank(x))
    picked = np.nonzero(condition[: x.type.shape[axis]])[0].astype(np.int64)
    return ctx.op("lz.gather", x, ctx.constant(picked), axis=axis)


@converter("ArrayFeatureExtractor", domain="ai.onnx.ml")
def array_feature_extractor(ctx):
    x = ctx.input(0)
    indices = ctx.reshape(ctx.input(1), [-1]) if ctx.rank(ctx.input(1)) != 1 else ctx.input(1)
    return ctx.op("lz.gather", x, indices, axis=ctx.rank(x) - 1)


def element_index_tuples(ctx, indices, axis):
    """ScatterElements' addressing as ScatterND's: each index with the coordinates of its
    position along the other dims, stacked on a new last axis."""
    shape = ctx.shape(indices, "the indices")
    columns = []
    for d in range(len(shape)):
        if d == axis:
            columns.append(ctx.reshape(ctx.cast(indices, I64), list(shape) + [1]))
        else:
            view = [1] * len(shape)
            view[d] = shape[d]
            grid = np.broadcast_to(np.arange(shape[d], dtype=np.int64).reshape(view), shape)
            columns.append(ctx.constant(np.ascontiguousarray(grid).reshape(list(shape) + [1])))
    return ctx.op("lz.concat", *columns, axis=len(shape)) if len(columns) > 1 else columns[0]


def _reduction(ctx):
    reduction = ctx.attr("reduction", "none")
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise ctx.error(f"attribute 'reduction' must be none, add, mul, max or min, got {reduction!r}")
    return reduction


@converter("ScatterElements", "Scatter")
def scatter_elements(ctx):
    data, indices, updates = ctx.input(0), ctx.input(1), ctx.input(2)
    axis = axis_of(ctx, ctx.attr("axis", 0), ctx.rank(data))
    reduction = _reduction(ctx) if ctx.op_type == "ScatterElements" else "none"
    if ctx.rank(indices) != ctx.rank(data):
        raise ctx.error(f"indices {indices.type} must have the rank of the data {data.type}")
    tuples = element_index_tuples(ctx, indices, axis)
    return ctx.op("lz.scatter_nd", data, tuples, updates, reduction=reduction)


@converter("ScatterND")
def scatter_nd(ctx):
    return ctx.op("lz.scatter_nd", ctx.input(0), ctx.input(1), ctx.input(2), reduction=_reduction(ctx))


@converter("TopK")
def top_k(ctx):
    x = ctx.input(0)
    k = ctx.ints(1, "K")[0]
    axis = axis_of(ctx, ctx.attr("axis", -1), ctx.rank(x))
    ctx.attr("sorted", 1)  # the results are always sorted, which 'sorted = 0' allows too
    values, indices = ctx.create("lz.topk", [x], {"k": int(k), "axis": axis,
                                                  "largest": bool(ctx.attr("largest", 1))})
    return [values, indices]
