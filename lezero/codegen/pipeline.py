"""From any lz function with static shapes to kernels, and from kernels to LLVM IR.

``KERNEL_PIPELINE`` is what every compilation runs before code generation (the runtime after
binding the dims, ``lezero-opt --emit=llvm``, the ONNX compiler): optimize, then partition, fuse
and plan memory.
"""
from __future__ import annotations

from lezero.codegen.llvm.lower_kernel import LoweredKernel, lower_kernel
from lezero.ir.core import ModuleOp
from lezero.ir.diagnostics import IRError
from lezero.ir.types import TensorType
from lezero.passes import run_pipeline

KERNEL_PIPELINE = ("shape-infer,decompose,canonicalize,cse,constant-fold,dce,shape-infer,"
                   "partition,fuse,memory-plan")


def is_scheduled(module: ModuleOp) -> bool:
    """Whether every function already holds only constants, kernels and its return."""
    return all(op.name in ("lz.constant", "lz.kernel", "func.return")
               for f in module.functions for op in f.entry_block.ops) and \
        all("lz.arena_size" in f.attributes for f in module.functions)


def schedule(module: ModuleOp) -> ModuleOp:
    """Run ``KERNEL_PIPELINE`` (unless the module is already scheduled); every value must then have
    a static type."""
    if not is_scheduled(module):
        module = run_pipeline(module, KERNEL_PIPELINE)
    for f in module.functions:
        for op in f.entry_block.ops:
            for r in op.results:
                if isinstance(r.type, TensorType) and not r.type.is_static:
                    raise IRError(f"'{op.name}' op result {r.type} is dynamic: code generation needs static "
                                  "shapes (bind the dims first)", op.location)
    return module


def lower_module(module: ModuleOp) -> list[LoweredKernel]:
    """Every kernel of a scheduled module, lowered to LLVM IR, in schedule order."""
    return [lower_kernel(op) for f in module.functions for op in f.entry_block.ops if op.name == "lz.kernel"]


def llvm_text(module: ModuleOp) -> str:
    """``lezero-opt --emit=llvm``: each kernel's LLVM module, under a comment naming it."""
    parts = []
    for kernel in lower_module(schedule(module)):
        parts.append(f"; ---- kernel {kernel.name}: {kernel.kind}, {kernel.work_items} work items, "
                     f"~{kernel.flops} flops, {kernel.bytes_accessed} bytes\n{kernel.llvm_ir.strip()}\n")
    return "\n".join(parts)
