"""Sliding-window geometry shared by conv2d and the pools: attribute checks and output sizes."""
from __future__ import annotations

import math

from lezero.ir.opdef import OpError


def check_window_attrs(spatial_rank: int, **attrs) -> None:
    """Lengths and signs of ``kernel``/``strides``/``dilations`` (positive) and ``pads``
    (``[begin..., end...]``, non-negative)."""
    for key, values in attrs.items():
        want = 2 * spatial_rank if key == "pads" else spatial_rank
        if len(values) != want:
            raise OpError(f"attribute '{key}' must have {want} values, got {list(values)}")
        if key == "pads":
            if any(v < 0 for v in values):
                raise OpError(f"attribute 'pads' values must be non-negative, got {list(values)}")
        elif any(v <= 0 for v in values):
            raise OpError(f"attribute '{key}' values must be positive, got {list(values)}")


def window_output_size(size, kernel: int, stride: int = 1, pad_begin: int = 0, pad_end: int = 0,
                       dilation: int = 1, ceil_mode: bool = False, dim: int | None = None):
    """Output length of a window sliding over ``size`` (None: dynamic) inputs.

    ``floor((size + pads - dilation*(kernel-1) - 1) / stride) + 1``, or ``ceil`` in ceil mode,
    where (as in PyTorch and ONNX) a last window starting past the input and the begin padding is
    dropped.
    """
    if size is None:
        return None
    effective = dilation * (kernel - 1) + 1
    padded = size + pad_begin + pad_end
    if padded < effective:
        where = f" in dim {dim}" if dim is not None else ""
        raise OpError(f"window of size {effective} is larger than the padded input size {padded}{where}")
    span = padded - effective
    out = (math.ceil(span / stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_begin:
        out -= 1
    return out
