"""Profile an ONNX model with ``lz.profiler``: its top kernels, their share of the run and their
achieved GFLOP/s and GB/s against this host's measured peak (issue 16's closing numbers).

    LEZERO_NUM_THREADS=2 .venv/bin/python benchmarks/profile_model.py [MODEL.onnx] [--top 10] [--runs 5]
        [--dynamic-dims 4,64]

Default model: ``build/bench-models/resnet50.onnx`` (``make bench-models`` exports it).  The model
is compiled and run twice first (plans built, arena touched); then ``--runs`` runs are profiled and
the table shows totals over them.  ORT (2 threads, spinning off) runs the same input alternating
with lezero, outside the profile, for the ratio.
"""
from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time

import numpy as np
import onnx
import onnxruntime as ort

import lezero as lz
import lezero.onnx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", default=os.path.join(ROOT, "build", "bench-models", "resnet50.onnx"))
    parser.add_argument("--top", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--dynamic-dims", type=lambda text: [int(d) for d in text.split(",")], default=[],
                        help="sizes of the inputs' dynamic dims in order, e.g. 4,64 (batch, sequence); default 1")
    args = parser.parse_args()
    if not os.path.exists(args.model):
        sys.exit(f"{args.model} does not exist: `make bench-models` exports the benchmark models")
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores, LEZERO_NUM_THREADS={os.environ.get('LEZERO_NUM_THREADS')}, "
          f"load {os.getloadavg()[0]:.1f}")
    graph = onnx.load(args.model, load_external_data=False).graph
    initializers = {i.name for i in graph.initializer}
    feeds = {}
    rng = np.random.default_rng(0)
    for i in graph.input:
        if i.name in initializers:
            continue
        dynamic = iter(args.dynamic_dims)
        dims = [d.dim_value if d.dim_value > 0 else next(dynamic, 1) for d in i.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type)
        if np.issubdtype(dtype, np.floating):
            feeds[i.name] = rng.standard_normal(dims).astype(dtype)
        elif "mask" in i.name:  # transformers' attention_mask: attend everywhere
            feeds[i.name] = np.ones(dims, dtype)
        else:  # token ids and other indices: small ones are valid for every vocabulary
            feeds[i.name] = rng.integers(0, 100, dims).astype(dtype)
    start = time.perf_counter()
    model = lezero.onnx.compile(args.model)
    model.run(feeds)
    print(f"compile + first run: {time.perf_counter() - start:.1f} s")
    model.run(feeds)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(args.model, options, providers=["CPUExecutionProvider"])
    lezero_s, ort_s = [], []
    for _ in range(args.runs):  # alternating, outside the profile
        t = time.perf_counter(); model.run(feeds); lezero_s.append(time.perf_counter() - t)
        t = time.perf_counter(); session.run(None, feeds); ort_s.append(time.perf_counter() - t)
    lz_med, ort_med = statistics.median(lezero_s), statistics.median(ort_s)
    print(f"{os.path.basename(args.model)}: lezero {lz_med * 1e3:.1f} ms, ORT {ort_med * 1e3:.1f} ms "
          f"(lezero / ORT {lz_med / ort_med:.2f}x, medians of {args.runs} alternating runs)")
    with lz.profiler.profile() as prof:
        for _ in range(args.runs):
            model.run(feeds)
    averages = prof.key_averages()
    kernels = [r for r in averages if r.kind == "kernel"]
    print(f"{len(kernels)} distinct kernels; the profiled block: {prof.wall_seconds * 1e3:.1f} ms for {args.runs} runs")
    print(averages.table(sort_by="self_cpu_time_total", row_limit=args.top))


if __name__ == "__main__":
    main()
