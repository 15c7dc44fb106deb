"""What the training examples share (issue 16): the training curves go to TensorBoard by default, and
a tqdm bar over the steps is there for whoever asks.

``add_arguments`` gives an example ``--logdir DIR`` (default ``runs/<example>-<time>``, the folder
``tensorboard --logdir runs`` shows, one run per launch as with PyTorch's SummaryWriter),
``--no-tensorboard`` and, opt-in, ``--progress``.  The bar follows lezero's own rule for bars
(``lezero.runtime.progress.enabled``: stderr is a terminal and ``LEZERO_PROGRESS`` is not 0), so a
piped or logged run stays quiet even with ``--progress``.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

from lezero.runtime import progress as lezero_progress
from lezero.utils.tensorboard import SummaryWriter


def add_arguments(parser: argparse.ArgumentParser, progress: bool = True) -> None:
    parser.add_argument("--logdir", help="TensorBoard run folder (default: runs/<example>-<date-time>)")
    parser.add_argument("--no-tensorboard", action="store_true", help="write no TensorBoard events")
    if progress:
        parser.add_argument("--progress", action="store_true",
                            help="a progress bar over the training steps (only on a terminal)")


def open_writer(args: argparse.Namespace, example: str) -> SummaryWriter | None:
    """The run's SummaryWriter (``None`` with ``--no-tensorboard``), saying where it writes."""
    if args.no_tensorboard:
        return None
    logdir = args.logdir or str(pathlib.Path("runs") / f"{example}-{time.strftime('%Y%m%d-%H%M%S')}")
    print(f"TensorBoard events in {logdir} (tensorboard --logdir {pathlib.Path(logdir).parent})")
    return SummaryWriter(logdir)


def log_scalars(writer: SummaryWriter | None, step: int, scalars: dict[str, float]) -> None:
    """``writer.add_scalar(tag, value, step)`` for each tag (``"train/loss"``) of ``scalars``."""
    if writer is not None:
        for tag, value in scalars.items():
            writer.add_scalar(tag, value, step)


def steps(iterable, total: int, desc: str, enabled: bool):
    """``iterable`` under a tqdm bar on stderr when ``enabled`` and lezero draws bars, else as is."""
    if not (enabled and lezero_progress.enabled()):
        return iterable
    from tqdm import tqdm  # here: only a terminal run with --progress pays its import

    return tqdm(iterable, total=total, desc=desc, unit="step", file=sys.stderr, dynamic_ncols=True)
