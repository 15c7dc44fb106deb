"""Resize (opset 11+): separable, one axis at a time, as ONNX's reference computes it.

For each resized axis the source coordinate of every output position and its interpolation
coefficients are computed here, at import (they depend only on shapes and attributes): nearest
becomes an ``lz.gather`` of the chosen source positions (exact for any type), linear and cubic a
matmul with an ``out x in`` weight matrix along that axis.  ``tf_crop_and_resize`` positions
outside the image take ``extrapolation_value`` by a final select.
"""
from __future__ import annotations

import math

import numpy as np

from lezero.ir.types import F64
from lezero.onnx.registry import converter


def _source_coordinates(mode, y, scale, in_size, out_size_float, out_size, roi):
    """Source coordinates of output positions ``y`` and, for tf_crop_and_resize, which of them
    fall outside the input."""
    outside = None
    if mode == "align_corners":
        x = np.zeros(out_size) if out_size_float == 1 else y * (in_size - 1) / (out_size_float - 1)
    elif mode == "asymmetric":
        x = y / scale
    elif mode == "tf_crop_and_resize":
        if out_size_float == 1:
            x = np.full(out_size, (roi[1] - roi[0]) * (in_size - 1) / 2)
        else:
            x = y * (roi[1] - roi[0]) * (in_size - 1) / (out_size_float - 1)
        x = x + roi[0] * (in_size - 1)
        outside = (x < 0) | (x > in_size - 1)
    elif mode == "pytorch_half_pixel":
        x = np.full(out_size, -0.5) if out_size_float == 1 else (y + 0.5) / scale - 0.5
    elif mode == "half_pixel":
        x = (y + 0.5) / scale - 0.5
    elif mode == "half_pixel_symmetric":
        adjustment = out_size / out_size_float
        x = in_size / 2 * (1 - adjustment) + (y + 0.5) / scale - 0.5
    else:
        raise ValueError(f"unknown coordinate_transformation_mode {mode!r}")
    return x, outside


def _nearest(ratio, nearest_mode):
    if float(ratio).is_integer():
        return np.array([0.0, 1.0])
    table = {"round_prefer_floor": (ratio <= 0.5, ratio > 0.5), "round_prefer_ceil": (ratio < 0.5, ratio >= 0.5),
             "floor": (1, 0), "ceil": (0, 1)}
    return np.array(table[nearest_mode], dtype=np.float64)


def _cubic(ratio, scale, a, antialias):
    if antialias:
        scale = min(scale, 1.0)

        def kernel(x):
            x = abs(x)
            if x <= 1:
                return (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
            if x < 2:
                return a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a
            return 0.0
        start = int(np.floor(-2 / scale) + 1)
        coeffs = np.array([kernel(scale * (i - ratio)) for i in range(start, 2 - start)])
        return coeffs / coeffs.sum()
    r = ratio
    return np.array([((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
                     ((a + 2) * r - (a + 3)) * r * r + 1,
                     ((a + 2) * (1 - r) - (a + 3)) * (1 - r) * (1 - r) + 1,
                     ((a * ((1 - r) + 1) - 5 * a) * ((1 - r) + 1) + 8 * a) * ((1 - r) + 1) - 4 * a])


def _linear(ratio, scale, antialias):
    if antialias:
        scale = min(scale, 1.0)
        start = int(np.floor(-1 / scale) + 1)
        footprint = 2 - 2 * start
        coeffs = np.clip(1 - np.abs((np.arange(start, start + footprint) - ratio) * scale), 0, 1)
        return coeffs / coeffs.sum()
    return np.array([1 - ratio, ratio])


def axis_interpolation(in_size, out_size, scale, coefficients, coordinate_mode, roi, exclude_outside):
    """``(neighbours, coefficients, outside)``: per output position, the clamped source indices,
    their weights, and (tf_crop_and_resize) whether it is outside the input."""
    y = np.arange(out_size, dtype=np.float64)
    x, outside = _source_coordinates(coordinate_mode, y, scale, in_size, scale * in_size, out_size, roi)
    base = np.floor(x).astype(np.int64)
    ratios = np.where(x == base, 1.0, x - base)
    coeffs = np.stack([coefficients(float(r), scale) for r in ratios]) if out_size else np.zeros((0, 2))
    n = coeffs.shape[1]
    pad = int(math.ceil(n / 2))
    padded = x + pad
    floor = np.floor(padded).astype(np.int64)
    frac = padded - floor
    if n % 2 == 0:
        offset = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        offset = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    neighbours = (floor + offset)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        coeffs = np.where((neighbours < 0) | (neighbours >= in_size), 0.0, coeffs)
        total = coeffs.sum(axis=-1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    return np.clip(neighbours, 0, in_size - 1), coeffs, outside


def _along(ctx, x, axis, weights):
    """``x`` contracted with ``weights`` (out x in) along ``axis``."""
    rank = ctx.rank(x)
    w = ctx.constant(weights, ctx.dtype(x))
    if axis == rank - 2:
        return ctx.op("lz.matmul", w, x)
    if axis == rank - 1:
        return ctx.op("lz.matmul", x, ctx.constant(weights.T.copy(), ctx.dtype(x)))
    perm = [d for d in range(rank) if d != axis] + [axis]
    moved = ctx.op("lz.matmul", ctx.transpose(x, perm), ctx.constant(weights.T.copy(), ctx.dtype(x)))
    inverse = [0] * rank
    for i, p in enumerate(perm):
        inverse[p] = i
    return ctx.transpose(moved, inverse)


@converter("Resize", since=11)  # before 11 its coordinate rules differ
def resize(ctx):
    x = ctx.input(0)
    shape = ctx.shape(x)
    rank = len(shape)
    mode = ctx.attr("mode", "nearest")
    coordinate_mode = ctx.attr("coordinate_transformation_mode", "half_pixel")
    nearest_mode = ctx.attr("nearest_mode", "round_prefer_floor")
    a = ctx.attr("cubic_coeff_a", -0.75)
    antialias = bool(ctx.attr("antialias", 0))
    exclude_outside = bool(ctx.attr("exclude_outside", 0))
    extrapolation = ctx.attr("extrapolation_value", 0.0)
    policy = ctx.attr("keep_aspect_ratio_policy", "stretch")
    axes = ctx.attr("axes", None)
    axes = list(range(rank)) if axes is None else [a_ % rank for a_ in axes]
    roi = ctx.const(1) if ctx.has_input(1) else None
    if ctx.has_input(1) and roi is None:
        roi = ctx.require_const(1, "roi")
    scales = [float(s) for s in np.asarray(ctx.require_const(2, "scales")).reshape(-1)] if ctx.has_input(2) else []
    sizes = ctx.ints(3, "sizes") or None
    if not scales and sizes is None:
        raise ctx.error("needs scales or sizes")
    scale = [1.0] * rank
    out = list(shape)
    if sizes is not None:
        for i, d in enumerate(axes):
            out[d] = sizes[i]
            scale[d] = sizes[i] / shape[d]
        if policy != "stretch":
            if policy not in ("not_larger", "not_smaller"):
                raise ctx.error(f"attribute 'keep_aspect_ratio_policy' has an unknown value {policy!r}")
            pick = min if policy == "not_larger" else max
            common = pick(scale[d] for d in axes)
            for d in axes:
                scale[d] = common
                out[d] = int(common * shape[d] + 0.5)
    else:
        for i, d in enumerate(axes):
            scale[d] = scales[i]
            out[d] = int(scales[i] * shape[d])
    full_roi = None
    if roi is not None and np.asarray(roi).size:
        roi = np.asarray(roi, np.float64).reshape(-1)
        full_roi = [0.0] * rank + [1.0] * rank
        for i, d in enumerate(axes):
            full_roi[d], full_roi[rank + d] = roi[i], roi[len(axes) + i]
    if mode == "nearest":
        if antialias:
            raise ctx.error("antialias is not allowed with mode nearest")
        coefficients = lambda r, s: _nearest(r, nearest_mode)  # noqa: E731
    elif mode == "linear":
        coefficients = lambda r, s: _linear(r, s, antialias)  # noqa: E731
    elif mode == "cubic":
        coefficients = lambda r, s: _cubic(r, s, a, antialias)  # noqa: E731
    else:
        raise ctx.error(f"attribute 'mode' must be nearest, linear or cubic, got {mode!r}")
    et = ctx.dtype(x)
    work = x if et.is_float or mode == "nearest" else ctx.cast(x, F64)
    outside_mask = None
    for d in axes:
        axis_roi = None if full_roi is None else (full_roi[d], full_roi[rank + d])
        if math.isclose(scale[d], 1.0) and out[d] == shape[d] and (
                axis_roi is None or (math.isclose(axis_roi[0], 0.0) and math.isclose(axis_roi[1], 1.0))):
            continue
        if coordinate_mode == "tf_crop_and_resize" and axis_roi is None:
            raise ctx.error("coordinate_transformation_mode tf_crop_and_resize needs roi")
        try:
            neighbours, coeffs, outside = axis_interpolation(shape[d], out[d], scale[d], coefficients,
                                                             coordinate_mode, axis_roi, exclude_outside)
        except ValueError as e:
            raise ctx.error(str(e)) from None
        if mode == "nearest":
            chosen = neighbours[np.arange(out[d]), np.argmax(coeffs, axis=1)] if out[d] else np.zeros(0, np.int64)
            work = ctx.op("lz.gather", work, ctx.constant(chosen.astype(np.int64)), axis=d)
        else:
            weights = np.zeros((out[d], shape[d]))
            for j in range(coeffs.shape[1]):
                np.add.at(weights, (np.arange(out[d]), neighbours[:, j]), coeffs[:, j])
            work = _along(ctx, work, d, weights)
        if outside is not None and outside.any():
            view = [1] * rank
            view[d] = out[d]
            mask = outside.reshape(view)
            outside_mask = mask if outside_mask is None else (outside_mask | mask)
    if outside_mask is not None:
        work = ctx.op("lz.select", ctx.constant(outside_mask), ctx.scalar(extrapolation, work), work)
    if ctx.dtype(work) != et:
        info = np.iinfo(et.numpy_dtype)
        work = ctx.op("lz.round", work)
        work = ctx.op("lz.min", ctx.op("lz.max", work, ctx.scalar(info.min, work)), ctx.scalar(info.max, work))
        work = ctx.cast(work, et)
    return work
