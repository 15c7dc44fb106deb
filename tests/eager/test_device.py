"""Eager tensors on cuda under Triton's interpreter (``TRITON_INTERPRET=1``: the cuda path runs on
the CPU, a cuda tensor holds a torch CPU tensor): placement, moves, creation, ops and autograd
against the CPU path; modules moved and saved; mixing devices and asking for cuda where it
cannot run are clear errors."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

import lezero as lz
from lezero import nn
from lezero.eager.dispatch import OperatorError

# numpy's warnings for the lanes a kernel computes and masks off (log of 0 and such)
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning:triton.runtime.interpreter")


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def test_to_round_trips_and_makes_tensors_on_cuda():
    x = lz.randn(3, 4)
    g = x.to("cuda")
    assert g.device == lz.device("cuda") and g.device.type == "cuda" and g.is_cuda and not x.is_cuda
    assert isinstance(g._data, torch.Tensor) and g.dtype is lz.float32 and g.shape == (3, 4) and g.numel() == 12
    assert g.to("cuda") is g and x.to("cpu") is x and x.cpu() is x
    back = g.cpu()
    assert back.device == "cpu" and isinstance(back._data, np.ndarray)
    np.testing.assert_array_equal(back.numpy(), x.numpy())
    host = g.numpy()                      # a copy in host memory
    host[0, 0] = 100.0
    assert g[0, 0].item() == x[0, 0].item() and g.tolist() == x.tolist()
    assert x.cuda().device == "cuda" and x.to(lz.device("cuda:0")).is_cuda
    assert x.to("cuda", lz.float64).dtype is lz.float64 and g.to("cpu", lz.int32).dtype is lz.int32
    assert x.to(g).is_cuda and g.to(torch.device("cpu")).device == "cpu"
    assert "device='cuda'" in repr(g) and lz.cuda.is_available()
    for t in (lz.zeros(2, 3, device="cuda"), lz.ones(2, device=lz.device("cuda")), lz.randn(2, device="cuda"),
              lz.tensor([[1, 2]], device="cuda"), lz.arange(4, device="cuda"), lz.full((2,), 7.0, device="cuda"),
              lz.zeros_like(g), lz.ones_like(g), g.new_zeros(2), lz.as_tensor(np.ones(3), device="cuda")):
        assert t.is_cuda, t
    assert lz.tensor([[1, 2]], device="cuda").tolist() == [[1, 2]] and lz.arange(4, device="cuda").dtype is lz.int64


def test_eager_ops_on_cuda_equal_the_cpu_path():
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((5, 3)).astype(np.float32)
    cases = {
        "arithmetic": lambda a, b: (a * 2.5 - 1) / (a.abs() + 1),
        "matmul": lambda a, b: a @ b,
        "softmax": lambda a, b: a.softmax(-1),
        "reduce": lambda a, b: a.sum(1, keepdim=True) + a.amax(0),
        "where": lambda a, b: lz.where(a > 0, a, 0.5),
        "index": lambda a, b: a[1:3, ::2] * a[[0, 2]][:, :3].sum(),
        "cast": lambda a, b: (a > 0).long().sum(0).float(),
        "in place": lambda a, b: a.clone().mul_(3).add_(1),
    }
    for name, f in cases.items():
        want = f(lz.from_numpy(a_np), lz.from_numpy(b_np))
        got = f(lz.from_numpy(a_np).to("cuda"), lz.from_numpy(b_np).to("cuda"))
        assert got.is_cuda and got.dtype is want.dtype and got.shape == want.shape, name
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-6, err_msg=name)


def test_backward_on_cuda_equals_the_cpu_gradients():
    rng = np.random.default_rng(1)
    x_np, w_np = rng.standard_normal((3, 4)).astype(np.float32), rng.standard_normal((4,)).astype(np.float32)
    grads = {}
    for device in ("cpu", "cuda"):
        x = lz.from_numpy(x_np).to(device).requires_grad_()
        w = lz.from_numpy(w_np).to(device).requires_grad_()
        loss = ((x.tanh() * w).sum(1) ** 2).mean()
        loss.backward()
        assert x.grad.device == device and w.grad.device == device
        grads[device] = (loss.item(), x.grad.numpy(), w.grad.numpy())
    np.testing.assert_allclose(grads["cuda"][0], grads["cpu"][0], rtol=1e-6)
    for got, want in zip(grads["cuda"][1:], grads["cpu"][1:]):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_mixing_devices_is_an_error_at_the_users_line():
    g, c = lz.ones(2, 3, device="cuda"), lz.ones(2, 3)
    with pytest.raises(OperatorError) as info:
        g + c
    text = str(info.value)
    assert "add: expected all tensors to be on the same device, but found at least two devices, cuda and cpu" in text
    assert "test_device.py" in text and "g + c" in text
    with pytest.raises(OperatorError, match="matmul: expected all tensors to be on the same device"):
        lz.matmul(c, g.t())
    model = nn.Linear(3, 2).to("cuda")
    with pytest.raises(OperatorError, match="linear: expected all tensors to be on the same device"):
        model(c)
    leaf = lz.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="moving a tensor that requires grad to cuda is not recorded by autograd"):
        leaf.to("cuda")


def test_without_a_gpu_and_outside_the_interpreter_cuda_raises_device_error(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    message = ("no CUDA GPU is available (torch.cuda.is_available() is False); set TRITON_INTERPRET=1 to run the "
               "cuda path on the CPU with Triton's interpreter, or use device='cpu'")
    assert not lz.cuda.is_available()
    for make in (lambda: lz.ones(2).to("cuda"), lambda: lz.zeros(2, device="cuda"), lambda: lz.ones(2).cuda(),
                 lambda: nn.Linear(2, 2).to("cuda")):
        with pytest.raises(lz.DeviceError) as info:
            make()
        assert str(info.value) == message


def test_module_to_cuda_keeps_its_parameters_and_saves_to_the_host(tmp_path):
    lz.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3))
    want = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    weight = model[0].weight
    assert model.to("cuda") is model and model[0].weight is weight and weight.is_cuda and weight.requires_grad
    assert all(t.is_cuda for t in model.state_dict().values())        # parameters and buffers
    lz.save(model.state_dict(), tmp_path / "model.lz")
    loaded = lz.load(tmp_path / "model.lz")
    assert set(loaded) == set(want)
    for k, v in loaded.items():
        assert not v.is_cuda
        np.testing.assert_array_equal(v.numpy(), want[k])
    on_device = lz.load(tmp_path / "model.lz", map_location="cuda")
    assert all(v.is_cuda for v in on_device.values())
    fresh = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3)).cuda()
    fresh.load_state_dict(loaded)                                      # host values into cuda parameters
    assert fresh[0].weight.is_cuda
    np.testing.assert_array_equal(fresh[0].weight.detach().numpy(), want["0.weight"])
    copied = copy.deepcopy(fresh)                                      # pickles keep the device
    assert copied[0].weight.is_cuda and isinstance(copied[0].weight, nn.Parameter)
    np.testing.assert_array_equal(copied[1].running_var.numpy(), want["1.running_var"])
    model.cpu()
    assert not weight.is_cuda
    np.testing.assert_array_equal(weight.detach().numpy(), want["0.weight"])
