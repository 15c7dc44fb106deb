"""autocast: each op's element type after the pass is the one PyTorch's autocast lists give it, per
device type; the signature is kept; the result is within the low type's tolerance of f32; the
gradient taken after it is mixed precision too, with f32 gradients for the f32 weights."""
from __future__ import annotations

import numpy as np
import pytest

from lezero.ir.diagnostics import IRError
from lezero.ir.interpreter import interpret
from lezero.ir.parser import parse_module
from lezero.passes import run_pipeline
from lezero.passes.autodiff import differentiate

# every op reads the result of a matmul (low under autocast), so what it runs in is its policy's choice
OPS = """
func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>, %g: tensor<8xf32>, %b: tensor<8xf32>, %i: tensor<1x8x4x4xf32>, %k: tensor<8x8x3x3xf32>) -> tensor<4x8xf32> {
  %m = "lz.matmul"(%x, %w) : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %softmax = "lz.softmax"(%m) {axis = 1} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %log_softmax = "lz.log_softmax"(%m) {axis = 1} : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %layer_norm = "lz.layer_norm"(%m, %g, %b) : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %sum = "lz.reduce_sum"(%m) {axes = array<i64: 1>, keepdims = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %mean = "lz.reduce_mean"(%m) {axes = array<i64: 1>, keepdims = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %prod = "lz.reduce_prod"(%m) {axes = array<i64: 1>, keepdims = true} : (tensor<4x8xf32>) -> tensor<4x1xf32>
  %exp = "lz.exp"(%m) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %log = "lz.log"(%m) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %pow = "lz.pow"(%m, %m) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %rsqrt = "lz.rsqrt"(%m) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %relu = "lz.relu"(%m) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %tanh = "lz.tanh"(%m) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %add = "lz.add"(%m, %b) : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %conv2d = "lz.conv2d"(%i, %k) {pads = array<i64: 1, 1, 1, 1>} : (tensor<1x8x4x4xf32>, tensor<8x8x3x3xf32>) -> tensor<1x8x4x4xf32>
  func.return RETURNED
}
"""
# every value is a result, so none is dead
_VALUES = [(line.split("=")[0].strip(), line.rsplit("-> ", 1)[1].strip()) for line in OPS.splitlines()
           if line.strip().startswith("%")]
OPS = OPS.replace("-> tensor<4x8xf32> {", f"-> ({', '.join(t for _, t in _VALUES)}) {{", 1).replace(
    "RETURNED", f"{', '.join(v for v, _ in _VALUES)} : {', '.join(t for _, t in _VALUES)}")
LOW, F32, STATISTICS = "low", "f32", "f32, given low"
# torch.autocast's lists (aten/src/ATen/autocast_mode.cpp); on the CPU, torch_autocast tests check
# the eager types against torch itself (tests/eager/test_eager_autocast.py)
EXPECTED = {
    "cuda": {"m": LOW, "softmax": F32, "log_softmax": F32, "layer_norm": F32, "sum": F32, "mean": LOW, "prod": F32,
             "exp": F32, "log": F32, "pow": F32, "rsqrt": F32, "relu": LOW, "tanh": LOW, "add": F32, "conv2d": LOW},
    "cpu": {"m": LOW, "softmax": LOW, "log_softmax": LOW, "layer_norm": STATISTICS, "sum": LOW, "mean": LOW, "prod": F32,
            "exp": LOW, "log": LOW, "pow": LOW, "rsqrt": LOW, "relu": LOW, "tanh": LOW, "add": F32, "conv2d": LOW},
}


def _result_types(module) -> dict:
    """The element type each named value (``%softmax``) has after the pass: the printer renumbers, so
    the values are found by their position among the original ops."""
    names = [name[1:] for name, _ in _VALUES]
    ops = [op for op in module.functions[0].entry_block.ops if op.name not in ("lz.cast", "func.return")]
    types = {}
    for name, op in zip(names, ops):
        et = str(op.results[0].type.element_type)
        given = {str(u.op.results[0].type.element_type) for u in op.results[0].uses if u.op.name == "lz.cast"}
        types[name] = f"f32, given {given.pop()}" if et == "f32" and given - {"f32"} and name == "layer_norm" else et
    return types


@pytest.mark.parametrize("device", ["cuda", "cpu"])
@pytest.mark.parametrize("dtype", ["bf16", "f16"])
def test_each_op_runs_in_the_type_torch_autocast_gives_it(device, dtype):
    module = run_pipeline(parse_module(OPS), f"autocast{{dtype={dtype} device={device}}}")
    want = {name: {LOW: dtype, F32: "f32", STATISTICS: f"f32, given {dtype}"}[kind]
            for name, kind in EXPECTED[device].items()}
    assert _result_types(module) == want
    assert str(module.functions[0].function_type) == str(parse_module(OPS).functions[0].function_type)


MLP = """
func.func @mlp(%x: tensor<16x32xf32>, %w1: tensor<32x64xf32>, %b1: tensor<64xf32>, %w2: tensor<64x10xf32>) -> tensor<f32> {
  %0 = "lz.matmul"(%x, %w1) : (tensor<16x32xf32>, tensor<32x64xf32>) -> tensor<16x64xf32>
  %1 = "lz.add"(%0, %b1) : (tensor<16x64xf32>, tensor<64xf32>) -> tensor<16x64xf32>
  %2 = "lz.relu"(%1) : (tensor<16x64xf32>) -> tensor<16x64xf32>
  %3 = "lz.matmul"(%2, %w2) : (tensor<16x64xf32>, tensor<64x10xf32>) -> tensor<16x10xf32>
  %4 = "lz.log_softmax"(%3) {axis = 1} : (tensor<16x10xf32>) -> tensor<16x10xf32>
  %5 = "lz.reduce_mean"(%4) : (tensor<16x10xf32>) -> tensor<f32>
  func.return %5 : tensor<f32>
}
"""


def _mlp_arguments():
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype(np.float32) * scale
            for s, scale in (((16, 32), 1.0), ((32, 64), 0.2), ((64,), 0.1), ((64, 10), 0.2))]


@pytest.mark.parametrize("dtype, tolerance", [("bf16", 2e-2), ("f16", 3e-3)])
def test_the_result_is_within_the_low_types_tolerance_of_f32(dtype, tolerance):
    args = _mlp_arguments()
    exact = interpret(parse_module(MLP), "mlp", *args)
    module = run_pipeline(parse_module(MLP), f"autocast{{dtype={dtype}}}")
    mixed = interpret(module, "mlp", *args)
    assert mixed.dtype == np.float32
    np.testing.assert_allclose(mixed, exact, rtol=tolerance)
    assert mixed != exact  # it did run in the low type


def test_the_gradient_after_autocast_is_mixed_precision_with_f32_weight_gradients():
    module = run_pipeline(parse_module(MLP), "autocast{dtype=bf16}")
    grad = differentiate(module, "mlp", wrt=[1, 2, 3])
    matmuls = [op for op in grad.walk() if op.name == "lz.matmul"]
    assert len(matmuls) >= 5 and all(str(op.results[0].type.element_type) == "bf16" for op in matmuls)
    assert [str(t.element_type) for t in grad.function_type.results] == ["f32"] * 4
    args = _mlp_arguments()
    mixed = interpret(module, "mlp_grad", *args, np.float32(1))
    exact_module = parse_module(MLP)
    differentiate(exact_module, "mlp", wrt=[1, 2, 3])
    exact = interpret(exact_module, "mlp_grad", *args, np.float32(1))
    for m, e in zip(mixed[1:], exact[1:]):
        np.testing.assert_allclose(m, e, atol=2e-2 * np.abs(e).max())


def test_a_weight_read_twice_is_cast_once_and_cancelling_casts_go():
    text = """
    func.func @f(%x: tensor<4x4xf32>, %w: tensor<4x4xf32>) -> tensor<4x4xf32> {
      %0 = "lz.matmul"(%x, %w) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
      %1 = "lz.matmul"(%0, %w) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
      func.return %1 : tensor<4x4xf32>
    }"""
    module = run_pipeline(parse_module(text), "autocast")
    casts = [op for op in module.walk() if op.name == "lz.cast"]
    # x and w to bf16 once each, the result back to f32; the first matmul's result feeds the second as it is
    assert [str(op.results[0].type.element_type) for op in casts] == ["bf16", "bf16", "f32"]


def test_bad_options_say_what_is_allowed():
    with pytest.raises(IRError, match="dtype must be one of bf16, f16"):
        run_pipeline(parse_module(MLP), "autocast{dtype=f32}")
    with pytest.raises(ValueError, match="unknown device type 'tpu'"):
        run_pipeline(parse_module(MLP), "autocast{device=tpu}")
