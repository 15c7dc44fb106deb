"""A traced module's weights packed per call: the calls that cannot keep them packed (issue 17).

``lz.jit.trace`` marks a module's weights (``lz.weight_arguments``) and the CPU plan reads a
matmul's or conv's weight pre-packed, packing it again only when ``TracedModule._weight_keys``
cannot vouch that it is unchanged.  A call without keys (``lz.compile(traced.module)``,
``traced.compiled(...)``) or with weights that change every call (a training loop) packs every
weight on every call.  This times those calls, all in this process, alternating, each timed call
after an untimed one:

- ``in-GEMM``: ``lz.compile(traced.module)``, which drops ``lz.weight_arguments`` (as before
  3f24998): each GEMM packs its weight itself, block by block, per call, per thread;
- ``kernel``: ``traced.compiled``, whose plans read the weights pre-packed, called without keys:
  each weight packed before the kernels by the GEMM's packing routine as a kernel of its own
  (``lezero/codegen/llvm/pack_kernels.py``), its slivers over the threads;
- ``numpy``: the same plans with their weights packed by the layout's numpy ``pack`` (what
  3f24998 did on these calls: the strided transpose, a temporary and a copy);
- ``traced``: the traced module called with its keys, weights unchanged (nothing packed);
- ``written``: the traced module with every weight written in place (one element, through
  ``.numpy()``) before each call: a key miss each time, so the kernel pack.

Ratios are to ``in-GEMM`` (below 1: faster than packing inside the GEMM).

    LEZERO_NUM_THREADS=1 .venv/bin/python benchmarks/packed_weights.py [--threads 1] [--statistic min]
"""
from __future__ import annotations

import argparse
import os
import sys

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--seconds", type=float, default=2.0, help="time budget per case")
parser.add_argument("--statistic", choices=("median", "min"), default="median")
args = parser.parse_args()
os.environ.setdefault("LEZERO_NUM_THREADS", str(args.threads))

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lezero as lz  # noqa: E402
from lezero.runtime.cpu import CompiledFunction  # noqa: E402
from timing import alternating_times, cpu_model  # noqa: E402


class MLP(lz.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.a, self.b = lz.nn.Linear(width, width), lz.nn.Linear(width, width)

    def forward(self, x):
        return self.b(lz.relu(self.a(x)))


def cases():
    rng = np.random.default_rng(0)
    lstm = lz.nn.LSTM(512, 512, num_layers=2)
    lstm.eval()
    for batch in (8, 64):
        yield f"MLP 2 x 1024^2, b{batch}", MLP(1024), rng.standard_normal((batch, 1024))
    for batch in (1, 8):
        yield f"LSTM 2 x h512, 128 steps, b{batch}", lstm, rng.standard_normal((128, batch, 512))
    yield "conv 3x3 256->256 at 14x14", lz.nn.Conv2d(256, 256, 3, padding=1), rng.standard_normal((1, 256, 14, 14))


def first(result):
    return np.asarray(result[0] if isinstance(result, (tuple, list)) else result)


def packed_inputs(plan) -> list:
    """A bound plan's weights read pre-packed, its loops' included."""
    inner = [p for launch in plan.launches for region in getattr(launch, "regions", ())
             for p in packed_inputs(region.plan)]
    return plan.packed_inputs + inner


def measure(model, x: np.ndarray) -> dict:
    x = lz.from_numpy(x.astype(np.float32))
    traced = lz.jit.trace(model, example_inputs=(x,), dynamic_batch=False)
    weights = [t.detach().numpy().copy() for _, t in traced.named_tensors]
    arguments = [x.numpy()] + weights
    kernel = traced.compiled  # its plans read the weights pre-packed
    numpy_packs = CompiledFunction(traced.module, traced.entry, prepacked_weights=True)
    in_gemm = lz.compile(traced.module)  # no keys: the weights are plain inputs
    numpy_packs(*arguments)
    packed = [p for plan in numpy_packs._plans.values() for p in packed_inputs(plan)]
    for p in packed:
        p.function = None  # the layout's numpy pack
    parameters = [t for _, t in traced.named_tensors]

    def written():
        for t in parameters:  # a write through numpy: the exposures move, so every weight is packed again
            t.detach().numpy().reshape(-1)[0] += 0.0
        return traced(x)

    runs = {"in-GEMM": lambda: in_gemm(*arguments), "kernel": lambda: kernel(*arguments),
            "numpy": lambda: numpy_packs(*arguments), "traced": lambda: traced(x), "written": written}
    expected = first(in_gemm(*arguments))
    for name, run in runs.items():
        np.testing.assert_allclose(first(run()), expected, rtol=1e-4, atol=1e-5, err_msg=name)
    times = alternating_times(runs, args.seconds, min_reps=5, warm_each=True)
    pick = min if args.statistic == "min" else np.median
    return {name: float(pick(t)) for name, t in times.items()}, len(packed)


def main() -> int:
    print(f"CPU: {cpu_model()}, {args.threads} threads; load average {os.getloadavg()[0]:.2f}; ms "
          f"({'minima' if args.statistic == 'min' else 'medians'} of alternating rounds), ratio to in-GEMM")
    names = ("in-GEMM", "kernel", "numpy", "traced", "written")
    print(f"{'case':>36} {'packed':>6} " + " ".join(f"{n:>9}" for n in names) + f" {'kernel/':>8} {'numpy/':>8}")
    for name, model, x in cases():
        t, count = measure(model, x)
        print(f"{name:>36} {count:>6} " + " ".join(f"{t[n] * 1e3:>9.3f}" for n in names)
              + f" {t['kernel'] / t['in-GEMM']:>8.3f} {t['numpy'] / t['in-GEMM']:>8.3f}", flush=True)
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
