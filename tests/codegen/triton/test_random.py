"""lz.random_uniform as Triton (in the interpreter): the reference's bits, ``tl.umulhi`` for
Philox's multiply-high, the known answer, and the op fused into a matmul epilogue and a
reduction's prologue."""
import numpy as np
import pytest

from lezero.ir import interpret, parse_module

from codegen.triton.triton_testing import run_triton


def _module(n, dtype):
    return parse_module(f'''
module {{
  func.func @f(%s: tensor<2xi64>, %x: tensor<{n}xf32>) -> tensor<{n}x{dtype}> {{
    %0 = "lz.random_uniform"(%s, %x) {{dtype = {dtype}}} : (tensor<2xi64>, tensor<{n}xf32>) -> tensor<{n}x{dtype}>
    func.return %0 : tensor<{n}x{dtype}>
  }}
}}''')


@pytest.mark.parametrize("state", [(0, 0), (0xFEDCBA9876543210, 2 ** 64 - 7)])
@pytest.mark.parametrize("dtype", ["ui32", "f32", "f64"])
def test_triton_random_numbers_are_the_references_bits(state, dtype):
    module = _module(300, dtype)
    s, x = np.array(state, np.uint64).view(np.int64), np.zeros(300, np.float32)
    kernels = []
    (got,) = run_triton(module, [s, x], kernels=kernels)
    assert kernels and "tl.umulhi" in kernels[0].source
    np.testing.assert_array_equal(got, interpret(module, "f", s, x))


def test_triton_known_answer():
    (got,) = run_triton(_module(4, "ui32"), [np.zeros(2, np.int64), np.zeros(4, np.float32)])
    assert [hex(w) for w in got] == ["0x6627e8d5", "0xe169c58d", "0xbc57ac4c", "0x9b00dbd8"]


FUSED = '''
module {
  func.func @f(%s: tensor<2xi64>, %x: tensor<16x33xf32>, %w: tensor<33x20xf32>)
      -> (tensor<16x20xf32>, tensor<16xf32>) {
    %0 = "lz.matmul"(%x, %w) : (tensor<16x33xf32>, tensor<33x20xf32>) -> tensor<16x20xf32>
    %u = "lz.random_uniform"(%s, %0) : (tensor<2xi64>, tensor<16x20xf32>) -> tensor<16x20xf32>
    %p = "lz.constant"() {value = dense<0.25> : tensor<f32>} : () -> tensor<f32>
    %keep = "lz.cmp"(%u, %p) {predicate = "ge"} : (tensor<16x20xf32>, tensor<f32>) -> tensor<16x20xi1>
    %z = "lz.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
    %1 = "lz.select"(%keep, %0, %z) : (tensor<16x20xi1>, tensor<16x20xf32>, tensor<f32>) -> tensor<16x20xf32>
    %v = "lz.random_uniform"(%s, %x) : (tensor<2xi64>, tensor<16x33xf32>) -> tensor<16x33xf32>
    %2 = "lz.reduce_sum"(%v) {axes = array<i64: 1>} : (tensor<16x33xf32>) -> tensor<16xf32>
    func.return %1, %2 : tensor<16x20xf32>, tensor<16xf32>
  }
}'''


def test_random_numbers_in_a_matmul_epilogue_and_a_reduction_prologue():
    module = parse_module(FUSED)
    rng = np.random.default_rng(0)
    s = np.array([9, 1234], np.int64)
    x, w = rng.standard_normal((16, 33)).astype(np.float32), rng.standard_normal((33, 20)).astype(np.float32)
    kernels = []
    masked, sums = run_triton(module, [s, x, w], kernels=kernels)
    want_masked, want_sums = interpret(module, "f", s, x, w)
    assert sorted(k.name for k in kernels) == ["lz_fused_matmul_random_uniform_cmp_select_0",
                                               "lz_fused_random_uniform_reduce_sum_1"]
    np.testing.assert_array_equal(masked == 0, want_masked == 0)
    np.testing.assert_allclose(masked, want_masked, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(sums, want_sums, rtol=1e-6)
