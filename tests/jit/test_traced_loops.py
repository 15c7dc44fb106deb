"""lz.jit through the explicit loops: a traced model keeps ONE lz.for (no unrolling) and runs it
compiled at any batch size; a compiled training step differentiates through it with lz.for's
gradient rule, and its update equals the eager step's (autograd through the Python loop)."""
from __future__ import annotations

import numpy as np

import lezero as lz


class TinyRNN(lz.nn.Module):
    """h = tanh(x_t W + h U + b) over time (batch-first input), then a linear head on the last h."""

    def __init__(self, features=3, hidden=4):
        super().__init__()
        self.w = lz.nn.Linear(features, hidden)
        self.u = lz.nn.Linear(hidden, hidden, bias=False)
        self.head = lz.nn.Linear(hidden, 2)

    def forward(self, x):
        projected = self.w(x).transpose(0, 1)  # time-major: the loop scans the leading dim
        h0 = projected.sum(0) * 0  # computed from the input: the batch size stays dynamic
        h, hs = lz.scan(lambda h, p: (lz.tanh(p + self.u(h)),) * 2, h0, projected)
        return self.head(h) + hs.mean(0).sum(1, keepdim=True)


def _model(seed=0):
    lz.manual_seed(seed)
    return TinyRNN()


def test_a_traced_model_keeps_one_loop_and_runs_at_any_batch():
    model = _model()
    x = lz.randn(2, 5, 3)
    traced = lz.jit.trace(model, x)
    ops = [op.name for op in traced.func.entry_block.ops]
    assert ops.count("lz.for") == 1 and "lz.tanh" not in ops  # the step is inside the loop's body, once
    for batch in (2, 3):
        xb = lz.randn(batch, 5, 3)
        np.testing.assert_allclose(traced(xb).numpy(), model(xb).detach().numpy(), rtol=1e-5, atol=1e-5)


def test_a_compiled_train_step_through_scan_equals_the_eager_step():
    x, target = lz.randn(4, 6, 3), lz.randn(4, 2)
    eager, compiled = _model(1), _model(1)
    loss_fn = lz.nn.MSELoss()
    eager_opt = lz.optim.SGD(eager.parameters(), lr=0.1)
    step = lz.jit.compile_train_step(compiled, loss_fn, lz.optim.SGD(compiled.parameters(), lr=0.1), x, target)
    assert "lz.for" in step.graph
    for _ in range(2):
        eager_opt.zero_grad()
        eager_loss = loss_fn(eager(x), target)
        eager_loss.backward()
        eager_opt.step()
        loss = step(x, target)
        np.testing.assert_allclose(loss.item(), eager_loss.item(), rtol=1e-5)
    for (name, p), (_, q) in zip(eager.named_parameters(), compiled.named_parameters()):
        np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), rtol=1e-4, atol=1e-5, err_msg=name)


def test_a_traced_bidirectional_lstm_equals_eager():
    lz.manual_seed(2)
    lstm = lz.nn.LSTM(3, 4, num_layers=2, bidirectional=True, batch_first=True)
    x = lz.randn(2, 6, 3)
    traced = lz.jit.trace(lambda x: lstm(x), x, dynamic_batch=False)  # its zero h0 has the batch size in it
    assert [op.name for op in traced.func.entry_block.ops].count("lz.for") == 4  # 2 layers x 2 directions
    (out, (h, c)), (want, (want_h, want_c)) = traced(x), lstm(x)
    for got, ref in ((out, want), (h, want_h), (c, want_c)):
        np.testing.assert_allclose(got.numpy(), ref.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_a_compiled_lstm_train_step_equals_the_eager_step():
    lz.manual_seed(3)
    eager = lz.nn.Sequential(lz.nn.LSTM(3, 5, batch_first=True))
    compiled = lz.nn.Sequential(lz.nn.LSTM(3, 5, batch_first=True))
    compiled.load_state_dict(eager.state_dict())
    x, target = lz.randn(2, 4, 3), lz.randn(2, 4, 5)
    loss_fn = lambda out, target: ((out[0] - target) ** 2).mean()  # noqa: E731
    eager_opt = lz.optim.SGD(eager.parameters(), lr=0.5)
    step = lz.jit.compile_train_step(compiled, loss_fn, lz.optim.SGD(compiled.parameters(), lr=0.5), x, target,
                                     dynamic_batch=False)
    assert step.graph.count('"lz.for"') >= 2  # the forward loop (storing its carried values) and the reverse loop
    for _ in range(2):
        eager_opt.zero_grad()
        eager_loss = loss_fn(eager(x), target)
        eager_loss.backward()
        eager_opt.step()
        np.testing.assert_allclose(step(x, target).item(), eager_loss.item(), rtol=1e-5)
    for (name, p), (_, q) in zip(eager.named_parameters(), compiled.named_parameters()):
        np.testing.assert_allclose(q.detach().numpy(), p.detach().numpy(), rtol=1e-4, atol=1e-6, err_msg=name)
