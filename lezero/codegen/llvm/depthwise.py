"""float32 convolutions with few output channels per group (depthwise above all): vector FMAs
along the output's pixels, the epilogue fused.

The GEMM's register tiles (6 x 64) run along output channels too: a depthwise conv, one output
channel per group, would fill one row in six of them.  Here a group's output channels are
computed one at a time, each as ``out[q] = sum_k w[k] * col[k, q]`` over the same q-space and
slab as ``ConvGemm``'s direct mode (``contraction_gemm.py``): pixels numbered ``q = oh * WQ +
ow`` over rows of the zero-padded input split into ``sh x sw`` phases, so that every tap reads
one contiguous run of the slab at a constant offset (``b_row_offsets``).  So a tap is one
unaligned vector load and one vector FMA per W pixels whatever the stride (stride 2 reads
phases, never gathers), pads are zeros in the slab (no test per element), dilation only moves
the offsets, and an image of any width fills the vectors across its rows (7x7 outputs of a 5x5
kernel: 49 pixels in 73 lanes, where vectors along each row would use 49 of 112).  The
``WQ - OW`` pixels past each row are computed and not stored.

A work item is a block of output rows of one (image, group): the slab of the block's input
rows is built (in L1 for BLOCK_SLAB_FLOATS), then each output channel of the group (one, or the
multiplier) sums its taps over steps of a few vectors of q (``step_vectors``) (the taps unrolled, the input
channels of the group a loop), stores its sums to a row of the workspace, and the kernel's
epilogue runs over them as ``ConvGemm``'s tile epilogue does (``TileEpilogue``: a loop per
output row that LLVM vectorizes; for small images, one run over the output's pixels, the sums
compacted first, ``compacts_pixels``).  The slab and the sums are ``malloc``ed once per call.

Small images (``channels_in_lanes``: depthwise of multiplier 1, 5x5 up to 784 output pixels
(28x28), 3x3 and others up to 100, padded input slabs up to LANES_MAX_SLAB_PIXELS, 8- or 16-float
vectors) run ``lower_depthwise_lanes`` instead, channels in the lanes as ONNX Runtime's NCHWc
kernels: a work item is a block of ``w`` channels of one image.
Its weights are transposed to a vector per tap and its input to a zero-padded [row][column][channel]
slab (``vectors.transpose_square``: w x w blocks in registers, log2(w) stages of two-source shuffles; a channel
past C reads the last one and its lanes are never stored), every output pixel is then one
accumulator summing its taps in the same order as the kernel above (full-lane FMAs; up to
LANES_MAX_COLUMNS pixels of an output row per step, the taps unrolled), and the sums are
transposed back to [channel][pixel] for the same epilogue over contiguous pixels (``pixel_columns``).
The per-channel slab of the kernel above (a 7x7 5x5 image: 11 rows of per-row control for 125
FMAs) is gone; what remains per w channels is 64 shuffles per w x w block in and out, which at 3x3
over 14x14 costs more than the pixels-in-lanes kernel's overhead (hence the two pixel limits).
The results are bit-identical to the kernel above's.

Larger images whose output rows are a vector wide or more (``rows_in_place``: multiplier 1, stride
1 or 2, no dilation) run ``lower_depthwise_rows``: no slab; per output row and vector of outputs,
each tap row of the input is read in place as aligned vectors and every tap's vector is one shuffle
of two of them (stride 2: of their even or odd lanes), so a vector of outputs costs 3 loads per tap
row instead of one unaligned load per tap (on Zen 4 an unaligned 64-byte load touches two cache
lines) and stride 2 no longer copies its input into phases.  Same taps, same order: bit-identical.
"""
from __future__ import annotations

import llvmlite.ir as ir

from lezero.codegen.contraction_shapes import ConvShape
from lezero.codegen.llvm import gemm, gemm_epilogue
from lezero.codegen.llvm.context import KernelContext
from lezero.codegen.llvm.contraction_gemm import ConvGemm, TileEpilogue
from lezero.codegen.llvm.ir_types import FLOAT, I8, I32, I64, PTR, VOID
from lezero.codegen.llvm.loops import declare, for_range, i64, min_i64
from lezero.codegen.llvm.vectors import concatenate, splat, transpose_square
from lezero.ir.core import Operation

# Accumulators per step along q (each a vector of the target's width), at most: with the taps'
# input vectors and weights they stay in registers.
MAX_VECTORS = 6
# A work item's slab (its output rows' input, all phases) is cut to about this many floats, so
# that it stays in L1 while every tap reads it; more items than this per image are not needed.
BLOCK_SLAB_FLOATS = 6144
MIN_ITEMS = 16
# A small image whose whole q-space is one step (one work item per channel) has its sums moved
# to the output's pixels in registers (``compacted``: one permute of two or three accumulators per
# vector) when the epilogue walking the output rows would take at least this many times the vector
# iterations of one run over the pixels: a 7x7 output's rows are 7 of 16 lanes (7 iterations, 4
# over 49 pixels), and a SiLU epilogue per iteration cost as much as the 25 taps.  Xeon (AMX class),
# 1 thread, medians (minimums) of 300 calls in random order, load 4-7 (shared machine), row walk ->
# compacted: dw 5x5 1152 at 7x7 + SiLU 203 -> 168 us (168 -> 131), 218 -> 174 (127 -> 110); dw 3x3
# 960 at 7x7 + ReLU6 80 -> 76 (55 -> 50); no epilogue the same (127 / 127).  8-float vectors (7 of
# 8 lanes a row at 7x7) compact only smaller images.
COMPACT_MIN_ITERATION_RATIO = 1.5
# Depthwise convs (multiplier 1) of at most LANES_MAX_PIXELS output pixels (kernels of at least
# LANES_MANY_TAPS taps) or LANES_MAX_PIXELS_FEW_TAPS (fewer) run with channels in the vector lanes
# (lower_depthwise_lanes), on targets of these vector widths; LANES_MAX_COLUMNS output columns of a
# row are summed per step (accumulators in registers).  Xeon (AMX class), 1 thread, medians of 150
# calls in random order, load ~3, us channels / pixels in lanes: 5x5 1152 at 7x7 + SiLU 83 / 142,
# 5x5 672 at 14x14 156 / 208, 5x5 s2 672 14 -> 7 63 / 91, 3x3 960 at 7x7 37 / 50, 3x3 100 at 10x10
# 20 / 22, 5x5 240 at 28x28 194 / 242, but 3x3 384 at 14x14
# 57 / 48 and 3x3 s2 192 28 -> 14 64 / 55 (the transposes outweigh 9 taps there).  AVX2
# (x86-64-v3 code on the same Xeon): 5x5 1152 at 7x7 107 / 158, 5x5 672 at 14x14 264 / 314, 5x5
# 240 at 28x28 331 / 413, 3x3 960 at 7x7 53 / 53.
LANES_MAX_PIXELS = 784
LANES_MANY_TAPS = 25
LANES_MAX_PIXELS_FEW_TAPS = 100
# ... and of a padded input slab of at most this many pixels (64 KiB of 16-float vectors: 5x5 at
# 28x28).  In efficientnet_b0 (1 thread, profiled) the 5x5 s2 144 56 -> 28 (a 59 x 59 slab, 218 KiB)
# ran 227 us in lanes against 190 on pixels, though alone the two were equal (244 / 244).
LANES_MAX_SLAB_PIXELS = 1024
LANES_WIDTHS = (8, 16)
LANES_MAX_COLUMNS = 14
# Depthwise convs (multiplier 1, stride 1 or 2, no dilation) whose output rows are at least
# ROWS_MIN_VECTORS and at most ROWS_MAX_VECTORS vectors wide (and that channels_in_lanes leaves)
# run ``lower_depthwise_rows``: the input read in place by aligned loads, each tap's vector a
# shuffle of two of them (no slab, no unaligned loads), a row's vectors unrolled; ROWS_BLOCK_FLOATS
# of sums per epilogue call.  AMD EPYC Zen 4 (znver4), 1 thread, kernel medians (minimums) of 150
# profiled calls alternating with the slab kernel, load 6.5, us slab -> rows: dw 3x3 + ReLU6 32 at
# 112x112 260 -> 159 (205 -> 126), s2 96 112 -> 56 384 -> 162 (277 -> 122), 144 at 56x56 305 -> 192
# (175 -> 128), s2 144 56 -> 28 129 -> 66-76 (96 -> 51), 192 at 28x28 76-94 -> 60-63; dw 5x5 s2
# 144 56 -> 28 + ReLU6 293 -> 186; a row of one vector (s2 192 28 -> 14: 14 columns) stays.
ROWS_MIN_VECTORS = 1
ROWS_MAX_VECTORS = 16
ROWS_BLOCK_FLOATS = 2048


def row_block(s: ConvShape, plan: ConvGemm) -> int:
    """Output rows per work item: a slab of at most BLOCK_SLAB_FLOATS (one row at least), and
    enough items for the threads when there are few (image, group) pairs."""
    planes = s.in_per_group * len(plan.phases)
    rows = max(1, BLOCK_SLAB_FLOATS // (planes * plan.wq) - plan.qh[-1])
    blocks_for_items = -(-MIN_ITEMS // plan.batches)
    return max(1, min(s.oh, rows, -(-s.oh // blocks_for_items)))


def step_vectors(vectors: int) -> int:
    """Vectors per step along q for a block of ``vectors`` vectors of pixels: the fewest
    computed in whole steps (3 to MAX_VECTORS accumulators; the larger on a tie)."""
    if vectors <= MAX_VECTORS:
        return vectors
    return min(range(MAX_VECTORS, 2, -1), key=lambda g: -(-vectors // g) * g)


def compacts_pixels(s: ConvShape, plan: ConvGemm, rows: int, vectors: int, w: int) -> bool:
    """Whether the sums of a channel are compacted to the output's pixels (COMPACT_MIN_ITERATION_RATIO):
    one block of all the output rows, q-space of one step, extra columns past each row."""
    row_iterations, run_iterations = s.oh * -(-s.ow // w), -(-(s.oh * s.ow) // w)
    return (rows == s.oh and plan.wq != s.ow and vectors == step_vectors(vectors) <= MAX_VECTORS
            and row_iterations >= COMPACT_MIN_ITERATION_RATIO * run_iterations)


def compacted(b, totals: list, s: ConvShape, wq: int, w: int) -> list:
    """The q-space sums ``totals`` (vectors of ``w`` over q = oh * wq + ow from 0) as vectors over
    the output's pixels p = oh * OW + ow, each a shuffle of the accumulators its lanes come from;
    lanes past the last pixel repeat a sum (never stored)."""
    pixels = s.oh * s.ow
    out = []
    for first_pixel in range(0, pixels, w):
        qs = [(p // s.ow) * wq + p % s.ow for p in range(first_pixel, min(pixels, first_pixel + w))]
        low, high = qs[0] // w, qs[-1] // w
        joined = concatenate(b, totals[low:high + 1])
        mask = [q - low * w for q in qs] + [0] * (w - len(qs))
        out.append(b.shuffle_vector(joined, joined, ir.Constant(ir.VectorType(I32, w), mask)) if high > low or
                   mask != list(range(w)) else joined)
    return out


def lanes_slab(s: ConvShape) -> tuple[int, int]:
    """Rows and columns of ``lower_depthwise_lanes``'s padded input slab: those some tap reads."""
    return (max((s.oh - 1) * s.strides[0] + (s.kh - 1) * s.dilations[0] + 1, 1),
            max((s.ow - 1) * s.strides[1] + (s.kw - 1) * s.dilations[1] + 1, 1))


def channels_in_lanes(s: ConvShape, w: int) -> bool:
    """Whether a conv runs ``lower_depthwise_lanes``: depthwise of multiplier 1, a small image
    (LANES_MAX_PIXELS, LANES_MAX_SLAB_PIXELS), vectors of LANES_WIDTHS."""
    most = LANES_MAX_PIXELS if s.kh * s.kw >= LANES_MANY_TAPS else LANES_MAX_PIXELS_FEW_TAPS
    slab_h, slab_w = lanes_slab(s)
    return (w in LANES_WIDTHS and s.groups == s.c == s.o and s.oh * s.ow <= most
            and slab_h * slab_w <= LANES_MAX_SLAB_PIXELS)


def aligned_workspace(b, module, floats: int):
    """A 64-byte aligned float array of ``floats`` from malloc (trap on failure); (the raw pointer, the array)."""
    raw = b.call(declare(module, "malloc", PTR, [I64]), [i64(4 * floats + 64)])
    with b.if_then(b.icmp_unsigned("==", raw, ir.Constant(PTR, None)), likely=False):
        b.call(declare(module, "llvm.trap", VOID, []), [])
        b.unreachable()
    address = b.ptrtoint(raw, I64)
    return raw, b.gep(raw, [b.sub(b.and_(b.add(address, i64(63)), i64(-64)), address)], source_etype=I8)


def load_rows(b, module, base, row_floats: int, first: int, count: int, w: int, row_of) -> list:
    """Vectors of floats ``first .. first + count`` (count <= w; masked past it, lanes zero) of
    the ``w`` rows ``row_of(r)`` (i64 row indices) of a row-major array of ``row_floats`` columns."""
    vector = ir.VectorType(FLOAT, w)
    out = []
    for r in range(w):
        at = b.gep(base, [b.add(b.mul(row_of(r), i64(row_floats)), i64(first))], source_etype=FLOAT)
        if count == w:
            out.append(b.load(at, typ=vector, align=4))
        else:
            mask_type = ir.VectorType(ir.IntType(1), w)
            masked_load = declare(module, f"llvm.masked.load.v{w}f32.p0", vector, [PTR, I32, mask_type, vector])
            out.append(b.call(masked_load, [at, ir.Constant(I32, 4), ir.Constant(mask_type, [int(j < count) for j in
                                                                                          range(w)]),
                                            ir.Constant(vector, [0.0] * w)]))
    return out


def lower_depthwise_lanes(ctx: KernelContext, anchor: Operation, s: ConvShape, w: int) -> int:
    """Depthwise, channels in the vector lanes: the ABI function over work items ``image * blocks +
    block`` of ``w`` channels (see the module docstring)."""
    b = ctx.b
    module = ctx.module
    vector = ir.VectorType(FLOAT, w)
    zeros = ir.Constant(vector, [0.0] * w)
    fma = declare(module, f"llvm.fmuladd.v{w}f32", vector, [vector] * 3)
    sh, sw = s.strides
    dh, dw = s.dilations
    top, left = s.pads[0], s.pads[1]
    slab_h, slab_w = lanes_slab(s)
    taps = s.kh * s.kw
    pixels = s.oh * s.ow
    padded_pixels = -(-pixels // w) * w
    blocks = -(-s.c // w)
    slab_floats = slab_h * slab_w * w
    weight_floats = taps * w
    x_ptr, w_ptr = (ctx.fn.buffers[ctx.body.args.index(v)] for v in anchor.operands)
    plan = ConvGemm(s, direct=True, a_block_floats=0)
    plan.pixel_columns = True
    tile_store = TileEpilogue(ctx, anchor, plan)
    args = {f"buffer{i}": (p,) for i, p in enumerate(ctx.fn.buffers)}

    with b.if_then(b.icmp_signed("<", ctx.fn.begin, ctx.fn.end)):
        total = slab_floats + weight_floats + 2 * padded_pixels * w
        raw, slab = aligned_workspace(b, module, total)
        weights = b.gep(slab, [i64(slab_floats)], source_etype=FLOAT)
        results = b.gep(weights, [i64(weight_floats)], source_etype=FLOAT)  # [pixel][channel]
        sums = b.gep(results, [i64(padded_pixels * w)], source_etype=FLOAT)  # [channel][pixel]
        with for_range(b, 0, slab_floats, "clear") as i:  # the pads: zeros, never written again
            b.store(ir.Constant(FLOAT, 0.0), b.gep(slab, [i], source_etype=FLOAT), align=4)

        with for_range(b, ctx.fn.begin, ctx.fn.end, "item", vectorize_enable=0) as item:
            image, block = (b.udiv(item, i64(blocks)), b.urem(item, i64(blocks))) if blocks > 1 else (item, i64(0))
            channel0 = b.mul(block, i64(w))
            valid = min_i64(b, b.sub(i64(s.c), channel0), w)

            def channel(r):  # a channel past C reads the last one (its lanes are never stored)
                return min_i64(b, b.add(channel0, i64(r)), s.c - 1)

            def channel_row(r):
                return b.add(b.mul(image, i64(s.c)), channel(r))

            for first in range(0, taps, w):  # the taps' weight vectors, [tap][channel]
                count = min(w, taps - first)
                by_tap = transpose_square(b, load_rows(b, module, w_ptr, taps, first, count, w, channel))
                for t in range(count):
                    b.store(by_tap[t], b.gep(weights, [i64((first + t) * w)], source_etype=FLOAT), align=64)
            for first in range(0, s.h * s.w, w):  # the input, [row][column][channel] inside the pads
                count = min(w, s.h * s.w - first)
                by_pixel = transpose_square(b, load_rows(b, module, x_ptr, s.h * s.w, first, count, w, channel_row))
                for p in range(count):
                    row, col = divmod(first + p, s.w)
                    if row + top < slab_h and col + left < slab_w:
                        at = ((row + top) * slab_w + col + left) * w
                        b.store(by_pixel[p], b.gep(slab, [i64(at)], source_etype=FLOAT), align=64)
            with for_range(b, 0, s.oh, "oh", vectorize_enable=0) as oh:
                for first_col in range(0, s.ow, LANES_MAX_COLUMNS):
                    cols = range(first_col, min(s.ow, first_col + LANES_MAX_COLUMNS))
                    accumulators = [zeros for _ in cols]
                    row_base = b.gep(slab, [b.mul(oh, i64(sh * slab_w * w))], source_etype=FLOAT)
                    for kh in range(s.kh):
                        for kw in range(s.kw):
                            weight = b.load(b.gep(weights, [i64((kh * s.kw + kw) * w)], source_etype=FLOAT),
                                            typ=vector, align=64)
                            for a, ow in enumerate(cols):
                                at = (kh * dh * slab_w + ow * sw + kw * dw) * w
                                loaded = b.load(b.gep(row_base, [i64(at)], source_etype=FLOAT), typ=vector, align=64)
                                accumulators[a] = b.call(fma, [weight, loaded, accumulators[a]])
                    pixel0 = b.mul(oh, i64(s.ow))
                    for a, ow in enumerate(cols):
                        at = b.mul(b.add(pixel0, i64(ow)), i64(w))
                        b.store(accumulators[a], b.gep(results, [at], source_etype=FLOAT), align=64)
            for first in range(0, pixels, w):  # the sums back to [channel][pixel]
                by_pixel = [b.load(b.gep(results, [i64((first + p) * w)], source_etype=FLOAT), typ=vector, align=64)
                            for p in range(w)]
                for c, channel in enumerate(transpose_square(b, by_pixel)):
                    b.store(channel, b.gep(sums, [i64(c * padded_pixels + first)], source_etype=FLOAT), align=64)
            tile = gemm_epilogue.OutputTile(b, i64(0), i64(0), valid, i64(pixels), sums, w, padded_pixels, False,
                                            {**args, "batch": (b.add(b.mul(image, i64(s.c)), channel0),)})
            tile_store.emit(tile)
        b.call(declare(module, "free", VOID, [PTR]), [raw])
    ctx.s.external_symbols |= tile_store.external_symbols
    ctx.fn.finish()
    return s.n * blocks


def rows_in_place(s: ConvShape, w: int) -> bool:
    """Whether a conv runs ``lower_depthwise_rows``: depthwise of multiplier 1, stride 1 or 2 (both
    dims alike), no dilation, pads below a vector, output rows of ROWS_MIN_VECTORS to
    ROWS_MAX_VECTORS vectors."""
    sh, sw = s.strides
    return (s.groups == s.c == s.o and sh == sw in (1, 2) and s.dilations == (1, 1) and w >= 4
            and ROWS_MIN_VECTORS * w <= s.ow <= ROWS_MAX_VECTORS * w
            and max(s.pads[1], s.kw - 1 - s.pads[1]) < w // 2)


def lower_depthwise_rows(ctx: KernelContext, anchor: Operation, s: ConvShape, w: int) -> int:
    """Depthwise (``rows_in_place``), one work item per (image, channel): per output row and
    vector of ``w`` outputs at ``ow0``, the input row of each tap row is loaded as the aligned
    vectors ``V[k] = x[c0 + k w : c0 + (k + 1) w]``, c0 = stride * ow0 (constant masks at the row's
    ends, zeros past them; a tap row outside the image reads a row of zeros), and tap ``kw``'s
    vector, x[c0 + stride * j + kw - pad] over the lanes j, is one shuffle of two of them (stride 2:
    of the even / odd lanes of V[0], V[1] and one neighbour), summed in the same order as the other
    kernels (fmuladd from zero, kh-major: bit-identical results).  Unaligned loads cost Zen 4 a
    second cache-line access per vector, the stride-2 slab a copy of the whole input."""
    b = ctx.b
    module = ctx.module
    vector = ir.VectorType(FLOAT, w)
    zeros = ir.Constant(vector, [0.0] * w)
    fma = declare(module, f"llvm.fmuladd.v{w}f32", vector, [vector] * 3)
    mask_type = ir.VectorType(ir.IntType(1), w)
    masked_load = declare(module, f"llvm.masked.load.v{w}f32.p0", vector, [PTR, I32, mask_type, vector])
    stride = s.strides[0]
    top, left = s.pads[0], s.pads[1]
    row_vectors = -(-s.ow // w)
    # the V[k] a vector reads: k from -1 (a tap left of c0) to the last one a tap right of it reaches
    k_high = (stride * (w - 1) + s.kw - 1 - left) // w
    low_col, high_col = -w, stride * (row_vectors - 1) * w + (k_high + 1) * w  # columns any load covers
    zero_floats = high_col - low_col
    planes = s.n * s.c
    blocks = max(-(-s.oh // max(1, ROWS_BLOCK_FLOATS // s.ow)), min(s.oh, -(-MIN_ITEMS // planes)))
    rows = -(-s.oh // blocks)
    blocks = -(-s.oh // rows)
    sums_floats = rows * s.ow + w
    x_ptr, w_ptr = (ctx.fn.buffers[ctx.body.args.index(v)] for v in anchor.operands)
    plan = ConvGemm(s, direct=True, a_block_floats=0)
    plan.pixel_columns = True
    tile_store = TileEpilogue(ctx, anchor, plan)
    args = {f"buffer{i}": (p,) for i, p in enumerate(ctx.fn.buffers)}
    taps = s.kh * s.kw

    def aligned(row, first_col):
        """x_row[first_col : first_col + w], the columns outside the row zeros (masked, constant)."""
        inside = [0 <= first_col + j < s.w for j in range(w)]
        if not any(inside):
            return zeros
        at = b.gep(row, [i64(first_col)], source_etype=FLOAT)
        if all(inside):
            return b.load(at, typ=vector, align=4)
        return b.call(masked_load, [at, ir.Constant(I32, 4), ir.Constant(mask_type, [int(v) for v in inside]), zeros])

    def pick(sources: dict, wanted: list):
        """The vector of lanes ``wanted[j]`` = (source name, lane), a shuffle of at most two sources."""
        names = sorted({name for name, _ in wanted}, key=list(sources).index)
        assert len(names) <= 2, names
        first = sources[names[0]]
        if len(names) == 1 and [lane for _, lane in wanted] == list(range(w)):
            return first
        second = sources[names[1]] if len(names) == 2 else first
        mask = [lane + (w if name != names[0] else 0) for name, lane in wanted]
        return b.shuffle_vector(first, second, ir.Constant(ir.VectorType(I32, w), mask))

    def tap_vectors(row, ow0):
        """The ``s.kw`` vectors x_row[stride * (ow0 + j) + kw - left] of an output vector at ow0."""
        c0 = stride * ow0
        v = {k: aligned(row, c0 + k * w) for k in range(-1, k_high + 1)}
        out = []
        if stride == 1:
            # V[1] exists where a tap reaches right of c0's vector (k_high 1); narrow windows stop at V[0]
            sources = {"m": v[-1], "0": v[0], **({"p": v[1]} if k_high >= 1 else {})}
            for kw in range(s.kw):
                d = kw - left
                out.append(pick(sources,
                                [("m", w + j + d) if j + d < 0 else ("p", j + d - w) if j + d >= w else ("0", j + d)
                                 for j in range(w)]))
            return out
        halves = {half: pick({"0": v[0], "1": v[1]}, [("0", 2 * j + r) if 2 * j + r < w else ("1", 2 * j + r - w)
                                                       for j in range(w)]) for r, half in enumerate("eo")}
        for kw in range(s.kw):
            d = kw - left  # lane j reads column c0 + 2 j + d: lane j + e of the even (r = 0) or odd half
            e, r = divmod(d, 2)
            half = "eo"[r]
            wanted = []
            for j in range(w):
                col = 2 * (j + e) + r  # relative to c0
                if 0 <= j + e < w:
                    wanted.append((half, j + e))
                elif col < 0:
                    wanted.append(("m", col + w))
                else:
                    wanted.append((f"v{col // w}", col % w))
            sources = {half: halves[half], "m": v[-1], **{f"v{k}": v[k] for k in range(2, k_high + 1)}}
            out.append(pick(sources, wanted))
        return out

    with b.if_then(b.icmp_signed("<", ctx.fn.begin, ctx.fn.end)):
        raw, zero_row = aligned_workspace(b, module, zero_floats + sums_floats)
        sums = b.gep(zero_row, [i64(zero_floats)], source_etype=FLOAT)
        with for_range(b, 0, zero_floats, "clear") as i:
            b.store(ir.Constant(FLOAT, 0.0), b.gep(zero_row, [i], source_etype=FLOAT), align=4)
        zero_row = b.gep(zero_row, [i64(-low_col)], source_etype=FLOAT)  # column 0 of the row of zeros

        with for_range(b, ctx.fn.begin, ctx.fn.end, "item", vectorize_enable=0) as item:
            batch, block = (b.udiv(item, i64(blocks)), b.urem(item, i64(blocks))) if blocks > 1 else (item, i64(0))
            channel = b.urem(batch, i64(s.c)) if s.n > 1 else batch
            plane = b.gep(x_ptr, [b.mul(batch, i64(s.h * s.w))], source_etype=FLOAT)
            tap_weights = b.gep(w_ptr, [b.mul(channel, i64(taps))], source_etype=FLOAT)
            weights = [splat(b, b.load(b.gep(tap_weights, [i64(t)], source_etype=FLOAT), typ=FLOAT), w)
                       for t in range(taps)]
            first_row = b.mul(block, i64(rows))
            count = min_i64(b, b.sub(i64(s.oh), first_row), rows)
            with for_range(b, 0, count, "oh", vectorize_enable=0) as r:
                oh = b.add(first_row, r)
                accumulators = [zeros] * row_vectors
                for kh in range(s.kh):
                    ih = b.sub(b.add(b.mul(oh, i64(stride)), i64(kh)), i64(top))
                    inside = b.icmp_unsigned("<", ih, i64(s.h))  # 0 <= ih < h
                    row = b.select(inside, b.gep(plane, [b.mul(ih, i64(s.w))], source_etype=FLOAT), zero_row)
                    for a in range(row_vectors):
                        for kw, tap in enumerate(tap_vectors(row, a * w)):
                            accumulators[a] = b.call(fma, [weights[kh * s.kw + kw], tap, accumulators[a]])
                out = b.gep(sums, [b.mul(r, i64(s.ow))], source_etype=FLOAT)
                for a, acc in enumerate(accumulators):  # the lanes past the row: overwritten or slack
                    b.store(acc, b.gep(out, [i64(a * w)], source_etype=FLOAT), align=4)
            tile = gemm_epilogue.OutputTile(b, i64(0), b.mul(first_row, i64(s.ow)), i64(1),
                                            b.mul(count, i64(s.ow)), sums, 1, sums_floats, False,
                                            {**args, "batch": (batch,)})
            tile_store.emit(tile)
        b.call(declare(module, "free", VOID, [PTR]), [raw])
    ctx.s.external_symbols |= tile_store.external_symbols
    ctx.fn.finish()
    return planes * blocks


def lower_depthwise(ctx: KernelContext, anchor: Operation, s: ConvShape) -> int:
    """The ABI function over work items ``batch * blocks + block`` (see the module docstring)."""
    b = ctx.b
    module = ctx.module
    w = gemm.GemmConfig.for_target(ctx.cpu).vector_width
    if channels_in_lanes(s, w):
        return lower_depthwise_lanes(ctx, anchor, s, w)
    if rows_in_place(s, w):
        return lower_depthwise_rows(ctx, anchor, s, w)
    vector = ir.VectorType(FLOAT, w)
    zeros = ir.Constant(vector, [0.0] * w)
    fma = declare(module, f"llvm.fmuladd.v{w}f32", vector, [vector] * 3)
    plan = ConvGemm(s, direct=True, a_block_floats=0)
    plan.lay_out_slab(w)
    rows = row_block(s, plan)
    blocks = -(-s.oh // rows)
    taps = s.kh * s.kw
    tap_offsets = plan.b_row_offsets[:taps]
    channel_stride = len(plan.phases) * plan.rows_per_plane * plan.wq  # slab floats per input channel
    pixels_per_block = (rows - 1) * plan.wq + s.ow
    vectors = -(-pixels_per_block // w)
    compact = compacts_pixels(s, plan, rows, vectors, w)
    vectors = step_vectors(vectors)
    step = vectors * w
    sums_floats = pixels_per_block + step
    x_ptr, w_ptr = (ctx.fn.buffers[ctx.body.args.index(v)] for v in anchor.operands)
    plan.pixel_columns = compact
    tile_store = TileEpilogue(ctx, anchor, plan)
    args = {f"buffer{i}": (p,) for i, p in enumerate(ctx.fn.buffers)}

    with b.if_then(b.icmp_signed("<", ctx.fn.begin, ctx.fn.end)):
        slab_floats = -(-plan.slab_floats // 16) * 16
        raw, slab = aligned_workspace(b, module, slab_floats + sums_floats)
        sums = b.gep(slab, [i64(slab_floats)], source_etype=FLOAT)
        with for_range(b, 0, slab_floats, "clear") as i:  # the slack past a block's rows is read, never used
            b.store(ir.Constant(FLOAT, 0.0), b.gep(slab, [i], source_etype=FLOAT), align=4)

        with for_range(b, ctx.fn.begin, ctx.fn.end, "item", vectorize_enable=0) as item:
            batch, block = (b.udiv(item, i64(blocks)), b.urem(item, i64(blocks))) if blocks > 1 else (item, i64(0))
            first_row = b.mul(block, i64(rows))
            q_begin = b.mul(first_row, i64(plan.wq))
            last_row = min_i64(b, b.add(first_row, i64(rows)), s.oh)
            q_end = b.add(b.mul(b.sub(last_row, i64(1)), i64(plan.wq)), i64(s.ow))
            weights, col = plan.operands(b, ctx, x_ptr, w_ptr, batch, q_begin, q_end, slab)
            pixels = b.sub(q_end, q_begin)
            steps = b.udiv(b.add(pixels, i64(step - 1)), i64(step))
            with for_range(b, 0, plan.m, "oc", vectorize_enable=0) as oc:
                channel_weights = b.gep(weights, [b.mul(oc, i64(plan.k))], source_etype=FLOAT)
                with for_range(b, 0, steps, "q", vectorize_enable=0) as q_step:
                    q = b.add(q_begin, b.mul(q_step, i64(step)))
                    entry = b.block
                    with for_range(b, 0, s.in_per_group, "ci", vectorize_enable=0) as ci:
                        accumulators = [b.phi(vector, name=f"acc{v}") for v in range(vectors)]
                        for acc in accumulators:
                            acc.add_incoming(zeros, entry)
                        source = b.gep(col, [b.add(q, b.mul(ci, i64(channel_stride)))], source_etype=FLOAT)
                        tap_weights = b.gep(channel_weights, [b.mul(ci, i64(taps))], source_etype=FLOAT)
                        totals = list(accumulators)
                        for tap, offset in enumerate(tap_offsets):
                            weight = splat(b, b.load(b.gep(tap_weights, [i64(tap)], source_etype=FLOAT), typ=FLOAT), w)
                            for v in range(vectors):
                                pixels_at = b.gep(source, [i64(offset + v * w)], source_etype=FLOAT)
                                loaded = b.load(pixels_at, typ=vector, align=4)
                                totals[v] = b.call(fma, [weight, loaded, totals[v]])
                        for acc, total in zip(accumulators, totals):
                            acc.add_incoming(total, b.block)
                    for v, total in enumerate(compacted(b, totals, s, plan.wq, w) if compact else totals):
                        at = b.gep(sums, [b.add(b.mul(q_step, i64(step)), i64(v * w))], source_etype=FLOAT)
                        b.store(total, at, align=4)
                columns = i64(s.oh * s.ow) if compact else pixels
                tile = gemm_epilogue.OutputTile(b, oc, q_begin, i64(1), columns, sums, 1, sums_floats, False,
                                                {**args, "batch": (batch,)})
                tile_store.emit(tile)
        b.call(declare(module, "free", VOID, [PTR]), [raw])
    ctx.s.external_symbols |= tile_store.external_symbols
    ctx.fn.finish()
    return plan.batches * blocks
