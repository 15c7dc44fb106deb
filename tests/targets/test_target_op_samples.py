"""Every lz op sample (tests/support/op_samples.py) compiled for each CPU of the cross-target matrix, against
the reference interpreter.  By default each CPU runs a share of each op's samples (every op on every
CPU, every sample on some CPU); ``--cpus`` runs every sample on every CPU named."""
from __future__ import annotations

import numpy as np
import pytest

from support.op_samples import ALL_SAMPLES

from cross_target_testing import assert_matches_interpreter


@pytest.mark.cross_target(cases={s.id: s for s in ALL_SAMPLES}, group=lambda s: s.op)
def test_op_sample_matches_the_interpreter(cpu, case):
    arrays = case.arrays(np.random.default_rng(0))
    rounded = case.op == "lz.cast" and case.attrs.get("to") in ("f16", "bf16")
    assert_matches_interpreter(case.module(arrays), arrays, cpu, dict(rtol=1e-3, atol=1e-3) if rounded else None)
