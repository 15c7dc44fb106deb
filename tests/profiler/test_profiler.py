"""lz.profiler.profile around eager code, a compiled train step and an ONNX CNN: every kernel
launch is in the table with its FLOPs, the self times add up to the measured wall time (within
10%), and the chrome trace is JSON with the fields Perfetto reads."""
from __future__ import annotations

import json
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import lezero as lz
import lezero.onnx
from lezero import nn
from lezero.profiler import (
    HostPeak,
    profile,
    record_function,
    tensorboard_trace_handler,
)

PEAK = HostPeak(100.0, 20.0)  # a fixed peak: the tests check the table, not this machine


def _mlp_train_step():
    lz.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10))
    x, y = lz.randn(32, 64), lz.tensor(np.arange(32) % 10)
    step = lz.jit.compile_train_step(model, nn.CrossEntropyLoss(), lz.optim.SGD(model.parameters(), lr=0.1), x, y)
    step(x, y)
    step(x, y)
    return step, x, y


def _covered(prof) -> float:
    return prof.key_averages().self_cpu_time_total * 1e-6


def test_train_step_table_and_time_shares_sum_to_the_wall_time():
    step, x, y = _mlp_train_step()
    with profile(peak=PEAK) as prof:
        start = time.perf_counter()
        for _ in range(20):
            step(x, y)
        wall = time.perf_counter() - start
    rows = prof.key_averages()
    kernels = [r for r in rows if r.kind == "kernel"]
    calls = [r for r in rows if r.kind == "call"]
    # the step's whole call (its Python binding the batch and the optimizer state) holds the plan's call
    assert sorted(r.key for r in calls) == ["@train_step", "train_step"] and all(r.count == 20 for r in calls)
    assert kernels and all(r.count == 20 for r in kernels)
    assert sum(r.flops for r in kernels) > 2 * 2 * 32 * 64 * 128 * 20  # at least the forward matmuls
    assert abs(_covered(prof) - wall) <= 0.1 * wall, (_covered(prof), wall)
    table = rows.table(sort_by="self_cpu_time_total", row_limit=5)
    for column in ("Name", "Self CPU %", "Self CPU", "CPU total", "CPU time avg", "# of Calls", "GFLOP/s", "%peak"):
        assert column in table
    assert len([line for line in table.splitlines() if " kernel " in line or " call " in line]) == 5
    assert "Host peak: 100 GFLOP/s" in table


def _cnn_model() -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    w1 = numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3), dtype=np.float32) * 0.1, "w1")
    b1 = numpy_helper.from_array(np.zeros(8, np.float32), "b1")
    w2 = numpy_helper.from_array(rng.standard_normal((10, 8 * 8 * 8), dtype=np.float32) * 0.1, "w2")
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Relu", ["c"], ["r"], name="relu1"),
             helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2], name="pool1"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "w2"], ["y"], transB=1, name="fc")]
    graph = helper.make_graph(nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 10])], [w1, b1, w2])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_onnx_cnn_profile_and_chrome_trace(tmp_path):
    model = lezero.onnx.compile(_cnn_model())
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 3, 16, 16), dtype=np.float32)}
    model.run(feeds)
    with profile(peak=PEAK, on_trace_ready=tensorboard_trace_handler(tmp_path / "tb", worker_name="w")) as prof:
        start = time.perf_counter()
        with record_function("inference"):
            for _ in range(10):
                out = model.run(feeds)
        wall = time.perf_counter() - start
    assert out["y"].shape == (2, 10)
    rows = {r.key: r for r in prof.key_averages()}
    assert rows["inference"].kind == "user" and rows["@main"].count == 10
    kernels = [r for r in rows.values() if r.kind == "kernel"]
    assert any("lz.conv2d" in r.fused_ops for r in kernels)
    assert abs(_covered(prof) - wall) <= 0.1 * wall
    # the user range holds the calls, which hold the kernels: cpu totals nest
    assert rows["inference"].cpu_time_total >= rows["@main"].cpu_time_total >= sum(r.cpu_time_total for r in kernels)

    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]
    assert len(events) == len(prof.events)
    for e in events:
        assert {"ph", "ts", "dur", "pid", "tid", "name"} <= set(e) and e["dur"] >= 0 and e["ts"] >= 0
    written = list((tmp_path / "tb").iterdir())
    assert len(written) == 1 and written[0].name.startswith("w.") and written[0].name.endswith(".pt.trace.json")
    json.loads(written[0].read_text())


def test_eager_ops_are_recorded_and_plain_runners_come_back():
    a = lz.randn(64, 64)
    (a + a) * a  # compiled before the profile
    from lezero.eager.dispatch import RUNNERS

    before = dict(RUNNERS)
    fresh = lz.ones(13, 1, 17, 3)
    with profile(peak=PEAK) as prof:
        for _ in range(5):
            b = (a + a) * a
        fresh.exp()  # an op at shapes no other test uses: compiled inside the profile
    np.testing.assert_allclose(b.numpy(), (a.numpy() * 2) * a.numpy(), rtol=1e-6)
    rows = {r.key: r for r in prof.key_averages()}
    assert rows["add"].kind == "op" and rows["add"].count == 5 and rows["mul"].count == 5
    (compiled,) = [e for e in prof.events if e.kind == "compile"]
    assert compiled.name == "compile @f" and compiled.seconds > 0 and rows["exp"].input_shapes == ("13x1x17x3",)
    assert compiled.cache.get("lowerings", 0) + compiled.cache.get("memory_hits", 0) \
        + compiled.cache.get("disk_hits", 0) >= 1  # the kernel cache's work for it
    assert rows["add"].input_shapes == ("64x64", "64x64")
    assert all(RUNNERS[k] is run for k, run in before.items())  # the timing wrappers are gone


def test_ops_on_views_run_and_are_timed_through_the_compiled_op_they_call():
    """An op on a transposed view has a strided runner in the eager table (``run(arrays) ->
    (results, strided)``); a profile started while one is there leaves it alone and records the
    kernels of the compiled op it calls (it used to fail to start: the wrapper expected every
    runner's form, and the failed start left the profile recording)."""
    a = lz.randn(20, 4)
    a.t().sum()  # a strided runner in the table before the profile starts
    with profile(peak=PEAK) as prof:
        total = a.t().sum()
    np.testing.assert_allclose(total.item(), a.numpy().sum(), rtol=1e-5)
    keys = {r.key for r in prof.key_averages()}
    assert any(k.startswith("lz_fused_reduce_sum") for k in keys), keys  # the compiled op's kernel
    with profile(peak=PEAK):  # the first profile stopped: another may start
        pass


def test_a_schedule_records_its_active_steps_and_hands_each_cycle_to_on_trace_ready():
    from lezero.profiler import ProfilerAction, schedule

    plan = schedule(wait=1, warmup=1, active=2, repeat=2, skip_first=1)
    # torch.profiler.schedule's actions for the same arguments
    assert [plan(i).name for i in range(11)] == [
        "NONE", "NONE", "WARMUP", "RECORD", "RECORD_AND_SAVE", "NONE", "WARMUP", "RECORD", "RECORD_AND_SAVE",
        "NONE", "NONE"]
    assert plan(4) is ProfilerAction.RECORD_AND_SAVE
    cycles = []

    def ready(prof):
        cycles.append(sorted((r.key, r.count) for r in prof.key_averages() if r.kind in ("op", "user")))

    x = lz.ones(4)
    with profile(schedule=plan, on_trace_ready=ready, peak=PEAK) as prof:
        for i in range(11):
            with record_function(f"step{i}"):
                lz.add(x, x)
            prof.step()
    assert [[key for key, _ in cycle if key.startswith("step")] for cycle in cycles] == [
        ["step3", "step4"], ["step7", "step8"]]
    assert all(dict(cycle).get("add") == 2 for cycle in cycles)
    with profile(peak=PEAK) as unscheduled:  # the scheduled profile released the recorder
        lz.add(x, x)
    assert [r.key for r in unscheduled.key_averages() if r.kind == "op"] == ["add"]
