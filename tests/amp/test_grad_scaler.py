"""``lz.amp.GradScaler`` follows ``torch.amp.GradScaler`` step by step: the same scales, growth
trackers and skipped steps on the same gradient sequence (an f16 overflow at the initial scale 2**16
included), the same state dict and the same errors; ``compile_train_step(scaler=)`` holds the whole
state machine in its one compiled step and follows the eager loop."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lezero as lz

GRADIENTS = ([np.array([1, 2, 3], np.float32)] * 4 + [np.array([np.inf, 1, 1], np.float32),
             np.array([1, np.nan, 1], np.float32)] + [np.array([1, -2, 0.5], np.float32)] * 5)


def _scaler_run(lib, gradients, **options):
    """(scale, growth tracker, parameter) after each step of SGD on ``p . g`` with a scaler."""
    p = lib.tensor(np.ones(3, np.float32), requires_grad=True)
    optimizer = lib.optim.SGD([p], lr=0.1)
    scaler = lib.amp.GradScaler("cpu", **options)
    seen = []
    for g in gradients:
        optimizer.zero_grad()
        scaler.scale((p * lib.tensor(g)).sum()).backward()
        scaler.step(optimizer)
        scaler.update()
        seen.append((scaler.get_scale(), scaler._get_growth_tracker(), p.detach().numpy().copy()))
    return seen, scaler


@pytest.mark.parametrize("options", [{"growth_interval": 3}, {"init_scale": 2.0 ** 24, "growth_factor": 4.0,
                                                               "backoff_factor": 0.25, "growth_interval": 2}])
def test_scales_trackers_and_skipped_steps_follow_torch(options):
    ours, scaler = _scaler_run(lz, GRADIENTS, **options)
    theirs, torch_scaler = _scaler_run(torch, GRADIENTS, **options)
    for step, ((scale, tracker, p), (t_scale, t_tracker, t_p)) in enumerate(zip(ours, theirs)):
        assert (scale, tracker) == (t_scale, t_tracker), step
        np.testing.assert_allclose(p, t_p, rtol=1e-6, atol=1e-7)
    assert np.array_equal(ours[4][2], ours[3][2]) and np.array_equal(ours[5][2], ours[3][2])  # inf, nan: skipped
    assert scaler.state_dict() == torch_scaler.state_dict()


def test_an_f16_overflow_at_the_initial_scale_is_skipped_and_the_scale_halves():
    """``x @ w`` in f16: the scaled loss's cotangent 2**16 is inf in f16, so the first gradient is
    inf; the step is skipped and the scale halves; 2**15 is finite and the next step runs."""
    rng = np.random.default_rng(0)
    x0, w0 = (0.25 * rng.standard_normal((4, 8))).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32)
    runs = []
    for lib in (lz, torch):
        w = lib.tensor(w0.copy(), requires_grad=True)
        optimizer = lib.optim.SGD([w], lr=1e-3)
        scaler = lib.amp.GradScaler("cpu")
        seen = []
        for _ in range(3):
            optimizer.zero_grad()
            with lib.autocast("cpu", dtype=lib.float16):
                loss = (lib.tensor(x0) @ w).float().sum()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            seen.append((scaler.get_scale(), w.detach().numpy().copy()))
        runs.append(seen)
    ours, theirs = runs
    assert [s for s, _ in ours] == [s for s, _ in theirs] == [2.0 ** 15, 2.0 ** 15, 2.0 ** 15]
    assert np.array_equal(ours[0][1], w0)  # skipped
    for (_, p), (_, t) in zip(ours, theirs):
        np.testing.assert_allclose(p, t, rtol=1e-3, atol=1e-5)


def test_state_dicts_load_and_a_disabled_scaler_does_nothing():
    _, scaler = _scaler_run(lz, GRADIENTS[:5], growth_interval=3)
    other = lz.amp.GradScaler("cpu")
    other.load_state_dict(scaler.state_dict())
    assert other.state_dict() == scaler.state_dict() == {
        "scale": 65536.0, "growth_factor": 2.0, "backoff_factor": 0.5, "growth_interval": 3, "_growth_tracker": 0}
    off = lz.amp.GradScaler("cpu", enabled=False)
    loss = lz.tensor(2.0)
    assert off.scale(loss) is loss and off.get_scale() == 1.0 and off.state_dict() == {}
    with pytest.raises(RuntimeError, match="source state dict is empty"):
        other.load_state_dict({})


def test_calls_out_of_order_raise_torchs_errors():
    p = lz.tensor(np.ones(2, np.float32), requires_grad=True)
    optimizer = lz.optim.SGD([p], lr=0.1)
    scaler = lz.amp.GradScaler("cpu")
    with pytest.raises(AssertionError, match="did not use scaler.scale"):
        scaler.step(optimizer)
    scaler.scale(p.sum()).backward()
    scaler.unscale_(optimizer)
    with pytest.raises(RuntimeError, match=r"unscale_\(\) has already been called"):
        scaler.unscale_(optimizer)
    scaler.step(optimizer)
    with pytest.raises(RuntimeError, match=r"step\(\) has already been called"):
        scaler.step(optimizer)
    scaler.update()
    np.testing.assert_allclose(p.detach().numpy(), [0.9, 0.9], rtol=1e-6)  # unscaled before the step
    with pytest.raises(ValueError, match="growth factor must be > 1.0"):
        lz.amp.GradScaler("cpu", growth_factor=1.0)


def test_the_compiled_step_holds_scaling_the_inf_check_the_skip_and_the_update():
    """The compiled step with a scaler (f16 autocast) against the eager loop and torch's, on a loss
    whose cotangent at 2**16 overflows f16 (``sum`` of the f16 logits): the first step is skipped,
    2**15 runs, grows back to 2**16 after ``growth_interval=2`` steps, which overflows again; the same
    scales in the three, the parameters after each step within f16 tolerance."""
    rng = np.random.default_rng(0)
    x = (0.1 * rng.standard_normal((1, 6))).astype(np.float32)
    target = np.ones((1, 4), np.float32)

    def loss_fn(out, t):
        return (out.float() * t).sum()

    def make(lib):
        lib.manual_seed(0)
        return lib.nn.Sequential(lib.nn.Linear(6, 5), lib.nn.ReLU(), lib.nn.Linear(5, 4))

    torch_model = make(torch)
    results = {}
    for kind in ("compiled", "eager", "torch"):
        lib = torch if kind == "torch" else lz
        model = make(lib)
        if lib is lz:
            model.load_state_dict({k: lz.tensor(v.detach().numpy()) for k, v in torch_model.state_dict().items()})
        optimizer = lib.optim.Adam(model.parameters(), lr=1e-2)
        scaler = lib.amp.GradScaler("cpu", growth_interval=2)
        if kind == "compiled":
            with lz.autocast("cpu", dtype=lz.float16):
                step = lz.jit.compile_train_step(model, loss_fn, optimizer, x, target, scaler=scaler)
            assert "lz.select" in step.graph and "scaler.scale" in step.graph
        seen = []
        for _ in range(5):
            if kind == "compiled":
                step(x, target)
            else:
                optimizer.zero_grad()
                with lib.autocast("cpu", dtype=lib.float16):
                    loss = loss_fn(model(lib.tensor(x)), lib.tensor(target))
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            seen.append((scaler.get_scale(), scaler._get_growth_tracker(),
                         [p.detach().numpy().copy() for p in model.parameters()]))
        results[kind] = seen
        if lib is lz:
            assert int(optimizer.state[next(iter(model.parameters()))]["step"].item()) == 3  # skipped ones don't count
    scales = {kind: [(s, t) for s, t, _ in seen] for kind, seen in results.items()}
    assert scales["compiled"] == scales["eager"] == scales["torch"]
    assert scales["torch"] == [(2.0 ** 15, 0), (2.0 ** 15, 1), (2.0 ** 16, 0), (2.0 ** 15, 0), (2.0 ** 15, 1)]
    for kind in ("compiled", "eager"):
        for (_, _, ours), (_, _, theirs) in zip(results[kind], results["torch"]):
            for p, t in zip(ours, theirs):
                np.testing.assert_allclose(p, t, rtol=2e-3, atol=2e-3)
