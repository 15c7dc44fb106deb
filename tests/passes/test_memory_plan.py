"""memory-plan: kernel results in one static arena, no two live buffers sharing bytes."""
from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lezero.codegen import targets
from lezero.ir import Builder, FuncOp, FunctionType, ModuleOp, parse_module
from lezero.ir.types import F32, TensorType
from lezero.passes import PassError, run_pipeline
from lezero.passes.memory_plan import aligned, best_fit

from support.fusion_testing import (assert_same_outputs, check_memory_plan, inputs_for, kernel_schedule, outputs,
                            random_graphs)
from test_partition import MLP


def planned(module, pipeline):
    run_pipeline(module, pipeline)
    func = module.functions[0]
    check_memory_plan(func, by_stage="by-stage=true" in pipeline)
    return func


def arena(func):
    return func.attributes["lz.arena_size"].value, func.attributes["lz.arena_peak"].value


def chain(ops: list[str], shape=(16, 16)) -> ModuleOp:
    """@f(x) = ops[-1](...ops[0](x)); a transpose op gets perm [1, 0]."""
    t = TensorType(shape, F32)
    func = FuncOp("f", FunctionType([t], []))
    b = Builder.at_end(func.entry_block)
    v = func.arguments[0]
    for name in ops:
        v = b.op(name, v, perm=[1, 0]) if name == "lz.transpose" else b.op(name, v)
    b.create("func.return", [v], result_types=[])
    func.update_function_type()
    return ModuleOp([func])


ONE_BUFFER = aligned(16 * 16 * 4)


def test_mlp_arena():
    func = planned(parse_module(MLP), "decompose,partition,fuse,memory-plan")
    offsets = [k.attributes["lz.offsets"].values for k in kernel_schedule(func)]
    # the hidden layer (64x256) and the logits (64x10) are both live while the logits are
    # computed; the softmax writes the returned value
    assert offsets == [(0,), (65536,), (-1,)]
    assert arena(func) == (65536 + 2560, 65536 + 2560)


@pytest.mark.parametrize("pipeline", ["partition{max-ops=1},fuse,memory-plan",
                                      "partition{max-ops=1},fuse,memory-plan{in-place=false}",
                                      "fuse{max-ops=1},memory-plan{by-stage=true}"])
def test_a_long_chain_that_cannot_fuse_needs_at_most_two_buffers(pipeline):
    m = chain(["lz.exp", "lz.neg", "lz.tanh", "lz.relu", "lz.sin"] * 4)
    inputs = inputs_for(m.functions[0])
    before = outputs(m, inputs)
    func = planned(m, pipeline)
    assert len(kernel_schedule(func)) == 20
    size, peak = arena(func)
    assert size <= 2 * ONE_BUFFER
    assert_same_outputs(before, outputs(m, inputs))


def test_in_place_chain_needs_one_buffer():
    func = planned(chain(["lz.exp", "lz.neg", "lz.tanh"] * 4), "fuse{max-ops=1},memory-plan")
    assert arena(func) == (ONE_BUFFER, ONE_BUFFER)
    offsets = {k.attributes["lz.offsets"].values for k in kernel_schedule(func)}
    assert offsets == {(0,), (-1,)}


def test_alternating_transposes_refuse_to_fuse_and_use_two_buffers():
    # exp -> transpose: the transpose must read from memory, so every pair is its own kernel,
    # and reading through a transpose is never in place
    func = planned(chain(["lz.exp", "lz.transpose"] * 6), "fuse,memory-plan")
    ks = kernel_schedule(func)
    assert len(ks) == 7
    assert [k.attributes["name"].value for k in ks[:2]] == ["lz_fused_exp_0", "lz_fused_transpose_exp_1"]
    assert arena(func) == (2 * ONE_BUFFER, 2 * ONE_BUFFER)


def test_returned_values_are_outside_the_arena_and_dead_results_still_get_bytes():
    func = planned(parse_module("""
    func.func @f(%x: tensor<4x4xf32>) -> tensor<4x4xf32> {
      %0:2 = "lz.kernel"(%x) ({
      ^bb0(%a: tensor<4x4xf32>):
        %1 = "lz.exp"(%a) : (tensor<4x4xf32>) -> tensor<4x4xf32>
        %2 = "lz.neg"(%a) : (tensor<4x4xf32>) -> tensor<4x4xf32>
        "lz.yield"(%1, %2) : (tensor<4x4xf32>, tensor<4x4xf32>) -> ()
      }) {kind = "elementwise", name = "k"} : (tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>)
      func.return %0#0 : tensor<4x4xf32>
    }"""), "memory-plan")
    assert kernel_schedule(func)[0].attributes["lz.offsets"].values == (-1, 0)
    assert arena(func) == (64, 64)


def test_by_stage_keeps_a_stage_from_overwriting_what_its_neighbour_reads():
    # two kernels of stage 1 both read a; in program order the second could take a's slot in
    # place, but run at once the first would still be reading it
    text = """
    func.func @f(%x: tensor<16xf32>) -> (tensor<16xf32>, tensor<16xf32>) {
      %0 = "lz.exp"(%x) : (tensor<16xf32>) -> tensor<16xf32>
      %1 = "lz.reduce_sum"(%0) {axes = array<i64: 0>, keepdims = true} : (tensor<16xf32>) -> tensor<1xf32>
      %2 = "lz.neg"(%0) : (tensor<16xf32>) -> tensor<16xf32>
      %3 = "lz.add"(%2, %1) : (tensor<16xf32>, tensor<1xf32>) -> tensor<16xf32>
      %4 = "lz.tanh"(%2) : (tensor<16xf32>) -> tensor<16xf32>
      func.return %3, %4 : tensor<16xf32>, tensor<16xf32>
    }"""
    seq = planned(parse_module(text), "fuse{max-ops=1},memory-plan")
    conc = planned(parse_module(text), "fuse{max-ops=1},memory-plan{by-stage=true}")
    assert arena(seq)[0] <= arena(conc)[0]
    stages = [k.attributes["lz.stage"].value for k in kernel_schedule(conc)]
    assert stages == sorted(stages)
    # by stage: no two kernels of one stage write where another kernel of that stage reads
    offsets = {id(r): o for k in kernel_schedule(conc) for r, o in zip(k.results, k.attributes["lz.offsets"].values)}
    for stage in set(stages):
        ks = [k for k in kernel_schedule(conc) if k.attributes["lz.stage"].value == stage]
        for k in ks:
            written = {offsets[id(r)] for r in k.results} - {-1}
            for other in ks:
                if other is not k:
                    read = {offsets.get(id(v)) for v in other.operands} - {None, -1}
                    assert not written & read


def test_dynamic_shapes_are_an_error_naming_the_op():
    m = parse_module("""
    func.func @f(%x: tensor<?x4xf32>) -> tensor<?x4xf32> {
      %0 = "lz.exp"(%x) : (tensor<?x4xf32>) -> tensor<?x4xf32>
      %1 = "lz.neg"(%0) : (tensor<?x4xf32>) -> tensor<?x4xf32>
      %2 = "lz.neg"(%1) : (tensor<?x4xf32>) -> tensor<?x4xf32>
      func.return %2 : tensor<?x4xf32>
    }""")
    with pytest.raises(PassError, match=r"memory-plan needs static shapes; run shape-infer after binding the dims "
                                        r"\('lz_fused_exp_0' gives tensor<\?x4xf32>\)"):
        run_pipeline(m, "fuse,memory-plan")


def test_unfused_ops_are_an_error():
    m = parse_module("""
    func.func @f(%x: tensor<4xf32>) -> tensor<4xf32> {
      %0 = "lz.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>
      func.return %0 : tensor<4xf32>
    }""")
    with pytest.raises(PassError, match="memory-plan runs after fuse: 'lz.exp' is outside any lz.kernel"):
        run_pipeline(m, "memory-plan")


def test_best_fit_takes_the_smallest_gap_that_holds():
    busy = [(384, 512), (0, 256), (1024, 1088)]  # gaps: [256, 384) and [512, 1024)
    assert best_fit(128, busy) == 256
    assert best_fit(192, busy) == 512
    assert best_fit(1024, busy) == 1088
    assert best_fit(64, []) == 0


@settings(suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs(), st.sampled_from(["fuse,memory-plan", "fuse{max-ops=1},memory-plan",
                                         "fuse{max-ops=2},memory-plan{in-place=false}",
                                         "fuse,memory-plan{by-stage=true}"]))
def test_random_plans_never_overlap_live_buffers(module, pipeline):
    inputs = inputs_for(module.functions[0])
    before = outputs(module, inputs)
    planned(module, pipeline)
    assert_same_outputs(before, outputs(module, inputs))


def test_bf16_is_two_bytes_in_the_device_arena_and_never_in_place_of_a_wider_value():
    """On cuda a bf16 buffer is 16 bits (the runtime's torch.bfloat16): its slot is 2 bytes an
    element, and a kernel whose result's elements are wider (f32 from bf16) or narrower never takes
    its operand's slot in place (its element i would lie over others not read yet); on the CPU bf16
    is float32 storage, 4 bytes, as before."""
    targets.backend("cuda")  # registers its target
    text = """
    func.func @f(%x: tensor<64x64xbf16>) -> tensor<64x64xf32> {
      %0 = "lz.exp"(%x) : (tensor<64x64xbf16>) -> tensor<64x64xbf16>
      %1 = "lz.cast"(%0) {to = f32} : (tensor<64x64xbf16>) -> tensor<64x64xf32>
      %2 = "lz.neg"(%1) : (tensor<64x64xf32>) -> tensor<64x64xf32>
      func.return %2 : tensor<64x64xf32>
    }"""
    module = parse_module(text)
    run_pipeline(module, "partition{target=cuda max-ops=1},fuse,memory-plan")  # (check_memory_plan: one arena)
    func = module.functions[0]
    (exp, cast, _) = kernel_schedule(func)
    assert exp.attributes["lz.offsets"].values != cast.attributes["lz.offsets"].values  # not in place
    assert func.attributes["lz.device_arena_size"].value == aligned(64 * 64 * 2) + aligned(64 * 64 * 4)
    host = planned(parse_module(text), "partition{max-ops=1},fuse,memory-plan")
    assert arena(host)[0] == aligned(64 * 64 * 4)  # bf16 -> f32 in place: both 4 bytes an element
