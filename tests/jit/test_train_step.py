"""lz.jit.compile_train_step: one compiled function per training step follows the eager loop (same
initial weights, same batches): losses, parameters and optimizer state, for Adam, AdamW and SGD,
under a learning-rate schedule and across batch sizes."""
from __future__ import annotations

import numpy as np
import pytest

import lezero as lz
from lezero import nn
from lezero.jit import TraceError

STEPS = 20


class Net(nn.Module):
    def __init__(self, n_in=20, hidden=32, n_out=5):
        super().__init__()
        self.fc1 = nn.Linear(n_in, hidden)
        self.fc2 = nn.Linear(hidden, n_out)

    def forward(self, x):
        return self.fc2(nn.functional.relu(self.fc1(x)))


def _batches(n=STEPS, batch=16, last=7, seed=0):
    """``n`` batches of a learnable task (labels from a fixed linear teacher); the last one
    smaller, as an epoch's last batch is."""
    rng = np.random.default_rng(seed)
    teacher = rng.standard_normal((20, 5))
    out = []
    for i in range(n):
        x = rng.standard_normal((last if i == n - 1 else batch, 20)).astype(np.float32)
        out.append((x, (x @ teacher).argmax(axis=1)))
    return out


def _run(make_optimizer, compiled: bool, schedule: bool = False, batches=None):
    lz.manual_seed(0)
    model = Net()
    optimizer = make_optimizer(model.parameters())
    scheduler = lz.optim.lr_scheduler.StepLR(optimizer, step_size=5, gamma=0.5) if schedule else None
    criterion = nn.CrossEntropyLoss()
    batches = batches or _batches()
    step = None
    if compiled:
        step = lz.jit.compile_train_step(model, criterion, optimizer, lz.from_numpy(batches[0][0]),
                                         lz.from_numpy(batches[0][1]))
    losses = []
    for x, y in batches:
        x, y = lz.from_numpy(x), lz.from_numpy(y)
        if step is not None:
            loss = step(x, y)
        else:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
        losses.append(loss.item())
        if scheduler is not None:
            scheduler.step()
    return np.array(losses), model, optimizer, step


OPTIMIZERS = {
    "adam": lambda p: lz.optim.Adam(p, lr=1e-2),
    "adamw-amsgrad": lambda p: lz.optim.AdamW(p, lr=1e-2, weight_decay=0.1, amsgrad=True),
    "sgd-nesterov": lambda p: lz.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3),
    "sgd-dampening": lambda p: lz.optim.SGD(p, lr=0.1, momentum=0.8, dampening=0.3),
    "sgd-plain": lambda p: lz.optim.SGD(p, lr=0.1),
}


@pytest.mark.parametrize("name", list(OPTIMIZERS))
def test_compiled_step_follows_the_eager_loss_curve(name):
    eager_losses, eager_model, eager_opt, _ = _run(OPTIMIZERS[name], compiled=False)
    losses, model, optimizer, step = _run(OPTIMIZERS[name], compiled=True)
    assert eager_losses[-1] < eager_losses[0]  # it trains
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5, atol=1e-6)
    for (n, p), q in zip(model.named_parameters(), eager_model.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=n)
    # the optimizer's state is PyTorch's layout, current after compiled steps
    mine, theirs = optimizer.state_dict()["state"], eager_opt.state_dict()["state"]
    assert mine.keys() == theirs.keys()
    for i in mine:
        assert mine[i].keys() == theirs[i].keys()
        for key in mine[i]:
            np.testing.assert_allclose(np.asarray(mine[i][key]), np.asarray(theirs[i][key]), rtol=1e-5, atol=1e-6)
    assert len(step._steps) == 2  # one compiled plan per batch shape (16 and the last batch's 7)


def test_learning_rate_schedules_change_scalars_not_code():
    eager_losses, *_ = _run(OPTIMIZERS["adam"], compiled=False, schedule=True)
    losses, _, _, step = _run(OPTIMIZERS["adam"], compiled=True, schedule=True, batches=_batches(last=16))
    np.testing.assert_allclose(losses[:-1], eager_losses[:-1], rtol=1e-5, atol=1e-6)
    assert len(step._steps) == 1


def test_the_step_is_one_ir_function_with_the_update_inside():
    lz.manual_seed(0)
    model = Net()
    step = lz.jit.compile_train_step(model, nn.CrossEntropyLoss(), lz.optim.Adam(model.parameters()),
                                     lz.randn(4, 20), lz.tensor([0, 1, 2, 3]))
    text = step.graph
    assert text.count("func.func") == 1 and "@train_step" in text
    assert '{lz.name = "fc1.weight.exp_avg_sq"}' in text and "lz.sqrt" in text  # Adam's update, as IR
    assert "tensor<?x20xf32>" in step.forward_graph
    loss = step(lz.randn(4, 20), lz.tensor([0, 1, 2, 3]))
    assert loss.shape == () and np.isfinite(loss.item())


def test_what_the_compiled_step_cannot_do_yet_is_a_clear_error():
    x, y = lz.randn(4, 8), lz.tensor([0, 1, 0, 1])
    bn = nn.Sequential(nn.Linear(8, 6), nn.BatchNorm1d(6), nn.Linear(6, 2))
    with pytest.raises(TraceError, match="running statistics"):
        lz.jit.compile_train_step(bn, nn.CrossEntropyLoss(), lz.optim.SGD(bn.parameters(), lr=0.1), x, y)
    assert int(bn[1].num_batches_tracked.item()) == 0  # the trace left the buffers as they were
    drop = nn.Sequential(nn.Linear(8, 6), nn.Dropout(0.5), nn.Linear(6, 2))
    with pytest.raises(TraceError, match="Dropout"):
        lz.jit.compile_train_step(drop, nn.CrossEntropyLoss(), lz.optim.SGD(drop.parameters(), lr=0.1), x, y)
    model = Net(n_in=8, n_out=2)
    with pytest.raises(TypeError, match="SGD, Adam and AdamW"):
        lz.jit.compile_train_step(model, nn.CrossEntropyLoss(), object(), x, y)
    optimizer = lz.optim.Adam(model.parameters())
    step = lz.jit.compile_train_step(model, nn.CrossEntropyLoss(), optimizer, x, y)
    step(x, y)
    with pytest.raises(TraceError, match="was built for"):
        step(lz.randn(4, 9), y)
    assert float(optimizer.state[model.fc1.weight]["step"].item()) == 1.0  # a failed call takes no step
