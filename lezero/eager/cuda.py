"""``lz.cuda``: whether tensors can go to the cuda device (PyTorch's ``torch.cuda`` names)."""
from __future__ import annotations

from lezero.runtime.devices import DeviceError, require_device


def is_available() -> bool:
    """Whether ``x.to("cuda")`` works here: a CUDA GPU, or Triton's interpreter mode
    (``TRITON_INTERPRET=1``, the cuda path run on the CPU); torch and triton installed."""
    try:
        require_device("cuda")
    except DeviceError:
        return False
    return True
