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
recomputed per element of the row.  Neighbouring reduced dims are walked as one flat loop.
Reducing trailing axes (the usual case) leaves no tile: the block is one position, ``acc`` a
scalar LLVM keeps in registers and the accumulation loop a vectorized reduction (float adds may
reassociate: each vector lane is a partial sum).  Reducing leading axes (a bias gradient: sum over
the batch) makes the tile loop innermost: contiguous, vectorized, no reordering.

"For each reduced index" is blocked (``lezero/codegen/accumulation.py``) unless the combine is
exact (max, min) or the reduction is an argmax: the reduced loops are split into nested loops of at
most ``FANOUT`` trips (the innermost of a row reduction up to ``row_leaf`` elements, spread over
the vector lanes), each with a partial accumulator of its own that it adds into the one outside
after its last trip, so the error grows with ``log(n)``, not ``n``.  f16 and bf16 accumulate in
f32; argmax keeps the first maximum and treats nan as the maximum, as numpy does.

Two things keep the passes of a row cheap (softmax over 12x197x197: 513 us before, ~240 after,
one thread; ONNX Runtime ~185): a row reduction whose accumulated values cost two ops or more
and are read again (softmax's ``exp(x - max)``) stores them in a stack row (``ROW_CACHE``) that
the later passes read instead of computing them again; and float max/min accumulate as integers
(``SORTABLE_NAN``), one vector instruction per element block where ``llvm.maximum`` is six.

A reduction over every axis is one work item (no parallel split yet).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import llvmlite.ir as ir

from lezero.codegen.accumulation import FANOUT, accumulator_type, block_sizes
from lezero.codegen.affine import Affine, Var
from lezero.codegen.errors import LoweringError
from lezero.codegen.kernel import lines_along_axis, scan_identity, single_buffers
from lezero.codegen.llvm.context import KernelContext, element_address
from lezero.codegen.llvm.loops import for_range, i64, min_i64, unravel_values
from lezero.codegen.llvm.scalar_builder import Scalar, compute_type
from lezero.ir.core import Operation
from lezero.ir.dialect.numerics import lowest
from lezero.ir.dialect.reduction import REDUCTION_OPS, reduced_axes
from lezero.ir.types import I1, I64, format_shape

TILE = 256  # tile positions per work item: accumulators stay in L1, and columns split into items
VECTORS_PER_LEAF = 4  # LLVM interleaves a vectorized reduction over 4 vector accumulators
# A row reduction keeps the values it accumulates in a stack row when later passes read them
# again and they cost two ops or more to compute (softmax's exp(x - max): the epilogue divides the
# cached row instead of computing exp again); the rows of a kernel hold at most ROW_CACHE float32
# elements (L1's 32 KB, on a thread's stack; f64 rows count twice).
ROW_CACHE = 8192
# Float max and min accumulate integers: the float's bits with every bit but the sign flipped when
# the sign is set, which orders as signed integers as the floats do (-0 below +0), a nan made
# the quiet nan of the sign that orders beyond +-inf, so it wins as in numpy.  llvm.maximum has the
# same semantics but lowers to a chain of six dependent instructions per vector on x86 (a row max
# ran 4x slower than a row sum); an integer max is one.
SORTABLE_NAN = {"lz.reduce_max": 1, "lz.reduce_min": -1}  # the sign of the quiet nan taken


def row_leaf(ctx: KernelContext, acc_dtype) -> int:
    """Elements of a row reduction's innermost loop: ``FANOUT`` per lane of the target's vector
    accumulators (1024 f32 on AVX-512, 256 on SSE), so that every CPU meets the same error bound."""
    lanes = max(1, ctx.cpu.vector_bytes // acc_dtype.itemsize) * VECTORS_PER_LEAF
    return FANOUT * lanes


@dataclass(frozen=True)
class _Loop:
    """One loop of the walk over the reduced positions: ``trips`` steps of ``step`` positions of a
    group of neighbouring reduced dims (``variables``, flattened: ``extent`` positions); the
    group's last loop binds its index."""

    variables: tuple
    extent: int
    step: int
    trips: int
    binds: bool

    def trip_count(self, b, start):
        """This loop's trips from ``start``, the position its enclosing loops of the group reached
        (a multiple of ``trips * step``); fewer past the group's extent."""
        if isinstance(start, ir.Constant):
            return min(self.trips, -(-(self.extent - start.constant) // self.step))
        if self.extent % (self.trips * self.step) == 0:
            return self.trips
        left = b.sub(i64(self.extent + self.step - 1), start)
        return min_i64(b, self.trips, b.udiv(left, i64(self.step)) if self.step > 1 else left)


def _reduced_loops(full, axes, variables, blocked: bool, vectorized_leaf: int = 0) -> list[_Loop]:
    """The loops over the reduced positions, outermost first: one per group of neighbouring reduced
    dims of size > 1, each split by ``block_sizes`` when ``blocked`` (its innermost loop up to
    ``vectorized_leaf`` long when it is the vectorized one, see ``row_leaf``)."""
    groups, previous = [], None
    for k in sorted(variables):
        if k in axes:
            if previous is not None and previous in axes:
                groups[-1].append(k)
            else:
                groups.append([k])
        previous = k
    loops = []
    for n, group in enumerate(groups):
        extent = math.prod(full[k] for k in group)
        leaf = vectorized_leaf if vectorized_leaf and n == len(groups) - 1 else FANOUT
        sizes = block_sizes(extent, leaf) if blocked else [extent]
        steps = [math.prod(sizes[j + 1:]) for j in range(len(sizes))]
        loops += [_Loop(tuple(variables[k] for k in group), extent, step, trips, j == len(sizes) - 1)
                  for j, (trips, step) in enumerate(zip(sizes, steps))]
    return loops


class _Reduction:
    """One reduction op's accumulators (``TILE`` slots each: one per loop of its walk when the walk
    is blocked, the outermost one the result's) and how it reads its result."""

    def __init__(self, ctx: KernelContext, op, block: int, full, axes, variables, vectorized_leaf: bool):
        self.op = op
        self.input_dtype = op.operands[0].type.element_type
        self.result_dtype = op.result.type.element_type
        argmax = op.name == "lz.argmax"
        self.acc_dtype = self.input_dtype if argmax else accumulator_type(self.input_dtype)
        blocked = not argmax and not op.definition.exact and self.acc_dtype.is_float
        self.loops = _reduced_loops(full, axes, variables, blocked,
                                    row_leaf(ctx, self.acc_dtype) if vectorized_leaf else 0)
        levels = max(1, len(self.loops)) if blocked else 1
        self.sortable = op.name in SORTABLE_NAN and self.acc_dtype.is_float
        acc_type = ir.IntType(self.acc_dtype.bitwidth) if self.sortable else compute_type(self.acc_dtype)
        self.accs = [ctx.fn.alloca(acc_type, block, "acc") for _ in range(levels)]
        self.position = ctx.fn.alloca(ir.IntType(64), block, "argmax") if argmax else None
        self.result = ctx.fn.alloca(compute_type(self.result_dtype), block, "reduced")
        self.row_cache = None  # the stack row holding the accumulated values (``_row_cached``)


def _expression_ops(value, stop) -> int:
    """The ops computing ``value`` inside the kernel, down to its operands and the ``stop`` ops."""
    seen, pending = set(), [value]
    while pending:
        v = pending.pop()
        op = v.owner
        if not isinstance(op, Operation) or op in stop or op in seen or op.name == "lz.constant":
            continue
        seen.add(op)
        pending += op.operands
    return len(seen)


def _row_cached(op, ops) -> bool:
    """Whether a row reduction would keep its accumulated values (``ROW_CACHE``): they are
    read again by an op other than ``op`` and cost two ops or more."""
    value = op.operands[0]
    return any(use.op is not op for use in value.uses) and _expression_ops(value, set(ops)) >= 2


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
    tile = math.prod(full[k] for k in inner)
    block = min(tile, TILE)
    blocks = math.ceil(tile / block)
    positions = math.prod(full[k] for k in outer)
    count = math.prod(full[k] for k in axes)
    tile_vars = [variables[k] for k in inner]
    reductions = {op: _Reduction(ctx, op, block, full, axes, variables, vectorized_leaf=not tile_vars) for op in ops}
    row_position = Affine()  # the position along the reduced dims (row-major), a row cache's index
    for k in sorted(axes):
        row_position = row_position * full[k] + full_index[k]
    cache_left, cached = 4 * ROW_CACHE, set()  # bytes
    for op, red in reductions.items():
        row_bytes = count * max(4, red.input_dtype.itemsize)  # (f16 and bf16 are kept as f32)
        value = op.operands[0]
        if not tile_vars and row_bytes <= cache_left and value not in cached and _row_cached(op, ops):
            red.row_cache = ctx.fn.alloca(compute_type(red.input_dtype), count, "row")
            cache_left -= row_bytes
            cached.add(value)
    epilogue_loops = _reduced_loops(full, axes, variables, blocked=False)
    row_lanes = max(1, ctx.cpu.vector_bytes // 4)

    with for_range(b, ctx.fn.begin, ctx.fn.end, "item") as item:
        position, tile_block = item, None
        if blocks > 1:
            position, tile_block = b.udiv(item, i64(blocks)), b.urem(item, i64(blocks))
        if outer:
            for k, value in zip(outer, unravel_values(b, position, [ctx.index.size(full[k]) for k in outer])):
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

        def over_reduced(loops, emit, level=None):
            """``emit()`` at each reduced position (the reduced dims' indices bound), walking
            ``loops``; ``level(j, walk)`` wraps the walk of loops ``j..`` (``j >= 1``) inside
            loop ``j - 1``: a blocked accumulation's partial results."""
            # Only a row reduction's innermost loop may unroll (the vectorizer interleaves it):
            # unrolled short loops around a tile loop would hold the whole tile block in registers
            # (and spill it), unrolled outer loops of a blocked walk only repeat the code.  Around
            # a tile loop the reduced loops are not vectorized either: LLVM unrolls a short tile
            # (a channel block's 16) and vectorizes the reduced loop across it, a gather per lane
            # (the blocked global mean read 7 GB/s; the tile in vectors, ~95).
            def hints(j):
                if tile_vars:
                    return {"unroll_disable": 1, "vectorize_enable": 0}
                if j < len(loops) - 1:
                    return {"unroll_disable": 1}
                # A row of one to four vectors is interleaved over as many vector accumulators as
                # it fills, and not unrolled: else LLVM skipped the vector loop (4 x 16 floats on
                # AVX-512), unrolled the row (a 7x7 mean's 49) and vectorized the items across it,
                # a gather per lane (a [1, 2048, 7, 7] mean read 12 GB/s; this way ~73).  Shorter
                # rows keep that (rows of 3 or 4: those gathers beat a loop).
                trips = loops[j].trips
                if 4 < trips < VECTORS_PER_LEAF * row_lanes:
                    return {"interleave_count": max(1, trips // row_lanes), "unroll_disable": 1}
                return {}

            def walk(j, start):
                if j == len(loops):
                    emit()
                    return
                loop = loops[j]
                with for_range(b, 0, loop.trip_count(b, start), f"r{j}", **hints(j)) as r:
                    here = b.add(start, b.mul(r, i64(loop.step))) if loop.step > 1 else b.add(start, r)
                    if loop.binds:
                        ctx.index.bind_group(list(loop.variables), here)
                    following = i64(0) if loop.binds else here
                    if level is not None and j + 1 < len(loops):
                        level(j + 1, lambda: walk(j + 1, following))
                    else:
                        walk(j + 1, following)

            walk(0, i64(0))

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

        def read_cached(op, value, index):
            """A row-cached value: from the row at ``full_index``, computed elsewhere."""
            if tuple(index) != full_index:
                del e.overrides[op]
                computed = e.at(value, index)
                e.overrides[op] = read_cached
                return computed
            row = cached_rows[op]
            address = b.gep(row, [ctx.index.value(row_position)], source_etype=row.allocated_type)
            return Scalar(b.load(address, typ=row.allocated_type), value.type.element_type)

        e.overrides = {op: read_result for op in ops}
        cached_rows = {}
        for op in ops:
            red = reductions[op]
            _emit_reduction(ctx, red, full_index, count, over_tile, over_reduced, row_position)
            if red.row_cache is not None:  # later passes read the row
                cached_rows[op.operands[0].owner] = red.row_cache
                e.overrides[op.operands[0].owner] = read_cached

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
            over_reduced(epilogue_loops, lambda: over_tile(
                lambda slot: [e.store(buffer, full_index, e.at(y, full_index)) for y, buffer in at_full]))
    ctx.fn.finish()
    return positions * blocks


def _slot_address(b, array, slot):
    return b.gep(array, [slot], source_etype=array.allocated_type)


def _sortable(b, x: ir.Value, op_name: str) -> ir.Value:
    """The float ``x`` as an integer ordered as the floats are, nan beyond every number (above for
    max, below for min): ``SORTABLE_NAN``."""
    t = ir.IntType(64 if x.type == ir.DoubleType() else 32)
    quiet_nan = ir.Constant(x.type, math.copysign(math.nan, SORTABLE_NAN[op_name]))
    bits = b.bitcast(b.select(b.fcmp_unordered("uno", x, x), quiet_nan, x), t)
    return _flip_negative(b, bits)


def _flip_negative(b, bits: ir.Value) -> ir.Value:
    """``bits`` with every bit but the sign flipped when the sign is set (its own inverse)."""
    width = bits.type.width
    return b.xor(bits, b.lshr(b.ashr(bits, ir.Constant(bits.type, width - 1)), ir.Constant(bits.type, 1)))


def _emit_reduction(ctx: KernelContext, red: _Reduction, full_index, count, over_tile, over_reduced, row_position):
    b, s, e = ctx.b, ctx.s, ctx.emitter
    op = red.op
    definition = op.definition
    argmax = red.position is not None

    def load(array, slot, dtype):
        return Scalar(b.load(_slot_address(b, array, slot), typ=array.allocated_type), dtype)

    def store(array, slot, value):
        b.store(value, _slot_address(b, array, slot))

    identity = lowest(red.acc_dtype.numpy_dtype) if argmax else definition.identity(red.acc_dtype.numpy_dtype)

    def init(acc, slot):
        start = s.constant(identity, red.acc_dtype).value
        store(acc, slot, _sortable(b, start, op.name) if red.sortable else start)
        if argmax:
            store(red.position, slot, i64(0))

    def accumulate(slot):
        x = e.at(op.operands[0], full_index)
        if red.row_cache is not None:
            b.store(x.value, b.gep(red.row_cache, [ctx.index.value(row_position)], source_etype=red.row_cache.allocated_type))
        if red.sortable:
            bits = _sortable(b, s.cast(x, red.acc_dtype).value, op.name)
            acc = b.load(_slot_address(b, red.accs[-1], slot), typ=red.accs[-1].allocated_type)
            which = "llvm.smax" if op.name == "lz.reduce_max" else "llvm.smin"
            store(red.accs[-1], slot, s.m.intrinsic(f"{which}.i{bits.type.width}", bits.type, [acc, bits]))
            return
        acc = load(red.accs[-1], slot, red.acc_dtype)
        if argmax:
            axis = reduced_axes(op)[0]
            here = ctx.index.value(full_index[axis])
            take = s.cmp("gt", x, acc)
            if x.dtype.is_float:  # nan is the maximum: the first nan wins over anything else
                first_nan = b.and_(b.fcmp_unordered("uno", x.value, x.value),
                                   b.fcmp_ordered("ord", acc.value, acc.value))
                take = Scalar(b.or_(take.value, first_nan), I1)
            store(red.accs[-1], slot, b.select(take.value, x.value, acc.value))
            position = load(red.position, slot, I64)
            store(red.position, slot, b.select(take.value, here, position.value))
            return
        with s.reassociating():
            out = definition.combine(s, acc, s.cast(x, red.acc_dtype))
        store(red.accs[-1], slot, out.value)

    def add_partial(outer, inner, slot):
        """The partial result of a finished inner loop into its enclosing loop's (in this order: no
        ``reassoc``, so LLVM cannot fold the levels back into one chain)."""
        total = definition.combine(s, load(outer, slot, red.acc_dtype), load(inner, slot, red.acc_dtype))
        store(outer, slot, total.value)

    def level(j, walk):
        over_tile(lambda slot: init(red.accs[j], slot))
        walk()
        over_tile(lambda slot: add_partial(red.accs[j - 1], red.accs[j], slot))

    def finalize(slot):
        if argmax:
            store(red.result, slot, load(red.position, slot, I64).value)
            return
        if red.sortable:
            bits = b.load(_slot_address(b, red.accs[0], slot), typ=red.accs[0].allocated_type)
            value = Scalar(b.bitcast(_flip_negative(b, bits), compute_type(red.acc_dtype)), red.acc_dtype)
        else:
            value = definition.finalize(s, load(red.accs[0], slot, red.acc_dtype), count)
        store(red.result, slot, s.cast(value, red.result_dtype).value)

    over_tile(lambda slot: init(red.accs[0], slot))
    over_reduced(red.loops, lambda: over_tile(accumulate), level if len(red.accs) > 1 else None)
    over_tile(finalize)


# --- scans: a single kernel ---------------------------------------------------------------------

def lower_cumulative(ctx: KernelContext, op) -> int:
    """A work item is one position of the dims before the axis; along the axis each row of the
    dims after it (contiguous, vectorized) combines the previous row's results with this row."""
    b, s = ctx.b, ctx.s
    attrs = op.definition.attrs(op)
    (x_buffer,), (out_buffer,) = single_buffers(ctx, op)
    x = op.operands[0]
    dtype = x.type.element_type
    _, outer, n, inner = lines_along_axis(op)
    if out_buffer is None or outer * n * inner == 0:
        ctx.fn.finish()
        return 1
    combine = {"add": s.add, "mul": s.mul, "max": s.max, "min": s.min}[attrs.combine]
    identity = scan_identity(attrs.combine, dtype)
    step = -1 if attrs.reverse else 1
    with for_range(b, ctx.fn.begin, ctx.fn.end, "outer") as o:
        base = b.mul(o, i64(n * inner))
        with for_range(b, 0, n, "k") as k0:
            k = b.sub(i64(n - 1), k0) if attrs.reverse else k0
            first = b.icmp_signed("==", k0, i64(0))
            row = b.add(base, b.mul(k, i64(inner)))
            # the previous row (this one for the first row: loaded, never used)
            previous = b.select(first, row, b.sub(row, i64(step * inner)))
            with for_range(b, 0, inner, "j") as j:
                here, before = b.add(row, j), b.add(previous, j)
                start = s.constant(identity, dtype)
                acc = Scalar(b.select(first, start.value, s.load(element_address(b, out_buffer, before, dtype), dtype).value),
                             dtype)
                if attrs.exclusive:
                    value = s.round(combine(acc, s.load(element_address(b, x_buffer, before, dtype), dtype)))
                    value = Scalar(b.select(first, start.value, value.value), dtype)
                else:
                    value = s.round(combine(acc, s.load(element_address(b, x_buffer, here, dtype), dtype)))
                b.store(s.to_storage(value), element_address(b, out_buffer, here, dtype))
    ctx.fn.finish()
    return outer
