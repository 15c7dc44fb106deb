"""How element types live in numpy arrays, shared by the references and the interpreter.

numpy has no bfloat16: a bf16 value is a float32 rounded to bf16 (round to nearest, ties to
even), so every bf16 result goes through ``to_storage``.  f16 accumulates in f32 (as the real
kernels do) in reductions, matmul and convolution.
"""
from __future__ import annotations

import numpy as np

from lezero.ir.types import ElementType


def round_to_bf16(array) -> np.ndarray:
    """float32 values rounded to the nearest bf16 (ties to even), kept in float32; nan stays nan."""
    a = np.asarray(array, dtype=np.float32)
    bits = a.view(np.uint32)
    lsb = (bits >> 16) & np.uint32(1)
    rounded = ((bits + np.uint32(0x7FFF) + lsb) & np.uint32(0xFFFF0000)).view(np.float32)
    return np.where(np.isnan(a), a, rounded).astype(np.float32)


def to_storage(array, element_type: ElementType) -> np.ndarray:
    """``array`` as ``element_type``'s numpy storage (float -> int truncates toward zero)."""
    with np.errstate(invalid="ignore", over="ignore"):
        out = np.asarray(array).astype(element_type.numpy_dtype, copy=False)
    return round_to_bf16(out) if element_type.name == "bf16" else out


def accumulator_dtype(dtype) -> np.dtype:
    """The dtype to accumulate in: f16 sums in f32, everything else in its own dtype."""
    dtype = np.dtype(dtype)
    return np.dtype(np.float32) if dtype == np.float16 else dtype


def lowest(dtype):
    """The identity of max: -inf for floats, the smallest integer otherwise."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return dtype.type(-np.inf)
    if dtype.kind == "b":
        return False
    return np.iinfo(dtype).min


def highest(dtype):
    """The identity of min: +inf for floats, the largest integer otherwise."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return dtype.type(np.inf)
    if dtype.kind == "b":
        return True
    return np.iinfo(dtype).max
