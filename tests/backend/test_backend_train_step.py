"""One training step compiled whole (``lz.jit.compile_train_step``: forward, cross-entropy, autodiff
and Adam as one function) for every backend target follows the eager loop on the host CPU: the
same losses over a few steps and the same parameters and optimizer state after them.  A CPU of the
cross-target matrix compiles the step's host code for that CPU (``$LEZERO_CPU``)."""
from __future__ import annotations

import numpy as np
import pytest

import lezero as lz
from lezero import nn

from support.eager_testing import training_losses

STEPS = 3


class SimpleMLP(nn.Module):
    def __init__(self, n_in=64, hidden=32, n_out=10):
        super().__init__()
        self.fc1 = nn.Linear(n_in, hidden)
        self.fc2 = nn.Linear(hidden, n_out)

    def forward(self, x):
        return self.fc2(nn.functional.relu(self.fc1(x)))


def _batches(batch=8, last=5):
    """A learnable task (labels from a fixed linear teacher), the last batch smaller."""
    rng = np.random.default_rng(0)
    teacher = rng.standard_normal((64, 10))
    out = []
    for i in range(STEPS):
        x = rng.standard_normal((last if i == STEPS - 1 else batch, 64)).astype(np.float32)
        out.append((x, (x @ teacher).argmax(axis=1)))
    return out


def _train(device: str, compiled: bool):
    lz.manual_seed(0)
    model = SimpleMLP().to(device)
    optimizer = lz.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.CrossEntropyLoss()
    batches = [(lz.from_numpy(x).to(device), lz.from_numpy(y).to(device)) for x, y in _batches()]
    step = lz.jit.compile_train_step(model, criterion, optimizer, *batches[0]) if compiled else None

    def on_device(loss):
        assert loss.device == lz.device(device)

    return training_losses(model, criterion, optimizer, batches, step, check=on_device), model, optimizer


@pytest.mark.backends
def test_compiled_step_follows_the_eager_cpu_loop(target, monkeypatch):
    want_losses, want_model, want_optimizer = _train("cpu", compiled=False)
    if target.cpu is not None:
        monkeypatch.setenv("LEZERO_CPU", target.cpu)
    losses, model, optimizer = _train(target.device, compiled=True)
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), want_model.parameters()):
        assert p.device == lz.device(target.device), name
        np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(optimizer.state[p]["exp_avg_sq"].cpu().numpy(),
                                   want_optimizer.state[q]["exp_avg_sq"].numpy(), rtol=1e-5, atol=1e-8, err_msg=name)
