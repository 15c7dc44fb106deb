"""cse: merge pure ops with the same name, operands, attributes and result types."""
from __future__ import annotations

from lezero.ir.parser import parse_module
from lezero.passes import run_pipeline
from pass_testing import assert_transforms, op_names


def test_duplicates_merge_and_their_users_follow():
    assert_transforms("""
    func.func @f(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>) -> tensor<2x3xf32> {
      %0 = "lz.add"(%x, %y) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
      %1 = "lz.add"(%x, %y) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
      %2 = "lz.exp"(%0) : (tensor<2x3xf32>) -> tensor<2x3xf32>
      %3 = "lz.exp"(%1) : (tensor<2x3xf32>) -> tensor<2x3xf32>
      %4 = "lz.mul"(%2, %3) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
      func.return %4 : tensor<2x3xf32>
    }""", "cse", """
    func.func @f(%x: tensor<2x3xf32>, %y: tensor<2x3xf32>) -> tensor<2x3xf32> {
      %0 = "lz.add"(%x, %y) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
      %2 = "lz.exp"(%0) : (tensor<2x3xf32>) -> tensor<2x3xf32>
      %4 = "lz.mul"(%2, %2) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
      func.return %4 : tensor<2x3xf32>
    }""")


def test_commutative_operands_in_either_order_merge_but_not_others():
    assert_transforms("""
    func.func @f(%x: tensor<3xf32>, %y: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) {
      %0 = "lz.mul"(%x, %y) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
      %1 = "lz.mul"(%y, %x) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
      %2 = "lz.sub"(%x, %y) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
      %3 = "lz.sub"(%y, %x) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
      func.return %0, %1, %2, %3 : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
    }""", "cse", """
    func.func @f(%x: tensor<3xf32>, %y: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) {
      %0 = "lz.mul"(%x, %y) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
      %2 = "lz.sub"(%x, %y) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
      %3 = "lz.sub"(%y, %x) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
      func.return %0, %0, %2, %3 : tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>
    }""")


def test_attributes_and_constants_must_match():
    assert_transforms("""
    func.func @f(%x: tensor<2x3xf32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<2xf32>, tensor<f32>, tensor<f32>, tensor<f32>) {
      %0 = "lz.reduce_sum"(%x) {axes = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<3xf32>
      %1 = "lz.reduce_sum"(%x) {axes = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<3xf32>
      %2 = "lz.reduce_sum"(%x) {axes = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
      %3 = "lz.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
      %4 = "lz.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
      %5 = "lz.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
      func.return %0, %1, %2, %3, %4, %5 : tensor<3xf32>, tensor<3xf32>, tensor<2xf32>, tensor<f32>, tensor<f32>, tensor<f32>
    }""", "cse", """
    func.func @f(%x: tensor<2x3xf32>) -> (tensor<3xf32>, tensor<3xf32>, tensor<2xf32>, tensor<f32>, tensor<f32>, tensor<f32>) {
      %0 = "lz.reduce_sum"(%x) {axes = array<i64: 0>} : (tensor<2x3xf32>) -> tensor<3xf32>
      %2 = "lz.reduce_sum"(%x) {axes = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2xf32>
      %3 = "lz.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
      %5 = "lz.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
      func.return %0, %0, %2, %3, %3, %5 : tensor<3xf32>, tensor<3xf32>, tensor<2xf32>, tensor<f32>, tensor<f32>, tensor<f32>
    }""")


def test_result_types_must_match():
    # same op and operand, different declared result types (one refined): not merged
    m = parse_module("""
    func.func @f(%x: tensor<?x3xf32>) -> (tensor<?x3xf32>, tensor<?x?xf32>) {
      %0 = "lz.exp"(%x) : (tensor<?x3xf32>) -> tensor<?x3xf32>
      %1 = "lz.exp"(%x) : (tensor<?x3xf32>) -> tensor<?x?xf32>
      func.return %0, %1 : tensor<?x3xf32>, tensor<?x?xf32>
    }""")
    run_pipeline(m, "cse")
    assert op_names(m) == ["lz.exp", "lz.exp", "func.return"]


def test_functions_are_separate_scopes():
    text = """
    func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
      %0 = "lz.constant"() {value = dense<1.0> : tensor<3xf32>} : () -> tensor<3xf32>
      %1 = "lz.add"(%x, %0) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
      func.return %1 : tensor<3xf32>
    }
    func.func @g(%x: tensor<3xf32>) -> tensor<3xf32> {
      %0 = "lz.constant"() {value = dense<1.0> : tensor<3xf32>} : () -> tensor<3xf32>
      %1 = "lz.add"(%x, %0) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
      func.return %1 : tensor<3xf32>
    }"""
    assert_transforms(text, "cse", text)


def test_impure_and_unregistered_ops_are_kept():
    m = parse_module("""
    func.func @f(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
      %0 = "test.random"(%x) : (tensor<3xf32>) -> tensor<3xf32>
      %1 = "test.random"(%x) : (tensor<3xf32>) -> tensor<3xf32>
      func.return %0, %1 : tensor<3xf32>, tensor<3xf32>
    }""")
    run_pipeline(m, "cse", allow_unregistered=True)
    assert op_names(m) == ["test.random", "test.random", "func.return"]


def test_nested_regions_are_their_own_scope():
    from lezero.ir import Block, Builder, Region, tensor
    from pass_testing import build

    t = tensor((3,))

    def body(b, x):
        outer = b.op("lz.exp", x)
        holder = b.create("test.region", [], result_types=[])
        block = Block([t])
        holder.add_region(Region([block]))
        ib = Builder.at_end(block)
        a1 = ib.op("lz.exp", x)               # same as the outer exp: not merged across the boundary
        a2 = ib.op("lz.exp", x)               # same as a1, in the same region: merged
        ib.create("test.yield", [a1, a2], result_types=[])
        return outer

    m = build([t], body)
    run_pipeline(m, "cse", verify_each=False)
    holder = m.lookup("f").entry_block.ops[1]
    inner = holder.regions[0].block.ops
    assert [op.name for op in inner] == ["lz.exp", "test.yield"]
    assert inner[1].operands[0] is inner[1].operands[1] is inner[0].result
    assert op_names(m) == ["lz.exp", "test.region", "func.return"]
