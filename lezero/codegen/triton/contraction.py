"""Matmul and conv kernels as Triton: one ``lz.matmul`` or ``lz.conv2d`` (or their int8 forms
``lz.matmul_integer``, ``lz.conv_integer``) through ``tl.dot``, its elementwise epilogue applied to
the accumulator tile before the one store.

Every program computes one BLOCK_M x BLOCK_N tile of a GEMM, looping over K in BLOCK_K steps:

- **matmul** (numpy semantics, as ``lz.matmul``): each batch index (batch dims broadcast: a
  size-1 or missing dim has stride 0) is one GEMM of m x k by k x n; a 1-D lhs is one row, a 1-D
  rhs one column.  Programs are numbered batch-major, and within a batch in *grouped order*:
  GROUP_M row tiles sweep the column tiles together, so the B tiles they share stay in L2.  An
  operand read through ``lz.transpose`` (partition's prologue, ``x @ w.T``) is its buffer with
  permuted strides; one read through an ``lz.cast`` from f32 to a bf16 or f16 matmul's type
  (autocast's) is its float32 buffer, each tile rounded to that type as it is loaded (the cast's own
  rounding).
- **conv2d**: an *implicit GEMM* per group: rows are output pixels ``(image, oh, ow)`` (M = N x OH
  x OW), columns the group's output channels (N = O / groups), k runs over ``(ci, kh, kw)`` (K =
  C / groups x KH x KW), which is the OIHW weight's row-major layout, so B is the weights in
  place.  The A tile is gathered from the input with index arithmetic, the padding masked
  (zeros), strides and dilations in the arithmetic.  The result is NCHW: the store scatters the
  tile by (image, channel, oh, ow).

Edge tiles read the last row / column again (indices clamped with ``%``, so loads stay in bounds
and need no mask) and the store masks what lies outside; only a ragged K needs masked loads.
Offsets are int32, int64 when a buffer has 2^31 elements or more.

**Element types**: f32 multiplies with ``input_precision="ieee"``, so the sums are the
reference's up to order (``F32_PRECISION``: TF32 would be several times faster on tensor cores,
but it rounds the operands to 10 mantissa bits).  f16 tiles go to ``tl.dot`` as they are, bf16
ones are 16-bit (bf16 storage on the device: half the bytes of float32) and go to ``tl.dot`` as
they are on a GPU (``wgmma`` bf16: exact products summed in f32, as the reference does); triton
3.9's interpreter multiplies bf16 tiles as their integer bit patterns, so under it they are widened
to float32 and multiplied with ``input_precision="tf32"``, exact for bf16 values: the same sums
(``BF16_DOT``; one source, ``BF16_TILES`` fixed when triton imports it).  f64
accumulates in f64 (DMMA).  Integers have no dot here: a broadcast product summed over BLOCK_K,
in 32 (or 64) bits, wrapping; truncated to the element type that is the reference's wrapping sum.

**int8** (``lz.matmul_integer``, ``lz.conv_integer``: ``(a - za)(b - zb)`` summed in i32, ``za``
per tensor, ``zb`` per tensor or per column, i.e. per output channel of a conv): the 8-bit tiles
go to ``tl.dot`` with an int32 accumulator (``out_dtype=tl.int32``: the tensor cores' integer MMA,
``mma``/``wgmma`` ``.s8``), the zero points applied after the loop, exactly, as the CPU's int8 GEMM
does (``ZeroPoints``).  ``tl.dot`` multiplies signed bytes only, so a ui8 tile is made signed by
subtracting 128 (its zero point moves with it); then ``C = P - zb * rowsum(a) - za * colsum(b) + K
* za * zb``, the sums of the signed tiles summed in the same K loop.  Every load that is masked
(K's tail, a conv's padding) reads the operand's zero point, whose centred value is 0, so a padded
tap adds nothing to ``C`` whatever it adds to ``P`` and the sums, provided ``K`` counts the whole
``BLOCK_K`` steps.  i32 arithmetic wraps, so ``C`` is the reference's wrapping i32 sum.  A
constant zero point (an ``lz.constant`` operand: a model's weights') is a literal, and the sums a
zero one multiplies are not summed.  An integer matmul may read its two matrices through
``lz.reshape`` (partition's ``is_reshaped_integer_operand``: the same row-major bytes).  sm_90 gets
``wgmma ... .s32.s8.s8``, gfx942 ``v_mfma_i32_32x32x16_i8`` (tests/codegen/triton/test_integer_contraction.py).

**The epilogue** is the value-at-index walk every kernel uses (``value_at_index.py``), with the
tile's index: ``(batch coordinates..., rows[:, None], cols[None, :])`` for a matmul, ``(image[:,
None], channels[None, :], oh[:, None], ow[:, None])`` for a conv, and the contraction's value
overridden by the accumulator rounded to its element type; an operand read through data movement
(a per-channel vector reshaped to C x 1 x 1) is index arithmetic on its load.  Every yielded value
(the contraction itself, or any elementwise value of the result's shape) is stored through a full
BLOCK_M x BLOCK_N block of offsets, into which a value constant along a dim broadcasts.

Launch configs: ``configs[0]`` from the problem's size (small blocks for small problems: under
``TRITON_INTERPRET=1`` every program runs in Python), then the usual Triton GEMM configurations
that fit the problem, for autotuning on a GPU.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from lezero.codegen.affine import Affine, Var
from lezero.codegen.contraction_shapes import (INTEGER_CONTRACTIONS, ConvShape, MatmulShape, anchor_op, rounded_operands,
                                               stored_operand)
from lezero.codegen.triton.context import TritonCode, TritonContext, next_pow2
from lezero.codegen.triton.kernel import LaunchConfig
from lezero.codegen.triton.scalar_builder import TValue, compute_dtype
from lezero.codegen.value_at_index import is_unsigned
from lezero.ir.core import Operation
from lezero.ir.types import BF16, F16, F32, F64, I32, ElementType

# Program order within a batch: this many row tiles sweep the column tiles together.
GROUP_M = 8
# tl.dot takes blocks of at least 16 along each dim (K blocks of 32 for 8-bit operands).
MIN_BLOCK = 16
MIN_INT8_BLOCK_K = 32
# How float32 tiles multiply: "ieee" gives the reference's sums (up to order); "tf32" runs on the
# tensor cores at several times the FLOP/s (H100/H200), the operands rounded to 10 mantissa bits,
# which is what torch's convolutions do by default, but not the reference.
F32_PRECISION = "ieee"
# Integer contractions multiply BLOCK_M x BLOCK_K x BLOCK_N products in registers: short K blocks.
INTEGER_BLOCK_K = 8

# Autotuning candidates for a GPU (block m, n, k, warps, stages), per operand width in bytes; the
# ones larger than the problem are dropped.  float32 tiles take twice the shared memory of 16-bit
# ones, so they get half the K depth.
GPU_CONFIGS = {
    1: ((128, 256, 128, 8, 3), (256, 128, 128, 8, 3), (128, 128, 128, 8, 3), (128, 128, 64, 4, 4),
        (64, 128, 128, 4, 4), (128, 64, 128, 4, 4), (64, 64, 128, 4, 4), (64, 64, 64, 4, 4), (32, 64, 64, 4, 5)),
    2: ((128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 8, 3), (128, 128, 32, 4, 4),
        (64, 128, 64, 4, 4), (128, 64, 64, 4, 4), (64, 64, 64, 4, 4), (64, 32, 32, 4, 5), (32, 64, 32, 4, 5)),
    4: ((128, 128, 32, 8, 3), (128, 256, 32, 8, 3), (256, 128, 32, 8, 3), (128, 64, 32, 4, 4),
        (64, 128, 32, 4, 4), (64, 64, 32, 4, 4), (64, 32, 32, 4, 4), (32, 64, 32, 4, 4)),
    8: ((64, 64, 16, 4, 3), (128, 64, 16, 8, 3), (64, 128, 16, 8, 3), (32, 64, 16, 4, 3), (64, 32, 16, 4, 3)),
}
INTEGER_CONFIGS = ((32, 32, INTEGER_BLOCK_K, 4, 2), (64, 32, INTEGER_BLOCK_K, 4, 2), (32, 64, INTEGER_BLOCK_K, 4, 2))


def contraction_unsupported_reason(op: Operation) -> str | None:
    """Why the Triton backend cannot run ``op`` (an ``lz.matmul``, ``lz.conv2d``, or their int8
    forms); None when it can, which is for every element type they accept: floats and int8 through
    ``tl.dot``, other integers (matmul) through the broadcast product."""
    dtype = op.results[0].type.element_type
    if not (dtype.is_float or dtype.is_int):
        return f"{op.name} with {dtype} has no Triton lowering"
    return None


# --------------------------------------------------------------------------------------------
# How the product is computed, by element type
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DotKind:
    """How tiles of ``dtype`` multiply: ``accumulator`` the Triton type of the sums, ``operand``
    the type tiles are converted to before the product (None: as loaded), ``precision`` tl.dot's
    input precision (None: the default for the type; ``dot`` False: a broadcast product summed
    over K, for integers)."""

    accumulator: str
    operand: str | None
    precision: str | None
    dot: bool
    operand_bytes: int
    bf16_tiles: bool = False  # bf16 tiles: tl.dot of them on a GPU, as tf32 under the interpreter (BF16_DOT)

    @staticmethod
    def of_anchor(anchor: Operation) -> "DotKind":
        """How the contraction ``anchor`` multiplies: int8 tiles for the integer ones, else by its
        element type."""
        return INT8_DOT if anchor.name in INTEGER_CONTRACTIONS else DotKind.of(anchor.result.type.element_type)

    @staticmethod
    def of(dtype: ElementType) -> "DotKind":
        if dtype == F32:
            return DotKind("tl.float32", None, F32_PRECISION, True, 4)
        if dtype == BF16:
            return BF16_DOT
        if dtype == F16:
            return DotKind("tl.float32", None, None, True, 2)
        if dtype == F64:
            return DotKind("tl.float64", None, None, True, 8)
        accumulator = f"tl.{'u' if is_unsigned(dtype) else ''}int{64 if dtype.bitwidth > 32 else 32}"
        return DotKind(accumulator, accumulator, None, False, dtype.itemsize)

    def product(self, a: str, b: str, acc: str) -> str:
        if not self.dot:
            return f"{acc} + tl.sum({a}[:, :, None] * {b}[None, :, :], axis=1)"
        if self.bf16_tiles:  # BF16_TILES: the module-level switch (BF16_TILES_SOURCE)
            return (f"tl.dot({a}, {b}, {acc}) if BF16_TILES else tl.dot({a}.to(tl.float32), {b}.to(tl.float32), "
                    f'{acc}, input_precision="tf32")')
        precision = f", input_precision=\"{self.precision}\"" if self.precision else ""
        out = f", out_dtype={self.accumulator}" if self.accumulator == "tl.int32" else ""
        return f"tl.dot({a}, {b}, {acc}{precision}{out})"

    def loaded(self, tile: str) -> str:
        return f"{tile}.to({self.operand})" if self.operand else tile


# 8-bit tiles (signed: ``ZeroPoints`` makes a ui8 tile so) summed in int32 on the tensor cores.
INT8_DOT = DotKind("tl.int32", None, None, True, 1)
# bf16 tiles (16-bit storage) into float32 sums: on a GPU tl.dot of the tiles as loaded (Hopper's
# wgmma ... .bf16: exact products, float32 sums, as the reference's); triton 3.9's interpreter
# multiplies bf16 tiles as their integer bit patterns, so there the tiles are widened to float32
# and multiplied as tf32, exact for bf16 values: the same products and sums.  The module's source
# is the same either way; BF16_TILES is fixed when triton imports it (jit.load, per mode).
BF16_DOT = DotKind("tl.float32", None, None, True, 2, bf16_tiles=True)
BF16_TILES_SOURCE = """import os

# bf16 tiles go to tl.dot as they are on a GPU; under TRITON_INTERPRET=1 widened to float32 (tf32)
BF16_TILES = tl.constexpr(os.environ.get("TRITON_INTERPRET", "0") != "1")
"""


@dataclass(frozen=True)
class ZeroPoints:
    """An int8 contraction's zero points (the module docstring's **int8**): ``a`` (the GEMM's lhs:
    a matmul's ``a``, a conv's gathered input) per tensor, ``b`` (a matmul's ``b``, a conv's
    weights) per tensor or per column (``b_per_column``); ``*_unsigned``: the operand is ui8, made
    signed by subtracting 128.  ``*_constant``: the zero point's value when the kernel operand is
    an ``lz.constant`` holding one value (a model's weights' zero point, often 0): it is a literal,
    and the sums it multiplies are not summed when its signed value is 0 (a symmetric int8 weight
    needs no row sums of the activations)."""

    a_unsigned: bool
    b_unsigned: bool
    b_per_column: bool
    a_constant: int | None = None
    b_constant: int | None = None

    @staticmethod
    def of(ctx: TritonContext, anchor: Operation) -> "ZeroPoints | None":
        if anchor.name not in INTEGER_CONTRACTIONS:
            return None
        a, b, a_zero, b_zero = anchor.operands
        return ZeroPoints(is_unsigned(a.type.element_type), is_unsigned(b.type.element_type), b_zero.type.rank == 1,
                          _constant_value(ctx, a_zero), _constant_value(ctx, b_zero))

    def load(self, code: TritonCode, a_zero: str, b_zero: str, columns: str) -> None:
        """``za`` and ``zb`` (per column: of the tile's ``columns``), as stored; a constant one is a literal."""
        if self.a_constant is None:
            code.line(f"za = tl.load({a_zero})")
        if self.b_constant is None:
            code.line(f"zb = tl.load({b_zero} + {columns})" if self.b_per_column else f"zb = tl.load({b_zero})")

    @property
    def a_pad(self) -> str:
        """What a masked load of ``a`` reads: its zero point."""
        return "za" if self.a_constant is None else str(self.a_constant)

    @property
    def b_pad(self) -> str:
        if self.b_constant is not None:
            return str(self.b_constant)
        return "zb[None, :]" if self.b_per_column else "zb"

    def _signed(self, constant: int | None, unsigned: bool) -> int | None:
        return None if constant is None else constant - 128 if unsigned else constant

    @property
    def a_rows(self) -> bool:
        """Whether the correction needs ``a``'s row sums: ``zb`` is not known to be 0 once signed."""
        return self._signed(self.b_constant, self.b_unsigned) != 0

    @property
    def b_columns(self) -> bool:
        return self._signed(self.a_constant, self.a_unsigned) != 0

    def start(self, code: TritonCode) -> None:
        if self.a_rows:
            code.line("a_sums = tl.zeros((BLOCK_M,), dtype=tl.int32)")
        if self.b_columns:
            code.line("b_sums = tl.zeros((BLOCK_N,), dtype=tl.int32)")

    def signed_tiles(self, code: TritonCode) -> None:
        """``a`` and ``b`` made signed (ui8 less 128) for ``tl.dot``."""
        for tile, unsigned in (("a", self.a_unsigned), ("b", self.b_unsigned)):
            if unsigned:
                code.line(f"{tile} = ({tile}.to(tl.int16) - 128).to(tl.int8)")

    def sum_tiles(self, code: TritonCode) -> None:
        if self.a_rows:
            code.line("a_sums += tl.sum(a.to(tl.int32), axis=1)")
        if self.b_columns:
            code.line("b_sums += tl.sum(b.to(tl.int32), axis=0)")

    def correct(self, code: TritonCode, k: int) -> TValue:
        """The exact sums ``(a - za)(b - zb)`` from ``acc`` (``P`` of the signed tiles) and the
        tiles' sums, as ``sums`` (i32)."""
        if not (self.a_rows or self.b_columns):
            return TValue("acc", I32)
        code.line("# (a - za)(b - zb) = P - zb rowsum(a) - za colsum(b) + K za zb (tiles and zero points signed); the "
                  "padding past K holds the zero points, so K counts whole BLOCK_K steps")
        za = self._signed(self.a_constant, self.a_unsigned)
        zb = self._signed(self.b_constant, self.b_unsigned)
        if za is None:
            za = code.assign("za_s", f"za.to(tl.int32){' - 128' if self.a_unsigned else ''}")
        if zb is None:
            zb = code.assign("zb_s", f"zb.to(tl.int32){' - 128' if self.b_unsigned else ''}")
            zb = f"{zb}[None, :]" if self.b_per_column else zb
        terms = ["acc"]
        if self.a_rows:
            terms.append(f"- {_factor(zb)} * a_sums[:, None]")
        if self.b_columns:
            terms.append(f"- {_factor(za)} * b_sums[None, :]")
        if self.a_rows and self.b_columns:
            code.line(f"k_steps = tl.cdiv({k}, BLOCK_K) * BLOCK_K")
            terms.append(f"+ k_steps * {_factor(za)} * {_factor(zb)}")
        return TValue(code.assign("sums", " ".join(terms)), I32)


def _factor(value) -> str:
    """A zero point (a name or an int) as a factor of a product."""
    return f"({value})" if isinstance(value, int) and value < 0 else str(value)


def _constant_value(ctx: TritonContext, v) -> int | None:
    """The one value of kernel operand ``v`` when the kernel reads it from an ``lz.constant`` whose
    entries are all equal; else None."""
    if v not in ctx.body.args:
        return None
    outer = ctx.kernel.operands[ctx.body.args.index(v)].owner
    if not (isinstance(outer, Operation) and outer.name == "lz.constant"):
        return None
    values = np.unique(np.asarray(outer.attributes["value"].array))
    return int(values[0]) if values.size == 1 else None


# --------------------------------------------------------------------------------------------
# Launch configurations
# --------------------------------------------------------------------------------------------


def _block(extent: int, lo: int, hi: int) -> int:
    """The power of two covering ``extent``, between ``lo`` and ``hi``."""
    return max(lo, min(hi, next_pow2(extent)))


@dataclass(frozen=True)
class Gemm:
    """The GEMMs a kernel's programs compute: ``outer`` independent ones (matmul batches, conv
    groups) of m x k by k x n, multiplied as ``kind`` says."""

    outer: int
    m: int
    n: int
    k: int
    kind: DotKind

    def tiles(self, block_m: int, block_n: int) -> int:
        return -(-self.m // block_m) * -(-self.n // block_n)

    def config(self, block_m: int, block_n: int, block_k: int, warps: int, stages: int) -> LaunchConfig:
        constexprs = {"BLOCK_M": block_m, "BLOCK_N": block_n, "BLOCK_K": block_k, "GROUP_M": GROUP_M}
        return LaunchConfig(constexprs, (self.outer * self.tiles(block_m, block_n),), warps, stages)

    def configs(self) -> tuple:
        """The heuristic first: blocks covering the problem up to 64 x 64 (128 for a large one),
        K blocks of 32 (64 for 8- and 16-bit operands; 8 for other integers); then the GPU candidates that are
        no larger than the problem."""
        kind = self.kind
        large = self.m >= 512 and self.n >= 512
        top = 128 if large else 64
        block_m, block_n = _block(self.m, MIN_BLOCK, top), _block(self.n, MIN_BLOCK, top)
        if not kind.dot:
            heuristic = (min(block_m, 32), min(block_n, 32), INTEGER_BLOCK_K, 4, 2)
            candidates = INTEGER_CONFIGS
        else:
            depth = {1: 64, 2: 64, 4: 32, 8: 16}[kind.operand_bytes]
            block_k = _block(self.k, MIN_INT8_BLOCK_K if kind.operand_bytes == 1 else MIN_BLOCK, depth)
            warps = 8 if block_m * block_n >= 128 * 128 else 4
            heuristic = (block_m, block_n, block_k, warps, 3)
            candidates = GPU_CONFIGS[kind.operand_bytes]
        fits = [c for c in candidates if c != heuristic and c[0] <= _block(self.m, MIN_BLOCK, 256)
                and c[1] <= _block(self.n, MIN_BLOCK, 256) and c[2] <= _block(self.k, MIN_BLOCK, 256)]
        return tuple(self.config(*c) for c in [heuristic] + fits)


def _every(configs, key: str, extent: int) -> bool:
    """Whether ``extent`` is a multiple of every config's ``key`` block (no edge tiles)."""
    return all(extent % c.constexprs[key] == 0 for c in configs)


def _count(n: int, what: str) -> str:
    return f"one {what}" if n == 1 else f"{n} {what}s"


def _fmt_shape(shape) -> str:
    return "x".join(str(d) for d in shape) if shape else "scalar"


def _term(name: str, coef: int) -> str | None:
    """``name * coef`` simplified; None for a zero coefficient."""
    return None if coef == 0 else name if coef == 1 else f"{name} * {coef}"


def _sum(*terms) -> str:
    kept = [t for t in terms if t is not None]
    return " + ".join(kept) if kept else "0"



# --------------------------------------------------------------------------------------------
# The kernel body
# --------------------------------------------------------------------------------------------


def lower_contraction(ctx: TritonContext) -> tuple:
    """Write the body of a matmul or conv kernel into ``ctx.code``; its launch configs."""
    anchor = anchor_op(ctx)
    for y in ctx.yields:
        if y.type.shape != anchor.result.type.shape:
            raise ctx.failure(f"the epilogue yields shape {_fmt_shape(y.type.shape)}, not the "
                              f"{anchor.name}'s {_fmt_shape(anchor.result.type.shape)}")
    reason = contraction_unsupported_reason(anchor)
    if reason is not None:
        raise ctx.failure(reason)
    if 0 in anchor.result.type.shape:
        ctx.code.line("pass  # an empty result")
        return (LaunchConfig({}, (1,)),)
    wide = ctx.index_type() == "tl.int64"
    # an int8 contraction's zero points are read as stored: their shapes say per tensor or per column
    zero_pointers = [_pointer(ctx, anchor, v) for v in anchor.operands[2:]]
    if anchor.name in ("lz.matmul", "lz.matmul_integer"):
        stored = [stored_operand(ctx, v, anchor) for v in anchor.operands[:2]]
        shape = MatmulShape.of(anchor, stored[0][1], stored[1][1])
        pointers = [_pointer(ctx, anchor, source) for source, _ in stored]
        return _matmul(ctx, anchor, shape, pointers + zero_pointers, wide)
    pointers = [_pointer(ctx, anchor, v) for v in anchor.operands[:2]]
    return _conv(ctx, anchor, ConvShape.of(anchor), pointers + zero_pointers, wide)


def _pointer(ctx: TritonContext, anchor: Operation, v) -> str:
    """The buffer of kernel operand ``v``, which ``anchor`` reads."""
    if v not in ctx.body.args:
        raise ctx.failure(f"{anchor.name} reads an operand computed in the kernel (a contraction's operands come "
                          "from memory)")
    return ctx.operand_buffers[ctx.body.args.index(v)].pointer


def _describe(ctx: TritonContext, anchor: Operation, what: str) -> None:
    """The kernel's opening comment: the contraction, the GEMM it is, the fused ops."""
    prologue = [v.owner for v in anchor.operands if isinstance(v.owner, Operation)]
    epilogue = [op.name for op in ctx.body.ops
                if op is not anchor and op not in prologue and op.name not in ("lz.yield", "lz.constant")]
    ctx.code.line(f"# {what}")
    if prologue:
        ctx.code.line(f"# operands read through {', '.join(sorted({op.name for op in prologue}))} (strides)")
    ctx.code.line(f"# epilogue on the accumulator: {', '.join(epilogue)}" if epilogue else "# no epilogue")


def _unravel(code: TritonCode, flat: str, names, extents) -> None:
    """``names[i] =`` the coordinates of row-major position ``flat`` over ``extents``."""
    inner = math.prod(extents)
    for i, (name, extent) in enumerate(zip(names, extents)):
        inner //= extent
        value = flat if inner == 1 else f"{flat} // {inner}"
        code.line(f"{name} = {value} % {extent}" if i else f"{name} = {value}")


def _program_tile(code: TritonCode, gemm: Gemm, outer: str, wide: bool) -> None:
    """``outer`` (when the kernel holds several GEMMs), then the tile's ``rows`` and ``cols``:
    programs are numbered outer-major, then in grouped order."""
    code.line("pid = tl.program_id(0).to(tl.int64)" if wide else "pid = tl.program_id(0)")
    code.line(f"tiles_m = tl.cdiv({gemm.m}, BLOCK_M)")
    code.line(f"tiles_n = tl.cdiv({gemm.n}, BLOCK_N)")
    tile = "pid"
    if gemm.outer > 1:
        code.line(f"{outer} = pid // (tiles_m * tiles_n)")
        code.line("tile = pid % (tiles_m * tiles_n)")
        tile = "tile"
    code.line("# grouped order: GROUP_M row tiles sweep the column tiles together (their B tiles stay in L2)")
    code.line("group_tiles = GROUP_M * tiles_n")
    code.line(f"first_m = {tile} // group_tiles * GROUP_M")
    code.line("group_m = tl.minimum(tiles_m - first_m, GROUP_M)")
    code.line(f"tile_m = first_m + {tile} % group_tiles % group_m")
    code.line(f"tile_n = {tile} % group_tiles // group_m")
    code.line("rows = tile_m * BLOCK_M + tl.arange(0, BLOCK_M)")
    code.line("cols = tile_n * BLOCK_N + tl.arange(0, BLOCK_N)")


def _clamped(code: TritonCode, name: str, source: str, extent: int, whole: bool) -> str:
    """``source`` inside ``[0, extent)``, as ``name``: an edge tile's overhang reads index ``source %
    extent`` again, so loads stay in bounds (``source`` itself when every tile is whole)."""
    if whole:
        return source
    code.line(f"{name} = {source} % {extent}")
    return name


def _load(pointer: str, mask: str | None, kind: DotKind, pad: str | None = None) -> str:
    """A tile's load; a masked one reads ``pad`` (an int8 operand's zero point), else 0."""
    if mask is None:
        return f"tl.load({pointer})"
    return f"tl.load({pointer}, mask={mask}, other={pad or ('0.0' if kind.dot else '0')})"


def _k_loop(code: TritonCode, gemm: Gemm, load_tiles, steps, whole_k: bool,
            zero_points: ZeroPoints | None) -> TValue | None:
    """``acc``, summed over K: ``load_tiles(mask_b)`` writes the lines that load tiles ``a`` and
    ``b`` at step ``k`` (``mask_b``: B's rows inside K, None when K blocks are whole); ``steps``
    advance the pointers.  With ``zero_points`` (an int8 contraction), the exact sums after the
    loop (else None: ``acc`` is the product)."""
    kind = gemm.kind
    code.line(f"acc = tl.zeros((BLOCK_M, BLOCK_N), dtype={kind.accumulator})")
    if zero_points:
        zero_points.start(code)
    with code.block(f"for k in range(0, {gemm.k}, BLOCK_K):"):
        load_tiles(None if whole_k else f"ks[:, None] < {gemm.k} - k")
        if zero_points:
            zero_points.signed_tiles(code)
        code.line(f"acc = {kind.product(kind.loaded('a'), kind.loaded('b'), 'acc')}")
        if zero_points:
            zero_points.sum_tiles(code)
        for step in steps:
            code.line(step)
    return zero_points.correct(code, gemm.k) if zero_points else None


def _tile_mask(m: int, n: int, whole_m: bool, whole_n: bool) -> str | None:
    parts = ([] if whole_m else [f"(rows < {m})[:, None]"]) + ([] if whole_n else [f"(cols < {n})[None, :]"])
    return " & ".join(parts) if parts else None


def _matmul(ctx: TritonContext, anchor: Operation, shape: MatmulShape, pointers, wide: bool) -> tuple:
    code = ctx.code
    dtype = anchor.result.type.element_type
    gemm = Gemm(shape.batches, shape.m, shape.n, shape.k, DotKind.of_anchor(anchor))
    if gemm.kind.bf16_tiles:
        ctx.extra_helpers["BF16_TILES"] = BF16_TILES_SOURCE
    zero_points = ZeroPoints.of(ctx, anchor)
    configs = gemm.configs()
    whole_m, whole_n = _every(configs, "BLOCK_M", shape.m), _every(configs, "BLOCK_N", shape.n)
    whole_k = _every(configs, "BLOCK_K", shape.k)
    a_shape, b_shape = (v.type.shape for v in anchor.operands[:2])
    _describe(ctx, anchor, f"{anchor.name} {_fmt_shape(a_shape)} @ {_fmt_shape(b_shape)} -> "
                           f"{_fmt_shape(anchor.result.type.shape)} {dtype}: {_count(gemm.outer, 'GEMM')} of "
                           f"{shape.m}x{shape.k} @ {shape.k}x{shape.n}")
    _program_tile(code, gemm, "batch", wide)
    rows = _clamped(code, "rows_in", "rows", shape.m, whole_m)
    cols = _clamped(code, "cols_in", "cols", shape.n, whole_n)
    code.line("ks = tl.arange(0, BLOCK_K)")
    # the batch coordinates ("batch" itself for one batch dim; none for one GEMM)
    coords = [] if gemm.outer == 1 else ["batch"] if len(shape.batch_shape) == 1 else \
        [f"batch{i}" for i in range(len(shape.batch_shape))]
    if len(coords) > 1:
        _unravel(code, "batch", coords, shape.batch_shape)
    (a_row, a_k), (b_k, b_col) = shape.a_matrix_strides, shape.b_matrix_strides
    # a 1-D operand has stride 0 along its added dim, where the tile's index is always 0: any
    # stride keeps the tile two-dimensional
    a_row, b_col = a_row or 1, b_col or 1
    a_batch = [_term(c, s) for c, s in zip(coords, shape.a_batch_strides)]
    b_batch = [_term(c, s) for c, s in zip(coords, shape.b_batch_strides)]
    code.line(f"a_tile = {pointers[0]} + {_sum(*a_batch, _term(f'{rows}[:, None]', a_row), _term('ks[None, :]', a_k))}")
    code.line(f"b_tile = {pointers[1]} + {_sum(*b_batch, _term('ks[:, None]', b_k), _term(f'{cols}[None, :]', b_col))}")
    if zero_points:
        zero_points.load(code, pointers[2], pointers[3], cols)
    a_pad, b_pad = (zero_points.a_pad, zero_points.b_pad) if zero_points else (None, None)

    rounded = rounded_operands(ctx, anchor)

    def load_tiles(mask_b):
        mask_a = None if mask_b is None else f"ks[None, :] < {shape.k} - k"
        code.line(f"a = {_load('a_tile', mask_a, gemm.kind, a_pad)}")
        code.line(f"b = {_load('b_tile', mask_b, gemm.kind, b_pad)}")
        for tile, cast in zip("ab", rounded):
            if cast:  # float32 read through a cast to bf16/f16: rounded as the cast's kernel rounds, then 16 bits
                code.line(f"{tile} = {ctx.s.to_storage(ctx.s.round(TValue(tile, anchor.result.type.element_type)))}")

    sums = _k_loop(code, gemm, load_tiles,
                   [f"a_tile += {_term('BLOCK_K', a_k)}", f"b_tile += {_term('BLOCK_K', b_k)}"], whole_k, zero_points)
    index = [_block_var(c, d, c) for c, d in zip(coords, shape.batch_shape)] if coords else \
        [Affine()] * len(shape.batch_shape)
    if shape.has_rows:
        index.append(_block_var("row", shape.m, f"{rows}[:, None]"))
    if shape.has_cols:
        index.append(_block_var("col", shape.n, f"{cols}[None, :]"))
    offsets = _sum(_term("batch", shape.m * shape.n) if coords else None, _term(f"{rows}[:, None]", shape.n),
                   f"{cols}[None, :]")
    _epilogue(ctx, anchor, gemm.kind, sums, index, offsets, _tile_mask(shape.m, shape.n, whole_m, whole_n))
    return configs


def _conv(ctx: TritonContext, anchor: Operation, s: ConvShape, pointers, wide: bool) -> tuple:
    code = ctx.code
    dtype = anchor.result.type.element_type
    pixels = s.n * s.oh * s.ow
    gemm = Gemm(s.groups, pixels, s.out_per_group, s.k, DotKind.of_anchor(anchor))
    if gemm.kind.bf16_tiles:
        ctx.extra_helpers["BF16_TILES"] = BF16_TILES_SOURCE
    zero_points = ZeroPoints.of(ctx, anchor)
    configs = gemm.configs()
    whole_m, whole_n = _every(configs, "BLOCK_M", pixels), _every(configs, "BLOCK_N", s.out_per_group)
    whole_k = _every(configs, "BLOCK_K", s.k)
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = s.strides, s.dilations, s.pads
    x_shape, w_shape = (v.type.shape for v in anchor.operands[:2])
    attrs = f"strides [{sh}, {sw}], pads [{pt}, {pl}, {pb}, {pr}], dilations [{dh}, {dw}], groups {s.groups}"
    _describe(ctx, anchor, f"{anchor.name} {_fmt_shape(x_shape)} * {_fmt_shape(w_shape)} -> "
                           f"{_fmt_shape(anchor.result.type.shape)} {dtype} ({attrs}): an implicit GEMM per group "
                           f"of {pixels} pixels (image, oh, ow) x {s.out_per_group} channels x {s.k} taps (ci, kh, kw)")
    _program_tile(code, gemm, "group", wide)
    pixel = _clamped(code, "pixels", "rows", pixels, whole_m)
    column = _clamped(code, "cols_in", "cols", s.out_per_group, whole_n)
    code.line(f"channels = group * {s.out_per_group} + {column}" if s.groups > 1 else f"channels = {column}")
    _unravel(code, pixel, ["image", "oh", "ow"], (s.n, s.oh, s.ow))
    code.line(f"ih0 = {_sum(_term('oh', sh), str(-pt) if pt else None)}".replace("+ -", "- "))
    code.line(f"iw0 = {_sum(_term('ow', sw), str(-pl) if pl else None)}".replace("+ -", "- "))
    group_offset = _term("group", s.in_per_group * s.h * s.w) if s.groups > 1 else None
    code.line(f"x_image = {pointers[0]} + {_sum(_term('image', s.c * s.h * s.w), group_offset)}")
    code.line("ks = tl.arange(0, BLOCK_K)")
    code.line(f"w_tile = {pointers[1]} + {_sum(_term('channels[None, :]', s.k), 'ks[:, None]')}")
    if zero_points:  # the padding holds the input's zero point (a real 0), as K's tail does
        zero_points.load(code, pointers[2], pointers[3], "channels")
    a_pad, b_pad = (zero_points.a_pad, zero_points.b_pad) if zero_points else (None, None)
    taps = s.kh * s.kw

    def load_tiles(mask_b):
        code.line("taps = k + ks")
        code.line(f"ci = taps // {taps}" if taps > 1 else "ci = taps")
        if s.kh > 1:
            code.line(f"kh = taps // {s.kw} % {s.kh}" if s.kw > 1 else f"kh = taps % {s.kh}")
        if s.kw > 1:
            code.line(f"kw = taps % {s.kw}")
        code.line(f"ih = ih0[:, None] + {_term('kh[None, :]', dh)}" if s.kh > 1 else "ih = ih0[:, None]")
        code.line(f"iw = iw0[:, None] + {_term('kw[None, :]', dw)}" if s.kw > 1 else "iw = iw0[:, None]")
        # rows past the top (bottom, ...) pad exist only when there is such a pad
        inside = ((["(ih >= 0)"] if pt else []) + ([f"(ih < {s.h})"] if pb else [])
                  + (["(iw >= 0)"] if pl else []) + ([f"(iw < {s.w})"] if pr else []))
        if mask_b is not None:
            inside.append(f"(taps < {s.k})[None, :]")
        if inside:
            code.line(f"inside = {' & '.join(inside)}")
        x_offsets = _sum(_term("ci[None, :]", s.h * s.w), _term("ih", s.w), "iw")
        code.line(f"a = {_load(f'x_image[:, None] + {x_offsets}', 'inside' if inside else None, gemm.kind, a_pad)}")
        code.line(f"b = {_load('w_tile', mask_b, gemm.kind, b_pad)}")

    sums = _k_loop(code, gemm, load_tiles, ["w_tile += BLOCK_K"], whole_k, zero_points)
    index = [_block_var("image", s.n, "image[:, None]"), _block_var("channel", s.o, "channels[None, :]"),
             _block_var("oh", s.oh, "oh[:, None]"), _block_var("ow", s.ow, "ow[:, None]")]
    offsets = _sum(_term("image[:, None]", s.o * s.oh * s.ow), _term("channels[None, :]", s.oh * s.ow),
                   _term("oh[:, None]", s.ow), "ow[:, None]")
    _epilogue(ctx, anchor, gemm.kind, sums, index, offsets, _tile_mask(pixels, s.out_per_group, whole_m, whole_n))
    return configs


def _block_var(name: str, extent: int, expr: str) -> Affine:
    """An index of the tile: the Triton block ``expr`` over ``[0, extent)``."""
    return Affine.of(Var(name, extent, payload=expr))


def _epilogue(ctx: TritonContext, anchor: Operation, kind: DotKind, sums: TValue | None, index, offsets: str,
              mask: str | None) -> None:
    """Every yielded value at the tile's ``index`` (an ``Affine`` per result dim), the
    contraction's value being ``sums`` (an int8 contraction's) or ``acc`` rounded to its element
    type, stored at ``offsets`` (always a full BLOCK_M x BLOCK_N block, so smaller values
    broadcast) under ``mask``."""
    code, s = ctx.code, ctx.s
    dtype = anchor.result.type.element_type
    code.line(f"# the epilogue at the tile's index, the {anchor.name} being the sums")
    if sums is None and kind.dot:
        sums = s.round(TValue("acc", dtype))
    elif sums is None:  # the integer sums wrap like the element type's when truncated to it
        sums = TValue(code.assign("sums", f"acc.to({compute_dtype(dtype)})"), dtype)
    emitter = ctx.emitter
    emitter.new_scope()
    emitter.mask = None  # the index is clamped into the result: every load is in bounds
    emitter.overrides[anchor] = lambda op, value, at: sums
    values = [emitter.at(y, index) for y in ctx.yields]
    store_mask = "" if mask is None else f", mask={mask}"
    for value, buffer in zip(values, ctx.result_buffers):
        code.line(f"tl.store({buffer.pointer} + {offsets}, {s.to_storage(value)}{store_mask})")
