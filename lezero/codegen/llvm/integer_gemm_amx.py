"""The int8 GEMM's rows in AMX tiles (``amx-int8``: Sapphire Rapids and later; ``DotProduct.amx``),
for ``integer_gemm.gemm_panel`` (the same panels, packing and zero-point terms; its docstring): the
rows go through tiles (``amx_rows``): 2 x 2 accumulators of 16 x 16
i32 (tiles 0-3) per 32 rows x 32 columns, the lhs's two row tiles (4-5: 16 rows x 64 bytes of K,
read in place with stride K) and two tiles of the packed sliver (6-7: 16 groups of 4 k x 16
columns, stride ``NB * 4``: the layout is AMX's B layout already).  A signed lhs is read as it is
(``tdpbssd``, an unsigned one ``tdpbusd``; the rhs is packed signed) and its sums get ``128 *
colsum`` (``P`` of the lhs moved to unsigned).  Tails: a last row block of fewer than 32 rows
configures its tiles with fewer rows; K's last ``K % 64`` bytes of every lhs row are copied, zero
padded to 64, to a buffer the last tile step reads (``AmxLhs``; the sliver's groups past K are
zero or multiply those zeros), so no tile reads past a row.  K blocks are ``KC_AMX = 4096`` rows
(the sliver up to 256 KiB, in L2): a tile's store and reload between K blocks cost about as much
as its dots, so a transformer's K (768-3072) is one block.  The work buffer is 64-byte aligned (a
tile row across two cache lines loads at a sixth of the rate: 6 -> 37 cycles per tile here).
Each panel configures its tiles per K block and row-block shape and releases them at its end; the
corrected tile goes to the output as the vector path's does (``_amx_finish``).  A constant B (a model's weights) is
packed once by the plan in the panels' layout (``PackedIntegerGemmB``, ``Rhs.prepacked_depth``), and
with one K block and a rhs zero point of 0 (symmetric weights) the corrections are one row per panel
that the accumulators start from (``_amx_store``: no correction pass).
"""
from __future__ import annotations

from llvmlite import ir

from lezero.codegen.llvm import amx
from lezero.codegen.llvm.integer_dot import I8, I32, INT64, NB, splat
from lezero.codegen.llvm.ir_types import PTR
from lezero.codegen.llvm.loops import declare, for_range, i64

def lhs_tail_bytes(dot, m, k) -> int:
    """The bytes of the AMX matmul's copy of the lhs's last K columns (``AmxLhs.tail``): 64 per row
    when K is not a multiple of 64 (a tile's depth), else none."""
    return m * 64 if dot.amx and k % 64 else 0


class AmxLhs:
    """Where the AMX kernel reads its lhs tiles: row ``r`` from byte ``base + r * stride`` of
    ``pointer`` for K's whole tile steps, K's last ``K % 64`` columns (zero to 64 bytes) from ``tail +
    r * tail_stride`` (never in place: the bytes past them are the next row's, or past the lhs).
    ``copy_tail``: ``gemm_panel`` copies those columns there first (stride 64), else they are there."""

    def __init__(self, pointer, base, stride: int, tail, tail_stride: int, copy_tail: bool):
        self.pointer, self.base, self.stride = pointer, base, stride
        self.tail, self.tail_stride, self.copy_tail = tail, tail_stride, copy_tail


# --- AMX (amx-int8): the panel's rows in tiles -----------------------------------------------------
# Tiles 0-3 hold the 2 x 2 accumulators of 16 rows x 16 columns of i32 (tile 2r + c), 4-5 the lhs's two
# row tiles (16 rows x 64 bytes of K, read in place: stride K), 6-7 two rhs tiles (16 groups of 4 k x
# 16 columns from the packed sliver, whose row stride is NB * 4 bytes).
_ACC, _LHS, _RHS = 0, 4, 6
AMX_ROWS = 2 * amx.MAX_ROWS  # rows of an AMX row block
AMX_DEPTH = amx.MAX_ROW_BYTES  # K per tile step


def copy_lhs_columns(ctx, a_buf, a_base, m, k, start, to, row_bytes: int):
    """The lhs's columns ``start ..`` of its ``m`` rows (``k`` bytes each, from ``a_base``) to rows of
    ``row_bytes`` at ``to``, zero past K: the AMX kernel's copy of K's last columns (``AmxLhs``), or
    of a whole small lhs in rows 64-byte aligned (a conv's weights)."""
    b = ctx.b
    memset = declare(ctx.module, "llvm.memset.p0.i64", ir.VoidType(), [PTR, I8, INT64, ir.IntType(1)])
    memcpy = declare(ctx.module, "llvm.memcpy.p0.p0.i64", ir.VoidType(), [PTR, PTR, INT64, ir.IntType(1)])
    no = ir.Constant(ir.IntType(1), 0)
    b.call(memset, [to, ir.Constant(I8, 0), i64(m * row_bytes), no])
    with for_range(b, 0, m, "lhscopy") as row:
        source = b.gep(a_buf.pointer, [b.add(a_base, b.add(b.mul(row, i64(k)), i64(start)))], source_etype=I8)
        b.call(memcpy, [b.gep(to, [b.mul(row, i64(row_bytes))], source_etype=I8), source, i64(k - start), no])


def amx_rows(ctx, dot, cols, packed, partial, lhs, output, batch, j0, m, k, a_signed, za_of,
              zb_vec, column_terms, colsum, rowsum, sliver, zb_tensor):
    """Every row block of the panel over one K block in AMX tiles: ``AMX_ROWS`` rows at a time (the
    tiles configured for them; a last block of fewer rows has its own configuration), two column
    tiles of 16 at a time.  The packed rhs is signed (``_pack_sliver``); a signed lhs is read as it
    is (``tdpbssd``, else ``tdpbusd``) and its sums get ``128 * colsum`` after the last block: the
    sums of the lhs moved to unsigned, which the zero-point terms are of (the module docstring).

    With one K block and one zero point each, the rhs's 0 (a symmetric weight: ONNX Runtime's
    dynamic quantization), the corrections are a row of the panel, the same for every row: the
    accumulators start from it (a tile load of stride 0) and go to the output as they are, with no
    pass over the tile (``_amx_store``)."""
    b = ctx.b
    operands = ("s8" if a_signed else "u8", "s8")
    k_last = k - (sliver.count - 1) * dot.kc  # K of the last block
    steps = b.select(sliver.last, i64(k_last // AMX_DEPTH), i64(dot.kc // AMX_DEPTH))  # whole tile steps
    groups_per_step = AMX_DEPTH // 4
    signed_terms = [b.mul(b.load(colsum[v]), ir.Constant(column_terms[v].type, [128] * 16)) if a_signed else None
                    for v in range(len(column_terms))]
    folds = None
    if sliver.count == 1 and zb_tensor is not None:  # the runtime condition, and the row the sums start from
        folds = b.icmp_unsigned("==", zb_tensor, ir.Constant(I32, 0))
        start_row = output.amx_start_row
        za = splat(b, za_of(i64(0)), zb_vec[0].type)
        for v, term in enumerate(column_terms):
            value = b.sub(signed_terms[v], b.mul(za, term)) if a_signed else b.neg(b.mul(za, term))
            b.store(value, b.gep(start_row, [i64(16 * v)], source_etype=I32), align=4)

    def configure(rows):
        shapes = {_RHS: (16, AMX_DEPTH), _RHS + 1: (16, AMX_DEPTH)}
        for r in range(-(-rows // 16)):
            tile_rows = min(16, rows - 16 * r)
            shapes.update({_LHS + r: (tile_rows, AMX_DEPTH), _ACC + 2 * r: (tile_rows, 64),
                           _ACC + 2 * r + 1: (tile_rows, 64)})
        amx.configure(b, shapes)

    def partial_at(i0, r, col):  # the partial sums of row tile r from the panel's column col
        return b.gep(partial, [b.add(b.mul(b.add(i0, i64(16 * r)), i64(NB * 4)), i64(4 * col))], source_etype=I8)

    def row_block(i0, rows):
        tiles = -(-rows // 16)
        for pair in range(-(-cols // 32)):
            count = min(2, -(-(cols - 32 * pair) // 16))  # column tiles
            accs = [(r, c) for r in range(tiles) for c in range(count)]
            if folds is not None:  # (one K block)
                with b.if_else(folds) as (folded, general):
                    with folded:
                        for r, c in accs:
                            at = b.gep(output.amx_start_row, [i64(32 * pair + 16 * c)], source_etype=I32)
                            amx.load(b, _ACC + 2 * r + c, at, 0)
                    with general:
                        for r, c in accs:
                            amx.zero(b, _ACC + 2 * r + c)
            elif sliver.count == 1:
                for r, c in accs:
                    amx.zero(b, _ACC + 2 * r + c)
            else:
                with b.if_else(b.icmp_unsigned("==", sliver.index, i64(0))) as (at_first, later):
                    with at_first:
                        for r, c in accs:
                            amx.zero(b, _ACC + 2 * r + c)
                    with later:
                        for r, c in accs:
                            amx.load(b, _ACC + 2 * r + c, partial_at(i0, r, 32 * pair + 16 * c), NB * 4)

            def step(lhs_at, lhs_stride, s):
                for r in range(tiles):
                    amx.load(b, _LHS + r, lhs_at(r), lhs_stride)
                for c in range(count):
                    at = b.add(b.mul(s, i64(groups_per_step * NB * 4)), i64(4 * (32 * pair + 16 * c)))
                    amx.load(b, _RHS + c, b.gep(packed, [at], source_etype=I8), NB * 4)
                for r, c in accs:
                    amx.dot(b, operands, _ACC + 2 * r + c, _LHS + r, _RHS + c)
            with for_range(b, 0, steps, "tilek") as s:
                def in_place(r, s=s):
                    at = b.add(lhs.base, b.add(b.mul(b.add(i0, i64(16 * r)), i64(lhs.stride)),
                                               b.add(b.mul(sliver.g0, i64(4)), b.mul(s, i64(AMX_DEPTH)))))
                    return b.gep(lhs.pointer, [at], source_etype=I8)
                step(in_place, lhs.stride, s)

            def finish():
                if k % AMX_DEPTH:  # the last step: the lhs's copied tail, zero past K (the sliver's rows there too)
                    step(lambda r: b.gep(lhs.tail, [b.mul(b.add(i0, i64(16 * r)), i64(lhs.tail_stride))],
                                         source_etype=I8), lhs.tail_stride, i64(k_last // AMX_DEPTH))
                if folds is None:
                    _amx_finish(ctx, output, i0, rows, pair, count, accs, cols, batch, j0, za_of, zb_vec, column_terms,
                                signed_terms, rowsum)
                    return
                with b.if_else(folds) as (folded, general):
                    with folded:
                        _amx_store(ctx, output, i0, rows, pair, count, accs, cols, batch, j0)
                    with general:
                        _amx_finish(ctx, output, i0, rows, pair, count, accs, cols, batch, j0, za_of, zb_vec,
                                    column_terms, signed_terms, rowsum)
            def keep_partial_sums():
                for r, c in accs:
                    amx.store(b, _ACC + 2 * r + c, partial_at(i0, r, 32 * pair + 16 * c), NB * 4)
            sliver.end(b, finish, keep_partial_sums)

    blocks, tail = divmod(m, AMX_ROWS)
    if blocks:
        configure(AMX_ROWS)
        with for_range(b, 0, blocks, "amxrows") as block:
            row_block(b.mul(block, i64(AMX_ROWS)), AMX_ROWS)
    if tail:
        configure(tail)
        row_block(i64(blocks * AMX_ROWS), tail)


def _amx_store(ctx, output, i0, rows, pair, count, accs, cols, batch, j0):
    """The accumulators of rows ``i0 ..`` and column pair ``pair``, already the results (their
    corrections folded in), to the output: a bare product's whole columns straight into the
    result (row stride N), else through the output's i32 tile."""
    b = ctx.b
    col0 = b.add(j0, i64(32 * pair))
    live_cols = min(cols - 32 * pair, 32)
    if output.plain and live_cols == 16 * count:
        corner = b.add(b.mul(batch, i64(output.m * output.n)), b.add(b.mul(i0, i64(output.n)), col0))
        for r, c in accs:
            at = b.add(corner, i64(16 * r * output.n + 16 * c))
            amx.store(b, _ACC + 2 * r + c, b.gep(output.result.pointer, [at], source_etype=I32), output.n * 4)
        return
    sums = output.sums if not output.plain else output.amx_sums
    for r, c in accs:
        amx.store(b, _ACC + 2 * r + c, b.gep(sums, [i64((16 * r * 32 + 16 * c) * 4)], source_etype=I8), 32 * 4)
    if not output.plain:
        output.emit_sums(b, batch, i0, col0, rows, live_cols)
        return
    with for_range(b, 0, rows, "amxrow") as r:
        values = [b.load(b.gep(sums, [b.add(b.mul(r, i64(32)), i64(16 * c))], source_etype=I32),
                         typ=ir.VectorType(I32, 16), align=4) for c in range(count)]
        output.store(b, batch, b.add(i0, r), col0, 1, live_cols, [values])


def _amx_finish(ctx, output, i0, rows, pair, count, accs, cols, batch, j0, za_of, zb_vec, column_terms, signed_terms,
                rowsum):
    """The accumulators of rows ``i0 ..`` and column pair ``pair`` to the output: stored to the
    output's i32 tile (a bare product: a stack tile of its own), corrected row by row
    (``P - za (colsum - K zb) - zb rowsum``, and ``+ 128 colsum`` for a signed lhs), then stored or
    through the epilogue."""
    b = ctx.b
    width = 32
    sums = output.sums if not output.plain else output.amx_sums
    for r, c in accs:
        amx.store(b, _ACC + 2 * r + c, b.gep(sums, [i64((16 * r * width + 16 * c) * 4)], source_etype=I8), width * 4)
    col0 = b.add(j0, i64(32 * pair))
    live_cols = min(cols - 32 * pair, 32)
    with for_range(b, 0, rows, "amxfix") as r:
        row = b.add(i0, r)
        row_sum = splat(b, b.load(b.gep(rowsum, [row], source_etype=I32)), zb_vec[0].type)
        za = splat(b, za_of(row), zb_vec[0].type)
        values = []
        for c in range(count):
            v = 2 * pair + c
            at = b.gep(sums, [b.add(b.mul(r, i64(width)), i64(16 * c))], source_etype=I32)
            value = b.load(at, typ=zb_vec[0].type, align=4)
            if signed_terms[v] is not None:
                value = b.add(value, signed_terms[v])
            value = b.sub(value, b.add(b.mul(za, column_terms[v]), b.mul(zb_vec[v], row_sum)))
            if not output.plain:
                b.store(value, at, align=4)
            values.append(value)
        if output.plain:
            output.store(b, batch, row, col0, 1, live_cols, [values])
    if not output.plain:
        output.emit_sums(b, batch, i0, col0, rows, live_cols)
