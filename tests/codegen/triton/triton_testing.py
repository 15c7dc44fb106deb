"""Run a module's kernels as Triton (in the interpreter) and compare with the reference.

``run_triton(module, inputs)`` schedules the module for the cuda target
(``lezero.codegen.schedule.schedule``), lowers every ``lz.kernel`` placed on the GPU with
``lezero.codegen.triton.backend`` and launches them in order on torch CPU tensors (a buffer
per value, results pre-filled with garbage so an unwritten element shows); kernels placed on the
CPU (ops Triton cannot run) and transfers run in the reference interpreter.
"""
from __future__ import annotations

import numpy as np
import torch

from lezero.codegen.index_checks import initial_status, status_error
from lezero.codegen.schedule import schedule
from lezero.codegen.triton import jit
from lezero.codegen.triton.backend import lower_kernel
from lezero.ir import interpret
from lezero.ir.interpreter import run_block
from lezero.runtime.cuda import storage_dtype, to_device, to_host

TOLERANCES = {np.dtype(np.float16): (2e-3, 2e-3), np.dtype(np.float32): (2e-5, 2e-6),
              np.dtype(np.float64): (1e-10, 1e-12)}


def garbage(t) -> torch.Tensor:
    """A device buffer of type ``t`` (bf16: 16 bits) filled with 0x7F bytes."""
    dtype = storage_dtype(t)
    size = int(np.prod(t.shape))
    raw = torch.full((max(1, size) * dtype.itemsize,), 0x7F, dtype=torch.uint8)
    return raw[:size * dtype.itemsize].view(dtype).reshape(t.shape).clone()


def device_tensor(array, t) -> torch.Tensor:
    """A host array (the reference's storage) as a device buffer of type ``t`` (bf16 as torch.bfloat16)."""
    return to_device(np.ascontiguousarray(array, dtype=t.element_type.numpy_dtype).copy(), t, "cpu")


def run_triton(module, inputs, func_name: str = "f", kernels: list | None = None) -> list[np.ndarray]:
    """The function's results with every GPU kernel run as Triton; ``kernels`` collects the
    ``TritonKernel``s.  Values are device buffers (bf16 16 bits); the reference interpreter's
    kernels (those placed on the CPU) read and write the host's storage."""
    scheduled = schedule(module, target="cuda")
    func = scheduled.lookup(func_name)
    values = {a: device_tensor(x, a.type) for a, x in zip(func.arguments, inputs)}
    for op in func.entry_block.ops:
        if op.name == "func.return":
            return [to_host(values[v], v.type) for v in op.operands]
        if op.name == "lz.constant":
            values[op.result] = device_tensor(op.attributes["value"].array, op.result.type)
            continue
        attrs = op.definition.attrs(op)
        if op.name == "lz.kernel" and attrs.device == "cuda" and attrs.kind != "transfer":
            kernel = lower_kernel(op)
            if kernels is not None:
                kernels.append(kernel)
            outputs = [garbage(r.type) for r in op.results]
            status = [] if kernel.index_checks is None else \
                [torch.tensor(initial_status(kernel.index_checks), dtype=torch.int64)]
            jit.load(kernel).launch([values[v] for v in op.operands] + outputs + status)
            message = status and status_error(kernel.index_checks, status[0].tolist())
            if message:
                raise IndexError(message)
        else:
            arrays = run_block(op.regions[0].blocks[0], [to_host(values[v], v.type) for v in op.operands])
            outputs = [device_tensor(a, r.type) for a, r in zip(arrays, op.results)]
        values.update(zip(op.results, outputs))
    raise AssertionError(f"@{func_name} has no return")


def reference(module, inputs, func_name: str = "f") -> list[np.ndarray]:
    out = interpret(module, func_name, *inputs)
    return list(out) if isinstance(out, tuple) else [out]


def assert_matches(actual, expected, rtol=None, atol=None) -> None:
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    if actual.dtype.kind == "f":
        tol = TOLERANCES[actual.dtype]
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64),
                                   rtol=tol[0] if rtol is None else rtol, atol=tol[1] if atol is None else atol,
                                   equal_nan=True)
    else:
        np.testing.assert_array_equal(actual, expected)


def check_triton(module, inputs, rtol=None, atol=None, func_name: str = "f") -> list:
    """Run ``module`` through Triton and the reference (before scheduling); the kernels."""
    want = reference(module, inputs, func_name)
    kernels: list = []
    got = run_triton(module, inputs, func_name, kernels)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_matches(g, w, rtol, atol)
    return kernels
