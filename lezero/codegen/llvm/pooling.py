"""2-D pooling (``lz.max_pool2d``, ``lz.avg_pool2d``) and max pooling's gradient
(``lz.max_pool2d_grad``) over NCHW, as ``single`` kernels.

A work item is one output row ``(n, c, oh)``.  The row's accumulators live in a stack array of
``OW`` slots; for each window row ``kh`` whose input row is inside the image, and each window
column ``kw`` (unrolled here, so that the range of ``ow`` reading inside the image is a pair of
constants), one contiguous loop over ``ow`` folds ``x[n, c, ih, ow*sw - pl + kw*dw]`` into the
accumulators; that loop vectorizes (a strided load when ``sw > 1``).  Padding and the part of a
ceil-mode window past the end are skipped, never read.

float32 pooling of column stride 1 or 2 (resnet's 3x3 stride-2 stem pool, inception's 3x3
stride-1 average pools) keeps each output row in vector registers instead (``_row_in_vectors``),
a vector of outputs at a time and separably: the max (or sum) over the window's rows of the
columns those outputs read (one plain vector load per window row and vector of columns; masked by
constant lane masks only in the vectors at the row's ends), then one shuffle per window column
(stride 2: even or odd lanes).  No stack row is read and written per tap, no loop has a scalar
remainder, and a 3x3 stride-2 window costs 9 loads and 8 maxima per vector of outputs instead of
18 loads, 9 shuffles and 9 maxima tap by tap.  (The loop form's 3x3 stride-1 average pool over
192 x 28 x 28 took 381 us on Zen 4, ORT's 39: a 28-wide row is a 16-lane vector and 12 scalar
iterations per tap.)  The sum adds the window's rows first, then its columns: another order than
the loop's (row by row), so the average differs from it by rounding.

``lz.max_pool2d_blocked`` (the blocked-layout pass's, over ``[N, C/c, H, W, c]``) is the simple
case: a pixel's ``c`` channels are one aligned vector, so an output pixel is the maximum of its
window's vectors, no shuffles (``lower_max_pool_blocked``).

max: the identity is -inf (or the smallest integer), so padding never wins; nan propagates.
avg: sums in f32 for f16, divided by the window's count, which is a product of a row count and a
column count (tables computed here): input elements, plus padding elements when
``count_include_pad``; the ceil-mode overhang never counts (the reference's rules).

max_pool2d_grad: a work item is one ``(n, c)`` plane, since neighbouring windows overlap and add
into the same elements: the plane is zeroed, then each window finds its winner (the first
maximum inside the image, the last nan, PyTorch's choice) and adds its cotangent there, in the
result's type (f16 and bf16 round after each add; the reference rounds once).
"""
from __future__ import annotations

import llvmlite.ir as ir

from lezero.codegen.accumulation import accumulator_type
from lezero.codegen.llvm.context import KernelContext
from lezero.codegen.llvm import gemm, vectors
from lezero.codegen.llvm.ir_types import FLOAT, I1, I32, I64
from lezero.codegen.llvm.loops import for_range, i64
from lezero.codegen.llvm.scalar_builder import Scalar, compute_type, storage_type
from lezero.ir.dialect.numerics import lowest
from lezero.ir.dialect.pooling import pool_geometry
from lezero.ir.types import F32


def _window_counts(size: int, out: int, kernel: int, stride: int, pad_begin: int, pad_end: int,
                   include_pad: bool) -> list[int]:
    """Per output position, how many window positions count toward an average."""
    lo, hi = (-pad_begin, size + pad_end) if include_pad else (0, size)
    return [sum(lo <= o * stride - pad_begin + k < hi for k in range(kernel)) for o in range(out)]


def lower_pooling(ctx: KernelContext, op) -> int:
    if op.name == "lz.max_pool2d_blocked":
        return lower_max_pool_blocked(ctx, op)
    b, s, e = ctx.b, ctx.s, ctx.emitter
    attrs = op.definition.attrs(op)
    x, y = op.operands[0], op.result
    n, c, h, w, oh_size, ow_size, kh_size, kw_size, sh, sw, pt, pl, pb, pr, dh, dw = pool_geometry(op)
    is_max = op.name == "lz.max_pool2d"
    dtype = x.type.element_type
    acc_dtype = dtype if is_max else accumulator_type(dtype)
    if 0 in (n, c, oh_size, ow_size):
        ctx.fn.finish()
        return 1
    x_buffer = ctx.emitter.buffers.get(x)
    y_buffer = ctx.result_buffers[ctx.yields.index(y)] if y in ctx.yields else None
    if x_buffer is None or y_buffer is None:
        raise e.failure(op, "a single pooling kernel reads its operand from memory and yields its result")
    vector_rows = dtype == F32 and sw in VECTOR_COLUMN_STRIDES
    acc = None if vector_rows else ctx.fn.alloca(compute_type(acc_dtype), ow_size, "pool")
    acc_type = compute_type(acc_dtype)

    def slot(ow):
        return b.gep(acc, [ow], source_etype=acc_type)

    identity = lowest(dtype.numpy_dtype) if is_max else 0
    if is_max and dtype.is_int:
        identity = int(identity)
    with for_range(b, ctx.fn.begin, ctx.fn.end, "row") as row:
        plane = b.udiv(row, i64(oh_size))  # n * C + c
        oh = b.urem(row, i64(oh_size))
        if vector_rows:
            counts = None if is_max else _count_tables(ctx, op, acc_dtype)
            _row_in_vectors(ctx, pool_geometry(op), x_buffer.pointer, y_buffer.pointer, row, plane, oh, counts)
        else:
            with for_range(b, 0, ow_size, "init") as ow:
                b.store(s.constant(identity, acc_dtype).value, slot(ow))
            with for_range(b, 0, kh_size, "kh") as kh:
                ih = b.add(b.sub(b.mul(oh, i64(sh)), i64(pt)), b.mul(kh, i64(dh)))
                inside = b.and_(b.icmp_signed(">=", ih, i64(0)), b.icmp_signed("<", ih, i64(h)))
                with b.if_then(inside):
                    base = b.mul(b.add(b.mul(plane, i64(h)), ih), i64(w))
                    for kw, shift, first, last in _tap_columns(kw_size, dw, pl, sw, w, ow_size):
                        with for_range(b, first, last, f"ow{kw}") as ow:
                            iw = b.add(b.mul(ow, i64(sw)), i64(shift))
                            address = b.gep(x_buffer.pointer, [b.add(base, iw)], inbounds=True,
                                            source_etype=storage_type(dtype))
                            value = s.cast(s.load(address, dtype), acc_dtype)
                            current = Scalar(b.load(slot(ow), typ=acc_type), acc_dtype)
                            out = s.max(current, value) if is_max else s.add(current, value)
                            b.store(out.value, slot(ow))
            divisor_row = None
            if not is_max:
                row_table, col_table = _count_tables(ctx, op, acc_dtype)
                divisor_row = b.load(b.gep(row_table, [i64(0), oh], inbounds=True, source_etype=row_table.value_type),
                                     typ=compute_type(acc_dtype))
            out_base = b.mul(row, i64(ow_size))
            with for_range(b, 0, ow_size, "store") as ow:
                value = Scalar(b.load(slot(ow), typ=acc_type), acc_dtype)
                if not is_max:
                    divisor_col = b.load(b.gep(col_table, [i64(0), ow], inbounds=True, source_etype=col_table.value_type),
                                         typ=compute_type(acc_dtype))
                    divisor = Scalar(b.fmul(divisor_row, divisor_col), acc_dtype)
                    value = s.div(value, divisor)
                out = s.cast(value, y.type.element_type)
                address = b.gep(y_buffer.pointer, [b.add(out_base, ow)], inbounds=True,
                                source_etype=storage_type(y.type.element_type))
                b.store(s.to_storage(out), address)
    ctx.fn.finish()
    return n * c * oh_size


def lower_max_pool_blocked(ctx: KernelContext, op) -> int:
    """``lz.max_pool2d_blocked`` (f32, ``[N, C/c, H, W, c]``): a work item is one output row of one
    (image, channel block); an output pixel's ``c`` channels are one vector, the max (nan
    propagating, as the NCHW kernel's) of its window's vectors, each one aligned load.  The window
    rows inside the image are a loop; the output columns whose windows reach into the padding are
    built with their columns known, the others are a loop of whole windows: no tap in the padding
    is read."""
    b = ctx.b
    x, y = op.operands[0], op.result
    if x.type.element_type != F32:
        raise ctx.emitter.failure(op, f"the blocked max pool runs float32 only, not {x.type.element_type}")
    x_buffer = ctx.emitter.buffers.get(x)
    y_buffer = ctx.result_buffers[ctx.yields.index(y)] if y in ctx.yields else None
    if x_buffer is None or y_buffer is None:
        raise ctx.emitter.failure(op, "a single pooling kernel reads its operand from memory and yields its result")
    attrs = op.definition.attrs(op)
    n, cb, h, w, c = x.type.shape
    _, _, oh_size, ow_size, _ = y.type.shape
    (kh_size, kw_size), (sh, sw), (pt, pl, _, _) = attrs.kernel, attrs.strides, attrs.pads
    vector = ir.VectorType(FLOAT, c)
    maximum = vectors.intrinsic(b.module, f"llvm.maximum.v{c}f32", vector, [vector, vector])
    lowest_vector = ir.Constant(vector, [float("-inf")] * c)

    def pixel(row_base, ow, columns):
        """The output pixel ``ow`` (an IR value) of the row whose window rows ``row_base`` gives,
        reading window columns ``columns``."""
        iw0 = b.sub(b.mul(ow, i64(sw)), i64(pl))
        acc = lowest_vector
        for i, offset in row_base:
            for kw in columns:
                at = b.mul(b.add(b.add(offset, iw0), i64(kw)), i64(c))
                value = b.load(b.gep(x_buffer.pointer, [at], inbounds=True, source_etype=FLOAT), typ=vector,
                               align=4 * c)
                acc = value if acc is lowest_vector else b.call(maximum, [value, acc], fastmath=("nsz",))
        b.store(acc, b.gep(y_buffer.pointer, [b.mul(b.add(at_row, ow), i64(c))], inbounds=True, source_etype=FLOAT),
                align=4 * c)

    first_inside = -(-pl // sw)  # the first output column whose window is inside the image
    last_inside = (w - kw_size + pl) // sw
    with for_range(b, ctx.fn.begin, ctx.fn.end, "row") as row:
        plane = b.udiv(row, i64(oh_size))  # n * C/c + block
        oh = b.urem(row, i64(oh_size))
        at_row = b.mul(row, i64(ow_size))
        ih0 = b.sub(b.mul(oh, i64(sh)), i64(pt))
        # window rows inside the image: as many of kh_size as fit, the rows outside replaced by the
        # window's first row inside (max is idempotent), so the taps stay unrolled
        first = b.select(b.icmp_signed("<", ih0, i64(0)), i64(0), ih0)
        row_base = []
        for i in range(kh_size):
            ih = b.add(ih0, i64(i))
            inside = b.and_(b.icmp_signed(">=", ih, i64(0)), b.icmp_signed("<", ih, i64(h)))
            ih = b.select(inside, ih, first)
            row_base.append((i, b.mul(b.add(b.mul(plane, i64(h)), ih), i64(w))))
        for ow in range(ow_size):
            if first_inside <= ow <= last_inside:
                continue
            iw0 = ow * sw - pl
            pixel(row_base, i64(ow), [kw for kw in range(kw_size) if 0 <= iw0 + kw < w])
        if first_inside <= min(last_inside, ow_size - 1):
            with for_range(b, first_inside, min(last_inside, ow_size - 1) + 1, "ow") as ow:
                pixel(row_base, ow, range(kw_size))
    ctx.fn.finish()
    return n * cb * oh_size


def _tap_columns(kw_size: int, dw: int, pl: int, sw: int, w: int, ow_size: int):
    """Per window column kw that some output reads inside the image: (kw, shift, first, last),
    where input column iw = ow * sw + shift and the outputs first <= ow < last read inside [0, w)."""
    for kw in range(kw_size):
        shift = kw * dw - pl
        first, last = max(0, -(shift // sw)), min(ow_size, (w - 1 - shift) // sw + 1)
        if first < last:
            yield kw, shift, first, last


# Column strides whose taps are one vector load (1) or two vectors' even lanes (2).
VECTOR_COLUMN_STRIDES = (1, 2)


def _row_in_vectors(ctx: KernelContext, geometry, x, y, row, plane, oh, counts) -> None:
    """y[row, :] = the max (``counts`` None) or the average (``counts``: the row and column count
    tables of ``_count_tables``) over each window of output row ``oh`` of ``plane`` (n * C + c), W
    outputs at a time in a vector register, separably: the max or sum over the window's rows first,
    on the input columns the W outputs' taps read (one vector load per window row and vector of
    columns, no shuffles), then per window column one shuffle of those (stride 2: the even or odd
    lanes) folded in; an average is that sum divided by row count x column count, as in the loop
    form.  The max is llvm.maximum without signed zeros (nan propagates; the sign of a zero maximum
    is unspecified, as in np.maximum, which returns its second operand on ties); its operands in the
    order that keeps the nan test off the accumulator's chain.

    A window row outside the image reads a row of the same window inside it instead (max is
    idempotent; a row whose window has none inside is -inf; a sum takes zeros for it by a select),
    so no tap is masked for rows.  The vectors whose columns all lie inside the row load plain, in a
    loop; the ones at the row's ends are emitted one by one, their loads masked by constant lane
    masks (off lanes: outside the image, -inf or 0), their stores masked past the row's end."""
    b = ctx.b
    n, c, h, w, oh_size, ow_size, kh_size, kw_size, sh, sw, pt, pl, pb, pr, dh, dw = geometry
    width = gemm.GemmConfig.for_target(ctx.cpu).vector_width
    vector = ir.VectorType(FLOAT, width)
    is_max = counts is None
    lowest_vector = ir.Constant(vector, [float("-inf") if is_max else 0.0] * width)  # the identity
    shifts = [kw * dw - pl for kw in range(kw_size)]
    span = sw * (width - 1) + shifts[-1] - shifts[0] + 1  # columns a vector's taps read, from sw * ow0 - pl
    starts = [j * width for j in range(-(-span // width))]
    starts[-1] = span - width  # the last vector ends at the last column read (overlapping the one before)
    chunks = -(-ow_size // width)
    interior = [q for q in range(chunks) if (q + 1) * width <= ow_size and
                0 <= q * width * sw + shifts[0] and q * width * sw + shifts[0] + span <= w]
    inner = (interior[0], interior[-1] + 1) if interior else (chunks, chunks)

    def maximum(value, acc):
        if not is_max:
            return b.fadd(acc, value)
        # x86's max returns its second operand on a nan, so llvm.maximum tests its first for nan:
        # the new value, not the accumulator
        function = vectors.intrinsic(b.module, f"llvm.maximum.v{width}f32", vector, [vector, vector])
        return b.call(function, [value, acc], fastmath=("nsz",))

    # the window's rows, those outside the image replaced by the window's first row inside
    rows = [b.add(b.sub(b.mul(oh, i64(sh)), i64(pt)), i64(kh * dh)) for kh in range(kh_size)]
    insides = [b.and_(b.icmp_signed(">=", r, i64(0)), b.icmp_signed("<", r, i64(h))) for r in rows]
    fallback = i64(0)
    for r, inside in reversed(list(zip(rows, insides))):
        fallback = b.select(inside, r, fallback)
    row_pointers = [b.gep(x, [b.mul(b.add(b.mul(plane, i64(h)), b.select(inside, r, fallback)), i64(w))],
                          source_etype=FLOAT) for r, inside in zip(rows, insides)]
    # some output row's window lies wholly in the padding: its maxima are -inf
    empty_rows = any(not any(0 <= o * sh - pt + kh * dh < h for kh in range(kh_size)) for o in range(oh_size))
    any_inside = insides[0]
    for inside in insides[1:]:
        any_inside = b.or_(any_inside, inside)

    def row_vector(ow0, q):
        """Outputs ow0 .. ow0 + W - 1; q: the constant chunk index of an end vector (masked), or None."""
        column = b.add(b.mul(ow0, i64(sw)), i64(shifts[0]))
        maxima = []
        for start in starts:
            on = None
            if q is not None:
                lanes = [0 <= q * width * sw + shifts[0] + start + j < w for j in range(width)]
                if not any(lanes):
                    maxima.append(lowest_vector)
                    continue
                on = None if all(lanes) else ir.Constant(ir.VectorType(I1, width), lanes)
            acc = None
            for pointer, inside in zip(row_pointers, insides):
                values = vectors.load_vector(b, b.gep(pointer, [b.add(column, i64(start))], source_etype=FLOAT),
                                             width, on)
                if not is_max:
                    values = b.select(inside, values, lowest_vector)
                acc = values if acc is None else maximum(values, acc)
            maxima.append(acc if on is None else b.select(on, acc, lowest_vector))
        everything = vectors.concatenate(b, maxima)

        def lane(j):  # column j (from sw * ow0 - pl) in the concatenated maxima
            i = min(j // width, len(starts) - 1)
            return i * width + j - starts[i]

        acc = None
        for shift in shifts:
            tap = b.shuffle_vector(everything, everything, ir.Constant(
                ir.VectorType(I32, width), [lane(sw * l + shift - shifts[0]) for l in range(width)]))
            acc = tap if acc is None else maximum(tap, acc)
        if empty_rows and is_max:
            acc = b.select(any_inside, acc, lowest_vector)
        if not is_max:
            row_table, col_table = counts
            divisor_row = b.load(b.gep(row_table, [i64(0), oh], inbounds=True, source_etype=row_table.value_type),
                                 typ=FLOAT)
            divisor_cols = b.load(b.gep(col_table, [i64(0), ow0], inbounds=True, source_etype=col_table.value_type),
                                  typ=vector, align=4)
            divisor = b.fmul(vectors.splat(b, divisor_row, width), divisor_cols)
            acc = b.fdiv(acc, divisor)
        stored = None
        if q is not None and (q + 1) * width > ow_size:
            stored = ir.Constant(ir.VectorType(I1, width), [q * width + l < ow_size for l in range(width)])
        vectors.store_vector(b, acc, b.gep(y, [b.add(b.mul(row, i64(ow_size)), ow0)], source_etype=FLOAT),
                             stored)

    for q in range(inner[0]):
        row_vector(i64(q * width), q)
    with for_range(b, inner[0], inner[1], "ow_vector") as chunk:
        row_vector(b.mul(chunk, i64(width)), None)
    for q in range(inner[1], chunks):
        row_vector(i64(q * width), q)

def _count_tables(ctx: KernelContext, op, dtype) -> tuple[ir.GlobalVariable, ir.GlobalVariable]:
    """An average's divisors: per output row and per output column, how many window rows and
    columns count (``_window_counts``); the column table padded with ones to whole vectors, so the
    vector rows load it plain."""
    n, c, h, w, oh_size, ow_size, kh_size, kw_size, sh, sw, pt, pl, pb, pr, dh, dw = pool_geometry(op)
    include_pad = op.definition.attrs(op).count_include_pad
    width = gemm.GemmConfig.for_target(ctx.cpu).vector_width
    cols = _window_counts(w, ow_size, kw_size, sw, pl, pr, include_pad)
    cols += [1] * (-len(cols) % width)
    return (_count_table(ctx, f"{ctx.name}_rows", _window_counts(h, oh_size, kh_size, sh, pt, pb, include_pad), dtype),
            _count_table(ctx, f"{ctx.name}_cols", cols, dtype))


def _count_table(ctx: KernelContext, name: str, counts, dtype) -> ir.GlobalVariable:
    t = compute_type(dtype)
    array_type = ir.ArrayType(t, len(counts))
    g = ir.GlobalVariable(ctx.module, array_type, name)
    g.global_constant = True
    g.linkage = "internal"
    g.initializer = ir.Constant(array_type, [ir.Constant(t, float(v)) for v in counts])
    return g


def lower_max_pool2d_grad(ctx: KernelContext, op) -> int:
    b, s, e = ctx.b, ctx.s, ctx.emitter
    attrs = op.definition.attrs(op)
    x, dy = op.operands
    n, c, h, w = x.type.shape
    oh_size, ow_size = dy.type.shape[2:]
    (kh_size, kw_size), (sh, sw) = attrs.kernel, attrs.strides
    pt, pl, _, _ = attrs.pads
    dh, dw = attrs.dilations
    dtype = x.type.element_type
    if 0 in (n, c, h, w):
        ctx.fn.finish()
        return 1
    x_buffer, dy_buffer = e.buffers.get(x), e.buffers.get(dy)
    dx_buffer = ctx.result_buffers[ctx.yields.index(op.result)] if op.result in ctx.yields else None
    if x_buffer is None or dy_buffer is None or dx_buffer is None:
        raise e.failure(op, "a single max_pool2d_grad kernel reads its operands from memory and yields its result")
    best = ctx.fn.alloca(compute_type(dtype), 1, "best")
    winner = ctx.fn.alloca(I64, 1, "winner")
    plane_size = h * w

    def element(buffer, index):
        return b.gep(buffer.pointer, [index], inbounds=True, source_etype=storage_type(dtype))

    def inside(index, size):
        return b.and_(b.icmp_signed(">=", index, i64(0)), b.icmp_signed("<", index, i64(size)))

    with for_range(b, ctx.fn.begin, ctx.fn.end, "plane") as plane:
        base = b.mul(plane, i64(plane_size))
        zero = s.to_storage(s.constant(0, dtype))
        with for_range(b, 0, plane_size, "zero") as i:
            b.store(zero, element(dx_buffer, b.add(base, i)))
        with for_range(b, 0, oh_size, "oh") as oh:
            with for_range(b, 0, ow_size, "ow") as ow:
                b.store(i64(-1), winner)
                with for_range(b, 0, kh_size, "kh") as kh:
                    ih = b.add(b.sub(b.mul(oh, i64(sh)), i64(pt)), b.mul(kh, i64(dh)))
                    with b.if_then(inside(ih, h)):
                        with for_range(b, 0, kw_size, "kw") as kw:
                            iw = b.add(b.sub(b.mul(ow, i64(sw)), i64(pl)), b.mul(kw, i64(dw)))
                            with b.if_then(inside(iw, w)):
                                index = b.add(b.mul(ih, i64(w)), iw)
                                value = s.load(element(x_buffer, b.add(base, index)), dtype)
                                current = Scalar(b.load(best), dtype)
                                first = b.icmp_signed("<", b.load(winner), i64(0))
                                take = b.or_(b.or_(first, s.cmp("gt", value, current).value),
                                             s.cmp("ne", value, value).value)  # a nan takes it
                                b.store(b.select(take, value.value, current.value), best)
                                b.store(b.select(take, index, b.load(winner)), winner)
                found = b.load(winner)
                with b.if_then(b.icmp_signed(">=", found, i64(0))):
                    g_index = b.add(b.mul(b.add(b.mul(plane, i64(oh_size)), oh), i64(ow_size)), ow)
                    g = s.load(element(dy_buffer, g_index), dtype)
                    target = element(dx_buffer, b.add(base, found))
                    total = s.round(s.add(s.load(target, dtype), g))
                    b.store(s.to_storage(total), target)
    ctx.fn.finish()
    return n * c
