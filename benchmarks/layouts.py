"""Kernels whose cost is layout, not arithmetic: thin matmuls (few columns or rows), matmuls that
read an operand transposed (``x @ w.T``, folded into the GEMM's packing), and 2-D transposes,
each through lezero.compile against numpy on the same threads.

Run it as

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/layouts.py [--threads 2]

numpy: ``x @ w`` (``x @ w.T`` is a BLAS call with a transpose flag, no copy) and
``np.ascontiguousarray(x.T)`` for a transpose; numpy's BLAS is held to --threads threads.
lezero: the compiled function's lean runner (``CompiledFunction.runner``, what the eager frontend
and the compiled training step call): one kernel, the output allocated per call as numpy does.
Each time is the best of repeated calls (the machine is shared: the best is the least
disturbed).  Ratio: lezero's time / numpy's (below 1, lezero is faster).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--seconds", type=float, default=0.5, help="time budget per kernel and library")
args = parser.parse_args()
os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)  # before numpy loads OpenBLAS
os.environ.setdefault("LEZERO_NUM_THREADS", str(args.threads))

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lezero  # noqa: E402
from timing import best_seconds  # noqa: E402

try:
    from threadpoolctl import threadpool_limits
except ImportError:
    threadpool_limits = None


def tensor(shape) -> str:
    return f"tensor<{'x'.join(map(str, shape))}xf32>"


def matmul_case(m, k, n, transpose_b):
    """``x @ w`` or ``x @ w.T`` (w stored n x k) as lz IR and its numpy peer."""
    w_shape = (n, k) if transpose_b else (k, n)
    lines = [f"func.func @f(%x: {tensor((m, k))}, %w: {tensor(w_shape)}) -> {tensor((m, n))} {{"]
    rhs = "%w"
    if transpose_b:
        lines.append(f'  %t = "lz.transpose"(%w) {{perm = array<i64: 1, 0>}} : ({tensor(w_shape)}) -> {tensor((k, n))}')
        rhs = "%t"
    lines += [f'  %y = "lz.matmul"(%x, {rhs}) : ({tensor((m, k))}, {tensor((k, n))}) -> {tensor((m, n))}',
              f"  func.return %y : {tensor((m, n))}", "}"]
    rng = np.random.default_rng(m + k + n)
    inputs = [rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal(w_shape).astype(np.float32)]
    name = f"({m}x{k}) @ ({n}x{k}).T" if transpose_b else f"({m}x{k}) @ ({k}x{n})"
    peer = (lambda x, w: x @ w.T) if transpose_b else (lambda x, w: x @ w)
    return name, "\n".join(lines), inputs, peer


def transpose_case(rows, cols):
    source = "\n".join([f"func.func @f(%x: {tensor((rows, cols))}) -> {tensor((cols, rows))} {{",
                        f'  %t = "lz.transpose"(%x) {{perm = array<i64: 1, 0>}} : ({tensor((rows, cols))}) -> '
                        f"{tensor((cols, rows))}",
                        f"  func.return %t : {tensor((cols, rows))}", "}"])
    x = np.random.default_rng(rows).standard_normal((rows, cols)).astype(np.float32)
    return f"transpose {rows}x{cols}", source, [x], lambda x: np.ascontiguousarray(x.T)


CASES = [
    matmul_case(64, 256, 10, False), matmul_case(256, 256, 10, False), matmul_case(1, 784, 256, False),
    matmul_case(64, 256, 10, True), matmul_case(256, 256, 10, True), matmul_case(1, 784, 256, True),
    matmul_case(64, 784, 256, True), matmul_case(256, 784, 256, True),
    transpose_case(256, 256), transpose_case(4096, 1024),
]


def main() -> int:
    print(f"{args.threads} thread(s); microseconds per call (best of repeats), ratio lezero / numpy")
    print(f"{'kernel':<28} {'numpy':>9} {'lezero':>9} {'ratio':>6}")
    for name, source, inputs, peer in CASES:
        compiled = lezero.compile(source)
        run = compiled.runner([x.shape for x in inputs])
        np.testing.assert_allclose(run(inputs)[0], peer(*inputs), rtol=1e-4, atol=1e-3)
        with threadpool_limits(limits=args.threads) if threadpool_limits else contextlib.nullcontext():
            numpy_time = best_seconds(lambda: peer(*inputs), args.seconds, max_reps=2000)
        lezero_time = best_seconds(lambda: run(inputs), args.seconds, max_reps=2000)
        print(f"{name:<28} {numpy_time * 1e6:>9.1f} {lezero_time * 1e6:>9.1f} {lezero_time / numpy_time:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
