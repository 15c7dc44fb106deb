"""shape-infer: refine ? dims that inference knows, in results, signatures and calls."""
from __future__ import annotations

from lezero.ir.parser import parse_module
from lezero.ir.types import tensor
from lezero.passes import run_pipeline
from pass_testing import assert_transforms


def test_results_and_the_signature_are_refined():
    assert_transforms("""
    func.func @f(%x: tensor<2x3xf32>, %y: tensor<3xf32>) -> tensor<?x?xf32> {
      %0 = "lz.add"(%x, %y) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<?x3xf32>
      %1 = "lz.exp"(%0) : (tensor<?x3xf32>) -> tensor<?x?xf32>
      func.return %1 : tensor<?x?xf32>
    }""", "shape-infer", """
    func.func @f(%x: tensor<2x3xf32>, %y: tensor<3xf32>) -> tensor<2x3xf32> {
      %0 = "lz.add"(%x, %y) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
      %1 = "lz.exp"(%0) : (tensor<2x3xf32>) -> tensor<2x3xf32>
      func.return %1 : tensor<2x3xf32>
    }""")


def test_dims_inference_cannot_know_stay_dynamic():
    assert_transforms("""
    func.func @f(%x: tensor<?x3xf32>) -> tensor<?x?xf32> {
      %0 = "lz.transpose"(%x) : (tensor<?x3xf32>) -> tensor<?x?xf32>
      %1 = "lz.reduce_sum"(%0) {axes = array<i64: 0>, keepdims = true} : (tensor<?x?xf32>) -> tensor<?x?xf32>
      func.return %1 : tensor<?x?xf32>
    }""", "shape-infer", """
    func.func @f(%x: tensor<?x3xf32>) -> tensor<1x?xf32> {
      %0 = "lz.transpose"(%x) : (tensor<?x3xf32>) -> tensor<3x?xf32>
      %1 = "lz.reduce_sum"(%0) {axes = array<i64: 0>, keepdims = true} : (tensor<3x?xf32>) -> tensor<1x?xf32>
      func.return %1 : tensor<1x?xf32>
    }""")


def test_calls_follow_the_refined_signature():
    m = parse_module("""
    func.func @main(%x: tensor<4xf32>) -> tensor<?xf32> {
      %0 = "func.call"(%x) {callee = @g} : (tensor<4xf32>) -> tensor<?xf32>
      %1 = "lz.neg"(%0) : (tensor<?xf32>) -> tensor<?xf32>
      func.return %1 : tensor<?xf32>
    }
    func.func @g(%x: tensor<4xf32>) -> tensor<?xf32> {
      %0 = "lz.exp"(%x) : (tensor<4xf32>) -> tensor<?xf32>
      func.return %0 : tensor<?xf32>
    }""")
    run_pipeline(m, "shape-infer")
    t = tensor((4,))
    assert m.lookup("g").function_type.results == (t,)
    main = m.lookup("main")
    assert [op.result.type for op in main.entry_block.ops[:2]] == [t, t]
    assert main.function_type.results == (t,)


def test_already_static_ir_is_unchanged():
    text = """
    func.func @f(%x: tensor<2x3xf32>) -> tensor<3x2xf32> {
      %0 = "lz.transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
      func.return %0 : tensor<3x2xf32>
    }"""
    assert_transforms(text, "shape-infer", text)
