"""SGD with momentum, dampening, Nesterov momentum and weight decay, as PyTorch's (single-tensor)
update, fused into one kernel per parameter shape."""
from __future__ import annotations

from lezero.eager.dispatch import EagerOp
from lezero.optim.optimizer import Optimizer, UpdateRule, required
from lezero.optim.update_math import directed_gradient, weight_decay_mode


def _emit_sgd(b, attrs, p, g, *rest):
    """``g += wd p``; with momentum ``buf = momentum buf + keep g`` (``keep`` is 1 on the first step,
    from a zero buffer, else ``1 - dampening``), then ``g = g + momentum buf`` (Nesterov) or ``buf``;
    ``p -= lr g``."""
    rest = list(rest)
    buf = rest.pop(0) if attrs["momentum"] else None
    lr = rest.pop(0)
    _, g = directed_gradient(b, attrs, p, g, *([rest.pop(0)] if attrs["weight_decay"] == "l2" else []))
    results = []
    if attrs["momentum"]:
        momentum, keep = rest.pop(0), rest.pop(0)
        buf = b.op("lz.add", b.op("lz.mul", buf, momentum), b.op("lz.mul", g, keep))
        g = b.op("lz.add", g, b.op("lz.mul", buf, momentum)) if attrs["nesterov"] else buf
        results.append(buf)
    return [b.op("lz.sub", p, b.op("lz.mul", g, lr))] + results


_SGD = EagerOp("sgd_update", _emit_sgd)


class SGD(Optimizer):
    def __init__(self, params, lr=1e-3, momentum: float = 0, dampening: float = 0, weight_decay: float = 0,
                 nesterov: bool = False, *, maximize: bool = False, foreach=None, differentiable: bool = False,
                 fused=None):
        if lr is not required and lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, dict(lr=lr, momentum=momentum, dampening=dampening, weight_decay=weight_decay,
                                      nesterov=nesterov, maximize=maximize, foreach=foreach,
                                      differentiable=differentiable, fused=fused))

    def update_rule(self, group: dict, states: list[dict]) -> UpdateRule:
        """Always the steady form, reading the momentum buffer: on a parameter's first step the
        buffer is zeros and the gradient's weight ``1 - dampening`` is 1, which gives PyTorch's
        ``buf = g`` exactly, and the first step needs no kernel of its own."""
        momentum, wd = group["momentum"], group["weight_decay"]
        first = momentum != 0 and any("momentum_buffer" not in s for s in states)
        attrs = (("momentum", momentum != 0), ("weight_decay", weight_decay_mode(wd, decoupled=False)),
                 ("nesterov", bool(group["nesterov"])), ("maximize", bool(group["maximize"])))
        scalars = [group["lr"]] + ([wd] if wd != 0 else []) + \
            ([momentum, 1.0 if first else 1 - group["dampening"]] if momentum != 0 else [])
        return UpdateRule(_SGD, attrs, ("momentum_buffer",) if momentum != 0 else (), scalars)
