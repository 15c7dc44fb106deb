"""Build each of the nine "light" ONNX models shipped inside the onnx package as a native
executable (lezero-compile), run it on a random input, and compare with ONNX Runtime.

    .venv/bin/python tools/light_models_native.py [names...]

Prints one row per model: build seconds, run status, max relative error against ORT. The light
models' weights are all ConstantOfShape(0.02) (every class scores the same), so the check uses
the model with random weights (as tests/onnx/test_light_models.py does), which exercises every
layer.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from lezero.onnx.native import compile_onnx_native  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "onnx"))
from test_light_models import with_random_weights  # noqa: E402  (the same random weights as the tests)

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
NAMES = ["bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "resnet50", "shufflenet", "squeezenet",
         "vgg19", "zfnet512"]


def main(names) -> int:
    rng = np.random.default_rng(0)
    failures = 0
    print(f"{'model':14} {'build s':>8} {'max rel err vs ORT':>19}")
    for name in names:
        model = with_random_weights(onnx.load(os.path.join(LIGHT, f"light_{name}.onnx")))
        initializers = {i.name for i in model.graph.initializer}
        inp = next(i for i in model.graph.input if i.name not in initializers)
        shape = [d.dim_value or 1 for d in inp.type.tensor_type.shape.dim]
        x = rng.standard_normal(shape).astype(np.float32)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        want = session.run(None, {inp.name: x})[0]
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            compile_onnx_native(model, os.path.join(tmp, "model"))
            build = time.perf_counter() - start
            np.save(os.path.join(tmp, "x.npy"), x)
            run = subprocess.run([os.path.join(tmp, "model"), "--input", f"{inp.name}=" + os.path.join(tmp, "x.npy"),
                                  "--output-dir", tmp], capture_output=True, text=True)
            if run.returncode != 0:
                print(f"{name:14} {build:8.1f} FAILED: {run.stderr.strip()[:200]}")
                failures += 1
                continue
            # output names like "gpu_0/softmax_1" are written with the '/' replaced
            (written,) = [f for f in os.listdir(tmp) if f.endswith(".npy") and f != "x.npy"]
            got = np.load(os.path.join(tmp, written))
        err = float(np.max(np.abs(got - want)) / (np.max(np.abs(want)) + 1e-30))
        ok = err <= 1e-3
        failures += not ok
        print(f"{name:14} {build:8.1f} {err:19.2e}{'' if ok else '  MISMATCH'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or NAMES))
