"""Eager per-op overhead: lezero's dispatch (cache lookup, one launch, a new tensor) against
PyTorch's, on tensors small enough that the time is almost all overhead; then one training step
of the seed program's MLP (forward, cross-entropy, backward, Adam) at batch 64.

Run it as

    .venv/bin/python benchmarks/eager_overhead.py [--threads 1] [--seconds 0.3]

Each time is the best of several repetitions of a batch of calls (the machine is shared: the best
is the least disturbed), after a warm-up that compiles every lezero op.  Ratios are lezero time /
torch time: below 1, lezero is faster.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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

OPS = [
    ("a + b", "add"),
    ("a * 2.0", "mul by a Python number"),
    ("a.exp()", "exp"),
    ("a.relu()", "relu"),
    ("a > b", "compare"),
    ("a.sum(1)", "sum over a dim"),
    ("a.mean()", "mean of everything"),
    ("a.softmax(-1)", "softmax"),
    ("a.reshape(-1)", "reshape (no kernel)"),
    ("a.t()", "transpose"),
    ("a[1:3]", "slice"),
    ("a @ w", "matmul 8x16 @ 16x16"),
    ("F.linear(a, w, v)", "linear"),
    ("a.float()", "cast to the same dtype"),
]


def per_call(stmt: str, env: dict, calls: int = 200) -> float:
    code = compile(f"for _ in range({calls}):\n    {stmt}", "<bench>", "exec")
    return best_seconds(lambda: exec(code, env), args.seconds) / calls


def main() -> None:
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal((8, 16), np.float32), rng.standard_normal((8, 16), np.float32)
    w_np, v_np = rng.standard_normal((16, 16), np.float32), rng.standard_normal(16, np.float32)
    lz_env = dict(a=lz.from_numpy(a_np), b=lz.from_numpy(b_np), w=lz.from_numpy(w_np), v=lz.from_numpy(v_np),
                  F=lz.nn.functional)
    torch_env = dict(a=torch.from_numpy(a_np), b=torch.from_numpy(b_np), w=torch.from_numpy(w_np),
                     v=torch.from_numpy(v_np), F=torch.nn.functional)
    print(f"per-op time on 8x16 float32 ({args.threads} thread{'s' if args.threads > 1 else ''}), microseconds")
    print(f"{'op':38s} {'lezero':>8s} {'torch':>8s} {'ratio':>7s}")
    ratios = []
    for stmt, what in OPS:
        exec(stmt, lz_env)  # compile it once
        t_lz, t_torch = per_call(stmt, lz_env), per_call(stmt, torch_env)
        ratios.append(t_lz / t_torch)
        print(f"{what + ' (' + stmt + ')':38s} {t_lz * 1e6:8.2f} {t_torch * 1e6:8.2f} {t_lz / t_torch:7.2f}")
    print(f"{'geometric mean of the ratios':38s} {'':8s} {'':8s} {float(np.exp(np.mean(np.log(ratios)))):7.2f}")
    print()
    training_step()


def training_step() -> None:
    """The seed program's loop body: zero_grad, forward, loss, backward, step (batch 64)."""
    rng = np.random.default_rng(0)
    x_np = rng.standard_normal((64, 784), np.float32)
    y_np = rng.integers(0, 10, 64)

    def build(lib):
        model = lib.nn.Sequential(lib.nn.Linear(784, 256), lib.nn.ReLU(), lib.nn.Linear(256, 10))
        optimizer = lib.optim.Adam(model.parameters())
        criterion = lib.nn.CrossEntropyLoss()
        x, y = lib.from_numpy(x_np), lib.from_numpy(y_np)

        def step():
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
        return step

    start = time.perf_counter()
    lz_step = build(lz)
    lz_step()
    first = time.perf_counter() - start
    torch_step = build(torch)
    t_lz, t_torch = best_seconds(lz_step, 3 * args.seconds), best_seconds(torch_step, 3 * args.seconds)
    print(f"MLP 784-256-10 training step, batch 64 (first lezero step, compiling: {first:.2f} s)")
    print(f"{'':38s} {'lezero':>8s} {'torch':>8s} {'ratio':>7s}")
    print(f"{'step time, microseconds':38s} {t_lz * 1e6:8.1f} {t_torch * 1e6:8.1f} {t_lz / t_torch:7.2f}")


if __name__ == "__main__":
    main()
