"""partition: which ops share a kernel, and why the others do not."""
from __future__ import annotations

import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lezero.cli.opt import run as opt_run
from lezero.codegen import targets
from lezero.ir import parse_module
from lezero.passes import run_pipeline
from lezero.passes.partition import FUSION_LOG, Partitioner, PartitionOptions

from pass_testing import fusion_logged, groups_of
from support.fusion_testing import random_graphs

MLP = """
func.func @mlp(%x: tensor<64x784xf32>, %w1: tensor<784x256xf32>, %b1: tensor<256xf32>,
               %w2: tensor<256x10xf32>, %b2: tensor<10xf32>) -> tensor<64x10xf32> {
  %0 = "lz.matmul"(%x, %w1) : (tensor<64x784xf32>, tensor<784x256xf32>) -> tensor<64x256xf32>
  %1 = "lz.add"(%0, %b1) : (tensor<64x256xf32>, tensor<256xf32>) -> tensor<64x256xf32>
  %2 = "lz.relu"(%1) : (tensor<64x256xf32>) -> tensor<64x256xf32>
  %3 = "lz.matmul"(%2, %w2) : (tensor<64x256xf32>, tensor<256x10xf32>) -> tensor<64x10xf32>
  %4 = "lz.add"(%3, %b2) : (tensor<64x10xf32>, tensor<10xf32>) -> tensor<64x10xf32>
  %5 = "lz.softmax"(%4) : (tensor<64x10xf32>) -> tensor<64x10xf32>
  func.return %5 : tensor<64x10xf32>
}"""


def partitioned(text, pipeline="partition"):
    m = parse_module(text)
    run_pipeline(m, pipeline)
    return m


def refusals(text, pipeline="partition"):
    """The fusion log lines of running ``pipeline`` on ``text``."""
    return fusion_logged(text, pipeline)[1]


def test_mlp_matmul_epilogues_and_softmax():
    m = partitioned(MLP, "decompose,partition")
    assert groups_of(m) == [
        ("matmul", ["matmul", "add", "relu"]),
        ("matmul", ["matmul", "add"]),
        ("reduction", ["reduce_max", "sub", "exp", "reduce_sum", "div"]),
    ]
    stages = [op.attributes["lz.stage"].value for op in m.functions[0].entry_block.ops if "lz.stage" in op.attributes]
    assert stages == [0, 0, 0, 1, 1, 2, 2, 2, 2, 2]


def test_layer_norm_is_one_reduction_kernel():
    m = partitioned("""
    func.func @f(%x: tensor<8x16xf32>, %s: tensor<16xf32>, %b: tensor<16xf32>) -> tensor<8x16xf32> {
      %0 = "lz.layer_norm"(%x, %s, %b) : (tensor<8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<8x16xf32>
      func.return %0 : tensor<8x16xf32>
    }""", "decompose,partition")
    assert groups_of(m) == [("reduction", ["reduce_mean", "sub", "mul", "reduce_mean", "add", "rsqrt", "mul",
                                           "mul", "add"])]


def test_elementwise_chain_and_max_ops():
    text = """
    func.func @f(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
      %0 = "lz.exp"(%x) : (tensor<4x4xf32>) -> tensor<4x4xf32>
      %1 = "lz.neg"(%0) : (tensor<4x4xf32>) -> tensor<4x4xf32>
      %2 = "lz.relu"(%1) : (tensor<4x4xf32>) -> tensor<4x4xf32>
      %3 = "lz.tanh"(%2) : (tensor<4x4xf32>) -> tensor<4x4xf32>
      func.return %3 : tensor<4x4xf32>
    }"""
    assert groups_of(partitioned(text)) == [("elementwise", ["exp", "neg", "relu", "tanh"])]
    assert len(groups_of(partitioned(text, "partition{max-ops=2}"))) == 2
    assert len(groups_of(partitioned(text, "partition{max-ops=1}"))) == 4
    assert "max-ops=2 reached" in refusals(text, "partition{max-ops=2}")


def test_data_movement_folds_into_its_reader_not_its_producer():
    m = partitioned("""
    func.func @f(%x: tensor<3x4xf32>, %y: tensor<4x3xf32>) -> tensor<4x3xf32> {
      %0 = "lz.exp"(%x) : (tensor<3x4xf32>) -> tensor<3x4xf32>
      %1 = "lz.transpose"(%0) {perm = array<i64: 1, 0>} : (tensor<3x4xf32>) -> tensor<4x3xf32>
      %2 = "lz.add"(%1, %y) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
      func.return %2 : tensor<4x3xf32>
    }""")
    assert groups_of(m) == [("elementwise", ["exp"]), ("elementwise", ["transpose", "add"])]


MOVED_OPERANDS = """
func.func @f(%x: tensor<2x3x6x6xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<4xf32>, %a: tensor<8x5xf32>,
             %v: tensor<5x8xf32>, %r: tensor<8x7xf32>, %g: tensor<2x4x4x4xf32>)
    -> (tensor<2x4x4x4xf32>, tensor<8x8xf32>, tensor<2x2x32xf32>) {
  %0 = "lz.conv2d"(%x, %w) : (tensor<2x3x6x6xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x4x4xf32>
  %bc = "lz.reshape"(%b) {shape = array<i64: -1, 1, 1>} : (tensor<4xf32>) -> tensor<4x1x1xf32>
  %1 = "lz.add"(%0, %bc) : (tensor<2x4x4x4xf32>, tensor<4x1x1xf32>) -> tensor<2x4x4x4xf32>
  %2 = "lz.relu"(%1) : (tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
  %3 = "lz.matmul"(%a, %v) : (tensor<8x5xf32>, tensor<5x8xf32>) -> tensor<8x8xf32>
  %rp = "lz.pad"(%r) {pads = array<i64: 0, 1, 0, 0>, value = 0.0 : f64} : (tensor<8x7xf32>) -> tensor<8x8xf32>
  %4 = "lz.add"(%3, %rp) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
  %gg = "lz.reshape"(%g) {shape = array<i64: 2, 2, 32>} : (tensor<2x4x4x4xf32>) -> tensor<2x2x32xf32>
  %m = "lz.reduce_mean"(%gg) {axes = array<i64: 2>, keepdims = true} : (tensor<2x2x32xf32>) -> tensor<2x2x1xf32>
  %5 = "lz.sub"(%gg, %m) : (tensor<2x2x32xf32>, tensor<2x2x1xf32>) -> tensor<2x2x32xf32>
  func.return %2, %4, %5 : tensor<2x4x4x4xf32>, tensor<8x8xf32>, tensor<2x2x32xf32>
}"""


def test_moved_operands_join_epilogues_and_reductions():
    """A conv's epilogue reads a per-channel vector through its reshape, a matmul's a residual
    through a pad, a reduction its input through a reshape: index arithmetic on loads of memory,
    each in the kernel that reads it (movement=false keeps them kernels of their own)."""
    assert groups_of(partitioned(MOVED_OPERANDS)) == [("conv", ["conv2d", "reshape", "add", "relu"]),
                                                      ("matmul", ["matmul", "pad", "add"]),
                                                      ("reduction", ["reshape", "reduce_mean", "sub"])]
    apart = groups_of(partitioned(MOVED_OPERANDS, "partition{movement=false}"))
    assert ("conv", ["conv2d", "add", "relu"]) in apart and ("elementwise", ["reshape"]) in apart
    assert ("matmul", ["matmul", "add"]) in apart and ("elementwise", ["pad"]) in apart
    assert ("reduction", ["reduce_mean", "sub"]) in apart
    assert "movement=false: data movement is a kernel of its own" in refusals(MOVED_OPERANDS,
                                                                              "partition{movement=false}")


def test_moved_operands_come_from_memory_and_stay_inside():
    """Movement of a value the kernel computes is refused (it reads memory), and so is a moved
    value that something outside the kernel also reads (the kernel would store it at another
    shape); a moved operand of an elementwise kernel may have any shape it broadcasts from, and
    may itself be movement of memory (a chain: the composed index)."""
    text = """
    func.func @f(%x: tensor<2x4x3x3xf32>, %w: tensor<4x4x1x1xf32>, %b: tensor<4xf32>, %s: tensor<4xf32>)
        -> (tensor<2x4x3x3xf32>, tensor<4x1x1xf32>, tensor<2x4x3x3xf32>) {
      %0 = "lz.conv2d"(%x, %w) : (tensor<2x4x3x3xf32>, tensor<4x4x1x1xf32>) -> tensor<2x4x3x3xf32>
      %1 = "lz.reshape"(%0) {shape = array<i64: 2, 4, 9>} : (tensor<2x4x3x3xf32>) -> tensor<2x4x9xf32>
      %2 = "lz.reshape"(%1) {shape = array<i64: 2, 4, 3, 3>} : (tensor<2x4x9xf32>) -> tensor<2x4x3x3xf32>
      %bc = "lz.reshape"(%b) {shape = array<i64: -1, 1, 1>} : (tensor<4xf32>) -> tensor<4x1x1xf32>
      %3 = "lz.add"(%2, %bc) : (tensor<2x4x3x3xf32>, tensor<4x1x1xf32>) -> tensor<2x4x3x3xf32>
      %sc = "lz.reshape"(%s) {shape = array<i64: -1, 1, 1>} : (tensor<4xf32>) -> tensor<4x1x1xf32>
      %4 = "lz.mul"(%x, %sc) : (tensor<2x4x3x3xf32>, tensor<4x1x1xf32>) -> tensor<2x4x3x3xf32>
      func.return %3, %sc, %4 : tensor<2x4x3x3xf32>, tensor<4x1x1xf32>, tensor<2x4x3x3xf32>
    }"""
    log = refusals(text)
    assert "'lz.reshape' must read its input from memory, not from 'lz.conv2d' in the same kernel" in log
    assert "iteration space 4x1x1 differs from 2x4x3x3" in log  # %sc is returned: a result of its own shape
    # %1 reads the conv's result from memory, %2 reads %1 inside (no copy of it), %bc broadcasts
    # inside; %sc is a kernel of its own
    assert groups_of(partitioned(text)) == [("conv", ["conv2d"]), ("elementwise", ["reshape"]),
                                            ("elementwise", ["reshape", "reshape", "reshape", "add"]),
                                            ("elementwise", ["mul"])]


def test_transposed_operands_stay_out_of_epilogues_and_reductions():
    """A transpose read by a matmul's epilogue or a reduction strides along its vectorized loop:
    a kernel of its own (a matmul still reads an operand through one, as its prologue)."""
    text = """
    func.func @f(%a: tensor<8x8xf32>, %b: tensor<8x8xf32>, %r: tensor<8x8xf32>) -> (tensor<8x8xf32>, tensor<8xf32>) {
      %0 = "lz.matmul"(%a, %b) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
      %rt = "lz.transpose"(%r) {perm = array<i64: 1, 0>} : (tensor<8x8xf32>) -> tensor<8x8xf32>
      %1 = "lz.add"(%0, %rt) : (tensor<8x8xf32>, tensor<8x8xf32>) -> tensor<8x8xf32>
      %at = "lz.transpose"(%a) {perm = array<i64: 1, 0>} : (tensor<8x8xf32>) -> tensor<8x8xf32>
      %2 = "lz.reduce_sum"(%at) {axes = array<i64: 1>} : (tensor<8x8xf32>) -> tensor<8xf32>
      func.return %1, %2 : tensor<8x8xf32>, tensor<8xf32>
    }"""
    log = refusals(text)
    assert ("'lz.transpose' read by the matmul epilogue would stride through memory along its vectorized loop "
            "(a transpose kernel of its own is faster)") in log
    assert "'lz.transpose' read by the reduction would stride through memory" in log
    assert groups_of(partitioned(text)) == [("elementwise", ["transpose"]), ("elementwise", ["transpose"]),
                                            ("matmul", ["matmul", "add"]), ("reduction", ["reduce_sum"])]

LINEAR = """
func.func @linear(%x: tensor<64x784xf32>, %w: tensor<256x784xf32>, %b: tensor<256xf32>,
                  %dy: tensor<64x256xf32>) -> (tensor<64x256xf32>, tensor<256x784xf32>) {
  %wt = "lz.transpose"(%w) {perm = array<i64: 1, 0>} : (tensor<256x784xf32>) -> tensor<784x256xf32>
  %0 = "lz.matmul"(%x, %wt) : (tensor<64x784xf32>, tensor<784x256xf32>) -> tensor<64x256xf32>
  %1 = "lz.add"(%0, %b) : (tensor<64x256xf32>, tensor<256xf32>) -> tensor<64x256xf32>
  %dyt = "lz.transpose"(%dy) {perm = array<i64: 1, 0>} : (tensor<64x256xf32>) -> tensor<256x64xf32>
  %2 = "lz.matmul"(%dyt, %x) : (tensor<256x64xf32>, tensor<64x784xf32>) -> tensor<256x784xf32>
  func.return %1, %2 : tensor<64x256xf32>, tensor<256x784xf32>
}"""


def test_a_transposed_operand_folds_into_the_matmul():
    """x @ w.T + b and dy.T @ x: each transpose is the matmul's prologue (its GEMM packs the
    operand from the transposed layout), not a kernel of its own."""
    assert groups_of(partitioned(LINEAR)) == [("matmul", ["transpose", "matmul", "add"]),
                                              ("matmul", ["transpose", "matmul"])]
    no_prologues = groups_of(partitioned(LINEAR, "partition{prologues=false}"))
    assert ("elementwise", ["transpose"]) in no_prologues and ("matmul", ["matmul", "add"]) in no_prologues
    assert "prologues=false: a matmul kernel reads its operands from memory" in refusals(
        LINEAR, "partition{prologues=false}")
    # epilogues=false keeps the transpose, not the bias
    assert ("matmul", ["transpose", "matmul"]) in groups_of(partitioned(LINEAR, "partition{epilogues=false}"))


def test_transposes_a_matmul_cannot_read():
    log = refusals("""
    func.func @f(%x: tensor<8x4xf32>, %w: tensor<6x4xf32>, %v: tensor<2x3x4xf32>, %u: tensor<3x4xf32>,
                 %y: tensor<4x4xf32>) -> (tensor<8x6xf32>, tensor<4x6xf32>, tensor<4x2x4xf32>, tensor<4x4xf32>,
                                          tensor<4x8xf32>) {
      %wt = "lz.transpose"(%w) {perm = array<i64: 1, 0>} : (tensor<6x4xf32>) -> tensor<4x6xf32>
      %0 = "lz.matmul"(%x, %wt) : (tensor<8x4xf32>, tensor<4x6xf32>) -> tensor<8x6xf32>
      %vt = "lz.transpose"(%v) {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
      %1 = "lz.matmul"(%vt, %u) : (tensor<4x2x3xf32>, tensor<3x4xf32>) -> tensor<4x2x4xf32>
      %e = "lz.exp"(%y) : (tensor<4x4xf32>) -> tensor<4x4xf32>
      %et = "lz.transpose"(%e) {perm = array<i64: 1, 0>} : (tensor<4x4xf32>) -> tensor<4x4xf32>
      %2 = "lz.matmul"(%y, %et) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
      %r = "lz.reshape"(%x) {shape = array<i64: 4, 8>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
      %3 = "lz.matmul"(%y, %r) : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
      func.return %0, %wt, %1, %2, %3 : tensor<8x6xf32>, tensor<4x6xf32>, tensor<4x2x4xf32>, tensor<4x4xf32>,
                                       tensor<4x8xf32>
    }""")
    assert "'lz.transpose' feeding the matmul is also read outside the kernel" in log
    assert "'lz.transpose' with perm [2, 0, 1] makes the contiguous dim a batch dim of the matmul" in log
    assert "'lz.transpose' must read its input from memory, not from 'lz.exp' in the same kernel" in log
    assert "a matmul kernel takes no prologue but a transpose of memory: 'lz.reshape' feeds the matmul" in log


AUTOCAST_LINEAR = """
func.func @linear(%x: tensor<64x784xf32>, %w: tensor<256x784xf32>, %dy: tensor<64x256xbf16>,
                  %v: tensor<64x784xf32>, %du: tensor<64x256xbf16>)
    -> (tensor<64x256xbf16>, tensor<256x784xbf16>, tensor<64x784xbf16>, tensor<64x784xbf16>, tensor<256x784xbf16>) {
  %xb = "lz.cast"(%x) {to = bf16} : (tensor<64x784xf32>) -> tensor<64x784xbf16>
  %wb = "lz.cast"(%w) {to = bf16} : (tensor<256x784xf32>) -> tensor<256x784xbf16>
  %wt = "lz.transpose"(%wb) {perm = array<i64: 1, 0>} : (tensor<256x784xbf16>) -> tensor<784x256xbf16>
  %0 = "lz.matmul"(%xb, %wt) : (tensor<64x784xbf16>, tensor<784x256xbf16>) -> tensor<64x256xbf16>
  %dyt = "lz.transpose"(%dy) {perm = array<i64: 1, 0>} : (tensor<64x256xbf16>) -> tensor<256x64xbf16>
  %1 = "lz.matmul"(%dyt, %xb) : (tensor<256x64xbf16>, tensor<64x784xbf16>) -> tensor<256x784xbf16>
  %2 = "lz.matmul"(%dy, %wb) : (tensor<64x256xbf16>, tensor<256x784xbf16>) -> tensor<64x784xbf16>
  %vb = "lz.cast"(%v) {to = bf16} : (tensor<64x784xf32>) -> tensor<64x784xbf16>
  %dut = "lz.transpose"(%du) {perm = array<i64: 1, 0>} : (tensor<64x256xbf16>) -> tensor<256x64xbf16>
  %3 = "lz.matmul"(%dut, %vb) : (tensor<256x64xbf16>, tensor<64x784xbf16>) -> tensor<256x784xbf16>
  func.return %0, %1, %2, %vb, %3 : tensor<64x256xbf16>, tensor<256x784xbf16>, tensor<64x784xbf16>,
                                   tensor<64x784xbf16>, tensor<256x784xbf16>
}
"""


def test_bf16_matmuls_read_their_operands_through_casts():
    """autocast's casts to bf16 of a layer's input (read by the forward matmul and the weight
    gradient's) and weight (the forward, through a transpose, and the input gradient's): each
    matmul gets a copy of the cast and takes it as its prologue (the GEMM rounds as it packs), so
    no cast is a kernel, on the CPU and on cuda; a cast something else reads too (returned) stays
    one; prologues=false keeps the casts apart."""
    groups = groups_of(partitioned(AUTOCAST_LINEAR))
    assert groups.count(("matmul", ["cast", "cast", "transpose", "matmul"])) == 1  # %0: x, w.T
    assert groups.count(("matmul", ["cast", "transpose", "matmul"])) == 1  # %1: dy.T, x's copy
    assert groups.count(("matmul", ["cast", "matmul"])) == 1  # %2: w's copy
    assert groups.count(("elementwise", ["cast"])) == 1  # v's, returned as well
    assert "'lz.cast' feeding the matmul is also read outside the kernel" in refusals(AUTOCAST_LINEAR)
    groups = groups_of(partitioned(AUTOCAST_LINEAR, "partition{prologues=false}"))  # shared, not copied
    assert groups.count(("elementwise", ["cast"])) == 3, groups
    targets.backend("cuda")  # registers its target: the Triton kernels round as they load, as the CPU's
    assert groups_of(partitioned(AUTOCAST_LINEAR, "partition{target=cuda}")) == groups_of(partitioned(AUTOCAST_LINEAR))


def test_refusal_reasons():
    log = refusals("""
    func.func @f(%x: tensor<64x256xf32>, %w: tensor<256x10xf32>) -> tensor<64xf32> {
      %0 = "lz.relu"(%x) : (tensor<64x256xf32>) -> tensor<64x256xf32>
      %1 = "lz.matmul"(%0, %w) : (tensor<64x256xf32>, tensor<256x10xf32>) -> tensor<64x10xf32>
      %2 = "lz.reduce_sum"(%1) {axes = array<i64: 1>} : (tensor<64x10xf32>) -> tensor<64xf32>
      func.return %2 : tensor<64xf32>
    }
    func.func @g(%x: tensor<4x4xf32>) -> tensor<4xf32> {
      %0 = "lz.reduce_max"(%x) {axes = array<i64: 0>, keepdims = true} : (tensor<4x4xf32>) -> tensor<1x4xf32>
      %1 = "lz.sub"(%x, %0) : (tensor<4x4xf32>, tensor<1x4xf32>) -> tensor<4x4xf32>
      %2 = "lz.reduce_sum"(%1) {axes = array<i64: 1>} : (tensor<4x4xf32>) -> tensor<4xf32>
      func.return %2 : tensor<4xf32>
    }""")
    assert "a matmul kernel takes no prologue but a transpose of memory: 'lz.relu' feeds the matmul" in log
    assert "a matmul kernel holds no reduction ('lz.reduce_sum')" in log
    assert "a reduction already in the group reduces other axes: 'lz.reduce_sum' reduces [1], 'lz.reduce_max' [0]" in log


def test_reduced_value_must_broadcast_back_along_the_reduced_axes():
    # reduce_max over axis 1 without keepdims gives 4; x - m broadcasts it along axis 0: not the
    # reduction's outer index, so it cannot be an epilogue
    text = """
    func.func @f(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
      %0 = "lz.reduce_max"(%x) {axes = array<i64: 1>} : (tensor<4x4xf32>) -> tensor<4xf32>
      %1 = "lz.sub"(%x, %0) : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
      func.return %1 : tensor<4x4xf32>
    }"""
    assert len(groups_of(partitioned(text))) == 2
    assert "'lz.sub' reads 'lz.reduce_max' (shape 4) broadcast along other axes than the reduced [1]" in refusals(text)
    # over axis 0 the dropped dim leads, so broadcasting puts it back where it came from
    assert len(groups_of(partitioned(text.replace("array<i64: 1>", "array<i64: 0>")))) == 1


def test_matmul_epilogue_must_have_the_matmul_shape():
    log = refusals("""
    func.func @f(%x: tensor<4x3xf32>, %w: tensor<3x1xf32>, %y: tensor<4x5xf32>) -> tensor<4x5xf32> {
      %0 = "lz.matmul"(%x, %w) : (tensor<4x3xf32>, tensor<3x1xf32>) -> tensor<4x1xf32>
      %1 = "lz.add"(%0, %y) : (tensor<4x1xf32>, tensor<4x5xf32>) -> tensor<4x5xf32>
      func.return %1 : tensor<4x5xf32>
    }""")
    assert "matmul epilogue must have the matmul's shape: 'lz.add' gives 4x5, the matmul 4x1" in log


def test_cycle_refused_then_taken_once_the_middle_joins():
    # a -> b -> c and a -> c: a + c first would close a cycle through b
    m = partitioned("""
    func.func @f(%x: tensor<8xf32>, %w: tensor<8x8xf32>) -> tensor<8xf32> {
      %0 = "lz.exp"(%x) : (tensor<8xf32>) -> tensor<8xf32>
      %1 = "lz.matmul"(%0, %w) : (tensor<8xf32>, tensor<8x8xf32>) -> tensor<8xf32>
      %2 = "lz.add"(%0, %1) : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
      func.return %2 : tensor<8xf32>
    }""")
    assert groups_of(m) == [("elementwise", ["exp"]), ("matmul", ["matmul", "add"])]


def test_independent_branches_share_a_stage():
    m = partitioned("""
    func.func @f(%x: tensor<4x4xf32>, %w: tensor<4x4xf32>, %v: tensor<4x4xf32>) -> tensor<4x4xf32> {
      %0 = "lz.matmul"(%x, %w) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
      %1 = "lz.matmul"(%x, %v) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
      %2 = "lz.matmul"(%0, %1) : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
      func.return %2 : tensor<4x4xf32>
    }""")
    stages = [op.attributes["lz.stage"].value for op in m.functions[0].entry_block.ops[:-1]]
    assert stages == [0, 0, 1]


def test_profit_counts_a_value_read_elsewhere_once():
    m = parse_module("""
    func.func @f(%x: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
      %0 = "lz.exp"(%x) : (tensor<4x4xf32>) -> tensor<4x4xf32>
      %1 = "lz.neg"(%0) : (tensor<4x4xf32>) -> tensor<4x4xf32>
      %2 = "lz.relu"(%1) : (tensor<4x4xf32>) -> tensor<4x4xf32>
      func.return %0, %2 : tensor<4x4xf32>, tensor<4x4xf32>
    }""")
    p = Partitioner(m.functions[0], PartitionOptions())
    g_exp, g_neg, g_relu = (p.group_of[id(op)] for op in m.functions[0].entry_block.ops[:3])
    assert p.profit(g_exp, g_neg) == 64       # exp's result is returned: only the read is saved
    assert p.profit(g_neg, g_relu) == 2 * 64  # a write and a read


def test_dynamic_shapes_stay_alone():
    m = partitioned("""
    func.func @f(%x: tensor<?x3xf32>) -> tensor<?x3xf32> {
      %0 = "lz.exp"(%x) : (tensor<?x3xf32>) -> tensor<?x3xf32>
      %1 = "lz.neg"(%0) : (tensor<?x3xf32>) -> tensor<?x3xf32>
      func.return %1 : tensor<?x3xf32>
    }""")
    assert groups_of(m) == [("elementwise", ["exp"]), ("elementwise", ["neg"])]


def test_options_turn_fusion_kinds_off():
    m = partitioned(MLP, "decompose,partition{epilogues=false reductions=false}")
    kinds = groups_of(m)
    assert ("matmul", ["matmul"]) in kinds and ("reduction", ["reduce_max"]) in kinds


def test_debug_fusion_flag_prints_decisions(tmp_path):
    path = tmp_path / "mlp.mlir"
    path.write_text(MLP)
    out, err = io.StringIO(), io.StringIO()
    assert opt_run([str(path), "-p", "decompose,partition", "--debug=fusion"], out, err) == 0
    assert "fusion: @mlp: merged lz_fused_matmul (line 4) + lz_fused_add (line 5)" in err.getvalue()
    assert "refused" in err.getvalue()
    out, err = io.StringIO(), io.StringIO()
    assert opt_run([str(path), "-p", "partition", "--debug=fusoin"], out, err) == 1
    assert "unknown debug channel 'fusoin'" in err.getvalue()
    assert not FUSION_LOG.handlers  # the CLI leaves the logger as it found it
    out = io.StringIO()
    assert opt_run(["--debug=list"], out, io.StringIO()) == 0
    assert {"fusion", "memory-plan"} <= set(out.getvalue().split())


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs(), st.sampled_from([1, 2, 3, 64]))
def test_every_group_is_a_valid_kernel_and_groups_are_acyclic(module, max_ops):
    run_pipeline(module, f"partition{{max-ops={max_ops}}}")
    func = module.functions[0]
    ops = [op for op in func.entry_block.ops if op.name not in ("lz.constant", "func.return")]
    assert all("lz.group" in op.attributes for op in ops)
    groups: dict[int, list] = {}
    for op in ops:
        groups.setdefault(op.attributes["lz.group"].value, []).append(op)
    from lezero.passes.partition import classify
    for members in groups.values():
        assert len(members) <= max_ops
        assert classify(members) == members[0].attributes["lz.group_kind"].value
        assert len({op.attributes["lz.stage"].value for op in members}) == 1
    # a consumer group is in a later stage than each producer group
    for op in ops:
        for v in op.operands:
            owner = v.owner
            if hasattr(owner, "attributes") and "lz.group" in owner.attributes \
                    and owner.attributes["lz.group"] != op.attributes["lz.group"]:
                assert owner.attributes["lz.stage"].value < op.attributes["lz.stage"].value


def test_calls_are_an_error():
    m = parse_module("""
    func.func @g(%x: tensor<2xf32>) -> tensor<2xf32> {
      func.return %x : tensor<2xf32>
    }
    func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
      %0 = "func.call"(%x) {callee = @g} : (tensor<2xf32>) -> tensor<2xf32>
      func.return %0 : tensor<2xf32>
    }""")
    with pytest.raises(Exception, match="partition cannot put 'func.call' in a kernel"):
        run_pipeline(m, "partition")
