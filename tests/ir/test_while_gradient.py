"""Gradients through a bounded lz.while (``max_trip_count``): rewritten as an lz.for of that many
steps that carries a ``running`` flag, whose gradient rule then applies.  In f64 they equal central
finite differences and torch autograd on the unrolled loop, through the interpreter and compiled
(lezero.compile), for loops that run 0, 1, several and exactly max_trip_count iterations; running
past the bound is an error eagerly, interpreted and compiled; an unbounded loop has no gradient."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lezero as lz
from lezero.eager.autograd import trace
from lezero.ir.core import ModuleOp
from lezero.ir.diagnostics import IRError, VerifyError
from lezero.ir.interpreter import interpret
from lezero.ir.parser import parse_module
from lezero.ir.verifier import verify
from lezero.passes.autodiff import differentiate

BOUND = 4
X = np.array([0.3, -0.2, 0.9])
W = np.array([1.1, 0.7, -0.4])


def _step(x, w, lib):
    return lib.sin(x * w) + x * 0.5


def _counted(max_trip_count=BOUND):
    """``x <- sin(x * w) + x / 2`` while the counter is below ``limit`` (an input)."""
    def fn(x, w, limit):
        return lz.while_loop(lambda c: c[1] < limit, lambda c: (_step(c[0], w, lz), c[1] + 1),
                             (x, lz.tensor(0, dtype=lz.int64)), max_trip_count=max_trip_count)
    return fn


def _growing(x, w):
    """A condition on the data: ``x <- x * w + x`` (w > 0 grows it) while ``sum(x * x) < 4``."""
    return lz.while_loop(lambda x: (x * x).sum() < 4.0, lambda x: x * w + x, x, max_trip_count=BOUND)


def _traced(fn, *examples):
    """``fn`` traced, with its gradient function ``<name>_grad``: (module, name, its arguments)."""
    t = trace(fn, *[lz.tensor(e) for e in examples])
    module = ModuleOp([t.func])
    name = t.func.sym_name
    differentiate(module, name)
    verify(module)
    return module, name, list(examples) + [a.numpy() for a in t.captured]


def _central_differences(loss, args, k, eps=1e-6):
    out = np.zeros_like(args[k])
    for idx in np.ndindex(args[k].shape):
        plus, minus = [a.copy() for a in args], [a.copy() for a in args]
        plus[k][idx] += eps
        minus[k][idx] -= eps
        out[idx] = (loss(plus) - loss(minus)) / (2 * eps)
    return out


def _check_gradients(module, name, args, cotangents, torch_fn, float_args):
    """Interpreted and compiled: forward equal, gradients of ``float_args`` (indices of ``args``)
    equal torch's on ``torch_fn`` (the unrolled loop) and central differences; returns the
    interpreted results."""
    interpreted = interpret(module, name + "_grad", *args, *cotangents)
    compiled = lz.compile(module, name + "_grad")(*args, *cotangents)
    forward = interpret(module, name, *args)
    forward = list(forward) if isinstance(forward, (tuple, list)) else [forward]
    n_results = len(forward)
    compiled_forward = lz.compile(module, name)(*args)
    compiled_forward = list(compiled_forward) if isinstance(compiled_forward, (tuple, list)) else [compiled_forward]
    for got, i, c in zip(forward, interpreted, compiled_forward):
        np.testing.assert_array_equal(got, i)
        np.testing.assert_allclose(c, got, rtol=1e-12, atol=1e-14)
    for got, want in zip(compiled, interpreted):
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)

    leaves = [torch.tensor(args[k], requires_grad=True) for k in float_args]
    torch_results = torch_fn(*leaves)
    float_cotangents = [torch.tensor(c) for c, r in zip(cotangents, torch_results) if r.dtype == torch.float64]
    torch_grads = torch.autograd.grad([r for r in torch_results if r.dtype == torch.float64], leaves,
                                      float_cotangents, allow_unused=True)

    def loss(values):
        full = list(args)
        for k, v in zip(float_args, values):
            full[k] = v
        out = interpret(module, name, *full)
        out = list(out) if isinstance(out, (tuple, list)) else [out]
        return sum(float((r * c).sum()) for r, c in zip(out, cotangents) if r.dtype == np.float64)

    grads = interpreted[n_results:]
    float_values = [args[k] for k in float_args]
    for j, want in enumerate(torch_grads):
        want = np.zeros_like(float_values[j]) if want is None else want.numpy()
        np.testing.assert_allclose(grads[j], want, rtol=1e-10, atol=1e-12, err_msg=f"argument #{j} vs torch")
        np.testing.assert_allclose(grads[j], _central_differences(loss, float_values, j), rtol=1e-6, atol=1e-8,
                                   err_msg=f"argument #{j} vs finite differences")
    return interpreted


@pytest.mark.parametrize("limit", [0, 1, 3, BOUND])
def test_counted_while_gradient_equals_torch_and_finite_differences(limit):
    module, name, args = _traced(_counted(), X, W, np.int64(2))
    args[2] = np.int64(limit)  # the trip count is an input: one trace, every count

    def unrolled(x, w):
        for _ in range(limit):
            x = _step(x, w, torch)
        return [x]

    cotangents = [np.array([1.0, -0.5, 2.0]), np.int64(0)]
    out = _check_gradients(module, name, args, cotangents, unrolled, [0, 1])
    assert int(out[1]) == limit


@pytest.mark.parametrize("w", [np.array([0.3, 0.4, 0.2]), np.array([2.0, 1.5, 1.0])])
def test_data_dependent_while_gradient_equals_torch_and_finite_differences(w):
    x = np.array([0.5, -0.4, 0.3])
    module, name, args = _traced(_growing, x, w)
    steps, value = 0, x
    while (value * value).sum() < 4.0:
        value, steps = value * w + value, steps + 1
    assert 1 <= steps <= BOUND

    def unrolled(x, w):
        for _ in range(steps):
            x = x * w + x
        return [x]

    _check_gradients(module, name, args, [np.array([0.7, 1.0, -1.2])], unrolled, [0, 1])


def test_running_past_the_bound_is_an_error_eagerly_interpreted_and_compiled():
    fn = _counted()
    with pytest.raises(RuntimeError, match=r"ran past its max_trip_count \(4\)"):
        fn(lz.tensor(X), lz.tensor(W), lz.tensor(np.int64(BOUND + 1)))
    module, name, args = _traced(fn, X, W, np.int64(2))
    args[2] = np.int64(BOUND + 1)
    with pytest.raises(IRError, match=r"ran past its max_trip_count \(4\)"):
        interpret(module, name, *args)
    for compiled_name in (name, name + "_grad"):
        compiled = lz.compile(module, compiled_name)
        cotangents = [np.ones(3), np.int64(0)] if compiled_name != name else []
        with pytest.raises(RuntimeError, match=r"ran past its max_trip_count \(4\)"):
            compiled(*args, *cotangents)


def test_eager_while_loop_within_the_bound_runs_and_backpropagates():
    x, w = lz.tensor(X, requires_grad=True), lz.tensor(W)
    out, count = _counted()(x, w, lz.tensor(np.int64(BOUND)))
    out.sum().backward()
    xt = torch.tensor(X, requires_grad=True)
    yt = xt
    for _ in range(BOUND):
        yt = _step(yt, torch.tensor(W), torch)
    yt.sum().backward()
    assert int(count.numpy()) == BOUND
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-12)


def test_an_unbounded_while_has_no_gradient_and_the_error_names_the_attribute():
    module = ModuleOp([trace(_counted(max_trip_count=None), *[lz.tensor(e) for e in (X, W, np.int64(2))]).func])
    with pytest.raises(IRError, match="has no gradient without a 'max_trip_count' attribute"):
        differentiate(module, module.body.ops[0].sym_name)


NEGATIVE_BOUND = """
func.func @f(%n0: tensor<i64>) -> tensor<i64> {
  %n = "lz.while"(%n0) ({
  ^bb0(%n_: tensor<i64>):
    %c = "lz.constant"() {value = dense<3> : tensor<i64>} : () -> tensor<i64>
    %go = "lz.cmp"(%n_, %c) {predicate = "lt"} : (tensor<i64>, tensor<i64>) -> tensor<i1>
    "lz.yield"(%go) : (tensor<i1>) -> ()
  }, {
  ^bb0(%n_: tensor<i64>):
    "lz.yield"(%n_) : (tensor<i64>) -> ()
  }) {max_trip_count = -1 : i64} : (tensor<i64>) -> tensor<i64>
  func.return %n : tensor<i64>
}
"""


def test_the_verifier_rejects_a_negative_max_trip_count():
    with pytest.raises(VerifyError, match="max_trip_count must be >= 0, got -1"):
        verify(parse_module(NEGATIVE_BOUND))


class _RepeatedLayer(lz.nn.Module):
    """``h <- tanh(lin(h))`` three times, as a bounded while loop (its count and bound rank-0
    constants of the trace)."""

    def __init__(self):
        super().__init__()
        self.lin = lz.nn.Linear(3, 3)

    def forward(self, x):
        return lz.while_loop(lambda c: c[1] < 3, lambda c: (lz.tanh(self.lin(c[0])), c[1] + 1),
                             (x, lz.tensor(0, dtype=lz.int64)), max_trip_count=5)[0]


def test_a_compiled_train_step_through_a_bounded_while_loop_equals_the_eager_step():
    compiled_model = _RepeatedLayer()
    eager_model = _RepeatedLayer()
    eager_model.load_state_dict(compiled_model.state_dict())
    x = lz.tensor(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32))
    y = lz.zeros(4, 3)
    traced = lz.jit.trace(compiled_model, x)
    np.testing.assert_allclose(traced(x).detach().numpy(), compiled_model(x).detach().numpy(), rtol=1e-6)
    compiled_optimizer = lz.optim.SGD(compiled_model.parameters(), lr=0.1)
    eager_optimizer = lz.optim.SGD(eager_model.parameters(), lr=0.1)
    step = lz.jit.compile_train_step(compiled_model, lz.nn.MSELoss(), compiled_optimizer, x, y)
    for _ in range(3):
        compiled_loss = step(x, y)
        eager_optimizer.zero_grad()
        eager_loss = lz.nn.MSELoss()(eager_model(x), y)
        eager_loss.backward()
        eager_optimizer.step()
        np.testing.assert_allclose(compiled_loss.detach().numpy(), eager_loss.detach().numpy(), rtol=1e-5)
    for p, q in zip(compiled_model.parameters(), eager_model.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6)
