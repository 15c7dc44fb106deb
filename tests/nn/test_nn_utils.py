"""nn.utils against torch in float64: clip_grad_norm_ (every norm type, the returned total norm,
the gradients after clipping, error_if_nonfinite), get_total_norm, clip_grad_value_,
parameters_to_vector (with its gradient) and vector_to_parameters."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import lezero as lz

from support.eager_testing import assert_same, assert_same_grads, compare, copy_weights


def models_with_gradients():
    torch_model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 2)).double()
    lz_model = lz.nn.Sequential(lz.nn.Linear(4, 3), lz.nn.Tanh(), lz.nn.Linear(3, 2)).to(lz.float64)
    copy_weights(torch_model, lz_model)
    x = np.random.default_rng(0).standard_normal((5, 4)) * 3
    (torch_model(torch.tensor(x)) ** 2).sum().backward()
    (lz_model(lz.tensor(x)) ** 2).sum().backward()
    return torch_model, lz_model


@pytest.mark.parametrize("norm_type", [2.0, 1, 3.5, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e6])
def test_clip_grad_norm(norm_type, max_norm):
    torch_model, lz_model = models_with_gradients()
    want = torch.nn.utils.clip_grad_norm_(torch_model.parameters(), max_norm, norm_type)
    got = lz.nn.utils.clip_grad_norm_(lz_model.parameters(), max_norm, norm_type)
    assert_same(got, want, what="total norm")
    assert_same_grads(torch_model, lz_model)


def test_total_norm_nonfinite_and_empty():
    torch_model, lz_model = models_with_gradients()
    grads = [p.grad for p in lz_model.parameters()]
    assert_same(lz.nn.utils.get_total_norm(grads), torch.nn.utils.get_total_norm([p.grad for p in
                                                                                  torch_model.parameters()]))
    lz_model[0].weight.grad.fill_(float("inf"))
    with pytest.raises(RuntimeError, match="non-finite"):
        lz.nn.utils.clip_grad_norm_(lz_model.parameters(), 1.0, error_if_nonfinite=True)
    assert lz.nn.utils.clip_grad_norm_([lz.nn.Parameter(lz.ones(2))], 1.0).item() == 0.0  # no gradients
    with pytest.raises(ValueError, match="norm_type must be positive or inf, got -inf"):
        lz.nn.utils.get_total_norm(grads, -math.inf)


def test_clip_grad_value():
    torch_model, lz_model = models_with_gradients()
    torch.nn.utils.clip_grad_value_(torch_model.parameters(), 0.7)
    lz.nn.utils.clip_grad_value_(lz_model.parameters(), 0.7)
    assert_same_grads(torch_model, lz_model)
    assert max(np.abs(p.grad.numpy()).max() for p in lz_model.parameters()) <= 0.7


def test_parameters_to_vector_and_back():
    compare(lambda a, b: lz.nn.utils.parameters_to_vector([a, b]),
            lambda a, b: torch.nn.utils.parameters_to_vector([a, b]),
            np.arange(6.0).reshape(2, 3), np.arange(4.0))
    model = lz.nn.Linear(3, 2)
    vector = lz.arange(8, dtype=lz.float32)
    lz.nn.utils.vector_to_parameters(vector, model.parameters())
    np.testing.assert_array_equal(model.weight.detach().numpy(), np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(model.bias.detach().numpy(), [6.0, 7.0])
    with pytest.raises(RuntimeError, match="vec has 3 elements, the parameters 8"):
        lz.nn.utils.vector_to_parameters(lz.ones(3), model.parameters())
