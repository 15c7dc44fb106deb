"""Shared test helpers: build one-op functions with the Builder and run them in the interpreter."""
from __future__ import annotations

import os
import tempfile

import numpy as np
import pytest
from hypothesis import settings

from lezero.ir import interpret
from lezero.ir.types import TensorType, tensor_type_of

from ir_building import build, random_array

# Property tests stay small by default (the suite runs on two shared cores); no deadline, since
# a first call may import torch.  HYPOTHESIS_PROFILE=thorough runs eight times more examples.
settings.register_profile("lezero", max_examples=25, deadline=None)
settings.register_profile("thorough", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "lezero"))

# Compiled kernels go to a fresh cache per test session, never the user's ~/.cache/lezero: every
# run exercises the cold path, and a test run never leaves files behind in the home directory.
os.environ.setdefault("LEZERO_CACHE_DIR", tempfile.mkdtemp(prefix="lezero-test-cache-"))
# Triton's own cache too: a kernel left in ~/.triton/cache by an earlier run must not stand in for
# a PTX build the test means to do.
os.environ.setdefault("TRITON_CACHE_DIR", tempfile.mkdtemp(prefix="lezero-test-triton-cache-"))


def build_function(label, arg_types, body, func_name="f"):
    """A module with ``@func_name(arg_types)`` whose results are ``body(builder, *args)``; ``label``
    only names the case for the reader."""
    return build(arg_types, body, func_name)


class Harness:
    """What the IR tests share (the ``harness`` fixture): build one op on arguments of given
    types, infer its type, run it in the interpreter, make data, compare."""

    @staticmethod
    def build(op_name, arg_types, **attrs):
        holder = {}

        def body(b, *args):
            op = b.create(op_name, args, attrs)
            holder["op"] = op
            return op.results

        return build_function(op_name, list(arg_types), body), holder["op"]

    @staticmethod
    def infer(op_name, *arg_types, **attrs):
        """The inferred result type (one result)."""
        _, op = Harness.build(op_name, arg_types, **attrs)
        return op.result.type

    @staticmethod
    def run(op_name, *arrays, types=None, **attrs):
        """Run the op on ``arrays`` (argument types from their dtypes unless ``types``); checks the
        result's dtype and shape agree with the inferred type."""
        types = types or [tensor_type_of(np.asarray(a)) for a in arrays]
        module, op = Harness.build(op_name, types, **attrs)
        out = interpret(module, "f", *arrays)
        outs = out if isinstance(out, tuple) else (out,)
        for value, result in zip(outs, op.results):
            t: TensorType = result.type
            assert value.dtype == t.element_type.numpy_dtype, (value.dtype, t)
            assert len(value.shape) == t.rank and all(d is None or d == s for d, s in zip(t.shape, value.shape))
        return out




# Tolerances for comparing against a peer, by numpy dtype (bf16 tests pass their own).
TOLERANCE = {np.dtype(np.float16): dict(rtol=2e-3, atol=2e-3), np.dtype(np.float32): dict(rtol=2e-5, atol=2e-6),
             np.dtype(np.float64): dict(rtol=1e-10, atol=1e-12)}


def assert_close(actual, expected, dtype=None):
    actual, expected = np.asarray(actual), np.asarray(expected)
    dtype = np.dtype(dtype or actual.dtype)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    if dtype.kind == "f":
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), **TOLERANCE[dtype])
    else:
        np.testing.assert_array_equal(actual, expected)


Harness.build_function = staticmethod(build_function)
Harness.random_array = staticmethod(random_array)
Harness.assert_close = staticmethod(assert_close)


@pytest.fixture(scope="session")
def harness():
    return Harness
