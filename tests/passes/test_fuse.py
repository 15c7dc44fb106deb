"""fuse: each partition group becomes one lz.kernel that computes what the group computed."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lezero.ir import parse_module, print_module
from lezero.passes import PassError, run_pipeline

from support.fusion_testing import assert_fused_form, assert_same_outputs, inputs_for, outputs, random_graphs
from test_partition import MLP


def kernels(module, func=None):
    f = module.functions[0] if func is None else module.lookup(func)
    return [op for op in f.entry_block.ops if op.name == "lz.kernel"]


def kernel_summary(module, func=None):
    return [(k.attributes["kind"].value, k.attributes["name"].value, k.attributes["lz.stage"].value)
            for k in kernels(module, func)]


def fused(text, pipeline="fuse", prepare=""):
    """``text`` after ``prepare`` and ``pipeline``; ``pipeline`` must keep what @f computes, bit
    for bit."""
    m = parse_module(text)
    if prepare:
        run_pipeline(m, prepare)
    name = m.functions[0].sym_name
    inputs = inputs_for(m.functions[0])
    before = outputs(m, inputs, name)
    run_pipeline(m, pipeline)
    assert_fused_form(m)
    assert_same_outputs(before, outputs(m, inputs, name))
    return m


def test_mlp_kernels():
    m = fused(MLP, "partition,fuse", prepare="decompose")
    assert kernel_summary(m) == [
        ("matmul", "lz_fused_matmul_add_relu_0", 0),
        ("matmul", "lz_fused_matmul_add_1", 1),
        ("reduction", "lz_fused_reduce_max_sub_exp_reduce_sum_div_2", 2),
    ]
    first = kernels(m)[0]
    assert [a.type for a in first.regions[0].blocks[0].args] == [v.type for v in first.operands]
    assert len(first.operands) == 3  # x, w1, b1 in first-use order
    assert first.operands[0] is m.functions[0].arguments[0]


def test_fuse_alone_partitions_first_with_its_options():
    a = parse_module(MLP)
    run_pipeline(a, "decompose,fuse{max-ops=1}")
    assert len(kernels(a)) == 10
    b = parse_module(MLP)
    run_pipeline(b, "decompose,fuse")
    assert len(kernels(b)) == 3


def test_yields_every_value_used_outside_in_program_order():
    m = fused("""
    func.func @f(%x: tensor<4xf32>, %w: tensor<4x4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
      %0 = "lz.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
      %1 = "lz.neg"(%0) : (tensor<4xf32>) -> tensor<4xf32>
      %2 = "lz.matmul"(%1, %w) : (tensor<4xf32>, tensor<4x4xf32>) -> tensor<4xf32>
      func.return %2, %0 : tensor<4xf32>, tensor<4xf32>
    }""")
    ew = kernels(m)[0]
    assert ew.attributes["name"].value == "lz_fused_exp_neg_0"
    yielded = ew.regions[0].blocks[0].terminator.operands
    assert [v.owner.name for v in yielded] == ["lz.exp", "lz.neg"]
    assert m.functions[0].return_op.operands[1] is ew.results[0]


def test_splat_constants_are_cloned_other_constants_are_operands():
    m = fused("""
    func.func @f(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
      %half = "lz.constant"() {value = dense<0.5> : tensor<f32>} : () -> tensor<f32>
      %row = "lz.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
      %0 = "lz.mul"(%x, %half) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
      %1 = "lz.add"(%0, %row) : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
      func.return %1 : tensor<2x3xf32>
    }""")
    body = m.functions[0].entry_block.ops
    assert [op.name for op in body] == ["lz.constant", "lz.kernel", "func.return"]
    kernel = body[1]
    assert kernel.operands[1] is body[0].result  # the row is a weight
    inner = [op.name for op in kernel.regions[0].blocks[0].ops]
    assert inner == ["lz.constant", "lz.mul", "lz.add", "lz.yield"]


def test_kernel_location_fuses_the_ops_locations():
    m = fused("""
    func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
      %0 = "lz.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32> loc("a.py":1:1)
      %1 = "lz.neg"(%0) : (tensor<4xf32>) -> tensor<4xf32> loc("a.py":2:1)
      func.return %1 : tensor<4xf32>
    }""")
    assert str(kernels(m)[0].location) == 'loc(fused["a.py":1:1, "a.py":2:1])'


def test_dead_ops_are_dropped_before_fusing():
    m = fused("""
    func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
      %0 = "lz.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
      %1 = "lz.neg"(%0) : (tensor<4xf32>) -> tensor<4xf32>
      %2 = "lz.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
      func.return %2 : tensor<4xf32>
    }""")
    assert kernel_summary(m) == [("elementwise", "lz_fused_relu_0", 0)]


def test_names_are_unique_in_the_module_and_long_ones_are_cut():
    ops = "\n".join(f'%{i + 1} = "lz.{name}"(%{i}) : (tensor<4xf32>) -> tensor<4xf32>'
                    for i, name in enumerate(["exp", "neg", "abs", "tanh", "sin", "cos", "relu", "sigmoid"]))
    text = f"""
    func.func @f(%0: tensor<4xf32>) -> tensor<4xf32> {{
      {ops}
      func.return %8 : tensor<4xf32>
    }}
    func.func @g(%x: tensor<4xf32>) -> tensor<4xf32> {{
      %0 = "lz.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
      func.return %0 : tensor<4xf32>
    }}"""
    m = fused(text)
    assert kernel_summary(m, "f") == [("elementwise", "lz_fused_exp_neg_abs_tanh_sin_etc_0", 0)]
    assert kernel_summary(m, "g") == [("elementwise", "lz_fused_exp_1", 0)]


def test_fuse_twice_changes_nothing():
    m = fused(MLP, "fuse", prepare="decompose")
    text = print_module(m)
    run_pipeline(m, "partition,fuse")
    assert print_module(m) == text


def test_partly_annotated_function_is_an_error():
    m = parse_module("""
    func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
      %0 = "lz.exp"(%x) {lz.group = 0 : i64, lz.group_kind = "elementwise"} : (tensor<4xf32>) -> tensor<4xf32>
      %1 = "lz.neg"(%0) : (tensor<4xf32>) -> tensor<4xf32>
      func.return %1 : tensor<4xf32>
    }""")
    with pytest.raises(PassError, match="'lz.neg' has no lz.group and lz.group_kind.*run partition right before fuse"):
        run_pipeline(m, "fuse")


def test_an_invalid_grouping_is_an_error():
    m = parse_module("""
    func.func @f(%x: tensor<4xf32>, %w: tensor<4x4xf32>) -> tensor<4xf32> {
      %0 = "lz.matmul"(%x, %w) {lz.group = 0 : i64, lz.group_kind = "matmul"} : (tensor<4xf32>, tensor<4x4xf32>) -> tensor<4xf32>
      %1 = "lz.matmul"(%0, %w) {lz.group = 0 : i64, lz.group_kind = "matmul"} : (tensor<4xf32>, tensor<4x4xf32>) -> tensor<4xf32>
      func.return %1 : tensor<4xf32>
    }""")
    with pytest.raises(PassError, match="group 0 cannot be one kernel: a kernel holds one contraction"):
        run_pipeline(m, "fuse")


def test_a_cyclic_grouping_is_an_error():
    m = parse_module("""
    func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
      %0 = "lz.exp"(%x) {lz.group = 0 : i64, lz.group_kind = "elementwise"} : (tensor<4xf32>) -> tensor<4xf32>
      %1 = "lz.neg"(%0) {lz.group = 1 : i64, lz.group_kind = "elementwise"} : (tensor<4xf32>) -> tensor<4xf32>
      %2 = "lz.add"(%0, %1) {lz.group = 0 : i64, lz.group_kind = "elementwise"} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
      func.return %2 : tensor<4xf32>
    }""")
    with pytest.raises(PassError, match="form a cycle"):
        run_pipeline(m, "fuse")


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs(), st.sampled_from(["fuse", "partition,fuse", "partition{max-ops=2},fuse",
                                         "fuse{max-ops=1}", "fuse{epilogues=false reductions=false movement=false}"]))
def test_random_graphs_compute_the_same_after_partition_and_fuse(module, pipeline):
    inputs = inputs_for(module.functions[0])
    before = outputs(module, inputs)
    run_pipeline(module, pipeline)  # verifies after each pass
    assert_fused_form(module)
    assert_same_outputs(before, outputs(module, inputs))
    reparsed = parse_module(print_module(module))
    assert_same_outputs(before, outputs(reparsed, inputs))


def test_conv_with_batch_norm_and_relu():
    # batch norm's per-channel factors are computed in a kernel of their own; the conv kernel
    # reads them through their reshapes to C x 1 x 1 (index arithmetic on the loads) and takes
    # the scale, shift and relu as epilogue
    m = fused("""
    func.func @f(%x: tensor<2x3x6x6xf32>, %w: tensor<4x3x3x3xf32>, %s: tensor<4xf32>, %b: tensor<4xf32>,
                 %mu: tensor<4xf32>, %var: tensor<4xf32>) -> tensor<2x4x4x4xf32> {
      %0 = "lz.conv2d"(%x, %w) : (tensor<2x3x6x6xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x4x4xf32>
      %1 = "lz.batch_norm"(%0, %s, %b, %mu, %var) : (tensor<2x4x4x4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4x4x4xf32>
      %2 = "lz.relu"(%1) : (tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
      func.return %2 : tensor<2x4x4x4xf32>
    }""", "fuse", prepare="decompose")
    assert kernel_summary(m) == [("elementwise", "lz_fused_add_rsqrt_mul_sub_0", 0),
                                 ("conv", "lz_fused_conv2d_reshape_mul_add_relu_1", 1)]
