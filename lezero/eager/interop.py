"""Arrays of other libraries as tensor storage: the one place a foreign input is converted.

Users arrive with torch tensors, numpy arrays, DLPack capsules and objects that speak the array
protocols (``__dlpack__``, ``__array__``: JAX, CuPy, ...).  ``storage_of`` turns any of them into
what a tensor holds (``lezero.eager.device_arrays``), sharing the value's memory wherever its layout
allows, as ``torch.from_numpy`` and ``torch.from_dlpack`` do: on the CPU a C-contiguous numpy array
(the same memory for a contiguous source; a copy otherwise, since kernels read contiguous
buffers), on cuda a torch tensor on the device (a torch cuda tensor is kept as is; another
library's cuda memory comes in through ``torch.from_dlpack``).  A value that is not an array (a
number, a list) gives ``None``: the caller decides (``lz.tensor`` copies Python data, an op input
is an error).  A torch bfloat16 tensor comes in through its bits (``device_arrays.numpy_of``: ml_dtypes'
bfloat16, the same memory).  An array lezero cannot hold (complex, another device) is a
``ForeignInputError`` that names what it got and what to pass, at the user's line.

The doors to it: ``lezero.eager.core.as_input`` (what every op, module, functional and jit input
goes through) and ``lezero.eager.creation`` (``lz.tensor`` copies, ``lz.as_tensor`` /
``lz.from_numpy`` / ``lz.from_dlpack`` share).  Export is ``Tensor.__dlpack__`` / ``__array__``.
"""
from __future__ import annotations

import sys

import numpy as np

from lezero.eager import device_arrays as _dev
from lezero.eager import dtypes as _dt
from lezero.eager.dispatch import OperatorError, user_location
from lezero.runtime.devices import require_device, torch_device

# DLPack's device types (dlpack.h DLDeviceType) that lezero can read
_DLPACK_CPU, _DLPACK_CUDA, _DLPACK_CUDA_HOST = 1, 2, 3
_ACCEPTED = "an lz.Tensor, a torch tensor, a numpy array, or any array with __dlpack__ or __array__"


class ForeignInputError(OperatorError, TypeError):
    """An input lezero cannot take as a tensor: ``model.py:3:5: error: ...`` naming what it got and
    what to pass, then the user's line.  A ``TypeError``, as PyTorch raises for wrong argument types."""


def is_torch_tensor(value) -> bool:
    """Whether ``value`` is a torch tensor (torch itself is not imported: a value of it means it is)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def storage_of(value, what: str):
    """``value`` (an array of another library) as a tensor's storage array, sharing its memory
    where the layout allows; ``None`` when ``value`` is not an array.  ``what`` names the API
    that asked, for errors."""
    if isinstance(value, np.ndarray):
        return _host_storage(value, "a numpy array", what)
    if isinstance(value, np.generic):
        return None  # numpy scalars are numbers
    if is_torch_tensor(value):
        return _torch_storage(value, what)
    if hasattr(value, "__dlpack__"):
        return _dlpack_storage(value, what)
    if type(value).__name__ == "PyCapsule":
        return _capsule_storage(value, what)
    if hasattr(value, "__array__"):
        return _host_storage(np.asarray(value), f"{describe(value)} (through __array__)", what)
    return None


def not_a_tensor(value, what: str) -> ForeignInputError:
    """The error for a value that is no array at all."""
    return ForeignInputError(f"{what}: expected a tensor, got {describe(value)}; pass {_ACCEPTED} "
                             f"(lz.tensor(data) makes one from Python data)", user_location())


def describe(value) -> str:
    """``value``'s type for a message: ``a str``, ``an object``, ``a pandas.DataFrame``."""
    cls = type(value)
    module = cls.__module__.split(".")[0]
    name = cls.__name__ if module == "builtins" else f"{module}.{cls.__qualname__}"
    return ("an " if name[0] in "aeiouAEIOU" else "a ") + name


def _host_storage(array: np.ndarray, described: str, what: str) -> np.ndarray:
    if np.dtype(array.dtype) not in _dev.KIND:
        supported = ", ".join(d.name for d in _dt.ALL)
        raise ForeignInputError(f"{what}: got {described} of dtype {array.dtype}, which lezero has no dtype for "
                                f"(it has {supported}); convert it first, e.g. to float32", user_location())
    return _dev.storage(array)


def _torch_storage(t, what: str):
    """A torch tensor's storage: its numpy view on the CPU (shared; ``.detach()`` first, since a
    graph does not cross frameworks), the tensor itself on cuda."""
    t = t.detach()
    _dev.torch()  # registers torch's dtypes in device_arrays' tables
    if t.dtype not in _dev.KIND:
        raise ForeignInputError(f"{what}: got a torch tensor of dtype {t.dtype}, which lezero has no dtype for; "
                                f"convert it first (t.float(), t.to(torch.float32))", user_location())
    if t.device.type == "cpu":
        return _dev.storage(_dev.numpy_of(t.resolve_conj().resolve_neg()))
    if t.device.type != "cuda":
        raise ForeignInputError(f"{what}: got a torch tensor on {t.device}; lezero takes cpu and cuda tensors "
                                f"(pass t.cpu())", user_location())
    device = require_device(_dev.CUDA)
    return t.to(torch_device(device)).contiguous()


def _dlpack_storage(value, what: str):
    device_type = value.__dlpack_device__()[0]
    if device_type in (_DLPACK_CPU, _DLPACK_CUDA_HOST):
        try:
            array = np.from_dlpack(value)
        except (BufferError, TypeError, RuntimeError) as e:
            raise ForeignInputError(f"{what}: cannot read {describe(value)} through DLPack: {e}", user_location()) \
                from None
        return _host_storage(array, f"{describe(value)} (through DLPack)", what)
    if device_type == _DLPACK_CUDA:
        return _torch_storage(_dev.torch().from_dlpack(value), what)
    raise ForeignInputError(f"{what}: got {describe(value)} on DLPack device type {device_type}; lezero reads cpu "
                            f"(1) and cuda (2) memory: copy it to the host first", user_location())


class _Capsule:
    """A bare DLPack capsule (``torch.utils.dlpack.to_dlpack``'s, the protocol before
    ``__dlpack__``) as an object numpy's ``from_dlpack`` reads; numpy itself refuses device memory."""

    def __init__(self, capsule):
        self.capsule = capsule

    def __dlpack__(self, **_):
        return self.capsule

    def __dlpack_device__(self):
        return (_DLPACK_CPU, 0)


def _capsule_storage(capsule, what: str):
    """A capsule is consumed once: torch reads one on any device when it is loaded, numpy host ones."""
    if "torch" in sys.modules:
        return _torch_storage(sys.modules["torch"].utils.dlpack.from_dlpack(capsule), what)
    return _dlpack_storage(_Capsule(capsule), what)
