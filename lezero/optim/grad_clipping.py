"""Gradient clipping as IR: PyTorch's ``clip_grad_norm_`` (the norm of the per-gradient norms,
``max_norm / (total + 1e-6)`` clamped at 1, every gradient scaled by it) and ``clip_grad_value_``
(each element clamped to ``[-clip_value, clip_value]``), built on the gradients inside a compiled
training step, so clipping costs no trip out of the compiled function."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def _constant(b, value, like):
    return b.constant(np.asarray(value, like.type.element_type.numpy_dtype))


def emit_grad_norm(b, grads: list, norm_type: float):
    """The ``norm_type`` norm of all ``grads`` together, as PyTorch computes it: the norm of the
    per-gradient norms."""
    if norm_type == math.inf:  # the largest magnitude
        norms = [b.op("lz.reduce_max", b.op("lz.abs", g)) for g in grads]
        total = norms[0]
        for n in norms[1:]:
            total = b.op("lz.max", total, n)
        return total

    def norm(values):
        if norm_type == 2.0:
            return b.op("lz.sqrt", sum_of([b.op("lz.mul", v, v) for v in values]))
        if norm_type == 1.0:
            return sum_of([b.op("lz.abs", v) for v in values])
        p = _constant(b, norm_type, values[0])
        powered = sum_of([b.op("lz.pow", b.op("lz.abs", v), p) for v in values])
        return b.op("lz.pow", powered, _constant(b, 1.0 / norm_type, values[0]))

    def sum_of(terms):
        sums = [b.op("lz.reduce_sum", t) for t in terms]
        total = sums[0]
        for s in sums[1:]:
            total = b.op("lz.add", total, s)
        return total

    per_gradient = [norm([g]) for g in grads]
    if len(per_gradient) == 1:
        return per_gradient[0]
    return norm(per_gradient)


@dataclass(frozen=True)
class GradClipping:
    """What the compiled step does to the gradients before the update: scale them to a total
    ``max_norm`` (``norm_type`` norm) and/or clamp each element to ``clip_value``; PyTorch's order
    when both are asked for is the user's, here value first, then norm."""

    max_norm: float | None = None
    norm_type: float = 2.0
    clip_value: float | None = None

    def __post_init__(self):
        if self.max_norm is not None and not self.max_norm >= 0:
            raise ValueError(f"clip_grad_norm must be a non-negative max norm, got {self.max_norm}")
        if self.clip_value is not None and not self.clip_value >= 0:
            raise ValueError(f"clip_grad_value must be non-negative, got {self.clip_value}")
        if not (self.norm_type == math.inf or self.norm_type > 0):
            raise ValueError(f"norm_type must be positive or inf, got {self.norm_type}")

    def emit(self, b, grads: list) -> list:
        if self.clip_value is not None:
            grads = [b.op("lz.min", b.op("lz.max", g, _constant(b, -self.clip_value, g)),
                          _constant(b, self.clip_value, g)) for g in grads]
        if self.max_norm is not None:
            total = emit_grad_norm(b, grads, float(self.norm_type))
            coef = b.op("lz.div", _constant(b, self.max_norm, total), b.op("lz.add", total, _constant(b, 1e-6, total)))
            coef = b.op("lz.min", coef, _constant(b, 1.0, coef))
            grads = [b.op("lz.mul", g, coef) for g in grads]
        return grads
