"""Checkpoint size and save time (issue 15): the digits CNN (with its Adam state) and a
100M-parameter model, saved by ``CheckpointManager`` synchronously and asynchronously, against
``torch.save`` of the same tensors (torch's own tensors, to a file, fsynced) in the same run.

    LEZERO_NUM_THREADS=2 .venv/bin/python benchmarks/checkpoint.py [--repeat 3] [--params 100e6]

Printed per model: bytes, the seconds of a synchronous save (write, fsync, metadata), its GB/s,
the stall of an asynchronous save (what ``save`` holds the training loop: the snapshot copy), the
seconds until the background write is complete, and the ratio to torch.save.  Medians of
``--repeat`` alternating runs.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import platform
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "examples"))
from train_cnn import DigitsCNN  # noqa: E402

import lezero as lz  # noqa: E402
from lezero.utils.checkpoint import CheckpointManager  # noqa: E402


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


class Big(lz.nn.Module):
    """``layers`` square Linear layers of ``width``: about ``layers * width**2`` parameters."""

    def __init__(self, params: float, width: int = 4096):
        super().__init__()
        self.layers = lz.nn.ModuleList(lz.nn.Linear(width, width) for _ in range(max(1, round(params / width ** 2))))


def cnn_state():
    model = DigitsCNN()
    optimizer = lz.optim.Adam(model.parameters())
    loss = model(lz.randn(4, 1, 8, 8)).sum()
    loss.backward()
    optimizer.step()  # Adam's moments exist
    return {"model": model, "optimizer": optimizer}


def torch_tensors(state: dict) -> dict:
    """The same tensors as torch's, for torch.save."""
    out = {}
    for name, value in state.items():
        sd = value.state_dict()
        flat = sd.items() if name == "model" else ((f"{k}.{n}", t) for k, s in sd["state"].items()
                                                   for n, t in s.items() if isinstance(t, lz.Tensor))
        out.update({f"{name}.{k}": torch.from_numpy(np.array(t.detach().numpy())) for k, t in flat})
    return out


def torch_save(tensors: dict, path: str) -> None:
    with open(path, "wb") as f:
        torch.save(tensors, f)
        f.flush()
        os.fsync(f.fileno())


def measure(name: str, state: dict, repeat: int, scratch: str) -> None:
    peer = torch_tensors(state)
    sync_s, stall_s, async_s, torch_s, nbytes = [], [], [], [], 0
    for i in range(repeat):
        for mode in ("sync", "async", "torch"):
            folder = os.path.join(scratch, f"{name}_{mode}_{i}")
            start = time.perf_counter()
            if mode == "torch":
                os.makedirs(folder)
                torch_save(peer, os.path.join(folder, "state.pt"))
                torch_s.append(time.perf_counter() - start)
            else:
                manager = CheckpointManager(folder, async_save=(mode == "async"), save_rng=False)
                manager.save(1, **state)
                stall = time.perf_counter() - start
                manager.wait()
                total = time.perf_counter() - start
                (sync_s if mode == "sync" else async_s).append(total)
                if mode == "async":
                    stall_s.append(stall)
                nbytes = sum(f.stat().st_size for f in pathlib.Path(manager.folder(1)).iterdir())
            shutil.rmtree(folder)
    sync, stall, done, peer_s = (statistics.median(v) for v in (sync_s, stall_s, async_s, torch_s))
    print(f"{name:>6}: {nbytes / 1e6:9.2f} MB  sync save {sync * 1e3:8.1f} ms ({nbytes / sync / 1e9:5.2f} GB/s)  "
          f"async: stall {stall * 1e3:7.1f} ms, written after {done * 1e3:8.1f} ms  "
          f"torch.save {peer_s * 1e3:8.1f} ms  (lezero sync / torch {sync / peer_s:5.2f}x)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--params", type=float, default=100e6)
    parser.add_argument("--directory", default=None, help="where to write (default: a temporary folder)")
    args = parser.parse_args(argv)
    print(f"CPU: {cpu_model()}, {os.cpu_count()} cores; LEZERO_NUM_THREADS={os.environ.get('LEZERO_NUM_THREADS')}")
    lz.manual_seed(0)
    scratch = tempfile.mkdtemp(dir=args.directory, prefix="lezero_checkpoint_bench_")
    try:
        measure("cnn", cnn_state(), args.repeat, scratch)
        big = Big(args.params)
        print(f"   big: {sum(p.numel() for p in big.parameters()) / 1e6:.1f}M parameters")
        measure("big", {"model": big}, args.repeat, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
