"""RMSprop (centered, momentum, weight decay, maximize), PyTorch's single-tensor update in its
operation order, fused into one kernel per parameter shape."""
from __future__ import annotations

from lezero.eager.dispatch import EagerOp
from lezero.optim.optimizer import Optimizer, UpdateRule, check_hyperparameters
from lezero.optim.update_math import addcdiv, directed_gradient, lerp, moving_square, weight_decay_mode


def _emit_rmsprop(b, attrs, p, g, square_avg, *rest):
    """``square_avg = alpha square_avg + (1 - alpha) g^2``; centered, ``grad_avg`` lerps towards
    ``g`` and the denominator is ``sqrt(square_avg - grad_avg^2) + eps``; with momentum ``buf =
    momentum buf + g / denom`` and ``p -= lr buf``, else ``p -= lr g / denom``."""
    rest = list(rest)
    buf = rest.pop(0) if attrs["momentum"] else None
    grad_avg = rest.pop(0) if attrs["centered"] else None
    neg_lr, alpha, weight, eps, *rest = rest
    _, g = directed_gradient(b, attrs, p, g, *([rest.pop(0)] if attrs["weight_decay"] == "l2" else []))
    square_avg = moving_square(b, square_avg, alpha, weight, g)
    states = [square_avg]
    second = square_avg
    if grad_avg is not None:
        grad_avg = lerp(b, grad_avg, g, weight, attrs["lerp_high"])
        second = b.op("lz.sub", square_avg, b.op("lz.mul", grad_avg, grad_avg))  # addcmul(value=-1)
    denom = b.op("lz.add", b.op("lz.sqrt", second), eps)
    if buf is not None:
        buf = b.op("lz.add", b.op("lz.mul", buf, rest.pop(0)), b.op("lz.div", g, denom))  # mul_, addcdiv_
        p = b.op("lz.add", p, b.op("lz.mul", neg_lr, buf))
        states.append(buf)
    else:
        p = addcdiv(b, p, neg_lr, g, denom)
    return [p] + states + ([grad_avg] if grad_avg is not None else [])


_RMSPROP = EagerOp("rmsprop_update", _emit_rmsprop)


class RMSprop(Optimizer):
    counts_steps = True

    def __init__(self, params, lr=1e-2, alpha: float = 0.99, eps: float = 1e-8, weight_decay: float = 0,
                 momentum: float = 0, centered: bool = False, capturable: bool = False, foreach=None,
                 maximize: bool = False, differentiable: bool = False):
        check_hyperparameters(lr=lr, eps=eps, momentum=momentum, weight_decay=weight_decay, alpha=alpha)
        super().__init__(params, dict(lr=lr, momentum=momentum, alpha=alpha, eps=eps, centered=centered,
                                      weight_decay=weight_decay, capturable=capturable, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable))

    def update_rule(self, group: dict, states: list[dict]) -> UpdateRule:
        self.coming_step(states)
        alpha, momentum, wd = group["alpha"], group["momentum"], group["weight_decay"]
        decay = weight_decay_mode(wd, decoupled=False)
        attrs = (("momentum", momentum > 0), ("centered", bool(group["centered"])), ("weight_decay", decay),
                 ("maximize", bool(group["maximize"])), ("lerp_high", 1 - alpha >= 0.5))
        keys = ("square_avg",) + (("momentum_buffer",) if momentum > 0 else ()) + \
            (("grad_avg",) if group["centered"] else ())
        scalars = [-group["lr"], alpha, 1 - alpha, group["eps"]] + ([wd] if wd != 0 else []) + \
            ([momentum] if momentum > 0 else [])
        return UpdateRule(_RMSPROP, attrs, keys, scalars)
