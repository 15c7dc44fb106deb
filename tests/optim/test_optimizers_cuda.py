"""Optimizers updating cuda parameters (under Triton's interpreter, ``TRITON_INTERPRET=1``) follow
the CPU path step for step: SGD with momentum, Adam, AdamW with amsgrad; their state lives on
the parameters' device."""
from __future__ import annotations

import numpy as np
import pytest

import lezero as lz

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning:triton.runtime.interpreter")

OPTIMIZERS = {
    "sgd-momentum": lambda p: lz.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-2),
    "adam": lambda p: lz.optim.Adam(p, lr=1e-2),
    "adamw-amsgrad": lambda p: lz.optim.AdamW(p, lr=1e-2, weight_decay=0.1, amsgrad=True),
}


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _steps(make, device, steps=3):
    rng = np.random.default_rng(0)
    w = lz.from_numpy(rng.standard_normal((3, 4)).astype(np.float32)).to(device).requires_grad_()
    b = lz.from_numpy(rng.standard_normal(4).astype(np.float32)).to(device).requires_grad_()
    x = lz.from_numpy(rng.standard_normal((5, 3)).astype(np.float32)).to(device)
    optimizer = make([w, b])
    for _ in range(steps):
        optimizer.zero_grad()
        ((x @ w + b).tanh() ** 2).sum().backward()
        optimizer.step()
    return optimizer, [w.detach().numpy(), b.detach().numpy()]


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_cuda_updates_equal_the_cpu_updates(name):
    _, want = _steps(OPTIMIZERS[name], "cpu")
    optimizer, got = _steps(OPTIMIZERS[name], "cuda")
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    for state in optimizer.state.values():
        for key, value in state.items():
            assert value.is_cuda == (key != "step"), key   # moments next to the parameter, the count on the host
