"""One rank of the model-parallel tests (``test_model_parallel.py``): tensor-parallel linear layers
and a GPipe pipeline over this job's ranks, on models built from the same seed as the test's
single-process reference (``reference_layers``, ``data``); results in ``OUT/rank<r>.npz``."""
from __future__ import annotations

import sys

import numpy as np

import lezero as lz
import lezero.distributed as dist
from lezero import nn

WIDTH = 8
BATCH = 12
CHUNKS = 3


def reference_layers() -> list:
    """Four Linear(8, 8): the pipeline's model (ReLU between) and the tensor-parallel MLP's first two."""
    lz.manual_seed(0)
    return [nn.Linear(WIDTH, WIDTH) for _ in range(4)]


def pipeline_model(layers: list) -> nn.Sequential:
    return nn.Sequential(*[m for layer in layers for m in (layer, nn.ReLU())][:-1])


def data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, WIDTH)).astype(np.float32)
    return lz.from_numpy(x), lz.from_numpy(rng.integers(0, WIDTH, BATCH))


def main(out: str) -> None:
    dist.init_process_group(timeout=30)
    rank, world = dist.get_rank(), dist.get_world_size()
    results = {}
    # tensor parallel: Megatron's MLP (column then row) and the gathered/sliced forms
    fc1, fc2 = reference_layers()[:2]
    x, _ = data()
    for form, (gather, parallel_input) in {"megatron": (False, True), "gathered": (True, False)}.items():
        col = nn.parallel.ColumnParallelLinear.from_linear(fc1, gather_output=gather)
        row = nn.parallel.RowParallelLinear.from_linear(fc2, input_is_parallel=parallel_input)
        xi = x.detach().clone().requires_grad_(True)
        y = row(nn.functional.relu(col(xi)))
        (y * y).sum().backward()
        results.update({f"tp/{form}/y": y.detach().numpy(), f"tp/{form}/x_grad": xi.grad.numpy(),
                        f"tp/{form}/w1_grad": col.weight.grad.numpy(), f"tp/{form}/b1_grad": col.bias.grad.numpy(),
                        f"tp/{form}/w2_grad": row.weight.grad.numpy(), f"tp/{form}/b2_grad": row.bias.grad.numpy()})
    # pipeline: stage r holds layers [r * 4 / world, (r + 1) * 4 / world) of the 4
    for schedule in ("gpipe", "1f1b"):
        modules = list(pipeline_model(reference_layers()))
        per = 2 * 4 // world
        stage = nn.Sequential(*modules[rank * per:(rank + 1) * per])
        pipe = dist.Pipe(stage, chunks=CHUNKS, loss_fn=nn.CrossEntropyLoss(), schedule=schedule)
        x, y = data()
        loss = pipe.train_step(x if rank == 0 else None, y if rank == world - 1 else None)
        if loss is not None:
            results[f"pp/{schedule}/loss"] = loss.numpy()
        for i, p in enumerate(stage.parameters()):
            results[f"pp/{schedule}/grad{i}"] = p.grad.numpy()
    np.savez(f"{out}/rank{rank}.npz", **results)
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1])
