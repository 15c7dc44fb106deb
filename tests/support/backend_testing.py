"""What the tests of every backend share (tests/backend, tests/targets): where to compile (a
``BackendTarget``, the ``target`` argument of tests marked ``backends`` in tests/conftest.py), and
``@f`` compiled there compared result by result with the reference interpreter's."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

import lezero
from lezero.ir import interpret


@dataclass(frozen=True)
class BackendTarget:
    """Where a backend test compiles: ``device`` "cpu" or "cuda"; ``cpu`` an LLVM CPU name of the
    cross-target matrix (None: the host, or ``$LEZERO_CPU``)."""

    device: str
    cpu: str | None = None

    @property
    def id(self) -> str:
        return self.device if self.cpu is None else f"cpu={self.cpu}"

    def compile(self, module, entry: str = "f"):
        return lezero.compile(module, entry, target=self.device, cpu=self.cpu)

# By result dtype: float32 within a few ulps of a different summation order; float64 close to its
# rounding (every op sample and random graph is within it on every CPU when the code is right);
# float16 on the CPU is computed in float32 and rounded once, as numpy does; Triton's f16 math may
# round in between.  bf16 values are float32 arrays.  Integers and booleans compare exactly.
TOLERANCE = {np.dtype(np.float16): dict(rtol=2e-5, atol=1e-6), np.dtype(np.float32): dict(rtol=2e-5, atol=2e-6),
             np.dtype(np.float64): dict(rtol=1e-10, atol=1e-12)}
CUDA_F16 = dict(rtol=2e-3, atol=2e-3)


def as_tuple(x) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def assert_matches_interpreter(module, arrays, target, tolerance: dict | None = None) -> None:
    """``@f`` compiled for ``target`` gives the interpreter's results (dtype, shape, values within
    ``tolerance`` or the result dtype's ``TOLERANCE``)."""
    got = as_tuple(target.compile(module, "f")(*arrays))
    want = as_tuple(interpret(module, "f", *arrays))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g)
        what = f"result #{i} compiled for {target.id}"
        assert g.dtype == w.dtype and g.shape == w.shape, (what, g.dtype, g.shape, w.dtype, w.shape)
        if g.dtype.kind == "f":
            default = CUDA_F16 if target.device == "cuda" and g.dtype == np.float16 else TOLERANCE[g.dtype]
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), err_msg=what,
                                       **(tolerance or default))
        else:
            np.testing.assert_array_equal(g, w, err_msg=what)
