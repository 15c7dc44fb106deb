"""lezero.compile(target="cuda") under Triton's interpreter (TRITON_INTERPRET=1: every kernel runs
in Python on the CPU, buffers are torch CPU tensors) against the reference interpreter and the
CPU path: models, every lz op, random fused graphs, CPU fallback with transfers, torch in/out."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings

import lezero
from lezero.ir import InputError, interpret, parse_module, print_module
from lezero.ir.dialect.numerics import round_to_bf16
from lezero.runtime import devices
from lezero.runtime.cuda import AUTOTUNE_MIN_FLOPS, CudaFunction, _TritonLaunch

from support.fusion_testing import inputs_for, random_graphs
from support.op_samples import ALL_SAMPLES


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def as_tuple(x):
    return x if isinstance(x, tuple) else (x,)


def assert_close(got, want, rtol=2e-5, atol=1e-6):
    got, want = as_tuple(got), as_tuple(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        g = g.numpy() if isinstance(g, torch.Tensor) else g
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, w)


MLP = """
func.func @mlp(%x: tensor<?x32xf32>, %w1: tensor<32x16xf32>, %b1: tensor<16xf32>,
               %w2: tensor<16x10xf32>, %b2: tensor<10xf32>) -> tensor<?x10xf32> {
  %0 = "lz.matmul"(%x, %w1) : (tensor<?x32xf32>, tensor<32x16xf32>) -> tensor<?x16xf32>
  %1 = "lz.add"(%0, %b1) : (tensor<?x16xf32>, tensor<16xf32>) -> tensor<?x16xf32>
  %2 = "lz.relu"(%1) : (tensor<?x16xf32>) -> tensor<?x16xf32>
  %3 = "lz.matmul"(%2, %w2) : (tensor<?x16xf32>, tensor<16x10xf32>) -> tensor<?x10xf32>
  %4 = "lz.add"(%3, %b2) : (tensor<?x10xf32>, tensor<10xf32>) -> tensor<?x10xf32>
  %5 = "lz.softmax"(%4) {axis = -1 : i64} : (tensor<?x10xf32>) -> tensor<?x10xf32>
  func.return %5 : tensor<?x10xf32>
}"""
SOFTMAX = """
func.func @softmax(%x: tensor<6x20xf32>) -> tensor<6x20xf32> {
  %0 = "lz.softmax"(%x) {axis = 1 : i64} : (tensor<6x20xf32>) -> tensor<6x20xf32>
  func.return %0 : tensor<6x20xf32>
}"""
CONV_RELU = """
func.func @conv(%x: tensor<2x3x8x8xf32>, %w: tensor<4x3x3x3xf32>, %b: tensor<4x1x1xf32>) -> tensor<2x4x8x8xf32> {
  %0 = "lz.conv2d"(%x, %w) {pads = array<i64: 1, 1, 1, 1>} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<2x4x8x8xf32>
  %1 = "lz.add"(%0, %b) : (tensor<2x4x8x8xf32>, tensor<4x1x1xf32>) -> tensor<2x4x8x8xf32>
  %2 = "lz.relu"(%1) : (tensor<2x4x8x8xf32>) -> tensor<2x4x8x8xf32>
  func.return %2 : tensor<2x4x8x8xf32>
}"""
MODELS = {"mlp": (MLP, [(8, 32), (32, 16), (16,), (16, 10), (10,)]), "softmax": (SOFTMAX, [(6, 20)]),
          "conv_relu": (CONV_RELU, [(2, 3, 8, 8), (4, 3, 3, 3), (4, 1, 1)])}


def model_inputs(name, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in MODELS[name][1]]


@pytest.mark.parametrize("name", sorted(MODELS))
def test_models_match_the_interpreter_and_the_cpu(name):
    text = MODELS[name][0]
    arrays = model_inputs(name)
    f = lezero.compile(text, target="cuda")
    assert isinstance(f, CudaFunction)
    got = f(*arrays)
    assert isinstance(got, np.ndarray)
    module = parse_module(text)
    assert_close(got, interpret(module, module.functions[0].sym_name, *arrays), rtol=1e-4, atol=1e-5)
    assert_close(got, lezero.compile(text, target="cpu")(*arrays), rtol=1e-4, atol=1e-5)


def test_torch_tensors_in_give_torch_tensors_out():
    f = lezero.compile(MLP, target="cuda")
    arrays = model_inputs("mlp")
    tensors = [torch.from_numpy(a) for a in arrays]
    got = f(*tensors)
    assert isinstance(got, torch.Tensor) and got.device == devices.torch_device("cuda")
    assert_close(got, f(*arrays), rtol=0, atol=0)
    # another batch size is another plan; numpy and torch arguments may be mixed
    small = [torch.from_numpy(arrays[0][:3])] + arrays[1:]
    assert_close(f(*small), interpret(parse_module(MLP), "mlp", arrays[0][:3], *arrays[1:]), rtol=1e-4, atol=1e-5)
    assert len(f._plans) == 2


def test_the_lean_runner_takes_and_gives_tensors():
    f = lezero.compile(SOFTMAX, target="cuda")
    (x,) = model_inputs("softmax")
    run = f.runner([(6, 20)])
    assert run.kernel_count == 1
    (got,) = run([torch.from_numpy(x)])
    assert_close(got, interpret(parse_module(SOFTMAX), "softmax", x), rtol=1e-5)
    out = torch.empty(6, 20)
    assert run([torch.from_numpy(x)], [out])[0] is out
    assert_close(out, got.numpy(), rtol=0, atol=0)


# a topk over 5000 elements: longer than one Triton block, so it runs on the CPU
TOPK = """
func.func @top2(%x: tensor<2x8xf32>, %w: tensor<8x5000xf32>) -> (tensor<2x2xf32>, tensor<2x2xi64>, tensor<2x8xf32>) {
  %c = "lz.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
  %0 = "lz.matmul"(%x, %w) : (tensor<2x8xf32>, tensor<8x5000xf32>) -> tensor<2x5000xf32>
  %1 = "lz.exp"(%0) : (tensor<2x5000xf32>) -> tensor<2x5000xf32>
  %2:2 = "lz.topk"(%1) {k = 2 : i64} : (tensor<2x5000xf32>) -> (tensor<2x2xf32>, tensor<2x2xi64>)
  %3 = "lz.mul"(%2#0, %c) : (tensor<2x2xf32>, tensor<f32>) -> tensor<2x2xf32>
  func.return %3, %2#1, %x : tensor<2x2xf32>, tensor<2x2xi64>, tensor<2x8xf32>
}"""


def test_an_op_the_gpu_cannot_run_falls_back_to_the_cpu():
    f = lezero.compile(TOPK, target="cuda")
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((2, 8)).astype(np.float32), rng.standard_normal((8, 5000)).astype(np.float32)]
    got = f(*arrays)
    assert_close(got, interpret(parse_module(TOPK), "top2", *arrays), rtol=1e-5)
    assert_close(f(*[torch.from_numpy(a) for a in arrays]), got, rtol=0, atol=0)
    kernels = [op for op in f.plan_for([(2, 8), (8, 5000)]).func.entry_block.ops if op.name == "lz.kernel"]
    placed = [(k.attributes["kind"].value, k.attributes["device"].value) for k in kernels]
    assert placed == [("matmul", "cuda"), ("transfer", "cpu"), ("single", "cpu"), ("transfer", "cuda"),
                      ("transfer", "cuda"), ("elementwise", "cuda")]
    text = print_module(f.plan_for([(2, 8), (8, 5000)]).module)
    assert text.count('"lz.transfer"') == 3 and "lz.device_arena_size" in text


SELECT = """
func.func @f(%x: tensor<3x9xf32>, %d: tensor<5x3xf32>, %i: tensor<4x1xi64>, %u: tensor<4x3xf32>)
    -> (tensor<3x4xf32>, tensor<3x4xi64>, tensor<5x3xf32>) {
  %0:2 = "lz.topk"(%x) {k = 4 : i64} : (tensor<3x9xf32>) -> (tensor<3x4xf32>, tensor<3x4xi64>)
  %1 = "lz.scatter_nd"(%d, %i, %u) {reduction = "add"} : (tensor<5x3xf32>, tensor<4x1xi64>, tensor<4x3xf32>)
      -> tensor<5x3xf32>
  func.return %0#0, %0#1, %1 : tensor<3x4xf32>, tensor<3x4xi64>, tensor<5x3xf32>
}"""


def test_topk_and_scatter_nd_run_on_the_gpu():
    f = lezero.compile(SELECT, target="cuda")
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal((3, 9)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32),
              np.array([[1], [-1], [1], [0]]), rng.standard_normal((4, 3)).astype(np.float32)]
    got = f(*arrays)
    for g, w in zip(got, interpret(parse_module(SELECT), "f", *arrays)):
        assert g.dtype == w.dtype and np.array_equal(g, w)
    kernels = [op for op in f.plan_for([a.shape for a in arrays]).func.entry_block.ops if op.name == "lz.kernel"]
    assert [(k.attributes["kind"].value, k.attributes["device"].value) for k in kernels] == [
        ("single", "cuda"), ("single", "cuda")]


def test_input_errors_name_the_argument():
    f = lezero.compile(MLP, target="cuda")
    arrays = model_inputs("mlp")
    with pytest.raises(InputError, match=r"argument #1 of @mlp expects tensor<32x16xf32>, got an array "
                                         r"of shape 16x32"):
        f(arrays[0], arrays[1].T, *arrays[2:])
    with pytest.raises(InputError, match=r"argument #0 of @mlp expects tensor<\?x32xf32> \(numpy dtype "
                                         r"float32\), got an array of dtype float64"):
        f(torch.from_numpy(arrays[0].astype(np.float64)), *arrays[1:])
    with pytest.raises(InputError, match=r"@mlp takes 5 arguments, got 1"):
        f(torch.from_numpy(arrays[0]))


def test_without_a_gpu_cuda_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(devices.DeviceError) as info:
        lezero.compile(SOFTMAX, target="cuda")
    assert str(info.value) == (
        "no CUDA GPU is available (torch.cuda.is_available() is False); set TRITON_INTERPRET=1 to run the cuda "
        "path on the CPU with Triton's interpreter, or use device='cpu'")


def test_an_unknown_target_lists_the_targets():
    with pytest.raises(ValueError, match=r"unknown target 'tpu' \(targets: 'cpu', 'cuda'\)"):
        lezero.compile(SOFTMAX, target="tpu")


def _tolerance(sample):
    if sample.op == "lz.cast" and sample.attrs.get("to") in ("f16", "bf16"):
        return dict(rtol=1e-3, atol=1e-3)
    if any(a.dtype == "float16" for a in sample.args):
        return dict(rtol=2e-3, atol=2e-3)
    return dict(rtol=2e-5, atol=1e-6)


# Triton's interpreter computes masked-off lanes too (log of 0, 0/0 where nothing is stored)
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("sample", ALL_SAMPLES, ids=[s.id for s in ALL_SAMPLES])
def test_every_op_on_the_cuda_path_matches_the_interpreter(sample):
    arrays = sample.arrays(np.random.default_rng(0))
    module = sample.module(arrays)
    got = CudaFunction(module, "f")(*arrays)
    assert_close(got, interpret(module, "f", *arrays), **_tolerance(sample))


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(random_graphs(max_ops=8))
def test_random_fused_graphs_on_cuda_match_the_cpu(module):
    arrays = inputs_for(module.lookup("f"), seed=1)
    got = CudaFunction(module, "f")(*arrays)
    assert_close(got, lezero.compile(module, "f", target="cpu")(*arrays), rtol=1e-4, atol=1e-5)


def test_autotuning_times_each_config_on_scratch_results(monkeypatch):
    """On a GPU (no interpreter) the first run of a kernel picks its fastest config, writing only
    scratch results while timing (a result may alias an operand), then runs it for real."""
    import time

    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    calls = []

    class Loaded:
        def launch(self, buffers, config):
            time.sleep(config)
            calls.append((config, buffers[1]))

    x, out = torch.zeros(3), torch.zeros(3)
    launch = _TritonLaunch("k", Loaded(), (0.002, 0.0, 0.001), 1, [], flops=AUTOTUNE_MIN_FLOPS)
    launch.run([x, out])
    assert launch.config == 0.0
    assert all(b is not out for _, b in calls[:-1]) and calls[-1] == (0.0, out)
    launch.run([x, out])
    assert len(calls) == 3 * 6 + 2  # tuned once

    # a small kernel, or LEZERO_AUTOTUNE=0: the heuristic config, no timing
    small = _TritonLaunch("k", Loaded(), (0.002, 0.0, 0.001), 1, [], flops=AUTOTUNE_MIN_FLOPS - 1)
    small.run([x, out])
    monkeypatch.setenv("LEZERO_AUTOTUNE", "0")
    off = _TritonLaunch("k", Loaded(), (0.002, 0.0, 0.001), 1, [], flops=AUTOTUNE_MIN_FLOPS)
    off.run([x, out])
    assert small.config == off.config == 0.002 and len(calls) == 3 * 6 + 4


def test_a_module_scheduled_for_the_cpu_runs_its_kernels_on_the_cpu():
    from lezero.codegen.schedule import schedule

    scheduled = schedule(parse_module(SOFTMAX))
    f = lezero.compile(scheduled, target="cuda")
    (x,) = model_inputs("softmax")
    assert_close(f(x), interpret(parse_module(SOFTMAX), "softmax", x), rtol=1e-5)
    ops = f.plan_for([(6, 20)]).func.entry_block.ops
    placed = [(k.attributes["kind"].value, k.attributes.get("device")) for k in ops if k.name == "lz.kernel"]
    assert [kind for kind, _ in placed] == ["transfer", "reduction", "transfer"] and placed[1][1] is None


BF16_FALLBACK = """
func.func @f(%x: tensor<8x32xbf16>, %w: tensor<32x4100xbf16>) -> (tensor<8x4100xbf16>, tensor<8x2xbf16>) {
  %0 = "lz.matmul"(%x, %w) : (tensor<8x32xbf16>, tensor<32x4100xbf16>) -> tensor<8x4100xbf16>
  %1 = "lz.relu"(%0) : (tensor<8x4100xbf16>) -> tensor<8x4100xbf16>
  %2:2 = "lz.topk"(%1) {k = 2 : i64} : (tensor<8x4100xbf16>) -> (tensor<8x2xbf16>, tensor<8x2xi64>)
  %3 = "lz.neg"(%1) : (tensor<8x4100xbf16>) -> tensor<8x4100xbf16>
  func.return %3, %2#0 : tensor<8x4100xbf16>, tensor<8x2xbf16>
}"""


def test_bf16_is_16_bit_storage_on_the_device():
    """bf16 buffers on cuda are torch.bfloat16 (2 bytes: a bf16 matmul reads half the bytes of
    float32): arguments converted from the host's float32 holding bf16 values, exactly, results
    back; a topk over 4100 columns runs on the CPU (float32 storage), its transfers convert both
    ways, so the values it picks are the device's exactly.  Torch arguments for bf16 are
    torch.bfloat16 tensors (a float32 one is an InputError naming the argument)."""
    f = lezero.compile(BF16_FALLBACK, target="cuda")
    rng = np.random.default_rng(3)
    x, w = (round_to_bf16(rng.standard_normal(s).astype(np.float32)) for s in ((8, 32), (32, 4100)))
    negated, top = f(x, w)
    assert negated.dtype == np.float32 and np.array_equal(round_to_bf16(negated), negated)
    want = interpret(parse_module(BF16_FALLBACK), "f", x, w)
    np.testing.assert_allclose(negated, want[0], rtol=2.0 ** -7, atol=1e-5)
    np.testing.assert_array_equal(top, np.sort(negated, axis=1)[:, :2] * -1)  # picked on the CPU, exactly
    plan = f.plan_for([(8, 32), (32, 4100)])
    relu = [x for launch in plan.launches if isinstance(launch, _TritonLaunch)
            for kind, x in launch.sources if kind == "fixed"]  # the device arena's view the transfer reads
    assert relu and all(b.dtype == torch.bfloat16 and b.element_size() == 2 for b in relu)
    got = f(torch.from_numpy(x).to(torch.bfloat16), torch.from_numpy(w).to(torch.bfloat16))
    assert all(g.dtype == torch.bfloat16 for g in got)
    np.testing.assert_array_equal(got[0].float().numpy(), negated)
    with pytest.raises(InputError, match=r"argument #1 of @f is a tensor of dtype torch.float32; "
                                         r"tensor<32x4100xbf16> is torch.bfloat16 on the device"):
        f(torch.from_numpy(x).to(torch.bfloat16), torch.from_numpy(w))


@pytest.mark.parametrize("low", ["bf16", "f16"])
def test_low_precision_matmul_reads_float32_through_casts_bit_identical(low):
    """autocast's casts to bf16 or f16 of a matmul's float32 operands are the Triton matmul's operand
    prologue (each tile rounded as it is loaded, then 16 bits): one kernel, and its results are
    the unfused kernels' bit for bit (the casts returned too: kernels of their own)."""
    def function(also_casts: bool) -> str:
        out = f"tensor<40x24x{low}>" + (f", tensor<40x64x{low}>, tensor<24x64x{low}>" if also_casts else "")
        returned = "%0" + (", %a, %b" if also_casts else "")
        return (f"func.func @f(%x: tensor<40x64xf32>, %w: tensor<24x64xf32>) -> ({out}) {{\n"
                f'  %a = "lz.cast"(%x) {{to = {low}}} : (tensor<40x64xf32>) -> tensor<40x64x{low}>\n'
                f'  %b = "lz.cast"(%w) {{to = {low}}} : (tensor<24x64xf32>) -> tensor<24x64x{low}>\n'
                f'  %t = "lz.transpose"(%b) {{perm = array<i64: 1, 0>}} : (tensor<24x64x{low}>) -> tensor<64x24x{low}>\n'
                f'  %0 = "lz.matmul"(%a, %t) : (tensor<40x64x{low}>, tensor<64x24x{low}>) -> tensor<40x24x{low}>\n'
                f"  func.return {returned} : {out}\n}}")

    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((40, 64)).astype(np.float32), rng.standard_normal((24, 64)).astype(np.float32)
    if low == "bf16":
        x.flat[::3] = round_to_bf16(x.flat[::3]) + np.float32(2.0 ** -9) * np.sign(x.flat[::3])  # ties: to even
    else:
        h = x.flat[::3].astype(np.float16)
        x.flat[::3] = (h.astype(np.float32) + np.nextafter(h, np.float16(np.inf)).astype(np.float32)) / 2
    fused, unfused = (lezero.compile(function(c), target="cuda") for c in (False, True))
    kernels = [op.attributes["name"].value for op in fused.plan_for([(40, 64), (24, 64)]).func.entry_block.ops
               if op.name == "lz.kernel"]
    assert kernels == ["lz_fused_cast_transpose_matmul_0"]
    got, want = fused(x, w), unfused(x, w)[0]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_allclose(np.asarray(got, np.float32),
                               np.asarray(interpret(parse_module(function(False)), "f", x, w), np.float32),
                               rtol=2.0 ** -7 if low == "bf16" else 2.0 ** -10, atol=1e-5 if low == "bf16" else 1e-3)
