"""``lz.manual_seed`` makes a whole training run reproducible: the DataLoader's shuffled order
(with worker processes too), the layers' initial weights and the dropout masks, eager and in a
compiled step."""
from __future__ import annotations

import numpy as np

import lezero as lz
from lezero import nn
from lezero.utils.data import DataLoader, TensorDataset


def _data():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((24, 6)).astype(np.float32)
    return TensorDataset(lz.tensor(x), lz.tensor((x.sum(axis=1) > 0).astype(np.int64)))


def _run(seed: int, compiled: bool = False, num_workers: int = 0):
    lz.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 2))
    initial = model[0].weight.detach().numpy().copy()
    optimizer = lz.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(_data(), batch_size=8, shuffle=True, drop_last=True, num_workers=num_workers)
    step = None
    order, losses = [], []
    for _ in range(2):
        for x, y in loader:
            order.append(y.tolist())
            if compiled:
                step = step or lz.jit.compile_train_step(model, loss_fn, optimizer, x, y)
                losses.append(step(x, y).item())
            else:
                optimizer.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
    return initial, order, losses, model[3].weight.detach().numpy()


def _same(a, b) -> bool:
    return all(np.array_equal(np.asarray(u), np.asarray(v)) for u, v in zip(a, b))


def test_manual_seed_reproduces_order_init_and_dropout():
    first, again, other = _run(0), _run(0), _run(1)
    assert _same(first, again)  # with dropout in training mode: the masks repeat too
    assert not np.array_equal(first[0], other[0]) and first[1] != other[1] and first[2] != other[2]
    assert _same(_run(0, num_workers=2), first)  # the workers do not change the order


def test_manual_seed_reproduces_a_compiled_run():
    first, again = _run(3, compiled=True), _run(3, compiled=True)
    assert _same(first, again)
    assert first[2] != _run(4, compiled=True)[2]
