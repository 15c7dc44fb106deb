"""``lz.attention``: scaled dot-product attention as one op, ``softmax(q @ k^T * scale + mask) @ v``.

Why an op of its own: the CPU compiler runs it as one kernel (``lezero/codegen/llvm/attention.py``,
a flash-attention style online softmax over key blocks), so the ``Sq x Sk`` scores never reach
memory.  Nobody writes it: the ``fuse-attention`` pass (``lezero/passes/attention.py``) forms it in
the kernel pipeline from the matmul -> scale -> mask -> softmax -> matmul chain of an exported
transformer.  It is composite: where no kernel computes it whole (autodiff, targets other than the
CPU) it decomposes into that chain (``decompose``), so its gradient is the unfused chain's, with the
softmax recomputed; the CPU's kernel pipeline keeps it (``decompose{keep=lz.attention}``).

Operands: ``q`` ``[*batch, Sq, D]``, ``k`` ``[*batch, Sk, D]`` (keys as rows, not transposed),
``v`` ``[*batch, Sk, Dv]``, and optionally an additive ``mask`` broadcasting to ``[*batch, Sq, Sk]``
(BERT's padding mask, GPT-2's causal mask folded into it, ``-inf`` or the lowest float where a key
is hidden).  ``scale`` multiplies the scores before the mask is added.  Result ``[*batch, Sq, Dv]``.
"""
from __future__ import annotations

import numpy as np

from lezero.ir.dialect.broadcasting import broadcast_shapes
from lezero.ir.dialect.constraints import FLOAT, check_element_type, same_element_type
from lezero.ir.dialect.numerics import accumulator_dtype
from lezero.ir.opdef import COMPOSITE, PURE, AttrSpec, OpDef, OpError, register
from lezero.ir.types import TensorType, format_shape


@register
class AttentionOp(OpDef):
    """``lz.attention(q, k, v[, mask]) {scale}``: see the module docstring."""

    name = "lz.attention"
    operands = ("q", "k", "v", "mask")
    variadic = True  # the mask is optional: 3 or 4 operands
    # composite: targets without an attention kernel (cuda) run its decomposition; the CPU's
    # kernel pipeline keeps it whole (``decompose{keep=lz.attention}``) for llvm/attention.py
    traits = frozenset({PURE, COMPOSITE})
    attributes = {"scale": AttrSpec("f64", 1.0)}
    summary = "scaled dot-product attention (softmax(q k^T scale + mask) v)"

    def check_operand_count(self, n: int) -> None:
        if n not in (3, 4):
            raise OpError(f"expects 3 operands (q, k, v) or 4 (q, k, v, mask), got {n}")

    def infer(self, operand_types, attrs):
        q, k, v = operand_types[:3]
        et = same_element_type(operand_types)
        check_element_type(q, FLOAT, "operands")
        if min(q.rank, k.rank, v.rank) < 2 or not q.rank == k.rank == v.rank:
            raise OpError(f"q, k and v must have one rank, at least 2: got {q}, {k}, {v}")
        batch = q.shape[:-2]
        if k.shape[:-2] != batch or v.shape[:-2] != batch:
            raise OpError(f"q, k and v must share their batch dims: {format_shape(q.shape)}, "
                          f"{format_shape(k.shape)}, {format_shape(v.shape)}")
        if q.shape[-1] != k.shape[-1]:
            raise OpError(f"q and k must have one head dim: {format_shape(q.shape)} and {format_shape(k.shape)}")
        if k.shape[-2] != v.shape[-2]:
            raise OpError(f"k and v must have one key count: {format_shape(k.shape)} and {format_shape(v.shape)}")
        scores = batch + (q.shape[-2], k.shape[-2])
        if len(operand_types) == 4:
            mask = operand_types[3]
            if broadcast_shapes(mask.shape, scores, what="mask and scores") != scores:
                raise OpError(f"the mask {format_shape(mask.shape)} must broadcast to the scores "
                              f"{format_shape(scores)}")
        return [TensorType(batch + (q.shape[-2], v.shape[-1]), et)]

    def reference(self, attrs, q, k, v, mask=None):
        acc = accumulator_dtype(q.dtype)
        scores = np.matmul(q.astype(acc), np.swapaxes(k.astype(acc), -1, -2)) * acc.type(attrs.scale)
        if mask is not None:
            scores = scores + mask.astype(acc)
        scores = scores - scores.max(axis=-1, keepdims=True)
        weights = np.exp(scores)
        weights /= weights.sum(axis=-1, keepdims=True)
        return np.matmul(weights, v.astype(acc)).astype(q.dtype)

    def decompose(self, b, op, attrs):
        """``softmax(q k^T scale + mask) v`` as matmuls and a softmax (autodiff differentiates this)."""
        p = b.op("lz.softmax", _scores(b, op, attrs), axis=-1)
        return b.op("lz.matmul", p, op.operands[2])


def _swap_last_two(rank: int) -> list[int]:
    return list(range(rank - 2)) + [rank - 1, rank - 2]


def _scores(b, op, attrs):
    """``q k^T scale (+ mask)`` of an ``lz.attention`` op, built with ``b`` (any ``Builder``)."""
    q, k = op.operands[:2]
    et = q.type.element_type
    scale = b.constant(np.asarray(attrs.scale, et.numpy_dtype), TensorType((), et))
    kt = b.op("lz.transpose", k, perm=_swap_last_two(q.type.rank))
    scores = b.op("lz.mul", b.op("lz.matmul", q, kt), scale)
    return b.op("lz.add", scores, op.operands[3]) if len(op.operands) == 4 else scores
