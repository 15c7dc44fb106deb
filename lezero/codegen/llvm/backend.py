"""The CPU backend (target ``"cpu"`` in ``lezero/codegen/targets.py``): one ``lz.kernel`` as
LLVM IR, what the runtime and the tools call.

``lower_kernel(kernel_op)`` returns a ``LoweredKernel``: a whole llvmlite module (text) holding
``void @name(i8** buffers, i64 begin, i64 end)`` (docs/architecture.md, "Kernel ABI"), and the
number of work items the runtime splits across threads.  Shapes are static here (the runtime
specializes).  Buffers are contiguous, row-major, in the reference's numpy storage: ``f16`` as
half, ``bf16`` as float32 holding bf16 values, ``i1`` as one byte 0/1.

The driver is ``lezero/codegen/kernel.py``'s; the kinds' lowerings are this folder's modules by
the same names as the Triton backend's:

- ``elementwise``: ``elementwise.py`` (elementwise ops, data movement, small constants);
- ``reduction``: ``reduction.py`` (``reduce_*``/``argmax`` with prologue and epilogue);
- ``single``: ``pooling.py`` (``lz.max_pool2d``/``lz.avg_pool2d``, ``lz.max_pool2d_grad``),
  ``reduction.py`` (``lz.cumulative``), ``selection.py`` (``lz.topk``, ``lz.scatter_nd``); a lone
  elementwise, data movement or reduction op goes through the matching lowering;
- ``attention``: ``attention.py`` (``lz.attention``, from the fuse-attention pass);
- ``conv_blocked``: ``conv_nchwc.py`` (``lz.conv2d_blocked``, from the blocked-layout pass);
- ``lz.conv_integer`` and its epilogue (a ``conv`` kernel): ``integer_conv.py``, the same GEMM over an
  implicit im2col.
- ``lz.matmul_integer`` and its epilogue (a ``matmul`` kernel): ``integer_gemm.py`` (u8 x s8 dot
  products per target: ``integer_dot.py``, AMX tiles: ``integer_gemm_amx.py``; the dequantize or
  requantize epilogue on each tile before it is stored);
- ``matmul``/``conv``: ``contraction.py`` (float32 through ``gemm.py``'s GEMM with the epilogue
  in its micro-kernel, ``contraction_gemm.py``; other dtypes as loops).

An op no lowering handles raises ``LoweringError``: ``failed to lower lz.foo with f16 for cpu:
<why>``.  The CPU runs every op (``unsupported_reason`` is always None): it is where placement
puts what another target cannot run.  ``fusion_facts`` (``fusion_facts.py``) answers partition's
cost model.
"""
from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir

from lezero.codegen import kernel
from lezero.codegen.llvm.attention import lower_attention
from lezero.codegen.llvm.context import KernelContext
from lezero.codegen.llvm import conv_nchwc
from lezero.codegen.llvm.conv_nchwc import lower_conv_blocked
from lezero.codegen.llvm.contraction import lower_contraction
from lezero.codegen.llvm.elementwise import lower_elementwise
from lezero.codegen.llvm.integer_conv import lower_integer_contraction
from lezero.codegen.llvm.fusion_facts import FUSION_FACTS as fusion_facts  # noqa: F401  (the backend contract)
from lezero.codegen.llvm.jit import emit_assembly
from lezero.codegen.llvm.pooling import lower_max_pool2d_grad, lower_pooling
from lezero.codegen.llvm.reduction import lower_cumulative, lower_reduction
from lezero.codegen.llvm.selection import lower_scatter_nd, lower_topk
from lezero.codegen.llvm.target import CpuTarget, cpu_target
from lezero.codegen.schedule import schedule
from lezero.ir.core import ModuleOp, Operation

LOWERINGS = kernel.KindLowerings(
    backend="CPU", elementwise=lower_elementwise, reduction=lower_reduction, contraction=lower_contraction,
    pooling=lower_pooling, max_pool2d_grad=lower_max_pool2d_grad, cumulative=lower_cumulative, topk=lower_topk,
    scatter_nd=lower_scatter_nd, attention=lower_attention, matmul_integer=lower_integer_contraction,
    conv_blocked=lower_conv_blocked)


@dataclass(frozen=True)
class LoweredKernel:
    """A kernel ready to compile and run.

    name: the symbol of the ABI function in ``llvm_ir`` (the kernel's ``name`` attribute, made a
        valid C identifier).
    llvm_ir: a whole LLVM module (text) with that function, its inlined body and any constant
        tables; compile it with ``lezero.codegen.llvm.jit``.
    work_items: the iterations of the outermost parallel loop; call the function on ranges
        ``[begin, end)`` that split ``[0, work_items)`` (any split, in any order, in parallel).
    kind: the kernel kind.
    operand_types, result_types: the buffers, in ABI order (operands, then results).
    flops: elementwise/reduction ops times elements (an estimate, transcendentals count 1), plus
        2 x the multiply-adds of a matmul or conv.
    bytes_accessed: bytes of every buffer, read or written once.
    external_symbols: libm functions the code calls (float64 transcendentals, pow); empty for
        most kernels. A native executable links ``-lm`` when it is not.
    index_checks: None, or the kernel's bounds checks (``lezero/codegen/index_checks.py``) in
        slot order: then the function takes a status buffer after the results (int64, initialized
        by ``initial_status(index_checks)``), which says after a call whether an index was out of
        range.
    packed_operands: constant operands the function reads pre-packed, each a
        ``lezero.codegen.packed_operands.PackedGemmA``: the plan passes ``spec.pack(array)``
        instead of the constant (issue 11).
    """

    name: str
    llvm_ir: str
    work_items: int
    kind: str
    operand_types: tuple
    result_types: tuple
    flops: int
    bytes_accessed: int
    external_symbols: tuple = ()
    index_checks: tuple | None = None
    packed_operands: tuple = ()


def layout_block() -> int | None:
    """Channels per block of the activations the blocked-layout pass makes for this CPU
    (``$LEZERO_CPU`` or the host, the kernels' target), or None: NCHW stays."""
    return conv_nchwc.layout_block(cpu_target(None))


def unsupported_reason(op: Operation) -> None:
    """None: the CPU runs every op (placement's fallback)."""
    return None


def lower_kernel(kernel_op: Operation, target: str = "cpu", cpu: CpuTarget | str | None = None) -> LoweredKernel:
    """``kernel_op`` as LLVM IR for ``cpu`` (default: ``$LEZERO_CPU`` or the host): its vector widths
    and GEMM tiles are chosen for that CPU, so compile the IR for the same one."""
    cpu = cpu_target(cpu)
    ctx, work_items = kernel.lower_kernel(
        kernel_op, target, lambda name: KernelContext(kernel_op, ir.Module(name=name), name, target, cpu),
        LOWERINGS, unsupported_reason)
    return LoweredKernel(
        name=ctx.name, llvm_ir=str(ctx.module), work_items=work_items, kind=kernel_op.definition.attrs(kernel_op).kind,
        operand_types=tuple(v.type for v in kernel_op.operands), result_types=tuple(r.type for r in kernel_op.results),
        flops=kernel.estimate_flops(ctx.body), bytes_accessed=kernel.bytes_accessed(kernel_op),
        external_symbols=tuple(sorted(ctx.s.external_symbols)),
        index_checks=None if ctx.checks is None else tuple(ctx.checks.checks),
        packed_operands=ctx.packed_operands)


def lower_module(module: ModuleOp, cpu: CpuTarget | str | None = None) -> list[LoweredKernel]:
    """Every kernel of ``module`` scheduled for the CPU (``schedule(module)``), lowered to LLVM IR
    for ``cpu``, in schedule order (a control-flow op's region kernels where the op stands)."""
    return [lower_kernel(op, cpu=cpu) for f in schedule(module).functions for op in f.walk()
            if op.name == "lz.kernel"]


def kernel_text(module: ModuleOp, cpu: CpuTarget | str | None = None, assembly: bool = False) -> str:
    """``lezero-opt --emit=llvm`` (``assembly``: ``--emit=asm``): each kernel's LLVM module (or its
    machine code after O3) for ``cpu``, under a comment naming it."""
    cpu = cpu_target(cpu)
    parts = []
    for lowered in lower_module(module, cpu):
        code = emit_assembly(lowered.llvm_ir, cpu) if assembly else lowered.llvm_ir
        comment = "#" if assembly else ";"
        parts.append(f"{comment} ---- kernel {lowered.name}: {lowered.kind}, {lowered.work_items} work items, "
                     f"~{lowered.flops} flops, {lowered.bytes_accessed} bytes, cpu {cpu.name}\n{code.strip()}\n")
    return "\n".join(parts)
