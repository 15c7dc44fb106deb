"""Adagrad (learning-rate decay, an initial accumulator, weight decay, maximize), PyTorch's
single-tensor update in its operation order, fused into one kernel per parameter shape; the
decayed rate is computed per step in Python, as PyTorch does."""
from __future__ import annotations

import numpy as np

from lezero.eager.core import wrap as _wrap
from lezero.eager.creation import tensor
from lezero.eager.device_arrays import like, numpy_dtype
from lezero.eager.dispatch import EagerOp
from lezero.optim.optimizer import Optimizer, UpdateRule, check_hyperparameters
from lezero.optim.update_math import addcdiv, directed_gradient, weight_decay_mode


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
