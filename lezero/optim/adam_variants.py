"""Adamax (the infinity norm), NAdam (Nesterov momentum with its ``mu_product``) and RAdam (the
variance rectification), PyTorch's single-tensor updates in its operation order, each fused into
one kernel per parameter shape.  What depends only on the step number (bias corrections, NAdam's
momentum schedule, RAdam's rectification and whether it applies) is computed in Python, as PyTorch
does, and enters the kernel as rank-0 scalars."""
from __future__ import annotations

import numpy as np

from lezero.eager.creation import tensor
from lezero.eager.dispatch import EagerOp
from lezero.optim.optimizer import Optimizer, UpdateRule, check_hyperparameters
from lezero.optim.update_math import (addcdiv, decay_scalar, directed_gradient, lerp, moving_square,
                                      weight_decay_mode)


def _emit_adamax(b, attrs, p, g, exp_avg, exp_inf, w1, beta2, eps, neg_clr, *decay):
    """``exp_inf = max(beta2 exp_inf, |g| + eps)``; ``p -= lr / (1 - beta1^t) exp_avg / exp_inf``."""
    p, g = directed_gradient(b, attrs, p, g, *decay)
    exp_avg = lerp(b, exp_avg, g, w1, attrs["lerp_high"])
    exp_inf = b.op("lz.max", b.op("lz.mul", exp_inf, beta2), b.op("lz.add", b.op("lz.abs", g), eps))
    return [addcdiv(b, p, neg_clr, exp_avg, exp_inf), exp_avg, exp_inf]


_ADAMAX = EagerOp("adamax_update", _emit_adamax)


class Adamax(Optimizer):
    counts_steps = True

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0,
                 foreach=None, *, maximize: bool = False, differentiable: bool = False, capturable: bool = False):
        check_hyperparameters(betas, lr=lr, eps=eps, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      foreach=foreach, maximize=maximize, differentiable=differentiable,
                                      capturable=capturable))

    def update_rule(self, group: dict, states: list[dict]) -> UpdateRule:
        step = self.coming_step(states)
        (beta1, beta2), lr, wd = group["betas"], group["lr"], group["weight_decay"]
        decay = weight_decay_mode(wd, decoupled=False)
        attrs = (("weight_decay", decay), ("maximize", bool(group["maximize"])), ("lerp_high", 1 - beta1 >= 0.5))
        scalars = [1 - beta1, beta2, group["eps"], -(lr / (1 - beta1 ** step))] + decay_scalar(decay, lr, wd)
        return UpdateRule(_ADAMAX, attrs, ("exp_avg", "exp_inf"), scalars)


def _emit_nadam(b, attrs, p, g, exp_avg, exp_avg_sq, w1, beta2, w2, bias_correction2, eps, grad_weight,
                avg_weight, *decay):
    """``denom = sqrt(v / (1 - beta2^t)) + eps``; ``p += grad_weight g / denom + avg_weight m /
    denom`` (two ``addcdiv_``, as PyTorch's)."""
    p, g = directed_gradient(b, attrs, p, g, *decay)
    exp_avg = lerp(b, exp_avg, g, w1, attrs["lerp_high"])
    exp_avg_sq = moving_square(b, exp_avg_sq, beta2, w2, g)
    denom = b.op("lz.add", b.op("lz.sqrt", b.op("lz.div", exp_avg_sq, bias_correction2)), eps)
    p = addcdiv(b, addcdiv(b, p, grad_weight, g, denom), avg_weight, exp_avg, denom)
    return [p, exp_avg, exp_avg_sq]


_NADAM = EagerOp("nadam_update", _emit_nadam)


class NAdam(Optimizer):
    """``state["mu_product"]`` is PyTorch's rank-0 float32 tensor (the product of the momentum
    schedule so far), multiplied in float32 as PyTorch does, so the step weights match."""

    counts_steps = True

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0,
                 momentum_decay: float = 4e-3, decoupled_weight_decay: bool = False, *, foreach=None,
                 maximize: bool = False, capturable: bool = False, differentiable: bool = False):
        check_hyperparameters(betas, lr=lr, eps=eps, weight_decay=weight_decay, momentum_decay=momentum_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      momentum_decay=momentum_decay, decoupled_weight_decay=decoupled_weight_decay,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable))

    def _momentum(self, group: dict, step: float) -> float:
        return group["betas"][0] * (1.0 - 0.5 * (0.96 ** (step * group["momentum_decay"])))

    def update_rule(self, group: dict, states: list[dict]) -> UpdateRule:
        step = self.coming_step(states)
        products = {float(s["mu_product"]._data) if "mu_product" in s else 1.0 for s in states}
        if len(products) != 1:
            raise RuntimeError("the parameters of one group have different NAdam momentum products")
        (beta1, beta2), lr, wd = group["betas"], group["lr"], group["weight_decay"]
        mu, mu_next = self._momentum(group, step), self._momentum(group, step + 1)
        mu_product = float(np.float32(products.pop()) * np.float32(mu))
        mu_product_next = mu_product * mu_next
        decay = weight_decay_mode(wd, bool(group["decoupled_weight_decay"]))
        attrs = (("weight_decay", decay), ("maximize", bool(group["maximize"])), ("lerp_high", 1 - beta1 >= 0.5))
        scalars = [1 - beta1, beta2, 1 - beta2, 1 - beta2 ** step, group["eps"],
                   -lr * (1.0 - mu) / (1.0 - mu_product), (-lr * mu_next) / (1.0 - mu_product_next)]
        return UpdateRule(_NADAM, attrs, ("exp_avg", "exp_avg_sq"), scalars + decay_scalar(decay, lr, wd))

    def advance(self, p, rule: UpdateRule) -> None:
        state = self.state[p]
        if "step" not in state:
            state["step"] = tensor(0.0)
            state["mu_product"] = tensor(1.0)
        group = next(g for g in self.param_groups if any(q is p for q in g["params"]))
        mu = self._momentum(group, float(state["step"]._data) + 1)
        super().advance(p, rule)
        state["mu_product"]._data[...] *= np.float32(mu)


def _emit_radam(b, attrs, p, g, exp_avg, exp_avg_sq, w1, beta2, w2, bias_correction1, lr, bias_correction2_sqrt,
                eps, rect, rectified, *decay):
    """``m / (1 - beta1^t) lr``, once the variance is tractable (``rectified``, rank-0: 1 or 0)
    times ``sqrt(1 - beta2^t) / (sqrt(v) + eps)`` and the rectification ``rect``, subtracted from
    ``p``.  Both forms are computed and one selected, so the steps before and after the switch run
    one kernel, each form rounding as PyTorch's branch does."""
    p, g = directed_gradient(b, attrs, p, g, *decay)
    exp_avg = lerp(b, exp_avg, g, w1, attrs["lerp_high"])
    exp_avg_sq = moving_square(b, exp_avg_sq, beta2, w2, g)
    plain = b.op("lz.mul", b.op("lz.div", exp_avg, bias_correction1), lr)
    adaptive = b.op("lz.div", bias_correction2_sqrt, b.op("lz.add", b.op("lz.sqrt", exp_avg_sq), eps))
    rectified_update = b.op("lz.mul", b.op("lz.mul", plain, adaptive), rect)
    half = b.constant(np.asarray(0.5, rectified.type.element_type.numpy_dtype))
    update = b.op("lz.select", b.op("lz.cmp", rectified, half, predicate="gt"), rectified_update, plain)
    return [b.op("lz.sub", p, update), exp_avg, exp_avg_sq]


_RADAM = EagerOp("radam_update", _emit_radam)


class RAdam(Optimizer):
    counts_steps = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0,
                 decoupled_weight_decay: bool = False, *, foreach=None, maximize: bool = False,
                 capturable: bool = False, differentiable: bool = False):
        check_hyperparameters(betas, lr=lr, eps=eps, weight_decay=weight_decay)
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      decoupled_weight_decay=decoupled_weight_decay, differentiable=differentiable))

    def update_rule(self, group: dict, states: list[dict]) -> UpdateRule:
        """The rectification's switch (``rho_t > 5``) is a rank-0 scalar like the others: no
        recompile when it flips."""
        step = self.coming_step(states)
        (beta1, beta2), lr, wd = group["betas"], group["lr"], group["weight_decay"]
        bias_correction1, bias_correction2 = 1 - beta1 ** step, 1 - beta2 ** step
        rho_inf = 2 / (1 - beta2) - 1
        rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
        rectified = rho_t > 5.0
        decay = weight_decay_mode(wd, bool(group["decoupled_weight_decay"]))
        attrs = (("weight_decay", decay), ("maximize", bool(group["maximize"])), ("lerp_high", 1 - beta1 >= 0.5))
        rect = ((rho_t - 4) * (rho_t - 2) * rho_inf / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5 \
            if rectified else 0.0
        scalars = [1 - beta1, beta2, 1 - beta2, bias_correction1, lr, bias_correction2 ** 0.5, group["eps"], rect,
                   1.0 if rectified else 0.0]
        return UpdateRule(_RADAM, attrs, ("exp_avg", "exp_avg_sq"), scalars + decay_scalar(decay, lr, wd))
