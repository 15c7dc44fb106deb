"""A fused elementwise kernel: gelu(x * a + b) on 4M float32 (x 4096x1024, a and b per column),
lezero's generated kernel against numpy and torch, all on the same number of threads.

Run it as

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/elementwise.py [--threads 2]
    .venv/bin/python benchmarks/elementwise.py --functions [--sizes 262144,4194304] [--seconds 1]

lezero: the function through lezero.compile (the user's path): partitioned and fused into one
lz.kernel (exact gelu, x * Phi(x) through its vectorized erfc), JIT-compiled at O3 for this CPU,
run by the runtime's thread pool on split work-item ranges (ctypes releases the GIL); the output
is allocated per call, as the caller gets a fresh array.
numpy: has no erf, so the peer computes the tanh form of gelu,
0.5 y (1 + tanh(sqrt(2/pi) (y + 0.044715 y^3))), y = x * a + b, in two ways: as one expression,
and with in-place ufuncs (out=, no temporaries); numpy is single-threaded whatever --threads says.
torch: torch.nn.functional.gelu(x * a + b) (exact erf), torch.set_num_threads(--threads).

Each time is the best of several repetitions (the machine is shared: the best is the least
disturbed).  Ratios are peer time / lezero time: above 1, lezero is faster.

``--functions``: each transcendental alone (exp, tanh, sigmoid, erf), the exact gelu, GPT-2's
tanh gelu chain as torch exports it (``pow 3, mul, add, mul, tanh, add, mul``: one fused kernel)
and silu, on ``--sizes`` float32 elements, against ONNX Runtime running the same function as a
one-node model (Exp, Tanh, Sigmoid, Erf; com.microsoft Gelu and FastGelu, its fused kernels;
Sigmoid + Mul), ``--threads`` threads each (ORT's spinning off), both writing into a preallocated
output, alternating, medians of the rounds; the CPU model and the load average are printed.
"""
from __future__ import annotations

import argparse
import math
import os
import sys

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--rows", type=int, default=4096)
parser.add_argument("--cols", type=int, default=1024)
parser.add_argument("--seconds", type=float, default=1.0, help="time budget per implementation")
parser.add_argument("--functions", action="store_true", help="each function alone against ONNX Runtime")
parser.add_argument("--sizes", default="262144,4194304", help="--functions: element counts, separated by commas")
args = parser.parse_args()


import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# --functions builds its functions with the test helpers' builder (tests/support/ir_building.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from lezero.ir import parse_module  # noqa: E402
from lezero.runtime.cpu import CompiledFunction  # noqa: E402
from lezero.runtime.thread_pool import ThreadPool  # noqa: E402
from timing import alternating_medians, best_seconds, cpu_model  # noqa: E402
from workloads import gelu_function  # noqa: E402


def sigmoid_times_x(b, x):
    return b.op("lz.mul", x, b.op("lz.sigmoid", x))


def _functions():
    """name -> (lezero body, ORT nodes (op, inputs, domain) from x to y)."""
    from fusion import gelu_tanh

    def unary(name):
        return lambda b, x: b.op(name, x)

    return {"exp": (unary("lz.exp"), [("Exp", ["x"], "")]),
            "tanh": (unary("lz.tanh"), [("Tanh", ["x"], "")]),
            "sigmoid": (unary("lz.sigmoid"), [("Sigmoid", ["x"], "")]),
            "erf": (unary("lz.erf"), [("Erf", ["x"], "")]),
            "gelu (erf)": (unary("lz.gelu"), [("Gelu", ["x"], "com.microsoft")]),
            "gelu (GPT-2's tanh chain)": (gelu_tanh, [("FastGelu", ["x"], "com.microsoft")]),
            "silu": (sigmoid_times_x, [("Sigmoid", ["x"], ""), ("Mul", ["x", "s"], "")])}


def _ort_session(nodes, n: int, threads: int):
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    outputs = ["s"] * (len(nodes) - 1) + ["y"]
    graph = helper.make_graph([helper.make_node(op, inputs, [out], domain=domain)
                               for (op, inputs, domain), out in zip(nodes, outputs)], "f",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    onnx.checker.check_model(model)
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def functions_table() -> None:
    from lezero.ir import tensor
    from support.ir_building import build

    threads = args.threads
    pool = ThreadPool(threads)
    print(f"{cpu_model()}, {threads} threads, load average {os.getloadavg()[0]:.1f} (a shared machine: "
          f"medians of alternating rounds)")
    print(f"{'function':28s} {'elements':>9s} {'lezero us':>10s} {'ns/elem':>8s} {'GB/s':>6s} {'ORT us':>9s} "
          f"{'ORT / lezero':>12s} {'max |diff| / max |y|':>20s}")
    for n in [int(v) for v in args.sizes.split(",")]:
        x = (np.random.default_rng(0).standard_normal(n) * 2).astype(np.float32)
        for name, (body, nodes) in _functions().items():
            run = CompiledFunction(build([tensor((n,), "f32")], body), "f", pool=pool).runner([(n,)])
            ours = np.empty_like(x)
            session = _ort_session(nodes, n, threads)
            theirs = np.empty_like(x)
            binding = session.io_binding()
            binding.bind_cpu_input("x", x)
            binding.bind_output("y", "cpu", 0, np.float32, [n], theirs.ctypes.data)
            reps = max(1, 2 ** 22 // n)  # a timed round of a few ms
            times = alternating_medians({"lezero": lambda: [run([x], [ours]) for _ in range(reps)],
                                         "ORT": lambda: [session.run_with_iobinding(binding) for _ in range(reps)]},
                                        args.seconds)
            seconds = times["lezero"] / reps
            print(f"{name:28s} {n:9d} {seconds * 1e6:10.1f} {seconds / n * 1e9:8.3f} {8 * n / seconds / 1e9:6.1f} "
                  f"{times['ORT'] / reps * 1e6:9.1f} {times['ORT'] / times['lezero']:12.2f} "
                  f"{float(np.abs(ours - theirs).max() / np.abs(theirs).max()):20.1e}", flush=True)
    print(f"load average at the end {os.getloadavg()[0]:.1f}")


def main() -> None:
    if args.functions:
        functions_table()
        return
    rows, cols, threads = args.rows, args.cols, args.threads
    rng = np.random.default_rng(0)
    x = rng.standard_normal((rows, cols)).astype(np.float32)
    a = rng.uniform(0.5, 1.5, cols).astype(np.float32)
    c = rng.uniform(-0.5, 0.5, cols).astype(np.float32)

    compiled = CompiledFunction(parse_module(gelu_function(rows, cols)), "f", pool=ThreadPool(threads))
    compiled(x, a, c)
    (kernel,) = [op for op in compiled.plan_for([x.shape, a.shape, c.shape]).func.entry_block.ops
                 if op.name == "lz.kernel"]

    def lezero_run():
        return compiled(x, a, c)

    k = math.sqrt(2 / math.pi)

    def numpy_expression():
        y = x * a + c
        return 0.5 * y * (1 + np.tanh(k * (y + 0.044715 * y * y * y)))  # y ** 3 would be a slow pow

    y_buf, t_buf = np.empty_like(x), np.empty_like(x)

    def numpy_in_place():
        y, t = y_buf, t_buf
        np.multiply(x, a, out=y)
        np.add(y, c, out=y)
        np.multiply(y, y, out=t)
        np.multiply(t, y, out=t)
        np.multiply(t, np.float32(0.044715), out=t)
        np.add(t, y, out=t)
        np.multiply(t, np.float32(k), out=t)
        np.tanh(t, out=t)
        np.add(t, np.float32(1), out=t)
        np.multiply(t, y, out=t)
        np.multiply(t, np.float32(0.5), out=t)
        return t

    times = {"lezero": best_seconds(lezero_run, args.seconds)}
    times["numpy (expression, tanh form)"] = best_seconds(numpy_expression, args.seconds)
    times["numpy (in place, tanh form)"] = best_seconds(numpy_in_place, args.seconds)
    try:
        import torch

        torch.set_num_threads(threads)
        tx, ta, tc = (torch.from_numpy(v) for v in (x, a, c))
        times["torch (gelu, erf)"] = best_seconds(lambda: torch.nn.functional.gelu(tx * ta + tc), args.seconds)
        error = float((torch.from_numpy(lezero_run()) - torch.nn.functional.gelu(tx * ta + tc)).abs().max())
    except ImportError:
        torch, error = None, float("nan")

    elements = rows * cols
    print(f"gelu(x * a + b), x {rows}x{cols} float32 ({elements / 1e6:.1f}M elements), {threads} threads; "
          f"one kernel: {kernel.attributes['name'].value}")
    print(f"max |lezero - torch| = {error:.2e}")
    print(f"{'implementation':32s} {'ms':>8s} {'GB/s':>7s} {'peer / lezero':>14s}")
    for name, seconds in times.items():
        gbps = 2 * elements * 4 / seconds / 1e9  # x read, out written
        ratio = seconds / times["lezero"]
        print(f"{name:32s} {seconds * 1e3:8.2f} {gbps:7.1f} {ratio:14.2f}")


if __name__ == "__main__":
    main()
