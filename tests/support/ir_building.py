"""Helpers every test layer shares (tests/ is on pytest's pythonpath, set in pyproject.toml):
build a function with the Builder, make test data."""
from __future__ import annotations

import numpy as np

from lezero.ir import Builder, FuncOp, FunctionType, ModuleOp


def build(arg_types, body, name="f") -> ModuleOp:
    """A module with ``@name(arg_types)`` returning ``body(builder, *args)`` (a value or a list)."""
    func = FuncOp(name, FunctionType(list(arg_types), []))
    b = Builder.at_end(func.entry_block)
    results = body(b, *func.arguments)
    results = list(results) if isinstance(results, (list, tuple)) else [results]
    b.create("func.return", results, result_types=[])
    func.update_function_type()
    return ModuleOp([func])


def random_array(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Test data: normal floats, small integers (so products stay exact), random booleans."""
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return np.asarray(rng.standard_normal(shape), dtype)
    if dtype.kind == "b":
        return np.asarray(rng.random(shape) < 0.5)
    lo = -5 if dtype.kind == "i" else 0
    return np.asarray(rng.integers(lo, 6, size=shape), dtype)
