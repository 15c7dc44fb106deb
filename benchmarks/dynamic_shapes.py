"""What a new (batch, sequence) costs a compiled transformer: row-generic kernels against
per-shape kernels, ONNX Runtime's first run at the same shape beside them.

    .venv/bin/python benchmarks/dynamic_shapes.py [MODEL.onnx ...]   (default: build/bench-models/{bert,gpt2}.onnx)

For each model: one compiled model (and a fresh kernel cache) per mode, ``row-generic`` (as
shipped: ``lezero/codegen/row_generic.py``) and ``per-shape`` (the probe switched off in this
process, the way lezero compiled before), warmed up on two shapes; then new shapes in turn, each
mode's first run at the shape timed in the same loop, alternating which goes first, and ONNX
Runtime's first run at it (2 threads, spinning off).  A new batch at a known sequence length and a
new sequence length are reported apart (medians), with the kernels each mode lowered and compiled,
and the steady-state latency at those shapes (the median of ``STEADY`` more runs of each mode,
alternating): what serving every shape from one code costs, or saves, once compiled.
"""
from __future__ import annotations

import os
import pathlib
import statistics
import sys
import tempfile
import time

os.environ.setdefault("LEZERO_NUM_THREADS", "2")

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from onnx_models import cpu_model

import lezero.onnx
from lezero.runtime import kernel_cache

WARM_UP = [(1, 32), (2, 32)]
# (batch, sequence): new batches at 32 and new sequence lengths, interleaved
NEW = [(3, 32), (5, 17), (4, 32), (2, 48), (7, 32), (3, 48), (6, 32), (1, 100), (8, 32), (2, 100)]
STEADY = 5


def feeds(session_inputs, batch, seq, rng):
    out = {}
    for i in session_inputs:
        if i.type == "tensor(int64)":
            out[i.name] = (np.ones((batch, seq)) if "mask" in i.name else rng.integers(0, 100, (batch, seq))).astype(np.int64)
        else:
            out[i.name] = rng.standard_normal((batch, seq)).astype(np.float32)
    return out


class Mode:
    """One compiled model with its own kernel cache; ``generic``: whether row-generic kernels are on."""

    def __init__(self, model, generic: bool):
        self.generic = generic
        self.cache = kernel_cache.KernelCache(pathlib.Path(tempfile.mkdtemp(prefix="lezero-dyn-")))
        self.compiled = self._with_cache(lambda: lezero.onnx.compile(model))

    def _with_cache(self, action):
        saved, saved_probe = kernel_cache._DEFAULT, kernel_cache.KernelCache._row_generic_kernel
        kernel_cache._DEFAULT = self.cache
        if not self.generic:
            kernel_cache.KernelCache._row_generic_kernel = lambda cache, op, cpu, key: None
        try:
            return action()
        finally:
            kernel_cache._DEFAULT, kernel_cache.KernelCache._row_generic_kernel = saved, saved_probe

    def run(self, f) -> float:
        start = time.perf_counter()
        self._with_cache(lambda: self.compiled.run(f))
        return time.perf_counter() - start

    def first_run(self, f) -> tuple[float, int, int]:
        stats = self.cache.stats
        before = (stats.lowerings, stats.compiles)
        start = time.perf_counter()
        self._with_cache(lambda: self.compiled.run(f))
        return time.perf_counter() - start, stats.lowerings - before[0], stats.compiles - before[1]


def main(paths):
    print(cpu_model())
    print(f"{'model':8s} {'new':14s} {'row-generic ms':>15s} {'kernels':>8s} {'per-shape ms':>13s} {'kernels':>8s} "
          f"{'ratio':>6s} {'ORT first ms':>13s} {'steady ratio':>13s}")
    for path in paths:
        model = onnx.load(path)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 2
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        modes = [Mode(model, True), Mode(model, False)]
        rng = np.random.default_rng(0)
        inputs = ort.InferenceSession(path, options).get_inputs()
        for batch, seq in WARM_UP:
            f = feeds(inputs, batch, seq, rng)
            for mode in modes:
                mode.first_run(f)
        rows = {"batch": [], "sequence": []}
        seen = {seq for _, seq in WARM_UP}
        for n, (batch, seq) in enumerate(NEW):
            f = feeds(inputs, batch, seq, rng)
            order = modes if n % 2 == 0 else modes[::-1]
            results = {mode.generic: mode.first_run(f) for mode in order}
            steady = {mode.generic: [] for mode in modes}
            for _ in range(STEADY):
                for mode in order:
                    steady[mode.generic].append(mode.run(f))
            steady_ratio = statistics.median(steady[True]) / statistics.median(steady[False])
            session = ort.InferenceSession(path, options)
            start = time.perf_counter()
            session.run(None, f)
            ort_first = time.perf_counter() - start
            rows["batch" if seq in seen else "sequence"].append((results[True], results[False], ort_first,
                                                                 steady_ratio))
            seen.add(seq)
        name = pathlib.Path(path).stem
        for kind, measured in rows.items():
            generic = statistics.median(m[0][0] for m in measured) * 1e3
            per_shape = statistics.median(m[1][0] for m in measured) * 1e3
            ort_ms = statistics.median(m[2] for m in measured) * 1e3
            kernels_g = "/".join(str(round(statistics.median(m[0][i] for m in measured))) for i in (1, 2))
            kernels_p = "/".join(str(round(statistics.median(m[1][i] for m in measured))) for i in (1, 2))
            steady_ratio = statistics.median(m[3] for m in measured)
            print(f"{name:8s} {'new ' + kind:14s} {generic:15.0f} {kernels_g:>8s} {per_shape:13.0f} {kernels_p:>8s} "
                  f"{generic / per_shape:6.2f} {ort_ms:13.1f} {steady_ratio:13.2f}")
    print("kernels: lowered/compiled per new shape (medians); ratio: row-generic / per-shape first-run time; "
          "steady ratio: the same for later runs (medians)")


if __name__ == "__main__":
    main(sys.argv[1:] or [p for p in ("build/bench-models/bert.onnx", "build/bench-models/gpt2.onnx")
                          if os.path.exists(p)])
