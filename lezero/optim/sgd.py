"""SGD with momentum, dampening, Nesterov momentum and weight decay, as PyTorch's (single-tensor)
update, fused into one kernel per parameter shape."""
from __future__ import annotations

from lezero.eager.device_arrays import cast, empty_like, numpy_dtype
from lezero.eager.dispatch import EagerOp
from lezero.optim.optimizer import Optimizer, fused_update, required
from lezero.eager.core import wrap as _wrap


def _emit_sgd(b, attrs, p, g, *rest):
    """``g += wd p``; with momentum ``buf = g`` (first step) or ``momentum buf + (1 - dampening) g``,
    then ``g = g + momentum buf`` (Nesterov) or ``buf``; ``p -= lr g``."""
    rest = list(rest)
    buf = rest.pop(0) if attrs["momentum"] and not attrs["first"] else None
    lr = rest.pop(0)
    if attrs["maximize"]:
        g = b.op("lz.neg", g)
    if attrs["weight_decay"]:
        g = b.op("lz.add", g, b.op("lz.mul", p, rest.pop(0)))
    results = []
    if attrs["momentum"]:
        momentum, keep = rest.pop(0), rest.pop(0)
        buf = g if attrs["first"] else b.op("lz.add", b.op("lz.mul", buf, momentum), b.op("lz.mul", g, keep))
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

    def _update_group(self, group: dict) -> None:
        momentum, wd = group["momentum"], group["weight_decay"]
        for p in group["params"]:
            if p.grad is None:
                continue
            state = self.state[p]
            buf = state.get("momentum_buffer")
            first = momentum != 0 and buf is None
            attrs = (("momentum", momentum != 0), ("first", first), ("weight_decay", wd != 0),
                     ("nesterov", bool(group["nesterov"])), ("maximize", bool(group["maximize"])))
            inputs = [p._data, cast(p.grad._data, numpy_dtype(p._data))]
            if momentum != 0 and not first:
                inputs.append(buf._data)
            scalars = [group["lr"]] + ([wd] if wd != 0 else []) + \
                ([momentum, 1 - group["dampening"]] if momentum != 0 else [])
            outs = [p._data]
            if momentum != 0:
                if first:
                    buf = state["momentum_buffer"] = _wrap(empty_like(p._data))
                outs.append(buf._data)
            fused_update(_SGD, attrs, inputs, outs, scalars)
            p._version += 1
