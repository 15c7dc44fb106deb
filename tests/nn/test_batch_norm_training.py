"""A BatchNorm CNN trained in float32 by lezero eager and by torch in lockstep, from the same
weights on the same batch: the gradients stay within 1e-4 of torch's (relative to each gradient's
largest element) for 40 SGD steps.  BatchNorm's statistics and their gradients are sums over
N x H x W, the reductions blocked for accuracy (docs/architecture.md, "Accurate reductions")."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lezero as lz

from support.eager_testing import copy_weights


def conv_bn_relu_pool_linear(lib):
    nn = lib.nn
    # no conv bias: BatchNorm removes it, so its gradient would be rounding noise on both sides
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Flatten(), nn.Linear(8 * 8 * 8, 10))


@pytest.mark.slow
def test_batch_norm_cnn_gradients_follow_torch_for_40_sgd_steps():
    torch.manual_seed(0)
    ours, theirs = conv_bn_relu_pool_linear(lz), conv_bn_relu_pool_linear(torch)
    copy_weights(theirs, ours)
    ours_sgd, theirs_sgd = lz.optim.SGD(ours.parameters(), lr=0.1), torch.optim.SGD(theirs.parameters(), lr=0.1)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((8, 3, 16, 16)).astype(np.float32), rng.integers(0, 10, 8)
    for step in range(40):
        ours_sgd.zero_grad()
        theirs_sgd.zero_grad()
        loss = lz.nn.functional.cross_entropy(ours(lz.tensor(x)), lz.tensor(y))
        want = torch.nn.functional.cross_entropy(theirs(torch.tensor(x)), torch.tensor(y))
        loss.backward()
        want.backward()
        assert abs(loss.item() - want.item()) <= 1e-4 * abs(want.item()) + 1e-6, step
        for (name, p), (_, q) in zip(ours.named_parameters(), theirs.named_parameters()):
            got, expected = p.grad.numpy().astype(np.float64), q.grad.numpy().astype(np.float64)
            error = np.abs(got - expected).max() / np.abs(expected).max()
            assert error <= 1e-4, f"step {step}: {name}'s gradient is {error:.1e} off torch's"
        ours_sgd.step()
        theirs_sgd.step()
    assert loss.item() < 0.1  # it learned the batch
