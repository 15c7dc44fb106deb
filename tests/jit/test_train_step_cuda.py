"""The seed program's SimpleMLP trained on the cuda path (under Triton's interpreter,
``TRITON_INTERPRET=1``) equals the CPU path: the eager loop (``model.to("cuda")``, forward,
CrossEntropyLoss, backward, Adam), losses and parameters within 1e-5 (the compiled step on every
backend target is tests/backend/test_backend_train_step.py); a model traced on cuda runs its graph
there and equals eager CPU; dropout masks on cuda are the CPU's.  (Why the MLP is small:
``support.eager_testing.SimpleMLP``.)"""
from __future__ import annotations

import numpy as np
import pytest

import lezero as lz
from lezero import nn

from support.eager_testing import SimpleMLP, assert_same_training, teacher_batches, train_simple_mlp, training_losses

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning:triton.runtime.interpreter")


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def test_the_eager_training_loop_on_cuda_equals_the_cpu_loop():
    got = train_simple_mlp("cuda", compiled=False)
    assert all(p.is_cuda and got[2].state[p]["exp_avg"].is_cuda for p in got[1].parameters())
    assert_same_training(got, train_simple_mlp("cpu", compiled=False))


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


def test_the_seed_mlp_step_on_cuda_equals_the_reference_interpreter(monkeypatch):
    """The seed's SimpleMLP at its own sizes (784 -> 256 -> 10, batch 64): the whole compiled step
    (forward, cross-entropy, autodiff, Adam) is one IR function; run on the cuda path, its results
    (loss, new parameters, new moments) equal the reference interpreter's on the same inputs."""
    from lezero.ir.interpreter import interpret
    from lezero.jit import train_step

    captured = []  # (module, entry, inputs, results) of every run of the step function
    compile_for = train_step.compile_for

    class Recording:
        """A compiled step whose runner keeps a copy of what it was given and what it gave."""

        def __init__(self, module, entry, device):
            self.module, self.entry = module, entry
            self.compiled = compile_for(module, entry, device)
            self.func = self.compiled.func

        def runner(self, shapes):
            run = self.compiled.runner(shapes)

            def recorded(inputs, *rest):
                results = run(inputs, *rest)
                captured.append((self.module, self.entry, [t.cpu().numpy().copy() for t in inputs],
                                 [t.cpu().numpy().copy() for t in results]))
                return results
            return recorded

    monkeypatch.setattr(train_step, "compile_for", Recording)
    lz.manual_seed(0)
    model = SimpleMLP(784, 256, 10).to("cuda")
    optimizer = lz.optim.Adam(model.parameters(), lr=1e-3)
    rng = np.random.default_rng(0)
    x = lz.from_numpy(rng.standard_normal((64, 784)).astype(np.float32)).to("cuda")
    y = lz.from_numpy(rng.integers(0, 10, 64)).to("cuda")
    step = lz.jit.compile_train_step(model, nn.CrossEntropyLoss(), optimizer, x, y)
    step(x, y)
    step(x, y)  # the second step: Adam's moments are no longer zero
    assert len(captured) == 2
    module, entry, inputs, results = captured[-1]
    arguments = module.lookup(entry).arguments  # (the lean runner takes a scalar as one element)
    want = interpret(module, entry, *[a.reshape(arg.type.shape) for a, arg in zip(inputs, arguments)])
    assert len(results) == len(want) == 1 + 3 * 4  # the loss, 4 parameters, 2 moments each
    for got, expected in zip(results, want):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


class DropoutMLP(SimpleMLP):
    def forward(self, x):
        return self.fc2(nn.functional.dropout(nn.functional.relu(self.fc1(x)), 0.4))


def _train_dropout(device: str, compiled: bool):
    lz.manual_seed(0)
    model = DropoutMLP().to(device)
    optimizer = lz.optim.SGD(model.parameters(), lr=0.1)
    criterion = nn.CrossEntropyLoss()
    batches = [(lz.from_numpy(x).to(device), lz.from_numpy(y).to(device)) for x, y in teacher_batches()]
    lz.manual_seed(7)  # the masks' seed
    step = lz.jit.compile_train_step(model, criterion, optimizer, *batches[0]) if compiled else None
    return training_losses(model, criterion, optimizer, batches, step)


def test_dropout_masks_on_cuda_are_the_cpu_masks():
    """The state argument lives on the device; Philox's bits are the same there (Triton's
    ``tl.umulhi``), so eager and compiled cuda training follow the CPU loop."""
    want = _train_dropout("cpu", compiled=False)
    np.testing.assert_allclose(_train_dropout("cuda", compiled=False), want, rtol=1e-5)
    np.testing.assert_allclose(_train_dropout("cuda", compiled=True), want, rtol=1e-5)
    assert len(set(np.round(want, 6))) == len(want)


def _autocast_losses(device: str, convolutional: bool = False) -> list:
    """Five steps' losses of a small model's compiled autocast(bf16) step on ``device``: an MLP with
    Adam, or (``convolutional``) benchmarks/gpu.py's amp path in miniature: a bottleneck-like conv
    block (convs without bias, BatchNorm in eval mode, relu, a residual add), max and adaptive
    average pooling, a linear head, SGD with momentum."""
    lz.manual_seed(0)
    rng = np.random.default_rng(0)
    if convolutional:
        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.stem = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(4),
                                          nn.ReLU(), nn.MaxPool2d(3, stride=2, padding=1))
                self.conv = nn.Sequential(nn.Conv2d(4, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4))
                self.head = nn.Sequential(nn.AdaptiveAvgPool2d((1, 1)), nn.Flatten(), nn.Linear(4, 3))

            def forward(self, x):
                x = self.stem(x)
                return self.head(nn.functional.relu(self.conv(x) + x))

        model = Block().eval().to(device)
        optimizer = lz.optim.SGD(model.parameters(), lr=1e-1, momentum=0.9)
        x = lz.tensor(rng.standard_normal((2, 3, 16, 16)).astype(np.float32)).to(device)
        y = lz.tensor(rng.integers(0, 3, 2)).to(device)
    else:
        model = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 4)).to(device)
        optimizer = lz.optim.Adam(model.parameters(), lr=1e-2)
        x = lz.tensor(rng.standard_normal((8, 32)).astype(np.float32)).to(device)
        y = lz.tensor(rng.integers(0, 4, 8)).to(device)
    with lz.autocast(device, dtype=lz.bfloat16):
        step = lz.jit.compile_train_step(model, nn.functional.cross_entropy, optimizer, x, y)
    return [float(step(x, y).item()) for _ in range(5)]


def test_an_autocast_bf16_train_step_on_cuda_follows_the_cpu_step():
    """autocast(bf16) on cuda: 16-bit bf16 buffers, the casts of the layers' inputs and weights fused
    into the Triton matmuls; five Adam steps' losses within 1e-5 of the CPU's (float32 storage, its
    GEMM; the sums' order differs, bf16 rounds them once)."""
    np.testing.assert_allclose(_autocast_losses("cuda"), _autocast_losses("cpu"), rtol=1e-5)


def test_an_autocast_bf16_conv_train_step_on_cuda_follows_the_cpu_step():
    """The amp benchmark's convolutional path (benchmarks/gpu.py --sections amp) in miniature: bf16
    convs (their casts kernels of their own), BatchNorm in eval mode, pooling and a residual add on
    16-bit device buffers; five SGD steps' losses follow the CPU's, and they fall (it learns)."""
    cuda, cpu = _autocast_losses("cuda", convolutional=True), _autocast_losses("cpu", convolutional=True)
    np.testing.assert_allclose(cuda, cpu, rtol=1e-4)  # measured 2.7e-6: the sums differ in order
    assert cuda[-1] < cuda[0]
