"""Mixed precision on the CPU: the seed's MLP training step (Linear(784, 256), relu, Linear(256, 10),
cross-entropy, Adam) in float32 and inside ``autocast(bfloat16)``, lezero's compiled step
(``lz.jit.compile_train_step``) against PyTorch eager with and without ``torch.autocast("cpu")``,
measured in the same run, alternating.

    LEZERO_NUM_THREADS=2 .venv/bin/python benchmarks/amp.py [--threads 2] [--batches 64 256] [--seconds 3] [--low bf16 f16]

Printed per batch size: the median step time of each (alternating rounds: the machine is shared,
and load hits all four alike), the low/f32 time ratio of each framework, lezero's time over torch's in
the same precision, and the bytes lezero's compiled step moves: what its kernels read and write
(each kernel's operands and results once, by the IR's storage: bf16 buffers on the CPU are float32
holding bf16 values, so a bf16 element moves 4 bytes, f16 2), and how many kernels it runs.
``lezero autocast bf16 cast`` is the same step with autocast's casts as kernels of their own (no
matmul reads its operands through a cast: as before they became the GEMM's prologue); ``--low f16``
adds the same rows in autocast(float16) (no GradScaler: the first step's loss is compared).  The first
step's losses are checked against torch's before anything is timed.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import unittest.mock

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--seconds", type=float, default=3.0, help="time budget per batch size")
parser.add_argument("--batches", type=int, nargs="+", default=[64, 256])
parser.add_argument("--low", nargs="+", default=["bf16"], choices=["bf16", "f16"],
                    help="the autocast dtypes (f16: torch's CPU f16 matmuls are slow, ~1 GF/s)")
args = parser.parse_args()
LOW = {"bf16": "bfloat16", "f16": "float16"}
os.environ.setdefault("LEZERO_NUM_THREADS", str(args.threads))

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lezero as lz  # noqa: E402
from lezero.passes import partition  # noqa: E402
from timing import alternating_medians, cpu_model  # noqa: E402

torch.set_num_threads(args.threads)


def build(lib):
    lib.manual_seed(0)
    return lib.nn.Sequential(lib.nn.Linear(784, 256), lib.nn.ReLU(), lib.nn.Linear(256, 10))


def lezero_step(x, y, low, fused_casts=True):
    """The compiled step, in float32 (``low`` None) or inside ``autocast(low)``, and its first loss
    (the first call builds its plan); ``fused_casts=False``: every cast is a kernel of its own (no
    matmul reads its operand through a cast: as before the casts became the GEMM's prologue)."""
    model = build(lz)
    model.load_state_dict({k: lz.tensor(v.detach().numpy()) for k, v in build(torch).state_dict().items()})
    optimizer = lz.optim.Adam(model.parameters(), lr=1e-3)
    unfused = unittest.mock.patch.object(partition, "is_operand_cast", lambda op, anchor: False)
    with contextlib.nullcontext() if fused_casts else unfused:
        if low is None:
            step = lz.jit.compile_train_step(model, lz.nn.functional.cross_entropy, optimizer, x, y)
        else:
            with lz.autocast("cpu", dtype=low):
                step = lz.jit.compile_train_step(model, lz.nn.functional.cross_entropy, optimizer, x, y)
        return step, float(step(x, y).item())


def torch_step(low):
    model = build(torch)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(x, y):
        optimizer.zero_grad()
        with torch.autocast("cpu", dtype=low or torch.float32, enabled=low is not None):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        return loss
    return step


def bytes_moved(step, shapes) -> tuple[int, int]:
    """(bytes the step's kernels read and write, number of kernels) at argument ``shapes``."""
    compiled, _ = next(iter(step._steps.values()))
    plan = compiled.plan_for([tuple(s) for s in shapes]).plan
    total = 0
    for launch in plan.launches:
        values = list(launch.op.operands) + list(launch.op.results)
        total += sum(int(np.prod(v.type.shape, dtype=np.int64)) * v.type.element_type.numpy_dtype.itemsize
                     for v in values if hasattr(v.type, "shape"))
    return total, len(plan.launches)


def peer_of(name: str) -> str:
    """torch's variant in the precision of lezero's ``name``."""
    return name.replace("lezero", "torch").removesuffix(" cast")


def main() -> int:
    print(f"# {cpu_model()}, {args.threads} threads (lezero LEZERO_NUM_THREADS, torch set_num_threads); "
          f"load {open('/proc/loadavg').read().split()[0]}")
    print(f"# {'batch':>5} {'variant':<27} {'median ms':>10} {'x/f32':>9} {'vs torch':>9} {'MB moved':>9} "
          f"{'kernels':>8}")
    rng = np.random.default_rng(0)
    for batch in args.batches:
        x = rng.standard_normal((batch, 784)).astype(np.float32)
        y = rng.integers(0, 10, batch)
        tx, ty = torch.from_numpy(x), torch.from_numpy(y)
        lezero = {"lezero f32": lezero_step(x, y, None)}
        for low in args.low:
            lezero[f"lezero autocast {low}"] = lezero_step(x, y, getattr(lz, LOW[low]))
            lezero[f"lezero autocast {low} cast"] = lezero_step(x, y, getattr(lz, LOW[low]), fused_casts=False)
        steps = {name: step for name, (step, _) in lezero.items()}
        steps["torch f32"] = torch_step(None)
        steps.update({f"torch autocast {low}": torch_step(getattr(torch, LOW[low])) for low in args.low})
        first = {name: float(steps[name](tx, ty).item()) for name in steps if name.startswith("torch")}
        for name, (_, loss) in lezero.items():
            peer = first[peer_of(name)]
            assert abs(loss - peer) <= 2e-2 * abs(peer), (name, loss, peer)
        runs = {name: (lambda s=s: s(x, y)) if name.startswith("lezero") else (lambda s=s: s(tx, ty))
                for name, s in steps.items()}
        medians = alternating_medians(runs, args.seconds, warm_each=True)
        for name, seconds in medians.items():
            f32_name = name.split()[0] + " f32"
            ratio = f"{seconds / medians[f32_name]:.2f}" if name != f32_name else ""
            peer = peer_of(name)
            versus = f"{seconds / medians[peer]:.2f}" if name.startswith("lezero") else ""
            moved = ""
            if name.startswith("lezero"):
                step = steps[name]
                compiled, _ = next(iter(step._steps.values()))
                total, kernels = bytes_moved(step, [a.type.shape for a in compiled.func.arguments])
                moved = f"{total / 1e6:9.2f} {kernels:>8}"
            print(f"  {batch:>5} {name:<27} {seconds * 1e3:10.3f} {ratio:>9} {versus:>9} {moved}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
