"""The runtime's overhead: what handing a kernel's work to the thread pool costs, and what that does
to a small model end to end, against ONNX Runtime.

Run it as

    LEZERO_NUM_THREADS=2 .venv/bin/python benchmarks/thread_pool.py [--budget 3]

Two measurements, each alternating its variants in the same process (medians,
``timing.alternating_medians``; the machine may be shared):

- hand-off: an empty kernel (``void(i8**, i64, i64)``, returns at once) called on the caller's
  thread, against the same kernel through ``ThreadPool.parallel_for`` over 2 work items (one per
  thread): the difference is the price of splitting any kernel;
- a small transformer block (layer norm then a 256x256 matmul on a 4x64x256 input): lezero on
  the default pool, lezero on one thread, ONNX Runtime on ``LEZERO_NUM_THREADS`` intra-op threads
  with spinning off.  Ratios are lezero time / ORT time: below 1, lezero is faster.
"""
from __future__ import annotations

import argparse
import ctypes
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from onnx_models import cpu_model  # noqa: E402
from timing import alternating_medians  # noqa: E402

import lezero.onnx  # noqa: E402
from lezero.codegen.llvm.jit import compile_module  # noqa: E402
from lezero.runtime import thread_pool  # noqa: E402
from lezero.runtime.thread_pool import ThreadPool, default_pool  # noqa: E402

EMPTY_KERNEL = "define void @empty(i8** %pointers, i64 %begin, i64 %end) {\n  ret void\n}\n"


def hand_off(budget: float) -> None:
    module = compile_module(EMPTY_KERNEL)
    kernel = module.ctypes_function("empty", None, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64])
    pointers = (ctypes.c_void_p * 1)()
    pool = default_pool()
    batch = 100  # calls per timed round: one call is near the clock's resolution

    def on_caller():
        for _ in range(batch):
            kernel(pointers, 0, 2)

    def split():
        for _ in range(batch):
            pool.parallel_for(kernel, pointers, 2)
    medians = alternating_medians({"caller": on_caller, "split": split}, budget, min_reps=20, max_reps=2000)
    caller, split_s = medians["caller"] / batch * 1e6, medians["split"] / batch * 1e6
    print(f"empty kernel on the caller {caller:7.2f} us; split over {pool.num_threads} threads {split_s:7.2f} us; "
          f"hand-off {split_s - caller:7.2f} us")


def block_model(tokens: int = 64, batch: int = 4, width: int = 256) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    constants = {"scale": rng.standard_normal(width), "bias": rng.standard_normal(width),
                 "w": rng.standard_normal((width, width)) / np.sqrt(width)}
    nodes = [helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["n"], axis=-1, epsilon=1e-5),
             helper.make_node("MatMul", ["n", "w"], ["y"])]
    graph = helper.make_graph(
        nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, tokens, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(np.asarray(v, np.float32), n) for n, v in constants.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def small_model(budget: float) -> None:
    model = block_model()
    x = np.random.default_rng(1).standard_normal((4, 64, 256)).astype(np.float32)
    feeds = {"x": x}
    compiled = lezero.onnx.compile(model)
    saved = thread_pool._POOL
    thread_pool._POOL = ThreadPool(1)
    try:
        one_thread = lezero.onnx.compile(model)
        one_thread.run(feeds)  # binds its plan to the one-thread pool
    finally:
        thread_pool._POOL = saved
    options = ort.SessionOptions()
    options.intra_op_num_threads = default_pool().num_threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)[0]
    got = next(iter(compiled.run(feeds).values()))
    error = float(np.max(np.abs(got - want)))
    medians = alternating_medians({"lezero": lambda: compiled.run(feeds), "lezero_1": lambda: one_thread.run(feeds),
                                   "ort": lambda: session.run(None, feeds)}, budget, min_reps=50, max_reps=5000)
    lz, lz1, peer = (medians[k] * 1e6 for k in ("lezero", "lezero_1", "ort"))
    print(f"layer norm + matmul 4x64x256: lezero {lz:7.1f} us ({lz / peer:.2f}x ORT), lezero 1 thread {lz1:7.1f} us "
          f"({lz1 / peer:.2f}x), ORT {peer:7.1f} us; max abs err {error:.1e}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=3.0, help="seconds per measurement")
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}; {default_pool().num_threads} threads")
    hand_off(args.budget)
    small_model(args.budget)


if __name__ == "__main__":
    main()
