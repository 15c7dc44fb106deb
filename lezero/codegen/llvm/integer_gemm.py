"""``lz.matmul_integer`` as one CPU kernel: an 8-bit GEMM accumulating in i32, exactly.

The product is computed as ``u8 x s8`` dot products of 4 per i32 lane (``DotProduct``: AVX-512
VNNI's or AVX-VNNI's ``vpdpbusd``; else ``vpmaddwd`` on the bytes widened to i16, exact; never
``vpmaddubsw``, whose i16 sums saturate; on AArch64 ``sdot`` with dotprod, ``usdot`` for an unsigned
lhs with i8mm), as MLAS does:

- a signed lhs is made unsigned by flipping its top bit (``a + 128``; ``sdot`` reads the lhs
  signed instead: ``DotProduct``), an unsigned rhs signed (``b - 128``); the zero points move with
  them (``za + 128``, ``zb - 128``), so ``(a - za)(b - zb)`` is unchanged;
- ``C = P - za * colsum(b) - zb * rowsum(a) + K * za * zb`` with ``P = sum_k a[i,k] b[k,j]``:
  the column sums come from the packed rhs, the row sums are summed only when some ``zb`` is not 0.

Work items are panels of ``NB = 64`` columns (times each batch of a batched rhs).  An item takes
K in blocks of ``KC = 256``: it packs the block's sliver of its panel (rows of 4 consecutive k
interleaved per column: ``packed[k/4][col][k%4]``, the layout ``vpdpbusd`` reads, zero past K and
N; 16 KiB, so it stays in L1) into a ``malloc``ed buffer, then walks every row in blocks of ``mr``
rows, ``mr x nv`` vectors of i32 at a time (the register tile of the target: 6 x 4 x 16 lanes
with VNNI, the whole panel; 4 x 2 x 8 on AVX2: 8 accumulators, the rhs's even and odd bytes and
the lhs's in the other 8 of 16 registers), the lhs read in place (4 bytes broadcast per row and
k step); the tiles' sums wait in an i32 buffer of the panel's rows between K blocks.  (Packing the
whole panel, 48-192 KiB at K = 768-3072, made every row tile read it from L2: 1 thread, best of
interleaved runs, 128x768x768 310 -> 369 GOP/s, 128x3072x768 328 -> 393, 128x768x3072 349 -> 376,
512x1024x1024 392 -> 382, noise.)

The kernel is partition's ``matmul`` kind: ``lz.matmul_integer`` and its elementwise epilogue
(the cast, the scales, a bias, an activation, a ``lz.quantize``'s divide, round, clamp and cast).
A bare product stores its i32 vectors; otherwise each corrected tile goes to a stack tile of i32
and the float GEMM's ``TileEpilogue`` (``contraction_gemm.py``) evaluates every yielded value at
each of its elements, the i32 sum in place of the contraction, so no i32 tensor is stored and the
values are the reference's op for op (bit-equal: the same f32 operations in the same order).
The lhs may be read through a reshape (the same row-major bytes: ONNX's Flatten before a Gemm).

**AMX** (``amx-int8``: Sapphire Rapids and later; ``DotProduct.amx``): the same panels, packing and
zero-point terms, the rows in tiles: ``integer_gemm_amx.py``.  ``DotProduct`` (the instruction and register
tile per target) and the panel constants are ``integer_dot.py``'s.

``integer_conv.py`` runs ``lz.conv_integer`` on the same panels: its rhs rows come from a slab
of the input (``Rhs``: where row k of a GEMM's B starts), its lhs (the weights) has a zero point
per row (``za_of``), and its tiles go to the epilogue through ``ConvGemm.emit_tile``.
"""
from __future__ import annotations

from llvmlite import ir

from lezero.codegen.contraction_shapes import MatmulShape
from lezero.codegen.llvm import amx, vectors
from lezero.codegen.llvm.context import KernelContext
from lezero.codegen.llvm.contraction_gemm import MatmulGemm, TileEpilogue
from lezero.codegen.llvm.gemm_epilogue import OutputTile
from lezero.codegen.llvm.integer_dot import I8, I32, INT64, NB, DotProduct, shuffle_mask, splat
from lezero.codegen.llvm.integer_gemm_amx import AMX_DEPTH, AmxLhs, amx_rows, copy_lhs_columns, lhs_tail_bytes
from lezero.codegen.llvm.ir_types import PTR
from lezero.codegen.llvm.loops import declare, for_range, i64
from lezero.codegen.packed_operands import PackedIntegerGemmB

def _batch_offsets(shape: MatmulShape) -> tuple[list, list]:
    """The element offsets of A and B of each GEMM (batch) of ``shape``: its operands are
    row-major kernel operands, broadcast along batch dims of stride 0."""
    a_offsets, b_offsets = [], []
    for batch in range(shape.batches):
        index, rest = [], batch
        for d in reversed(shape.batch_shape):
            rest, i = divmod(rest, d)
            index.insert(0, i)
        a_offsets.append(sum(i * st for i, st in zip(index, shape.a_batch_strides)))
        b_offsets.append(sum(i * st for i, st in zip(index, shape.b_batch_strides)))
    return a_offsets, b_offsets


def table(ctx, name, values):
    array = ir.ArrayType(INT64, len(values))
    table = ir.GlobalVariable(ctx.module, array, f"{ctx.name}.{name}")
    table.global_constant = True
    table.linkage = "internal"
    table.initializer = ir.Constant(array, [int(v) for v in values])
    return table


class Output:
    """Where a tile's i32 values go: straight into the result (a bare product), or through the
    kernel's epilogue (``contraction_gemm.TileEpilogue``: a stack tile of i32, then every yielded
    value at each of its elements: dequantize, bias, activation, requantize)."""

    def __init__(self, ctx: KernelContext, anchor, plan, dot: "DotProduct"):
        self.ctx, self.lanes = ctx, dot.lanes
        self.plain = isinstance(plan, MatmulGemm) and list(ctx.yields) == [anchor.result]
        if self.plain:
            self.result = ctx.result_buffers[0]
            self.m, self.n = plan.shape.m, plan.shape.n
            if dot.amx:  # where the AMX accumulators are stored before their corrections
                self.amx_sums = vectors.opaque_alloca(ir.IRBuilder(ctx.fn.entry), I32, i64(dot.mr * dot.nv * dot.lanes),
                                                      "amx_sums")
                self._amx_start_row(ctx)
            return
        self.epilogue = TileEpilogue(ctx, anchor, plan)
        self.mr, self.width = dot.mr, dot.nv * dot.lanes
        self.sums = vectors.opaque_alloca(ir.IRBuilder(ctx.fn.entry), I32, i64(self.mr * self.width), "tile")
        if dot.amx:
            self._amx_start_row(ctx)

    def _amx_start_row(self, ctx):
        """``amx_start_row``: the panel's row of corrections the AMX accumulators start from (``amx_rows``)."""
        self.amx_start_row = vectors.opaque_alloca(ir.IRBuilder(ctx.fn.entry), I32, i64(NB), "amx_start_row")

    def store(self, b, batch, row0, col0, rows: int, cols: int, values) -> None:
        """``values[r][v]``: the i32 vectors of rows ``row0 + r``, columns ``col0 + lanes v ...``
        of GEMM ``batch`` (the plan's: a matmul's batch, a conv's image x group); ``cols`` of the
        tile's columns are in the result."""
        lanes = self.lanes
        if self.plain:
            c_base = b.mul(batch, i64(self.m * self.n))
            for r, row_values in enumerate(values):
                out_row = b.add(c_base, b.add(b.mul(b.add(row0, i64(r)), i64(self.n)), col0))
                for v, value in enumerate(row_values):
                    at = b.add(out_row, i64(lanes * v))
                    if lanes * (v + 1) <= cols:
                        b.store(value, b.gep(self.result.pointer, [at], source_etype=I32), align=4)
                    else:
                        for lane in range(cols - lanes * v):
                            b.store(b.extract_element(value, ir.Constant(I32, lane)),
                                    b.gep(self.result.pointer, [b.add(at, i64(lane))], source_etype=I32), align=4)
            return
        for r, row_values in enumerate(values):
            for v, value in enumerate(row_values):
                b.store(value, b.gep(self.sums, [i64(r * self.width + lanes * v)], source_etype=I32), align=4)
        self.emit_sums(b, batch, row0, col0, rows, cols)

    def emit_sums(self, b, batch, row0, col0, rows: int, cols: int) -> None:
        """The epilogue of the tile whose i32 sums are in ``sums`` (``mr`` x ``width``, row-major)."""
        args = {f"buffer{i}": (p,) for i, p in enumerate(self.ctx.fn.buffers)}
        args["batch"] = (batch,)
        tile = OutputTile(b, row0, col0, i64(rows), i64(cols), self.sums, self.mr, self.width,
                          rows == self.mr and cols == self.width, args)
        self.epilogue.emit(tile)
        self.ctx.s.external_symbols |= self.epilogue.external_symbols


def lower_matmul_integer(ctx: KernelContext) -> int:
    """A matmul kernel of ``lz.matmul_integer`` and its epilogue: one work item per panel of
    ``NB`` columns of each batch (the module docstring)."""
    b = ctx.b
    anchor = next(op for op in ctx.body.ops if op.name == "lz.matmul_integer")
    a_in, b_in, za_in, zb_in = anchor.operands
    a_buf, b_buf = (ctx.emitter.buffers[_stored(ctx, anchor, v)] for v in (a_in, b_in))
    za_buf, zb_buf = (ctx.emitter.buffers[_stored(ctx, anchor, v, reshaped=False)] for v in (za_in, zb_in))
    a_signed = anchor.operands[0].type.element_type.name == "i8"
    b_unsigned = anchor.operands[1].type.element_type.name == "ui8"
    shape = MatmulShape.of(anchor).batches_as_rows()
    m, k, n = shape.m, shape.k, shape.n
    a_offsets, b_offsets = _batch_offsets(shape)
    panels = -(-n // NB)
    items = len(a_offsets) * panels
    if items == 0 or m == 0:
        ctx.fn.finish()
        return 1
    dot = DotProduct(ctx, a_signed)
    output = Output(ctx, anchor, MatmulGemm(shape), dot)
    prepacked = _prepacked_b(ctx, anchor, dot, b_in, b_offsets, k, n, b_unsigned)

    # the packed sliver (KC rows of K), then the partial sums of a panel's rows between K blocks
    partial_bytes = m * NB * 4 if k > dot.kc else 0
    raw, packed = work_buffer(ctx, dot, sliver_bytes(dot, k) + 64 + partial_bytes + lhs_tail_bytes(dot, m, k))
    partial = b.gep(packed, [i64(sliver_bytes(dot, k) + 64)], source_etype=I8)
    lhs_tail = b.gep(partial, [i64(partial_bytes)], source_etype=I8) if dot.amx else None
    rowsum = ctx.fn.alloca(I32, max(m, 1), "rowsum")
    colsum = [ctx.fn.alloca(dot.vector, 1, f"colsum{v}") for v in range(NB // dot.lanes)]
    a_table, b_table = table(ctx, "a_offsets", a_offsets), table(ctx, "b_offsets", b_offsets)

    # the rhs zero point of each column, widened (and moved by -128 for an unsigned rhs)
    def zb_of(col):
        if zb_buf.type.rank == 0:
            z = b.load(zb_buf.pointer, typ=I8)
        else:
            z = b.load(b.gep(zb_buf.pointer, [col], source_etype=I8), typ=I8)
        z = b.zext(z, I32) if b_unsigned else b.sext(z, I32)
        return b.sub(z, ir.Constant(I32, 128)) if b_unsigned else z
    za = dot.lhs_value(b, b.load(za_buf.pointer, typ=I8), a_signed)

    with for_range(b, ctx.fn.begin, ctx.fn.end, "item") as item:
        batch, panel = b.udiv(item, i64(panels)), b.urem(item, i64(panels))
        a_base = b.load(b.gep(a_table, [i64(0), batch]), typ=INT64)
        b_base = b.load(b.gep(b_table, [i64(0), batch]), typ=INT64)
        j0 = b.mul(panel, i64(NB))
        last = b.icmp_unsigned("==", panel, i64(panels - 1))
        full_cols = n - (panels - 1) * NB

        def panel_of(cols):
            rhs = Rhs(b_buf.pointer, lambda kk: b.add(b_base, b.mul(kk, i64(n))), whole_vectors=False,
                      prepacked_depth=prepacked.padded_depth if prepacked else None)
            row_sums(ctx, dot, a_buf, a_base, m, k, a_signed, rowsum, zb_of(i64(0)) if zb_buf.type.rank == 0 else None)
            amx_lhs = AmxLhs(a_buf.pointer, a_base, k, lhs_tail, AMX_DEPTH, copy_tail=True) if dot.amx else None
            gemm_panel(ctx, dot, cols, packed, partial, amx_lhs, a_buf, rhs, output, batch, a_base, j0, m, k, a_signed,
                       b_unsigned, lambda row: za, zb_of, rowsum, colsum,
                       zb_of(i64(0)) if zb_buf.type.rank == 0 else None)
        if full_cols == NB:
            panel_of(NB)
        else:
            with b.if_else(last) as (narrow, wide):
                with narrow:
                    panel_of(full_cols)
                with wide:
                    panel_of(NB)
    b.call(declare(ctx.module, "free", ir.VoidType(), [PTR]), [raw])
    ctx.fn.finish()
    return items


def _prepacked_b(ctx, anchor, dot, b_in, b_offsets, k, n, b_unsigned) -> PackedIntegerGemmB | None:
    """On AMX, a constant B (a model's weights: ``constant_operands``), one matrix for every batch, is
    packed once by the plan (``PackedIntegerGemmB``, the panels' layout) and read in place."""
    operand = ctx.body.args.index(_stored(ctx, anchor, b_in))
    if not dot.amx or any(b_offsets) or operand not in ctx.kernel.definition.attrs(ctx.kernel).constant_operands:
        return None
    spec = PackedIntegerGemmB(operand, k, n, b_unsigned, NB)
    ctx.packed_operands = (spec,)
    return spec


def work_buffer(ctx, dot, size: int):
    """``malloc(size)`` (a null result traps): the raw pointer (to free) and where the buffers start,
    on AMX 64-byte aligned (a tile row that straddles two cache lines loads at half the rate)."""
    b = ctx.b
    raw = b.call(declare(ctx.module, "malloc", PTR, [INT64]), [i64(size + 64 if dot.amx else size)])
    with b.if_then(b.icmp_unsigned("==", raw, ir.Constant(PTR, None)), likely=False):
        b.call(declare(ctx.module, "llvm.trap", ir.VoidType(), []), [])
        b.unreachable()
    if not dot.amx:
        return raw, raw
    address = b.ptrtoint(raw, INT64)
    return raw, b.gep(raw, [b.sub(b.and_(b.add(address, i64(63)), i64(-64)), address)], source_etype=I8)


def _stored(ctx, anchor, v, reshaped: bool = True):
    """The kernel operand ``v`` reads: itself, or (for the two matrices, ``reshaped``) the row-major
    source of a reshape (the same bytes; partition's one prologue of an integer matmul).  A zero
    point is read as itself: its shape says per tensor or per row/column."""
    if v in ctx.body.args:
        return v
    op = v.owner
    if reshaped and op is not None and getattr(op, "name", None) == "lz.reshape" and op.operands[0] in ctx.body.args:
        return op.operands[0]
    raise ctx.failure(f"{anchor.name} reads its operands from memory or through a reshape (no other prologue)")


def _interleave(b, x, y, count):
    """``x[0], y[0], x[1], y[1], ...`` of two vectors of ``count`` elements."""
    return b.shuffle_vector(x, y, shuffle_mask([i // 2 + (count if i % 2 else 0) for i in range(2 * count)]))


class Rhs:
    """Where a GEMM's rhs rows are: row ``kk`` (an i64 value) of the batch's B starts at element
    ``row(kk)`` of ``pointer`` (a matmul's B: ``b_base + kk * n``; a convolution's: its tap's offset
    in the slab, integer_conv.py).  ``whole_vectors``: a row can be read a whole panel wide past
    the panel's last column (a slab's slack), so a partial panel packs like a whole one.
    ``prepacked_depth``: B is a constant the plan packed (``PackedIntegerGemmB``: panels of that
    many rows at ``pointer``), so nothing is packed per call."""

    def __init__(self, pointer, row, whole_vectors: bool, prepacked_depth: int | None = None):
        self.pointer, self.row, self.whole_vectors = pointer, row, whole_vectors
        self.prepacked_depth = prepacked_depth


def _pack_sliver(ctx, cols, packed, rhs, j0, k, g0, whole, last, b_unsigned):
    """Rows ``4 g0 ..`` of the panel's rhs (signed) as ``packed[g - g0][col][k%4]``: ``whole``
    (runtime) groups of 4 rows, and in the ``last`` block the rest of K, zero past K and ``cols``."""
    b = ctx.b
    flip = ir.Constant(I8, 0x80 if b_unsigned else 0)
    memset = declare(ctx.module, "llvm.memset.p0.i64", ir.VoidType(), [PTR, I8, INT64, ir.IntType(1)])

    def bytewise(k_start, k_end, slots_from, cols=cols):
        """Rows [k_start, k_end) byte by byte, their slots zeroed first from group ``slots_from``."""
        zeroed = b.sub(b.add(b.lshr(b.add(k_end, i64(3)), i64(2)), i64(0)), slots_from)
        b.call(memset, [b.gep(packed, [b.mul(b.sub(slots_from, g0), i64(NB * 4))], source_etype=I8),
                        ir.Constant(I8, 0), b.mul(zeroed, i64(NB * 4)), ir.Constant(ir.IntType(1), 0)])
        with for_range(b, k_start, k_end, "packk") as kk, for_range(b, 0, cols, "packc") as c:
            at = b.add(rhs.row(kk), b.add(j0, c))
            value = b.xor(b.load(b.gep(rhs.pointer, [at], source_etype=I8), typ=I8), flip)
            slot = b.add(b.add(b.mul(b.sub(b.lshr(kk, i64(2)), g0), i64(NB * 4)), b.mul(c, i64(4))),
                         b.and_(kk, i64(3)))
            b.store(value, b.gep(packed, [slot], source_etype=I8))

    k0 = b.mul(g0, i64(4))
    k1 = b.select(last, i64(k), b.add(k0, b.mul(whole, i64(4))))
    row_type = ir.VectorType(I8, NB)
    masked = cols < NB and not rhs.whole_vectors  # a partial panel: its rows' first cols bytes
    if masked:  # (the lanes past them are never stored: any value serves)
        load = declare(ctx.module, "llvm.masked.load.v64i8.p0", row_type,
                       [PTR, ir.IntType(32), ir.VectorType(ir.IntType(1), NB), row_type])
        mask = ir.Constant(ir.VectorType(ir.IntType(1), NB), [int(c < cols) for c in range(NB)])
    with for_range(b, g0, b.add(g0, whole), "pack") as g:
        rows = []
        for t in range(4):
            at = b.gep(rhs.pointer, [b.add(rhs.row(b.add(b.mul(g, i64(4)), i64(t))), j0)], source_etype=I8)
            row = b.call(load, [at, ir.Constant(ir.IntType(32), 1), mask, ir.Constant(row_type, [0] * NB)]) \
                if masked else b.load(at, typ=row_type, align=1)
            rows.append(b.xor(row, ir.Constant(ir.VectorType(I8, 64), [0x80] * 64)) if b_unsigned else row)
        pairs = [b.bitcast(_interleave(b, rows[0], rows[1], 64), ir.VectorType(ir.IntType(16), 64)),
                 b.bitcast(_interleave(b, rows[2], rows[3], 64), ir.VectorType(ir.IntType(16), 64))]
        quads = b.bitcast(_interleave(b, pairs[0], pairs[1], 64), ir.VectorType(I8, 256))
        b.store(quads, b.gep(packed, [b.mul(b.sub(g, g0), i64(NB * 4))], source_etype=I8), align=1)
    if k % 4:  # K's last rows, in the last block
        with b.if_then(last):
            bytewise(i64(k - k % 4), i64(k), i64(k // 4), NB if rhs.whole_vectors else cols)


def _packed_vector(b, packed, g, col: int, vector_type):
    """The packed rhs quads of group ``g`` from the panel's column ``col``."""
    at = b.add(b.mul(g, i64(NB * 4)), i64(4 * col)) if isinstance(g, ir.Value) else i64(g * NB * 4 + 4 * col)
    return b.load(b.gep(packed, [at], source_etype=I8), typ=vector_type, align=1)


def _lhs_quad(ctx, a_buf, a_base, row, g, k, flipped):
    """4 lhs bytes from k = 4g as an i32, their top bits ``flipped`` where the products read the lhs
    otherwise than it is stored (``DotProduct.lhs_value``: a signed lhs read unsigned, or an unsigned
    one signed); in the last step of a K not a multiple of 4 the missing bytes are 0 before the flip
    (the packed rhs is 0 there)."""
    b = ctx.b
    start = b.add(a_base, b.add(b.mul(row, i64(k)), b.mul(g, i64(4)) if isinstance(g, ir.Value) else i64(4 * g)))
    flip = ir.Constant(I32, 0x80808080 if flipped else 0)
    if isinstance(g, ir.Value):
        return b.xor(b.load(b.gep(a_buf.pointer, [start], source_etype=I8), typ=I32, align=1), flip)
    quad = ir.Constant(I32, 0)
    for t in range(k - 4 * g):
        byte = b.zext(b.load(b.gep(a_buf.pointer, [b.add(start, i64(t))], source_etype=I8), typ=I8), I32)
        quad = b.or_(quad, b.shl(byte, ir.Constant(I32, 8 * t)))
    return b.xor(quad, flip)


def row_sums(ctx, dot, a_buf, a_base, m, k, a_signed, rowsum, zb):
    """``rowsum[row]``: the sum of the lhs row's K bytes as the products read them (unsigned, or
    signed for ``sdot``: ``DotProduct.lhs_value``), which the rhs zero points multiply: 0 when
    ``zb`` (one rhs zero point, an i32) is 0."""
    b = ctx.b
    acc = ctx.fn.alloca(I32, 1, "rowacc")
    if zb is not None:
        with b.if_else(b.icmp_unsigned("==", zb, ir.Constant(I32, 0))) as (zero, other):
            with zero, for_range(b, 0, m, "rowzero") as row:
                b.store(ir.Constant(I32, 0), b.gep(rowsum, [row], source_etype=I32))
            with other:
                row_sums(ctx, dot, a_buf, a_base, m, k, a_signed, rowsum, None)
        return
    with for_range(b, 0, m, "rowsum") as row:
        b.store(ir.Constant(I32, 0), acc)
        with for_range(b, 0, k, "rowk") as kk:
            byte = b.load(b.gep(a_buf.pointer, [b.add(a_base, b.add(b.mul(row, i64(k)), kk))], source_etype=I8),
                          typ=I8)
            byte = dot.lhs_value(b, byte, a_signed)
            b.store(b.add(b.load(acc), byte), acc)
        b.store(b.load(acc), b.gep(rowsum, [row], source_etype=I32))


def sliver_bytes(dot, k) -> int:
    """The bytes of the packed sliver: ``dot.kc`` rows of the panel; on AMX no more than K's, in whole
    tile steps (the last step's tile reads that far)."""
    return NB * (min(dot.kc, -(-k // 64) * 64) if dot.amx else dot.kc)


def gemm_panel(ctx, dot, cols, packed, partial, amx_lhs, a_buf, rhs, output, batch, a_base, j0, m, k, a_signed,
               b_unsigned, za_of, zb_of, rowsum, colsum, zb_tensor=None):
    """One panel of ``cols`` (static) columns: per block of KC rows of K, pack that sliver of it
    (summing its columns), then every row block over it, a register tile of ``dot.nv`` vectors
    at a time (on AMX, ``amx_rows``: tiles).  ``za_of(row)``: the lhs zero point of a row (i32, moved
    with the lhs: ``DotProduct.lhs_value``); ``zb_of(col)`` the rhs's of a column; ``rowsum``: the lhs rows' sums
    (``row_sums``); ``amx_lhs``: where the AMX kernel reads the lhs (``AmxLhs``; None elsewhere);
    ``zb_tensor``: the one rhs zero point (i32) where there is one and
    the lhs has one too, else None (``amx_rows`` folds the corrections when it is 0)."""
    b = ctx.b
    if amx_lhs is not None and amx_lhs.copy_tail and k % AMX_DEPTH:
        copy_lhs_columns(ctx, a_buf, a_base, m, k, k - k % AMX_DEPTH, amx_lhs.tail, AMX_DEPTH)
    lanes = dot.lanes
    vectors = -(-cols // lanes)
    zb = [[zb_of(b.add(j0, i64(min(lanes * v + lane, cols - 1)))) for lane in range(lanes)] for v in range(vectors)]
    zb_vec = []
    for v in range(vectors):
        vec = ir.Constant(dot.vector, ir.Undefined)
        for lane, z in enumerate(zb[v]):
            vec = b.insert_element(vec, z, ir.Constant(I32, lane))
        zb_vec.append(vec)
    for v in range(vectors):
        b.store(dot.constant(0), colsum[v])
    ones = dot.lhs(b, dot.constant(0x01010101))
    block_groups = dot.kc // 4
    k_blocks = max(1, -(-k // dot.kc))
    with for_range(b, 0, k_blocks, "kblock") as kb:
        g0 = b.mul(kb, i64(block_groups))
        last = b.icmp_unsigned("==", kb, i64(k_blocks - 1))
        whole = b.select(last, i64(k // 4 - (k_blocks - 1) * block_groups), i64(block_groups))  # full groups
        if rhs.prepacked_depth is None:
            _pack_sliver(ctx, cols, packed, rhs, j0, k, g0, whole, last, b_unsigned)
            sliver_at = packed
        else:  # the block's rows of the panel, packed by the plan
            panel_at = b.mul(b.udiv(j0, i64(NB)), i64(rhs.prepacked_depth * NB))
            sliver_at = b.gep(rhs.pointer, [b.add(panel_at, b.mul(g0, i64(NB * 4)))], source_etype=I8)
        in_sliver = b.select(last, i64(-(-k // 4) - (k_blocks - 1) * block_groups), i64(block_groups))
        with for_range(b, 0, in_sliver, "colsum") as g:
            for v in range(vectors):
                quads = dot.rhs(b, _packed_vector(b, sliver_at, g, lanes * v, dot.vector))
                b.store(dot(b, b.load(colsum[v]), ones, quads), colsum[v])
        # per column: colsum - K * zb (times the row's -za; the row's -zb * rowsum is added per row)
        column_terms = [b.sub(b.load(colsum[v]), b.mul(dot.constant(k), zb_vec[v])) for v in range(vectors)]
        sliver = _Sliver(g0, whole, kb, last, k_blocks)
        if dot.amx:
            amx_rows(ctx, dot, cols, sliver_at, partial, amx_lhs, output, batch, j0, m, k, a_signed,
                      za_of, zb_vec, column_terms, colsum, rowsum, sliver, zb_tensor)
        else:
            _vector_rows(ctx, dot, cols, sliver_at, partial, sliver, a_buf, output, batch, a_base, j0, m, k, a_signed,
                         za_of, zb_vec, column_terms, rowsum)
    if dot.amx:
        amx.release(b)


def _vector_rows(ctx, dot, cols, packed, partial, sliver, a_buf, output, batch, a_base, j0, m, k, a_signed, za_of,
                 zb_vec, column_terms, rowsum):
    """Every row block of the panel over one K block, ``dot.mr`` rows x ``dot.nv`` vectors at a time."""
    b, mr, vectors = ctx.b, dot.mr, -(-cols // dot.lanes)

    def row_block(i0, rows):
        for v0 in range(0, vectors, dot.nv):
            _tile(ctx, dot, i0, rows, v0, min(dot.nv, vectors - v0), cols, packed, partial, sliver, a_buf, output,
                  batch, a_base, j0, k, a_signed, za_of, zb_vec, column_terms, rowsum)
    blocks, tail = divmod(m, mr)
    if blocks:
        with for_range(b, 0, blocks, "rows") as block:
            row_block(b.mul(block, i64(mr)), mr)
    if tail:
        row_block(i64(blocks * mr), tail)


class _Sliver:
    """The K block a tile runs over: from group ``g0``, ``whole`` full groups (runtime values),
    block ``index`` of ``count`` (``last``: an i1)."""

    def __init__(self, g0, whole, index, last, count):
        self.g0, self.whole, self.index, self.last, self.count = g0, whole, index, last, count

    def end(self, b, finish, keep_partial_sums) -> None:
        """The end of a tile's K block: ``finish()`` (the corrected sums to the output) at the last
        block, else ``keep_partial_sums()`` for the next; with one block, only ``finish``."""
        if self.count == 1:
            finish()
            return
        with b.if_else(self.last) as (at_last, before_last):
            with at_last:
                finish()
            with before_last:
                keep_partial_sums()


def _tile(ctx, dot, i0, rows, v0, count, cols, packed, partial, sliver, a_buf, output, batch, a_base, j0, k,
          a_signed, za_of, zb_vec, column_terms, rowsum):
    """``rows`` x ``count`` vectors of sums from row ``i0`` and the panel's vector ``v0`` over one
    K block: the register tile starts from 0 (the first block) or the partial sums, runs the
    block's k steps, then goes back to the partial sums or, after the last block, gets its
    zero-point corrections and goes to ``output``."""
    b = ctx.b
    lanes = dot.lanes
    accs = [[ctx.fn.alloca(dot.vector, 1, f"acc{r}_{v}") for v in range(count)] for r in range(rows)]

    def partial_at(r, v):
        return b.gep(partial, [b.add(b.mul(b.add(i0, i64(r)), i64(NB)), i64(lanes * (v0 + v)))], source_etype=I32)
    first = b.icmp_unsigned("==", sliver.index, i64(0))
    with b.if_else(first) as (at_first, later):
        with at_first:
            for r in range(rows):
                for v in range(count):
                    b.store(dot.constant(0), accs[r][v])
        with later:
            for r in range(rows):
                for v in range(count):
                    b.store(b.load(partial_at(r, v), typ=dot.vector, align=4), accs[r][v])

    def step(g, packed_g):
        rhs = [dot.rhs(b, _packed_vector(b, packed, packed_g, lanes * (v0 + v), dot.vector)) for v in range(count)]
        for r in range(rows):
            quad = _lhs_quad(ctx, a_buf, a_base, b.add(i0, i64(r)), g, k, a_signed != dot.signed_lhs)
            quad = dot.lhs(b, splat(b, quad, dot.vector))
            for v in range(count):
                b.store(dot(b, b.load(accs[r][v]), quad, rhs[v]), accs[r][v])
    with for_range(b, sliver.g0, b.add(sliver.g0, sliver.whole), "k") as g:
        step(g, b.sub(g, sliver.g0))

    def finish():
        if k % 4:
            step(k // 4, b.sub(i64(k // 4), sliver.g0))
        values = []
        for r in range(rows):  # P - za (colsum - K zb) - zb rowsum
            row_sum = splat(b, b.load(b.gep(rowsum, [b.add(i0, i64(r))], source_etype=I32)), dot.vector)
            za = splat(b, za_of(b.add(i0, i64(r))), dot.vector)
            values.append([b.sub(b.load(accs[r][v]), b.add(b.mul(za, column_terms[v0 + v]),
                                                           b.mul(zb_vec[v0 + v], row_sum)))
                           for v in range(count)])
        output.store(b, batch, i0, b.add(j0, i64(lanes * v0)), rows, min(cols - lanes * v0, lanes * count), values)
    def keep_partial_sums():
        for r in range(rows):
            for v in range(count):
                b.store(b.load(accs[r][v]), partial_at(r, v), align=4)
    sliver.end(b, finish, keep_partial_sums)
