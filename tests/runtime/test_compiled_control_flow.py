"""Compiled control flow: lz.for / lz.while / lz.if stay host steps between the kernels, each region
scheduled as a function of its own (kernels compiled once per body, not per iteration) and run per
iteration by the CPU runtime.  Every case: the compiled results equal the reference interpreter's
and a numpy loop."""
from __future__ import annotations

import io

import numpy as np
import pytest

import lezero as lz
from lezero.cli import opt
from lezero.eager.autograd import trace
from lezero.ir.core import ModuleOp
from lezero.ir.interpreter import interpret
from lezero.runtime.kernel_cache import default_cache

RNG = np.random.default_rng(0)


def _arrays(*shapes):
    return [RNG.standard_normal(s).astype(np.float32) * 0.5 for s in shapes]


def _run_both(fn, *examples):
    """``fn`` traced on ``examples`` into one function: (compiled results, interpreted results,
    the CompiledFunction, its arguments)."""
    t = trace(fn, *[lz.tensor(e) for e in examples])
    module = ModuleOp([t.func])
    args = [x.numpy() for x in t.inputs + t.captured]
    compiled = lz.compile(module, t.func.sym_name)
    got = compiled(*args)
    interpreted = interpret(module, t.func.sym_name, *args)
    as_list = lambda r: list(r) if isinstance(r, (tuple, list)) else [r]
    return as_list(got), as_list(interpreted), compiled, args


def _check(got, interpreted, want):
    assert len(got) == len(interpreted) == len(want)
    for g, i, w in zip(got, interpreted, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(i, w, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _numpy_rnn(w, h, xs, reverse=False):
    ys = np.zeros(xs.shape[:1] + h.shape, np.float32)
    for i in (reversed(range(len(xs))) if reverse else range(len(xs))):
        h = np.tanh(h @ w + xs[i])
        ys[i] = h * 2
    return h, ys


def _rnn(reverse=False):
    def fn(h, xs, w):
        return lz.scan(lambda h, x: (lz.tanh(h @ w + x), lz.tanh(h @ w + x) * 2), h, xs, reverse=reverse)
    return fn


@pytest.mark.parametrize("steps", [0, 1, 2, 7])
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_runs_like_a_numpy_loop(steps, reverse):
    w, h, xs = _arrays((3, 3), (2, 3), (steps, 2, 3))
    got, interpreted, _, _ = _run_both(_rnn(reverse), h, xs, w)
    _check(got, interpreted, _numpy_rnn(w, h, xs, reverse))


def test_no_carried_values_and_no_scanned_inputs():
    w, xs = _arrays((3, 3), (4, 2, 3))
    got, interpreted, _, _ = _run_both(lambda xs, w: lz.scan(lambda c, x: ((), lz.relu(x @ w)), (), xs)[1], xs, w)
    _check(got, interpreted, [np.maximum(xs @ w, 0)])
    (h,) = _arrays((2, 3))
    fn = lambda h, w: lz.scan(lambda c, _: (c @ w + 1, c.sum(1)), h, None, length=3)
    got, interpreted, _, _ = _run_both(fn, h, w)
    want_ys, c = [], h
    for _ in range(3):
        want_ys.append(c.sum(1))
        c = c @ w + 1
    _check(got, interpreted, [c, np.stack(want_ys)])


def test_scalar_outputs_stack_into_a_vector():
    (xs,) = _arrays((5, 3))
    got, interpreted, _, _ = _run_both(lambda xs: lz.scan(lambda c, x: (c + x.sum(), c * 2), xs[0].sum() * 0, xs), xs)
    c, ys = np.float32(0), []
    for x in xs:
        ys.append(c * 2)
        c = c + x.sum()
    _check(got, interpreted, [np.float32(c), np.array(ys, np.float32)])


def test_fori_loop_and_a_carried_value_passed_through():
    w, h = _arrays((3, 3), (2, 3))
    fn = lambda h, w: lz.fori_loop(0, 5, lambda i, c: (c[0] @ w + i, c[1]), (h, h * 3))
    got, interpreted, _, _ = _run_both(fn, h, w)
    c = h
    for i in range(5):
        c = c @ w + i
    _check(got, interpreted, [c, h * 3])


def test_nested_loops_and_an_if_inside_a_loop():
    w, h, xs = _arrays((3, 3), (2, 3), (4, 2, 3))

    def fn(h, xs, w):
        def outer(c, x):
            inner = lz.fori_loop(0, 3, lambda i, v: lz.tanh(v @ w + x), c)
            flipped = lz.cond(inner.sum() > 0, lambda a: a * 2, lambda a: -a, inner)
            return flipped, inner.sum(0)
        return lz.scan(outer, h, xs)

    got, interpreted, compiled, args = _run_both(fn, h, xs, w)
    c, ys = h, []
    for x in xs:
        v = c
        for _ in range(3):
            v = np.tanh(v @ w + x)
        c = v * 2 if v.sum() > 0 else -v
        ys.append(v.sum(0))
    _check(got, interpreted, [c, np.stack(ys)])
    (outer,) = compiled.plan_for([a.shape for a in args]).plan.host_steps
    names = [s.name for s in outer.region_plans[0].host_steps]
    assert names == ["lz.for", "lz.if"]


@pytest.mark.parametrize("start", [20.0, 0.5])
def test_while_loop_including_one_that_runs_zero_times(start):
    w = np.eye(3, dtype=np.float32) * 2
    fn = lambda v, w: lz.while_loop(lambda c: c[0].sum() < 10, lambda c: (c[0] @ w, c[1] + 1), (v, v.sum()))
    v = np.full((1, 3), start, np.float32)
    got, interpreted, _, _ = _run_both(fn, v, w)
    count, c = 0, v
    while c.sum() < 10:
        c, count = c @ w, count + 1
    _check(got, interpreted, [c, np.float32(v.sum() + count)])


def test_cond_picks_a_branch_at_run_time():
    w, h = _arrays((3, 3), (2, 3))
    t = trace(lambda p, h, w: lz.cond(p, lambda a: a @ w, lambda a: a - 1, h), lz.tensor(True), lz.tensor(h),
              lz.tensor(w))
    module = ModuleOp([t.func])
    compiled = lz.compile(module, t.func.sym_name)
    for pred in (True, False):
        args = [np.array(pred), h, w] + [x.numpy() for x in t.captured]
        want = h @ w if pred else h - 1
        np.testing.assert_allclose(compiled(*args), want, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(interpret(module, t.func.sym_name, *args), want, rtol=1e-5, atol=1e-6)


def test_a_body_is_compiled_once_not_per_iteration():
    w, h = _arrays((3, 3), (2, 3))
    bodies = []
    for steps in (1, 40):
        (xs,) = _arrays((steps, 2, 3))
        _, _, compiled, args = _run_both(_rnn(), h, xs, w)
        (step,) = compiled.plan_for([a.shape for a in args]).plan.host_steps
        bodies.append([launch.kernel.llvm_ir for launch in step.region_plans[0].launches])
        before = default_cache().stats.lowerings
        compiled(*args)
        assert default_cache().stats.lowerings == before  # running lowers nothing
    assert len(bodies[0]) == 1 and bodies[0] == bodies[1]  # one kernel, whatever the trip count


def test_cuda_runs_the_same_host_step_on_the_cpu(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # Triton's interpreter: "device" tensors on the CPU
    w, h, xs = _arrays((3, 3), (2, 3), (4, 2, 3))
    fn = lambda h, xs, w: lz.scan(lambda c, x: (lz.tanh(c @ w + x), (c * 2).sum(1)), lz.relu(h), xs)  # noqa: E731
    t = trace(fn, lz.tensor(h), lz.tensor(xs), lz.tensor(w))
    args = [x.numpy() for x in t.inputs + t.captured]
    got = lz.compile(ModuleOp([t.func]), t.func.sym_name, target="cuda")(*args)
    c, ys = np.maximum(h, 0), []
    for x in xs:
        ys.append((c * 2).sum(1))
        c = np.tanh(c @ w + x)
    for g, want in zip(got, (c, np.stack(ys))):
        np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)


def test_profile_times_a_host_step_as_one_row():
    w, h, xs = _arrays((3, 3), (2, 3), (3, 2, 3))
    got, _, compiled, args = _run_both(_rnn(), h, xs, w)
    results, rows = compiled.profile(*args)
    assert [(r.name, r.kind, r.flops) for r in rows] == [("lz.for", "control_flow", 0)] and rows[0].seconds > 0
    for r, g in zip(results, got):
        np.testing.assert_array_equal(r, g)


LOOP_TEXT = """func.func @f(%w: tensor<4x4xf32>, %h0: tensor<1x4xf32>, %xs: tensor<8x1x4xf32>) -> tensor<1x4xf32> {
  %h, %ys = "lz.for"(%w, %h0, %xs) ({
  ^bb0(%i: tensor<i64>, %w_: tensor<4x4xf32>, %h_: tensor<1x4xf32>, %x: tensor<1x4xf32>):
    %0 = "lz.matmul"(%h_, %w_) : (tensor<1x4xf32>, tensor<4x4xf32>) -> tensor<1x4xf32>
    %1 = "lz.add"(%0, %x) : (tensor<1x4xf32>, tensor<1x4xf32>) -> tensor<1x4xf32>
    %2 = "lz.tanh"(%1) : (tensor<1x4xf32>) -> tensor<1x4xf32>
    "lz.yield"(%2, %2) : (tensor<1x4xf32>, tensor<1x4xf32>) -> ()
  }) {trip_count = 8 : i64, num_invariant = 1 : i64, num_carried = 1 : i64, reverse = false}
     : (tensor<4x4xf32>, tensor<1x4xf32>, tensor<8x1x4xf32>) -> (tensor<1x4xf32>, tensor<8x1x4xf32>)
  %3 = "lz.exp"(%h) : (tensor<1x4xf32>) -> tensor<1x4xf32>
  func.return %3 : tensor<1x4xf32>
}
"""


def test_text_compiles_and_lezero_opt_emits_the_body_kernels(tmp_path):
    w, h, xs = _arrays((4, 4), (1, 4), (8, 1, 4))
    np.testing.assert_allclose(lz.compile(LOOP_TEXT, "f")(w, h, xs), np.exp(_numpy_rnn(w, h, xs)[0]),
                               rtol=1e-5, atol=1e-6)
    path = tmp_path / "loop.mlir"
    path.write_text(LOOP_TEXT)
    out, err = io.StringIO(), io.StringIO()
    assert opt.run([str(path), "--emit=llvm"], stdout=out, stderr=err) == 0, err.getvalue()
    kernels = [line.split()[3] for line in out.getvalue().splitlines() if line.startswith("; ---- kernel")]
    assert kernels == ["lz_fused_matmul_add_tanh_0:", "lz_fused_exp_0:"]  # the body's, where the loop stands
