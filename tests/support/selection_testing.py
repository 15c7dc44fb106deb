"""Inputs that test an ordering (topk, sort): shared by the kernel tests of both backends and the
eager sort tests."""
from __future__ import annotations

import numpy as np


def ties_and_nan(shape, dtype, rng) -> np.ndarray:
    """Small integers (many ties), some nan, +-inf and -0.0 (equal to 0.0: the index decides)."""
    x = rng.integers(-2, 3, shape).astype(np.float64)
    r = rng.random(shape)
    x[r < 0.1] = np.nan
    x[(r >= 0.1) & (r < 0.15)] = np.inf
    x[(r >= 0.15) & (r < 0.2)] = -np.inf
    x[(r >= 0.2) & (r < 0.3)] = -0.0
    return x.astype(dtype)
