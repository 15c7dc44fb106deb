"""Compile time, cold (an empty kernel cache) and warm (the same cache, a fresh process).

Two parts, each program or model compiled twice in fresh processes (``LEZERO_NUM_THREADS=2``),
first with an empty ``LEZERO_CACHE_DIR`` (cold), then with the same directory (warm):

- **programs**: the seed's MLP (with softmax) and a transformer-style block, per kernel;
- **models** (``model_zoo.py``'s: by default the light ResNet-50 and the torchvision resnet18,
  mobilenet_v2 and efficientnet_b0, exported on first use): compile time is
  ``lezero.onnx.compile`` to the end of the first run, less one steady-state run, split into
  ONNX import, passes and planning (the rest), lowering to LLVM IR, waiting for LLVM (it compiles
  in the background while the rest lower) and loading the code; the kernels of the plan, how many
  were lowered (identical ones are lowered once) and compiled (a warm start lowers and compiles
  none, unless lezero's sources changed in between: its cache keys hold their fingerprint); and
  the CPU seconds of the compile (the process's after its imports: ``CPU s``, which counts the
  first run too) and of its compiler processes (this machine is shared: CPU time says what wall
  time cannot).

    .venv/bin/python benchmarks/compile_time.py [model or suite ...]
    .venv/bin/python benchmarks/compile_time.py --before ../old-checkout [model or suite ...]

A suite name (``light``: the nine ONNX light models, ``torchvision``, ``transformers``, ``all``)
stands for its models (issue 11's must-show: cold and warm for all of them).  ``--before TREE``
(another checkout of lezero) compares the two: per model cold in that tree, cold in this one,
then warm in each, each tree with its own cache directory, so that both see the same load; it
prints the wall seconds, the CPU seconds of the compile (the process's after its imports, and its
compiler processes') and the load average next to each row.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import model_zoo  # noqa: E402
from onnx_models import cpu_model  # noqa: E402

THREADS = 2
DEFAULT_MODELS = ("light_resnet50", "resnet18", "mobilenet_v2", "efficientnet_b0")

PROGRAMS = {
    "mlp": ("""
func.func @f(%x: tensor<64x784xf32>, %w1: tensor<784x256xf32>, %b1: tensor<256xf32>,
             %w2: tensor<256x10xf32>, %b2: tensor<10xf32>) -> tensor<64x10xf32> {
  %0 = "lz.matmul"(%x, %w1) : (tensor<64x784xf32>, tensor<784x256xf32>) -> tensor<64x256xf32>
  %1 = "lz.add"(%0, %b1) : (tensor<64x256xf32>, tensor<256xf32>) -> tensor<64x256xf32>
  %2 = "lz.relu"(%1) : (tensor<64x256xf32>) -> tensor<64x256xf32>
  %3 = "lz.matmul"(%2, %w2) : (tensor<64x256xf32>, tensor<256x10xf32>) -> tensor<64x10xf32>
  %4 = "lz.add"(%3, %b2) : (tensor<64x10xf32>, tensor<10xf32>) -> tensor<64x10xf32>
  %5 = "lz.softmax"(%4) {axis = -1 : i64} : (tensor<64x10xf32>) -> tensor<64x10xf32>
  func.return %5 : tensor<64x10xf32>
}""", [(64, 784), (784, 256), (256,), (256, 10), (10,)]),
    "block": ("""
func.func @f(%x: tensor<128x256xf32>, %w: tensor<256x256xf32>, %g: tensor<256xf32>, %b: tensor<256xf32>) -> tensor<128x256xf32> {
  %0 = "lz.layer_norm"(%x, %g, %b) {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<128x256xf32>, tensor<256xf32>, tensor<256xf32>) -> tensor<128x256xf32>
  %1 = "lz.matmul"(%0, %w) : (tensor<128x256xf32>, tensor<256x256xf32>) -> tensor<128x256xf32>
  %2 = "lz.gelu"(%1) : (tensor<128x256xf32>) -> tensor<128x256xf32>
  %3 = "lz.add"(%2, %x) : (tensor<128x256xf32>, tensor<128x256xf32>) -> tensor<128x256xf32>
  %4 = "lz.softmax"(%3) {axis = -1 : i64} : (tensor<128x256xf32>) -> tensor<128x256xf32>
  func.return %4 : tensor<128x256xf32>
}""", [(128, 256), (256, 256), (256,), (256,)]),
}

# Shared by both children: the cache's counters and the CPU time of this process and of its
# compiler processes (closed first, so that their time is counted).
REPORT = r"""
import resource
from lezero.codegen.llvm.target import cpu_target
from lezero.runtime.kernel_cache import default_cache
from lezero.runtime.kernel_compiler import compiler_for
for process in compiler_for(cpu_target()).processes:
    process.stdin.close()
    process.wait()
me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
s = default_cache().stats
result.update({"kernels": s.memory_hits + s.disk_hits + s.lowerings, "lowered": s.lowerings,
               "compiled": s.compiles, "lower_s": s.lower_seconds, "llvm_wait_s": s.compile_seconds,
               "load_s": s.load_seconds, "cpu_s": me.ru_utime + me.ru_stime,
               "compiler_cpu_s": children.ru_utime + children.ru_stime})
print(json.dumps(result))
"""

PROGRAM_CHILD = r"""
import json, sys, time
import numpy as np
import lezero
text, shapes = json.loads(sys.argv[1])
start = time.perf_counter()
f = lezero.compile(text)
f(*[np.ones(s, np.float32) for s in shapes])
result = {"total": time.perf_counter() - start}
""" + REPORT

MODEL_CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[2])
import onnx
import lezero.onnx
from model_zoo import MODELS
bench = MODELS[sys.argv[1]]
feeds = bench.feeds(onnx.load(bench.path, load_external_data=False))
import resource
usage = resource.getrusage(resource.RUSAGE_SELF)
cpu_before = usage.ru_utime + usage.ru_stime  # the interpreter's start and the imports
start = time.perf_counter()
compiled = lezero.onnx.compile(bench.path, upgrade_opset=bench.upgrade_opset)
imported = time.perf_counter() - start
compiled.run(feeds)
first = time.perf_counter() - start
start = time.perf_counter()
compiled.run(feeds)
result = {"import_s": imported, "total": first - (time.perf_counter() - start), "cpu_before": cpu_before}
""" + REPORT


def child(code: str, args: list, cache_dir: str, tree: str | None = None) -> dict:
    """``code`` run in a fresh process with the kernel cache ``cache_dir``, lezero imported from
    ``tree`` (a checkout) when given."""
    env = dict(os.environ, LEZERO_CACHE_DIR=cache_dir, LEZERO_NUM_THREADS=str(THREADS))
    if tree is not None:
        env["PYTHONPATH"] = os.path.abspath(tree)
    done = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"a compile-time child failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def cold_and_warm(code: str, args: list) -> tuple[dict, dict]:
    with tempfile.TemporaryDirectory(prefix="lezero-compile-time-") as cache_dir:
        cold = child(code, args, cache_dir)
        warm = child(code, args, cache_dir)
    return cold, warm


def programs() -> None:
    print(f"{'program':8} {'kernels':>7} {'cold: LLVM ms/kernel':>21} {'warm: load ms/kernel':>21} "
          f"{'cold first call s':>18} {'warm first call s':>18}")
    for name, program in PROGRAMS.items():
        cold, warm = cold_and_warm(PROGRAM_CHILD, [json.dumps(program)])
        n = cold["kernels"]
        print(f"{name:8} {n:7d} {1e3 * cold['llvm_wait_s'] / n:21.1f} {1e3 * warm['load_s'] / n:21.2f} "
              f"{cold['total']:18.3f} {warm['total']:18.3f}")


def models(names) -> None:
    header = (f"{'model':16} {'':5} {'compile s':>9} {'import':>7} {'passes':>7} {'lower':>6} {'LLVM':>6} "
              f"{'load':>6} {'kernels':>7} {'lowered':>7} {'compiled':>8} {'CPU s':>6} {'+compilers':>10}")
    print(header)
    print("-" * len(header))
    for name in names:
        bench = model_zoo.MODELS[name]
        model_zoo.export(bench)
        for phase, r in zip(("cold", "warm"), cold_and_warm(MODEL_CHILD, [name, HERE])):
            passes = r["total"] - r["import_s"] - r["lower_s"] - r["llvm_wait_s"] - r["load_s"]
            print(f"{name if phase == 'cold' else '':16} {phase:5} {r['total']:9.2f} {r['import_s']:7.2f} "
                  f"{passes:7.2f} {r['lower_s']:6.2f} {r['llvm_wait_s']:6.2f} {r['load_s']:6.2f} "
                  f"{r['kernels']:7d} {r['lowered']:7d} {r['compiled']:8d} {r['cpu_s'] - r['cpu_before']:6.1f} "
                  f"{r['compiler_cpu_s']:10.1f}", flush=True)


def before_and_after(before: str, names) -> None:
    """Each model compiled by the checkout ``before`` and by this one, alternating (module docstring)."""
    print(f"{'model':20} {'':5} {'tree':6} {'compile s':>9} {'CPU s':>6} {'+compilers':>10} {'lowered':>7} "
          f"{'compiled':>8}  load")
    trees = (("before", before), ("after", os.path.dirname(HERE)))
    for name in names:
        bench = model_zoo.MODELS[name]
        model_zoo.export(bench)
        with tempfile.TemporaryDirectory(prefix="lezero-compile-time-") as caches:
            for phase in ("cold", "warm"):
                for tree, root in trees:
                    r = child(MODEL_CHILD, [name, HERE], os.path.join(caches, tree), root)
                    load = open("/proc/loadavg").read().split()[0]
                    print(f"{name:20} {phase:5} {tree:6} {r['total']:9.2f} {r['cpu_s'] - r['cpu_before']:6.2f} "
                          f"{r['compiler_cpu_s']:10.2f} {r['lowered']:7d} {r['compiled']:8d}  {load}", flush=True)


def model_names(args) -> list:
    """``args`` with each suite name (or ``all``) replaced by its models."""
    names = []
    for arg in args:
        suites = model_zoo.SUITES if arg == "all" else (arg,) if arg in model_zoo.SUITES else ()
        names += [m.name for m in model_zoo.MODELS.values() if m.suite in suites] if suites else [arg]
    return names


def main(args) -> None:
    print(f"compile time on {cpu_model()}")
    if args[:1] == ["--before"] and len(args) > 1:
        before_and_after(args[1], model_names(args[2:]) or DEFAULT_MODELS)
        print(f"\nafter: {cpu_model()}")
        return
    programs()
    print()
    models(model_names(args) or DEFAULT_MODELS)
    print(f"\nafter: {cpu_model()}")  # its load average: the machine is shared


if __name__ == "__main__":
    main(sys.argv[1:])
