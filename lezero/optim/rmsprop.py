"""RMSprop (centered, momentum, weight decay, maximize) and Adagrad (learning-rate decay, an
initial accumulator), PyTorch's single-tensor updates in its operation order, each fused into one
kernel per parameter shape; Adagrad's decayed rate is computed per step in Python, as PyTorch does."""
from __future__ import annotations

import numpy as np

from lezero.eager.core import wrap as _wrap
from lezero.eager.creation import tensor
from lezero.eager.device_arrays import like, numpy_dtype
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


def _emit_adagrad(b, attrs, p, g, state_sum, neg_clr, eps, *decay):
    """``sum += g^2``; ``p -= clr g / (sqrt(sum) + eps)``."""
    _, g = directed_gradient(b, attrs, p, g, *decay)
    state_sum = b.op("lz.add", state_sum, b.op("lz.mul", g, g))  # addcmul_(g, g, value=1)
    std = b.op("lz.add", b.op("lz.sqrt", state_sum), eps)
    return [addcdiv(b, p, neg_clr, g, std), state_sum]


_ADAGRAD = EagerOp("adagrad_update", _emit_adagrad)


class Adagrad(Optimizer):
    """As PyTorch's, the state (``step`` and ``sum``, filled with ``initial_accumulator_value``)
    exists from construction."""

    counts_steps = True

    def __init__(self, params, lr=1e-2, lr_decay: float = 0, weight_decay: float = 0,
                 initial_accumulator_value: float = 0, eps: float = 1e-10, foreach=None, *, maximize: bool = False,
                 differentiable: bool = False, fused=None):
        check_hyperparameters(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                              initial_accumulator_value=initial_accumulator_value, eps=eps)
        super().__init__(params, dict(lr=lr, lr_decay=lr_decay, eps=eps, weight_decay=weight_decay,
                                      initial_accumulator_value=initial_accumulator_value, foreach=foreach,
                                      maximize=maximize, differentiable=differentiable, fused=fused))
        for group in self.param_groups:
            for p in group["params"]:
                self._create_state(p, group)

    def _create_state(self, p, group: dict) -> None:
        state = self.state[p]
        if "step" not in state:
            state["step"] = tensor(0.0)
        if "sum" not in state:
            initial = np.full(p.shape, group["initial_accumulator_value"], numpy_dtype(p._data))
            state["sum"] = _wrap(like(initial, p._data))

    def update_rule(self, group: dict, states: list[dict]) -> UpdateRule:
        step = self.coming_step(states)
        lr, wd = group["lr"], group["weight_decay"]
        decay = weight_decay_mode(wd, decoupled=False)
        clr = lr / (1 + (step - 1) * group["lr_decay"])
        attrs = (("weight_decay", decay), ("maximize", bool(group["maximize"])))
        return UpdateRule(_ADAGRAD, attrs, ("sum",), [-clr, group["eps"]] + ([wd] if wd != 0 else []))

    def advance(self, p, rule: UpdateRule) -> None:
        """A parameter added after construction (``add_param_group``) gets its accumulator here."""
        if "sum" not in self.state[p]:
            self._create_state(p, next(g for g in self.param_groups if any(q is p for q in g["params"])))
        super().advance(p, rule)
