"""The new layers inside a compiled training step: a model of Conv1d, GroupNorm, Mish, a reflect
pad, linear Upsample, ConvTranspose1d and RMSNorm trains through ``compile_train_step`` with the
eager loop's losses and parameters."""
from __future__ import annotations

import numpy as np

import lezero as lz

from support.eager_testing import training_losses


def make_model():
    nn = lz.nn
    return nn.Sequential(nn.Conv1d(2, 4, 3, padding=1, padding_mode="reflect"), nn.GroupNorm(2, 4), nn.Mish(),
                         nn.Upsample(scale_factor=2, mode="linear"), nn.ConvTranspose1d(4, 3, 2, stride=2),
                         nn.RMSNorm(32), nn.Flatten(), nn.Linear(96, 3))


def batches():
    rng = np.random.default_rng(0)
    return [(lz.tensor(rng.standard_normal((4, 2, 8)).astype(np.float32)), lz.tensor(rng.integers(0, 3, 4)))
            for _ in range(3)]


def train(compiled: bool):
    lz.manual_seed(0)
    model = make_model()
    optimizer = lz.optim.Adam(model.parameters(), lr=1e-2)
    criterion = lz.nn.CrossEntropyLoss()
    data = batches()
    step = lz.jit.compile_train_step(model, criterion, optimizer, *data[0]) if compiled else None
    return training_losses(model, criterion, optimizer, data, step), model


def test_compiled_step_follows_the_eager_loop():
    (eager_losses, eager_model), (losses, model) = train(False), train(True)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5, atol=1e-6)
    assert losses[-1] < losses[0]
    for (name, p), q in zip(model.named_parameters(), eager_model.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=name)
