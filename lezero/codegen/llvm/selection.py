"""``lz.topk`` and ``lz.scatter_nd`` as ``single`` kernels (as ``lezero/codegen/triton/selection.py``).

topk: a work item is one line along the axis, ordered by value (largest or smallest first, nan
the largest value), equal values by index, so the order is total and every sort stable.  A small
``k`` is selected: the results found one after another, each the best element ordered after the
previous pick, O(n k), no workspace.  A larger ``k`` (``merge_sorts``: above ``log2 n``, a
``sort`` has ``k = n``) merge-sorts the line: bottom-up, runs of 1, 2, 4, ... merged from one half
of a workspace into the other (values in the compute type and their i64 indices, ``malloc``ed per
call of the kernel: a line of a million is too long for the stack), O(n log n), then the first
``k`` are written out.

scatter_nd: one work item, since updates apply in order and may hit one place twice: the data is
copied, then each index tuple inside the data combines its slice of updates into place (a tuple
with a coordinate out of range is skipped and recorded in the status buffer: the runtime raises).
"""
from __future__ import annotations

import math

import llvmlite.ir as ir

from lezero.codegen.kernel import lines_along_axis, single_buffers
from lezero.codegen.llvm.context import KernelContext, element_address
from lezero.codegen.llvm.ir_types import PTR
from lezero.codegen.llvm.loops import declare, for_range, i64, min_i64
from lezero.codegen.llvm.scalar_builder import Scalar, compute_type, storage_type
from lezero.ir.types import I64

INT64 = ir.IntType(64)  # the LLVM type of an index (I64 is the IR's element type)


def merge_sorts(n: int, k: int) -> bool:
    """Whether ``lz.topk`` merge-sorts its lines (O(n log n), a workspace) rather than selecting
    ``k`` times (O(n k)): when ``k`` is above ``log2 n``."""
    return k > max(1, math.ceil(math.log2(max(n, 1))))


def lower_topk(ctx: KernelContext, op) -> int:
    """A work item is one line along the axis: ``k`` picks one after another, or a merge sort
    (``merge_sorts``); see the module docstring."""
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

    def write(out_base, r, value, index) -> None:
        slot = b.add(out_base, b.mul(r, i64(inner)))
        if values_buffer is not None:
            b.store(s.to_storage(value), element_address(b, values_buffer, slot, dtype))
        if indices_buffer is not None:
            b.store(index, element_address(b, indices_buffer, slot, I64))

    def element(in_base, i):
        return s.load(element_address(b, x_buffer, b.add(in_base, b.mul(i, i64(inner))), dtype), dtype)

    sort = merge_sorts(n, k)
    workspace = _MergeWorkspace(ctx, compute_type(dtype), n) if sort else None
    with for_range(b, ctx.fn.begin, ctx.fn.end, "line") as line:
        o = b.sdiv(line, i64(inner)) if inner > 1 else line
        j0 = b.srem(line, i64(inner)) if inner > 1 else i64(0)
        in_base = b.add(b.mul(o, i64(n * inner)), j0)
        out_base = b.add(b.mul(o, i64(k * inner)), j0)
        if sort:
            _merge_sort_line(ctx, workspace, n, dtype, lambda i: element(in_base, i), before,
                             lambda r, v, i: write(out_base, r, v, i), k)
        else:
            _select_line(ctx, n, k, dtype, lambda i: element(in_base, i), before,
                         lambda r, v, i: write(out_base, r, v, i))
    if workspace is not None:
        workspace.free()
    ctx.fn.finish()
    return lines


def _select_line(ctx, n: int, k: int, dtype, element, before, write) -> None:
    """The ``k`` picks of one line, each the best element ordered after the previous pick."""
    b = ctx.b
    ct = compute_type(dtype)
    best_value, best_index = ctx.fn.alloca(ct, 1, "best"), ctx.fn.alloca(INT64, 1, "best_index")
    prev_value, prev_index = ctx.fn.alloca(ct, 1, "prev"), ctx.fn.alloca(INT64, 1, "prev_index")
    with for_range(b, 0, k, "r") as r:
        b.store(i64(-1), best_index)
        with for_range(b, 0, n, "i") as i:
            v = element(i)
            have_prev = b.icmp_signed(">", r, i64(0))
            after_prev = b.or_(b.not_(have_prev), before(Scalar(b.load(prev_value), dtype), b.load(prev_index), v, i))
            current = b.load(best_index)
            better = b.or_(b.icmp_signed("<", current, i64(0)),
                           before(v, i, Scalar(b.load(best_value), dtype), current))
            take = b.and_(after_prev, better)
            b.store(b.select(take, v.value, b.load(best_value)), best_value)
            b.store(b.select(take, i, current), best_index)
        write(r, Scalar(b.load(best_value), dtype), b.load(best_index))
        b.store(b.load(best_value), prev_value)
        b.store(b.load(best_index), prev_index)


class _MergeWorkspace:
    """Two halves of ``n`` (value, index) pairs, ``malloc``ed once per call of the kernel (a null
    result traps), freed at its end: indices first (i64, aligned as malloc's memory is), values in
    the compute type ``ct`` after them."""

    def __init__(self, ctx, ct, n: int):
        b = self.b = ctx.b
        self.ct = ct
        value_bytes = 8 if isinstance(ct, ir.DoubleType) else ct.width // 8 if isinstance(ct, ir.IntType) else 4
        self.raw = b.call(declare(ctx.module, "malloc", PTR, [INT64]), [i64(n * (16 + 2 * max(value_bytes, 1)))])
        with b.if_then(b.icmp_unsigned("==", self.raw, ir.Constant(PTR, None)), likely=False):
            b.call(declare(ctx.module, "llvm.trap", ir.VoidType(), []), [])
            b.unreachable()
        self.indices = (self.raw, b.gep(self.raw, [i64(n)], source_etype=INT64))
        values = b.gep(self.raw, [i64(2 * n)], source_etype=INT64)
        self.values = (values, b.gep(values, [i64(n)], source_etype=ct))
        self.module = ctx.module

    def free(self) -> None:
        self.b.call(declare(self.module, "free", ir.VoidType(), [PTR]), [self.raw])


def _merge_sort_line(ctx, ws: _MergeWorkspace, n: int, dtype, element, before, write, k: int) -> None:
    """Sort one line into ``ws`` bottom-up (pass ``p`` merges runs of ``2**p`` from one half into
    the other; a run takes its right element only when that comes strictly before the left one,
    so the merge is stable), then ``write`` its first ``k``."""
    b, ct = ctx.b, ws.ct
    with for_range(b, 0, n, "copy") as i:
        b.store(element(i).value, b.gep(ws.values[0], [i], source_etype=ct))
        b.store(i, b.gep(ws.indices[0], [i], source_etype=INT64))
    passes = math.ceil(math.log2(n)) if n > 1 else 0
    left, right = ctx.fn.alloca(INT64, 1, "left"), ctx.fn.alloca(INT64, 1, "right")
    if passes:
        with for_range(b, 0, passes, "pass") as p:
            width = b.shl(i64(1), p)
            even = b.icmp_signed("==", b.and_(p, i64(1)), i64(0))
            src_v, dst_v = b.select(even, ws.values[0], ws.values[1]), b.select(even, ws.values[1], ws.values[0])
            src_i, dst_i = b.select(even, ws.indices[0], ws.indices[1]), b.select(even, ws.indices[1], ws.indices[0])
            pair = b.shl(width, i64(1))
            runs = b.udiv(b.add(i64(n - 1), pair), pair)
            with for_range(b, 0, runs, "run") as run:
                lo = b.mul(run, pair)
                mid, hi = min_i64(b, b.add(lo, width), n), min_i64(b, b.add(lo, pair), n)
                b.store(lo, left)
                b.store(mid, right)
                with for_range(b, lo, hi, "out") as out:
                    li, ri = b.load(left), b.load(right)
                    lc, rc = min_i64(b, li, n - 1), min_i64(b, ri, n - 1)  # in bounds when a run is used up
                    lv = Scalar(b.load(b.gep(src_v, [lc], source_etype=ct), typ=ct), dtype)
                    rv = Scalar(b.load(b.gep(src_v, [rc], source_etype=ct), typ=ct), dtype)
                    lx = b.load(b.gep(src_i, [lc], source_etype=INT64), typ=INT64)
                    rx = b.load(b.gep(src_i, [rc], source_etype=INT64), typ=INT64)
                    left_done = b.icmp_signed(">=", li, mid)
                    take_right = b.and_(b.icmp_signed("<", ri, hi), b.or_(left_done, before(rv, rx, lv, lx)))
                    b.store(b.select(take_right, rv.value, lv.value), b.gep(dst_v, [out], source_etype=ct))
                    b.store(b.select(take_right, rx, lx), b.gep(dst_i, [out], source_etype=INT64))
                    b.store(b.select(take_right, li, b.add(li, i64(1))), left)
                    b.store(b.select(take_right, b.add(ri, i64(1)), ri), right)
    sorted_v, sorted_i = ws.values[passes % 2], ws.indices[passes % 2]
    with for_range(b, 0, k, "r") as r:
        write(r, Scalar(b.load(b.gep(sorted_v, [r], source_etype=ct), typ=ct), dtype),
              b.load(b.gep(sorted_i, [r], source_etype=INT64), typ=INT64))


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
