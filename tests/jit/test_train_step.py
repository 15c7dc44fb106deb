"""lz.jit.compile_train_step: one compiled function per training step follows the eager loop (same
initial weights, same batches): losses, parameters and optimizer state, for Adam, AdamW and SGD,
under a learning-rate schedule and across batch sizes."""
from __future__ import annotations

import numpy as np
import pytest

import lezero as lz
from lezero import nn
from lezero.jit import TraceError

from support.eager_testing import teacher_batches, training_losses

STEPS = 20


class Net(nn.Module):
    def __init__(self, n_in=20, hidden=32, n_out=5):
        super().__init__()
        self.fc1 = nn.Linear(n_in, hidden)
        self.fc2 = nn.Linear(hidden, n_out)

    def forward(self, x):
        return self.fc2(nn.functional.relu(self.fc1(x)))


def _batches(n=STEPS, batch=16, last=7):
    return teacher_batches(n, batch, last, n_in=20, n_out=5)


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
    losses = training_losses(model, criterion, optimizer, [(lz.from_numpy(x), lz.from_numpy(y)) for x, y in batches],
                             step, after_each=scheduler.step if scheduler is not None else None)
    return losses, model, optimizer, step


OPTIMIZERS = {
    "adam": lambda p: lz.optim.Adam(p, lr=1e-2),
    "adamw-amsgrad": lambda p: lz.optim.AdamW(p, lr=1e-2, weight_decay=0.1, amsgrad=True),
    "sgd-nesterov": lambda p: lz.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3),
    "sgd-dampening": lambda p: lz.optim.SGD(p, lr=0.1, momentum=0.8, dampening=0.3),
    "sgd-plain": lambda p: lz.optim.SGD(p, lr=0.1),
    "rmsprop-centered-momentum": lambda p: lz.optim.RMSprop(p, lr=1e-3, momentum=0.5, centered=True),
    "adagrad": lambda p: lz.optim.Adagrad(p, lr=0.05, lr_decay=0.01, initial_accumulator_value=0.1),
    "adamax": lambda p: lz.optim.Adamax(p, lr=1e-2, weight_decay=1e-3),
    "adadelta": lambda p: lz.optim.Adadelta(p, lr=1.0, rho=0.8),
    "nadam-decoupled": lambda p: lz.optim.NAdam(p, lr=1e-2, weight_decay=0.1, decoupled_weight_decay=True),
    "radam": lambda p: lz.optim.RAdam(p, lr=1e-2, betas=(0.9, 0.9)),
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


def test_what_the_compiled_step_cannot_do_is_a_clear_error():
    x, y = lz.randn(4, 8), lz.tensor([0, 1, 0, 1])
    model = Net(n_in=8, n_out=2)
    with pytest.raises(TypeError, match="needs an optimizer with an update_rule"):
        lz.jit.compile_train_step(model, nn.CrossEntropyLoss(), object(), x, y)
    optimizer = lz.optim.Adam(model.parameters())
    step = lz.jit.compile_train_step(model, nn.CrossEntropyLoss(), optimizer, x, y)
    step(x, y)
    with pytest.raises(TraceError, match="was built for"):
        step(lz.randn(4, 9), y)
    assert float(optimizer.state[model.fc1.weight]["step"].item()) == 1.0  # a failed call takes no step


def test_lm_loss_with_reshaped_targets_compiles_and_checks_them():
    """``cross_entropy(logits.view(-1, V), y.view(-1))``: the targets are reshaped inside the step,
    so their bounds are checked in the IR (an ``lz.gather``), not with numpy; the compiled loss is
    the eager one, and a target out of range raises ``IndexError`` from the compiled step."""
    import lezero.nn.functional as F

    vocab, dim = 11, 6
    lz.manual_seed(0)
    model = nn.Sequential(nn.Embedding(vocab, dim), nn.Linear(dim, vocab))
    ids = lz.tensor(np.random.default_rng(1).integers(0, vocab, (2, 5)))
    y = lz.tensor(np.random.default_rng(2).integers(0, vocab, (2, 5)))

    def lm_loss(logits, target):
        return F.cross_entropy(logits.view(-1, vocab), target.view(-1))

    eager = lm_loss(model(ids), y).item()
    step = lz.jit.compile_train_step(model, lm_loss, lz.optim.SGD(model.parameters(), lr=0.1), ids, y)
    np.testing.assert_allclose(step(ids, y).item(), eager, rtol=1e-5)
    with pytest.raises(IndexError, match="index 11 is out of range for axis 0 of size 11"):
        step(ids, lz.tensor(np.full((2, 5), vocab)))


class DropoutCNN(nn.Module):
    """A small CNN with BatchNorm and Dropout in training mode (and functional dropout)."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.drop = nn.Dropout(0.3)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        h = self.drop(nn.functional.max_pool2d(self.bn(self.conv(x)).relu(), 2))
        return self.fc(nn.functional.dropout(h.flatten(1), 0.2, self.training))


def _cnn_run(compiled: bool, steps: int = 5, lr: float = 0.05):
    lz.manual_seed(0)
    model = DropoutCNN()
    optimizer = lz.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    rng = np.random.default_rng(1)
    batches = [(rng.standard_normal((6 if i < steps - 1 else 5, 3, 8, 8)).astype(np.float32),
                rng.integers(0, 10, 6 if i < steps - 1 else 5)) for i in range(steps)]
    loss_fn = nn.CrossEntropyLoss()
    lz.manual_seed(42)  # the masks' seed
    step = lz.jit.compile_train_step(model, loss_fn, optimizer, lz.tensor(batches[0][0]),
                                     lz.tensor(batches[0][1])) if compiled else None
    return training_losses(model, loss_fn, optimizer, [(lz.tensor(x), lz.tensor(y)) for x, y in batches], step), model


def test_batchnorm_and_dropout_cnn_compiled_follows_the_eager_loop():
    eager_losses, eager_model = _cnn_run(False)
    losses, model = _cnn_run(True)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5)
    for name in ("running_mean", "running_var"):
        np.testing.assert_allclose(getattr(model.bn, name).numpy(), getattr(eager_model.bn, name).numpy(),
                                   rtol=1e-5, atol=1e-6)
    assert int(model.bn.num_batches_tracked.item()) == int(eager_model.bn.num_batches_tracked.item()) == 5
    np.testing.assert_allclose(model.fc.weight.detach().numpy(), eager_model.fc.weight.detach().numpy(),
                               rtol=1e-4, atol=1e-5)


def test_two_compiled_steps_on_one_batch_draw_different_masks():
    lz.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.5), nn.Linear(32, 3))
    x, y = lz.randn(16, 8), lz.tensor(np.arange(16) % 3)
    step = lz.jit.compile_train_step(model, nn.CrossEntropyLoss(), lz.optim.SGD(model.parameters(), lr=0.0), x, y)
    assert 'tensor<2xi64> {lz.name = "rng"}' in step.forward_graph
    losses = {round(step(x, y).item(), 6) for _ in range(4)}  # lr 0: only the masks change
    assert len(losses) == 4


def test_attention_dropout_compiles_and_draws_new_masks():
    lz.manual_seed(0)
    attention = nn.MultiheadAttention(16, 2, dropout=0.3, batch_first=True)
    x = lz.randn(2, 5, 16)

    def loss_fn(out, target):
        return ((out[0] - target) ** 2).mean()

    class SelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.attention = attention

        def forward(self, x):
            return self.attention(x, x, x)

    step = lz.jit.compile_train_step(SelfAttention(), loss_fn, lz.optim.SGD(attention.parameters(), lr=0.0), x,
                                     lz.zeros(2, 5, 16))
    losses = {round(step(x, lz.zeros(2, 5, 16)).item(), 6) for _ in range(3)}
    assert len(losses) == 3


# --- gradient clipping and accumulation inside the compiled step ---------------------------------------

def _torch_clip(params, max_norm=None, norm_type=2.0, clip_value=None) -> float:
    """Clip the lz parameters' gradients with torch's own ``clip_grad_value_`` / ``clip_grad_norm_``
    (the reference); returns the total norm torch measured (0 without norm clipping)."""
    import torch

    copies = []
    for p in params:
        t = torch.tensor(p.detach().numpy(), requires_grad=True)
        t.grad = torch.tensor(p.grad.numpy())
        copies.append(t)
    if clip_value is not None:
        torch.nn.utils.clip_grad_value_(copies, clip_value)
    total = float(torch.nn.utils.clip_grad_norm_(copies, max_norm, norm_type)) if max_norm is not None else 0.0
    for p, t in zip(params, copies):
        p.grad = lz.tensor(t.grad.numpy())
    return total


def _lezero_clip(params, max_norm=None, norm_type=2.0, clip_value=None) -> float:
    """The same with the eager ``lz.nn.utils`` clipping."""
    if clip_value is not None:
        lz.nn.utils.clip_grad_value_(params, clip_value)
    return lz.nn.utils.clip_grad_norm_(params, max_norm, norm_type).item() if max_norm is not None else 0.0


def _eager_accumulating_loop(model, loss_fn, optimizer, batches, accumulate=1, clip=None, clip_with=_torch_clip):
    losses, norms = [], []
    optimizer.zero_grad()
    for i, (x, y) in enumerate(batches):
        loss = loss_fn(model(x), y)
        loss.backward()
        losses.append(loss.item())
        if (i + 1) % accumulate == 0:
            if clip is not None:
                norms.append(clip_with(list(model.parameters()), **clip))
            optimizer.step()
            optimizer.zero_grad()
    return np.array(losses), norms


CLIPPING = {  # options, optimizer
    "norm": (dict(max_norm=0.5), "adam"),
    "inf norm": (dict(max_norm=0.2, norm_type=float("inf")), "adam"),
    "inf norm sgd": (dict(max_norm=0.01, norm_type=float("inf")), "sgd-nesterov"),
    "1-norm": (dict(max_norm=2.0, norm_type=1.0), "adam"),
    "3-norm": (dict(max_norm=0.3, norm_type=3.0), "adam"),
    "value": (dict(clip_value=0.02), "adam"),
}


def _compiled_options(clip):
    clip = clip or {}
    return {k: v for k, v in dict(clip_grad_norm=clip.get("max_norm"), norm_type=clip.get("norm_type", 2.0),
                                  clip_grad_value=clip.get("clip_value")).items() if v is not None}


def _clip_runs(clip, accumulate=1, make_optimizer=OPTIMIZERS["adam"], n=12, clip_with=_torch_clip):
    criterion = nn.CrossEntropyLoss()

    def loss_fn(out, y):
        return criterion(out, y) / accumulate

    batches = [(lz.from_numpy(x), lz.from_numpy(y)) for x, y in _batches(n=n, last=16)]
    runs = []
    for compiled in (False, True):
        lz.manual_seed(0)
        model = Net()
        optimizer = make_optimizer(model.parameters())
        if compiled:
            step = lz.jit.compile_train_step(model, loss_fn, optimizer, *batches[0], accumulate=accumulate,
                                             **_compiled_options(clip))
            runs.append((np.array([step(x, y).item() for x, y in batches]), None, model, step))
        else:
            losses, norms = _eager_accumulating_loop(model, loss_fn, optimizer, batches, accumulate, clip, clip_with)
            runs.append((losses, norms, model, None))
    return runs


@pytest.mark.parametrize("name", list(CLIPPING))
def test_clipping_inside_the_compiled_step_follows_torch_clipping(name):
    clip, optimizer = CLIPPING[name]
    (eager_losses, norms, eager_model, _), (losses, _, model, step) = _clip_runs(clip,
                                                                              make_optimizer=OPTIMIZERS[optimizer])
    if "max_norm" in clip:
        assert max(norms) > clip["max_norm"]  # the clipping acted
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5, atol=1e-6)
    for (n, p), q in zip(model.named_parameters(), eager_model.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=n)
    assert ("lz.min" in step.graph) and len(step._steps) == 1


@pytest.mark.parametrize("clip", [CLIPPING["norm"][0], CLIPPING["value"][0]], ids=["norm", "value"])
def test_clipping_compiled_follows_eager_nn_utils_clipping(clip):
    (eager_losses, _, eager_model, _), (losses, _, model, _) = _clip_runs(clip, accumulate=2, clip_with=_lezero_clip)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5, atol=1e-6)
    for (n, p), q in zip(model.named_parameters(), eager_model.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=n)


@pytest.mark.parametrize("accumulate,clip", [(3, None), (2, CLIPPING["norm"][0])], ids=["3 micro-batches", "2 clipped"])
def test_gradient_accumulation_compiled_follows_the_eager_loop(accumulate, clip):
    (eager_losses, _, eager_model, _), (losses, _, model, step) = _clip_runs(clip, accumulate)
    np.testing.assert_allclose(losses, eager_losses, rtol=1e-5, atol=1e-6)
    for (n, p), q in zip(model.named_parameters(), eager_model.parameters()):
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=n)
    assert len(step._steps) == min(accumulate, 3)  # the first, middle and last calls of a cycle
    assert all(p.grad is None for p in model.parameters())  # the cycle's update consumed them


def test_accumulated_gradients_are_in_p_grad_between_calls():
    lz.manual_seed(0)
    model = Net()
    optimizer = lz.optim.SGD(model.parameters(), lr=0.1)
    (x1, y1), (x2, y2) = [(lz.from_numpy(x), lz.from_numpy(y)) for x, y in _batches(n=2, last=16)]
    step = lz.jit.compile_train_step(model, nn.CrossEntropyLoss(), optimizer, x1, y1, accumulate=2)
    step(x1, y1)
    compiled_grad = model.fc1.weight.grad.numpy().copy()
    assert step.micro_batch == 1
    nn.CrossEntropyLoss()(model(x1), y1).backward()  # eager: the parameters have not moved yet
    np.testing.assert_allclose(compiled_grad * 2, model.fc1.weight.grad.numpy(), rtol=1e-5, atol=1e-7)
    before = model.fc1.weight.detach().numpy().copy()
    step(x2, y2)
    assert step.micro_batch == 0 and not np.allclose(before, model.fc1.weight.detach().numpy())
    with pytest.raises(ValueError, match="accumulate must be a positive number of micro-batches, got 0"):
        lz.jit.compile_train_step(model, nn.CrossEntropyLoss(), optimizer, x1, y1, accumulate=0)
    with pytest.raises(ValueError, match="clip_grad_norm must be a non-negative max norm, got -1"):
        lz.jit.compile_train_step(model, nn.CrossEntropyLoss(), optimizer, x1, y1, clip_grad_norm=-1)
    with pytest.raises(ValueError, match="norm_type must be positive or inf, got -inf"):
        lz.jit.compile_train_step(model, nn.CrossEntropyLoss(), optimizer, x1, y1, clip_grad_norm=1,
                                  norm_type=float("-inf"))
