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
"""
from __future__ import annotations

from llvmlite import ir

from lezero.codegen.llvm import gemm, vectors
from lezero.codegen.llvm.ir_types import FLOAT, I32, I64, PTR
from lezero.codegen.llvm.loops import declare
from lezero.codegen.llvm.target import CpuTarget

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
    """Whether a bf16 GEMM for ``cpu`` with ``config``'s vectors runs on vdpbf16ps."""
    width = config.vector_width
    return "avx512bf16" in cpu.features and (width == 16 or (width == 8 and "avx512vl" in cpu.features))


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
                low = vectors.load_vector(b, b.gep(low_row, [_i64(v * w)], source_etype=FLOAT), w, b_masks[v])
                high = vectors.load_vector(b, b.gep(high_row, [_i64(v * w)], source_etype=FLOAT), w, b_masks[v])
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
