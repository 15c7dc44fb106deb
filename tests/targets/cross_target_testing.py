"""Helpers for the cross-target matrix (imported as a plain module): compile ``@f`` for one CPU
and compare every result with the reference interpreter's."""
from __future__ import annotations

import numpy as np

import lezero
from lezero.ir import interpret

# By result dtype: float32 as the host's op-sample test, float64 close to its rounding (every op
# sample and random graph is within it on every CPU when the code is right); bf16 values are
# float32 arrays.  Integers and booleans compare exactly.
TOLERANCE = {np.dtype(np.float16): dict(rtol=2e-5, atol=1e-6), np.dtype(np.float32): dict(rtol=2e-5, atol=1e-6),
             np.dtype(np.float64): dict(rtol=1e-10, atol=1e-12)}


def as_tuple(x) -> tuple:
    return x if isinstance(x, tuple) else (x,)


def compile_and_run(module, arrays, cpu: str) -> tuple:
    return as_tuple(lezero.compile(module, "f", cpu=cpu)(*arrays))


def assert_matches_interpreter(module, arrays, cpu: str, tolerance: dict | None = None) -> None:
    """``@f`` compiled for ``cpu`` gives the interpreter's results (dtype, shape, values within
    ``tolerance`` or the result dtype's ``TOLERANCE``)."""
    got = compile_and_run(module, arrays, cpu)
    want = as_tuple(interpret(module, "f", *arrays))
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        what = f"result #{i} compiled for cpu {cpu}"
        assert g.dtype == w.dtype and g.shape == w.shape, (what, g.dtype, g.shape, w.dtype, w.shape)
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), err_msg=what,
                                       **(tolerance or TOLERANCE[g.dtype]))
        else:
            np.testing.assert_array_equal(g, w, err_msg=what)
