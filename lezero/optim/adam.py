"""Adam and AdamW (with amsgrad and maximize), PyTorch's single-tensor update in its operation
order (``lerp`` for the first moment, ``addcmul`` for the second, ``addcdiv`` for the step), fused
into one kernel per parameter shape; the bias corrections are computed per step in Python, as
PyTorch does."""
from __future__ import annotations

import math

import numpy as np

from lezero.eager.creation import tensor
from lezero.eager.dispatch import EagerOp
from lezero.optim.optimizer import Optimizer, UpdateRule


def _emit_adam(b, attrs, p, g, m, v, *rest):
    rest = list(rest)
    v_max = rest.pop(0) if attrs["amsgrad"] else None
    w1, beta2, w2, eps, neg_step, bc2_sqrt, wd = rest
    if attrs["maximize"]:
        g = b.op("lz.neg", g)
    if attrs["weight_decay"] == "l2":       # Adam: g + wd p
        g = b.op("lz.add", g, b.op("lz.mul", p, wd))
    elif attrs["weight_decay"] == "decoupled":  # AdamW: p (1 - lr wd), before the step
        p = b.op("lz.mul", p, wd)
    # m.lerp_(g, w1): m + w1 (g - m) for w1 < 0.5, else g - (g - m)(1 - w1)
    if attrs["lerp_high"]:
        one = b.constant(np.ones((), p.type.element_type.numpy_dtype))
        m = b.op("lz.sub", g, b.op("lz.mul", b.op("lz.sub", g, m), b.op("lz.sub", one, w1)))
    else:
        m = b.op("lz.add", m, b.op("lz.mul", w1, b.op("lz.sub", g, m)))
    v = b.op("lz.add", b.op("lz.mul", v, beta2), b.op("lz.mul", b.op("lz.mul", w2, g), g))  # addcmul
    second = v
    results = [m, v]
    if v_max is not None:
        second = v_max = b.op("lz.max", v_max, v)
        results.append(v_max)
    denom = b.op("lz.add", b.op("lz.div", b.op("lz.sqrt", second), bc2_sqrt), eps)
    p = b.op("lz.add", p, b.op("lz.div", b.op("lz.mul", neg_step, m), denom))  # addcdiv
    return [p] + results


_ADAM = EagerOp("adam_update", _emit_adam)


class Adam(Optimizer):
    _decoupled = False

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 0,
                 amsgrad: bool = False, *, foreach=None, maximize: bool = False, capturable: bool = False,
                 differentiable: bool = False, fused=None):
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        super().__init__(params, dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                                      maximize=maximize, foreach=foreach, capturable=capturable,
                                      differentiable=differentiable, fused=fused))

    def update_rule(self, group: dict, states: list[dict]) -> UpdateRule:
        """The bias corrections for the coming step number, computed in Python as PyTorch does;
        one rule serves parameters that have taken the same number of steps."""
        steps = {float(s["step"]._data) if "step" in s else 0.0 for s in states}
        if len(steps) != 1:
            raise RuntimeError("the parameters of one group have taken different numbers of optimizer steps")
        step = steps.pop() + 1
        beta1, beta2 = group["betas"]
        lr, wd, amsgrad = group["lr"], group["weight_decay"], group["amsgrad"]
        decay = "none" if wd == 0 else "decoupled" if self._decoupled else "l2"
        bias_correction1 = 1 - beta1 ** step
        bias_correction2 = 1 - beta2 ** step
        step_size = lr / bias_correction1
        attrs = (("amsgrad", bool(amsgrad)), ("maximize", bool(group["maximize"])), ("weight_decay", decay),
                 ("lerp_high", 1 - beta1 >= 0.5))
        wd_scalar = 1 - lr * wd if decay == "decoupled" else wd
        scalars = [1 - beta1, beta2, 1 - beta2, group["eps"], -step_size, math.sqrt(bias_correction2), wd_scalar]
        keys = ("exp_avg", "exp_avg_sq") + (("max_exp_avg_sq",) if amsgrad else ())
        return UpdateRule(_ADAM, attrs, keys, scalars)

    def advance(self, p, rule: UpdateRule) -> None:
        """The moments start at zeros; the step count (PyTorch's ``state["step"]``) goes up by one."""
        state = self.state[p]
        if "step" not in state:
            state["step"] = tensor(0.0)
        super().advance(p, rule)
        state["step"]._data[...] += 1


class AdamW(Adam):
    """Adam with decoupled weight decay (default 1e-2): ``p *= 1 - lr * wd`` before the step."""

    _decoupled = True

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps: float = 1e-8, weight_decay: float = 1e-2,
                 amsgrad: bool = False, *, maximize: bool = False, foreach=None, capturable: bool = False,
                 differentiable: bool = False, fused=None):
        super().__init__(params, lr, betas, eps, weight_decay, amsgrad, foreach=foreach, maximize=maximize,
                         capturable=capturable, differentiable=differentiable, fused=fused)
