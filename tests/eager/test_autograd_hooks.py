"""Tensor hooks and retained gradients under ``lz.autograd.grad`` and ``backward``, against torch
in float64: which hooks fire, in which order, with which gradients, what the hooks' results change,
what ``grad`` returns for each input and what lands in a retained ``.grad``."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lezero as lz


def graph(fw):
    """x, w leaves; h = x * w and u = sin(h) hooked (h's hook adds 1, retained); y = sum(u) + sum(2w).
    Returns the tensors and the log the hooks write (name, gradient)."""
    log = []

    def hook(name, change):
        def fn(g):
            log.append((name, g.detach().numpy().copy()))
            return change(g)
        return fn

    x = fw.tensor([1.0, 2.0], dtype=fw.float64, requires_grad=True)
    w = fw.tensor([3.0, -4.0], dtype=fw.float64, requires_grad=True)
    x.register_hook(hook("x", lambda g: g * 10))
    w.register_hook(hook("w", lambda g: g * 100))
    h = x * w
    h.register_hook(hook("h", lambda g: g + 1))
    h.retain_grad()
    u = h.sin()
    u.register_hook(hook("u", lambda g: None))  # None keeps the gradient
    y = u.sum() + (w * 2).sum()
    return dict(x=x, w=w, h=h, u=u, y=y), log


def same_log(got, want):
    assert [name for name, _ in got] == [name for name, _ in want]
    for (_, g), (_, w) in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)


@pytest.mark.parametrize("wanted", [["x"], ["w"], ["h"], ["x", "h"], ["u", "x"], ["x", "w"], ["h", "w", "u"]])
def test_grad_fires_the_hooks_torch_fires_and_returns_its_gradients(wanted):
    results = {}
    for fw in (lz, torch):
        t, log = graph(fw)
        grads = fw.autograd.grad(t["y"], [t[n] for n in wanted], retain_graph=True)
        results[fw] = ([g.detach().numpy() for g in grads], log, t["h"].grad)
    (got, got_log, got_h), (want, want_log, want_h) = results[lz], results[torch]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)
    same_log(got_log, want_log)
    assert (got_h is None) == (want_h is None)  # a retained gradient fills where torch's does
    if want_h is not None:
        np.testing.assert_allclose(got_h.numpy(), want_h.numpy(), rtol=1e-12)


def test_grad_of_an_input_below_another_input_sums_every_path():
    for_both = []
    for fw in (lz, torch):
        z = fw.tensor([0.5, 2.0], dtype=fw.float64, requires_grad=True)
        x = z * 3
        y = (x.sin() * z).sum()
        for_both.append([g.detach().numpy() for g in fw.autograd.grad(y, [x, z])])
    for g, w in zip(*for_both):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_a_hook_on_the_output_changes_the_seed_and_grad_builds_graphs_through_hooks():
    values = []
    for fw in (lz, torch):
        x = fw.tensor([1.5, -0.5], dtype=fw.float64, requires_grad=True)
        y = (x * x * x).sum()
        y.register_hook(lambda g: g * 2)
        m = x.exp()
        m.register_hook(lambda g: g * 3)
        (gx,) = fw.autograd.grad(y + m.sum(), [x], create_graph=True)
        (ggx,) = fw.autograd.grad(gx.sum(), [x])
        values.append([gx.detach().numpy(), ggx.detach().numpy()])
    for g, w in zip(*values):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def test_unused_inputs_with_hooks_as_torch():
    for fw in (lz, torch):
        t, _ = graph(fw)
        unused = fw.tensor([1.0], dtype=fw.float64, requires_grad=True)
        with pytest.raises(RuntimeError, match="appears to not have been used in the graph"):
            fw.autograd.grad(t["y"], [t["x"], unused], retain_graph=True)
        gx, none = fw.autograd.grad(t["y"], [t["x"], unused], retain_graph=True, allow_unused=True)
        assert none is None
        _, zero = fw.autograd.grad(t["y"], [t["x"], unused], materialize_grads=True)
        assert zero.tolist() == [0.0]


def test_backward_runs_a_leaf_hook_once_on_its_whole_gradient():
    results = []
    for fw in (lz, torch):
        calls = []
        x = fw.tensor([1.0, 2.0], dtype=fw.float64, requires_grad=True)
        x.register_hook(lambda g: calls.append(g.detach().numpy().copy()))
        h = x * x
        h.register_hook(lambda g: g * 5)
        (h.sum() + (x * 7).sum()).backward()
        results.append((calls, x.grad.numpy()))
    (got_calls, got), (want_calls, want) = results
    assert len(got_calls) == len(want_calls) == 1
    np.testing.assert_allclose(got_calls[0], want_calls[0], rtol=1e-12)
    np.testing.assert_allclose(got, want, rtol=1e-12)
