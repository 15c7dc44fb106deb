"""From any lz function with static shapes to kernels, and from kernels to LLVM IR.

``KERNEL_PIPELINE`` is what every compilation runs before code generation (the runtime after
binding the dims, ``lezero-opt --emit=llvm``, the ONNX compiler): optimize, then partition, fuse
and plan memory.  ``schedule(module, target="cuda")`` partitions with ``target=cuda``: ops the
Triton backend cannot run are placed on the CPU, with ``lz.transfer`` kernels between
(``lezero.passes.placement``).
"""
from __future__ import annotations

from lezero.codegen.llvm.jit import emit_assembly
from lezero.codegen.llvm.lower_kernel import LoweredKernel, lower_kernel
from lezero.codegen.llvm.target import CpuTarget, cpu_target
from lezero.ir.core import ModuleOp
from lezero.ir.diagnostics import IRError
from lezero.ir.types import TensorType
from lezero.passes import run_pipeline

KERNEL_PIPELINE = ("shape-infer,decompose,canonicalize,cse,constant-fold,dce,shape-infer,"
                   "partition,fuse,memory-plan")
TARGETS = ("cpu", "cuda")


def kernel_pipeline(target: str = "cpu") -> str:
    """``KERNEL_PIPELINE`` partitioning for ``target``."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r} (targets: {', '.join(map(repr, TARGETS))})")
    if target == "cpu":
        return KERNEL_PIPELINE
    import lezero.codegen.triton  # noqa: F401  (registers "cuda" with lezero.passes.placement)

    return KERNEL_PIPELINE.replace("partition,", f"partition{{target={target}}},")


def is_scheduled(module: ModuleOp, target: str = "cpu") -> bool:
    """Whether every function already holds only constants, kernels and its return (for a target
    other than the CPU: placed kernels, each with its ``device``)."""
    ops = [op for f in module.functions for op in f.entry_block.ops]
    return all(op.name in ("lz.constant", "lz.kernel", "func.return") for op in ops) and \
        all("lz.arena_size" in f.attributes for f in module.functions) and \
        (target == "cpu" or all("device" in op.attributes for op in ops if op.name == "lz.kernel"))


def schedule(module: ModuleOp, target: str = "cpu") -> ModuleOp:
    """Run ``kernel_pipeline(target)`` (unless the module is already scheduled for it: kernels
    scheduled for the CPU are placed again, each on the CPU, with transfers); every value must then
    have a static type."""
    if not is_scheduled(module, target):
        module = run_pipeline(module, kernel_pipeline(target))
    for f in module.functions:
        for op in f.entry_block.ops:
            for r in op.results:
                if isinstance(r.type, TensorType) and not r.type.is_static:
                    raise IRError(f"'{op.name}' op result {r.type} is dynamic: code generation needs static "
                                  "shapes (bind the dims first)", op.location)
    return module


def lower_module(module: ModuleOp, cpu: CpuTarget | str | None = None) -> list[LoweredKernel]:
    """Every kernel of a scheduled module, lowered to LLVM IR for ``cpu``, in schedule order."""
    return [lower_kernel(op, cpu=cpu) for f in module.functions for op in f.entry_block.ops if op.name == "lz.kernel"]


def llvm_text(module: ModuleOp, cpu: CpuTarget | str | None = None, assembly: bool = False) -> str:
    """``lezero-opt --emit=llvm`` (``assembly``: ``--emit=asm``): each kernel's LLVM module (or its
    machine code after O3) for ``cpu``, under a comment naming it."""
    cpu = cpu_target(cpu)
    parts = []
    for kernel in lower_module(schedule(module), cpu):
        code = emit_assembly(kernel.llvm_ir, cpu) if assembly else kernel.llvm_ir
        comment = "#" if assembly else ";"
        parts.append(f"{comment} ---- kernel {kernel.name}: {kernel.kind}, {kernel.work_items} work items, "
                     f"~{kernel.flops} flops, {kernel.bytes_accessed} bytes, cpu {cpu.name}\n{code.strip()}\n")
    return "\n".join(parts)
