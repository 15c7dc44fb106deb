"""Direct convolutions (the GEMM's micro-kernel reading B's rows in place from the slab) stepping
through a channel's kh x kw taps at constant offsets (``gemm.SgemmGenerator``'s ``b_row_period``,
``contraction_gemm.DIRECT_PERIOD_MAX_TAPS``): against the reference on shapes that reach every
part of it (pads, strides and their slab phases, dilation, groups, two K blocks of whole
channels, a kernel of more taps than the limit, which keeps the offset table, the input read in
place for stride 1 without pads), on every cross-target CPU, and the period's own checks."""
from __future__ import annotations

import numpy as np
import pytest

from codegen.kernel_testing import assert_matches, make_kernel, random_array, reference, run_kernel
from lezero.codegen.llvm import contraction, contraction_gemm, gemm
from lezero.codegen.llvm.backend import lower_kernel
from lezero.ir.attributes import DenseArrayAttr
from lezero.ir.types import I64

F32_TOL = dict(rtol=1e-4, atol=1e-4)


def attrs_of(strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), groups=1):
    return {"strides": list(strides), "pads": list(pads), "dilations": list(dilations), "groups": groups}


def conv_bias_relu_kernel(x_shape, w_shape, attrs, residual=None):
    """relu(conv(x, w) + bias (+ residual))."""
    extra = [(w_shape[0], 1, 1)] + ([residual] if residual else [])

    def body(b, x, w, bias, *rest):
        y = b.op("lz.add", b.op("lz.conv2d", x, w, **attrs), bias)
        return b.op("lz.relu", b.op("lz.add", y, rest[0]) if rest else y)

    module, kernel = make_kernel([(x_shape, "f32"), (w_shape, "f32")] + [(s, "f32") for s in extra], body,
                                 kind="conv")
    return module, kernel, extra


DIRECT_CASES = {
    # name: (x shape, w shape, attrs, residual shape, constant weights, the micro-kernel steps by taps)
    "3x3_pad1_residual": ((2, 7, 9, 11), (16, 7, 3, 3), attrs_of(pads=(1, 1, 1, 1)), (2, 16, 9, 11), True, True),
    "3x3_stride2_four_phases": ((1, 6, 13, 12), (12, 6, 3, 3), attrs_of(strides=(2, 2), pads=(1, 1, 1, 1)), None,
                                False, True),
    "two_k_blocks_of_whole_channels": ((1, 257, 4, 5), (9, 257, 3, 3), attrs_of(pads=(1, 1, 1, 1)), None, True,
                                       True),  # K = 2313: blocks of 1161 and 1152, 129 and 128 channels
    "groups_dilation_asymmetric_pads": ((2, 8, 10, 9), (12, 4, 3, 2),
                                        attrs_of(strides=(1, 2), pads=(2, 0, 1, 3), dilations=(2, 1), groups=2),
                                        None, True, True),
    "1x1_stride2_one_tap": ((1, 24, 11, 12), (20, 24, 1, 1), attrs_of(strides=(2, 2)), None, True, True),
    "7x7_stride2_stem": ((1, 3, 30, 29), (16, 3, 7, 7), attrs_of(strides=(2, 2), pads=(3, 3, 3, 3)), None, True,
                         True),  # 49 taps, the limit
    "8x7_more_taps_keep_the_table": ((1, 2, 12, 11), (8, 2, 8, 7), attrs_of(pads=(1, 2, 3, 1)), None, True, False),
    # stride 1, no pads: B's rows read in the input itself (no slab), masked at its end
    "in_place_1x1_two_images": ((2, 12, 7, 9), (20, 12, 1, 1), attrs_of(), (2, 20, 7, 9), True, True),
    "in_place_3x3_groups": ((1, 6, 9, 10), (8, 3, 3, 3), attrs_of(groups=2), None, False, True),
    "in_place_1x1_two_k_blocks": ((1, 2400, 3, 5), (8, 2400, 1, 1), attrs_of(), None, True, True),
}


@pytest.mark.cross_target(cases=DIRECT_CASES, group=lambda case: case[5])
def test_direct_conv_steps_through_the_taps(cpu, case, monkeypatch):
    """A direct conv's micro-kernel reads no tap-offset table when a channel has at most
    DIRECT_PERIOD_MAX_TAPS taps, and every K block is whole channels; the kernel matches the
    reference with its work items run in any pieces, weights read in place or pre-packed."""
    x_shape, w_shape, attrs, residual, constant, by_taps = case
    monkeypatch.setattr(contraction, "CONV_B", "direct")
    monkeypatch.setattr(contraction_gemm, "PIXEL_ROWS_MAX_PIXELS", 0)
    module, kernel, extra = conv_bias_relu_kernel(x_shape, w_shape, attrs, residual)
    if constant:
        kernel.attributes["constant_operands"] = DenseArrayAttr(I64, (1,))
    lowered = lower_kernel(kernel, cpu=cpu)
    assert ("gemm_b_rows" in lowered.llvm_ir) == (not by_taps)
    in_place = attrs["strides"] == [1, 1] and attrs["pads"] == [0, 0, 0, 0]
    assert ("slab_r" in lowered.llvm_ir) == (not in_place)
    rng = np.random.default_rng(sum(x_shape) + sum(w_shape))
    inputs = [random_array(rng, s, np.float32) for s in [x_shape, w_shape] + extra]
    want = reference(module, inputs)[0]
    if constant:
        (spec,) = lowered.packed_operands
        taps = w_shape[2] * w_shape[3]
        if by_taps:
            assert spec.depth_block % taps == 0  # K blocks of whole input channels
        inputs[1] = spec.pack(inputs[1])
    for splits in (1, 3):
        assert_matches(run_kernel(kernel, inputs, splits, lowered, cpu=cpu)[0], want, **F32_TOL)


def test_a_period_must_fit_the_offsets():
    """``b_row_period`` is checked against the table: a period of it (stride S per period), of a B
    read in place; anything else is refused, naming the period."""
    offsets = [c * 100 + t for c in range(3) for t in (0, 1, 10)]
    assert gemm.periodic_offsets(offsets, 3)
    assert gemm.periodic_offsets(offsets, 9)  # one period of the whole table
    assert not gemm.periodic_offsets(offsets, 2)  # does not divide K
    assert not gemm.periodic_offsets(offsets[:3] + [100, 101, 111] + offsets[6:], 3)
    config = gemm.GemmConfig.for_target("x86-64-v3")
    gemm.SgemmGenerator(config, b_row_offsets=offsets, pack_b=False, b_row_period=3)
    with pytest.raises(ValueError, match="b_row_period 2"):
        gemm.SgemmGenerator(config, b_row_offsets=offsets, pack_b=False, b_row_period=2)
    with pytest.raises(ValueError, match="b_row_period 3"):
        gemm.SgemmGenerator(config, b_row_offsets=offsets, pack_b=True, b_row_period=3)
    with pytest.raises(ValueError, match="b_row_period 3"):
        gemm.SgemmGenerator(config, pack_b=False, b_row_period=3)


@pytest.mark.parametrize("out_channels, direct", [(contraction.DIRECT_IN_PLACE_MAX_CHANNELS, True),
                                                  (contraction.DIRECT_IN_PLACE_MAX_CHANNELS + 8, False)])
def test_few_channels_read_the_input_in_place(out_channels, direct):
    """A 1x1 conv (stride 1, no pads) with few output channels reads B's rows in the input, direct
    (no packing, no slab); with more it packs B from the input."""
    x_shape, w_shape = (1, 16, 6, 7), (out_channels, 16, 1, 1)
    module, kernel, extra = conv_bias_relu_kernel(x_shape, w_shape, attrs_of())
    lowered = lower_kernel(kernel)
    assert ("pack_b" in lowered.llvm_ir) == (not direct)
    assert "slab_r" not in lowered.llvm_ir
    rng = np.random.default_rng(out_channels)
    inputs = [random_array(rng, s, np.float32) for s in [x_shape, w_shape] + extra]
    assert_matches(run_kernel(kernel, inputs, 2, lowered)[0], reference(module, inputs)[0], **F32_TOL)
