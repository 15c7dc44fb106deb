"""float32 convolutions over channel-blocked activations (NCHW16c / NCHW8c), ONNX Runtime's
(MLAS's) and oneDNN's layout for convolutional nets.

An activation ``[N, C, H, W]`` is held as ``[N, ceil(C / c), H, W, c]`` (``c`` = ``block``, the
target's float vector width: 16 on AVX-512, 8 on AVX2): one pixel's ``c`` channels of a block
are one vector, and channels past ``C`` (the last block's padding lanes) are zeros.  The weights
are packed once (``packed_operands.PackedNchwcWeights``) as ``[C_out / (c * B)][ceil(C_in / c)]
[kh][kw][c in][B][c out]``: at one (input channel, tap) the ``B`` output-channel blocks of a
tile are ``B`` consecutive vectors.

A register tile is ``R`` consecutive output pixels of one output row by ``B`` output-channel
blocks (``R * B`` accumulators, ``R * B + B`` vector registers with the weights and a broadcast:
6 x 4 on AVX-512, as the GEMM's micro-kernel).  Its k loop runs over the input channel blocks (a
loop), the tap rows inside the image (a loop whose bounds the output row gives: padding rows are
never visited), the block's ``c`` channels (a loop, ``MAX_UNROLLED_TAPS`` taps a step) and the
tap columns (unrolled): per tap ``B`` vector loads and ``R`` broadcasts for ``R * B`` FMAs, every
address a constant offset from two pointers.  So no pixel that is not an output is computed
(the q-space conv, ``contraction_gemm.ConvGemm``, computes the columns past every row's end)
and no tap in the padding is multiplied.  A row's tiles never overlap: those with pixels whose
columns reach into the padding are built with those columns known (their FMAs left out, a
shorter one last), the tiles between them are a loop of tiles of ``R``.  A 1x1 conv of stride 1
without pads runs over one row of all the pixels (``flattened``).  The epilogue runs on the
accumulators: the bias (their initial values), a residual of the output's layout, ReLU; then one
vector store per accumulator.

A work item is one output row of ``B`` output-channel blocks (a tile group) of one image.  Where
a tile group's weights exceed ``CHUNK_WEIGHT_BYTES`` (3x3 convs of 64+ channels), the input
channel blocks are summed a chunk per pass over a band of rows, the partial sums kept in the
output, so the chunk's weights stay in L2 while every pixel of the band reads them (3x3 512 at
7x7: 51 -> 78 GFLOP/s, 1 thread, Zen 4).  The band is the calling thread's range of rows (the
pool gives each thread one contiguous range), cut only where its partial sums would outgrow
``BAND_BYTES``: so the bands follow the thread count the kernel runs on, unknown when it is
built, and each thread reads a chunk's weights once per band, not once per fixed slice of rows.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import llvmlite.ir as ir

from lezero.codegen.llvm.context import KernelFunction
from lezero.codegen.llvm.ir_types import FLOAT, I64
from lezero.codegen.llvm.loops import for_range, i64, min_i64, unravel_values
from lezero.codegen.llvm.target import CpuTarget
from lezero.codegen.llvm.vectors import call_intrinsic, splat
from lezero.codegen.packed_operands import PackedNchwcWeights
from lezero.ir.types import F32

# Vector registers a tile may hold as accumulators and weights (of 32 on AVX-512; 16 on AVX2).
MAX_TILE_REGISTERS = {32: 30, 16: 15}
# A pass over the output sums the input channel blocks whose packed weights (for one tile group)
# take at most this many bytes, so they stay in L2 while every pixel of the image reads them.
CHUNK_WEIGHT_BYTES = 128 * 1024
# A 1x1 conv runs over one row of all its pixels only where its tile groups make this many work
# items (the threads need them).
MIN_ITEMS = 8
# The partial sums of a band of output rows (a pass adds its chunk's input channels to them) kept
# within this many bytes: they stay in L2 until the next pass reads them.
BAND_BYTES = 256 * 1024
# Taps (channel x tap column) per step of a tile's channel loop: fully unrolled (48 for a 3x3 of
# 16 channels) LLVM hoisted the later steps' loads and spilled accumulators (3x3 64 at 56x56: 96
# -> 111 GFLOP/s as a loop, 1 thread, Zen 4); a 1x1 conv steps 4 channels at a time.
MAX_UNROLLED_TAPS = 4


def channel_block(cpu: CpuTarget) -> int:
    """The channels of a block on ``cpu``: a vector of floats, 16 on AVX-512, 8 on AVX2 (and
    wider-than-register vectors, correct and slow, on SSE: ``layout_block`` keeps NCHW there)."""
    return 16 if cpu.vector_bytes == 64 else 8


def layout_block(cpu: CpuTarget) -> int | None:
    """The block the blocked-layout pass converts convs to for ``cpu``, None where it keeps NCHW:
    x86 with FMA and 256-bit vectors or more (the kernel's tiles are sized for their registers)."""
    if cpu.arch != "x86_64" or cpu.vector_bytes < 32 or not cpu.has_fma:
        return None
    return channel_block(cpu)


@dataclass(frozen=True)
class NchwcConv:
    """One conv over blocked activations: ``batch`` images of ``in_channels`` x ``height`` x
    ``width`` to ``out_channels`` x out_height x out_width; ``residual``: an activation of the
    output's layout added before ``relu``."""

    batch: int
    in_channels: int
    out_channels: int
    height: int
    width: int
    kernel: tuple
    stride: tuple
    pads: tuple  # (top, left, bottom, right)
    block: int
    bias: bool = True
    residual: bool = False
    relu: bool = False

    def __post_init__(self):
        kh, kw = self.kernel
        if self.out_height < 1 or self.out_width < 1:
            raise ValueError(f"NchwcConv: {kh}x{kw} kernel over a padded {self.height}x{self.width} image "
                             f"has no output ({self})")
        if self.block not in (4, 8, 16):
            raise ValueError(f"NchwcConv: channel block {self.block} is not 4, 8 or 16")

    @property
    def out_height(self) -> int:
        return (self.height + self.pads[0] + self.pads[2] - self.kernel[0]) // self.stride[0] + 1

    @property
    def out_width(self) -> int:
        return (self.width + self.pads[1] + self.pads[3] - self.kernel[1]) // self.stride[1] + 1

    @property
    def in_blocks(self) -> int:
        return -(-self.in_channels // self.block)

    @property
    def out_blocks(self) -> int:
        return -(-self.out_channels // self.block)

    def tile(self, registers: int = 32) -> tuple[int, int]:
        """(R pixels, B output blocks) of the register tile: B the largest of 4, 3, 2, 1 dividing
        the output blocks, R as many pixels as the registers left hold, at most the row."""
        budget = MAX_TILE_REGISTERS[registers]
        for out_tile in (4, 3, 2, 1):
            if self.out_blocks % out_tile == 0 and budget // out_tile - 1 >= 4:
                break
        pixels = min(budget // out_tile - 1, self.out_width)
        if out_tile == 4 and registers == 32:
            pixels = min(pixels, 6)  # 6 x 4: 24 accumulators, as the GEMM's 6 x 4 micro-kernel
        return pixels, out_tile

    def weights(self, operand: int, registers: int = 32) -> PackedNchwcWeights:
        return PackedNchwcWeights(operand, self.out_channels, self.in_channels, *self.kernel, self.block,
                                  self.tile(registers)[1])

    def in_block_chunk(self, registers: int = 32) -> int:
        """Input channel blocks summed per pass over the output: as many as keep a tile group's
        weights within CHUNK_WEIGHT_BYTES; fewer than all make the passes accumulate in the output."""
        per_block = self.kernel[0] * self.kernel[1] * self.block * self.tile(registers)[1] * self.block * 4
        return max(1, min(self.in_blocks, CHUNK_WEIGHT_BYTES // per_block))

    def band_rows(self, registers: int = 32) -> int:
        """Output rows a pass sweeps at most: as many as keep a band's partial sums (one tile group's
        output rows) within BAND_BYTES, so that they stay in L2 from one pass to the next; at
        least one.  A thread's range of rows is swept in bands of this height, the last shorter."""
        row_bytes = self.tile(registers)[1] * self.block * self.out_width * 4
        return max(1, min(self.out_height, BAND_BYTES // row_bytes))

    def work_items(self, registers: int = 32) -> int:
        """The output rows of every (image, tile group): one item each, so a thread's contiguous
        range of them is one band as tall as the thread count allows (one thread: the whole image,
        each chunk's weights read once per band)."""
        flat = self.flattened(registers)
        return flat.batch * (flat.out_blocks // flat.tile(registers)[1]) * flat.out_height

    def flattened(self, registers: int = 32) -> "NchwcConv":
        """A 1x1 conv of stride 1 without pads is one over a single row of all the pixels, where its
        tile groups alone make MIN_ITEMS work items: its tiles then cross the image's rows (7x7: 49
        pixels in tiles of 6, not 7 rows of 6 + 1).  Fewer groups keep a work item per row (64
        output channels at 56x56 are one tile group: one work item, one thread, when flattened)."""
        if self.kernel == (1, 1) and self.stride == (1, 1) and not any(self.pads) and self.height > 1 \
                and self.batch * (self.out_blocks // self.tile(registers)[1]) >= MIN_ITEMS:
            return replace(self, height=1, width=self.height * self.width)
        return self

    def row_tiles(self, pixels: int) -> tuple[list[tuple[int, int]], tuple[int, int] | None]:
        """A row's tiles, which never overlap (a later pass adds to the sums a tile stored): the
        (start, pixel count) of those built with their padding columns known, and the (first
        start, count) of the loop over tiles of ``pixels`` whose every tap is inside the image."""
        ow, sw, left = self.out_width, self.stride[1], self.pads[1]
        first_inside = -(-left // sw)  # the first output column whose taps are all in the image
        last_inside = (self.width - self.kernel[1] + left) // sw  # the last one
        known, start = [], 0
        while start < min(first_inside, ow):
            known.append((start, min(pixels, ow - start)))
            start += pixels
        first, steps = start, 0
        while start + pixels <= min(ow, last_inside + 1):
            start, steps = start + pixels, steps + 1
        while start < ow:
            known.append((start, min(pixels, ow - start)))
            start += pixels
        return known, (first, steps) if steps else None


def lower_conv_blocked(ctx) -> int:
    """A kernel of one ``lz.conv2d_blocked`` (the blocked-layout pass's): its weights read packed
    (``ctx.packed_operands``); returns its work items."""
    ops = [op for op in ctx.body.ops if op.name not in ("lz.yield", "lz.constant")]
    if len(ops) != 1 or ops[0].name != "lz.conv2d_blocked":
        raise ctx.failure(f"a conv_blocked kernel holds one lz.conv2d_blocked, not {', '.join(o.name for o in ops)}")
    (op,) = ops
    if list(op.operands) != list(ctx.body.args) or op.result is not ctx.body.ops[-1].operands[0]:
        raise ctx.failure("lz.conv2d_blocked must read the kernel's arguments in order and be its result")
    if op.result.type.element_type != F32:
        raise ctx.failure(f"the blocked conv runs float32 only, not {op.result.type.element_type}")
    attrs = op.definition.attrs(op)
    x, w = op.operands[0].type.shape, op.operands[1].type.shape
    conv = NchwcConv(x[0], w[1], w[0], x[2], x[3], tuple(w[2:]), tuple(attrs.strides), tuple(attrs.pads), x[4],
                     True, len(op.operands) == 4, attrs.relu)
    registers = ctx.cpu.vector_registers
    ctx.packed_operands = (conv.weights(1, registers),)
    lower_nchwc_conv(ctx.fn, conv, registers)
    ctx.fn.finish()
    return conv.work_items(registers)


def nchwc_conv_module(name: str, conv: NchwcConv, registers: int = 32) -> ir.Module:
    """A module of the kernel alone (benchmarks, tests): ``void @name(i8** buffers, i64 begin, i64
    end)`` over the buffers (x, packed weights, [bias padded to whole blocks], [residual], y)."""
    module = ir.Module(name=name)
    fn = KernelFunction(module, name, 3 + conv.bias + conv.residual)
    lower_nchwc_conv(fn, conv, registers)
    fn.finish()
    return module


def lower_nchwc_conv(fn: KernelFunction, conv: NchwcConv, registers: int = 32) -> None:
    """The body of ``fn``, whose buffers are (x, packed weights, [bias padded to whole blocks],
    [residual], y), over work items ``conv.work_items(registers)``."""
    conv = conv.flattened(registers)
    pixels, out_tile = conv.tile(registers)
    c = conv.block
    b = fn.builder
    x, w = fn.buffers[0], fn.buffers[1]
    bias = fn.buffers[2] if conv.bias else None
    residual = fn.buffers[2 + conv.bias] if conv.residual else None
    y = fn.buffers[-1]
    kh, kw = conv.kernel
    (sh, sw), (top, left, _, _) = conv.stride, conv.pads
    oh_count, ow_count = conv.out_height, conv.out_width
    in_blocks, groups = conv.in_blocks, conv.out_blocks // out_tile
    vector = ir.VectorType(FLOAT, c)
    zero = ir.Constant(vector, [0.0] * c)
    known_tiles, interior = conv.row_tiles(pixels)
    tap_floats = c * out_tile * c  # packed weights of one (input block, tap)
    slots = fn.alloca(vector, pixels * out_tile, "acc")
    unroll = max(1, min(c, MAX_UNROLLED_TAPS // kw))  # channels per step of the channel loop

    def fma(a, m, acc):
        return call_intrinsic(b, "llvm.fma.v%df32" % c, a, m, acc)

    def slot(r, j):
        return b.gep(slots, [i64(r * out_tile + j)], source_etype=vector)

    def tile(at: dict, ow0, known: int | None, pixels: int = pixels):
        """The tile of ``pixels`` pixels ow0.. of the output row ``at`` describes (``known``: ow0 as
        a Python int, whose padding columns are left out of the FMAs)."""
        offsets = {}
        for r in range(pixels):
            for j in range(out_tile):
                pixel = b.add(b.add(at["out_row"], i64(j * oh_count * ow_count)), b.add(ow0, i64(r)))
                offsets[r, j] = b.mul(pixel, i64(c))
        for j in range(out_tile):
            if bias is not None:
                start = b.mul(b.add(at["out_block0"], i64(j)), i64(c))
                initial = b.load(b.gep(bias, [start], inbounds=True, source_etype=FLOAT), typ=vector, align=4)
            else:
                initial = zero
            for r in range(pixels):  # the first pass starts from the bias, a later one from its sums
                partial = b.load(b.gep(y, [offsets[r, j]], inbounds=True, source_etype=FLOAT), typ=vector, align=4)
                b.store(b.select(at["first_pass"], initial, partial), slot(r, j))
        iw0 = b.sub(b.mul(ow0, i64(sw)), i64(left))
        with for_range(b, at["cb_lo"], at["cb_hi"], "cb") as cb:
            plane = b.add(at["x_image"], b.mul(cb, i64(conv.height * conv.width * c)))
            w_block = b.add(at["w_group"], b.mul(cb, i64(kh * kw * tap_floats)))
            with for_range(b, at["kh_lo"], at["kh_hi"], "kh") as i:
                row = b.add(plane, b.mul(b.add(at["ih0"], i), i64(conv.width * c)))
                x_row = b.gep(x, [b.add(row, b.mul(iw0, i64(c)))], source_etype=FLOAT)
                w_row = b.gep(w, [b.add(w_block, b.mul(i, i64(kw * tap_floats)))], source_etype=FLOAT)
                # the channels of the block a loop (unrolled, LLVM's scheduler hoists the loads of
                # later steps and spills accumulators), the tap columns unrolled in it
                with for_range(b, 0, c // unroll, "ic", unroll_disable=1) as ic_step:
                    ic = b.mul(ic_step, i64(unroll))
                    x_channel = b.gep(x_row, [ic], source_etype=FLOAT)
                    w_channel = b.gep(w_row, [b.mul(ic, i64(out_tile * c))], source_etype=FLOAT)
                    acc = {(r, j): b.load(slot(r, j), typ=vector) for r in range(pixels) for j in range(out_tile)}
                    for u, jw in ((u, jw) for u in range(unroll) for jw in range(kw)):
                        valid = [r for r in range(pixels)
                                 if known is None or 0 <= (known + r) * sw - left + jw < conv.width]
                        weights = [b.load(b.gep(w_channel, [i64(jw * tap_floats + (u * out_tile + j) * c)],
                                                source_etype=FLOAT),
                                          typ=vector, align=64 if c == 16 else 4 * c) for j in range(out_tile)]
                        for r in valid:
                            value = b.load(b.gep(x_channel, [i64((r * sw + jw) * c + u)], source_etype=FLOAT),
                                           typ=FLOAT, align=4)
                            broadcast = splat(b, value, c)
                            for j in range(out_tile):
                                acc[r, j] = fma(broadcast, weights[j], acc[r, j])
                    for key, value in acc.items():
                        b.store(value, slot(*key))
        for (r, j), offset in offsets.items():
            value = b.load(slot(r, j), typ=vector)
            final = value  # the last pass applies the epilogue
            if residual is not None:
                final = b.fadd(final, b.load(b.gep(residual, [offset], inbounds=True, source_etype=FLOAT),
                                             typ=vector, align=4))
            if conv.relu:
                final = call_intrinsic(b, "llvm.maxnum.v%df32" % c, final, zero)
            if final is not value:
                value = b.select(at["last_pass"], final, value)
            b.store(value, b.gep(y, [offset], inbounds=True, source_etype=FLOAT), align=4)

    def output_row(at: dict, oh) -> None:
        # tap rows inside the image: kh_lo <= i < kh_hi, with ih = oh * sh - top + i in [0, H)
        ih0 = b.sub(b.mul(oh, i64(sh)), i64(top))
        below = b.sub(i64(conv.height), ih0)  # the taps i < below are above the image's end
        at = {**at, "ih0": ih0, "kh_lo": b.select(b.icmp_signed("<", ih0, i64(0)), b.sub(i64(0), ih0), i64(0)),
              "kh_hi": b.select(b.icmp_signed("<", below, i64(kh)), below, i64(kh)),
              "out_row": b.mul(b.add(b.mul(b.add(b.mul(at["n"], i64(conv.out_blocks)), at["out_block0"]),
                                           i64(oh_count)), oh), i64(ow_count))}
        for start, count in known_tiles:
            tile(at, i64(start), start, count)
        if interior is not None:
            first, steps = interior
            with for_range(b, 0, steps, "tile") as t:
                tile(at, b.add(i64(first), b.mul(t, i64(pixels))), None)

    chunk, band = conv.in_block_chunk(registers), conv.band_rows(registers)
    passes = -(-in_blocks // chunk)
    # the work items are output rows of (image, tile group) segments; a thread's range [begin, end)
    # is swept a band at a time, each band once per pass (the chunk's weights read once per band)
    first_segment = b.udiv(fn.begin, i64(oh_count))
    with for_range(b, first_segment, b.udiv(b.add(fn.end, i64(oh_count - 1)), i64(oh_count)), "segment") as segment:
        n, group = unravel_values(b, segment, (conv.batch, groups))
        segment_row0 = b.mul(segment, i64(oh_count))
        lo = b.sub(fn.begin, segment_row0)
        lo = b.select(b.icmp_signed("<", lo, i64(0)), i64(0), lo)
        hi = min_i64(b, b.sub(fn.end, segment_row0), oh_count)
        at = {"n": n, "out_block0": b.mul(group, i64(out_tile)),
              "x_image": b.mul(n, i64(in_blocks * conv.height * conv.width * c)),
              "w_group": b.mul(group, i64(in_blocks * kh * kw * tap_floats))}
        bands = b.udiv(b.add(b.sub(hi, lo), i64(band - 1)), i64(band))
        with for_range(b, 0, bands, "band") as band_index:
            first_row = b.add(lo, b.mul(band_index, i64(band)))
            rows = min_i64(b, band, b.sub(hi, first_row))
            with for_range(b, 0, passes, "pass") as pass_:
                last_pass = b.icmp_signed("==", pass_, i64(passes - 1))
                cb_lo = b.mul(pass_, i64(chunk))
                at_pass = {**at, "first_pass": b.icmp_signed("==", pass_, i64(0)), "last_pass": last_pass,
                           "cb_lo": cb_lo, "cb_hi": b.select(last_pass, i64(in_blocks), b.add(cb_lo, i64(chunk)))}
                with for_range(b, 0, rows, "row") as row_in_band:
                    output_row(at_pass, b.add(first_row, row_in_band))
