"""3x3 convolution, 64 -> 64 channels at 56x56, pads 1: lezero against torch, same threads.

Run it as

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/conv.py [--threads 2] [--batches 1,8]

lezero: ``lezero.compile`` of an ``lz.conv2d`` function (and of conv + bias + relu, the epilogue
fused into the GEMM's micro-kernel), called on numpy arrays: the real path (plan lookup, ctypes
calls on the runtime's thread pool, output allocation).  The runtime's pool has
``LEZERO_NUM_THREADS`` = --threads threads (set here before lezero is imported).
torch: ``torch.nn.functional.conv2d`` (and ``relu(conv2d(x, w, b))``) on CPU tensors,
``torch.set_num_threads(--threads)``, under ``torch.no_grad()``.

Each time is the best of several repetitions (the machine is shared: the best is the least
disturbed).  Ratios are torch time / lezero time: above 1, lezero is faster.
"""
from __future__ import annotations

import argparse
import os
import sys

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--batches", default="1,8")
parser.add_argument("--channels", type=int, default=64)
parser.add_argument("--size", type=int, default=56)
parser.add_argument("--seconds", type=float, default=2.0, help="time budget per implementation and shape")
args = parser.parse_args()
os.environ["LEZERO_NUM_THREADS"] = str(args.threads)  # before the runtime's pool is made

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lezero  # noqa: E402
import lezero.codegen.llvm.lower_contraction as _lc; _lc.CONV_B = os.environ.get("LZ_CONV_B", _lc.CONV_B)
from timing import best_seconds  # noqa: E402


def conv_function(batch: int, c: int, size: int, epilogue: bool) -> str:
    x = f"tensor<{batch}x{c}x{size}x{size}xf32>"
    w = f"tensor<{c}x{c}x3x3xf32>"
    y = f"tensor<{batch}x{c}x{size}x{size}xf32>"
    attrs = "{pads = array<i64: 1, 1, 1, 1>}"
    if not epilogue:
        return f"""
func.func @f(%x: {x}, %w: {w}) -> {y} {{
  %0 = "lz.conv2d"(%x, %w) {attrs} : ({x}, {w}) -> {y}
  func.return %0 : {y}
}}"""
    bias = f"tensor<{c}x1x1xf32>"
    return f"""
func.func @f(%x: {x}, %w: {w}, %b: {bias}) -> {y} {{
  %0 = "lz.conv2d"(%x, %w) {attrs} : ({x}, {w}) -> {y}
  %1 = "lz.add"(%0, %b) : ({y}, {bias}) -> {y}
  %2 = "lz.relu"(%1) : ({y}) -> {y}
  func.return %2 : {y}
}}"""


def main() -> None:
    torch.set_num_threads(args.threads)
    c, size = args.channels, args.size
    rng = np.random.default_rng(0)
    print(f"conv2d 3x3, {c} -> {c} channels, {size}x{size}, pads 1, float32, {args.threads} threads "
          f"(torch {torch.__version__})")
    print(f"{'case':<22}{'lezero ms':>11}{'torch ms':>11}{'torch/lezero':>14}{'lezero GFLOP/s':>16}")
    for batch in (int(b) for b in args.batches.split(",")):
        x = rng.standard_normal((batch, c, size, size), np.float32)
        w = (rng.standard_normal((c, c, 3, 3)) * 0.05).astype(np.float32)
        bias = rng.standard_normal((c, 1, 1)).astype(np.float32)
        tx, tw, tb = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(bias.reshape(c))
        flops = 2 * batch * c * size * size * c * 9
        for epilogue in (False, True):
            f = lezero.compile(conv_function(batch, c, size, epilogue))
            inputs = (x, w, bias) if epilogue else (x, w)
            with torch.no_grad():
                if epilogue:
                    expected = torch.relu(torch.nn.functional.conv2d(tx, tw, tb, padding=1)).numpy()
                    peer = lambda: torch.relu(torch.nn.functional.conv2d(tx, tw, tb, padding=1))  # noqa: E731
                else:
                    expected = torch.nn.functional.conv2d(tx, tw, padding=1).numpy()
                    peer = lambda: torch.nn.functional.conv2d(tx, tw, padding=1)  # noqa: E731
                np.testing.assert_allclose(f(*inputs), expected, rtol=1e-3, atol=1e-3)
                ours = best_seconds(lambda: f(*inputs), args.seconds)
                theirs = best_seconds(peer, args.seconds)
            name = f"batch {batch}" + (" +bias+relu" if epilogue else "")
            print(f"{name:<22}{ours * 1e3:>11.3f}{theirs * 1e3:>11.3f}{theirs / ours:>14.2f}"
                  f"{flops / ours / 1e9:>16.1f}", flush=True)


if __name__ == "__main__":
    main()
