"""The seed program's SimpleMLP trained on the cuda path (under Triton's interpreter,
``TRITON_INTERPRET=1``) equals the CPU path: the eager loop (``model.to("cuda")``, forward,
CrossEntropyLoss, backward, Adam) and ``compile_train_step``, losses and parameters within 1e-5;
a model traced on cuda runs its graph there and equals eager CPU.

The layers are the seed's (Linear, ReLU, Linear) at small sizes: the interpreter runs every
program instance in Python, and Adam divides each gradient element by its own magnitude, so at
784x256 the few weights whose gradient is near ``eps`` turn float summation-order differences
(1e-7) into 1e-4 parameter differences, which says nothing about the cuda path."""
from __future__ import annotations

import numpy as np
import pytest

import lezero as lz
from lezero import nn

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning:triton.runtime.interpreter")

STEPS = 3


class SimpleMLP(nn.Module):
    def __init__(self, n_in=64, hidden=32, n_out=10):
        super().__init__()
        self.fc1 = nn.Linear(n_in, hidden)
        self.fc2 = nn.Linear(hidden, n_out)

    def forward(self, x):
        x = nn.functional.relu(self.fc1(x))
        return self.fc2(x)


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def _batches(batch=8, last=5):
    """A learnable task (labels from a fixed linear teacher), the last batch smaller."""
    rng = np.random.default_rng(0)
    teacher = rng.standard_normal((64, 10))
    out = []
    for i in range(STEPS):
        x = rng.standard_normal((last if i == STEPS - 1 else batch, 64)).astype(np.float32)
        out.append((x, (x @ teacher).argmax(axis=1)))
    return out


def _train(device: str, compiled: bool):
    lz.manual_seed(0)
    model = SimpleMLP().to(device)
    optimizer = lz.optim.Adam(model.parameters(), lr=1e-2)
    criterion = nn.CrossEntropyLoss()
    batches = [(lz.from_numpy(x).to(device), lz.from_numpy(y).to(device)) for x, y in _batches()]
    step = lz.jit.compile_train_step(model, criterion, optimizer, *batches[0]) if compiled else None
    losses = []
    for x, y in batches:
        if step is not None:
            loss = step(x, y)
        else:
            optimizer.zero_grad()
            loss = criterion(model(x), y)
            loss.backward()
            optimizer.step()
        assert loss.device == device
        losses.append(loss.item())
    return np.array(losses), model, optimizer


def _assert_same_training(got, want):
    (losses, model, optimizer), (want_losses, want_model, want_optimizer) = got, want
    np.testing.assert_allclose(losses, want_losses, rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), want_model.parameters()):
        assert p.is_cuda and optimizer.state[p]["exp_avg"].is_cuda, name
        np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), rtol=1e-5, atol=1e-5, err_msg=name)
        np.testing.assert_allclose(optimizer.state[p]["exp_avg_sq"].numpy(),
                                   want_optimizer.state[q]["exp_avg_sq"].numpy(), rtol=1e-5, atol=1e-8, err_msg=name)


def test_the_eager_training_loop_on_cuda_equals_the_cpu_loop():
    _assert_same_training(_train("cuda", compiled=False), _train("cpu", compiled=False))


def test_the_compiled_train_step_on_cuda_equals_the_cpu_step():
    _assert_same_training(_train("cuda", compiled=True), _train("cpu", compiled=True))


def test_a_model_traced_on_cuda_runs_there_and_equals_eager_cpu(tmp_path):
    lz.manual_seed(0)
    model = SimpleMLP()
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    want = model(lz.from_numpy(x)).detach().numpy()
    model.to("cuda")
    traced = lz.jit.trace(model, lz.from_numpy(x).to("cuda"))
    out = traced(lz.from_numpy(x[:3]).to("cuda"))            # another batch size: the batch dim is dynamic
    assert out.is_cuda
    np.testing.assert_allclose(out.numpy(), want[:3], rtol=1e-5, atol=1e-6)
    from_numpy = traced(x)                                      # numpy in, numpy out
    assert isinstance(from_numpy, np.ndarray)
    np.testing.assert_allclose(from_numpy, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(lz.OperatorError, match="expected all tensors to be on the same device, but found at least "
                                               "two devices, cuda and cpu"):
        traced(lz.from_numpy(x))
    lz.jit.save(traced, tmp_path / "mlp.lzt")                   # the weights copied to the host
    np.testing.assert_allclose(lz.jit.load(tmp_path / "mlp.lzt")(x), want, rtol=1e-5, atol=1e-6)
    model.cpu()                                                 # the traced module follows its parameters
    back = traced(lz.from_numpy(x))
    assert not back.is_cuda
    np.testing.assert_allclose(back.numpy(), want, rtol=1e-5, atol=1e-6)
