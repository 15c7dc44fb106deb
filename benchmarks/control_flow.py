"""Loops with small bodies: a traced ``lz.while_loop`` (the condition read between iterations),
``lz.fori_loop`` and an ``lz.cond`` in every iteration of an ``lz.scan``, ``--iterations`` each, run
by the loop program (``lezero/runtime/loop_driver.py``: one native call for the whole plan) and by
the Python loops (the same compiled plan with its native programs turned off), against torch
eager running the same Python loop; in this process, alternating, medians.

    LEZERO_NUM_THREADS=2 .venv/bin/python benchmarks/control_flow.py [--iterations 1000]

Ratios are the native program's time / the other's (below 1: the program is faster).
"""
from __future__ import annotations

import argparse
import os
import sys

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--seconds", type=float, default=3.0, help="time budget per case")
parser.add_argument("--iterations", type=int, default=1000)
parser.add_argument("--cond-iterations", type=int, default=None,
                    help="the lz.cond case's steps (default: --iterations)")
parser.add_argument("--width", type=int, default=16, help="the carried vector's length")
args = parser.parse_args()
args.cond_iterations = args.iterations if args.cond_iterations is None else args.cond_iterations
os.environ.setdefault("LEZERO_NUM_THREADS", str(args.threads))

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lezero as lz  # noqa: E402
from lezero.eager.autograd import trace  # noqa: E402
from lezero.ir.core import ModuleOp  # noqa: E402
from lezero.runtime.cpu import BoundHostStep  # noqa: E402
from timing import alternating_medians, cpu_model  # noqa: E402

torch.set_num_threads(args.threads)
N, W = args.iterations, args.width


def while_case():
    """while k < n: v = v * 0.999 + 0.001 * tanh(v); k += 1 (n an input: a run-time trip count)."""
    def lezero(v, n):
        return lz.while_loop(lambda c: c[1] < n, lambda c: (c[0] * 0.999 + lz.tanh(c[0]) * 0.001, c[1] + 1),
                             (v, lz.tensor(0)))[0]

    def torch_loop(v, n):
        k = 0
        while k < n:
            v, k = v * 0.999 + torch.tanh(v) * 0.001, k + 1
        return v
    return lezero, torch_loop, [np.ones((1, W), np.float32), np.array(N)]


def fori_case():
    """h = tanh(h @ w + b), N times."""
    def lezero(h, w, b):
        return lz.fori_loop(0, N, lambda i, h: lz.tanh(h @ w + b), h)

    def torch_loop(h, w, b):
        for _ in range(N):
            h = torch.tanh(h @ w + b)
        return h
    rng = np.random.default_rng(0)
    return lezero, torch_loop, [rng.standard_normal((1, W)).astype(np.float32),
                                (rng.standard_normal((W, W)) * 0.3).astype(np.float32), np.zeros((1, W), np.float32)]


def cond_case():
    """Over --cond-iterations steps: c = c + x_t where sum(c) > 0, else c - x_t / 2 (an lz.if per step)."""
    def lezero(c, xs):
        return lz.scan(lambda c, x: (lz.cond(c.sum() > 0, lambda a: a + x, lambda a: a - x * 0.5, c),) * 2, c, xs)[0]

    def torch_loop(c, xs):
        for x in xs:
            c = c + x if c.sum() > 0 else c - x * 0.5
        return c
    rng = np.random.default_rng(1)
    return lezero, torch_loop, [rng.standard_normal((1, W)).astype(np.float32),
                                rng.standard_normal((args.cond_iterations, 1, W)).astype(np.float32)]


def turn_off_native(plan) -> None:
    """Every native program of ``plan`` and its host steps (nested ones too) off: the Python loops."""
    plan.native = None
    for launch in plan.launches:
        if isinstance(launch, BoundHostStep):
            launch.native = None
            for region in launch.regions:
                turn_off_native(region.plan)


def measure(case):
    lezero, torch_loop, arrays = case()
    t = trace(lezero, *[lz.tensor(a) for a in arrays])
    module = ModuleOp([t.func])
    inputs = [x.numpy() for x in t.inputs + t.captured]
    native, python = lz.compile(module, t.func.sym_name), lz.compile(module, t.func.sym_name)
    shapes = [a.shape for a in inputs]
    assert native.plan_for(shapes).native is not None or all(
        s.native is not None for s in native.plan_for(shapes).launches if isinstance(s, BoundHostStep))
    turn_off_native(python.plan_for(shapes))
    tensors = [torch.from_numpy(a) for a in arrays]
    want = torch_loop(*[int(a) if a.ndim == 0 else a for a in tensors]).numpy()
    np.testing.assert_array_equal(native(*inputs), python(*inputs))
    np.testing.assert_allclose(native(*inputs), want, rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        return alternating_medians({"native": lambda: native(*inputs), "python": lambda: python(*inputs),
                                    "torch": lambda: torch_loop(*[int(a) if a.ndim == 0 else a for a in tensors])},
                                   args.seconds, min_reps=5)


def main() -> int:
    print(f"CPU: {cpu_model()}, {len(os.sched_getaffinity(0))} cores available, {args.threads} threads; torch "
          f"{torch.__version__}; load average {os.getloadavg()[0]:.2f}")
    print(f"{N} iterations ({args.cond_iterations} for lz.cond in lz.scan), carried 1x{W} f32; us per call (medians of "
          "alternating rounds); ratio = native / other")
    print(f"{'case':>22} {'native':>10} {'python':>10} {'torch':>10} {'vs python':>10} {'vs torch':>9}")
    for name, case in (("lz.while_loop", while_case), ("lz.fori_loop", fori_case), ("lz.cond in lz.scan", cond_case)):
        t = measure(case)
        print(f"{name:>22} {t['native'] * 1e6:>10.1f} {t['python'] * 1e6:>10.1f} {t['torch'] * 1e6:>10.1f} "
              f"{t['native'] / t['python']:>10.3f} {t['native'] / t['torch']:>9.3f}", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
