"""Softmax, layer norm, the reductions around them and GELU: single-operator ONNX models, lezero
against ONNX Runtime, per op and shape, with the GB/s each achieves.

Run it as

    LEZERO_NUM_THREADS=2 .venv/bin/python benchmarks/normalization.py [--budget 2] [--only softmax]

Two comparisons per model, each timed alternating with its peer in the same process (medians,
``timing.alternating_medians``; the machine may be shared):

- end to end, 2 threads: ``lezero.onnx.compile(model).run(feeds)`` against
  ``InferenceSession.run`` (2 intra-op threads, spinning off so it does not steal the core the
  next lezero run needs): what a user gets, with each runtime's per-call overhead;
- kernels, 1 thread: the model's lezero kernels alone (``CompiledFunction.profile`` on a one-thread
  pool: the sum of the launches, no call overhead) against ORT on 1 thread: how close each kernel
  is to the machine.

GB/s counts each input and output once (what a kernel at the memory roofline must move).  Ratios
are lezero time / ORT time: below 1, lezero is faster.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from onnx_models import cpu_model  # noqa: E402
from timing import alternating_medians  # noqa: E402

OPSET = 17


def model(nodes, inputs, constants=()) -> onnx.ModelProto:
    """A graph of ``nodes`` reading float32 ``inputs`` ((name, shape)) and ``constants`` ((name,
    value)), writing ``y``."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in constants])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def node(op, inputs, output, **attrs):
    return helper.make_node(op, inputs, [output], **attrs)


def layer_norm_decomposed(shape):
    """LayerNorm as torch exports it below opset 17 (and as many hand-written norms read)."""
    return model([node("ReduceMean", ["x"], "mean", axes=[-1]), node("Sub", ["x", "mean"], "centered"),
                  node("Pow", ["centered", "two"], "squares"), node("ReduceMean", ["squares"], "var", axes=[-1]),
                  node("Add", ["var", "eps"], "var_eps"), node("Sqrt", ["var_eps"], "std"),
                  node("Div", ["centered", "std"], "normalized"), node("Mul", ["normalized", "scale"], "scaled"),
                  node("Add", ["scaled", "bias"], "y")],
                 [("x", shape)], layer_norm_parameters(shape[-1]) + [("two", 2.0), ("eps", 1e-5)])


def layer_norm_parameters(n):
    rng = np.random.default_rng(n)
    return [("scale", rng.uniform(0.5, 1.5, n)), ("bias", rng.uniform(-1, 1, n))]


def gelu_erf(shape):
    return model([node("Div", ["x", "sqrt2"], "a"), node("Erf", ["a"], "erf"), node("Add", ["erf", "one"], "p"),
                  node("Mul", ["x", "p"], "q"), node("Mul", ["q", "half"], "y")],
                 [("x", shape)], [("sqrt2", np.sqrt(2)), ("one", 1), ("half", 0.5)])


def gelu_tanh(shape):
    """GPT-2's GELU: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), x^3 as Pow."""
    return model([node("Pow", ["x", "three"], "cube"), node("Mul", ["cube", "k"], "a"), node("Add", ["x", "a"], "b"),
                  node("Mul", ["b", "c"], "t"), node("Tanh", ["t"], "th"), node("Add", ["th", "one"], "p"),
                  node("Mul", ["x", "p"], "q"), node("Mul", ["q", "half"], "y")],
                 [("x", shape)], [("three", 3), ("k", 0.044715), ("c", np.sqrt(2 / np.pi)), ("one", 1), ("half", 0.5)])


def cases():
    """(name, model) for every op and shape measured: ViT-B/16's attention (12 heads of 197) and
    widths (768, MLP 3072), a BERT/GPT-2 batch 4 x 64 with 8 heads of 256 wide."""
    yield "Softmax 12x197x197", model([node("Softmax", ["x"], "y", axis=-1)], [("x", [12, 197, 197])])
    yield "Add mask + Softmax 4x8x64x64", model([node("Add", ["x", "mask"], "s"), node("Softmax", ["s"], "y", axis=-1)],
                                                 [("x", [4, 8, 64, 64]), ("mask", [4, 1, 1, 64])])
    for shape in ([1, 197, 768], [4, 64, 256]):
        text = "x".join(map(str, shape))
        yield f"LayerNormalization {text}", model(
            [node("LayerNormalization", ["x", "scale", "bias"], "y", axis=-1, epsilon=1e-5)], [("x", shape)],
            layer_norm_parameters(shape[-1]))
        yield f"LayerNorm decomposed {text}", layer_norm_decomposed(shape)
    yield "ReduceMean 1x197x768", model([node("ReduceMean", ["x"], "y", axes=[-1])], [("x", [1, 197, 768])])
    yield "ReduceMax 12x197x197", model([node("ReduceMax", ["x"], "y", axes=[-1])], [("x", [12, 197, 197])])
    for shape in ([1, 197, 3072], [4, 64, 1024]):
        text = "x".join(map(str, shape))
        yield f"GELU (Erf) {text}", gelu_erf(shape)
        yield f"GELU (Tanh, Pow) {text}", gelu_tanh(shape)


def ort_session(m: onnx.ModelProto, threads: int):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    return ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])


def measure(name: str, m: onnx.ModelProto, budget: float) -> dict:
    import lezero.onnx
    from lezero.runtime.cpu import CompiledFunction
    from lezero.runtime.thread_pool import ThreadPool

    rng = np.random.default_rng(0)
    feeds = {i.name: (rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]) * 3).astype(np.float32)
             for i in m.graph.input}
    compiled = lezero.onnx.compile(m)
    two, one = ort_session(m, 2), ort_session(m, 1)
    (got,), (want,) = compiled.run(feeds).values(), two.run(None, feeds)
    error = float(np.max(np.abs(got.astype(np.float64) - want)))
    end_to_end = alternating_medians({"lezero": lambda: compiled.run(feeds), "ort": lambda: two.run(None, feeds)},
                                     budget)
    one_thread = CompiledFunction(lezero.onnx.import_model(m), "main", pool=ThreadPool(1))
    arrays = [feeds[i.name] for i in m.graph.input]
    launch_seconds = []  # the launches of each profiled call (the call also checks and allocates)

    def lezero_kernels():
        launch_seconds.append(sum(t.seconds for t in one_thread.profile(*arrays)[1]))

    kernels = alternating_medians({"lezero": lezero_kernels, "ort": lambda: one.run(None, feeds)}, budget)
    nbytes = sum(a.nbytes for a in arrays) + want.nbytes
    return {"name": name, "error": error, "bytes": nbytes, "lz": end_to_end["lezero"], "ort": end_to_end["ort"],
            "lz_kernels": float(np.median(launch_seconds[1:])), "ort_1": kernels["ort"],
            "names": [t.name for t in one_thread.profile(*arrays)[1]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", type=float, default=1.0, help="seconds per alternating comparison")
    parser.add_argument("--only", default="", help="measure the cases whose name holds this text")
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}; LEZERO_NUM_THREADS={os.environ.get('LEZERO_NUM_THREADS', '(all)')}")
    print(f"{'op':32s} {'lezero':>9s} {'ORT':>9s} {'ratio':>6s} | {'kernels':>9s} {'GB/s':>6s} {'ORT 1t':>9s} "
          f"{'GB/s':>6s} {'ratio':>6s} | max |err|   kernels")
    print(f"{'':32s} {'2 threads, end to end (us)':^26s} | {'1 thread: lezero kernels, ORT (us)':^42s} |")
    for name, m in cases():
        if args.only.lower() not in name.lower():
            continue
        r = measure(name, m, args.budget)
        gbps = lambda seconds: r["bytes"] / seconds / 1e9  # noqa: E731
        print(f"{name:32s} {r['lz'] * 1e6:9.1f} {r['ort'] * 1e6:9.1f} {r['lz'] / r['ort']:6.2f} | "
              f"{r['lz_kernels'] * 1e6:9.1f} {gbps(r['lz_kernels']):6.1f} {r['ort_1'] * 1e6:9.1f} "
              f"{gbps(r['ort_1']):6.1f} {r['lz_kernels'] / r['ort_1']:6.2f} | {r['error']:.1e}   "
              f"{', '.join(r['names'])}", flush=True)


if __name__ == "__main__":
    main()
