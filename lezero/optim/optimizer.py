"""The optimizer base: parameter groups, per-parameter state, state dicts (PyTorch's layout), and
the fused update every optimizer runs.

An optimizer's update math is one method, ``update_rule(group, states) -> UpdateRule``: the update
op (an ``EagerOp`` whose ``emit`` builds the new parameter and state from the old), its attributes,
the state it reads and writes, and the rank-0 hyperparameters of the coming step.  The eager
``step()`` runs that rule per parameter; ``lezero.jit.compile_train_step`` builds the same ``emit``
into the compiled step, so the two follow the same numbers.

An update is one IR function per (optimizer, options, shape, dtype): the parameter, its gradient
and its state in, the new parameter and state out, the hyperparameters as rank-0 inputs (so a
learning-rate schedule never recompiles).  Compiled through the usual pipeline it is one fused
elementwise kernel, which writes the results straight into the parameter's and the state's
memory.  Parameters on cuda update through the same function compiled for cuda (their state lives
next to them, as ``state_dict`` shows it).
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from lezero.eager.creation import tensor
from lezero.eager.device_arrays import cast, copy_into, like, numpy_dtype, scalar_like, zeros_like
from lezero.eager.dispatch import RUNNERS as _RUNNERS, EagerOp, runner_for
from lezero.eager.core import wrap as _wrap
from lezero.eager.tensor import Tensor
from lezero.runtime.heartbeat import beat as _heartbeat  # issue 15: lezero-run --heartbeat-timeout


class _Required:
    def __repr__(self) -> str:
        return "<required parameter>"


required = _Required()


@dataclass
class UpdateRule:
    """How the parameters of one group update at the coming step: the update ``op`` with ``attrs``,
    the per-parameter ``state_keys`` it reads and writes (arrays of the parameter's shape, in the
    order ``emit`` takes them) and the rank-0 hyperparameters of this step (``scalars``).
    ``op``'s emit is ``emit(b, attrs, p, g, *states, *scalars) -> [p, *states]``."""

    op: EagerOp
    attrs: tuple
    state_keys: tuple
    scalars: list


def fused_update(op: EagerOp, attrs: tuple, inputs: list, outs: list, scalars: list) -> None:
    """Run the update ``op`` on ``inputs`` (arrays of one device) and the rank-0 ``scalars``
    (Python numbers, in the first input's dtype), writing its results into ``outs`` (arrays, which
    may be inputs)."""
    first = inputs[0]
    if first.__class__ is np.ndarray:
        arrays = list(inputs) + [np.asarray(s, first.dtype) for s in scalars]
    else:
        arrays = list(inputs) + [scalar_like(s, first) for s in scalars]
    key = (op, attrs, *[x for a in arrays for x in (a.shape, a.dtype)])
    run = _RUNNERS.get(key)
    if run is None:
        run = runner_for(key, op, attrs, arrays)
    if run.kernel_count == 1:
        run(arrays, outs)  # one elementwise kernel: it reads each element before writing it
    else:
        for out, result in zip(outs, run(arrays)):
            copy_into(out, result)


_HYPERPARAMETER_LABELS = {"lr": "learning rate", "eps": "epsilon value"}


def check_hyperparameters(betas=None, **values) -> None:
    """PyTorch's checks: each of ``values`` at least 0, each of ``betas`` in [0, 1)."""
    for name, value in values.items():
        if not 0.0 <= value:
            raise ValueError(f"Invalid {_HYPERPARAMETER_LABELS.get(name, name + ' value')}: {value}")
    for i, beta in enumerate(betas or ()):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {beta}")


class Optimizer:
    """``params``: tensors, or dicts of parameter groups (``{"params": [...], "lr": ...}``).

    ``counts_steps``: the optimizer keeps PyTorch's ``state["step"]`` per parameter (a rank-0
    float32 tensor on the host, first in the state), which its rule reads through ``coming_step``."""

    counts_steps = False

    def __init__(self, params, defaults: dict):
        self.defaults = defaults
        self.state: dict = defaultdict(dict)
        self.param_groups: list[dict] = []
        if isinstance(params, Tensor):
            raise TypeError("params argument given to the optimizer should be an iterable of Tensors or dicts, "
                            "but got a Tensor")
        groups = list(params)
        if not groups:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    def add_param_group(self, group: dict) -> None:
        group = dict(group)
        params = group["params"]
        group["params"] = [params] if isinstance(params, Tensor) else list(params)
        for p in group["params"]:
            if not isinstance(p, Tensor):
                raise TypeError(f"optimizer can only optimize Tensors, but one of the params is {type(p).__name__}")
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
        for key, default in self.defaults.items():
            if default is required and key not in group:
                raise ValueError(f"parameter group didn't specify a value of required optimization parameter {key}")
            group.setdefault(key, default)
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if any(id(p) in seen for p in group["params"]):
            raise ValueError("some parameters appear in more than one parameter group")
        self.param_groups.append(group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad = p.grad.detach().zero_()

    def step(self, closure=None):
        _heartbeat()
        loss = None
        if closure is not None:
            from lezero.eager.autograd import enable_grad
            with enable_grad():
                loss = closure()
        from lezero.eager.autograd import no_grad
        with no_grad():
            for group in self.param_groups:
                self._update_group(group)
        return loss

    def update_rule(self, group: dict, states: list[dict]) -> UpdateRule:
        """The update of ``group``'s parameters whose states (as they are before this step) are
        ``states``; one rule serves them all.  Computes without changing any state."""
        raise NotImplementedError(f"{type(self).__name__} has no update_rule")

    def coming_step(self, states: list[dict]) -> float:
        """The number of the step the parameters whose states are ``states`` take next (1 for a
        first step); one rule serves parameters that have taken the same number of steps."""
        steps = {float(s["step"]._data) if "step" in s else 0.0 for s in states}
        if len(steps) != 1:
            raise RuntimeError("the parameters of one group have taken different numbers of optimizer steps")
        return steps.pop() + 1

    def advance(self, p: Tensor, rule: UpdateRule) -> None:
        """Before ``p``'s update: create the state ``rule`` reads that ``p`` lacks (zeros: a first
        step starts from them) and count the step."""
        state = self.state[p]
        if self.counts_steps and "step" not in state:
            state["step"] = tensor(0.0)
        for key in rule.state_keys:
            if key not in state:
                state[key] = _wrap(zeros_like(p._data))
        if self.counts_steps:
            state["step"]._data[...] += 1

    def _update_group(self, group: dict) -> None:
        for p in group["params"]:
            if p.grad is None:
                continue
            rule = self.update_rule(group, [self.state[p]])
            self.advance(p, rule)
            states = [self.state[p][key]._data for key in rule.state_keys]
            fused_update(rule.op, rule.attrs, [p._data, cast(p.grad._data, numpy_dtype(p._data)), *states],
                         [p._data, *states], rule.scalars)
            p._version += 1

    # --- state dicts: PyTorch's layout (parameters numbered in group order) -------------------------------
    def state_dict(self) -> dict:
        index, groups, n = {}, [], 0
        for group in self.param_groups:
            packed = {k: v for k, v in group.items() if k != "params"}
            ids = []
            for p in group["params"]:
                if id(p) not in index:
                    index[id(p)] = n
                    n += 1
                ids.append(index[id(p)])
            packed["params"] = ids
            groups.append(packed)
        state = {index[id(p)]: {k: (v.detach() if isinstance(v, Tensor) else v) for k, v in s.items()}
                 for g in self.param_groups for p in g["params"] for s in [self.state.get(p)] if s}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        groups = state_dict["param_groups"]
        if len(groups) != len(self.param_groups):
            raise ValueError("loaded state dict has a different number of parameter groups")
        params = [p for g in self.param_groups for p in g["params"]]
        for mine, saved in zip(self.param_groups, groups):
            if len(mine["params"]) != len(saved["params"]):
                raise ValueError("loaded state dict contains a parameter group that doesn't match the size of "
                                 "optimizer's group")
        by_id = {}
        for mine, saved in zip(self.param_groups, groups):
            for p, i in zip(mine["params"], saved["params"]):
                by_id[i] = p
            for key, value in saved.items():
                if key != "params":
                    mine[key] = value
        self.state = defaultdict(dict)
        for i, s in state_dict["state"].items():
            p = by_id[int(i)]
            restored = {}
            for key, value in s.items():
                if isinstance(value, Tensor) or isinstance(value, np.ndarray):
                    array = np.asarray(value)
                    if array.dtype.kind == "f" and array.ndim:  # a moment: the parameter's dtype and device
                        value = _wrap(like(np.array(array, dtype=numpy_dtype(p._data)), p._data))
                    else:
                        value = _wrap(np.array(array))
                restored[key] = value
            self.state[p] = restored
        _ = params

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            for key in sorted(k for k in group if k != "params"):
                lines.append(f"    {key}: {group[key]}")
        lines.append(")")
        return "\n".join(lines)
