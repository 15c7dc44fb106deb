"""2-D pooling (``lz.max_pool2d``, ``lz.avg_pool2d``) and max pooling's gradient
(``lz.max_pool2d_grad``) over NCHW, as ``single`` kernels.

A work item is one output row ``(n, c, oh)``.  The row's accumulators live in a stack array of
``OW`` slots; for each window row ``kh`` whose input row is inside the image, and each window
column ``kw`` (unrolled here, so that the range of ``ow`` reading inside the image is a pair of
constants), one contiguous loop over ``ow`` folds ``x[n, c, ih, ow*sw - pl + kw*dw]`` into the
accumulators; that loop vectorizes (a strided load when ``sw > 1``).  Padding and the part of a
ceil-mode window past the end are skipped, never read.

float32 max pooling of column stride 1 or 2 (resnet's 3x3 stride-2 stem pool) keeps each output
row's maxima in vector registers instead (``_max_row_in_vectors``): a vector of outputs at a time,
each of the kh x kw taps one vector load (stride 2: two vectors' even lanes), masked only in the
vectors at the row's ends, so no stack row is read and written per tap and no loop has a scalar
remainder.

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
    vector_rows = is_max and dtype == F32 and sw in VECTOR_COLUMN_STRIDES
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
            _max_row_in_vectors(ctx, pool_geometry(op), x_buffer.pointer, y_buffer.pointer, row, plane, oh)
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
                rows = _window_counts(h, oh_size, kh_size, sh, pt, pb, attrs.count_include_pad)
                cols = _window_counts(w, ow_size, kw_size, sw, pl, pr, attrs.count_include_pad)
                row_table = _count_table(ctx, f"{ctx.name}_rows", rows, acc_dtype)
                col_table = _count_table(ctx, f"{ctx.name}_cols", cols, acc_dtype)
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


def _max_row_in_vectors(ctx: KernelContext, geometry, x, y, row, plane, oh) -> None:
    """y[row, :] = the max over each window of output row ``oh`` of ``plane`` (n * C + c), W outputs
    at a time in a vector register: per tap (kh, kw) a load of the input row's columns
    ow * sw + kw * dw - pl, folded by llvm.maximum (nan propagates, as np.maximum).  Vectors near
    the row's ends load masked (off lanes: outside the image or past the row; -inf); the ones
    between, whose every tap stays inside the row, load plain; a tap row outside the image gives
    -inf (masked: loads nothing; plain: reads a row inside)."""
    b = ctx.b
    n, c, h, w, oh_size, ow_size, kh_size, kw_size, sh, sw, pt, pl, pb, pr, dh, dw = geometry
    width = gemm.GemmConfig.for_target(ctx.cpu).vector_width
    vector = ir.VectorType(FLOAT, width)
    lowest_vector = ir.Constant(vector, [float("-inf")] * width)
    lanes = ir.Constant(ir.VectorType(I64, width), list(range(width)))
    evens = ir.Constant(ir.VectorType(I32, width), list(range(0, 2 * width, 2)))
    pairs = ir.Constant(ir.VectorType(I32, 2 * width), [j // 2 for j in range(2 * width)])
    even_lanes = ir.Constant(ir.VectorType(I1, 2 * width), [j % 2 == 0 for j in range(2 * width)])
    taps = list(_tap_columns(kw_size, dw, pl, sw, w, ow_size))
    chunks = -(-ow_size // width)
    # chunks whose every tap reads W outputs' columns inside the row: plain loads, no lane masks
    interior = [q for q in range(chunks) if (q + 1) * width <= ow_size and
                all(0 <= q * width * sw + shift and (q + 1) * width * sw + shift <= w for _, shift, _, _ in taps)]
    inner = (interior[0], interior[-1] + 1) if interior else (chunks, chunks)

    def row_vectors(begin, end, masked):
        with for_range(b, begin, end, "ow_vector") as chunk:
            ow0 = b.mul(chunk, i64(width))
            ow = b.add(vectors.splat(b, ow0, width), lanes)
            acc = lowest_vector
            for kh in range(kh_size):
                ih = b.add(b.sub(b.mul(oh, i64(sh)), i64(pt)), i64(kh * dh))
                inside = b.and_(b.icmp_signed(">=", ih, i64(0)), b.icmp_signed("<", ih, i64(h)))
                # a row outside the image: its lanes off (-inf), its address a row inside
                source_row = b.gep(x, [b.mul(b.add(b.mul(plane, i64(h)), b.select(inside, ih, i64(0))), i64(w))],
                                   source_etype=FLOAT)
                for _, shift, first, last in taps:
                    start = b.gep(source_row, [b.add(b.mul(ow0, i64(sw)), i64(shift))], source_etype=FLOAT)
                    on = None
                    if masked:
                        on = b.and_(b.icmp_signed(">=", ow, vectors.splat(b, i64(first), width)),
                                    b.icmp_signed("<", ow, vectors.splat(b, i64(last), width)))
                        on = b.and_(on, vectors.splat(b, inside, width))
                    if sw == 1:
                        values = vectors.load_vector(b, start, width, on)
                    else:  # the even lanes of 2W columns: lane l is column 2 * (ow0 + l) + shift
                        pair_on = None if on is None else b.and_(b.shuffle_vector(on, on, pairs), even_lanes)
                        both = vectors.load_vector(b, start, 2 * width, pair_on)
                        values = b.shuffle_vector(both, both, evens)
                    values = b.select(inside, values, lowest_vector) if on is None else \
                        b.select(on, values, lowest_vector)
                    acc = vectors.call_intrinsic(b, f"llvm.maximum.v{width}f32", acc, values)
            stored = None if not masked else b.icmp_signed("<", ow, vectors.splat(b, i64(ow_size), width))
            vectors.store_vector(b, acc, b.gep(y, [b.add(b.mul(row, i64(ow_size)), ow0)], source_etype=FLOAT),
                                 stored)

    row_vectors(0, inner[0], masked=True)
    row_vectors(inner[0], inner[1], masked=False)
    row_vectors(inner[1], chunks, masked=True)

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
