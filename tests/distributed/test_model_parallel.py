"""Model parallelism over MPI (MPICH), 2 and 4 ranks: Megatron's column/row-parallel linear layers
and a pipeline (GPipe and 1F1B, 2 and 4 stages, 3 micro-batches) give the single-process model's outputs,
loss and gradients (``support/model_parallel_worker.py`` runs the ranks)."""
from __future__ import annotations

import numpy as np
import pytest
from support import model_parallel_worker as worker
from support.distributed_testing import rank_results, run_ranks

from lezero import nn


@pytest.fixture(scope="module", params=[2, pytest.param(4, marks=pytest.mark.slow)])
def ranks(request, tmp_path_factory):
    out = tmp_path_factory.mktemp(f"model_parallel_{request.param}")
    done = run_ranks(worker.__file__, [str(out)], nproc=request.param, backend="mpi", timeout=180)
    assert done.returncode == 0, done.stderr[-4000:]
    return rank_results(out, request.param)


def test_tensor_parallel_linears_equal_the_single_process_mlp(ranks):
    world = len(ranks)
    fc1, fc2 = worker.reference_layers()[:2]
    x, _ = worker.data()
    x.requires_grad_(True)
    y = fc2(nn.functional.relu(fc1(x)))
    (y * y).sum().backward()
    k = worker.WIDTH // world
    for form in ("megatron", "gathered"):
        for r, res in enumerate(ranks):
            np.testing.assert_allclose(res[f"tp/{form}/y"], y.detach().numpy(), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(res[f"tp/{form}/x_grad"], x.grad.numpy(), rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(res[f"tp/{form}/w1_grad"], fc1.weight.grad.numpy()[r * k:(r + 1) * k],
                                       rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(res[f"tp/{form}/b1_grad"], fc1.bias.grad.numpy()[r * k:(r + 1) * k],
                                       rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(res[f"tp/{form}/w2_grad"], fc2.weight.grad.numpy()[:, r * k:(r + 1) * k],
                                       rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(res[f"tp/{form}/b2_grad"], fc2.bias.grad.numpy(), rtol=1e-5, atol=1e-6)
            assert np.array_equal(res[f"tp/{form}/y"], ranks[0][f"tp/{form}/y"])  # the same bytes on every rank


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_stages_give_the_whole_models_loss_and_gradients(ranks, schedule):
    world = len(ranks)
    model = worker.pipeline_model(worker.reference_layers())
    x, y = worker.data()
    loss = nn.CrossEntropyLoss()(model(x), y)
    loss.backward()
    np.testing.assert_allclose(ranks[-1][f"pp/{schedule}/loss"], loss.detach().numpy(), rtol=1e-6)
    grads = [p.grad.numpy() for p in model.parameters()]
    per = len(grads) // world
    for r, res in enumerate(ranks):
        for i, g in enumerate(grads[r * per:(r + 1) * per]):
            np.testing.assert_allclose(res[f"pp/{schedule}/grad{i}"], g, rtol=1e-5, atol=1e-7)
