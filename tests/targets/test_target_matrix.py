"""The cross-target matrix itself (tests/conftest.py): the default spread covers every case and every
group on every CPU; ``--cpus`` naming a CPU this machine cannot run is a usage error."""
from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from lezero.codegen.llvm.target import AARCH64_CPUS, X86_CPUS, cpu_target, host_target

from support.op_samples import ALL_SAMPLES


def test_spread_runs_every_case_somewhere_and_every_group_everywhere(cross_target_matrix):
    spread = type(cross_target_matrix)(cpus=("a", "b", "c", "d", "e"), full=False, left_out={})
    cases = {s.id: s for s in ALL_SAMPLES}
    runs = spread.runs(cases, lambda s: s.op)
    assert len(set(runs)) == len(runs)
    assert {case_id for _, case_id in runs} == set(cases)
    ops = {s.op for s in ALL_SAMPLES}
    assert {(cpu, cases[case_id].op) for cpu, case_id in runs} == {(cpu, op) for cpu in spread.cpus for op in ops}
    per_cpu = spread.runs(cases, lambda s: s.op, per_cpu=1)
    assert Counter(cpu for cpu, _ in per_cpu) == {cpu: len(ops) for cpu in spread.cpus}
    assert spread.runs(cases, lambda s: s.op) == runs  # deterministic (xdist workers must agree)
    full = type(cross_target_matrix)(cpus=("a", "b"), full=True, left_out={})
    assert len(full.runs(cases, lambda s: s.op, per_cpu=1)) == 2 * len(cases)


def collect(option: str) -> subprocess.CompletedProcess:
    tests = Path(__file__).parent
    return subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly", option,
                           str(tests / "test_target_random_graphs.py")],
                          cwd=tests.parent.parent, capture_output=True, text=True, timeout=300)


def test_cpus_naming_an_unknown_or_foreign_cpu_is_a_usage_error():
    unknown = collect("--cpus=x86-64-v3,no-such-cpu")
    assert unknown.returncode == pytest.ExitCode.USAGE_ERROR, unknown.stdout + unknown.stderr
    assert "unknown cpu 'no-such-cpu'" in unknown.stderr
    table = {"x86_64": X86_CPUS, "aarch64": AARCH64_CPUS}[host_target().arch]
    foreign = [name for name in table if cpu_target(name).missing_here()]
    if not foreign:
        pytest.skip(f"this machine can execute every {host_target().arch} CPU of the table")
    foreign = foreign[0]
    result = collect(f"--cpus={foreign}")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout + result.stderr
    assert f"compiled for cpu {foreign!r} on this machine" in result.stderr
    assert ", ".join(cpu_target(foreign).missing_here()) in result.stderr
