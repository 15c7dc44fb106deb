"""Helpers for the kernel lowering tests: build an ``lz.kernel`` by hand, lower and JIT-compile
it, call it through ctypes on numpy buffers (over split work-item ranges), and compare with the
reference interpreter running the same kernel."""
from __future__ import annotations

import ctypes

import numpy as np

from lezero.codegen.llvm import jit
from lezero.codegen.llvm.lower_kernel import LoweredKernel, lower_kernel
from lezero.ir import Block, Builder, FuncOp, FunctionType, ModuleOp, Operation, Region, interpret
from lezero.ir.types import TensorType, tensor
from lezero.ir.verifier import verify

from ir_building import random_array  # noqa: F401  (re-exported for the codegen tests)

KERNEL_SIGNATURE = (None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


def make_kernel(arg_types, body, kind: str = "elementwise", name: str = "lz_test_kernel"):
    """A module ``@f(args) { %r = lz.kernel(args) ({...}); return %r }`` whose kernel region
    yields ``body(builder, *block_args)`` (a value or a list); returns (module, kernel op)."""
    arg_types = [tensor(*t) if isinstance(t, tuple) else t for t in arg_types]
    block = Block(arg_types)
    b = Builder.at_end(block)
    results = body(b, *block.args)
    results = list(results) if isinstance(results, (list, tuple)) else [results]
    b.create("lz.yield", results, result_types=[])
    func = FuncOp("f", FunctionType(arg_types, []))
    fb = Builder.at_end(func.entry_block)
    kernel = Operation("lz.kernel", list(func.arguments), [r.type for r in results],
                       lz_attrs(kind=kind, name=name), [Region([block])])
    fb.insert(kernel)
    fb.create("func.return", kernel.results, result_types=[])
    func.update_function_type()
    module = ModuleOp([func])
    verify(module)
    return module, kernel


def lz_attrs(**values):
    from lezero.ir.opdef import lookup

    return lookup("lz.kernel").make_attributes(values)


_COMPILED: dict[str, jit.CompiledModule] = {}


def compile_lowered(lowered: LoweredKernel):
    if lowered.llvm_ir not in _COMPILED:
        _COMPILED[lowered.llvm_ir] = jit.compile_module(lowered.llvm_ir)
    return _COMPILED[lowered.llvm_ir].ctypes_function(lowered.name, KERNEL_SIGNATURE[0], KERNEL_SIGNATURE[1:])


def storage_dtype(t: TensorType) -> np.dtype:
    return t.element_type.numpy_dtype


def run_kernel(kernel: Operation, inputs, splits: int = 1, lowered: LoweredKernel | None = None):
    """Lower, compile and run ``kernel`` on ``inputs``; ``[0, work_items)`` is cut into ``splits``
    ranges called one after another (any order must give the same answer)."""
    lowered = lowered or lower_kernel(kernel)
    fn = compile_lowered(lowered)
    inputs = [np.ascontiguousarray(a, dtype=storage_dtype(t)) for a, t in zip(inputs, lowered.operand_types)]
    outputs = [_poisoned(t) for t in lowered.result_types]
    pointers = (ctypes.c_void_p * max(1, len(inputs) + len(outputs)))(*[a.ctypes.data for a in inputs + outputs])
    n = lowered.work_items
    bounds = sorted({0, n, *[n * k // splits for k in range(1, splits)]})
    for lo, hi in reversed(list(zip(bounds, bounds[1:]))):  # out of order on purpose
        fn(pointers, lo, hi)
    return outputs


def _poisoned(t: TensorType) -> np.ndarray:
    """An output buffer full of garbage, so an element the kernel forgets to write shows up."""
    dtype = storage_dtype(t)
    raw = np.full(max(1, int(np.prod(t.shape))) * dtype.itemsize, 0x7F, np.uint8)
    return raw[: int(np.prod(t.shape)) * dtype.itemsize].view(dtype).reshape(t.shape)


def reference(module: ModuleOp, inputs):
    out = interpret(module, "f", *inputs)
    return list(out) if isinstance(out, tuple) else [out]


def assert_matches(actual, expected, rtol=None, atol=None):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    if actual.dtype.kind == "f":
        tol = {np.dtype(np.float16): (2e-3, 2e-3), np.dtype(np.float32): (2e-5, 2e-6),
               np.dtype(np.float64): (1e-10, 1e-12)}[actual.dtype]
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                                   rtol=rtol if rtol is not None else tol[0], atol=atol if atol is not None else tol[1],
                                   equal_nan=True)
    else:
        np.testing.assert_array_equal(actual, expected)


def check_kernel(module, kernel, inputs, splits: int = 2, rtol=None, atol=None) -> LoweredKernel:
    lowered = lower_kernel(kernel)
    got = run_kernel(kernel, inputs, splits, lowered)
    want = reference(module, inputs)
    for g, w in zip(got, want):
        assert_matches(g, w, rtol, atol)
    return lowered

