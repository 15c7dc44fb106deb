"""partition{target=cuda}: placement with automatic fallback to the CPU, explicit transfers,
kernels with devices, and one arena per device in memory-plan.

These tests register a stand-in "cuda" target (its ``unsupported_reason`` refuses ops the test
names), so they check the passes whatever the Triton backend supports; the real target is
exercised in tests/runtime/test_cuda.py and tests/filecheck/partition/placement.mlir."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lezero.ir import IRError, interpret, parse_module, print_module
from lezero.passes import placement, run_pipeline

from pass_testing import fusion_logged
from support.fusion_testing import inputs_for, random_graphs

PIPELINE = "partition{target=cuda},fuse,memory-plan"

MODEL = """
func.func @f(%x: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %0 = "lz.matmul"(%x, %w) : (tensor<4x8xf32>, tensor<8x8xf32>) -> tensor<4x8xf32>
  %1 = "lz.relu"(%0) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %2 = "lz.exp"(%1) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %3 = "lz.sin"(%2) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %4 = "lz.add"(%3, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %5 = "lz.neg"(%3) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %4, %3 : tensor<4x8xf32>, tensor<4x8xf32>
}"""


@pytest.fixture
def gpu_without(monkeypatch):
    """``gpu_without(*names)`` registers a "cuda" target that runs every op but ``names``."""
    def register(*names):
        monkeypatch.setitem(placement._TARGETS, "cuda",
                            lambda op: f"{op.name} is refused by this test" if op.name in names else None)
    return register


def logged(text, pipeline=PIPELINE):
    return fusion_logged(text, pipeline)


def kernels(module):
    return [op for op in module.functions[0].entry_block.ops if op.name == "lz.kernel"]


def summary(module):
    """(kind, device, inner op names) per kernel, in schedule order."""
    return [(k.attributes["kind"].value, k.attributes["device"].value,
             [op.name[3:] for op in k.regions[0].blocks[0].ops if op.name not in ("lz.yield", "lz.constant")])
            for k in kernels(module)]


def check_placement(module, target="cuda") -> None:
    """What placement promises, checked independently: every kernel has a device; a value crosses
    devices only through a transfer kernel (whose one op is an lz.transfer to its device); the
    arguments are read on the target and the results come from it."""
    func = module.functions[0]
    for k in kernels(module):
        device = k.attributes["device"].value
        kind = k.attributes["kind"].value
        inner = [op for op in k.regions[0].blocks[0].ops if op.name != "lz.yield"]
        if kind == "transfer":
            assert [op.name for op in inner] == ["lz.transfer"] and inner[0].attributes["device"].value == device
            continue
        assert all(op.name != "lz.transfer" for op in inner)
        for v in k.operands:
            owner = v.owner
            if owner is None or not hasattr(owner, "name"):  # an argument
                assert device == target, f"{k.attributes['name'].value} on {device} reads an argument"
            elif owner.name == "lz.kernel":
                assert owner.attributes["device"].value == device
    for v in func.return_op.operands:
        owner = v.owner
        if hasattr(owner, "name") and owner.name == "lz.kernel":
            assert owner.attributes["device"].value == target


def check_arenas(module) -> None:
    """Per device: offsets aligned and inside that device's arena; buffers live at once share no
    bytes unless one is written in place of the other by an elementwise kernel."""
    func = module.functions[0]
    size = {"cpu": func.attributes["lz.arena_size"].value,
            "cuda": func.attributes["lz.device_arena_size"].value if "lz.device_arena_size" in func.attributes else 0}
    step = {id(k): i for i, k in enumerate(kernels(module))}
    buffers = []
    for k in kernels(module):
        for r, offset in zip(k.results, k.attributes["lz.offsets"].values):
            if offset < 0:
                continue
            device = k.attributes["device"].value
            assert offset % 64 == 0 and offset + r.type.nbytes <= size[device]
            end = max([step[id(u.op)] for u in r.uses], default=step[id(k)])
            buffers.append((r, device, offset, step[id(k)], end))
    for i, (a, da, oa, sa, ea) in enumerate(buffers):
        for b, db, ob, sb, eb in buffers[i + 1:]:
            if da != db or not (sa <= eb and sb <= ea) or not (oa < ob + b.type.nbytes and ob < oa + a.type.nbytes):
                continue
            first, second = (a, b) if sa <= sb else (b, a)
            assert second.op.attributes["kind"].value == "elementwise" and first in second.op.operands and oa == ob


def test_unsupported_ops_fall_back_to_the_cpu_with_transfers(gpu_without):
    gpu_without("lz.exp", "lz.sin")
    module, log = logged(MODEL)
    assert summary(module) == [
        ("matmul", "cuda", ["matmul", "relu"]),
        ("transfer", "cpu", ["transfer"]),
        ("elementwise", "cpu", ["exp", "sin"]),
        ("transfer", "cuda", ["transfer"]),
        ("elementwise", "cuda", ["add"]),
    ]  # lz.neg is dead
    assert "@f: placed 'lz.exp' (line 5) on cpu: lz.exp is refused by this test" in log
    assert "@f: placed 'lz.sin' (line 6) on cpu: lz.sin is refused by this test" in log
    assert "@f: transfer tensor<4x8xf32> from cuda to cpu for 'lz.exp' (line 5)" in log
    assert "@f: transfer tensor<4x8xf32> from cpu to cuda for 'lz.add' (line 7)" in log
    names = [k.attributes["name"].value for k in kernels(module)]
    assert names[1].startswith("lz_transfer_to_cpu_") and names[3].startswith("lz_transfer_to_cuda_")
    check_placement(module)
    check_arenas(module)
    # the sin result is returned and read by the add: one transfer to cuda serves both
    assert module.functions[0].return_op.operands[1] is kernels(module)[3].results[0]
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((4, 8)).astype(np.float32), rng.standard_normal((8, 8)).astype(np.float32)]
    for got, want in zip(interpret(module, "f", *arrays), interpret(parse_module(MODEL), "f", *arrays)):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    text = print_module(module)
    assert print_module(parse_module(text)) == text


def test_memory_plan_keeps_one_arena_per_device(gpu_without):
    gpu_without("lz.exp", "lz.sin")
    func = logged(MODEL)[0].functions[0]
    attrs = func.attributes
    # cuda: the matmul result (128 B) and the transferred sin result (128 B) are not live together
    assert attrs["lz.device_arena_size"].value == 128 and attrs["lz.device_arena_peak"].value == 128
    # cpu: the transferred matmul result, and exp+sin written in place of it
    assert attrs["lz.arena_size"].value == 128 and attrs["lz.arena_peak"].value == 128


def test_everything_on_the_target_needs_no_transfer(gpu_without):
    gpu_without()
    module, log = logged(MODEL)
    assert summary(module) == [("matmul", "cuda", ["matmul", "relu", "exp", "sin", "add"])]
    assert "placed" not in log and "transfer" not in log
    assert module.functions[0].attributes["lz.arena_size"].value == 0


def test_a_cpu_op_reading_an_argument_and_returning_gets_transfers_both_ways(gpu_without):
    gpu_without("lz.neg")
    module, _ = logged("""
func.func @f(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<3xf32>) {
  %0 = "lz.neg"(%x) : (tensor<3xf32>) -> tensor<3xf32>
  %1 = "lz.exp"(%x) : (tensor<3xf32>) -> tensor<3xf32>
  func.return %0, %1 : tensor<3xf32>, tensor<3xf32>
}""")
    assert summary(module) == [("transfer", "cpu", ["transfer"]), ("elementwise", "cuda", ["exp"]),
                               ("elementwise", "cpu", ["neg"]), ("transfer", "cuda", ["transfer"])]
    check_placement(module)


def test_constants_need_no_transfer(gpu_without):
    gpu_without("lz.neg")
    module, _ = logged("""
func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  %c = "lz.constant"() {value = dense<[1.0, 2.0, 3.0]> : tensor<3xf32>} : () -> tensor<3xf32>
  %0 = "lz.neg"(%c) : (tensor<3xf32>) -> tensor<3xf32>
  %1 = "lz.mul"(%0, %c) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %2 = "lz.add"(%1, %x) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  func.return %2 : tensor<3xf32>
}""", "partition{target=cuda},fuse")
    # the constant is read on both devices and never transferred; neg's result is
    assert summary(module) == [("elementwise", "cpu", ["neg"]), ("transfer", "cuda", ["transfer"]),
                               ("elementwise", "cuda", ["mul", "add"])]
    (_, transfer, last) = kernels(module)
    x = module.functions[0].arguments[0]
    assert last.operands[0] is transfer.results[0] and last.operands[1].owner.name == "lz.constant"
    assert last.operands[2] is x


def test_the_cpu_target_leaves_transfers_as_copies():
    module = run_pipeline(parse_module("""
func.func @f(%x: tensor<3xf32>) -> tensor<3xf32> {
  %0 = "lz.transfer"(%x) {device = "cuda"} : (tensor<3xf32>) -> tensor<3xf32>
  %1 = "lz.neg"(%0) : (tensor<3xf32>) -> tensor<3xf32>
  func.return %1 : tensor<3xf32>
}"""), "fuse")
    (k,) = kernels(module)
    assert "device" not in k.attributes and k.attributes["kind"].value == "elementwise"


def test_an_unregistered_target_is_a_clear_error(monkeypatch):
    monkeypatch.delitem(placement._TARGETS, "cuda", raising=False)
    with pytest.raises(IRError, match=r"target 'cuda' is not registered \(targets: cpu\): lezero.codegen.targets"):
        run_pipeline(parse_module(MODEL), "partition{target=cuda}")
    with pytest.raises(IRError, match=r"target 'tpu' is not registered \(targets: cpu\)"):
        run_pipeline(parse_module(MODEL), "partition{target=tpu}")


REFUSABLE = ["lz.neg", "lz.abs", "lz.relu", "lz.tanh", "lz.sigmoid", "lz.exp", "lz.sin", "lz.add", "lz.sub",
             "lz.mul", "lz.max", "lz.reduce_sum", "lz.reduce_max", "lz.reduce_mean", "lz.matmul", "lz.transpose",
             "lz.reshape", "lz.broadcast_to", "lz.slice", "lz.pad", "lz.concat", "lz.gather", "lz.argmax"]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_graphs(), st.sets(st.sampled_from(REFUSABLE)))
def test_random_graphs_placed_and_fused_compute_the_same(monkeypatch_module, module, refused):
    monkeypatch_module.setitem(placement._TARGETS, "cuda", lambda op: "refused" if op.name in refused else None)
    arrays = inputs_for(module.lookup("f"), seed=3)
    want = interpret(module, "f", *arrays)
    scheduled = run_pipeline(module.clone(), PIPELINE)
    check_placement(scheduled)
    check_arenas(scheduled)
    got = interpret(scheduled, "f", *arrays)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as mp:
        yield mp
