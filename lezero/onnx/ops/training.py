"""ai.onnx.preview.training optimizers: Adagrad, Adam, Momentum (each updates several tensors at
once: inputs ``R, T, X..., G..., state...``).  The iteration count ``T`` selects formulas, so it is
read at import (``ctx.require_const``); the learning rate ``R`` stays an input."""
from __future__ import annotations

import math

import numpy as np

from lezero.onnx.registry import converter

DOMAIN = "ai.onnx.preview.training"


def _groups(ctx, per_tensor: int):
    values = ctx.inputs[2:]
    if len(values) % per_tensor:
        raise ctx.error(f"expects R, T, then {per_tensor} lists of equal length, got {len(ctx.inputs)} inputs")
    n = len(values) // per_tensor
    return [values[i * n:(i + 1) * n] for i in range(per_tensor)], n


def _step(ctx) -> int:
    return int(np.asarray(ctx.require_const(1, "the iteration count T")).reshape(-1)[0])


def _s(ctx, value, like):
    return ctx.scalar(value, like)


@converter("Adagrad", domain=DOMAIN)
def adagrad(ctx):
    decay, epsilon, norm = ctx.attr("decay_factor", 0.0), ctx.attr("epsilon", 0.0), ctx.attr("norm_coefficient", 0.0)
    r, t = ctx.input(0), _step(ctx)
    (xs, gs, hs), n = _groups(ctx, 3)
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs):
        rate = ctx.op("lz.div", ctx.cast(r, ctx.dtype(x)), _s(ctx, 1 + t * decay, x))
        g = ctx.op("lz.add", ctx.op("lz.mul", _s(ctx, norm, x), x), g)
        h_new = ctx.op("lz.add", h, ctx.op("lz.mul", g, g))
        denominator = ctx.op("lz.add", ctx.op("lz.sqrt", h_new), _s(ctx, epsilon, x))
        new_x.append(ctx.op("lz.sub", x, ctx.op("lz.div", ctx.op("lz.mul", rate, g), denominator)))
        new_h.append(h_new)
    return new_x + new_h


@converter("Adam", domain=DOMAIN)
def adam(ctx):
    alpha, beta = ctx.attr("alpha", 0.9), ctx.attr("beta", 0.999)
    epsilon, norm = ctx.attr("epsilon", 1e-6), ctx.attr("norm_coefficient", 0.0)
    post = ctx.attr("norm_coefficient_post", 0.0)
    r, t = ctx.input(0), _step(ctx)
    (xs, gs, vs, hs), n = _groups(ctx, 4)
    adjust = math.sqrt(1 - beta ** t) / (1 - alpha ** t) if t > 0 else 1.0
    out_x, out_v, out_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        g = ctx.op("lz.add", ctx.op("lz.mul", _s(ctx, norm, x), x), g)
        v_new = ctx.op("lz.add", ctx.op("lz.mul", _s(ctx, alpha, v), v), ctx.op("lz.mul", _s(ctx, 1 - alpha, g), g))
        h_new = ctx.op("lz.add", ctx.op("lz.mul", _s(ctx, beta, h), h),
                       ctx.op("lz.mul", _s(ctx, 1 - beta, g), ctx.op("lz.mul", g, g)))
        denominator = ctx.op("lz.add", ctx.op("lz.sqrt", h_new), _s(ctx, epsilon, x))
        rate = ctx.op("lz.mul", ctx.cast(r, ctx.dtype(x)), _s(ctx, adjust, x))
        x_new = ctx.op("lz.sub", x, ctx.op("lz.mul", rate, ctx.op("lz.div", v_new, denominator)))
        out_x.append(ctx.op("lz.mul", _s(ctx, 1 - post, x), x_new))
        out_v.append(v_new)
        out_h.append(h_new)
    return out_x + out_v + out_h


@converter("Momentum", domain=DOMAIN)
def momentum(ctx):
    alpha, beta = ctx.attr("alpha"), ctx.attr("beta")
    mode, norm = ctx.attr("mode"), ctx.attr("norm_coefficient")
    if mode not in ("standard", "nesterov"):
        raise ctx.error(f"attribute 'mode' must be standard or nesterov, got {mode!r}")
    r, t = ctx.input(0), _step(ctx)
    (xs, gs, vs), n = _groups(ctx, 3)
    beta_now = beta if t > 0 else 1.0
    out_x, out_v = [], []
    for x, g, v in zip(xs, gs, vs):
        rate = ctx.cast(r, ctx.dtype(x))
        g = ctx.op("lz.add", ctx.op("lz.mul", _s(ctx, norm, x), x), g)
        v_new = ctx.op("lz.add", ctx.op("lz.mul", _s(ctx, alpha, v), v), ctx.op("lz.mul", _s(ctx, beta_now, g), g))
        step = v_new if mode == "standard" else ctx.op("lz.add", g, ctx.op("lz.mul", _s(ctx, alpha, v_new), v_new))
        out_x.append(ctx.op("lz.sub", x, ctx.op("lz.mul", rate, step)))
        out_v.append(v_new)
    return out_x + out_v
