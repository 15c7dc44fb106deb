"""lz.scan over many steps: the eager loop stacks its per-step outputs from concats of at most
``STACK_FAN_IN`` operands (one concat of n operands compiled a kernel of n inputs, superlinear in n:
tracing an lz.cond inside a 300-step lz.scan took minutes), and a traced scan stays one lz.for whose
body, and so the traced function's size, does not depend on the step count."""
from __future__ import annotations

import numpy as np
import pytest

import lezero as lz
from lezero.eager import control_flow


@pytest.fixture
def fan_ins(monkeypatch):
    """The operand counts of every stack and cat the control-flow module makes."""
    counts = []
    for name in ("stack", "cat"):
        real = getattr(control_flow, name)
        monkeypatch.setattr(control_flow, name, lambda ts, *a, real=real: counts.append(len(ts)) or real(ts, *a))
    return counts


def test_stack_steps_equals_one_stack_from_small_concats(fan_ins):
    steps = [lz.tensor([float(i), -float(i)]) for i in range(300)]  # 19 stacks, then 2 cats, then 1
    got = control_flow.stack_steps(steps).numpy()
    np.testing.assert_array_equal(got, np.stack([np.arange(300.0), -np.arange(300.0)], 1).astype(np.float32))
    assert max(fan_ins) <= control_flow.STACK_FAN_IN and len(fan_ins) == 19 + 2 + 1


@pytest.mark.parametrize("reverse", [False, True])
def test_an_eager_scan_of_many_steps_and_its_gradient(fan_ins, reverse):
    rng = np.random.default_rng(0)
    xs, r = rng.standard_normal((37, 2, 3)).astype(np.float32), rng.standard_normal((37, 2, 3)).astype(np.float32)
    xt = lz.tensor(xs, requires_grad=True)
    h, (hs, doubled) = lz.scan(lambda h, x: (lz.tanh(h * 0.5 + x), (lz.tanh(h * 0.5 + x), x * 2)),
                               lz.zeros(2, 3), xt, reverse=reverse)
    (doubled * lz.tensor(r)).sum().backward()
    want_h, want_hs = np.zeros((2, 3), np.float32), np.zeros_like(xs)
    for i in (reversed(range(37)) if reverse else range(37)):
        want_h = want_hs[i] = np.tanh(want_h * 0.5 + xs[i])
    np.testing.assert_allclose(hs.detach().numpy(), want_hs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(h.detach().numpy(), want_h, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(doubled.detach().numpy(), xs * 2)
    np.testing.assert_allclose(xt.grad.numpy(), 2 * r, rtol=1e-6)
    assert fan_ins and max(fan_ins) <= control_flow.STACK_FAN_IN


def _all_ops(block) -> list[str]:
    return [name for op in block.ops for name in [op.name] + [n for r in op.regions for n in _all_ops(r.block)]]


def _cond_in_scan(c, xs):
    return lz.scan(lambda c, x: (lz.cond(c.sum() > 0, lambda a: a + x, lambda a: a - x * 0.5, c),) * 2, c, xs)


@pytest.mark.cross_target
def test_a_traced_cond_in_a_scan_is_one_loop_whatever_the_steps(cpu):
    rng = np.random.default_rng(1)
    c0 = rng.standard_normal((1, 4)).astype(np.float32)
    sizes = []
    for steps in (10, 50):
        xs = rng.standard_normal((steps, 1, 4)).astype(np.float32)
        traced = lz.jit.trace(_cond_in_scan, (lz.tensor(c0), lz.tensor(xs)), dynamic_batch=False, cpu=cpu)
        func = traced.func
        top = [op for op in func.entry_block.ops if op.name != "lz.constant"]  # the scalars, invariants
        assert [op.name for op in top] == ["lz.for", "func.return"]
        body = top[0].regions[0].block
        assert [op.name for op in body.ops].count("lz.if") == 1
        sizes.append(len(_all_ops(func.entry_block)))
        want, want_ys = c0, np.zeros_like(xs)
        for i, x in enumerate(xs):
            want = want_ys[i] = want + x if want.sum() > 0 else want - x * 0.5
        final, ys = traced(lz.tensor(c0), lz.tensor(xs))
        np.testing.assert_allclose(final.numpy(), want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(ys.numpy(), want_ys, rtol=1e-5, atol=1e-6)
    assert sizes[0] == sizes[1]
