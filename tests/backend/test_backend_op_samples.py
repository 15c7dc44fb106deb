"""Every lz op sample (tests/support/op_samples.py) compiled by ``lezero.compile`` for every backend
target, against the reference interpreter: the host CPU and cuda (Triton's interpreter) run every
sample; the CPUs of the cross-target matrix share them out (every op on every CPU, every sample on
some CPU; ``--cpus`` runs every sample on every CPU named)."""
from __future__ import annotations

import numpy as np
import pytest

from support.backend_testing import assert_matches_interpreter
from support.op_samples import ALL_SAMPLES


@pytest.mark.backends(cases={s.id: s for s in ALL_SAMPLES}, group=lambda s: s.op)
def test_op_sample_matches_the_interpreter(target, case):
    arrays = case.arrays(np.random.default_rng(0))
    rounded = case.op == "lz.cast" and case.attrs.get("to") in ("f16", "bf16")
    assert_matches_interpreter(case.module(arrays), arrays, target, dict(rtol=1e-3, atol=1e-3) if rounded else None)
