"""The gradient of a loop: an Elman RNN ``h <- tanh(h @ W^T + x_t @ U + b)`` over ``--steps`` steps,
written as one ``lz.for``, differentiated by the autodiff pass (lz.for's rule: the forward loop
stacks h, a reverse lz.for runs the body's gradient) and compiled; against torch autograd on the
same loop, in this process, alternating, medians.  lezero is compiled twice, with and without the
``licm`` pass (the body's ``W^T``, its gradient's ``W`` re-transposed and ``exp(b)`` are invariant:
licm computes them once per call instead of once per step).

    LEZERO_NUM_THREADS=2 .venv/bin/python benchmarks/loop_gradient.py [--hidden 256] [--batch 8]

Ratios are lezero's time / torch's (below 1: lezero is faster).
"""
from __future__ import annotations

import argparse
import os
import sys

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--seconds", type=float, default=3.0, help="time budget per case")
parser.add_argument("--steps", type=int, default=64)
parser.add_argument("--hidden", type=int, default=256)
parser.add_argument("--batch", type=int, default=8)
args = parser.parse_args()
os.environ.setdefault("LEZERO_NUM_THREADS", str(args.threads))

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lezero as lz  # noqa: E402
import lezero.codegen.schedule as schedule  # noqa: E402
from lezero.ir.parser import parse_module  # noqa: E402
from lezero.passes.autodiff import differentiate  # noqa: E402
from timing import alternating_medians  # noqa: E402

torch.set_num_threads(args.threads)

RNN = """
func.func @rnn(%w: tensor<HxHxf32>, %u: tensor<HxHxf32>, %b: tensor<Hxf32>, %h0: tensor<BxHxf32>,
               %xs: tensor<SxBxHxf32>) -> tensor<SxBxHxf32> {
  %h, %ys = "lz.for"(%w, %u, %b, %h0, %xs) ({
  ^bb0(%i: tensor<i64>, %w_: tensor<HxHxf32>, %u_: tensor<HxHxf32>, %b_: tensor<Hxf32>, %h_: tensor<BxHxf32>,
       %x: tensor<BxHxf32>):
    %wt = "lz.transpose"(%w_) {perm = array<i64: 1, 0>} : (tensor<HxHxf32>) -> tensor<HxHxf32>
    %eb = "lz.exp"(%b_) : (tensor<Hxf32>) -> tensor<Hxf32>
    %0 = "lz.matmul"(%h_, %wt) : (tensor<BxHxf32>, tensor<HxHxf32>) -> tensor<BxHxf32>
    %1 = "lz.matmul"(%x, %u_) : (tensor<BxHxf32>, tensor<HxHxf32>) -> tensor<BxHxf32>
    %2 = "lz.add"(%0, %1) : (tensor<BxHxf32>, tensor<BxHxf32>) -> tensor<BxHxf32>
    %3 = "lz.add"(%2, %eb) : (tensor<BxHxf32>, tensor<Hxf32>) -> tensor<BxHxf32>
    %4 = "lz.tanh"(%3) : (tensor<BxHxf32>) -> tensor<BxHxf32>
    "lz.yield"(%4, %4) : (tensor<BxHxf32>, tensor<BxHxf32>) -> ()
  }) {trip_count = S : i64, num_invariant = 3 : i64, num_carried = 1 : i64}
     : (tensor<HxHxf32>, tensor<HxHxf32>, tensor<Hxf32>, tensor<BxHxf32>, tensor<SxBxHxf32>)
     -> (tensor<BxHxf32>, tensor<SxBxHxf32>)
  func.return %ys : tensor<SxBxHxf32>
}
"""


def compiled_gradient(pipeline: str, inputs: list):
    """@rnn_grad compiled with ``pipeline`` (its plan is built at the first call: made here)."""
    text = RNN.replace("H", str(args.hidden)).replace("B", str(args.batch)).replace("S", str(args.steps))
    module = parse_module(text)
    differentiate(module, "rnn")
    saved = schedule.KERNEL_PIPELINE
    schedule.KERNEL_PIPELINE = pipeline
    try:
        compiled = lz.compile(module, "rnn_grad")
        compiled(*inputs)
        return compiled
    finally:
        schedule.KERNEL_PIPELINE = saved


def torch_gradient(w, u, b, h, xs, dys):
    leaves = [torch.tensor(a, requires_grad=True) for a in (w, u, b, h, xs)]
    tw, tu, tb, th, txs = leaves
    ys = []
    for t in range(args.steps):
        th = torch.tanh(th @ tw.T + txs[t] @ tu + torch.exp(tb))
        ys.append(th)
    return torch.autograd.grad(torch.stack(ys), leaves, torch.from_numpy(dys))


def main() -> None:
    with open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown CPU")
    print(f"CPU: {cpu}, {args.threads} threads; an Elman RNN's gradient, hidden {args.hidden}, batch {args.batch}, "
          f"{args.steps} steps")
    rng = np.random.default_rng(0)
    h, b, s = args.hidden, args.batch, args.steps
    scale = 1 / np.sqrt(h)
    inputs = [(rng.standard_normal(shape) * k).astype(np.float32)
              for shape, k in [((h, h), scale), ((h, h), scale), ((h,), 0.1), ((b, h), 1), ((s, b, h), 1), ((s, b, h), 1)]]
    with_licm = compiled_gradient(schedule.KERNEL_PIPELINE, inputs)
    without = compiled_gradient(schedule.KERNEL_PIPELINE.replace("licm,", ""), inputs)
    assert "licm" in schedule.KERNEL_PIPELINE
    want = [g.numpy() for g in torch_gradient(*inputs)]
    for name, fn in [("licm", with_licm), ("no licm", without)]:
        got = fn(*inputs)[1:]
        worst = max(float(np.abs(g - w).max() / (np.abs(w).max() + 1e-30)) for g, w in zip(got, want))
        print(f"  {name}: gradients vs torch, worst relative error {worst:.1e}")
    # torch's worker threads spin for a while after each call, slowing whatever runs next: the
    # two lezero variants alternate by themselves, then the default one with torch
    variants = alternating_medians({"no licm": lambda: without(*inputs), "licm": lambda: with_licm(*inputs)},
                                   args.seconds)
    peer = alternating_medians({"licm": lambda: with_licm(*inputs), "torch": lambda: torch_gradient(*inputs)},
                               args.seconds)
    print(f"  lezero licm     {variants['licm'] * 1e3:8.2f} ms   no licm {variants['no licm'] * 1e3:8.2f} ms   "
          f"licm / no licm {variants['licm'] / variants['no licm']:5.2f}")
    print(f"  lezero licm     {peer['licm'] * 1e3:8.2f} ms   torch   {peer['torch'] * 1e3:8.2f} ms   "
          f"lezero / torch {peer['licm'] / peer['torch']:5.2f}")

if __name__ == "__main__":
    main()
