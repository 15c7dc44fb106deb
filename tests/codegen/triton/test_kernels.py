"""The Triton kernel kinds on fused graphs, under ``TRITON_INTERPRET=1``: elementwise chains with
broadcasting and data movement, fused reductions (softmax, layer norm, column sums, argmax),
pooling, the element types, in-place results, the generated source, and random fused graphs;
each compared with the reference interpreter."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings

from lezero.codegen.errors import LoweringError
from lezero.codegen.schedule import schedule
from lezero.codegen.triton import jit
from lezero.codegen.triton.backend import lower_kernel, kernel_text, unsupported_reason
from lezero.ir import parse_module
from lezero.ir.types import tensor
from lezero.passes import run_pipeline

from codegen.kernel_testing import GROUP_NORM_SHAPES, group_norm_body
from support.fusion_testing import inputs_for, random_graphs
from support.ir_building import build
from support.op_samples import Arg, Sample
from support.selection_testing import ties_and_nan
from codegen.triton.triton_testing import assert_matches, check_triton, reference, run_triton


def t(shape: str, element: str = "f32") -> str:
    return f"tensor<{shape}x{element}>"


def module(signature: str, *lines: str):
    return parse_module("\n".join([f"func.func @f{signature} {{", *("  " + line for line in lines), "}"]))


def data(shape, dtype="float32", seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return rng.integers(-5, 6, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def one_kernel(kernels, kind: str):
    assert [k.kind for k in kernels] == [kind], [(k.name, k.kind) for k in kernels]
    return kernels[0]


# --- elementwise ---------------------------------------------------------------------------------

def test_elementwise_chain_with_broadcasting_is_one_contiguous_kernel():
    x, a, b = t("32x48"), t("48"), t("32x1")
    m = module(f"(%x: {x}, %a: {a}, %b: {b}) -> {x}",
               f'%0 = "lz.mul"(%x, %a) : ({x}, {a}) -> {x}',
               f'%1 = "lz.add"(%0, %b) : ({x}, {b}) -> {x}',
               f'%2 = "lz.tanh"(%1) : ({x}) -> {x}',
               f"func.return %2 : {x}")
    kernel = one_kernel(check_triton(m, [data((32, 48)), data((48,), seed=1), data((32, 1), seed=2)]),
                        "elementwise")
    assert kernel.name == "lz_fused_mul_add_tanh_0"
    src = kernel.source
    assert "def lz_fused_mul_add_tanh_0(b0, b1, b2, b3, BLOCK: tl.constexpr):" in src
    assert '"""lz.mul -> lz.add -> lz.tanh: (tensor<32x48xf32>, tensor<48xf32>, tensor<32x1xf32>)' in src
    assert "offs = pid * BLOCK + tl.arange(0, BLOCK)" in src and "mask = offs < 1536" in src
    assert "tl.load(b0 + offs, mask=mask, other=0)" in src  # the full-shape operand: contiguous
    assert "tl.store(b3 + offs, " in src
    assert kernel.signature == {"b0": "*fp32", "b1": "*fp32", "b2": "*fp32", "b3": "*fp32", "BLOCK": "constexpr"}


def test_data_movement_folds_into_index_arithmetic():
    x, xt, s, p, c, g = t("6x5"), t("5x6"), t("5x3"), t("5x5"), t("5x8"), t("4x8")
    idx = "tensor<4xi64>"
    m = module(f"(%x: {x}, %y: {s}, %i: {idx}) -> {g}",
               f'%0 = "lz.transpose"(%x) {{perm = array<i64: 1, 0>}} : ({x}) -> {xt}',
               f'%1 = "lz.slice"(%0) {{starts = array<i64: 0, 1>, ends = array<i64: 5, 6>, steps = array<i64: 1, 2>}} '
               f": ({xt}) -> {s}",
               f'%2 = "lz.add"(%1, %y) : ({s}, {s}) -> {s}',
               f'%3 = "lz.pad"(%2) {{pads = array<i64: 0, 1, 0, 1>, value = 2.5 : f64}} : ({s}) -> {p}',
               f'%4 = "lz.concat"(%3, %y) {{axis = 1 : i64}} : ({p}, {s}) -> {c}',
               f'%5 = "lz.exp"(%4) : ({c}) -> {c}',
               f'%6 = "lz.gather"(%5, %i) {{axis = 0 : i64}} : ({c}, {idx}) -> {g}',
               f'%7 = "lz.neg"(%6) : ({g}) -> {g}',
               f"func.return %7 : {g}")
    check_triton(m, [data((6, 5)), data((5, 3), seed=1), np.array([4, -1, 0, 2], np.int64)])


def test_in_place_result_reads_before_it_writes():
    x = t("40x30")
    m = module(f"(%x: {x}, %y: {x}) -> {x}", f'%0 = "lz.sub"(%x, %y) : ({x}, {x}) -> {x}',
               f'%1 = "lz.sigmoid"(%0) : ({x}) -> {x}', f"func.return %1 : {x}")
    inputs = [data((40, 30)), data((40, 30), seed=1)]
    want = reference(m, inputs)[0]
    (op,) = [op for op in schedule(m, target="cuda").functions[0].entry_block.ops if op.name == "lz.kernel"]
    kernel = lower_kernel(op)
    x, y = (torch.from_numpy(a.copy()) for a in inputs)
    for config in kernel.configs:  # every block size, the result written over the first operand
        x = torch.from_numpy(inputs[0].copy())
        jit.load(kernel).launch([x, y, x], config)
        assert_matches(x.numpy(), want)


@pytest.mark.parametrize("element,dtype", [("f16", "float16"), ("bf16", "float32"), ("f64", "float64"),
                                           ("i32", "int32"), ("i64", "int64"), ("i8", "int8")])
def test_element_types(element, dtype):
    x, b = t("7x9", element), t("7x9", "i1")
    m = module(f"(%x: {x}, %y: {x}) -> ({x}, {b})",
               f'%0 = "lz.mul"(%x, %y) : ({x}, {x}) -> {x}',
               f'%1 = "lz.add"(%0, %x) : ({x}, {x}) -> {x}',
               f'%2 = "lz.cmp"(%1, %y) {{predicate = "gt"}} : ({x}, {x}) -> {b}',
               f'%3 = "lz.select"(%2, %1, %y) : ({b}, {x}, {x}) -> {x}',
               f'%4 = "lz.max"(%3, %x) : ({x}, {x}) -> {x}',
               f"func.return %4, %2 : {x}, {b}")
    inputs = [data((7, 9), dtype), data((7, 9), dtype, seed=1)]
    if element == "bf16":  # bf16 values in float32 storage
        inputs = [(a.view(np.uint32) & 0xFFFF0000).view(np.float32) for a in inputs]
    check_triton(m, inputs)


def test_bf16_rounds_after_every_op():
    x = t("64", "bf16")
    m = module(f"(%x: {x}, %y: {x}) -> {x}", f'%0 = "lz.add"(%x, %y) : ({x}, {x}) -> {x}',
               f'%1 = "lz.mul"(%0, %0) : ({x}, {x}) -> {x}', f"func.return %1 : {x}")
    rng = np.random.default_rng(3)
    inputs = [((rng.standard_normal(64).astype(np.float32).view(np.uint32) & 0xFFFF0000).view(np.float32))
              for _ in range(2)]
    want = reference(m, inputs)[0]
    kernels = check_triton(m, inputs, rtol=0, atol=0)  # bit for bit
    assert "0x7FFF" in kernels[0].source
    assert (want.view(np.uint32) & 0xFFFF).max() == 0


def test_i1_logic_and_casts():
    b, f, i = t("5x6", "i1"), t("5x6"), t("5x6", "i32")
    m = module(f"(%p: {b}, %q: {b}, %x: {f}) -> ({f}, {i})",
               f'%0 = "lz.xor"(%p, %q) : ({b}, {b}) -> {b}',
               f'%1 = "lz.not"(%0) : ({b}) -> {b}',
               f'%2 = "lz.cast"(%1) {{to = f32}} : ({b}) -> {f}',
               f'%3 = "lz.mul"(%2, %x) : ({f}, {f}) -> {f}',
               f'%4 = "lz.cast"(%3) {{to = i32}} : ({f}) -> {i}',
               f"func.return %3, %4 : {f}, {i}")
    check_triton(m, [data((5, 6), "bool"), data((5, 6), "bool", seed=1), data((5, 6)) * 4])


def test_nan_propagates_through_max_and_min():
    x = t("8")
    m = module(f"(%x: {x}, %y: {x}) -> ({x}, {x})", f'%0 = "lz.max"(%x, %y) : ({x}, {x}) -> {x}',
               f'%1 = "lz.min"(%x, %y) : ({x}, {x}) -> {x}', f"func.return %0, %1 : {x}, {x}")
    nan = np.nan
    check_triton(m, [np.array([1, nan, 3, -1, nan, 0, 2, -5], np.float32),
                     np.array([nan, 2, 1, -2, nan, 0, 7, 3], np.float32)])


def test_math_in_the_tails():
    x = t("12")
    m = module(f"(%x: {x}, %g: {x}) -> ({x}, {x}, {x})", f'%0 = "lz.tanh"(%x) : ({x}) -> {x}',
               f'%1 = "lz.sigmoid"(%x) : ({x}) -> {x}', f'%2 = "lz.gelu"(%g) : ({x}) -> {x}',
               f"func.return %0, %1, %2 : {x}, {x}, {x}")
    # (gelu only down to -5: below, the reference's 1 + erf(x / sqrt 2) in float64 cancels to 0)
    check_triton(m, [np.array([-30, -9, -5, -1e-3, -1e-30, 0, 1e-7, 0.3, 0.7, 4, 12, 90], np.float32),
                     np.array([-5, -4, -2.5, -1e-3, -1e-30, 0, 1e-7, 0.3, 0.7, 4, 12, 90], np.float32)],
                 rtol=3e-6, atol=1e-37)


def test_integer_division_and_remainder_by_zero_and_overflow():
    x = t("6", "i32")
    m = module(f"(%x: {x}, %y: {x}) -> ({x}, {x})", f'%0 = "lz.div"(%x, %y) : ({x}, {x}) -> {x}',
               f'%1 = "lz.rem"(%x, %y) : ({x}, {x}) -> {x}', f"func.return %0, %1 : {x}, {x}")
    check_triton(m, [np.array([7, -7, 5, -2 ** 31, 9, -9], np.int32), np.array([2, 2, 0, -1, -4, 0], np.int32)])


# --- reductions ----------------------------------------------------------------------------------

def test_softmax_is_one_reduction_kernel():
    x = t("6x300")
    m = module(f"(%x: {x}) -> {x}", f'%0 = "lz.softmax"(%x) {{axis = -1 : i64}} : ({x}) -> {x}',
               f"func.return %0 : {x}")
    kernel = one_kernel(check_triton(m, [data((6, 300)) * 4]), "reduction")
    src = kernel.source
    assert src.count("for r0 in range(0, 300, RBLOCK):") == 3  # max, sum of exp, then the stores
    assert "tl.reduce(" in src


def test_layer_norm_fused():
    x, w = t("5x3x40"), t("3x40")
    m = module(f"(%x: {x}, %w: {w}, %b: {w}) -> {x}",
               f'%0 = "lz.layer_norm"(%x, %w, %b) {{axis = 1 : i64}} : ({x}, {w}, {w}) -> {x}',
               f"func.return %0 : {x}")
    kernel = one_kernel(check_triton(m, [data((5, 3, 40)), data((3, 40), seed=1), data((3, 40), seed=2)],
                                     rtol=1e-5, atol=1e-5), "reduction")
    assert kernel.configs[0].grid == (1,)


def test_group_norm_reads_its_operands_through_reshapes():
    """The reduction kernel reads its input and parameters through reshapes of memory: one kernel."""
    m = build([tensor(s, "f32") for s in GROUP_NORM_SHAPES], group_norm_body)
    kernel = one_kernel(check_triton(m, [data(s, seed=i) for i, s in enumerate(GROUP_NORM_SHAPES)], 1e-4, 1e-5),
                        "reduction")
    assert kernel.name.startswith("lz_fused_reshape_reduce_mean_sub_mul_")


def test_long_rows_walk_the_reduced_extent_in_chunks():
    x, r = t("3x2500"), t("3x1")
    m = module(f"(%x: {x}) -> ({r}, {r})",
               f'%0 = "lz.reduce_max"(%x) {{axes = array<i64: 1>, keepdims = true}} : ({x}) -> {r}',
               f'%1 = "lz.sub"(%x, %0) : ({x}, {r}) -> {x}',
               f'%2 = "lz.reduce_sum"(%1) {{axes = array<i64: 1>, keepdims = true}} : ({x}) -> {r}',
               f"func.return %0, %2 : {r}, {r}")
    kernel = one_kernel(check_triton(m, [data((3, 2500))], rtol=1e-5, atol=1e-5), "reduction")
    assert kernel.configs[0].constexprs["RBLOCK"] < 2500


@pytest.mark.parametrize("element,dtype", [("f32", "float32"), ("f16", "float16"), ("i32", "int32")])
def test_column_reduction(element, dtype):
    x, r = t("37x70", element), t("70", element)
    m = module(f"(%x: {x}) -> {r}",
               f'%0 = "lz.reduce_sum"(%x) {{axes = array<i64: 0>}} : ({x}) -> {r}', f"func.return %0 : {r}")
    check_triton(m, [data((37, 70), dtype)], rtol=1e-5 if element == "f32" else None)


def test_middle_axis_reduction_with_epilogue_at_both_shapes():
    x, r = t("4x9x5"), t("4x1x5")
    m = module(f"(%x: {x}) -> ({x}, {r})",
               f'%0 = "lz.reduce_mean"(%x) {{axes = array<i64: 1>, keepdims = true}} : ({x}) -> {r}',
               f'%1 = "lz.sub"(%x, %0) : ({x}, {r}) -> {x}',
               f'%2 = "lz.mul"(%1, %1) : ({x}, {x}) -> {x}',
               f'%3 = "lz.sqrt"(%0) : ({r}) -> {r}',
               f"func.return %2, %3 : {x}, {r}")
    check_triton(m, [np.abs(data((4, 9, 5)))])


def test_argmax_first_maximum_and_nan():
    x, r = t("4x6"), t("4", "i64")
    m = module(f"(%x: {x}) -> {r}", f'%0 = "lz.argmax"(%x) {{axis = 1 : i64}} : ({x}) -> {r}',
               f"func.return %0 : {r}")
    nan, inf = np.nan, np.inf
    check_triton(m, [np.array([[1, 3, 3, 0, 3, 2], [nan, 1, nan, 5, 2, 0], [-inf, -inf, -inf, -inf, -inf, -inf],
                               [0, 1, 2, nan, 9, 9]], np.float32)])


def test_full_reduction_to_a_scalar():
    x, r = t("33x17"), "tensor<f32>"
    m = module(f"(%x: {x}) -> {r}", f'%0 = "lz.reduce_prod"(%x) : ({x}) -> {r}', f"func.return %0 : {r}")
    check_triton(m, [1 + 0.01 * data((33, 17))], rtol=1e-5)


# --- pooling and scans ---------------------------------------------------------------------------

@pytest.mark.parametrize("op,attrs,dtype", [
    ("lz.max_pool2d", dict(kernel=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], dilations=[1, 2], ceil_mode=True),
     "float32"),
    ("lz.max_pool2d", dict(kernel=[2, 2], strides=[2, 2]), "float16"),
    ("lz.avg_pool2d", dict(kernel=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=True), "float32"),
    ("lz.avg_pool2d", dict(kernel=[2, 3], pads=[0, 1, 1, 1], count_include_pad=True), "float16")])
def test_pooling(op, attrs, dtype):
    sample = Sample(op, [Arg((2, 3, 9, 8), dtype)], attrs)
    arrays = sample.arrays(np.random.default_rng(0))
    kernel = one_kernel(check_triton(sample.module(arrays), arrays), "single")
    assert "for kh in tl.static_range(" in kernel.source


def pool_attrs(kernel, strides=None, pads=None, dilations=None, ceil_mode=False) -> str:
    """A pooling op's attribute dictionary in MLIR syntax."""
    attrs = [f"kernel = array<i64: {kernel[0]}, {kernel[1]}>"]
    attrs += [f"{name} = array<i64: {', '.join(map(str, v))}>"
              for name, v in (("strides", strides), ("pads", pads), ("dilations", dilations)) if v is not None]
    return "{" + ", ".join(attrs + ["ceil_mode = true"] * ceil_mode) + "}"


def tied_values(shape, dtype, rng) -> np.ndarray:
    """Small integers (many ties within a window), some nan and some -inf; one plane all -inf,
    so that its windows are won by their first element inside the image (padding never wins)."""
    x = rng.integers(-2, 3, shape).astype(np.float64)
    r = rng.random(shape)
    x[r < 0.06] = np.nan
    x[(r >= 0.06) & (r < 0.16)] = -np.inf
    x[0, -1] = -np.inf
    return x.astype(dtype)


@pytest.mark.parametrize("shape,out,kernel,attrs,element,dtype", [
    # ResNet's stem pool: 3x3 windows, stride 2, padding 1 (neighbouring windows overlap)
    ((2, 3, 9, 8), (5, 4), (3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1]), "f32", "float32"),
    # stride 1 in w: an element is in up to 3 x 2 windows; ceil mode with uneven padding
    ((2, 2, 9, 8), (5, 10), (3, 2), dict(strides=[2, 1], pads=[1, 2, 0, 1], ceil_mode=True), "f32", "float32"),
    # dilations: the windows holding an element are dh / dw rows / columns apart
    ((1, 3, 11, 10), (11, 5), (2, 3), dict(strides=[1, 2], pads=[1, 0, 1, 1], dilations=[2, 1], ceil_mode=True),
     "f32", "float32"),
    ((1, 2, 8, 9), (6, 7), (3, 3), {}, "f16", "float16"),
    ((1, 2, 8, 7), (8, 7), (2, 3), dict(pads=[1, 1, 0, 1]), "bf16", "float32"),
    ((1, 3, 7, 7), (4, 4), (3, 3), dict(strides=[2, 2], pads=[1, 1, 1, 1], ceil_mode=True), "f64", "float64")])
def test_max_pool2d_grad_gathers_each_windows_cotangent(shape, out, kernel, attrs, element, dtype):
    """The gradient equals the reference bit for bit: each element sums the cotangents of the
    windows it wins (first maximum, last nan, first element inside the image when all are -inf)
    in the reference's order, in f32 for f16 and bf16."""
    x, g = t("x".join(map(str, shape)), element), t("x".join(map(str, shape[:2] + out)), element)
    m = module(f"(%x: {x}, %dy: {g}) -> {x}",
               f'%0 = "lz.max_pool2d_grad"(%x, %dy) {pool_attrs(kernel, **attrs)} : ({x}, {g}) -> {x}',
               f"func.return %0 : {x}")
    rng = np.random.default_rng(sum(shape))
    inputs = [tied_values(shape, dtype, rng), rng.standard_normal(shape[:2] + out).astype(dtype)]
    if element == "bf16":  # bf16 values in float32 storage
        inputs = [(a.view(np.uint32) & 0xFFFF0000).view(np.float32) for a in inputs]
    (want,) = reference(m, inputs)
    kernels: list = []
    (got,) = run_triton(m, inputs, kernels=kernels)
    assert got.dtype == want.dtype and np.array_equal(got.view(np.uint8), want.view(np.uint8)), \
        np.argwhere(got != want)
    kernel_ = one_kernel(kernels, "single")
    assert kernel_.name == "lz_fused_max_pool2d_grad_0" and "atomic" not in kernel_.source


def test_cnn_gradient_runs_on_the_gpu_without_transfers():
    """conv2d -> relu -> max_pool2d -> matmul differentiated: every kernel of the gradient
    function, max pooling's gradient included, is placed on cuda (no transfers to the CPU), and
    the results equal the reference."""
    x, w, h, p, fc, y = t("2x3x8x8"), t("4x3x3x3"), t("2x4x8x8"), t("2x4x4x4"), t("64x5"), t("2x5")
    m = module(f"(%x: {x}, %w: {w}, %fc: {fc}) -> {y}",
               f'%0 = "lz.conv2d"(%x, %w) {{pads = array<i64: 1, 1, 1, 1>}} : ({x}, {w}) -> {h}',
               f'%1 = "lz.relu"(%0) : ({h}) -> {h}',
               f'%2 = "lz.max_pool2d"(%1) {pool_attrs((3, 3), strides=[2, 2], pads=[1, 1, 1, 1])} : ({h}) -> {p}',
               f'%3 = "lz.reshape"(%2) {{shape = array<i64: 2, 64>}} : ({p}) -> {t("2x64")}',
               f'%4 = "lz.matmul"(%3, %fc) : ({t("2x64")}, {fc}) -> {y}',
               f"func.return %4 : {y}")
    run_pipeline(m, "autodiff,canonicalize,cse,dce")
    kernels = [op for op in schedule(m, target="cuda").lookup("f_grad").entry_block.ops if op.name == "lz.kernel"]
    assert any("max_pool2d_grad" in op.definition.attrs(op).name for op in kernels)
    assert {(op.definition.attrs(op).device, op.definition.attrs(op).kind == "transfer") for op in kernels} \
        == {("cuda", False)}
    rng = np.random.default_rng(5)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in [(2, 3, 8, 8), (4, 3, 3, 3), (64, 5), (2, 5)]]
    check_triton(m, inputs, rtol=1e-4, atol=1e-5, func_name="f_grad")


def test_cumulative_scans_with_associative_scan():
    x = t("5x40")
    m = module(f"(%x: {x}) -> ({x}, {x})",
               f'%0 = "lz.cumulative"(%x) {{combine = "add", axis = 1 : i64}} : ({x}) -> {x}',
               f'%1 = "lz.cumulative"(%x) {{combine = "max", axis = 0 : i64, exclusive = true, reverse = true}} : '
               f"({x}) -> {x}",
               f"func.return %0, %1 : {x}, {x}")
    kernels = check_triton(m, [data((5, 40))], rtol=1e-5, atol=1e-5)
    assert all("tl.associative_scan" in k.source for k in kernels) and len(kernels) == 2


# --- topk and scatter_nd -------------------------------------------------------------------------

def exact(m, inputs) -> list:
    """Run ``m`` through Triton; every result equal to the reference's bit for bit; the kernels."""
    want = reference(m, inputs)
    kernels: list = []
    got = run_triton(m, inputs, kernels=kernels)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape and np.array_equal(g.view(np.uint8), w.view(np.uint8)), \
            (g, w)
    return kernels


def topk_module(shape, element: str, k: int, axis: int, largest: bool, results=(0, 1)):
    out = list(shape)
    out[axis] = k
    x, v, i = t("x".join(map(str, shape)), element), t("x".join(map(str, out)), element), \
        t("x".join(map(str, out)), "i64")
    returned = [(f"%0#{r}", (v, i)[r]) for r in results]
    return module(f"(%x: {x}) -> ({', '.join(ty for _, ty in returned)})",
                  f'%0:2 = "lz.topk"(%x) {{k = {k} : i64, axis = {axis} : i64, largest = {str(largest).lower()}}} : '
                  f"({x}) -> ({v}, {i})",
                  f"func.return {', '.join(name for name, _ in returned)} : {', '.join(ty for _, ty in returned)}")


@pytest.mark.parametrize("shape,element,k,axis,largest", [
    ((4, 9), "f32", 4, 1, True),
    ((4, 9), "f32", 9, 1, False),  # k = the extent: the whole line sorted
    ((6, 5, 3), "f16", 3, 1, True),  # an axis in the middle: lines are strided
    ((7, 4), "bf16", 7, 0, False),  # the first axis
    ((3, 33), "f64", 5, -1, False),  # 33 elements: a block of 64 lanes, masked
    ((5, 8), "i32", 3, 1, True),
    ((2, 6, 4), "i64", 6, 1, False),
    ((3, 10), "ui8", 4, 1, True)])
def test_topk_ranks_each_element_as_the_reference_orders_them(shape, element, k, axis, largest):
    """Ties go to the first index, nan counts as the largest value, -0.0 equals 0.0."""
    dtype = {"f32": "float32", "f16": "float16", "bf16": "float32", "f64": "float64", "i32": "int32",
             "i64": "int64", "ui8": "uint8"}[element]
    rng = np.random.default_rng(sum(shape) + k)
    x = ties_and_nan(shape, dtype, rng) if element[0] in "fb" else rng.integers(0, 4, shape).astype(dtype)
    if element == "bf16":  # bf16 values in float32 storage
        x = (x.view(np.uint32) & 0xFFFF0000).view(np.float32)
    kernel = one_kernel(exact(topk_module(shape, element, k, axis, largest), [x]), "single")
    assert kernel.name == "lz_fused_topk_0" and "atomic" not in kernel.source
    assert f"for j in range({shape[axis]}):" in kernel.source


@pytest.mark.parametrize("results", [(0,), (1,)])
def test_topk_yielding_one_result(results):
    x = ties_and_nan((3, 12), "float32", np.random.default_rng(3))
    kernel = one_kernel(exact(topk_module((3, 12), "f32", 5, 1, True, results), [x]), "single")
    assert kernel.source.count("tl.store(") == 1


def scatter_module(data, indices, updates, reduction: str, element: str, index_element: str):
    d, i, u = (t("x".join(map(str, shape)), e) for shape, e in
               ((data, element), (indices, index_element), (updates, element)))
    return module(f"(%d: {d}, %i: {i}, %u: {u}) -> {d}",
                  f'%0 = "lz.scatter_nd"(%d, %i, %u) {{reduction = "{reduction}"}} : ({d}, {i}, {u}) -> {d}',
                  f"func.return %0 : {d}")


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
@pytest.mark.parametrize("data,indices,element,index_dtype", [
    ((6, 4), [[1], [-5], [3], [1], [-1], [1]], "f32", "int64"),  # rows: duplicates and negative indices
    ((3, 4, 5), [[0, 1], [2, -1], [0, 1], [-3, 1]], "f16", "int32"),  # depth 2 of 3: slices of 5
    ((3, 4), [[2, 3], [-1, -1], [0, 0], [2, 3]], "bf16", "int64"),  # whole tuples: single elements
    ((5, 3), [[4], [0], [-1], [4]], "i32", "int64"),
    ((4, 2, 3), [[3], [-1], [1]], "i8", "int16")])
def test_scatter_nd_applies_updates_in_order(reduction, data, indices, element, index_dtype):
    """Each output element walks the updates in order: duplicate indices combine (or the last
    wins) exactly as the reference applies them."""
    rng = np.random.default_rng(len(data) + len(indices))
    idx = np.array(indices, index_dtype)
    updates_shape = idx.shape[:-1] + data[idx.shape[-1]:]
    dtype = {"f32": "float32", "f16": "float16", "bf16": "float32", "i32": "int32", "i8": "int8"}[element]
    if element[0] in "fb":
        arrays = [rng.standard_normal(data).astype(dtype), rng.standard_normal(updates_shape).astype(dtype)]
    else:
        arrays = [rng.integers(-9, 10, data).astype(dtype), rng.integers(-9, 10, updates_shape).astype(dtype)]
    if element == "bf16":
        arrays = [(a.view(np.uint32) & 0xFFFF0000).view(np.float32) for a in arrays]
    if element[0] in "fb":
        arrays[0].reshape(-1)[0] = np.nan  # max and min propagate it
    index_element = {"int64": "i64", "int32": "i32", "int16": "i16"}[index_dtype]
    m = scatter_module(data, idx.shape, updates_shape, reduction, element, index_element)
    kernel = one_kernel(exact(m, [arrays[0], idx, arrays[1]]), "single")
    # no atomics but the bounds checks' (masked: only lanes with an index out of range store)
    assert kernel.name == "lz_fused_scatter_nd_0"
    assert kernel.source.count("atomic") == kernel.source.count("tl.atomic_max(status_at") == 2 * idx.shape[-1]
    assert f"for u in range({len(indices)}):" in kernel.source


def test_scatter_nd_past_the_compare_limit_stays_on_the_cpu():
    d, i, u = t("65536x64"), t("4097x1", "i64"), t("4097x64")
    m = module(f"(%d: {d}, %i: {i}, %u: {u}) -> {d}",
               f'%0 = "lz.scatter_nd"(%d, %i, %u) : ({d}, {i}, {u}) -> {d}', f"func.return %0 : {d}")
    (op,) = [op for op in m.functions[0].entry_block.ops if op.name == "lz.scatter_nd"]
    assert unsupported_reason(op) == ("lz.scatter_nd of 4194304 elements x 4097 update rows (17184063488 > 2**28 "
                                      "compares as a gather) runs on the CPU")
    kernels = [k for k in schedule(m, target="cuda").functions[0].entry_block.ops if k.name == "lz.kernel"]
    assert [(k.definition.attrs(k).kind, k.definition.attrs(k).device) for k in kernels] == [
        ("transfer", "cpu"), ("transfer", "cpu"), ("transfer", "cpu"), ("single", "cpu"), ("transfer", "cuda")]


# --- what the code generator says ----------------------------------------------------------------

def test_topk_over_a_longer_axis_than_one_block_is_a_clear_error():
    x = t("2x5000")
    m = module(f"(%x: {x}) -> {t('2x4')}",
               f'%0:2 = "lz.topk"(%x) {{k = 4 : i64}} : ({x}) -> ({t("2x4")}, {t("2x4", "i64")})',
               f"func.return %0#0 : {t('2x4')}")
    (op,) = [op for op in schedule(m).functions[0].entry_block.ops if op.name == "lz.kernel"]
    with pytest.raises(LoweringError, match=r"failed to lower lz.topk with f32 for cuda: lz.topk over an axis of "
                                            r"5000 > 4096 elements runs on the CPU"):
        lower_kernel(op)


def test_triton_text_names_every_kernel():
    x, r = t("4x8"), t("4x1")
    m = module(f"(%x: {x}) -> {x}",
               f'%0 = "lz.reduce_max"(%x) {{axes = array<i64: 1>, keepdims = true}} : ({x}) -> {r}',
               f'%1 = "lz.sub"(%x, %0) : ({x}, {r}) -> {x}', f"func.return %1 : {x}")
    text = kernel_text(m)
    assert text.startswith("# ---- kernel lz_fused_reduce_max_sub_0: reduction, grid [1], ROWS=4, RBLOCK=8")
    assert "@triton.jit\ndef lz_fused_reduce_max_sub_0(b0, b1, ROWS: tl.constexpr, RBLOCK: tl.constexpr):" in text


def test_kernels_are_cached_as_files(tmp_path, monkeypatch):
    monkeypatch.setenv("LEZERO_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(jit, "_LOADED", {})  # nothing loaded yet in this process
    x = t("10")
    m = module(f"(%x: {x}) -> {x}", f'%0 = "lz.cos"(%x) : ({x}) -> {x}', f"func.return %0 : {x}")
    (kernel,) = check_triton(m, [data((10,))])
    files = list((tmp_path / "triton").glob("*.py"))
    assert [f.name for f in files] == [f"{jit.source_hash(kernel)}.py"]
    assert files[0].read_text() == kernel.source
    assert jit.load(kernel) is jit.load(kernel)


def test_kernels_differing_only_in_name_share_one_function():
    """A model repeats kernels (conv + bias + relu per block) that differ only in their names:
    one load, one compile."""
    x = t("8x8")
    m = module(f"(%x: {x}, %w: {x}) -> {x}", f'%0 = "lz.matmul"(%x, %w) : ({x}, {x}) -> {x}',
               f'%1 = "lz.relu"(%0) : ({x}) -> {x}', f'%2 = "lz.matmul"(%1, %w) : ({x}, {x}) -> {x}',
               f'%3 = "lz.relu"(%2) : ({x}) -> {x}', f"func.return %3 : {x}")
    kernels = [lower_kernel(op) for op in schedule(m, target="cuda").lookup("f").entry_block.ops
               if op.name == "lz.kernel" and op.attributes["kind"].value != "transfer"]
    assert len(kernels) == 2 and kernels[0].name != kernels[1].name, [k.name for k in kernels]
    first, second = jit.load(kernels[0]), jit.load(kernels[1])
    assert first.fn is second.fn and second.kernel is kernels[1]


def test_missing_triton_says_how_to_install(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "triton", None)
    x = t("10")
    m = module(f"(%x: {x}) -> {x}", f'%0 = "lz.cos"(%x) : ({x}) -> {x}', f"func.return %0 : {x}")
    (op,) = [op for op in schedule(m, target="cuda").functions[0].entry_block.ops if op.name == "lz.kernel"]
    kernel = lower_kernel(op)  # generating source needs no triton
    with pytest.raises(ImportError, match=r"the cuda target needs triton: pip install -e '\.\[gpu\]'"):
        jit.build_ptx(kernel)


# --- random fused graphs -------------------------------------------------------------------------

@settings(max_examples=12, deadline=None)
@given(random_graphs(max_ops=8))
def test_random_fused_graphs(m):
    inputs = inputs_for(m.functions[0])
    check_triton(m, inputs, rtol=1e-4, atol=1e-5)


# --- element types beyond the op samples -----------------------------------------------------------

@pytest.mark.parametrize("sample", [
    Sample("lz.softmax", [Arg((5, 37), "float16")]),
    Sample("lz.log_softmax", [Arg((3, 70), "float64")], {"axis": 0}),
    Sample("lz.layer_norm", [Arg((4, 16), "float16"), Arg((16,), "float16"), Arg((16,), "float16")]),
    Sample("lz.argmax", [Arg((3, 40), "float16")], {"axis": 1}),
    Sample("lz.argmax", [Arg((30, 4), "int64", "small-int")], {"axis": 0}),
    Sample("lz.reduce_sum", [Arg((6, 5, 7), "int8", "small-int")], {"axes": [0, 2]}),
    Sample("lz.reduce_min", [Arg((2, 3, 4, 5))], {"axes": [1, 3], "keepdims": True}),
    Sample("lz.cumulative", [Arg((3, 300))], {"combine": "add", "axis": 1}),
    Sample("lz.cumulative", [Arg((50, 3), "int64", "small-int")], {"combine": "mul", "axis": 0, "exclusive": True}),
    Sample("lz.batch_norm", [Arg((2, 3, 4, 4), "float16"), Arg((3,), "float16"), Arg((3,), "float16"),
                             Arg((3,), "float16"), Arg((3,), "float16", "positive")], {"epsilon": 1e-3}),
    Sample("lz.gelu", [Arg((40,), "float16")]),
    Sample("lz.gelu", [Arg((40,), "float64")], {"approximate": "tanh"}),
    Sample("lz.tanh", [Arg((40,), "float64")]),
    Sample("lz.pow", [Arg((4, 5), "int32", "small-int"), Arg((4, 5), "int32", "small-int")]),
    Sample("lz.pow", [Arg((4, 5), "float32", "small-int"), Arg((4, 5), "float32", "small-int")]),  # negative bases
    Sample("lz.cast", [Arg((4, 5), "float64")], {"to": "bf16"}),
    Sample("lz.cast", [Arg((4, 5), "float16")], {"to": "i8"}),
    Sample("lz.div", [Arg((4, 5), "uint32", "small-int"), Arg((4, 5), "uint32", "small-int")])],
    ids=lambda s: s.id)
def test_more_element_types(sample):
    arrays = sample.arrays(np.random.default_rng(1))
    check_triton(sample.module(arrays), arrays)
