"""What the digits examples share: the data, a progress bar, accuracy.

The data is scikit-learn's digits (1797 handwritten 8x8 images, 16 grey levels), shipped inside
scikit-learn: no download.  ``load(size=28)`` upsamples each image bilinearly to ``size x size``
(28 x 28 = 784 inputs: the seed's MLP), scales to [0, 1], normalizes with the training set's mean
and standard deviation, and splits 80/20 with a fixed seed.
"""
from __future__ import annotations

import sys
import time

import numpy as np

import lezero as lz


def _resize_matrix(n_in: int, n_out: int) -> np.ndarray:
    """``n_out x n_in`` bilinear interpolation (pixel centres aligned, edges clamped)."""
    centres = (np.arange(n_out) + 0.5) * n_in / n_out - 0.5
    lo = np.clip(np.floor(centres).astype(int), 0, n_in - 1)
    hi = np.clip(lo + 1, 0, n_in - 1)
    frac = np.clip(centres - lo, 0, 1)
    m = np.zeros((n_out, n_in))
    m[np.arange(n_out), lo] += 1 - frac
    m[np.arange(n_out), hi] += frac
    return m


def load(size: int = 28, test_fraction: float = 0.2, seed: int = 0):
    """``(x_train, y_train, x_test, y_test)`` as numpy arrays: images ``N x 1 x size x size``
    float32, labels int64."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    images = digits.images / 16.0
    if size != 8:
        r = _resize_matrix(8, size)
        images = np.einsum("ij,njk,lk->nil", r, images, r)
    images = images[:, None].astype(np.float32)
    labels = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(labels))
    n_test = int(round(len(labels) * test_fraction))
    test, train = order[:n_test], order[n_test:]
    mean, std = images[train].mean(), images[train].std()
    images = (images - mean) / std
    return images[train], labels[train], images[test], labels[test]


class Progress:
    """A plain-text progress bar on one line (``\\r`` updates), no dependency:
    ``epoch 3/10 [##########----------]  12/23  loss 0.1234``."""

    def __init__(self, total: int, label: str, width: int = 24, stream=None, enabled: bool = True):
        self.total, self.label, self.width = total, label, width
        self.stream = stream or sys.stdout
        self.enabled = enabled
        self.start = time.perf_counter()
        self.last = 0.0

    def update(self, done: int, **values) -> None:
        now = time.perf_counter()
        if not self.enabled or (done < self.total and now - self.last < 0.05):
            return
        self.last = now
        filled = self.width * done // max(self.total, 1)
        extra = "".join(f"  {k} {v:.4f}" if isinstance(v, float) else f"  {k} {v}" for k, v in values.items())
        self.stream.write(f"\r{self.label} [{'#' * filled}{'-' * (self.width - filled)}] {done:>4}/{self.total}"
                          f"{extra}  {now - self.start:5.1f}s")
        self.stream.flush()

    def close(self, **values) -> None:
        if self.enabled:
            self.update(self.total, **values)
            self.stream.write("\n")
            self.stream.flush()


def accuracy(predict, x: np.ndarray, y: np.ndarray, batch_size: int = 512) -> float:
    """The fraction of ``x`` that ``predict`` (lz tensor -> logits) classifies as ``y``."""
    correct = 0
    with lz.no_grad():
        for i in range(0, len(x), batch_size):
            logits = predict(lz.from_numpy(x[i:i + batch_size]))
            correct += int((logits.argmax(dim=1) == lz.from_numpy(y[i:i + batch_size])).sum().item())
    return correct / len(x)
