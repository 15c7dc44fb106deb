"""constant-fold: ops on constants become constants, computed by each op's own reference."""
from __future__ import annotations

import numpy as np

from lezero.ir.parser import parse_module
from lezero.passes import run_pipeline
from pass_testing import assert_transforms, op_names


def constants(m, func="f"):
    return [op.attributes["value"] for op in m.lookup(func).entry_block.ops if op.name == "lz.constant"]


def test_a_chain_of_constants_folds_to_one():
    assert_transforms("""
    func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
      %0 = "lz.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
      %1 = "lz.constant"() {value = dense<3.0> : tensor<f32>} : () -> tensor<f32>
      %2 = "lz.mul"(%0, %1) : (tensor<2xf32>, tensor<f32>) -> tensor<2xf32>
      %3 = "lz.neg"(%2) : (tensor<2xf32>) -> tensor<2xf32>
      %4 = "lz.add"(%x, %3) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
      func.return %4 : tensor<2xf32>
    }""", "constant-fold", """
    func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
      %3 = "lz.constant"() {value = dense<[-3.0, -6.0]> : tensor<2xf32>} : () -> tensor<2xf32>
      %4 = "lz.add"(%x, %3) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
      func.return %4 : tensor<2xf32>
    }""")


def test_folding_uses_the_op_semantics():
    # integer division truncates toward zero; cast to i1 is x != 0; transpose and reduce work too
    m = parse_module("""
    func.func @f() -> (tensor<2xi32>, tensor<3xi1>, tensor<3x2xi32>, tensor<3xi32>) {
      %0 = "lz.constant"() {value = dense<[-7, 7]> : tensor<2xi32>} : () -> tensor<2xi32>
      %1 = "lz.constant"() {value = dense<2> : tensor<i32>} : () -> tensor<i32>
      %2 = "lz.div"(%0, %1) : (tensor<2xi32>, tensor<i32>) -> tensor<2xi32>
      %3 = "lz.constant"() {value = dense<[0.0, 0.5, -2.0]> : tensor<3xf32>} : () -> tensor<3xf32>
      %4 = "lz.cast"(%3) {to = i1} : (tensor<3xf32>) -> tensor<3xi1>
      %5 = "lz.constant"() {value = dense<[[1, 2, 3], [4, 5, 6]]> : tensor<2x3xi32>} : () -> tensor<2x3xi32>
      %6 = "lz.transpose"(%5) : (tensor<2x3xi32>) -> tensor<3x2xi32>
      %7 = "lz.reduce_sum"(%5) {axes = array<i64: 0>} : (tensor<2x3xi32>) -> tensor<3xi32>
      func.return %2, %4, %6, %7 : tensor<2xi32>, tensor<3xi1>, tensor<3x2xi32>, tensor<3xi32>
    }""")
    run_pipeline(m, "constant-fold")
    assert op_names(m) == ["lz.constant"] * 4 + ["func.return"]
    values = [c.array.tolist() for c in constants(m)]
    assert values == [[-3, 3], [False, True, True], [[1, 4], [2, 5], [3, 6]], [5, 7, 9]]


def test_the_size_cap_keeps_big_broadcasts_unfolded():
    text = """
    func.func @f() -> tensor<64x64xf32> {
      %0 = "lz.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
      %1 = "lz.broadcast_to"(%0) {shape = array<i64: 64, 64>} : (tensor<f32>) -> tensor<64x64xf32>
      func.return %1 : tensor<64x64xf32>
    }"""
    m = parse_module(text)
    run_pipeline(m, "constant-fold{max-elements=1000}")
    assert op_names(m) == ["lz.constant", "lz.broadcast_to", "func.return"]
    m = parse_module(text)
    run_pipeline(m, "constant-fold")
    assert op_names(m) == ["lz.constant", "func.return"]
    assert constants(m)[0].type.shape == (64, 64) and constants(m)[0].splat_value() == 1.0


def test_ops_with_a_non_constant_operand_stay_and_shared_constants_survive():
    assert_transforms("""
    func.func @f(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
      %0 = "lz.constant"() {value = dense<[1.0, 4.0]> : tensor<2xf32>} : () -> tensor<2xf32>
      %1 = "lz.sqrt"(%0) : (tensor<2xf32>) -> tensor<2xf32>
      %2 = "lz.mul"(%x, %0) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
      func.return %1, %2 : tensor<2xf32>, tensor<2xf32>
    }""", "constant-fold", """
    func.func @f(%x: tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>) {
      %0 = "lz.constant"() {value = dense<[1.0, 4.0]> : tensor<2xf32>} : () -> tensor<2xf32>
      %1 = "lz.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
      %2 = "lz.mul"(%x, %0) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
      func.return %1, %2 : tensor<2xf32>, tensor<2xf32>
    }""")


def test_ieee_special_values_fold_quietly():
    m = parse_module("""
    func.func @f() -> tensor<3xf32> {
      %0 = "lz.constant"() {value = dense<[1.0, 0.0, -1.0]> : tensor<3xf32>} : () -> tensor<3xf32>
      %1 = "lz.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
      %2 = "lz.div"(%0, %1) : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
      func.return %2 : tensor<3xf32>
    }""")
    run_pipeline(m, "constant-fold")
    (c,) = constants(m)
    a = c.array
    assert a[0] == np.inf and np.isnan(a[1]) and a[2] == -np.inf


def test_an_op_whose_reference_fails_is_left_alone():
    m = parse_module("""
    func.func @f() -> tensor<1xf32> {
      %0 = "lz.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
      %1 = "lz.constant"() {value = dense<[5]> : tensor<1xi32>} : () -> tensor<1xi32>
      %2 = "lz.gather"(%0, %1) : (tensor<2xf32>, tensor<1xi32>) -> tensor<1xf32>
      func.return %2 : tensor<1xf32>
    }""")
    run_pipeline(m, "constant-fold")
    assert op_names(m) == ["lz.constant", "lz.constant", "lz.gather", "func.return"]


def test_dynamic_results_are_not_folded():
    m = parse_module("""
    func.func @f() -> tensor<?xf32> {
      %0 = "lz.constant"() {value = dense<[1.0, 2.0]> : tensor<2xf32>} : () -> tensor<2xf32>
      %1 = "lz.exp"(%0) : (tensor<2xf32>) -> tensor<?xf32>
      func.return %1 : tensor<?xf32>
    }""")
    run_pipeline(m, "constant-fold")
    assert op_names(m) == ["lz.constant", "lz.exp", "func.return"]


def test_a_broadcast_that_elementwise_ops_read_stays_a_broadcast():
    """BERT's token-type row broadcast to [b, s, h]: folded, it would be a literal of the shape
    (and only up to max-elements, so the schedule would change with the sizes); kept, the add
    reads the one row.  A user whose operands are all constants still folds, through the broadcast."""
    assert_transforms("""
    func.func @f(%x: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>) {
      %0 = "lz.constant"() {value = dense<[[[1.0, 2.0, 3.0, 4.0]]]> : tensor<1x1x4xf32>} : () -> tensor<1x1x4xf32>
      %1 = "lz.broadcast_to"(%0) {shape = array<i64: 2, 3, 4>} : (tensor<1x1x4xf32>) -> tensor<2x3x4xf32>
      %2 = "lz.add"(%x, %1) : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
      %3 = "lz.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
      %4 = "lz.constant"() {value = dense<[[[0.5, 0.5, 0.5, 1.5]]]> : tensor<1x1x4xf32>} : () -> tensor<1x1x4xf32>
      %5 = "lz.broadcast_to"(%4) {shape = array<i64: 2, 3, 4>} : (tensor<1x1x4xf32>) -> tensor<2x3x4xf32>
      %6 = "lz.mul"(%5, %3) : (tensor<2x3x4xf32>, tensor<f32>) -> tensor<2x3x4xf32>
      func.return %2, %6 : tensor<2x3x4xf32>, tensor<2x3x4xf32>
    }""", "constant-fold", """
    func.func @f(%x: tensor<2x3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>) {
      %0 = "lz.constant"() {value = dense<[[[1.0, 2.0, 3.0, 4.0]]]> : tensor<1x1x4xf32>} : () -> tensor<1x1x4xf32>
      %1 = "lz.broadcast_to"(%0) {shape = array<i64: 2, 3, 4>} : (tensor<1x1x4xf32>) -> tensor<2x3x4xf32>
      %2 = "lz.add"(%x, %1) : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
      %6 = "lz.constant"() {value = dense<[[[1.0, 1.0, 1.0, 3.0], [1.0, 1.0, 1.0, 3.0], [1.0, 1.0, 1.0, 3.0]], [[1.0, 1.0, 1.0, 3.0], [1.0, 1.0, 1.0, 3.0], [1.0, 1.0, 1.0, 3.0]]]> : tensor<2x3x4xf32>} : () -> tensor<2x3x4xf32>
      func.return %2, %6 : tensor<2x3x4xf32>, tensor<2x3x4xf32>
    }""")


def test_a_broadcast_that_only_contractions_read_folds_at_any_size():
    """The light ONNX models' ``ConstantOfShape`` weights: a contraction reads its operand from
    memory either way, so the broadcast folds past max-elements (through a transpose to the matmul,
    directly to the conv) instead of being written by a kernel of its own on every run.  One that
    a reduction reads too keeps the cap."""
    text = """
    func.func @f(%x: tensor<1x40xf32>, %i: tensor<1x2x6x6xf32>) -> (tensor<1x30xf32>, tensor<1x4x4x4xf32>, tensor<4x4xf32>) {
      %0 = "lz.constant"() {value = dense<0.25> : tensor<f32>} : () -> tensor<f32>
      %1 = "lz.broadcast_to"(%0) {shape = array<i64: 30, 40>} : (tensor<f32>) -> tensor<30x40xf32>
      %2 = "lz.transpose"(%1) {perm = array<i64: 1, 0>} : (tensor<30x40xf32>) -> tensor<40x30xf32>
      %3 = "lz.matmul"(%x, %2) : (tensor<1x40xf32>, tensor<40x30xf32>) -> tensor<1x30xf32>
      %4 = "lz.constant"() {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
      %5 = "lz.broadcast_to"(%4) {shape = array<i64: 4, 2, 3, 3>} : (tensor<f32>) -> tensor<4x2x3x3xf32>
      %6 = "lz.conv2d"(%i, %5) : (tensor<1x2x6x6xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x4x4xf32>
      %7 = "lz.broadcast_to"(%4) {shape = array<i64: 4, 4, 4>} : (tensor<f32>) -> tensor<4x4x4xf32>
      %8 = "lz.reshape"(%7) {shape = array<i64: 4, 16>} : (tensor<4x4x4xf32>) -> tensor<4x16xf32>
      %9 = "lz.reduce_sum"(%8) {axes = array<i64: 1>} : (tensor<4x16xf32>) -> tensor<4xf32>
      %10 = "lz.reshape"(%7) {shape = array<i64: 16, 4>} : (tensor<4x4x4xf32>) -> tensor<16x4xf32>
      %11 = "lz.matmul"(%8, %10) : (tensor<4x16xf32>, tensor<16x4xf32>) -> tensor<4x4xf32>
      %12 = "lz.add"(%11, %9) : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
      func.return %3, %6, %12 : tensor<1x30xf32>, tensor<1x4x4x4xf32>, tensor<4x4xf32>
    }"""
    m = parse_module(text)
    run_pipeline(m, "constant-fold{max-elements=20}")
    names = op_names(m)
    # the matmul's and the conv's broadcasts folded; the one the reduction reads stays
    assert names.count("lz.broadcast_to") == 1 and names.count("lz.transpose") == 1
    shapes = {c.type.shape: c.splat_value() for c in constants(m)}
    assert shapes[(30, 40)] == 0.25 and shapes[(4, 2, 3, 3)] == 0.5
