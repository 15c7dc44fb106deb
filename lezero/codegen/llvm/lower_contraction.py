"""Matmul and conv kernels: one ``lz.matmul`` or ``lz.conv2d`` and its elementwise epilogue.

**float32** goes through the blocked GEMM of ``gemm.py`` (packing, 6 x 64 register tiles of
vector FMA).  The kernel's epilogue is emitted inside the micro-kernel, as a ``TileStore``: on
the last K block the tile's sums go to a stack array and, for each row of the tile, a loop over
its columns evaluates every yielded value with the same value-at-index emitter the elementwise
kernels use (``ValueAtIndex``; the contraction's value is read from the tile), and stores it.
LLVM vectorizes that loop like any elementwise loop, so bias, activations, residuals and any
broadcast operand cost one pass over the tile while it is in L1; an operand read through data
movement of memory (BatchNorm's per-channel vector reshaped to C x 1 x 1) is index arithmetic on
its load, the same code as for an operand stored in that shape.

- matmul (numpy semantics): each batch index (broadcast batch dims) is one GEMM; a 1-D lhs is
  one row, a 1-D rhs one column.
- conv2d: each (image, group) is one GEMM out[co, pixel] = W[co, k] . col[k, pixel] with
  k = (ci, kh, kw), which is NCHW already.  The im2col matrix is never built: pixels are numbered
  in *q-space*, ``q = oh * WQ + ow`` over rows of the padded input wide enough for every kernel
  column (``WQ = OW + (KW - 1) * dw`` for stride 1), so that row ``k`` of col is one contiguous
  run of the input, ``col[k, q] = x[off[k] + q]``, with ``off`` a constant table (gemm.py's
  ``b_row_offsets``).  The ``WQ - OW`` columns past each output row are computed and never stored
  (3.4% for a 3x3 at 56x56).  Pads and strides go through a *slab*: the rows of the input a task
  reads, zero padded and split into ``sh x sw`` phases (``slab[ci, a, b, r, c] = xpad[ci, r*sh + a,
  c*sw + b]``), which makes a strided convolution a stride-1 one over the phases.  A stride-1
  convolution without pads reads its input in place.
- How B is read (``CONV_B``): packed (GotoBLAS: NR-wide slivers copied from the table's rows per
  K block) or direct (the micro-kernel loads the slab's rows in place, unaligned; no packing and,
  up to K = 2304, no K blocking).  "auto" packs from the input itself when it needs no slab
  (stride 1, no pads) and reads directly otherwise: the faster of the two on each kind of shape
  (numbers in docs/architecture.md; benchmarks/conv.py --lowerings measures them).

Work items are slices: each batch's output (each GEMM's C) is cut into at most ``MAX_SLICES``
slices of whole register tiles along its longer dim, and work item ``batch * S + s`` is slice s.
A call of the ABI function on ``[begin, end)`` computes, for each batch the range touches, the
slices it covers as *one* rectangle: the runtime gives each thread one contiguous range, so every
thread packs its operands once, with any number of threads (fixed rectangles would pack once per
rectangle, and a count tuned for one thread count wastes packing or balance at another).  Results
do not depend on the split: the sum of each element runs over the same K blocks in the same order.

The workspace (packed A, packed B, the slab, partial sums when they cannot wait in a float32
result) is ``malloc``ed by each call of the ABI function and freed at its end: the ABI has no
workspace argument, the stack is too small (megabytes), and a thread-local buffer would need TLS
in JIT-loaded objects.  A call does a thread's whole share, so this is once per thread per launch,
and glibc serves the repeated size warm from its heap (a handful of page faults per launch on the
benchmark).  A failed malloc traps.

**Transposed operands**: a matmul operand may be read through ``lz.transpose`` of a kernel
operand (partition's one prologue: ``x @ w.T``); it is that buffer with permuted strides
(``stored_operand``), and the GEMM packs it from its stored layout (``gemm_layout``).

**Thin float32 matmuls** keep every vector lane busy: with A's rows contiguous along k, fewer
than DOT_MAX_COLS columns (or fewer than THIN_ROWS rows times a B whose columns are contiguous)
are dot products along k (``lower_matmul_dots``); the GEMM's other thin shapes get a register
tile of their own shape (``matmul_config``), B read in place for fewer than THIN_ROWS rows.

**Other dtypes** (f64, f16 and bf16 accumulating in f32 as the reference does, integers
wrapping), float32 operands the GEMM cannot pack, and convs the GEMM tiles waste (fewer than 4
output channels per group, e.g. depthwise): loops.  matmul is i-k-j over blocks of 256 columns
(the j loop vectorizes; a stack array holds the sums), or i-j-k when B's columns are contiguous
(x @ w.T: dot products, the k loop a vectorized reduction), a work item per output row; conv is a
work item per output row (n, co, oh): for each (ci, kh, kw) the valid ``ow`` range is computed
once, so the inner loop has no padding test and vectorizes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import llvmlite.ir as ir

from lezero.codegen.affine import Affine, Var
from lezero.codegen.errors import LoweringError
from lezero.codegen.llvm import cache_model, gemm
from lezero.codegen.llvm.index_math import IndexMaterializer, LLVMValueAtIndex
from lezero.codegen.llvm.kernel_function import KernelContext
from lezero.codegen.llvm.loops import for_range, i64, min_i64, unravel_values
from lezero.codegen.llvm.scalar_builder import LLVMScalarBuilder, Scalar, accumulator_type, compute_type, storage_type
from lezero.codegen.value_at_index import Buffer
from lezero.ir.core import Operation
from lezero.ir.dialect.data_movement import TransposeOp
from lezero.ir.types import F32

I8 = ir.IntType(8)
I64 = ir.IntType(64)
PTR = ir.PointerType()
FLOAT = ir.FloatType()
VOID = ir.VoidType()

CONTRACTION_OPS = ("lz.matmul", "lz.conv2d")

# Work items: each batch's output is cut into at most MAX_SLICES slices along its longer dim
# (whole register tiles), and a call of the kernel computes the slices of its range as one
# rectangle per batch (see lower_gemm).
MAX_SLICES = 32
# A matmul with fewer rows gets a register tile of its own height, and reads B in place
# (matmul_config, MatmulGemm); a tile is at most this many vectors wide.
THIN_ROWS = 4
MAX_THIN_VECTORS = 16
# A float32 matmul with fewer columns whose A rows are contiguous along k is dot products
# (lower_matmul_dots), as is one with fewer than THIN_ROWS rows whose B columns are contiguous
# too; a tile of C then holds this many vector accumulators, by vector width (the A and B
# vectors of a step stay in registers too).
DOT_MAX_COLS = 16
DOT_ACCUMULATORS = {16: 12, 8: 6, 4: 4}
# Below this the GEMM's 6 x 64 tiles are mostly padding: the loop kernel is used instead.
CONV_GEMM_MIN_CHANNELS = 4
# How a conv's GEMM reads its input: "direct" (the micro-kernel loads the slab's rows in place),
# "packed" (rows copied to NR-wide slivers per K block), or "auto": packed straight from the input
# when it needs no slab (stride 1, no pads: 1x1 convolutions mostly; 10-20% faster there, as it
# saves the slab's copy), direct otherwise (7% faster than packed on the 3x3 benchmark).
CONV_B = "auto"
# Direct mode keeps all of K in one block (no partial sums) up to this depth; the packed A block
# then holds cache_model.direct_a_block_floats of the target's caches at most.
DIRECT_MAX_KC = 2304
# The epilogue's loops over a tile row are short (64 columns at most, split at output rows in a
# conv): masked vector iterations rather than a scalar remainder loop, which would run a
# transcendental epilogue up to 15 times per row one lane at a time.
TILE_LOOP = {"vectorize_enable": 1, "vectorize_predicate_enable": 1}
# Loop kernels: columns of sums held in a stack array (matmul), output columns per block (conv).
LOOP_COLUMNS = 256
# Their work-item loop: its inner loops are the vector loops.  When they are short enough to be
# unrolled whole, LLVM's loop vectorizer would vectorize the work-item loop instead, into strided
# wide loads that LLVM 22's X86 backend miscompiles for AVX-512 (f64 x @ w.T at 4 x 6 x 5, issue
# 10; tests/codegen/test_llvm_miscompile.py): it may not, for every target, as there it gains
# nothing either (a kernel of a few hundred flops).
ITEM_LOOP = {"vectorize_enable": 0}


def anchor_op(ctx: KernelContext) -> Operation:
    ops = [op for op in ctx.body.ops if op.name in CONTRACTION_OPS]
    if len(ops) != 1:
        raise LoweringError(f"failed to lower {ctx.kernel.definition.attrs(ctx.kernel).kind} kernel {ctx.name} for "
                            f"{ctx.target}: it holds {len(ops)} contractions, not one", ctx.kernel.location)
    return ops[0]


def stored_operand(ctx: KernelContext, v, anchor: Operation):
    """The kernel operand (block argument) that contraction operand ``v`` reads, and ``v``'s strides
    in it (elements per step along each of ``v``'s dims): ``v`` itself, or a matmul operand
    read through ``lz.transpose`` (the only prologue a contraction kernel takes)."""
    if v in ctx.body.args:
        return v, _row_major(v.type.shape)
    op = v.owner
    if anchor.name == "lz.matmul" and isinstance(op, Operation) and op.name == "lz.transpose":
        source, strides = stored_operand(ctx, op.operands[0], anchor)
        perm = TransposeOp.permutation(op.definition.attrs(op), len(strides))
        return source, tuple(strides[p] for p in perm)
    raise LoweringError(f"failed to lower {anchor.name} for {ctx.target}: its operands must be kernel operands "
                        "(a contraction kernel takes no prologue but a matmul operand's transpose)", anchor.location)


def _row_major(shape) -> tuple:
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


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
    dtype = anchor.result.type.element_type
    if anchor.name == "lz.matmul":
        shape = MatmulShape.of(anchor, stored[0][1], stored[1][1])
        a_layout = gemm_layout(shape.m, shape.k, *shape.a_matrix_strides)
        b_layout = gemm_layout(shape.k, shape.n, *shape.b_matrix_strides)
        if dtype == F32 and shape.k > 0 and dot_products(shape):
            return lower_matmul_dots(ctx, anchor, shape)
        if dtype == F32 and shape.k > 0 and a_layout and b_layout:
            return lower_gemm(ctx, anchor, MatmulGemm(shape, a_layout, b_layout))
        return lower_matmul_loops(ctx, anchor, shape)
    shape = ConvShape.of(anchor)
    if dtype == F32 and shape.k > 0 and shape.out_per_group >= CONV_GEMM_MIN_CHANNELS:
        in_place = shape.strides == (1, 1) and shape.pads == (0, 0, 0, 0)
        direct = CONV_B == "direct" or (CONV_B == "auto" and not in_place)
        a_block_floats = cache_model.direct_a_block_floats(cache_model.caches_for(ctx.cpu))
        return lower_gemm(ctx, anchor, ConvGemm(shape, direct, a_block_floats))
    return lower_conv_loops(ctx, anchor, shape)


def contraction_flops(op: Operation) -> int:
    """2 x multiply-adds of a matmul or conv2d."""
    if op.name == "lz.matmul":
        s = MatmulShape.of(op)
        return 2 * s.batches * s.m * s.n * s.k
    s = ConvShape.of(op)
    return 2 * math.prod(op.result.type.shape) * s.in_per_group * s.kh * s.kw


# --------------------------------------------------------------------------------------------
# Shapes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MatmulShape:
    """numpy matmul as ``batches`` GEMMs of m x k by k x n, with each operand's strides in the
    buffer it is read from (row-major, or permuted by a transpose the kernel reads it through)."""

    batch_shape: tuple
    a_batch_strides: tuple  # elements, 0 along broadcast dims
    b_batch_strides: tuple
    m: int
    n: int
    k: int
    has_rows: bool  # the result has the m dim (a 2-D+ lhs)
    has_cols: bool  # the result has the n dim (a 2-D+ rhs)
    a_matrix_strides: tuple = (0, 1)  # elements per step of (row, k) of A
    b_matrix_strides: tuple = (0, 1)  # elements per step of (k, column) of B

    @staticmethod
    def of(op: Operation, a_strides: tuple | None = None, b_strides: tuple | None = None) -> "MatmulShape":
        """``a_strides``/``b_strides``: per dim of each operand (row-major when not given)."""
        a, b = (v.type.shape for v in op.operands)
        a_strides = _row_major(a) if a_strides is None else tuple(a_strides)
        b_strides = _row_major(b) if b_strides is None else tuple(b_strides)
        a2, as2 = (a, a_strides) if len(a) > 1 else ((1,) + a, (0,) + a_strides)
        b2, bs2 = (b, b_strides) if len(b) > 1 else (b + (1,), b_strides + (0,))
        m, k = a2[-2:]
        n = b2[-1]
        result = op.result.type.shape
        batch = tuple(result[:len(result) - (len(a) > 1) - (len(b) > 1)])

        def strides(shape, operand_strides):
            lead = len(batch) - len(shape)
            return tuple(operand_strides[d - lead] if d >= lead and shape[d - lead] != 1 else 0
                         for d in range(len(batch)))

        return MatmulShape(batch, strides(a2[:-2], as2[:-2]), strides(b2[:-2], bs2[:-2]), m, n, k, len(a) > 1,
                           len(b) > 1, tuple(as2[-2:]), tuple(bs2[-2:]))

    @property
    def batches(self) -> int:
        return math.prod(self.batch_shape)


@dataclass(frozen=True)
class ConvShape:
    n: int
    c: int
    h: int
    w: int
    o: int
    kh: int
    kw: int
    oh: int
    ow: int
    groups: int
    strides: tuple
    pads: tuple  # top, left, bottom, right
    dilations: tuple

    @staticmethod
    def of(op: Operation) -> "ConvShape":
        attrs = op.definition.attrs(op)
        n, c, h, w = op.operands[0].type.shape
        o, _, kh, kw = op.operands[1].type.shape
        _, _, oh, ow = op.result.type.shape
        return ConvShape(n, c, h, w, o, kh, kw, oh, ow, attrs.groups, tuple(attrs.strides), tuple(attrs.pads),
                         tuple(attrs.dilations))

    @property
    def in_per_group(self) -> int:
        return self.c // self.groups

    @property
    def out_per_group(self) -> int:
        return self.o // self.groups

    @property
    def k(self) -> int:
        return self.in_per_group * self.kh * self.kw


# --------------------------------------------------------------------------------------------
# float32: the GEMM
# --------------------------------------------------------------------------------------------


def _affine(value, extent=None, name="v") -> Affine:
    return Affine.of(Var(name, extent, payload=value))


def _align_up(x: int, to: int) -> int:
    return -(-x // to) * to


def gemm_layout(rows: int, cols: int, row_stride: int, col_stride: int):
    """How the GEMM reads a rows x cols operand with these strides (elements): ``(False, ld)`` for
    contiguous rows ``ld`` apart, ``(True, ld)`` for contiguous columns ``ld`` apart (stored
    transposed), None for neither (the loop kernel reads any strides)."""
    if col_stride == 1 or cols == 1:
        return False, max(row_stride, 1) if rows > 1 else 1
    if row_stride == 1 or rows == 1:
        return True, max(col_stride, 1)
    return None


def matmul_config(host: gemm.GemmConfig, m: int, n: int, k: int, direct: bool) -> gemm.GemmConfig:
    """The host's blocking for a GEMM of m x k by k x n, with a register tile cut to a thin
    product: fewer than THIN_ROWS rows make a tile of m rows and as many column vectors as the
    host's tile has registers for; fewer columns than the host's tile make a tile of that many
    vectors (8 rows when one vector: 8 independent FMA chains).  ``direct`` (B read in place):
    all of K in one block, there is no packed B to keep in cache."""
    w = host.vector_width
    vectors = -(-n // w)
    if m < THIN_ROWS:
        mr = m
        nv = min(vectors, (host.mr * host.nr_vectors) // mr, MAX_THIN_VECTORS)
    else:
        nv = min(host.nr_vectors, vectors)
        mr = host.mr if nv > 1 else max(host.mr, 8)
    if (mr, nv) == (host.mr, host.nr_vectors) and not direct:
        return _shrink(host, m, n, k)
    blocks = 1 if direct else max(1, -(-k // host.kc))
    nr = nv * w
    return gemm.GemmConfig(w, mr, nv, max(1, -(-k // blocks)), min(host.mc // mr * mr, _align_up(m, mr)),
                           min(host.nc // nr * nr, _align_up(n, nr)))


class MatmulGemm:
    """matmul as GEMMs: batch index -> A, B and the output's row-major layout.

    Operands may be stored transposed (read through a transpose in the kernel): the GEMM packs
    them from that layout.  A thin product gets a register tile of its shape (``matmul_config``);
    with fewer than THIN_ROWS rows, B's rows are read in place (each element of B is used m
    times, not worth a packed copy), and when B is stored transposed the GEMM computes
    C^T = B^T A^T instead (``swapped``: the tile's rows are C's columns), whose packed A is B's
    contiguous rows and whose B is A's few rows."""

    b_row_offsets = None

    def __init__(self, shape: MatmulShape, a_layout: tuple, b_layout: tuple):
        self.shape = shape
        self.batches = shape.batches
        (a_transposed, lda), (b_transposed, ldb) = a_layout, b_layout
        self.swapped = shape.m < THIN_ROWS and b_transposed
        if self.swapped:
            self.m, self.n = shape.n, shape.m
            self.transpose_a, self.lda, self.transpose_b, self.ldb = False, ldb, not a_transposed, lda
        else:
            self.m, self.n = shape.m, shape.n
            self.transpose_a, self.lda, self.transpose_b, self.ldb = a_transposed, lda, b_transposed, ldb
        self.k = shape.k
        self.pack_b = self.transpose_b or self.m >= THIN_ROWS
        self.mask_b = not self.pack_b
        self.slab_floats = 0

    def config(self, host: gemm.GemmConfig) -> gemm.GemmConfig:
        return matmul_config(host, self.m, self.n, self.k, direct=not self.pack_b)

    def operands(self, b, ctx, a_ptr, b_ptr, batch, n_begin, n_end, slab):
        """(A, B) of one task: the operands at the batch index's (broadcast) offsets."""
        s = self.shape
        coords = unravel_values(b, batch, s.batch_shape) if s.batch_shape else []

        def offset(strides):
            total = i64(0)
            for coord, stride in zip(coords, strides):
                if stride:
                    total = b.add(total, b.mul(coord, i64(stride)))
            return total

        a = b.gep(a_ptr, [offset(s.a_batch_strides)], source_etype=FLOAT)
        bm = b.gep(b_ptr, [offset(s.b_batch_strides)], source_etype=FLOAT)
        return (bm, a) if self.swapped else (a, bm)

    def output_layout(self):
        """(floats per batch, ldc) of the result as a C matrix: a result buffer can hold the
        partial sums (not when the GEMM computes C^T)."""
        return None if self.swapped else (self.m * self.n, self.n)

    def emit_tile(self, b, tile: gemm.OutputTile, batch, store) -> None:
        s = self.shape
        coords = [_affine(c, d, f"batch{i}") for i, (c, d) in
                  enumerate(zip(unravel_values(b, batch, s.batch_shape) if s.batch_shape else [], s.batch_shape))]

        def index(row, col):
            return coords + ([row] if s.has_rows else []) + ([col] if s.has_cols else [])

        if self.swapped:  # tile rows are C's columns: a loop over C's rows, then along each row
            with for_range(b, 0, tile.cols, "i") as i:
                row = _affine(b.add(tile.col, i), s.m, "row")
                with for_range(b, 0, tile.rows, "j", **TILE_LOOP) as j:
                    store(j, i, index(row, _affine(b.add(tile.row, j), s.n, "col")))
            return
        with for_range(b, 0, tile.rows, "i") as i:
            row = _affine(b.add(tile.row, i), s.m, "row")
            with for_range(b, 0, tile.cols, "j", **TILE_LOOP) as j:
                store(i, j, index(row, _affine(b.add(tile.col, j), s.n, "col")))


class ConvGemm:
    """conv2d as one GEMM per (image, group) over q-space pixels (see the module docstring)."""

    transpose_a = transpose_b = mask_b = False

    def __init__(self, shape: ConvShape, direct: bool, a_block_floats: int):
        s = self.shape = shape
        sh, sw = s.strides
        dh, dw = s.dilations
        self.batches = s.n * s.groups
        self.m, self.k = s.out_per_group, s.k
        self.lda, self.ldb = s.k, 0
        # phase rows/columns each kernel tap reads past the output's: (kh*dh) // sh
        self.qh = [(kh * dh) // sh for kh in range(s.kh)]
        self.qw = [(kw * dw) // sw for kw in range(s.kw)]
        self.wq = s.ow + self.qw[-1]  # q-space row width
        self.n = (s.oh - 1) * self.wq + s.ow
        self.direct = direct
        self.a_block_floats = a_block_floats  # direct mode's packed A block at most
        self.pack_b = not direct
        self.in_place = not direct and s.strides == (1, 1) and s.pads == (0, 0, 0, 0)
        self.rows_per_plane = None  # rows per phase plane of the slab (or of the input in place): config()
        self.slab_floats = 0
        self.b_row_offsets = None

    def config(self, host: gemm.GemmConfig) -> gemm.GemmConfig:
        s = self.shape
        # The slab holds every row of the image's phases (a call may compute all of q-space); a
        # call fills the rows its columns read.
        self._set_offsets(s.h if self.in_place else s.oh + self.qh[-1])
        if not self.in_place:
            planes = s.in_per_group * s.strides[0] * s.strides[1]
            # slack: the last tile of a call reads up to NR - 1 columns past it (direct), and a
            # row up to qw[-1] past its end
            self.slab_floats = planes * self.rows_per_plane * self.wq + 2 * (host.nr + self.wq)
        if not self.direct:
            return _shrink(host, self.m, self.n, self.k)
        kc = self.k if self.k <= DIRECT_MAX_KC else -(-self.k // -(-self.k // DIRECT_MAX_KC))
        mc = max(host.mr, min(host.mc, (self.a_block_floats // kc) // host.mr * host.mr))
        return gemm.GemmConfig(host.vector_width, host.mr, host.nr_vectors, kc, min(mc, _align_up(self.m, host.mr)),
                               min(host.nc, _align_up(self.n, host.nr)))

    def _set_offsets(self, rows: int) -> None:
        s = self.shape
        sh, sw = s.strides
        dh, dw = s.dilations
        self.rows_per_plane = rows
        plane = rows * self.wq
        offsets = []
        for ci in range(s.in_per_group):
            for kh in range(s.kh):
                for kw in range(s.kw):
                    phase = (ci * sh + (kh * dh) % sh) * sw + (kw * dw) % sw
                    offsets.append(phase * plane + self.qh[kh] * self.wq + self.qw[kw])
        self.b_row_offsets = tuple(offsets)

    def operands(self, b, ctx, x_ptr, w_ptr, batch, n_begin, n_end, slab):
        """(A, B) of one task: the group's weights, and its input (in place or through the slab)."""
        s = self.shape
        groups = i64(s.groups)
        image, group = (b.udiv(batch, groups), b.urem(batch, groups)) if s.groups > 1 else (batch, i64(0))
        a = b.gep(w_ptr, [b.mul(group, i64(self.m * self.k))], source_etype=FLOAT)
        channel0 = b.add(b.mul(image, i64(s.c)), b.mul(group, i64(s.in_per_group)))
        x = b.gep(x_ptr, [b.mul(channel0, i64(s.h * s.w))], source_etype=FLOAT)
        if self.in_place:
            return a, x
        first_row = b.udiv(n_begin, i64(self.wq))
        rows = b.add(b.sub(b.udiv(b.sub(n_end, i64(1)), i64(self.wq)), first_row), i64(1 + self.qh[-1]))
        self._emit_slab(b, x, first_row, rows, slab)
        # B[k, q] = slab[off[k] + q - first_row * WQ]
        return a, b.gep(slab, [b.mul(first_row, i64(-self.wq))], source_etype=FLOAT)

    def _emit_slab(self, b, x, first_row, rows_used, slab) -> None:
        """slab[ci][a][bb][r][c] = xpad[ci, (first_row + r) * sh + a, c * sw + bb] (zero outside
        x), for r < rows_used."""
        s = self.shape
        sh, sw = s.strides
        pt, pl = s.pads[0], s.pads[1]
        rows, wq = self.rows_per_plane, self.wq
        zero = ir.Constant(FLOAT, 0.0)
        with for_range(b, 0, s.in_per_group, "slab_ci") as ci:
            x_plane = b.gep(x, [b.mul(ci, i64(s.h * s.w))], source_etype=FLOAT)
            for a in range(sh):
                for bb in range(sw):
                    # columns c whose input column c * sw + bb - pl is inside x
                    c_lo = min(wq, max(0, -(-(pl - bb) // sw)))
                    c_hi = max(c_lo, min(wq, (s.w - 1 + pl - bb) // sw + 1))
                    plane = b.mul(b.add(b.mul(ci, i64(sh * sw)), i64(a * sw + bb)), i64(rows * wq))
                    with for_range(b, 0, min_i64(b, rows_used, rows), "slab_r") as r:
                        out = b.gep(slab, [b.add(plane, b.mul(r, i64(wq)))], source_etype=FLOAT)
                        xi = b.sub(b.add(b.mul(b.add(first_row, r), i64(sh)), i64(a)), i64(pt))
                        inside = b.icmp_unsigned("<", xi, i64(s.h))  # 0 <= xi < h
                        with b.if_else(inside) as (then, otherwise):
                            with then:
                                source = b.gep(x_plane, [b.mul(xi, i64(s.w))], source_etype=FLOAT)
                                _fill(b, out, 0, c_lo, zero)
                                with for_range(b, c_lo, c_hi, "slab_c") as c:
                                    column = b.add(b.mul(c, i64(sw)), i64(bb - pl))
                                    value = b.load(b.gep(source, [column], source_etype=FLOAT), typ=FLOAT, align=4)
                                    b.store(value, b.gep(out, [c], source_etype=FLOAT), align=4)
                                _fill(b, out, c_hi, wq, zero)
                            with otherwise:
                                _fill(b, out, 0, wq, zero)

    def output_layout(self):
        """A result buffer is the C matrix only when q-space has no extra columns."""
        s = self.shape
        return (self.m * s.oh * s.ow, s.oh * s.ow) if self.wq == s.ow else None

    def emit_tile(self, b, tile: gemm.OutputTile, batch, store) -> None:
        s = self.shape
        wq = i64(self.wq)
        image, group = (b.udiv(batch, i64(s.groups)), b.urem(batch, i64(s.groups))) if s.groups > 1 \
            else (batch, i64(0))
        channel0 = b.add(b.mul(group, i64(self.m)), tile.row)
        col_end = b.add(tile.col, tile.cols)
        first = b.udiv(tile.col, wq)
        last = b.udiv(b.sub(col_end, i64(1)), wq)
        n_index = _affine(image, s.n, "image")
        with for_range(b, 0, tile.rows, "i") as i:
            channel = _affine(b.add(channel0, i), s.o, "channel")
            with for_range(b, first, b.add(last, i64(1)), "oh") as oh:
                row_start = b.mul(oh, wq)
                lo = b.sub(tile.col, row_start)
                lo = b.select(b.icmp_signed("<", lo, i64(0)), i64(0), lo)
                hi = min_i64(b, b.sub(col_end, row_start), s.ow)
                oh_index = _affine(oh, s.oh, "oh")
                with for_range(b, lo, hi, "ow", **TILE_LOOP) as ow:
                    j = b.sub(b.add(row_start, ow), tile.col)
                    store(i, j, [n_index, channel, oh_index, _affine(ow, s.ow, "ow")])


def _fill(b, pointer, start: int, stop: int, value) -> None:
    if stop > start:
        with for_range(b, start, stop, "fill") as c:
            b.store(value, b.gep(pointer, [c], source_etype=FLOAT), align=4)


def _shrink(host: gemm.GemmConfig, m: int, n: int, k: int) -> gemm.GemmConfig:
    """The host's blocking cut down to the problem: K blocks of equal depth, and M and N blocks no
    larger than the matrix (so the workspace is no larger than needed)."""
    blocks = max(1, -(-k // host.kc))
    kc = max(1, -(-k // blocks))
    return gemm.GemmConfig(host.vector_width, host.mr, host.nr_vectors, kc, min(host.mc, _align_up(m, host.mr)),
                           min(host.nc, _align_up(n, host.nr)))


def slice_cuts(m: int, n: int, mr: int, nr: int) -> tuple[str, list[int]]:
    """Which dim the work items slice ("rows" or "cols", the one with more register tiles) and
    where: at most MAX_SLICES + 1 cuts on tile boundaries, 0 first and the extent last."""
    row_tiles, col_tiles = -(-m // mr), -(-n // nr)
    dim, extent, unit, tiles = ("rows", m, mr, row_tiles) if row_tiles > col_tiles else ("cols", n, nr, col_tiles)
    count = max(1, min(MAX_SLICES, tiles))
    return dim, [min(extent, (tiles * s // count) * unit) for s in range(count + 1)]


def lower_gemm(ctx: KernelContext, anchor: Operation, plan) -> int:
    """The ABI function: work item ``batch * S + s`` is slice s of batch ``batch``'s output (S
    slices along one dim); a call computes, for each batch its range touches, the slices of the
    range as one rectangle, so that each thread packs its operands once whatever the number of
    threads (the runtime gives each thread one contiguous range)."""
    config = plan.config(gemm.GemmConfig.for_target(ctx.cpu))
    dim, cuts = slice_cuts(plan.m, plan.n, config.mr, config.nr)
    slices = len(cuts) - 1

    # Where partial sums wait between K blocks: a float32 result when the output is a C matrix,
    # else the workspace.
    k_blocks = -(-plan.k // config.kc) if plan.k else 1
    layout = plan.output_layout()
    # A bare matmul or conv into a C-layout float32 result: the micro-kernel stores its tile
    # straight from the registers (no TileStore pass over a stack copy of the tile).
    plain = (layout is not None and list(ctx.yields) == [anchor.result] and len(ctx.kernel.results) == 1
             and ctx.kernel.results[0].type.element_type == F32)
    partial_result = None
    if (k_blocks > 1 or plain) and layout is not None:
        partial_result = next((i for i, r in enumerate(ctx.kernel.results) if r.type.element_type == F32), None)
    partials_in_workspace = k_blocks > 1 and partial_result is None

    # Buffers never overlap (memory-plan shares buffers only within elementwise kernels), except
    # that a result holding partial sums is also reached through C.
    num_operands = len(ctx.kernel.operands)
    args = tuple(gemm.EpilogueArg(f"buffer{i}", "pointer",
                                  noalias=partial_result is None or i != num_operands + partial_result)
                 for i in range(len(ctx.fn.buffers))) + (gemm.EpilogueArg("batch", "index"),)
    tile_store = TileEpilogue(ctx, anchor, plan)
    # Slices and N blocks end on whole tiles: only C's last column tile can be narrower.
    edge_vectors = -(-(plan.n % config.nr) // config.vector_width)
    epilogue = None if plain else gemm.TileStore(ctx.name, tile_store.emit, args)
    generator = gemm.SgemmGenerator(config, epilogue, f"{ctx.name}.gemm",
                                    b_row_offsets=plan.b_row_offsets, pack_b=plan.pack_b, mask_b=plan.mask_b,
                                    transpose_a=plan.transpose_a, transpose_b=plan.transpose_b,
                                    edge_vectors=[edge_vectors] if 0 < edge_vectors < config.nr_vectors else [])
    rectangle_function = generator.build_into(ctx.module)
    rectangle_function.linkage = "internal"
    ctx.s.external_symbols |= tile_store.external_symbols

    b = ctx.b
    module = ctx.module
    buffers = ctx.fn.buffers
    begin, end = ctx.fn.begin, ctx.fn.end
    first, second = (buffers[ctx.body.args.index(stored_operand(ctx, v, anchor)[0])] for v in anchor.operands)
    cut_type = ir.ArrayType(I64, len(cuts))
    cut_table = ir.GlobalVariable(module, cut_type, f"{ctx.name}.cuts")
    cut_table.global_constant = True
    cut_table.linkage = "internal"
    cut_table.initializer = ir.Constant(cut_type, cuts)

    def cut(s):
        return b.load(b.gep(cut_table, [i64(0), s], source_etype=cut_type), typ=I64)

    with b.if_then(b.icmp_signed("<", begin, end)):
        first_batch = b.udiv(begin, i64(slices))
        last_batch = b.udiv(b.sub(end, i64(1)), i64(slices))
        # Workspace: packed A and B, partial sums (for the largest rectangle of the call: a whole
        # batch's when the range spans batches), the slab.
        gemm_floats = config.packed_a_floats + (config.packed_b_floats if plan.pack_b else 0)
        slab_floats = _align_up(plan.slab_floats, 16)
        partial_floats = i64(0)
        if partials_in_workspace:
            one_batch = b.icmp_unsigned("==", first_batch, last_batch)
            extent = b.select(one_batch, b.sub(cut(b.add(b.urem(b.sub(end, i64(1)), i64(slices)), i64(1))),
                                               cut(b.urem(begin, i64(slices)))), i64(cuts[-1]))
            other = plan.n if dim == "rows" else plan.m
            partial_floats = b.mul(extent, i64(other))
        workspace_bytes = b.add(b.mul(b.add(partial_floats, i64(gemm_floats + slab_floats)), i64(4)),
                                i64(gemm.WORKSPACE_ALIGNMENT))
        raw = b.call(_declare(module, "malloc", PTR, [I64]), [workspace_bytes])
        with b.if_then(b.icmp_unsigned("==", raw, ir.Constant(PTR, None)), likely=False):
            b.call(_declare(module, "llvm.trap", VOID, []), [])
            b.unreachable()
        address = b.ptrtoint(raw, I64)
        aligned = b.and_(b.add(address, i64(gemm.WORKSPACE_ALIGNMENT - 1)), i64(-gemm.WORKSPACE_ALIGNMENT))
        workspace = b.gep(raw, [b.sub(aligned, address)], source_etype=I8)
        slab = b.gep(workspace, [i64(gemm_floats)], source_etype=FLOAT)
        partials = b.gep(slab, [i64(slab_floats)], source_etype=FLOAT)

        with for_range(b, first_batch, b.add(last_batch, i64(1)), "batch") as batch:
            base = b.mul(batch, i64(slices))
            s0 = b.sub(b.select(b.icmp_signed("<", begin, base), base, begin), base)
            s1 = b.sub(min_i64(b, end, b.add(base, i64(slices))), base)
            lo, hi = cut(s0), cut(s1)
            m0, m1, n0, n1 = (lo, hi, i64(0), i64(plan.n)) if dim == "rows" else (i64(0), i64(plan.m), lo, hi)
            a, bm = plan.operands(b, ctx, first, second, batch, n0, n1, slab)
            if k_blocks == 1 and not plain:
                c, ldc = ir.Constant(PTR, None), i64(0)
            elif partial_result is not None:
                per_batch_floats, ldc_value = layout
                result = buffers[num_operands + partial_result]
                c, ldc = b.gep(result, [b.mul(batch, i64(per_batch_floats))], source_etype=FLOAT), i64(ldc_value)
            else:  # C[m, n] lives at partials[(m - m0) * ldc + n - n0]
                ldc = b.sub(n1, n0)
                shift = b.add(b.mul(m0, ldc), n0)
                c = b.gep(partials, [b.sub(i64(0), shift)], source_etype=FLOAT)
            b.call(rectangle_function, [i64(plan.k), a, i64(plan.lda), bm, i64(plan.ldb), c, ldc, m0, m1, n0, n1,
                                        workspace] + ([] if plain else list(buffers) + [batch]))
        b.call(_declare(module, "free", VOID, [PTR]), [raw])
    ctx.fn.finish()
    return plan.batches * slices


def _declare(module: ir.Module, name: str, return_type, arg_types) -> ir.Function:
    existing = module.globals.get(name)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(return_type, arg_types), name)


class TileEpilogue:
    """The ``TileStore`` of a contraction kernel: every yielded value at each element of the tile,
    through a ``ValueAtIndex`` whose contraction value is the tile's sum."""

    def __init__(self, ctx: KernelContext, anchor: Operation, plan):
        self.ctx, self.anchor, self.plan = ctx, anchor, plan
        self.external_symbols: set[str] = set()
        self._emitter: LLVMValueAtIndex | None = None
        self._results: list[Buffer] = []
        self._builder = None

    def _emitter_for(self, tile: gemm.OutputTile) -> LLVMValueAtIndex:
        b = tile.builder
        if self._builder is not b:  # one emitter per micro-kernel (its constant tables are module globals)
            ctx = self.ctx
            pointers = [tile.arg(f"buffer{i}") for i in range(len(ctx.fn.buffers))]
            operands = {arg: Buffer(p, arg.type) for arg, p in zip(ctx.body.args, pointers)}
            s = LLVMScalarBuilder(b)
            self.external_symbols = s.external_symbols  # filled as the code is emitted
            self._emitter = LLVMValueAtIndex(s, IndexMaterializer(b), operands, target=ctx.target,
                                             checks=ctx.checks, status=ctx.status and pointers[-1])
            self._results = [Buffer(p, r.type) for p, r in zip(pointers[len(ctx.kernel.operands):], ctx.kernel.results)]
            self._builder = b
        return self._emitter

    def emit(self, tile: gemm.OutputTile) -> None:
        emitter = self._emitter_for(tile)
        b = tile.builder
        yields = self.ctx.yields
        results = self._results

        def store(i, j, index):
            emitter.new_scope()
            position = b.add(b.mul(i, i64(tile.nr)), j)

            def tile_value(op, value, at):
                address = b.gep(tile.sums, [position], source_etype=FLOAT)
                return Scalar(b.load(address, typ=FLOAT, align=4), F32)

            emitter.overrides[self.anchor] = tile_value
            values = [emitter.at(y, index) for y in yields]
            for value, buffer in zip(values, results):
                emitter.store(buffer, index, value)

        self.plan.emit_tile(b, tile, tile.arg("batch"), store)
        emitter.flush_index_checks()


# --------------------------------------------------------------------------------------------
# float32 dot products: a few rows or columns, both operands contiguous along k
# --------------------------------------------------------------------------------------------


def dot_products(shape: MatmulShape) -> bool:
    """Whether a matmul is a set of dot products: A's rows contiguous along k, and too few
    columns (DOT_MAX_COLS) to fill the GEMM's register tile, whose lanes run along columns (B's
    columns are copied contiguous first when they are not), or too few rows (THIN_ROWS) with
    B's columns contiguous (x @ w.T at batch 1; with B's rows contiguous the GEMM reads them in
    place)."""
    (_, a_k), (b_k, _) = shape.a_matrix_strides, shape.b_matrix_strides
    if not (a_k == 1 or shape.k == 1):
        return False
    return shape.n < DOT_MAX_COLS or (shape.m < THIN_ROWS and (b_k == 1 or shape.k == 1))


def dot_tile(m: int, n: int, accumulators: int) -> tuple[int, int]:
    """Rows x columns of C per work item (each element a vector of partial sums along k), at
    most ``accumulators`` of them: the fewest FMAs and loads over all of C, counting the tiles'
    padding at the edges and a load as half an FMA (R + C loads feed R x C FMAs)."""
    def cost(tile):
        r, c = tile
        return -(-m // r) * -(-n // c) * (r * c + (r + c) / 2)

    return min(((r, min(n, accumulators // r)) for r in range(1, min(m, accumulators) + 1)), key=cost)


def lower_matmul_dots(ctx: KernelContext, anchor: Operation, shape: MatmulShape) -> int:
    """A work item per tile of R x C elements of C (``dot_tile``): R rows of A and C columns of
    B (both contiguous along k) are read a vector at a time, R x C vector FMAs per step, the last
    K % W columns by masked loads; each sum is the horizontal sum of its vector, then the
    epilogue.  Every element of A and B is loaded once per tile it meets, nothing is packed and
    every lane does useful work (the GEMM's tiles would be 1 to 3 columns of 16 lanes).  When
    B's columns are not contiguous (a plain K x N matrix of few columns), a call first copies
    each batch's B transposed to a workspace (K x N floats, ``malloc``ed per call)."""
    b = ctx.b
    w = gemm.GemmConfig.for_target(ctx.cpu).vector_width
    rows, cols = dot_tile(shape.m, shape.n, DOT_ACCUMULATORS.get(w, 8))
    vector = ir.VectorType(FLOAT, w)
    zeros = ir.Constant(vector, [0.0] * w)
    a_ptr, b_ptr = (ctx.fn.buffers[ctx.body.args.index(stored_operand(ctx, v, anchor)[0])] for v in anchor.operands)
    a_row_stride, (b_k_stride, b_col_stride) = shape.a_matrix_strides[0], shape.b_matrix_strides
    row_tiles, col_tiles = -(-shape.m // rows), -(-shape.n // cols)
    copy_b = b_k_stride != 1 and shape.k > 1
    if copy_b:  # B transposed into a workspace, per batch (the one copied last is remembered)
        raw = b.call(_declare(ctx.module, "malloc", PTR, [I64]), [i64(4 * shape.k * shape.n)])
        with b.if_then(b.icmp_unsigned("==", raw, ir.Constant(PTR, None)), likely=False):
            b.call(_declare(ctx.module, "llvm.trap", VOID, []), [])
            b.unreachable()
        copied_batch = ctx.fn.alloca(I64, 1, "copied_batch")
        b.store(i64(-1), copied_batch)
    sums = ctx.fn.alloca(FLOAT, rows * cols, "sums")
    vectors, rest = divmod(shape.k, w)
    tail_mask = ir.Constant(ir.VectorType(ir.IntType(1), w), [lane < rest for lane in range(w)])
    masked_load = _declare(ctx.module, f"llvm.masked.load.v{w}f32.p0", vector,
                           [PTR, ir.IntType(32), tail_mask.type, vector])
    # fmuladd: an FMA where the target has one, else a multiply and an add (llvm.fma would call fmaf)
    fma = _declare(ctx.module, f"llvm.fmuladd.v{w}f32", vector, [vector] * 3)

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
                        b.store(value, b.gep(copy, [k], source_etype=FLOAT))
                b.store(batch, copied_batch)
            b_source, b_base, b_col_stride = raw, i64(0), shape.k
        first_row, first_col = b.mul(row_tile, i64(rows)), b.mul(col_tile, i64(cols))
        # edge tiles read their last row / column again (in bounds) and store only what is inside
        a_rows = [b.gep(a_ptr, [b.add(a_base, b.mul(min_i64(b, b.add(first_row, i64(r)), shape.m - 1),
                                                    i64(a_row_stride)))], source_etype=FLOAT) for r in range(rows)]
        b_cols = [b.gep(b_source, [b.add(b_base, b.mul(min_i64(b, b.add(first_col, i64(c)), shape.n - 1),
                                                    i64(b_col_stride)))], source_etype=FLOAT) for c in range(cols)]

        def step(accumulators, k, mask=None):
            def load(pointer):
                address = b.gep(pointer, [k], source_etype=FLOAT)
                if mask is None:
                    return b.load(address, typ=vector, align=4)
                return b.call(masked_load, [address, ir.Constant(ir.IntType(32), 4), mask, zeros])

            a_vectors, b_vectors = [load(p) for p in a_rows], [load(p) for p in b_cols]
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
        index_prefix = [_affine(c, d, f"batch{i}") for i, (c, d) in enumerate(zip(coords, shape.batch_shape))]
        with for_range(b, 0, row_count, "r") as r:
            row = [_affine(b.add(first_row, r), shape.m, "row")] if shape.has_rows else []
            with for_range(b, 0, col_count, "c") as c:
                col = [_affine(b.add(first_col, c), shape.n, "col")] if shape.has_cols else []
                address = b.gep(sums, [b.add(b.mul(r, i64(cols)), c)], source_etype=FLOAT)
                _store_epilogue(ctx, anchor, index_prefix + row + col, address, F32)
    if copy_b:
        b.call(_declare(ctx.module, "free", VOID, [PTR]), [raw])
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


def lower_matmul_loops(ctx: KernelContext, anchor: Operation, shape: MatmulShape) -> int:
    """A work item per output row: for blocks of columns, sums[j] += a[i, k] * b[k, j] (i-k-j),
    then the epilogue."""
    b = ctx.b
    dtype = anchor.result.type.element_type
    acc_dtype = accumulator_type(dtype)
    acc_type = compute_type(acc_dtype)
    a_ptr, b_ptr = (ctx.fn.buffers[ctx.body.args.index(stored_operand(ctx, v, anchor)[0])] for v in anchor.operands)
    (_, a_k_stride), (b_k_stride, b_col_stride) = shape.a_matrix_strides, shape.b_matrix_strides
    storage = storage_type(dtype)
    block = min(shape.n, LOOP_COLUMNS)
    sums = ctx.fn.alloca(acc_type, block, "sums")
    # B's columns contiguous along k (x @ w.T): each sum a dot product in a register, its k loop a
    # vectorized reduction (15-23x faster in f64 at 64^3 and 256^3 than the j loop's gathers);
    # otherwise the j loop over B's rows vectorizes, the sums in the stack array
    dots = b_k_stride == 1 and b_col_stride != 1 and shape.k > 0

    def load(pointer, offset):
        value = ctx.s.load(b.gep(pointer, [offset], source_etype=storage), dtype).value
        return value  # f16 loads extend to float: the products are exact in float32

    with for_range(b, ctx.fn.begin, ctx.fn.end, "item", **ITEM_LOOP) as item:
        batch, row = (b.udiv(item, i64(shape.m)), b.urem(item, i64(shape.m))) if shape.m > 1 else (item, i64(0))
        coords = unravel_values(b, batch, shape.batch_shape) if shape.batch_shape else []
        a_offset, b_offset = i64(0), i64(0)
        for c, sa, sb in zip(coords, shape.a_batch_strides, shape.b_batch_strides):
            a_offset = b.add(a_offset, b.mul(c, i64(sa)))
            b_offset = b.add(b_offset, b.mul(c, i64(sb)))
        a_row = b.gep(a_ptr, [b.add(a_offset, b.mul(row, i64(shape.a_matrix_strides[0])))], source_etype=storage)
        b_mat = b.gep(b_ptr, [b_offset], source_etype=storage)
        index_prefix = [_affine(c, d, f"batch{i}") for i, (c, d) in enumerate(zip(coords, shape.batch_shape))]
        if shape.has_rows:
            index_prefix.append(_affine(row, shape.m, "row"))

        def dot_products(j0, width: int):
            with for_range(b, 0, width, "j") as j:
                b_column = b.gep(b_mat, [b.mul(b.add(j0, j), i64(b_col_stride))], source_etype=storage)
                entry = b.block
                with for_range(b, 0, shape.k, "k") as k:
                    acc = b.phi(acc_type, "acc")
                    acc.add_incoming(_zero(acc_dtype), entry)
                    total = _accumulate(b, acc, load(a_row, b.mul(k, i64(a_k_stride))), load(b_column, k), acc_dtype)
                    acc.add_incoming(total, b.block)
                b.store(total, b.gep(sums, [j], source_etype=acc_type))

        def rows_of_b(j0, width: int):
            with for_range(b, 0, width, "zero") as j:
                b.store(_zero(acc_dtype), b.gep(sums, [j], source_etype=acc_type))
            with for_range(b, 0, shape.k, "k") as k:
                a_value = load(a_row, b.mul(k, i64(a_k_stride)))
                b_row = b.gep(b_mat, [b.add(b.mul(k, i64(b_k_stride)), b.mul(j0, i64(b_col_stride)))],
                              source_etype=storage)
                with for_range(b, 0, width, "j") as j:
                    address = b.gep(sums, [j], source_etype=acc_type)
                    b_value = load(b_row, b.mul(j, i64(b_col_stride)))
                    b.store(_accumulate(b, b.load(address, typ=acc_type), a_value, b_value, acc_dtype), address)

        def column_block(j0, width: int):
            (dot_products if dots else rows_of_b)(j0, width)
            with for_range(b, 0, width, "out") as j:
                col = [_affine(b.add(j0, j), shape.n, "col")] if shape.has_cols else []
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
        prefix = [_affine(image, s.n, "image"), _affine(channel, s.o, "channel"), _affine(oh, s.oh, "oh")]

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
                ow = _affine(b.add(ow0, j), s.ow, "ow")
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
