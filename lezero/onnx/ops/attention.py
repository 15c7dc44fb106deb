"""Transformer operators: Attention (opset 23+), RotaryEmbedding, SwiGLU, TensorScatter.

Attention follows ONNX's reference step by step: 3-D inputs split into heads, the scale applied
as ``sqrt(scale)`` to both Q and K, the past cache concatenated, masks (boolean or additive),
causal and sliding-window biases (offset by the cache, or per batch by ``nonpad_kv_seqlen``),
grouped-query heads repeated, softcap, a softmax whose fully masked rows give 0, and the four
``qk_matmul_output`` modes.  In float32 without softcap, another softmax precision or a
``qk_matmul_output_mode`` the scores are ``q k^T scale (+ bias)`` and ``lz.softmax``, the chain
``fuse-attention`` makes one ``lz.attention`` kernel of (issue 11), the hidden rows zeroed after it.
"""
from __future__ import annotations

import math

import numpy as np

from lezero.ir.types import F32, I1, I64
import lezero.onnx.element_types as element_types
from lezero.onnx.registry import converter
from lezero.onnx.ops.tensor import broadcast_to


def _heads(ctx, x, heads):
    """B x S x (H*D) -> B x H x S x D."""
    b, s, hidden = ctx.shape(x)
    return ctx.transpose(ctx.reshape(x, [b, s, heads, hidden // heads]), [0, 2, 1, 3])


def _neg_inf_where_false(ctx, allowed, like):
    return ctx.op("lz.select", allowed, ctx.scalar(0, like), ctx.scalar(-math.inf, like))


def _frontier(ctx, q_len, kv_len, offset, like, window=None):
    """The additive bias allowing key ``j`` for query ``i`` when ``j <= i + offset`` (causal), or
    within ``window = (left, right)`` of ``i + offset``.  ``offset``: a number, or a per-batch
    i64 value (the result is then batch x 1 x q x kv)."""
    i = np.arange(q_len).reshape(q_len, 1)
    j = np.arange(kv_len).reshape(1, kv_len)
    if isinstance(offset, int):
        diff = i + offset - j
        if window is None:
            allowed = diff >= 0
        else:
            left, right = window
            allowed = np.ones_like(diff, bool)
            if left >= 0:
                allowed &= diff <= left
            if right >= 0:
                allowed &= -diff <= right
        return _neg_inf_where_false(ctx, ctx.constant(allowed), like)
    base = ctx.reshape(offset, [-1, 1, 1, 1])  # batch x 1 x 1 x 1
    diff = ctx.op("lz.add", base, ctx.constant((i - j).reshape(1, 1, q_len, kv_len).astype(np.int64)))
    zero = ctx.scalar(0, I64)
    if window is None:
        allowed = ctx.op("lz.cmp", diff, zero, predicate="ge")
    else:
        left, right = window
        allowed = ctx.constant(np.ones((), bool), I1)
        if left >= 0:
            allowed = ctx.op("lz.and", allowed, ctx.op("lz.cmp", diff, ctx.scalar(left, I64), predicate="le"))
        if right >= 0:
            allowed = ctx.op("lz.and", allowed, ctx.op("lz.cmp", ctx.op("lz.neg", diff), ctx.scalar(right, I64),
                                                        predicate="le"))
    return _neg_inf_where_false(ctx, allowed, like)


def _masked_softmax(ctx, x):
    """Softmax over the last axis where a row of -inf gives zeros, not nan."""
    m = ctx.op("lz.reduce_max", x, axes=[-1], keepdims=True)
    safe = ctx.op("lz.select", ctx.op("lz.cmp", m, ctx.scalar(-math.inf, m), predicate="eq"), ctx.scalar(0, m), m)
    e = ctx.op("lz.exp", ctx.op("lz.sub", x, safe))
    s = ctx.op("lz.reduce_sum", e, axes=[-1], keepdims=True)
    s = ctx.op("lz.select", ctx.op("lz.cmp", s, ctx.scalar(0, s), predicate="eq"), ctx.scalar(1, s), s)
    return ctx.op("lz.div", e, s)


def _hidden_rows(ctx, bias):
    """Where the additive ``bias`` hides every key of a query (its row is all -inf), keepdims."""
    bias_max = ctx.op("lz.reduce_max", bias, axes=[-1], keepdims=True)
    return ctx.op("lz.cmp", bias_max, ctx.scalar(-math.inf, bias_max), predicate="eq")


def _fusable_chain(ctx, q, k, v, scale, bias, hides_rows):
    """``(softmax(q k^T scale + bias) v, q k^T scale)`` in the form ``fuse-attention`` makes one
    ``lz.attention`` kernel of: the scale on the product (ONNX's reference scales q and k by
    sqrt(scale) each; the same up to rounding), ``lz.softmax``.  A row the bias hides entirely is
    0, as ONNX's softmax makes it (``lz.softmax``'s is nan): a select after the product with v, only
    where the bias can hide a row (a mask, a window, padding; not a causal frontier alone)."""
    qk = ctx.op("lz.mul", ctx.op("lz.matmul", q, ctx.transpose(k, [0, 1, 3, 2])), ctx.scalar(scale, q))
    scores = qk if bias is None else ctx.op("lz.add", qk, bias)
    y = ctx.op("lz.matmul", ctx.op("lz.softmax", scores, axis=-1), v)
    if hides_rows:
        y = ctx.op("lz.select", _hidden_rows(ctx, bias), ctx.scalar(0, y), y)
    return y, qk


@converter("Attention")
def attention(ctx):
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    mask, past_key, past_value, nonpad = ctx.optional(3), ctx.optional(4), ctx.optional(5), ctx.optional(6)
    scale = ctx.attr("scale", None)
    causal = bool(ctx.attr("is_causal", 0))
    q_heads, kv_heads = ctx.attr("q_num_heads", None), ctx.attr("kv_num_heads", None)
    precision = ctx.attr("softmax_precision", None)
    softcap = ctx.attr("softcap", None)
    mode = ctx.attr("qk_matmul_output_mode", 0)
    left, right = ctx.attr("left_window_size", -1), ctx.attr("right_window_size", -1)
    et = ctx.dtype(q)
    rank3 = ctx.rank(q) == 3
    if rank3:
        if q_heads is None or kv_heads is None:
            raise ctx.error("3-D inputs need attributes q_num_heads and kv_num_heads")
        q, k, v = _heads(ctx, q, q_heads), _heads(ctx, k, kv_heads), _heads(ctx, v, kv_heads)
    elif ctx.rank(q) != 4:
        raise ctx.error(f"Q must be 3-D or 4-D, got {q.type}")
    if (past_key is None) != (past_value is None):
        raise ctx.error("past_key and past_value must be given together")
    if scale is None:
        scale = 1 / math.sqrt(ctx.shape(q)[3])
    factor = float(np.asarray(np.sqrt(scale), et.numpy_dtype if et.name != "bf16" else np.float32))
    present_key = ctx.op("lz.concat", past_key, k, axis=2) if past_key is not None else k
    present_value = ctx.op("lz.concat", past_value, v, axis=2) if past_value is not None else v
    k, v = present_key, present_value
    q_len, kv_len = ctx.shape(q)[2], ctx.shape(k)[2]
    past_len = ctx.shape(past_key)[2] if past_key is not None else 0

    bias = ctx.constant(np.zeros((q_len, kv_len)), et)
    if mask is not None:
        short = kv_len - ctx.shape(mask)[-1]
        if short > 0:
            pads = [0] * (2 * ctx.rank(mask))
            pads[-1] = short
            mask = ctx.op("lz.pad", mask, pads=pads, value=0.0 if ctx.dtype(mask) == I1 else -math.inf)
        if ctx.dtype(mask) == I1:
            mask = _neg_inf_where_false(ctx, mask, q)
        else:
            mask = ctx.cast(mask, et)
    per_batch = None
    if nonpad is not None and past_key is None:
        per_batch = ctx.op("lz.sub", ctx.cast(nonpad, I64), ctx.scalar(q_len, I64))
    if causal:
        base = mask if mask is not None else bias
        bias = ctx.op("lz.add", base, _frontier(ctx, q_len, kv_len, per_batch if per_batch is not None else past_len, q))
    elif mask is not None:
        bias = ctx.op("lz.add", bias, mask)
    if left >= 0 or right >= 0:
        offset = per_batch if per_batch is not None else past_len
        bias = ctx.op("lz.add", bias, _frontier(ctx, q_len, kv_len, offset, q, (left, right)))
    if nonpad is not None:
        keep = ctx.op("lz.cmp", ctx.constant(np.arange(kv_len, dtype=np.int64)),
                      ctx.reshape(ctx.cast(nonpad, I64), [-1, 1]), predicate="lt")
        bias = ctx.op("lz.add", bias, ctx.reshape(_neg_inf_where_false(ctx, keep, q), [-1, 1, 1, kv_len]))

    heads, k_heads = ctx.shape(q)[1], ctx.shape(k)[1]
    if heads != k_heads and heads % k_heads == 0:
        reps = heads // k_heads
        k, v = (_repeat_heads(ctx, t, reps) for t in (k, v))
    target = et if precision is None else element_types.from_onnx(precision)
    if target is None:
        raise ctx.unsupported(f"softmax_precision {element_types.onnx_type_name(precision)}")
    hides_rows = mask is not None or nonpad is not None or left >= 0 or right >= 0
    if et == F32 and target == et and (softcap is None or softcap <= 0) and mode == 0:  # fuse-attention's case
        y, qk_output = _fusable_chain(ctx, q, k, v, scale, bias if causal or hides_rows else None, hides_rows)
    else:
        qk = ctx.op("lz.matmul", ctx.op("lz.mul", q, ctx.scalar(factor, q)),
                    ctx.transpose(ctx.op("lz.mul", k, ctx.scalar(factor, k)), [0, 1, 3, 2]))
        if softcap is not None and softcap > 0:
            qk = ctx.op("lz.mul", ctx.op("lz.tanh", ctx.op("lz.div", qk, ctx.scalar(softcap, qk))),
                        ctx.scalar(softcap, qk))
        with_bias = ctx.op("lz.add", qk, bias)
        qk_output = with_bias if mode == 2 else qk
        probabilities = _masked_softmax(ctx, ctx.cast(with_bias, target))
        probabilities = ctx.op("lz.select", _hidden_rows(ctx, bias), ctx.scalar(0, probabilities), probabilities)
        if mode == 3:
            qk_output = probabilities
        y = ctx.op("lz.matmul", ctx.cast(probabilities, et), v)
    if rank3:
        b, h, s, d = ctx.shape(y)
        y = ctx.reshape(ctx.transpose(y, [0, 2, 1, 3]), [b, s, h * d])
    qk_output = ctx.cast(qk_output, et)
    if mode not in (0, 1, 2, 3):
        raise ctx.error(f"attribute 'qk_matmul_output_mode' must be 0, 1, 2 or 3, got {mode}")
    return [y, present_key, present_value, qk_output]


def _repeat_heads(ctx, x, reps):
    """B x H x S x D -> B x (H*reps) x S x D, each head repeated ``reps`` times in a row."""
    b, h, s, d = ctx.shape(x)
    expanded = broadcast_to(ctx, ctx.reshape(x, [b, h, 1, s, d]), [b, h, reps, s, d])
    return ctx.reshape(expanded, [b, h * reps, s, d])


@converter("RotaryEmbedding")
def rotary_embedding(ctx):
    x, cos, sin, positions = ctx.input(0), ctx.input(1), ctx.input(2), ctx.optional(3)
    interleaved = bool(ctx.attr("interleaved", 0))
    rotary_dim = ctx.attr("rotary_embedding_dim", 0)
    num_heads = ctx.attr("num_heads", 0)
    original = ctx.shape(x)
    if len(original) == 4:
        x = ctx.transpose(x, [0, 2, 1, 3])  # B x S x H x D
    elif len(original) == 3:
        b, s, hidden = original
        if not num_heads:
            raise ctx.error("3-D input needs attribute num_heads")
        x = ctx.reshape(x, [b, s, num_heads, hidden // num_heads])
    else:
        raise ctx.error(f"input must be 3-D or 4-D, got {x.type}")
    head = ctx.shape(x)[3]
    rotary_dim = rotary_dim or head
    half = rotary_dim // 2
    if positions is not None:
        cos = ctx.op("lz.gather", cos, positions, axis=0)
        sin = ctx.op("lz.gather", sin, positions, axis=0)
    if ctx.shape(cos)[-1] != half or ctx.shape(sin)[-1] != half:
        raise ctx.error(f"the cos and sin caches must have rotary_embedding_dim/2 = {half} columns")
    cos = ctx.reshape(cos, list(ctx.shape(cos)[:-1]) + [1, half])
    sin = ctx.reshape(sin, list(ctx.shape(sin)[:-1]) + [1, half])
    rotated = ctx.op("lz.slice", x, starts=[0], ends=[rotary_dim], axes=[3]) if rotary_dim < head else x
    if interleaved:
        x1 = ctx.op("lz.slice", rotated, starts=[0], ends=[rotary_dim], axes=[3], steps=[2])
        x2 = ctx.op("lz.slice", rotated, starts=[1], ends=[rotary_dim], axes=[3], steps=[2])
    else:
        x1 = ctx.op("lz.slice", rotated, starts=[0], ends=[half], axes=[3])
        x2 = ctx.op("lz.slice", rotated, starts=[half], ends=[rotary_dim], axes=[3])
    real = ctx.op("lz.sub", ctx.op("lz.mul", cos, x1), ctx.op("lz.mul", sin, x2))
    imag = ctx.op("lz.add", ctx.op("lz.mul", sin, x1), ctx.op("lz.mul", cos, x2))
    if interleaved:
        shape = ctx.shape(real)
        pair = ctx.op("lz.concat", ctx.reshape(real, list(shape) + [1]), ctx.reshape(imag, list(shape) + [1]), axis=4)
        rotated = ctx.reshape(pair, list(shape[:3]) + [rotary_dim])
    else:
        rotated = ctx.op("lz.concat", real, imag, axis=3)
    if rotary_dim < head:
        rest = ctx.op("lz.slice", x, starts=[rotary_dim], ends=[head], axes=[3])
        rotated = ctx.op("lz.concat", rotated, rest, axis=3)
    if len(original) == 3:
        return ctx.reshape(rotated, original)
    return ctx.transpose(rotated, [0, 2, 1, 3])


@converter("SwiGLU")
def swiglu(ctx):
    a, b = ctx.input(0), ctx.input(1)
    alpha = ctx.attr("alpha", 1.0)
    scaled = a if alpha == 1 else ctx.op("lz.mul", a, ctx.scalar(alpha, a))
    return ctx.op("lz.mul", ctx.op("lz.mul", a, ctx.op("lz.sigmoid", scaled)), b)


@converter("TensorScatter")
def tensor_scatter(ctx):
    """The update written into the cache at ``write_indices[b] + s`` along ``axis`` (modulo the
    cache length in circular mode): ``lz.scatter_nd`` with index tuples over the leading dims."""
    cache, update, write = ctx.input(0), ctx.input(1), ctx.optional(2)
    mode = ctx.attr("mode", "linear")
    if mode not in ("linear", "circular"):
        raise ctx.error(f"attribute 'mode' must be linear or circular, got {mode!r}")
    shape, ushape = ctx.shape(cache), ctx.shape(update)
    axis = ctx.attr("axis", -2) % len(shape)
    lead = list(ushape[:axis + 1])  # prefix dims and the update's sequence
    columns = []
    for d in range(axis):
        view = [1] * len(lead)
        view[d] = lead[d]
        grid = np.broadcast_to(np.arange(lead[d], dtype=np.int64).reshape(view), lead)
        columns.append(ctx.constant(np.ascontiguousarray(grid).reshape(lead + [1])))
    view = [1] * len(lead)
    view[axis] = lead[axis]
    position = ctx.constant(np.arange(lead[axis], dtype=np.int64).reshape(view))
    if write is not None:
        start = ctx.reshape(ctx.cast(write, I64), [-1] + [1] * (len(lead) - 1))
        position = ctx.op("lz.add", position, start)
    if mode == "circular":
        length = ctx.scalar(shape[axis], I64)
        position = ctx.op("lz.rem", position, length)
        position = ctx.op("lz.select", ctx.op("lz.cmp", position, ctx.scalar(0, I64), predicate="lt"),
                          ctx.op("lz.add", position, length), position)
    columns.append(ctx.reshape(broadcast_to(ctx, position, lead), lead + [1]))
    tuples = ctx.op("lz.concat", *columns, axis=len(lead)) if len(columns) > 1 else columns[0]
    return ctx.op("lz.scatter_nd", cache, tuples, update)


@converter("FlexAttention", domain="ai.onnx.preview")
def flex_attention(ctx):
    """Attention whose scores and probabilities pass through optional subgraphs (``score_mod``,
    ``prob_mod``), inlined here."""
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    et = ctx.dtype(q)
    heads, kv_heads = ctx.shape(q)[1], ctx.shape(k)[1]
    if heads != kv_heads:
        if heads % kv_heads:
            raise ctx.error(f"{heads} query heads are not a multiple of {kv_heads} key heads")
        k, v = _repeat_heads(ctx, k, heads // kv_heads), _repeat_heads(ctx, v, heads // kv_heads)
    scale = ctx.attr("scale", None)
    scale = 1 / math.sqrt(ctx.shape(q)[3]) if scale is None else scale
    factor = float(np.sqrt(np.float32(scale)).astype(et.numpy_dtype if et.name != "bf16" else np.float32))
    scores = ctx.op("lz.matmul", ctx.op("lz.mul", q, ctx.scalar(factor, q)),
                    ctx.transpose(ctx.op("lz.mul", k, ctx.scalar(factor, k)), [0, 1, 3, 2]))
    precision = ctx.attr("softmax_precision", None)
    if precision is not None:
        work = element_types.from_onnx(precision)
        if work is None:
            raise ctx.unsupported(f"softmax_precision {element_types.onnx_type_name(precision)}")
    else:
        work = et if et.bitwidth >= 32 else element_types.from_onnx(1)
    scores = ctx.cast(scores, work)
    score_mod, prob_mod = ctx.attr("score_mod", None), ctx.attr("prob_mod", None)
    if score_mod is not None:
        scores = ctx.cast(ctx.inline_graph(score_mod, [scores], "score_mod")[0], work)
    probabilities = ctx.op("lz.softmax", scores, axis=-1)
    if prob_mod is not None:
        probabilities = ctx.cast(ctx.inline_graph(prob_mod, [probabilities], "prob_mod")[0], work)
    return ctx.cast(ctx.op("lz.matmul", probabilities, ctx.cast(v, work)), ctx.dtype(v))


@converter("CausalConvWithState")
def causal_conv_with_state(ctx):
    """A depthwise 1-D convolution over the past state and the input; the new state is the last
    ``k - 1`` columns of that concatenation."""
    x, w, bias, past = ctx.input(0), ctx.input(1), ctx.optional(2), ctx.optional(3)
    activation = ctx.attr("activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise ctx.error(f"attribute 'activation' must be none, silu or swish, got {activation!r}")
    b, c, _ = ctx.shape(x)
    k = ctx.shape(w)[2]
    if past is None:
        past = ctx.constant(np.zeros((b, c, k - 1)), ctx.dtype(x))
    padded = ctx.op("lz.concat", past, x, axis=2) if k > 1 else x
    from lezero.onnx.ops.nn import conv2d

    y = conv2d(ctx, padded, w, [1], [0, 0], [1], c)
    if bias is not None:
        y = ctx.op("lz.add", y, ctx.reshape(bias, [-1, 1]))
    if activation != "none":
        f = ctx.cast(y, element_types.from_onnx(1))
        y = ctx.cast(ctx.op("lz.mul", f, ctx.op("lz.sigmoid", f)), ctx.dtype(x))
    length = ctx.shape(padded)[2]
    state = ctx.op("lz.slice", padded, starts=[length - (k - 1)], ends=[length], axes=[2])
    return [y, state]


@converter("LinearAttention")
def linear_attention(ctx):
    """The recurrence of ONNX's reference, unrolled over the sequence (its length must be at most
    ``MAX_UNROLLED_STEPS``): per step the state decays (gated), is corrected toward the value
    (delta), takes the key-value outer product, and is read by the query."""
    q, k, v = ctx.input(0), ctx.input(1), ctx.input(2)
    past, decay, beta = ctx.optional(3), ctx.optional(4), ctx.optional(5)
    ctx.attr("chunk_size", 64)  # a tuning hint: no effect on the result
    rule = ctx.attr("update_rule", "gated_delta")
    q_heads, kv_heads = ctx.attr("q_num_heads"), ctx.attr("kv_num_heads")
    scale = ctx.attr("scale", 0.0)
    if rule not in ("linear", "gated", "delta", "gated_delta"):
        raise ctx.error(f"attribute 'update_rule' must be linear, gated, delta or gated_delta, got {rule!r}")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != (decay is not None) or delta != (beta is not None):
        raise ctx.error(f"update_rule {rule!r} {'needs' if gating else 'forbids'} decay and "
                        f"{'needs' if delta else 'forbids'} beta")
    f32 = element_types.from_onnx(1)
    b, t, _ = ctx.shape(q)
    if t > MAX_UNROLLED_STEPS:
        raise ctx.unsupported(f"a sequence of {t} steps (lezero unrolls at most {MAX_UNROLLED_STEPS})")
    d_k = ctx.shape(q)[2] // q_heads
    d_v = ctx.shape(v)[2] // kv_heads
    group = q_heads // kv_heads
    q4, k4, v4 = (ctx.cast(_heads(ctx, x, h), f32) for x, h in ((q, q_heads), (k, kv_heads), (v, kv_heads)))
    if decay is not None:
        last = ctx.shape(decay)[2]
        decay4 = ctx.transpose(ctx.reshape(decay, [b, t, kv_heads, last // kv_heads]), [0, 2, 1, 3])
        decay4 = ctx.op("lz.exp", ctx.cast(decay4, f32))
    if beta is not None:
        beta4 = ctx.cast(ctx.transpose(ctx.reshape(beta, [b, t, ctx.shape(beta)[2], 1]), [0, 2, 1, 3]), f32)
    state = ctx.cast(past, f32) if past is not None else ctx.constant(np.zeros((b, kv_heads, d_k, d_v)), f32)
    factor = 1 / math.sqrt(d_k) if not scale else float(scale)

    def step(x4, i):
        return ctx.op("lz.slice", x4, starts=[i], ends=[i + 1], axes=[2])  # B x H x 1 x D

    outputs = []
    for i in range(t):
        q_t, k_t, v_t = step(q4, i), step(k4, i), step(v4, i)
        if gating:
            state = ctx.op("lz.mul", state, ctx.transpose(step(decay4, i), [0, 1, 3, 2]))  # B x H x (1|dk) x 1
        if delta:
            retrieved = ctx.op("lz.matmul", k_t, state)                                    # B x H x 1 x dv
            v_t = ctx.op("lz.mul", step(beta4, i), ctx.op("lz.sub", v_t, retrieved))
        state = ctx.op("lz.add", state, ctx.op("lz.mul", ctx.transpose(k_t, [0, 1, 3, 2]), v_t))
        read = _repeat_heads(ctx, state, group) if group > 1 else state
        outputs.append(ctx.op("lz.mul", ctx.op("lz.matmul", q_t, read), ctx.scalar(factor, f32)))
    out = ctx.op("lz.concat", *outputs, axis=2) if len(outputs) > 1 else outputs[0]  # B x Hq x T x dv
    out = ctx.cast(ctx.reshape(ctx.transpose(out, [0, 2, 1, 3]), [b, t, q_heads * d_v]), ctx.dtype(q))
    return [out, ctx.cast(state, ctx.dtype(past) if past is not None else ctx.dtype(q))]


MAX_UNROLLED_STEPS = 256
