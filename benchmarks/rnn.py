"""LSTM latency: inference of a 2-layer ``lz.nn.LSTM`` over 128 steps (batch 1 and 64, hidden 256
and 512, input size = hidden) and one training step (forward, a mean-squared loss on the outputs,
backward, SGD), against PyTorch (``torch.nn.LSTM``, the same weights) and ONNX Runtime (that torch
LSTM exported by ``torch.onnx.export``: ONNX's LSTM op), all in this process, alternating, medians
(or minima: ``--statistic``); each timed call follows an untimed call of the same runner (the peers'
thread pools, torch's OpenMP above all, otherwise pay for each other's).

    LEZERO_NUM_THREADS=2 .venv/bin/python benchmarks/rnn.py [--threads 2] [--seconds 3]

lezero's fastest path is measured (``lz.nn.LSTM`` holds the input projection of all steps as one
GEMM, then per step the recurrent GEMM and the gates, through ``lz.scan``): inference traced by
``lz.jit.trace`` (one ``lz.for`` per layer, all its iterations' kernels run by one native call:
``lezero/runtime/loop_driver.py``), the
training step compiled by ``lz.jit.compile_train_step`` (the forward loops, their gradient loops
and the SGD update in one function); the eager module (a Python loop, one op per step) is shown
beside it.  Ratios are lezero's time / the peer's (below 1: lezero is faster).  ONNX Runtime runs with ``intra_op_num_threads``
= threads and spinning off (the machine is shared).

``--statistic min`` reports each runner's fastest round instead of the median: on a shared machine
whose load is several times its cores, a call of a few milliseconds or more is preempted in about
half the rounds (measured on 2 cores at load 7-10: one 128x512x2048 GEMM's rounds fell at 2.6-3.1 ms
or at 6.3-7.3 ms, a time slice later), so the median says which runner was preempted more often,
and the fastest round is the time of the work.

``--native`` adds, for inference, the exported ONNX model built by ``lezero-compile`` as a shared
library (its loops run by the C runtime's loop program walker, no Python) and called through
ctypes (``lz_model_run``, the caller's buffers), in the same alternating rounds.
"""
from __future__ import annotations

import argparse
import io
import os
import sys
import warnings

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--seconds", type=float, default=3.0, help="time budget per case")
parser.add_argument("--steps", type=int, default=128, help="sequence length")
parser.add_argument("--layers", type=int, default=2)
parser.add_argument("--train-batch", type=int, default=16)
parser.add_argument("--train-hidden", type=int, default=256)
parser.add_argument("--native", action="store_true", help="also time the ONNX model as a lezero-compile library")
parser.add_argument("--no-train", action="store_true", help="skip the training step")
parser.add_argument("--statistic", choices=("median", "min"), default="median",
                    help="of each runner's alternating rounds (min: the fastest, for a loaded machine)")
args = parser.parse_args()
os.environ.setdefault("LEZERO_NUM_THREADS", str(args.threads))

import ctypes  # noqa: E402
import tempfile  # noqa: E402

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lezero as lz  # noqa: E402
from timing import alternating_times  # noqa: E402

torch.set_num_threads(args.threads)


def alternating(runs: dict, min_reps: int) -> dict:
    """Each runner's ``--statistic`` over alternating rounds (``timing.alternating_times``)."""
    times = alternating_times(runs, args.seconds, min_reps=min_reps, warm_each=True)
    pick = min if args.statistic == "min" else np.median
    return {name: float(pick(t)) for name, t in times.items()}


def twins(hidden: int):
    """A lezero LSTM and a torch LSTM with its weights (float32)."""
    ours = lz.nn.LSTM(hidden, hidden, num_layers=args.layers)
    theirs = torch.nn.LSTM(hidden, hidden, num_layers=args.layers)
    theirs.load_state_dict({k: torch.from_numpy(v.detach().numpy().copy()) for k, v in ours.state_dict().items()})
    return ours, theirs


def exported(model: torch.nn.Module, x: torch.Tensor) -> bytes:
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, (x,), buffer, dynamo=False, input_names=["x"], output_names=["y", "h", "c"],
                          opset_version=17)
    return buffer.getvalue()


def native_library(onnx_bytes: bytes, x: np.ndarray, directory: str):
    """The ONNX model built as ``lib<name>.so`` by lezero-compile, as ``run(x) -> y`` (ctypes)."""
    import onnx
    from lezero.onnx.native import compile_onnx_native

    result = compile_onnx_native(onnx.load_from_string(onnx_bytes), directory, shared=True, name="lstm")
    library = ctypes.CDLL(str(result.paths[0]))
    library.lz_model_create.restype = ctypes.c_void_p
    library.lz_model_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int,
                                     ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int]
    model = library.lz_model_create(args.threads)
    y = np.empty(next(t.type.shape for t in result.program.outputs if t.name == "y"), np.float32)
    names_in, names_out = (ctypes.c_char_p * 1)(b"x"), (ctypes.c_char_p * 1)(b"y")
    inputs, outputs = (ctypes.c_void_p * 1)(x.ctypes.data), (ctypes.c_void_p * 1)(y.ctypes.data)

    def run() -> np.ndarray:
        if library.lz_model_run(model, names_in, inputs, 1, names_out, outputs, 1) != 0:
            raise RuntimeError("lz_model_run failed")
        return y
    run.keepalive = (library, x)
    return run


def ort_session(onnx_bytes: bytes):
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    return ort.InferenceSession(onnx_bytes, options, providers=["CPUExecutionProvider"])


def inference(batch: int, hidden: int) -> dict:
    ours, theirs = twins(hidden)
    ours.eval(), theirs.eval()
    x = np.random.default_rng(0).standard_normal((args.steps, batch, hidden)).astype(np.float32)
    lz_x, torch_x = lz.from_numpy(x), torch.from_numpy(x)
    onnx_bytes = exported(theirs, torch_x)
    session = ort_session(onnx_bytes)

    traced = lz.jit.trace(ours, example_inputs=(lz_x,), dynamic_batch=False)

    def lezero_run():
        return np.asarray(traced(lz_x)[0])

    def eager_run():
        with lz.no_grad():
            return ours(lz_x)[0].numpy()

    def torch_run():
        with torch.no_grad():
            return theirs(torch_x)[0].numpy()

    def ort_run():
        return session.run(["y"], {"x": x})[0]

    expected = torch_run()
    for run in (lezero_run, eager_run):
        np.testing.assert_allclose(run(), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(ort_run().reshape(expected.shape), expected, rtol=1e-4, atol=1e-5)
    runs = {"lezero": lezero_run, "eager": eager_run, "torch": torch_run, "ort": ort_run}
    with tempfile.TemporaryDirectory(prefix="rnn-native-") as directory:
        if args.native:
            runs["native"] = native_library(onnx_bytes, x, directory)
            np.testing.assert_allclose(runs["native"]().reshape(expected.shape), expected, rtol=1e-4, atol=1e-5)
        return alternating(runs, min_reps=5)


def eager_training_step(fw, model, optimizer, x, target):
    """One eager step (forward, mean-squared loss on the outputs, backward, update) in framework
    ``fw``: lezero or torch, the same code."""
    def step():
        optimizer.zero_grad()
        loss = fw.nn.functional.mse_loss(model(x)[0], target)
        loss.backward()
        optimizer.step()
        return loss.item()
    return step


def training(batch: int, hidden: int) -> dict:
    ours, theirs = twins(hidden)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.steps, batch, hidden)).astype(np.float32)
    target = rng.standard_normal((args.steps, batch, hidden)).astype(np.float32)
    lz_optimizer = lz.optim.SGD(ours.parameters(), lr=1e-3)
    torch_optimizer = torch.optim.SGD(theirs.parameters(), lr=1e-3)
    lz_x, lz_target, torch_x, torch_target = lz.from_numpy(x), lz.from_numpy(target), torch.from_numpy(x), \
        torch.from_numpy(target)
    compiled = lz.jit.compile_train_step(ours, lambda out, y: lz.nn.functional.mse_loss(out[0], y), lz_optimizer,
                                         (lz_x,), lz_target, dynamic_batch=False)

    def lezero_step():
        return compiled(lz_x, lz_target).item()

    eager_step = eager_training_step(lz, ours, lz_optimizer, lz_x, lz_target)
    torch_step = eager_training_step(torch, theirs, torch_optimizer, torch_x, torch_target)

    np.testing.assert_allclose(lezero_step(), torch_step(), rtol=1e-4)  # the same loss before the first update
    np.testing.assert_allclose(eager_step(), torch_step(), rtol=1e-4)  # and after it
    return alternating({"lezero": lezero_step, "eager": eager_step, "torch": torch_step}, min_reps=3)


def main() -> int:
    with open("/proc/cpuinfo") as f:
        cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown CPU")
    print(f"CPU: {cpu}, {len(os.sched_getaffinity(0))} cores available, {args.threads} threads; torch "
          f"{torch.__version__}, onnxruntime {ort.__version__}; load average {os.getloadavg()[0]:.2f}")
    statistic = "minima" if args.statistic == "min" else "medians"
    print(f"{args.layers}-layer LSTM, {args.steps} steps, input size = hidden; ms ({statistic} of alternating rounds); "
          "lezero = traced (inference) / compiled step (training); ratio = lezero / peer")
    native = f" {'native':>9} {'nat/ORT':>8} {'nat/lz':>7}" if args.native else ""
    print(f"{'case':>24} {'lezero':>9} {'eager':>9} {'torch':>9} {'ORT':>9} {'vs torch':>9} {'vs ORT':>7}{native}")
    for batch, hidden in ((1, 256), (1, 512), (64, 256), (64, 512)):
        t = inference(batch, hidden)
        native = f" {t['native'] * 1e3:>9.2f} {t['native'] / t['ort']:>8.2f} {t['native'] / t['lezero']:>7.2f}" \
            if args.native else ""
        print(f"{f'inference b{batch} h{hidden}':>24} {t['lezero'] * 1e3:>9.2f} {t['eager'] * 1e3:>9.2f} "
              f"{t['torch'] * 1e3:>9.2f} {t['ort'] * 1e3:>9.2f} {t['lezero'] / t['torch']:>9.2f} "
              f"{t['lezero'] / t['ort']:>7.2f}{native}", flush=True)
    if args.no_train:
        return 0
    t = training(args.train_batch, args.train_hidden)
    print(f"{f'train step b{args.train_batch} h{args.train_hidden}':>24} {t['lezero'] * 1e3:>9.2f} "
          f"{t['eager'] * 1e3:>9.2f} {t['torch'] * 1e3:>9.2f} {'':>9} {t['lezero'] / t['torch']:>9.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
