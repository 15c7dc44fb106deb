"""lz.scan / lz.fori_loop / lz.while_loop / lz.cond: eagerly they run Python step by step (autograd as
usual), against numpy loops; under a trace each becomes ONE loop op whose region is the function
recorded once, closure tensors as invariant operands."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lezero as lz
from lezero.eager.autograd import trace


def _rnn_inputs(seed=0, steps=5):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((3, 3)).astype(np.float32) * 0.5, rng.standard_normal((steps, 2, 3)).astype(np.float32),
            rng.standard_normal((2, 3)).astype(np.float32))


def _numpy_scan(w, xs, h, reverse=False):
    ys = np.zeros(xs.shape, np.float32)
    for i in (reversed(range(len(xs))) if reverse else range(len(xs))):
        h = np.tanh(h @ w + xs[i])
        ys[i] = 2 * h
    return h, ys


@pytest.mark.parametrize("reverse", [False, True])
def test_eager_scan_is_a_python_loop(reverse):
    w, xs, h0 = _rnn_inputs()
    wt = lz.tensor(w)

    def step(h, x):
        h = lz.tanh(h @ wt + x)
        return h, h * 2

    h, ys = lz.scan(step, lz.tensor(h0), lz.tensor(xs), reverse=reverse)
    want_h, want_ys = _numpy_scan(w, xs, h0, reverse)
    np.testing.assert_allclose(h.numpy(), want_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(ys.numpy(), want_ys, rtol=1e-5, atol=1e-6)


def test_eager_scan_gradients_equal_torch():
    w, xs, h0 = _rnn_inputs(1)
    wt = lz.tensor(w, requires_grad=True)
    xt = lz.tensor(xs, requires_grad=True)
    _, ys = lz.scan(lambda h, x: (lz.tanh(h @ wt + x),) * 2, lz.tensor(h0), xt)
    ys.sum().backward()
    tw = torch.tensor(w, requires_grad=True)
    tx = torch.tensor(xs, requires_grad=True)
    h, total = torch.tensor(h0), 0
    for i in range(len(xs)):
        h = torch.tanh(h @ tw + tx[i])
        total = total + h.sum()
    total.backward()
    np.testing.assert_allclose(wt.grad.numpy(), tw.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(xt.grad.numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-5)


def test_eager_scan_edge_cases():
    # no xs (length given), tuples of carried values, y None, zero steps
    c, ys = lz.scan(lambda c, _: ((c[0] + 1, c[1] * 2), None), (lz.tensor(0.0), lz.tensor(1.0)), None, length=4)
    assert (c[0].item(), c[1].item(), ys) == (4.0, 16.0, None)
    c, ys = lz.scan(lambda c, x: (c + x, c * x), lz.zeros(2), lz.ones(0, 2))
    assert c.tolist() == [0.0, 0.0] and ys.shape == (0, 2)
    with pytest.raises(ValueError, match="length is required"):
        lz.scan(lambda c, x: (c, x), lz.zeros(2), None)
    with pytest.raises(ValueError, match="disagree"):
        lz.scan(lambda c, x: (c, x), lz.zeros(2), (lz.ones(3, 2), lz.ones(4, 2)))


def test_eager_fori_while_cond():
    assert lz.fori_loop(2, 5, lambda i, v: v + i, lz.tensor(0)).item() == 9
    assert lz.fori_loop(5, 2, lambda i, v: v + i, lz.tensor(7)).item() == 7
    assert lz.while_loop(lambda v: v < 10, lambda v: v * 2, lz.tensor(1)).item() == 16
    assert lz.while_loop(lambda v: v < 0, lambda v: v * 2, lz.tensor(1)).item() == 1
    x = lz.tensor([1.0, 2.0])
    assert lz.cond(lz.tensor(True), lambda a: a + 1, lambda a: a - 1, x).tolist() == [2.0, 3.0]
    assert lz.cond(lz.tensor(False), lambda a: a + 1, lambda a: a - 1, x).tolist() == [0.0, 1.0]
    with pytest.raises(TypeError, match="rank-0"):
        lz.cond(lz.tensor([True]), lambda a: a, lambda a: a, x)
    with pytest.raises(TypeError, match="Python int"):
        lz.fori_loop(0, lz.tensor(3), lambda i, v: v, x)


def _ops(func) -> list[str]:
    return [op.name for op in func.entry_block.ops]


def test_traced_scan_is_one_loop_op_with_the_weights_as_invariants():
    w, xs, h0 = _rnn_inputs(2)
    wt = lz.tensor(w)
    t = trace(lambda h, xs: lz.scan(lambda h, x: (lz.tanh(h @ wt + x),) * 2, h, xs, reverse=True),
              lz.tensor(h0), lz.tensor(xs))
    assert _ops(t.func) == ["lz.for", "func.return"]
    loop = t.func.entry_block.ops[0]
    attrs = {k: v.value for k, v in loop.attributes.items()}
    assert attrs == {"trip_count": 5, "num_invariant": 1, "num_carried": 1, "reverse": True}
    assert loop.operands[0] is t.func.arguments[2] and t.captured[0] is wt  # the closure's weight
    body = loop.regions[0].block
    assert [str(a.type) for a in body.args] == ["tensor<i64>", "tensor<3x3xf32>", "tensor<2x3xf32>", "tensor<2x3xf32>"]
    assert [op.name for op in body.ops] == ["lz.matmul", "lz.add", "lz.tanh", "lz.yield"]
    want_h, _ = _numpy_scan(w, xs, h0, reverse=True)
    np.testing.assert_allclose(t.outputs[0].numpy(), want_h, rtol=1e-5, atol=1e-6)


def test_traced_fori_while_cond_are_one_op_each():
    w = lz.tensor(np.eye(2, dtype=np.float32) * 0.5)
    t = trace(lambda v: lz.fori_loop(1, 4, lambda i, v: v @ w + i, v), lz.ones(1, 2))
    assert _ops(t.func) == ["lz.for", "func.return"]
    assert np.allclose(t.outputs[0].numpy(), ((1 * .5 + 1) * .5 + 2) * .5 + 3)
    t = trace(lambda v: lz.while_loop(lambda v: (v < 10).all(), lambda v: v @ w * 4, v), lz.ones(1, 2))
    loop = t.func.entry_block.ops[0]
    assert _ops(t.func) == ["lz.while", "func.return"] and len(loop.regions) == 2
    assert t.outputs[0].tolist() == [[16.0, 16.0]]
    t = trace(lambda p, v: lz.cond(p, lambda v: v @ w, lambda v: v - 1, v), lz.tensor(False), lz.ones(1, 2))
    assert _ops(t.func) == ["lz.if", "func.return"] and t.outputs[0].tolist() == [[0.0, 0.0]]
    with pytest.raises(TypeError, match="keep its types"):
        trace(lambda v: lz.fori_loop(0, 2, lambda i, v: v.sum(), v), lz.ones(1, 2))
