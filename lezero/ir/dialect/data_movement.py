"""Ops that move data without arithmetic: reshape, transpose, broadcast_to, slice, as_strided,
concat, pad, gather.

Their gradients move the cotangent back: reshape and transpose invert themselves, broadcast_to
sums, slice pads with zeros (zeros inserted between the elements a step skipped, the order
reversed for a negative step), concat slices, pad crops (and pads what it cropped), and gather
adds each cotangent row to the row it was taken from, as a matmul with a one-hot matrix of the
indices (``numel(indices) x size of the axis`` elements: fine for the classification losses and
small tables it is used on), or beyond ``ONE_HOT_LIMIT`` elements (large embedding tables,
``Tensor.gather``'s flattened input) as an ``lz.scatter_nd`` adding the rows.
"""
from __future__ import annotations

import numpy as np

from lezero.ir.dialect.axes import normalize_axes, normalize_axis
from lezero.ir.dialect.broadcasting import broadcasts_to
from lezero.ir.dialect.constraints import INTEGER, check_element_type, same_element_type
from lezero.ir.opdef import PURE, AttrSpec, OpDef, OpError, register
from lezero.ir.types import I64, TensorType, format_shape

_PURE = frozenset({PURE})
# the most elements (indices x the gathered axis) gather's gradient spends on a one-hot matmul;
# beyond, an lz.scatter_nd adds the cotangent rows in place (one pass, but serial on the CPU)
ONE_HOT_LIMIT = 1 << 20


def _static_shape(v, op_name: str) -> tuple:
    if not v.type.is_static:
        raise OpError(f"autodiff of {op_name} needs static shapes, got {v.type} (bind the dims first)")
    return v.type.shape


def _product(dims) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


def reshape_result_shape(shape, new_shape) -> tuple:
    """``new_shape`` with its one ``-1`` resolved (None when ``shape`` is dynamic)."""
    new_shape = tuple(new_shape)
    if sum(d == -1 for d in new_shape) > 1 or any(d < -1 for d in new_shape):
        raise OpError(f"attribute 'shape' may hold sizes >= 0 and at most one -1, got {list(new_shape)}")
    known = _product(d for d in new_shape if d != -1)
    if any(d is None for d in shape):
        return tuple(None if d == -1 else d for d in new_shape)
    count = _product(shape)
    if -1 in new_shape:
        if known == 0 or count % known:
            raise OpError(f"cannot reshape {format_shape(shape)} ({count} elements) to "
                          f"{format_shape(new_shape)}: no size for -1 fits")
        return tuple(count // known if d == -1 else d for d in new_shape)
    if known != count:
        raise OpError(f"cannot reshape {format_shape(shape)} ({count} elements) to "
                      f"{format_shape(new_shape)} ({known} elements)")
    return new_shape


@register
class ReshapeOp(OpDef):
    """``lz.reshape {shape}``: same elements in row-major order; one ``-1`` takes what is left."""

    name = "lz.reshape"
    operands = ("input",)
    traits = _PURE
    attributes = {"shape": AttrSpec("i64_array")}
    summary = "change the shape"

    def infer(self, operand_types, attrs):
        (x,) = operand_types
        return [x.with_shape(reshape_result_shape(x.shape, attrs.shape))]

    def reference(self, attrs, x):
        return x.reshape(attrs.shape)

    def grad(self, b, op, attrs, dy):
        return [b.reshape(dy, op.operands[0].type.shape)]


@register
class TransposeOp(OpDef):
    """``lz.transpose {perm}``: result dim i is input dim ``perm[i]``; no perm reverses the dims."""

    name = "lz.transpose"
    operands = ("input",)
    traits = _PURE
    attributes = {"perm": AttrSpec("i64_array", None)}
    summary = "permute the dims"

    @staticmethod
    def permutation(attrs, rank) -> tuple:
        if attrs.perm is None:
            return tuple(reversed(range(rank)))
        if sorted(attrs.perm) != list(range(rank)):
            raise OpError(f"attribute 'perm' must be a permutation of 0..{rank - 1}, got {list(attrs.perm)}")
        return attrs.perm

    def infer(self, operand_types, attrs):
        (x,) = operand_types
        return [x.with_shape(tuple(x.shape[p] for p in self.permutation(attrs, x.rank)))]

    def reference(self, attrs, x):
        return np.transpose(x, self.permutation(attrs, x.ndim))

    def grad(self, b, op, attrs, dy):
        perm = self.permutation(attrs, dy.type.rank)
        inverse = [0] * len(perm)
        for i, p in enumerate(perm):
            inverse[p] = i
        return [b.transpose(dy, inverse)]


@register
class BroadcastToOp(OpDef):
    """``lz.broadcast_to {shape}``: numpy's ``broadcast_to`` (one-way: the input stretches)."""

    name = "lz.broadcast_to"
    operands = ("input",)
    traits = _PURE
    attributes = {"shape": AttrSpec("i64_array")}
    summary = "stretch size-1 dims"

    def infer(self, operand_types, attrs):
        (x,) = operand_types
        if any(d < 0 for d in attrs.shape):
            raise OpError(f"attribute 'shape' must hold sizes >= 0, got {list(attrs.shape)}")
        if not broadcasts_to(x.shape, attrs.shape):
            raise OpError(f"cannot broadcast {format_shape(x.shape)} to {format_shape(attrs.shape)}")
        return [x.with_shape(attrs.shape)]

    def reference(self, attrs, x):
        return np.broadcast_to(x, attrs.shape)

    def grad(self, b, op, attrs, dy):
        return [b.sum_to(dy, op.operands[0].type.shape)]


@register
class SliceOp(OpDef):
    """``lz.slice {starts, ends, axes, steps}`` with ONNX/numpy semantics: negative indices count
    from the end, out-of-range ones clamp, steps may be negative (never 0).  ``axes`` default to
    ``0..len(starts)-1``, ``steps`` to 1."""

    name = "lz.slice"
    operands = ("input",)
    traits = _PURE
    attributes = {
        "starts": AttrSpec("i64_array"),
        "ends": AttrSpec("i64_array"),
        "axes": AttrSpec("i64_array", None),
        "steps": AttrSpec("i64_array", None),
    }
    summary = "a strided window"

    @staticmethod
    def slices(attrs, rank) -> list:
        """One Python ``slice`` per dim."""
        n = len(attrs.starts)
        axes = attrs.axes if attrs.axes is not None else tuple(range(n))
        steps = attrs.steps if attrs.steps is not None else (1,) * n
        for key, values in (("ends", attrs.ends), ("axes", axes), ("steps", steps)):
            if len(values) != n:
                raise OpError(f"attributes 'starts' and '{key}' must have the same length, "
                              f"got {list(attrs.starts)} and {list(values)}")
        if 0 in steps:
            raise OpError(f"attribute 'steps' must not hold 0, got {list(steps)}")
        out = [slice(None)] * rank
        for axis, start, end, step in zip(normalize_axes(axes, rank), attrs.starts, attrs.ends, steps):
            out[axis] = slice(start, end, step)
        return out

    def infer(self, operand_types, attrs):
        (x,) = operand_types
        shape = tuple(None if d is None else len(range(*s.indices(d)))
                      for d, s in zip(x.shape, self.slices(attrs, x.rank)))
        return [x.with_shape(shape)]

    def reference(self, attrs, x):
        return x[tuple(self.slices(attrs, x.ndim))]

    def grad(self, b, op, attrs, dy):
        """``dy`` put back where the slice took it from, zeros elsewhere: reversed along axes with a
        negative step, zeros inserted after each element along axes with a step > 1 (reshape to
        ``n x 1``, pad to ``n x step``, reshape to ``n*step``), then padded to the input's shape."""
        x = op.operands[0]
        shape = _static_shape(x, self.name)
        picked = [range(*s.indices(d)) for d, s in zip(shape, self.slices(attrs, x.type.rank))]
        if any(len(r) == 0 for r in picked):
            return [b.zeros(x.type)]
        reversed_axes = [a for a, r in enumerate(picked) if len(r) > 1 and r.step < 0]
        if reversed_axes:
            dy = b.op("lz.slice", dy, starts=[-1] * len(reversed_axes),
                      ends=[-len(picked[a]) - 1 for a in reversed_axes], axes=reversed_axes,
                      steps=[-1] * len(reversed_axes))
        steps = [abs(r.step) if len(r) > 1 else 1 for r in picked]
        if any(st > 1 for st in steps):
            split = [d for r, st in zip(picked, steps) for d in ((len(r), 1) if st > 1 else (len(r),))]
            ends = [e for st in steps for e in ((0, st - 1) if st > 1 else (0,))]
            dy = b.reshape(dy, split)
            dy = b.op("lz.pad", dy, pads=[0] * len(split) + ends)
            dy = b.reshape(dy, [len(r) * st for r, st in zip(picked, steps)])
        begins = [min(r[0], r[-1]) for r in picked]
        ends = [d - lo - len(r) * st for d, lo, r, st in zip(shape, begins, picked, steps)]
        if any(begins) or any(ends):
            dy = b.op("lz.pad", dy, pads=begins + ends)
        return [dy]


def strided_positions(shape, strides, offset: int) -> np.ndarray:
    """The row-major storage position of each element of the strided view ``(shape, strides,
    offset)``, in the view's own row-major order (int64)."""
    positions = np.full(tuple(shape), offset, np.int64)
    for axis, (size, stride) in enumerate(zip(shape, strides)):
        positions += (np.arange(size, dtype=np.int64) * stride).reshape((size,) + (1,) * (len(shape) - axis - 1))
    return positions


@register
class AsStridedOp(OpDef):
    """``lz.as_strided {shape, strides, offset = 0}``: PyTorch's ``as_strided`` over the input's
    row-major elements: ``out[i] = flat(x)[offset + sum_k i_k strides[k]]`` (strides in elements,
    >= 0; several results may read one element: ``expand``, ``unfold``).  How the eager engine
    reads a non-contiguous view without copying it: the kernel's load is that index arithmetic.
    Its gradient adds each cotangent element into the element it was read from."""

    name = "lz.as_strided"
    operands = ("input",)
    traits = _PURE
    attributes = {"shape": AttrSpec("i64_array"), "strides": AttrSpec("i64_array"), "offset": AttrSpec("i64", 0)}
    summary = "a strided view of the elements"

    def infer(self, operand_types, attrs):
        (x,) = operand_types
        shape, strides = tuple(attrs.shape), tuple(attrs.strides)
        if len(shape) != len(strides):
            raise OpError(f"attributes 'shape' and 'strides' must have the same length, got {list(shape)} and "
                          f"{list(strides)}")
        if any(d < 0 for d in shape) or any(s < 0 for s in strides) or attrs.offset < 0:
            raise OpError(f"shape, strides and offset must be >= 0, got {list(shape)}, {list(strides)}, {attrs.offset}")
        if x.is_static and 0 not in shape:
            last = attrs.offset + sum((d - 1) * s for d, s in zip(shape, strides))
            if last >= _product(x.shape):
                raise OpError(f"a view of shape {format_shape(shape)}, strides {list(strides)} and offset "
                              f"{attrs.offset} reads element {last} of {x}, which has {_product(x.shape)}")
        return [x.with_shape(shape)]

    def reference(self, attrs, x):
        return np.ascontiguousarray(x).reshape(-1)[strided_positions(attrs.shape, attrs.strides, attrs.offset)]

    def grad(self, b, op, attrs, dy):
        x = op.operands[0]
        shape = _static_shape(x, self.name)
        count = _product(attrs.shape)
        if count == 0:
            return [b.zeros(x.type)]
        positions = strided_positions(attrs.shape, attrs.strides, attrs.offset).reshape(count, 1)
        flat = b.op("lz.scatter_nd", b.zeros(x.type.with_shape((_product(shape),))), b.constant(positions),
                    b.reshape(dy, (count,)), reduction="add")
        return [b.reshape(flat, shape)]


@register
class ConcatOp(OpDef):
    """``lz.concat(x0, x1, ...) {axis}``: join along ``axis``; the other dims must agree."""

    name = "lz.concat"
    operands = ("inputs",)
    variadic = True
    traits = _PURE
    attributes = {"axis": AttrSpec("i64")}
    summary = "join tensors along an axis"

    def infer(self, operand_types, attrs):
        et = same_element_type(operand_types)
        rank = operand_types[0].rank
        for t in operand_types[1:]:
            if t.rank != rank:
                raise OpError(f"operands must have the same rank, got {operand_types[0]} and {t}")
        axis = normalize_axis(attrs.axis, rank)
        shape = []
        for i in range(rank):
            dims = [t.shape[i] for t in operand_types]
            if i == axis:
                shape.append(None if None in dims else sum(dims))
                continue
            static = {d for d in dims if d is not None}
            if len(static) > 1:
                shapes = " and ".join(sorted({format_shape(t.shape) for t in operand_types}))
                raise OpError(f"operand shapes {shapes} differ in dim {i}, not only in the concat axis {axis}")
            shape.append(static.pop() if static else None)
        return [TensorType(tuple(shape), et)]

    def reference(self, attrs, *inputs):
        return np.concatenate(inputs, axis=attrs.axis)

    def grad(self, b, op, attrs, dy):
        axis = normalize_axis(attrs.axis, dy.type.rank)
        out, offset = [], 0
        for x in op.operands:
            size = x.type.shape[axis]
            if size is None:
                raise OpError(f"autodiff of {self.name} needs static sizes along the axis, got {x.type}")
            out.append(b.op("lz.slice", dy, starts=[offset], ends=[offset + size], axes=[axis]))
            offset += size
        return out


@register
class PadOp(OpDef):
    """``lz.pad {pads, value = 0.0}``: constant padding; ``pads`` are ``[begin_0, ..., begin_{r-1},
    end_0, ..., end_{r-1}]`` as in ONNX, and a negative pad crops."""

    name = "lz.pad"
    operands = ("input",)
    traits = _PURE
    attributes = {"pads": AttrSpec("i64_array"), "value": AttrSpec("f64", 0.0)}
    summary = "pad with a constant"

    def infer(self, operand_types, attrs):
        (x,) = operand_types
        pads = attrs.pads
        if len(pads) != 2 * x.rank:
            raise OpError(f"attribute 'pads' must have 2 x rank = {2 * x.rank} values, got {list(pads)}")
        shape = []
        for i, d in enumerate(x.shape):
            if d is None:
                shape.append(None)
                continue
            begin, end = pads[i], pads[x.rank + i]
            if max(-begin, 0) + max(-end, 0) > d:
                raise OpError(f"pads {list(pads)} crop more than the {d} elements of dim {i}")
            shape.append(d + begin + end)
        return [x.with_shape(tuple(shape))]

    def reference(self, attrs, x):
        r = x.ndim
        if r == 0:
            return x
        begins, ends = attrs.pads[:r], attrs.pads[r:]
        # crop the negative pads, then pad the positive ones
        x = x[tuple(slice(max(-b, 0), d - max(-e, 0)) for b, e, d in zip(begins, ends, x.shape))]
        value = np.asarray(attrs.value).astype(x.dtype) if x.dtype.kind != "b" else attrs.value != 0
        widths = [(max(b, 0), max(e, 0)) for b, e in zip(begins, ends)]
        return np.pad(x, widths, constant_values=value)

    def grad(self, b, op, attrs, dy):
        """The padding cropped off again, and zeros where the pad cropped: a pad by ``-pads``."""
        if not any(attrs.pads):
            return [dy]
        return [b.op("lz.pad", dy, pads=[-p for p in attrs.pads])]


@register
class GatherOp(OpDef):
    """``lz.gather(x, indices) {axis = 0}`` as ``numpy.take``: the result is
    ``x.shape[:axis] + indices.shape + x.shape[axis+1:]``; negative indices count from the end
    (numpy, ONNX), or are out of range with ``negative_indices = false`` (PyTorch's embedding and
    class targets).  An index out of range is an error, in compiled code too (the kernel's status
    buffer, ``lezero/codegen/index_checks.py``)."""

    name = "lz.gather"
    operands = ("input", "indices")
    traits = _PURE
    attributes = {"axis": AttrSpec("i64", 0), "negative_indices": AttrSpec("bool", True)}
    summary = "pick slices by index"

    def infer(self, operand_types, attrs):
        x, indices = operand_types
        check_element_type(indices, INTEGER, "indices")
        axis = normalize_axis(attrs.axis, x.rank)
        return [x.with_shape(x.shape[:axis] + indices.shape + x.shape[axis + 1:])]

    def reference(self, attrs, x, indices):
        axis = normalize_axis(attrs.axis, x.ndim)
        size = x.shape[axis]
        indices = indices.astype(np.int64)
        bad = (indices < (-size if attrs.negative_indices else 0)) | (indices >= size)
        if bad.any():
            raise OpError(f"index {int(indices[bad].max())} is out of range for axis {axis} of size {size}")
        return np.take(x, np.where(indices < 0, indices + size, indices), axis=axis)

    def grad(self, b, op, attrs, dy):
        """``dx[a, d, b] = sum_i [index_i == d] dy[a, i, b]``: a one-hot matrix of the (normalized)
        indices, transposed, times the cotangent with the index dims flattened."""
        x, indices = op.operands
        shape = _static_shape(x, self.name)
        _static_shape(indices, self.name)
        axis = normalize_axis(attrs.axis, x.type.rank)
        size, count = shape[axis], _product(indices.type.shape)
        before, after = _product(shape[:axis]), _product(shape[axis + 1:])
        index = b.reshape(indices, (count, 1))
        index = b.select(b.cmp("lt", index, 0), b.add(index, size), index)
        if count * size > ONE_HOT_LIMIT:
            # the cotangent rows (index dims first) added at their index: dx[d, a, b] += dy[a, i, b]
            rows = b.transpose(b.reshape(dy, (before, count, after)), [1, 0, 2])
            dx = b.op("lz.scatter_nd", b.zeros(TensorType((size, before, after), x.type.element_type)), index,
                      rows, reduction="add")
            return [b.reshape(b.transpose(dx, [1, 0, 2]), shape), None]
        et = indices.type.element_type
        iota = b.constant(np.arange(size, dtype=et.numpy_dtype).reshape(1, size), TensorType((1, size), et))
        one_hot = b.op("lz.cast", b.op("lz.cmp", index, iota, predicate="eq"), to=x.type.element_type)
        rows = b.reshape(dy, (count, after) if axis == 0 else (before, count, after))
        dx = b.op("lz.matmul", b.transpose(one_hot, [1, 0]), rows)
        return [b.reshape(dx, shape), None]


_SCATTER_COMBINE = {"none": lambda old, new: new, "add": np.add, "mul": np.multiply, "max": np.maximum,
                    "min": np.minimum}


@register
class ScatterNdOp(OpDef):
    """``lz.scatter_nd(data, indices, updates) {reduction = "none"}`` as ONNX's ScatterND: a copy
    of ``data`` where, in order, each ``indices[i]`` (a tuple of the first ``k`` coordinates,
    ``k = indices.shape[-1]``; negative ones count from the end) receives ``updates[i]`` (a slice
    of the remaining dims), replacing or combining (``add``, ``mul``, ``max``, ``min``) with what
    is there.  The result has ``data``'s type."""

    name = "lz.scatter_nd"
    operands = ("data", "indices", "updates")
    traits = _PURE
    attributes = {"reduction": AttrSpec("str", "none", choices=tuple(_SCATTER_COMBINE))}
    summary = "write slices at index tuples"

    def infer(self, operand_types, attrs):
        data, indices, updates = operand_types
        same_element_type([data, updates], "data and updates")
        check_element_type(indices, INTEGER, "indices")
        if indices.rank < 1:
            raise OpError(f"indices must have rank at least 1, got {indices}")
        k = indices.shape[-1]
        if k is not None and k > data.rank:
            raise OpError(f"index tuples of {k} coordinates do not fit data {data}")
        if k is not None:
            want = indices.shape[:-1] + data.shape[k:]
            if len(want) != updates.rank or any(a is not None and b is not None and a != b
                                                for a, b in zip(want, updates.shape)):
                raise OpError(f"updates must have shape {format_shape(want)}, got {format_shape(updates.shape)}")
        return [data]

    def reference(self, attrs, data, indices, updates):
        combine = _SCATTER_COMBINE[attrs.reduction]
        out = np.array(data, copy=True)
        k = indices.shape[-1]
        dims = data.shape[:k]
        for i in np.ndindex(indices.shape[:-1]):
            where = []
            for j, size in zip(indices[i], dims):
                j = int(j)
                if not -size <= j < size:
                    raise OpError(f"index {j} is out of range for a dim of size {size}")
                where.append(j % size)
            where = tuple(where)
            out[where] = combine(out[where], updates[i])
        return out

    def grad(self, b, op, attrs, dy):
        """``none``: the data's cotangent with the written slices zeroed, the updates' the
        cotangent gathered there; ``add``: the cotangent passes to data, gathered to updates."""
        data, indices, updates = op.operands
        if attrs.reduction not in ("none", "add"):
            raise OpError(f"no gradient rule for lz.scatter_nd with reduction = {attrs.reduction}")
        for v in op.operands:
            _static_shape(v, self.name)
        d_updates = _gather_nd(b, dy, indices)
        if attrs.reduction == "add":
            return [dy, None, d_updates]
        # an update overwritten by a later one at the same place gets nothing: scatter each
        # update's number, read back which number won each place
        count = _product(indices.type.shape[:-1])
        et = data.type.element_type
        numbers = np.broadcast_to(np.arange(count, dtype=et.numpy_dtype).reshape(
            indices.type.shape[:-1] + (1,) * (updates.type.rank - indices.type.rank + 1)), updates.type.shape)
        numbers = b.constant(np.ascontiguousarray(numbers), updates.type)
        winners = b.op("lz.scatter_nd", b.sub(b.zeros(data.type), 1), indices, numbers)
        won = b.cmp("eq", _gather_nd(b, winners, indices), numbers)
        return [b.op("lz.scatter_nd", dy, indices, b.zeros(updates.type)), None, b.where_else_zero(won, d_updates)]


def _gather_nd(b, x, indices):
    """``x[indices[i]]`` slices (ScatterND's addressing) as ``lz.gather`` on ``x`` flattened over
    the indexed dims."""
    shape, ishape = x.type.shape, indices.type.shape
    k = ishape[-1]
    head, rest = shape[:k], shape[k:]
    strides = np.asarray([_product(head[j + 1:]) for j in range(k)], np.int64)
    index = b.op("lz.cast", indices, to=I64) if indices.type.element_type != I64 else indices
    sizes = b.constant(np.asarray(head, np.int64))
    index = b.select(b.cmp("lt", index, 0), b.add(index, sizes), index)
    flat = b.op("lz.reduce_sum", b.mul(index, b.constant(strides)), axes=[len(ishape) - 1])
    table = b.reshape(x, (_product(head),) + tuple(rest))
    return b.op("lz.gather", table, flat, axis=0)
