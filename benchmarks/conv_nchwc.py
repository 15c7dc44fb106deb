"""Chains of four convolutions (ReLU after each) over channel-blocked activations
(``codegen/llvm/conv_nchwc.py``, NCHW16c) against lezero's NCHW conv kernels and ONNX Runtime,
1 thread, in one process.

Run it as

    .venv/bin/python benchmarks/conv_nchwc.py [--reps 40] [--only 14x14]
    .venv/bin/python benchmarks/conv_nchwc.py --models resnet18,resnet50 [--threads 2]

A chain is the fair per-conv comparison with ORT: inside a model ORT reorders to its NCHWc layout
once at the input and once at the output, around a lone conv it pays both.  lezero NCHW: the chain
as an ONNX model through ``lezero.onnx.compile``.  NCHWc: the four blocked kernels called one after
another on blocked buffers (their reorders, once per chain, are left out, as a layout pass would
place them at a model's ends), their result checked against ORT's.  Times are CPU time of the
calling thread (``time.thread_time``: on a shared machine wall-clock medians move 2x with the
load), medians and minimums of ``--reps`` rounds, the three variants in a new random order each
round.  The CPU model, LLVM's CPU name and the load average are printed with the numbers.

``--models``: whole exports of ``build/bench-models/`` (``benchmarks/onnx_models.py`` builds them)
compiled twice in one process, with the blocked-layout pass (``passes/layout.py``) and without it
(NCHW everywhere), alternated with ORT: CPU time with 1 thread, wall time with more.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import time

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--reps", type=int, default=40)
parser.add_argument("--only", default="", help="only the chains whose names contain one of these comma-separated words")
parser.add_argument("--models", default="", help="comma-separated exports in build/bench-models/ to time whole instead")
parser.add_argument("--threads", type=int, default=1, help="--models: lezero's and ORT's threads")
args = parser.parse_args()
os.environ["LEZERO_NUM_THREADS"] = str(args.threads)  # before lezero starts its pool

import numpy as np  # noqa: E402
from timing import shuffled_times  # noqa: E402

# name, channels of the chain's activations (c0 -> c1 -> ... -> c4), image size, kernel
CHAINS = [
    ("3x3 64 at 56x56", (64, 64, 64, 64, 64), 56, 3),
    ("3x3 128 at 28x28", (128,) * 5, 28, 3),
    ("3x3 256 at 14x14", (256,) * 5, 14, 3),
    ("3x3 512 at 7x7", (512,) * 5, 7, 3),
    ("1x1 64->256->64 at 56x56", (64, 256, 64, 256, 64), 56, 1),
    ("1x1 512->2048->512 at 7x7", (512, 2048, 512, 2048, 512), 7, 1),
]


def chain_model(channels, size, k):
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(size * k)
    weights, inits, nodes, name = [], [], [], "x"
    for i, (c, o) in enumerate(zip(channels, channels[1:])):
        w = (rng.standard_normal((o, c, k, k)) * (2 / (c * k * k)) ** 0.5).astype(np.float32)
        bias = (rng.standard_normal(o) * 0.1).astype(np.float32)
        weights.append((w, bias))
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(bias, f"b{i}")]
        nodes += [helper.make_node("Conv", [name, f"w{i}", f"b{i}"], [f"c{i}"], kernel_shape=[k, k],
                                   pads=[k // 2] * 4),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}" if i < 3 else "y"])]
        name = f"r{i}"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels[0], size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels[-1], size, size])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), weights


class BlockedChain:
    """The chain's four blocked kernels, compiled for the host, with their buffers."""

    def __init__(self, channels, size, k, weights, block):
        from lezero.codegen.llvm.conv_nchwc import NchwcConv, nchwc_conv_module
        from lezero.codegen.llvm.jit import compile_module

        self.convs = [NchwcConv(1, c, o, size, size, (k, k), (1, 1), (k // 2,) * 4, block, relu=True)
                      for c, o in zip(channels, channels[1:])]
        self.modules = [compile_module(nchwc_conv_module(f"conv{i}", conv)) for i, conv in enumerate(self.convs)]
        self.calls, self.keep = [], []
        activations = [np.zeros((1, -(-c // block), size, size, block), np.float32) for c in channels]
        for i, (conv, (w, bias)) in enumerate(zip(self.convs, weights)):
            padded_bias = np.zeros(conv.out_blocks * block, np.float32)
            padded_bias[:conv.out_channels] = bias
            buffers = [activations[i], conv.weights(1).pack(w), padded_bias, activations[i + 1]]
            self.keep += buffers
            function = self.modules[i].ctypes_function(f"conv{i}", None, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64])
            self.calls.append((function, (ctypes.c_void_p * 4)(*[a.ctypes.data for a in buffers]), conv.work_items()))
        self.input, self.output = activations[0], activations[-1]

    def __call__(self):
        for function, buffers, items in self.calls:
            function(buffers, 0, items)


def main() -> None:
    import platform

    import onnxruntime as ort

    import lezero.onnx
    from lezero.codegen.llvm.target import host_target
    from lezero.codegen.packed_operands import blocked_to_nchw, nchw_to_blocked

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    host = host_target()
    block = 16 if host.vector_bytes == 64 else 8
    print(f"chains of 4 convs + ReLU, batch 1, 1 thread, {cpu} (LLVM {host.cpu}), NCHW{block}c, onnxruntime "
          f"{ort.__version__}; CPU-time medians (minimums) of {args.reps} rounds, ms per conv; load "
          f"{open('/proc/loadavg').read().split()[0]}")
    print(f"{'chain':<28}{'NCHW ms':>16}{'NCHWc ms':>16}{'ORT ms':>16}{'NCHWc/NCHW':>12}{'NCHWc/ORT':>11}"
          f"{'NCHW/ORT':>10}{'NCHWc GFLOP/s':>15}")
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    words = [word for word in args.only.split(",") if word]
    for name, channels, size, k in CHAINS:
        if words and not any(word in name for word in words):
            continue
        proto, weights = chain_model(channels, size, k)
        x = np.random.default_rng(1).standard_normal((1, channels[0], size, size)).astype(np.float32)
        feeds = {"x": x}
        ours = lezero.onnx.compile(proto)
        theirs = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
        blocked = BlockedChain(channels, size, k, weights, block)
        blocked.input[...] = nchw_to_blocked(x, block)
        expected = theirs.run(None, feeds)[0]
        blocked()
        for got in (ours.run(feeds)["y"], blocked_to_nchw(blocked.output, channels[-1])):
            np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * float(np.abs(expected).max()))
        runs = [lambda: ours.run(feeds), blocked, lambda: theirs.run(None, feeds)]
        times = tuple([t / 4 for t in ts] for ts in shuffled_times(runs, args.reps, time.thread_time))
        medians = [float(np.median(t)) for t in times]
        minima = [min(t) for t in times]
        flops = sum(2 * c * o * k * k * size * size for c, o in zip(channels, channels[1:])) / 4
        cells = "".join(f"{m * 1e3:>8.3f} ({n * 1e3:.3f})" for m, n in zip(medians, minima))
        print(f"{name:<28}{cells}{medians[1] / medians[0]:>12.2f}{medians[1] / medians[2]:>11.2f}"
              f"{medians[0] / medians[2]:>10.2f}{flops / minima[1] / 1e9:>15.1f}", flush=True)
    print(f"load after: {open('/proc/loadavg').read().split()[0]}")


def compare_models() -> None:
    import platform

    import onnx
    import onnxruntime as ort

    import lezero.onnx
    from lezero.codegen.llvm import backend
    from lezero.codegen.llvm.target import host_target

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    print(f"batch 1, {args.threads} threads, {cpu} (LLVM {host_target().cpu}), onnxruntime {ort.__version__}; "
          f"{'CPU' if args.threads == 1 else 'wall'}-time medians (minimums) of {args.reps} alternating rounds, ms; "
          f"load {open('/proc/loadavg').read().split()[0]}")
    print(f"{'model':<14}{'NCHW':>18}{'blocked':>18}{'ORT':>18}{'blocked/NCHW':>14}{'blocked/ORT':>13}"
          f"{'NCHW/ORT':>10}{'rel. error':>12}")
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    for name in args.models.split(","):
        proto = onnx.load(os.path.join(os.path.dirname(__file__), "..", "build", "bench-models", f"{name}.onnx"))
        feeds = {proto.graph.input[0].name: np.random.default_rng(0).standard_normal(
            [d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)}
        blocked = lezero.onnx.compile(proto)
        blocked.run(feeds)  # lowered now, with the pass in the pipeline
        layout_block, backend.layout_block = backend.layout_block, lambda: None
        try:
            plain = lezero.onnx.compile(proto)
            plain.run(feeds)
        finally:
            backend.layout_block = layout_block
        theirs = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
        expected = theirs.run(None, feeds)[0]
        errors = [float(np.abs(list(m.run(feeds).values())[0] - expected).max() / np.abs(expected).max())
                  for m in (plain, blocked)]
        runs = [lambda: plain.run(feeds), lambda: blocked.run(feeds), lambda: theirs.run(None, feeds)]
        times = shuffled_times(runs, args.reps, clock)
        medians = [float(np.median(t)) for t in times]
        cells = "".join(f"{m * 1e3:>9.2f} ({min(t) * 1e3:.2f})" for m, t in zip(medians, times))
        print(f"{name:<14}{cells}{medians[1] / medians[0]:>14.3f}{medians[1] / medians[2]:>13.3f}"
              f"{medians[0] / medians[2]:>10.3f}{errors[1]:>12.1e}", flush=True)
    print(f"load after: {open('/proc/loadavg').read().split()[0]}; rel. error: the blocked model's largest "
          f"difference from ORT over ORT's largest magnitude (NCHW's: {errors[0]:.1e} for the last model)")


if __name__ == "__main__":
    if args.models:
        compare_models()
    else:
        main()
