"""Loop programs (``lezero.runtime.loop_driver``): ``lz.for``, ``lz.while`` and ``lz.if`` run in
machine code, nested ones included, and a plan with control flow runs as one native call; each
computes what the Python loops and the reference interpreter compute (forward and reverse, odd,
even and zero trip counts, launches split over the pool, a carried value passed through
unchanged, a bounded while that runs past its bound, an index out of range inside a body)."""
from __future__ import annotations

import numpy as np
import pytest

import lezero as lz
from lezero.eager.autograd import trace
from lezero.ir.core import ModuleOp
from lezero.ir.interpreter import interpret
from lezero.runtime.cpu import BoundHostStep, CompiledFunction
from lezero.runtime.loop_driver import BodyThreads
from lezero.runtime.thread_pool import ThreadPool

RNG = np.random.default_rng(0)


def _compiled(fn, *examples, threads: int = 2):
    t = trace(fn, *[lz.tensor(e) for e in examples])
    module = ModuleOp([t.func])
    args = [x.numpy() for x in t.inputs + t.captured]
    return CompiledFunction(module, t.func.sym_name, pool=ThreadPool(threads)), module, t.func.sym_name, args


def _steps(compiled, args) -> list:
    return [launch for launch in compiled.plan_for([a.shape for a in args]).launches
            if isinstance(launch, BoundHostStep)]


def _results(r) -> list:
    return list(r) if isinstance(r, (tuple, list)) else [r]


def _programs(plan) -> list:
    """``(owner, its native program)`` for the plan and every host step in it, nested ones too."""
    found = [(plan, plan.native)]
    for launch in plan.launches:
        if isinstance(launch, BoundHostStep):
            found.append((launch, launch.native))
            for region in launch.regions:
                found += _programs(region.plan)
    return found


def _python_loop(compiled, args) -> list:
    """The results with every native program turned off (the Python loops), restored after."""
    programs = _programs(compiled.plan_for([a.shape for a in args]))
    try:
        for owner, _ in programs:
            owner.native = None
        return _results(compiled(*args))
    finally:
        for owner, native in programs:
            owner.native = native


def _check(compiled, module, entry, args, rtol=1e-5, atol=1e-6) -> list:
    """The native results equal the Python loops' exactly and the interpreter's within tolerance."""
    got = _results(compiled(*args))
    python = _python_loop(compiled, args)
    want = _results(interpret(module, entry, *args))
    assert len(got) == len(want) == len(python)
    for g, p, r in zip(got, python, want):
        np.testing.assert_array_equal(g, p)
        np.testing.assert_allclose(g, r, rtol=rtol, atol=atol)
    return got


@pytest.mark.parametrize("steps", [1, 2, 5])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("threads", [1, 2])
def test_native_loop_equals_the_python_loop_and_the_interpreter(steps, reverse, threads):
    # 1 x 256 @ 256 x 1024: a weight big enough that the body's GEMM splits over the pool
    w = RNG.standard_normal((256, 1024)).astype(np.float32) * 0.05
    h, keep = RNG.standard_normal((2, 1, 256)).astype(np.float32)
    xs = RNG.standard_normal((steps, 1, 1024)).astype(np.float32)

    def fn(h, keep, xs, w):
        def step(carry, x):
            h, keep = carry
            gates = h @ w + x
            h = lz.tanh(gates[:, :256]) * lz.sigmoid(gates[:, 256:512])
            return (h, keep), h * 2
        return lz.scan(step, (h, keep), xs, reverse=reverse)

    compiled, module, entry, args = _compiled(fn, h, keep, xs, w, threads=threads)
    (step,) = _steps(compiled, args)
    assert step.native is not None and step.native_refusal is None
    assert any(launch.parallel for launch in step.regions[0].plan.launches)  # on 1 thread: run whole
    got = list(compiled(*args))
    python = _python_loop(compiled, args)
    want = interpret(module, entry, *args)
    assert len(got) == len(want) == 3
    for g, p, r in zip(got, python, want):
        np.testing.assert_array_equal(g, p)
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(got[1], keep)  # passed through every iteration: the body's copy
    again = list(compiled(*args))  # a second call refills the program's addresses
    for g, a in zip(got, again):
        np.testing.assert_array_equal(g, a)


def test_body_threads_tries_both_settings_then_runs_the_faster_and_revisits_the_other():
    choice = BodyThreads()
    tried = []
    for _ in range(2 * BodyThreads.TRIALS):  # alternating, split first
        whole = choice.whole()
        tried.append(whole)
        choice.record(whole, 1.0 if whole else 3.0)
    assert tried == [False, True] * BodyThreads.TRIALS
    runs = []
    for _ in range(2 * BodyThreads.REVISIT):
        whole = choice.whole()
        runs.append(whole)
        choice.record(whole, 1.0 if whole else 3.0)
    revisits = [i for i, whole in enumerate(runs) if not whole]  # the faster setting, but for one call in REVISIT
    assert len(revisits) == 2 and revisits[1] - revisits[0] == BodyThreads.REVISIT
    for _ in range(BodyThreads.WINDOW):  # the load changed: whole became slower, and the revisits show it
        choice.record(True, 5.0)
    assert choice.whole() is False


def test_loop_bodies_split_or_whole_compute_the_same():
    """A plan whose loop body splits a launch (a 1 x 256 @ 256 x 1024 GEMV) times both settings
    (``BodyThreads``): every call gives the same bits, which setting ran it."""
    w = RNG.standard_normal((256, 1024)).astype(np.float32) * 0.05
    h = RNG.standard_normal((1, 256)).astype(np.float32)
    xs = RNG.standard_normal((4, 1, 1024)).astype(np.float32)

    def fn(h, xs, w):
        def step(h, x):
            gates = h @ w + x
            h = lz.tanh(gates[:, :256]) * lz.sigmoid(gates[:, 256:512])
            return h, h
        return lz.scan(step, h, xs)

    compiled, module, entry, args = _compiled(fn, h, xs, w, threads=2)
    plan = compiled.plan_for([a.shape for a in args])
    programs = [program for _, program in _programs(plan) if program is not None and program.body_threads]
    assert programs
    first = _results(compiled(*args))
    for _ in range(2 * BodyThreads.TRIALS + 1):
        for g, f in zip(_results(compiled(*args)), first):
            np.testing.assert_array_equal(g, f)
    assert all(len(times) >= BodyThreads.TRIALS for times in programs[0].body_threads.times)
    for g, r in zip(first, _results(interpret(module, entry, *args))):
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5)


def test_nested_loops_and_an_if_run_as_one_program():
    w = RNG.standard_normal((3, 3)).astype(np.float32)
    h = RNG.standard_normal((2, 3)).astype(np.float32)
    xs = RNG.standard_normal((4, 2, 3)).astype(np.float32)

    def fn(h, xs, w):
        def outer(c, x):
            inner = lz.fori_loop(0, 3, lambda i, v: lz.tanh(v @ w + x), c)
            return (lz.cond(inner.sum() > 0, lambda a: a * 2, lambda a: -a, inner),) * 2
        return lz.scan(outer, h, xs)

    compiled, module, entry, args = _compiled(fn, h, xs, w)
    (outer,) = _steps(compiled, args)
    assert outer.native is not None and outer.native_refusal is None
    assert [launch.name for launch in outer.regions[0].plan.launches
            if isinstance(launch, BoundHostStep)] == ["lz.for", "lz.if"]
    _check(compiled, module, entry, args)


@pytest.mark.parametrize("start", [20.0, 3.0, 1.0, 0.4])  # 0, 1, 2 and 4 body runs
@pytest.mark.parametrize("threads", [1, 2])
def test_native_while_equals_the_python_loop_and_the_interpreter(start, threads):
    # the condition's i1 is read in machine code between iterations; the body's GEMM splits on 2
    # threads; an even count ends with the epilogue's copy into the results
    w = np.eye(256, dtype=np.float32) * 2
    v = np.full((1, 256), start / 256, np.float32)
    fn = lambda v, w: lz.while_loop(lambda c: c[0].sum() < 10, lambda c: (c[0] @ w, c[1] + 1), (v, lz.tensor(0)))
    compiled, module, entry, args = _compiled(fn, v, w, threads=threads)
    (step,) = _steps(compiled, args)
    assert step.name == "lz.while" and step.native is not None
    count = _check(compiled, module, entry, args)[1]
    assert count == {20.0: 0, 3.0: 2, 1.0: 4, 0.4: 5}[start]


def test_a_bounded_while_that_runs_past_its_bound_raises_natively():
    fn = lambda n: lz.while_loop(lambda c: c < n, lambda c: c + 1, lz.tensor(0), max_trip_count=3)
    compiled, module, entry, args = _compiled(fn, np.array(3))  # the inputs first, then what it captured
    (step,) = _steps(compiled, args)
    assert step.native is not None
    np.testing.assert_array_equal(_check(compiled, module, entry, args)[0], 3)  # exactly the bound
    with pytest.raises(RuntimeError, match=r"max_trip_count \(3\)"):
        compiled(np.array(4), *args[1:])
    np.testing.assert_array_equal(compiled(np.array(1), *args[1:]), 1)  # and it runs again after the error


@pytest.mark.parametrize("pred", [True, False])
def test_native_if_picks_a_branch(pred):
    w, h = RNG.standard_normal((2, 3, 3)).astype(np.float32)
    fn = lambda p, h, w: lz.cond(p, lambda a: lz.tanh(a @ w), lambda a: a - 1, h)
    compiled, module, entry, args = _compiled(fn, np.array(pred), h, w)
    (step,) = _steps(compiled, args)
    assert step.native is not None
    got = _check(compiled, module, entry, args)
    np.testing.assert_allclose(got[0], np.tanh(h @ w) if pred else h - 1, rtol=1e-5, atol=1e-6)


def test_a_plan_with_a_loop_between_kernels_is_one_native_call():
    w = RNG.standard_normal((3, 3)).astype(np.float32)
    h = RNG.standard_normal((2, 3)).astype(np.float32)
    xs = RNG.standard_normal((5, 2, 3)).astype(np.float32)
    fn = lambda h, xs, w: lz.exp(lz.scan(lambda c, x: (lz.tanh(c @ w + x),) * 2, lz.relu(h), xs)[0])
    compiled, module, entry, args = _compiled(fn, h, xs, w)
    plan = compiled.plan_for([a.shape for a in args])
    assert len(plan.launches) == 3 and plan.native is not None and plan.native.kernels == 3
    _check(compiled, module, entry, args)


def test_an_index_out_of_range_inside_a_native_loop_raises():
    table = RNG.standard_normal((6, 4)).astype(np.float32)
    row = lambda i, table: lz.nn.functional.embedding(i.reshape(1), table)[0]  # a checked lz.gather
    fn = lambda ids, table: lz.scan(lambda c, i: (c + row(i, table), c), lz.zeros(4), ids)
    compiled, module, entry, args = _compiled(fn, np.array([0, 5, 1]), table)
    (step,) = _steps(compiled, args)
    assert step.native is not None
    _check(compiled, module, entry, args)
    args[0] = np.array([1, 6, 2])
    with pytest.raises(IndexError, match="index 6 is out of range"):
        compiled(*args)
    args[0] = np.array([2, 2, 2])
    np.testing.assert_allclose(compiled(*args)[0], table[2] * 3, rtol=1e-6)  # the status was cleared


@pytest.mark.parametrize("loop", ["for", "while"])
@pytest.mark.parametrize("product", ["conv"])
def test_a_loop_invariant_weight_is_packed_once_per_run(product, loop):
    # The body's GEMM reads the invariant weight pre-packed, laid out by the loop once per run
    # (an RNN's h @ w.T at batch 5, a conv RNN's 3x3 conv), so a second run must see a new weight;
    # natively and in the Python loop
    if product == "matmul":
        h, w = RNG.standard_normal((5, 20)).astype(np.float32), RNG.standard_normal((20, 20)).astype(np.float32) * 0.3
        body = lambda h, x, w: lz.tanh(h @ w.T + x)
    else:
        h, w = RNG.standard_normal((2, 6, 5, 5)).astype(np.float32), RNG.standard_normal((6, 6, 3, 3)).astype(np.float32) * 0.2
        body = lambda h, x, w: lz.tanh(lz.nn.functional.conv2d(h, w, padding=1) + x)
    xs = RNG.standard_normal((3,) + h.shape).astype(np.float32)
    if loop == "for":
        fn = lambda h, xs, w: lz.scan(lambda c, x: (body(c, x, w),) * 2, h, xs)
    else:
        fn = lambda h, xs, w: lz.while_loop(lambda c: c[1] < 4, lambda c: (body(c[0], xs[0], w), c[1] + 1),
                                            (h, lz.tensor(0)))
    compiled, module, entry, args = _compiled(fn, h, xs, w)
    (step,) = _steps(compiled, args)
    region = step.regions[-1].plan  # the body
    (packed,) = region.packed_inputs
    assert region.plan.block.args[packed.where].type.shape == w.shape  # the argument packed is w
    assert step.native is not None
    for scale, native in ((1.0, step.native), (-0.5, step.native), (2.0, None)):  # each run repacks w
        step.native = native
        args[2] = w * scale  # the inputs come first: h, xs, w
        for g, r in zip(compiled(*args), interpret(module, entry, *args)):
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)
