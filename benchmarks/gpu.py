"""lezero's GPU path (Triton kernels, ``target="cuda"``) against PyTorch eager and torch.compile on
one CUDA device, measured in the same run:

1. a fused elementwise ``gelu(x * a + b)`` (x 8192x8192 float32, a and b per column): GB/s;
2. GEMM, float32 and bf16, 4096^3 and 8192^3: TFLOP/s against ``torch.matmul``;
3. the examples' SimpleMLP (Linear(784, 256), relu, Linear(256, 10)) at batch 4096: forward, and
   the training step (cross-entropy, Adam) through ``lz.jit.compile_train_step``;
4. ResNet-50 (one definition, built from ``lz.nn`` and from ``torch.nn`` with the same weights) at
   batch 32, 224x224: forward, and the training step (SGD with momentum).  BatchNorm runs in eval
   mode (running statistics) in both frameworks: lezero's compiled step does not yet update
   BatchNorm's running statistics.
5. mixed precision (``amp``): the ResNet-50 training step and a transformer encoder's (6 layers,
   d_model 512, batch 32 x 256 tokens, AdamW), each in float32 and inside ``autocast(bfloat16)``:
   lezero's compiled step made in ``lz.autocast("cuda")`` against torch eager and torch.compile in
   ``torch.autocast``; per model a summary line: lezero's bf16 step rate over its own float32 step
   (goal >= 2x), over torch eager's and torch.compile's autocast steps (goal >= 1x), and the MB
   lezero's kernels move in each precision (bf16 is 2 bytes on the device).  ``--tiny``: ResNet-50's
   layout at width 4, one bottleneck block per stage, 10 classes, batch 1 at 32x32 (the same
   modules and kernels), and a 1-layer encoder; the section runs in ~1 minute under the interpreter
   on 2 loaded cores, ~6.5 with torch.compile (its C++ compiles).
6. int8 GEMM (issue 12: ``lz.matmul_integer`` as int8 ``tl.dot``s summing in int32) at 4096^3, 8192^3
   and a BERT-base feed-forward's shapes (4096 tokens, 768 <-> 3072): TOP/s against ``torch._int_mm``
   (cuBLASLt's s8 x s8 -> s32, no zero points), bare (i32 out) and with the dequantize epilogue
   (``cast * scale + bias``, float32 out) against ``_int_mm`` then torch's float ops, eager and
   compiled.

    .venv/bin/python benchmarks/gpu.py [--budget 285] [--sections elementwise gemm mlp resnet amp int8] [--no-torch-compile]
    .venv/bin/python benchmarks/gpu.py --tiny     # a dry run on the CPU, Triton's interpreter, tiny sizes

lezero runs what its compile path makes: the function through ``lezero.compile(..., target="cuda")``
(partitioned, fused, each kernel rendered as Triton; its launch configuration autotuned on the
first call), called through its lean runner on torch tensors that stay on the device.  float32
GEMM: lezero's ``tl.dot`` multiplies in true float32 (``input_precision="ieee"``, the reference's
numbers); torch is timed in true float32 and with TF32 allowed.  bf16: lezero's bf16 tensors are
16-bit storage on the device (torch.bfloat16), its bf16 GEMM ``tl.dot`` of bf16 tiles, as torch's.

Results are checked against torch before anything is timed (outputs; for a training step the
first step's loss).  Times are the best of several rounds on CUDA events, after warm-up
(compilation, autotuning) outside the measurement; ratios are lezero's rate over the peer's
(above 1: lezero is faster); compile times are printed apart.  Every section runs in a process of
its own: an error is printed and the next section runs; a measurement that would end past the
time budget (``--budget`` seconds, with rough estimates of torch.compile's compile times) is
skipped and says so, and a section still running when the budget is spent (a cold compile of
ResNet-50's kernels and their autotuning configurations can take minutes) is stopped.  Without a
CUDA device the script stops at once, unless ``--tiny`` (which runs everything under
``TRITON_INTERPRET=1`` on the CPU, at sizes small enough for the interpreter, to check the script
itself; its numbers mean nothing).
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import subprocess
import sys
import time
import traceback
import warnings

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--budget", type=float, default=None,
                    help="seconds for the whole run (default 285; --tiny: none): what would end after it is "
                         "skipped, a section still running then is stopped")
parser.add_argument("--sections", nargs="+", default=["elementwise", "gemm", "mlp", "resnet", "amp", "int8"],
                    choices=["elementwise", "gemm", "mlp", "resnet", "amp", "int8"])
parser.add_argument("--tiny", action="store_true",
                    help="tiny sizes on the CPU under TRITON_INTERPRET=1: checks the script, measures nothing")
parser.add_argument("--no-torch-compile", dest="torch_compile", action="store_false",
                    help="leave torch.compile out (it needs a C++ compiler on the CPU)")
parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)  # run the sections here
args = parser.parse_args()
if args.tiny:
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported: @triton.jit reads it then
    # numpy's warnings for the lanes a kernel computes and masks off (as in the tests)
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="triton.runtime.interpreter")

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lezero as lz  # noqa: E402
from lezero.runtime import devices  # noqa: E402
from workloads import gelu_function  # noqa: E402

START = time.perf_counter()
TINY = args.tiny
args.budget = args.budget if args.budget is not None else float("inf") if TINY else 285.0
if not TINY and devices.interpreter_mode():
    sys.exit("benchmarks/gpu.py: TRITON_INTERPRET=1 would run the full sizes in Triton's interpreter; "
             "unset it to measure the GPU, or pass --tiny to check the script at tiny sizes")
try:
    devices.require_device("cuda")
except devices.DeviceError as e:
    sys.exit(f"benchmarks/gpu.py measures a CUDA GPU: {e}. (--tiny runs the script on the CPU under "
             "TRITON_INTERPRET=1 at tiny sizes, to check it)")
DEVICE = devices.torch_device(devices.device("cuda"))  # the CPU under the interpreter

# Sizes: (the real run, --tiny).
ELEMENTWISE = (8192, 8192) if not TINY else (16, 32)
GEMM_SIZES = (4096, 8192) if not TINY else (16, 32)
MLP_BATCH = 4096 if not TINY else 8
RESNET = (32, 224) if not TINY else (1, 32)   # batch, image side
# ResNet-50's stem width and bottleneck blocks per stage; --tiny: a narrow net with one block per stage
# (the same modules and code paths: stem, downsampling and identity blocks, pooling, head)
RESNET_LAYOUT = (64, (3, 4, 6, 3), 1000) if not TINY else (4, (1, 1, 1, 1), 10)  # width, blocks, classes
TRANSFORMER = (32, 256, 512, 8, 6) if not TINY else (2, 8, 16, 2, 1)  # batch, sequence, d_model, heads, layers
INT8_GEMM_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192), (4096, 768, 3072), (4096, 3072, 768)) if not TINY \
    else ((32, 64, 48),)  # m, k, n


# --- timing -----------------------------------------------------------------------------------------------

def device_seconds(fn, rounds: int = 5, min_round: float = 0.02) -> float:
    """The best over ``rounds`` of the mean time of ``fn()`` in a round of back-to-back calls, on CUDA
    events (wall clock on the CPU); two warm-up calls first.  A round repeats ``fn`` until it lasts
    about ``min_round`` seconds, so launch gaps of very short calls are averaged.  --tiny: one call
    of one round, after one warm-up (the interpreter is slow and the number means nothing)."""
    if TINY:
        fn()
        rounds, inner = 1, 1
    else:
        for _ in range(2):
            fn()
        synchronize()
        start = time.perf_counter()
        fn()
        synchronize()
        inner = max(1, min(1000, int(min_round / max(time.perf_counter() - start, 1e-6))))
    best = float("inf")
    for _ in range(rounds):
        if DEVICE.type == "cuda":
            begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            begin.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            seconds = begin.elapsed_time(end) / 1e3
        else:
            begin = time.perf_counter()
            for _ in range(inner):
                fn()
            seconds = time.perf_counter() - begin
        best = min(best, seconds / inner)
    return best


def synchronize() -> None:
    if DEVICE.type == "cuda":
        torch.cuda.synchronize()


def report(title: str, unit: str, rates: dict, note: str = "") -> None:
    """One line per implementation: its rate and lezero's rate over it."""
    print(f"  {title}")
    mine = rates.get("lezero")
    for name, rate in rates.items():
        ratio = f"  lezero / {name}: {mine / rate:5.2f}x" if mine and name != "lezero" else ""
        print(f"    {name:22s} {rate:10.4g} {unit}{ratio}")
    if note:
        print(f"    ({note})")


def check_close(what: str, got, want, tolerance: float) -> None:
    """The benchmarked results must agree before their times mean anything: the largest difference,
    relative to the largest magnitude of torch's result, within ``tolerance``."""
    got, want = got.double().cpu(), want.double().cpu()
    error = ((got - want).abs().max() / want.abs().max().clamp_min(1e-30)).item()
    if not error <= tolerance:
        raise AssertionError(f"{what}: lezero and torch disagree: max difference {error:.3g} of the largest value")


@contextlib.contextmanager
def torch_tf32(allowed: bool):
    """torch's matmuls and convolutions with TF32 allowed or not (by default cuBLAS matmuls do not
    use it and cuDNN convolutions do); not allowed, torch computes the float32 numbers that
    lezero's float32 kernels compute."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def lezero_runner(text: str, shapes):
    """``lezero.compile(text, target="cuda")``'s lean runner for these argument shapes."""
    return lz.compile(text, target="cuda").runner([tuple(s) for s in shapes])


# --- 1. fused elementwise ---------------------------------------------------------------------------------

def bench_elementwise() -> None:
    rows, cols = ELEMENTWISE
    x = torch.randn(rows, cols, device=DEVICE)
    a = torch.rand(cols, device=DEVICE) + 0.5
    b = torch.rand(cols, device=DEVICE) - 0.5
    run = lezero_runner(gelu_function(rows, cols), [x.shape, a.shape, b.shape])

    def eager(x, a, b):
        return torch.nn.functional.gelu(x * a + b)

    check_close("gelu(x * a + b)", run([x, a, b])[0], eager(x, a, b), 1e-5)
    moved = (2 * rows * cols + 2 * cols) * 4   # read x, a, b once, write the result
    rates = {"lezero": moved / device_seconds(lambda: run([x, a, b])) / 1e9,
             "torch eager": moved / device_seconds(lambda: eager(x, a, b)) / 1e9}
    if args.torch_compile:
        compiled = torch.compile(eager)
        rates["torch.compile"] = moved / device_seconds(lambda: compiled(x, a, b)) / 1e9
    report(f"gelu(x * a + b), x {rows}x{cols} float32, exact gelu", "GB/s", rates,
           "torch eager runs three kernels (mul, add, gelu); lezero and torch.compile one")


# --- 2. GEMM ----------------------------------------------------------------------------------------------

def matmul_function(n: int, element: str) -> str:
    t = f"tensor<{n}x{n}x{element}>"
    return (f'func.func @f(%a: {t}, %b: {t}) -> {t} {{\n  %0 = "lz.matmul"(%a, %b) : ({t}, {t}) -> {t}\n'
            f'  func.return %0 : {t}\n}}')


def bench_gemm() -> None:
    for n in GEMM_SIZES:
        if over_budget(f"GEMM {n}"):
            return
        flops = 2 * n ** 3
        a32, b32 = torch.randn(n, n, device=DEVICE), torch.randn(n, n, device=DEVICE)
        run = lezero_runner(matmul_function(n, "f32"), [a32.shape, b32.shape])
        with torch_tf32(False):
            check_close(f"float32 GEMM {n}", run([a32, b32])[0], a32 @ b32, 1e-4)
        rates = {"lezero": flops / device_seconds(lambda: run([a32, b32])) / 1e12}
        for allowed, name in ((False, "torch.matmul fp32"), (True, "torch.matmul tf32")):
            with torch_tf32(allowed):
                rates[name] = flops / device_seconds(lambda: torch.matmul(a32, b32)) / 1e12
        report(f"GEMM {n}x{n}x{n} float32", "TFLOP/s", rates,
               "lezero: tl.dot with input_precision=\"ieee\", true float32 products as the reference "
               "computes them (no tensor cores); torch fp32 is the same contract, tf32 the fast one")

        # bf16: both read torch.bfloat16 tensors (lezero's device storage of bf16)
        a16, b16 = a32.to(torch.bfloat16), b32.to(torch.bfloat16)
        run = lezero_runner(matmul_function(n, "bf16"), [a16.shape, b16.shape])
        check_close(f"bf16 GEMM {n}", run([a16, b16])[0], a16 @ b16, 2e-2)
        rates = {"lezero": flops / device_seconds(lambda: run([a16, b16])) / 1e12,
                 "torch.matmul bf16": flops / device_seconds(lambda: torch.matmul(a16, b16)) / 1e12}
        report(f"GEMM {n}x{n}x{n} bf16", "TFLOP/s", rates,
               "both read 16-bit bf16 tiles and sum in float32 (lezero: tl.dot of bf16 tiles on the tensor "
               "cores; under the interpreter widened to float32)")


# --- 3. SimpleMLP -----------------------------------------------------------------------------------------

def simple_mlp(nn):
    """examples/train_mlp.py's SimpleMLP, built from ``nn``: ``lz.nn`` or ``torch.nn``."""

    class SimpleMLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(784, 256)
            self.fc2 = nn.Linear(256, 10)

        def forward(self, x):
            return self.fc2(nn.functional.relu(self.fc1(x)))

    return SimpleMLP()


def twins(build):
    """``build(lz.nn)`` (seeded) and ``build(torch.nn)`` holding its weights, on the device."""
    lz.manual_seed(0)
    lz_model = build(lz.nn)
    state = {k: torch.from_numpy(np.array(v.detach().numpy())) for k, v in lz_model.state_dict().items()}
    torch_model = build(torch.nn)
    torch_model.load_state_dict(state)
    return lz_model, torch_model.to(DEVICE)


def forward_runner(lz_model, example):
    """The traced forward of ``lz_model`` compiled for cuda: ``run(x)`` on a device tensor, the
    weights bound once as device tensors."""
    traced = lz.jit.trace(lz_model, example_inputs=lz.from_numpy(example))
    weights = [torch.from_numpy(np.array(t.detach().numpy())).to(DEVICE) for _, t in traced.named_tensors]
    runner = lz.compile(traced.module, traced.entry, target="cuda").runner(
        [example.shape] + [tuple(w.shape) for w in weights])
    return lambda x: runner([x] + weights)[0]


def compare_forward(title: str, build, x_np, tolerance: float, torch_compile_seconds: float,
                    note: str = "") -> None:
    """Samples per second of the forward pass: lezero's compiled trace, torch eager, torch.compile
    (skipped when its expected compile time, ``torch_compile_seconds``, would pass the budget)."""
    lz_model, torch_model = twins(build)
    x = torch.from_numpy(x_np).to(DEVICE)
    start = time.perf_counter()
    run = forward_runner(lz_model, x_np)
    out = run(x)
    synchronize()
    compile_seconds = time.perf_counter() - start
    batch = x_np.shape[0]
    with torch.no_grad():
        with torch_tf32(False):
            check_close(title, out, torch_model(x), tolerance)
        rates = {"lezero": batch / device_seconds(lambda: run(x)),
                 "torch eager": batch / device_seconds(lambda: torch_model(x))}
        if args.torch_compile and not over_budget(f"{title} forward, torch.compile", torch_compile_seconds):
            compiled = torch.compile(torch_model)
            rates["torch.compile"] = batch / device_seconds(lambda: compiled(x))
    report(f"{title} forward, batch {batch}", "samples/s", rates,
           f"lezero trace + compile + first run: {compile_seconds:.1f} s{note}")


def lezero_train_step(lz_model, optimizer, x_np, y_np, low: str | None = None):
    """``lz.jit.compile_train_step`` for the model moved to cuda (made inside ``lz.autocast("cuda",
    dtype=low)`` when ``low`` names a dtype: a mixed-precision step); returns ``step()``, the first
    step's loss and the seconds its compilation and the first step took."""
    lz_model.to("cuda")
    data, target = lz.from_numpy(x_np).to("cuda"), lz.from_numpy(y_np).to("cuda")
    start = time.perf_counter()
    with lz.autocast("cuda", dtype=getattr(lz, low or "float16"), enabled=low is not None):
        step = lz.jit.compile_train_step(lz_model, lz.nn.CrossEntropyLoss(), optimizer, data, target)
    loss = step(data, target).item()
    return step, (lambda: step(data, target)), loss, time.perf_counter() - start


def bytes_moved(step) -> tuple[float, int]:
    """(MB the compiled ``step``'s kernels read and write, number of kernels): each launch's operands
    and results once, in the storage of the memory it runs in (``memory_plan.element_bytes``: a bf16
    element is 2 bytes on the GPU)."""
    from lezero.ir.types import TensorType
    from lezero.passes.memory_plan import element_bytes
    compiled, _ = next(iter(step._steps.values()))
    plan = compiled.plan_for([tuple(a.type.shape) for a in compiled.func.arguments]).plan
    total, kernels = 0, 0
    for launch in plan.launches:
        if getattr(launch, "kernel", None) is None:  # transfers and host steps are not kernels
            continue
        kernels += 1
        total += sum(math.prod(v.type.shape) * element_bytes(v.type, launch.device)
                     for v in (*launch.op.operands, *launch.op.results) if isinstance(v.type, TensorType))
    return total / 1e6, kernels


def torch_train_step(torch_model, optimizer, x_np, y_np, low: str | None = None):
    x, y = torch.from_numpy(x_np).to(DEVICE), torch.from_numpy(y_np).to(DEVICE)
    criterion = torch.nn.CrossEntropyLoss()

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(DEVICE.type, dtype=getattr(torch, low or "float16"), enabled=low is not None):
            loss = criterion(torch_model(x), y)
        loss.backward()
        optimizer.step()
        return loss
    return step


def compare_train_step(title: str, build, optimizer: str, options: dict, x_np, y_np, tolerance: float,
                       torch_compile_seconds: float, note: str = "", low: str | None = None) -> None:
    """Training steps per second: lezero's compiled step, torch eager, and torch.compile of the same
    step function, each on fresh twins (the same initial weights; no state shared between runs);
    ``optimizer`` names the class in ``lz.optim`` and ``torch.optim``, built with ``options``.  The
    first steps' losses (same weights, same batch) must agree within ``tolerance``, relatively.
    ``low`` ("bfloat16"): every step runs inside its framework's autocast with that dtype.  Returns
    the rates and lezero's step's (MB moved, kernels)."""
    lz_model, _ = twins(build)
    compiled_step, lz_step, lz_loss, compile_seconds = lezero_train_step(
        lz_model, getattr(lz.optim, optimizer)(lz_model.parameters(), **options), x_np, y_np, low)
    rates = {"lezero": 1 / device_seconds(lz_step, rounds=3)}
    moved = bytes_moved(compiled_step)
    del lz_step, compiled_step, lz_model
    for name in ("torch eager", "torch.compile"):
        if name == "torch.compile" and (not args.torch_compile or
                                        over_budget(f"{title} torch.compile", torch_compile_seconds)):
            continue
        _, torch_model = twins(build)
        step = torch_train_step(torch_model, getattr(torch.optim, optimizer)(torch_model.parameters(), **options),
                                x_np, y_np, low)
        step = step if name == "torch eager" else torch.compile(step)
        check_close(f"{title}: the first step's loss, {name}", torch.tensor(lz_loss), step().detach(), tolerance)
        rates[name] = 1 / device_seconds(step, rounds=3)
    report(f"{title} training step, batch {x_np.shape[0]}", "steps/s", rates,
           f"lezero compile + first step: {compile_seconds:.1f} s; its kernels move {moved[0]:.1f} MB "
           f"({moved[1]} kernels){note}")
    return rates, moved


def bench_mlp() -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((MLP_BATCH, 784)).astype(np.float32)
    y = rng.integers(0, 10, MLP_BATCH)
    compare_forward("SimpleMLP", simple_mlp, x, 1e-2, torch_compile_seconds=20)
    if not over_budget("SimpleMLP training step", needs=10):
        compare_train_step("SimpleMLP (cross-entropy, Adam)", simple_mlp, "Adam", {}, x, y, 1e-4,
                           torch_compile_seconds=40)


# --- 4. ResNet-50 -----------------------------------------------------------------------------------------

def resnet50(nn):
    """ResNet-50 (torchvision's layout: bottleneck blocks 3, 4, 6, 3, the stride on the 3x3
    convolution) built from ``nn``: ``lz.nn`` or ``torch.nn``, which share these modules and their
    parameter names.  In eval mode: BatchNorm uses its running statistics.  ``RESNET_LAYOUT``'s width
    and blocks (--tiny: width 4, one block per stage, 10 classes)."""
    width, blocks, num_classes = RESNET_LAYOUT

    class Bottleneck(nn.Module):
        def __init__(self, inplanes: int, planes: int, stride: int, downsample):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU()
            self.downsample = downsample

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            return self.relu(self.bn3(self.conv3(out)) + identity)

    def layer(inplanes: int, planes: int, blocks: int, stride: int):
        downsample = None
        if stride != 1 or inplanes != planes * 4:
            downsample = nn.Sequential(nn.Conv2d(inplanes, planes * 4, 1, stride=stride, bias=False),
                                       nn.BatchNorm2d(planes * 4))
        return nn.Sequential(Bottleneck(inplanes, planes, stride, downsample),
                             *[Bottleneck(planes * 4, planes, 1, None) for _ in range(blocks - 1)])

    w = width
    model = nn.Sequential(nn.Conv2d(3, w, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(w), nn.ReLU(),
                          nn.MaxPool2d(3, stride=2, padding=1),
                          layer(w, w, blocks[0], 1), layer(4 * w, 2 * w, blocks[1], 2),
                          layer(8 * w, 4 * w, blocks[2], 2), layer(16 * w, 8 * w, blocks[3], 2),
                          nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(32 * w, num_classes))
    return model.eval()


def bench_resnet() -> None:
    batch, side = RESNET
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 3, side, side)).astype(np.float32)
    y = rng.integers(0, RESNET_LAYOUT[2], batch)
    precision = "; torch runs its default, TF32 in cuDNN's convolutions; lezero's are float32"
    compare_forward("ResNet-50", resnet50, x, 2e-2, torch_compile_seconds=60, note=precision)
    if not over_budget("ResNet-50 training step", needs=60):
        compare_train_step("ResNet-50 (cross-entropy, SGD with momentum, BatchNorm in eval mode)", resnet50,
                           "SGD", {"lr": 0.01, "momentum": 0.9}, x, y, 1e-2, torch_compile_seconds=120,
                           note=precision)


# --- 5. mixed precision (issue 13) ----------------------------------------------------------------------

def transformer(nn):
    """A transformer encoder classifier (pre-norm layers, GELU, mean over the sequence, a linear head)
    built from ``nn``: ``lz.nn`` or ``torch.nn``, which share these modules and parameter names."""
    d_model, heads, layers = TRANSFORMER[2:]

    class Classifier(nn.Module):
        def __init__(self):
            super().__init__()
            layer = nn.TransformerEncoderLayer(d_model, heads, dim_feedforward=4 * d_model, dropout=0.0,
                                               activation="gelu", batch_first=True, norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers)
            self.head = nn.Linear(d_model, 10)

        def forward(self, x):
            return self.head(self.encoder(x).mean(1))

    return Classifier()


def bench_amp() -> None:
    """ResNet-50 and a transformer encoder, each training step in float32 and inside autocast(bfloat16):
    lezero's compiled step (the autocast pass on its traced forward, before the gradient) against torch
    eager and torch.compile (inside torch.autocast for bf16).  Per model a summary line: lezero's bf16
    step over its float32 step (goal: at least 2x), over torch.compile's and torch eager's in autocast
    (goal: not slower than torch.compile), and the bytes lezero's steps move."""
    rng = np.random.default_rng(0)
    batch, side = RESNET
    x = rng.standard_normal((batch, 3, side, side)).astype(np.float32)
    y = rng.integers(0, RESNET_LAYOUT[2], batch)
    # float32: torch's cuDNN convolutions run TF32 by default, lezero's float32 (hence the tolerance)
    amp_pair("ResNet-50 (cross-entropy, SGD with momentum, BatchNorm in eval mode)", resnet50, "SGD",
             {"lr": 0.01, "momentum": 0.9}, x, y, tolerances=(1e-2, 3e-2), compile_seconds=(120, 150), needs=60)
    batch, sequence, d_model = TRANSFORMER[:3]
    x = rng.standard_normal((batch, sequence, d_model)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    amp_pair(f"transformer encoder ({TRANSFORMER[4]} layers, d_model {d_model}, {sequence} tokens) "
             "(cross-entropy, AdamW)", transformer, "AdamW", {"lr": 1e-4}, x, y, tolerances=(1e-3, 3e-2),
             compile_seconds=(90, 90), needs=30)


def amp_pair(title: str, build, optimizer: str, options: dict, x_np, y_np, tolerances, compile_seconds,
             needs: float) -> None:
    """``title``'s training step in float32 and in autocast(bf16) (``compare_train_step`` each, with
    ``tolerances`` and torch.compile's expected ``compile_seconds`` per precision), then the summary."""
    note = "; lezero's bf16 tensors are 16-bit storage on the GPU: its bf16 matmuls run on bf16 tensor cores"
    measured = {}
    for low, tolerance, seconds in zip((None, "bfloat16"), tolerances, compile_seconds):
        precision = "autocast(bf16)" if low else "float32"
        if over_budget(f"{title} {precision} training step", needs=needs):
            continue
        measured[precision] = compare_train_step(f"{title} {precision}", build, optimizer, options, x_np, y_np,
                                                 tolerance, torch_compile_seconds=seconds,
                                                 note=note if low else "", low=low)
    if "autocast(bf16)" not in measured:
        print(f"  summary {title}: the bf16 step was not measured")
        return
    rates, (mb, kernels) = measured["autocast(bf16)"]
    mine = rates["lezero"]
    parts = [f"{name} autocast {mine / rate:.2f}x" + (" (goal >= 1)" if name == "torch.compile" else "")
             for name, rate in rates.items() if name != "lezero"]
    if "float32" in measured:
        (f32_rates, (f32_mb, f32_kernels)) = measured["float32"]
        parts.insert(0, f"lezero float32 {mine / f32_rates['lezero']:.2f}x (goal >= 2)")
        parts.append(f"MB moved float32 {f32_mb:.1f} ({f32_kernels} kernels) -> bf16 {mb:.1f} ({kernels} kernels)")
    else:
        parts.append(f"MB moved bf16 {mb:.1f} ({kernels} kernels); the float32 step was not measured")
    print(f"  summary {title}: lezero bf16 step's rate over " + "; ".join(parts) +
          ("" if "torch.compile" in rates else "; torch.compile not measured"))


# --- 6. int8 GEMM (issue 12) ----------------------------------------------------------------------------

def matmul_integer_function(m: int, k: int, n: int, a_type: str, b_type: str, dequantize: bool) -> str:
    """``lz.matmul_integer`` of an ``m x k`` by ``k x n`` (a per-tensor, b per-column zero point); with
    ``dequantize`` its epilogue ``cast(f32) * scale + bias`` (per column), as lezero.quantization's Linear
    and fold-qdq make it."""
    a, b, y = f"tensor<{m}x{k}x{a_type}>", f"tensor<{k}x{n}x{b_type}>", f"tensor<{m}x{n}xi32>"
    v, f = f"tensor<{n}xf32>", f"tensor<{m}x{n}xf32>"
    zeros = f"%za: tensor<{a_type}>, %zb: tensor<{n}x{b_type}>"
    product = (f'  %0 = "lz.matmul_integer"(%a, %b, %za, %zb) : ({a}, {b}, tensor<{a_type}>, '
               f'tensor<{n}x{b_type}>) -> {y}\n')
    if not dequantize:
        return f"func.func @f(%a: {a}, %b: {b}, {zeros}) -> {y} {{\n{product}  func.return %0 : {y}\n}}"
    return (f"func.func @f(%a: {a}, %b: {b}, {zeros}, %s: {v}, %bias: {v}) -> {f} {{\n{product}"
            f'  %1 = "lz.cast"(%0) {{to = f32}} : ({y}) -> {f}\n'
            f'  %2 = "lz.mul"(%1, %s) : ({f}, {v}) -> {f}\n'
            f'  %3 = "lz.add"(%2, %bias) : ({f}, {v}) -> {f}\n'
            f"  func.return %3 : {f}\n}}")


def bench_int8() -> None:
    """lezero's int8 GEMM against torch._int_mm (cuBLASLt), which takes s8 x s8 with no zero points: the
    bare rows time lezero s8 x s8 with zero points 0 (the same numbers; lezero still sums the tiles' rows
    and columns for the corrections) and u8 x s8 with a per-column weight zero point (ORT's
    quantize_dynamic contract); the dequantized rows the same GEMM with its float epilogue fused."""
    for m, k, n in INT8_GEMM_SHAPES:
        if over_budget(f"int8 GEMM {m}x{k}x{n}", needs=20):
            return
        ops = 2 * m * k * n
        a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device=DEVICE)
        b = torch.randint(-128, 128, (k, n), dtype=torch.int8, device=DEVICE)
        za, zb = torch.zeros((), dtype=torch.int8, device=DEVICE), torch.zeros(n, dtype=torch.int8, device=DEVICE)
        want = torch._int_mm(a, b)
        run = lezero_runner(matmul_integer_function(m, k, n, "i8", "i8", False), [a.shape, b.shape, (), (n,)])
        got = run([a, b, za, zb])[0]
        if not torch.equal(got.cpu(), want.cpu()):
            raise AssertionError(f"int8 GEMM {m}x{k}x{n}: lezero and torch._int_mm differ")
        rates = {"lezero": ops / device_seconds(lambda: run([a, b, za, zb])) / 1e12}
        au = (a.to(torch.int16) + 128).to(torch.uint8)  # the same values less a zero point of 128
        zau = torch.full((), 128, dtype=torch.uint8, device=DEVICE)
        run_u8 = lezero_runner(matmul_integer_function(m, k, n, "ui8", "i8", False), [au.shape, b.shape, (), (n,)])
        if not torch.equal(run_u8([au, b, zau, zb])[0].cpu(), want.cpu()):
            raise AssertionError(f"int8 GEMM {m}x{k}x{n}: lezero u8 x s8 less its zero point differs")
        rates["lezero u8xs8 zero pts"] = ops / device_seconds(lambda: run_u8([au, b, zau, zb])) / 1e12
        rates["torch._int_mm"] = ops / device_seconds(lambda: torch._int_mm(a, b)) / 1e12
        report(f"int8 GEMM {m}x{k}x{n}, i32 out", "TOP/s", rates,
               "lezero: s8 x s8, zero points 0; u8xs8: a per-tensor and a per-column zero point (Triton tl.dot "
               "on int8 tiles, int32 accumulator, the row/column sums for the zero points in the same loop); "
               "torch._int_mm: cuBLASLt s8 x s8 -> s32, no zero points")

        scale = torch.rand(n, device=DEVICE) * 1e-3
        bias = torch.randn(n, device=DEVICE)
        run_f = lezero_runner(matmul_integer_function(m, k, n, "ui8", "i8", True),
                              [au.shape, b.shape, (), (n,), (n,), (n,)])

        def eager():
            return torch._int_mm(a, b).float() * scale + bias

        check_close(f"int8 GEMM {m}x{k}x{n} dequantized", run_f([au, b, zau, zb, scale, bias])[0], eager(), 1e-6)
        rates = {"lezero": ops / device_seconds(lambda: run_f([au, b, zau, zb, scale, bias])) / 1e12,
                 "torch eager": ops / device_seconds(eager) / 1e12}
        if args.torch_compile and not over_budget(f"int8 GEMM {m}x{k}x{n} torch.compile", 30):
            compiled = torch.compile(eager)
            rates["torch.compile"] = ops / device_seconds(compiled) / 1e12
        report(f"int8 GEMM {m}x{k}x{n} + cast * scale + bias, f32 out", "TOP/s", rates,
               "lezero: one kernel, the epilogue on the int32 tile; torch eager: _int_mm, then three "
               "elementwise kernels")


# --- driver -----------------------------------------------------------------------------------------------

def over_budget(what: str, needs: float = 0.0) -> bool:
    """Whether ``what``, expected to take ``needs`` seconds, would end past the budget (then it is
    skipped, and says so)."""
    spent = time.perf_counter() - START
    if spent + needs > args.budget:
        print(f"  skipped {what}: {spent:.0f} s spent, ~{needs:.0f} s more needed, {args.budget:.0f} s budget")
        return True
    return False


SECTIONS = {"elementwise": bench_elementwise, "gemm": bench_gemm, "mlp": bench_mlp, "resnet": bench_resnet,
            "amp": bench_amp, "int8": bench_int8}


def run_sections(sections) -> list:
    """Run ``sections`` here, one after the other; returns the names of those that failed."""
    failed = []
    for section in sections:
        try:
            SECTIONS[section]()
        except Exception:  # noqa: BLE001 - report the section's failure and run the next one
            failed.append(section)
            print(f"  {section} failed:\n" + "".join("    " + line for line in
                                                     traceback.format_exc().splitlines(True)[-12:]))
        sys.stdout.flush()
    return failed


def main() -> int:
    """Each section in a process of its own, stopped when the budget runs out (a cold compile can
    take long: so the whole run keeps to the budget), which also frees the GPU between sections."""
    if args.child:
        return 1 if run_sections(args.sections) else 0
    name = torch.cuda.get_device_name() if DEVICE.type == "cuda" else "the CPU (Triton interpreter, --tiny)"
    print(f"lezero (target cuda) vs torch {torch.__version__} on {name}", flush=True)
    failed = []
    for section in args.sections:
        print(f"\n[{section}]", flush=True)
        left = args.budget - (time.perf_counter() - START)
        if over_budget(section, needs=10):
            continue
        command = [sys.executable, "-u", os.path.abspath(__file__), "--child", "--sections", section,
                   "--budget", str(left)] + (["--tiny"] if TINY else []) + \
            ([] if args.torch_compile else ["--no-torch-compile"])
        try:
            done = subprocess.run(command, timeout=None if math.isinf(left) else left)
            if done.returncode:
                failed.append(section)
        except subprocess.TimeoutExpired:
            failed.append(section)
            print(f"  {section} stopped: the {args.budget:.0f} s budget ran out", flush=True)
    print(f"\ntotal {time.perf_counter() - START:.0f} s" + (f"; failed: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
