"""``sort`` of one float32 line of 1e3 .. 1e6 elements: lezero's ``x.sort()`` (``lz.topk`` with
``k = n``, merge-sorted on the CPU, stable) against ``torch.sort(x, stable=True)`` and numpy's
stable sort, measured in the same run; and, for the record, what the quadratic way (``k`` picks,
the lowering a small ``k`` keeps) would cost at 1e3 and 1e4.

Run it as

    .venv/bin/python benchmarks/sort.py [--threads 1] [--seconds 0.5]

Times are the best of repetitions (the machine may be shared).  Ratios are lezero / torch.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--threads", type=int, default=1)
parser.add_argument("--seconds", type=float, default=0.5, help="time budget per measurement")
args = parser.parse_args()
os.environ.setdefault("LEZERO_NUM_THREADS", str(args.threads))

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lezero as lz  # noqa: E402
from timing import best_seconds  # noqa: E402

torch.set_num_threads(args.threads)


def picks_seconds(x: lz.Tensor, k: int) -> float:
    """``topk`` of ``k`` (the picks' lowering while ``k <= log2 n``) scaled to a full sort's ``n``
    picks: each pick scans the line once, so the cost is linear in ``k``."""
    small = 10  # picks for any line of at least 1024
    x.topk(small, largest=False)
    return best_seconds(lambda: x.topk(small, largest=False), args.seconds) * x.shape[0] / small


def main() -> None:
    print(f"sort of one float32 line, {args.threads} thread(s), {platform.processor() or platform.machine()}")
    print(f"{'n':>9} {'lezero ms':>10} {'torch ms':>9} {'numpy ms':>9} {'lz/torch':>9} {'picks ms (quadratic)':>21}")
    rng = np.random.default_rng(0)
    for n in (1_000, 10_000, 100_000, 1_000_000):
        data = rng.standard_normal(n).astype(np.float32)
        x, t = lz.tensor(data), torch.from_numpy(data)
        ours, theirs = x.sort(), torch.sort(t, stable=True)
        assert np.array_equal(ours.indices.numpy(), theirs.indices.numpy())  # the same stable order
        lz_s = best_seconds(lambda: x.sort(), args.seconds)
        torch_s = best_seconds(lambda: torch.sort(t, stable=True), args.seconds)
        numpy_s = best_seconds(lambda: np.argsort(data, kind="stable"), args.seconds)
        picks = f"{picks_seconds(x, n) * 1e3:21.1f}" if n <= 10_000 else f"{'':>21}"
        print(f"{n:>9} {lz_s * 1e3:10.3f} {torch_s * 1e3:9.3f} {numpy_s * 1e3:9.3f} {lz_s / torch_s:9.2f} {picks}")


if __name__ == "__main__":
    main()
