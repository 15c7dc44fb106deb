"""float32 matmul and conv kernels through the GEMM of ``gemm.py`` (``contraction.py`` decides
which kernels come here).

The kernel's epilogue is emitted inside the micro-kernel, as a ``TileStore`` (``TileEpilogue``):
on the last K block the tile's sums go to a stack array and, for each row of the tile, a loop over
its columns evaluates every yielded value with the same value-at-index emitter the elementwise
kernels use (``ValueAtIndex``; the contraction's value is read from the tile), and stores it.
LLVM vectorizes that loop like any elementwise loop, so bias, activations, residuals and any
broadcast operand cost one pass over the tile while it is in L1; an operand read through data
movement of memory (BatchNorm's per-channel vector reshaped to C x 1 x 1) is index arithmetic on
its load, the same code as for an operand stored in that shape.

- matmul (``MatmulGemm``): each batch index is one GEMM, its operands at the batch's (broadcast)
  offsets, stored row-major or transposed.
- conv2d (``ConvGemm``): each (image, group) is one GEMM out[co, pixel] = W[co, k] . col[k, pixel] with
  k = (ci, kh, kw), which is NCHW already.  The im2col matrix is never built: pixels are numbered
  in *q-space*, ``q = oh * WQ + ow`` over rows of the padded input wide enough for every kernel
  column (``WQ = OW + (KW - 1) * dw`` for stride 1), so that row ``k`` of col is one contiguous
  run of the input, ``col[k, q] = x[off[k] + q]``, with ``off`` a constant table (gemm.py's
  ``b_row_offsets``).  The ``WQ - OW`` columns past each output row are computed and never stored
  (3.4% for a 3x3 at 56x56).  Pads and strides go through a *slab*: the rows of the input a task
  reads, zero padded and split into ``sh x sw`` phases (``slab[ci, a, b, r, c] = xpad[ci, r*sh + a,
  c*sw + b]``), which makes a strided convolution a stride-1 one over the phases.  Only the phases
  some tap reads are laid out: a 1x1 stride-2 convolution reads one of its four (the other three
  were copied for nothing, a fifth of the kernel's time); a stride-2 row is copied a vector at a
  time (two loads, their even lanes: ``_copy_every_second``).  A stride-1
  convolution without pads reads its input in place.  Weights that are a constant
  (``constant_operands``) are the GEMM's A already packed (``PackedGemmA``, laid out once by the
  plan for this kernel's MR and K blocks): no copy of A per call.

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

Why this file is long: the two plans (``MatmulGemm``, ``ConvGemm``: register tile, blocking,
operands, slab, how a tile's elements map to the result) and the ABI function that drives either
(``lower_gemm``: slices, workspace, partial sums) share one interface that neither states alone;
``TileEpilogue`` is what both plans' ``emit_tile`` feed.  ``ConvGemm``'s slab code is the part that
could move out, with ``depthwise.py``, its other reader.
"""
from __future__ import annotations

import math
from dataclasses import replace

import llvmlite.ir as ir

from lezero.codegen.contraction_shapes import (
    THIN_ROWS,
    ConvShape,
    MatmulShape,
    gemm_layout,
    stored_operand,
)
from lezero.codegen.llvm import cache_model, gemm, gemm_bf16, gemm_epilogue, vectors
from lezero.codegen.packed_operands import PackedGemmA, PackedGemmB
from lezero.codegen.llvm.context import KernelContext
from lezero.codegen.llvm.ir_types import FLOAT, HALF, I8, I64, PTR, VOID
from lezero.codegen.llvm.loops import (
    affine_value,
    declare,
    for_range,
    i64,
    min_i64,
    unravel_values,
)
from lezero.codegen.llvm.scalar_builder import LLVMScalarBuilder, Scalar, compute_type
from lezero.codegen.row_generic import any_rows
from lezero.codegen.llvm.value_at_index import IndexMaterializer, LLVMValueAtIndex
from lezero.codegen.value_at_index import Buffer
from lezero.ir.core import Operation
from lezero.ir.types import BF16, F16, F32

# Work items: each batch's output is cut into at most MAX_SLICES slices along its longer dim
# (whole register tiles), and a call of the kernel computes the slices of its range as one
# rectangle per batch (see lower_gemm).
MAX_SLICES = 32
# A matmul with fewer than THIN_ROWS rows gets a register tile of its own height (matmul_config);
# a tile is at most this many vectors wide.
MAX_THIN_VECTORS = 16
# ... and narrow enough for THIN_COLUMN_TILES tiles across C (down to THIN_MIN_VECTORS vectors):
# the work items are column slices, so 3 tiles of 768 columns split 2 : 1 over 2 threads, and 2
# rows x 12 vectors hold more values than there are registers.  2 threads, kernel alone:
# 2x768x768 95 -> 51 us, 1x768x768 and 1x768x3072 the same, 1x3072x768 181 -> 185 (noise).
THIN_COLUMN_TILES = 8
THIN_MIN_VECTORS = 4
# With fewer rows than this, B's rows are read in place (MatmulGemm), all of K in one block: each
# element of B is used m times, and packing B (a read and a write of all of it per call) costs
# more than the products.  Measured (1 thread, medians): 4x768x2304 packed 393 us, in place 197;
# 8x768x3072 2981 / 2073; 16x768x2304 1463 / 1182; from 32 rows on within noise.
PACK_B_MIN_ROWS = 32
# Direct mode keeps all of K in one block (no partial sums) up to this depth; the packed A block
# then holds cache_model.direct_a_block_floats of the target's caches at most.
DIRECT_MAX_KC = 2304
# Direct mode's micro-kernel steps through the kh x kw taps of one input channel at a time, up to
# this many (gemm.py's b_row_period): their B rows are constant offsets from the channel's, so the
# k loop reads no offset table.
DIRECT_PERIOD_MAX_TAPS = 49
# The element types stored as float32 (bf16 holds bf16 values in float32 storage): their matmuls
# and convs run the float32 kernels (their sums rounded once in the epilogue), and a result of
# theirs can hold the partial sums between K blocks.
FLOAT32_STORAGE = (F32, BF16)
# The epilogue's loops over a tile row are short (64 columns at most, split at output rows in a
# conv): masked vector iterations rather than a scalar remainder loop, which would run a
# transcendental epilogue up to 15 times per row one lane at a time.
TILE_LOOP = {"vectorize_enable": 1, "vectorize_predicate_enable": 1}


# A convolution's register tile on a target whose tile is at least this many vectors wide: one
# vector narrower, as many accumulators, more rows (6x4 -> 8x3 on AVX-512).  Output channels
# come in multiples of 8 (no rows padded: 32, 64, 128 channels pad to 36, 66, 132 for 6 rows), and
# a step loads one B vector fewer (B is the slab read in place, unaligned).  Measured, every conv
# layer of resnet18/50, densenet121 and the mobile nets' pointwise convs (benchmarks/conv.py's
# layers, each alone, min of 30-40, against ORT in the same alternation): 1 thread, geomean
# 1.03x -> 0.97x ORT, d121 3x3 128->32 1.16x -> 1.00x, r18 3x3 64->64 1.05x -> 1.00x; 2 threads
# 1.05x -> 0.97x.  12x2 (two vectors narrower) was between them (0.995x, 1 thread).
CONV_NARROWER_TILE_MIN_VECTORS = 4
# CPUs whose 512-bit FMA is two 256-bit halves (Zen 4 double-pumps AVX-512): a 256-bit vector
# computes as many floats a cycle, and small images waste fewer of its lanes (a 7x7 output is 49
# pixels: 56 lanes of 8-float vectors, 64 of 16-float ones).  There a conv takes a tile of
# 8-float vectors, 3 rows x 7 vectors (21 accumulators, 7 B vectors, a broadcast: 29 registers),
# when all of q-space is one such tile and it pads fewer rows x lanes than the 16-float tile.
# Measured (1 thread, min of 40, load ~7): 1x1 512->2048 at 7x7 1.19x -> 1.00x ORT, 2048->512
# 1.20x -> 0.99x, r18 3x3 s2 256->512 at 14x14 (55 q-space columns) 1.11x -> 0.94x, pointwise
# 320->1280 at 7x7 1.07x -> 0.87x; but 3x3 at 7x7 (61 q-space columns, 64 lanes either way)
# 1.17x -> 1.41x (hence the lane count), and in whole models (kernel profiles, resnet50 and
# densenet121) every conv of more columns ran 5-45% slower (1x1 s2 512->1024 at 14x14: 196
# columns in 200 lanes, not 208): three rows a tile reuse each B load three times, not eight, and
# B's slivers come from L2 (hence one tile).
HALF_RATE_512_BIT_CPUS = ("znver4",)
NARROW_VECTOR_TILE = (3, 7)


def conv_register_tile(host: gemm.GemmConfig, cpu, m: int, n: int,
                       narrower_vectors: bool = True) -> tuple[int, int, int]:
    """(vector_width, mr, nr_vectors) of the GEMM of a convolution of ``m`` output channels (per
    group) over ``n`` q-space columns, on target ``cpu`` whose GEMM tile is ``host``'s;
    ``narrower_vectors=False`` keeps the target's vector width."""
    if host.nr_vectors < CONV_NARROWER_TILE_MIN_VECTORS:
        return host.vector_width, host.mr, host.nr_vectors
    nv = host.nr_vectors - 1
    wide = host.vector_width, host.mr * host.nr_vectors // nv, nv
    if not narrower_vectors:
        return wide
    if cpu.cpu not in HALF_RATE_512_BIT_CPUS or host.vector_width != 16:
        # q-space of one host tile but more than one narrower one keeps the host's: 49 pixels (a
        # 7x7 1x1 conv) would be a 48-column tile and a 1-column one (an 8 x 1-vector micro-kernel
        # costs ~40% of a whole tile).  Xeon (AMX class), 1 thread, medians of 150 calls in random
        # order, load ~4: pw 192->1152 at 7x7 + SiLU 0.268-0.281 -> 0.259-0.261 ms, pw 160->960
        # at 7x7 0.180-0.181 -> 0.165-0.171 (ORT 0.17-0.26); at 14x14 8 x 3 stays (196 columns).
        return (host.vector_width, host.mr, host.nr_vectors) if wide[2] * host.vector_width < n <= host.nr \
            else wide
    narrow = (8,) + NARROW_VECTOR_TILE
    if n > 8 * NARROW_VECTOR_TILE[1]:
        return wide

    def padded_work(tile):
        width, mr, _ = tile
        return _align_up(m, mr) * _align_up(n, width)

    return narrow if padded_work(narrow) < padded_work(wide) else wide


def _align_up(x: int, to: int) -> int:
    return -(-x // to) * to


# A matmul's register tile where the target's is 6 rows x 2 vectors of 8 floats (AVX2 + FMA: 16
# registers): 4 x 3 (12 accumulators, 3 B vectors, a broadcast), 1.71 FMAs per load to 1.5.  The
# rows of short sequences (32, 64) make whole 4-row tiles (6-row ones pad 32 to 36).  Measured on
# Zen 3, 1 thread, the GEMM alone (best of 300 alternating calls, load ~10), GFLOP/s 6x2 -> 4x3:
# 32x256x1024 54 -> 64 (B pre-packed: 83 -> 92), 32x1024x256 65 -> 72, 8x256x1024 with B
# pre-packed 57 -> 82, 128x256x1024 81 -> 89, 197x768x768 79 -> 83, 1024^3 (B pre-packed) 86 -> 86.
# Convolutions keep the target's tile (conv_register_tile).
AVX2_MATMUL_TILE = (8, 4, 3)


def matmul_register_tile(host: gemm.GemmConfig, cpu) -> tuple[int, int, int]:
    """(vector_width, mr, nr_vectors) of a matmul's GEMM on ``cpu``, whose tile is ``host``'s."""
    if (host.vector_width, host.mr, host.nr_vectors) == (8, 6, 2) and cpu.has_fma:
        return AVX2_MATMUL_TILE
    return host.vector_width, host.mr, host.nr_vectors


def row_index(b, shape: MatmulShape, row) -> list:
    """The result's indices along ``shape.row_dims`` at GEMM row ``row`` (an i64 value)."""
    dims = shape.row_dims
    if len(dims) <= 1:
        return [affine_value(row, d, "row") for d in dims]
    return [affine_value(v, d, f"row{i}") for i, (v, d) in enumerate(zip(unravel_values(b, row, dims), dims))]


def matmul_config(host: gemm.GemmConfig, m: int, n: int, k: int, direct: bool) -> gemm.GemmConfig:
    """The host's blocking for a GEMM of m x k by k x n, with a register tile cut to a thin
    product: fewer than THIN_ROWS rows make a tile of m rows and as many column vectors as the
    host's tile has registers for; fewer columns than the host's tile make a tile of that many
    vectors (8 rows when one vector: 8 independent FMA chains).  ``direct`` (B read in place):
    all of K in one block, there is no packed B to keep in cache, and a few rows are one tile."""
    w = host.vector_width
    vectors = -(-n // w)
    accumulators = host.mr * host.nr_vectors
    # B read in place: one row tile over all of m when it fits at 2 vectors or more, so that each
    # element of B is loaded once (a second row tile reloads it, from L2 at best: B's rows are far
    # apart, 12 KiB for 3072 columns, so they compete for a few cache sets); 8x768x3072 on one
    # thread: 6 x 4 tiles 645 us, 8 x 3 454; 8x768x768 123 -> 83 us
    one_tile_vectors = min(host.nr_vectors, vectors, accumulators // m)
    if m < THIN_ROWS:
        mr = m
        nv = min(vectors, accumulators // mr, MAX_THIN_VECTORS, max(THIN_MIN_VECTORS, vectors // THIN_COLUMN_TILES))
    elif direct and one_tile_vectors >= 2:
        mr, nv = m, one_tile_vectors
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

    Operands may be stored transposed or with any strides (read through a transpose in the
    kernel): the GEMM packs them from that layout.  A thin product gets a register tile of its
    shape (``matmul_config``); with fewer than PACK_B_MIN_ROWS rows, B's rows are read in place
    (each element of B is used m times, not worth a packed copy), and for fewer than THIN_ROWS
    rows with B stored transposed the GEMM computes
    C^T = B^T A^T instead (``swapped``: the tile's rows are C's columns), whose packed A is B's
    contiguous rows and whose B is A's few rows."""

    b_row_offsets = None
    b_row_period = None
    packed_a = None
    packed_b = None  # PackedGemmB of a constant B: read_constant_b, then config()
    packs_a = False  # operands() returns A in the packed layout (PixelRowsConvGemm)
    a_in_place = None  # gemm.AInPlace: A read where it lies (PixelRowsConvGemm)

    def __init__(self, shape: MatmulShape, operand_element: ir.Type = FLOAT, rounded: tuple = (False, False)):
        """``operand_element``: how A and B are stored, FLOAT or HALF (f16: widened as packed);
        ``rounded``: whether each of the matmul's operands is float32 read through a cast to the
        matmul's bf16 or f16 (rounded as packed: gemm.py's ``bf16_operands``, ``f16_operands``)."""
        self.shape = shape
        self.operand_element = operand_element
        self.batches = shape.batches
        a_transposed, lda, a_k_stride = gemm_layout(shape.m, shape.k, *shape.a_matrix_strides)
        b_transposed, ldb, b_col_stride = gemm_layout(shape.k, shape.n, *shape.b_matrix_strides)
        # C^T = B^T A^T reads A's few rows as B^T: its columns must be contiguous or k steps
        self.swapped = shape.m < THIN_ROWS and b_transposed and a_k_stride == 1
        if self.swapped:
            self.m, self.n = shape.n, shape.m
            self.transpose_a, self.lda, self.transpose_b, self.ldb = False, ldb, not a_transposed, lda
            self.a_k_stride, self.b_col_stride = 1, 1
        else:
            self.m, self.n = shape.m, shape.n
            self.transpose_a, self.lda, self.transpose_b, self.ldb = a_transposed, lda, b_transposed, ldb
            self.a_k_stride, self.b_col_stride = a_k_stride, b_col_stride
        self.k = shape.k
        self.rounded = tuple(rounded)  # the matmul's operands (not the GEMM's, when swapped)
        cast = tuple(g for g, r in zip("ab", rounded[::-1] if self.swapped else rounded) if r)
        self.bf16_operands, self.f16_operands = ((), cast) if operand_element == HALF else (cast, ())
        self.pack_b = self.transpose_b or self.b_col_stride != 1 or self.m >= PACK_B_MIN_ROWS
        self.mask_b = not self.pack_b
        self.slab_floats = 0

    @staticmethod
    def register_tile(host: gemm.GemmConfig, cpu, narrower_vectors: bool) -> tuple[int, int, int]:
        return matmul_register_tile(host, cpu)

    def read_constant_b(self, operand: int) -> bool:
        """Read B, kernel operand ``operand`` (a constant: a model's weights), pre-packed by the
        plan (``PackedGemmB``, laid out for config()'s NR), from whatever layout it is stored in,
        when it is one float32 matrix for every batch; whether it will be."""
        if self.swapped or self.operand_element != FLOAT or any(self.shape.b_batch_strides):
            return False
        self.constant_b = operand
        self.transpose_b, self.b_col_stride, self.ldb = False, 1, self.k  # ldb: the packed slivers' depth
        self.pack_b, self.mask_b = True, False
        return True

    def config(self, host: gemm.GemmConfig) -> gemm.GemmConfig:
        return matmul_config(host, self.m, self.n, self.k, direct=not self.pack_b)

    def operands(self, b, ctx, a_ptr, b_ptr, batch, n_begin, n_end, slab, rows=None):
        """(A, B) of one task: the operands at the batch index's (broadcast) offsets."""
        s = self.shape
        coords = unravel_values(b, batch, s.batch_shape) if s.batch_shape else []

        def offset(strides):
            total = i64(0)
            for coord, stride in zip(coords, strides):
                if stride:
                    total = b.add(total, b.mul(coord, i64(stride)))
            return total

        a_element, b_element = (FLOAT if r else self.operand_element for r in self.rounded)  # read through casts
        a = b.gep(a_ptr, [offset(s.a_batch_strides)], source_etype=a_element)
        bm = b.gep(b_ptr, [offset(s.b_batch_strides)], source_etype=b_element)
        return (bm, a) if self.swapped else (a, bm)

    def output_layout(self):
        """(floats per batch, ldc) of the result as a C matrix: a result buffer can hold the
        partial sums (not when the GEMM computes C^T)."""
        return None if self.swapped else (self.m * self.n, self.n)

    def emit_tile(self, b, tile: gemm_epilogue.OutputTile, batch, store) -> None:
        s = self.shape
        coords = [affine_value(c, d, f"batch{i}") for i, (c, d) in
                  enumerate(zip(unravel_values(b, batch, s.batch_shape) if s.batch_shape else [], s.batch_shape))]

        def index(row, col):
            return coords + row + ([col] if s.has_cols else [])

        if self.swapped:  # tile rows are C's columns: a loop over C's rows, then along each row
            with for_range(b, 0, tile.cols, "i") as i:
                row = row_index(b, s, b.add(tile.col, i))
                with for_range(b, 0, tile.rows, "j", **TILE_LOOP) as j:
                    store(j, i, index(row, affine_value(b.add(tile.row, j), s.n, "col")))
            return
        with for_range(b, 0, tile.rows, "i") as i:
            row = row_index(b, s, b.add(tile.row, i))
            with for_range(b, 0, tile.cols, "j", **TILE_LOOP) as j:
                store(i, j, index(row, affine_value(b.add(tile.col, j), s.n, "col")))


class ConvGemm:
    """conv2d as one GEMM per (image, group) over q-space pixels (see the module docstring)."""

    transpose_a = transpose_b = False
    a_k_stride = b_col_stride = 1
    packed_b = None  # the input is never constant (PixelRowsConvGemm's B is the weights)
    packs_a = False
    bf16_operands = f16_operands = ()  # a conv's operands are never read through a cast (partition's prologue)
    operand_element = FLOAT  # an f16 conv's operands are widened to float32 copies first (_widen_halves)
    pixel_columns = False  # a tile's columns are output pixels, not q-space (depthwise.py's compacted sums)
    a_in_place = None  # the weights are A (PixelRowsConvGemm's A is the input, read in place)

    def __init__(self, shape: ConvShape, direct: bool, a_block_floats: int, constant_weights: int | None = None,
                 direct_in_place: bool = False):
        """``constant_weights``: the kernel operand of the weights when it is a constant (read
        pre-packed, ``packed_a``, laid out by config()); ``direct_in_place``: a direct conv of
        stride 1 without pads reads the input itself, not a slab."""
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
        # the slab's phases (a, b) per input channel: those some tap (kh, kw) reads
        self.phases = sorted({((kh * dh) % sh, (kw * dw) % sw) for kh in range(s.kh) for kw in range(s.kw)})
        self.direct = direct
        self.a_block_floats = a_block_floats  # direct mode's packed A block at most
        self.pack_b = not direct
        # B read in place from the input (stride 1, no pads): packed from it, or with
        # ``direct_in_place`` its rows loaded where they lie, masked at the last column (the end)
        self.in_place = (direct_in_place or not direct) and s.strides == (1, 1) and s.pads == (0, 0, 0, 0)
        self.mask_b = direct and self.in_place
        self.rows_per_plane = None  # rows per phase plane of the slab (or of the input in place): config()
        self.constant_weights = constant_weights
        self.packed_a = None  # PackedGemmA of constant weights: config()
        self.slab_floats = 0
        self.b_row_offsets = None
        # the GEMM's k loop steps a channel's taps at a time (direct mode: B's rows in place)
        taps = s.kh * s.kw
        self.b_row_period = taps if direct and taps <= DIRECT_PERIOD_MAX_TAPS else None

    def lay_out_slab(self, overrun: int) -> None:
        """Set the tap offsets and the slab's size for a reader that loads up to ``overrun``
        floats past the last q of its range (NR - 1 for the GEMM's direct tiles)."""
        s = self.shape
        # The slab holds every row of the image's phases (a call may compute all of q-space); a
        # call fills the rows its columns read.
        self._set_offsets(s.h if self.in_place else s.oh + self.qh[-1])
        if not self.in_place:
            planes = s.in_per_group * len(self.phases)
            # slack: the overrun, and a row up to qw[-1] past its end
            self.slab_floats = planes * self.rows_per_plane * self.wq + 2 * (overrun + self.wq)

    def register_tile(self, host: gemm.GemmConfig, cpu, narrower_vectors: bool) -> tuple[int, int, int]:
        return conv_register_tile(host, cpu, self.m, self.n, narrower_vectors)

    def config(self, host: gemm.GemmConfig) -> gemm.GemmConfig:
        """The GEMM's blocking; ``host`` is the target's for this conv's ``register_tile``."""
        self.lay_out_slab(host.nr)
        if not self.direct:
            config = _shrink(host, self.m, self.n, self.k)
        else:
            kc = self.k if self.k <= DIRECT_MAX_KC else -(-self.k // -(-self.k // DIRECT_MAX_KC))
            if self.b_row_period is not None:  # whole input channels per K block
                kc = _align_up(kc, self.b_row_period)
            mc = max(host.mr, min(host.mc, (self.a_block_floats // kc) // host.mr * host.mr))
            config = gemm.GemmConfig(host.vector_width, host.mr, host.nr_vectors, kc,
                                     min(mc, _align_up(self.m, host.mr)), min(host.nc, _align_up(self.n, host.nr)))
        if self.constant_weights is not None:
            s = self.shape
            self.packed_a = PackedGemmA(self.constant_weights, s.groups, self.m, self.k, config.mr, config.kc)
            self.lda = self.packed_a.padded_rows
        return config

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
                    phase = ci * len(self.phases) + self.phases.index(((kh * dh) % sh, (kw * dw) % sw))
                    offsets.append(phase * plane + self.qh[kh] * self.wq + self.qw[kw])
        self.b_row_offsets = tuple(offsets)

    def operands(self, b, ctx, x_ptr, w_ptr, batch, n_begin, n_end, slab, rows=None):
        """(A, B) of one task: the group's weights, and its input (in place or through the slab)."""
        s = self.shape
        groups = i64(s.groups)
        image, group = (b.udiv(batch, groups), b.urem(batch, groups)) if s.groups > 1 else (batch, i64(0))
        group_floats = self.m * self.k if self.packed_a is None else self.packed_a.group_floats
        a = b.gep(w_ptr, [b.mul(group, i64(group_floats))], source_etype=FLOAT)
        channel0 = b.add(b.mul(image, i64(s.c)), b.mul(group, i64(s.in_per_group)))
        x = b.gep(x_ptr, [b.mul(channel0, i64(s.h * s.w))], source_etype=FLOAT)
        if self.in_place:
            return a, x
        first_row = b.udiv(n_begin, i64(self.wq))
        rows = b.add(b.sub(b.udiv(b.sub(n_end, i64(1)), i64(self.wq)), first_row), i64(1 + self.qh[-1]))
        self._emit_slab(b, x, first_row, rows, slab)
        # B[k, q] = slab[off[k] + q - first_row * WQ]
        return a, b.gep(slab, [b.mul(first_row, i64(-self.wq))], source_etype=FLOAT)

    def _emit_slab(self, b, x, first_row, rows_used, slab, fill=None) -> None:
        """slab[ci][phase][r][c] = xpad[ci, (first_row + r) * sh + a, c * sw + bb] (``fill``
        outside x: 0.0, or an int8 conv's input zero point, whose type is then the slab's element,
        integer_conv.py), for r < rows_used, for each of ``phases``' (a, bb).  Up to UNROLLED_SLAB_PHASES phases
        each has its copy loops in the code (their bounds constants); more, as a patchify conv's
        (stride = kernel = 16: 256 phases), run as one loop over a constant table of the phases'
        (a, bb, c_lo, c_hi): ViT-B/16's patch conv was 14k lines of LLVM IR and 28 s of LLVM."""
        s = self.shape
        sh, sw = s.strides
        pt, pl = s.pads[0], s.pads[1]
        rows, wq = self.rows_per_plane, self.wq
        zero = ir.Constant(FLOAT, 0.0) if fill is None else fill
        element, align = zero.type, zero.type.width // 8 if isinstance(zero.type, ir.IntType) else 4

        def column_range(bb):
            """columns c whose input column c * sw + bb - pl is inside x"""
            c_lo = min(wq, max(0, -(-(pl - bb) // sw)))
            return c_lo, max(c_lo, min(wq, (s.w - 1 + pl - bb) // sw + 1))

        phases = [(a, bb) + column_range(bb) for a, bb in self.phases]

        def copy_phase(x_plane, ci, phase, a, bb, c_lo, c_hi):  # ints, or i64 values from the table
            plane = b.mul(b.add(b.mul(ci, i64(len(phases))), i64(phase)), i64(rows * wq))
            with for_range(b, 0, min_i64(b, rows_used, rows), "slab_r") as r:
                out = b.gep(slab, [b.add(plane, b.mul(r, i64(wq)))], source_etype=element)
                xi = b.sub(b.add(b.mul(b.add(first_row, r), i64(sh)), i64(a)), i64(pt))
                inside = b.icmp_unsigned("<", xi, i64(s.h))  # 0 <= xi < h
                with b.if_else(inside) as (then, otherwise):
                    with then:
                        source = b.gep(x_plane, [b.mul(xi, i64(s.w))], source_etype=element)
                        _fill(b, out, 0, c_lo, zero)
                        c_vectors = _copy_every_second(b, source, bb - pl, out, c_lo, c_hi, s.w, element) \
                            if sw == 2 and isinstance(bb, int) else c_lo
                        with for_range(b, c_vectors, c_hi, "slab_c") as c:
                            column = b.add(b.mul(c, i64(sw)), b.sub(i64(bb), i64(pl)))
                            value = b.load(b.gep(source, [column], source_etype=element), typ=element, align=align)
                            b.store(value, b.gep(out, [c], source_etype=element), align=align)
                        _fill(b, out, c_hi, wq, zero)
                    with otherwise:
                        _fill(b, out, 0, wq, zero)

        table = None
        if len(phases) > UNROLLED_SLAB_PHASES:
            table_type = ir.ArrayType(I64, 4 * len(phases))
            table = ir.GlobalVariable(b.module, table_type, b.module.get_unique_name("slab_phases"))
            table.global_constant = True
            table.linkage = "internal"
            table.initializer = ir.Constant(table_type, [v for phase in phases for v in phase])
        with for_range(b, 0, s.in_per_group, "slab_ci") as ci:
            x_plane = b.gep(x, [b.mul(ci, i64(s.h * s.w))], source_etype=element)
            if table is None:
                for phase, bounds in enumerate(phases):
                    copy_phase(x_plane, ci, phase, *bounds)
            else:
                with for_range(b, 0, len(phases), "slab_phase") as phase:
                    bounds = [b.load(b.gep(table, [i64(0), b.add(b.mul(phase, i64(4)), i64(j))],
                                           source_etype=table.value_type), typ=I64) for j in range(4)]
                    copy_phase(x_plane, ci, phase, *bounds)

    def output_layout(self):
        """A result buffer is the C matrix only when q-space has no extra columns."""
        s = self.shape
        return (self.m * s.oh * s.ow, s.oh * s.ow) if self.wq == s.ow else None

    def emit_tile(self, b, tile: gemm_epilogue.OutputTile, batch, store) -> None:
        s = self.shape
        wq = i64(self.wq)
        image, group = (b.udiv(batch, i64(s.groups)), b.urem(batch, i64(s.groups))) if s.groups > 1 \
            else (batch, i64(0))
        channel0 = b.add(b.mul(group, i64(self.m)), tile.row)
        col_end = b.add(tile.col, tile.cols)
        first = b.udiv(tile.col, wq)
        last = b.udiv(b.sub(col_end, i64(1)), wq)
        n_index = affine_value(image, s.n, "image")
        if self.wq == s.ow or self.pixel_columns:  # a row of the tile is a contiguous run of pixels
            with for_range(b, 0, tile.rows, "i", vectorize_enable=0) as i:
                channel = affine_value(b.add(channel0, i), s.o, "channel")
                with for_range(b, 0, tile.cols, "j", **TILE_LOOP, unroll_disable=1) as j:
                    pixel = affine_value(b.add(tile.col, j), s.oh * s.ow, "pixel")
                    store(i, j, [n_index, channel, pixel.floordiv(s.ow), pixel.mod(s.ow)])
            return
        # Each output row's part of the tile is found once for all the tile's channels (it costs
        # more than the stores when K is small).  Only the ow loop vectorizes: when a tile's rows
        # are few and known (depthwise.py's small images), LLVM would unroll it whole and
        # vectorize the oh loop instead, into gathers.
        with for_range(b, first, b.add(last, i64(1)), "oh", vectorize_enable=0) as oh:
            row_start = b.mul(oh, wq)
            lo = b.sub(tile.col, row_start)
            lo = b.select(b.icmp_signed("<", lo, i64(0)), i64(0), lo)
            hi = min_i64(b, b.sub(col_end, row_start), s.ow)
            oh_index = affine_value(oh, s.oh, "oh")
            with for_range(b, 0, tile.rows, "i", vectorize_enable=0) as i:
                channel = affine_value(b.add(channel0, i), s.o, "channel")
                with for_range(b, lo, hi, "ow", **TILE_LOOP, unroll_disable=1) as ow:
                    j = b.sub(b.add(row_start, ow), tile.col)
                    store(i, j, [n_index, channel, oh_index, affine_value(ow, s.ow, "ow")])


# Convolutions with the output's pixels as the GEMM's rows and its channels along the vector lanes,
# C^T[pixel, co] = col^T[pixel, k] . W^T[k, co] (``PixelRowsConvGemm``), where a 512-bit FMA runs at
# full rate (Zen 5): ConvGemm's q-space computes the WQ - OW columns past each output row and rounds
# the pixels up to whole 48-column tiles, a 7x7 output's 49 pixels as 61 q-space columns in 64
# lanes (77% useful).  Here a register tile is a run of pixels of one output row x vectors of
# channels, so output widths that are multiples of 7 (every torchvision model's 112/56/28/14/7)
# compute no pixel for nothing, and channel counts fill the lanes: 14 pixels x 2 vectors where the
# width is a multiple of 14 (28 accumulators), else 7 x 3 (21; 7 x 4 spilled).  Measured as a GEMM
# first (2048 x 49 x 512, 1 thread, Zen 5): 6x4 146 GFLOP/s, 7x4 81 (spills), 7x3 167; then the
# layers (1 thread, min of 20, load ~8, lezero / ORT): at 14x14 outputs 14x2 0.89-0.98x, 7x3
# 0.92-1.18x (256 channels: 5 tiles of 48 and one of 16), 7x2 0.91-1.08x; at 7x7 7x3 and 7x2 within
# noise of each other (0.92-1.13x).
PIXEL_ROWS_TILES = ((16, 14, 2), (16, 7, 3))
# Outputs of at most this many pixels (14x14): A, packed for all of K at once, stays in L2.  Larger
# ones ran slower than q-space (1 thread, min of 20, load ~8): 3x3 128->128 at 28x28 1.50x ORT
# against 1.20x, 1x1 64->256 at 56x56 1.40x against 1.03x.
PIXEL_ROWS_MAX_PIXELS = 196
# ... and of at least this depth (ci * kh * kw): the epilogue reads a tile's sums along its pixels,
# one channel at a time (strided), which shallow products do not amortize.  1 thread, min of 30,
# lezero / ORT, q-space -> pixel rows: pw 96->576 at 14x14 0.90x -> 1.14x, pw 192->1152 at 7x7
# (+SiLU) 1.41x -> 1.49x; 256 deep and more gained (r50 1x1 1024->256 at 14x14 1.02x -> 0.96x).
PIXEL_ROWS_MIN_DEPTH = 256


def pixel_rows_tile(s: ConvShape) -> tuple[int, int, int] | None:
    """The first of PIXEL_ROWS_TILES whose rows divide the output's width (None: none does)."""
    return next((tile for tile in PIXEL_ROWS_TILES if s.ow % tile[1] == 0), None)


def conv_gemm_plan(cpu, shape: ConvShape, direct: bool, a_block_floats: int, constant_weights: int | None,
                   dtype) -> "ConvGemm":
    """The GEMM plan of a float32 convolution: pixels as rows (``PixelRowsConvGemm``) where they fit
    (``pixel_rows_fit``), else ``ConvGemm``'s output channels as rows."""
    if pixel_rows_fit(cpu, shape, constant_weights, dtype):
        return PixelRowsConvGemm(shape, constant_weights)
    return ConvGemm(shape, direct, a_block_floats, constant_weights, direct_in_place=direct)


def pixel_rows_fit(cpu, s: ConvShape, constant_weights: int | None, dtype) -> bool:
    """A float32 conv of one group with constant weights (pre-packed as B, ``PackedGemmB``), an
    output width that is a multiple of a tile's rows (7 or 14), at most PIXEL_ROWS_MAX_PIXELS
    pixels and at least PIXEL_ROWS_MIN_DEPTH deep, on an AVX-512 target whose 512-bit FMA is full rate (not ``HALF_RATE_512_BIT_CPUS``,
    where the 8-float tiles were measured instead)."""
    host = gemm.GemmConfig.for_target(cpu)
    return (dtype == F32 and constant_weights is not None and s.groups == 1 and pixel_rows_tile(s) is not None
            and s.oh * s.ow <= PIXEL_ROWS_MAX_PIXELS and s.k >= PIXEL_ROWS_MIN_DEPTH
            and host.vector_width == 16 and host.nr_vectors >= CONV_NARROWER_TILE_MIN_VECTORS
            and cpu.cpu not in HALF_RATE_512_BIT_CPUS)


class PixelRowsConvGemm(ConvGemm):
    """conv2d (one group) as one GEMM per image whose rows are the output's pixels and whose columns
    are its channels: A = col^T (pixels x k), B = W^T (k x channels), the weights pre-packed by the
    plan (``PackedGemmB`` of W read with strides (1, K)).  A tile's rows are MR pixels, all inside
    one output row, so their MR values at tap k are contiguous in the slab (or in the input, read in
    place for a stride-1 conv without pads) at ``off[k] + q0``.  The micro-kernel broadcasts them
    from there (``gemm.AInPlace``, the k loop stepping a channel's kh * kw taps at constant offsets,
    K blocks of whole channels): A, kh * kw times the input, is never written.  A 1x1 conv and
    kernels of more than DIRECT_PERIOD_MAX_TAPS taps (a patchify conv) gather A into the GEMM's
    pre-packed layout instead (``packs_a``): per call the rows it computes, for every K block, one
    masked vector load and store per k."""

    def __init__(self, shape: ConvShape, constant_weights: int):
        super().__init__(shape, direct=False, a_block_floats=0, constant_weights=constant_weights)
        s = self.shape
        self.q_columns = self.n  # q-space (ConvGemm's n)
        self.m, self.n = s.oh * s.ow, s.out_per_group
        self.lda, self.ldb = self.m, self.k  # the packed A's rows (whole slivers), the packed B's depth
        self.tap_offsets: tuple[int, ...] = ()
        self.k_blocks: list[tuple[int, int]] = []
        self.packed_rows_at = 0  # floats into the slab where packed A starts
        self.tile = pixel_rows_tile(s)
        self.taps = s.kh * s.kw
        # else the GEMM reads A in place; a 1x1's A is no larger than its input, and its packed
        # slivers were as fast or faster (1 thread, 1x1 512->2048->512 at 7x7: 2.11 packed, 2.19 ms
        # in place; 256->1024->256 at 14x14 1.64 / 1.63)
        self.packs_a = self.taps == 1 or self.taps > DIRECT_PERIOD_MAX_TAPS
        self.a_in_place = None  # gemm.AInPlace: config()

    def register_tile(self, host: gemm.GemmConfig, cpu, narrower_vectors: bool) -> tuple[int, int, int]:
        return self.tile

    def config(self, host: gemm.GemmConfig) -> gemm.GemmConfig:
        self.lay_out_slab(0)  # packing loads are masked
        # the taps' offsets are A's here (the micro-kernel or packing reads them), not the GEMM's B rows
        self.tap_offsets, self.b_row_offsets = self.b_row_offsets, None
        config = _shrink(host, self.m, self.n, self.k)
        self.packed_b = PackedGemmB(self.constant_weights, self.k, self.n, config.nr, (1, self.k))
        if not self.packs_a:  # whole input channels per K block
            config = gemm.GemmConfig(config.vector_width, config.mr, config.nr_vectors,
                                     min(_align_up(config.kc, self.taps), self.k), config.mc, config.nc)
            s = self.shape
            self.a_in_place = gemm.AInPlace(self.tap_offsets, self.taps, s.ow, self.wq - s.ow)
            return config
        self.k_blocks = [(k0, min(config.kc, self.k - k0)) for k0 in range(0, self.k, config.kc)]
        self.packed_rows_at = _align_up(self.slab_floats, 16)
        self.slab_floats = self.packed_rows_at + self.m * self.k
        return config

    def output_layout(self):
        return None  # the GEMM computes C^T

    def operands(self, b, ctx, x_ptr, w_ptr, batch, n_begin, n_end, slab, rows=None):
        """(A, B) of one call: A packed from the slab for the call's ``rows`` (pixels), B the
        packed weights."""
        s = self.shape
        mr = self.tile[1]
        m_begin, m_end = rows
        x = b.gep(x_ptr, [b.mul(batch, i64(s.c * s.h * s.w))], source_etype=FLOAT)
        first_row = b.udiv(m_begin, i64(s.ow))
        if self.in_place:
            source = x
        else:
            last_row = b.udiv(b.sub(m_end, i64(1)), i64(s.ow))
            self._emit_slab(b, x, first_row, b.add(b.sub(last_row, first_row), i64(1 + self.qh[-1])), slab)
            source = b.gep(slab, [b.mul(first_row, i64(-self.wq))], source_etype=FLOAT)
        if not self.packs_a:  # pixel p's value k at source + q(p) + off[k] (AInPlace)
            return source, w_ptr
        packed = b.gep(slab, [i64(self.packed_rows_at)], source_etype=FLOAT)
        table_type = ir.ArrayType(I64, len(self.tap_offsets))
        table = ir.GlobalVariable(b.module, table_type, b.module.get_unique_name("pixel_rows_taps"))
        table.global_constant = True
        table.linkage = "internal"
        table.initializer = ir.Constant(table_type, list(self.tap_offsets))
        lanes = 8 if mr <= 8 else 16  # a sliver's mr floats per k: one masked vector load and store
        mask = ir.Constant(ir.VectorType(ir.IntType(1), lanes), [lane < mr for lane in range(lanes)])
        with for_range(b, b.udiv(m_begin, i64(mr)), b.udiv(b.add(m_end, i64(mr - 1)), i64(mr)), "sliver",
                       vectorize_enable=0) as sliver:
            p0 = b.mul(sliver, i64(mr))
            q0 = b.add(b.mul(b.udiv(p0, i64(s.ow)), i64(self.wq)), b.urem(p0, i64(s.ow)))
            start = b.gep(source, [q0], source_etype=FLOAT)
            for k0, kc in self.k_blocks:
                sliver_at = b.gep(packed, [b.add(i64(k0 * self.m), b.mul(p0, i64(kc)))], source_etype=FLOAT)
                with for_range(b, 0, kc, "pack_k", vectorize_enable=0) as k:
                    tap = b.load(b.gep(table, [i64(0), b.add(k, i64(k0))], source_etype=table_type), typ=I64)
                    values = vectors.load_vector(b, b.gep(start, [tap], source_etype=FLOAT), lanes, mask)
                    vectors.store_vector(b, values, b.gep(sliver_at, [b.mul(k, i64(mr))], source_etype=FLOAT), mask)
        return packed, w_ptr

    def emit_tile(self, b, tile: gemm_epilogue.OutputTile, batch, store) -> None:
        """A tile is MR pixels of one output row (its rows) by channels: per channel, a run of the
        output row."""
        s = self.shape
        n_index = affine_value(batch, s.n, "image")
        oh_index = affine_value(b.udiv(tile.row, i64(s.ow)), s.oh, "oh")
        ow0 = b.urem(tile.row, i64(s.ow))
        with for_range(b, 0, tile.cols, "j", vectorize_enable=0) as j:
            channel = affine_value(b.add(tile.col, j), s.o, "channel")
            with for_range(b, 0, tile.rows, "i", **TILE_LOOP, unroll_disable=1) as i:
                store(i, j, [n_index, channel, oh_index, affine_value(b.add(ow0, i), s.ow, "ow")])


# A slab of more phases than this copies them in a loop over a table (ConvGemm._emit_slab): a
# stride-2 conv has at most 4, stride 3 9, a patchify conv sh * sw (256 for ViT-B/16's).
UNROLLED_SLAB_PHASES = 16
# Floats per step of the stride-2 slab copy (two loads, one shuffle, one store): wide steps, then
# narrower ones for the rest of a row (a row of 28 floats takes one step of 8, one of 56 16 + 8).
SLAB_COPY_LANES = (16, 8)


def _copy_every_second(b, source, shift: int, out, c_lo: int, c_hi: int, width: int, element=FLOAT) -> int:
    """out[c] = source[2 * c + shift] for c from c_lo, a vector at a time (two vector loads of a
    row, their even lanes), as far as both loads stay inside the row of ``width`` floats.
    Returns the first c left to copy (a scalar loop does the rest): LLVM vectorizes a stride-2
    copy into gathers, or not at all."""
    c_end = min(c_hi, (width - shift) // 2)  # both loads inside the row up to here
    for lanes in SLAB_COPY_LANES:
        steps = max(0, (c_end - c_lo) // lanes)
        if not steps:
            continue
        vector = ir.VectorType(element, lanes)
        align = 1 if element != FLOAT else 4
        evens = ir.Constant(ir.VectorType(ir.IntType(32), lanes), list(range(0, 2 * lanes, 2)))
        with for_range(b, 0, steps, f"slab_v{lanes}") as step:
            c = b.add(i64(c_lo), b.mul(step, i64(lanes)))
            start = b.gep(source, [b.add(b.mul(c, i64(2)), i64(shift))], source_etype=element)
            low = b.load(start, typ=vector, align=align)
            high = b.load(b.gep(start, [i64(lanes)], source_etype=element), typ=vector, align=align)
            b.store(b.shuffle_vector(low, high, evens), b.gep(out, [c], source_etype=element), align=align)
        c_lo += steps * lanes
    return c_lo


def _fill(b, pointer, start, stop, value) -> None:
    """pointer[start:stop] = value (ints, or i64 values), of ``value``'s type."""
    if not (isinstance(start, int) and isinstance(stop, int)) or stop > start:
        with for_range(b, start, stop, "fill") as c:
            b.store(value, b.gep(pointer, [c], source_etype=value.type))


def _shrink(host: gemm.GemmConfig, m: int, n: int, k: int) -> gemm.GemmConfig:
    """The host's blocking cut down to the problem: K blocks of equal depth, and M and N blocks no
    larger than the matrix (so the workspace is no larger than needed)."""
    blocks = max(1, -(-k // host.kc))
    kc = max(1, -(-k // blocks))
    return gemm.GemmConfig(host.vector_width, host.mr, host.nr_vectors, kc, min(host.mc, _align_up(m, host.mr)),
                           min(host.nc, _align_up(n, host.nr)))


def prepacked_b_tile(host: gemm.GemmConfig, cpu, tile: tuple[int, int, int], m: int, n: int) -> tuple[int, int, int]:
    """The register tile of a matmul that reads a B the plan packed once: ``tile`` (the matmul's),
    or where that is the target's 6 x 4-vector tile on a full-rate AVX-512 CPU, the conv's 8 x 3
    when it pads less of C (8 x 256 @ 256 x 1024: 8 rows, not 12).  Measured (Xeon,
    emeraldrapids, 1 thread, an LSTM step's recurrent GEMM, B pre-packed, kc 128, alternating in one
    process, load ~1 and ~6): M x 256 x 1024 at M = 8 59.5 -> 47.4 us, 16 69.7 -> 62.7, 32 126.4 ->
    113.9, 40 161.7 -> 156.7; at 64, 128 (the same padded work) within 2%."""
    if tile != (host.vector_width, host.mr, host.nr_vectors) or cpu.cpu in HALF_RATE_512_BIT_CPUS:
        return tile
    wide = conv_register_tile(host, cpu, m, n, narrower_vectors=False)

    def padded_work(t):
        width, mr, nv = t
        return _align_up(m, mr) * _align_up(n, nv * width)

    return wide if padded_work(wide) < padded_work(tile) else tile


def prepacked_b_blocks(config: gemm.GemmConfig, m: int, k: int, caches) -> gemm.GemmConfig:
    """``config`` for a B the plan packed once: K blocks of equal depth, none deeper than
    ``cache_model.prepacked_b_depth`` (the B sliver in L1; the packed layout does not depend on kc),
    when all ``m`` rows are one A block (as measured: up to 256 rows; larger M keeps the blocking
    for B packed per call, not measured with B pre-packed on a quiet machine)."""
    depth = cache_model.prepacked_b_depth(config.nr, caches)
    if config.kc <= depth or m > config.mc:
        return config
    return replace(config, kc=-(-k // -(-k // depth)))


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
    host = gemm.GemmConfig.for_target(ctx.cpu)
    # vdpbf16ps (gemm_bf16.py) works on the target's 16-float vectors
    bf16_pairs = anchor.result.type.element_type == BF16 and gemm_bf16.pairs_available(ctx.cpu, host)
    tile = plan.register_tile(host, ctx.cpu, narrower_vectors=not bf16_pairs)
    retiled = tile != (host.vector_width, host.mr, host.nr_vectors)
    constant_b = isinstance(plan, MatmulGemm) and anchor.result.type.element_type == F32 and \
        _constant_b_operand(ctx, anchor) is not None and plan.read_constant_b(_constant_b_operand(ctx, anchor))
    # The rows form of a one-batch matmul (lezero/codegen/row_generic.py): a work item per row
    # of C, the call's range its rows, so that the code names no row count and serves every one.
    per_row = any_rows(ctx.kernel) and isinstance(plan, MatmulGemm) and plan.batches == 1 and not plan.swapped
    if constant_b and not per_row:  # the tile of a rows form must not follow its row count
        tile = prepacked_b_tile(host, ctx.cpu, tile, plan.m, plan.n)
        retiled = tile != (host.vector_width, host.mr, host.nr_vectors)
    amx_config = _amx_config(ctx, anchor, plan)
    config = amx_config or plan.config(gemm.GemmConfig.for_target(ctx.cpu, tile) if retiled else host)
    if constant_b:
        config = prepacked_b_blocks(config, plan.m, plan.k, cache_model.caches_for(ctx.cpu))
        s = plan.shape
        plan.packed_b = PackedGemmB(plan.constant_b, plan.k, plan.n, config.nr, s.b_matrix_strides)
    dim, cuts = ("rows", None) if per_row else slice_cuts(plan.m, plan.n, config.mr, config.nr)
    slices = plan.m if per_row else len(cuts) - 1

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
        partial_result = next((i for i, r in enumerate(ctx.kernel.results)
                               if r.type.element_type in FLOAT32_STORAGE), None)
    partials_in_workspace = k_blocks > 1 and partial_result is None

    # Buffers never overlap (memory-plan shares buffers only within elementwise kernels), except
    # that a result holding partial sums is also reached through C.
    num_operands = len(ctx.kernel.operands)
    args = tuple(gemm_epilogue.EpilogueArg(f"buffer{i}", "pointer",
                                  noalias=partial_result is None or i != num_operands + partial_result)
                 for i in range(len(ctx.fn.buffers))) + (gemm_epilogue.EpilogueArg("batch", "index"),)
    tile_store = TileEpilogue(ctx, anchor, plan)
    # Slices and N blocks end on whole tiles: only C's last column tile can be narrower.
    edge_vectors = -(-(plan.n % config.nr) // config.vector_width)
    epilogue = None if plain else gemm_epilogue.TileStore(ctx.name, tile_store.emit, args)
    # bf16 on AMX-BF16 (B packed): tdpbf16ps on tiles; on AVX-512 BF16: vdpbf16ps on bf16 pairs
    # (gemm_bf16.py); the same products and sums
    pairs = anchor.result.type.element_type == BF16 and gemm_bf16.pairs_available(ctx.cpu, config)
    generator_class = gemm_bf16.AmxBf16GemmGenerator if amx_config else \
        gemm_bf16.Bf16PairGemmGenerator if pairs else gemm.SgemmGenerator
    generator = generator_class(config, epilogue, f"{ctx.name}.gemm",
                                b_row_offsets=plan.b_row_offsets, pack_b=plan.pack_b, mask_b=plan.mask_b,
                                transpose_a=plan.transpose_a, transpose_b=plan.transpose_b,
                                a_k_stride=plan.a_k_stride, b_col_stride=plan.b_col_stride,
                                prepacked_a=plan.packed_a is not None or plan.packs_a,
                                prepacked_b=plan.packed_b is not None,
                                operand_element=plan.operand_element, bf16_operands=plan.bf16_operands,
                                f16_operands=plan.f16_operands,
                                b_row_period=plan.b_row_period if generator_class is gemm.SgemmGenerator else None,
                                a_in_place=plan.a_in_place,
                                edge_vectors=[edge_vectors] if 0 < edge_vectors < config.nr_vectors else [])
    rectangle_function = generator.build_into(ctx.module)
    ctx.packed_operands = tuple(p for p in (plan.packed_a, plan.packed_b) if p is not None)
    rectangle_function.linkage = "internal"
    ctx.s.external_symbols |= tile_store.external_symbols

    b = ctx.b
    module = ctx.module
    buffers = ctx.fn.buffers
    begin, end = ctx.fn.begin, ctx.fn.end
    operand_args = [stored_operand(ctx, v, anchor)[0] for v in anchor.operands]
    first, second = (buffers[ctx.body.args.index(arg)] for arg in operand_args)
    if not per_row:
        cut_type = ir.ArrayType(I64, len(cuts))
        cut_table = ir.GlobalVariable(module, cut_type, f"{ctx.name}.cuts")
        cut_table.global_constant = True
        cut_table.linkage = "internal"
        cut_table.initializer = ir.Constant(cut_type, cuts)

    def cut(s):
        return s if per_row else b.load(b.gep(cut_table, [i64(0), s], source_etype=cut_type), typ=I64)

    with b.if_then(b.icmp_signed("<", begin, end)):
        first_batch = i64(0) if per_row else b.udiv(begin, i64(slices))
        last_batch = i64(0) if per_row else b.udiv(b.sub(end, i64(1)), i64(slices))
        # Workspace: packed A and B, partial sums (for the largest rectangle of the call: a whole
        # batch's when the range spans batches), the slab.
        gemm_floats = config.packed_a_floats + (config.packed_b_floats if plan.pack_b else 0)
        slab_floats = _align_up(plan.slab_floats, 16)
        partial_floats = i64(0)
        if partials_in_workspace and per_row:
            partial_floats = b.mul(b.sub(end, begin), i64(plan.n))
        elif partials_in_workspace:
            one_batch = b.icmp_unsigned("==", first_batch, last_batch)
            extent = b.select(one_batch, b.sub(cut(b.add(b.urem(b.sub(end, i64(1)), i64(slices)), i64(1))),
                                               cut(b.urem(begin, i64(slices)))), i64(cuts[-1]))
            other = plan.n if dim == "rows" else plan.m
            partial_floats = b.mul(extent, i64(other))
        workspace_bytes = b.add(b.mul(b.add(partial_floats, i64(gemm_floats + slab_floats)), i64(4)),
                                i64(gemm.WORKSPACE_ALIGNMENT))
        raw = b.call(declare(module, "malloc", PTR, [I64]), [workspace_bytes])
        with b.if_then(b.icmp_unsigned("==", raw, ir.Constant(PTR, None)), likely=False):
            b.call(declare(module, "llvm.trap", VOID, []), [])
            b.unreachable()
        address = b.ptrtoint(raw, I64)
        aligned = b.and_(b.add(address, i64(gemm.WORKSPACE_ALIGNMENT - 1)), i64(-gemm.WORKSPACE_ALIGNMENT))
        workspace = b.gep(raw, [b.sub(aligned, address)], source_etype=I8)
        slab = b.gep(workspace, [i64(gemm_floats)], source_etype=FLOAT)
        partials = b.gep(slab, [i64(slab_floats)], source_etype=FLOAT)
        widened = None
        if anchor.result.type.element_type == F16 and plan.operand_element == FLOAT:
            widened, (first, second) = _widen_halves(b, module, [first, second], operand_args)

        with for_range(b, first_batch, b.add(last_batch, i64(1)), "batch") as batch:
            if per_row:
                lo, hi = begin, end
            else:
                base = b.mul(batch, i64(slices))
                s0 = b.sub(b.select(b.icmp_signed("<", begin, base), base, begin), base)
                s1 = b.sub(min_i64(b, end, b.add(base, i64(slices))), base)
                lo, hi = cut(s0), cut(s1)
            m0, m1, n0, n1 = (lo, hi, i64(0), i64(plan.n)) if dim == "rows" else (i64(0), i64(plan.m), lo, hi)
            a, bm = plan.operands(b, ctx, first, second, batch, n0, n1, slab, rows=(m0, m1))
            if k_blocks == 1 and not plain:
                c, ldc = ir.Constant(PTR, None), i64(0)
            elif partial_result is not None:
                per_batch_floats, ldc_value = layout
                result = buffers[num_operands + partial_result]
                c = result if per_row else b.gep(result, [b.mul(batch, i64(per_batch_floats))], source_etype=FLOAT)
                ldc = i64(ldc_value)
            else:  # C[m, n] lives at partials[(m - m0) * ldc + n - n0]
                ldc = b.sub(n1, n0)
                shift = b.add(b.mul(m0, ldc), n0)
                c = b.gep(partials, [b.sub(i64(0), shift)], source_etype=FLOAT)
            b.call(rectangle_function, [i64(plan.k), a, i64(plan.lda), bm, i64(plan.ldb), c, ldc, m0, m1, n0, n1,
                                        workspace] + ([] if plain else list(buffers) + [batch]))
        b.call(declare(module, "free", VOID, [PTR]), [raw])
        if widened is not None:
            b.call(declare(module, "free", VOID, [PTR]), [widened])
    ctx.fn.finish()
    return plan.batches * slices


# A bf16 matmul on AMX tiles packs B from this many rows (B is read in place below PACK_B_MIN_ROWS
# otherwise): the tiles outrun the in-place vdpbf16ps kernel, packing included.  SPR, 1 thread,
# kernel alone, load ~4, us AMX packed / vdpbf16ps in place / float32: 16x768x3072 1105 / 2303 /
# 1574, 24x1024x1024 319 / 985 / 822, 12x768x768 137 / 208 / 170, 8x1024x1024 272 / 385 / 286,
# 8x256x1024 70 / 69 / 55; 6x768x3072 906 / 600 / 432 and 4x768x768 134 / 111 / 89 (fewer: slower).
AMX_PACK_B_MIN_ROWS = 8


def _amx_config(ctx: KernelContext, anchor: Operation, plan) -> gemm.GemmConfig | None:
    """A bf16 GEMM's blocking on AMX tiles (gemm_bf16.AmxBf16GemmGenerator) where the target has
    them, B is packed per call (a matmul of AMX_PACK_B_MIN_ROWS rows or more packs it for them), and
    ``plan.config`` keeps the AMX tile with every K block deep enough (``amx_fits``: not for a few
    rows' thin tile); else None (the plan as it was), and plan.config runs again."""
    if anchor.result.type.element_type != BF16 or not gemm_bf16.amx_available(ctx.cpu) \
            or plan.packed_b is not None or plan.packs_a:
        return None
    repack = isinstance(plan, MatmulGemm) and not plan.pack_b and plan.m >= AMX_PACK_B_MIN_ROWS
    if not (plan.pack_b or repack):
        return None
    plan.pack_b, plan.mask_b = True, False
    config = plan.config(gemm_bf16.amx_host_config(ctx.cpu))
    if gemm_bf16.amx_fits(config, plan.k):
        return config
    if repack:
        plan.pack_b, plan.mask_b = False, True
    return None


def _constant_b_operand(ctx: KernelContext, anchor: Operation) -> int | None:
    """The kernel operand a matmul's B reads when it is a constant (``constant_operands``), else None."""
    operand = ctx.body.args.index(stored_operand(ctx, anchor.operands[1], anchor)[0])
    return operand if operand in ctx.kernel.definition.attrs(ctx.kernel).constant_operands else None


def _widen_halves(b: ir.IRBuilder, module: ir.Module, pointers, args):
    """A conv's f16 operands (``half`` storage; a matmul's are widened as they are packed) as
    float32 copies in one ``malloc``ed block (returned, to be
    freed, with the copies' pointers): every value converts exactly, so the float32 GEMM's products
    and sums are the reference's and only the epilogue rounds (once, to f16).  The copy keeps each
    operand's layout, so the plan's strides hold; its loop vectorizes to vcvtph2ps where the CPU
    target has F16C or AVX-512, and to LLVM's portable conversion elsewhere.  Its cost, a pass over
    A and B per call, is O(MK + KN) beside the GEMM's O(MNK)."""
    counts = [math.prod(arg.type.shape) for arg in args]
    raw = b.call(declare(module, "malloc", PTR, [I64]), [i64(4 * sum(counts))])
    with b.if_then(b.icmp_unsigned("==", raw, ir.Constant(PTR, None)), likely=False):
        b.call(declare(module, "llvm.trap", VOID, []), [])
        b.unreachable()
    copies, offset = [], 0
    for pointer, count in zip(pointers, counts):
        copy = b.gep(raw, [i64(offset)], source_etype=FLOAT)
        with for_range(b, 0, count, "widen") as i:
            value = b.load(b.gep(pointer, [i], source_etype=HALF), typ=HALF)
            b.store(b.fpext(value, FLOAT), b.gep(copy, [i], source_etype=FLOAT))
        copies.append(copy)
        offset += count
    return raw, copies


class TileEpilogue:
    """The ``TileStore`` of a contraction kernel: every yielded value at each element of the tile,
    through a ``ValueAtIndex`` whose contraction value is the tile's sum."""

    def __init__(self, ctx: KernelContext, anchor: Operation, plan):
        self.ctx, self.anchor, self.plan = ctx, anchor, plan
        self.external_symbols: set[str] = set()
        self._emitter: LLVMValueAtIndex | None = None
        self._results: list[Buffer] = []
        self._builder = None

    def _emitter_for(self, tile: gemm_epilogue.OutputTile) -> LLVMValueAtIndex:
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

    def emit(self, tile: gemm_epilogue.OutputTile) -> None:
        emitter = self._emitter_for(tile)
        b = tile.builder
        yields = self.ctx.yields
        results = self._results
        dtype = self.anchor.result.type.element_type
        sum_type = compute_type(dtype)  # float32 sums, or the int8 GEMM's i32 (integer_gemm.py)

        def store(i, j, index):
            emitter.new_scope()
            position = b.add(b.mul(i, i64(tile.nr)), j)

            def tile_value(op, value, at):
                address = b.gep(tile.sums, [position], source_etype=sum_type)
                # a bf16 contraction's float32 sum rounds once to bf16, as the reference's does
                return emitter.s.round(Scalar(b.load(address, typ=sum_type, align=4), dtype))

            emitter.overrides[self.anchor] = tile_value
            values = [emitter.at(y, index) for y in yields]
            for value, buffer in zip(values, results):
                emitter.store(buffer, index, value)

        self.plan.emit_tile(b, tile, tile.arg("batch"), store)
        emitter.flush_index_checks()
