"""3x3 convolution, 64 -> 64 channels at 56x56, pads 1: lezero against torch, same threads.

Run it as

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/conv.py [--threads 2] [--batches 1,8]

lezero: ``lezero.compile`` of an ``lz.conv2d`` function (and of conv + bias + relu, the epilogue
fused into the GEMM's micro-kernel), called on numpy arrays: the real path (plan lookup, ctypes
calls on the runtime's thread pool, output allocation).  The runtime's pool has
``LEZERO_NUM_THREADS`` = --threads threads (set here before lezero is imported).
torch: ``torch.nn.functional.conv2d`` (and ``relu(conv2d(x, w, b))``) on CPU tensors,
``torch.set_num_threads(--threads)``, under ``torch.no_grad()``.

``--lowerings`` also times the ways lezero can lower the convolution (batch 1, no epilogue):
"direct" (the GEMM's micro-kernel reads the padded input's rows in place, what lz.conv2d does),
"implicit im2col" (the same GEMM packing the im2col matrix's rows from the padded input per K
block: ``lezero.codegen.llvm.contraction.CONV_B = "packed"``) and "explicit im2col" (a function that builds the
576 x 3136 im2col matrix with lz.pad/lz.slice/lz.concat, one elementwise kernel, then multiplies it
with lz.matmul, a second kernel).

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
parser.add_argument("--lowerings", action="store_true", help="also compare direct, implicit and explicit im2col")
args = parser.parse_args()
os.environ["LEZERO_NUM_THREADS"] = str(args.threads)  # before the runtime's pool is made

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lezero  # noqa: E402
from lezero.codegen.llvm import contraction  # noqa: E402
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


def explicit_im2col_function(c: int, size: int) -> str:
    """col[ci * 9 + kh * 3 + kw, p] = xpad[ci, oh + kh, ow + kw], then w (c x 9c) @ col."""
    x, xp = f"tensor<1x{c}x{size}x{size}xf32>", f"tensor<1x{c}x{size + 2}x{size + 2}xf32>"
    tap, taps = f"tensor<{c}x1x{size * size}xf32>", f"tensor<{c}x9x{size * size}xf32>"
    lines = [f'%xp = "lz.pad"(%x) {{pads = array<i64: 0, 0, 1, 1, 0, 0, 1, 1>, value = 0.0 : f32}} : ({x}) -> {xp}']
    names = []
    for kh in range(3):
        for kw in range(3):
            window = f"tensor<1x{c}x{size}x{size}xf32>"
            lines.append(f'%s{kh}{kw} = "lz.slice"(%xp) {{starts = array<i64: {kh}, {kw}>, '
                         f'ends = array<i64: {kh + size}, {kw + size}>, axes = array<i64: 2, 3>}} : ({xp}) -> {window}')
            lines.append(f'%t{kh}{kw} = "lz.reshape"(%s{kh}{kw}) {{shape = array<i64: {c}, 1, {size * size}>}} '
                         f': ({window}) -> {tap}')
            names.append(f"%t{kh}{kw}")
    lines.append(f'%taps = "lz.concat"({", ".join(names)}) {{axis = 1 : i64}} : ({", ".join([tap] * 9)}) -> {taps}')
    col = f"tensor<{9 * c}x{size * size}xf32>"
    lines.append(f'%col = "lz.reshape"(%taps) {{shape = array<i64: {9 * c}, {size * size}>}} : ({taps}) -> {col}')
    out = f"tensor<{c}x{size * size}xf32>"
    lines.append(f'%y = "lz.matmul"(%w, %col) : (tensor<{c}x{9 * c}xf32>, {col}) -> {out}')
    body = "\n  ".join(lines)
    return f"func.func @f(%x: {x}, %w: tensor<{c}x{9 * c}xf32>) -> {out} {{\n  {body}\n  func.return %y : {out}\n}}"


def compare_lowerings() -> None:
    c, size = args.channels, args.size
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, c, size, size), np.float32)
    w = (rng.standard_normal((c, c, 3, 3)) * 0.05).astype(np.float32)
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
    print(f"\nlowerings of the batch-1 convolution ({2 * c * c * 9 * size * size / 1e6:.0f} MFLOP):")
    saved = contraction.CONV_B
    for name, reading in (("direct", "direct"), ("implicit im2col", "packed")):
        contraction.CONV_B = reading
        f = lezero.compile(conv_function(1, c, size, False))
        np.testing.assert_allclose(f(x, w), expected, rtol=1e-3, atol=1e-3)
        print(f"  {name:<18}{best_seconds(lambda: f(x, w), args.seconds) * 1e3:>9.3f} ms", flush=True)
    contraction.CONV_B = saved
    f = lezero.compile(explicit_im2col_function(c, size))
    w2 = w.reshape(c, 9 * c)
    np.testing.assert_allclose(f(x, w2).reshape(expected.shape), expected, rtol=1e-3, atol=1e-3)
    print(f"  {'explicit im2col':<18}{best_seconds(lambda: f(x, w2), args.seconds) * 1e3:>9.3f} ms", flush=True)


if __name__ == "__main__":
    main()
    if args.lowerings:
        compare_lowerings()
