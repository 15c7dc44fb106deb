"""The native loop of ``lz.for`` (``lezero.runtime.loop_driver``): which bodies it runs, and that
it computes what the Python loop and the reference interpreter compute (forward and reverse, odd
and even trip counts, launches split over the pool, a carried value passed through unchanged)."""
from __future__ import annotations

import numpy as np
import pytest

import lezero as lz
from lezero.eager.autograd import trace
from lezero.ir.core import ModuleOp
from lezero.ir.interpreter import interpret
from lezero.runtime.cpu import BoundHostStep, CompiledFunction
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


def _python_loop(compiled, args) -> list:
    """The results with every host step's native loop turned off (the Python loop), restored after."""
    steps = _steps(compiled, args)
    natives = [step.native for step in steps]
    try:
        for step in steps:
            step.native = None
        return list(compiled(*args))
    finally:
        for step, native in zip(steps, natives):
            step.native = native


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


def test_a_body_with_a_loop_of_its_own_runs_in_python_and_says_why():
    w = RNG.standard_normal((3, 3)).astype(np.float32)
    h = RNG.standard_normal((2, 3)).astype(np.float32)
    xs = RNG.standard_normal((4, 2, 3)).astype(np.float32)

    def fn(h, xs, w):
        return lz.scan(lambda c, x: (lz.fori_loop(0, 3, lambda i, v: lz.tanh(v @ w + x), c),) * 2, h, xs)

    compiled, module, entry, args = _compiled(fn, h, xs, w)
    (outer,) = _steps(compiled, args)
    assert outer.native is None and "host step (lz.for)" in outer.native_refusal
    (inner,) = [launch for launch in outer.regions[0].plan.launches if isinstance(launch, BoundHostStep)]
    assert inner.native is not None  # the inner loop runs natively, called from the outer's Python loop
    for g, r in zip(compiled(*args), interpret(module, entry, *args)):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)



@pytest.mark.parametrize("loop", ["for", "while"])
@pytest.mark.parametrize("product", ["conv"])
def test_a_loop_invariant_weight_is_packed_once_per_run(product, loop):
    # The body's GEMM reads the invariant weight pre-packed, laid out by the loop once per run
    # (an RNN's h @ w.T at batch 5, a conv RNN's 3x3 conv), so a second run must see a new weight;
    # lz.for natively and in the Python loop (lz.while's always runs in Python)
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
    assert region.plan.block.args[packed[0]].type.shape == w.shape  # the argument packed is w
    assert (step.native is not None) == (loop == "for")
    for scale, native in ((1.0, step.native), (-0.5, step.native), (2.0, None)):  # each run repacks w
        step.native = native
        args[2] = w * scale  # the inputs come first: h, xs, w
        for g, r in zip(compiled(*args), interpret(module, entry, *args)):
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-5)
