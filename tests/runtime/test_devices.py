"""lezero.runtime.devices: naming devices, interpreter mode, and why cuda cannot run."""
from __future__ import annotations

import pytest
import torch

import lezero as lz
from lezero.runtime import devices
from lezero.runtime.devices import Device, DeviceError, device, require_device, torch_device


def test_device_specs():
    assert device("cpu") == Device("cpu") and device("cuda") == Device("cuda")
    assert device("cuda:1") == Device("cuda", 1) and str(device("cuda:1")) == "cuda:1"
    assert device(Device("cuda", 0)) is not None and device(torch.device("cuda", 2)) == Device("cuda", 2)
    assert device(torch.device("cpu")) == "cpu" and lz.device("cuda") == "cuda" and lz.device("cpu") != "cuda"
    assert repr(device("cuda:0")) == "device(type='cuda', index=0)" and repr(device("cpu")) == "device(type='cpu')"
    assert len({device("cuda"), "cuda", device("cuda")}) == 1
    for bad in ("gpu", "cuda:x", "cpu:3", 7):
        with pytest.raises(ValueError, match="unknown device .*: expected 'cpu', 'cuda' or 'cuda:N'"):
            device(bad)


def test_interpreter_mode_is_read_at_call_time(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert not devices.interpreter_mode()
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert devices.interpreter_mode()
    assert torch_device("cuda") == torch.device("cpu") and require_device("cuda:0") == Device("cuda", 0)


def test_no_gpu_says_what_to_do(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert not devices.cuda_available()
    assert require_device("cpu") == "cpu"
    with pytest.raises(DeviceError, match=r"^no CUDA GPU is available \(torch.cuda.is_available\(\) is False\); set "
                                          r"TRITON_INTERPRET=1 to run the cuda path on the CPU with Triton's "
                                          r"interpreter, or use device='cpu'$"):
        require_device("cuda")


def test_missing_packages_are_named(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(devices, "_missing_packages", lambda: ("triton",))
    assert not devices.cuda_available()
    with pytest.raises(DeviceError, match=r"device 'cuda' needs the 'triton' package \(pip install 'lezero\[gpu\]'\)"):
        require_device("cuda")
