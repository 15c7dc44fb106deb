"""The nine "light" CNNs shipped inside the onnx package, compiled by lezero and run next to ONNX
Runtime: compile time cold (empty kernel cache) and warm (every kernel from the disk cache), and
latency of one inference, both with 2 threads.  Each measurement runs in a fresh process.

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/onnx_models.py [name ...]

Compile time is from ``lezero.onnx.compile`` to the end of the first run, less one steady-state
run (the models are opset 9: the opset-11 conversion is included).  Latency is the best of
repeated runs after a warm-up, lezero's and ONNX Runtime's measured in the same process.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import onnx

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
          "vgg19", "zfnet512"]
THREADS = 2

CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[3])
import numpy as np, onnx, onnxruntime as ort
import lezero.onnx
from timing import best_seconds
path, measure_latency = sys.argv[1], sys.argv[2] == "1"
model = onnx.load(path)
initializers = {t.name for t in model.graph.initializer}
rng = np.random.default_rng(0)
feeds = {i.name: rng.random([d.dim_value for d in i.type.tensor_type.shape.dim], dtype=np.float32)
         for i in model.graph.input if i.name not in initializers}
start = time.perf_counter()
compiled = lezero.onnx.compile(path, upgrade_opset=True)
out = compiled.run(feeds)
first = time.perf_counter() - start
start = time.perf_counter()
compiled.run(feeds)
steady = time.perf_counter() - start
result = {"compile": first - steady}
if measure_latency:
    options = ort.SessionOptions()
    options.intra_op_num_threads = int(sys.argv[4])
    options.log_severity_level = 3
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    got = list(out.values())
    result["max_rel_err"] = max(float(np.max(np.abs(g - w) / (np.abs(w) + 1e-6))) for g, w in zip(got, want))
    result["lezero"] = best_seconds(lambda: compiled.run(feeds), 5.0, 30)
    result["ort"] = best_seconds(lambda: session.run(None, feeds), 5.0, 30)
print(json.dumps(result))
"""


def child(path: str, cache: str, latency: bool) -> dict:
    env = dict(os.environ, LEZERO_CACHE_DIR=cache, LEZERO_NUM_THREADS=str(THREADS))
    here = os.path.dirname(os.path.abspath(__file__))
    done = subprocess.run([sys.executable, "-c", CHILD, path, "1" if latency else "0", here, str(THREADS)],
                          env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(f"{os.path.basename(path)} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(names) -> None:
    print(f"light ONNX models, batch 1, {THREADS} threads (lezero and ONNX Runtime)")
    header = (f"{'model':14s} {'compile cold':>12s} {'compile warm':>12s} {'lezero':>9s} {'onnxruntime':>11s} "
              f"{'ratio':>6s} {'max rel err':>11s}")
    print(header)
    print("-" * len(header))
    ratios = []
    for name in names:
        path = os.path.join(LIGHT, f"light_{name}.onnx")
        with tempfile.TemporaryDirectory(prefix="lezero-bench-cache-") as cache:
            cold = child(path, cache, latency=False)
            warm = child(path, cache, latency=True)
        ratio = warm["lezero"] / warm["ort"]
        ratios.append(ratio)
        print(f"{name:14s} {cold['compile']:11.1f}s {warm['compile']:11.2f}s {warm['lezero'] * 1e3:7.1f}ms "
              f"{warm['ort'] * 1e3:9.1f}ms {ratio:5.2f}x {warm['max_rel_err']:11.1e}", flush=True)
    if ratios:
        geomean = 1.0
        for r in ratios:
            geomean *= r
        print(f"geometric mean of lezero / ONNX Runtime latency: {geomean ** (1 / len(ratios)):.2f}x")


if __name__ == "__main__":
    main(sys.argv[1:] or MODELS)
