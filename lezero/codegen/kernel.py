"""One ``lz.kernel`` on its way to code: what every backend does the same way.

A backend (``llvm/``, ``triton/``) lowers a kernel in three steps, and only the middle one is
its own:

1. ``lower_kernel`` here checks that the op is an ``lz.kernel`` with static types (the runtime
   specializes shapes before lowering), names it (``symbol_name``), makes the backend's context
   and asks the backend's ``unsupported_reason`` about every op of the body;
2. the kernel's kind (partition decides: ``elementwise``, ``reduction``, ``single``,
   ``matmul``/``conv``, ``attention``) picks one of the backend's ``KindLowerings``; a ``single``
   kernel's one op picks pooling, max pooling's gradient, a reduction, ``lz.cumulative``,
   ``lz.topk``, ``lz.scatter_nd``, ``lz.attention`` or, for a lone elementwise or data movement
   op, the elementwise lowering; a ``matmul`` kernel of ``lz.matmul_integer`` goes to the
   backend's int8 GEMM;
3. the backend wraps what its lowering returned (work items, launch configs) with
   ``estimate_flops`` and ``bytes_accessed`` into what it hands the runtime.

``KernelContext`` is the part of a kernel being lowered that does not depend on the backend: the
body, its yields, the buffers (each backend gives the pointers), the bounds checks.  The helpers
below it (``iteration_space``, ``index_variables``, ``single_buffers``, ``lines_along_axis``,
``scan_identity``) are what the kinds' lowerings of both backends read the kernel with.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable

from lezero.codegen.affine import Affine, Var
from lezero.codegen.contraction_shapes import CONTRACTION_OPS, INTEGER_CONTRACTIONS, contraction_flops
from lezero.codegen.errors import LoweringError
from lezero.codegen.index_checks import IndexChecks, checks_indices
from lezero.codegen.row_generic import SEQUENCE_ATTR
from lezero.codegen.value_at_index import MOVEMENT, Buffer
from lezero.ir.core import Operation
from lezero.ir.dialect.axes import normalize_axis
from lezero.ir.dialect.numerics import highest, lowest
from lezero.ir.dialect.pooling import POOL_GRAD_OPS, POOL_OPS
from lezero.ir.dialect.reduction import REDUCTION_OPS
from lezero.ir.opdef import COMPOSITE, ELEMENTWISE
from lezero.ir.types import TensorType, format_shape

SCATTER_OPS = frozenset({"lz.scatter_nd"})


def symbol_name(name: str) -> str:
    """``name`` as a C identifier (the kernel's symbol in an object file, its Triton function)."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return out if out and not out[0].isdigit() else "_" + out


class KernelContext:
    """One kernel being lowered, as far as every backend sees it alike: ``kernel``, its ``name``
    (a symbol), the ``target``, the ``body`` and its ``yields``, the bounds checks (``checks``,
    None for a kernel without any), ``run_time_sizes`` (1 for a sequence form, which reads its
    length from a buffer after the results: ``row_generic.SEQUENCE_ATTR``; else 0) and, once the
    backend calls ``bind_buffers``, its ``operand_buffers`` and ``result_buffers``.  The backend's
    context adds its scalar builder (``s``), index materializer (``index``) and value-at-index walk
    (``emitter``)."""

    def __init__(self, kernel: Operation, name: str, target: str):
        self.kernel = kernel
        self.name = name
        self.target = target
        self.body = kernel.regions[0].blocks[0]
        self.yields = list(self.body.terminator.operands)
        # kernels with bounds checks take a status buffer after the results
        self.checks = IndexChecks(self.body.ops) if checks_indices(kernel) else None
        self.run_time_sizes = int(SEQUENCE_ATTR in kernel.attributes)
        self.operand_buffers: list[Buffer] = []
        self.result_buffers: list[Buffer] = []

    def bind_buffers(self, pointers) -> None:
        """The buffers at the backend's ``pointers``: operands, then results (the run-time sizes,
        then a status pointer, if any, after them)."""
        n = len(self.kernel.operands)
        self.operand_buffers = [Buffer(p, a.type) for p, a in zip(pointers, self.body.args)]
        self.result_buffers = [Buffer(p, r.type) for p, r in zip(pointers[n:], self.kernel.results)]

    def failure(self, why: str) -> LoweringError:
        return LoweringError(f"failed to lower {self.kernel.definition.attrs(self.kernel).kind} kernel {self.name} "
                             f"for {self.target}: {why}", self.kernel.location)


@dataclass(frozen=True)
class KindLowerings:
    """One backend's lowering of each kind of kernel, and of each op a ``single`` kernel holds:
    each takes the backend's context (and the op) and returns what the backend hands on (work
    items, launch configurations).  ``backend``: how an error names the backend (``"CPU"``)."""

    backend: str
    elementwise: Callable
    reduction: Callable
    contraction: Callable
    pooling: Callable
    max_pool2d_grad: Callable
    cumulative: Callable
    topk: Callable
    scatter_nd: Callable
    attention: Callable | None = None  # kind "attention" (the CPU's; other targets never get one)
    matmul_integer: Callable | None = None  # a kernel of lz.matmul_integer / lz.conv_integer and its epilogue (the CPU's, issue 12)
    conv_blocked: Callable | None = None  # kind "conv_blocked": lz.conv2d_blocked (the CPU's, issue 11 item 3)


def lower_kernel(kernel_op: Operation, target: str, make_context: Callable, lowerings: KindLowerings,
                 unsupported_reason: Callable[[Operation], "str | None"]):
    """``(ctx, result)``: ``kernel_op`` checked, its context ``make_context(name)`` and the result
    of the lowering its kind picks (step 1 and 2 of the module docstring)."""
    if kernel_op.name != "lz.kernel":
        raise LoweringError(f"lower_kernel expects an lz.kernel, got {kernel_op.name}", kernel_op.location)
    attrs = kernel_op.definition.attrs(kernel_op)
    for v in list(kernel_op.operands) + list(kernel_op.results):
        if not (isinstance(v.type, TensorType) and v.type.is_static):
            raise LoweringError(f"failed to lower lz.kernel {attrs.name} for {target}: {v.type} is not a static "
                                "tensor type (the runtime specializes shapes before lowering)", kernel_op.location)
    ctx = make_context(symbol_name(attrs.name))
    for op in ctx.body.ops:
        why = unsupported_reason(op)
        if why is not None:
            dtype = op.results[0].type.element_type if op.results else "none"
            raise LoweringError(f"failed to lower {op.name} with {dtype} for {target}: {why}", op.location)
    kind = attrs.kind
    if kind == "elementwise":
        return ctx, lowerings.elementwise(ctx)
    if kind == "reduction":
        return ctx, lowerings.reduction(ctx)
    if kind == "single":
        return ctx, _lower_single(ctx, lowerings)
    if kind in ("matmul", "conv") and lowerings.matmul_integer is not None and \
            any(op.name in INTEGER_CONTRACTIONS for op in ctx.body.ops):
        return ctx, lowerings.matmul_integer(ctx)
    if kind in ("matmul", "conv"):
        return ctx, lowerings.contraction(ctx)
    if kind == "attention" and lowerings.attention is not None:
        return ctx, lowerings.attention(ctx)
    if kind == "conv_blocked" and lowerings.conv_blocked is not None:
        return ctx, lowerings.conv_blocked(ctx)
    raise LoweringError(f"failed to lower lz.kernel {attrs.name} of kind '{kind}' for {target}: unknown kernel "
                        "kind", kernel_op.location)


def _lower_single(ctx: KernelContext, lowerings: KindLowerings):
    ops = [op for op in ctx.body.ops if op.name not in ("lz.yield", "lz.constant")]
    if len(ops) != 1:
        raise ctx.failure(f"it holds {len(ops)} ops ({', '.join(op.name for op in ops)}), not one")
    (op,) = ops
    if op.name in POOL_OPS or op.name == "lz.max_pool2d_blocked":  # the CPU's, from blocked-layout
        return lowerings.pooling(ctx, op)
    if op.name in POOL_GRAD_OPS:
        return lowerings.max_pool2d_grad(ctx, op)
    if op.name in REDUCTION_OPS:
        return lowerings.reduction(ctx)
    if op.name == "lz.cumulative":
        return lowerings.cumulative(ctx, op)
    if op.name == "lz.topk":
        return lowerings.topk(ctx, op)
    if op.name in SCATTER_OPS:
        return lowerings.scatter_nd(ctx, op)
    if op.name == "lz.attention" and lowerings.attention is not None:
        return lowerings.attention(ctx)
    definition = op.definition
    if op.name in MOVEMENT or (definition is not None and definition.has_trait(ELEMENTWISE)):
        return lowerings.elementwise(ctx)
    dtype = op.results[0].type.element_type if op.results else "none"
    why = ("composite ops are decomposed before lowering (run the decompose pass)"
           if definition is not None and definition.has_trait(COMPOSITE)
           else f"no {lowerings.backend} lowering for this op")
    raise LoweringError(f"failed to lower {op.name} with {dtype} for {ctx.target}: {why}", op.location)


def estimate_flops(body) -> int:
    """Elementwise and reduction ops times their elements (a transcendental counts 1), pooling
    windows, and 2 x the multiply-adds of a matmul or conv."""
    total = 0
    for op in body.ops:
        if op.name in MOVEMENT or op.name in ("lz.constant", "lz.yield"):
            continue
        if op.name in CONTRACTION_OPS or op.name in INTEGER_CONTRACTIONS:
            total += contraction_flops(op)
        elif op.name == "lz.conv2d_blocked":  # 2 x the multiply-adds of the channels that are not padding
            o, c, kh, kw = op.operands[1].type.shape
            n, _, oh, ow, _ = op.results[0].type.shape
            total += 2 * n * o * oh * ow * c * kh * kw
        elif op.name == "lz.attention":  # the two products, and exp per score
            q, k, v = (x.type.shape for x in op.operands[:3])
            total += math.prod(q[:-1]) * k[-2] * (2 * q[-1] + 2 * v[-1] + 1)
        elif op.name in REDUCTION_OPS:
            total += math.prod(op.operands[0].type.shape)
        elif op.name in POOL_OPS or op.name == "lz.max_pool2d_blocked":
            total += math.prod(op.results[0].type.shape) * math.prod(op.definition.attrs(op).kernel)
        elif op.name in POOL_GRAD_OPS:  # per window: a comparison per element, one add
            total += math.prod(op.operands[1].type.shape) * (math.prod(op.definition.attrs(op).kernel) + 1)
        else:
            total += math.prod(op.results[0].type.shape)
    return total


def bytes_accessed(kernel_op: Operation) -> int:
    """Bytes of every buffer of the kernel, each read or written once."""
    return sum(v.type.nbytes for v in list(kernel_op.operands) + list(kernel_op.results))


# --- what the kinds' lowerings read the kernel with ------------------------------------------------

def iteration_space(ctx: KernelContext) -> tuple:
    """The shape an elementwise kernel walks: its yields' (one shape for all)."""
    shape = ctx.yields[0].type.shape if ctx.yields else ()
    for y in ctx.yields:
        if y.type.shape != shape:
            raise ctx.failure(f"yielded shapes {format_shape(shape)} and {format_shape(y.type.shape)} differ")
    return shape


def index_variables(shape) -> tuple[list, tuple]:
    """One ``Var`` per dim of size > 1, and the index of ``shape`` in them (size-1 dims are 0)."""
    variables = [Var(f"i{k}", d) if d != 1 else None for k, d in enumerate(shape)]
    index = tuple(Affine.of(v) if v is not None else Affine() for v in variables)
    return [v for v in variables if v is not None], index


def single_buffers(ctx: KernelContext, op):
    """The buffers of a single kernel's one op: its operands (read from memory) and its results
    (None for a result the kernel does not yield)."""
    operands = [ctx.emitter.buffers.get(v) for v in op.operands]
    if any(buf is None for buf in operands):
        raise ctx.emitter.failure(op, "a single kernel reads its operands from memory")
    results = [ctx.result_buffers[ctx.yields.index(r)] if r in ctx.yields else None for r in op.results]
    return operands, results


def lines_along_axis(op: Operation) -> tuple[int, int, int, int]:
    """``(axis, outer, n, inner)`` of a scan or topk: its operand's ``axis`` (normalized), and the
    elements before it, along it and after it (``outer x inner`` lines of ``n``)."""
    shape = op.operands[0].type.shape
    axis = normalize_axis(op.definition.attrs(op).axis, len(shape))
    return axis, math.prod(shape[:axis]), shape[axis], math.prod(shape[axis + 1:])


def scan_identity(combine: str, dtype):
    """The value an ``lz.cumulative`` of ``combine`` starts from (exclusive scans store it first)."""
    return {"add": 0, "mul": 1, "max": lowest(dtype.numpy_dtype), "min": highest(dtype.numpy_dtype)}[combine]
