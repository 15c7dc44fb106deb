"""Out-of-range indices raise ``IndexError`` in compiled code (issue 10): the kernel records the
bad index in its status buffer (lezero/codegen/index_checks.py) and the runtime raises, naming
the op, its location, the index and the valid range; in-range (negative) indices give the
reference's answer.  CPU kernels of every kind that reads a gather (elementwise, a reduction's
prologue, a matmul's epilogue, scatter_nd), threads, the cuda path under Triton's interpreter,
eager ops, traced models."""
from __future__ import annotations

import numpy as np
import pytest

import lezero
import lezero.nn as nn
import lezero.nn.functional as F
from lezero.ir import interpret, parse_module
from lezero.runtime.cuda import _TritonLaunch

GATHER = """module {
  func.func @f(%x: tensor<10x4xf32>, %i: tensor<5xi32>) -> tensor<5x4xf32> {
    %0 = "lz.gather"(%x, %i) {axis = 0 : i64} : (tensor<10x4xf32>, tensor<5xi32>) -> tensor<5x4xf32>
    %1 = "lz.relu"(%0) : (tensor<5x4xf32>) -> tensor<5x4xf32>
    func.return %1 : tensor<5x4xf32>
  }
}"""
GATHER_SUM = """module {
  func.func @f(%x: tensor<10x4xf32>, %i: tensor<5xi64>) -> tensor<5xf32> {
    %0 = "lz.gather"(%x, %i) {axis = 0 : i64} : (tensor<10x4xf32>, tensor<5xi64>) -> tensor<5x4xf32>
    %1 = "lz.reduce_sum"(%0) {axes = array<i64: 1>} : (tensor<5x4xf32>) -> tensor<5xf32>
    func.return %1 : tensor<5xf32>
  }
}"""
MATMUL_GATHERED_BIAS = """module {
  func.func @f(%a: tensor<5x8xf32>, %w: tensor<8x4xf32>, %x: tensor<10x4xf32>, %i: tensor<5xi64>) -> tensor<5x4xf32> {
    %0 = "lz.matmul"(%a, %w) : (tensor<5x8xf32>, tensor<8x4xf32>) -> tensor<5x4xf32>
    %1 = "lz.gather"(%x, %i) {axis = 0 : i64} : (tensor<10x4xf32>, tensor<5xi64>) -> tensor<5x4xf32>
    %2 = "lz.add"(%0, %1) : (tensor<5x4xf32>, tensor<5x4xf32>) -> tensor<5x4xf32>
    func.return %2 : tensor<5x4xf32>
  }
}"""
GEMM_GATHERED_RESIDUAL = """module {
  func.func @f(%a: tensor<64x64xf32>, %w: tensor<64x64xf32>, %x: tensor<10x64xf32>,
               %i: tensor<64xi64>) -> tensor<64x64xf32> {
    %0 = "lz.matmul"(%a, %w) : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    %1 = "lz.gather"(%x, %i) {axis = 0 : i64} : (tensor<10x64xf32>, tensor<64xi64>) -> tensor<64x64xf32>
    %2 = "lz.add"(%0, %1) : (tensor<64x64xf32>, tensor<64x64xf32>) -> tensor<64x64xf32>
    func.return %2 : tensor<64x64xf32>
  }
}"""
SCATTER = """module {
  func.func @f(%d: tensor<6x3xf32>, %i: tensor<2x1xi64>, %u: tensor<2x3xf32>) -> tensor<6x3xf32> {
    %0 = "lz.scatter_nd"(%d, %i, %u) : (tensor<6x3xf32>, tensor<2x1xi64>, tensor<2x3xf32>) -> tensor<6x3xf32>
    func.return %0 : tensor<6x3xf32>
  }
}"""

rng = np.random.default_rng(10)
X = rng.standard_normal((10, 4)).astype(np.float32)


def gather_cases():
    """(kernel kind, module, inputs with valid indices, which input is the indices, the gather's line)."""
    a, w = rng.standard_normal((5, 8)).astype(np.float32), rng.standard_normal((8, 4)).astype(np.float32)
    a64, w64 = rng.standard_normal((64, 64)).astype(np.float32), rng.standard_normal((64, 64)).astype(np.float32)
    return [
        ("elementwise", GATHER, [X, np.array([0, -1, 3, -10, 9], np.int32)], 1, 3),
        ("reduction", GATHER_SUM, [X, np.array([0, -1, 3, -10, 9])], 1, 3),
        ("matmul_epilogue", MATMUL_GATHERED_BIAS, [a, w, X, np.array([0, -1, 3, -10, 9])], 3, 4),
        # the GEMM's micro-kernel evaluates the epilogue (a function of its own)
        ("gemm_epilogue", GEMM_GATHERED_RESIDUAL,
         [a64, w64, rng.standard_normal((10, 64)).astype(np.float32), rng.integers(-10, 10, 64)], 3, 5),
    ]


def expect_index_error(f, inputs, message):
    with pytest.raises(IndexError) as info:
        f(*inputs)
    assert message in str(info.value), str(info.value)


@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize("kind, text, inputs, position, line", gather_cases(),
                         ids=[case[0] for case in gather_cases()])
def test_gather_out_of_range_raises(monkeypatch, target, kind, text, inputs, position, line):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    f = lezero.compile(text, target=target)
    want = interpret(parse_module(text), "f", *inputs)
    np.testing.assert_allclose(f(*inputs), want, rtol=1e-4, atol=1e-5)  # in-range negatives count from the end
    for bad, reported in (([10], 10), ([-11], -11), ([40000, -11], 40000)):
        args = list(inputs)
        args[position] = args[position].copy()
        args[position][1:1 + len(bad)] = bad
        expect_index_error(f, args, f"<string>:{line}:5: lz.gather: index {reported} is out of range for axis 0 of "
                                    "size 10 (valid: -10 to 9)")
    np.testing.assert_allclose(f(*inputs), want, rtol=1e-4, atol=1e-5)  # the status was cleared
    if target == "cuda" and kind == "elementwise":  # the check ran in a Triton kernel
        plan = next(iter(f._plans.values()))
        assert [type(launch) for launch in plan.launches] == [_TritonLaunch] and plan.checked


@pytest.mark.parametrize("target", ["cpu", "cuda"])
def test_scatter_nd_out_of_range_raises(monkeypatch, target):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    g = lezero.compile(SCATTER, target=target)
    d, u = np.zeros((6, 3), np.float32), np.ones((2, 3), np.float32)
    good = np.array([[1], [-1]])
    np.testing.assert_array_equal(g(d, good, u), interpret(parse_module(SCATTER), "f", d, good, u))
    for bad, reported in (([[1], [6]], 6), ([[-7], [0]], -7)):
        expect_index_error(g, [d, np.array(bad), u], f"lz.scatter_nd: index {reported} is out of range for dim 0 "
                                                    "of size 6 (valid: -6 to 5)")


def test_many_threads_report_the_largest_bad_index():
    """A gather split over the thread pool (many work items): every thread's bad indices meet in
    the status buffer by atomic max, so the report is the same on every run."""
    n = 1 << 16
    text = f"""module {{
  func.func @f(%x: tensor<10x8xf32>, %i: tensor<{n}xi64>) -> tensor<{n}x8xf32> {{
    %0 = "lz.gather"(%x, %i) {{axis = 0 : i64}} : (tensor<10x8xf32>, tensor<{n}xi64>) -> tensor<{n}x8xf32>
    func.return %0 : tensor<{n}x8xf32>
  }}
}}"""
    f = lezero.compile(text)
    x = rng.standard_normal((10, 8)).astype(np.float32)
    indices = rng.integers(-10, 10, n)
    np.testing.assert_array_equal(f(x, indices), np.take(x, indices, axis=0))
    plan = next(iter(f._plans.values()))
    assert plan.launches[0].parallel and plan.launches[0].work_items > 1
    indices[[5, n // 2, n - 3]] = [12, 5000, -40]
    for _ in range(3):
        expect_index_error(f, [x, indices], "index 5000 is out of range")


def test_traced_embedding_raises():
    emb = nn.Embedding(30522, 8)
    traced = lezero.jit.trace(emb, lezero.tensor(np.array([[1, 2, 3]])))
    ids = np.array([[1, 30521, 7]])
    np.testing.assert_allclose(traced(lezero.tensor(ids)).numpy(), emb.weight.detach().numpy()[ids], rtol=1e-6)
    for bad, reported in (([[1, 40000, 2]], 40000), ([[-1, 2, 3]], -1)):
        with pytest.raises(IndexError, match=f"lz.gather: index {reported} is out of range for axis 0 of size "
                                             r"30522 \(valid: 0 to 30521\)"):
            traced(lezero.tensor(np.array(bad)))


def test_eager_embedding_and_class_losses_raise():
    w = lezero.tensor(rng.standard_normal((10, 3)).astype(np.float32))
    np.testing.assert_array_equal(F.embedding(lezero.tensor(np.array([9, 0])), w).numpy(), w.numpy()[[9, 0]])
    for bad in (10, -1):  # eager errors start at the user's line
        with pytest.raises(IndexError, match=rf"test_bounds_checks.py:\d+:\d+: lz.gather: index {bad} is out of range "
                                             r"for axis 0 of size 10 \(valid: 0 to 9\)"):
            F.embedding(lezero.tensor(np.array([1, bad])), w)
    logits = lezero.tensor(rng.standard_normal((3, 5)).astype(np.float32))
    for bad in (5, -1):
        with pytest.raises(IndexError, match=f"index {bad} is out of range for axis 0 of size 5"):
            F.cross_entropy(logits, lezero.tensor(np.array([0, bad, 2])))
    # the ignored target is not a class and not an error
    import torch
    t = np.array([0, -100, 4])
    np.testing.assert_allclose(F.cross_entropy(logits, lezero.tensor(t)).numpy(),
                               torch.nn.functional.cross_entropy(torch.tensor(logits.numpy()), torch.tensor(t)).numpy(),
                               rtol=1e-6)


TWO_GATHERS = """module {
  func.func @f(%x: tensor<10x4xf32>, %i: tensor<5xi64>, %j: tensor<3xi64>) -> tensor<3x4xf32> {
    %0 = "lz.gather"(%x, %i) {axis = 0 : i64} : (tensor<10x4xf32>, tensor<5xi64>) -> tensor<5x4xf32>
    %1 = "lz.reduce_sum"(%0) {axes = array<i64: 1>} : (tensor<5x4xf32>) -> tensor<5xf32>
    %2 = "lz.gather"(%x, %j) {axis = 0 : i64} : (tensor<10x4xf32>, tensor<3xi64>) -> tensor<3x4xf32>
    %3 = "lz.reshape"(%1) {shape = array<i64: 5, 1>} : (tensor<5xf32>) -> tensor<5x1xf32>
    %4 = "lz.slice"(%3) {starts = array<i64: 0, 0>, ends = array<i64: 3, 1>} : (tensor<5x1xf32>) -> tensor<3x1xf32>
    %5 = "lz.mul"(%2, %4) : (tensor<3x4xf32>, tensor<3x1xf32>) -> tensor<3x4xf32>
    func.return %5 : tensor<3x4xf32>
  }
}"""


def test_a_plan_run_as_one_native_program_reports_its_first_failed_check():
    """A plan of several kernels runs in one native call (loop_driver.native_plan) and reads the
    status buffers after its last launch: the error is the first failing check's in launch order,
    every failed status is cleared, and the next good call gives the reference's answer."""
    f = lezero.compile(TWO_GATHERS)
    i, j = np.array([0, -1, 3, -10, 9]), np.array([2, -3, 7])
    expected = interpret(parse_module(TWO_GATHERS), "f", X, i, j)
    np.testing.assert_allclose(f(X, i, j), expected, rtol=1e-6)
    plan = next(iter(f._plans.values()))
    assert plan.native is not None and len(plan.launches) >= 2
    assert sum(launch.checks is not None for launch in plan.launches) == 2
    expect_index_error(f, [X, np.array([0, 1, 2, 3, 11]), np.array([2, 3, 12])], "index 11 is out of range")
    expect_index_error(f, [X, i, np.array([2, 3, 12])], "index 12 is out of range")
    np.testing.assert_allclose(f(X, i, j), expected, rtol=1e-6)
