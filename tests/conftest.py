"""Shared test helpers: build one-op functions with the Builder and run them in the interpreter."""
from __future__ import annotations

import os
import tempfile
import zlib
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import settings

from lezero.ir import interpret
from lezero.ir.types import TensorType, tensor_type_of

from support.backend_testing import BackendTarget
from support.ir_building import build, random_array

# Property tests stay small by default (the suite runs on two shared cores); no deadline, since
# a first call may import torch.  HYPOTHESIS_PROFILE=thorough runs eight times more examples.
settings.register_profile("lezero", max_examples=25, deadline=None)
settings.register_profile("thorough", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "lezero"))

# Compiled kernels go to a fresh cache per test session, never the user's ~/.cache/lezero: every
# run exercises the cold path, and a test run never leaves files behind in the home directory.
os.environ.setdefault("LEZERO_CACHE_DIR", tempfile.mkdtemp(prefix="lezero-test-cache-"))
os.environ.setdefault("LEZERO_VERIFY_EACH", "1")  # schedule() verifies after every pass (lezero/codegen/schedule.py)
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


# --- The cross-target matrix (issue 10) ---------------------------------------------------------
# Code must be right on every CPU it is generated for, not only on the host: a test marked
# ``cross_target`` takes a ``cpu`` argument (an LLVM CPU name) and compiles for it, once per CPU
# of the matrix.  By default the CPUs are MATRIX_CPUS of this machine's architecture that it can
# execute, and a marked test with ``cases`` (``{id: case}``; ``group``: case -> its group) is
# spread over them: each CPU runs ``per_cpu`` (default ceil(n / CPUs): every case runs somewhere)
# of each group's n cases, a different share on each CPU, so every group runs on every CPU.
# ``--cpus=LIST|all|host`` names the CPUs instead, and then every case runs on every one of them
# (``--cpus=all``: the slow, full matrix).  LEZERO_CPU=<name> runs the rest of the suite for a CPU.
MATRIX_CPUS = {"x86_64": ("x86-64", "x86-64-v2", "x86-64-v3", "skylake-avx512", "znver4", "sapphirerapids"),
               "aarch64": ("generic", "cortex-a72", "neoverse-n1")}


@dataclass(frozen=True)
class CrossTargetMatrix:
    """cpus: the CPUs marked tests run for; full: every case on every CPU (else spread);
    left_out: default CPUs this machine cannot execute -> what it lacks."""

    cpus: tuple
    full: bool
    left_out: dict

    @classmethod
    def from_option(cls, option: str | None) -> "CrossTargetMatrix":
        from lezero.codegen.errors import TargetError
        from lezero.codegen.llvm.target import cpu_target, executable_cpus, host_target

        if option is None:
            listed = MATRIX_CPUS.get(host_target().arch, ())
            left_out = {c: cpu_target(c).missing_here() for c in listed if cpu_target(c).missing_here()}
            return cls(tuple(c for c in listed if c not in left_out) or ("host",), False, left_out)
        names = executable_cpus() if option.strip() == "all" else [c.strip() for c in option.split(",") if c.strip()]
        if not names:
            raise pytest.UsageError(f"--cpus={option!r} names no CPU")
        for name in names:
            try:
                cpu_target(name).require_executable("the cross-target tests")
            except TargetError as e:
                raise pytest.UsageError(f"--cpus: {e}") from None
        return cls(tuple(dict.fromkeys(names)), True, {})

    def runs(self, cases: dict, group, per_cpu: int | None = None) -> list[tuple[str, str]]:
        """(cpu, case id) pairs: all of them when full; else each CPU runs ``per_cpu`` (default
        ceil(n / CPUs): every case somewhere) of each group's n cases, a different share on each CPU
        (consecutive in an order hashed from the ids, so the same on every xdist worker)."""
        if self.full:
            return [(cpu, case_id) for cpu in self.cpus for case_id in cases]
        groups: dict = {}
        for case_id, case in cases.items():
            groups.setdefault(group(case), []).append(case_id)
        runs = []
        for ids in groups.values():
            ids = sorted(ids, key=lambda case_id: zlib.crc32(case_id.encode()))
            share = min(per_cpu or -(-len(ids) // len(self.cpus)), len(ids))  # no case twice on one CPU
            runs += [(cpu, ids[(i * share + j) % len(ids)]) for i, cpu in enumerate(self.cpus) for j in range(share)]
        return runs


_MATRIX = pytest.StashKey[CrossTargetMatrix]()


def pytest_addoption(parser):
    parser.addoption("--cpus", default=None, metavar="LIST",
                     help="CPUs for tests marked cross_target: LLVM CPU names separated by commas, 'all' (every "
                          "named CPU of this architecture this machine can execute) or 'host'; each must be "
                          "executable here, and every case then runs on each. Default: " +
                          "; ".join(f"on {arch} {', '.join(cpus)}" for arch, cpus in MATRIX_CPUS.items()) +
                          " (those this machine can execute), the cases spread over them")


def pytest_configure(config):
    config.stash[_MATRIX] = CrossTargetMatrix.from_option(config.getoption("--cpus"))


def pytest_report_header(config):
    matrix = config.stash[_MATRIX]
    line = f"cross-target CPUs: {', '.join(matrix.cpus)} ({'every case on each' if matrix.full else 'cases spread'})"
    left = "; ".join(f"{cpu} (lacks {', '.join(missing)})" for cpu, missing in matrix.left_out.items())
    return [line] + ([f"cross-target CPUs this machine cannot execute, left out: {left}"] if left else [])


def pytest_generate_tests(metafunc):
    if metafunc.definition.get_closest_marker("backends") is not None:
        _parametrize_backends(metafunc)
    marker = metafunc.definition.get_closest_marker("cross_target")
    if marker is None:
        return
    matrix = metafunc.config.stash[_MATRIX]
    cases = marker.kwargs.get("cases")
    if cases is None:
        metafunc.parametrize("cpu", matrix.cpus, ids=list(matrix.cpus))
        return
    runs = matrix.runs(cases, marker.kwargs.get("group", lambda case: case), marker.kwargs.get("per_cpu"))
    metafunc.parametrize(("cpu", "case"), [(cpu, cases[case_id]) for cpu, case_id in runs],
                         ids=[f"{case_id}@{cpu}" for cpu, case_id in runs])


@pytest.fixture(scope="session")
def cross_target_matrix(request) -> CrossTargetMatrix:
    return request.config.stash[_MATRIX]


# --- Every backend (tests/backend) ----------------------------------------------------------------
# A test marked ``backends`` takes a ``target`` argument, a BackendTarget: the host CPU, cuda (Triton's
# interpreter on this machine: TRITON_INTERPRET=1 is set for the whole session by
# tests/codegen/triton/conftest.py and tests/backend/conftest.py), and each CPU of the cross-target
# matrix.  With ``cases`` (as for ``cross_target``), the host and cuda run every case and the matrix
# CPUs share them out as above.


BACKEND_TARGETS = (BackendTarget("cpu"), BackendTarget("cuda"))


def _parametrize_backends(metafunc):
    marker = metafunc.definition.get_closest_marker("backends")
    matrix = metafunc.config.stash[_MATRIX]
    cases = marker.kwargs.get("cases")
    matrix_targets = [BackendTarget("cpu", cpu) for cpu in matrix.cpus if cpu != "host"]
    if cases is None:
        targets = list(BACKEND_TARGETS) + matrix_targets
        metafunc.parametrize("target", targets, ids=[t.id for t in targets])
        return
    runs = [(t, case_id) for t in BACKEND_TARGETS for case_id in cases]
    runs += [(BackendTarget("cpu", cpu), case_id)
             for cpu, case_id in matrix.runs(cases, marker.kwargs.get("group", lambda case: case),
                                             marker.kwargs.get("per_cpu")) if cpu != "host"]
    metafunc.parametrize(("target", "case"), [(t, cases[case_id]) for t, case_id in runs],
                         ids=[f"{case_id}@{t.id}" for t, case_id in runs])
