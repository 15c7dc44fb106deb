"""The tensor ops PyTorch's optimizers are written in (``lerp_``, ``addcmul_``, ``addcdiv_``, the
gradient's ``maximize`` and weight decay), as IR-building functions in the operation order of
torch's CPU kernels, so that an update built from them rounds as torch's single-tensor update
does.  Each optimizer's ``emit`` composes them into its one fused update."""
from __future__ import annotations

import numpy as np


def one_like(b, x):
    """A rank-0 constant 1 in ``x``'s element type."""
    return b.constant(np.ones((), x.type.element_type.numpy_dtype))


def lerp(b, start, end, weight, high: bool):
    """``start.lerp_(end, weight)`` for a rank-0 ``weight``: torch computes ``start + w (end -
    start)`` for ``|w| < 0.5`` and ``end - (end - start)(1 - w)`` otherwise (exact at ``w = 1``);
    ``high`` says which, known in Python from the hyperparameter."""
    if high:
        return b.op("lz.sub", end, b.op("lz.mul", b.op("lz.sub", end, start), b.op("lz.sub", one_like(b, weight),
                                                                                    weight)))
    return b.op("lz.add", start, b.op("lz.mul", weight, b.op("lz.sub", end, start)))


def addcmul(b, x, value, t1, t2):
    """``x.addcmul_(t1, t2, value=value)``: ``x + (value t1) t2``."""
    return b.op("lz.add", x, b.op("lz.mul", b.op("lz.mul", value, t1), t2))


def addcdiv(b, x, value, t1, t2):
    """``x.addcdiv_(t1, t2, value=value)``: ``x + (value t1) / t2``."""
    return b.op("lz.add", x, b.op("lz.div", b.op("lz.mul", value, t1), t2))


def moving_square(b, v, beta2, weight, g):
    """``v.mul_(beta2).addcmul_(g, g, value=weight)``: the second-moment average."""
    return addcmul(b, b.op("lz.mul", v, beta2), weight, g, g)


def directed_gradient(b, attrs: dict, p, g, decay=None):
    """The gradient the update follows and the parameter it starts from: ``-g`` when maximizing;
    with ``attrs["weight_decay"]`` ``"l2"`` the gradient gains ``decay p`` (``grad.add(p,
    alpha=wd)``), with ``"decoupled"`` the parameter shrinks by ``decay`` (``p.mul_(1 - lr wd)``,
    before the step)."""
    if attrs.get("maximize"):
        g = b.op("lz.neg", g)
    if attrs.get("weight_decay") == "l2":
        g = b.op("lz.add", g, b.op("lz.mul", p, decay))
    elif attrs.get("weight_decay") == "decoupled":
        p = b.op("lz.mul", p, decay)
    return p, g


def weight_decay_mode(wd: float, decoupled: bool) -> str:
    """The ``weight_decay`` attribute ``directed_gradient`` reads."""
    return "none" if wd == 0 else "decoupled" if decoupled else "l2"


def decay_scalar(mode: str, lr: float, wd: float) -> list:
    """The rank-0 scalar ``directed_gradient`` takes for ``mode`` (none when there is no decay)."""
    return [] if mode == "none" else [1 - lr * wd] if mode == "decoupled" else [wd]
