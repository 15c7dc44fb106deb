"""``CompiledFunction.profile`` and ``lezero.onnx``'s ``CompiledModel.profile``: one row per kernel
launch, in launch order, with codegen's flop and byte counts, and the same results as a plain call."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import lezero
import lezero.onnx
from lezero.runtime.cpu import KernelTiming

M, K, N = 48, 96, 40

MATMUL = f"""
func.func @mm(%a: tensor<{M}x{K}xf32>, %b: tensor<{K}x{N}xf32>) -> tensor<{M}x{N}xf32> {{
  %0 = "lz.matmul"(%a, %b) : (tensor<{M}x{K}xf32>, tensor<{K}x{N}xf32>) -> tensor<{M}x{N}xf32>
  func.return %0 : tensor<{M}x{N}xf32>
}}"""

# A matmul, then a reduction over its result: at least two kernels (a reduction is not fused
# into a matmul's epilogue), the last writing the function's result.
MATMUL_THEN_SUM = f"""
func.func @f(%a: tensor<{M}x{K}xf32>, %b: tensor<{K}x{N}xf32>) -> (tensor<{M}x{N}xf32>, tensor<{M}xf32>) {{
  %0 = "lz.matmul"(%a, %b) : (tensor<{M}x{K}xf32>, tensor<{K}x{N}xf32>) -> tensor<{M}x{N}xf32>
  %1 = "lz.exp"(%0) : (tensor<{M}x{N}xf32>) -> tensor<{M}x{N}xf32>
  %2 = "lz.reduce_sum"(%1) {{axes = [1]}} : (tensor<{M}x{N}xf32>) -> tensor<{M}xf32>
  func.return %0, %2 : tensor<{M}x{N}xf32>, tensor<{M}xf32>
}}"""


def operands(rng):
    return (rng.standard_normal((M, K), np.float32) * 0.1, rng.standard_normal((K, N), np.float32) * 0.1)


def test_profile_of_a_matmul_counts_its_flops_and_bytes():
    f = lezero.compile(MATMUL)
    a, b = operands(np.random.default_rng(0))
    results, rows = f.profile(a, b)
    np.testing.assert_allclose(results[0], a @ b, rtol=1e-5, atol=1e-6)
    assert len(rows) == 1
    (row,) = rows
    assert isinstance(row, KernelTiming)
    assert row.kind == "matmul" and "matmul" in row.name
    assert row.flops == 2 * M * N * K
    assert row.bytes == 4 * (M * K + K * N + M * N)
    assert row.seconds >= 0 and row.gflops_per_second >= 0 and row.gbytes_per_second >= 0


def test_profile_has_one_row_per_launch_in_order_and_the_plain_results():
    f = lezero.compile(MATMUL_THEN_SUM)
    a, b = operands(np.random.default_rng(1))
    plain = f(a, b)
    results, rows = f.profile(a, b)
    launches = f.plan_for([a.shape, b.shape]).plan.launches
    assert len(launches) >= 2
    assert [r.name for r in rows] == [launch.name for launch in launches]
    assert [r.kind for r in rows] == [launch.kind for launch in launches]
    assert [r.flops for r in rows] == [launch.kernel.flops for launch in launches]
    assert sum(r.flops for r in rows) >= 2 * M * N * K + M * N  # the matmul, then exp and sum
    assert all(r.seconds >= 0 for r in rows)
    for got, want in zip(results, plain):
        np.testing.assert_array_equal(got, want)
    # Profiling again gives the same rows (the plan is reused, nothing is added).
    assert [r.name for r in f.profile(a, b)[1]] == [r.name for r in rows]


def test_profile_checks_its_inputs_like_a_call():
    f = lezero.compile(MATMUL)
    with pytest.raises(lezero.ir.InputError, match="argument #0"):
        f.profile(np.zeros((M, K + 1), np.float32), np.zeros((K, N), np.float32))


def test_an_onnx_model_profiles_with_its_output_names():
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Relu", ["y"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [M, K]),
         helper.make_tensor_value_info("w", TensorProto.FLOAT, [K, N])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [M, N])])
    model = lezero.onnx.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    x, w = operands(np.random.default_rng(2))
    outputs, rows = model.profile({"x": x, "w": w})
    assert list(outputs) == ["z"]
    np.testing.assert_allclose(outputs["z"], np.maximum(x @ w, 0), rtol=1e-5, atol=1e-6)
    assert rows and sum(r.flops for r in rows) >= 2 * M * N * K
    assert all(isinstance(r, KernelTiming) and r.seconds >= 0 for r in rows)
