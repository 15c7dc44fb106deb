"""The ``Tensor`` methods that pick, order, place and mask elements, and the running scans:
``topk``/``sort``/``argsort``, ``gather``/``scatter``/``scatter_add``/``scatter_reduce``/
``index_select``/``masked_select``/``nonzero``, ``multinomial``, ``cumsum``/``cumprod``/
``cummax``/``cummin``/``logcumsumexp``, ``triu``/``tril`` and ``isnan``/``isinf``/``isfinite``.

Each is composed from dialect ops, emitted as one function (an ``EagerOp``), so it is one compiled
kernel call and its gradient is the autodiff of those ops:

- ``lz.topk`` orders (``sort`` is a topk of every element; equal elements keep their index order,
  so every sort here is stable, as PyTorch's ``stable=True``; nan sorts last ascending, first
  descending, and -0.0 equals 0.0, as there); the values are gathered again at the indices, so
  their gradient flows through ``lz.gather``.
- ``gather(dim, index)`` is ``lz.gather`` of the flattened input at ``index``'s positions made linear
  (an index out of range is an error: it is checked by a gather from ``arange(size)``); ``scatter*``
  are ``lz.scatter_nd`` with an index tuple per element of ``index``.
- The scans are ``lz.cumulative`` (``cumprod``'s gradient is that op's rule), ``cummax``/``cummin``
  gather at the index where the running extreme last changed.

``masked_select`` and ``nonzero`` have data-dependent shapes: they read the mask on the host (a
traced function cannot hold them, as in ``torch.jit.trace``).  ``multinomial`` draws its uniforms
from the generator (``lz.manual_seed`` reproduces it) and samples with lz ops: with replacement
by counting the cumulative probabilities below each draw, without replacement by the largest
``log(u) / p`` (Efraimidis and Spirakis, "Weighted random sampling with a reservoir", 2006), so
the samples follow PyTorch's distribution, not its bits.

Speed: on the CPU ``lz.topk`` merge-sorts each line when ``k`` is above ``log2 n`` (every ``sort``):
O(n log n); a small ``k`` (``multinomial``, beam search) is picked ``k`` times, O(n k).  A stable
sort of one float32 line takes 1.7 to 3.4 times torch's ``sort(stable=True)`` from 1e3 to 1e6
elements (0.07 ms at 1e3, 0.63 s at 1e6 on this shared machine, December; the picks took 0.5 s at
1e4): ``benchmarks/sort.py``.  On cuda, lines up to 4096 are ranked in one Triton block, longer ones
sort on the CPU (``lezero/codegen/triton/selection.py``).
"""
from __future__ import annotations

import collections
import math

import numpy as np

from lezero.eager import device_arrays as _dev
from lezero.eager import dtypes as _dt
from lezero.eager.core import Tensor, apply, apply1, as_input, axis_of, cast_to, wrap
from lezero.eager.creation import numpy_generator, tensor
from lezero.eager.device_arrays import FLOATS, kind
from lezero.eager.dispatch import EagerOp, constant_of
from lezero.eager.promotion import float_input, scalar
from lezero.ir.types import I64

__all__ = ["GROUPS", "return_type", "tril_indices", "triu_indices"]


def return_type(name: str, fields=("values", "indices")):
    """PyTorch's ``torch.return_types.<name>``: a named tuple."""
    return collections.namedtuple(name, fields)


TopK, Sort, CumMax, CumMin = (return_type(n) for n in ("topk", "sort", "cummax", "cummin"))


# --- IR pieces ------------------------------------------------------------------------------------------

def _strides(shape) -> list:
    return [math.prod(shape[d + 1:]) for d in range(len(shape))]


def _checked(b, index, size: int):
    """``index`` (i64), each element checked to lie in ``[0, size)`` by a gather from ``arange(size)``."""
    return b.op("lz.gather", b.constant(np.arange(size, dtype=np.int64)), index, axis=0, negative_indices=False)


def take_along(b, x, index, axis: int, check: bool = True):
    """``out[p] = x[p with p[axis] replaced by index[p]]`` (``index`` of ``x``'s rank, each dim at
    most ``x``'s): ``lz.gather`` of ``x`` flattened at linear positions."""
    shape, ishape = x.type.shape, index.type.shape
    strides = _strides(shape)
    if check:
        index = _checked(b, index, shape[axis])
    base = sum((np.indices(ishape, np.int64)[d] * strides[d] for d in range(len(shape)) if d != axis),
               np.zeros(ishape, np.int64))
    linear = b.op("lz.add", b.op("lz.mul", index, b.constant(np.asarray(strides[axis], np.int64))),
                  b.constant(base))
    return b.op("lz.gather", b.op("lz.reshape", x, shape=[math.prod(shape)]), linear, axis=0,
                negative_indices=False)


def _index_tuples(b, index, axis: int):
    """The full coordinates of each element of ``index``, ``index``'s value along ``axis``:
    ``index.shape + (rank,)``, lz.scatter_nd's index tuples."""
    ishape = index.type.shape
    rank = len(ishape)
    grid = np.indices(ishape, np.int64)
    columns = [b.op("lz.reshape", index, shape=list(ishape) + [1]) if d == axis else
               b.constant(grid[d].reshape(ishape + (1,))) for d in range(rank)]
    return columns[0] if rank == 1 else b.op("lz.concat", *columns, axis=rank)


def _emit_topk(b, attrs, x):
    topk = b.create("lz.topk", [x], {"k": attrs["k"], "axis": attrs["axis"], "largest": attrs["largest"]})
    indices = topk.results[1]
    return [take_along(b, x, indices, attrs["axis"], check=False), indices]


def _emit_gather(b, attrs, x, index):
    return [take_along(b, x, index, attrs["axis"])]


_IDENTITY = {"sum": 0, "mean": 0, "prod": 1, "amax": -np.inf, "amin": np.inf}
_COMBINE = {"sum": "add", "mean": "add", "prod": "mul", "amax": "max", "amin": "min"}


def _emit_scatter(b, attrs, x, index, src):
    """``x`` with ``src[p]`` written (or combined, ``reduce``) at each ``index`` position ``p``."""
    axis, reduce = attrs["axis"], attrs["reduce"]
    ishape = index.type.shape
    tuples = _index_tuples(b, _checked(b, index, x.type.shape[axis]), axis)
    if src.type.rank == 0:
        src = b.op("lz.broadcast_to", src, shape=list(ishape))
    elif src.type.shape != ishape:
        src = b.op("lz.slice", src, starts=[0] * len(ishape), ends=list(ishape), axes=list(range(len(ishape))),
                   steps=[1] * len(ishape))
    if reduce is None:
        return [b.op("lz.scatter_nd", x, tuples, src)]
    et = x.type.element_type
    np_dtype = et.numpy_dtype
    if not attrs["include_self"]:  # the places written start from the reduction's identity
        identity = _IDENTITY[reduce]
        if np.dtype(np_dtype).kind != "f" and not np.isfinite(identity):
            info = np.iinfo(np_dtype) if np.dtype(np_dtype).kind in "iu" else None
            identity = (info.min if identity < 0 else info.max) if info else identity > 0
        filler = b.op("lz.broadcast_to", constant_of(b, identity, et), shape=list(ishape))
        x = b.op("lz.scatter_nd", x, tuples, filler)
    out = b.op("lz.scatter_nd", x, tuples, src, reduction=_COMBINE[reduce])
    if reduce == "mean":
        ones = b.op("lz.broadcast_to", constant_of(b, 1, et), shape=list(ishape))
        start = np.ones if attrs["include_self"] else np.zeros
        count = b.op("lz.scatter_nd", constant_of(b, start(x.type.shape), et), tuples, ones, reduction="add")
        count = b.op("lz.select", b.op("lz.cmp", count, constant_of(b, 0, et), predicate="eq"),
                     constant_of(b, 1, et), count)
        out = b.op("lz.div", out, count)
    return [out]


def _emit_triangle(b, attrs, x):
    """``x`` where ``j - i >= diagonal`` (``upper``) or ``<=``, else 0, over its last two dims."""
    m, n = x.type.shape[-2:]
    i, j = np.indices((m, n))
    keep = (j - i >= attrs["diagonal"]) if attrs["upper"] else (j - i <= attrs["diagonal"])
    return [b.op("lz.select", b.constant(keep), x, constant_of(b, 0, x.type.element_type))]


def _emit_float_class(b, attrs, x):
    """``isnan`` (``x != x``), ``isinf``/``isposinf``/``isneginf``, ``isfinite`` (``|x| < inf``, false for nan)."""
    inf = constant_of(b, np.inf, x.type.element_type)
    which = attrs["which"]
    if which == "nan":
        return [b.op("lz.cmp", x, x, predicate="ne")]
    if which == "finite":
        return [b.op("lz.cmp", b.op("lz.abs", x), inf, predicate="lt")]
    if which == "posinf":
        return [b.op("lz.cmp", x, inf, predicate="eq")]
    if which == "neginf":
        return [b.op("lz.cmp", x, b.op("lz.neg", inf), predicate="eq")]
    return [b.op("lz.cmp", b.op("lz.abs", x), inf, predicate="eq")]


def _emit_cumulative_extreme(b, attrs, x):
    """``cummax``/``cummin``: the running extreme, gathered at the last index where an element
    equalled it (PyTorch's index for ties)."""
    axis = attrs["axis"]
    running = b.op("lz.cumulative", x, combine=attrs["combine"], axis=axis)
    n = x.type.shape[axis]
    position = np.arange(n, dtype=np.int64).reshape([n if d == axis else 1 for d in range(x.type.rank)])
    hit = b.op("lz.select", b.op("lz.cmp", x, running, predicate="eq"), b.constant(position),
               b.constant(np.asarray(-1, np.int64)))
    indices = b.op("lz.cumulative", b.op("lz.broadcast_to", hit, shape=list(x.type.shape)), combine="max", axis=axis)
    return [take_along(b, x, indices, axis, check=False), indices]


def _emit_counted_below(b, attrs, cdf, draws):
    """With replacement: per row, how many of the cumulative probabilities lie at or below each
    draw (scaled by the row's total): the category drawn."""
    n = cdf.type.shape[1]
    total = b.op("lz.slice", cdf, starts=[n - 1], ends=[n], axes=[1], steps=[1])
    scaled = b.op("lz.mul", draws, total)
    below = b.op("lz.cmp", b.op("lz.reshape", cdf, shape=[cdf.type.shape[0], 1, cdf.type.shape[1]]),
                 b.op("lz.reshape", scaled, shape=list(scaled.type.shape) + [1]), predicate="le")
    count = b.op("lz.reduce_sum", b.op("lz.cast", below, to=I64), axes=[2])
    last = b.constant(np.asarray(cdf.type.shape[1] - 1, np.int64))
    return [b.op("lz.min", count, last)]


def _emit_race(b, attrs, probabilities, draws):
    """Without replacement: the ``k`` largest ``log(u) / p`` (categories of ``p = 0`` never win)."""
    et = probabilities.type.element_type
    keys = b.op("lz.div", b.op("lz.log", draws), probabilities)
    keys = b.op("lz.select", b.op("lz.cmp", probabilities, constant_of(b, 0, et), predicate="gt"), keys,
                constant_of(b, -np.inf, et))
    return [b.create("lz.topk", [keys], {"k": attrs["k"], "axis": 1, "largest": True}).results[1]]


TOPK = EagerOp("topk", _emit_topk, num_results=2)
GATHER = EagerOp("gather", _emit_gather)
SCATTER = EagerOp("scatter", _emit_scatter)
TRIANGLE = EagerOp("triangle", _emit_triangle)
FLOAT_CLASS = EagerOp("float_class", _emit_float_class)
CUMULATIVE_EXTREME = EagerOp("cumulative_extreme", _emit_cumulative_extreme, num_results=2)
COUNTED_BELOW = EagerOp("multinomial", _emit_counted_below)
RACE = EagerOp("multinomial_without_replacement", _emit_race)
INDEX_GATHER = EagerOp("index_select", lambda b, attrs, x, index: [
    b.op("lz.gather", x, index, axis=attrs["axis"], negative_indices=False)])
CUMULATIVE = EagerOp("cumulative", lambda b, attrs, x: [b.op("lz.cumulative", x, **attrs)])


# --- argument checks ------------------------------------------------------------------------------------

def _index_tensor(name: str, index) -> Tensor:
    index = as_input(index, f"{name}(): argument 'index'")  # torch, numpy, DLPack: shared
    if index.dtype is not _dt.int64:
        raise RuntimeError(f"{name}(): Expected dtype int64 for index")
    return index


def _same_rank_index(name: str, x: Tensor, index: Tensor, axis: int, src: Tensor | None = None) -> None:
    """``gather``/``scatter``'s rule: ``index`` has ``x``'s rank, each dim at most ``x``'s (but
    along ``axis`` for gather) and ``src``'s."""
    if index.ndim != max(x.ndim, 1) and not (index.ndim == 0 and x.ndim == 0):
        raise RuntimeError(f"{name}(): Index tensor must have the same number of dimensions as input tensor")
    for d, s in enumerate(index.shape):
        if src is not None and s > src.shape[d]:
            raise RuntimeError(f"Expected index {list(index.shape)} to be smaller than self {list(x.shape)} apart "
                               f"from dimension {axis} and to be smaller size than src {list(src.shape)}")
        if d != axis and s > x.shape[d]:
            raise RuntimeError(f"Size does not match at dimension {d} expected index {list(index.shape)} to be "
                               f"smaller than self {list(x.shape)} apart from dimension {axis}")


def _as_vector(x: Tensor):
    """A 0-d tensor as one element (PyTorch's selection ops treat it as a line of one)."""
    return x.reshape(1) if x.ndim == 0 else x


# --- the method groups ------------------------------------------------------------------------------

class Selection:
    def topk(self, k, dim=-1, largest=True, sorted=True):  # noqa: A002 - PyTorch's names
        x = _as_vector(self)
        axis = axis_of(dim, x.ndim)
        if not 0 <= k <= x.shape[axis]:
            raise RuntimeError(f"selected index k out of range: k = {k} for dim {dim} of size {x.shape[axis]}")
        values, indices = apply(TOPK, (("k", int(k)), ("axis", axis), ("largest", bool(largest))), x)
        if self.ndim == 0:
            values, indices = values.reshape(()), indices.reshape(())
        return TopK(values, indices)

    def sort(self, dim=-1, descending=False, stable=False):
        if isinstance(dim, bool):
            raise TypeError("sort(): the second positional argument is dim; pass descending=True by keyword")
        n = self.shape[axis_of(dim, self.ndim)] if self.ndim else 1
        return Sort(*self.topk(n, dim, largest=descending))

    def argsort(self, dim=-1, descending=False, stable=False):
        return self.sort(dim, descending, stable).indices

    def msort(self):
        return self.sort(0).values

    def gather(self, dim, index, sparse_grad=False):
        index = _index_tensor("gather", index)
        x = _as_vector(self)
        axis = axis_of(dim, x.ndim)
        _same_rank_index("gather", self, index, axis)
        out = apply(GATHER, (("axis", axis),), x, _as_vector(index))
        return out.reshape(index.shape)

    def take_along_dim(self, indices, dim=None):
        if dim is None:
            return self.reshape(-1).gather(0, indices.reshape(-1))
        axis = axis_of(dim, self.ndim)
        shape = [max(a, b) for a, b in zip(self.shape, indices.shape)]
        x = self.expand(*[s if d != axis else self.shape[d] for d, s in enumerate(shape)])
        return x.gather(axis, indices.expand(*[s if d != axis else indices.shape[d] for d, s in enumerate(shape)]))

    def index_select(self, dim, index):
        index = _index_tensor("index_select", index)
        if index.ndim > 1:
            raise IndexError("index_select(): Index is supposed to be a vector")
        x = _as_vector(self)
        out = apply(INDEX_GATHER, (("axis", axis_of(dim, x.ndim)),), x, index.reshape(-1))
        return out.reshape(()) if self.ndim == 0 else out

    def _scatter(self, name, dim, index, src, reduce, include_self=True):
        index = _index_tensor(name, index)
        x = _as_vector(self)
        axis = axis_of(dim, x.ndim)
        if isinstance(src, Tensor):
            src = cast_to(_as_vector(src) if src.ndim or self.ndim == 0 else src, self.dtype)
            if src.ndim and src.ndim != x.ndim:
                raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
        else:
            src = scalar(src, _dev.numpy_dtype(self._data), self._data)
        _same_rank_index(name, self, index, axis, src if src.ndim else None)
        if index.numel() == 0:
            return self.clone()
        attrs = (("axis", axis), ("reduce", reduce), ("include_self", bool(include_self)))
        return apply(SCATTER, attrs, x, _as_vector(index), src).reshape(self.shape)

    def scatter(self, dim, index, src=None, value=None, reduce=None):
        if (src is None) == (value is None):
            raise TypeError("scatter() expects exactly one of src (a tensor) and value (a number)")
        if reduce not in (None, "add", "multiply"):
            raise RuntimeError(f"reduce argument must be either add or multiply, got {reduce}")
        return self._scatter("scatter", dim, index, src if src is not None else value,
                             {None: None, "add": "sum", "multiply": "prod"}[reduce])

    def scatter_add(self, dim, index, src):
        return self._scatter("scatter_add", dim, index, src, "sum")

    def scatter_reduce(self, dim, index, src, reduce, *, include_self=True):
        if reduce not in _COMBINE:
            raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got {reduce}")
        return self._scatter("scatter_reduce", dim, index, src, reduce, include_self)

    def scatter_(self, dim, index, src=None, value=None, reduce=None):
        return self._inplace(self._old().scatter(dim, index, src, value, reduce))

    def scatter_add_(self, dim, index, src):
        return self._inplace(self._old().scatter_add(dim, index, src))

    def scatter_reduce_(self, dim, index, src, reduce, *, include_self=True):
        return self._inplace(self._old().scatter_reduce(dim, index, src, reduce, include_self=include_self))

    def masked_select(self, mask):
        if not isinstance(mask, Tensor) or mask.dtype is not _dt.bool_:
            raise RuntimeError(f"masked_select: expected BoolTensor for mask, got "
                               f"{mask.dtype if isinstance(mask, Tensor) else type(mask).__name__}")
        shape = np.broadcast_shapes(self.shape, mask.shape)
        positions = np.flatnonzero(np.broadcast_to(mask.numpy(), shape))
        flat = self.expand(*shape).reshape(-1)
        return flat.index_select(0, wrap(_dev.like(positions.astype(np.int64), self._data)))

    def nonzero(self, *, as_tuple=False):
        coordinates = np.nonzero(self.detach().numpy().reshape(self.shape or (1,)))
        if as_tuple:
            return tuple(wrap(_dev.like(c.astype(np.int64), self._data)) for c in coordinates)
        return wrap(_dev.like(np.stack(coordinates, axis=1).astype(np.int64).reshape(-1, max(self.ndim, 1)),
                              self._data))

    def argwhere(self):
        return self.nonzero()

    def multinomial(self, num_samples, replacement=False, *, generator=None):
        if self.ndim not in (1, 2):
            raise RuntimeError(f"prob_dist must be 1 or 2 dim, got {self.ndim}")
        if self._data.dtype not in FLOATS:
            raise RuntimeError(f"multinomial only supports floating-point dtypes for input, got: {self.dtype}")
        if num_samples <= 0:
            raise RuntimeError(f"cannot sample n_sample <= 0 samples, got {num_samples}")
        rows = self.reshape(1, -1) if self.ndim == 1 else self
        n = rows.shape[1]
        if not replacement and num_samples > n:
            raise RuntimeError(f"cannot sample n_sample > prob_dist.size(-1) samples without replacement "
                               f"({num_samples} > {n})")
        p = rows.detach().numpy()
        if not np.isfinite(p).all() or (p < 0).any():
            raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
        if (p.sum(axis=1) <= 0).any():
            raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
        if not replacement and ((p > 0).sum(axis=1) < num_samples).any():
            raise RuntimeError("invalid multinomial distribution (with replacement=False, not enough non-negative "
                               "category to sample)")
        shape = (rows.shape[0], num_samples if replacement else n)
        uniform = numpy_generator(generator).random(shape)
        draws = wrap(_dev.like(uniform.astype(p.dtype), rows._data))
        probabilities = rows.detach()
        if replacement:
            out = apply(COUNTED_BELOW, (), apply1(CUMULATIVE, (("combine", "add"), ("axis", 1)), probabilities),
                        draws)
        else:
            out = apply(RACE, (("k", int(num_samples)),), probabilities, draws)
        return out.reshape(-1) if self.ndim == 1 else out


class Scans:
    def _cumulative(self, combine: str, dim, dtype):
        x = self
        if dtype is not None:
            x = cast_to(x, _dt.as_dtype(dtype))
        elif kind(x._data) in "bui":
            x = cast_to(x, _dt.int64)
        v = _as_vector(x)
        out = apply1(CUMULATIVE, (("combine", combine), ("axis", axis_of(dim, v.ndim))), v)
        return out.reshape(()) if x.ndim == 0 else out

    def cumsum(self, dim, *, dtype=None):
        return self._cumulative("add", dim, dtype)

    def cumprod(self, dim, *, dtype=None):
        return self._cumulative("mul", dim, dtype)

    def cumsum_(self, dim, *, dtype=None):
        return self._inplace(cast_to(self._old().cumsum(dim, dtype=dtype), self.dtype))

    def cumprod_(self, dim, *, dtype=None):
        return self._inplace(cast_to(self._old().cumprod(dim, dtype=dtype), self.dtype))

    def _cumulative_extreme(self, combine: str, dim, result):
        x = _as_vector(self)
        values, indices = apply(CUMULATIVE_EXTREME, (("combine", combine), ("axis", axis_of(dim, x.ndim))), x)
        return result(values.reshape(self.shape), indices.reshape(self.shape))

    def cummax(self, dim):
        return self._cumulative_extreme("max", dim, CumMax)

    def cummin(self, dim):
        return self._cumulative_extreme("min", dim, CumMin)

    def logcumsumexp(self, dim):
        x = float_input(self)
        shift = x.amax(dim, keepdim=True).detach() if x.ndim else x.detach()
        shift = shift.masked_fill(shift.isinf(), 0.0)
        return (x - shift).exp().cumsum(dim).log() + shift


class Masks:
    def _triangle(self, upper: bool, diagonal: int):
        if self.ndim < 2:
            raise RuntimeError(f"{'triu' if upper else 'tril'}: input tensor must have at least 2 dimensions")
        return apply1(TRIANGLE, (("upper", upper), ("diagonal", int(diagonal))), self)

    def triu(self, diagonal=0):
        return self._triangle(True, diagonal)

    def tril(self, diagonal=0):
        return self._triangle(False, diagonal)

    def triu_(self, diagonal=0):
        return self._inplace(self._old().triu(diagonal))

    def tril_(self, diagonal=0):
        return self._inplace(self._old().tril(diagonal))

    def _float_class(self, which: str, integers: bool):
        if self._data.dtype not in FLOATS:  # integers are never nan nor infinite
            return wrap(_dev.like(np.full(self.shape, integers), self._data))
        return apply1(FLOAT_CLASS, (("which", which),), self)

    def isnan(self):
        return self._float_class("nan", False)

    def isinf(self):
        return self._float_class("inf", False)

    def isposinf(self):
        return self._float_class("posinf", False)

    def isneginf(self):
        return self._float_class("neginf", False)

    def isfinite(self):
        return self._float_class("finite", True)


GROUPS = (Selection, Scans, Masks)


def _triangle_indices(row: int, col: int, offset: int, upper: bool, dtype, device) -> Tensor:
    i, j = np.indices((row, col))
    keep = (j - i >= offset) if upper else (j - i <= offset)
    return tensor(np.stack([i[keep], j[keep]]), dtype=dtype or _dt.int64, device=device)


def tril_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None) -> Tensor:
    """The ``2 x N`` coordinates of the lower triangle of a ``row x col`` matrix, row by row."""
    return _triangle_indices(row, col, offset, False, dtype, device)


def triu_indices(row: int, col: int, offset: int = 0, *, dtype=None, device=None) -> Tensor:
    """The ``2 x N`` coordinates of the upper triangle of a ``row x col`` matrix, row by row."""
    return _triangle_indices(row, col, offset, True, dtype, device)
