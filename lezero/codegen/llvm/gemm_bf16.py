"""The bf16 GEMM on AVX-512 BF16: ``vdpbf16ps`` on packed bf16 pairs, float32 accumulators.

A bf16 value is float32 storage holding a bf16 value (the IR's bf16), so its high 16 bits *are*
the bf16 number and truncating the low ones is exact.  ``vdpbf16ps acc, a, b`` adds, in each of its
float32 lanes, the products of two bf16 pairs: ``acc += a[2l+1] * b[2l+1]`` then ``+= a[2l] *
b[2l]``, each product exact in float32 (8-bit mantissas) and each sum rounded to nearest even: the
reference's float32 accumulation of exact products, with k and k + 1 added in the other order.
So one instruction does the work of two FMAs.

``Bf16PairGemmGenerator`` is gemm.py's ``SgemmGenerator`` with the same blocking, tiles, edge
handling and epilogue, but its micro-kernel steps over *pairs* of k:

- packed B: the block is packed as float32 slivers (every layout gemm.py packs: transposed,
  strided, a conv's row offsets), then each sliver is turned into pairs in place
  (``<name>_pairs_b``): pair row p holds ``(B[2p, j], B[2p+1, j])`` for the NR columns j, one
  32-bit word each, a zero for the missing half of an odd depth.  Row p is written after rows 2p
  and 2p + 1 are read, so the sliver's own memory holds it, at the same offsets.
- packed A: the same for its MR-tall slivers (``<name>_pairs_a``), word ``(A[i, 2p], A[i, 2p+1])``
  at ``p * MR + i``; an A packed when the plan was built (constant weights, float32 layout) is
  converted from there into the workspace's packed A, which it leaves unused otherwise.
- B read in place (a few rows, or a conv's direct mode): the micro-kernel loads rows 2p and 2p + 1
  and makes the pair words in registers (a shift, an and, an or per vector).
- step p: per row i, the pair word of A broadcast to 16 lanes, and one ``vdpbf16ps`` per B vector.

Denormals: ``vdpbf16ps`` reads denormal inputs as zero and flushes a denormal result to zero
(whatever MXCSR says; checked on Zen 4), while the reference (numpy's float32) keeps them.  So a
bf16 contraction on such a CPU differs from the reference where the inputs or the float32 sum are
below 2^-126 in magnitude, by less than 2^-126 in each product and sum: oneDNN's bf16 kernels
(torch's), which use the same instruction, do the same.

Only targets with ``avx512bf16`` take it, for tiles of 16-float vectors or (with AVX-512VL) 8-float
ones (``pairs_available``); the others run
the float32 GEMM on the bf16 values (contraction_gemm.py), whose products and sums are the same.

``AmxBf16GemmGenerator`` is the same GEMM on AMX tiles (``amx-bf16``: Sapphire Rapids), where B is
packed (contraction_gemm's ``_amx_config``): ``tdpbf16ps`` on a micro-tile of 2 x 2 tiles of 16 x 16
float32 sums, B's slivers paired as above, A's rewritten as tile rows (its docstring).
"""
from __future__ import annotations

from llvmlite import ir

from lezero.codegen.llvm import amx, gemm, vectors
from lezero.codegen.llvm.ir_types import FLOAT, I32, I64, PTR
from lezero.codegen.llvm.loops import declare
from lezero.codegen.errors import TargetError
from lezero.codegen.llvm.target import CpuTarget, cpu_target

# vdpbf16ps by float32 lanes: 512-bit (32 bf16 values in pairs), and 256-bit (AVX-512VL) for a
# tile of 8-float vectors (contraction_gemm's narrow conv tile on Zen 4)
DPBF16PS = {16: "llvm.x86.avx512bf16.dpbf16ps.512", 8: "llvm.x86.avx512bf16.dpbf16ps.256"}
HIGH_HALF = 0xFFFF0000  # the bf16 bits of a float32 word


class BFloatType(ir.types._BaseFloatType):
    """LLVM's ``bfloat`` (llvmlite has none): the element type of vdpbf16ps's operands."""

    null = "0.0"
    intrinsic_name = "bf16"

    def __str__(self):
        return "bfloat"


BFloatType._create_instance()


def pairs_available(cpu: CpuTarget, config: gemm.GemmConfig) -> bool:
    """Whether a bf16 GEMM for ``cpu`` with ``config``'s vectors runs on vdpbf16ps: not on a core
    with AMX-BF16 (Sapphire Rapids class, ``amx_class``), whose vdpbf16ps issues on one port, half
    the rate of its FMAs, so that the float32 GEMM on the same values is faster there (and the
    GEMMs that can take tiles do), also where its tiles are out of reach (a VM that hides them).
    SPR, 1 thread, kernel alone, us vdpbf16ps (code for SPR or cooperlake) / float32: 6x768x3072
    600 / 432, 4x768x768 111 / 89, conv 3x3 1->16 28x28 batch 32 172 / 108, 1024^3 (B packed) 22600
    / 13850; an Emerald Rapids VM without AMX, 2 threads, casts fused, bf16 / f32 GEMM time:
    1024^3 1.85, 128x768x3072 1.70."""
    width = config.vector_width
    return ("avx512bf16" in cpu.features and not amx_class(cpu)
            and (width == 16 or (width == 8 and "avx512vl" in cpu.features)))


def amx_class(cpu: CpuTarget) -> bool:
    """Whether ``cpu`` is a core with AMX-BF16 (its name's features; the host's own features lack
    AMX where the OS or a VM withholds the tiles)."""
    if amx_available(cpu):
        return True
    try:
        return amx_available(cpu_target(cpu.cpu, cpu.triple))
    except TargetError:  # a host name lezero does not list
        return False


def _i64(value: int) -> ir.Constant:
    return ir.Constant(I64, value)


def pair_words(b: ir.IRBuilder, low: ir.Value, high: ir.Value) -> ir.Value:
    """i32 words (``high``'s bf16 bits, ``low``'s): the pairs (low, high) of two float32 values or
    vectors holding bf16 values (the low bits, zero, are dropped)."""
    if isinstance(low.type, ir.VectorType):
        word_type = ir.VectorType(I32, low.type.count)
        mask, shift = (ir.Constant(word_type, [c] * low.type.count) for c in (HIGH_HALF, 16))
    else:
        word_type, mask, shift = I32, ir.Constant(I32, HIGH_HALF), ir.Constant(I32, 16)
    return b.or_(b.and_(b.bitcast(high, word_type), mask), b.lshr(b.bitcast(low, word_type), shift))


class Bf16PairGemmGenerator(gemm.SgemmGenerator):
    """``SgemmGenerator`` whose micro-kernel runs vdpbf16ps on bf16 pairs (module docstring).
    Its config must have 16- or 8-float vectors (``pairs_available``)."""

    def __init__(self, config: gemm.GemmConfig, *args, **kwargs):
        if config.vector_width not in DPBF16PS:
            raise ValueError(f"vdpbf16ps has no form for {config.vector_width}-float vectors")
        super().__init__(config, *args, **kwargs)
        self.words = ir.VectorType(I32, config.vector_width)
        self.bf16_pairs = ir.VectorType(BFloatType(), 2 * config.vector_width)
        self._pairs_a = self._pairs_b = None

    def build_into(self, module: ir.Module, threaded: bool = False) -> ir.Function:
        self._pairs_a = self._build_pairs(module, "a", self.config.mr)
        self._pairs_b = self._build_pairs(module, "b", self.config.nr)
        return super().build_into(module, threaded)

    def _build_pairs(self, module: ir.Module, operand: str, width: int) -> ir.Function:
        """``<name>_pairs_<operand>(source, packed, count, kc)``: the float32 slivers (``width``
        values per k, ``kc`` k's, ``count`` values of the block's rows or columns) at ``source``
        as pair words at ``packed``, sliver for sliver at the same offsets; ``packed`` may be
        ``source``."""
        function, b, p = self._define(module, f"{self.name}_pairs_{operand}", [
            ("source", PTR), ("packed", PTR), ("count", I64), ("kc", I64)])
        pairs = b.lshr(b.add(p["kc"], _i64(1)), _i64(1))
        w = self.config.vector_width
        chunk = w if width % w == 0 else 1
        value_type = ir.VectorType(FLOAT, chunk) if chunk > 1 else FLOAT
        zeros = ir.Constant(value_type, [0.0] * chunk if chunk > 1 else 0.0)
        with vectors.counted_loop(b, _i64(0), p["count"], width, "first") as first:
            offset = b.mul(first, p["kc"])
            source = b.gep(p["source"], [offset], source_etype=FLOAT)
            packed = b.gep(p["packed"], [offset], source_etype=FLOAT)
            with vectors.counted_loop(b, _i64(0), pairs, 1, "pair") as pair:
                low_row = b.gep(source, [b.mul(pair, _i64(2 * width))], source_etype=FLOAT)
                has_high = b.icmp_signed("<", b.add(b.mul(pair, _i64(2)), _i64(1)), p["kc"])
                out_row = b.gep(packed, [b.mul(pair, _i64(width))], source_etype=FLOAT)
                for j in range(0, width, chunk):
                    low = b.load(b.gep(low_row, [_i64(j)], source_etype=FLOAT), typ=value_type, align=4)
                    # an odd depth's last row has no second half: a zero (read from the row itself)
                    high_address = b.select(has_high, b.gep(low_row, [_i64(width + j)], source_etype=FLOAT),
                                            b.gep(low_row, [_i64(j)], source_etype=FLOAT))
                    high = b.select(has_high, b.load(high_address, typ=value_type, align=4), zeros)
                    b.store(pair_words(b, low, high), b.gep(out_row, [_i64(j)], source_etype=FLOAT), align=4)
        b.ret_void()
        return function

    def _after_pack_b(self, b, packed_b, nc, kc) -> None:
        b.call(self._pairs_b, [packed_b, packed_b, nc, kc])

    def _after_pack_a(self, b, a_slivers, packed_a, mc, kc):
        b.call(self._pairs_a, [a_slivers, packed_a, mc, kc])
        return packed_a

    def _k_steps(self, b, kc):
        return b.lshr(b.add(kc, _i64(1)), _i64(1))

    def _emit_k_step(self, b, p, k, nv, accumulators, b_masks):
        """Pair step ``k``: k = 2k and 2k + 1 of the block, one vdpbf16ps per accumulator."""
        cfg = self.config
        w, mr = cfg.vector_width, cfg.mr
        if self.pack_b:
            row = b.gep(p["b"], [b.mul(k, _i64(cfg.nr))], source_etype=FLOAT)
            b_words = [b.load(b.gep(row, [_i64(v * w)], source_etype=FLOAT), typ=self.words, align=self.vector_bytes)
                       for v in range(nv)]
        else:  # B's rows in place: rows pc + 2k and pc + 2k + 1 (none past the block: zeros)
            low_k = b.add(p["pc"], b.mul(k, _i64(2)))
            has_high = b.icmp_signed("<", b.add(b.mul(k, _i64(2)), _i64(1)), p["kc"])
            low_row = self._b_row(b, p["b"], p["ldb"], low_k)
            high_row = self._b_row(b, p["b"], p["ldb"], b.select(has_high, b.add(low_k, _i64(1)), low_k))
            zeros = ir.Constant(self.vector_type, [0.0] * w)
            b_words = []
            for v in range(nv):
                low = self._load_operand(b, "b", b.gep(low_row, [_i64(v * w)], source_etype=FLOAT), w, b_masks[v])
                high = self._load_operand(b, "b", b.gep(high_row, [_i64(v * w)], source_etype=FLOAT), w, b_masks[v])
                b_words.append(pair_words(b, low, b.select(has_high, high, zeros)))
        b_pairs = [b.bitcast(words, self.bf16_pairs) for words in b_words]
        a_column = b.gep(p["packed_a"], [b.mul(k, _i64(mr))], source_etype=FLOAT)
        dot = declare(b.module, DPBF16PS[w], self.vector_type, [self.vector_type, self.bf16_pairs, self.bf16_pairs])
        updated = []
        for i in range(mr):
            a_word = b.load(b.gep(a_column, [_i64(i)], source_etype=FLOAT), typ=I32)
            a_pairs = b.bitcast(vectors.splat(b, a_word, w), self.bf16_pairs)
            updated.append([b.call(dot, [accumulators[i][v], a_pairs, b_pairs[v]]) for v in range(nv)])
        return updated


# AMX (amx.py): tdpbf16ps on tiles of AMX_ROWS rows; a C tile holds 16 x 16 float32 sums, an A tile
# 16 rows of 16 pair words (32 k), a B tile 16 pair rows of 16 columns (the pair layout above).  The
# micro-tile is 2 x 2 C tiles (32 x 32) with two A and two B tiles: all eight, 4 loads per 4 dots.
AMX_ROWS = 16
AMX_CHUNK = 2 * AMX_ROWS  # k of one tile dot
AMX_TILE = (16, 2 * AMX_ROWS, 2)  # (vector_width, mr, nr_vectors) of the GEMM on AMX
AMX_ROW_BYTES = 64
# A K block this deep or deeper holds its pair rows padded to whole tiles inside its own slivers:
# 16 * ceil(kc / 32) <= kc
AMX_MIN_DEPTH = AMX_ROWS


# The AMX GEMM's K and M blocks: one A sliver (32 rows x 256 k: 16 KiB of pairs) stays in L1 while
# every B sliver of the N block (256 k x 32 columns each, from L2) passes it: the tile loads, not
# the dots, bound the micro-kernel (a dot takes 16 cycles and needs 1 KiB of tiles).  Partial sums
# between K blocks stay tiles (loaded from and stored to C).  Measured (SPR, 1 thread, kernel alone,
# alternating, load ~2), GF/s with the target's blocks (kc 512, mc 256) -> these: 1024^3 547 -> 748,
# 128x768x3072 321 -> 358, 512x3072x768 507 -> 626, 64x784x256 307 -> 348; kc 128 498, 192 621,
# 320 752 (1024^3); mc 64 703.
AMX_KC, AMX_MC = 256, 2 * AMX_ROWS


def amx_host_config(cpu: CpuTarget) -> gemm.GemmConfig:
    """The blocking for AMX_TILE on ``cpu``: AMX_KC, AMX_MC, the N block of its caches."""
    width, mr, nr_vectors = AMX_TILE
    nr = width * nr_vectors
    nc = max(nr, gemm.GemmConfig.for_target(cpu, AMX_TILE).nc // nr * nr)
    return gemm.GemmConfig(width, mr, nr_vectors, AMX_KC, AMX_MC, nc)


def _c_tile(i: int, j: int) -> int:
    return 2 * i + j  # tiles 0-3; A tiles 4, 5 (rows i), B tiles 6, 7 (columns j)


def _chunks(b: ir.IRBuilder, kc: ir.Value) -> ir.Value:
    """Tile dots over a K block of depth ``kc``: ceil(kc / AMX_CHUNK)."""
    return b.udiv(b.add(kc, _i64(AMX_CHUNK - 1)), _i64(AMX_CHUNK))


def amx_available(cpu: CpuTarget) -> bool:
    """Whether a bf16 GEMM for ``cpu`` may run on AMX tiles (``amx-bf16``)."""
    return amx.has_amx(cpu, "bf16")


def amx_fits(config: gemm.GemmConfig, k: int) -> bool:
    """Whether a GEMM of depth ``k`` blocked by ``config`` runs on AMX tiles: the blocking has the
    AMX tile, and every K block is at least AMX_MIN_DEPTH deep."""
    if (config.vector_width, config.mr, config.nr_vectors) != AMX_TILE or k < AMX_MIN_DEPTH:
        return False
    last = k - (-(-k // config.kc) - 1) * config.kc
    return min(config.kc, last) >= AMX_MIN_DEPTH


class AmxBf16GemmGenerator(Bf16PairGemmGenerator):
    """The bf16 GEMM on AMX: ``tdpbf16ps`` on 2 x 2 tiles of 16 x 16 float32 sums per micro-tile
    (config ``AMX_TILE``: 32 x 32), the blocking, edges and epilogue of ``SgemmGenerator``.

    - B is packed and paired as for vdpbf16ps (``<name>_pairs_b``: pair row p of a sliver holds
      its 32 columns' words, NR words apart: B tile j of chunk c is 16 rows at ``16 c NR + 16 j``,
      a row stride of 128 bytes); the pair rows past the block's depth, up to whole chunks of 16,
      are zeros, written in the sliver's unused room (every K block is at least AMX_MIN_DEPTH deep:
      ``amx_fits``).
    - A is packed by gemm.py (every layout; or pre-packed) as k-major slivers, then rewritten
      (``<name>_amx_a``) as tile rows: chunk c of a sliver is its 32 rows of 16 pair words, row i's
      word p = (A[i, 32c + 2p], A[i, 32c + 2p + 1]), zero past the depth; an A tile is 16 of those
      rows, 64 bytes apart.  A pre-packed A is converted into the workspace's packed A.
    - the micro-kernel starts its C tiles from zero (or, a whole tile after the first K block,
      from C's partial sums, loaded as tiles), runs ceil(kc / 32) chunks of 2 A and ``nv`` B tile
      loads and 2 ``nv`` dots, and stores the tiles to C (partial sums) or to the TileStore's tile
      for the epilogue; an edge tile goes through a stack tile into gemm.py's masked row updates.
    - blocks of AMX_KC x AMX_MC: one A sliver stays in L1 while B's slivers pass (AMX_KC).
    - the rectangle function configures the tiles (all 16 rows x 64 bytes) on entry and releases
      them before it returns: each work item's thread has its own tile state.

    Numerics: tdpbf16ps adds each pair's two exact products to the float32 sum, rounded to nearest
    even, k in order within a chunk; denormal inputs read as zero and denormal sums flush to zero
    (whatever MXCSR says), as vdpbf16ps does (the module docstring)."""

    def __init__(self, config: gemm.GemmConfig, *args, **kwargs):
        if (config.vector_width, config.mr, config.nr_vectors) != AMX_TILE:
            raise ValueError(f"the AMX bf16 GEMM's tile is {AMX_TILE}, not {config}")
        super().__init__(config, *args, **kwargs)
        if not self.pack_b or self.prepacked_b:
            raise ValueError("the AMX bf16 GEMM reads B packed (and paired) per call")
        if not self.stores_tiles:
            raise ValueError("the AMX bf16 GEMM hands its tiles to a TileStore epilogue")
        self._amx_a = self._tile_sums = None

    @staticmethod
    def _check_tile(config: gemm.GemmConfig) -> None:
        """The accumulators are AMX tiles, not vector registers (the tile is checked in __init__)."""

    def build_into(self, module: ir.Module, threaded: bool = False) -> ir.Function:
        self._pairs_b = None if self._packs_pairs else self._build_pairs(module, "b", self.config.nr)
        self._amx_a = self._build_amx_a(module)
        return gemm.SgemmGenerator.build_into(self, module, threaded)

    def _build_amx_a(self, module: ir.Module) -> ir.Function:
        """``<name>_amx_a(source, packed, count, kc)``: the k-major float32 slivers of A (``count``
        rows, depth ``kc``) at ``source`` as AMX A tile rows at ``packed`` (class docstring), sliver
        for sliver at the same offsets; ``packed`` may be ``source``: a chunk's words are built in
        a stack buffer, then copied where this chunk's and earlier chunks' floats were."""
        mr, w = self.config.mr, self.config.vector_width
        function, b, p = self._define(module, f"{self.name}_amx_a", [
            ("source", PTR), ("packed", PTR), ("count", I64), ("kc", I64)])
        chunk_words = mr * AMX_ROWS
        word_vector = ir.VectorType(I32, w)
        staged = vectors.opaque_alloca(b, I32, _i64(chunk_words), "staged")
        staged.align = gemm.WORKSPACE_ALIGNMENT
        chunks = _chunks(b, p["kc"])
        zeros = ir.Constant(self.vector_type, [0.0] * w)
        with vectors.counted_loop(b, _i64(0), p["count"], mr, "first") as first:
            offset = b.mul(first, p["kc"])
            source = b.gep(p["source"], [offset], source_etype=FLOAT)
            packed = b.gep(p["packed"], [offset], source_etype=FLOAT)
            with vectors.counted_loop(b, _i64(0), chunks, 1, "chunk") as chunk:
                k0 = b.mul(chunk, _i64(AMX_CHUNK))
                for rows0 in range(0, mr, w):
                    words = []  # words[p]: pair p of rows rows0 .. rows0 + w - 1, one per lane
                    for pair in range(AMX_ROWS):
                        halves = []
                        for dk in (2 * pair, 2 * pair + 1):
                            k = b.add(k0, _i64(dk))
                            inside = b.icmp_signed("<", k, p["kc"])  # past the depth: zeros (row 0 read)
                            at = b.add(b.mul(b.select(inside, k, _i64(0)), _i64(mr)), _i64(rows0))
                            value = b.load(b.gep(source, [at], source_etype=FLOAT), typ=self.vector_type, align=4)
                            halves.append(b.select(inside, value, zeros))
                        words.append(pair_words(b, *halves))
                    for i, row in enumerate(vectors.transpose_square(b, words)):  # row i: its 16 pairs
                        b.store(row, b.gep(staged, [_i64((rows0 + i) * AMX_ROWS)], source_etype=I32),
                                align=gemm.WORKSPACE_ALIGNMENT)
                destination = b.gep(packed, [b.mul(chunk, _i64(chunk_words))], source_etype=I32)
                for row in range(mr):
                    words = b.load(b.gep(staged, [_i64(row * AMX_ROWS)], source_etype=I32), typ=word_vector,
                                   align=gemm.WORKSPACE_ALIGNMENT)
                    b.store(words, b.gep(destination, [_i64(row * AMX_ROWS)], source_etype=I32), align=4)
        b.ret_void()
        return function

    @property
    def _packs_pairs(self) -> bool:
        """Whether ``<name>_pack_b`` writes B's pair rows itself (B's rows contiguous: not
        transposed, not strided), else its float32 slivers are paired after it."""
        return not self.transpose_b and self.b_col_stride == 1

    def _build_pack_b(self, module: ir.Module) -> ir.Function:
        """``<name>_pack_b`` (gemm.py's parameters) writing pair rows, row pair by row pair: rows pc +
        2q and pc + 2q + 1 are read once across the block's columns (streamed, not a row stride
        apart per sliver) and pair row q of every sliver written; zeros past the depth up to whole
        chunks.  A conv's rows (``b_row_offsets``: taps a float or a row apart in the slab, lines
        shared) are packed sliver by sliver (gemm.py, ``_emit_pack_b_rows``).  SPR, 1 thread,
        kernel alone, alternating, sliver by sliver -> row pairs: 128x768x3072 0.84-0.88x time,
        64x784x256 0.88-1.03x, 1024^3 0.83-0.99x; conv 3x3 64->64 56x56 1.08-1.10x (not for convs)."""
        if self.b_row_offsets is not None:
            return super()._build_pack_b(module)
        w, nr, nv = self.config.vector_width, self.config.nr, self.config.nr_vectors
        function, b, p = self._define(module, f"{self.name}_pack_b", [
            ("b", PTR), ("ldb", I64), ("pc", I64), ("kc", I64), ("cols", I64), ("packed", PTR)])
        for argument in (p["b"], p["packed"]):
            argument.add_attribute("noalias")
        zeros = ir.Constant(self.vector_type, [0.0] * w)
        whole = b.sdiv(p["cols"], _i64(nr))
        rest = b.sub(p["cols"], b.mul(whole, _i64(nr)))
        rest_masks = [vectors.lane_mask(b, v * w, rest, w) for v in range(nv)]
        with vectors.counted_loop(b, _i64(0), b.mul(_chunks(b, p["kc"]), _i64(AMX_ROWS)), 1, "pair") as pair:
            rows, inside = [], []
            for dk in (0, 1):
                k = b.add(b.mul(pair, _i64(2)), _i64(dk))
                inside.append(b.icmp_signed("<", k, p["kc"]))  # past the depth: zeros (row pc read)
                rows.append(self._b_row(b, p["b"], p["ldb"], b.add(p["pc"], b.select(inside[-1], k, _i64(0)))))

            def sliver_row(sliver, masks):
                col0 = b.mul(sliver, _i64(nr))
                destination = b.gep(p["packed"], [b.add(b.mul(col0, p["kc"]), b.mul(pair, _i64(nr)))],
                                    source_etype=FLOAT)
                for v in range(nv):
                    low, high = (b.select(inside[h], self._load_operand(
                        b, "b", self._operand_at(b, rows[h], [b.add(col0, _i64(v * w))], "b"), w, masks[v]), zeros)
                        for h in (0, 1))
                    b.store(pair_words(b, low, high), b.gep(destination, [_i64(v * w)], source_etype=FLOAT),
                            align=self.vector_bytes)

            with vectors.counted_loop(b, _i64(0), whole, 1, "sliver") as sliver:
                sliver_row(sliver, [None] * nv)
            with b.if_then(b.icmp_signed(">", rest, _i64(0))):
                sliver_row(whole, rest_masks)
        b.ret_void()
        return function

    def _emit_pack_b_rows(self, b, p, source, sliver, masks) -> None:
        """Pair row q of the sliver from B's rows pc + 2q and pc + 2q + 1 (zeros past the block's
        depth, up to whole chunks of AMX_ROWS pair rows): one pass over B, no float32 slivers (a
        conv's B; a matmul's is packed by row pairs, ``_build_pack_b``)."""
        if not self._packs_pairs:
            super()._emit_pack_b_rows(b, p, source, sliver, masks)
            return
        w, nr = self.config.vector_width, self.config.nr
        zeros = ir.Constant(self.vector_type, [0.0] * w)
        with vectors.counted_loop(b, _i64(0), b.mul(_chunks(b, p["kc"]), _i64(AMX_ROWS)), 1, "pair") as pair:
            halves = []
            for dk in (0, 1):
                k = b.add(b.mul(pair, _i64(2)), _i64(dk))
                inside = b.icmp_signed("<", k, p["kc"])  # past the depth: zeros (row pc read)
                row = self._b_row(b, source, p["ldb"], b.add(p["pc"], b.select(inside, k, _i64(0))))
                values = [self._load_operand(b, "b", self._operand_at(b, row, [_i64(v * w)], "b"), w, masks[v])
                          for v in range(self.config.nr_vectors)]
                halves.append([b.select(inside, value, zeros) for value in values])
            destination = b.gep(sliver, [b.mul(pair, _i64(nr))], source_etype=FLOAT)
            for v, (low, high) in enumerate(zip(*halves)):
                b.store(pair_words(b, low, high), b.gep(destination, [_i64(v * w)], source_etype=FLOAT),
                        align=self.vector_bytes)

    def _after_pack_b(self, b, packed_b, nc, kc) -> None:
        """B's float32 slivers (packed transposed or strided) as pair rows, then zero pair rows up
        to whole chunks of AMX_ROWS (``_emit_pack_b_rows`` wrote pairs already otherwise)."""
        if self._packs_pairs:
            return
        super()._after_pack_b(b, packed_b, nc, kc)
        nr = self.config.nr
        pairs = b.lshr(b.add(kc, _i64(1)), _i64(1))
        padded = b.mul(_chunks(b, kc), _i64(AMX_ROWS))
        zeros = ir.Constant(self.words, [0] * self.config.vector_width)
        with vectors.counted_loop(b, _i64(0), nc, nr, "pad_first") as first:
            sliver = b.gep(packed_b, [b.mul(first, kc)], source_etype=I32)
            with vectors.counted_loop(b, pairs, padded, 1, "pad_pair") as pair:
                row = b.gep(sliver, [b.mul(pair, _i64(nr))], source_etype=I32)
                for v in range(self.config.nr_vectors):
                    b.store(zeros, b.gep(row, [_i64(v * self.config.vector_width)], source_etype=I32), align=4)

    def _after_pack_a(self, b, a_slivers, packed_a, mc, kc):
        b.call(self._amx_a, [a_slivers, packed_a, mc, kc])
        return packed_a

    def _enter_rectangle(self, b: ir.IRBuilder) -> None:
        amx.configure(b, {tile: (AMX_ROWS, AMX_ROW_BYTES) for tile in range(amx.TILES)})

    def _leave_rectangle(self, b: ir.IRBuilder) -> None:
        amx.release(b)

    def _c_tiles(self, nv: int):
        """(tile, float offset in a tile of NR-float rows) of each C tile of an ``nv``-vector micro-tile."""
        nr, w = self.config.nr, self.config.vector_width
        return [(_c_tile(i, j), i * AMX_ROWS * nr + j * w)
                for i in range(self.config.mr // AMX_ROWS) for j in range(nv)]

    def _c_at(self, b, p, offset_rows: int, offset_cols: int) -> ir.Value:
        """Address of C[row + offset_rows, col + offset_cols] (partial sums between K blocks)."""
        row = b.add(p["row"], _i64(offset_rows))
        return b.gep(p["c"], [b.add(b.mul(row, p["ldc"]), b.add(p["col"], _i64(offset_cols)))], source_etype=FLOAT)

    def _emit_accumulation(self, b, p, nv, b_masks):
        """The sums in C tiles over ceil(kc / 32) chunks, from zero or, for a whole tile after the
        first K block, from the partial sums in C (loaded as tiles); None: the tiles hold them
        (``_emit_full_tile`` stores them as tiles, ``_emit_edge_tile`` as vector rows)."""
        cfg = self.config
        mr, nr = cfg.mr, cfg.nr
        self._tile_sums = vectors.opaque_alloca(b, FLOAT, _i64(mr * nr), "tile_sums")  # an edge tile's rows
        self._tile_sums.align = gemm.WORKSPACE_ALIGNMENT
        c_stride = b.mul(p["ldc"], _i64(4))
        with b.if_else(b.and_(self._is_full_tile(b, p, nv), b.not_(p["first_k_block"]))) as (partial, fresh):
            with partial:
                for tile, offset in self._c_tiles(nv):
                    amx.load(b, tile, self._c_at(b, p, offset // nr, offset % nr), c_stride)
            with fresh:
                for tile, _ in self._c_tiles(nv):
                    amx.zero(b, tile)
        with vectors.counted_loop(b, _i64(0), _chunks(b, p["kc"]), 1, "chunk") as chunk:
            a_chunk = b.gep(p["packed_a"], [b.mul(chunk, _i64(mr * AMX_ROWS))], source_etype=I32)
            b_chunk = b.gep(p["b"], [b.mul(chunk, _i64(AMX_ROWS * nr))], source_etype=I32)
            for i in range(mr // AMX_ROWS):
                amx.load(b, 4 + i, b.gep(a_chunk, [_i64(i * AMX_ROWS * AMX_ROWS)], source_etype=I32), AMX_ROW_BYTES)
            for j in range(nv):
                amx.load(b, 6 + j, b.gep(b_chunk, [_i64(j * AMX_ROWS)], source_etype=I32), nr * 4)
            for i in range(mr // AMX_ROWS):
                for j in range(nv):
                    amx.dot(b, ("bf16", "bf16"), _c_tile(i, j), 4 + i, 6 + j)
        return None

    def _emit_full_tile(self, b, p, nv, accumulators, epilogue_values, sums) -> None:
        """The C tiles to C (partial sums: a K block follows) or to the epilogue's tile."""
        nr = self.config.nr
        with b.if_else(p["last_k_block"]) as (last, partial):
            with last:
                for tile, offset in self._c_tiles(nv):
                    amx.store(b, tile, b.gep(sums, [_i64(offset)], source_etype=FLOAT), nr * 4)
                self._emit_tile_store(b, p, sums, nv * self.config.vector_width, epilogue_values)
            with partial:
                c_stride = b.mul(p["ldc"], _i64(4))
                for tile, offset in self._c_tiles(nv):
                    amx.store(b, tile, self._c_at(b, p, offset // nr, offset % nr), c_stride)

    def _emit_edge_tile(self, b, p, nv, accumulators, epilogue_values, sums) -> None:
        """The C tiles as MR rows of ``nv`` vectors (through a stack tile) for gemm.py's masked row
        updates (their tiles started from zero: the row updates add C's partial sums)."""
        cfg = self.config
        nr, w = cfg.nr, cfg.vector_width
        for tile, offset in self._c_tiles(nv):
            amx.store(b, tile, b.gep(self._tile_sums, [_i64(offset)], source_etype=FLOAT), nr * 4)
        rows = [[b.load(b.gep(self._tile_sums, [_i64(r * nr + v * w)], source_etype=FLOAT), typ=self.vector_type,
                        align=gemm.WORKSPACE_ALIGNMENT) for v in range(nv)] for r in range(cfg.mr)]
        super()._emit_edge_tile(b, p, nv, rows, epilogue_values, sums)
