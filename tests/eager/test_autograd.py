"""Autograd: backward() semantics as PyTorch's, the gradient function built once per graph structure
from the recording (forward values fed in, not recomputed), create_graph and lz.grad(lz.grad(f))
against torch's double backward, lz.autograd.grad, grad mode, and trace()."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lezero as lz
from lezero.eager import autograd, dispatch
from lezero.ir import interpret, verify
from lezero.ir.core import ModuleOp

from support.eager_testing import assert_same


def test_backward_accumulates_into_leaves():
    x = lz.tensor([1.0, 2.0], requires_grad=True)
    w = lz.tensor([3.0, 4.0], requires_grad=True)
    c = lz.tensor([1.0, 1.0])  # needs no grad: a constant of the gradient function
    (x * w + c).sum().backward()
    assert x.grad.tolist() == [3.0, 4.0] and w.grad.tolist() == [1.0, 2.0] and c.grad is None
    (x * w).sum().backward()  # accumulates
    assert x.grad.tolist() == [6.0, 8.0]
    assert x.is_leaf and not (x * w).is_leaf and (x * w).grad_fn is not None and x.grad_fn is None


def test_backward_of_non_scalars_needs_a_gradient():
    x = lz.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    with pytest.raises(RuntimeError, match="grad can be implicitly created only for scalar outputs"):
        y.backward()
    y.backward(lz.tensor([1.0, 10.0]))
    assert x.grad.tolist() == [2.0, 40.0]
    with pytest.raises(RuntimeError, match="does not require grad"):
        lz.tensor([1.0]).sum().backward()


def test_second_backward_needs_retain_graph():
    x = lz.tensor([1.0, 2.0], requires_grad=True)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert x.grad.tolist() == [4.0, 8.0]
    with pytest.raises(RuntimeError, match="backward through the graph a second time"):
        y.backward()


def test_no_grad_detach_and_requires_grad():
    x = lz.tensor([1.0, 2.0], requires_grad=True)
    with lz.no_grad():
        y = x * 2
    assert not y.requires_grad and y.grad_fn is None
    assert not x.detach().requires_grad and lz.is_grad_enabled()
    with lz.set_grad_enabled(False):
        assert not (x * 2).requires_grad
    assert lz.is_grad_enabled()

    @lz.no_grad()
    def evaluate(t):
        return t * 3
    assert not evaluate(x).requires_grad and lz.is_grad_enabled()
    z = lz.tensor([1.0, 2.0]).requires_grad_()
    assert z.requires_grad and z.is_leaf
    with pytest.raises(RuntimeError, match="floating point"):
        lz.tensor([1, 2]).requires_grad_()
    assert not (x > 1).requires_grad and not x.argmax().requires_grad


def test_a_training_loop_compiles_backward_once():
    w = lz.tensor(np.random.default_rng(0).standard_normal((4, 3)), requires_grad=True)
    b = lz.zeros(3, dtype=lz.float64, requires_grad=True)

    def step(seed):
        x = lz.tensor(np.random.default_rng(seed).standard_normal((5, 4)))
        loss = ((x @ w + b).tanh() ** 2).mean()
        loss.backward()
        return loss

    step(0)
    compiled = (len(autograd._GRADIENTS), dispatch.cache_size())
    for seed in (1, 2):
        w.grad = b.grad = None
        step(seed)
    assert (len(autograd._GRADIENTS), dispatch.cache_size()) == compiled


def test_the_gradient_function_reads_the_forward_values():
    x = lz.tensor([0.5, 1.5], dtype=lz.float64, requires_grad=True)
    y = (x.exp() * x.tanh()).sum()
    rec = autograd.walk([y], stop_at_constants=True)
    gf = autograd.gradient_function(rec, (0,))
    names = [op.name for op in gf.func.entry_block.ops]
    assert "lz.exp" not in names and "lz.tanh" not in names, names  # fed, not recomputed
    verify(ModuleOp([gf.func.clone()]))
    y.backward()
    xs = x.detach().numpy()
    np.testing.assert_allclose(x.grad.numpy(), np.exp(xs) * np.tanh(xs) + np.exp(xs) * (1 - np.tanh(xs) ** 2))


def test_autograd_grad_and_create_graph_match_torch():
    data = np.array([[0.3, -1.2, 2.0], [0.7, 0.1, -0.4]])
    w_data = np.random.default_rng(1).standard_normal((3, 2))

    def f(lib, x, w):
        return ((x @ w).tanh() * x.sum(1, keepdim=True)).sum()

    grads = {}
    for lib in (lz, torch):
        x = lib.tensor(data, requires_grad=True)
        w = lib.tensor(w_data, requires_grad=True)
        gx, gw = lib.autograd.grad(f(lib, x, w), (x, w), create_graph=True)
        (gx.sum() + (gw * gw).sum()).backward()
        grads[lib] = (gx, gw, x.grad, w.grad)
    for got, want in zip(grads[lz], grads[torch]):
        assert_same(got, want)


def test_grad_of_grad_matches_torch():
    data = np.array([0.2, -0.7, 1.3])

    def f(x):
        return (x.sin() * x * x).sum()

    second = lz.grad(lambda x: lz.grad(f)(x).sum())(lz.tensor(data))
    third = lz.grad(lambda x: lz.grad(lambda y: lz.grad(f)(y).sum())(x).sum())(lz.tensor(data))
    x = torch.tensor(data, requires_grad=True)
    g1, = torch.autograd.grad(f(x), x, create_graph=True)
    g2, = torch.autograd.grad(g1.sum(), x, create_graph=True)
    g3, = torch.autograd.grad(g2.sum(), x)
    assert_same(second, g2)
    assert_same(third, g3)


def test_grad_of_grad_through_matmul():
    w_data = np.random.default_rng(2).standard_normal((3, 3))
    x_data = np.array([0.5, -0.2, 0.9])

    def energy(lib, x, w):
        return ((x @ w) ** 3).sum()

    w = lz.tensor(w_data)
    hessian_vector = lz.grad(lambda x: (lz.grad(lambda y: energy(lz, y, w))(x) * lz.tensor(x_data)).sum())
    xt = torch.tensor(x_data, requires_grad=True)
    g, = torch.autograd.grad(energy(torch, xt, torch.tensor(w_data)), xt, create_graph=True)
    hv, = torch.autograd.grad((g * torch.tensor(x_data)).sum(), xt)
    assert_same(hessian_vector(lz.tensor(x_data)), hv)


def test_grad_transform_options():
    def f(x, y):
        return (x * y).sum(), x.detach()

    gx, gy = lz.grad(lambda x, y: f(x, y)[0], argnums=(0, 1))(lz.tensor([1.0, 2.0]), lz.tensor([3.0, 4.0]))
    assert gx.tolist() == [3.0, 4.0] and gy.tolist() == [1.0, 2.0]
    g, aux = lz.grad(f, has_aux=True)(lz.tensor([1.0, 2.0]), lz.tensor([3.0, 4.0]))
    assert g.tolist() == [3.0, 4.0] and aux.tolist() == [1.0, 2.0]
    assert lz.grad(lambda x: (x * 0).sum() + 1.0)(lz.tensor([1.0])).tolist() == [0.0]
    value, g = lz.value_and_grad(lambda x: (x * x).sum())(lz.tensor([3.0]))
    assert value.item() == 9.0 and g.tolist() == [6.0]
    with pytest.raises(RuntimeError, match="single element"):
        lz.grad(lambda x: x * 2)(lz.tensor([1.0, 2.0]))
    with pytest.raises(RuntimeError, match="not have been used"):
        x = lz.tensor([1.0], requires_grad=True)
        lz.autograd.grad((lz.tensor([1.0], requires_grad=True) * 2).sum(), x)


def test_trace_records_a_function_at_the_users_lines():
    w = lz.tensor(np.random.default_rng(3).standard_normal((4, 2)).astype(np.float32), requires_grad=True)

    def model(x):
        h = (x @ w).relu()
        return h.softmax(1), h.sum()

    example = lz.randn(3, 4)
    traced = autograd.trace(model, example, name="model")
    func = traced.func
    module = ModuleOp([func])
    verify(module)
    assert [c is w for c in traced.captured] == [True]
    assert [op.name for op in func.entry_block.ops][:3] == ["lz.matmul", "lz.relu", "lz.softmax"]
    lines = {op.location.file_line_col().line for op in func.entry_block.ops[:-1]}
    first = model.__code__.co_firstlineno
    assert lines == {first + 1, first + 2}, lines
    assert all(op.location.file_line_col().filename == __file__ for op in func.entry_block.ops[:-1])
    got = interpret(module, "model", example.numpy(), w.detach().numpy())
    want = model(example)
    np.testing.assert_allclose(got[0], want[0].detach().numpy(), rtol=1e-5)
    np.testing.assert_allclose(got[1], want[1].detach().numpy(), rtol=1e-5)
