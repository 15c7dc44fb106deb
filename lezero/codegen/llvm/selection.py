"""``lz.topk`` and ``lz.scatter_nd`` as ``single`` kernels (as ``lezero/codegen/triton/selection.py``).

topk: a work item is one line along the axis; the ``k`` results are found one after another, each
the best element ordered after the previous pick (value, largest or smallest first, nan the
largest value; equal values by index): O(n k), no workspace.

scatter_nd: one work item, since updates apply in order and may hit one place twice: the data is
copied, then each index tuple inside the data combines its slice of updates into place (a tuple
with a coordinate out of range is skipped and recorded in the status buffer: the runtime raises).
"""
from __future__ import annotations

import math

import llvmlite.ir as ir

from lezero.codegen.kernel import lines_along_axis, single_buffers
from lezero.codegen.llvm.context import KernelContext, element_address
from lezero.codegen.llvm.loops import for_range, i64
from lezero.codegen.llvm.scalar_builder import Scalar, compute_type, storage_type
from lezero.ir.types import I64


def lower_topk(ctx: KernelContext, op) -> int:
    """A work item is one line along the axis; the ``k`` results are found one after another, each
    the best element ordered after the previous pick (value, then index): O(n k), no workspace."""
    b, s = ctx.b, ctx.s
    attrs = op.definition.attrs(op)
    (x_buffer,), (values_buffer, indices_buffer) = single_buffers(ctx, op)
    x = op.operands[0]
    dtype = x.type.element_type
    _, outer, n, inner = lines_along_axis(op)
    k = attrs.k
    lines = outer * inner
    if lines == 0 or k == 0:
        ctx.fn.finish()
        return 1
    ct = compute_type(dtype)
    best_value, best_index = ctx.fn.alloca(ct, 1, "best"), ctx.fn.alloca(ir.IntType(64), 1, "best_index")
    prev_value, prev_index = ctx.fn.alloca(ct, 1, "prev"), ctx.fn.alloca(ir.IntType(64), 1, "prev_index")

    def is_nan(v):
        return b.fcmp_unordered("uno", v.value, v.value) if dtype.is_float else ir.Constant(ir.IntType(1), 0)

    def before(v, i, w, j):
        """Whether (v, i) comes before (w, j) in the output order (nan the largest value)."""
        vn, wn = is_nan(v), is_nan(w)
        if attrs.largest:
            strictly = b.or_(s.cmp("gt", v, w).value, b.and_(vn, b.not_(wn)))
        else:
            strictly = b.or_(s.cmp("lt", v, w).value, b.and_(b.not_(vn), wn))
        equal = b.or_(s.cmp("eq", v, w).value, b.and_(vn, wn))
        return b.or_(strictly, b.and_(equal, b.icmp_signed("<", i, j)))

    with for_range(b, ctx.fn.begin, ctx.fn.end, "line") as line:
        o = b.sdiv(line, i64(inner)) if inner > 1 else line
        j0 = b.srem(line, i64(inner)) if inner > 1 else i64(0)
        in_base = b.add(b.mul(o, i64(n * inner)), j0)
        out_base = b.add(b.mul(o, i64(k * inner)), j0)
        with for_range(b, 0, k, "r") as r:
            b.store(i64(-1), best_index)
            with for_range(b, 0, n, "i") as i:
                v = s.load(element_address(b, x_buffer, b.add(in_base, b.mul(i, i64(inner))), dtype), dtype)
                have_prev = b.icmp_signed(">", r, i64(0))
                after_prev = b.or_(b.not_(have_prev),
                                   before(Scalar(b.load(prev_value), dtype), b.load(prev_index), v, i))
                current = b.load(best_index)
                better = b.or_(b.icmp_signed("<", current, i64(0)),
                               before(v, i, Scalar(b.load(best_value), dtype), current))
                take = b.and_(after_prev, better)
                b.store(b.select(take, v.value, b.load(best_value)), best_value)
                b.store(b.select(take, i, current), best_index)
            slot = b.add(out_base, b.mul(r, i64(inner)))
            if values_buffer is not None:
                b.store(s.to_storage(Scalar(b.load(best_value), dtype)), element_address(b, values_buffer, slot, dtype))
            if indices_buffer is not None:
                b.store(b.load(best_index), element_address(b, indices_buffer, slot, I64))
            b.store(b.load(best_value), prev_value)
            b.store(b.load(best_index), prev_index)
    ctx.fn.finish()
    return lines


def lower_scatter_nd(ctx: KernelContext, op) -> int:
    """One work item (updates apply in order, and may hit one place twice): copy the data, then
    for each index tuple inside the data combine its slice of updates into place (a tuple with a
    coordinate out of range is skipped and recorded in the status buffer: the runtime raises)."""
    b, s = ctx.b, ctx.s
    attrs = op.definition.attrs(op)
    (data_buffer, indices_buffer, updates_buffer), (out_buffer,) = single_buffers(ctx, op)
    data, indices, _ = op.operands
    dtype, index_dtype = data.type.element_type, indices.type.element_type
    shape = data.type.shape
    k = indices.type.shape[-1]
    count = math.prod(indices.type.shape[:-1])
    piece = math.prod(shape[k:])
    total = math.prod(shape)
    if out_buffer is None:
        ctx.fn.finish()
        return 1
    with for_range(b, 0, total, "copy") as e:
        b.store(b.load(element_address(b, data_buffer, e, dtype), typ=storage_type(dtype)), element_address(b, out_buffer, e, dtype))
    if count and piece:
        combine = {"none": None, "add": s.add, "mul": s.mul, "max": s.max, "min": s.min}[attrs.reduction]
        strides = [math.prod(shape[j + 1:k]) * piece for j in range(k)]
        with for_range(b, 0, count, "update") as u:
            offset, valid = i64(0), ir.Constant(ir.IntType(1), 1)
            for j in range(k):
                raw = s.load(element_address(b, indices_buffer, b.add(b.mul(u, i64(k)), i64(j)), index_dtype), index_dtype)
                index, bad = ctx.emitter.checked_index(op, f"dim {j}", raw, shape[j])
                valid = b.and_(valid, b.not_(bad.value))
                offset = b.add(offset, b.mul(index.value, i64(strides[j])))
            with b.if_then(valid):
                with for_range(b, 0, piece, "e") as e:
                    target = element_address(b, out_buffer, b.add(offset, e), dtype)
                    update = s.load(element_address(b, updates_buffer, b.add(b.mul(u, i64(piece)), e), dtype), dtype)
                    if combine is not None:
                        update = s.round(combine(s.load(target, dtype), update))
                    b.store(s.to_storage(update), target)
    ctx.fn.finish()
    return 1
