"""Train a small CNN (Conv2d + BatchNorm2d + ReLU + MaxPool2d, twice, then Linear) on scikit-learn's
8x8 digits, eagerly, and evaluate it through ``lz.jit.trace``.

    .venv/bin/python examples/train_cnn.py [--epochs 8]

Every op of the eager loop (convolutions, batch norm, pooling and their gradients) is compiled on its
own by lezero's CPU compiler the first time it meets a shape, then cached.  For evaluation the model
goes to ``eval()`` mode (BatchNorm uses its running statistics) and is traced into one compiled
function.
"""
from __future__ import annotations

import argparse
import pathlib
import sys
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import digits  # noqa: E402
import training_log  # noqa: E402

import lezero as lz  # noqa: E402
from lezero import nn  # noqa: E402


class DigitsCNN(nn.Module):
    """1x8x8 -> 16x4x4 -> 32x2x2 -> 10."""

    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, kernel_size=3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, kernel_size=3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        )
        self.classifier = nn.Linear(32 * 2 * 2, 10)

    def forward(self, x):
        return self.classifier(self.features(x).flatten(1))


def train(epochs: int = 8, batch_size: int = 32, lr: float = 3e-3, seed: int = 0, progress: bool = True,
          data=None, writer=None) -> dict:
    """Train a fresh DigitsCNN; ``writer`` (a SummaryWriter) gets the loss of every step, the
    learning rate (cosine-annealed per epoch) and the test accuracy (``main`` adds the graph)."""
    x_train, y_train, x_test, y_test = data if data is not None else digits.load(8)
    lz.manual_seed(seed)
    model = DigitsCNN()
    optimizer = lz.optim.Adam(model.parameters(), lr=lr)
    scheduler = lz.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=epochs)
    criterion = nn.CrossEntropyLoss()
    loader = lz.utils.data.DataLoader(lz.utils.data.TensorDataset(lz.from_numpy(x_train), lz.from_numpy(y_train)),
                                      batch_size=batch_size, shuffle=True,
                                      generator=lz.Generator().manual_seed(seed))
    start = time.perf_counter()
    losses = []
    model.train()
    for epoch in range(1, epochs + 1):
        bar = digits.Progress(len(loader), f"cnn epoch {epoch:>2}/{epochs}", enabled=progress)
        for i, (images, labels) in enumerate(loader):
            optimizer.zero_grad()
            loss = criterion(model(images), labels)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            training_log.log_scalars(writer, len(losses), {"train/loss": losses[-1],
                                                           "train/lr": optimizer.param_groups[0]["lr"]})
            bar.update(i + 1, loss=losses[-1])
        scheduler.step()
        bar.close(mean_loss=float(np.mean(losses[-len(loader):])))
    seconds = time.perf_counter() - start
    model.eval()
    traced = lz.jit.trace(model, example_inputs=lz.randn(1, 1, 8, 8))
    acc = digits.accuracy(traced, x_test, y_test)
    training_log.log_scalars(writer, len(losses), {"test/accuracy": acc})
    return {"accuracy": acc, "losses": losses, "seconds": seconds, "model": model, "traced": traced}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--no-progress", action="store_true")
    training_log.add_arguments(parser, progress=False)  # its own per-epoch bar: --no-progress
    args = parser.parse_args(argv)
    writer = training_log.open_writer(args, "train_cnn")
    data = digits.load(8)
    print(f"digits: {len(data[0])} training and {len(data[2])} test images, 8x8")
    r = train(args.epochs, progress=not args.no_progress, data=data, writer=writer)
    if writer is not None:
        writer.add_graph(r["traced"])  # the traced eval model: TensorBoard's Graphs tab
        writer.close()
    print(f"cnn: test accuracy {r['accuracy']:.2%}, {r['seconds']:.1f} s for {args.epochs} epochs "
          f"({len(r['losses'])} steps)")
    return 0 if r["accuracy"] >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
