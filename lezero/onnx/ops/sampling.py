"""Sampling at computed positions: GridSample and AffineGrid.

GridSample turns each grid point into source coordinates with elementwise ops (denormalized,
clamped or reflected at the border as ONNX's reference does), then reads the input at every
interpolation tap (1, 2 or 4 per spatial dim for nearest, linear, cubic) with ``lz.gather`` on
the input flattened to (N * pixels) x C, and sums the taps weighted by their coefficients (a
tap outside the image weighs 0 with zero padding).
"""
from __future__ import annotations

import itertools

import numpy as np

from lezero.ir.types import I64
from lezero.onnx.registry import converter
from lezero.onnx.ops.common import product


def _reflect(ctx, x, lo, hi):
    """Reflected at ``lo`` and ``hi`` until inside (the reference's ``_gs_reflect``)."""
    span = ctx.scalar(hi - lo, x)
    below = ctx.op("lz.cmp", x, ctx.scalar(lo, x), predicate="lt")
    above = ctx.op("lz.cmp", x, ctx.scalar(hi, x), predicate="gt")
    distance = ctx.op("lz.select", below, ctx.op("lz.sub", ctx.scalar(lo, x), x), ctx.op("lz.sub", x, ctx.scalar(hi, x)))
    count = ctx.op("lz.floor", ctx.op("lz.div", distance, span))
    rest = ctx.op("lz.sub", distance, ctx.op("lz.mul", count, span))
    even = ctx.op("lz.cmp", ctx.op("lz.rem", count, ctx.scalar(2, x)), ctx.scalar(0, x), predicate="eq")
    from_low = ctx.op("lz.add", ctx.scalar(lo, x), rest)
    from_high = ctx.op("lz.sub", ctx.scalar(hi, x), rest)
    reflected_below = ctx.op("lz.select", even, from_low, from_high)
    reflected_above = ctx.op("lz.select", even, from_high, from_low)
    return ctx.op("lz.select", below, reflected_below, ctx.op("lz.select", above, reflected_above, x))


def _clamp(ctx, x, lo, hi):
    return ctx.op("lz.min", ctx.op("lz.max", x, ctx.scalar(lo, x)), ctx.scalar(hi, x))


def _cubic_coefficients(ctx, t):
    a = -0.75
    one = ctx.scalar(1, t)

    def poly(u, coeffs):
        acc = ctx.scalar(coeffs[0], u)
        for c in coeffs[1:]:
            acc = ctx.op("lz.add", ctx.op("lz.mul", acc, u), ctx.scalar(c, u))
        return acc
    far = (a, -5 * a, 8 * a, -4 * a)      # |u| in [1, 2)
    near = (a + 2, -(a + 3), 0, 1)         # |u| <= 1
    return [poly(ctx.op("lz.add", t, one), far), poly(t, near),
            poly(ctx.op("lz.sub", one, t), near), poly(ctx.op("lz.sub", ctx.scalar(2, t), t), far)]


@converter("GridSample")
def grid_sample(ctx):
    x, grid = ctx.input(0), ctx.input(1)
    mode = ctx.attr("mode", "linear")  # opset 20's default, the name of opset 16's "bilinear"
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding = ctx.attr("padding_mode", "zeros")
    align = bool(ctx.attr("align_corners", 0))
    if mode not in ("nearest", "linear", "cubic"):
        raise ctx.error(f"attribute 'mode' must be nearest, linear or cubic, got {mode!r}")
    if padding not in ("zeros", "border", "reflection"):
        raise ctx.error(f"attribute 'padding_mode' must be zeros, border or reflection, got {padding!r}")
    shape, gshape = ctx.shape(x), ctx.shape(grid, "the grid")
    n, c, dims = shape[0], shape[1], list(shape[2:])
    out = list(gshape[1:-1])
    d = len(dims)
    if gshape[-1] != d or len(out) != d:
        raise ctx.error(f"grid {grid.type} does not fit input {x.type}")
    coords, taps = [], []
    for i, size in enumerate(dims):
        g = ctx.reshape(ctx.op("lz.slice", grid, starts=[d - 1 - i], ends=[d - i], axes=[d + 1]), [n] + out)
        g = ctx.cast(g, ctx.dtype(x))
        plus_one = ctx.op("lz.add", g, ctx.scalar(1, g))
        if align:
            v = ctx.op("lz.mul", plus_one, ctx.scalar((size - 1) / 2, g))
            lo, hi = 0.0, size - 1.0
        else:
            v = ctx.op("lz.div", ctx.op("lz.sub", ctx.op("lz.mul", plus_one, ctx.scalar(size, g)), ctx.scalar(1, g)),
                       ctx.scalar(2, g))
            lo, hi = -0.5, size - 0.5
        if mode == "nearest":
            v = ctx.op("lz.round", v)
        if padding == "border":  # clamped to the pixel centres only when outside [lo, hi]
            outside = ctx.op("lz.or", ctx.op("lz.cmp", v, ctx.scalar(lo, v), predicate="lt"),
                             ctx.op("lz.cmp", v, ctx.scalar(hi, v), predicate="gt"))
            v = ctx.op("lz.select", outside, _clamp(ctx, v, 0, size - 1), v)
        elif padding == "reflection":
            v = _reflect(ctx, v, lo, hi)
        coords.append((v, lo, hi, size))
        if mode == "nearest":
            taps.append([(v, None)])
        else:
            base = ctx.op("lz.floor", v)
            t = ctx.op("lz.sub", v, base)
            if mode == "linear":
                weights = [ctx.op("lz.sub", ctx.scalar(1, t), t), t]
                offsets = [0, 1]
            else:
                weights = _cubic_coefficients(ctx, t)
                offsets = [-1, 0, 1, 2]
            taps.append([(ctx.op("lz.add", base, ctx.scalar(o, base)), w) for o, w in zip(offsets, weights)])
    # the input as (N * pixels) x C rows
    pixels = product(dims)
    table = ctx.reshape(ctx.transpose(ctx.reshape(x, [n, c, pixels]), [0, 2, 1]), [n * pixels, c])
    batch = ctx.constant((np.arange(n, dtype=np.int64) * pixels).reshape([n] + [1] * d))
    strides = [product(dims[i + 1:]) for i in range(d)]
    total = None
    for combo in itertools.product(*taps):
        flat = batch
        weight = None
        inside = None
        for (position, w), (_, lo, hi, size), stride in zip(combo, coords, strides):
            index = ctx.cast(position, I64)  # truncation, as the reference's int()
            if padding == "zeros":
                ok = ctx.op("lz.and", ctx.op("lz.cmp", index, ctx.scalar(0, I64), predicate="ge"),
                            ctx.op("lz.cmp", index, ctx.scalar(size - 1, I64), predicate="le"))
                inside = ok if inside is None else ctx.op("lz.and", inside, ok)
            elif padding == "reflection" and w is not None:
                index = ctx.cast(_reflect(ctx, position, lo, hi), I64)
            index = _clamp(ctx, index, 0, size - 1)
            flat = ctx.op("lz.add", flat, ctx.op("lz.mul", index, ctx.scalar(stride, I64)) if stride != 1 else index)
            if w is not None:
                weight = w if weight is None else ctx.op("lz.mul", weight, w)
        picked = ctx.op("lz.gather", table, flat, axis=0)  # N x out... x C
        if inside is not None:
            picked = ctx.op("lz.select", ctx.reshape(inside, [n] + out + [1]), picked, ctx.scalar(0, picked))
        if weight is not None:
            picked = ctx.op("lz.mul", picked, ctx.reshape(weight, [n] + out + [1]))
        total = picked if total is None else ctx.op("lz.add", total, picked)
    return ctx.transpose(total, [0, d + 1] + list(range(1, d + 1)))


@converter("AffineGrid")
def affine_grid(ctx):
    theta = ctx.input(0)
    size = ctx.ints(1, "size")
    align = bool(ctx.attr("align_corners", 0))
    spatial = size[2:]
    if len(spatial) not in (2, 3):
        raise ctx.error(f"size {size} must describe a 2-D or 3-D image")
    axes = []
    for length in spatial:
        if align:
            a = np.arange(-1, 1 + 0.0001, 2.0 / (length - 1)) if length > 1 else np.array([-1.0])
        else:
            step = 2.0 / length
            a = np.arange(-1 + step / 2, 1, step)
        axes.append(a[:length])
    mesh = np.meshgrid(*axes, indexing="ij")
    # homogeneous coordinates, x first (the innermost dim), then y (then z), then 1
    columns = [m.reshape(-1) for m in reversed(mesh)] + [np.ones(product(spatial))]
    base = np.stack(columns, axis=0)  # (d + 1) x pixels
    grid = ctx.op("lz.matmul", theta, ctx.constant(base, ctx.dtype(theta)))  # N x d x pixels
    n = ctx.shape(theta)[0]
    return ctx.reshape(ctx.transpose(grid, [0, 2, 1]), [n] + list(spatial) + [len(spatial)])
