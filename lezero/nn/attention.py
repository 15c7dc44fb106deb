"""``lz.nn.MultiheadAttention``: PyTorch's parameters (``in_proj_weight`` 3E x E, ``in_proj_bias``,
``out_proj``), initialization and computation order (``multi_head_attention_forward``), so
copied weights give the same outputs and attention weights."""
from __future__ import annotations

import math

import numpy as np

from lezero.eager import dtypes as _dt
from lezero.eager.core import wrap as _wrap
from lezero.eager.creation import empty
from lezero.eager.device_arrays import like as _like
from lezero.eager.tensor import Tensor
import lezero.nn.functional as F
import lezero.nn.init as init
from lezero.nn.layers import Linear
from lezero.nn.module import Module, Parameter


def _additive_mask(mask: Tensor | None, like: Tensor) -> Tensor | None:
    """A boolean mask (true: not allowed) as 0 / -inf of ``like``'s dtype; float masks pass."""
    if mask is None:
        return None
    if mask.dtype is _dt.bool_:
        d = like.dtype.numpy
        return _wrap(_like(np.where(np.asarray(mask), np.asarray(-np.inf, d), np.zeros((), d)), like._data))
    return mask.to(like.dtype)


class MultiheadAttention(Module):
    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim=None, vdim=None,
                 batch_first: bool = False, device=None, dtype=None):
        super().__init__()
        if embed_dim % num_heads:
            raise AssertionError("embed_dim must be divisible by num_heads")
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError("MultiheadAttention(add_bias_kv/add_zero_attn) is not supported")
        if (kdim is not None and kdim != embed_dim) or (vdim is not None and vdim != embed_dim):
            raise NotImplementedError("MultiheadAttention with kdim/vdim different from embed_dim is not supported")
        self.embed_dim, self.num_heads, self.dropout = embed_dim, num_heads, dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        self.kdim = self.vdim = embed_dim
        self._qkv_same_embed_dim = True
        d = _dt.as_dtype(dtype) if dtype is not None else _dt.get_default_dtype()
        self.in_proj_weight = Parameter(empty(3 * embed_dim, embed_dim, dtype=d))
        if bias:
            self.in_proj_bias = Parameter(empty(3 * embed_dim, dtype=d))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=d)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        init.xavier_uniform_(self.in_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)

    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask: Tensor | None = None,
                need_weights: bool = True, attn_mask: Tensor | None = None, average_attn_weights: bool = True,
                is_causal: bool = False):
        """Inputs ``L x N x E`` (``N x L x E`` with ``batch_first``; unbatched ``L x E``); returns
        the output and, with ``need_weights``, the attention weights (``N x L x S``, averaged over
        heads unless ``average_attn_weights`` is false)."""
        unbatched = query.ndim == 2
        same_kv, same_qk = key is value, query is key
        if unbatched:
            query, key, value = query.unsqueeze(0), key.unsqueeze(0), value.unsqueeze(0)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif not self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        if is_causal and attn_mask is None:
            n = query.shape[1]
            attn_mask = _wrap(np.triu(np.ones((n, n), bool), 1))
        out, weights = self._attend(query, key, value, same_qk and same_kv, same_kv, key_padding_mask, attn_mask,
                                    need_weights, average_attn_weights)
        if unbatched:
            out = out.squeeze(0)
            weights = weights.squeeze(0) if weights is not None else None
        elif not self.batch_first:
            out = out.transpose(0, 1)
        return out, weights

    def _attend(self, query, key, value, self_attention, same_kv, key_padding_mask, attn_mask, need_weights,
                average):
        """Batch-major (``N x L x E``) throughout, heads as a dim of their own (``N x h x L x hd``):
        every reshape keeps the batch leading, so a trace's dynamic batch stays dynamic."""
        bsz, tgt_len, e = query.shape
        src_len = key.shape[1]
        h, hd = self.num_heads, self.head_dim
        w, b = self.in_proj_weight, self.in_proj_bias
        if self_attention:
            proj = F.linear(query, w, b)
            q, k, v = proj[..., :e], proj[..., e:2 * e], proj[..., 2 * e:]
        else:
            bq, bk, bv = (None, None, None) if b is None else (b[:e], b[e:2 * e], b[2 * e:])
            q = F.linear(query, w[:e], bq)
            if same_kv:
                kv = F.linear(key, w[e:], None if b is None else b[e:])
                k, v = kv[..., :e], kv[..., e:]
            else:
                k, v = F.linear(key, w[e:2 * e], bk), F.linear(value, w[2 * e:], bv)
        mask = _additive_mask(attn_mask, q)
        if mask is not None and mask.ndim == 3:  # PyTorch's N*h x L x S
            mask = mask.reshape(bsz, h, tgt_len, src_len)
        q = q.reshape(bsz, tgt_len, h, hd).permute(0, 2, 1, 3)
        k = k.reshape(bsz, src_len, h, hd).permute(0, 2, 1, 3)
        v = v.reshape(bsz, src_len, h, hd).permute(0, 2, 1, 3)
        if key_padding_mask is not None:
            padding = _additive_mask(key_padding_mask, q).reshape(bsz, 1, 1, src_len)
            mask = padding if mask is None else mask + padding
        scores = (q * math.sqrt(1.0 / float(hd))).matmul(k.transpose(-2, -1))
        if mask is not None:
            scores = scores + mask
        weights = scores.softmax(-1)
        if self.dropout > 0.0 and self.training:
            weights = F.dropout(weights, self.dropout)
        out = weights.matmul(v).permute(0, 2, 1, 3).reshape(bsz, tgt_len, e)
        out = F.linear(out, self.out_proj.weight, self.out_proj.bias)
        if not need_weights:
            return out, None
        return out, (weights.mean(1) if average else weights)

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, batch_first={self.batch_first}"

