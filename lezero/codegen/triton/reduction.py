"""Reduction kernels: ``reduce_*``/``argmax`` ops over the same axes of one input shape, with the
elementwise prologue that feeds them and the epilogue that consumes their results (at the
reduced shape, or broadcast back to the input shape: softmax, layer norm).  Also ``lz.cumulative``
(a ``single`` kernel) through ``tl.associative_scan``.

The input's positions are a 2-D tile: *rows*, the kept positions (flattened), and *columns*, the
reduced ones (flattened).  A program takes ``ROWS`` rows and walks the reduced extent in chunks
of ``RBLOCK`` columns (each lane of ``acc`` a partial result of its own, combined as a tree by
``tl.reduce``)::

    rows = pid * ROWS + tl.arange(0, ROWS)[:, None]
    for each reduction, in program order:
        acc = identity                                     (ROWS x RBLOCK lanes)
        for r0 in range(0, R, RBLOCK):
            cols = r0 + tl.arange(0, RBLOCK)[None, :]
            acc = combine(acc, prologue at (rows, cols))   (masked lanes keep the identity)
        red = finalize(tl.reduce(acc, 1, combine))         (ROWS x 1)
    epilogue at the reduced shape: stored at rows
    epilogue at the input shape: one more walk over the chunks, stored at (rows, cols)

More than ``FANOUT`` chunks are walked blocked (``lezero/codegen/accumulation.py``) unless the
combine is exact (max, min, argmax): nested chunk loops of at most ``FANOUT`` trips, each with a
partial ``acc`` of its own that it combines into the one outside after its last trip (steps past
the extent are masked off), so a lane's error grows with ``log(chunks)``, not with their number.

A later reduction's prologue (softmax's ``exp(x - max)``) and the epilogues read the earlier
results (``red``) of the same rows: every reduction is one pass over its input.  Row reductions
(trailing axes) read each row's chunk contiguously; column reductions (leading axes: a bias
gradient) make the rows the contiguous dim, so each chunk is still read along memory.  The
combine step is the op's own ``combine`` facet (a ``@triton.jit`` helper for ``tl.reduce``);
f16 and bf16 accumulate in f32; argmax keeps the first maximum and treats nan as the maximum, as
numpy does.
"""
from __future__ import annotations

import math

from lezero.codegen.accumulation import accumulator_type, block_sizes
from lezero.codegen.affine import Affine, Var
from lezero.codegen.kernel import lines_along_axis, scan_identity
from lezero.codegen.triton.context import TritonCode, TritonContext, next_pow2
from lezero.codegen.triton.kernel import LaunchConfig
from lezero.codegen.triton.scalar_builder import TritonScalarBuilder, TValue, compute_dtype, float_literal
from lezero.ir.dialect.numerics import lowest
from lezero.ir.dialect.reduction import REDUCTION_OPS, reduced_axes
from lezero.ir.types import I64, format_shape

SCAN_OPS = frozenset({"lz.cumulative"})
TILE = 4096  # lanes of a program's accumulator (ROWS x RBLOCK)
MAX_RBLOCK = 1024
MAX_SCAN = 16384  # the longest axis a cumulative scans in one block


def literal(value, dtype) -> str:
    """``value`` as a Python literal for ``tl.full`` and ``other=`` (inf and nan spelled out)."""
    return float_literal(float(value)) if dtype.is_float else str(int(value))


def combine_helper(ctx: TritonContext, op, acc_dtype) -> str:
    """A ``@triton.jit`` function combining two accumulators by ``op``'s ``combine`` facet (for
    ``tl.reduce``); its name."""
    name = f"{ctx.name}_{ctx.code.fresh('combine')}"
    code = TritonCode()
    s = TritonScalarBuilder(code)
    out = op.definition.combine(s, TValue("a", acc_dtype), TValue("b", acc_dtype))
    code.line(f"return {out.value}")
    ctx.s.helpers.update(s.helpers)
    ctx.extra_helpers[name] = f"\n@triton.jit\ndef {name}(a, b):\n{code.text()}\n"
    return name


ARGMAX_COMBINE = '''
@triton.jit
def lz_argmax_combine(av, ai, bv, bi):
    """The first maximum (nan is the maximum; a lane that saw nothing has index -1)."""
    a_nan = av != av
    b_nan = bv != bv
    same = (bv == av) | (b_nan & a_nan)
    b_wins = (ai < 0) | ((bi >= 0) & ((bv > av) | (b_nan & ~a_nan) | (same & (bi < ai))))
    return tl.where(b_wins, bv, av), tl.where(b_wins, bi, ai)
'''


def lower_reduction(ctx: TritonContext) -> tuple:
    ops = [op for op in ctx.body.ops if op.name in REDUCTION_OPS]
    if not ops:
        raise ctx.failure("it holds no reduction")
    full = ops[0].operands[0].type.shape
    axes = reduced_axes(ops[0])
    for op in ops[1:]:
        if op.operands[0].type.shape != full or reduced_axes(op) != axes:
            raise ctx.emitter.failure(op, f"it reduces axes {list(reduced_axes(op))} of "
                                          f"{format_shape(op.operands[0].type.shape)}, the kernel's first reduction "
                                          f"{list(axes)} of {format_shape(full)}")
    rank = len(full)
    kept = [k for k in range(rank) if k not in axes]
    rows_total = math.prod(full[k] for k in kept)
    count = math.prod(full[k] for k in axes)
    if rows_total == 0:
        ctx.code.line("pass  # nothing kept: no output elements")
        return (LaunchConfig({}, (1,)),)
    variables = {k: Var(f"i{k}", d) for k, d in enumerate(full) if d != 1}
    full_index = tuple(Affine.of(variables[k]) if k in variables else Affine() for k in range(rank))
    kept_vars = [variables[k] for k in kept if k in variables]
    reduced_vars = [variables[k] for k in axes if k in variables]
    rblock = min(next_pow2(count), MAX_RBLOCK)
    rows_block = max(1, min(next_pow2(rows_total), TILE // rblock))
    chunks = math.ceil(count / rblock)
    code, e = ctx.code, ctx.emitter
    pid = "tl.program_id(0)" if ctx.index_type() == "tl.int32" else "tl.program_id(0).to(tl.int64)"
    code.line(f"rows = {pid} * ROWS + tl.arange(0, ROWS)[:, None]")
    code.line(f"row_mask = rows < {rows_total}")
    if kept_vars:
        ctx.index.bind_group(kept_vars, "rows")
    results: dict = {}

    def read_result(op, value, index):
        keepdims = op.definition.attrs(op).keepdims
        coords = {k: index[k] for k in kept} if keepdims else dict(zip(kept, index))
        for k in kept:
            if coords[k] != full_index[k]:
                raise e.failure(op, "its result is read at another position than the one being reduced")
        return results[op]

    e.overrides = {op: read_result for op in ops}

    def over_columns(emit, sizes=(chunks,), level=None):
        """``emit()`` inside the walk over the reduced extent (index and mask bound per chunk):
        nested loops of ``sizes`` trips (outermost first) over chunks; ``level(j, walk)`` wraps
        the walk of loops ``j..`` (``j >= 1``) inside loop ``j - 1``: a blocked accumulation's
        partial results."""
        def walk(j, start, stop):
            depth = len(sizes) - 1 - j  # the chunk loop is r0, the one around it r1, ...
            step = "RBLOCK" if depth == 0 else str(rblock * math.prod(sizes[j + 1:]))
            with code.block(f"for r{depth} in range({start}, {stop}, {step}):"):
                if depth == 0:
                    code.line("cols = r0 + tl.arange(0, RBLOCK)[None, :]")
                    code.line(f"mask = row_mask & (cols < {count})")
                    if reduced_vars:
                        ctx.index.bind_group(reduced_vars, "cols")
                    e.mask = "mask"
                    e.zero_lanes = "(rows + cols) * 0"
                    e.new_scope()
                    emit()
                elif level is None:
                    walk(j + 1, f"r{depth}", f"r{depth} + {step}")
                else:
                    level(j + 1, lambda: walk(j + 1, f"r{depth}", f"r{depth} + {step}"))
            e.new_scope()  # names made inside the loop are not visible after it

        walk(0, "0", str(count))

    for op in ops:
        results[op] = _reduce(ctx, op, full_index, count, chunks, over_columns)

    e.mask = "row_mask"
    e.zero_lanes = "rows * 0"
    reduced_keep = tuple(full[k] if k not in axes else 1 for k in range(rank))
    at_full, at_reduced = [], []
    for y, buffer in zip(ctx.yields, ctx.result_buffers):
        if y.type.shape == full:
            at_full.append((y, buffer))
        elif y.type.shape == reduced_keep:
            at_reduced.append((y, buffer, tuple(Affine() if k in axes else full_index[k] for k in range(rank))))
        elif y.type.shape == tuple(full[k] for k in kept):
            at_reduced.append((y, buffer, tuple(full_index[k] for k in kept)))
        else:
            raise ctx.failure(f"it yields a {format_shape(y.type.shape)} value, neither the input shape "
                              f"{format_shape(full)} nor a reduced one")
    if at_reduced:
        e.new_scope()
        values = [e.at(y, index) for y, _, index in at_reduced]
        for value, (_, buffer, index) in zip(values, at_reduced):
            e.store(buffer, index, value)
    if at_full:
        def store_full():
            values = [e.at(y, full_index) for y, _ in at_full]
            for value, (_, buffer) in zip(values, at_full):
                e.store(buffer, full_index, value)

        over_columns(store_full)
    grid = (math.ceil(rows_total / rows_block),)
    return (LaunchConfig({"ROWS": rows_block, "RBLOCK": rblock}, grid, num_warps=4 if rows_block * rblock <= 2048
                         else 8),)


def _reduce(ctx: TritonContext, op, full_index, count, chunks, over_columns) -> TValue:
    """One reduction over the chunks; its result (ROWS x 1, the result's element type)."""
    code, e, s = ctx.code, ctx.emitter, ctx.s
    input_dtype = op.operands[0].type.element_type
    result_dtype = op.result.type.element_type
    argmax = op.name == "lz.argmax"
    acc_dtype = input_dtype if argmax else accumulator_type(input_dtype)
    t = compute_dtype(acc_dtype)
    identity = lowest(acc_dtype.numpy_dtype) if argmax else op.definition.identity(acc_dtype.numpy_dtype)
    acc = code.fresh("acc")
    code.line(f"{acc} = tl.full([ROWS, RBLOCK], {literal(identity, acc_dtype)}, {t})")
    if argmax:
        position = code.fresh("position")
        code.line(f"{position} = tl.full([ROWS, RBLOCK], -1, tl.int64)")

    def accumulate():
        x = s.cast(e.at(op.operands[0], full_index), acc_dtype)
        if argmax:
            here = TValue(code.assign("here", "cols.to(tl.int64) + tl.full([ROWS, RBLOCK], 0, tl.int64)"), I64)
            take = code.assign("take", f"mask & (({position} < 0) | ({x.value} > {acc}) | "
                                       f"(({x.value} != {x.value}) & ({acc} == {acc})))")
            code.line(f"{acc} = tl.where({take}, {x.value}, {acc})")
            code.line(f"{position} = tl.where({take}, {here.value}, {position})")
            return
        out = op.definition.combine(s, TValue(accs[-1], acc_dtype), x)
        code.line(f"{accs[-1]} = tl.where(mask, {out.value}, {accs[-1]})")

    def level(j, walk):
        code.line(f"{accs[j]} = tl.full([ROWS, RBLOCK], {literal(identity, acc_dtype)}, {t})")
        walk()
        out = op.definition.combine(s, TValue(accs[j - 1], acc_dtype), TValue(accs[j], acc_dtype))
        code.line(f"{accs[j - 1]} = {out.value}")

    blocked = not argmax and not op.definition.exact and acc_dtype.is_float
    sizes = block_sizes(chunks) if blocked else [chunks]
    accs = [acc] + [code.fresh("acc") for _ in sizes[1:]]
    over_columns(accumulate, sizes, level if len(sizes) > 1 else None)
    if argmax:
        ctx.extra_helpers["lz_argmax_combine"] = ARGMAX_COMBINE
        best = code.fresh("best")
        code.line(f"_, {best} = tl.reduce(({acc}, {position}), 1, lz_argmax_combine, keep_dims=True)")
        return TValue(best, I64)
    combine = combine_helper(ctx, op, acc_dtype)
    total = TValue(code.assign("red", f"tl.reduce({acc}, 1, {combine}, keep_dims=True)"), acc_dtype)
    finalize = getattr(op.definition, "finalize", None)
    value = finalize(s, total, count) if finalize is not None else total
    return s.cast(value, result_dtype)


def lower_cumulative(ctx: TritonContext, op) -> tuple:
    """Lines along the axis (``outer x inner`` of them, ``ROWS`` a program), each scanned whole in
    one block of ``N`` lanes by ``tl.associative_scan`` with the combine of ``lz.cumulative``."""
    attrs = op.definition.attrs(op)
    x = op.operands[0]
    dtype = x.type.element_type
    (x_buffer,) = [ctx.emitter.buffers[v] for v in op.operands]
    out_buffer = ctx.result_buffers[ctx.yields.index(op.result)]
    _, outer, n, inner = lines_along_axis(op)
    lines = outer * inner
    if lines * n == 0:
        ctx.code.line("pass  # an empty scan")
        return (LaunchConfig({}, (1,)),)
    code, s = ctx.code, ctx.s
    code.line("rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]")
    code.line("cols = tl.arange(0, N)[None, :]")
    code.line(f"mask = (rows < {lines}) & (cols < {n})")
    base = code.assign("base", f"rows // {inner} * {n * inner} + rows % {inner}" if inner > 1 else f"rows * {n}")
    fill = literal(scan_identity(attrs.combine, dtype), dtype)
    if attrs.exclusive:  # the element before (after, reversed) each one; the identity at the start
        neighbour = "cols + 1" if attrs.reverse else "cols - 1"
        inside = f"(cols + 1 < {n})" if attrs.reverse else "(cols >= 1)"
        code.line(f"x = tl.load({x_buffer.pointer} + {base} + ({neighbour}) * {inner}, mask=mask & {inside}, "
                  f"other={fill})")
    else:
        code.line(f"x = tl.load({x_buffer.pointer} + {base} + cols * {inner}, mask=mask, other={fill})")
    value = s.from_storage("x", dtype)
    scan_code = TritonCode()
    scan_s = TritonScalarBuilder(scan_code)
    combine = {"add": scan_s.add, "mul": scan_s.mul, "max": scan_s.max, "min": scan_s.min}[attrs.combine]
    out = scan_s.round(combine(TValue("a", dtype), TValue("b", dtype)))
    scan_code.line(f"return {out.value}")
    name = f"{ctx.name}_combine"
    ctx.extra_helpers[name] = f"\n@triton.jit\ndef {name}(a, b):\n{scan_code.text()}\n"
    filled = code.assign("t", f"tl.where(mask, {value.value}, {fill})")
    scanned = TValue(code.assign("scanned", f"tl.associative_scan({filled}, 1, {name}, reverse={attrs.reverse})"),
                     dtype)
    code.line(f"tl.store({out_buffer.pointer} + {base} + cols * {inner}, {s.to_storage(scanned)}, mask=mask)")
    block = next_pow2(n)
    rows = max(1, min(next_pow2(lines), TILE // block))
    return (LaunchConfig({"ROWS": rows, "N": block}, (math.ceil(lines / rows),)),)
