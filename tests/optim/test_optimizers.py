"""Optimizers and schedules against torch over several steps with the same gradients: SGD (momentum,
dampening, Nesterov, weight decay, maximize), Adam, AdamW (amsgrad); each update is one fused
kernel writing into the parameter's memory; state dicts; StepLR and CosineAnnealingLR."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lezero as lz
from lezero.eager import dispatch

from support.eager_testing import assert_same

SHAPES = [(3, 4), (4,)]


def run_both(make, steps: int = 10, dtype=np.float64, schedule=None):
    """``steps`` updates by both libraries' optimizers from the same parameters and gradients."""
    rng = np.random.default_rng(0)
    init = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(dtype) for s in SHAPES] for _ in range(steps)]
    results = {}
    for lib in (lz, torch):
        params = [lib.tensor(a.copy(), requires_grad=True) for a in init]
        optimizer = make(lib, params)
        scheduler = schedule(lib, optimizer) if schedule else None
        rates = []
        for step in range(steps):
            for p, g in zip(params, grads[step]):
                p.grad = lib.tensor(g)
            optimizer.step()
            if scheduler:
                scheduler.step()
                rates.append(scheduler.get_last_lr())
        results[lib] = (params, optimizer, rates)
    return results


OPTIMIZERS = [
    ("sgd", lambda lib, p: lib.optim.SGD(p, lr=0.1)),
    ("sgd momentum", lambda lib, p: lib.optim.SGD(p, lr=0.1, momentum=0.9)),
    ("sgd dampening decay", lambda lib, p: lib.optim.SGD(p, lr=0.05, momentum=0.8, dampening=0.3, weight_decay=0.01)),
    ("sgd nesterov", lambda lib, p: lib.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.1)),
    ("sgd maximize", lambda lib, p: lib.optim.SGD(p, lr=0.1, momentum=0.5, maximize=True)),
    ("adam", lambda lib, p: lib.optim.Adam(p, lr=0.01)),
    ("adam decay amsgrad", lambda lib, p: lib.optim.Adam(p, lr=0.01, betas=(0.8, 0.9), weight_decay=0.1,
                                                         amsgrad=True)),
    ("adamw", lambda lib, p: lib.optim.AdamW(p, lr=0.01)),
    ("adamw amsgrad", lambda lib, p: lib.optim.AdamW(p, lr=0.02, weight_decay=0.1, amsgrad=True, eps=1e-6)),
    ("adam lerp high", lambda lib, p: lib.optim.Adam(p, lr=0.01, betas=(0.3, 0.99))),
    ("param groups", lambda lib, p: lib.optim.SGD([{"params": p[:1], "lr": 0.5}, {"params": p[1:]}], lr=0.1,
                                                  momentum=0.9)),
    ("rmsprop", lambda lib, p: lib.optim.RMSprop(p)),
    ("rmsprop centered momentum decay", lambda lib, p: lib.optim.RMSprop(p, lr=0.01, alpha=0.9, momentum=0.8,
                                                                         centered=True, weight_decay=0.1)),
    ("rmsprop centered maximize", lambda lib, p: lib.optim.RMSprop(p, lr=0.01, alpha=0.3, centered=True,
                                                                   maximize=True)),
    ("adagrad", lambda lib, p: lib.optim.Adagrad(p)),
    ("adagrad decay", lambda lib, p: lib.optim.Adagrad(p, lr=0.1, lr_decay=0.05, weight_decay=0.1,
                                                       initial_accumulator_value=0.5, maximize=True)),
    ("adadelta", lambda lib, p: lib.optim.Adadelta(p)),
    ("adadelta decay", lambda lib, p: lib.optim.Adadelta(p, lr=0.5, rho=0.6, eps=1e-4, weight_decay=0.1,
                                                         maximize=True)),
    ("adamax", lambda lib, p: lib.optim.Adamax(p)),
    ("adamax decay", lambda lib, p: lib.optim.Adamax(p, lr=0.05, betas=(0.3, 0.9), weight_decay=0.1, maximize=True)),
    ("nadam", lambda lib, p: lib.optim.NAdam(p)),
    ("nadam decay", lambda lib, p: lib.optim.NAdam(p, lr=0.01, betas=(0.8, 0.9), weight_decay=0.1,
                                                   momentum_decay=0.01)),
    ("nadam decoupled", lambda lib, p: lib.optim.NAdam(p, lr=0.01, weight_decay=0.1, decoupled_weight_decay=True,
                                                       maximize=True)),
    ("radam", lambda lib, p: lib.optim.RAdam(p, lr=0.01)),
    ("radam decay", lambda lib, p: lib.optim.RAdam(p, lr=0.01, betas=(0.3, 0.9), weight_decay=0.1)),
    ("radam decoupled", lambda lib, p: lib.optim.RAdam(p, lr=0.01, weight_decay=0.1, decoupled_weight_decay=True,
                                                       maximize=True)),
]


@pytest.mark.parametrize("case", OPTIMIZERS, ids=[c[0] for c in OPTIMIZERS])
def test_updates_match_torch(case):
    results = run_both(case[1])
    (ours, our_opt, _), (theirs, their_opt, _) = results[lz], results[torch]
    for p, q in zip(ours, theirs):
        assert_same(p, q)
    for p, q in zip(ours, theirs):
        for key, value in their_opt.state[q].items():
            assert_same(our_opt.state[p][key], value, what=key)


def test_float32_adam_matches_torch():
    results = run_both(lambda lib, p: lib.optim.Adam(p, lr=0.01), steps=3, dtype=np.float32)
    for p, q in zip(results[lz][0], results[torch][0]):
        assert p.dtype is lz.float32
        assert_same(p, q, dict(rtol=1e-6, atol=1e-7))


@pytest.mark.parametrize("schedule", [
    lambda lib, opt: lib.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5),
    lambda lib, opt: lib.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=3, eta_min=0.001),
], ids=["StepLR", "CosineAnnealingLR"])
def test_schedules_match_torch(schedule):
    results = run_both(lambda lib, p: lib.optim.SGD(p, lr=0.1, momentum=0.9), steps=7, schedule=schedule)
    np.testing.assert_allclose(results[lz][2], results[torch][2], rtol=1e-12, atol=1e-15)
    for p, q in zip(results[lz][0], results[torch][0]):
        assert_same(p, q)


def test_update_is_one_fused_kernel_in_place_compiled_once():
    p = lz.nn.Parameter(lz.randn(5, 7))
    memory = p.detach().numpy()
    optimizer = lz.optim.Adam([p], lr=0.1)
    p.grad = lz.randn(5, 7)
    optimizer.step()
    size = dispatch.cache_size()
    before = memory.copy()
    for _ in range(3):
        p.grad = lz.randn(5, 7)
        optimizer.step()
    assert dispatch.cache_size() == size  # new lr, step counts: rank-0 inputs, no recompiles
    assert np.shares_memory(p.detach().numpy(), memory)
    assert not np.array_equal(memory, before)  # updated in place
    runner = next(run for key, run in dispatch.RUNNERS.items() if key[0].name == "adam_update")
    assert runner.kernel_count == 1


def test_zero_grad_and_state_dict_round_trip():
    params = [lz.nn.Parameter(lz.ones(3))]
    optimizer = lz.optim.SGD(params, lr=0.1, momentum=0.9)
    params[0].grad = lz.ones(3)
    optimizer.step()
    state = optimizer.state_dict()
    assert set(state) == {"state", "param_groups"} and state["param_groups"][0]["params"] == [0]
    assert "momentum_buffer" in state["state"][0]
    restored = lz.optim.SGD([lz.nn.Parameter(lz.ones(3))], lr=0.5)
    restored.load_state_dict(state)
    assert restored.param_groups[0]["lr"] == 0.1
    optimizer.zero_grad()
    assert params[0].grad is None
    with pytest.raises(ValueError, match="empty parameter list"):
        lz.optim.Adam([])


def test_update_rule_is_what_step_runs():
    """The rule states the update without running it: Adam's bias corrections for the coming step,
    SGD's steady form (a zero buffer and weight 1 on the first step); ``step()`` then creates the
    state the rule names."""
    p = lz.nn.Parameter(lz.ones(3))
    adam = lz.optim.Adam([p], lr=0.1, betas=(0.9, 0.99), amsgrad=True)
    rule = adam.update_rule(adam.param_groups[0], [adam.state[p]])
    assert rule.op.name == "adam_update" and dict(rule.attrs)["amsgrad"]
    assert rule.state_keys == ("exp_avg", "exp_avg_sq", "max_exp_avg_sq")
    assert rule.scalars[4] == pytest.approx(-0.1 / (1 - 0.9)) and not adam.state[p]  # step 1, nothing created
    p.grad = lz.ones(3)
    adam.step()
    assert list(adam.state[p]) == ["step", *rule.state_keys] and adam.state[p]["step"].item() == 1
    later = adam.update_rule(adam.param_groups[0], [adam.state[p]])
    assert later.scalars[4] == pytest.approx(-0.1 / (1 - 0.9 ** 2))

    q = lz.nn.Parameter(lz.ones(3))
    sgd = lz.optim.SGD([q], lr=0.1, momentum=0.9, dampening=0.5)
    group = sgd.param_groups[0]
    assert sgd.update_rule(group, [{}]).scalars == [0.1, 0.9, 1.0]
    assert sgd.update_rule(group, [{"momentum_buffer": None}]).scalars == [0.1, 0.9, 0.5]
    assert lz.optim.SGD([q], lr=0.1).update_rule(group | {"momentum": 0}, [{}]).state_keys == ()


def test_update_rule_refuses_a_group_at_different_steps():
    adam = lz.optim.Adam([lz.nn.Parameter(lz.ones(2))])
    with pytest.raises(RuntimeError, match="different numbers of optimizer steps"):
        adam.update_rule(adam.param_groups[0], [{}, {"step": lz.tensor(3.0)}])


def test_an_optimizer_without_an_update_rule_says_so():
    class Plain(lz.optim.Optimizer):
        pass

    p = lz.nn.Parameter(lz.ones(2))
    p.grad = lz.ones(2)
    with pytest.raises(NotImplementedError, match="Plain has no update_rule"):
        Plain([p], {}).step()


def _as_numpy(value):
    return value.detach().numpy() if isinstance(value, torch.Tensor) else value


NEW_OPTIMIZERS = [c for c in OPTIMIZERS if c[0].split()[0] in ("rmsprop", "adagrad", "adadelta", "adamax", "nadam",
                                                                "radam")]


@pytest.mark.parametrize("case", NEW_OPTIMIZERS, ids=[c[0] for c in NEW_OPTIMIZERS])
def test_torch_state_dict_loads_and_training_continues_alike(case):
    """PyTorch's state dict (its layout: numbered parameters, the same state names in the same
    order, the same group options) loads into ours, and the next steps match torch's."""
    make = case[1]
    results = run_both(make, steps=3)
    (_, our_opt, _), (theirs, their_opt, _) = results[lz], results[torch]
    theirs_saved = their_opt.state_dict()
    ours_saved = our_opt.state_dict()
    for i, their_state in theirs_saved["state"].items():
        assert list(ours_saved["state"][i]) == list(their_state)
    for mine, their_group in zip(ours_saved["param_groups"], theirs_saved["param_groups"]):
        assert mine.keys() == their_group.keys() and mine["params"] == their_group["params"]
    rng = np.random.default_rng(7)
    params = [lz.tensor(q.detach().numpy().copy(), requires_grad=True) for q in theirs]
    resumed = make(lz, params)
    resumed.load_state_dict({"state": {i: {k: _as_numpy(v) for k, v in s.items()}
                                       for i, s in theirs_saved["state"].items()},
                             "param_groups": theirs_saved["param_groups"]})
    for _ in range(3):
        grads = [rng.standard_normal(s) for s in SHAPES]
        for opt, ps, lib in ((resumed, params, lz), (their_opt, theirs, torch)):
            for p, g in zip(ps, grads):
                p.grad = lib.tensor(g)
            opt.step()
    for p, q in zip(params, theirs):
        assert_same(p, q)
