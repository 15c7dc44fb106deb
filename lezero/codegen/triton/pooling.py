"""2-D pooling (``lz.max_pool2d``, ``lz.avg_pool2d``) over NCHW as ``single`` kernels.

A program takes ``BLOCK`` output elements (flat over ``N x C x OH x OW``) and walks the window
(``KH x KW``, unrolled: ``tl.static_range``), loading ``x[n, c, ih, iw]`` where it lies inside the
image (masked otherwise, so padding and the ceil-mode overhang are never read).

max: the identity is -inf (or the smallest integer), so padding never wins; nan propagates.
avg: sums in f32 for f16, divided by the window's count: a row count times a column count, each
``min(end, hi) - max(start, lo)`` with ``[lo, hi)`` the input, or the input and its padding
when ``count_include_pad`` (the ceil-mode overhang past the end padding never counts), as the
reference does.
"""
from __future__ import annotations


from lezero.codegen.triton.elementwise import flat_blocks
from lezero.codegen.triton.emitter import TritonContext
from lezero.codegen.triton.kernel import LaunchConfig
from lezero.codegen.triton.reduction import literal
from lezero.codegen.triton.scalar_builder import TValue, accumulator_type, compute_dtype
from lezero.ir.dialect.numerics import lowest
from lezero.ir.dialect.pooling import pool_geometry



def lower_pooling(ctx: TritonContext, op) -> tuple:
    code, s = ctx.code, ctx.s
    attrs = op.definition.attrs(op)
    x, y = op.operands[0], op.result
    n, c, h, w, oh_size, ow_size, kh_size, kw_size, sh, sw, pt, pl, pb, pr, dh, dw = pool_geometry(op)
    is_max = op.name == "lz.max_pool2d"
    dtype = x.type.element_type
    acc_dtype = dtype if is_max else accumulator_type(dtype)
    size = n * c * oh_size * ow_size
    x_buffer = ctx.emitter.buffers.get(x)
    if x_buffer is None or y not in ctx.yields:
        raise ctx.emitter.failure(op, "a single pooling kernel reads its operand from memory and yields its result")
    y_buffer = ctx.result_buffers[ctx.yields.index(y)]
    if size == 0:
        code.line("pass  # no output elements")
        return (LaunchConfig({}, (1,)),)
    configs = flat_blocks(ctx, size)
    code.line(f"ow = offs % {ow_size}")
    code.line(f"oh = offs // {ow_size} % {oh_size}")
    code.line(f"plane = offs // {ow_size * oh_size}  # n * C + c")
    identity = literal(lowest(dtype.numpy_dtype) if is_max else 0, acc_dtype)
    code.line(f"acc = tl.full([BLOCK], {identity}, {compute_dtype(acc_dtype)})")
    with code.block(f"for kh in tl.static_range({kh_size}):"):
        code.line(f"ih = oh * {sh} - {pt} + kh * {dh}")
        with code.block(f"for kw in tl.static_range({kw_size}):"):
            code.line(f"iw = ow * {sw} - {pl} + kw * {dw}")
            code.line(f"inside = mask & (ih >= 0) & (ih < {h}) & (iw >= 0) & (iw < {w})")
            code.line(f"x = tl.load({x_buffer.pointer} + (plane * {h} + ih) * {w} + iw, mask=inside, "
                      f"other={literal(lowest(dtype.numpy_dtype), dtype) if is_max else 0})")
            value = s.cast(s.from_storage("x", dtype), acc_dtype)
            acc = TValue("acc", acc_dtype)
            out = s.max(acc, value) if is_max else s.add(acc, value)
            code.line(f"acc = {out.value}")
    result = TValue("acc", acc_dtype)
    if not is_max:
        lo_h, hi_h = (-pt, h + pb) if attrs.count_include_pad else (0, h)
        lo_w, hi_w = (-pl, w + pr) if attrs.count_include_pad else (0, w)
        code.line(f"start_h = oh * {sh} - {pt}")
        code.line(f"start_w = ow * {sw} - {pl}")
        code.line(f"rows_counted = tl.minimum(start_h + {kh_size}, {hi_h}) - tl.maximum(start_h, {lo_h})")
        code.line(f"cols_counted = tl.minimum(start_w + {kw_size}, {hi_w}) - tl.maximum(start_w, {lo_w})")
        count = TValue(code.assign("count", f"(rows_counted * cols_counted).to({compute_dtype(acc_dtype)})"),
                       acc_dtype)
        result = s.div(result, count)
    out = s.cast(result, y.type.element_type)
    code.line(f"tl.store({y_buffer.pointer} + offs, {s.to_storage(out)}, mask=mask)")
    return configs
