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
``CHUNK`` elements of it when it is long, else one row of it (the code names no row count).
In a sequence form (``row_generic.SEQUENCE_ATTR``) an extent may be a ``RunTimeSize``: the loop
bounds and the rows' coordinates are then computed from the run-time length
(``IndexMaterializer.size``), and such a loop keeps LLVM's interleaving (its rows are short).

Concats: a kernel yielding one ``lz.concat`` (a DDP bucket's flat gradients, densenet's feature
maps) is one loop nest per piece, whose index range along the axis picks that piece statically:
each piece a contiguous copy, vectorized; the pieces' work items follow one another.

Transposes: a kernel that is one ``lz.transpose`` of an operand moving its contiguous dim away
from the innermost one copies blocks of W x W elements (W = 16 floats with AVX-512): W vectors
loaded along the operand's contiguous dim, transposed in registers (``vectors.transpose_square``),
stored as W vectors along the result's rows, so every cache line read or written is used whole
at once (power-of-two strides make lines evict each other in L1 otherwise); a work item is a
band of W rows of the result, the ragged edges are scalar loops.

Tiles: otherwise, when a read moves through memory with a large stride along the innermost loop (a
transpose: ``y[i, j] = x[j, i]``) and is contiguous along an outer loop, those two loops are cut
into ``TILE`` blocks: a work item is a band of ``TILE[0]`` values of the outer loop, walked one
tile at a time, so that the ``TILE[1]`` cache lines a tile reads are read whole (one per
``TILE[0]`` rows) while they are in L1, and the stores stay contiguous along the innermost loop
(LLVM vectorizes the strided reads as gathers).
"""
from __future__ import annotations

import math

import llvmlite.ir as ir

from lezero.codegen.affine import RunTimeSize
from lezero.codegen.kernel import index_variables, iteration_space
from lezero.codegen.llvm import vectors
from lezero.codegen.llvm.context import KernelContext
from lezero.codegen.llvm.ir_types import I64
from lezero.codegen.llvm.loops import for_range, min_i64, unravel_values
from lezero.codegen.row_generic import any_rows
from lezero.codegen.value_at_index import Buffer
from lezero.ir.core import Operation
from lezero.ir.dialect.axes import normalize_axis
from lezero.ir.dialect.data_movement import TransposeOp

CHUNK = 16384  # elements per work item of a long row: threads still balance
# A long inner loop runs four vector iterations at once: the transcendentals are long dependency
# chains, and LLVM's own choice (one, for register pressure) leaves the FP units idle (measured:
# exp, sigmoid and gelu 8-20% faster on Zen 4).  Short loops keep LLVM's choice, so that their
# few elements still fill a vector iteration.  A loop of a multiple of INTERLEAVE_WHOLE elements
# from INTERLEAVE_MIN_WHOLE up runs whole interleaved iterations (no remainder loop) and is
# interleaved too: an LSTM's gates over 256-unit rows (slices of the gate pre-activations, so the
# rows do not coalesce), 56.6 -> 48.4 us a call at 64 x 256 on one Xeon thread; a 300-element row
# loses (45 -> 58 us: 44 elements left over), so other lengths below 512 keep LLVM's choice.
INTERLEAVE = {"interleave_count": 4}
INTERLEAVE_MIN_TRIP_COUNT = 512
INTERLEAVE_MIN_WHOLE, INTERLEAVE_WHOLE = 256, 64  # 64: four 16-float AVX-512 vectors


def interleave_hints(extent) -> dict:
    """The loop hints of an inner loop of ``extent`` elements (a RunTimeSize: LLVM's choice)."""
    if isinstance(extent, RunTimeSize):
        return {}
    whole = extent >= INTERLEAVE_MIN_WHOLE and extent % INTERLEAVE_WHOLE == 0
    return INTERLEAVE if extent >= INTERLEAVE_MIN_TRIP_COUNT or whole else {}


# A read whose stride along the innermost loop is at least STRIDED_READ elements (every element
# in its own cache line) tiles that loop with the outer loop it reads contiguously: tiles of
# TILE[0] x TILE[1] (outer x innermost): 16 x 16 floats, 16 whole lines in L1 (more lines
# conflict in L1 when the stride is a power of two: measured on 256 x 256 and 4096 x 1024).
STRIDED_READ = 16
TILE = (16, 16)


def coalesce(forms, loop_vars: list, rows_apart: bool = False) -> list[list]:
    """Groups of neighbouring loop variables that every form addresses row-major (``rows_apart``:
    the first one in a group of its own, the rows of a rows form, whose count the code must not
    name)."""
    if rows_apart and len(loop_vars) > 1:
        return [loop_vars[:1]] + coalesce(forms, loop_vars[1:])
    groups: list[list] = []
    for v in loop_vars:
        if groups and all(f.coef(groups[-1][-1]) == f.coef(v) * v.extent for f in forms):
            groups[-1].append(v)
        else:
            groups.append([v])
    return groups


def tiled_group(forms, groups: list[list]) -> int | None:
    """The outer loop group to tile with the innermost one (``groups[-1]``): along which a read
    that strides through memory on the innermost loop is contiguous; None when no read strides
    (or none is contiguous along another loop)."""
    inner = groups[-1][-1]
    for form in forms:
        if abs(form.coef(inner)) < STRIDED_READ:
            continue
        for g in range(len(groups) - 1):
            if abs(form.coef(groups[g][-1])) == 1:
                return g
    return None


def _store_yields(ctx: KernelContext, index) -> None:
    """Every result at ``index``: all computed (every operand element loaded) before any is
    stored, as an in-place result (memory-plan) needs."""
    ctx.emitter.new_scope()
    values = [ctx.emitter.at(y, index) for y in ctx.yields]
    for value, buffer in zip(values, ctx.result_buffers):
        ctx.emitter.store(buffer, index, value)


def _analyze(ctx: KernelContext, loop_vars, index) -> list:
    """Every index form a straightforward emission asks for (the emission is thrown away)."""
    scratch = KernelContext(ctx.kernel, ir.Module(name="analysis"), ctx.name, ctx.target, ctx.cpu)
    scratch.index.recorded = []
    for v in loop_vars:
        scratch.index.bind(v, scratch.fn.begin)  # any i64: the code is never run
    _store_yields(scratch, index)
    return scratch.index.recorded


def lower_elementwise(ctx: KernelContext) -> int:
    """Emit the kernel; the number of work items."""
    shape = iteration_space(ctx)
    if 0 in shape:
        ctx.fn.finish()
        return 1
    copy = transposed_copy(ctx)
    if copy is not None:
        return _lower_transposed_copy(ctx, *copy)
    pieces = concat_pieces(ctx)
    if pieces is None:
        loop_vars, index = index_variables(shape)
        work_items = _loop_nest(ctx, loop_vars, index, lambda n: (ctx.fn.begin, ctx.fn.end))
    else:
        axis, spans = pieces
        work_items = 0
        for start, size in spans:
            loop_vars, index = index_variables(shape[:axis] + (size,) + shape[axis + 1:])
            index = index[:axis] + (index[axis] + start,) + index[axis + 1:]
            base = work_items
            work_items += _loop_nest(ctx, loop_vars, index, lambda n, base=base: _piece_items(ctx, base, n))
    ctx.fn.finish()
    return work_items


def _loop_nest(ctx: KernelContext, loop_vars, index, item_range) -> int:
    """The loops storing the yields at ``index`` over ``loop_vars``; ``item_range(n)`` gives the
    (begin, end) values of the ``n`` work items they make that this call runs.  Returns ``n``."""
    b = ctx.b
    forms = _analyze(ctx, loop_vars, index)
    groups = coalesce(forms, loop_vars, rows_apart=any_rows(ctx.kernel))
    extents = [math.prod(v.extent for v in g) for g in groups]
    # (a short innermost loop reads few lines, which stay in L1 from one row to the next anyway)
    tiled = tiled_group(forms, groups) if len(groups) > 1 and extents[-1] > TILE[1] else None
    if tiled is not None:
        return _tiled_loops(ctx, groups, extents, tiled, index, item_range)

    def inner_loop(lo, hi):
        with for_range(b, lo, hi, "t", **interleave_hints(extents[-1])) as t:
            ctx.index.bind_group(groups[-1], t)
            _store_yields(ctx, index)

    def bind_row(row):
        for g, value in zip(groups[:-1], unravel_values(b, row, [ctx.index.size(e) for e in extents[:-1]])):
            ctx.index.bind_group(g, value)

    if not groups:  # one element
        with for_range(b, *item_range(1), "item"):
            _store_yields(ctx, index)
        return 1
    length, rows = extents[-1], math.prod(extents[:-1])
    if length >= 2 * CHUNK:
        blocks = math.ceil(length / CHUNK)
        block = math.ceil(length / blocks)
        with for_range(b, *item_range(rows * blocks), "item") as item:
            bind_row(b.udiv(item, ir.Constant(item.type, blocks)))
            lo = b.mul(b.urem(item, ir.Constant(item.type, blocks)), ir.Constant(item.type, block))
            hi = b.add(lo, ir.Constant(item.type, block))
            inner_loop(lo, hi if length % block == 0 else min_i64(b, hi, length))
        return rows * blocks
    # A work item is one row: the runtime hands each thread one contiguous range of items
    # anyway, and code that never names the row count serves every row count
    # (lezero/codegen/row_generic.py: compiled once for all batch and sequence sizes).
    with for_range(b, *item_range(rows), "row") as row:
        bind_row(row)
        inner_loop(0, ctx.index.size(length))
    return rows


# --- concats: one loop nest per piece ----------------------------------------------------------------

def concat_pieces(ctx: KernelContext):
    """``(axis, [(start, size), ...])`` when the kernel yields one ``lz.concat`` (not a rows form):
    its pieces along ``axis``, size-0 ones dropped; else None.  Each piece gets its own loop nest,
    whose index range along ``axis`` picks the piece statically: a contiguous (vectorized) copy
    of it, where one loop over the whole result compares the index with every piece and loads
    from each (measured 14x slower than numpy.concatenate on a DDP bucket of 800 KB).  A rows
    form keeps that one loop: a nest per piece would make the work items name the row count."""
    if len(ctx.yields) != 1 or any_rows(ctx.kernel):
        return None
    (y,) = ctx.yields
    op = y.owner
    if not isinstance(op, Operation) or op.name != "lz.concat":
        return None
    axis = normalize_axis(op.definition.attrs(op).axis, y.type.rank)
    spans, start = [], 0
    for x in op.operands:
        size = x.type.shape[axis]
        if size:
            spans.append((start, size))
        start += size
    return axis, spans


def _piece_items(ctx: KernelContext, base: int, n: int):
    """The part of the function's work items ``[begin, end)`` in a piece's ``[base, base + n)``,
    as that piece's own items ``[lo, hi)`` (``lo >= hi`` when they miss it)."""
    b = ctx.b

    def local(item):
        shifted = b.sub(item, ir.Constant(I64, base))
        clipped = b.select(b.icmp_signed("<", shifted, ir.Constant(I64, 0)), ir.Constant(I64, 0), shifted)
        return min_i64(b, clipped, n)

    return local(ctx.fn.begin), local(ctx.fn.end)


def _tiled_loops(ctx: KernelContext, groups, extents, tiled: int, index, item_range) -> int:
    """Loops over TILE blocks of ``groups[tiled]`` x the innermost group; a work item is a band
    of TILE[0] values of ``groups[tiled]`` (for one value of every other outer group);
    ``item_range`` as ``_loop_nest``'s."""
    b = ctx.b
    rows, cols = TILE
    row_extent, col_extent = extents[tiled], extents[-1]
    others = [g for g in range(len(groups) - 1) if g != tiled]
    item_extents = [extents[g] for g in others] + [math.ceil(row_extent / rows)]

    def block(start, size: int, extent: int):
        stop = b.add(start, ir.Constant(start.type, size))
        return stop if extent % size == 0 else min_i64(b, stop, extent)

    with for_range(b, *item_range(math.prod(item_extents)), "item") as item:
        coords = unravel_values(b, item, item_extents)
        for g, value in zip(others, coords[:-1]):
            ctx.index.bind_group(groups[g], value)
        first_row = b.mul(coords[-1], ir.Constant(item.type, rows))
        last_row = block(first_row, rows, row_extent)
        with for_range(b, 0, math.ceil(col_extent / cols), "tile") as tile:
            first_col = b.mul(tile, ir.Constant(tile.type, cols))
            last_col = block(first_col, cols, col_extent)
            with for_range(b, first_row, last_row, "row") as row:
                ctx.index.bind_group(groups[tiled], row)
                with for_range(b, first_col, last_col, "t") as t:
                    ctx.index.bind_group(groups[-1], t)
                    _store_yields(ctx, index)
    return math.prod(item_extents)


# --- transposes: W x W blocks through registers -----------------------------------------------------

def transposed_copy(ctx: KernelContext):
    """``(operand, dims, p)`` when the kernel is one ``lz.transpose`` of operand ``operand`` that
    reads memory with a stride along the result's innermost dim: ``dims`` are the result's dims
    (size-1 dims dropped, neighbours the operand also holds row-major merged) as (extent, stride
    in the operand), ``p`` the one the operand is contiguous along; else None."""
    if len(ctx.yields) != 1:
        return None
    (y,) = ctx.yields
    op = y.owner
    if not isinstance(op, Operation) or op.name != "lz.transpose":
        return None
    x = viewed = op.operands[0]
    # a reshape of an operand is that operand's buffer, row-major in the reshaped shape (the
    # gradient of a weight read by every step of an RNN: [T, N, 4H] -> [T N, 4H], transposed)
    if isinstance(x.owner, Operation) and x.owner.name == "lz.reshape":
        x = x.owner.operands[0]
    if x not in ctx.body.args:
        return None
    perm = TransposeOp.permutation(op.definition.attrs(op), viewed.type.rank)
    x_strides = Buffer(None, viewed.type).strides
    dims: list[tuple[int, int]] = []
    for d, extent in enumerate(y.type.shape):
        stride = x_strides[perm[d]]
        if extent == 1:
            continue
        if dims and dims[-1][1] == stride * extent:
            dims[-1] = (dims[-1][0] * extent, stride)
        else:
            dims.append((extent, stride))
    if len(dims) < 2 or dims[-1][1] == 1 or 1 not in [stride for _, stride in dims]:
        return None
    return x, dims, [stride for _, stride in dims].index(1)


def _lower_transposed_copy(ctx: KernelContext, x, dims, p: int) -> int:
    """out[..., i, ..., t] = x[... + i + t * stride]: W x W blocks of (i along dim ``p``, t along
    the innermost dim) through registers; a work item is W values of dim ``p`` (and one value of
    every other outer dim) over all of t."""
    b = ctx.b
    itemsize = x.type.element_type.itemsize
    w = min(16, ctx.cpu.vector_bytes // itemsize)
    element = ir.IntType(8 * itemsize)  # bits are copied, whatever the type
    vector = ir.VectorType(element, w)
    extents = [extent for extent, _ in dims]
    in_strides = [stride for _, stride in dims]
    out_strides = [math.prod(extents[d + 1:]) for d in range(len(dims))]
    q = len(dims) - 1
    others = [d for d in range(q) if d != p]
    rows, cols = extents[p], extents[q]
    item_extents = [extents[d] for d in others] + [math.ceil(rows / w)]
    source = ctx.fn.buffers[ctx.body.args.index(x)]
    result = ctx.fn.buffers[len(ctx.kernel.operands)]

    def c(v):
        return ir.Constant(I64, v)

    def copy_elements(x_base, out_base, row_count, col_first):
        with for_range(b, 0, row_count, "i") as i:
            x_row = b.gep(source, [b.add(x_base, i)], source_etype=element)
            out_row = b.gep(result, [b.add(out_base, b.mul(i, c(out_strides[p])))], source_etype=element)
            with for_range(b, col_first, cols, "t") as t:
                value = b.load(b.gep(x_row, [b.mul(t, c(in_strides[q]))], source_etype=element), typ=element)
                b.store(value, b.gep(out_row, [t], source_etype=element))

    with for_range(b, ctx.fn.begin, ctx.fn.end, "item") as item:
        coords = unravel_values(b, item, item_extents)
        first_row = b.mul(coords[-1], c(w))
        x_base, out_base = first_row, b.mul(first_row, c(out_strides[p]))
        for d, value in zip(others, coords[:-1]):
            x_base = b.add(x_base, b.mul(value, c(in_strides[d])))
            out_base = b.add(out_base, b.mul(value, c(out_strides[d])))
        vector_cols = cols - cols % w
        full = b.icmp_signed("<=", b.add(first_row, c(w)), c(rows))
        with b.if_else(full) as (then, otherwise):
            with then:
                if vector_cols:
                    with for_range(b, 0, vector_cols // w, "block") as block:
                        t0 = b.mul(block, c(w))
                        loaded = [b.load(b.gep(source, [b.add(x_base, b.mul(b.add(t0, c(j)), c(in_strides[q])))],
                                               source_etype=element), typ=vector, align=itemsize) for j in range(w)]
                        for i, row in enumerate(vectors.transpose_square(b, loaded)):
                            at = b.add(out_base, b.add(c(i * out_strides[p]), t0))
                            b.store(row, b.gep(result, [at], source_etype=element), align=itemsize)
                if cols % w:
                    copy_elements(x_base, out_base, w, vector_cols)
            with otherwise:  # the last band, fewer than W rows
                copy_elements(x_base, out_base, b.sub(c(rows), first_row), 0)
    ctx.fn.finish()
    return math.prod(item_extents)
