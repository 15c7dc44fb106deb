"""Random fused graphs (hypothesis) compiled for each CPU of the cross-target matrix, against the
reference interpreter: elementwise chains over f32/f64/i32/i64/i1 with broadcasting, and f32 graphs
of elementwise ops, reductions, matmuls and data movement.  A few examples per CPU by default; the
hypothesis profile's number (25, ``HYPOTHESIS_PROFILE=thorough``: 200) with ``--cpus``."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
import pytest

from support.fusion_testing import inputs_for, random_elementwise_graphs, random_graphs
from support.ir_building import random_array

from cross_target_testing import assert_matches_interpreter

EXAMPLES_PER_CPU = 8  # when spread (the default matrix)


def examples(matrix) -> dict:
    return dict(max_examples=settings().max_examples) if matrix.full else dict(max_examples=EXAMPLES_PER_CPU)


@pytest.mark.cross_target
def test_random_elementwise_graphs(cpu, cross_target_matrix):
    @settings(**examples(cross_target_matrix), suppress_health_check=[HealthCheck.too_slow])
    @given(random_elementwise_graphs())
    def check(case):
        module, shapes, dtype = case
        rng = np.random.default_rng(5)
        arrays = [random_array(rng, s, dtype) for s in shapes]
        assert_matches_interpreter(module, arrays, cpu)

    check()


@pytest.mark.cross_target
def test_random_fused_graphs(cpu, cross_target_matrix):
    @settings(**examples(cross_target_matrix), suppress_health_check=[HealthCheck.too_slow])
    @given(random_graphs())
    def check(module):
        # f32 sums of up to a few terms in another order than numpy's: the host test's tolerance
        assert_matches_interpreter(module, inputs_for(module.lookup("f"), seed=1), cpu, dict(rtol=1e-4, atol=1e-5))

    check()
