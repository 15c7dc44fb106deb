"""``F.embedding_bag`` and ``nn.EmbeddingBag``: the sum, mean or max of bags of embedding rows,
with PyTorch's arguments (``offsets`` or a 2-D input, ``include_last_offset``,
``per_sample_weights``, ``padding_idx``).

One ``EagerOp``: the rows are an ``lz.gather`` of the weight; which bag each row belongs to is a
``bags x rows`` membership mask computed in the graph from the offsets (``start <= i < end``,
without the ``padding_idx`` rows), so a traced model takes new offsets at every call.  Sum and
mean are a matmul of the mask with the rows (mean divided by the bag's count), max a masked
``reduce_max``; an empty bag is zeros, as PyTorch's.
"""
from __future__ import annotations

import numpy as np

from lezero.eager import dtypes as _dt
from lezero.eager.core import apply, cast_to
from lezero.eager.creation import empty
from lezero.eager.device_arrays import kind
from lezero.eager.dispatch import EagerOp
from lezero.eager.tensor import Tensor
from lezero.ir.gradient import GradBuilder
import lezero.nn.init as init
from lezero.nn.module import Module, Parameter

_MODES = ("sum", "mean", "max")


def _membership(g, attrs, indices, offsets):
    """The ``bags x rows`` mask of which row is in which bag (i1)."""
    n = indices.type.shape[0]
    positions = g.constant(np.arange(n, dtype=np.int64).reshape(1, n))
    if offsets is None:  # a 2-D input: bags of bag_length consecutive rows
        starts = g.constant(np.arange(0, n, attrs["bag_length"], dtype=np.int64).reshape(-1, 1))
        ends = g.add(starts, attrs["bag_length"])
    else:
        bags = offsets.type.shape[0] - int(attrs["include_last_offset"])
        starts = g.reshape(g.op("lz.slice", offsets, starts=[0], ends=[bags]), [bags, 1])
        if attrs["include_last_offset"]:
            ends = g.op("lz.slice", offsets, starts=[1], ends=[bags + 1])
        else:
            ends = g.op("lz.concat", g.op("lz.slice", offsets, starts=[1], ends=[bags]),
                        g.constant(np.array([n], np.int64)), axis=0)
        ends = g.reshape(ends, [bags, 1])
    member = g.op("lz.and", g.cmp("le", starts, positions), g.cmp("lt", positions, ends))
    if attrs["padding_idx"] is not None:
        valid = g.cmp("ne", indices, g.constant(np.asarray(attrs["padding_idx"], np.int64)))
        member = g.op("lz.and", member, g.reshape(valid, [1, n]))
    return member


def _emit_embedding_bag(b, attrs, weight, indices, *extra):
    g = GradBuilder(b.block, b.index, b.location)
    extra = list(extra)
    offsets = extra.pop(0) if attrs["has_offsets"] else None
    rows = g.op("lz.gather", weight, indices, axis=0, negative_indices=False)
    if extra:  # per_sample_weights
        rows = g.mul(rows, g.reshape(extra[0], [-1, 1]))
    member = _membership(g, attrs, indices, offsets)
    et = weight.type.element_type
    if attrs["mode"] == "max":
        masked = g.select(g.reshape(member, list(member.type.shape) + [1]), rows, g.scalar(-np.inf, et))
        best = g.op("lz.reduce_max", masked, axes=[1])
        count = g.op("lz.reduce_sum", g.op("lz.cast", member, to=et), axes=[1], keepdims=True)
        return [g.select(g.cmp("gt", count, 0), best, 0)]
    weights = g.op("lz.cast", member, to=et)
    total = g.op("lz.matmul", weights, rows)
    if attrs["mode"] == "sum":
        return [total]
    count = g.op("lz.reduce_sum", weights, axes=[1], keepdims=True)
    return [g.div(total, g.op("lz.max", count, g.scalar(1, et)))]


_EMBEDDING_BAG = EagerOp("embedding_bag", _emit_embedding_bag)


def _check_indices(t: Tensor, what: str) -> Tensor:
    if kind(t._data) not in "iu":
        raise ValueError(f"embedding_bag: {what} must be integer tensors (int64 or int32), got {t.dtype}")
    return cast_to(t, _dt.int64)


def embedding_bag(input: Tensor, weight: Tensor, offsets: Tensor | None = None, max_norm=None,  # noqa: A002
                  norm_type: float = 2, scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                  per_sample_weights: Tensor | None = None, include_last_offset: bool = False,
                  padding_idx: int | None = None) -> Tensor:
    """The bags are the rows of a 2-D ``input`` (``offsets`` None), or the runs of a 1-D
    ``input`` starting at each of ``offsets``; each bag's rows of ``weight`` are summed, averaged
    or maxed (``mode``), rows equal to ``padding_idx`` left out."""
    if mode not in _MODES:
        raise ValueError(f"mode has to be one of sum, mean or max, got {mode!r}")
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError("embedding_bag(max_norm=..., scale_grad_by_freq=True, sparse=True) is not supported")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                                  f"supported for mode='sum' (got mode='{mode}'). Please open a feature request on "
                                  f"GitHub.")
    indices = _check_indices(input, "input")
    bag_length = 0
    if indices.ndim == 2:
        if offsets is not None:
            raise ValueError("if input is 2D, then offsets has to be None, as input is treated is a mini-batch of "
                             "fixed length sequences.")
        bag_length = indices.shape[1]
        indices = indices.reshape(-1)
        if per_sample_weights is not None:
            per_sample_weights = per_sample_weights.reshape(-1)
    elif indices.ndim == 1:
        if offsets is None or offsets.ndim != 1:
            raise ValueError("offsets has to be a 1D Tensor but got None" if offsets is None else
                             f"offsets has to be a 1D Tensor, got shape {list(offsets.shape)}")
        offsets = _check_indices(offsets, "offsets")
    else:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension {indices.ndim}")
    if per_sample_weights is not None and per_sample_weights.shape != indices.shape:
        raise ValueError(f"embedding_bag: per_sample_weights has shape {list(per_sample_weights.shape)}, the input "
                         f"{list(input.shape)}: they must match")
    rows = weight.shape[0]
    if padding_idx is not None:
        padding_idx = int(padding_idx) % rows
    attrs = (("mode", mode), ("has_offsets", offsets is not None), ("bag_length", bag_length),
             ("include_last_offset", bool(include_last_offset)), ("padding_idx", padding_idx))
    extra = [t for t in (offsets, per_sample_weights) if t is not None]
    return apply(_EMBEDDING_BAG, attrs, weight, indices, *extra)


class EmbeddingBag(Module):
    """``weight`` is ``num_embeddings x embedding_dim``, standard normal (the padding row zero)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, max_norm=None, norm_type: float = 2.0,
                 scale_grad_by_freq: bool = False, mode: str = "mean", sparse: bool = False,
                 _weight: Tensor | None = None, include_last_offset: bool = False, padding_idx: int | None = None,
                 device=None, dtype=None):
        super().__init__()
        if mode not in _MODES:
            raise ValueError(f"mode has to be one of sum, mean or max, got {mode!r}")
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("padding_idx must be within num_embeddings")
            padding_idx %= num_embeddings
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.max_norm, self.norm_type, self.scale_grad_by_freq = max_norm, norm_type, scale_grad_by_freq
        self.mode, self.sparse, self.include_last_offset = mode, sparse, include_last_offset
        self.padding_idx = padding_idx
        if _weight is not None:
            self.weight = Parameter(_weight)
        else:
            d = _dt.as_dtype(dtype) if dtype is not None else _dt.get_default_dtype()
            self.weight = Parameter(empty(num_embeddings, embedding_dim, dtype=d))
            self.reset_parameters()

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight._data[self.padding_idx] = 0

    def forward(self, input: Tensor, offsets: Tensor | None = None,  # noqa: A002
                per_sample_weights: Tensor | None = None) -> Tensor:
        return embedding_bag(input, self.weight, offsets, self.max_norm, self.norm_type, self.scale_grad_by_freq,
                             self.mode, self.sparse, per_sample_weights, self.include_last_offset, self.padding_idx)

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}, mode='{self.mode}'"
        return s + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")
