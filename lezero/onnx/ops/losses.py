"""Loss operators: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

The target's class is picked from the class axis by a one-hot compare (``select`` + a sum over
the classes: exact, and no gather with data-dependent indices); ``ignore_index`` zeroes a
position's loss and weight; ``mean`` divides by the summed weights, as ONNX's reference does.
"""
from __future__ import annotations

import numpy as np

from lezero.ir.types import I64
from lezero.onnx.registry import converter


def _reduction(ctx) -> str:
    reduction = ctx.attr("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise ctx.error(f"attribute 'reduction' must be none, sum or mean, got {reduction!r}")
    return reduction


def negative_log_likelihood(ctx, log_prob, target, weight, reduction, ignore_index, quirk_minus_one=False):
    shape = ctx.shape(log_prob)
    if len(shape) < 2:
        raise ctx.error(f"input must be N x C x ..., got {log_prob.type}")
    n, c, rest = shape[0], shape[1], list(shape[2:])
    t = ctx.cast(target, I64)
    classes = ctx.constant(np.arange(c, dtype=np.int64).reshape([1, c] + [1] * len(rest)))
    hit = ctx.op("lz.cmp", ctx.reshape(t, [n, 1] + rest), classes, predicate="eq")
    picked = ctx.op("lz.reduce_sum", ctx.op("lz.select", hit, log_prob, ctx.scalar(0, log_prob)), axes=[1])
    loss = ctx.op("lz.neg", picked)
    valid = None
    if ignore_index is not None:
        valid = ctx.op("lz.cmp", t, ctx.scalar(ignore_index, I64), predicate="ne")
        loss = ctx.op("lz.select", valid, loss, ctx.scalar(0, loss))
    weights = None
    if weight is not None:
        clipped = ctx.op("lz.min", ctx.op("lz.max", t, ctx.scalar(0, I64)), ctx.scalar(c - 1, I64))
        weights = ctx.op("lz.gather", weight, clipped, axis=0)
        if valid is not None:
            weights = ctx.op("lz.select", valid, weights, ctx.scalar(0, weights))
    elif valid is not None and not (quirk_minus_one and ignore_index == -1):
        weights = ctx.cast(valid, ctx.dtype(log_prob))
    if weights is not None and weight is not None:
        loss = ctx.op("lz.mul", loss, weights)
    everything = list(range(ctx.rank(loss)))
    if reduction == "none":
        return loss
    total = ctx.op("lz.reduce_sum", loss, axes=everything)
    if reduction == "sum":
        return total
    if weights is not None:
        return ctx.op("lz.div", total, ctx.op("lz.reduce_sum", weights, axes=everything))
    return ctx.op("lz.reduce_mean", loss, axes=everything)


@converter("NegativeLogLikelihoodLoss")
def nll_loss(ctx):
    return negative_log_likelihood(ctx, ctx.input(0), ctx.input(1), ctx.optional(2), _reduction(ctx),
                                   ctx.attr("ignore_index", None), quirk_minus_one=True)


@converter("SoftmaxCrossEntropyLoss")
def softmax_cross_entropy(ctx):
    scores = ctx.input(0)
    log_prob = ctx.op("lz.log_softmax", scores, axis=1)
    loss = negative_log_likelihood(ctx, log_prob, ctx.input(1), ctx.optional(2), _reduction(ctx),
                                   ctx.attr("ignore_index", None))
    return [loss, log_prob]
