"""Optimizers updating cuda parameters (under Triton's interpreter, ``TRITON_INTERPRET=1``) follow
the CPU path step for step: SGD with momentum, Adam, AdamW with amsgrad, RMSprop, Adagrad,
Adadelta, Adamax, NAdam, RAdam; their state lives on the parameters' device."""
from __future__ import annotations

import numpy as np
import pytest

import lezero as lz

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning:triton.runtime.interpreter")

OPTIMIZERS = {
    "sgd-momentum": lambda p: lz.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=1e-2),
    "adam": lambda p: lz.optim.Adam(p, lr=1e-2),
    "adamw-amsgrad": lambda p: lz.optim.AdamW(p, lr=1e-2, weight_decay=0.1, amsgrad=True),
    "rmsprop-centered": lambda p: lz.optim.RMSprop(p, lr=1e-2, momentum=0.5, centered=True),
    "adagrad": lambda p: lz.optim.Adagrad(p, lr=1e-2, initial_accumulator_value=0.1),
    "adadelta": lambda p: lz.optim.Adadelta(p, weight_decay=0.1),
    "adamax": lambda p: lz.optim.Adamax(p, lr=1e-2),
    "nadam": lambda p: lz.optim.NAdam(p, lr=1e-2),
    "radam": lambda p: lz.optim.RAdam(p, lr=1e-2, betas=(0.5, 0.6)),
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
            # moments next to the parameter, the count (and NAdam's momentum product) on the host
            assert value.is_cuda == (key not in ("step", "mu_product")), key


def test_lbfgs_on_cuda_parameters_equals_the_cpu_run():
    def run(device):
        rng = np.random.default_rng(0)
        w = lz.from_numpy(rng.standard_normal((3, 4)).astype(np.float32)).to(device).requires_grad_()
        x = lz.from_numpy(rng.standard_normal((5, 3)).astype(np.float32)).to(device)
        optimizer = lz.optim.LBFGS([w], max_iter=4, line_search_fn="strong_wolfe")

        def closure():
            optimizer.zero_grad()
            loss = ((x @ w).tanh() ** 2).sum()
            loss.backward()
            return loss

        for _ in range(2):
            optimizer.step(closure)
        return w

    cpu, cuda = run("cpu"), run("cuda")
    assert cuda.is_cuda
    np.testing.assert_allclose(cuda.detach().numpy(), cpu.detach().numpy(), rtol=1e-4, atol=1e-5)
