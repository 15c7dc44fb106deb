"""From any lz function with static shapes to kernels: what every compilation runs before code
generation, whatever the target.

``KERNEL_PIPELINE`` is that pipeline (the runtime after binding the dims, ``lezero-opt --emit=...``,
the ONNX compiler): optimize, then partition, fuse and plan memory.  ``schedule(module,
target="cuda")`` partitions with ``target=cuda``: ops the target's backend cannot run are placed on
the CPU, with ``lz.transfer`` kernels between (``lezero.passes.placement``); the backend is asked
for through the registry (``lezero/codegen/targets.py``), never imported here.

**Control flow** (``lz.for``, ``lz.while``, ``lz.if``) stays at the top level, between the kernels,
as a host step of the schedule (partition leaves it alone, memory-plan gives its results buffers);
then each of its regions, isolated from above, is scheduled as a function of its own
(``@region(block args) -> yielded values``, the whole pipeline, nested loops included) and put
back: the region then holds constants, kernels and its ``lz.yield``, with memory-plan's offsets in
an arena of its own, whose size is the op's ``lz.region_arena_sizes`` (one per region).  The
runtime runs a region's plan once per iteration in that arena (``lezero.runtime.plan``), so its
kernels are compiled once, not per iteration.  For any target the op and its regions run on the
CPU (``lezero.passes.placement`` places them there, with transfers around): one host step for
every executor.

``schedule`` verifies the IR once, after the pipeline, not after every pass as ``lezero-opt`` and
``run_pipeline`` do: the verifier between the ten passes was half of the pipeline's time (~0.5 s
of a warm ResNet-50 start).  ``LEZERO_VERIFY_EACH=1`` verifies after each pass again, naming the
pass that left invalid IR; the test suite sets it.
"""
from __future__ import annotations

import os

from lezero.codegen import targets
from lezero.ir.attributes import DenseArrayAttr
from lezero.ir.core import Block, FuncOp, ModuleOp, Operation
from lezero.ir.dialect.kernel import CONSTANT_OPERANDS_ATTR
from lezero.ir.diagnostics import IRError
from lezero.ir.types import I64, FunctionType, TensorType
from lezero.ir.verifier import verify
from lezero.passes import run_pipeline
from lezero.passes.licm import FIRST_INVARIANT_ARGUMENT
from lezero.passes.memory_plan import ARENA_SIZE_ATTR
from lezero.passes.partition import CONTROL_FLOW_OPS

# On a scheduled control-flow op: the bytes of each region's arena.
REGION_ARENAS_ATTR = "lz.region_arena_sizes"
# On a function: the indices of its arguments that are weights (a traced module's parameters and
# buffers: the same from call to call as a rule).  A CPU kernel reads them pre-packed as it reads a
# loop's invariants; the plan packs one again unless its caller vouches that it is unchanged (issue
# 17: ``lezero.runtime.cpu.PackedInput``, ``lezero.jit.trace``).
WEIGHT_ARGUMENTS_ATTR = "lz.weight_arguments"


def without_weight_arguments(module: ModuleOp) -> ModuleOp:
    """``module``, or a copy whose functions list no weight arguments when any does: for a caller
    whose weights are plain inputs (a native executable's; a call that cannot say they are
    unchanged, where each GEMM packing its weight as it reads it costs less than a pack of the whole
    weight beforehand)."""
    if not any(WEIGHT_ARGUMENTS_ATTR in f.attributes for f in module.functions):
        return module
    module = module.clone()
    for f in module.functions:
        f.attributes.pop(WEIGHT_ARGUMENTS_ATTR, None)
    return module


KERNEL_PIPELINE = ("shape-infer,fuse-attention,fold-qdq,decompose{keep=lz.attention,lz.matmul_integer,lz.conv_integer},canonicalize,loop-sums,licm,cse,constant-fold,dce,shape-infer,"
                   "partition,fuse,memory-plan")


def kernel_pipeline(target: str = "cpu") -> str:
    """``KERNEL_PIPELINE`` partitioning for ``target``."""
    targets.check_target(target)
    backend = targets.backend(target)  # registers what it runs with placement, its fusion facts with partition's cost model
    if target == "cpu":
        # issue 11: convs over channel-blocked activations where the CPU's vectors fit a block
        block = backend.layout_block()
        return KERNEL_PIPELINE if block is None else \
            KERNEL_PIPELINE.replace("partition,", f"blocked-layout{{block={block}}},dce,partition,")
    # fuse-attention makes CPU kernels (kind "attention", lezero/codegen/llvm/attention.py); other
    # targets run lz.attention's decomposition.  The GPU keeps the int8 contractions whole too
    # (tl.dot on int8 tiles: triton/contraction.py), so fold-qdq makes them of QDQ models as for the CPU
    return KERNEL_PIPELINE.replace("fuse-attention,", "").replace("keep=lz.attention,", "keep=") \
        .replace("partition,", f"partition{{target={target}}},")


def is_scheduled(module: ModuleOp, target: str = "cpu") -> bool:
    """Whether every function already holds only constants, kernels and its return (for a target
    other than the CPU: placed kernels, each with its ``device``)."""
    ops = [op for f in module.functions for op in f.entry_block.ops]
    return all(op.name in ("lz.constant", "lz.kernel", "func.return") or
               (op.name in CONTROL_FLOW_OPS and REGION_ARENAS_ATTR in op.attributes) for op in ops) and \
        all(ARENA_SIZE_ATTR in f.attributes for f in module.functions) and \
        (target == "cpu" or all("device" in op.attributes for op in ops if op.name == "lz.kernel"))


def schedule(module: ModuleOp, target: str = "cpu") -> ModuleOp:
    """Run ``kernel_pipeline(target)`` (unless the module is already scheduled for it: kernels
    scheduled for the CPU are placed again, each on the CPU, with transfers); every value must then
    have a static type."""
    if not is_scheduled(module, target):
        verify_each = os.environ.get("LEZERO_VERIFY_EACH", "") == "1"
        module = run_pipeline(module, kernel_pipeline(target), verify_each=verify_each)
        if not verify_each:
            verify(module)
        for f in module.functions:
            mark_constant_operands(f, weights=target == "cpu")
            schedule_regions(f)
    for f in module.functions:
        for op in f.entry_block.ops:
            for r in op.results:
                if isinstance(r.type, TensorType) and not r.type.is_static:
                    raise IRError(f"'{op.name}' op result {r.type} is dynamic: code generation needs static "
                                  "shapes (bind the dims first)", op.location)
    return module


# Kernel kinds whose CPU lowering reads constant operands pre-packed (issue 11: a conv's weights,
# a matmul's constant B).
PACKED_CONSTANT_KINDS = ("conv", "matmul", "conv_blocked")
# ... and those that read a loop's invariants pre-packed in its body (issue 17: an RNN's recurrent
# weight, packed once per run of the loop instead of once per iteration).
PACKED_INVARIANT_KINDS = ("conv", "matmul")


def mark_constant_operands(func: FuncOp, weights: bool = False) -> None:
    """Give each kernel of ``func`` whose kind reads constants pre-packed the indices of its
    operands that ``lz.constant`` defines (``CONSTANT_OPERANDS_ATTR``): the plan knows them when
    it is built, and the kernel's text (its cache key) says so.  With ``weights`` (the CPU), the
    function's weight arguments (``WEIGHT_ARGUMENTS_ATTR``) are read pre-packed too, by the kinds
    that read a loop's invariants so: the plan packs them (``ExecutionPlan.packed_inputs``)."""
    marked = func.attributes.get(WEIGHT_ARGUMENTS_ATTR) if weights else None
    invariants = set() if marked is None else {func.arguments[i] for i in marked.values}
    for op in func.entry_block.ops:
        kind = op.definition.attrs(op).kind if op.name == "lz.kernel" else None
        if kind in PACKED_CONSTANT_KINDS:
            _mark(op, invariants if kind in PACKED_INVARIANT_KINDS else set())


def mark_invariant_operands(loop: Operation) -> None:
    """Add to the constant operands of the kernels in ``loop``'s scheduled regions (an lz.for or
    lz.while) those that are the loop's invariants: fixed in every iteration of one run of the
    loop, so the region's plan packs them once per run (``ExecutionPlan.packed_inputs``)."""
    first = FIRST_INVARIANT_ARGUMENT[loop.name]
    count = loop.definition.attrs(loop).num_invariant
    for region in loop.regions:
        invariants = set(region.block.args[first:first + count])
        for op in region.block.ops:
            if op.name == "lz.kernel" and op.definition.attrs(op).kind in PACKED_INVARIANT_KINDS:
                _mark(op, invariants)


def _mark(kernel: Operation, invariants: set) -> None:
    """Set ``kernel``'s constant operands: the ``lz.constant`` results (where its kind packs
    constants) and ``invariants``."""
    packs_constants = kernel.definition.attrs(kernel).kind in PACKED_CONSTANT_KINDS
    constant = tuple(i for i, v in enumerate(kernel.operands) if v in invariants or (
        packs_constants and isinstance(v.owner, Operation) and v.owner.name == "lz.constant"))
    if constant:
        kernel.attributes[CONSTANT_OPERANDS_ATTR] = DenseArrayAttr(I64, constant)


def schedule_regions(func: FuncOp) -> None:
    """Schedule each region of ``func``'s control-flow ops as a function of its own, in place
    (see the module docstring)."""
    for op in func.entry_block.ops:
        if op.name not in CONTROL_FLOW_OPS:
            continue
        sizes = []
        for region in op.regions:
            scheduled = schedule(ModuleOp([region_function(region.block)])).functions[0]
            _replace_body(region.block, scheduled)
            sizes.append(scheduled.attributes[ARENA_SIZE_ATTR].value)
        if op.name in FIRST_INVARIANT_ARGUMENT:
            mark_invariant_operands(op)
        op.attributes[REGION_ARENAS_ATTR] = DenseArrayAttr(I64, tuple(sizes))


def region_function(block: Block) -> FuncOp:
    """``@region(block args) -> yielded values``: a copy of an isolated region's block."""
    yielded = block.terminator
    func = FuncOp("region", FunctionType([a.type for a in block.args], yielded.operand_types))
    _copy_ops(block, func.entry_block, dict(zip(block.args, func.arguments)), "func.return")
    return func


def _replace_body(block: Block, func: FuncOp) -> None:
    """``block``'s ops replaced by ``func``'s (its arguments are the block's, its return a yield)."""
    for op in list(block.ops):
        op.drop_all_references()
        block.remove(op)
    _copy_ops(func.entry_block, block, dict(zip(func.arguments, block.args)), "lz.yield")


def _copy_ops(source: Block, target: Block, mapping: dict, terminator: str) -> None:
    *ops, last = source.ops
    for op in ops:
        target.append(op.clone(mapping))
    target.append(Operation(terminator, [mapping.get(v, v) for v in last.operands], location=last.location))
