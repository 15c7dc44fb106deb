"""``lz.conv_integer`` as one CPU kernel: the int8 GEMM of ``integer_gemm.py`` over an implicit
im2col, so no im2col tensor is stored.

Each (image, group) is one GEMM ``out[co, q] = W[co, k] . col[k, q]`` with ``k = (ci, kh, kw)``,
the float conv's (``contraction_gemm.ConvGemm``, whose geometry this reuses): pixels in q-space
(``q = oh * WQ + ow``), the input's rows a work item reads laid out as a *slab* of bytes (padded
with the input's zero point, a real 0, so padded taps add nothing; strided convolutions split into
phases), and row ``k`` of ``col`` the contiguous run ``slab[off[k] + q]``.  The packing routine of
the int8 GEMM (``_pack_sliver``) reads those rows (``Rhs``) as it interleaves a panel of 64
q-columns for ``vpdpbusd``: the gather im2col of the composite's decomposition (0.2-1 GB/s) is
gone.  The weights are the lhs, read in place (``O/g x K`` row-major is a conv weight as stored);
a per-channel weight zero point is a per-row lhs zero point.  The slab has a panel of slack past
its rows, so every panel packs whole 64-byte rows (the columns past q-space are computed and never
stored).  On AMX the panels run in tiles as the int8 GEMM's (``gemm_panel``), from a copy of the
group's weights that each work item makes, in rows of K rounded up to 64 (64-byte aligned, zero
past K): a conv's K (27, 288) is rarely whole tile steps, and a tile row across two cache lines
loads at a sixth of the rate.

The result is N x O x OH x OW, written by the tile epilogue (``TileEpilogue`` with ``ConvGemm``'s
``emit_tile``): bias, requantize, activation fuse as in the matmul kernel, and the 8-bit output is
in the layout the next conv reads (NCHW), with no reshape or transpose kernel between layers.

Work items are (image, group, slice of panels): at least ``MIN_ITEMS`` in all where q-space has
the panels, each building its slab once and the weights' row sums once.
"""
from __future__ import annotations

from llvmlite import ir

from lezero.codegen.contraction_shapes import ConvShape
from lezero.codegen.kernel import INTEGER_CONTRACTIONS
from lezero.codegen.llvm.context import KernelContext
from lezero.codegen.llvm.contraction_gemm import ConvGemm
from lezero.codegen.llvm.integer_dot import I8, I32, INT64, NB, DotProduct
from lezero.codegen.llvm.integer_gemm import (
    Output,
    Rhs,
    gemm_panel,
    lower_matmul_integer,
    row_sums,
    sliver_bytes,
    table,
    work_buffer,
)
from lezero.codegen.llvm.integer_gemm_amx import AmxLhs, copy_lhs_columns
from lezero.codegen.llvm.ir_types import PTR
from lezero.codegen.llvm.loops import declare, for_range, i64
from lezero.ir.core import Operation

# Work items of a conv at least (when its images' q-space has as many panels): 2 threads get 4
# each, so a slow item does not leave a thread idle long; each item builds the slab of its rows.
MIN_ITEMS = 8


def lower_integer_contraction(ctx: KernelContext) -> int:
    """A matmul or conv kernel of ``lz.matmul_integer`` / ``lz.conv_integer`` and its epilogue."""
    anchor = next(op for op in ctx.body.ops if op.name in INTEGER_CONTRACTIONS)
    if anchor.name == "lz.matmul_integer":
        return lower_matmul_integer(ctx)
    return lower_conv_integer(ctx, anchor)


def lower_conv_integer(ctx: KernelContext, anchor: Operation) -> int:
    """Work item ``(image * groups + group) * slices + s``: slice ``s`` of that GEMM's panels."""
    b = ctx.b
    for v in anchor.operands:
        if v not in ctx.body.args:
            raise ctx.failure(f"{anchor.name} reads its operands from memory (it takes no prologue)")
    x_buf, w_buf, zx_buf, zw_buf = (ctx.emitter.buffers[v] for v in anchor.operands)
    s = ConvShape.of(anchor)
    plan = ConvGemm(s, direct=True, a_block_floats=0)  # direct: never in place, always a slab
    plan.lay_out_slab(NB)  # a panel of slack: partial panels pack whole rows
    m, k, n = plan.m, plan.k, plan.n
    batches, panels = s.n * s.groups, -(-n // NB)
    slices = min(panels, max(1, -(-MIN_ITEMS // batches)))
    cuts = [panels * i // slices for i in range(slices + 1)]
    items = batches * slices
    if items == 0 or m == 0 or n <= 0:
        ctx.fn.finish()
        return 1
    w_signed = anchor.operands[1].type.element_type.name == "i8"  # the lhs
    x_unsigned = anchor.operands[0].type.element_type.name == "ui8"  # the rhs
    dot = DotProduct(ctx, w_signed)
    output = Output(ctx, anchor, plan, dot)

    slab_bytes = -(-plan.slab_floats // 64) * 64
    partial_bytes = m * NB * 4 if k > dot.kc else 0
    padded_k = -(-k // 64) * 64
    copy_bytes = m * padded_k if dot.amx else 0  # AMX: the weights in rows 64-byte aligned, zero past K
    raw, packed = work_buffer(ctx, dot, sliver_bytes(dot, k) + 64 + partial_bytes + copy_bytes + slab_bytes)
    partial = b.gep(packed, [i64(sliver_bytes(dot, k) + 64)], source_etype=I8)
    weights = b.gep(partial, [i64(partial_bytes)], source_etype=I8) if dot.amx else None
    slab = b.gep(partial, [i64(partial_bytes + copy_bytes)], source_etype=I8)
    rowsum = ctx.fn.alloca(I32, m, "rowsum")
    colsum = [ctx.fn.alloca(dot.vector, 1, f"colsum{v}") for v in range(NB // dot.lanes)]
    offsets, cut_table = table(ctx, "tap_offsets", plan.b_row_offsets), table(ctx, "cuts", cuts)

    zx_byte = b.load(zx_buf.pointer, typ=I8)  # the slab's padding
    zx = b.zext(zx_byte, I32) if x_unsigned else b.sext(zx_byte, I32)
    zb = b.sub(zx, ir.Constant(I32, 128)) if x_unsigned else zx  # the packed rhs is signed

    with for_range(b, ctx.fn.begin, ctx.fn.end, "item") as item:
        batch, piece = b.udiv(item, i64(slices)), b.urem(item, i64(slices))
        image, group = (b.udiv(batch, i64(s.groups)), b.urem(batch, i64(s.groups))) if s.groups > 1 \
            else (batch, i64(0))
        p0 = b.load(b.gep(cut_table, [i64(0), piece]), typ=INT64)
        p1 = b.load(b.gep(cut_table, [i64(0), b.add(piece, i64(1))]), typ=INT64)
        q1 = b.mul(p1, i64(NB))
        q1 = b.select(b.icmp_unsigned("<", q1, i64(n)), q1, i64(n))
        first_row = b.udiv(b.mul(p0, i64(NB)), i64(plan.wq))
        rows = b.add(b.sub(b.udiv(b.sub(q1, i64(1)), i64(plan.wq)), first_row), i64(1 + plan.qh[-1]))
        channel0 = b.add(b.mul(image, i64(s.c)), b.mul(group, i64(s.in_per_group)))
        x = b.gep(x_buf.pointer, [b.mul(channel0, i64(s.h * s.w))], source_etype=I8)
        plan._emit_slab(b, x, first_row, rows, slab, fill=zx_byte)
        shift = b.mul(first_row, i64(-plan.wq))  # B[k, q] = slab[off[k] + q - first_row * WQ]
        rhs = Rhs(slab, lambda kk: b.add(b.load(b.gep(offsets, [i64(0), kk]), typ=INT64), shift), whole_vectors=True)
        a_base = b.mul(group, i64(m * k))
        row_sums(ctx, dot, w_buf, a_base, m, k, w_signed, rowsum, zb)
        amx_lhs = None
        if dot.amx:  # the group's weights copied once per item: every tile row aligned, K's tail zero padded
            copy_lhs_columns(ctx, w_buf, a_base, m, k, 0, weights, padded_k)
            tail = b.gep(weights, [i64(k - k % 64)], source_etype=I8)
            amx_lhs = AmxLhs(weights, i64(0), padded_k, tail, padded_k, copy_tail=False)

        def za_of(row):
            """The row's weight zero point, moved with the lhs (``DotProduct.lhs_value``)."""
            at = [] if zw_buf.type.rank == 0 else [b.add(b.mul(group, i64(m)), row)]
            z = b.load(b.gep(zw_buf.pointer, at, source_etype=I8) if at else zw_buf.pointer, typ=I8)
            return dot.lhs_value(b, z, w_signed)

        with for_range(b, p0, p1, "panel") as p:
            j0 = b.mul(p, i64(NB))

            def panel_of(cols):
                gemm_panel(ctx, dot, cols, packed, partial, amx_lhs, w_buf, rhs, output, batch, a_base, j0, m, k,
                           w_signed, x_unsigned, za_of, lambda col: zb, rowsum, colsum)
            if n % NB == 0:
                panel_of(NB)
            else:
                with b.if_else(b.icmp_unsigned("==", p, i64(panels - 1))) as (narrow, wide):
                    with narrow:
                        panel_of(n % NB)
                    with wide:
                        panel_of(NB)
    b.call(declare(ctx.module, "free", ir.VoidType(), [PTR]), [raw])
    ctx.fn.finish()
    return items
