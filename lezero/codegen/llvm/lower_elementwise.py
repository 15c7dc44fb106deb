"""Elementwise kernels: a loop nest over the iteration space (the yielded shape), each yielded
value computed at the loop index by ``ValueAtIndex`` and stored.

Loop coalescing: neighbouring loops are merged where every address (and every index a pad, concat
or gather compares) is a row-major flattening over them: ``x + y`` of one shape is one flat loop,
``x[32, 64, 7, 7] * s[64, 1, 1]`` is 2048 rows of one loop of 49 (h and w merged, s constant
along both) rather than rows of 7, while ``x[64, 256] + b[256]`` stays 64 rows of 256 (b moves
with the inner loop only).  The analysis emits the kernel once into a scratch module with every
loop separate, recording each index form the materializer was asked for, and merges neighbours
``i, j`` when every form has ``coef(i) == coef(j) * extent(j)``.

Work items: the innermost (merged) loop runs contiguously; a work item is a block of about
``CHUNK`` elements of it when it is long, else enough whole rows of it to make about ``CHUNK``.
"""
from __future__ import annotations

import math

import llvmlite.ir as ir

from lezero.codegen.affine import Affine, Var
from lezero.codegen.errors import LoweringError
from lezero.codegen.llvm.kernel_function import KernelContext
from lezero.codegen.llvm.loops import for_range, min_i64, unravel_values
from lezero.ir.types import format_shape

CHUNK = 16384  # elements per work item: a call's overhead amortized, and threads still balance
# A long inner loop runs four vector iterations at once: the transcendentals are long dependency
# chains, and LLVM's own choice (one, for register pressure) leaves the FP units idle (measured:
# exp, sigmoid and gelu 8-20% faster on Zen 4).  Short loops keep LLVM's choice, so that their
# few elements still fill a vector iteration.
INTERLEAVE = {"interleave_count": 4}
INTERLEAVE_MIN_TRIP_COUNT = 512


def iteration_space(ctx: KernelContext) -> tuple:
    shape = ctx.yields[0].type.shape if ctx.yields else ()
    for y in ctx.yields:
        if y.type.shape != shape:
            raise LoweringError(f"failed to lower elementwise kernel {ctx.name} for {ctx.target}: yielded shapes "
                                f"{format_shape(shape)} and {format_shape(y.type.shape)} differ", ctx.kernel.location)
    return shape


def loop_variables(shape) -> tuple[list, tuple]:
    """One ``Var`` per dim of size > 1, and the index of the shape in them (size-1 dims are 0)."""
    variables = [Var(f"i{k}", d) if d != 1 else None for k, d in enumerate(shape)]
    index = tuple(Affine.of(v) if v is not None else Affine() for v in variables)
    return [v for v in variables if v is not None], index


def coalesce(forms, loop_vars: list) -> list[list]:
    """Groups of neighbouring loop variables that every form addresses row-major."""
    groups: list[list] = []
    for v in loop_vars:
        if groups and all(f.coef(groups[-1][-1]) == f.coef(v) * v.extent for f in forms):
            groups[-1].append(v)
        else:
            groups.append([v])
    return groups


def _store_yields(ctx: KernelContext, index) -> None:
    """Every result at ``index``: all computed (every operand element loaded) before any is
    stored, as an in-place result (memory-plan) needs."""
    ctx.emitter.new_scope()
    values = [ctx.emitter.at(y, index) for y in ctx.yields]
    for value, buffer in zip(values, ctx.result_buffers):
        ctx.emitter.store(buffer, index, value)


def _analyze(kernel, name: str, target: str, loop_vars, index) -> list:
    """Every index form a straightforward emission asks for (the emission is thrown away)."""
    scratch = KernelContext(kernel, ir.Module(name="analysis"), name, target)
    scratch.index.recorded = []
    for v in loop_vars:
        scratch.index.bind(v, scratch.fn.begin)  # any i64: the code is never run
    _store_yields(scratch, index)
    return scratch.index.recorded


def lower_elementwise(ctx: KernelContext) -> int:
    """Emit the kernel; the number of work items."""
    shape = iteration_space(ctx)
    b = ctx.b
    if 0 in shape:
        ctx.fn.finish()
        return 1
    loop_vars, index = loop_variables(shape)
    groups = coalesce(_analyze(ctx.kernel, ctx.name, ctx.target, loop_vars, index), loop_vars)
    extents = [math.prod(v.extent for v in g) for g in groups]

    def inner_loop(lo, hi):
        hints = INTERLEAVE if extents[-1] >= INTERLEAVE_MIN_TRIP_COUNT else {}
        with for_range(b, lo, hi, "t", **hints) as t:
            ctx.index.bind_group(groups[-1], t)
            _store_yields(ctx, index)

    def bind_row(row):
        for g, value in zip(groups[:-1], unravel_values(b, row, extents[:-1])):
            ctx.index.bind_group(g, value)

    if not groups:  # one element
        with for_range(b, ctx.fn.begin, ctx.fn.end, "item"):
            _store_yields(ctx, index)
        ctx.fn.finish()
        return 1
    length, rows = extents[-1], math.prod(extents[:-1])
    if length >= 2 * CHUNK:
        blocks = math.ceil(length / CHUNK)
        block = math.ceil(length / blocks)
        with for_range(b, ctx.fn.begin, ctx.fn.end, "item") as item:
            bind_row(b.udiv(item, ir.Constant(item.type, blocks)))
            lo = b.mul(b.urem(item, ir.Constant(item.type, blocks)), ir.Constant(item.type, block))
            hi = b.add(lo, ir.Constant(item.type, block))
            inner_loop(lo, hi if length % block == 0 else min_i64(b, hi, length))
        work_items = rows * blocks
    else:
        per_item = max(1, CHUNK // length)
        work_items = math.ceil(rows / per_item)
        with for_range(b, ctx.fn.begin, ctx.fn.end, "item") as item:
            if per_item == 1:
                bind_row(item)
                inner_loop(0, length)
            else:
                first = b.mul(item, ir.Constant(item.type, per_item))
                last = b.add(first, ir.Constant(item.type, per_item))
                with for_range(b, first, last if rows % per_item == 0 else min_i64(b, last, rows), "row") as row:
                    bind_row(row)
                    inner_loop(0, length)
    ctx.fn.finish()
    return work_items
