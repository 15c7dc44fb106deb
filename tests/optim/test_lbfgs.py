"""LBFGS against torch.optim.LBFGS on the Rosenbrock function and a small least-squares model, in
float64: the same iterates, losses, evaluation counts and state, with and without the strong Wolfe
line search; its state dict loads torch's; compile_train_step refuses it clearly."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lezero as lz
from lezero import nn

from support.eager_testing import assert_same


def _rosenbrock(lib, xy):
    x, y = xy[0], xy[1]
    return (1 - x) ** 2 + 100 * (y - x * x) ** 2


def _run(lib, steps, **options):
    xy = lib.tensor(np.array([-1.5, 2.0]), requires_grad=True)
    optimizer = lib.optim.LBFGS([xy], **options)
    losses = []

    def closure():
        optimizer.zero_grad()
        loss = _rosenbrock(lib, xy)
        loss.backward()
        return loss

    for _ in range(steps):
        losses.append(optimizer.step(closure).item())
    return xy, optimizer, losses


@pytest.mark.parametrize("options", [
    dict(lr=1, max_iter=5),
    dict(lr=0.5, max_iter=4, history_size=3),
    dict(line_search_fn="strong_wolfe", max_iter=6),
    dict(line_search_fn="strong_wolfe", lr=0.8, history_size=2, max_iter=10, tolerance_change=1e-12),
], ids=["plain", "short history", "strong wolfe", "strong wolfe short history"])
def test_lbfgs_follows_torch_on_rosenbrock(options):
    ours, our_opt, our_losses = _run(lz, 4, **options)
    theirs, their_opt, their_losses = _run(torch, 4, **options)
    np.testing.assert_allclose(our_losses, their_losses, rtol=1e-9, atol=1e-12)
    assert_same(ours, theirs)
    mine, want = our_opt.state[ours], their_opt.state[theirs]
    assert list(mine) == list(want)
    assert mine["func_evals"] == want["func_evals"] and mine["n_iter"] == want["n_iter"]
    assert_same(mine["d"], want["d"], what="d")
    assert len(mine["old_dirs"]) == len(want["old_dirs"])
    for a, b in zip(mine["old_stps"], want["old_stps"]):
        assert_same(a, b, what="old_stps")


def test_lbfgs_trains_a_linear_model_like_torch_and_resumes_from_torch_state():
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 3)), rng.standard_normal((16, 2))
    torch.manual_seed(0)
    reference = torch.nn.Linear(3, 2).double()
    models = {}
    for lib in (lz, torch):
        model = lib.nn.Linear(3, 2).double() if lib is torch else nn.Linear(3, 2, dtype=lz.float64)
        with lib.no_grad():
            model.weight.copy_(lib.tensor(reference.weight.detach().numpy()))
            model.bias.copy_(lib.tensor(reference.bias.detach().numpy()))
        models[lib] = model
    optimizers = {lib: lib.optim.LBFGS(models[lib].parameters(), line_search_fn="strong_wolfe", max_iter=3)
                  for lib in (lz, torch)}

    def closure_of(lib):
        def closure():
            optimizers[lib].zero_grad()
            loss = ((models[lib](lib.tensor(x)) - lib.tensor(y)) ** 2).mean()
            loss.backward()
            return loss
        return closure

    for _ in range(2):
        for lib in (lz, torch):
            optimizers[lib].step(closure_of(lib))
    for name, p in models[torch].named_parameters():
        assert_same(dict(models[lz].named_parameters())[name], p, what=name)
    # a fresh lz optimizer on torch's state goes on as torch does
    resumed = lz.optim.LBFGS(models[lz].parameters(), line_search_fn="strong_wolfe", max_iter=3)
    saved = optimizers[torch].state_dict()
    resumed.load_state_dict({"state": {i: {k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in s.items()}
                                       for i, s in saved["state"].items()}, "param_groups": saved["param_groups"]})
    optimizers[lz] = resumed
    for lib in (lz, torch):
        optimizers[lib].step(closure_of(lib))
    for name, p in models[torch].named_parameters():
        assert_same(dict(models[lz].named_parameters())[name], p, what=name)


def test_lbfgs_errors_are_clear():
    p = lz.nn.Parameter(lz.ones(2))
    with pytest.raises(ValueError, match="line_search_fn must be None or 'strong_wolfe', got 'armijo'"):
        lz.optim.LBFGS([p], line_search_fn="armijo")
    with pytest.raises(ValueError, match="per-parameter options"):
        lz.optim.LBFGS([{"params": [p]}, {"params": [lz.nn.Parameter(lz.ones(1))]}])
    with pytest.raises(RuntimeError, match="needs a closure"):
        lz.optim.LBFGS([p]).step()
    model = nn.Linear(2, 1)
    with pytest.raises(TypeError, match="LBFGS re-evaluates the loss through a closure"):
        lz.jit.compile_train_step(model, nn.MSELoss(), lz.optim.LBFGS(model.parameters()), lz.ones(3, 2),
                                  lz.ones(3, 1))
