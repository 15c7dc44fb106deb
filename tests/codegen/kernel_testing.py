"""Helpers for the kernel lowering tests: build an ``lz.kernel`` by hand, lower and JIT-compile
it, call it through ctypes on numpy buffers (over split work-item ranges), and compare with the
reference interpreter running the same kernel."""
from __future__ import annotations

import ctypes

import numpy as np

from lezero.codegen.index_checks import initial_status, status_error
from lezero.codegen.llvm import jit
from lezero.codegen.llvm.backend import LoweredKernel, lower_kernel
from lezero.ir import Block, Builder, FuncOp, FunctionType, ModuleOp, Operation, Region, interpret
from lezero.ir.types import TensorType, tensor
from lezero.ir.verifier import verify

from support.ir_building import random_array  # noqa: F401  (re-exported for the codegen tests)

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


def compile_lowered(lowered: LoweredKernel, cpu=None):
    key = (lowered.llvm_ir, cpu)
    if key not in _COMPILED:
        _COMPILED[key] = jit.compile_module(lowered.llvm_ir, cpu)
    return _COMPILED[key].ctypes_function(lowered.name, KERNEL_SIGNATURE[0], KERNEL_SIGNATURE[1:])


def storage_dtype(t: TensorType) -> np.dtype:
    return t.element_type.numpy_dtype


def run_kernel(kernel: Operation, inputs, splits: int = 1, lowered: LoweredKernel | None = None, cpu=None,
               sizes=()):
    """Lower, compile and run ``kernel`` on ``inputs`` (for ``cpu``: a cross-target test's, default
    the host); ``[0, work_items)`` is cut into ``splits`` ranges called one after another (any
    order must give the same answer).  ``sizes``: the run-time sizes a sequence form reads
    (``row_generic.SEQUENCE_ATTR``), in a buffer after the results.  A kernel with bounds checks
    gets its status buffer, and an index out of range raises ``IndexError`` with the runtime's
    message."""
    lowered = lowered or lower_kernel(kernel, cpu=cpu)
    fn = compile_lowered(lowered, cpu)
    inputs = [np.ascontiguousarray(a, dtype=storage_dtype(t)) for a, t in zip(inputs, lowered.operand_types)]
    outputs = [_poisoned(t) for t in lowered.result_types]
    checks = lowered.index_checks
    status = [] if checks is None else [np.array(initial_status(checks), np.int64)]
    buffers = inputs + outputs + ([np.array(sizes, np.int64)] if len(sizes) else []) + status
    pointers = (ctypes.c_void_p * max(1, len(buffers)))(*[a.ctypes.data for a in buffers])
    n = lowered.work_items
    bounds = sorted({0, n, *[n * k // splits for k in range(1, splits)]})
    for lo, hi in reversed(list(zip(bounds, bounds[1:]))):  # out of order on purpose
        fn(pointers, lo, hi)
    error = status_error(checks, status[0]) if status else None
    if error is not None:
        raise IndexError(error)
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



# Epilogues that read operands through data movement of memory, shared by the CPU and Triton
# contraction tests: the lowerings take any (partition folds all but a transpose into the
# contraction kernel that reads it).

MOVED_OPERAND_SHAPES = [("n",), ("n", "m"), ("m", 1), ("m", "n")]  # "m", "n": the product's dims


def moved_operands_epilogue(b, p, bias, transposed, column, residual):
    """relu(p + bias as a row + transposed.T) * column broadcast to p's shape - residual shifted
    down a row (a pad that crops the last row and fills the first with 0.5)."""
    y = b.op("lz.add", p, b.op("lz.reshape", bias, shape=[1, -1]))
    y = b.op("lz.add", y, b.op("lz.transpose", transposed, perm=[1, 0]))
    y = b.op("lz.relu", y)
    y = b.op("lz.mul", y, b.op("lz.broadcast_to", column, shape=list(p.type.shape)))
    return b.op("lz.sub", y, b.op("lz.pad", residual, pads=[1, 0, -1, 0], value=0.5))


def batch_norm_epilogue(b, y, scale, shift):
    """relu(y * scale + shift), the 1-D per-channel vectors reshaped to C x 1 x 1 as
    ``lz.batch_norm`` decomposes."""
    column = [-1, 1, 1]
    y = b.op("lz.mul", y, b.op("lz.reshape", scale, shape=column))
    return b.op("lz.relu", b.op("lz.add", y, b.op("lz.reshape", shift, shape=column)))


GROUP_NORM_SHAPES = [(2, 4, 3, 5), (4, 15), (2,)]  # x, a scale, a shift: float32


def group_norm_body(b, x, scale, shift):
    """Group norm's statistics over x reshaped to N x 2 x rest (the reduction reads x through the
    reshape), normalized and scaled by ``scale`` reshaped to 2 x rest, and the groups' means
    shifted by ``shift`` reshaped to 1 x 2 x 1: data movement of memory at the input shape and at
    the reduced one."""
    n = x.type.shape[0]
    groups = b.op("lz.reshape", x, shape=[n, 2, -1])
    mean = b.op("lz.reduce_mean", groups, axes=[2], keepdims=True)
    centered = b.op("lz.sub", groups, mean)
    var = b.op("lz.reduce_mean", b.op("lz.mul", centered, centered), axes=[2], keepdims=True)
    normalized = b.op("lz.mul", centered, b.op("lz.rsqrt", var))
    scaled = b.op("lz.mul", normalized, b.op("lz.reshape", scale, shape=[2, -1]))
    return [scaled, b.op("lz.add", mean, b.op("lz.reshape", shift, shape=[1, 2, 1]))]
