"""What a new (batch, sequence) costs a compiled transformer: schedules by substitution
(``lezero/runtime/shape_substitution.py``) against the full path (import, pipeline, plan) against
per-shape kernels, ONNX Runtime's first run at the same shape beside them.

    .venv/bin/python benchmarks/dynamic_shapes.py [MODEL.onnx ...]   (default: build/bench-models/{bert,gpt2}.onnx)
    .venv/bin/python benchmarks/dynamic_shapes.py --check [MODEL.onnx ...]
    .venv/bin/python benchmarks/dynamic_shapes.py --profile [MODEL.onnx ...]

``--check``: no timing; fits each model's schedules at 2 x 32 against 3 x 32 and 2 x 33 and prints,
for each of ``CHECKED`` (batch, sequence), whether the substituted schedule prints exactly as the
full path's there (``equal``), differs (``DIFFERENT``: a bug), or is refused (the full path serves it).

``--profile``: one compiled model warmed up on ``PROFILE_WARM_UP``, then each of ``PROFILED`` (new
batches and new lengths, two past b x s = 256) run once, printing its first-run ms, how it was
served (substituted or the full path), ONNX Runtime's first run at the same shape (a session made
before, 2 threads, spinning off) and every kernel it lowered: kind, result type and lowering ms (the
row-generic probe lowers two forms of a kernel, at ``row_generic.PROBE_ROWS`` rows).

For each model: one compiled model (and a fresh kernel cache) per mode: ``substituted`` (as
shipped: new sizes substituted into a known schedule where known ones fit), ``full path``
(substitution off: every new shape imported and scheduled again, row-generic kernels:
``lezero/codegen/row_generic.py``) and ``per-shape`` (the row-generic probe off too, the way
lezero compiled before), warmed up on two shapes; then new shapes in turn, each mode's first run
at the shape timed in the same loop, alternating which goes first, and ONNX Runtime's first run
at it (2 threads, spinning off).  Per shape: whether the substituted mode served it by
substitution or by the full path (known shapes must differ from it in one dim each first), the
kernels each mode lowered and compiled, and the steady latency there (the median of ``STEADY``
more runs); then medians per kind (a new batch at a known sequence length, a new length) and way
served, with what a new shape costs on top of a steady run.
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
from lezero.onnx.compiled_model import CompiledModel
from lezero.runtime import kernel_cache

WARM_UP = [(1, 32), (2, 32)]
# (batch, sequence): new batches at 32 and new sequence lengths, interleaved
NEW = [(3, 32), (5, 17), (4, 32), (2, 48), (7, 32), (3, 48), (6, 32), (1, 100), (8, 32), (2, 100), (5, 48),
       (4, 40), (6, 24), (3, 64), (2, 120), (7, 20)]
STEADY = 5
CHECKED = [(4, 32), (5, 17), (2, 48), (8, 64), (16, 16), (7, 100), (1, 32), (2, 256), (4, 256), (2, 2), (3, 3),
           (32, 64), (64, 32), (16, 64), (17, 64), (6, 200), (2, 300)]


def feeds(session_inputs, batch, seq, rng):
    out = {}
    for i in session_inputs:
        if i.type == "tensor(int64)":
            out[i.name] = (np.ones((batch, seq)) if "mask" in i.name else rng.integers(0, 100, (batch, seq))).astype(np.int64)
        else:
            out[i.name] = rng.standard_normal((batch, seq)).astype(np.float32)
    return out


class Mode:
    """One compiled model with its own kernel cache; ``generic``: whether row-generic kernels are on,
    ``substitution``: whether new shapes are substituted into known schedules."""

    def __init__(self, model, name: str, generic: bool, substitution: bool):
        self.name, self.generic, self.substitution = name, generic, substitution
        self.cache = kernel_cache.KernelCache(pathlib.Path(tempfile.mkdtemp(prefix="lezero-dyn-")))
        self.compiled = self._with_cache(lambda: lezero.onnx.compile(model))

    def _with_cache(self, action):
        saved, saved_probe = kernel_cache._DEFAULT, kernel_cache.KernelCache._row_generic_kernel
        saved_substituted = CompiledModel._substituted
        kernel_cache._DEFAULT = self.cache
        if not self.generic:
            kernel_cache.KernelCache._row_generic_kernel = lambda cache, op, cpu, key: None
        if not self.substitution:
            CompiledModel._substituted = lambda model, shapes: None
        try:
            return action()
        finally:
            kernel_cache._DEFAULT, kernel_cache.KernelCache._row_generic_kernel = saved, saved_probe
            CompiledModel._substituted = saved_substituted

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
    print(f"{cpu_model()}; load {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    names = ("substituted", "full path", "per-shape")
    header = f"{'model':6s} {'shape':7s} {'new':9s} {'served':7s} " + " ".join(
        f"{n + ' ms':>14s} {'kernels':>7s}" for n in names) + f" {'ORT first':>9s} {'steady':>7s}"
    for path in paths:
        print(header)
        model = onnx.load(path)
        options = ort.SessionOptions()
        options.intra_op_num_threads = 2
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        modes = [Mode(model, "substituted", True, True), Mode(model, "full path", True, False),
                 Mode(model, "per-shape", False, False)]
        rng = np.random.default_rng(0)
        inputs = ort.InferenceSession(path, options).get_inputs()
        for batch, seq in WARM_UP:
            f = feeds(inputs, batch, seq, rng)
            for mode in modes:
                mode.first_run(f)
        name = pathlib.Path(path).stem
        rows = []
        seen = {seq for _, seq in WARM_UP}
        for n, (batch, seq) in enumerate(NEW):
            f = feeds(inputs, batch, seq, rng)
            order = modes if n % 2 == 0 else modes[::-1]
            results = {mode.name: mode.first_run(f) for mode in order}
            steady = []
            for _ in range(STEADY):
                steady.append(modes[0].run(f))
            session = ort.InferenceSession(path, options)
            start = time.perf_counter()
            session.run(None, f)
            ort_first = time.perf_counter() - start
            shapes = tuple(f[i.name].shape for i in inputs)
            served = "subst" if modes[0].compiled._programs[(shapes,)].substituted else "full"
            kind = "batch" if seq in seen else "sequence"
            seen.add(seq)
            rows.append((kind, served, results, ort_first, statistics.median(steady)))
            print(f"{name:6s} {batch:>3d}x{seq:<3d} {kind:9s} {served:7s} " + " ".join(
                f"{results[m][0] * 1e3:14.1f} {results[m][1]:>3d}/{results[m][2]:<3d}" for m in names)
                + f" {ort_first * 1e3:9.1f} {statistics.median(steady) * 1e3:7.1f}")
        for kind in ("batch", "sequence"):
            for served in ("subst", "full"):
                measured = [r for r in rows if r[0] == kind and r[1] == served]
                if not measured:
                    continue
                first = statistics.median(r[2]["substituted"][0] for r in measured) * 1e3
                full = statistics.median(r[2]["full path"][0] for r in measured) * 1e3
                over = statistics.median(r[2]["substituted"][0] - r[4] for r in measured) * 1e3
                print(f"{name}: new {kind}, served by {served} ({len(measured)} shapes): first run {first:.1f} ms "
                      f"(full path {full:.1f} ms), of which {over:.1f} ms on top of a steady run")
    print("ms: first run at the new shape; kernels: lowered/compiled by it; steady: the substituted mode's later runs "
          "(medians); served: how the substituted mode got its plan")
    print(f"load {' '.join(f'{x:.1f}' for x in os.getloadavg())}")

PROFILE_WARM_UP = [(1, 32), (2, 32), (3, 32), (2, 48)]
PROFILED = [(2, 40), (4, 32), (5, 32), (2, 56), (3, 40), (8, 40), (6, 64)]


def profile(paths):
    lowered = []
    lower = kernel_cache.KernelCache._lower

    def timed_lower(cache, op, cpu):
        start = time.perf_counter()
        result = lower(cache, op, cpu)
        lowered.append((time.perf_counter() - start, op))
        return result

    kernel_cache.KernelCache._lower = timed_lower
    try:
        for path in paths:
            mode = Mode(onnx.load(path), "substituted", True, True)
            options = ort.SessionOptions()
            options.intra_op_num_threads = 2
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            inputs = ort.InferenceSession(path, options).get_inputs()
            rng = np.random.default_rng(0)
            for batch, seq in PROFILE_WARM_UP:
                mode.first_run(feeds(inputs, batch, seq, rng))
            for batch, seq in PROFILED:
                lowered.clear()
                f = feeds(inputs, batch, seq, rng)
                seconds, lowerings, compiles = mode.first_run(f)
                served = "substituted" if mode.compiled._programs[(tuple(f[i.name].shape for i in inputs),)].substituted \
                    else "full path"
                session = ort.InferenceSession(path, options)
                start = time.perf_counter()
                session.run(None, f)
                ort_first = time.perf_counter() - start
                print(f"{pathlib.Path(path).stem} {batch}x{seq}: {seconds * 1e3:.1f} ms ({served}), ORT first run "
                      f"{ort_first * 1e3:.1f} ms; {lowerings} lowered, {compiles} compiled; load {os.getloadavg()[0]:.1f}")
                for spent, op in lowered:
                    print(f"  {op.definition.attrs(op).kind:11s} {str(op.results[0].type):28s} lowered in "
                          f"{spent * 1e3:.1f} ms" + (" (rows form)" if "lz.any_rows" in op.attributes else ""))
    finally:
        kernel_cache.KernelCache._lower = lower


def check(paths):
    from lezero.ir.printer import print_module
    from lezero.onnx.importer import FOLD_MAX_ELEMENTS
    from lezero.runtime.plan import specialize
    from lezero.runtime.shape_substitution import SizeFit

    for path in paths:
        compiled = lezero.onnx.compile(path)

        def full(b, s):
            shapes = [(b, s)] * len(compiled.input_names)
            feeds = {n: np.ones((b, s), np.int64) for n in compiled.input_names}
            return specialize(compiled._imported(feeds), "main", shapes)

        fit = SizeFit.between(full(2, 32), (2, 32), [(full(3, 32), 3), (full(2, 33), 33)], compiled._tables(),
                              FOLD_MAX_ELEMENTS)
        name = pathlib.Path(path).stem
        if fit is None:
            print(f"{name}: no fit (--debug: the shapes channel says why)")
            continue
        print(f"{name}: constants by rule: {sorted(rule.kind for rule in fit.rules.values())}")
        verdicts = []
        for b, s in CHECKED:
            substitution = fit.substitute((b, s))
            verdict = "refused" if substitution is None else \
                "equal" if print_module(substitution.module) == print_module(full(b, s)) else "DIFFERENT"
            verdicts.append(verdict)
            print(f"  {b}x{s}: {verdict}")
        print(f"{name}: " + ", ".join(f"{verdicts.count(v)} {v}" for v in ("equal", "DIFFERENT", "refused")))


if __name__ == "__main__":
    for flag, action in (("--check", check), ("--profile", profile)):
        if sys.argv[1:2] == [flag]:
            action(sys.argv[2:] or [p for p in ("build/bench-models/bert.onnx", "build/bench-models/gpt2.onnx")
                                    if os.path.exists(p)])
            sys.exit()
    main(sys.argv[1:] or [p for p in ("build/bench-models/bert.onnx", "build/bench-models/gpt2.onnx")
                          if os.path.exists(p)])
