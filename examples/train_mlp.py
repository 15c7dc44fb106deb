"""Train the seed's SimpleMLP on scikit-learn's digits: the eager loop, then the compiled step.

    .venv/bin/python examples/train_mlp.py                  # both, 10 epochs each
    .venv/bin/python examples/train_mlp.py --mode compiled --epochs 5

The eager loop is the seed's program: ``zero_grad``, forward, ``loss.backward()``, ``step()``,
every op compiled on its own (and cached).  The compiled path is one call,
``lz.jit.compile_train_step``: forward, loss, gradients and the Adam update in one IR function,
compiled whole; each batch is then one call.  Both start from the same weights and see the batches
in the same order, so their loss curves agree.  The test accuracy is measured with the model traced
by ``lz.jit.trace`` (the whole forward compiled, the batch size dynamic).
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


class SimpleMLP(lz.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = lz.nn.Linear(784, 256)
        self.fc2 = lz.nn.Linear(256, 10)

    def forward(self, x):
        x = lz.nn.functional.relu(self.fc1(x))
        return self.fc2(x)


def train(mode: str = "compiled", epochs: int = 10, batch_size: int = 64, seed: int = 0, progress: bool = True,
          data=None, writer=None) -> dict:
    """Train a fresh SimpleMLP (``mode`` "eager" or "compiled"); returns its test accuracy, the
    per-step losses, the training time and the model.  ``writer`` (a SummaryWriter) gets the loss of
    every step, the learning rate and the test accuracy under ``<mode>/``."""
    x_train, y_train, x_test, y_test = data if data is not None else digits.load(28)
    x_train, x_test = x_train.reshape(len(x_train), 784), x_test.reshape(len(x_test), 784)
    lz.manual_seed(seed)
    model = SimpleMLP()
    optimizer = lz.optim.Adam(model.parameters())
    criterion = lz.nn.CrossEntropyLoss()
    loader = lz.utils.data.DataLoader(lz.utils.data.TensorDataset(lz.from_numpy(x_train), lz.from_numpy(y_train)),
                                      batch_size=batch_size, shuffle=True,
                                      generator=lz.Generator().manual_seed(seed))
    start = time.perf_counter()
    step = None
    if mode == "compiled":
        example = lz.from_numpy(x_train[:batch_size]), lz.from_numpy(y_train[:batch_size])
        step = lz.jit.compile_train_step(model, criterion, optimizer, *example)
    elif mode != "eager":
        raise ValueError(f"mode must be 'eager' or 'compiled', got {mode!r}")
    losses = []
    for epoch in range(1, epochs + 1):
        bar = digits.Progress(len(loader), f"{mode:>8} epoch {epoch:>2}/{epochs}", enabled=progress)
        for i, (data, target) in enumerate(loader):
            if step is not None:
                loss = step(data, target)
            else:
                optimizer.zero_grad()
                output = model(data)
                loss = criterion(output, target)
                loss.backward()
                optimizer.step()
            losses.append(loss.item())
            training_log.log_scalars(writer, len(losses), {f"{mode}/loss": losses[-1],
                                                           f"{mode}/lr": optimizer.param_groups[0]["lr"]})
            bar.update(i + 1, loss=losses[-1])
        bar.close(mean_loss=float(np.mean(losses[-len(loader):])))
    seconds = time.perf_counter() - start
    traced_model = lz.jit.trace(model, example_inputs=lz.randn(1, 784))
    acc = digits.accuracy(traced_model, x_test, y_test)
    training_log.log_scalars(writer, len(losses), {f"{mode}/test_accuracy": acc})
    return {"accuracy": acc, "losses": losses, "seconds": seconds, "model": model, "traced": traced_model}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=["eager", "compiled", "both"], default="both")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--no-progress", action="store_true")
    training_log.add_arguments(parser, progress=False)  # its own per-epoch bar: --no-progress
    args = parser.parse_args(argv)
    writer = training_log.open_writer(args, "train_mlp")
    data = digits.load(28)
    print(f"digits: {len(data[0])} training and {len(data[2])} test images, upsampled to 28x28")
    modes = ["eager", "compiled"] if args.mode == "both" else [args.mode]
    results = {}
    for mode in modes:
        r = results[mode] = train(mode, args.epochs, args.batch_size, progress=not args.no_progress, data=data,
                                     writer=writer)
        print(f"{mode}: test accuracy {r['accuracy']:.2%}, {r['seconds']:.1f} s for {args.epochs} epochs "
              f"({len(r['losses'])} steps)")
    if len(results) == 2:
        gap = np.max(np.abs(np.array(results["eager"]["losses"]) - np.array(results["compiled"]["losses"])))
        print(f"eager and compiled loss curves: largest difference {gap:.2e}")
    if writer is not None:
        writer.close()
    return 0 if all(r["accuracy"] >= 0.95 for r in results.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
