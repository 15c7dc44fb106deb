"""Adadelta (weight decay, maximize), PyTorch's single-tensor update in its operation order, fused
into one kernel per parameter shape."""
from __future__ import annotations

from lezero.eager.dispatch import EagerOp
from lezero.optim.optimizer import Optimizer, UpdateRule, check_hyperparameters
from lezero.optim.update_math import directed_gradient, moving_square, weight_decay_mode


def _emit_adadelta(b, attrs, p, g, square_avg, acc_delta, neg_lr, rho, weight, eps, *decay):
    """``square_avg = rho square_avg + (1 - rho) g^2``; ``delta = sqrt(acc_delta + eps) /
    sqrt(square_avg + eps) g``; ``acc_delta = rho acc_delta + (1 - rho) delta^2``; ``p -= lr delta``."""
    _, g = directed_gradient(b, attrs, p, g, *decay)
    square_avg = moving_square(b, square_avg, rho, weight, g)
    std = b.op("lz.sqrt", b.op("lz.add", square_avg, eps))
    delta = b.op("lz.mul", b.op("lz.div", b.op("lz.sqrt", b.op("lz.add", acc_delta, eps)), std), g)
    acc_delta = moving_square(b, acc_delta, rho, weight, delta)
    return [b.op("lz.add", p, b.op("lz.mul", neg_lr, delta)), square_avg, acc_delta]


_ADADELTA = EagerOp("adadelta_update", _emit_adadelta)


class Adadelta(Optimizer):
    counts_steps = True

    def __init__(self, params, lr=1.0, rho: float = 0.9, eps: float = 1e-6, weight_decay: float = 0, foreach=None,
                 *, capturable: bool = False, maximize: bool = False, differentiable: bool = False):
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        check_hyperparameters(lr=lr, eps=eps, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize,
                                      capturable=capturable, foreach=foreach, differentiable=differentiable))

    def update_rule(self, group: dict, states: list[dict]) -> UpdateRule:
        self.coming_step(states)
        rho, wd = group["rho"], group["weight_decay"]
        decay = weight_decay_mode(wd, decoupled=False)
        attrs = (("weight_decay", decay), ("maximize", bool(group["maximize"])))
        scalars = [-group["lr"], rho, 1 - rho, group["eps"]] + ([wd] if wd != 0 else [])
        return UpdateRule(_ADADELTA, attrs, ("square_avg", "acc_delta"), scalars)
