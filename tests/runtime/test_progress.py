"""Progress bars of long compiles: drawn on a terminal (a pseudo-terminal as the child's stderr),
absent when stderr is a pipe (CI logs) or inside ``quiet()`` (``lezero-compile --quiet``).
Two child processes (a fresh process builds every plan anew), each a few seconds."""
from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time

import pytest

# A child compiling a two-layer MLP traced with lz.jit and an ONNX graph; bars show at once (no
# half-second delay) so the test does not depend on how fast this machine compiles.
CHILD = r"""
import sys
import numpy as np
from onnx import TensorProto, helper
import lezero as lz
import lezero.onnx
from lezero.runtime import progress
progress.DELAY_SECONDS = 0
model = lz.nn.Sequential(lz.nn.Linear(8, 16), lz.nn.ReLU(), lz.nn.Linear(16, 4))
traced = lz.jit.trace(model, lz.randn(2, 8))
traced(lz.randn(2, 8))
graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Exp", ["y"], ["z"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                          [helper.make_tensor_value_info("z", TensorProto.FLOAT, [4])])
lezero.onnx.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])).run(
    {"x": np.ones(4, np.float32)})
print("QUIET FROM HERE", file=sys.stderr, flush=True)
with progress.quiet():
    traced(lz.randn(3, 8))  # a new batch size: a new plan, lowered without a bar
print("done", flush=True)
"""


def _run_child(terminal: bool) -> str:
    """The child's stderr (through a pseudo-terminal when ``terminal``)."""
    env = {**os.environ, "TERM": "xterm"}
    env.pop("LEZERO_PROGRESS", None)
    if not terminal:
        done = subprocess.run([sys.executable, "-c", CHILD], check=False, capture_output=True, text=True, env=env,
                              timeout=120)
        assert done.returncode == 0 and "done" in done.stdout, done.stderr
        return done.stderr
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # a terminal has a size
    child = subprocess.Popen([sys.executable, "-c", CHILD], stderr=slave, stdout=subprocess.PIPE, env=env)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 1.0)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif child.poll() is not None:
                break
        assert child.wait(timeout=30) == 0
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        os.close(master)
    return b"".join(chunks).decode(errors="replace")


@pytest.mark.slow
def test_a_terminal_shows_bars_unless_quiet():
    shown = _run_child(terminal=True)
    bars, quiet = shown.split("QUIET FROM HERE")
    assert "lezero: lowering @forward" in bars, shown
    assert "lezero: lowering @main" in bars and "lezero: importing ONNX nodes" in bars, shown
    assert "lezero:" not in quiet, shown


@pytest.mark.slow
def test_no_bars_in_a_log():
    assert "lezero:" not in _run_child(terminal=False)
