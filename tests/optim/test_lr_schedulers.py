"""Learning-rate schedules against torch.optim.lr_scheduler: the same rates (and OneCycleLR's and
CyclicLR's momentum) step by step over two parameter groups, the combinators, ReduceLROnPlateau on a metric
sequence, and state dicts that resume a schedule where it stopped."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lezero as lz


class Halving:
    """A callable object: LambdaLR saves its ``__dict__``."""

    def __init__(self):
        self.rate = 0.5

    def __call__(self, epoch):
        return self.rate ** epoch


def _optimizer(lib, kind="sgd"):
    groups = [{"params": [lib.zeros(2, requires_grad=True)], "lr": 0.1},
              {"params": [lib.zeros(3, requires_grad=True)], "lr": 0.02}]
    if kind == "adam":
        return lib.optim.Adam(groups, lr=0.1)
    return lib.optim.SGD(groups, lr=0.1, momentum=0.9)


SCHEDULES = {
    "LambdaLR": (lambda s, o: s.LambdaLR(o, lambda e: 0.9 ** e + 0.01 * e), "sgd"),
    "LambdaLR per group": (lambda s, o: s.LambdaLR(o, [lambda e: 1 / (e + 1), Halving()]), "sgd"),
    "MultiplicativeLR": (lambda s, o: s.MultiplicativeLR(o, lambda e: 0.95), "sgd"),
    "ConstantLR": (lambda s, o: s.ConstantLR(o, factor=0.5, total_iters=4), "sgd"),
    "LinearLR": (lambda s, o: s.LinearLR(o, start_factor=0.1, end_factor=0.9, total_iters=6), "sgd"),
    "PolynomialLR": (lambda s, o: s.PolynomialLR(o, total_iters=8, power=2.0), "sgd"),
    "CosineAnnealingWarmRestarts": (lambda s, o: s.CosineAnnealingWarmRestarts(o, T_0=3, eta_min=0.001), "sgd"),
    "CosineAnnealingWarmRestarts T_mult": (lambda s, o: s.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=2), "sgd"),
    "OneCycleLR": (lambda s, o: s.OneCycleLR(o, max_lr=[1.0, 0.5], total_steps=16), "sgd"),
    "OneCycleLR adam linear three-phase": (lambda s, o: s.OneCycleLR(
        o, max_lr=0.3, epochs=4, steps_per_epoch=4, anneal_strategy="linear", three_phase=True, pct_start=0.25),
        "adam"),
    "CyclicLR": (lambda s, o: s.CyclicLR(o, base_lr=0.01, max_lr=[0.1, 0.05], step_size_up=3), "sgd"),
    "CyclicLR triangular2 adam": (lambda s, o: s.CyclicLR(o, 0.001, 0.1, step_size_up=2, step_size_down=3,
                                                          mode="triangular2"), "adam"),
    "CyclicLR exp_range": (lambda s, o: s.CyclicLR(o, 0.01, 0.1, step_size_up=4, mode="exp_range", gamma=0.9,
                                                   cycle_momentum=False), "sgd"),
    "CyclicLR scale_fn": (lambda s, o: s.CyclicLR(o, 0.01, 0.1, step_size_up=2, scale_fn=Halving(),
                                                  scale_mode="iterations"), "sgd"),
    "SequentialLR warm-up then cosine": (lambda s, o: s.SequentialLR(
        o, [s.LinearLR(o, start_factor=0.2, total_iters=4), s.CosineAnnealingLR(o, T_max=8)], milestones=[4]),
        "sgd"),
    "SequentialLR three": (lambda s, o: s.SequentialLR(
        o, [s.ConstantLR(o, factor=0.3, total_iters=2), s.ExponentialLR(o, gamma=0.9), s.StepLR(o, 2)],
        milestones=[3, 7]), "sgd"),
    "ChainedScheduler": (lambda s, o: s.ChainedScheduler(
        [s.LinearLR(o, start_factor=0.5, total_iters=3), s.ExponentialLR(o, gamma=0.9)]), "sgd"),
}


def _rates(lib, name, steps=15):
    make, kind = SCHEDULES[name]
    optimizer = _optimizer(lib, kind)
    scheduler = make(lib.optim.lr_scheduler, optimizer)
    rates, momenta = [scheduler.get_last_lr()], []
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
        rates.append(scheduler.get_last_lr())
        momenta.append([g["betas"][0] if "betas" in g else g["momentum"] for g in optimizer.param_groups])
    return np.array(rates), np.array(momenta), optimizer, scheduler


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_rates_match_torch_step_by_step(name):
    ours, our_momenta, optimizer, _ = _rates(lz, name)
    theirs, their_momenta, _, _ = _rates(torch, name)
    np.testing.assert_allclose(ours, theirs, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(our_momenta, their_momenta, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose([g["lr"] for g in optimizer.param_groups], ours[-1], rtol=0, atol=0)


@pytest.mark.parametrize("name", list(SCHEDULES))
def test_state_dict_resumes_the_schedule(name):
    make, kind = SCHEDULES[name]
    full, _, _, _ = _rates(lz, name, steps=12)
    optimizer = _optimizer(lz, kind)
    scheduler = make(lz.optim.lr_scheduler, optimizer)
    for _ in range(5):
        scheduler.step()
    saved_optimizer, saved = optimizer.state_dict(), scheduler.state_dict()
    assert "optimizer" not in saved
    their_keys = set(make(torch.optim.lr_scheduler, _optimizer(torch, kind)).state_dict())
    assert their_keys - set(saved) <= {"_get_lr_called_within_step"}  # torch's warning bookkeeping
    resumed_optimizer = _optimizer(lz, kind)
    resumed = make(lz.optim.lr_scheduler, resumed_optimizer)
    resumed_optimizer.load_state_dict(saved_optimizer)
    resumed.load_state_dict(saved)
    rates = []
    for _ in range(7):
        resumed.step()
        rates.append(resumed.get_last_lr())
    np.testing.assert_allclose(rates, full[6:], rtol=1e-13)


def test_lambda_state_dict_is_torchs():
    saved = lz.optim.lr_scheduler.LambdaLR(_optimizer(lz), [lambda e: 1.0, Halving()]).state_dict()
    assert saved["lr_lambdas"] == [None, {"rate": 0.5}]
    cyclic = lz.optim.lr_scheduler.CyclicLR(_optimizer(lz), 0.01, 0.1, scale_fn=Halving()).state_dict()
    assert cyclic["_scale_fn_custom"] == {"rate": 0.5}


@pytest.mark.parametrize("options", [dict(), dict(mode="max", factor=0.5, patience=1, threshold_mode="abs",
                                                  threshold=0.01, cooldown=2, min_lr=[0.01, 0.005])])
def test_reduce_on_plateau_matches_torch(options):
    metrics = [1.0, 0.9, 0.95, 0.95, 0.96, 0.97, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.4, 0.4,
               0.41, 0.39]
    metrics = metrics if options else metrics * 3
    rates = {}
    for lib in (lz, torch):
        optimizer = _optimizer(lib)
        scheduler = lib.optim.lr_scheduler.ReduceLROnPlateau(optimizer, **options)
        rates[lib] = []
        for m in metrics:
            scheduler.step(m)
            rates[lib].append(scheduler.get_last_lr())
    np.testing.assert_allclose(rates[lz], rates[torch], rtol=1e-13)
    assert rates[lz][-1] != rates[lz][0]  # it did reduce


def test_schedule_errors_are_torchs():
    s = lz.optim.lr_scheduler
    with pytest.raises(TypeError, match="is not an Optimizer"):
        s.StepLR(object(), 2)
    with pytest.raises(ValueError, match="Expected 2 lr_lambdas, but got 1"):
        s.LambdaLR(_optimizer(lz), [lambda e: 1.0])
    with pytest.raises(ValueError, match="total_steps OR"):
        s.OneCycleLR(_optimizer(lz), max_lr=1.0)
    with pytest.raises(ValueError, match="Tried to step 4 times"):
        one = s.OneCycleLR(_optimizer(lz), max_lr=1.0, total_steps=3)
        for _ in range(4):
            one.step()
    optimizer = _optimizer(lz)
    with pytest.raises(ValueError, match="does not support `ReduceLROnPlateau`"):
        s.SequentialLR(optimizer, [s.ReduceLROnPlateau(optimizer), s.StepLR(optimizer, 2)], milestones=[2])
    with pytest.raises(ValueError, match="Factor should be < 1.0"):
        s.ReduceLROnPlateau(optimizer, factor=1.5)
