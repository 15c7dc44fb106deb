"""Native executables with control flow (``lezero-compile``: ``lezero/runtime/native``): lz.for,
lz.while and lz.if, nested, run in C by the loop program's walker (``lezero.runtime.loop_driver``)
and equal the reference interpreter; an lz IR file with an lz.for through the command; a bounded
while past its bound fails the executable with the interpreter's message; ``--profile`` counts a
body's launches once per iteration; what a loop program cannot hold fails the build naming the op."""
from __future__ import annotations

import io
import subprocess

import numpy as np
import pytest

import lezero as lz
from lezero.cli.compile import run as compile_cli_run
from lezero.codegen.schedule import schedule
from lezero.eager.autograd import trace
from lezero.ir.core import ModuleOp
from lezero.ir.diagnostics import IRError
from lezero.ir.dialect.control_flow import exceeded_bound_message
from lezero.ir.interpreter import interpret
from lezero.runtime.native import compile_module_native
from lezero.runtime.native.program import plan_program

from support.native_testing import run_outputs
from test_compiled_control_flow import LOOP_TEXT, _numpy_rnn

RNG = np.random.default_rng(0)


def _traced(fn, *examples):
    t = trace(fn, *[lz.tensor(e) for e in examples])
    return ModuleOp([t.func]), t.func.sym_name, [x.numpy() for x in t.inputs + t.captured]


def _nested(h, xs, w):
    """An lz.for whose body holds an lz.for and an lz.if, then an lz.while on its result."""
    def outer(c, x):
        inner = lz.fori_loop(0, 3, lambda i, v: lz.tanh(v @ w + x), c)
        return lz.cond(inner.sum() > 0, lambda a: a * 2, lambda a: -a, inner), inner.sum(0)
    c, ys = lz.scan(outer, h, xs)
    return lz.while_loop(lambda s: s[1] < 5, lambda s: (s[0] * 1.5, s[1] + 1), (c, lz.tensor(0)))[0], ys


def _feeds(result, args) -> dict:
    return {t.name: a for t, a in zip(result.program.inputs, args)}


@pytest.mark.cross_target
def test_nested_loops_and_an_if_in_an_executable_equal_the_interpreter(tmp_path, cpu):
    w, h = RNG.standard_normal((3, 3)).astype(np.float32), RNG.standard_normal((2, 3)).astype(np.float32)
    xs = RNG.standard_normal((4, 2, 3)).astype(np.float32)
    module, entry, args = _traced(_nested, h, xs, w)
    result = compile_module_native(module, tmp_path / "nested", cpu=cpu)
    assert {launch.name for launch in result.program.launches} >= {"lz_fused_matmul_add_tanh_0"}
    for scale in (1.0, -1.0):  # both branches of the lz.if
        args[0] = h * scale
        got = run_outputs([], result, tmp_path, _feeds(result, args))
        for t, want in zip(result.program.outputs, interpret(module, entry, *args)):
            np.testing.assert_allclose(got[t.name], want, rtol=1e-5, atol=1e-6, err_msg=t.name)


def test_an_lz_file_with_a_loop_through_lezero_compile(tmp_path):
    (tmp_path / "loop.mlir").write_text(LOOP_TEXT)
    out, err = io.StringIO(), io.StringIO()
    assert compile_cli_run([str(tmp_path / "loop.mlir"), "-o", str(tmp_path / "loop")], stdout=out, stderr=err) == 0, \
        err.getvalue()
    w, h, xs = RNG.standard_normal((4, 4)), RNG.standard_normal((1, 4)), RNG.standard_normal((8, 1, 4))
    w, h, xs = (a.astype(np.float32) for a in (w, h, xs))
    for name, array in (("w", w), ("h", h), ("xs", xs)):
        np.save(tmp_path / f"{name}.npy", array)
    done = subprocess.run([tmp_path / "loop", "--input", f"input0={tmp_path / 'w.npy'}", "--input",
                           f"input1={tmp_path / 'h.npy'}", "--input", f"input2={tmp_path / 'xs.npy'}",
                           "--output-dir", tmp_path / "out", "--profile", "--repeat", "2"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(np.load(tmp_path / "out" / "output0.npy"), np.exp(_numpy_rnn(w, h, xs)[0]),
                               rtol=1e-5, atol=1e-6)
    summary = next(line for line in done.stderr.splitlines() if "launches per run" in line)
    assert summary.startswith("9 launches per run (2 kernels)"), summary  # the body's kernel 8 times


def test_a_bounded_while_past_its_bound_fails_the_executable(tmp_path):
    fn = lambda n: lz.while_loop(lambda c: c < n, lambda c: c * 2 + 1, lz.tensor(0), max_trip_count=3)
    module, entry, args = _traced(fn, np.array(7))
    result = compile_module_native(module, tmp_path / "bounded")
    np.testing.assert_array_equal(run_outputs([], result, tmp_path, _feeds(result, args))["output0"], 7)
    args[0] = np.array(8)
    inputs = []
    for k, (t, a) in enumerate(zip(result.program.inputs, args)):
        np.save(tmp_path / f"a{k}.npy", a)
        inputs += ["--input", f"{t.name}={tmp_path / f'a{k}.npy'}"]
    done = subprocess.run([result.paths[0], *inputs, "--output-dir", tmp_path / "bad"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == f"bounded: error: {exceeded_bound_message(3)}"  # the interpreter's and JIT's


def test_a_loop_program_names_the_op_it_cannot_hold():
    # a conv RNN's body reads its invariant weight pre-packed, laid out by Python once per run
    h, w = RNG.standard_normal((2, 6, 5, 5)).astype(np.float32), RNG.standard_normal((6, 6, 3, 3)).astype(np.float32)
    xs = RNG.standard_normal((3, 2, 6, 5, 5)).astype(np.float32)
    fn = lambda h, xs, w: lz.scan(lambda c, x: (lz.tanh(lz.nn.functional.conv2d(c, w, padding=1) + x),) * 2, h, xs)
    module, entry, _ = _traced(fn, h, xs, w)
    scheduled = schedule(module)
    with pytest.raises(IRError, match="'lz.for' op: a region reads its argument 1 pre-packed"):
        plan_program(scheduled, scheduled.lookup(entry), "m", "test")
