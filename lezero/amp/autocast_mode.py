"""``lz.autocast`` / ``lz.amp.autocast``: PyTorch's context manager (and decorator) for mixed precision.

``with lz.autocast(device_type="cpu", dtype=lz.bfloat16):`` casts the inputs of the ops
``lezero.passes.autocast.AUTOCAST_POLICY`` names for that device type, on that device's tensors:
eager ops through the hot path's hook (``lezero.eager.autocast``), and a ``lz.jit.trace`` or
``lz.jit.compile_train_step`` made inside it through the ``autocast`` pass on the traced graph
(the compiled model or step keeps its mixed precision wherever it is called later).  The default
low type is PyTorch's: bf16 on the CPU, f16 on cuda.  Regions nest; ``enabled=False`` turns
autocast off inside.  ``cache_enabled`` is accepted for PyTorch's signature; casts are not cached.
"""
from __future__ import annotations

import contextlib

from lezero.eager import dtypes as _dt
from lezero.eager.autocast import AutocastState
from lezero.eager.core import Mode

_DEFAULT_DTYPE = {"cpu": _dt.bfloat16, "cuda": _dt.float16}


class autocast(contextlib.ContextDecorator):  # noqa: N801 - PyTorch's spelling
    def __init__(self, device_type: str, dtype=None, enabled: bool = True, cache_enabled: bool | None = None):
        if not isinstance(device_type, str):
            raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
        self.device = device_type
        self.fast_dtype = _DEFAULT_DTYPE.get(device_type, _dt.bfloat16) if dtype is None else _dt.as_dtype(dtype)
        self._enabled = enabled
        self._state = AutocastState(device_type, self.fast_dtype) if enabled else None
        self._saved = []

    def __enter__(self):
        self._saved.append(Mode.autocast)
        Mode.autocast = self._state
        return self

    def __exit__(self, *exc) -> bool:
        Mode.autocast = self._saved.pop()
        return False


def is_autocast_enabled(device_type: str | None = None) -> bool:
    """Whether an autocast region is active (for ``device_type``, when given)."""
    state = Mode.autocast
    return state is not None and (device_type is None or state.device_type == device_type)


def get_autocast_dtype(device_type: str):
    """The low dtype of the active region for ``device_type`` (PyTorch's default when none is)."""
    state = Mode.autocast
    if state is not None and state.device_type == device_type:
        return state.dtype
    return _DEFAULT_DTYPE.get(device_type, _dt.bfloat16)
