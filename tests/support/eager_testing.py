"""What the eager-frontend tests share: run a function on lezero and
on torch with the same float64 inputs, compare results and input gradients; copy modules'
weights across through their state dicts."""
from __future__ import annotations

import numpy as np
import torch

import lezero as lz

F64 = dict(rtol=1e-9, atol=1e-11)
F32 = dict(rtol=2e-5, atol=2e-6)


def flat(out) -> list:
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in flat(o)]
    return [out]


def assert_same(lz_value, torch_value, tol=F64, what: str = "") -> None:
    got = lz_value.detach().numpy() if isinstance(lz_value, lz.Tensor) else np.asarray(lz_value)
    want = torch_value.detach().numpy() if isinstance(torch_value, torch.Tensor) else np.asarray(torch_value)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != torch's {want.shape}"
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), err_msg=what, **tol)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def compare(lz_fn, torch_fn, *arrays, grad: bool = True, tol=F64, seed: int = 0):
    """``lz_fn`` and ``torch_fn`` on the same inputs (numpy arrays; float ones require grad when
    ``grad``): results equal, and for a random cotangent on every float result, the gradients of
    every float input equal."""
    def inputs(lib):
        return [lib.tensor(a, requires_grad=grad and a.dtype.kind == "f") if isinstance(a, np.ndarray) else a
                for a in arrays]
    lz_in, torch_in = inputs(lz), inputs(torch)
    lz_out, torch_out = flat(lz_fn(*lz_in)), flat(torch_fn(*torch_in))
    assert len(lz_out) == len(torch_out)
    for i, (l, t) in enumerate(zip(lz_out, torch_out)):
        assert str(l.dtype).split(".")[-1] == str(t.dtype).split(".")[-1], f"result {i}: {l.dtype} vs {t.dtype}"
        assert_same(l, t, tol, f"result {i}")
    if not grad:
        return lz_out
    rng = np.random.default_rng(seed)
    pairs = [(l, t) for l, t in zip(lz_out, torch_out) if t.requires_grad]
    assert pairs, "nothing to differentiate"
    cotangents = [rng.standard_normal(t.shape) for _, t in pairs]
    lz.autograd.backward([l for l, _ in pairs], [lz.tensor(c, dtype=l.dtype) for (l, _), c in zip(pairs, cotangents)])
    torch.autograd.backward([t for _, t in pairs], [torch.tensor(c, dtype=t.dtype) for (_, t), c in
                                                    zip(pairs, cotangents)])
    for i, (l, t) in enumerate(zip(lz_in, torch_in)):
        if isinstance(t, torch.Tensor) and t.requires_grad:
            if t.grad is None:
                assert l.grad is None or not np.any(l.grad.numpy()), f"input {i}: torch has no gradient"
            else:
                assert l.grad is not None, f"input {i}: no gradient"
                assert_same(l.grad, t.grad, tol, f"gradient of input {i}")
    return lz_out


def copy_weights(torch_module: torch.nn.Module, lz_module) -> None:
    """``torch_module``'s state dict into ``lz_module`` through numpy (names and layouts must match)."""
    lz_module.load_state_dict({k: v.detach().numpy() for k, v in torch_module.state_dict().items()})


def assert_same_grads(torch_module, lz_module, tol=F64) -> None:
    lz_params = dict(lz_module.named_parameters())
    for name, p in torch_module.named_parameters():
        assert name in lz_params, name
        assert_same(lz_params[name].grad, p.grad, tol, f"gradient of {name}")


def training_losses(model, loss_fn, optimizer, batches, step=None, after_each=None, check=None) -> np.ndarray:
    """The losses of a training loop over ``batches`` (pairs of tensors): each through the compiled
    ``step`` when given, else eagerly (zero_grad, forward, backward, optimizer step); ``check(loss)``
    and ``after_each()`` (a scheduler's step) run after every batch."""
    losses = []
    for x, y in batches:
        if step is not None:
            loss = step(x, y)
        else:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
        if check is not None:
            check(loss)
        losses.append(loss.item())
        if after_each is not None:
            after_each()
    return np.array(losses)


# --- the seed's SimpleMLP on a small learnable task (the train-step tests on every device) --------

class SimpleMLP(lz.nn.Module):
    """The seed program's layers (Linear, ReLU, Linear), at small sizes by default: Triton's
    interpreter runs every program instance in Python, and Adam divides each gradient element by its
    own magnitude, so at 784x256 the few weights whose gradient is near ``eps`` turn float
    summation-order differences (1e-7) into 1e-4 parameter differences."""

    def __init__(self, n_in=64, hidden=32, n_out=10):
        super().__init__()
        self.fc1 = lz.nn.Linear(n_in, hidden)
        self.fc2 = lz.nn.Linear(hidden, n_out)

    def forward(self, x):
        return self.fc2(lz.nn.functional.relu(self.fc1(x)))


def teacher_batches(steps=3, batch=8, last=5, n_in=64, n_out=10, seed=0) -> list:
    """(x, labels) numpy pairs of a learnable task (labels from a fixed linear teacher), the last
    batch smaller, as an epoch's last batch is."""
    rng = np.random.default_rng(seed)
    teacher = rng.standard_normal((n_in, n_out))
    out = []
    for i in range(steps):
        x = rng.standard_normal((last if i == steps - 1 else batch, n_in)).astype(np.float32)
        out.append((x, (x @ teacher).argmax(axis=1)))
    return out


def train_simple_mlp(device: str, compiled: bool):
    """(losses, model, optimizer) of SimpleMLP trained with Adam on ``teacher_batches`` on
    ``device``, eagerly or through ``compile_train_step``; every loss must be on ``device``."""
    lz.manual_seed(0)
    model = SimpleMLP().to(device)
    optimizer = lz.optim.Adam(model.parameters(), lr=1e-2)
    criterion = lz.nn.CrossEntropyLoss()
    batches = [(lz.from_numpy(x).to(device), lz.from_numpy(y).to(device)) for x, y in teacher_batches()]
    step = lz.jit.compile_train_step(model, criterion, optimizer, *batches[0]) if compiled else None

    def on_device(loss):
        assert loss.device == lz.device(device)

    return training_losses(model, criterion, optimizer, batches, step, check=on_device), model, optimizer


def assert_same_training(got, want) -> None:
    """Two ``train_simple_mlp`` results agree: losses, parameters and Adam's second moments."""
    (losses, model, optimizer), (want_losses, want_model, want_optimizer) = got, want
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), want_model.parameters()):
        np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().cpu().numpy(), rtol=1e-5, atol=1e-5,
                                   err_msg=name)
        np.testing.assert_allclose(optimizer.state[p]["exp_avg_sq"].cpu().numpy(),
                                   want_optimizer.state[q]["exp_avg_sq"].cpu().numpy(), rtol=1e-5, atol=1e-8,
                                   err_msg=name)
