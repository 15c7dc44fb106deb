"""2-D pooling (``lz.max_pool2d``, ``lz.avg_pool2d``) and max pooling's gradient
(``lz.max_pool2d_grad``) over NCHW as ``single`` kernels.

A program takes ``BLOCK`` output elements (flat over ``N x C x OH x OW``) and walks the window
(``KH x KW``, unrolled: ``tl.static_range``), loading ``x[n, c, ih, iw]`` where it lies inside the
image (masked otherwise, so padding and the ceil-mode overhang are never read).

max: the identity is -inf (or the smallest integer), so padding never wins; nan propagates.
avg: sums in f32 for f16, divided by the window's count: a row count times a column count, each
``min(end, hi) - max(start, lo)`` with ``[lo, hi)`` the input, or the input and its padding
when ``count_include_pad`` (the ceil-mode overhang past the end padding never counts), as the
reference does.

max_pool2d_grad is a gather, with no atomics: a program takes ``BLOCK`` input elements (flat over
``N x C x H x W``) and, for each window offset ``(kh, kw)``, finds the window ``(oh, ow)`` that
holds the element there (``oh * sh = ih + pt - kh * dh``, when divisible and in range), finds
that window's winner again as the reference picks it (the first maximum inside the image in
row-major window order, the last nan), and adds ``dy[n, c, oh, ow]`` when the winner is this
element.  The offsets go from the last to the first, so the windows come in row-major
``(oh, ow)`` order, the order in which the reference adds them; the sum is in f32 for f16 and
bf16, rounded once at the end, as the reference does.
"""
from __future__ import annotations

from lezero.codegen.accumulation import accumulator_type
from lezero.codegen.triton.context import TritonContext
from lezero.codegen.triton.elementwise import flat_blocks
from lezero.codegen.triton.kernel import LaunchConfig
from lezero.codegen.triton.reduction import literal
from lezero.codegen.triton.scalar_builder import TValue, compute_dtype
from lezero.ir.dialect.numerics import lowest
from lezero.ir.dialect.pooling import pool_geometry


def _plane_blocks(ctx: TritonContext, planes: int, rows: int, cols: int, row: str, col: str) -> tuple:
    """Flat blocks over ``planes x rows x cols`` (row-major), each lane's position unravelled into
    ``plane`` (``n * C + c``), ``row`` and ``col``; the launch configurations."""
    configs = flat_blocks(ctx, planes * rows * cols)
    ctx.code.line(f"{col} = offs % {cols}")
    ctx.code.line(f"{row} = offs // {cols} % {rows}")
    ctx.code.line(f"plane = offs // {cols * rows}  # n * C + c")
    return configs


def _load_inside(ctx: TritonContext, x, geometry, ih: str, iw: str, within: str, other: str) -> TValue:
    """``x[n, c, ih, iw]`` of each lane of ``within`` where it lies inside the image (the literal
    ``other`` elsewhere, never read): the value in its compute form."""
    h, w, dtype = geometry.h, geometry.w, x.type.element_type
    ctx.code.line(f"inside = {within} & ({ih} >= 0) & ({ih} < {h}) & ({iw} >= 0) & ({iw} < {w})")
    ctx.code.line(f"x = tl.load({ctx.emitter.buffers[x].pointer} + (plane * {h} + {ih}) * {w} + {iw}, "
                  f"mask=inside, other={other})")
    return ctx.s.from_storage("x", dtype)


def lower_pooling(ctx: TritonContext, op) -> tuple:
    code, s = ctx.code, ctx.s
    attrs = op.definition.attrs(op)
    x, y = op.operands[0], op.result
    geometry = pool_geometry(op)
    n, c, h, w, oh_size, ow_size, kh_size, kw_size, sh, sw, pt, pl, pb, pr, dh, dw = geometry
    is_max = op.name == "lz.max_pool2d"
    dtype = x.type.element_type
    acc_dtype = dtype if is_max else accumulator_type(dtype)
    size = n * c * oh_size * ow_size
    if x not in ctx.emitter.buffers or y not in ctx.yields:
        raise ctx.emitter.failure(op, "a single pooling kernel reads its operand from memory and yields its result")
    y_buffer = ctx.result_buffers[ctx.yields.index(y)]
    if size == 0:
        code.line("pass  # no output elements")
        return (LaunchConfig({}, (1,)),)
    configs = _plane_blocks(ctx, n * c, oh_size, ow_size, "oh", "ow")
    identity = literal(lowest(dtype.numpy_dtype) if is_max else 0, acc_dtype)
    code.line(f"acc = tl.full([BLOCK], {identity}, {compute_dtype(acc_dtype)})")
    with code.block(f"for kh in tl.static_range({kh_size}):"):
        code.line(f"ih = oh * {sh} - {pt} + kh * {dh}")
        with code.block(f"for kw in tl.static_range({kw_size}):"):
            code.line(f"iw = ow * {sw} - {pl} + kw * {dw}")
            padding = literal(lowest(dtype.numpy_dtype), dtype) if is_max else "0"
            value = s.cast(_load_inside(ctx, x, geometry, "ih", "iw", "mask", padding), acc_dtype)
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


def lower_max_pool2d_grad(ctx: TritonContext, op) -> tuple:
    code, s = ctx.code, ctx.s
    x, dy = op.operands
    geometry = pool_geometry(op)
    n, c, h, w, oh_size, ow_size, kh_size, kw_size, sh, sw, pt, pl, _, _, dh, dw = geometry
    dtype = x.type.element_type
    acc_dtype = accumulator_type(dtype)
    dy_buffer = ctx.emitter.buffers.get(dy)
    if x not in ctx.emitter.buffers or dy_buffer is None or op.result not in ctx.yields:
        raise ctx.emitter.failure(op, "a single max_pool2d_grad kernel reads its operands from memory and yields "
                                      "its result")
    dx_buffer = ctx.result_buffers[ctx.yields.index(op.result)]
    if n * c * h * w == 0:
        code.line("pass  # no input elements")
        return (LaunchConfig({}, (1,)),)
    configs = _plane_blocks(ctx, n * c, h, w, "ih", "iw")
    lowest_literal = literal(lowest(dtype.numpy_dtype), dtype)
    code.line(f"acc = tl.full([BLOCK], 0, {compute_dtype(acc_dtype)})")
    # the last window offset first: the windows holding (ih, iw) in row-major (oh, ow) order
    with code.block(f"for kh in tl.static_range({kh_size - 1}, -1, -1):"):
        code.line(f"oh_strided = ih + {pt} - kh * {dh}  # oh * {sh} for the window holding (ih, iw) at row kh")
        code.line(f"oh = oh_strided // {sh}")
        with code.block(f"for kw in tl.static_range({kw_size - 1}, -1, -1):"):
            code.line(f"ow_strided = iw + {pl} - kw * {dw}")
            code.line(f"ow = ow_strided // {sw}")
            divisible = "".join(f" & ({name} % {stride} == 0)" for name, stride
                                in (("oh_strided", sh), ("ow_strided", sw)) if stride > 1)
            code.line(f"window = mask & (oh_strided >= 0) & (oh < {oh_size}) & (ow_strided >= 0) & "
                      f"(ow < {ow_size}){divisible}")
            code.line(f"best = tl.full([BLOCK], {lowest_literal}, {compute_dtype(dtype)})")
            code.line("winner = tl.full([BLOCK], -1, tl.int32)  # the window's winning offset, kh * KW + kw")
            with code.block(f"for wkh in tl.static_range({kh_size}):"):
                code.line(f"wh = oh * {sh} - {pt} + wkh * {dh}")
                with code.block(f"for wkw in tl.static_range({kw_size}):"):
                    code.line(f"ww = ow * {sw} - {pl} + wkw * {dw}")
                    value = _load_inside(ctx, x, geometry, "wh", "ww", "window", lowest_literal).value
                    code.line(f"take = inside & ((winner < 0) | ({value} > best) | ({value} != {value}))"
                              "  # the first maximum; a nan takes it")
                    code.line(f"best = tl.where(take, {value}, best)")
                    code.line(f"winner = tl.where(take, wkh * {kw_size} + wkw, winner)")
            code.line(f"won = winner == kh * {kw_size} + kw")
            code.line(f"g = tl.load({dy_buffer.pointer} + (plane * {oh_size} + oh) * {ow_size} + ow, mask=won, "
                      "other=0)")
            total = s.add(TValue("acc", acc_dtype), s.cast(s.from_storage("g", dtype), acc_dtype))
            code.line(f"acc = tl.where(won, {total.value}, acc)")
    out = s.cast(TValue("acc", acc_dtype), dtype)
    code.line(f"tl.store({dx_buffer.pointer} + offs, {s.to_storage(out)}, mask=mask)")
    return configs
