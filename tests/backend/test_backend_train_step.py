"""One training step compiled whole (``lz.jit.compile_train_step``: forward, cross-entropy, autodiff
and Adam as one function) for every backend target follows the eager loop on the host CPU: the
same losses over a few steps and the same parameters and optimizer state after them.  A CPU of the
cross-target matrix compiles the step's host code for that CPU (``$LEZERO_CPU``)."""
from __future__ import annotations

import pytest

import lezero as lz

from support.eager_testing import assert_same_training, train_simple_mlp


@pytest.mark.backends
def test_compiled_step_follows_the_eager_cpu_loop(target, monkeypatch):
    want = train_simple_mlp("cpu", compiled=False)
    if target.cpu is not None:
        monkeypatch.setenv("LEZERO_CPU", target.cpu)
    got = train_simple_mlp(target.device, compiled=True)
    assert all(p.device == lz.device(target.device) for p in got[1].parameters())
    assert_same_training(got, want)
