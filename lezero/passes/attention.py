"""fuse-attention: the matmul -> scale -> mask -> softmax -> matmul chain of an exported
transformer as one ``lz.kernel`` of kind ``attention`` holding an ``lz.attention`` (issue 11).

Why a pass of its own, before ``decompose``: the chain is easiest to recognize while the softmax
is still one ``lz.softmax`` (decompose turns it into five ops), and partition, whose groups hold
one contraction each, would cut it into three kernels that write and read the ``Sq x Sk`` scores.
The kernel it builds is final: partition and fuse leave existing kernels alone.  The fusion cost
model has its say (``estimates``: the fused kernel's bytes and work against the three kernels'),
and ``--debug=fusion`` logs both estimates for every chain.

What it matches, each intermediate read by the next op only (so an autodiff graph that keeps the
softmax for its backward pass is left as it is)::

    s = lz.matmul(q', k^T')                    q' = q or q * c1,  k^T' = k^T or k^T * c2
    s = s * c  |  s / c                        optional, c a splat constant (ViT scales q and k^T)
    s = s + mask                               optional, mask broadcasting to s (BERT, GPT-2), or
    s = select(keep, s, fill) | select(hide, fill, s)   a causal mask as older GPT-2 exports write
                                               it, fill a splat <= HIDDEN: the additive mask
                                               select(keep, 0, fill) then gives the same softmax
    o = lz.matmul(lz.softmax(s, axis=-1), v)

float32, static shapes, q/k/v of one rank and one batch shape.  ``k`` is ``k^T`` with its last
two dims swapped: a transpose feeding the matmul becomes one transpose of its source with the
last two entries of its permutation swapped.

The kernel reads q, k and v through the reshapes and transposes that feed them (the exports'
``[b, s, h, d] -> [b, h, s, d]``), cloned into its region, so it reads the projections' outputs
in place with permuted strides (``operand_strides``); v only while its rows stay contiguous (the
kernel loads them as vectors).  An output read only by a transpose that keeps the last dim last
(and a reshape after it) is written in that layout, which removes the transpose kernel before the
output projection.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lezero.ir.attributes import FloatAttr, StringAttr
from lezero.ir.builder import Builder
from lezero.ir.core import Block, ModuleOp, Operation, Region, Value
from lezero.ir.dialect.data_movement import SliceOp, TransposeOp
from lezero.ir.types import F32, F64, TensorType
import lezero.passes.fusion_cost as fusion_cost
from lezero.passes.canonicalize import ROW_PRODUCTS, splat
from lezero.passes.constant_fold import constant_value
from lezero.passes.fuse import KernelNamer
from lezero.passes.fusion_cost import row_major
from lezero.passes.pass_base import Pass
from lezero.passes.placement import FUSION_LOG
from lezero.passes.rewriter import apply_patterns_greedily, patterns_from_rules

VIEW_OPS = ("lz.reshape", "lz.transpose", "lz.slice")
# A select's fill at most this is a hidden key: s + fill rounds to fill in float32 for |s| < 1e22
# (fill's ulp is >= 2^70), so adding it gives what selecting it does, exactly
HIDDEN = -1e30


def reshaped_strides(shape, strides, new_shape) -> tuple | None:
    """The strides of ``new_shape`` viewing the same elements as ``(shape, strides)`` in row-major
    order without a copy, or None when no strides do (numpy's no-copy reshape rule: each group of
    old dims merged or split must be one stride apart)."""
    old = [(d, s) for d, s in zip(shape, strides) if d != 1]
    out, i = [], 0
    groups_new = list(new_shape)
    k = 0
    while k < len(groups_new):
        if groups_new[k] == 1:
            out.append(0)
            k += 1
            continue
        if i >= len(old):
            return None
        # take old dims until their product matches the new dims' product
        n_old, n_new, j, m = old[i][0], groups_new[k], i + 1, k + 1
        while n_old != n_new:
            if n_old < n_new:
                if j >= len(old):
                    return None
                n_old *= old[j][0]
                j += 1
            else:
                if m >= len(groups_new):
                    return None
                n_new *= groups_new[m]
                m += 1
        for t in range(i, j - 1):  # the old dims of the group must be one contiguous run
            if old[t][1] != old[t + 1][1] * old[t + 1][0]:
                return None
        stride = old[j - 1][1]
        group = []
        for d in reversed(groups_new[k:m]):
            group.append(0 if d == 1 else stride)
            stride *= d
        out.extend(reversed(group))
        i, k = j, m
    return tuple(out) if i == len(old) else None


def view_of(value: Value, root: Value) -> tuple[int, tuple] | None:
    """``(offset, strides)``: where ``value``, ``root`` through a chain of ``VIEW_OPS``, reads
    ``root``'s row-major memory (the element offset of its first element and the element step
    along each dim); None when a reshape of the chain needs a copy."""
    chain = []
    while value is not root:
        op = value.owner
        chain.append(op)
        value = op.operands[0]
    shape, offset, strides = root.type.shape, 0, row_major(root.type.shape)
    for op in reversed(chain):
        attrs = op.definition.attrs(op)
        if op.name == "lz.transpose":
            perm = TransposeOp.permutation(attrs, len(shape))
            strides = tuple(strides[p] for p in perm)
        elif op.name == "lz.slice":
            ranges = [s.indices(d) for s, d in zip(SliceOp.slices(attrs, len(shape)), shape)]
            offset += sum(start * stride for (start, _, _), stride in zip(ranges, strides))
            strides = tuple(stride * step for (_, _, step), stride in zip(ranges, strides))
        else:
            strides = reshaped_strides(shape, strides, op.result.type.shape)
            if strides is None:
                return None
        shape = op.result.type.shape
    return offset, strides


def _only_use(v: Value, name: str) -> Operation | None:
    users = list(v.users)
    return users[0] if len(users) == 1 and users[0].name == name and len(v.uses) == 1 else None


def _unscaled(v: Value) -> tuple[Value, float]:
    """``(x, c)`` when ``v`` is ``x * c`` or ``x / c`` read only here, ``c`` a splat; else ``(v, 1)``."""
    op = v.owner
    if isinstance(op, Operation) and op.name in ("lz.mul", "lz.div") and len(v.uses) == 1:
        x, c = op.operands
        value = splat(c)
        if value is not None and x.type.shape == v.type.shape and float(value) != 0.0:
            return x, float(value) if op.name == "lz.mul" else 1.0 / float(value)
        if op.name == "lz.mul":
            value = splat(x)
            if value is not None and c.type.shape == v.type.shape:
                return c, float(value)
    return v, 1.0


@dataclass(frozen=True)
class AttentionMatch:
    """One chain to replace: its ops (erased after), q, k^T (as the matmul reads it), v, the mask
    (or None), the scale, and the value the chain computes."""

    ops: tuple
    q: Value
    k_transposed: Value
    v: Value
    mask: Value | None
    scale: float
    output: Value
    hidden: tuple | None = None  # a select's (condition, fill, whether the condition keeps): the mask to build


def match_attention(softmax: Operation) -> AttentionMatch | None:
    """The chain ending at ``softmax`` (an ``lz.softmax``), or None (module docstring)."""
    x = softmax.operands[0]
    t = x.type
    if not (isinstance(t, TensorType) and t.is_static and t.element_type == F32 and t.rank >= 2):
        return None
    if softmax.definition.attrs(softmax).axis not in (-1, t.rank - 1):
        return None
    pv = _only_use(softmax.result, "lz.matmul")
    if pv is None or pv.operands[0] is not softmax.result:
        return None
    ops = [softmax, pv]
    mask = None
    add = x.owner
    if isinstance(add, Operation) and add.name == "lz.add" and len(x.uses) == 1:
        for scores, other in (add.operands, reversed(add.operands)):
            if scores.type.shape == t.shape and (_is_product(scores) or _hidden_keys(scores) is not None):
                x, mask = scores, other
                ops.append(add)
                break
    hidden = _hidden_keys(x)
    if hidden is not None:
        ops.append(x.owner)
        x, hidden = hidden[0], hidden[1:]
    x, scale = _unscaled_product(x, ops)
    if x is None:
        return None
    qk = x.owner
    ops.append(qk)
    q, c1 = _unscaled(qk.operands[0])
    kt, c2 = _unscaled(qk.operands[1])
    ops += [operand.owner for operand, inner in ((qk.operands[0], q), (qk.operands[1], kt)) if operand is not inner]
    v = pv.operands[1]
    shapes = [q.type.shape, kt.type.shape, v.type.shape]
    if any(len(s) != t.rank for s in shapes) or not (shapes[0][:-2] == shapes[1][:-2] == shapes[2][:-2] ==
                                                     t.shape[:-2]):
        return None
    if any(not (isinstance(w.type, TensorType) and w.type.is_static and w.type.element_type == F32)
           for w in (q, kt, v) + ((mask,) if mask is not None else ())):
        return None
    return AttentionMatch(tuple(ops), q, kt, v, mask, scale * c1 * c2, pv.result, hidden)


def estimates(match: AttentionMatch) -> tuple[float, float]:
    """Seconds of the fused kernel and of the three unfused ones, in the fusion cost model's terms
    (``fusion_cost``'s launch, bandwidth and rates): both read q, k, v and the mask and write the
    output once and do the same products and exps; the unfused ones also write the scores, read
    and write them in the softmax, and read them again in the second product.  The fused kernel's
    packed copy of k (one batch index's D x Sk floats) is written and read again from memory only
    when it outgrows the cache (``fusion_cost.SHARED_CACHE_BYTES``).
    Measured (``benchmarks/attention.py``), the fused kernel was faster in every shape tried,
    decode shapes (one query, 513 keys) too, where counting the packed copy as memory traffic
    refused it."""
    q, kt, v = (w.type for w in (match.q, match.k_transposed, match.v))
    io_bytes = sum(w.type.nbytes for w in (match.q, match.k_transposed, match.v, match.output)) + \
        (match.mask.type.nbytes if match.mask is not None else 0) + \
        (match.hidden[0].type.nbytes if match.hidden is not None else 0)
    scores = math.prod(q.shape[:-1]) * kt.shape[-1]
    flops = 2 * scores * (q.shape[-1] + v.shape[-1])
    compute = flops / fusion_cost.CONTRACTION_RATE["gemm"] + \
        scores * fusion_cost.OP_COST["lz.exp"] / fusion_cost.VECTOR_RATE
    packed = 4 * math.prod(kt.shape[-2:])
    packing = 2 * kt.nbytes if packed > fusion_cost.SHARED_CACHE_BYTES else 0
    fused = fusion_cost.LAUNCH_SECONDS + max((io_bytes + packing) / fusion_cost.BANDWIDTH, compute)
    unfused = 3 * fusion_cost.LAUNCH_SECONDS + max((io_bytes + 4 * 4 * scores) / fusion_cost.BANDWIDTH, compute)
    return fused, unfused


def _hidden_keys(v: Value) -> tuple | None:
    """``(scores, condition, fill, whether the condition keeps)`` when ``v``, read only here, is
    ``select(keep, scores, fill)`` or ``select(hide, fill, scores)`` of the (scaled) product, fill
    a splat <= HIDDEN; else None."""
    op = v.owner
    if not (isinstance(op, Operation) and op.name == "lz.select" and len(v.uses) == 1):
        return None
    condition, a, b = op.operands
    for scores, fill, keeps in ((a, b, True), (b, a, False)):
        value = splat(fill)
        if value is not None and float(value) <= HIDDEN and scores.type.shape == v.type.shape and \
                _is_product(scores):
            return scores, condition, float(value), keeps
    return None


def _is_product(v: Value) -> bool:
    return _unscaled_product(v, [])[0] is not None


def _unscaled_product(v: Value, ops: list) -> tuple[Value | None, float]:
    """``(q @ k^T, scale)`` when ``v`` is that product, scaled or not; ``ops`` gets the scaling op."""
    x, scale = _unscaled(v)
    if x is not v:
        if not isinstance(x.owner, Operation) or x.owner.name != "lz.matmul":
            return None, 1.0
        ops.append(v.owner)
    if not (isinstance(x.owner, Operation) and x.owner.name == "lz.matmul" and len(x.uses) == 1):
        return None, 1.0
    return x, scale


def _keys(b: Builder, kt: Value) -> Value:
    """k (keys as rows) from k^T: one transpose of k^T's source, or of k^T itself."""
    rank = kt.type.rank
    swap = list(range(rank - 2)) + [rank - 1, rank - 2]
    source, perm = kt, swap
    op = kt.owner
    if isinstance(op, Operation) and op.name == "lz.transpose":
        source = op.operands[0]
        inner = TransposeOp.permutation(op.definition.attrs(op), rank)
        perm = [inner[p] for p in swap]
    if perm == list(range(rank)):
        return source
    return b.op("lz.transpose", source, perm=perm)


def _additive_mask(b: Builder, condition: Value, fill: float, keeps: bool) -> Value:
    """``select(keep, 0, fill)`` (or ``select(hide, fill, 0)``): the additive form of a select's mask."""
    zero, hidden = (b.constant(np.asarray(x, np.float32), TensorType((), F32)) for x in (0.0, fill))
    return b.op("lz.select", condition, zero, hidden) if keeps else b.op("lz.select", condition, hidden, zero)


def _output_views(out: Value) -> list[Operation]:
    """The transpose (keeping the last dim last) and reshape that alone read ``out``, if any."""
    views = []
    t = _only_use(out, "lz.transpose")
    if t is None:
        return views
    perm = TransposeOp.permutation(t.definition.attrs(t), out.type.rank)
    if perm[-1] != out.type.rank - 1:
        return views
    views.append(t)
    r = _only_use(t.result, "lz.reshape")
    if r is not None:
        views.append(r)
    return views


def _source(v: Value) -> Value:
    """The value ``v`` reads through its chain of views."""
    while isinstance(v.owner, Operation) and v.owner.name in VIEW_OPS:
        v = v.owner.operands[0]
    return v


def _projection(v: Value) -> tuple | None:
    """``(a, w, bias, ops)`` when ``v``, read once, is ``matmul(a, w) [+ bias]``: ``w`` a constant
    matrix, ``bias`` a constant ``[n]`` (or None), ``ops`` the product's then the bias's op."""
    op, bias, ops = v.owner, None, []
    if len(v.uses) != 1 or not isinstance(op, Operation):
        return None
    if op.name == "lz.add":
        x, y = op.operands
        product, bias = (x, y) if constant_value(y) is not None else (y, x)
        if constant_value(bias) is None or bias.type.shape != (v.type.shape[-1],) or len(product.uses) != 1:
            return None
        ops, op = [op], product.owner
    if not (isinstance(op, Operation) and op.name == "lz.matmul") or constant_value(op.operands[1]) is None \
            or op.operands[1].type.rank != 2:
        return None
    return op.operands[0], op.operands[1], bias, [op] + ops


def merge_projections(match: AttentionMatch) -> bool:
    """q, k and v projected from one activation by three constant weights (BERT's query, key and
    value Linears) as one matmul by the weights side by side, q, k and v slices of its product:
    one GEMM of 3n columns (32 rows: 66 -> 54 us, as GPT-2's fused c_attn), and the kernel reads
    the slices in place.  False when the three are not such projections."""
    sources = [_source(x) for x in (match.q, match.k_transposed, match.v)]
    found = [_projection(x) for x in sources]
    if any(f is None for f in found) or len({id(x) for x in sources}) != 3:
        return False
    a = found[0][0]
    if any(f[0] is not a for f in found) or len({f[2] is None for f in found}) != 1:
        return False
    ops = [op for f in found for op in f[3]]
    order = {id(op): i for i, op in enumerate(ops[0].parent.ops)}
    first = min(ops, key=lambda op: order[id(op)])
    b = Builder.before(first, first.location)
    weights = b.constant(np.concatenate([constant_value(f[1]).array for f in found], axis=1))
    product = b.op("lz.matmul", a, weights)
    if found[0][2] is not None:
        product = b.op("lz.add", product, b.constant(np.concatenate([constant_value(f[2]).array for f in found])))
    start, last = 0, product.type.rank - 1
    for source in sources:
        n = source.type.shape[-1]
        source.replace_all_uses_with(b.op("lz.slice", product, axes=[last], starts=[start], ends=[start + n]))
        start += n
    for f in found:
        for op in reversed(f[3]):
            op.erase()
    return True


def build_kernel(match: AttentionMatch, names: KernelNamer) -> Operation:
    """The ``lz.kernel`` replacing ``match``, inserted before the chain's last matmul."""
    pv = match.output.owner
    b = Builder.before(pv, pv.location)
    k = _keys(b, match.k_transposed)
    mask = match.mask
    if match.hidden is not None:  # the select's mask made additive, plus the added one if any
        hidden = _additive_mask(b, *match.hidden)
        mask = hidden if mask is None else b.op("lz.add", hidden, mask)
    operands = [match.q, k, match.v] + ([mask] if mask is not None else [])
    roots = [readable_root(match.q), readable_root(k), readable_root(match.v, unit_last=True), mask]
    block = Block()
    inputs: list[Value] = []
    inside: dict[int, Value] = {}

    def clone(v: Value, root: Value) -> Value:
        if v is root:
            if id(v) not in inside:
                inputs.append(v)
                inside[id(v)] = block.add_argument(v.type)
            return inside[id(v)]
        op = v.owner
        x = clone(op.operands[0], root)
        copy = Operation(op.name, [x], op.result_types, dict(op.attributes), location=op.location)
        block.append(copy)
        return copy.result

    inner = [clone(v, root) for v, root in zip(operands, roots)]
    attention = Operation("lz.attention", inner, [match.output.type], {"scale": FloatAttr(match.scale, F64)},
                          location=pv.location)
    block.append(attention)
    result = attention.result
    views = _output_views(match.output)
    for view in views:
        copy = Operation(view.name, [result], view.result_types, dict(view.attributes), location=view.location)
        block.append(copy)
        result = copy.result
    block.append(Operation("lz.yield", [result]))
    replaced = views[-1].result if views else match.output
    kernel = Operation("lz.kernel", inputs, [replaced.type],
                       {"kind": StringAttr("attention"), "name": StringAttr(names.next("lz_attention"))},
                       [Region([block])], pv.location)
    b.insert(kernel)
    replaced.replace_all_uses_with(kernel.result)
    for op in reversed(views):
        op.erase()
    dead = list(match.ops)
    while dead:  # the chain, each op once nothing reads it
        op = next(op for op in dead if all(not r.uses for r in op.results))
        dead.remove(op)
        op.erase()
    return kernel


def readable_root(v: Value, unit_last: bool = False) -> Value:
    """The farthest value up ``v``'s chain of views that the kernel can read ``v`` from in place
    (every reshape on the way a strided view; with ``unit_last``, rows still contiguous, which
    the vector loads of v's rows need)."""
    chain = [v]
    while isinstance(chain[-1].owner, Operation) and chain[-1].owner.name in VIEW_OPS:
        chain.append(chain[-1].owner.operands[0])
    for root in reversed(chain):
        view = view_of(v, root)
        if view is not None and (not unit_last or view[1][-1] == 1 or v.type.shape[-1] == 1):
            return root
    return v


@dataclass
class FuseAttention(Pass):
    name = "fuse-attention"
    summary = "Make each matmul-scale-mask-softmax-matmul chain one attention kernel (float32)"

    def run(self, module: ModuleOp) -> None:
        # a Gemm between reshapes (GPT-2's c_attn) as the matmul of its 3-D input first: the kernel
        # then reads q, k, v from its output in place, with no copy kernel of the reshape before it
        apply_patterns_greedily(module, patterns_from_rules(ROW_PRODUCTS))
        names = KernelNamer(module)
        for f in module.functions:
            for op in list(f.entry_block.ops):
                if op.name != "lz.softmax" or op.parent is None:
                    continue
                match = match_attention(op)
                if match is None:
                    continue
                fused, unfused = estimates(match)
                taken = fused <= unfused
                FUSION_LOG.debug("%s attention at %s: fused %.1f us, unfused (matmul, softmax, matmul) %.1f us",
                                 "fusing" if taken else "refused", op.location, fused * 1e6, unfused * 1e6)
                if taken:
                    merge_projections(match)
                    build_kernel(match, names)
