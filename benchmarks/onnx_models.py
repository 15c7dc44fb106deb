"""Real models compiled by lezero and run next to ONNX Runtime: latency, accuracy, compile time.

    .venv/bin/python benchmarks/onnx_models.py [--suite light|torchvision|transformers|all] [name ...]
    .venv/bin/python benchmarks/onnx_models.py --profile resnet18 [--top 20]

Suites and models are in ``model_zoo.py`` (light: the nine CNNs inside the onnx package;
torchvision: six exports at batch 1; transformers: a small BERT and GPT-2 with dynamic batch and
sequence, run at 1x32 and 4x64 by ONE compiled model).  The torchvision and transformers exports
are built on first use into ``build/bench-models/``; ``make bench-models`` installs what that needs.

Per model, each part in a fresh process with ``LEZERO_NUM_THREADS=2``:

- **compile cold**: an empty ``LEZERO_CACHE_DIR``; **warm**: the same cache dir again.  Compile
  time is ``lezero.onnx.compile`` to the end of the first run, less one steady-state run.  For a
  transformer the second shape's row shows what its first run costs on top of the first shape
  (a compiled model serves every shape; what it compiles again for a new one is this number), and
  says whether the model is imported again per input shape (``shape_specialized``: it takes a
  ``Shape`` of a dynamic dim).
- **latency**: lezero and ONNX Runtime (``intra_op_num_threads=2``, thread spinning off, so that
  an idle ORT thread does not steal a core from lezero's next call) called in turn, one after the
  other, in the warm process; the median of each (this machine is shared); ratio = lezero / ORT.
- **error**: the largest absolute difference from ORT over all outputs, and that divided by the
  largest magnitude of ORT's outputs (relative).

Then the geometric mean of the ratios per suite.  ``--profile MODEL`` runs the model with
``CompiledModel.profile`` (one ``KernelTiming`` per launch, median over several runs) and prints
its top kernels with their achieved GFLOP/s and GB/s against this host's peak, measured first in a
process of its own: the best of lezero's and numpy's 1024^3 float32 matmul (2 threads) and the
better of two bandwidths: a 256 MiB numpy copy (1 thread, bytes read + written) and numpy sums of
its halves on 2 threads (bytes read: a fully connected layer's GEMV only reads).  Then ONNX
Runtime's top nodes from its own profiler (``SessionOptions.enable_profiling``, the same number
of runs in the same process: per-node medians with their op and input shapes), to compare kernel
by kernel.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import model_zoo  # noqa: E402
from model_zoo import MODELS, SUITES  # noqa: E402

THREADS = 2
# Set by OpenBLAS's defaults on some machines here; they slow numpy's GEMM (README.md).
BLAS_ENV_DROPPED = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


# --- the child processes ---------------------------------------------------------------------------

def ort_session(path: str):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def errors(got: list, want: list) -> tuple[float, float]:
    import numpy as np

    worst = max(float(np.max(np.abs(g.astype(np.float64) - w))) for g, w in zip(got, want))
    scale = max(float(np.max(np.abs(w))) for w in want)
    if scale == 0:
        raise RuntimeError("ONNX Runtime's outputs are all zero: comparing them would check nothing")
    return worst, worst / scale


def child_compile_and_measure(name: str, measure: bool, budget: float) -> dict:
    """Compile ``name`` (timing each shape's first run) and, when ``measure``, time it against ORT."""
    import onnx
    from timing import alternating_medians

    import lezero.onnx

    model = MODELS[name]
    proto = onnx.load(model.path, load_external_data=False)
    feeds = [model.feeds(proto, i) for i in range(model.shape_count)]
    start = time.perf_counter()
    compiled = lezero.onnx.compile(model.path, upgrade_opset=model.upgrade_opset)
    shapes = []
    for index, f in enumerate(feeds):
        first_start = time.perf_counter()
        outputs = compiled.run(f)
        first_end = time.perf_counter()
        compiled.run(f)
        steady = time.perf_counter() - first_end
        compile_seconds = first_end - (start if index == 0 else first_start) - steady
        shapes.append({"label": model.shape_label(index), "compile": compile_seconds, "outputs": outputs})
    result = {"shape_specialized": compiled.shape_specialized, "value_inputs": list(compiled.value_inputs)}
    if measure:
        start = time.perf_counter()
        session = ort_session(model.path)
        result["ort_session"] = time.perf_counter() - start
        for s, f in zip(shapes, feeds):
            want = session.run(None, f)
            s["max_abs_err"], s["max_rel_err"] = errors(list(s["outputs"].values()), want)
            times = alternating_medians({"lezero": lambda f=f: compiled.run(f),
                                         "ort": lambda f=f: session.run(None, f)}, budget / len(feeds))
            s.update(times)
    for s in shapes:
        del s["outputs"]
    result["shapes"] = shapes
    return result


def child_peak() -> dict:
    """This host's peak, measured: GEMM GFLOP/s (best of lezero's and numpy's 1024^3 sgemm) and
    memory GB/s (a 256 MiB numpy copy: bytes read + written, one thread)."""
    import numpy as np
    from timing import best_seconds

    import lezero

    n = 1024
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    flops = 2 * n ** 3
    matmul = lezero.compile(f"""
    func.func @mm(%a: tensor<{n}x{n}xf32>, %b: tensor<{n}x{n}xf32>) -> tensor<{n}x{n}xf32> {{
      %0 = "lz.matmul"(%a, %b) : (tensor<{n}x{n}xf32>, tensor<{n}x{n}xf32>) -> tensor<{n}x{n}xf32>
      func.return %0 : tensor<{n}x{n}xf32>
    }}""")
    lezero_gflops = flops / best_seconds(lambda: matmul(a, b), 3.0) / 1e9
    numpy_gflops = flops / best_seconds(lambda: a @ b, 3.0) / 1e9
    src = np.ones(64 << 20, np.float32)
    dst = np.empty_like(src)
    copy_gbs = 2 * src.nbytes / best_seconds(lambda: np.copyto(dst, src), 3.0, 20) / 1e9
    parts = np.array_split(src, THREADS)
    with ThreadPoolExecutor(THREADS) as pool:  # numpy's sum lets go of the GIL
        read_gbs = src.nbytes / best_seconds(lambda: list(pool.map(np.sum, parts)), 3.0, 20) / 1e9
    return {"lezero_gflops": lezero_gflops, "numpy_gflops": numpy_gflops, "copy_gbs": copy_gbs, "read_gbs": read_gbs}


def ort_node_profile(path: str, feeds: dict, runs: int) -> list:
    """ONNX Runtime's own per-node times (its profiler's ``*_kernel_time`` events) over ``runs``
    runs after a warm-up: one row per node, its median, op and input shapes."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = THREADS
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    options.enable_profiling = True
    options.profile_file_prefix = os.path.join(tempfile.gettempdir(), f"lezero-ort-profile-{os.getpid()}")
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    session.run(None, feeds)
    for _ in range(runs):
        session.run(None, feeds)
    trace = session.end_profiling()
    with open(trace) as f:
        events = json.load(f)
    os.remove(trace)
    nodes: dict = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            node = nodes.setdefault(e["name"][:-len("_kernel_time")], {"op": e["args"].get("op_name"), "times": [],
                                    "inputs": [list(d.values())[0] for d in e["args"].get("input_type_shape", [])]})
            node["times"].append(e["dur"] * 1e-6)
    return [{"name": name, "op": n["op"], "inputs": n["inputs"], "seconds": statistics.median(n["times"][1:] or n["times"])}
            for name, n in nodes.items()]


def child_profile(name: str, runs: int, budget: float) -> dict:
    """Per-launch medians of ``runs`` profiled runs (after a warm-up), and both latencies."""
    import onnx
    from timing import alternating_medians

    import lezero.onnx

    model = MODELS[name]
    f = model.feeds(onnx.load(model.path, load_external_data=False), 0)
    compiled = lezero.onnx.compile(model.path, upgrade_opset=model.upgrade_opset)
    session = ort_session(model.path)
    times = alternating_medians({"lezero": lambda: compiled.run(f), "ort": lambda: session.run(None, f)}, budget)
    profiles = [compiled.profile(f)[1] for _ in range(runs)]
    rows = [{"name": r.name, "kind": r.kind, "flops": r.flops, "bytes": r.bytes, "parallel": r.parallel,
             "seconds": statistics.median(p[i].seconds for p in profiles)} for i, r in enumerate(profiles[0])]
    return {"rows": rows, "label": model.shape_label(0), "ort_nodes": ort_node_profile(model.path, f, runs), **times}


def run_child(args: list, cache: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in BLAS_ENV_DROPPED}
    env.update(LEZERO_NUM_THREADS=str(THREADS), OPENBLAS_NUM_THREADS=str(THREADS), OMP_NUM_THREADS=str(THREADS))
    if cache is not None:
        env["LEZERO_CACHE_DIR"] = cache
    # The lezero of the tree this script is in, whatever the venv has installed.
    env["PYTHONPATH"] = os.pathsep.join([model_zoo.ROOT, HERE] + [p for p in [env.get("PYTHONPATH")] if p])
    done = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", json.dumps(args)], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{args[0]} {args[1:2]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def child_main(spec: str) -> None:
    kind, *rest = json.loads(spec)
    if kind == "measure":
        out = child_compile_and_measure(*rest)
    elif kind == "peak":
        out = child_peak()
    else:
        out = child_profile(*rest)
    print(json.dumps(out))


# --- the report ------------------------------------------------------------------------------------

def versions(suites) -> str:
    from importlib import metadata

    names = ["numpy", "onnx", "onnxruntime", "llvmlite"]
    if set(suites) - {"light"}:
        names += ["torch", "torchvision", "transformers"]
    found = []
    for n in names:
        try:
            found.append(f"{n} {metadata.version(n)}")
        except metadata.PackageNotFoundError:
            found.append(f"{n} (not installed)")
    commit = subprocess.run(["git", "-C", model_zoo.ROOT, "describe", "--always", "--dirty"], capture_output=True,
                            text=True, check=False).stdout.strip() or "unknown"
    return f"lezero {commit}, python {platform.python_version()}, " + ", ".join(found)


def cpu_model() -> str:
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor() or "unknown CPU"
    flags = set(fields.get("flags", "").split())
    shown = [f for f in ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile") if f in flags]
    load = ", load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())  # a shared machine: say how busy
    return f"{fields.get('model name', 'unknown CPU')}, {os.cpu_count()} logical CPUs, {' '.join(shown)}{load}"


def geometric_mean(values: list) -> float:
    return math.exp(sum(math.log(v) for v in values) / len(values))


def benchmark(names: list, budget: float) -> None:
    print(f"CPU: {cpu_model()}")
    print(versions({MODELS[n].suite for n in names}))
    print(f"{THREADS} threads; ORT intra_op_num_threads={THREADS}, spinning off; latency: medians of alternating "
          f"calls; compile: fresh processes, cold = empty kernel cache, warm = the same cache again")
    header = (f"{'model':20s} {'shape':>6s} {'lezero':>9s} {'ORT':>9s} {'ratio':>6s} {'abs err':>8s} {'rel err':>8s} "
              f"{'cold':>7s} {'warm':>7s} {'ORT init':>8s}")
    for suite in SUITES:
        in_suite = [n for n in names if MODELS[n].suite == suite]
        if not in_suite:
            continue
        print(f"\n{suite}\n{header}\n{'-' * len(header)}")
        ratios = []
        for name in in_suite:
            model = MODELS[name]
            model_zoo.export(model)
            with tempfile.TemporaryDirectory(prefix="lezero-bench-cache-") as cache:
                cold = run_child(["measure", name, False, budget], cache)
                warm = run_child(["measure", name, True, budget], cache)
            for index, (c, w) in enumerate(zip(cold["shapes"], warm["shapes"])):
                ratio = w["lezero"] / w["ort"]
                ratios.append(ratio)
                plus = "+" if index else " "  # a later shape: compiled on top of the first
                print(f"{name if index == 0 else '':20s} {w['label']:>6s} {w['lezero'] * 1e3:7.2f}ms "
                      f"{w['ort'] * 1e3:7.2f}ms {ratio:5.2f}x {w['max_abs_err']:8.1e} {w['max_rel_err']:8.1e} "
                      f"{plus}{c['compile']:5.1f}s {plus}{w['compile']:5.2f}s "
                      + (f"{warm['ort_session']:7.2f}s" if index == 0 else ""), flush=True)
            if model.sequence_shapes:
                how = ("imported and compiled again per input shape (the graph takes a Shape of a dynamic dim)"
                       if warm["shape_specialized"] else "one import; one specialized plan per input shape")
                print(f"{'':20s} one CompiledModel ran every shape: {how}")
        print(f"geometric mean of lezero / ORT ({suite}, {len(ratios)} rows): {geometric_mean(ratios):.2f}x")


def profile(name: str, top: int, runs: int, budget: float) -> None:
    model = MODELS[name]
    model_zoo.export(model)
    print(f"CPU: {cpu_model()}")
    print(versions({model.suite}))
    peak = run_child(["peak"])
    peak_gflops = max(peak["lezero_gflops"], peak["numpy_gflops"])
    peak_gbs = max(peak["copy_gbs"], peak["read_gbs"])
    print(f"host peak: {peak_gflops:.0f} GFLOP/s (best 1024^3 float32 matmul, {THREADS} threads: lezero "
          f"{peak['lezero_gflops']:.0f}, numpy {peak['numpy_gflops']:.0f}); {peak_gbs:.1f} GB/s (the better of "
          f"a numpy copy of 256 MiB, 1 thread, read + write: {peak['copy_gbs']:.1f}, and numpy sums of its "
          f"{THREADS} parts on {THREADS} threads, read: {peak['read_gbs']:.1f})")
    cache = os.path.join(model_zoo.EXPORTS, "kernel-cache")  # warm after the first profile
    out = run_child(["profile", name, runs, budget], cache)
    rows = out["rows"]
    total = sum(r["seconds"] for r in rows)
    print(f"\n{name} ({out['label']}): lezero {out['lezero'] * 1e3:.2f} ms, ORT {out['ort'] * 1e3:.2f} ms "
          f"(ratio {out['lezero'] / out['ort']:.2f}x); {len(rows)} launches take {total * 1e3:.2f} ms "
          f"(per launch: median of {runs} profiled runs)")
    print("\nby kind:")
    kinds: dict = {}
    for r in rows:
        k = kinds.setdefault(r["kind"], [0, 0.0, 0, 0])
        k[0] += 1
        k[1] += r["seconds"]
        k[2] += r["flops"]
        k[3] += r["bytes"]
    for kind, (count, seconds, flops, nbytes) in sorted(kinds.items(), key=lambda kv: -kv[1][1]):
        print(f"  {kind:12s} {count:4d} launches {seconds * 1e3:8.2f} ms {100 * seconds / total:5.1f}%  "
              f"{flops / seconds / 1e9:7.1f} GFLOP/s {nbytes / seconds / 1e9:6.1f} GB/s")
    print(f"\ntop {top} kernels (% peak: achieved / host peak; the bound is the larger)")
    print(f"  {'ms':>7s} {'%time':>5s} {'kind':11s} {'GFLOP/s':>8s} {'%peak':>5s} {'GB/s':>6s} {'%peak':>5s}  name")
    above_peak = False
    for r in sorted(rows, key=lambda r: -r["seconds"])[:top]:
        gflops = r["flops"] / r["seconds"] / 1e9 if r["seconds"] else 0.0
        gbs = r["bytes"] / r["seconds"] / 1e9 if r["seconds"] else 0.0
        above_peak |= gflops > peak_gflops or gbs > peak_gbs
        print(f"  {r['seconds'] * 1e3:7.3f} {100 * r['seconds'] / total:5.1f} {r['kind']:11s} {gflops:8.1f} "
              f"{100 * gflops / peak_gflops:5.1f} {gbs:6.1f} {100 * gbs / peak_gbs:5.1f}  {r['name']}"
              f"{'' if r['parallel'] else '  (one thread)'}")
    if above_peak:
        print("  (above 100%: the peak's 1024^3 matmul or 256 MiB copy ran while the machine was busier than "
              "this kernel did, or the data fit in cache; run again for a steadier peak)")
    nodes = out["ort_nodes"]
    ort_total = sum(n["seconds"] for n in nodes)
    print(f"\nONNX Runtime's top {top} nodes (its profiler, per-node medians of {runs} runs; {len(nodes)} nodes "
          f"take {ort_total * 1e3:.2f} ms)")
    print(f"  {'ms':>7s} {'%time':>5s} {'op':14s} inputs  node")
    for n in sorted(nodes, key=lambda n: -n["seconds"])[:top]:
        shapes = " ".join("x".join(map(str, shape)) for shape in n["inputs"])
        print(f"  {n['seconds'] * 1e3:7.3f} {100 * n['seconds'] / ort_total:5.1f} {n['op']:14s} {shapes}  {n['name']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="models (default: every model of --suite); see model_zoo.py")
    parser.add_argument("--suite", choices=SUITES + ("all",), default="all")
    parser.add_argument("--seconds", type=float, default=8.0, help="latency budget per model (at least 7 rounds)")
    parser.add_argument("--profile", metavar="MODEL", help="print MODEL's top kernels against the host's peak")
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--runs", type=int, default=7, help="profiled runs (per-launch medians)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.child)
        return
    for n in args.names + ([args.profile] if args.profile else []):
        if n not in MODELS:
            parser.error(f"unknown model {n!r}; the models are {', '.join(MODELS)}")
    if args.profile:
        profile(args.profile, args.top, args.runs, args.seconds)
        return
    names = args.names or [n for n, m in MODELS.items() if args.suite in ("all", m.suite)]
    for suite in {MODELS[n].suite for n in names}:
        if any(not os.path.exists(MODELS[n].path) for n in names if MODELS[n].suite == suite):
            model_zoo.require(suite)  # before anything runs: a missing package fails at once
    benchmark(names, args.seconds)


if __name__ == "__main__":
    main()
