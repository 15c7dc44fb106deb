"""Matmul and conv kernels: one ``lz.matmul`` or ``lz.conv2d`` and its elementwise epilogue.

**float32** goes through the blocked GEMM of ``gemm.py`` (packing, 6 x 64 register tiles of
vector FMA), driven by ``contraction_gemm.py`` (how a matmul's batches and a conv's images
become GEMMs, the work items, the workspace, the epilogue inside the micro-kernel).

- matmul (numpy semantics): each batch index (broadcast batch dims) is one GEMM; a 1-D lhs is
  one row, a 1-D rhs one column.
- conv2d: each (image, group) is one GEMM over the input read as its im2col matrix (never built).
- How B is read (``CONV_B``): packed (GotoBLAS: NR-wide slivers copied from the table's rows per
  K block) or direct (the micro-kernel loads the slab's rows in place, unaligned; no packing and,
  up to K = 2304, no K blocking).  "auto" packs from the input itself when it needs no slab
  (stride 1, no pads) and reads directly otherwise: the faster of the two on each kind of shape
  (numbers in docs/architecture.md; benchmarks/conv.py --lowerings measures them).

**Transposed operands**: a matmul operand may be read through ``lz.transpose`` of a kernel
operand (partition's one prologue: ``x @ w.T``); it is that buffer with permuted strides
(``lezero/codegen/contraction_shapes.py``'s ``stored_operand``), and the GEMM packs it from
its stored layout (``gemm_layout``).

**Thin float32 matmuls** keep every vector lane busy: with A's rows contiguous along k, few
columns (or few rows times a B whose columns are contiguous) are dot products along k
(``lower_matmul_dots``); the GEMM's other thin shapes get a register tile of their own shape
(``matmul_config``), B read in place for a few rows.  Batches along which B is shared are rows
of one GEMM (``MatmulShape.batches_as_rows``); ``contraction_shapes.matmul_kernel`` chooses.

**bf16 and f16** (issue 13): bf16 is float32 storage holding bf16 values, exact float32s, so a
bf16 matmul or conv runs every float32 kernel here on its buffers and the epilogue rounds each
float32 sum once to bf16, as the reference does; where the target has AMX-BF16 its GEMM runs
tdpbf16ps on AMX tiles (B packed: 8 rows or more, 16 deep or more; its convs read B packed; its
other shapes the float32 GEMM), and where it has AVX-512 BF16 only, vdpbf16ps on bf16 pairs packed
from that storage (``gemm_bf16.py``: the same exact products, float32 sums, two per instruction).  f16 (half storage) runs the GEMM too, a matmul's operands
widened to float32 as they are packed (vcvtph2ps where the target has F16C), a conv's on float32
copies (``contraction_gemm._widen_halves``); its epilogue rounds to f16; the loops
for the dot-product and thin-conv shapes, and for a rows form (its operands' sizes vary).

**Other dtypes** (f64, integers wrapping) and float32 matmuls with K = 0: loops.  float32 convs the GEMM tiles waste (fewer than
4 output channels per group, or depthwise) run ``depthwise.py``'s vector kernel over the GEMM's
q-space.  matmul is i-k-j over blocks of 256 columns
(the j loop vectorizes; a stack array holds the sums), or i-j-k when B's columns are contiguous
(x @ w.T: dot products, the k loop a vectorized reduction), a work item per output row; conv is a
work item per output row (n, co, oh): for each (ci, kh, kw) the valid ``ow`` range is computed
once, so the inner loop has no padding test and vectorizes.
"""
from __future__ import annotations

import llvmlite.ir as ir

from lezero.codegen.accumulation import accumulator_type
from lezero.codegen.affine import Affine
from lezero.codegen.contraction_shapes import (
    ConvShape,
    MatmulShape,
    anchor_op,
    matmul_kernel,
    rounded_operands,
    stored_operand,
)
from lezero.codegen.errors import LoweringError
from lezero.codegen.llvm import cache_model, gemm, gemm_bf16
from lezero.codegen.llvm.context import KernelContext
from lezero.codegen.llvm.contraction_gemm import (
    FLOAT32_STORAGE,
    MatmulGemm,
    conv_gemm_plan,
    lower_gemm,
    row_index,
)
from lezero.codegen.llvm.depthwise import lower_depthwise
from lezero.codegen.llvm.ir_types import FLOAT, HALF, I64, PTR, VOID
from lezero.codegen.llvm.loops import (
    affine_value,
    declare,
    for_range,
    i64,
    min_i64,
    unravel_values,
)
from lezero.codegen.llvm.scalar_builder import Scalar, compute_type, storage_type
from lezero.codegen.llvm.vectors import round_to, round_to_bf16
from lezero.codegen.row_generic import any_rows
from lezero.ir.core import Operation
from lezero.ir.types import BF16, F16, F32

# A tile of C of the dot-product kernel (contraction_shapes.matmul_kernel says when it runs)
# holds this many vector accumulators, by vector width (the A and B vectors of a step stay in
# registers too).
DOT_ACCUMULATORS = {16: 12, 8: 6, 4: 4}
# Below this the GEMM's 6 x 64 tiles are mostly padding: float32 convs with fewer output channels
# per group, and depthwise ones, run depthwise.py's kernel.
CONV_GEMM_MIN_CHANNELS = 4
# How a conv's GEMM reads its input: "direct" (the micro-kernel loads the slab's rows in place),
# "packed" (rows copied to NR-wide slivers per K block), or "auto": packed straight from the input
# when it needs no slab (stride 1, no pads: 1x1 convolutions mostly; 10-20% faster there, as it
# saves the slab's copy), direct otherwise (7% faster than packed on the 3x3 benchmark).
CONV_B = "auto"
# ... except that a conv of stride 1 without pads and at most this many output channels per group
# reads its input's rows in place, direct (no slab, no packing; masked at the input's end): with
# few rows of tiles over B, packing B costs more than it saves.  Xeon, 1 thread, CPU time,
# medians of 60, packed -> direct: r50 1x1 256->64 at 56x56 1.28 -> 1.12 ms, pw 144->24 at 56x56
# 0.45 -> 0.33; more channels lost (r50 1x1 64->256 at 56x56 1.08 -> 1.13, 512->128 at 28x28
# 1.11 -> 1.26, pw 96->576 at 14x14 0.19 -> 0.20: each row tile reloads B's rows, a page apart).
DIRECT_IN_PLACE_MAX_CHANNELS = 64
# Loop kernels: columns of sums held in a stack array (matmul), output columns per block (conv).
LOOP_COLUMNS = 256
# Their work-item loop: its inner loops are the vector loops.  When they are short enough to be
# unrolled whole, LLVM's loop vectorizer would vectorize the work-item loop instead, into strided
# wide loads that LLVM 22's X86 backend miscompiles for AVX-512 (f64 x @ w.T at 4 x 6 x 5, issue
# 10; tests/codegen/test_llvm_miscompile.py): it may not, for every target, as there it gains
# nothing either (a kernel of a few hundred flops).
ITEM_LOOP = {"vectorize_enable": 0}


def lower_contraction(ctx: KernelContext) -> int:
    """Emit a matmul or conv kernel; the number of work items."""
    anchor = anchor_op(ctx)
    stored = [stored_operand(ctx, v, anchor) for v in anchor.operands]
    for y in ctx.yields:
        if y.type.shape != anchor.result.type.shape:
            raise LoweringError(f"failed to lower {anchor.name} for {ctx.target}: the epilogue yields shape "
                                f"{y.type.shape}, not the contraction's {anchor.result.type.shape}", anchor.location)
    if 0 in anchor.result.type.shape:
        ctx.fn.finish()
        return 1
    # bf16 values in float32 storage are exact float32s: the float32 kernels' products and sums
    # are the reference's (up to summation order), and each epilogue rounds the sum once to bf16
    dtype = anchor.result.type.element_type
    float32_kernels = dtype in FLOAT32_STORAGE
    # f16 (half storage): the GEMM on float32 copies of its operands (contraction_gemm's
    # _widen_halves), which needs their sizes: not in a rows form (any row count)
    gemm_kernel = float32_kernels or (dtype == F16 and not any_rows(ctx.kernel))
    if anchor.name == "lz.matmul":
        kernel, shape = matmul_kernel(anchor, stored[0][1], stored[1][1])
        rounded = rounded_operands(ctx, anchor)  # float32 operands read through a cast to bf16 or f16
        if float32_kernels and kernel == "dots":
            return lower_matmul_dots(ctx, anchor, shape, rounded=rounded)
        if gemm_kernel and kernel == "gemm":
            return lower_gemm(ctx, anchor, MatmulGemm(shape, HALF if dtype == F16 else FLOAT, rounded))
        return lower_matmul_loops(ctx, anchor, shape, rounded)
    shape = ConvShape.of(anchor)
    dots = conv_as_dots(shape) if float32_kernels else None
    if dots is not None:
        opg = shape.out_per_group
        return lower_matmul_dots(ctx, anchor, dots,
                                 lambda group, image, col: [image[0], group[0] * opg + col[0], Affine(), Affine()])
    thin = shape.out_per_group < CONV_GEMM_MIN_CHANNELS or (shape.in_per_group == 1 and shape.groups > 1)
    if float32_kernels and shape.k > 0 and thin:
        return lower_depthwise(ctx, anchor, shape)
    if gemm_kernel and shape.k > 0 and not thin:
        in_place = shape.strides == (1, 1) and shape.pads == (0, 0, 0, 0)
        # a bf16 conv on AMX tiles reads B packed (gemm_bf16.AmxBf16GemmGenerator pairs it in chunks)
        tiles = dtype == BF16 and gemm_bf16.amx_available(ctx.cpu) and shape.k >= gemm_bf16.AMX_MIN_DEPTH
        few_rows = shape.out_per_group <= DIRECT_IN_PLACE_MAX_CHANNELS
        direct = CONV_B == "direct" or (CONV_B == "auto" and (few_rows or not in_place) and not tiles)
        a_block_floats = cache_model.direct_a_block_floats(cache_model.caches_for(ctx.cpu))
        weights = ctx.body.args.index(stored[1][0])
        # a constant weight is packed by the plan from float32 storage (packed_operands), not f16's
        constant = (weights if weights in ctx.kernel.definition.attrs(ctx.kernel).constant_operands
                    and float32_kernels else None)
        return lower_gemm(ctx, anchor, conv_gemm_plan(ctx.cpu, shape, direct, a_block_floats, constant, dtype))
    return lower_conv_loops(ctx, anchor, shape)


def conv_as_dots(s: ConvShape) -> MatmulShape | None:
    """A 1x1 conv of 1x1 images (squeeze-excite's) as dot products: per group, C[image, co] =
    x[image, :] . W[co, :], both contiguous along k (the GEMM's 64-wide tiles would hold one
    useful column); None for any other conv."""
    if (s.h, s.w, s.kh, s.kw, s.oh, s.ow) != (1, 1, 1, 1, 1, 1) or s.k == 0:
        return None
    return MatmulShape((s.groups,), (s.in_per_group,), (s.out_per_group * s.in_per_group,), s.n, s.out_per_group,
                       s.in_per_group, True, True, (s.c, 1), (1, s.in_per_group))


# --------------------------------------------------------------------------------------------
# float32 dot products: a few rows or columns, both operands contiguous along k
# --------------------------------------------------------------------------------------------


def dot_tile(m: int, n: int, accumulators: int) -> tuple[int, int]:
    """Rows x columns of C per work item (each element a vector of partial sums along k), at
    most ``accumulators`` of them: the fewest FMAs and loads over all of C, counting the tiles'
    padding at the edges and a load as half an FMA (R + C loads feed R x C FMAs)."""
    def cost(tile):
        r, c = tile
        return -(-m // r) * -(-n // c) * (r * c + (r + c) / 2)

    return min(((r, min(n, accumulators // r)) for r in range(1, min(m, accumulators) + 1)), key=cost)


def lower_matmul_dots(ctx: KernelContext, anchor: Operation, shape: MatmulShape, result_index=None,
                      rounded: tuple = (False, False)) -> int:
    """A work item per tile of R x C elements of C (``dot_tile``): R rows of A and C columns of
    B (both contiguous along k) are read a vector at a time, R x C vector FMAs per step, the last
    K % W columns by masked loads; each sum is the horizontal sum of its vector, then the
    epilogue.  Every element of A and B is loaded once per tile it meets, nothing is packed and
    every lane does useful work (the GEMM's tiles would be 1 to 3 columns of 16 lanes).  When
    B's columns are not contiguous (a plain K x N matrix of few columns), a call first copies
    each batch's B transposed to a workspace (K x N floats, ``malloc``ed per call).
    ``result_index(batch, row, col)``: the result's index at an element of C (lists of index
    forms; default their concatenation), for a conv run as dot products (``conv_as_dots``).
    ``rounded``: per operand, float32 read through a cast to bf16, each vector rounded as loaded
    (B rounded once into the workspace copy when more than one row tile reads it)."""
    b = ctx.b
    w = gemm.GemmConfig.for_target(ctx.cpu).vector_width
    rows, cols = dot_tile(shape.m, shape.n, DOT_ACCUMULATORS.get(w, 8))
    vector = ir.VectorType(FLOAT, w)
    zeros = ir.Constant(vector, [0.0] * w)
    a_ptr, b_ptr = (ctx.fn.buffers[ctx.body.args.index(stored_operand(ctx, v, anchor)[0])] for v in anchor.operands)
    a_row_stride, (b_k_stride, b_col_stride) = shape.a_matrix_strides[0], shape.b_matrix_strides
    row_tiles, col_tiles = -(-shape.m // rows), -(-shape.n // cols)
    # B read through a cast to bf16 is rounded once, as copied, when several row tiles read it
    copy_b = (b_k_stride != 1 and shape.k > 1) or (rounded[1] and row_tiles > 1)
    if copy_b:  # B transposed into a workspace, per batch (the one copied last is remembered)
        raw = b.call(declare(ctx.module, "malloc", PTR, [I64]), [i64(4 * shape.k * shape.n)])
        with b.if_then(b.icmp_unsigned("==", raw, ir.Constant(PTR, None)), likely=False):
            b.call(declare(ctx.module, "llvm.trap", VOID, []), [])
            b.unreachable()
        copied_batch = ctx.fn.alloca(I64, 1, "copied_batch")
        b.store(i64(-1), copied_batch)
    sums = ctx.fn.alloca(FLOAT, rows * cols, "sums")
    vectors, rest = divmod(shape.k, w)
    tail_mask = ir.Constant(ir.VectorType(ir.IntType(1), w), [lane < rest for lane in range(w)])
    masked_load = declare(ctx.module, f"llvm.masked.load.v{w}f32.p0", vector,
                           [PTR, ir.IntType(32), tail_mask.type, vector])
    # fmuladd: an FMA where the target has one, else a multiply and an add (llvm.fma would call fmaf)
    fma = declare(ctx.module, f"llvm.fmuladd.v{w}f32", vector, [vector] * 3)

    with for_range(b, ctx.fn.begin, ctx.fn.end, "item") as item:
        batch, row_tile, col_tile = unravel_values(b, item, (shape.batches, row_tiles, col_tiles))
        coords = unravel_values(b, batch, shape.batch_shape) if shape.batch_shape else []
        a_base, b_base = i64(0), i64(0)
        for c, sa, sb in zip(coords, shape.a_batch_strides, shape.b_batch_strides):
            a_base = b.add(a_base, b.mul(c, i64(sa)))
            b_base = b.add(b_base, b.mul(c, i64(sb)))
        b_source = b_ptr
        if copy_b:
            with b.if_then(b.icmp_unsigned("!=", b.load(copied_batch, typ=I64), batch)):
                with for_range(b, 0, shape.n, "copy_j") as j:
                    column = b.gep(b_ptr, [b.add(b_base, b.mul(j, i64(b_col_stride)))], source_etype=FLOAT)
                    copy = b.gep(raw, [b.mul(j, i64(shape.k))], source_etype=FLOAT)
                    with for_range(b, 0, shape.k, "copy_k") as k:
                        value = b.load(b.gep(column, [b.mul(k, i64(b_k_stride))], source_etype=FLOAT), typ=FLOAT)
                        b.store(round_to_bf16(b, value) if rounded[1] else value, b.gep(copy, [k], source_etype=FLOAT))
                b.store(batch, copied_batch)
            b_source, b_base, b_col_stride = raw, i64(0), shape.k
        first_row, first_col = b.mul(row_tile, i64(rows)), b.mul(col_tile, i64(cols))
        # edge tiles read their last row / column again (in bounds) and store only what is inside
        a_rows = [b.gep(a_ptr, [b.add(a_base, b.mul(min_i64(b, b.add(first_row, i64(r)), shape.m - 1),
                                                    i64(a_row_stride)))], source_etype=FLOAT) for r in range(rows)]
        b_cols = [b.gep(b_source, [b.add(b_base, b.mul(min_i64(b, b.add(first_col, i64(c)), shape.n - 1),
                                                    i64(b_col_stride)))], source_etype=FLOAT) for c in range(cols)]

        def step(accumulators, k, mask=None):
            def load(pointer, rounds):
                address = b.gep(pointer, [k], source_etype=FLOAT)
                if mask is None:
                    value = b.load(address, typ=vector, align=4)
                else:
                    value = b.call(masked_load, [address, ir.Constant(ir.IntType(32), 4), mask, zeros])
                return round_to_bf16(b, value) if rounds else value

            a_vectors = [load(p, rounded[0]) for p in a_rows]
            b_vectors = [load(p, rounded[1] and not copy_b) for p in b_cols]
            return [[b.call(fma, [a_vectors[r], b_vectors[c], accumulators[r][c]]) for c in range(cols)]
                    for r in range(rows)]

        accumulators = [[zeros] * cols for _ in range(rows)]
        if vectors:
            entry = b.block
            with for_range(b, 0, vectors, "k") as kv:
                phis = [[b.phi(vector, name=f"acc{r}_{c}") for c in range(cols)] for r in range(rows)]
                for r in range(rows):
                    for c in range(cols):
                        phis[r][c].add_incoming(zeros, entry)
                accumulators = step(phis, b.mul(kv, i64(w)))
                for r in range(rows):
                    for c in range(cols):
                        phis[r][c].add_incoming(accumulators[r][c], b.block)
        if rest:
            accumulators = step(accumulators, i64(vectors * w), tail_mask)
        for r in range(rows):
            for c in range(cols):
                b.store(_horizontal_sum(b, accumulators[r][c], w), b.gep(sums, [i64(r * cols + c)], source_etype=FLOAT))
        row_count = min_i64(b, i64(rows), b.sub(i64(shape.m), first_row))
        col_count = min_i64(b, i64(cols), b.sub(i64(shape.n), first_col))
        index_prefix = [affine_value(c, d, f"batch{i}") for i, (c, d) in enumerate(zip(coords, shape.batch_shape))]
        with for_range(b, 0, row_count, "r") as r:
            row = row_index(b, shape, b.add(first_row, r))
            with for_range(b, 0, col_count, "c") as c:
                col = [affine_value(b.add(first_col, c), shape.n, "col")] if shape.has_cols else []
                address = b.gep(sums, [b.add(b.mul(r, i64(cols)), c)], source_etype=FLOAT)
                index = result_index(index_prefix, row, col) if result_index else index_prefix + row + col
                _store_epilogue(ctx, anchor, index, address, F32)
    if copy_b:
        b.call(declare(ctx.module, "free", VOID, [PTR]), [raw])
    ctx.fn.finish()
    return shape.batches * row_tiles * col_tiles


def _horizontal_sum(b: ir.IRBuilder, v, width: int):
    """The sum of a vector's lanes: halves added until one lane is left."""
    while width > 1:
        half = width // 2
        low = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(ir.IntType(32), half), list(range(half))))
        high = b.shuffle_vector(v, v, ir.Constant(ir.VectorType(ir.IntType(32), half), list(range(half, width))))
        v = b.fadd(low, high)
        width = half
    return b.extract_element(v, ir.Constant(ir.IntType(32), 0))


# --------------------------------------------------------------------------------------------
# Other dtypes: loops
# --------------------------------------------------------------------------------------------


def _accumulate(b: ir.IRBuilder, acc, x, y, dtype):
    """acc + x * y in ``dtype``'s compute type (floats may contract to an FMA and reassociate, as
    BLAS does)."""
    if dtype.is_float:
        flags = ("contract", "reassoc")
        return b.fadd(acc, b.fmul(x, y, flags=flags), flags=flags)
    return b.add(acc, b.mul(x, y))


def _zero(dtype):
    return ir.Constant(compute_type(dtype), 0.0 if dtype.is_float else 0)


def _store_epilogue(ctx: KernelContext, anchor: Operation, index, sum_address, acc_dtype) -> None:
    """Every yielded value at ``index``, the contraction's value being the sum at ``sum_address``
    rounded to its element type."""
    dtype = anchor.result.type.element_type
    emitter = ctx.emitter
    emitter.new_scope()

    def contraction_value(op, value, at):
        acc = ctx.b.load(sum_address, typ=compute_type(acc_dtype))
        return ctx.s.round(Scalar(acc, dtype))  # f16/bf16 sums are float32 too: round once, like the reference

    emitter.overrides[anchor] = contraction_value
    values = [emitter.at(y, index) for y in ctx.yields]
    for value, buffer in zip(values, ctx.result_buffers):
        emitter.store(buffer, index, value)


def lower_matmul_loops(ctx: KernelContext, anchor: Operation, shape: MatmulShape,
                       rounded: tuple = (False, False)) -> int:
    """A work item per output row: for blocks of columns, sums[j] += a[i, k] * b[k, j] (i-k-j),
    then the epilogue; ``rounded``: per operand, float32 read through a cast to the matmul's bf16 or
    f16 (rounded as loaded)."""
    b = ctx.b
    dtype = anchor.result.type.element_type
    acc_dtype = accumulator_type(dtype)
    acc_type = compute_type(acc_dtype)
    a_ptr, b_ptr = (ctx.fn.buffers[ctx.body.args.index(stored_operand(ctx, v, anchor)[0])] for v in anchor.operands)
    (_, a_k_stride), (b_k_stride, b_col_stride) = shape.a_matrix_strides, shape.b_matrix_strides
    a_storage, b_storage = (FLOAT if rounds else storage_type(dtype) for rounds in rounded)
    block = min(shape.n, LOOP_COLUMNS)
    sums = ctx.fn.alloca(acc_type, block, "sums")
    # B's columns contiguous along k (x @ w.T): each sum a dot product in a register, its k loop a
    # vectorized reduction (15-23x faster in f64 at 64^3 and 256^3 than the j loop's gathers);
    # otherwise the j loop over B's rows vectorizes, the sums in the stack array
    dots = b_k_stride == 1 and b_col_stride != 1 and shape.k > 0

    def load(pointer, offset, rounds):
        if rounds:  # float32 read through the cast
            return round_to(b, b.load(b.gep(pointer, [offset], source_etype=FLOAT), typ=FLOAT), dtype.name)
        # f16 loads extend to float: the products are exact in float32
        return ctx.s.load(b.gep(pointer, [offset], source_etype=storage_type(dtype)), dtype).value

    with for_range(b, ctx.fn.begin, ctx.fn.end, "item", **ITEM_LOOP) as item:
        batch, row = (b.udiv(item, i64(shape.m)), b.urem(item, i64(shape.m))) if shape.m > 1 else (item, i64(0))
        coords = unravel_values(b, batch, shape.batch_shape) if shape.batch_shape else []
        a_offset, b_offset = i64(0), i64(0)
        for c, sa, sb in zip(coords, shape.a_batch_strides, shape.b_batch_strides):
            a_offset = b.add(a_offset, b.mul(c, i64(sa)))
            b_offset = b.add(b_offset, b.mul(c, i64(sb)))
        a_row = b.gep(a_ptr, [b.add(a_offset, b.mul(row, i64(shape.a_matrix_strides[0])))], source_etype=a_storage)
        b_mat = b.gep(b_ptr, [b_offset], source_etype=b_storage)
        index_prefix = [affine_value(c, d, f"batch{i}") for i, (c, d) in enumerate(zip(coords, shape.batch_shape))]
        index_prefix += row_index(b, shape, row)

        def dot_products(j0, width: int):
            with for_range(b, 0, width, "j") as j:
                b_column = b.gep(b_mat, [b.mul(b.add(j0, j), i64(b_col_stride))], source_etype=b_storage)
                entry = b.block
                with for_range(b, 0, shape.k, "k") as k:
                    acc = b.phi(acc_type, "acc")
                    acc.add_incoming(_zero(acc_dtype), entry)
                    total = _accumulate(b, acc, load(a_row, b.mul(k, i64(a_k_stride)), rounded[0]),
                                        load(b_column, k, rounded[1]), acc_dtype)
                    acc.add_incoming(total, b.block)
                b.store(total, b.gep(sums, [j], source_etype=acc_type))

        def rows_of_b(j0, width: int):
            with for_range(b, 0, width, "zero") as j:
                b.store(_zero(acc_dtype), b.gep(sums, [j], source_etype=acc_type))
            with for_range(b, 0, shape.k, "k") as k:
                a_value = load(a_row, b.mul(k, i64(a_k_stride)), rounded[0])
                b_row = b.gep(b_mat, [b.add(b.mul(k, i64(b_k_stride)), b.mul(j0, i64(b_col_stride)))],
                              source_etype=b_storage)
                with for_range(b, 0, width, "j") as j:
                    address = b.gep(sums, [j], source_etype=acc_type)
                    b_value = load(b_row, b.mul(j, i64(b_col_stride)), rounded[1])
                    b.store(_accumulate(b, b.load(address, typ=acc_type), a_value, b_value, acc_dtype), address)

        def column_block(j0, width: int):
            (dot_products if dots else rows_of_b)(j0, width)
            with for_range(b, 0, width, "out") as j:
                col = [affine_value(b.add(j0, j), shape.n, "col")] if shape.has_cols else []
                _store_epilogue(ctx, anchor, index_prefix + col, b.gep(sums, [j], source_etype=acc_type), acc_dtype)

        _over_column_blocks(b, shape.n, block, column_block)
    ctx.fn.finish()
    return shape.batches * shape.m


def lower_conv_loops(ctx: KernelContext, anchor: Operation, s: ConvShape) -> int:
    """A work item per output row (n, co, oh): sums[ow] += w[co, ci, kh, kw] * x[n, c, ih, iw] over
    the taps whose input row is inside, each over the ow range whose input column is inside."""
    b = ctx.b
    dtype = anchor.result.type.element_type
    acc_dtype = accumulator_type(dtype)
    acc_type = compute_type(acc_dtype)
    x_ptr, w_ptr = (ctx.fn.buffers[ctx.body.args.index(v)] for v in anchor.operands)
    storage = storage_type(dtype)
    sh, sw = s.strides
    dh, dw = s.dilations
    pt, pl = s.pads[0], s.pads[1]
    block = min(s.ow, LOOP_COLUMNS)
    sums = ctx.fn.alloca(acc_type, block, "sums")

    with for_range(b, ctx.fn.begin, ctx.fn.end, "item", **ITEM_LOOP) as item:
        image, channel, oh = unravel_values(b, item, (s.n, s.o, s.oh))
        group = b.udiv(channel, i64(s.out_per_group)) if s.groups > 1 else i64(0)
        x_image = b.gep(x_ptr, [b.mul(b.add(b.mul(image, i64(s.c)), b.mul(group, i64(s.in_per_group))),
                                      i64(s.h * s.w))], source_etype=storage)
        w_channel = b.gep(w_ptr, [b.mul(channel, i64(s.k))], source_etype=storage)
        prefix = [affine_value(image, s.n, "image"), affine_value(channel, s.o, "channel"), affine_value(oh, s.oh, "oh")]

        def column_block(ow0, width: int):
            ow_end = b.add(ow0, i64(width))
            with for_range(b, 0, width, "zero") as j:
                b.store(_zero(acc_dtype), b.gep(sums, [j], source_etype=acc_type))
            with for_range(b, 0, s.in_per_group, "ci") as ci:
                x_plane = b.gep(x_image, [b.mul(ci, i64(s.h * s.w))], source_etype=storage)
                with for_range(b, 0, s.kh, "kh") as kh:
                    ih = b.add(b.mul(oh, i64(sh)), b.sub(b.mul(kh, i64(dh)), i64(pt)))
                    with b.if_then(b.icmp_unsigned("<", ih, i64(s.h))):
                        x_row = b.gep(x_plane, [b.mul(ih, i64(s.w))], source_etype=storage)
                        with for_range(b, 0, s.kw, "kw") as kw:
                            tap = b.add(b.mul(b.add(b.mul(ci, i64(s.kh)), kh), i64(s.kw)), kw)
                            weight = ctx.s.load(b.gep(w_channel, [tap], source_etype=storage), dtype).value
                            shift = b.sub(b.mul(kw, i64(dw)), i64(pl))  # iw = ow * sw + shift
                            # inside: 0 <= ow * sw + shift < w
                            lo = _ceil_div_nonnegative(b, b.sub(i64(0), shift), sw)
                            hi = _ceil_div_nonnegative(b, b.sub(i64(s.w), shift), sw)
                            lo = b.select(b.icmp_signed("<", lo, ow0), ow0, lo)
                            hi = min_i64(b, hi, ow_end)
                            with for_range(b, lo, hi, "ow") as ow:
                                x = ctx.s.load(b.gep(x_row, [b.add(b.mul(ow, i64(sw)), shift)], source_etype=storage),
                                               dtype).value
                                address = b.gep(sums, [b.sub(ow, ow0)], source_etype=acc_type)
                                b.store(_accumulate(b, b.load(address, typ=acc_type), weight, x, acc_dtype), address)
            with for_range(b, 0, width, "out") as j:
                ow = affine_value(b.add(ow0, j), s.ow, "ow")
                _store_epilogue(ctx, anchor, prefix + [ow], b.gep(sums, [j], source_etype=acc_type), acc_dtype)

        _over_column_blocks(b, s.ow, block, column_block)
    ctx.fn.finish()
    return s.n * s.o * s.oh


def _over_column_blocks(b, columns: int, block: int, column_block) -> None:
    """Emit ``column_block(first_column, width)`` over ``columns`` in blocks of ``block`` (a loop for
    the full blocks, then the rest)."""
    full_blocks, rest = divmod(columns, block)
    if full_blocks == 1:
        column_block(i64(0), block)
    elif full_blocks > 1:
        with for_range(b, 0, full_blocks, "block") as blk:
            column_block(b.mul(blk, i64(block)), block)
    if rest:
        column_block(i64(full_blocks * block), rest)


def _ceil_div_nonnegative(b: ir.IRBuilder, x, d: int):
    """max(0, ceil(x / d)) for d > 0."""
    q = b.sdiv(b.add(x, i64(d - 1)), i64(d)) if d > 1 else x
    return b.select(b.icmp_signed("<", x, i64(1)), i64(0), q)
