"""Elementwise kernels: flat 1-D blocks over the iteration space (the yielded shape).

Each program takes ``BLOCK`` consecutive row-major positions of the iteration space::

    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < 16384

and computes every yielded value there through the "value at index" walk.  The index is one
variable per dim, all bound to ``offs`` as a group: an address that is a row-major flattening of
them (any operand of the iteration space's shape) is ``b0 + offs``, contiguous, which the GPU
compiler vectorizes; a broadcast operand or a transpose recovers its dims with ``//`` and ``%``.
Every result of a position is computed (all its loads issued) before any is stored, so a result
that memory-plan puts in place of an operand reads its element before it is overwritten.
"""
from __future__ import annotations

import math

from lezero.codegen.kernel import index_variables, iteration_space
from lezero.codegen.triton.context import TritonContext, next_pow2
from lezero.codegen.triton.kernel import LaunchConfig

# Block sizes tried on a GPU (autotuning); the first that is not much larger than the space is
# the heuristic.  Under the interpreter a program runs in Python, so fewer, larger blocks are cheaper.
BLOCKS = (1024, 2048, 512)


def flat_blocks(ctx: TritonContext, size: int, name: str = "BLOCK") -> tuple:
    """The prologue of a program over ``size`` flat positions (``offs``, ``mask``) and its configs."""
    pid = "tl.program_id(0)" if ctx.index_type() == "tl.int32" else "tl.program_id(0).to(tl.int64)"
    ctx.code.line(f"pid = {pid}")
    ctx.code.line(f"offs = pid * {name} + tl.arange(0, {name})")
    ctx.code.line(f"mask = offs < {size}")
    fit = max(16, next_pow2(size))
    sizes = sorted({min(b, fit) for b in BLOCKS}, key=lambda b: (b != min(BLOCKS[0], fit), b))
    return tuple(LaunchConfig({name: b}, (math.ceil(size / b),), num_warps=4 if b <= 1024 else 8)
                 for b in sizes)


def store_yields(ctx: TritonContext, index) -> None:
    """Every result at ``index``: all computed before any is stored (in-place results)."""
    e = ctx.emitter
    e.new_scope()
    values = [e.at(y, index) for y in ctx.yields]
    for value, buffer in zip(values, ctx.result_buffers):
        e.store(buffer, index, value)


def lower_elementwise(ctx: TritonContext) -> tuple:
    """Write the body; the launch configurations."""
    shape = iteration_space(ctx)
    size = math.prod(shape)
    if size == 0:
        ctx.code.line("pass  # an empty iteration space")
        return (LaunchConfig({}, (1,)),)
    configs = flat_blocks(ctx, size)
    variables, index = index_variables(shape)
    if variables:
        ctx.index.bind_group(variables, "offs")
    ctx.emitter.mask = "mask"
    ctx.emitter.zero_lanes = "offs * 0"
    store_yields(ctx, index)
    return configs
