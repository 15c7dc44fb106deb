"""Random fused graphs (hypothesis) compiled for every backend target, against the reference
interpreter: elementwise chains over f32/f64/i32/i64/i1 with broadcasting, and f32 graphs of
elementwise ops, reductions, matmuls and data movement.  The host CPU runs the hypothesis profile's
number of examples (25; ``HYPOTHESIS_PROFILE=thorough``: 200), cuda under the interpreter and each
CPU of the matrix a few (the profile's number with ``--cpus``)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from support.backend_testing import assert_matches_interpreter
from support.fusion_testing import inputs_for, random_elementwise_graphs, random_graphs
from support.ir_building import random_array

FEW_EXAMPLES = 8  # on cuda (the interpreter is slow) and on each CPU of the spread matrix


def examples(target, matrix) -> dict:
    many = target.device == "cpu" and (target.cpu is None or matrix.full)
    return dict(max_examples=settings().max_examples if many else FEW_EXAMPLES)


@pytest.mark.backends
def test_random_elementwise_graphs(target, cross_target_matrix):
    @settings(**examples(target, cross_target_matrix), suppress_health_check=[HealthCheck.too_slow])
    @given(random_elementwise_graphs())
    def check(case):
        module, shapes, dtype = case
        rng = np.random.default_rng(5)
        arrays = [random_array(rng, s, dtype) for s in shapes]
        assert_matches_interpreter(module, arrays, target)

    check()


@pytest.mark.backends
def test_random_fused_graphs(target, cross_target_matrix):
    @settings(**examples(target, cross_target_matrix), suppress_health_check=[HealthCheck.too_slow])
    @given(random_graphs())
    def check(module):
        # f32 sums of up to a few terms in another order than numpy's
        assert_matches_interpreter(module, inputs_for(module.lookup("f"), seed=1), target, dict(rtol=1e-4, atol=1e-5))

    check()
