"""The float32 kernels of the mobile nets' thin convolutions: few output channels per group
(``depthwise.py``: depthwise 3x3 and 5x5 at strides 1 and 2, odd sizes, 1x1 images, asymmetric
pads, dilation, multipliers (groups == C_in, C_out = 2 or 3 C_in), grouped and plain convs with
fewer than 4 outputs per group, several images and row blocks) and squeeze-excite's 1x1 convs of
1x1 images (dot products, ``contraction.conv_as_dots``), against the reference interpreter on every
CPU of the cross-target matrix and against ONNX Runtime; and the machine code (no gathers)."""
from __future__ import annotations

import ctypes

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import lezero.onnx
from codegen.kernel_testing import KERNEL_SIGNATURE, make_kernel, random_array, reference
from lezero.codegen.contraction_shapes import ConvShape
from lezero.codegen.llvm import contraction, contraction_gemm, depthwise, gemm, jit
from lezero.codegen.llvm.backend import lower_kernel
from lezero.ir.dialect.windows import window_output_size

TOL = dict(rtol=1e-4, atol=1e-4)


def attrs_of(strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), groups=1):
    return {"strides": list(strides), "pads": list(pads), "dilations": list(dilations), "groups": groups}


def silu_kernel(x_shape, w_shape, attrs):
    """lz.kernel(x, w, bias) { silu(conv2d(x, w) + bias) }."""
    bias_shape = (w_shape[0], 1, 1)

    def body(b, x, w, bias):
        y = b.op("lz.add", b.op("lz.conv2d", x, w, **attrs), bias)
        return b.op("lz.mul", y, b.op("lz.sigmoid", y))

    return make_kernel([(x_shape, "f32"), (w_shape, "f32"), (bias_shape, "f32")], body, kind="conv"), bias_shape


CASES = {
    # name: (x shape, w shape, attrs)
    "3x3_s1_odd": ((1, 8, 9, 11), (8, 1, 3, 3), attrs_of(pads=(1, 1, 1, 1), groups=8)),
    "3x3_s2_odd": ((2, 6, 13, 7), (6, 1, 3, 3), attrs_of(strides=(2, 2), pads=(1, 1, 1, 1), groups=6)),
    "5x5_s2": ((1, 4, 15, 15), (4, 1, 5, 5), attrs_of(strides=(2, 2), pads=(2, 2, 2, 2), groups=4)),
    "5x5_7x7": ((1, 5, 7, 7), (5, 1, 5, 5), attrs_of(pads=(2, 2, 2, 2), groups=5)),
    "1x1_image": ((1, 3, 1, 1), (3, 1, 3, 3), attrs_of(pads=(1, 1, 1, 1), groups=3)),
    "asymmetric_pads_dilation": ((1, 4, 12, 10), (4, 1, 3, 3),
                                 attrs_of(strides=(2, 1), pads=(0, 2, 1, 0), dilations=(2, 2), groups=4)),
    "multiplier_2": ((1, 4, 10, 9), (8, 1, 3, 3), attrs_of(pads=(1, 1, 1, 1), groups=4)),
    "multiplier_3_stride_2": ((2, 2, 9, 9), (6, 1, 3, 3), attrs_of(strides=(2, 2), pads=(1, 0, 1, 1), groups=2)),
    "rectangular_kernel": ((1, 3, 6, 17), (3, 1, 1, 5), attrs_of(strides=(1, 2), pads=(0, 2, 0, 1), groups=3)),
    "grouped_2_per_group": ((1, 6, 8, 8), (6, 2, 3, 3), attrs_of(pads=(1, 1, 1, 1), groups=3)),
    "two_outputs": ((1, 5, 6, 7), (2, 5, 3, 2), attrs_of(strides=(2, 1), pads=(1, 0, 1, 1))),
    "row_blocks": ((1, 1, 40, 37), (1, 1, 3, 3), attrs_of(strides=(1, 1), pads=(1, 1, 1, 1))),
    "wide_rows_stride_2": ((1, 2, 45, 130), (2, 1, 3, 3), attrs_of(strides=(2, 2), pads=(1, 1, 1, 1), groups=2)),
    # whole images of one step along q, their sums compacted to the pixels (16-float vectors; 8 too
    # for the 3x3 image)
    "5x5_7x7_compacted": ((1, 16, 7, 7), (16, 1, 5, 5), attrs_of(pads=(2, 2, 2, 2), groups=16)),
    "3x3_image_compacted": ((1, 16, 3, 3), (16, 1, 3, 3), attrs_of(pads=(1, 1, 1, 1), groups=16)),
    "multiplier_2_compacted": ((1, 16, 5, 5), (32, 1, 3, 3), attrs_of(pads=(1, 1, 1, 1), groups=16)),
    # channels in the vector lanes (depthwise.channels_in_lanes): a channel tail of a second block
    # and two images, stride 2 to 7x7, 5x5 images of 14x14 and 28x28 (two steps of columns), 3x3
    # rows wider than two steps, stride 2 with asymmetric pads and a tail
    "lanes_tail_two_images": ((2, 20, 7, 7), (20, 1, 5, 5), attrs_of(pads=(2, 2, 2, 2), groups=20)),
    "lanes_5x5_s2": ((1, 18, 14, 14), (18, 1, 5, 5), attrs_of(strides=(2, 2), pads=(2, 2, 2, 2), groups=18)),
    "lanes_5x5_14x14": ((1, 16, 14, 14), (16, 1, 5, 5), attrs_of(pads=(2, 2, 2, 2), groups=16)),
    "lanes_5x5_28x28": ((1, 3, 28, 28), (3, 1, 5, 5), attrs_of(pads=(2, 2, 2, 2), groups=3)),
    "lanes_wide_rows": ((1, 16, 3, 30), (16, 1, 3, 3), attrs_of(pads=(1, 1, 1, 1), groups=16)),
    "lanes_3x3_s2_asymmetric": ((1, 33, 9, 8), (33, 1, 3, 3), attrs_of(strides=(2, 2), pads=(1, 0, 0, 1), groups=33)),
    # the input's rows read in place (depthwise.rows_in_place): rows of a vector or more at strides 1 and
    # 2, a row tail, two images, 5x5, asymmetric pads, row blocks cut for the threads
    "rows_3x3_s1_tail": ((1, 3, 10, 40), (3, 1, 3, 3), attrs_of(pads=(1, 1, 1, 1), groups=3)),
    "rows_3x3_s2_two_images": ((2, 3, 11, 70), (3, 1, 3, 3), attrs_of(strides=(2, 2), pads=(1, 1, 1, 1), groups=3)),
    "rows_5x5_s2": ((1, 2, 9, 67), (2, 1, 5, 5), attrs_of(strides=(2, 2), pads=(2, 2, 2, 2), groups=2)),
    "rows_5x5_s1": ((1, 2, 6, 36), (2, 1, 5, 5), attrs_of(pads=(2, 2, 2, 2), groups=2)),
    "rows_asymmetric_pads": ((1, 2, 7, 48), (2, 1, 3, 3), attrs_of(strides=(2, 2), pads=(0, 0, 2, 1), groups=2)),
    "rows_wide_s1": ((1, 1, 5, 112), (1, 1, 3, 3), attrs_of(pads=(1, 1, 1, 1), groups=1)),
    # windows that reach no vector right of their own (V[1] unread): ONNX LRN's k x 1 sums, LpPool's
    # 3x3 with pads 2
    "rows_column_window": ((5, 1, 5, 25), (1, 1, 3, 1), attrs_of(pads=(1, 0, 1, 0), groups=1)),
    "rows_window_inside_pads": ((1, 3, 28, 28), (3, 1, 3, 3), attrs_of(pads=(2, 2, 2, 2), groups=3)),
    "se_reduce": ((1, 67, 1, 1), (5, 67, 1, 1), attrs_of()),
    "se_expand": ((1, 5, 1, 1), (70, 5, 1, 1), attrs_of()),
    "se_grouped_two_images": ((2, 12, 1, 1), (9, 4, 1, 1), attrs_of(groups=3)),
}


def run_on(cpu, kernel, inputs, pieces):
    """The kernel lowered and compiled for ``cpu``, its work items run in ``pieces`` calls (last first)."""
    lowered = lower_kernel(kernel, cpu=cpu)
    function = jit.compile_module(lowered.llvm_ir, cpu).ctypes_function(lowered.name, KERNEL_SIGNATURE[0],
                                                                         KERNEL_SIGNATURE[1:])
    out = np.full(lowered.result_types[0].shape, np.nan, np.float32)
    pointers = (ctypes.c_void_p * (len(inputs) + 1))(*[a.ctypes.data for a in inputs + [out]])
    n = lowered.work_items
    bounds = sorted({0, n, *[n * k // pieces for k in range(1, pieces)]})
    for lo, hi in reversed(list(zip(bounds, bounds[1:]))):
        function(pointers, lo, hi)
    return out


def kind(case):
    """Groups of cases every CPU runs some of: by stride, and depthwise (one output per group) or not."""
    x_shape, w_shape, attrs = case
    return max(attrs["strides"]), w_shape[1] == 1 and w_shape[0] == x_shape[1]


@pytest.mark.cross_target(cases=CASES, group=kind)
def test_depthwise_matches_the_reference_on_every_cpu(cpu, case):
    x_shape, w_shape, attrs = case
    (module, kernel), bias_shape = silu_kernel(x_shape, w_shape, attrs)
    rng = np.random.default_rng(sum(x_shape) + sum(w_shape))
    inputs = [random_array(rng, s, np.float32) for s in (x_shape, w_shape, bias_shape)]
    want = reference(module, inputs)[0]
    for pieces in (1, 3):
        np.testing.assert_allclose(run_on(cpu, kernel, inputs, pieces), want, err_msg=f"cpu {cpu}", **TOL)


SMALL_IMAGE_CASES = {name: CASES[name] for name in ("3x3_s2_odd", "5x5_s2", "5x5_7x7", "5x5_7x7_compacted",
                                                    "3x3_image_compacted", "lanes_tail_two_images")}


@pytest.mark.cross_target(cases=SMALL_IMAGE_CASES, group=kind)
def test_small_images_with_pixels_in_the_lanes_match_the_reference(cpu, case, monkeypatch):
    """The pixels-in-lanes kernel where channels in the lanes would run (the benchmarks' baseline)."""
    monkeypatch.setattr(depthwise, "LANES_MAX_PIXELS", 0)
    monkeypatch.setattr(depthwise, "LANES_MAX_PIXELS_FEW_TAPS", 0)
    test_depthwise_matches_the_reference_on_every_cpu(cpu, case)


def test_small_images_put_channels_in_the_lanes():
    """Depthwise (multiplier 1) of small images, 5x5 up to 784 pixels, 3x3 up to 100, slabs up to
    1024 pixels (not 5x5 s2 56 -> 28), on 8- and 16-float vectors: a work item per block of channels."""
    def shape(c, size, k, stride=1, o=None):
        out = (size + 2 * (k // 2) - k) // stride + 1
        return ConvShape(1, c, size, size, o or c, k, k, out, out, c, (stride, stride), (k // 2,) * 4, (1, 1))

    for s, width, expected in [(shape(1152, 7, 5), 16, True), (shape(672, 14, 5), 8, True),
                               (shape(672, 14, 5, 2), 16, True), (shape(960, 7, 3), 16, True),
                               (shape(100, 10, 3), 16, True), (shape(384, 14, 3), 16, False),
                               (shape(240, 28, 5), 16, True), (shape(144, 56, 5, 2), 8, False),
                               (shape(240, 56, 5), 16, False), (shape(1152, 7, 5), 4, False),
                               (shape(16, 7, 3, o=32), 16, False)]:
        assert depthwise.channels_in_lanes(s, width) == expected, (s, width)
    module, kernel = silu_kernel((2, 40, 7, 7), (40, 1, 5, 5), attrs_of(pads=(2, 2, 2, 2), groups=40))[0]
    width = gemm.GemmConfig.for_target().vector_width
    if width in depthwise.LANES_WIDTHS:
        assert lower_kernel(kernel).work_items == 2 * -(-40 // width)


ROWS_CASES = {name: case for name, case in CASES.items() if name.startswith("rows_")
              or name in ("row_blocks", "wide_rows_stride_2", "3x3_s2_odd")}


@pytest.mark.cross_target(cases=ROWS_CASES, group=kind)
def test_rows_in_place_equal_the_q_space_kernel_bit_for_bit(cpu, case, monkeypatch):
    """The same taps in the same order (fmuladd from zero, kh-major) as the slab kernel: equal results."""
    x_shape, w_shape, attrs = case
    (module, kernel), bias_shape = silu_kernel(x_shape, w_shape, attrs)
    rng = np.random.default_rng(sum(x_shape))
    inputs = [random_array(rng, s, np.float32) for s in (x_shape, w_shape, bias_shape)]
    rows = run_on(cpu, kernel, inputs, 3)
    monkeypatch.setattr(depthwise, "ROWS_MIN_VECTORS", 10 ** 6)
    np.testing.assert_array_equal(rows, run_on(cpu, kernel, inputs, 1), err_msg=f"cpu {cpu}")


def test_depthwise_rows_read_in_place_where_rows_are_a_vector_wide():
    """Multiplier 1, stride 1 or 2 alike, no dilation, pads under half a vector, 1..16 vectors a row."""
    def shape(c, size, k, stride=1, o=None, dilation=1, width=None):
        out = (size + 2 * (k // 2) * dilation - dilation * (k - 1) - 1) // stride + 1
        return ConvShape(1, c, size, width or size, o or c, k, k, out, out if width is None else
                         (width + 2 * (k // 2) * dilation - dilation * (k - 1) - 1) // stride + 1, c,
                         (stride, stride), (k // 2 * dilation,) * 4, (dilation, dilation))

    for s, width, expected in [(shape(32, 112, 3), 16, True), (shape(96, 112, 3, 2), 16, True),
                               (shape(144, 56, 3), 16, True), (shape(144, 56, 3, 2), 16, True),
                               (shape(192, 28, 3, 2), 16, False),
                               (shape(144, 56, 3, 2), 8, True), (shape(144, 56, 5, 2), 8, True),
                               (shape(144, 56, 5, 2), 4, False), (shape(16, 56, 3, o=32), 16, False),
                               (shape(16, 56, 3, dilation=2), 16, False), (shape(8, 4, 3, width=600), 16, False),
                               (shape(8, 9, 3, 3), 8, False)]:
        assert depthwise.rows_in_place(s, width) == expected, (s, width)
    module, kernel = silu_kernel((1, 16, 28, 112), (16, 1, 3, 3), attrs_of(strides=(2, 2), pads=(1, 1, 1, 1),
                                                                          groups=16))[0]
    asm = jit.emit_assembly(lower_kernel(kernel).llvm_ir)
    assert "vfmadd" in asm or "fmla" in asm
    assert "gather" not in asm and "scatter" not in asm


def test_row_blocks_cut_large_images_and_keep_few_for_many_channels(monkeypatch):
    module, kernel = silu_kernel(*CASES["row_blocks"][:3])[0]
    # the input's rows in place: one image of one channel cut into MIN_ITEMS blocks at most, of 3
    # rows here (40 = 13 * 3 + 1)
    assert lower_kernel(kernel).work_items == 14
    monkeypatch.setattr(depthwise, "ROWS_MIN_VECTORS", 10 ** 6)  # the q-space kernel: the same blocks
    # one image of one channel: MIN_ITEMS blocks at most, of 3 rows here (40 = 13 * 3 + 1)
    assert lower_kernel(kernel).work_items == 14
    module, kernel = silu_kernel((1, 64, 28, 28), (64, 1, 3, 3), attrs_of(pads=(1, 1, 1, 1), groups=64))[0]
    assert lower_kernel(kernel).work_items == 64


def test_squeeze_excite_convs_are_dot_products():
    """A 1x1 conv of a 1x1 image: dot products along C_in, a tile of outputs per work item (the
    GEMM would use one column of its 64-wide tiles)."""
    shape = contraction.conv_as_dots(ConvShape(2, 12, 1, 1, 9, 1, 1, 1, 1, 3, (1, 1), (0, 0, 0, 0), (1, 1)))
    assert (shape.batches, shape.m, shape.n, shape.k) == (3, 2, 3, 4)
    assert contraction.conv_as_dots(ConvShape(1, 12, 2, 1, 9, 1, 1, 2, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1))) is None
    module, kernel = silu_kernel((1, 1152, 1, 1), (48, 1152, 1, 1), attrs_of())[0]
    rows, cols = contraction.dot_tile(1, 48, contraction.DOT_ACCUMULATORS[gemm.GemmConfig.for_target().vector_width])
    assert lower_kernel(kernel).work_items == -(-48 // cols)


def test_steps_along_q_waste_few_lanes():
    assert [depthwise.step_vectors(v) for v in (1, 5, 6, 7, 8, 14, 196)] == [1, 5, 6, 4, 4, 5, 4]


def test_small_images_compact_their_sums_where_the_rows_waste_lanes():
    """A whole image in one step along q: compacted where walking its rows takes 1.5x the vector
    iterations of one run over its pixels (7x7 in 16-float vectors: 7 against 4), not with 8-float
    vectors (7 against 7), not for images cut into row blocks or of several steps."""
    for (x_shape, w_shape, pad), width, expected in [
            (((1, 16, 7, 7), (16, 1, 5, 5), 2), 16, True), (((1, 16, 7, 7), (16, 1, 5, 5), 2), 8, False),
            (((1, 16, 3, 3), (16, 1, 3, 3), 1), 8, True), (((1, 5, 7, 7), (5, 1, 5, 5), 2), 16, False),
            (((1, 16, 14, 14), (16, 1, 3, 3), 1), 16, False)]:
        c, size, k = x_shape[1], x_shape[2], w_shape[2]
        s = ConvShape(1, c, size, size, w_shape[0], k, k, size, size, c, (1, 1), (pad,) * 4, (1, 1))
        plan = contraction_gemm.ConvGemm(s, direct=True, a_block_floats=0)
        plan.lay_out_slab(width)
        vectors = -(-((s.oh - 1) * plan.wq + s.ow) // width)
        assert depthwise.compacts_pixels(s, plan, depthwise.row_block(s, plan), vectors, width) == expected, s


def test_stride_2_and_small_images_use_no_gathers():
    """Stride 2 reads the slab's phases with plain loads, and the epilogue of a 7x7 image runs along
    its rows or over its compacted pixels (LLVM would otherwise unroll the rows and vectorize across
    them, into gathers and scatters)."""
    for x_shape, attrs in (((1, 16, 7, 7), attrs_of(pads=(2, 2, 2, 2), groups=16)),
                           ((1, 16, 28, 28), attrs_of(strides=(2, 2), pads=(2, 2, 2, 2), groups=16))):
        module, kernel = silu_kernel(x_shape, (16, 1, 5, 5), attrs)[0]
        asm = jit.emit_assembly(lower_kernel(kernel).llvm_ir)
        assert "vfmadd" in asm or "vfmla" in asm or "fmla" in asm
        assert "gather" not in asm and "scatter" not in asm


def depthwise_onnx(c, multiplier, size, k, stride, pads, dilation):
    rng = np.random.default_rng(c * size + k)
    w = rng.standard_normal((c * multiplier, 1, k, k)).astype(np.float32)
    b = rng.standard_normal(c * multiplier).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["y0"], kernel_shape=[k, k], strides=[stride] * 2, pads=pads,
                              dilations=[dilation] * 2, group=c),
             helper.make_node("Clip", ["y0", "lo", "hi"], ["y"])]
    inits = [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b"),
             numpy_helper.from_array(np.array(0, np.float32), "lo"), numpy_helper.from_array(np.array(6, np.float32), "hi")]
    oh = window_output_size(size, k, stride, pads[0], pads[2], dilation)
    ow = window_output_size(size, k, stride, pads[1], pads[3], dilation)
    graph = helper.make_graph(nodes, "depthwise", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c * multiplier, oh, ow])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("c,multiplier,size,k,stride,pads,dilation", [
    (32, 1, 17, 3, 2, [1, 1, 1, 1], 1),  # mobilenet's stride-2 block, odd input
    (24, 2, 9, 3, 1, [0, 1, 2, 1], 1),  # multiplier 2, asymmetric pads
    (16, 1, 7, 5, 1, [2, 2, 2, 2], 1),  # efficientnet's 5x5 at 7x7
    (8, 1, 11, 3, 1, [2, 2, 2, 2], 2),  # dilation
])
def test_depthwise_relu6_matches_onnxruntime(c, multiplier, size, k, stride, pads, dilation):
    proto = depthwise_onnx(c, multiplier, size, k, stride, pads, dilation)
    x = np.random.default_rng(size).standard_normal((1, c, size, size)).astype(np.float32) * 3
    want = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = lezero.onnx.compile(proto).run({"x": x})["y"]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
