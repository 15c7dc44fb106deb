"""The GPU backend (target ``"cuda"`` in ``lezero/codegen/targets.py``): one ``lz.kernel`` as a
Triton function, what the runtime and the tools call.

``lower_kernel(kernel_op)`` returns a ``TritonKernel`` (``kernel.py``): a whole Python module
holding ``@triton.jit def <name>(b0, b1, ..., BLOCK: tl.constexpr)`` (buffers: operands then
results; shapes and strides are literals, as the runtime specializes), and its launch
configurations.  ``name`` is the kernel's ``name`` attribute made an identifier
(``lz_fused_add_relu_0``), so a profile says what was fused.

The driver is ``lezero/codegen/kernel.py``'s; the kinds' lowerings are this folder's modules by
the same names as the LLVM backend's (the partitioner decides the kind;
``lezero/passes/partition.py``):

- ``elementwise``: ``elementwise.py`` (flat blocks over the yielded shape);
- ``reduction``: ``reduction.py`` (row blocks, reduced extent in chunks);
- ``single``: pooling and max pooling's gradient (``pooling.py``), ``lz.cumulative``
  (``reduction.py``), ``lz.topk`` and ``lz.scatter_nd`` (``selection.py``), a lone elementwise,
  data movement or reduction op;
- ``matmul``/``conv``: ``contraction.py`` (``tl.dot`` with the epilogue through the same emitter;
  ``lz.matmul_integer``/``lz.conv_integer`` as int8 ``tl.dot``s summing in int32).

``unsupported_reason(op)`` says which ops the Triton lowerings cannot run (a cumulative or topk
over a longer axis than one block holds, a scatter_nd whose gather would cost too many compares,
a contraction of an unsupported element type): ``lezero/codegen/targets.py`` registers it as
target ``"cuda"`` with ``lezero.passes.placement`` when it loads this backend, so
``partition{target=cuda}`` keeps those on the CPU.
"""
from __future__ import annotations

from lezero.codegen import kernel
from lezero.codegen.contraction_shapes import CONTRACTION_OPS, INTEGER_CONTRACTIONS
from lezero.codegen.schedule import schedule
from lezero.codegen.triton.context import TritonContext
from lezero.codegen.triton.contraction import contraction_unsupported_reason, lower_contraction
from lezero.codegen.triton.elementwise import lower_elementwise
from lezero.codegen.triton.kernel import TritonKernel
from lezero.codegen.triton.pooling import lower_max_pool2d_grad, lower_pooling
from lezero.codegen.triton.reduction import MAX_SCAN, SCAN_OPS, lower_cumulative, lower_reduction
from lezero.codegen.triton.scalar_builder import HELPERS, pointer_signature
from lezero.codegen.triton.selection import (lower_scatter_nd, lower_topk, scatter_unsupported_reason,
                                             topk_unsupported_reason)
from lezero.codegen.value_at_index import MOVEMENT
from lezero.ir.core import ModuleOp, Operation
from lezero.ir.dialect.axes import normalize_axis
from lezero.ir.dialect.pooling import POOL_GRAD_OPS, POOL_OPS
from lezero.ir.dialect.reduction import REDUCTION_OPS
from lezero.ir.opdef import COMPOSITE, ELEMENTWISE
from lezero.ir.types import I64

LOWERINGS = kernel.KindLowerings(
    backend="Triton", elementwise=lower_elementwise, reduction=lower_reduction, contraction=lower_contraction,
    pooling=lower_pooling, max_pool2d_grad=lower_max_pool2d_grad, cumulative=lower_cumulative, topk=lower_topk,
    scatter_nd=lower_scatter_nd)

# Ops whose Triton lowering runs only some instances: why an instance stays on the CPU.
LIMITED = {"lz.topk": topk_unsupported_reason, "lz.scatter_nd": scatter_unsupported_reason}
STRUCTURAL = frozenset({"lz.constant", "lz.kernel", "lz.yield", "lz.transfer", "func.return"})


def unsupported_reason(op: Operation) -> str | None:
    """Why the Triton code generator cannot run ``op`` (None: it can)."""
    if op.name in LIMITED:
        return LIMITED[op.name](op)
    if op.name in CONTRACTION_OPS or op.name in INTEGER_CONTRACTIONS:
        return contraction_unsupported_reason(op)
    if op.name in SCAN_OPS:
        x = op.operands[0].type
        n = x.shape[normalize_axis(op.definition.attrs(op).axis, x.rank)] if x.is_static else None
        if n is not None and n > MAX_SCAN:
            return f"lz.cumulative over {n} elements: longer than one Triton block ({MAX_SCAN}); runs on the CPU"
        return None
    if op.name in STRUCTURAL or op.name in MOVEMENT or op.name in REDUCTION_OPS or op.name in POOL_OPS \
            or op.name in POOL_GRAD_OPS:
        return None
    definition = op.definition
    if definition is not None and (definition.has_trait(ELEMENTWISE) or definition.has_trait(COMPOSITE)):
        return None  # composites are decomposed into these before partitioning
    return f"{op.name} has no Triton lowering"


def lower_kernel(kernel_op: Operation, target: str = "cuda") -> TritonKernel:
    """``kernel_op`` as a Triton function and its launch configurations (``configs[0]`` the
    heuristic one)."""
    ctx, configs = kernel.lower_kernel(kernel_op, target, lambda name: TritonContext(kernel_op, name, target),
                                       LOWERINGS, unsupported_reason)
    kind = kernel_op.definition.attrs(kernel_op).kind
    constexprs = tuple(configs[0].constexprs)
    signature = {b.pointer: pointer_signature(b.type.element_type)
                 for b in ctx.operand_buffers + ctx.result_buffers}
    if ctx.checks is not None:
        signature["status"] = pointer_signature(I64)
    signature.update({c: "constexpr" for c in constexprs})
    return TritonKernel(
        name=ctx.name, source=_module_source(ctx, kind, constexprs), kind=kind, signature=signature,
        configs=tuple(configs), operand_types=tuple(v.type for v in kernel_op.operands),
        result_types=tuple(r.type for r in kernel_op.results), flops=kernel.estimate_flops(ctx.body),
        bytes_accessed=kernel.bytes_accessed(kernel_op),
        index_checks=None if ctx.checks is None else tuple(ctx.checks.checks))


def describe(ctx: TritonContext) -> str:
    """One line naming the fused ops and the buffers' types."""
    ops = [op.name for op in ctx.body.ops if op.name not in ("lz.yield", "lz.constant")]
    operands = ", ".join(str(b.type) for b in ctx.operand_buffers)
    results = ", ".join(str(b.type) for b in ctx.result_buffers)
    return f"{' -> '.join(ops) or 'copy'}: ({operands}) -> ({results})"


def _module_source(ctx: TritonContext, kind: str, constexprs) -> str:
    params = ", ".join(ctx.buffer_names + [f"{c}: tl.constexpr" for c in constexprs])
    helpers = "".join(HELPERS[h] + "\n" for h in sorted(ctx.s.helpers)) + \
        "".join(source + "\n" for source in ctx.extra_helpers.values())
    return (f'"""{ctx.name}: {kind} kernel generated by lezero."""\n'
            "import triton\nimport triton.language as tl\n\n"
            f"{helpers}\n"
            f"@triton.jit\ndef {ctx.name}({params}):\n"
            f'    """{describe(ctx)}"""\n'
            f"{ctx.code.text()}\n")


def lower_module(module: ModuleOp) -> list[TritonKernel]:
    """Every GPU kernel of ``module`` scheduled for cuda (``schedule(module, target="cuda")``),
    lowered, in schedule order: kernels placed on the CPU and transfers are not Triton kernels."""
    return [lower_kernel(op) for f in schedule(module, target="cuda").functions for op in f.entry_block.ops
            if op.name == "lz.kernel" and op.definition.attrs(op).device == "cuda"
            and op.definition.attrs(op).kind != "transfer"]


def kernel_text(module: ModuleOp) -> str:
    """``lezero-opt --emit=triton``: the source of each kernel that runs on the GPU, under a comment
    header naming it (kernels placed on the CPU and transfers have no Triton source)."""
    parts = []
    for lowered in lower_module(module):
        config = lowered.configs[0]
        parts.append(f"# ---- kernel {lowered.name}: {lowered.kind}, grid {list(config.grid)}, "
                     f"{', '.join(f'{k}={v}' for k, v in config.constexprs.items()) or 'no blocks'}, "
                     f"~{lowered.flops} flops, {lowered.bytes_accessed} bytes\n{lowered.source.strip()}\n")
    return "\n".join(parts)
