"""The blocked conv kernel (``codegen/llvm/conv_nchwc.py``) against lz.conv2d's numpy reference,
through the layout conversions and the weight packing of ``codegen/packed_operands.py``."""
from __future__ import annotations

import ctypes
from types import SimpleNamespace

import numpy as np
import pytest

from lezero.codegen.llvm import conv_nchwc, jit
from lezero.codegen.llvm.conv_nchwc import NchwcConv, channel_block, nchwc_conv_module
from lezero.codegen.llvm.target import cpu_target
from lezero.codegen.packed_operands import PackedNchwcWeights, blocked_to_nchw, nchw_to_blocked
from lezero.ir.dialect.contraction import Conv2dOp

# (batch, in, out, height, width, kernel, stride, pads, bias, residual, relu)
CASES = {
    "3x3_64_relu": (1, 64, 64, 12, 14, (3, 3), (1, 1), (1, 1, 1, 1), True, False, True),
    "3x3_residual": (1, 32, 32, 9, 20, (3, 3), (1, 1), (1, 1, 1, 1), True, True, True),
    "3x3_s2_odd_channels": (2, 20, 40, 9, 11, (3, 3), (2, 2), (1, 1, 1, 1), True, True, True),
    "1x1_flattened": (1, 48, 96, 7, 7, (1, 1), (1, 1), (0, 0, 0, 0), True, False, False),
    "1x1_s2_no_bias": (1, 24, 40, 10, 10, (1, 1), (2, 2), (0, 0, 0, 0), False, False, True),
    "7x7_s2_stem": (1, 3, 64, 23, 21, (7, 7), (2, 2), (3, 3, 3, 3), True, False, True),
    "uneven_pads": (1, 16, 48, 8, 13, (3, 5), (1, 2), (0, 2, 2, 1), True, False, False),
    "narrow_image_wide_pads": (1, 8, 16, 3, 4, (3, 3), (1, 1), (2, 2, 2, 2), True, False, True),
    "passes_through_the_output": (1, 256, 64, 7, 7, (3, 3), (1, 1), (1, 1, 1, 1), True, True, True),
}


def run(cpu, case, block=None, pieces=1):
    """The kernel compiled for ``cpu`` on random inputs; (its output as NCHW, the reference, the
    blocked output)."""
    n, ci, co, h, w, kernel, stride, pads, has_bias, has_residual, relu = case
    target = cpu_target(cpu)
    conv = NchwcConv(n, ci, co, h, w, kernel, stride, pads, block or channel_block(target), has_bias, has_residual,
                     relu)
    registers = target.vector_registers
    module = nchwc_conv_module("conv", conv, registers)
    function = jit.compile_module(module, cpu).ctypes_function("conv", None, [ctypes.c_void_p, ctypes.c_int64,
                                                                              ctypes.c_int64])
    rng = np.random.default_rng(ci * co + h)
    x = rng.standard_normal((n, ci, h, w)).astype(np.float32)
    weights = rng.standard_normal((co, ci, *kernel)).astype(np.float32)
    bias = rng.standard_normal(co).astype(np.float32)
    c = conv.block
    oh, ow = conv.out_height, conv.out_width
    residual = rng.standard_normal((n, co, oh, ow)).astype(np.float32)
    buffers = [nchw_to_blocked(x, c), conv.weights(1, registers).pack(weights)]
    if has_bias:
        buffers.append(np.concatenate([bias, np.zeros(conv.out_blocks * c - co, np.float32)]))
    if has_residual:
        buffers.append(nchw_to_blocked(residual, c))
    y = np.full((n, conv.out_blocks, oh, ow, c), np.nan, np.float32)
    buffers.append(y)
    pointers = (ctypes.c_void_p * len(buffers))(*[a.ctypes.data for a in buffers])
    items = conv.work_items(registers)
    bounds = sorted({0, items, *[items * k // pieces for k in range(1, pieces)]})
    for lo, hi in reversed(list(zip(bounds, bounds[1:]))):
        function(pointers, lo, hi)
    attrs = SimpleNamespace(strides=stride, pads=pads, dilations=(1, 1), groups=1)
    want = Conv2dOp().reference(attrs, x, weights)
    want = want + (bias.reshape(1, -1, 1, 1) if has_bias else 0) + (residual if has_residual else 0)
    if relu:
        want = np.maximum(want, 0)
    return blocked_to_nchw(y, co), want, y


@pytest.mark.cross_target(cases=CASES, group=lambda case: case[5])
def test_blocked_conv_matches_the_reference_on_every_cpu(cpu, case):
    got, want, blocked = run(cpu, case, pieces=3)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * float(np.abs(want).max()), err_msg=f"cpu {cpu}")
    # every lane written, the padding channels zeros: the next blocked kernel reads them
    np.testing.assert_array_equal(blocked, nchw_to_blocked(got, blocked.shape[-1]))


@pytest.mark.parametrize("block", [8, 4])
def test_narrower_blocks_on_the_host(block):
    """8-channel blocks (AVX2's) and 4 run on any CPU too."""
    got, want, _ = run("host", CASES["3x3_s2_odd_channels"], block=block)
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * float(np.abs(want).max()))


def test_a_pass_per_weight_chunk(monkeypatch):
    """Input channel blocks beyond a chunk's weights accumulate through the output, a pass each,
    over bands of rows: a thread's range of rows (pieces cut inside an image and across images and
    tile groups) swept in bands of at most band_rows (20 rows: bands of 3, the last shorter)."""
    monkeypatch.setattr(conv_nchwc, "CHUNK_WEIGHT_BYTES", 1)
    case = (2, 48, 128, 20, 9, (3, 3), (1, 1), (1, 1, 1, 1), True, True, True)
    conv = NchwcConv(*case[:8], 16)
    monkeypatch.setattr(conv_nchwc, "BAND_BYTES", 3 * 4 * 16 * 9 * 4)  # 3 rows of a tile group's sums
    assert conv.in_block_chunk() == 1 and conv.band_rows() == 3 and conv.work_items() == 2 * 2 * 20
    for pieces in (1, 3, 7):
        got, want, _ = run("host", case, pieces=pieces)
        np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5 * float(np.abs(want).max()))


def test_work_items_are_rows_and_bands_fit_the_band_bytes():
    """A work item is an output row of a tile group whatever the threads: a thread's range is swept
    in bands as tall as BAND_BYTES of partial sums allow (a 7x7 image: one band)."""
    conv = NchwcConv(1, 64, 64, 56, 56, (3, 3), (1, 1), (1, 1, 1, 1), 16)
    assert conv.in_block_chunk() < conv.in_blocks and conv.work_items() == 56
    assert conv.band_rows() == conv_nchwc.BAND_BYTES // (4 * 16 * 56 * 4)
    conv = NchwcConv(1, 512, 512, 7, 7, (3, 3), (1, 1), (1, 1, 1, 1), 16)
    assert conv.work_items() == 8 * 7 and conv.band_rows() == 7


def test_row_tiles_cover_each_pixel_once():
    for width, pads, kernel, stride in ((56, (1, 1, 1, 1), (3, 3), (1, 1)), (7, (1, 1, 1, 1), (3, 3), (1, 1)),
                                        (23, (3, 3, 3, 3), (7, 7), (2, 2)), (4, (2, 2, 2, 2), (3, 3), (1, 1))):
        conv = NchwcConv(1, 16, 64, 8, width, kernel, stride, pads, 16)
        pixels, _ = conv.tile()
        known, interior = conv.row_tiles(pixels)
        covered = [p for start, count in known for p in range(start, start + count)]
        if interior is not None:
            first, steps = interior
            covered += list(range(first, first + steps * pixels))
            last_inside = (width - kernel[1] + pads[1]) // stride[1]
            assert first * stride[1] >= pads[1] and first + steps * pixels - 1 <= last_inside
        assert sorted(covered) == list(range(conv.out_width)), (width, known, interior)


def test_weights_packed_as_the_kernel_reads_them():
    spec = PackedNchwcWeights(0, out_channels=40, in_channels=20, kh=3, kw=2, block=16, out_tile=3)
    w = np.random.default_rng(0).standard_normal((40, 20, 3, 2)).astype(np.float32)
    packed = spec.pack(w).reshape(1, 2, 3, 2, 16, 3, 16)  # [group][in block][kh][kw][c in][tile][c out]
    for o, i, r, s in ((0, 0, 0, 0), (39, 19, 2, 1), (17, 5, 1, 0), (33, 16, 0, 1)):
        assert packed[0, i // 16, r, s, i % 16, o // 16, o % 16] == w[o, i, r, s]
    assert not packed[0, 1, :, :, 4:].any() and not packed[0, :, :, :, :, 2, 8:].any()  # padding channels
    with pytest.raises(ValueError, match="whole tiles"):
        PackedNchwcWeights(0, 32, 16, 1, 1, 16, 3).pack(np.zeros((32, 16, 1, 1), np.float32))


def test_bad_geometry_is_refused():
    with pytest.raises(ValueError, match="no output"):
        NchwcConv(1, 16, 16, 2, 2, (3, 3), (1, 1), (0, 0, 0, 0), 16)
    with pytest.raises(ValueError, match="channel block 12"):
        NchwcConv(1, 16, 16, 8, 8, (3, 3), (1, 1), (1, 1, 1, 1), 12)
