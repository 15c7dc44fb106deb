"""dce: erase unused pure ops (to a fixed point) and unreferenced private functions."""
from __future__ import annotations

from lezero.ir.parser import parse_module
from lezero.passes import run_pipeline
from pass_testing import assert_transforms, op_names


def test_dead_chains_go_in_one_run():
    assert_transforms("""
    func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
      %0 = "lz.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
      %1 = "lz.mul"(%x, %0) : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
      %2 = "lz.exp"(%1) : (tensor<3xf32>) -> tensor<3xf32>
      %3 = "lz.neg"(%2) : (tensor<3xf32>) -> tensor<3xf32>
      %4 = "lz.abs"(%x) : (tensor<3xf32>) -> tensor<3xf32>
      func.return %4 : tensor<3xf32>
    }""", "dce", """
    func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
      %4 = "lz.abs"(%x) : (tensor<3xf32>) -> tensor<3xf32>
      func.return %4 : tensor<3xf32>
    }""")


def test_unregistered_ops_and_what_they_use_stay():
    m = parse_module("""
    func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
      %0 = "lz.exp"(%x) : (tensor<3xf32>) -> tensor<3xf32>
      %1 = "test.print"(%0) : (tensor<3xf32>) -> tensor<3xf32>
      func.return %x : tensor<3xf32>
    }""")
    run_pipeline(m, "dce", allow_unregistered=True)
    assert op_names(m) == ["lz.exp", "test.print", "func.return"]


PRIVATE = """
    func.func private @unused(%x: tensor<3xf32>) -> tensor<3xf32> {
      %0 = "func.call"(%x) {callee = @helper} : (tensor<3xf32>) -> tensor<3xf32>
      func.return %0 : tensor<3xf32>
    }
    func.func private @helper(%x: tensor<3xf32>) -> tensor<3xf32> {
      func.return %x : tensor<3xf32>
    }
    func.func private @used(%x: tensor<3xf32>) -> tensor<3xf32> {
      %0 = "lz.neg"(%x) : (tensor<3xf32>) -> tensor<3xf32>
      func.return %0 : tensor<3xf32>
    }
    func.func @public(%x: tensor<3xf32>) -> tensor<3xf32> {
      func.return %x : tensor<3xf32>
    }
    func.func @main(%x: tensor<3xf32>) -> tensor<3xf32> {
      %0 = "func.call"(%x) {callee = @used} : (tensor<3xf32>) -> tensor<3xf32>
      func.return %0 : tensor<3xf32>
    }"""


def test_unreferenced_private_functions_go_transitively():
    m = parse_module(PRIVATE)
    run_pipeline(m, "dce")
    assert [f.sym_name for f in m.functions] == ["used", "public", "main"]


def test_a_call_keeps_its_result_even_if_unused():
    m = parse_module("""
    func.func private @g(%x: tensor<3xf32>) -> tensor<3xf32> {
      func.return %x : tensor<3xf32>
    }
    func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
      %0 = "func.call"(%x) {callee = @g} : (tensor<3xf32>) -> tensor<3xf32>
      func.return %x : tensor<3xf32>
    }""")
    run_pipeline(m, "dce")
    assert [f.sym_name for f in m.functions] == ["g", "f"] and op_names(m) == ["func.call", "func.return"]
