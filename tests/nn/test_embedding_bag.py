"""EmbeddingBag against torch in float64: every mode, offsets or a 2-D input,
include_last_offset, per_sample_weights, padding_idx, empty bags (outputs and weight
gradients); errors; a trace that takes new offsets; the ONNX export."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lezero as lz

from support.layer_testing import assert_traces_and_exports, compare_modules, twins

INDICES = np.array([1, 2, 4, 5, 4, 3, 2, 9, 0, 2])
OFFSETS = np.array([0, 4, 4, 7])  # the second bag is empty


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
@pytest.mark.parametrize("padding_idx", [None, 2])
def test_offsets(mode, padding_idx):
    torch_bag, lz_bag = twins(lambda nn: nn.EmbeddingBag(10, 3, mode=mode, padding_idx=padding_idx))
    assert repr(lz_bag) == repr(torch_bag)
    compare_modules(torch_bag, lz_bag, INDICES, OFFSETS)


@pytest.mark.parametrize("mode", ["sum", "max"])
def test_2d_input_and_last_offset(mode):
    torch_bag, lz_bag = twins(lambda nn: nn.EmbeddingBag(10, 4, mode=mode))
    compare_modules(torch_bag, lz_bag, INDICES.reshape(2, 5))
    torch_bag, lz_bag = twins(lambda nn: nn.EmbeddingBag(10, 4, mode=mode, include_last_offset=True))
    compare_modules(torch_bag, lz_bag, INDICES, np.array([0, 3, 3, 8, 10]))


def test_per_sample_weights():
    torch_bag, lz_bag = twins(lambda nn: nn.EmbeddingBag(10, 3, mode="sum"))
    weights = np.random.default_rng(0).standard_normal(len(INDICES))
    compare_modules(torch_bag, lz_bag, INDICES, OFFSETS, weights)  # the weights' gradient too
    compare_modules(torch_bag, lz_bag, INDICES.reshape(5, 2), None, weights.reshape(5, 2))


def test_functional_form_and_errors():
    weight = np.random.default_rng(1).standard_normal((10, 3))
    lz_w, torch_w = lz.tensor(weight, requires_grad=True), torch.tensor(weight, requires_grad=True)
    got = lz.nn.functional.embedding_bag(lz.tensor(INDICES), lz_w, lz.tensor(OFFSETS), mode="mean")
    want = torch.nn.functional.embedding_bag(torch.tensor(INDICES), torch_w, torch.tensor(OFFSETS), mode="mean")
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=1e-12)
    with pytest.raises(NotImplementedError, match="per_sample_weights is only supported for mode='sum'"):
        lz.nn.functional.embedding_bag(lz.tensor(INDICES), lz_w, lz.tensor(OFFSETS), per_sample_weights=lz.ones(10))
    with pytest.raises(ValueError, match="offsets has to be None"):
        lz.nn.functional.embedding_bag(lz.tensor(INDICES.reshape(2, 5)), lz_w, lz.tensor(OFFSETS))
    with pytest.raises(ValueError, match="offsets has to be a 1D Tensor but got None"):
        lz.nn.functional.embedding_bag(lz.tensor(INDICES), lz_w)
    with pytest.raises(ValueError, match="must be integer tensors"):
        lz.nn.functional.embedding_bag(lz.ones(3), lz_w, lz.tensor(OFFSETS))
    bag = lz.nn.EmbeddingBag(5, 2, padding_idx=1)
    assert not np.any(bag.weight.detach().numpy()[1])


def test_trace_takes_new_offsets_and_exports():
    lz.manual_seed(0)
    bag = lz.nn.EmbeddingBag(10, 3, mode="sum")
    bag.eval()
    traced = lz.jit.trace(bag, example_inputs=(lz.tensor(INDICES), lz.tensor(OFFSETS)), dynamic_batch=False)
    other = np.array([0, 1, 2, 9])
    with lz.no_grad():
        want = bag(lz.tensor(INDICES), lz.tensor(other)).numpy()
    np.testing.assert_allclose(np.asarray(traced(INDICES, other)), want, rtol=1e-6)
    assert_traces_and_exports(bag, INDICES, OFFSETS, dynamic_batch=False)
    model = lz.nn.EmbeddingBag(10, 3, mode="max")
    assert_traces_and_exports(model, INDICES.reshape(2, 5), dynamic_batch=False)
