"""Views cost no copy: the time and the new memory of ``x[:, ::2]``, ``x.t()`` and ``x.narrow``
against a copy of the same elements (``.contiguous()`` of the view), in lezero and in PyTorch, and
an op reading each view (``view * 2``: lezero's kernel reads the view's memory through its
strides) against the same op on the copy.

Run it as

    .venv/bin/python benchmarks/views.py [--size 2048] [--threads 1] [--seconds 0.3]

Times are the best of repetitions (the machine may be shared).  New memory is the bytes of the
result when it does not share ``x``'s memory (0 for a view), and, for lezero, the peak of numpy's
allocations during the operation (``tracemalloc``: a copy and the result both alive).  Ratios are
lezero / torch.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tracemalloc

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--size", type=int, default=2048)
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--seconds", type=float, default=0.3, help="time budget per measurement")
args = parser.parse_args()
os.environ.setdefault("LEZERO_NUM_THREADS", str(args.threads))

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lezero as lz  # noqa: E402
from timing import best_seconds  # noqa: E402

torch.set_num_threads(args.threads)

VIEWS = [
    ("x[:, ::2]", lambda x: x[:, ::2]),
    ("x.t()", lambda x: x.t()),
    ("x.narrow(1, 8, n/2)", lambda x: x.narrow(1, 8, args.size // 2)),
]


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def lz_new_bytes(x, fn) -> tuple:
    """The result's bytes outside ``x``'s memory, and the peak allocated while making it."""
    tracemalloc.start()
    out = fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return (0 if np.shares_memory(out.numpy(), x.numpy()) else out.numpy().nbytes), peak


def torch_new_bytes(x, fn) -> int:
    out = fn()
    shared = out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    return 0 if shared else out.untyped_storage().nbytes()


def main() -> None:
    n = args.size
    data = np.random.default_rng(0).standard_normal((n, n), np.float32)
    lx, tx = lz.from_numpy(data), torch.from_numpy(data)
    print(f"CPU: {cpu_model()}; {n}x{n} float32, {args.threads} thread(s)")
    print(f"{'operation':40} {'lezero':>10} {'torch':>10} {'ratio':>7}   new memory: lezero / torch (lezero peak)")
    for name, view in VIEWS:
        rows = [
            (f"{name}", lambda x: view(x)),
            (f"{name}.contiguous() (a copy)", lambda x: view(x).contiguous()),
            (f"{name} * 2", lambda x: view(x) * 2),
            (f"{name}.contiguous() * 2", lambda x: view(x).contiguous() * 2),
        ]
        for label, fn in rows:
            fn(lx), fn(tx)  # compile and warm up
            lt = best_seconds(lambda: fn(lx), args.seconds)
            tt = best_seconds(lambda: fn(tx), args.seconds)
            (lb, peak), tb = lz_new_bytes(lx, lambda: fn(lx)), torch_new_bytes(tx, lambda: fn(tx))
            print(f"{label:40} {lt * 1e6:8.1f}us {tt * 1e6:8.1f}us {lt / tt:7.2f}   {lb / 2**20:6.2f} / "
                  f"{tb / 2**20:6.2f} MiB ({peak / 2**20:.2f})")
        v = view(lx)
        shared = np.shares_memory(v.numpy(), lx.numpy())
        print(f"  {name}: shares x's memory: {shared}; strides {v.stride()} (torch {view(tx).stride()})")


if __name__ == "__main__":
    main()
