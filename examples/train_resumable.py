"""Train the digits CNN (or the seed's MLP) so that a crash costs only the steps since the last
checkpoint: kill it at any moment, start it again, and it continues as if it never stopped.

    .venv/bin/python examples/train_resumable.py --checkpoints /tmp/run1 --steps 200
    lezero-run --max-restarts 3 examples/train_resumable.py --checkpoints /tmp/run1   (restarted on a crash)
    lezero-run --nproc-per-node 2 --max-restarts 3 examples/train_resumable.py --ddp --checkpoints /tmp/run2

The pattern is the loop in ``train``: restore (model, optimizer, LR scheduler, data loader, and,
by the manager, every random number generator) from the newest complete checkpoint, then save one
every ``--every`` steps; ``save`` copies the values and writes them in the background.  ``--log``
appends each step's loss (as a hexadecimal float, exact) and a ``restored`` line at each start;
``--out`` gets the final parameters (``lz.save``).  With ``--ddp`` every rank of ``lezero-run``
trains its share of each batch (``DistributedSampler``, ``DistributedDataParallel``) and saves its
own shard; the model is restored before DDP wraps it (DDP then broadcasts rank 0's weights, which
every rank restored alike).  Rank r > 0 logs to ``LOG.rank<r>``.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import digits  # noqa: E402
from train_cnn import DigitsCNN  # noqa: E402
from train_mlp import SimpleMLP  # noqa: E402

import lezero as lz  # noqa: E402
from lezero.utils.checkpoint import CheckpointManager  # noqa: E402


def train(checkpoints: str, steps: int, model_name: str = "cnn", every: int = 5, seed: int = 0, log=None,
          out=None, batch_size: int = 32, data=None, ddp: bool = False) -> int:
    x_train, y_train = data if data is not None else digits.load(8 if model_name == "cnn" else 28)[:2]
    if model_name == "mlp":
        x_train = x_train.reshape(len(x_train), 784)
    lz.manual_seed(seed)
    model = DigitsCNN() if model_name == "cnn" else SimpleMLP()
    optimizer = lz.optim.Adam(model.parameters(), lr=3e-3)
    scheduler = lz.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
    criterion = lz.nn.CrossEntropyLoss()
    dataset = lz.utils.data.TensorDataset(lz.from_numpy(x_train), lz.from_numpy(y_train))
    if ddp:
        lz.distributed.init_process_group(timeout=60)
        sampler = lz.utils.data.DistributedSampler(dataset, seed=seed)
        loader = lz.utils.data.DataLoader(dataset, batch_size=batch_size // sampler.num_replicas, sampler=sampler)
    else:
        loader = lz.utils.data.DataLoader(dataset, batch_size=batch_size, shuffle=True,
                                          generator=lz.Generator().manual_seed(seed))
    manager = CheckpointManager(checkpoints, every_n_steps=every, keep=3)  # rank, world size: lezero-run's
    step, _ = manager.restore(model=model, optimizer=optimizer, scheduler=scheduler, loader=loader)
    step = step or 0
    write = _logger(log if manager.rank == 0 or log is None else f"{log}.rank{manager.rank}")
    write(f"restored {step} pid {os.getpid()}")
    trained = lz.nn.parallel.DistributedDataParallel(model) if ddp else model
    model.train()
    while step < steps:
        if ddp:
            sampler.set_epoch(loader.epoch)
        for images, labels in loader:
            optimizer.zero_grad()
            loss = criterion(trained(images), labels)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            write(f"{step} {loss.item().hex()}")
            manager.save(step, model=model, optimizer=optimizer, scheduler=scheduler, loader=loader)
            if step == steps:
                break
    manager.close()
    if out is not None and manager.rank == 0:
        lz.save(model.state_dict(), out)
    if ddp:
        lz.distributed.destroy_process_group()
    return step


def _logger(path):
    """Lines appended with one ``write`` each (whole lines survive a kill)."""
    if path is None:
        return lambda line: None
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    return lambda line: os.write(fd, (line + "\n").encode())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", required=True, help="the checkpoint directory (restored from, saved to)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--model", choices=["cnn", "mlp"], default="cnn")
    parser.add_argument("--every", type=int, default=5, help="save a checkpoint every N steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--log", help="append each step's loss here")
    parser.add_argument("--out", help="write the final parameters here (lz.save)")
    parser.add_argument("--data", help="an .npz with x_train and y_train (default: scikit-learn's digits)")
    parser.add_argument("--ddp", action="store_true", help="data-parallel over lezero-run's ranks")
    args = parser.parse_args(argv)
    data = None
    if args.data:
        with np.load(args.data) as arrays:
            data = arrays["x_train"], arrays["y_train"]
    train(args.checkpoints, args.steps, args.model, args.every, args.seed, args.log, args.out, data=data,
          ddp=args.ddp)
    return 0


if __name__ == "__main__":
    sys.exit(main())
