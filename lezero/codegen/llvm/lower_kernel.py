"""Lower one ``lz.kernel`` to LLVM IR: the entry point of the CPU code generator for loops.

``lower_kernel(kernel_op)`` returns a ``LoweredKernel``: a whole llvmlite module (text) holding
``void @name(i8** buffers, i64 begin, i64 end)`` (docs/architecture.md, "Kernel ABI"), and the
number of work items the runtime splits across threads.  Shapes are static here (the runtime
specializes).  Buffers are contiguous, row-major, in the reference's numpy storage: ``f16`` as
half, ``bf16`` as float32 holding bf16 values, ``i1`` as one byte 0/1.

Kinds (the partitioner decides):

- ``elementwise``: ``lower_elementwise`` (elementwise ops, data movement, small constants);
- ``reduction``: ``lower_reduction`` (``reduce_*``/``argmax`` with prologue and epilogue);
- ``single``: ``lz.max_pool2d``/``lz.avg_pool2d`` (``lower_pooling``), ``lz.max_pool2d_grad``
  (``lower_max_pool2d_grad``), ``lz.cumulative``/``lz.topk`` (``lower_reduction``), ``lz.scatter_nd``
  (``lower_elementwise``); a lone elementwise, data movement or reduction op goes through the
  matching lowering;
- ``matmul``/``conv``: ``lower_contraction`` (float32 through ``gemm.py``'s GEMM with the
  epilogue in its micro-kernel; other dtypes as loops).

An op no lowering handles raises ``LoweringError``: ``failed to lower lz.foo with f16 for cpu:
<why>``.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

import llvmlite.ir as ir

from lezero.codegen.errors import LoweringError
from lezero.codegen.llvm.kernel_function import KernelContext
from lezero.codegen.llvm.lower_contraction import CONTRACTION_OPS, contraction_flops, lower_contraction
from lezero.codegen.llvm.lower_elementwise import SCATTER_OPS, lower_elementwise, lower_scatter_nd
from lezero.codegen.llvm.lower_pooling import lower_max_pool2d_grad, lower_pooling
from lezero.codegen.llvm.lower_reduction import lower_cumulative, lower_reduction, lower_topk
from lezero.codegen.llvm.target import CpuTarget, cpu_target
from lezero.codegen.value_at_index import MOVEMENT
from lezero.ir.core import Operation
from lezero.ir.dialect.pooling import POOL_GRAD_OPS, POOL_OPS
from lezero.ir.dialect.reduction import REDUCTION_OPS
from lezero.ir.opdef import COMPOSITE, ELEMENTWISE
from lezero.ir.types import TensorType


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


def symbol_name(name: str) -> str:
    """``name`` as a C identifier (the kernel's symbol in an object file)."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return out if out and not out[0].isdigit() else "_" + out


def lower_kernel(kernel_op: Operation, target: str = "cpu", cpu: CpuTarget | str | None = None) -> LoweredKernel:
    """``kernel_op`` as LLVM IR for ``cpu`` (default: ``$LEZERO_CPU`` or the host): its vector widths
    and GEMM tiles are chosen for that CPU, so compile the IR for the same one."""
    if kernel_op.name != "lz.kernel":
        raise LoweringError(f"lower_kernel expects an lz.kernel, got {kernel_op.name}", kernel_op.location)
    attrs = kernel_op.definition.attrs(kernel_op)
    name = symbol_name(attrs.name)
    for v in list(kernel_op.operands) + list(kernel_op.results):
        if not (isinstance(v.type, TensorType) and v.type.is_static):
            raise LoweringError(f"failed to lower lz.kernel {attrs.name} for {target}: {v.type} is not a static "
                                "tensor type (the runtime specializes shapes before lowering)", kernel_op.location)
    module = ir.Module(name=name)
    ctx = KernelContext(kernel_op, module, name, target, cpu_target(cpu))
    kind = attrs.kind
    if kind == "elementwise":
        work_items = lower_elementwise(ctx)
    elif kind == "reduction":
        work_items = lower_reduction(ctx)
    elif kind == "single":
        work_items = _lower_single(ctx)
    elif kind in ("matmul", "conv"):
        work_items = lower_contraction(ctx)
    else:
        raise LoweringError(f"failed to lower lz.kernel {attrs.name} of kind '{kind}' for {target}: unknown kernel "
                            "kind", kernel_op.location)
    return LoweredKernel(
        name=name, llvm_ir=str(module), work_items=work_items, kind=kind,
        operand_types=tuple(v.type for v in kernel_op.operands), result_types=tuple(r.type for r in kernel_op.results),
        flops=estimate_flops(ctx.body), bytes_accessed=sum(v.type.nbytes for v in list(kernel_op.operands)
                                                           + list(kernel_op.results)),
        external_symbols=tuple(sorted(ctx.s.external_symbols)),
        index_checks=None if ctx.checks is None else tuple(ctx.checks.checks))


def _lower_single(ctx: KernelContext) -> int:
    ops = [op for op in ctx.body.ops if op.name not in ("lz.yield", "lz.constant")]
    if len(ops) != 1:
        raise LoweringError(f"failed to lower single kernel {ctx.name} for {ctx.target}: it holds {len(ops)} ops "
                            f"({', '.join(op.name for op in ops)}), not one", ctx.kernel.location)
    (op,) = ops
    if op.name in POOL_OPS:
        return lower_pooling(ctx, op)
    if op.name in POOL_GRAD_OPS:
        return lower_max_pool2d_grad(ctx, op)
    if op.name in REDUCTION_OPS:
        return lower_reduction(ctx)
    if op.name == "lz.cumulative":
        return lower_cumulative(ctx, op)
    if op.name == "lz.topk":
        return lower_topk(ctx, op)
    if op.name in SCATTER_OPS:
        return lower_scatter_nd(ctx, op)
    definition = op.definition
    if op.name in MOVEMENT or (definition is not None and definition.has_trait(ELEMENTWISE)):
        return lower_elementwise(ctx)
    dtype = op.results[0].type.element_type if op.results else "none"
    why = ("composite ops are decomposed before lowering (run the decompose pass)"
           if definition is not None and definition.has_trait(COMPOSITE) else "no CPU lowering for this op")
    raise LoweringError(f"failed to lower {op.name} with {dtype} for {ctx.target}: {why}", op.location)


def estimate_flops(body) -> int:
    total = 0
    for op in body.ops:
        if op.name in MOVEMENT or op.name in ("lz.constant", "lz.yield"):
            continue
        if op.name in CONTRACTION_OPS:
            total += contraction_flops(op)
        elif op.name in REDUCTION_OPS:
            total += math.prod(op.operands[0].type.shape)
        elif op.name in POOL_OPS:
            total += math.prod(op.results[0].type.shape) * math.prod(op.definition.attrs(op).kernel)
        elif op.name in POOL_GRAD_OPS:  # per window: a comparison per element, one add
            total += math.prod(op.operands[1].type.shape) * (math.prod(op.definition.attrs(op).kernel) + 1)
        else:
            total += math.prod(op.results[0].type.shape)
    return total
