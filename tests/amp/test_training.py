"""Mixed-precision training reaches fp32's accuracy: the seed's MLP (784-256-10, Adam) and the
digits CNN (conv, batch norm, pooling), trained with ``compile_train_step`` inside
``lz.autocast(bf16)`` and inside ``lz.autocast(f16)`` with a ``GradScaler``, end within 0.5
points of the same training in fp32 (same seed, same batches) on scikit-learn's digits."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import lezero as lz
from lezero import nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "examples"))
import digits  # noqa: E402
from support.eager_testing import SimpleMLP  # noqa: E402
from train_cnn import DigitsCNN  # noqa: E402

MODELS = {  # name: (model, epochs, batch, learning rate); the MLP on 28x28 images, the CNN on 8x8
    "mlp": (lambda: SimpleMLP(784, 256, 10), 3, 128, 2e-3),  # the seed's sizes
    "cnn": (DigitsCNN, 3, 64, 1e-2),
}


@pytest.fixture(scope="module")
def data():
    x_train, y_train, x_test, y_test = digits.load(28)
    small = digits.load(8)
    return {"mlp": (x_train.reshape(-1, 784), y_train, x_test.reshape(-1, 784), y_test), "cnn": small}


def _accuracy(name: str, data, precision: str) -> float:
    make, epochs, batch, lr = MODELS[name]
    x_train, y_train, x_test, y_test = data[name]
    lz.manual_seed(0)
    model = make()
    optimizer = lz.optim.Adam(model.parameters(), lr=lr)
    if precision == "f32":
        step = lz.jit.compile_train_step(model, nn.functional.cross_entropy, optimizer, x_train[:batch],
                                         y_train[:batch])
    else:
        low = lz.bfloat16 if precision == "bf16" else lz.float16
        scaler = lz.amp.GradScaler("cpu") if precision == "f16" else None
        with lz.autocast("cpu", dtype=low):
            step = lz.jit.compile_train_step(model, nn.functional.cross_entropy, optimizer, x_train[:batch],
                                             y_train[:batch], scaler=scaler)
        assert f"x{precision}>" in step.graph
    order = np.random.default_rng(0)
    n = len(y_train) // batch * batch
    for _ in range(epochs):
        batches = order.permutation(len(y_train))[:n].reshape(-1, batch)
        for rows in batches:
            step(x_train[rows], y_train[rows])
    model.eval()
    return digits.accuracy(model, x_test, y_test)


@pytest.fixture(scope="module")
def fp32_accuracy(data):
    return {name: _accuracy(name, data, "f32") for name in MODELS}


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["bf16", "f16"])
@pytest.mark.parametrize("name", list(MODELS))
def test_mixed_precision_training_reaches_fp32_accuracy(name, precision, data, fp32_accuracy):
    accuracy = _accuracy(name, data, precision)
    assert fp32_accuracy[name] > 0.9
    assert accuracy >= fp32_accuracy[name] - 0.005, (accuracy, fp32_accuracy[name])
