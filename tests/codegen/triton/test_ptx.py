"""Every kind of Triton kernel the GPU code generator makes builds to PTX for sm_90 (H100/H200),
with no GPU: ``triton.compile`` for ``GPUTarget("cuda", 90, 32)`` (``jit.build_ptx``).

Each case is a function scheduled for ``target="cuda"`` (partitioned, fused, memory-planned), so
the kernels are the ones the runtime would launch; the PTX must declare the sm_90 target, hold an
``.entry`` named after the kernel (the name says what was fused), and, for contractions, the
instructions ``tl.dot`` was asked for: float32 FMAs for ``input_precision="ieee"``, tensor-core
MMAs (Hopper's ``wgmma``) for f16 and for bf16 (16-bit storage on the device).  triton is a
test dependency: without it these tests fail, they do not skip.
"""
from __future__ import annotations

import io
import re

import pytest
import triton  # noqa: F401  (a missing triton fails this module loudly)

from lezero.cli.opt import run as opt_run
from lezero.codegen.triton.jit import build_ptx
from lezero.codegen.triton.backend import lower_module
from lezero.ir import parse_module


def function(signature: str, *lines: str) -> str:
    """``func.func @f<signature> { lines }`` as MLIR text."""
    return "\n".join([f"func.func @f{signature} {{", *("  " + line for line in lines), "}"])


def t(shape: str, element: str = "f32") -> str:
    return f"tensor<{shape}x{element}>"


def elementwise(element: str) -> str:
    x, a, b = t("32x48", element), t("48", element), t("32x1", element)
    return function(f"(%x: {x}, %a: {a}, %b: {b}) -> {x}",
                    f'%0 = "lz.mul"(%x, %a) : ({x}, {a}) -> {x}',
                    f'%1 = "lz.add"(%0, %b) : ({x}, {b}) -> {x}',
                    f'%2 = "lz.tanh"(%1) : ({x}) -> {x}',
                    f'%3 = "lz.exp"(%2) : ({x}) -> {x}',
                    f"func.return %3 : {x}")


def matmul(element: str, m: int = 64, k: int = 96, n: int = 48) -> str:
    x, w, b, y = t(f"{m}x{k}", element), t(f"{k}x{n}", element), t(f"{n}", element), t(f"{m}x{n}", element)
    return function(f"(%x: {x}, %w: {w}, %b: {b}) -> {y}",
                    f'%0 = "lz.matmul"(%x, %w) : ({x}, {w}) -> {y}',
                    f'%1 = "lz.add"(%0, %b) : ({y}, {b}) -> {y}',
                    f'%2 = "lz.relu"(%1) : ({y}) -> {y}',
                    f"func.return %2 : {y}")


def reduce(op: str, axes: str, shape: str, out: str) -> str:
    return function(f"(%x: {t(shape)}) -> {t(out)}",
                    f'%0 = "{op}"(%x) {{axes = array<i64: {axes}>}} : ({t(shape)}) -> {t(out)}',
                    f"func.return %0 : {t(out)}")


# id -> (MLIR text, its cuda kernels' names in schedule order, a regex each kernel's PTX must match)
CASES = {
    "elementwise_f32": (elementwise("f32"), ["lz_fused_mul_add_tanh_exp_0"], None),
    "elementwise_f16": (elementwise("f16"), ["lz_fused_mul_add_tanh_exp_0"], None),
    # 16-bit buffers: each bf16 value loaded widens to float32 (cvt.f32.bf16), stores narrow two at a time
    "elementwise_bf16": (elementwise("bf16"), ["lz_fused_mul_add_tanh_exp_0"],
                         r"\bcvt\.f32\.bf16\b[\s\S]*\bcvt\.rn\.bf16x2\.f32\b"),
    "movement": (function(f"(%x: {t('48x32')}, %y: {t('32x96')}) -> {t('32x48')}",
                          f'%0 = "lz.transpose"(%x) {{perm = array<i64: 1, 0>}} : ({t("48x32")}) -> {t("32x48")}',
                          f'%1 = "lz.slice"(%y) {{starts = array<i64: 1>, ends = array<i64: 96>, axes = array<i64: 1>, '
                          f'steps = array<i64: 2>}} : ({t("32x96")}) -> {t("32x48")}',
                          f'%2 = "lz.add"(%0, %1) : ({t("32x48")}, {t("32x48")}) -> {t("32x48")}',
                          f"func.return %2 : {t('32x48')}"),
                 ["lz_fused_transpose_slice_add_0"], None),
    "row_reduction": (reduce("lz.reduce_sum", "1", "64x100", "64"), ["lz_fused_reduce_sum_0"], None),
    "column_reduction": (reduce("lz.reduce_max", "0", "256x48", "48"), ["lz_fused_reduce_max_0"], None),
    "argmax": (function(f"(%x: {t('16x40')}) -> {t('16', 'i64')}",
                        f'%0 = "lz.argmax"(%x) {{axis = 1 : i64}} : ({t("16x40")}) -> {t("16", "i64")}',
                        f"func.return %0 : {t('16', 'i64')}"),
               ["lz_fused_argmax_0"], None),
    "softmax": (function(f"(%x: {t('64x100')}) -> {t('64x100')}",
                         f'%0 = "lz.softmax"(%x) {{axis = -1 : i64}} : ({t("64x100")}) -> {t("64x100")}',
                         f"func.return %0 : {t('64x100')}"),
                ["lz_fused_reduce_max_sub_exp_reduce_sum_div_0"], None),
    "layer_norm": (function(f"(%x: {t('32x256')}, %w: {t('256')}, %b: {t('256')}) -> {t('32x256')}",
                            f'%0 = "lz.layer_norm"(%x, %w, %b) {{axis = -1 : i64, epsilon = 1.0e-5 : f32}} : '
                            f"({t('32x256')}, {t('256')}, {t('256')}) -> {t('32x256')}",
                            f"func.return %0 : {t('32x256')}"),
                   ["lz_fused_reduce_mean_sub_mul_add_rsqrt_0"], None),
    "cumulative": (function(f"(%x: {t('16x40')}) -> {t('16x40')}",
                            f'%0 = "lz.cumulative"(%x) {{combine = "add", axis = 1 : i64}} : '
                            f'({t("16x40")}) -> {t("16x40")}',
                            f"func.return %0 : {t('16x40')}"),
                   ["lz_fused_cumulative_0"], None),
    "max_pool": (function(f"(%x: {t('2x8x16x16')}) -> {t('2x8x8x8')}",
                          f'%0 = "lz.max_pool2d"(%x) {{kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>}} : '
                          f"({t('2x8x16x16')}) -> {t('2x8x8x8')}",
                          f"func.return %0 : {t('2x8x8x8')}"),
                 ["lz_fused_max_pool2d_0"], None),
    "avg_pool": (function(f"(%x: {t('2x8x16x16')}) -> {t('2x8x8x8')}",
                          f'%0 = "lz.avg_pool2d"(%x) {{kernel = array<i64: 3, 3>, strides = array<i64: 2, 2>, '
                          f"pads = array<i64: 1, 1, 1, 1>}} : ({t('2x8x16x16')}) -> {t('2x8x8x8')}",
                          f"func.return %0 : {t('2x8x8x8')}"),
                 ["lz_fused_avg_pool2d_0"], None),
    # max pooling's gradient: a gather over the input elements, one window's winner at a time; a 2x2
    # window (16 unrolled loads; 3x3 unrolls 81, a 13-29 s build) with strides and pads: the same code
    # (its 3x3 values on cuda: tests/backend's op samples)
    "max_pool_grad": (function(f"(%x: {t('2x8x16x16')}, %dy: {t('2x8x9x9')}) -> {t('2x8x16x16')}",
                               f'%0 = "lz.max_pool2d_grad"(%x, %dy) {{kernel = array<i64: 2, 2>, '
                               f"strides = array<i64: 2, 2>, pads = array<i64: 1, 1, 1, 1>}} : "
                               f"({t('2x8x16x16')}, {t('2x8x9x9')}) -> {t('2x8x16x16')}",
                               f"func.return %0 : {t('2x8x16x16')}"),
                      ["lz_fused_max_pool2d_grad_0"], None),
    # topk: a rank per element along its line; scatter_nd: a gather over the updates in order
    "topk": (function(f"(%x: {t('16x40')}) -> ({t('16x5')}, {t('16x5', 'i64')})",
                      f'%0:2 = "lz.topk"(%x) {{k = 5 : i64}} : ({t("16x40")}) -> ({t("16x5")}, {t("16x5", "i64")})',
                      f"func.return %0#0, %0#1 : {t('16x5')}, {t('16x5', 'i64')}"),
             ["lz_fused_topk_0"], None),
    "scatter_nd": (function(f"(%d: {t('64x32')}, %i: {t('24x1', 'i64')}, %u: {t('24x32')}) -> {t('64x32')}",
                            f'%0 = "lz.scatter_nd"(%d, %i, %u) {{reduction = "add"}} : '
                            f"({t('64x32')}, {t('24x1', 'i64')}, {t('24x32')}) -> {t('64x32')}",
                            f"func.return %0 : {t('64x32')}"),
                   ["lz_fused_scatter_nd_0"], None),
    # tl.dot with input_precision="ieee": float32 FMAs, no tensor cores.
    "matmul_f32": (matmul("f32"), ["lz_fused_matmul_add_relu_0"], r"\bfma\.rn\.f32\b"),
    # f16 and bf16 tiles (16-bit storage) on the tensor cores (Hopper's wgmma).
    "matmul_f16": (matmul("f16"), ["lz_fused_matmul_add_relu_0"], r"\bwgmma\.mma_async\.[\w.]*\.f32\.f16\.f16\b"),
    "matmul_bf16": (matmul("bf16"), ["lz_fused_matmul_add_relu_0"], r"\bwgmma\.mma_async\.[\w.]*\.f32\.bf16\.bf16\b"),
    # autocast's casts of float32 operands read by the bf16 matmul: tiles rounded as loaded, then wgmma bf16
    "matmul_bf16_casts": (function(f"(%x: {t('64x96')}, %w: {t('96x48')}) -> {t('64x48', 'bf16')}",
                                   f'%a = "lz.cast"(%x) {{to = bf16}} : ({t("64x96")}) -> {t("64x96", "bf16")}',
                                   f'%b = "lz.cast"(%w) {{to = bf16}} : ({t("96x48")}) -> {t("96x48", "bf16")}',
                                   f'%0 = "lz.matmul"(%a, %b) : ({t("64x96", "bf16")}, {t("96x48", "bf16")}) -> '
                                   f'{t("64x48", "bf16")}',
                                   f"func.return %0 : {t('64x48', 'bf16')}"),
                          ["lz_fused_cast_matmul_0"], r"\bwgmma\.mma_async\.[\w.]*\.f32\.bf16\.bf16\b"),
    # f16: the same prologue, one operand float32 through its cast, the other stored in half
    "matmul_f16_cast": (function(f"(%x: {t('64x96')}, %w: {t('96x48', 'f16')}) -> {t('64x48', 'f16')}",
                                 f'%a = "lz.cast"(%x) {{to = f16}} : ({t("64x96")}) -> {t("64x96", "f16")}',
                                 f'%0 = "lz.matmul"(%a, %w) : ({t("64x96", "f16")}, {t("96x48", "f16")}) -> '
                                 f'{t("64x48", "f16")}',
                                 f"func.return %0 : {t('64x48', 'f16')}"),
                        ["lz_fused_cast_matmul_0"], r"\bwgmma\.mma_async\.[\w.]*\.f32\.f16\.f16\b"),
    "batched_matmul": (function(f"(%a: {t('4x32x64')}, %b: {t('64x48')}) -> {t('4x32x48')}",
                                f'%0 = "lz.matmul"(%a, %b) : ({t("4x32x64")}, {t("64x48")}) -> {t("4x32x48")}',
                                f"func.return %0 : {t('4x32x48')}"),
                       ["lz_fused_matmul_0"], r"\bfma\.rn\.f32\b"),
    "conv_relu": (function(f"(%x: {t('2x16x14x14')}, %w: {t('32x16x3x3')}) -> {t('2x32x14x14')}",
                           f'%0 = "lz.conv2d"(%x, %w) {{pads = array<i64: 1, 1, 1, 1>}} : '
                           f"({t('2x16x14x14')}, {t('32x16x3x3')}) -> {t('2x32x14x14')}",
                           f'%1 = "lz.relu"(%0) : ({t("2x32x14x14")}) -> {t("2x32x14x14")}',
                           f"func.return %1 : {t('2x32x14x14')}"),
                  ["lz_fused_conv2d_relu_0"], r"\bfma\.rn\.f32\b"),
}


def assert_ptx(ptx: str, name: str) -> None:
    assert re.search(r"^\.target sm_90a?\b", ptx, re.M), ptx[:400]
    assert re.search(rf"^\.visible \.entry {name}\(", ptx, re.M), f"no .entry {name} in\n{ptx[:600]}"
    assert "ret;" in ptx


@pytest.mark.parametrize("case", CASES)
def test_kernel_builds_to_ptx_for_sm90(case):
    text, names, instruction = CASES[case]
    kernels = lower_module(parse_module(text))  # scheduled for cuda, in schedule order
    assert [k.name for k in kernels] == names
    for kernel in kernels:
        ptx = build_ptx(kernel)
        assert_ptx(ptx, kernel.name)
        if instruction is not None:
            assert re.search(instruction, ptx), f"{kernel.name}: no {instruction!r} in the PTX"


def test_lezero_opt_emits_ptx(tmp_path):
    path = tmp_path / "linear.mlir"
    path.write_text(CASES["matmul_f32"][0])
    out, err = io.StringIO(), io.StringIO()
    assert opt_run([str(path), "--emit=ptx"], stdout=out, stderr=err) == 0, err.getvalue()
    text = out.getvalue()
    assert text.startswith("// ---- kernel lz_fused_matmul_add_relu_0: matmul, grid ["), text[:200]
    assert_ptx(text, "lz_fused_matmul_add_relu_0")
    assert re.search(r"\bfma\.rn\.f32\b", text)
