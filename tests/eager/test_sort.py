"""``sort``/``argsort``/``msort`` against torch's ``stable=True`` sort in float64: ties keep their
order, nan sorts last ascending and first descending, -0.0 equals 0.0, lines of one, an interior
dim, integers, a long line (merge-sorted: O(n log n)), and the gradient through the sorted values."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lezero as lz

from support.selection_testing import ties_and_nan


def same(ours, theirs) -> None:
    assert np.array_equal(ours.values.numpy(), theirs.values.numpy(), equal_nan=True)
    assert np.array_equal(np.signbit(ours.values.numpy()), np.signbit(theirs.values.numpy()))  # -0.0 stays
    assert np.array_equal(ours.indices.numpy(), theirs.indices.numpy())


@pytest.mark.parametrize("shape, dim", [((1,), 0), ((4, 1), 1), ((3, 2), 1), ((5, 37), 1), ((6, 3, 5), 0),
                                        ((4, 9, 3), 1), ((2, 4096), -1)])
@pytest.mark.parametrize("descending", [False, True])
def test_sort_matches_torch_on_ties_nan_and_signed_zeros(shape, dim, descending):
    x = ties_and_nan(shape, np.float64, np.random.default_rng(sum(shape)))
    same(lz.tensor(x).sort(dim=dim, descending=descending),
         torch.tensor(x).sort(dim=dim, descending=descending, stable=True))
    assert np.array_equal(lz.tensor(x).argsort(dim=dim, descending=descending).numpy(),
                          torch.tensor(x).argsort(dim=dim, descending=descending, stable=True).numpy())


def test_integers_a_long_line_and_msort():
    rng = np.random.default_rng(0)
    ints = rng.integers(-50, 50, (3, 1000))
    same(lz.tensor(ints).sort(descending=True), torch.tensor(ints).sort(descending=True, stable=True))
    line = rng.integers(0, 300, 200_000).astype(np.float32)  # ties everywhere
    same(lz.tensor(line).sort(), torch.tensor(line).sort(stable=True))
    matrix = rng.standard_normal((7, 4))
    assert np.array_equal(lz.tensor(matrix).msort().numpy(), torch.tensor(matrix).msort().numpy())


def test_the_gradient_flows_through_the_sorted_values():
    x = np.random.default_rng(3).standard_normal((4, 20))
    weights = np.arange(20.0)
    grads = []
    for fw in (lz, torch):
        t = fw.tensor(x, requires_grad=True)
        (t.sort(dim=1, descending=True).values * fw.tensor(weights)).sum().backward()
        grads.append(t.grad.numpy())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-12)
