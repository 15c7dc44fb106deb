"""Devices: where tensors live and compiled functions run (``lz.device``).

``device(spec)`` names one: ``"cpu"``, ``"cuda"`` / ``"cuda:0"``, a ``Device`` (returned as is) or a
``torch.device``.  The cuda path needs torch and triton, and either a CUDA GPU or **interpreter
mode**: ``TRITON_INTERPRET=1`` (read at call time, so tests set it before compiling) makes Triton
run every kernel in Python on the CPU, and then a "cuda" buffer is a torch CPU tensor
(``torch_device``).  ``require_device`` is the one place that says, clearly, why cuda cannot run.
"""
from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass

DEVICE_TYPES = ("cpu", "cuda")

NO_GPU = ("no CUDA GPU is available (torch.cuda.is_available() is False); set TRITON_INTERPRET=1 to run the "
          "cuda path on the CPU with Triton's interpreter, or use device='cpu'")


class DeviceError(RuntimeError):
    """A device that cannot be used here (no GPU, torch or triton missing, a bad index)."""


@dataclass(frozen=True)
class Device:
    """``type`` is ``"cpu"`` or ``"cuda"``; ``index`` the GPU's number (None: the current one).
    Equal to its string form (``lz.device("cuda") == "cuda"``), as PyTorch's devices."""

    type: str
    index: "int | None" = None

    def __str__(self) -> str:
        return self.type if self.index is None else f"{self.type}:{self.index}"

    def __repr__(self) -> str:
        return f"device(type='{self.type}')" if self.index is None else \
            f"device(type='{self.type}', index={self.index})"

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            try:
                other = device(other)
            except ValueError:
                return False
        return isinstance(other, Device) and (self.type, self.index) == (other.type, other.index)

    def __hash__(self) -> int:
        return hash(str(self))


_SPEC = re.compile(r"(cpu|cuda)(?::(\d+))?")


def device(spec) -> Device:
    """``spec`` as a ``Device``: ``"cpu"``, ``"cuda"``, ``"cuda:N"``, a ``Device``, or anything with
    ``type`` and ``index`` (a ``torch.device``).  ``ValueError`` for anything else."""
    if isinstance(spec, Device):
        return spec
    if isinstance(spec, str):
        match = _SPEC.fullmatch(spec.strip())
        if match is None or (match.group(1) == "cpu" and match.group(2) not in (None, "0")):
            raise ValueError(f"unknown device {spec!r}: expected 'cpu', 'cuda' or 'cuda:N'")
        index = match.group(2)
        return Device(match.group(1), int(index) if index is not None and match.group(1) == "cuda" else None)
    kind, index = getattr(spec, "type", None), getattr(spec, "index", None)
    if kind in DEVICE_TYPES:
        return Device(kind, index if kind == "cuda" else None)
    raise ValueError(f"unknown device {spec!r}: expected 'cpu', 'cuda' or 'cuda:N'")


@functools.cache
def _missing_packages() -> tuple:
    missing = []
    for name in ("torch", "triton"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    return tuple(missing)


def interpreter_mode() -> bool:
    """Whether ``TRITON_INTERPRET=1``: kernels run in Triton's interpreter on the CPU."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def cuda_available() -> bool:
    """Whether a CUDA GPU can run lezero's kernels (torch sees one and triton is importable)."""
    if _missing_packages():
        return False
    import torch

    return torch.cuda.is_available()


def require_device(spec) -> Device:
    """``device(spec)``, or ``DeviceError`` saying why it cannot run here."""
    d = device(spec)
    if d.type == "cpu":
        return d
    missing = _missing_packages()
    if missing:
        raise DeviceError(f"device '{d}' needs the {' and '.join(repr(m) for m in missing)} package"
                          f"{'s' if len(missing) > 1 else ''} (pip install 'lezero[gpu]')")
    if interpreter_mode():
        return d
    import torch

    if not torch.cuda.is_available():
        raise DeviceError(NO_GPU)
    if d.index is not None and d.index >= torch.cuda.device_count():
        raise DeviceError(f"device '{d}' does not exist: this machine has {torch.cuda.device_count()} CUDA GPU(s)")
    return d


def torch_device(spec):
    """The ``torch.device`` holding ``spec``'s buffers: the CPU for ``"cpu"`` and, in interpreter
    mode, for ``"cuda"`` too; else ``cuda:N``."""
    import torch

    d = device(spec)
    if d.type == "cpu" or interpreter_mode():
        return torch.device("cpu")
    return torch.device("cuda", d.index if d.index is not None else torch.cuda.current_device())
