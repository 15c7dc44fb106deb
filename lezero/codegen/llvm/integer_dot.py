"""The 8-bit dot products of the int8 GEMM and conv (``integer_gemm.py``, ``integer_conv.py``): per
target, the instruction that adds 4 byte products to each i32 lane and the register tile it is
fastest in (``DotProduct``), and the panel constants both kernels share.

The operands are a u8 lhs and an s8 rhs (``integer_gemm.py``'s docstring: signs flipped, zero
points moved with them), except where ``DotProduct`` reads the lhs signed (``sdot``, a signed lhs
on AMX).  The rhs is packed ``packed[k/4][col][k%4]``: 4 consecutive k per i32 lane, the layout
``vpdpbusd``, ``sdot``/``usdot`` and AMX's B tiles read.
"""
from __future__ import annotations

from llvmlite import ir

from lezero.codegen.llvm import amx
from lezero.codegen.llvm.context import KernelContext
from lezero.codegen.llvm.loops import declare

NB = 64  # columns of a panel
KC = 256  # rows of K per packed sliver: 16 KiB, half of L1, so every row tile reads it from L1
KC_AMX = 4096  # on AMX: up to 256 KiB, so the accumulators stay in their tiles over a transformer's K
I8, I16, I32, INT64 = ir.IntType(8), ir.IntType(16), ir.IntType(32), ir.IntType(64)


def splat(b, value, vector_type):
    """``value`` (an i32) in every lane of a ``vector_type``."""
    undef = ir.Constant(vector_type, ir.Undefined)
    one = b.insert_element(undef, value, ir.Constant(I32, 0))
    return b.shuffle_vector(one, undef, ir.Constant(ir.VectorType(I32, vector_type.count), [0] * vector_type.count))


def shuffle_mask(values):
    """A ``shufflevector`` mask of the lane numbers ``values``."""
    return ir.Constant(ir.VectorType(I32, len(values)), list(values))


class DotProduct:
    """``acc + sum of 4 (u8 x s8) products`` per i32 lane, and the register tile it is fastest in:
    ``mr`` rows x ``nv`` vectors of ``lanes`` i32.  Chosen by the target's features:

    - ``avx512vnni`` / ``avxvnni``: ``vpdpbusd`` (512 / 256 bits), one instruction;
    - else x86 (``avx512bw``, ``avx2``, SSE2): ``vpmaddwd`` on the bytes widened to i16, the even
      bytes and the odd bytes of each lane apart (``a & 0xff`` / ``a >> 8`` per i16 of the lhs,
      ``(b << 8) >>s 8`` / ``b >>s 8`` of the rhs): two i32 sums of two u8 x s8 products each, exact
      (|255 x -128 x 2| < 2^31).  Not ``vpmaddubsw``: its i16 sum of two u8 x s8 products saturates
      (255 x 127 x 2 > 32767), which ORT's MLAS accepts on AVX2 (its U8S8 results are wrong there
      unless the weights were quantized to 7 bits, ``reduce_range``) and PyTorch's fbgemm avoids by
      7-bit activations (``reduce_range=True``); here no operand is reduced.  On Zen 3 it costs
      nothing: ``vpmaddubsw`` + the ``vpmaddwd`` by ones that widens its sums to i32 take the two
      multiply pipes for 32 products, as two ``vpmaddwd`` do;
    - AArch64 with ``dotprod`` (Cortex-A55/A76, Neoverse N1/V1/N2): ``sdot`` (s8 x s8, 128 bits:
      4 lanes of 4 products) for a signed lhs, as it is; an unsigned lhs takes ``usdot`` (u8 x s8,
      ``llvm.aarch64.neon.usdot``) where the CPU has ``i8mm`` (FEAT_I8MM: Neoverse V1/N2), as it
      is too; without i8mm it is read signed as well (``signed_lhs``): its unsigned form less 128
      (``a_u ^ 0x80``: its top bits flipped in each k step), and its zero point and row sums move
      with it (``lhs_value``):
      ``a_s = a_u - 128``, ``za_s = za_u - 128``, so ``a_s - za_s = a_u - za_u`` and
      ``sum_k (a_s - za_s)(b - zb) = P_s - za_s colsum(b) - zb rowsum(a_s) + K za_s zb`` with
      ``P_s = sum_k a_s b``: the correction of the module docstring, term for term, of the signed
      lhs (i32 arithmetic wraps, so the sums are exact wherever the result fits in i32, as on x86).
      The register tile is 6 rows x 4 vectors of 4 i32, as VNNI's: 24 accumulators, the 4 rhs
      vectors of a k step and the lhs (4 bytes per row, ``ld1r``) in 32 NEON registers (8 x 4
      would be 32 accumulators alone; 8 x 3 leaves a 1-vector tile in a 16-vector panel);
    - elsewhere (AArch64 without ``dotprod``: generic, Cortex-A53/A72): widening multiplies and
      adds, one byte position at a time.
    """

    def __init__(self, ctx: KernelContext, lhs_signed: bool):
        """``lhs_signed``: the lhs is stored signed (i8), which AArch64's choice reads."""
        f = ctx.cpu.features
        self.amx = "avx512vnni" in f and amx.has_amx(ctx.cpu, "int8")
        self.kc = KC_AMX if self.amx else KC  # rows of K per packed sliver
        if self.amx:  # the tile of 2 x 2 AMX accumulators (gemm_panel); vpdpbusd sums the columns
            self.kind, self.lanes, self.mr, self.nv, name = "vnni", 16, 32, 2, "llvm.x86.avx512.vpdpbusd.512"
        elif "avx512vnni" in f:
            self.kind, self.lanes, self.mr, self.nv, name = "vnni", 16, 6, 4, "llvm.x86.avx512.vpdpbusd.512"
        elif "avxvnni" in f:
            self.kind, self.lanes, self.mr, self.nv, name = "vnni", 8, 6, 2, "llvm.x86.avx512.vpdpbusd.256"
        elif "avx512bw" in f:
            self.kind, self.lanes, self.mr, self.nv, name = "madd", 16, 4, 4, "llvm.x86.avx512.pmaddw.d.512"
        elif "avx2" in f:
            self.kind, self.lanes, self.mr, self.nv, name = "madd", 8, 4, 2, "llvm.x86.avx2.pmadd.wd"
        elif "sse2" in f:
            self.kind, self.lanes, self.mr, self.nv, name = "madd", 4, 4, 2, "llvm.x86.sse2.pmadd.wd"
        elif "dotprod" in f:
            self.kind = "usdot" if "i8mm" in f and not lhs_signed else "sdot"
            self.lanes, self.mr, self.nv, name = 4, 6, 4, f"llvm.aarch64.neon.{self.kind}.v4i32.v16i8"
        else:
            self.kind, self.lanes, self.mr, self.nv, name = "plain", 4, 4, 2, None
        self.signed_lhs = self.kind == "sdot"  # the products read the lhs signed: 128 less than unsigned
        self.vector = ir.VectorType(I32, self.lanes)
        self.halves = ir.VectorType(I16, 2 * self.lanes)
        self.bytes = ir.VectorType(I8, 4 * self.lanes)
        if self.kind == "vnni":
            self.intrinsic = declare(ctx.module, name, self.vector, [self.vector] * 3)
        elif self.kind == "madd":
            self.intrinsic = declare(ctx.module, name, self.vector, [self.halves] * 2)
        elif self.kind in ("sdot", "usdot"):
            self.intrinsic = declare(ctx.module, name, self.vector, [self.vector, self.bytes, self.bytes])

    def constant(self, value: int):
        return ir.Constant(self.vector, [value] * self.lanes)

    def _halves(self, value: int):
        return ir.Constant(self.halves, [value] * (2 * self.lanes))

    def lhs_value(self, b, byte, signed: bool):
        """An lhs byte or zero point (an i8 of a ``signed`` lhs or not) as an i32 of the lhs the
        products read: unsigned (``a + 128`` for a signed lhs), or with ``signed_lhs`` signed
        (``a - 128`` for an unsigned lhs)."""
        if signed:
            value = b.sext(byte, I32)
            return value if self.signed_lhs else b.add(value, ir.Constant(I32, 128))
        value = b.zext(byte, I32)
        return b.sub(value, ir.Constant(I32, 128)) if self.signed_lhs else value

    def lhs(self, b, quads):
        """The form of a vector of lhs quads (as ``lhs_value`` reads them) the products read (once
        per row and k step)."""
        if self.kind in ("sdot", "usdot"):
            return b.bitcast(quads, self.bytes)
        if self.kind != "madd":
            return quads
        h = b.bitcast(quads, self.halves)
        return b.and_(h, self._halves(0xFF)), b.lshr(h, self._halves(8))

    def rhs(self, b, quads):
        """The same for a vector of signed rhs quads (once per vector and k step)."""
        if self.kind in ("sdot", "usdot"):
            return b.bitcast(quads, self.bytes)
        if self.kind != "madd":
            return quads
        h = b.bitcast(quads, self.halves)
        return b.ashr(b.shl(h, self._halves(8)), self._halves(8)), b.ashr(h, self._halves(8))

    def __call__(self, b, acc, a, w):
        """``a``, ``w``: what ``lhs`` and ``rhs`` made of 4 bytes per lane."""
        if self.kind in ("vnni", "sdot", "usdot"):
            return b.call(self.intrinsic, [acc, a, w])
        if self.kind == "madd":
            return b.add(acc, b.add(b.call(self.intrinsic, [a[0], w[0]]), b.call(self.intrinsic, [a[1], w[1]])))
        for t in range(4):  # byte t of each lane: a's unsigned, b's signed (shifted to the top and back)
            a_t = b.and_(b.lshr(a, self.constant(8 * t)), self.constant(0xFF))
            b_t = b.ashr(b.shl(w, self.constant(24 - 8 * t)), self.constant(24))
            acc = b.add(acc, b.mul(a_t, b_t))
        return acc
