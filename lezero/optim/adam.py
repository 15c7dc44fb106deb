"""Adam and AdamW (with amsgrad and maximize), PyTorch's single-tensor update in its operation
order (``lerp`` for the first moment, ``addcmul`` for the second, ``addcdiv`` for the step), fused
into one kernel per parameter shape; the bias corrections are computed per step in Python, as
PyTorch does."""
from __future__ import annotations

import math

from lezero.eager.dispatch import EagerOp
from lezero.optim.optimizer import Optimizer, UpdateRule, check_hyperparameters
from lezero.optim.update_math import (addcdiv, decay_scalar, directed_gradient, lerp, moving_square,
                                      weight_decay_mode)


def _emit_adam(b, attrs, p, g, m, v, *rest):
    rest = list(rest)
    v_max = rest.pop(0) if attrs["amsgrad"] else None
    w1, beta2, w2, eps, neg_step, bc2_sqrt, *decay = rest
    p, g = directed_gradient(b, attrs, p, g, *decay)
    m = lerp(b, m, g, w1, attrs["lerp_high"])
    v = moving_square(b, v, beta2, w2, g)
    second = v
    results = [m, v]
    if v_max is not None:
        second = v_max = b.op("lz.max", v_max, v)
        results.append(v_max)
    denom = b.op("lz.add", b.op("lz.div", b.op("lz.sqrt", second), bc2_sqrt), eps)
    return [addcdiv(b, p, neg_step, m, denom)] + results


_ADAM = EagerOp("adam_update", _emit_adam)


class Adam(Optimizer):
    counts_steps = True
    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0,
                 amsgrad: bool = False, *, foreach=None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused=None):
        check_hyperparameters(betas, lr=lr, eps=eps, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable, fused=fused))

    def update_rule(self, group: dict, states: list[dict]) -> UpdateRule:
        """The bias corrections for the coming step number, computed in Python as PyTorch does;
        one rule serves parameters that have taken the same number of steps."""
        step = self.coming_step(states)
        beta1, beta2 = group["betas"]
        lr, wd, amsgrad = group["lr"], group["weight_decay"], group["amsgrad"]
        decay = weight_decay_mode(wd, self._decoupled)
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        step_size = lr / bias_correction1
        attrs = (("amsgrad", bool(amsgrad)), ("maximize", bool(group["maximize"])), ("weight_decay", decay),
                 ("lerp_high", 1 - beta1 >= 0.5))
        scalars = [1 - beta1, beta2, 1 - beta2, group["eps"], -step_size, math.sqrt(bias_correction2)]
        keys = ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if amsgrad else ())
        return UpdateRule(_ADAM, attrs, keys, scalars + decay_scalar(decay, lr, wd))


class AdamW(Adam):
    """Adam with decoupled weight decay (default 1e-2): ``p *= 1 - lr * wd`` before the step."""

    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 amsgrad: bool = False, *, maximize: bool = False, foreach=None, capturable: bool = False,
                 differentiable: bool = False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused)
