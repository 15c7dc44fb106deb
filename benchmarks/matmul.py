"""float32 MatMul shapes of real models: lezero against ONNX Runtime, one ONNX model each.

Run it as

    .venv/bin/python benchmarks/matmul.py [--threads 2] [--reps 40] [--only decode]

Each case is a small ONNX graph run by both ``lezero.onnx.compile`` and an ONNX Runtime session
(intra_op_num_threads = --threads, no spinning): a MatMul whose operands may first go through a
Transpose, as exported transformers do (ViT's attention: ``Transpose(x, [1, 0, 2])`` then MatMul;
the scores ``q @ k^T`` read k transposed), so lezero's fusion of the transpose into the GEMM's
operand is what is timed.  Weights (B of the projections and decode shapes) are initializers, as
in a model; activations are inputs.  The two libraries alternate call by call, and each time is
the median of --reps calls (this machine is shared: medians of alternating calls see the same
load); ratio = lezero's time / ONNX Runtime's.

Cases (``--only`` picks those whose group or name contains the text):
  square     1024^3; projection 197x768x2304 (ViT-B's QKV);
  attention  12 x (197x64) @ (64x197) with B read transposed (QK^T), 12 x (197x197) @ (197x64),
             16 x (64x64) @ (64x64), and the first two with their operands read through
             Transpose [1, 0, 2] of (197, 12, 64) tensors (torch's multi-head attention);
  decode     M = 1, 4, 8, 16, 32 rows x K = 768 by N = 768, 2304, 3072 (weights), plain and with A
             read through Transpose [1, 0, 2] of a (1, M, 768) tensor (M batches of one row each).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--reps", type=int, default=40, help="alternating calls per case (medians)")
parser.add_argument("--only", default="", help="run the cases whose group or name contains this")
args = parser.parse_args()
os.environ["LEZERO_NUM_THREADS"] = str(args.threads)  # before the runtime's pool is made

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lezero.onnx  # noqa: E402


class Case:
    """``a`` (stored shape, Transpose perm or None) @ ``b`` (the same, or a weight initializer)."""

    def __init__(self, group, a_shape, b_shape, a_perm=None, b_perm=None, b_weight=False):
        self.group, self.a_shape, self.b_shape = group, a_shape, b_shape
        self.a_perm, self.b_perm, self.b_weight = a_perm, b_perm, b_weight
        a = _permuted(a_shape, a_perm)
        b = _permuted(b_shape, b_perm)
        self.c = np.broadcast_shapes(a[:-2], b[:-2]) + (a[-2], b[-1])
        self.flop = 2 * np.prod(self.c) * a[-1]
        self.name = "".join([_text(a, a_perm, a_shape), " @ ", _text(b, b_perm, b_shape)])

    def model(self, rng):
        nodes, inputs, inits = [], [], []
        names = []
        for label, shape, perm, weight in (("a", self.a_shape, self.a_perm, False),
                                           ("b", self.b_shape, self.b_perm, self.b_weight)):
            if weight:
                inits.append(numpy_helper.from_array(rng.standard_normal(shape, dtype=np.float32), label))
            else:
                inputs.append(helper.make_tensor_value_info(label, TensorProto.FLOAT, list(shape)))
            if perm is not None:
                nodes.append(helper.make_node("Transpose", [label], [label + "_t"], perm=list(perm)))
                label += "_t"
            names.append(label)
        nodes.append(helper.make_node("MatMul", names, ["c"]))
        graph = helper.make_graph(nodes, "matmul", inputs,
                                  [helper.make_tensor_value_info("c", TensorProto.FLOAT, list(self.c))], inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        onnx.checker.check_model(model)
        return model


def _permuted(shape, perm):
    return tuple(shape) if perm is None else tuple(shape[p] for p in perm)


def _text(shape, perm, stored):
    dims = "x".join(map(str, shape))
    return dims if perm is None else f"T{list(perm)}({'x'.join(map(str, stored))})"


def cases():
    yield Case("square", (1024, 1024), (1024, 1024), b_weight=True)
    yield Case("square", (197, 768), (768, 2304), b_weight=True)
    yield Case("attention", (12, 197, 64), (12, 197, 64), b_perm=(0, 2, 1))
    yield Case("attention", (12, 197, 197), (12, 197, 64))
    yield Case("attention", (16, 64, 64), (16, 64, 64))
    yield Case("attention", (197, 12, 64), (197, 12, 64), a_perm=(1, 0, 2), b_perm=(1, 2, 0))
    yield Case("attention", (12, 197, 197), (197, 12, 64), b_perm=(1, 0, 2))
    for m in (1, 4, 8, 16, 32):
        for n in (768, 2304, 3072):
            yield Case("decode", (m, 768), (768, n), b_weight=True)
            yield Case("decode", (1, m, 768), (768, n), a_perm=(1, 0, 2), b_weight=True)


def ort_session(model, threads):
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def main() -> None:
    with open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown CPU")
    print(f"CPU: {cpu}, {len(os.sched_getaffinity(0))} cores available, {args.threads} threads, "
          f"onnxruntime {ort.__version__}; load average {os.getloadavg()[0]:.2f} before")
    print(f"{'case':>44} {'lezero us':>10} {'ORT us':>9} {'lz GF/s':>8} {'ORT GF/s':>8} {'ratio':>6}")
    rng = np.random.default_rng(0)
    ratios = []
    for case in cases():
        if args.only and args.only not in case.group and args.only not in case.name:
            continue
        model = case.model(rng)
        compiled = lezero.onnx.compile(model)
        session = ort_session(model, args.threads)
        feeds = {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim], dtype=np.float32)
                 for i in model.graph.input}
        got, want = compiled.run(feeds)["c"], session.run(None, feeds)[0]
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3 * np.sqrt(case.flop / np.prod(case.c)),
                                   err_msg=case.name)
        times = {"lezero": [], "ort": []}
        for _ in range(args.reps):
            for library, run in (("lezero", lambda: compiled.run(feeds)), ("ort", lambda: session.run(None, feeds))):
                start = time.perf_counter()
                run()
                times[library].append(time.perf_counter() - start)
        lz, peer = (float(np.median(times[k])) for k in ("lezero", "ort"))
        ratios.append(lz / peer)
        print(f"{case.name:>44} {lz * 1e6:>10.1f} {peer * 1e6:>9.1f} {case.flop / lz / 1e9:>8.1f} "
              f"{case.flop / peer / 1e9:>8.1f} {lz / peer:>6.2f}", flush=True)
    print(f"geometric mean of ratios {float(np.exp(np.mean(np.log(ratios)))):.2f} over {len(ratios)} cases; "
          f"load average {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
