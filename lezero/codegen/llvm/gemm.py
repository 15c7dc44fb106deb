"""A float32 GEMM, C[M,N] = epilogue(A[M,K] @ B[K,N]), generated as LLVM IR with llvmlite.

The design is GotoBLAS/BLIS's, written with llvmlite's IR builder so that the same code can be
JIT-compiled here or emitted as an object file into an executable that has no Python:

    for jc in N, step NC:                       (each task owns a rectangle of C)
      for pc in K, step KC:
        pack B[pc:pc+KC, jc:jc+NC] into NR-wide slivers         -> packed_b (L3)
        for ic in M, step MC:
          pack A[ic:ic+MC, pc:pc+KC] into MR-tall slivers       -> packed_a (L2)
          for jr in NC, step NR:                  (one KC x NR sliver of packed_b, reused from
            for ir in MC, step MR:                 L1/L2 by every MR sliver of packed_a)
              micro-kernel: an MR x NR tile of C held in vector registers, updated by KC
              rank-1 steps of vector FMA: broadcast(A[i, k]) * B[k, j:j+W]

Packing pads the edge slivers with zeros, so the micro-kernel always computes a full tile; only
the store of an edge tile is masked (per row a branch, per column a vector mask).

The epilogue (bias, relu, a residual, ...) runs inside the micro-kernel on the accumulator
vectors of the last K block, just before they are stored, so a fused ``relu(x @ w + b)`` costs one
pass over C. An ``Epilogue`` transforms each accumulator vector; a ``TileStore`` instead receives
the whole tile's sums and generates the stores itself (``gemm_epilogue.py``; a ``TileStore`` is how
``contraction_gemm.py`` fuses a kernel's elementwise epilogue, whatever its results are). ``SgemmGenerator``'s ``b_row_offsets`` and
``pack_b`` let B be a matrix whose rows lie at arbitrary offsets (a convolution's input read as
its im2col matrix), packed or read in place (``mask_b``: a plain matrix read in place, its last
columns by masked loads); ``transpose_a``/``transpose_b`` pack an operand stored transposed
(``x @ w.T`` without materializing ``w.T``: B's slivers are transposed in registers).

Threads: the exported ``<name>`` computes one rectangle of C; ``<name>_threaded`` takes a list of
rectangles and runs them on POSIX threads (pthread_create / pthread_join), so an executable without
Python gets the threading too. The standalone float32 GEMM of the tests and benchmarks/sgemm.py
(``SgemmKernel``, tests/support/sgemm_kernel.py) calls either; compiled kernels
(``contraction_gemm.py``) call ``<name>`` from the kernel ABI function, on the runtime's thread
pool.

Why this file is long: ``SgemmGenerator`` is one class, the packing routines, the micro-kernel and
the loop nest around them, which must agree on the packed layouts and on the register tile; cut
apart, each piece would have to restate what the others assume.  Its epilogue interface
(``gemm_epilogue.py``) and vector helpers (``vectors.py``) are modules of their own.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import llvmlite.ir as ir

from lezero.codegen.llvm import cache_model, vectors
from lezero.codegen.llvm.gemm_epilogue import (
    ARG_KIND_PARAMS,
    Epilogue,
    EpilogueArg,
    OutputTile,
    OutputVector,
    TileStore,
)
from lezero.codegen.llvm.ir_types import FLOAT, HALF, I1, I32, I64, PTR, VOID
from lezero.codegen.llvm.target import CpuTarget, cpu_target
from lezero.codegen.llvm.vectors import FLOAT_BYTES

WORKSPACE_ALIGNMENT = 64  # bytes; one cache line and one AVX-512 register
HALF_BYTES = 2  # an f16 operand's values (operand_element HALF)


def _i64(value: int) -> ir.Constant:
    return ir.Constant(I64, value)


# --------------------------------------------------------------------------------------------
# Tile sizes
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GemmConfig:
    """Register and cache blocking.

    vector_width: floats per SIMD register (16 with AVX-512, 8 with AVX2, 4 with SSE).
    mr: rows of the micro-tile (values of A broadcast to a vector).
    nr_vectors: columns of the micro-tile, in vectors; nr = nr_vectors * vector_width.
    kc: depth of a packed block (rank-kc update per micro-kernel call).
    mc: rows of the packed A block (a multiple of mr), sized to stay in L2.
    nc: columns of the packed B block (a multiple of nr).
    """

    vector_width: int
    mr: int
    nr_vectors: int
    kc: int
    mc: int
    nc: int

    def __post_init__(self):
        if self.mc % self.mr or self.nc % self.nr:
            raise ValueError(f"mc must be a multiple of mr and nc of nr: {self}")

    @property
    def nr(self) -> int:
        return self.nr_vectors * self.vector_width

    @property
    def packed_a_floats(self) -> int:
        """mc x kc, rounded up to whole cache lines so that packed B starts aligned."""
        line = WORKSPACE_ALIGNMENT // FLOAT_BYTES
        return -(-self.mc * self.kc // line) * line

    @property
    def packed_b_floats(self) -> int:
        return self.kc * self.nc

    @property
    def workspace_floats(self) -> int:
        """Floats of scratch one task needs: packed A, then packed B (both 64-byte aligned)."""
        return self.packed_a_floats + self.packed_b_floats

    @classmethod
    def for_target(cls, cpu: CpuTarget | str | None = None, tile: tuple[int, int, int] | None = None) -> "GemmConfig":
        """Tiles for ``cpu`` (default: ``$LEZERO_CPU`` or the host): the register tile from its
        vector registers (or ``tile``, (vector_width, mr, nr_vectors), a caller's choice for its
        shape), the cache blocks for that tile from its caches (``cache_model``)."""
        target = cpu_target(cpu)
        width = target.vector_bytes // FLOAT_BYTES
        if tile is not None:
            width, mr, nr_vectors = tile
        elif "neon" in target.features:
            # AArch64: 8x12, 24 of the 32 128-bit NEON registers accumulate, 3 hold B and 2 A's
            # values (fmla by lane: no broadcasts). Chosen from the register file, not
            # measured (no AArch64 machine here; qemu's speed says nothing).
            mr, nr_vectors = 8, 3
        else:
            mr, nr_vectors = register_tile(target.vector_registers, target.has_fma)
        kc, mc, nc = cache_model.cache_blocks(mr, nr_vectors * width, cache_model.caches_for(target))
        return cls(width, mr, nr_vectors, kc, mc, nc)


MAX_ACCUMULATORS = 28  # of 32 registers: the micro-kernel also holds B vectors and a broadcast
# An A read in place steps its period unrolled (constant offsets, no table) only in tiles of at most
# this many accumulators: unrolled, LLVM schedules a later step's broadcasts early, and a 14 x 2
# tile's 28 accumulators then spill (3x3 256->256 at 14x14, 1 thread: 2.24 ms, 1.55 with A packed);
# 7 x 3 (21) gains from it.
A_PERIOD_MAX_ACCUMULATORS = 24
# Tile widths tried, in vectors: powers of two divide the column counts of most models; on Zen 4
# 5x80 and 4x96 tiles were slower than 6x64 though they load as little per FMA.
TILE_VECTORS = (1, 2, 4, 8)


@dataclass(frozen=True)
class AInPlace:
    """A read in place by the micro-kernel (SgemmGenerator's ``a_in_place``): row r's value k is at
    ``A + r + (r // run) * gap + offsets[k]``, where ``offsets[k] == (k // period) * stride +
    offsets[k % period]`` (checked)."""
    offsets: tuple[int, ...]
    period: int
    run: int
    gap: int

    def __post_init__(self):
        if self.period < 1 or self.run < 1 or self.gap < 0 or not periodic_offsets(self.offsets, self.period):
            raise ValueError(f"an A in place needs a period ({self.period}) of its offsets, a run of rows "
                             f"({self.run}) and a gap ({self.gap}) >= 0")

    @property
    def stride(self) -> int:
        return self.offsets[self.period] - self.offsets[0] if len(self.offsets) > self.period else 0


def periodic_offsets(offsets: Sequence[int], period: int) -> bool:
    """Whether ``period`` divides the table's length and ``offsets[k] == (k // period) * S +
    offsets[k % period]`` for one stride S (``SgemmGenerator``'s ``b_row_period``)."""
    if period < 1 or len(offsets) % period:
        return False
    stride = offsets[period] - offsets[0] if len(offsets) > period else 0
    return all(o == (k // period) * stride + offsets[k % period] for k, o in enumerate(offsets))


def register_tile(registers: int, fma: bool) -> tuple[int, int]:
    """(mr, nr_vectors) of the micro-tile for a register file of ``registers`` vectors, x86 style
    (A broadcast, B loaded as vectors): mr * nv accumulators, nv B vectors, one broadcast, and
    without FMA one more for the product, must fit. Of those, the tile that loads least per FMA
    (largest mr * nv / (mr + nv)), then the one with more accumulators. 32 registers (AVX-512):
    6x4 (2.4 FMAs per load; 12x2 1.7, 2x8 1.6); 16 (AVX2): 6x2 (1.5; 2x4 1.33); 16 without FMA
    (SSE): 6x2 too. BLIS's Haswell and Zen kernels are 6x16 floats too."""
    best = None
    for nv in TILE_VECTORS:
        mr = min((registers - nv - 1 - (0 if fma else 1)) // nv, MAX_ACCUMULATORS // nv)
        if mr < 1:
            continue
        score = (mr * nv / (mr + nv), mr * nv)
        if best is None or score > best[0]:
            best = score, (mr, nv)
    return best[1]


# --------------------------------------------------------------------------------------------
# The generator
# --------------------------------------------------------------------------------------------

# Parameters of the exported function, before the epilogue's.
GEMM_PARAMS = (
    ("K", I64), ("A", PTR), ("lda", I64), ("B", PTR), ("ldb", I64), ("C", PTR), ("ldc", I64),
    ("m_begin", I64), ("m_end", I64), ("n_begin", I64), ("n_end", I64), ("workspace", PTR),
)


class SgemmGenerator:
    """Builds the LLVM IR of a blocked float32 GEMM for one GemmConfig and one epilogue.

    The module defines:
      ``<name>``               the exported rectangle function (see ``GEMM_PARAMS``):
                               C[m_begin:m_end, n_begin:n_end] = epilogue(A[m_begin:m_end, :] @ B[:, n_begin:n_end])
                               with row strides lda/ldb/ldc in floats and ``workspace`` pointing to
                               config.workspace_floats floats, 64-byte aligned, private to the call.
      ``<name>_pack_a``        A block -> MR-tall slivers, k-major, zero padded.
      ``<name>_pack_b``        B block -> NR-wide slivers, k-major, zero padded.
      ``<name>_micro_kernel``  one MR x NR tile: kc FMA steps, then accumulate / epilogue / store.
      ``<name>_micro_kernel_<v>``  the same, v vectors wide, for a last column tile that narrow
                               (``edge_vectors``: which v; default every v below NR / W).

    ``epilogue`` is an ``Epilogue`` (a transform of each accumulator vector before its store) or a
    ``TileStore`` (the code generator stores the tile itself). Two options describe B for
    callers whose B is not a plain matrix (a convolution's input read as its im2col matrix):

    b_row_offsets: row k of B starts ``b_row_offsets[k]`` floats after B (a constant table in the
        module) instead of ``k * ldb``; K must not exceed the table.
    b_row_period: with ``b_row_offsets`` and ``pack_b=False``, a period T of the table
        (``b_row_offsets[k] == (k // T) * S + b_row_offsets[k % T]``, a convolution's taps per
        input channel): the micro-kernel's k loop then steps T rows at a time, its T loads of B
        at constant offsets from one pointer, with no table read (every K block a multiple of T).
    pack_b: False makes the micro-kernel read B's rows where they lie (unaligned vector loads, no
        packed copy): every row must be readable, whatever it holds, up to NR - 1 floats past
        ``n_end``; columns past ``n_end`` are computed and never stored.
    mask_b: with ``pack_b=False``, the micro-kernel's loads of B stop at the tile's last column
        (masked loads), so B may be any matrix: nothing past ``n_end`` is read.

    Either operand may be stored transposed (a matmul reading ``x @ w.T`` packs ``w`` as it is):
    with ``transpose_a``, A[i, k] is at ``A[k * lda + i]``; with ``transpose_b``, B[k, j] is at
    ``B[j * ldb + k]``. Packing is where the layout matters: A's slivers then copy MR contiguous
    floats per k, and B's are W x W blocks transposed in registers.  Or neither its rows nor its
    columns are contiguous (a batch dim of a permuted tensor is innermost): ``a_k_stride`` puts
    A[i, k] at ``A[i * lda + k * a_k_stride]``, ``b_col_stride`` B[k, j] at ``B[k * ldb + j *
    b_col_stride]``, and the slivers are gathered a float at a time (packing is O(MK + KN) of an
    O(MNK) product; the micro-kernel is the same).

    prepacked_a: A is already in the packed layout (a constant packed once when the plan was built,
        ``lezero/codegen/packed_operands.py``'s ``PackedGemmA``, whose ``depth_block`` is this
        config's kc and ``row_tile`` its mr): ``lda`` is its padded row count, the sliver of rows
        ``ic`` of the K block at ``pc`` is at ``A + pc * lda + ic * kc``, and nothing is copied.
    prepacked_b: B is already in the packed layout (a constant weight packed once when the plan
        was built, ``PackedGemmB``, whose ``col_tile`` is this config's nr): slivers of NR columns,
        each all of K deep and k-major (NR floats per k), ``ldb`` is the packed depth (K); the
        sliver of columns ``j`` (a multiple of NR) in the K block at ``pc`` is at ``B + j * ldb + pc *
        NR``, whatever kc and nc, and nothing is copied.  Not vector aligned: loads are unaligned.
    a_in_place: A read where it lies, not packed (``AInPlace``: a pixel-rows convolution's input,
        row r's value k at ``A + r + (r // run) * gap + offsets[k]``, the offsets of period T,
        so the k loop steps T values at constant offsets from one pointer (in tiles of at most
        A_PERIOD_MAX_ACCUMULATORS; larger ones read the offsets from a table); rows are consecutive
        floats within a run, every K block a multiple of T): the MR broadcasts of a k step read
        MR consecutive floats of the input, as from a packed sliver, and no copy of A is made.
    bf16_operands: the float32 operands ("a", "b") of a bf16 GEMM read through a cast to bf16
        (autocast's, fused: partition's operand prologue), each value rounded to bf16 where it is
        read (packing, or B's rows in place), ties to even as ``numerics.round_to_bf16``, so the
        GEMM computes what it would on the cast's result; rounding a bf16 value changes nothing.
    f16_operands: the float32 operands of an f16 GEMM (``operand_element`` HALF, the other operand's)
        read through a cast to f16: read as float32 and rounded to f16 (``vectors.round_to``: the
        cast's conversion), so the GEMM computes what it would on the cast's result.
    """

    def __init__(self, config: GemmConfig, epilogue: Epilogue | TileStore | None = None, name: str = "lz_sgemm",
                 b_row_offsets: Sequence[int] | None = None, pack_b: bool = True, mask_b: bool = False,
                 transpose_a: bool = False, transpose_b: bool = False, edge_vectors: Sequence[int] | None = None,
                 a_k_stride: int = 1, b_col_stride: int = 1, prepacked_a: bool = False,
                 prepacked_b: bool = False, operand_element: ir.Type = FLOAT, bf16_operands: Sequence[str] = (),
                 f16_operands: Sequence[str] = (),
                 b_row_period: int | None = None, a_in_place: "AInPlace | None" = None):
        if a_in_place is not None and (prepacked_a or transpose_a or a_k_stride != 1 or b_row_period is not None
                                       or operand_element != FLOAT or "a" in bf16_operands):
            raise ValueError("an A read in place is float32 in its own layout, neither packed, transposed, "
                             "strided nor rounded, and the k loop steps its period, not B's")
        if transpose_b and (not pack_b or b_row_offsets is not None):
            raise ValueError("a transposed B is packed, and has no row offsets")
        if mask_b and pack_b:
            raise ValueError("mask_b is for a B read in place (pack_b=False)")
        if prepacked_a and (transpose_a or a_k_stride != 1):
            raise ValueError("a pre-packed A has the packed layout, neither transposed nor strided")
        if prepacked_b and (transpose_b or b_col_stride != 1 or b_row_offsets is not None or not pack_b
                            or operand_element != FLOAT):
            raise ValueError("a pre-packed B has the packed float32 layout, neither transposed, strided nor offset")
        if set(bf16_operands) - {"a", "b"} or (bf16_operands and operand_element != FLOAT) or \
                ("a" in bf16_operands and prepacked_a) or ("b" in bf16_operands and prepacked_b):
            raise ValueError(f"bf16_operands {tuple(bf16_operands)}: float32 operands \"a\" or \"b\", rounded as "
                             "they are read, so not pre-packed")
        if set(f16_operands) - {"a", "b"} or f16_operands and (operand_element != HALF or prepacked_a or prepacked_b
                                                                or b_row_offsets is not None or b_row_period is not None
                                                                or a_in_place is not None):
            raise ValueError(f"f16_operands {tuple(f16_operands)}: float32 operands \"a\" or \"b\" of a half GEMM, "
                             "rounded as they are read: not pre-packed, no row offsets, periods or A in place")
        if (a_k_stride != 1 and transpose_a) or (b_col_stride != 1 and (transpose_b or not pack_b or b_row_offsets)):
            raise ValueError("a strided operand is neither transposed nor read in place, nor has row offsets")
        self._check_tile(config)
        self.config = config
        self.epilogue = epilogue
        self.name = name
        self.b_row_offsets = None if b_row_offsets is None else tuple(int(o) for o in b_row_offsets)
        self.pack_b = pack_b
        self.mask_b = mask_b
        self.transpose_a = transpose_a
        self.transpose_b = transpose_b
        self.a_k_stride = a_k_stride
        self.prepacked_a = prepacked_a
        self.prepacked_b = prepacked_b
        self.b_col_stride = b_col_stride
        self.operand_element = operand_element
        self.bf16_operands = frozenset(bf16_operands)
        self.f16_operands = frozenset(f16_operands)
        # how each operand is stored (an f16 GEMM's operand read through its cast is float32)
        self._elements = {g: FLOAT if g in self.f16_operands else operand_element for g in "ab"}
        every_edge = range(1, config.nr_vectors)
        self.edge_vectors = tuple(sorted(set(every_edge if edge_vectors is None else edge_vectors)))
        if not set(self.edge_vectors) <= set(every_edge):
            raise ValueError(f"edge_vectors {edge_vectors} must be narrower than the tile's {config.nr_vectors}")
        self.vector_type = ir.VectorType(FLOAT, config.vector_width)
        # Every vector in packed B starts a multiple of the vector size into an aligned workspace.
        self.vector_bytes = config.vector_width * FLOAT_BYTES
        # ... except B packed by numpy (prepacked_b), whose buffers are aligned to floats only
        self.b_vector_align = FLOAT_BYTES if prepacked_b else self.vector_bytes
        self.epilogue_param_types = [t for arg in self.epilogue_args for t in ARG_KIND_PARAMS[arg.kind]]
        self._b_rows_table = None
        self.b_row_period = b_row_period
        self.a_in_place = a_in_place
        # the k loop's step: T rows of B or values of A at constant offsets (None: one k a step;
        # an A in place then reads its offsets from a table)
        self.k_period = b_row_period
        if a_in_place is not None and config.mr * config.nr_vectors <= A_PERIOD_MAX_ACCUMULATORS:
            self.k_period = a_in_place.period
        self._a_offsets_table = None
        if b_row_period is not None:
            offsets = self.b_row_offsets
            if offsets is None or pack_b or not periodic_offsets(offsets, b_row_period):
                raise ValueError(f"b_row_period {b_row_period} is a period of the b_row_offsets of a B read in place")
            self.b_period_stride = offsets[b_row_period] - offsets[0] if len(offsets) > b_row_period else 0

    @staticmethod
    def _check_tile(config: GemmConfig) -> None:
        """The micro-kernel's accumulators are vector registers: at most MAX_ACCUMULATORS (a
        subclass whose accumulators are AMX tiles, gemm_bf16.py, has its own limit)."""
        accumulators = config.mr * config.nr_vectors
        if accumulators > MAX_ACCUMULATORS:
            raise ValueError(f"an {config.mr}x{config.nr} tile needs {accumulators} accumulator registers")

    @property
    def epilogue_args(self) -> tuple[EpilogueArg, ...]:
        return self.epilogue.args if self.epilogue else ()

    @property
    def stores_tiles(self) -> bool:
        return isinstance(self.epilogue, TileStore)

    def build_module(self, threaded: bool = True) -> ir.Module:
        module = ir.Module(name=self.name)
        self.build_into(module, threaded)
        return module

    def build_into(self, module: ir.Module, threaded: bool = False) -> ir.Function:
        """Define the functions in ``module`` (``<name>_threaded`` too when ``threaded``); returns
        the rectangle function ``<name>``."""
        if self.a_in_place is not None and self.k_period is None:
            table_type = ir.ArrayType(I64, max(1, len(self.a_in_place.offsets)))
            self._a_offsets_table = ir.GlobalVariable(module, table_type, f"{self.name}_a_offsets")
            self._a_offsets_table.global_constant = True
            self._a_offsets_table.linkage = "internal"
            self._a_offsets_table.initializer = ir.Constant(table_type, list(self.a_in_place.offsets) or [0])
        if self.b_row_offsets is not None and self.b_row_period is None:  # a period reads no table
            table_type = ir.ArrayType(I64, max(1, len(self.b_row_offsets)))
            self._b_rows_table = ir.GlobalVariable(module, table_type, f"{self.name}_b_rows")
            self._b_rows_table.global_constant = True
            self._b_rows_table.linkage = "internal"
            self._b_rows_table.initializer = ir.Constant(table_type, list(self.b_row_offsets) or [0])
        pack_a = None if self.prepacked_a or self.a_in_place else self.build_pack_a(module)
        pack_b = self.build_pack_b(module) if self.pack_b and not self.prepacked_b else None
        widths = self.edge_vectors + (self.config.nr_vectors,)
        micro_kernels = {nv: self._build_micro_kernel(module, nv) for nv in widths}
        rectangle_function = self._build_rectangle_function(module, pack_a, pack_b, micro_kernels)
        if threaded:
            self._build_threaded_function(module, rectangle_function)
        return rectangle_function

    def _define(self, module: ir.Module, name: str, params: Sequence[tuple[str, ir.Type]],
                exported: bool = False) -> tuple[ir.Function, ir.IRBuilder, dict[str, ir.Value]]:
        function = ir.Function(module, ir.FunctionType(VOID, [t for _, t in params]), name)
        if not exported:
            function.linkage = "internal"
        function.attributes.add("nounwind")
        for argument, (param_name, _) in zip(function.args, params):
            argument.name = param_name
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        return function, builder, {param_name: arg for arg, (param_name, _) in zip(function.args, params)}

    def _b_row(self, b: ir.IRBuilder, base: ir.Value, ldb: ir.Value, k: ir.Value) -> ir.Value:
        """Address of B[k, 0] relative to ``base`` (B plus a column offset): base + k * ldb, or
        base + b_row_offsets[k]."""
        if self._b_rows_table is None:
            return self._operand_at(b, base, [b.mul(k, ldb)], "b")
        entry = b.gep(self._b_rows_table, [_i64(0), k], source_etype=self._b_rows_table.value_type)
        return self._operand_at(b, base, [b.load(entry, typ=I64)], "b")

    def _operand_at(self, b: ir.IRBuilder, base: ir.Value, offsets: list[ir.Value], operand: str) -> ir.Value:
        """Address of an element of ``operand`` ("a" or "b", as it is stored) ``offsets`` from ``base``."""
        return b.gep(base, offsets, source_etype=self._elements[operand])

    def _load_operand(self, b: ir.IRBuilder, operand: str, address: ir.Value, width: int | None = None,
                      mask: ir.Value | None = None) -> ir.Value:
        """One value (``width`` None) or ``width`` values of ``operand`` ("a" or "b") at ``address``,
        as float32: an f16 operand widens as it is read (vcvtph2ps where the target has F16C),
        exactly; one of ``bf16_operands`` or ``f16_operands`` is rounded to bf16 or f16 (its cast from
        float32, fused)."""
        element = self._elements[operand]
        if width is None:
            value = b.load(address, typ=element)
        else:
            value = vectors.load_vector(b, address, width, mask, HALF_BYTES if element == HALF else FLOAT_BYTES, element)
        if element != FLOAT:
            return b.fpext(value, FLOAT if width is None else ir.VectorType(FLOAT, width))
        if operand in self.f16_operands:
            return vectors.round_to(b, value, "f16")
        return vectors.round_to_bf16(b, value) if operand in self.bf16_operands else value

    # -- packing -------------------------------------------------------------------------------

    def build_pack_a(self, module: ir.Module) -> ir.Function:
        """``<name>_pack_a(a, lda, rows, kc, packed)`` for A as this GEMM stores it (also a kernel
        of its own: ``pack_kernels.py``, a weight the plan packs at run time)."""
        return self._build_pack_a_transposed(module) if self.transpose_a else self._build_pack_a(module)

    def build_pack_b(self, module: ir.Module) -> ir.Function:
        """``<name>_pack_b(b, ldb, pc, kc, cols, packed)`` for B as this GEMM stores it (also a
        kernel of its own: ``pack_kernels.py``)."""
        if self.transpose_b or self.b_col_stride != 1:
            return self._build_pack_b_transposed(module)
        return self._build_pack_b(module)

    def _build_pack_a(self, module: ir.Module) -> ir.Function:
        """packed[s][k][i] = A[s*MR + i, k] for i < rows, else 0; slivers s of MR rows.

        A transpose: W columns of the MR rows at a time are loaded as MR vectors and interleaved
        with one shuffle into W*MR floats in k-major order; the last kc % W columns one by one
        (all of them when A's rows are strided: A[i, k] at ``a[i * lda + k * a_k_stride]``).
        Rows past the block are read from a clamped (valid) row and replaced by zeros, so there is
        no branch in the copy loops.
        """
        mr, w = self.config.mr, self.config.vector_width
        function, b, p = self._define(module, f"{self.name}_pack_a", [
            ("a", PTR), ("lda", I64), ("rows", I64), ("kc", I64), ("packed", PTR)])
        for argument in (p["a"], p["packed"]):
            argument.add_attribute("noalias")
        zero = ir.Constant(FLOAT, 0.0)
        with vectors.counted_loop(b, _i64(0), p["rows"], mr, "row0") as row0:
            last_row = b.sub(p["rows"], _i64(1))
            sliver = b.gep(p["packed"], [b.mul(row0, p["kc"])], source_etype=FLOAT)
            row_pointers, row_valid = [], []
            for i in range(mr):
                row = b.add(row0, _i64(i))
                row_valid.append(b.icmp_signed("<=", row, last_row))
                clamped = vectors.select_min(b, row, last_row)
                row_pointers.append(self._operand_at(b, p["a"], [b.mul(clamped, p["lda"])], "a"))
            kc_vectors = _i64(0)
            if self.a_k_stride == 1:
                zeros = ir.Constant(self.vector_type, [0.0] * w)
                kc_vectors = b.sub(p["kc"], b.srem(p["kc"], _i64(w)))
                with vectors.counted_loop(b, _i64(0), kc_vectors, w, "k_vector") as k0:
                    rows = [b.select(row_valid[i],
                                     self._load_operand(b, "a", self._operand_at(b, row_pointers[i], [k0], "a"), w),
                                     zeros) for i in range(mr)]
                    columns = vectors.interleave(b, rows)  # columns[k * MR + i] = rows[i][k]
                    b.store(columns, b.gep(sliver, [b.mul(k0, _i64(mr))], source_etype=FLOAT), align=FLOAT_BYTES)
            with vectors.counted_loop(b, kc_vectors, p["kc"], 1, "k") as k:
                destination = b.gep(sliver, [b.mul(k, _i64(mr))], source_etype=FLOAT)
                offset = b.mul(k, _i64(self.a_k_stride))
                for i in range(mr):
                    value = self._load_operand(b, "a", self._operand_at(b, row_pointers[i], [offset], "a"))
                    value = b.select(row_valid[i], value, zero)
                    b.store(value, b.gep(destination, [_i64(i)], source_etype=FLOAT))
        b.ret_void()
        return function

    def _build_pack_b(self, module: ir.Module) -> ir.Function:
        """packed[s][k][j] = B[pc + k, s*NR + j] for j < cols, else 0; slivers s of NR columns
        (``b`` points at the block's first column)."""
        w, nr = self.config.vector_width, self.config.nr
        function, b, p = self._define(module, f"{self.name}_pack_b", [
            ("b", PTR), ("ldb", I64), ("pc", I64), ("kc", I64), ("cols", I64), ("packed", PTR)])
        for argument in (p["b"], p["packed"]):
            argument.add_attribute("noalias")
        with vectors.counted_loop(b, _i64(0), p["cols"], nr, "col0") as col0:
            sliver = b.gep(p["packed"], [b.mul(col0, p["kc"])], source_etype=FLOAT)
            source = self._operand_at(b, p["b"], [col0], "b")
            cols_left = b.sub(p["cols"], col0)
            full = b.icmp_signed(">=", cols_left, _i64(nr))
            with b.if_else(full) as (then, otherwise):
                for masked in (False, True):
                    with (otherwise if masked else then):
                        masks = [vectors.lane_mask(b, v * w, cols_left, w) if masked else None
                                 for v in range(self.config.nr_vectors)]
                        self._emit_pack_b_rows(b, p, source, sliver, masks)
        b.ret_void()
        return function

    def _emit_pack_b_rows(self, b: ir.IRBuilder, p: dict[str, ir.Value], source: ir.Value, sliver: ir.Value,
                          masks: list) -> None:
        """The rows of one sliver of ``_build_pack_b``: row k holds B[pc + k, the sliver's columns]
        (``masks``: the columns inside the block); a subclass packs another layout (gemm_bf16.py's
        AMX GEMM: bf16 pair rows)."""
        w, nr = self.config.vector_width, self.config.nr
        with vectors.counted_loop(b, _i64(0), p["kc"], 1, "k") as k:
            row = self._b_row(b, source, p["ldb"], b.add(p["pc"], k))
            destination = b.gep(sliver, [b.mul(k, _i64(nr))], source_etype=FLOAT)
            for v in range(self.config.nr_vectors):
                value = self._load_operand(b, "b", self._operand_at(b, row, [_i64(v * w)], "b"), w, masks[v])
                b.store(value, b.gep(destination, [_i64(v * w)], source_etype=FLOAT), align=self.vector_bytes)

    def _build_pack_a_transposed(self, module: ir.Module) -> ir.Function:
        """packed[s][k][i] = A[s*MR + i, k] for i < rows, else 0, from A stored transposed (``a``
        points at A[ic, pc], ``lda`` is the stored row stride): each k's MR floats are contiguous,
        copied as one masked vector (zeros past the block's rows). Without a vector as wide as
        MR, rows past the block are read at a clamped (valid) row and replaced by zeros."""
        mr, w = self.config.mr, self.config.vector_width
        function, b, p = self._define(module, f"{self.name}_pack_a", [
            ("a", PTR), ("lda", I64), ("rows", I64), ("kc", I64), ("packed", PTR)])
        for argument in (p["a"], p["packed"]):
            argument.add_attribute("noalias")
        zero = ir.Constant(FLOAT, 0.0)
        with vectors.counted_loop(b, _i64(0), p["rows"], mr, "row0") as row0:
            last_row = b.sub(p["rows"], _i64(1))
            sliver = b.gep(p["packed"], [b.mul(row0, p["kc"])], source_etype=FLOAT)
            if mr <= w:
                inside = vectors.lane_mask(b, 0, vectors.select_min(b, _i64(mr), b.sub(p["rows"], row0)), w)
                sliver_lanes = ir.Constant(ir.VectorType(I1, w), [lane < mr for lane in range(w)])
                with vectors.counted_loop(b, _i64(0), p["kc"], 1, "k") as k:
                    source = self._operand_at(b, p["a"], [b.add(b.mul(k, p["lda"]), row0)], "a")
                    values = self._load_operand(b, "a", source, w, inside)
                    vectors.store_vector(b, values, b.gep(sliver, [b.mul(k, _i64(mr))], source_etype=FLOAT), sliver_lanes)
            else:
                columns, valid = [], []
                for i in range(mr):
                    row = b.add(row0, _i64(i))
                    valid.append(b.icmp_signed("<=", row, last_row))
                    columns.append(vectors.select_min(b, row, last_row))
                with vectors.counted_loop(b, _i64(0), p["kc"], 1, "k") as k:
                    source = self._operand_at(b, p["a"], [b.mul(k, p["lda"])], "a")
                    destination = b.gep(sliver, [b.mul(k, _i64(mr))], source_etype=FLOAT)
                    for i in range(mr):
                        value = self._load_operand(b, "a", self._operand_at(b, source, [columns[i]], "a"))
                        b.store(b.select(valid[i], value, zero), b.gep(destination, [_i64(i)], source_etype=FLOAT))
        b.ret_void()
        return function

    def _build_pack_b_transposed(self, module: ir.Module) -> ir.Function:
        """packed[s][k][j] = B[pc + k, s*NR + j] for j < cols, else 0, from B stored transposed
        (``b`` points at B's column jc, a stored row; ``ldb`` is the stored row stride), or with
        strided rows (B[k, j] at ``b[k * ldb + j * b_col_stride]``).

        Each W columns of a sliver are W stored rows: W floats of each along k are loaded as W
        vectors, transposed in registers and stored as W rows of the sliver; the last kc % W
        values of k (all of them for strided rows) one vector at a time, gathered. Columns past
        the block are read at a clamped (valid) column and replaced by zeros."""
        w, nr = self.config.vector_width, self.config.nr
        function, b, p = self._define(module, f"{self.name}_pack_b", [
            ("b", PTR), ("ldb", I64), ("pc", I64), ("kc", I64), ("cols", I64), ("packed", PTR)])
        for argument in (p["b"], p["packed"]):
            argument.add_attribute("noalias")
        strided = self.b_col_stride != 1
        # B[k, j] at column_step * j + k_step * k
        column_step, k_step = (_i64(self.b_col_stride), p["ldb"]) if strided else (p["ldb"], _i64(1))
        zeros = ir.Constant(self.vector_type, [0.0] * w)
        zero = ir.Constant(FLOAT, 0.0)
        last_col = b.sub(p["cols"], _i64(1))
        kc_vectors = _i64(0) if strided else b.sub(p["kc"], b.srem(p["kc"], _i64(w)))
        with vectors.counted_loop(b, _i64(0), p["cols"], nr, "col0") as col0:
            sliver = b.gep(p["packed"], [b.mul(col0, p["kc"])], source_etype=FLOAT)
            for v in range(self.config.nr_vectors):
                rows, valid = [], []
                for i in range(w):
                    col = b.add(col0, _i64(v * w + i))
                    valid.append(b.icmp_signed("<=", col, last_col))
                    offset = b.add(b.mul(vectors.select_min(b, col, last_col), column_step), b.mul(p["pc"], k_step))
                    rows.append(self._operand_at(b, p["b"], [offset], "b"))
                if not strided:
                    with vectors.counted_loop(b, _i64(0), kc_vectors, w, "k_vector") as k0:
                        block = [b.select(valid[i],
                                          self._load_operand(b, "b", self._operand_at(b, rows[i], [k0], "b"), w), zeros)
                                 for i in range(w)]
                        for kk, column in enumerate(vectors.transpose_square(b, block)):
                            at = b.add(b.mul(b.add(k0, _i64(kk)), _i64(nr)), _i64(v * w))
                            b.store(column, b.gep(sliver, [at], source_etype=FLOAT), align=self.vector_bytes)
                with vectors.counted_loop(b, kc_vectors, p["kc"], 1, "k") as k:
                    vector = zeros
                    for i in range(w):
                        value = self._load_operand(b, "b", self._operand_at(b, rows[i], [b.mul(k, k_step)], "b"))
                        vector = b.insert_element(vector, b.select(valid[i], value, zero), ir.Constant(I32, i))
                    at = b.add(b.mul(k, _i64(nr)), _i64(v * w))
                    b.store(vector, b.gep(sliver, [at], source_etype=FLOAT), align=self.vector_bytes)
        b.ret_void()
        return function

    # -- micro-kernel --------------------------------------------------------------------------

    def _build_micro_kernel(self, module: ir.Module, nv: int) -> ir.Function:
        """An MR x ``nv`` vectors tile (``nv`` < NR / W: the last column tile, its other columns
        neither computed nor stored). ``b`` is the packed sliver (k-major, NR floats per k), or
        with ``pack_b=False`` B's column ``col`` itself (rows ``pc + k`` through ``_b_row``)."""
        cfg = self.config
        w, mr = cfg.vector_width, cfg.mr
        name = f"{self.name}_micro_kernel" + ("" if nv == cfg.nr_vectors else f"_{nv}")
        params = [("kc", I64), ("packed_a", PTR), ("b", PTR), ("ldb", I64), ("pc", I64), ("c", PTR), ("ldc", I64),
                  ("row", I64), ("col", I64), ("rows", I64), ("cols", I64),
                  ("first_k_block", I1), ("last_k_block", I1)]
        params += [(f"epilogue{i}", t) for i, t in enumerate(self.epilogue_param_types)]
        function, b, p = self._define(module, name, params)
        function.attributes.add("noinline")
        # A TileStore may store its results to the memory that C's partial sums are in.
        for argument in (p["packed_a"], p["b"]) + (() if self.stores_tiles else (p["c"],)):
            argument.add_attribute("noalias")
        position = 0
        for arg in self.epilogue_args:
            if arg.noalias and arg.kind == "pointer":
                function.args[len(params) - len(self.epilogue_param_types) + position].add_attribute("noalias")
            position += len(ARG_KIND_PARAMS[arg.kind])
        b_masks = [vectors.lane_mask(b, v * w, p["cols"], w) for v in range(nv)] if self.mask_b else [None] * nv
        sums = vectors.opaque_alloca(b, FLOAT, _i64(mr * cfg.nr), "sums") if self.stores_tiles else None
        if sums is not None:
            sums.align = WORKSPACE_ALIGNMENT
        accumulators = self._emit_accumulation(b, p, nv, b_masks)

        epilogue_values = [p[f"epilogue{i}"] for i in range(len(self.epilogue_param_types))]
        with b.if_else(self._is_full_tile(b, p, nv), likely=True) as (then, otherwise):
            with then:
                self._emit_full_tile(b, p, nv, accumulators, epilogue_values, sums)
            with otherwise:
                self._emit_edge_tile(b, p, nv, accumulators, epilogue_values, sums)
        b.ret_void()
        return function

    def _is_full_tile(self, b: ir.IRBuilder, p: dict[str, ir.Value], nv: int) -> ir.Value:
        """Whether the micro-kernel's tile is whole: MR rows and ``nv`` vectors of columns."""
        return b.and_(b.icmp_signed("==", p["rows"], _i64(self.config.mr)),
                      b.icmp_signed("==", p["cols"], _i64(nv * self.config.vector_width)))

    def _emit_full_tile(self, b: ir.IRBuilder, p: dict[str, ir.Value], nv: int, accumulators, epilogue_values,
                        sums) -> None:
        """A whole tile's sums (``accumulators``) to C or the epilogue."""
        for i in range(self.config.mr):
            self._emit_row_update(b, p, accumulators[i], i, None, epilogue_values, sums)
        if sums is not None:
            self._emit_tile_store(b, p, sums, nv * self.config.vector_width, epilogue_values)

    def _emit_edge_tile(self, b: ir.IRBuilder, p: dict[str, ir.Value], nv: int, accumulators, epilogue_values,
                        sums) -> None:
        """An edge tile's sums: its ``rows`` rows and ``cols`` columns, masked."""
        w = self.config.vector_width
        masks = [vectors.lane_mask(b, v * w, p["cols"], w) for v in range(nv)]
        for i in range(self.config.mr):
            with b.if_then(b.icmp_signed("<", _i64(i), p["rows"])):
                self._emit_row_update(b, p, accumulators[i], i, masks, epilogue_values, sums)
        if sums is not None:
            self._emit_tile_store(b, p, sums, None, epilogue_values)

    def _emit_accumulation(self, b: ir.IRBuilder, p: dict[str, ir.Value], nv: int,
                           b_masks: list) -> list[list[ir.Value]]:
        """The tile's sums over the K block, MR rows of ``nv`` vectors: the k loop, whose
        accumulators are loop-carried phis, so they live in vector registers (the AMX subclass,
        gemm_bf16.py, sums in tiles instead)."""
        mr = self.config.mr
        zeros = ir.Constant(self.vector_type, [0.0] * self.config.vector_width)
        entry = b.block
        header = b.append_basic_block("k.header")
        body = b.append_basic_block("k.body")
        done = b.append_basic_block("k.done")
        b.branch(header)
        b.position_at_end(header)
        k = b.phi(I64, name="k")
        k.add_incoming(_i64(0), entry)
        accumulators = [[b.phi(self.vector_type, name=f"acc{i}_{v}") for v in range(nv)] for i in range(mr)]
        for row in accumulators:
            for acc in row:
                acc.add_incoming(zeros, entry)
        b.cbranch(b.icmp_signed("<", k, self._k_steps(b, p["kc"])), body, done)

        b.position_at_end(body)
        if self.k_period is None:
            updated = self._emit_k_step(b, p, k, nv, accumulators, b_masks)
        else:  # T rows of B (or values of A) a step: constant offsets from the step's first
            period = self.k_period
            first = b.mul(k, _i64(period))
            step = b.add(b.udiv(p["pc"], _i64(period)), k)
            a = self.a_in_place
            base, operand = (p["packed_a"], "a") if a else (p["b"], "b")
            rows = self._operand_at(b, base, [b.mul(step, _i64(a.stride if a else self.b_period_stride))], operand)
            offsets = a.offsets if a else self.b_row_offsets
            updated = accumulators
            for t in range(period):
                at = self._operand_at(b, rows, [_i64(offsets[t])], operand)
                updated = self._emit_k_step(b, p, b.add(first, _i64(t)), nv, updated, b_masks,
                                            **({"a_column": at} if a else {"b_row": at}))
        for i in range(mr):
            for v in range(nv):
                accumulators[i][v].add_incoming(updated[i][v], b.block)
        k.add_incoming(b.add(k, _i64(1)), b.block)
        b.branch(header)
        b.position_at_end(done)
        return accumulators

    def _k_steps(self, b: ir.IRBuilder, kc: ir.Value) -> ir.Value:
        """Steps of the micro-kernel's k loop for a block of depth ``kc``: one per k here (per
        ``b_row_period`` rows with one)."""
        return kc if self.k_period is None else b.udiv(kc, _i64(self.k_period))

    def _emit_k_step(self, b: ir.IRBuilder, p: dict[str, ir.Value], k: ir.Value, nv: int,
                     accumulators: list[list[ir.Value]], b_masks: list, b_row: ir.Value | None = None,
                     a_column: ir.Value | None = None) -> list[list[ir.Value]]:
        """Step ``k`` of the micro-kernel: the accumulators after the rank-1 update
        broadcast(A[i, k]) * B[k, j:j+W] (a subclass with another packed layout, gemm_bf16.py,
        replaces this and ``_k_steps``); ``b_row``: B[k, 0]'s address when the caller knows it;
        ``a_column``: A's MR values of step k (an A read in place)."""
        cfg = self.config
        w, mr = cfg.vector_width, cfg.mr
        if self.pack_b:
            b_row = b.gep(p["b"], [b.mul(k, _i64(cfg.nr))], source_etype=FLOAT)
            b_vectors = [vectors.load_vector(b, b.gep(b_row, [_i64(v * w)], source_etype=FLOAT), w, b_masks[v],
                                             self.b_vector_align) for v in range(nv)]
        else:
            b_row = b_row or self._b_row(b, p["b"], p["ldb"], b.add(p["pc"], k))
            b_vectors = [self._load_operand(b, "b", self._operand_at(b, b_row, [_i64(v * w)], "b"), w, b_masks[v])
                         for v in range(nv)]
        if a_column is None and self._a_offsets_table is not None:  # A in place, its offsets from the table
            table = self._a_offsets_table
            entry = b.gep(table, [_i64(0), b.add(p["pc"], k)], source_etype=table.value_type)
            a_column = b.gep(p["packed_a"], [b.load(entry, typ=I64)], source_etype=FLOAT)
        elif a_column is None:
            a_column = b.gep(p["packed_a"], [b.mul(k, _i64(mr))], source_etype=FLOAT)
        updated = []
        for i in range(mr):
            a_value = b.load(b.gep(a_column, [_i64(i)], source_etype=FLOAT), typ=FLOAT)
            a_broadcast = vectors.splat(b, a_value, w)
            # fmuladd: one FMA where the target has FMA, else a multiply and an add (llvm.fma
            # would be a call of the correctly rounded fmaf per element, 100x slower)
            updated.append([vectors.call_intrinsic(b, "llvm.fmuladd", a_broadcast, b_vectors[v], accumulators[i][v])
                            for v in range(nv)])
        return updated

    def _emit_row_update(self, b: ir.IRBuilder, p: dict[str, ir.Value], row_accumulators: list[ir.Value],
                         i: int, masks: list[ir.Value] | None, epilogue_values: list[ir.Value],
                         sums: ir.Value | None) -> None:
        """C[row+i, col:col+NR] = (C[...] if not the first K block) + acc, then the epilogue on the
        last K block; masked when ``masks`` is given. With a TileStore, the last K block's values
        go to row i of ``sums`` instead."""
        w, nv = self.config.vector_width, len(row_accumulators)
        row = b.add(p["row"], _i64(i))
        c_row = b.gep(p["c"], [b.add(b.mul(row, p["ldc"]), p["col"])], source_etype=FLOAT)
        addresses = [b.gep(c_row, [_i64(v * w)], source_etype=FLOAT) for v in range(nv)]
        lane_masks = masks or [None] * nv

        values = list(row_accumulators)
        before = b.block
        with b.if_then(b.not_(p["first_k_block"])):
            summed = [b.fadd(values[v], vectors.load_vector(b, addresses[v], w, lane_masks[v])) for v in range(nv)]
            summed_block = b.block
        values = [self._phi(b, (values[v], before), (summed[v], summed_block)) for v in range(nv)]

        if sums is not None:
            with b.if_else(p["last_k_block"]) as (last, partial):
                with last:
                    for v in range(nv):
                        address = b.gep(sums, [_i64(i * self.config.nr + v * w)], source_etype=FLOAT)
                        b.store(values[v], address, align=self.vector_bytes)
                with partial:
                    for v in range(nv):
                        vectors.store_vector(b, values[v], addresses[v], lane_masks[v])
            return

        if self.epilogue is not None:
            before = b.block
            with b.if_then(p["last_k_block"]):
                out_args = self._epilogue_arg_values(epilogue_values)
                transformed = []
                for v in range(nv):
                    col = b.add(p["col"], _i64(v * w))
                    out = OutputVector(b, row, col, lane_masks[v], w, out_args)
                    transformed.append(self.epilogue.emit(out, values[v]))
                transformed_block = b.block
            values = [self._phi(b, (values[v], before), (transformed[v], transformed_block)) for v in range(nv)]

        for v in range(nv):
            vectors.store_vector(b, values[v], addresses[v], lane_masks[v])

    def _emit_tile_store(self, b: ir.IRBuilder, p: dict[str, ir.Value], sums: ir.Value, full_cols: int | None,
                         epilogue_values: list[ir.Value]) -> None:
        """``full_cols``: the micro-kernel's width when the tile is whole, else None."""
        cfg = self.config
        full = full_cols is not None
        with b.if_then(p["last_k_block"]):
            rows, cols = (_i64(cfg.mr), _i64(full_cols)) if full else (p["rows"], p["cols"])
            self.epilogue.emit(OutputTile(b, p["row"], p["col"], rows, cols, sums, cfg.mr, cfg.nr, full,
                                          self._epilogue_arg_values(epilogue_values)))

    @staticmethod
    def _phi(b: ir.IRBuilder, *incoming: tuple[ir.Value, ir.Block]) -> ir.Value:
        phi = b.phi(incoming[0][0].type)
        for value, block in incoming:
            phi.add_incoming(value, block)
        return phi

    def _epilogue_arg_values(self, values: list[ir.Value]) -> dict[str, tuple[ir.Value, ...]]:
        grouped, position = {}, 0
        for arg in self.epilogue_args:
            count = len(ARG_KIND_PARAMS[arg.kind])
            grouped[arg.name] = tuple(values[position:position + count])
            position += count
        return grouped

    # -- the loop nest -------------------------------------------------------------------------

    def _build_rectangle_function(self, module: ir.Module, pack_a: ir.Function, pack_b: ir.Function | None,
                                  micro_kernels: dict[int, ir.Function]) -> ir.Function:
        cfg = self.config
        params = list(GEMM_PARAMS) + [(f"epilogue{i}", t) for i, t in enumerate(self.epilogue_param_types)]
        function, b, p = self._define(module, self.name, params, exported=True)
        self._enter_rectangle(b)
        epilogue_values = [p[f"epilogue{i}"] for i in range(len(self.epilogue_param_types))]
        packed_a = p["workspace"]
        packed_b = b.gep(p["workspace"], [_i64(cfg.packed_a_floats)], source_etype=FLOAT)

        with vectors.counted_loop(b, p["n_begin"], p["n_end"], cfg.nc, "jc") as jc:
            nc = vectors.select_min(b, _i64(cfg.nc), b.sub(p["n_end"], jc))
            # pc runs at least once, so K == 0 still stores epilogue(0).
            pc_entry = b.block
            pc_body = b.append_basic_block("pc.body")
            pc_exit = b.append_basic_block("pc.exit")
            b.branch(pc_body)
            b.position_at_end(pc_body)
            pc = b.phi(I64, name="pc")
            pc.add_incoming(_i64(0), pc_entry)
            kc = vectors.select_min(b, _i64(cfg.kc), b.sub(p["K"], pc))
            pc_next = b.add(pc, kc)
            first_k_block = b.icmp_signed("==", pc, _i64(0))
            last_k_block = b.icmp_signed(">=", pc_next, p["K"])
            b_column_step = p["ldb"] if self.transpose_b else _i64(self.b_col_stride)
            b_columns = self._operand_at(b, p["B"], [b.mul(jc, b_column_step)], "b")
            if pack_b is not None:
                b.call(pack_b, [b_columns, p["ldb"], pc, kc, nc, packed_b])
                self._after_pack_b(b, packed_b, nc, kc)

            with vectors.counted_loop(b, p["m_begin"], p["m_end"], cfg.mc, "ic") as ic:
                mc = vectors.select_min(b, _i64(cfg.mc), b.sub(p["m_end"], ic))
                if self.a_in_place:  # the micro-kernel reads A where it lies
                    a_slivers = p["A"]
                elif self.prepacked_a:  # packed when the plan was built: lda is A's padded row count
                    a_slivers = b.gep(p["A"], [b.add(b.mul(pc, p["lda"]), b.mul(ic, kc))], source_etype=FLOAT)
                else:
                    if self.transpose_a:
                        a_offset = b.add(b.mul(pc, p["lda"]), ic)
                    else:
                        a_offset = b.add(b.mul(ic, p["lda"]), b.mul(pc, _i64(self.a_k_stride)))
                    a_slivers = packed_a
                    b.call(pack_a, [self._operand_at(b, p["A"], [a_offset], "a"), p["lda"], mc, kc, packed_a])
                a_slivers = self._after_pack_a(b, a_slivers, packed_a, mc, kc)
                with vectors.counted_loop(b, _i64(0), nc, cfg.nr, "jr") as jr:
                    if self.prepacked_b:
                        b_sliver = b.gep(p["B"], [b.add(b.mul(b.add(jc, jr), p["ldb"]), b.mul(pc, _i64(cfg.nr)))],
                                         source_etype=FLOAT)
                    elif pack_b is not None:
                        b_sliver = b.gep(packed_b, [b.mul(jr, kc)], source_etype=FLOAT)
                    else:
                        b_sliver = self._operand_at(b, b_columns, [jr], "b")
                    cols = vectors.select_min(b, _i64(cfg.nr), b.sub(nc, jr))
                    col = b.add(jc, jr)

                    def row_tiles(micro_kernel):
                        with vectors.counted_loop(b, _i64(0), mc, cfg.mr, "ir") as ir_:
                            a_sliver = self._a_sliver(b, a_slivers, b.add(ic, ir_), ir_, kc)
                            rows = vectors.select_min(b, _i64(cfg.mr), b.sub(mc, ir_))
                            b.call(micro_kernel, [kc, a_sliver, b_sliver, p["ldb"], pc, p["C"], p["ldc"],
                                                  b.add(ic, ir_), col, rows, cols, first_k_block, last_k_block]
                                   + epilogue_values)

                    self._emit_by_width(b, cols, micro_kernels, row_tiles)
            pc.add_incoming(pc_next, b.block)
            b.cbranch(b.icmp_signed("<", pc_next, p["K"]), pc_body, pc_exit)
            b.position_at_end(pc_exit)
        self._leave_rectangle(b)
        b.ret_void()
        return function

    def _enter_rectangle(self, b: ir.IRBuilder) -> None:
        """Emitted where the rectangle function starts: nothing here (the AMX subclass configures
        its tiles)."""

    def _leave_rectangle(self, b: ir.IRBuilder) -> None:
        """Emitted before the rectangle function returns: nothing here (the AMX subclass releases
        its tiles)."""

    def _after_pack_b(self, b: ir.IRBuilder, packed_b: ir.Value, nc: ir.Value, kc: ir.Value) -> None:
        """Called after B's block of ``nc`` columns and depth ``kc`` is packed: nothing here (a
        subclass converts it to its own layout)."""

    def _a_sliver(self, b: ir.IRBuilder, a_slivers: ir.Value, row: ir.Value, row_in_block: ir.Value,
                  kc: ir.Value) -> ir.Value:
        """Where the micro-kernel reads the A values of rows ``row`` (``row_in_block`` in its block):
        a packed sliver, or A in place at ``row + (row // run) * gap``."""
        a = self.a_in_place
        if a is None:
            return b.gep(a_slivers, [b.mul(row_in_block, kc)], source_etype=FLOAT)
        return b.gep(a_slivers, [b.add(row, b.mul(b.udiv(row, _i64(a.run)), _i64(a.gap)))], source_etype=FLOAT)

    def _after_pack_a(self, b: ir.IRBuilder, a_slivers: ir.Value, packed_a: ir.Value, mc: ir.Value,
                      kc: ir.Value) -> ir.Value:
        """The slivers the micro-kernel reads for A's block of ``mc`` rows: ``a_slivers`` (packed
        just now into ``packed_a``, or packed when the plan was built)."""
        return a_slivers

    def _emit_by_width(self, b: ir.IRBuilder, cols: ir.Value, micro_kernels: dict[int, ir.Function],
                       emit: Callable[[ir.Function], None]) -> None:
        """``emit(kernel)`` with the narrowest micro-kernel whose tile holds ``cols`` columns: an
        edge tile of a few columns computes a vector or two, not NR columns."""
        widths = sorted(micro_kernels)
        if len(widths) == 1:
            emit(micro_kernels[widths[0]])
            return
        with b.if_else(b.icmp_signed("<=", cols, _i64(widths[0] * self.config.vector_width))) as (narrow, wider):
            with narrow:
                emit(micro_kernels[widths[0]])
            with wider:
                self._emit_by_width(b, cols, {nv: micro_kernels[nv] for nv in widths[1:]}, emit)

    # -- threads -------------------------------------------------------------------------------

    def _build_threaded_function(self, module: ir.Module, rectangle_function: ir.Function) -> ir.Function:
        """``<name>_threaded``: the rectangles on their own POSIX threads, the first on the caller's.

        Parameters: the rectangle function's, with (m_begin, m_end, n_begin, n_end, workspace)
        replaced by ``num_tasks``, ``rectangles`` (i64[num_tasks][4]) and ``workspaces``
        (ptr[num_tasks]). A thread that cannot be created runs its task on the caller's thread.
        """
        fixed = list(GEMM_PARAMS[:7])
        params = fixed + [("num_tasks", I64), ("rectangles", PTR), ("workspaces", PTR)]
        params += [(f"epilogue{i}", t) for i, t in enumerate(self.epilogue_param_types)]
        # One task's arguments, in the rectangle function's order.
        task_type = ir.LiteralStructType([t for t in rectangle_function.ftype.args])
        pthread_create = ir.Function(module, ir.FunctionType(I32, [PTR, PTR, PTR, PTR]), "pthread_create")
        pthread_join = ir.Function(module, ir.FunctionType(I32, [I64, PTR]), "pthread_join")

        # void* task_main(void* task): unpack the arguments, compute the rectangle.
        task_main = ir.Function(module, ir.FunctionType(PTR, [PTR]), f"{self.name}_task_main")
        task_main.linkage = "internal"
        b = ir.IRBuilder(task_main.append_basic_block("entry"))
        task = task_main.args[0]
        arguments = [b.load(vectors.field_address(b, task, task_type, i), typ=field_type)
                     for i, field_type in enumerate(task_type.elements)]
        b.call(rectangle_function, arguments)
        b.ret(ir.Constant(PTR, None))

        function, b, p = self._define(module, f"{self.name}_threaded", params, exported=True)
        num_tasks = p["num_tasks"]
        tasks = vectors.opaque_alloca(b, task_type, num_tasks, "tasks")
        thread_ids = vectors.opaque_alloca(b, I64, num_tasks, "thread_ids")
        started = vectors.opaque_alloca(b, I1, num_tasks, "started")
        fixed_values = [p[name] for name, _ in fixed]
        epilogue_values = [p[f"epilogue{i}"] for i in range(len(self.epilogue_param_types))]
        with vectors.counted_loop(b, _i64(0), num_tasks, 1, "fill") as t:
            rectangle = b.gep(p["rectangles"], [b.mul(t, _i64(4))], source_etype=I64)
            bounds = [b.load(b.gep(rectangle, [_i64(j)], source_etype=I64), typ=I64) for j in range(4)]
            workspace = b.load(b.gep(p["workspaces"], [t], source_etype=PTR), typ=PTR)
            task = b.gep(tasks, [t], source_etype=task_type)
            for i, value in enumerate(fixed_values + bounds + [workspace] + epilogue_values):
                b.store(value, vectors.field_address(b, task, task_type, i))
        with vectors.counted_loop(b, _i64(1), num_tasks, 1, "spawn") as t:
            task = b.gep(tasks, [t], source_etype=task_type)
            status = b.call(pthread_create, [b.gep(thread_ids, [t], source_etype=I64), ir.Constant(PTR, None),
                                             task_main, task])
            ok = b.icmp_signed("==", status, ir.Constant(I32, 0))
            b.store(ok, b.gep(started, [t], source_etype=I1))
            with b.if_then(b.not_(ok)):
                b.call(task_main, [task])
        b.call(task_main, [tasks])
        with vectors.counted_loop(b, _i64(1), num_tasks, 1, "join") as t:
            with b.if_then(b.load(b.gep(started, [t], source_etype=I1), typ=I1)):
                b.call(pthread_join, [b.load(b.gep(thread_ids, [t], source_etype=I64), typ=I64),
                                      ir.Constant(PTR, None)])
        b.ret_void()
        return function


def build_sgemm_module(config: GemmConfig | None = None, epilogue: Epilogue | None = None,
                       name: str = "lz_sgemm") -> ir.Module:
    """The LLVM IR module of a float32 GEMM (see ``SgemmGenerator`` for what it defines)."""
    return SgemmGenerator(config or GemmConfig.for_target(), epilogue, name).build_module()


