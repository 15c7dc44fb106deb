"""Reduction kernels: ``reduce_*``/``argmax`` ops over the same axes of one input shape, with
the elementwise prologue that feeds them and the epilogue that consumes their results (at the
reduced shape, or broadcast back to the input shape: softmax, layer norm).

The input shape's dims split three ways: reduced dims; kept dims before the last reduced one
(*outer*: fixed for a work item); kept dims after it (*inner*: the tile, flattened).  A work item
is one position of the outer dims and a block of at most ``TILE`` (256) tile positions.  For it:

    for each reduction, in program order:
        acc[t] = identity                                for t in the tile block
        for each reduced index:  for t in the block:
            acc[t] = combine(acc[t], prologue at the input index)
        res[t] = finalize(acc[t]) rounded to the result type
    epilogue at the reduced shape:  for t: store each reduced-shape result
    epilogue at the input shape:    for each reduced index: for t: store each input-shape result

A later reduction's prologue (softmax's ``exp(x - max)``) and the epilogues read earlier results
from ``res`` at the current tile position: every reduction is one pass over its input, nothing is
recomputed per element of the row.  Reducing trailing axes (the usual case) leaves no tile: the
block is one position, ``acc`` a scalar LLVM keeps in registers and the accumulation loop a
vectorized reduction (float adds may reassociate, as numpy's pairwise sum does).  Reducing
leading axes (a bias gradient: sum over the batch) makes the tile loop innermost: contiguous,
vectorized, no reordering.  f16 and bf16 accumulate in f32; argmax keeps the first maximum and
treats nan as the maximum, as numpy does.

A reduction over every axis is one work item (no parallel split yet).
"""
from __future__ import annotations

import math

import llvmlite.ir as ir

from lezero.codegen.affine import Affine, Var
from lezero.codegen.errors import LoweringError
from lezero.codegen.llvm.kernel_function import KernelContext
from lezero.codegen.llvm.loops import for_range, i64, min_i64, unravel_values
from lezero.codegen.llvm.scalar_builder import Scalar, accumulator_type, compute_type
from lezero.ir.dialect.axes import normalize_axis, reduction_axes
from lezero.ir.dialect.numerics import lowest
from lezero.ir.dialect.reduction import REDUCE_OPS
from lezero.ir.types import I1, I64, format_shape

REDUCTION_OPS = frozenset(REDUCE_OPS) | {"lz.argmax"}
TILE = 256  # tile positions per work item: accumulators stay in L1, and columns split into items


def reduced_axes(op) -> tuple:
    rank = op.operands[0].type.rank
    attrs = op.definition.attrs(op)
    if op.name == "lz.argmax":
        return (normalize_axis(attrs.axis, rank),)
    return reduction_axes(attrs.axes, rank)


class _Reduction:
    """One reduction op's accumulators (``TILE`` slots each) and how it reads its result."""

    def __init__(self, ctx: KernelContext, op, block: int):
        self.op = op
        self.input_dtype = op.operands[0].type.element_type
        self.result_dtype = op.result.type.element_type
        self.acc_dtype = self.input_dtype if op.name == "lz.argmax" else accumulator_type(self.input_dtype)
        self.acc = ctx.fn.alloca(compute_type(self.acc_dtype), block, "acc")
        self.position = ctx.fn.alloca(ir.IntType(64), block, "argmax") if op.name == "lz.argmax" else None
        self.result = ctx.fn.alloca(compute_type(self.result_dtype), block, "reduced")


def lower_reduction(ctx: KernelContext) -> int:
    ops = [op for op in ctx.body.ops if op.name in REDUCTION_OPS]
    if not ops:
        raise LoweringError(f"failed to lower reduction kernel {ctx.name} for {ctx.target}: it holds no reduction",
                            ctx.kernel.location)
    full = ops[0].operands[0].type.shape
    axes = reduced_axes(ops[0])
    for op in ops[1:]:
        if op.operands[0].type.shape != full or reduced_axes(op) != axes:
            raise LoweringError(
                f"failed to lower {op.name} with {op.result.type.element_type} for {ctx.target}: it reduces axes "
                f"{list(reduced_axes(op))} of {format_shape(op.operands[0].type.shape)}, the kernel's first "
                f"reduction {list(axes)} of {format_shape(full)}", op.location)
    rank = len(full)
    b, e = ctx.b, ctx.emitter
    if 0 in [d for k, d in enumerate(full) if k not in axes]:
        ctx.fn.finish()  # nothing kept: no output elements
        return 1

    variables = {k: Var(f"i{k}", d) for k, d in enumerate(full) if d != 1}
    full_index = tuple(Affine.of(variables[k]) if k in variables else Affine() for k in range(rank))
    last = max(axes, default=-1)
    kept = [k for k in range(rank) if k not in axes]
    outer = [k for k in kept if k < last and k in variables]
    inner = [k for k in kept if k > last and k in variables]
    reduced = [k for k in axes if k in variables]
    tile = math.prod(full[k] for k in inner)
    block = min(tile, TILE)
    blocks = math.ceil(tile / block)
    positions = math.prod(full[k] for k in outer)
    count = math.prod(full[k] for k in axes)
    reductions = {op: _Reduction(ctx, op, block) for op in ops}
    tile_vars = [variables[k] for k in inner]

    with for_range(b, ctx.fn.begin, ctx.fn.end, "item") as item:
        position, tile_block = item, None
        if blocks > 1:
            position, tile_block = b.udiv(item, i64(blocks)), b.urem(item, i64(blocks))
        if outer:
            for k, value in zip(outer, unravel_values(b, position, [full[k] for k in outer])):
                ctx.index.bind(variables[k], value)
        lo = i64(0) if tile_block is None else b.mul(tile_block, i64(block))
        hi = b.add(lo, i64(block)) if tile % block == 0 else min_i64(b, b.add(lo, i64(block)), tile)

        def over_tile(emit):
            """``emit(slot)`` for each tile position of the block (slot: its accumulator index)."""
            if not tile_vars:
                e.new_scope()
                emit(i64(0))
                return
            with for_range(b, lo, hi, "t") as t:
                ctx.index.bind_group(tile_vars, t)
                e.new_scope()
                emit(b.sub(t, lo))

        def over_reduced(emit, depth=0):
            if depth == len(reduced):
                emit()
                return
            with for_range(b, 0, full[reduced[depth]], f"r{reduced[depth]}") as r:
                ctx.index.bind(variables[reduced[depth]], r)
                over_reduced(emit, depth + 1)

        def read_result(op, value, index):
            """A reduction's result at ``index`` of its own shape: the slot of this block."""
            red = reductions[op]
            keepdims = op.definition.attrs(op).keepdims
            coords = {k: index[k] for k in kept} if keepdims else dict(zip(kept, index))
            for k in outer:
                if coords[k] != Affine.of(variables[k]):
                    raise e.failure(op, "its result is read at another position than the one being reduced")
            slot = i64(0)
            if tile_vars:
                flat, stride = Affine(), 1
                for k in reversed(inner):
                    flat = flat + coords[k] * stride
                    stride *= full[k]
                slot = b.sub(ctx.index.value(flat), lo)
            return Scalar(b.load(b.gep(red.result, [slot], source_etype=red.result.allocated_type),
                                 typ=red.result.allocated_type), red.result_dtype)

        e.overrides = {op: read_result for op in ops}
        for op in ops:
            _emit_reduction(ctx, reductions[op], full_index, count, over_tile, over_reduced)

        kept_index = tuple(Affine() if k in axes else full_index[k] for k in range(rank))
        dropped_index = tuple(full_index[k] for k in kept)
        at_full, at_reduced = [], []
        for y, buffer in zip(ctx.yields, ctx.result_buffers):
            shape = y.type.shape
            if shape == full:
                at_full.append((y, buffer))
            elif shape == tuple(full[k] if k not in axes else 1 for k in range(rank)):
                at_reduced.append((y, buffer, kept_index))
            elif shape == tuple(full[k] for k in kept):
                at_reduced.append((y, buffer, dropped_index))
            else:
                raise LoweringError(f"failed to lower reduction kernel {ctx.name} for {ctx.target}: it yields a "
                                    f"{format_shape(shape)} value, neither the input shape {format_shape(full)} "
                                    "nor a reduced one", ctx.kernel.location)
        if at_reduced:
            over_tile(lambda slot: [e.store(buffer, index, e.at(y, index)) for y, buffer, index in at_reduced])
        if at_full:
            over_reduced(lambda: over_tile(lambda slot: [e.store(buffer, full_index, e.at(y, full_index))
                                                         for y, buffer in at_full]))
    ctx.fn.finish()
    return positions * blocks


def _slot_address(b, array, slot):
    return b.gep(array, [slot], source_etype=array.allocated_type)


def _emit_reduction(ctx: KernelContext, red: _Reduction, full_index, count, over_tile, over_reduced):
    b, s, e = ctx.b, ctx.s, ctx.emitter
    op = red.op
    definition = op.definition
    argmax = red.position is not None

    def load(array, slot, dtype):
        return Scalar(b.load(_slot_address(b, array, slot), typ=array.allocated_type), dtype)

    def store(array, slot, value):
        b.store(value, _slot_address(b, array, slot))

    identity = lowest(red.acc_dtype.numpy_dtype) if argmax else definition.identity(red.acc_dtype.numpy_dtype)

    def init(slot):
        store(red.acc, slot, s.constant(identity, red.acc_dtype).value)
        if argmax:
            store(red.position, slot, i64(0))

    def accumulate(slot):
        x = e.at(op.operands[0], full_index)
        acc = load(red.acc, slot, red.acc_dtype)
        if argmax:
            axis = reduced_axes(op)[0]
            here = ctx.index.value(full_index[axis])
            take = s.cmp("gt", x, acc)
            if x.dtype.is_float:  # nan is the maximum: the first nan wins over anything else
                first_nan = b.and_(b.fcmp_unordered("uno", x.value, x.value),
                                   b.fcmp_ordered("ord", acc.value, acc.value))
                take = Scalar(b.or_(take.value, first_nan), I1)
            store(red.acc, slot, b.select(take.value, x.value, acc.value))
            position = load(red.position, slot, I64)
            store(red.position, slot, b.select(take.value, here, position.value))
            return
        with s.reassociating():
            out = definition.combine(s, acc, s.cast(x, red.acc_dtype))
        store(red.acc, slot, out.value)

    def finalize(slot):
        if argmax:
            store(red.result, slot, load(red.position, slot, I64).value)
            return
        value = definition.finalize(s, load(red.acc, slot, red.acc_dtype), count)
        store(red.result, slot, s.cast(value, red.result_dtype).value)

    over_tile(init)
    over_reduced(lambda: over_tile(accumulate))
    over_tile(finalize)
