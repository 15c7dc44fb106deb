"""Shape and data-movement operators: Shape, Reshape, Slice, Concat, Pad, Einsum, ... (gathers and
scatters are in ``indexing.py``).

Shapes are static wherever the graph inputs' shapes are: Shape and Size give constants, and the
operators taking a shape, axes or indices as an input (Reshape, Expand, Slice, Unsqueeze, ...)
read it at import (``ctx.require_const``).
"""
from __future__ import annotations

import math
import string

import numpy as np

from lezero.ir.core import OpResult
from lezero.ir.dialect.broadcasting import try_broadcast_shapes
from lezero.ir.types import I1, I64
import lezero.onnx.element_types as element_types
from lezero.onnx.registry import converter
from lezero.onnx.ops.common import axes_of, axis_of, product


@converter("Shape")
def shape_(ctx):
    x = ctx.input(0)
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    dims = x.type.shape[slice(start, end)] if (start, end) != (0, None) else x.type.shape
    if any(d is None for d in dims):
        raise ctx.dynamic(f"the shape of {x.type} has dynamic dims: lezero needs them static to compute with "
                              "them (give the graph input static dims)")
    return ctx.constant(np.asarray(dims, np.int64))


@converter("Size")
def size(ctx):
    return ctx.constant(np.asarray(product(ctx.shape(ctx.input(0))), np.int64))


@converter("Reshape")
def reshape(ctx):
    x = ctx.input(0)
    target = ctx.ints(1, "the target shape")
    allowzero = ctx.attr("allowzero", 0)
    return ctx.reshape(x, resolve_reshape(ctx, x, target, allowzero))


def resolve_reshape(ctx, x, target, allowzero=0) -> list[int]:
    """ONNX's target shape as ``lz.reshape``'s: a 0 copies the input's dim (unless allowzero)."""
    out = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= ctx.rank(x):
                raise ctx.error(f"target shape {target} copies dim {i} (a 0), but the input {x.type} has rank "
                                f"{ctx.rank(x)}")
            d = x.type.shape[i]
            if d is None:
                if -1 in target or -1 in out:  # lz.reshape infers one dim, no more
                    raise ctx.dynamic(f"target shape {target} copies dynamic dim {i} and also has a -1 or "
                                      "copies another dynamic dim")
                d = -1
        out.append(d)
    if allowzero and 0 in out and -1 in out:
        raise ctx.error(f"target shape {target} has both a 0 and a -1 with allowzero=1")
    return out


@converter("Flatten")
def flatten(ctx):
    x = ctx.input(0)
    rank = ctx.rank(x)
    axis = ctx.attr("axis", 1)
    if not -rank <= axis <= rank:
        raise ctx.error(f"axis {axis} is out of range for rank {rank}")
    axis = axis + rank if axis < 0 else axis
    shape = x.type.shape
    outer, inner = shape[:axis], shape[axis:]
    sizes = [None if None in part else product(part) for part in (outer, inner)]
    if sizes.count(None) == 2:
        raise ctx.dynamic(f"cannot flatten {x.type} at axis {axis}: both parts have dynamic dims")
    return ctx.reshape(x, [-1 if s is None else s for s in sizes])


@converter("Squeeze")
def squeeze_axes_attribute(ctx):
    x = ctx.input(0)
    return squeeze(ctx, x, ctx.attr("axes", None))


@converter("Squeeze", since=13)
def squeeze_axes_input(ctx):
    x = ctx.input(0)
    return squeeze(ctx, x, ctx.ints(1, "axes"))


def squeeze(ctx, x, axes):
    """``x`` without the size-1 dims ``axes`` (every size-1 dim when None)."""
    shape = x.type.shape
    if axes is None:
        if None in shape:
            raise ctx.dynamic(f"squeezing every size-1 dim of {x.type} needs static dims")
        axes = [i for i, d in enumerate(shape) if d == 1]
    axes = axes_of(ctx, axes, len(shape))
    for a in axes:
        if shape[a] not in (1, None):
            raise ctx.error(f"cannot squeeze dim {a} of {x.type}: its size is not 1")
    return ctx.reshape(x, [1 if d is None and i in axes else (-1 if d is None else d)
                           for i, d in enumerate(shape) if i not in axes])


@converter("Unsqueeze")
def unsqueeze_axes_attribute(ctx):
    x = ctx.input(0)
    return unsqueeze(ctx, x, ctx.attr("axes"))


@converter("Unsqueeze", since=13)
def unsqueeze_axes_input(ctx):
    x = ctx.input(0)
    return unsqueeze(ctx, x, ctx.ints(1, "axes"))


def unsqueeze(ctx, x, axes):
    """``x`` with size-1 dims inserted at ``axes`` (of the result)."""
    rank = ctx.rank(x) + len(axes)
    axes = axes_of(ctx, axes, rank)
    dims = iter(x.type.shape)
    shape = [1 if i in axes else next(dims) for i in range(rank)]
    if shape.count(None) > 1:
        raise ctx.dynamic(f"unsqueezing {x.type} needs at most one dynamic dim")
    return ctx.reshape(x, [-1 if d is None else d for d in shape])


@converter("Transpose")
def transpose(ctx):
    x = ctx.input(0)
    perm = ctx.attr("perm", None)
    perm = list(reversed(range(ctx.rank(x)))) if perm is None else axes_of(ctx, perm, ctx.rank(x), "perm")
    return ctx.transpose(x, perm)


def broadcast_to(ctx, x, shape):
    shape = tuple(int(d) for d in shape)
    return x if x.type.shape == shape else ctx.op("lz.broadcast_to", x, shape=list(shape))


@converter("Expand")
def expand(ctx):
    x = ctx.input(0)
    target = ctx.ints(1, "the target shape")
    shape = try_broadcast_shapes(ctx.shape(x), tuple(target))
    if shape is None:
        raise ctx.error(f"cannot expand {x.type} to {target}: the shapes do not broadcast")
    return broadcast_to(ctx, x, shape)


@converter("Tile")
def tile(ctx):
    x = ctx.input(0)
    repeats = ctx.ints(1, "repeats")
    shape = ctx.shape(x)
    if len(repeats) != len(shape):
        raise ctx.error(f"repeats {repeats} must have one entry per dim of {x.type}")
    if all(r == 1 for r in repeats):
        return x
    interleaved = [d for s in shape for d in (1, s)]
    v = ctx.reshape(x, interleaved)
    v = broadcast_to(ctx, v, [d for r, s in zip(repeats, shape) for d in (r, s)])
    return ctx.reshape(v, [r * s for r, s in zip(repeats, shape)])


@converter("Concat")
def concat(ctx):
    values = [v for v in ctx.inputs if v is not None]
    axis = ctx.attr("axis")
    rank = ctx.rank(values[0])
    axis = axis_of(ctx, axis, rank)
    values = [v for v in values if v.type.shape[axis] != 0] or values[:1]
    if len(values) == 1:
        return values[0]
    return ctx.op("lz.concat", *values, axis=axis)


def slice_axis(ctx, x, axis: int, start: int, end: int, step: int = 1):
    if (start, step) == (0, 1) and end >= (x.type.shape[axis] or math.inf):
        return x
    return ctx.op("lz.slice", x, starts=[start], ends=[end], axes=[axis], steps=[step])


@converter("Split")
def split_sizes_attribute(ctx):
    return split(ctx, lambda: ctx.attr("split", None))


@converter("Split", since=13)
def split_sizes_input(ctx):
    return split(ctx, lambda: ctx.ints(1, "split"))


@converter("Split", since=18)
def split_num_outputs(ctx):
    return split(ctx, lambda: ctx.ints(1, "split"), ctx.attr("num_outputs", None))


def split(ctx, read_sizes, n=None):
    """Input 0 in pieces along ``axis``: of the sizes ``read_sizes()`` gives (read once the axis is
    known to be static), else ``n`` (or one per output) equal pieces, the last one smaller."""
    x = ctx.input(0)
    axis = axis_of(ctx, ctx.attr("axis", 0), ctx.rank(x))
    size = x.type.shape[axis]
    if size is None:
        raise ctx.dynamic(f"splitting dynamic dim {axis} of {x.type}")
    sizes = read_sizes()
    outputs = len(ctx.node.output)
    if sizes is None:
        n = n or outputs
        chunk = size // n if size % n == 0 else size // n + 1
        sizes = [chunk] * n
        sizes[-1] += size - sum(sizes)
    if sum(sizes) != size or any(s < 0 for s in sizes):
        raise ctx.error(f"split sizes {list(sizes)} do not add up to dim {axis} of {x.type}")
    out, start = [], 0
    for s in sizes:
        out.append(ctx.op("lz.slice", x, starts=[start], ends=[start + s], axes=[axis]))
        start += s
    return out


@converter("Slice")
def slice_(ctx):
    x = ctx.input(0)
    if ctx.const(1) is None:
        rows = _rows_from_a_run_time_start(ctx, x)
        if rows is not None:
            return rows
    starts, ends = ctx.ints(1, "starts"), ctx.ints(2, "ends")
    axes, steps = ctx.ints(3, "axes"), ctx.ints(4, "steps")
    axes = list(range(len(starts))) if axes is None else axes_of(ctx, axes, ctx.rank(x))
    steps = [1] * len(starts) if steps is None else steps
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise ctx.error("starts, ends, axes and steps must have the same length")
    clamp = (-(1 << 62), 1 << 62)
    starts = [min(max(s, clamp[0]), clamp[1]) for s in starts]
    ends = [min(max(e, clamp[0]), clamp[1]) for e in ends]
    if not starts:
        return x
    return ctx.op("lz.slice", x, starts=starts, ends=ends, axes=axes, steps=steps)


def _rows_from_a_run_time_start(ctx, x):
    """``Slice(x, s, s + c)`` along one axis with ``s`` computed at run time (a loop's iteration
    number, say) and ``c`` a constant: an ``lz.gather`` of the ``c`` rows ``s + arange(c)``.  Only
    when ``s``'s range (``_bounds``) keeps all ``c`` rows inside the axis, so ONNX's clamping never
    shortens the result, which must have a static length; None otherwise (the caller then needs
    ``s`` known at import)."""
    axes, steps = ctx.const(3), ctx.const(4)
    if (ctx.has_input(3) and axes is None) or (ctx.has_input(4) and steps is None):
        return None
    starts, ends = ctx.input(1), ctx.input(2)
    if starts.type.num_elements != 1 or (steps is not None and np.asarray(steps).reshape(-1).tolist() != [1]):
        return None
    start, end = _through_reshapes(starts), _through_reshapes(ends)
    add = end.op if isinstance(end, OpResult) and end.op.name == "lz.add" else None
    if add is None or start not in [_through_reshapes(v) for v in add.operands]:
        return None
    offset = ctx.constant_of(add.operands[1] if _through_reshapes(add.operands[0]) is start else add.operands[0])
    bounds, axis = _bounds(ctx, start), axis_of(ctx, 0 if axes is None else int(np.asarray(axes).reshape(-1)[0]),
                                                ctx.rank(x))
    size = x.type.shape[axis]
    if offset is None or offset.size != 1 or bounds is None or size is None:
        return None
    count, (lo, hi) = int(offset.reshape(-1)[0]), bounds
    if count < 1:
        return None
    if 0 <= lo and hi + count <= size:
        first = ctx.cast(start, I64)
    elif -size <= lo and hi + count < 0:  # ends stay negative: both count from the end
        first = ctx.op("lz.add", ctx.cast(start, I64), ctx.scalar(size, I64))
    else:
        return None
    rows = ctx.op("lz.add", ctx.reshape(first, [1]), ctx.constant(np.arange(count, dtype=np.int64), I64))
    return ctx.op("lz.gather", x, rows, axis=axis)


def _through_reshapes(v):
    while isinstance(v, OpResult) and v.op.name == "lz.reshape":
        v = v.op.operands[0]
    return v


def _bounds(ctx, v):
    """The range ``(lo, hi)`` of every element of the integer ``v`` where the importer can tell
    (constants, a loop's index, reshapes, casts, sums and differences of them), else None."""
    known = ctx.constant_of(v)
    if known is not None:
        return (int(np.min(known)), int(np.max(known))) if known.size and known.dtype.kind in "iu" else None
    if v in ctx.importer.bounds:
        return ctx.importer.bounds[v]
    op = v.op if isinstance(v, OpResult) else None
    if op is None or not v.type.element_type.is_int:
        return None
    if op.name in ("lz.reshape", "lz.cast"):
        inner = _bounds(ctx, op.operands[0]) if op.operands[0].type.element_type.is_int else None
        limits = np.iinfo(v.type.element_type.numpy_dtype)
        return inner if inner is not None and limits.min <= inner[0] and inner[1] <= limits.max else None
    if op.name in ("lz.add", "lz.sub"):
        a, b = (_bounds(ctx, operand) for operand in op.operands)
        if a is None or b is None:
            return None
        return (a[0] + b[0], a[1] + b[1]) if op.name == "lz.add" else (a[0] - b[1], a[1] - b[0])
    return None


@converter("Pad")
def pad(ctx):
    x = ctx.input(0)
    rank = ctx.rank(x)
    mode = ctx.attr("mode", "constant")
    pads = ctx.ints(1, "pads")
    value = ctx.const(2)
    if ctx.has_input(2) and value is None:
        value = ctx.require_const(2, "the constant value")
    axes = ctx.ints(3, "axes")
    value = 0 if value is None else np.asarray(value).reshape(-1)[0].item() if np.size(value) else 0
    axes = list(range(rank)) if axes is None else axes_of(ctx, axes, rank)
    if len(pads) != 2 * len(axes):
        raise ctx.error(f"pads {pads} must have two entries per padded axis ({len(axes)} axes)")
    full = [0] * (2 * rank)
    for i, a in enumerate(axes):
        full[a], full[rank + a] = pads[i], pads[len(axes) + i]
    if not any(full):
        return x
    if mode == "constant":
        if ctx.dtype(x) == I1:
            value = float(bool(value))
        return ctx.op("lz.pad", x, pads=full, value=float(value))
    if mode not in ("reflect", "edge", "wrap"):
        raise ctx.unsupported(f"pad mode {mode!r} is not supported (constant, reflect, edge, wrap are)")
    shape = ctx.shape(x)
    for a in range(rank):
        begin, end = full[a], full[rank + a]
        if begin < 0 or end < 0:
            x = ctx.op("lz.slice", x, starts=[max(-begin, 0)], ends=[shape[a] - max(-end, 0)], axes=[a])
            shape = x.type.shape
            begin, end = max(begin, 0), max(end, 0)
        if begin or end:
            x = _pad_axis(ctx, x, a, begin, end, mode)
            shape = x.type.shape
    return x


def _pad_axis(ctx, x, axis, begin, end, mode):
    n = x.type.shape[axis]
    pieces = []
    if mode == "reflect" and (begin >= n or end >= n):
        raise ctx.unsupported(f"reflect padding of {max(begin, end)} along a dim of size {n}")
    if mode == "wrap" and (begin > n or end > n):
        raise ctx.unsupported(f"wrap padding of {max(begin, end)} along a dim of size {n}")
    if begin:
        if mode == "edge":
            edge = ctx.op("lz.slice", x, starts=[0], ends=[1], axes=[axis])
            shape = list(x.type.shape)
            shape[axis] = begin
            pieces.append(broadcast_to(ctx, edge, shape))
        elif mode == "reflect":
            pieces.append(ctx.op("lz.slice", x, starts=[begin], ends=[0], axes=[axis], steps=[-1]))
        else:
            pieces.append(ctx.op("lz.slice", x, starts=[n - begin], ends=[n], axes=[axis]))
    pieces.append(x)
    if end:
        if mode == "edge":
            edge = ctx.op("lz.slice", x, starts=[n - 1], ends=[n], axes=[axis])
            shape = list(x.type.shape)
            shape[axis] = end
            pieces.append(broadcast_to(ctx, edge, shape))
        elif mode == "reflect":
            stop = n - 2 - end
            pieces.append(ctx.op("lz.slice", x, starts=[n - 2], ends=[stop if stop >= 0 else -n - 1], axes=[axis],
                                 steps=[-1]))
        else:
            pieces.append(ctx.op("lz.slice", x, starts=[0], ends=[end], axes=[axis]))
    return ctx.op("lz.concat", *pieces, axis=axis)


@converter("Constant")
def constant(ctx):
    for key in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if ctx.has_attr(key):
            value = ctx.attr(key)
            break
    else:
        for key in ("value_string", "value_strings", "sparse_value"):
            if ctx.has_attr(key):
                raise ctx.unsupported(f"attribute '{key}': string and sparse constants are not supported")
        raise ctx.error("has no value attribute")
    if key in ("value_float", "value_floats"):
        value = np.asarray(value, np.float32)
    elif key in ("value_int", "value_ints"):
        value = np.asarray(value, np.int64)
    return ctx.constant(value)


@converter("ConstantOfShape")
def constant_of_shape(ctx):
    shape = ctx.ints(0, "the shape")
    value = ctx.attr("value", None)
    value = np.zeros((), np.float32) if value is None else np.asarray(value).reshape(-1)[:1].reshape(())
    v = ctx.constant(value)
    return broadcast_to(ctx, v, shape)


@converter("Range")
def range_(ctx):
    """A constant: its length depends on the values, which must be known at import."""
    start, limit, delta = (ctx.require_const(i, name) for i, name in enumerate(("start", "limit", "delta")))
    count = max(int(math.ceil((limit.item() - start.item()) / delta.item())), 0)
    return ctx.constant((start + np.arange(count) * delta).astype(start.dtype), ctx.dtype(ctx.input(0)))


def _window(ctx, formula):
    size = int(np.asarray(ctx.require_const(0, "size")).reshape(-1)[0])
    periodic = ctx.attr("periodic", 1)
    code = ctx.attr("output_datatype", 1)
    et = element_types.from_onnx(code)
    if et is None:
        raise ctx.unsupported(f"output_datatype {element_types.onnx_type_name(code)}")
    n = np.arange(size, dtype=np.float64)
    return ctx.constant(formula(n, size if periodic else size - 1), et)


@converter("HannWindow")
def hann_window(ctx):
    return _window(ctx, lambda n, m: np.sin(n * np.pi / m) ** 2)


@converter("HammingWindow")
def hamming_window(ctx):
    return _window(ctx, lambda n, m: 25 / 46 - np.cos(n * np.pi * 2 / m) * (1 - 25 / 46))


@converter("BlackmanWindow")
def blackman_window(ctx):
    return _window(ctx, lambda n, m: 0.42 - 0.5 * np.cos(n * np.pi * 2 / m) + 0.08 * np.cos(n * np.pi * 4 / m))


@converter("EyeLike")
def eye_like(ctx):
    x = ctx.input(0)
    shape = ctx.shape(x)
    if len(shape) != 2:
        raise ctx.error(f"input must be 2-D, got {x.type}")
    dtype = ctx.attr("dtype", None)
    et = ctx.dtype(x) if dtype is None else element_types.from_onnx(dtype)
    if et is None:
        raise ctx.unsupported(f"dtype {element_types.onnx_type_name(dtype)} is not supported")
    return ctx.constant(np.eye(shape[0], shape[1], k=ctx.attr("k", 0)), et)


@converter("Trilu")
def trilu(ctx):
    x = ctx.input(0)
    k = ctx.ints(1, "k")
    k = 0 if k is None else k[0]
    upper = ctx.attr("upper", 1)
    shape = ctx.shape(x)
    rows, cols = shape[-2], shape[-1]
    i = np.arange(rows).reshape(rows, 1)
    j = np.arange(cols).reshape(1, cols)
    keep = (j - i >= k) if upper else (j - i <= k)
    return ctx.op("lz.select", ctx.constant(keep), x, ctx.scalar(0, x))


@converter("SpaceToDepth")
def space_to_depth(ctx):
    x = ctx.input(0)
    bs = ctx.attr("blocksize")
    mode = ctx.attr("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise ctx.error(f"attribute 'mode' must be DCR or CRD, got {mode!r}")
    n, c, h, w = ctx.shape(x)
    v = ctx.reshape(x, [n, c, h // bs, bs, w // bs, bs])
    v = ctx.transpose(v, [0, 3, 5, 1, 2, 4] if mode == "DCR" else [0, 1, 3, 5, 2, 4])
    return ctx.reshape(v, [n, c * bs * bs, h // bs, w // bs])


@converter("DepthToSpace")
def depth_to_space(ctx):
    x = ctx.input(0)
    bs = ctx.attr("blocksize")
    mode = ctx.attr("mode", "DCR")
    n, c, h, w = ctx.shape(x)
    if mode == "DCR":
        v = ctx.transpose(ctx.reshape(x, [n, bs, bs, c // (bs * bs), h, w]), [0, 3, 4, 1, 5, 2])
    elif mode == "CRD":
        v = ctx.transpose(ctx.reshape(x, [n, c // (bs * bs), bs, bs, h, w]), [0, 1, 4, 2, 5, 3])
    else:
        raise ctx.error(f"attribute 'mode' must be DCR or CRD, got {mode!r}")
    return ctx.reshape(v, [n, c // (bs * bs), h * bs, w * bs])


@converter("CenterCropPad")
def center_crop_pad(ctx):
    x = ctx.input(0)
    target = ctx.ints(1, "the shape")
    rank = ctx.rank(x)
    axes = ctx.attr("axes", None)
    axes = list(range(rank)) if axes is None else axes_of(ctx, axes, rank)
    if len(target) != len(axes):
        raise ctx.error(f"shape {target} must have one entry per axis {axes}")
    for a, t in zip(axes, target):
        n = ctx.shape(x)[a]
        if t < n:
            start = (n - t) // 2
            x = ctx.op("lz.slice", x, starts=[start], ends=[start + t], axes=[a])
        elif t > n:
            pads = [0] * (2 * rank)
            pads[a] = (t - n) // 2
            pads[rank + a] = t - n - pads[a]
            x = ctx.op("lz.pad", x, pads=pads)
    return x


@converter("Dropout")
def dropout_ratio_attribute(ctx):
    """Before opset 12 Dropout is always the inference one."""
    ctx.ignore_attrs("seed")
    x = ctx.input(0)
    return dropout(ctx, x, ctx.attr("ratio", 0.5), False)


@converter("Dropout", since=12)
def dropout_ratio_input(ctx):
    """The ratio and training mode are inputs, which must be known at import when training."""
    ctx.ignore_attrs("seed")
    x = ctx.input(0)
    training = ctx.const(2)
    if ctx.has_input(2) and training is None:
        training = ctx.require_const(2, "training_mode")
    ratio = ctx.const(1)
    if ctx.has_input(1) and ratio is None and training is not None and np.asarray(training).reshape(-1)[0]:
        ratio = ctx.require_const(1, "ratio")
    ratio = 0.5 if ratio is None else float(np.asarray(ratio).reshape(-1)[0])
    return dropout(ctx, x, ratio, bool(training is not None and np.asarray(training).reshape(-1)[0]))


def dropout(ctx, x, ratio, training):
    """Inference: the input unchanged and a mask of ones.  Training mode with a nonzero ratio
    draws random numbers, which lezero does not do."""
    if training and ratio != 0:
        raise ctx.unsupported("training mode with a nonzero ratio draws random numbers, which lezero does not do")
    outputs = [x]
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        outputs.append(broadcast_to(ctx, ctx.constant(np.ones((), bool)), ctx.shape(x)))
    return outputs


@converter("BitCast")
def bit_cast(ctx):
    to = ctx.attr("to")
    et = element_types.from_onnx(to)
    if et is None:
        raise ctx.unsupported(f"bit cast to {element_types.onnx_type_name(to)}, which lezero does not support")
    return ctx.op("lz.bitcast", ctx.input(0), to=et)


@converter("CumSum")
def cumsum(ctx):
    x = ctx.input(0)
    axis = int(np.asarray(ctx.require_const(1, "axis")).reshape(-1)[0])
    return ctx.op("lz.cumulative", x, combine="add", axis=axis_of(ctx, axis, ctx.rank(x)),
                  exclusive=bool(ctx.attr("exclusive", 0)), reverse=bool(ctx.attr("reverse", 0)))


@converter("CumProd")
def cumprod(ctx):
    x = ctx.input(0)
    axis = int(np.asarray(ctx.require_const(1, "axis")).reshape(-1)[0])
    return ctx.op("lz.cumulative", x, combine="mul", axis=axis_of(ctx, axis, ctx.rank(x)),
                  exclusive=bool(ctx.attr("exclusive", 0)), reverse=bool(ctx.attr("reverse", 0)))


# --- Einsum ---------------------------------------------------------------------------------------

@converter("Einsum")
def einsum(ctx):
    """Operands contracted pairwise as batched matmuls (transpose + reshape around ``lz.matmul``);
    repeated letters within an operand take its diagonal, letters no one else needs are summed
    first."""
    equation = ctx.attr("equation").replace(" ", "")
    values = [v for v in ctx.inputs if v is not None]
    lhs, arrow, rhs = equation.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(values):
        raise ctx.error(f"equation {equation!r} has {len(terms)} operands, the node {len(values)}")
    pool = [c for c in string.ascii_letters if c not in equation]
    ellipsis = max((ctx.rank(v) - (len(t) - 3) for t, v in zip(terms, values) if "..." in t), default=0)
    extra = "".join(pool[:ellipsis])
    parsed = []
    for t, v in zip(terms, values):
        if "..." in t:
            n = ctx.rank(v) - (len(t) - 3)
            t = t.replace("...", extra[ellipsis - n:])
        if len(t) != ctx.rank(v) or not all(c.isalpha() for c in t):
            raise ctx.error(f"term {t!r} of equation {equation!r} does not fit operand {v.type}")
        parsed.append(t)
    if arrow:
        out = rhs.replace("...", extra)
    else:
        counts = {c: lhs.count(c) for c in set(lhs) if c.isalpha()}
        out = extra + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in extra))
    sizes: dict = {}
    for t, v in zip(parsed, values):
        for c, d in zip(t, ctx.shape(v)):
            if sizes.get(c, 1) == 1:
                sizes[c] = d
            elif d not in (1, sizes[c]):
                raise ctx.error(f"letter {c!r} of equation {equation!r} has sizes {sizes[c]} and {d}")
    operands = [_diagonal(ctx, v, t) for t, v in zip(parsed, values)]
    # sum letters only one operand has and the output does not
    pending = []
    for i, (v, t) in enumerate(operands):
        others = out + "".join(tt for j, (_, tt) in enumerate(operands) if j != i)
        pending.append(_sum_letters(ctx, v, t, [c for c in t if c not in others]))
    v, t = pending[0]
    for i in range(1, len(pending)):
        w, u = pending[i]
        keep = out + "".join(tt for _, tt in pending[i + 1:])
        v, t = _contract(ctx, v, t, w, u, keep, sizes)
    v, t = _sum_letters(ctx, v, t, [c for c in t if c not in out])
    if sorted(t) != sorted(out):
        raise ctx.error(f"equation {equation!r}: output letters {out!r} are not all in the inputs")
    v = ctx.transpose(v, [t.index(c) for c in out])
    return broadcast_to(ctx, v, [sizes[c] for c in out])


def _diagonal(ctx, v, term):
    """Repeated letters: keep the diagonal (a gather on the two dims flattened into one)."""
    while len(set(term)) != len(term):
        c = next(c for c in term if term.count(c) > 1)
        p, q = term.index(c), term.index(c, term.index(c) + 1)
        rest = [i for i in range(len(term)) if i not in (p, q)]
        v = ctx.transpose(v, rest + [p, q])
        shape = v.type.shape
        n = shape[-1]
        v = ctx.reshape(v, list(shape[:-2]) + [n * n])
        v = ctx.op("lz.gather", v, ctx.constant(np.arange(n, dtype=np.int64) * (n + 1)), axis=len(shape) - 2)
        term = "".join(term[i] for i in rest) + c
    return v, term


def _sum_letters(ctx, v, term, letters):
    if not letters:
        return v, term
    axes = [term.index(c) for c in letters]
    return ctx.op("lz.reduce_sum", v, axes=axes), "".join(c for c in term if c not in letters)


def _contract(ctx, a, ta, b, tb, keep, sizes):
    batch = [c for c in ta if c in tb and c in keep]
    contracted = [c for c in ta if c in tb and c not in keep]
    a_free = [c for c in ta if c not in tb]
    b_free = [c for c in tb if c not in ta]

    def arrange(v, t, order, groups):
        v = ctx.transpose(v, [t.index(c) for c in order])
        v = broadcast_to(ctx, v, [sizes[c] if c in batch or c in contracted else v.type.shape[i]
                                  for i, c in enumerate(order)])
        return ctx.reshape(v, [product(sizes[c] if c in batch or c in contracted else v.type.shape[order.index(c)]
                                       for c in g) for g in groups])

    a3 = arrange(a, ta, batch + a_free + contracted, [batch, a_free, contracted])
    b3 = arrange(b, tb, batch + contracted + b_free, [batch, contracted, b_free])
    product_ = ctx.op("lz.matmul", a3, b3)
    dims = [sizes[c] for c in batch] + [a.type.shape[ta.index(c)] for c in a_free] + \
        [b.type.shape[tb.index(c)] for c in b_free]
    return ctx.reshape(product_, dims), "".join(batch + a_free + b_free)
