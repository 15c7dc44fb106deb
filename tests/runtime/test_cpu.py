"""lezero.compile on the CPU: dynamic dims, threads, outputs that alias, input errors.  Every op sample
and random fused graphs against the interpreter run for every backend target in tests/backend."""
from __future__ import annotations

import numpy as np
import pytest

import lezero
from lezero.ir import InputError, interpret, parse_module, registered_ops
from lezero.runtime.cpu import CompiledFunction
from lezero.runtime.thread_pool import ThreadPool

from support.op_samples import NOT_SAMPLED, SAMPLES


def test_every_op_has_a_sample():
    missing = sorted(set(registered_ops()) - set(SAMPLES) - set(NOT_SAMPLED))
    assert not missing, f"add samples for {missing} to tests/support/op_samples.py"


MLP = """
func.func @mlp(%x: tensor<?x784xf32>, %w1: tensor<784x256xf32>, %b1: tensor<256xf32>,
               %w2: tensor<256x10xf32>, %b2: tensor<10xf32>) -> tensor<?x10xf32> {
  %0 = "lz.matmul"(%x, %w1) : (tensor<?x784xf32>, tensor<784x256xf32>) -> tensor<?x256xf32>
  %1 = "lz.add"(%0, %b1) : (tensor<?x256xf32>, tensor<256xf32>) -> tensor<?x256xf32>
  %2 = "lz.relu"(%1) : (tensor<?x256xf32>) -> tensor<?x256xf32>
  %3 = "lz.matmul"(%2, %w2) : (tensor<?x256xf32>, tensor<256x10xf32>) -> tensor<?x10xf32>
  %4 = "lz.add"(%3, %b2) : (tensor<?x10xf32>, tensor<10xf32>) -> tensor<?x10xf32>
  %5 = "lz.softmax"(%4) {axis = -1 : i64} : (tensor<?x10xf32>) -> tensor<?x10xf32>
  func.return %5 : tensor<?x10xf32>
}
"""


def mlp_weights(rng):
    return [rng.standard_normal((784, 256), np.float32) * 0.05, rng.standard_normal(256).astype(np.float32),
            rng.standard_normal((256, 10), np.float32) * 0.05, rng.standard_normal(10).astype(np.float32)]


def test_dynamic_batch_binds_at_call_time():
    module = parse_module(MLP)
    f = lezero.compile(MLP, entry="mlp")
    rng = np.random.default_rng(2)
    weights = mlp_weights(rng)
    for batch in (1, 64, 37, 64):
        x = rng.standard_normal((batch, 784), np.float32)
        np.testing.assert_allclose(f(x, *weights), interpret(module, "mlp", x, *weights), rtol=1e-4, atol=1e-6)
    assert len(f._plans) == 3  # one specialization per batch size, reused


def test_results_do_not_depend_on_the_thread_count():
    module = parse_module(MLP)
    rng = np.random.default_rng(3)
    args = [rng.standard_normal((300, 784), np.float32)] + mlp_weights(rng)
    one = CompiledFunction(module, "mlp", pool=ThreadPool(1))(*args)
    two = CompiledFunction(module, "mlp", pool=ThreadPool(2))(*args)
    np.testing.assert_allclose(one, two, rtol=1e-6, atol=1e-7)


def test_outputs_may_be_arguments_constants_or_repeated():
    text = """
    func.func @f(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<2xi32>, tensor<3xf32>) {
      %c = "lz.constant"() {value = dense<[4, 5]> : tensor<2xi32>} : () -> tensor<2xi32>
      %0 = "lz.exp"(%x) : (tensor<3xf32>) -> tensor<3xf32>
      func.return %x, %0, %c, %0 : tensor<3xf32>, tensor<3xf32>, tensor<2xi32>, tensor<3xf32>
    }"""
    x = np.array([0.0, 1.0, -1.0], np.float32)
    a, b, c, d = lezero.compile(text)(x)
    assert a is not x and np.array_equal(a, x)
    np.testing.assert_allclose(b, np.exp(x), rtol=1e-6)
    assert np.array_equal(c, [4, 5]) and c.dtype == np.int32
    assert np.array_equal(b, d) and b is not d


def test_input_errors_name_the_argument():
    f = lezero.compile(MLP)
    rng = np.random.default_rng(4)
    w = mlp_weights(rng)
    with pytest.raises(InputError, match=r"argument #0 .*of @mlp expects tensor<\?x784xf32>, got an array of shape 2x783"):
        f(np.zeros((2, 783), np.float32), *w)
    with pytest.raises(InputError, match=r"argument #1 .*dtype float64"):
        f(np.zeros((2, 784), np.float32), w[0].astype(np.float64), *w[1:])
    with pytest.raises(InputError, match="@mlp takes 5 arguments, got 1"):
        f(np.zeros((2, 784), np.float32))


def test_incompatible_bound_dims_are_an_input_error():
    f = lezero.compile("""
    func.func @f(%a: tensor<?xf32>, %b: tensor<?xf32>) -> tensor<?xf32> {
      %0 = "lz.add"(%a, %b) : (tensor<?xf32>, tensor<?xf32>) -> tensor<?xf32>
      func.return %0 : tensor<?xf32>
    }""")
    with pytest.raises(InputError, match=r"cannot run on inputs of shapes \(3, 4\).*not broadcast-compatible"):
        f(np.zeros(3, np.float32), np.zeros(4, np.float32))


def test_compile_rejects_unknown_targets_and_ambiguous_entries():
    with pytest.raises(ValueError, match="unknown target 'tpu'"):
        lezero.compile(MLP, target="tpu")
    two = MLP + MLP.replace("@mlp", "@other")
    with pytest.raises(ValueError, match="name the entry"):
        lezero.compile(two)


def test_rank_zero_arguments_and_results():
    f = lezero.compile("""
    func.func @f(%s: tensor<f32>, %x: tensor<3xf32>) -> (tensor<3xf32>, tensor<f32>) {
      %0 = "lz.mul"(%x, %s) : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
      %1 = "lz.reduce_sum"(%0) : (tensor<3xf32>) -> tensor<f32>
      func.return %0, %1 : tensor<3xf32>, tensor<f32>
    }""")
    y, total = f(np.float32(2.0), np.array([1, 2, 3], np.float32))
    assert total.shape == () and float(total) == 12.0
    np.testing.assert_array_equal(y, [2, 4, 6])
