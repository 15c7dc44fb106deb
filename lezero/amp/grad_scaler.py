"""``lz.amp.GradScaler``: dynamic loss scaling with ``torch.amp.GradScaler``'s state machine.

f16 gradients of a small loss underflow to zero; the scaler multiplies the loss by ``scale``
(``2**16`` to start) so they do not, divides the gradients by it again before the optimizer sees
them (``unscale_``), skips the step when any gradient is inf or nan (the scale was too large), and
adapts the scale (``update``): halved after a skipped step, doubled after ``growth_interval``
finite steps in a row.  Per optimizer it is READY -> UNSCALED (``unscale_``) -> STEPPED (``step``),
and ``update`` starts the next iteration; calls out of that order raise PyTorch's errors.

The two pieces of math are IR-building rules, ``emit_unscale`` and ``emit_update_scale``, which the
eager methods here compile as one kernel each and ``lz.jit.compile_train_step(..., scaler=)``
builds into its one compiled step (one rule, one place).  The scale is an f32 number and the
growth tracker an i32, as torch keeps them, so a sequence of gradients gives the same scales
here and there.
"""
from __future__ import annotations

import enum
import warnings

import numpy as np

from lezero.eager import cuda
from lezero.eager.core import Tensor, apply
from lezero.eager.creation import tensor
from lezero.eager.dispatch import EagerOp, constant_of
from lezero.ir.types import F32, I32

__all__ = ["GradScaler", "emit_unscale", "emit_update_scale"]


class OptState(enum.Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


def emit_unscale(b, inv_scale, grads: list) -> tuple:
    """``(found_inf, grads * inv_scale)``: ``found_inf`` is an f32 0/1, 1 when any element of any
    gradient is inf or nan (``torch._amp_foreach_non_finite_check_and_unscale_``)."""
    found = None
    unscaled = []
    for g in grads:
        et = g.type.element_type
        flat = b.op("lz.reshape", g, shape=[int(np.prod(g.type.shape, dtype=np.int64))])
        finite = b.op("lz.cmp", b.op("lz.abs", flat), constant_of(b, np.inf, et), predicate="lt")  # false for nan
        bad = b.op("lz.reduce_max", b.op("lz.cast", b.op("lz.not", finite), to=F32), axes=[0])
        found = bad if found is None else b.op("lz.max", found, bad)
        unscaled.append(b.op("lz.mul", g, inv_scale if et == F32 else b.op("lz.cast", inv_scale, to=et)))
    return found, unscaled


def emit_update_scale(b, scale, tracker, found_inf, growth_factor, backoff_factor, growth_interval) -> tuple:
    """``(new scale, new growth tracker)`` as ``torch._amp_update_scale_``: after an inf/nan step the
    scale backs off and the tracker restarts; otherwise the tracker counts, and reaching
    ``growth_interval`` grows the scale (unless that overflows) and restarts it."""
    found = b.op("lz.cmp", found_inf, constant_of(b, 0, F32), predicate="ne")
    counted = b.op("lz.add", tracker, constant_of(b, 1, I32))
    grows = b.op("lz.cmp", counted, growth_interval, predicate="eq")
    grown = b.op("lz.mul", scale, growth_factor)
    grown_finite = b.op("lz.cmp", b.op("lz.abs", grown), constant_of(b, np.inf, F32), predicate="lt")
    kept = b.op("lz.select", b.op("lz.and", grows, grown_finite), grown, scale)
    new_scale = b.op("lz.select", found, b.op("lz.mul", scale, backoff_factor), kept)
    zero = constant_of(b, 0, I32)
    new_tracker = b.op("lz.select", b.op("lz.or", found, grows), zero, counted)
    return new_scale, new_tracker


def _emit_update_scale(b, attrs, *values):
    return list(emit_update_scale(b, *values))


_UPDATE_SCALE = EagerOp("amp_update_scale", _emit_update_scale, num_results=2)
_UNSCALE: dict[int, EagerOp] = {}  # number of gradients -> the eager op unscaling them


def _unscale_op(count: int) -> EagerOp:
    op = _UNSCALE.get(count)
    if op is None:
        def emit(b, attrs, inv_scale, *grads):
            found, unscaled = emit_unscale(b, inv_scale, list(grads))
            return [found, *unscaled]
        op = _UNSCALE[count] = EagerOp("amp_unscale", emit, num_results=count + 1)
    return op


def _fresh_state() -> dict:
    return {"stage": OptState.READY, "found_inf_per_device": {}}


class GradScaler:
    """PyTorch's ``torch.amp.GradScaler(device, init_scale, growth_factor, backoff_factor,
    growth_interval, enabled)``; see the module docstring."""

    def __init__(self, device: str = "cuda", init_scale: float = 2.0 ** 16, growth_factor: float = 2.0,
                 backoff_factor: float = 0.5, growth_interval: int = 2000, enabled: bool = True):
        self._device = device
        self._enabled = enabled
        if device == "cuda" and enabled and not cuda.is_available():
            warnings.warn("torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.")
            self._enabled = False
        if self._enabled:
            if growth_factor <= 1.0:
                raise ValueError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise ValueError("The backoff factor must be < 1.0.")
        self._init_scale = init_scale
        self._growth_factor = growth_factor
        self._backoff_factor = backoff_factor
        self._growth_interval = growth_interval
        self._init_growth_tracker = 0
        self._scale: Tensor | None = None           # f32, rank 0 (made at the first scale())
        self._growth_tracker: Tensor | None = None  # i32, rank 0
        self._per_optimizer_states: dict[int, dict] = {}

    # --- the iteration ---------------------------------------------------------------------------------------------
    def _lazy_init_scale_growth_tracker(self) -> None:
        self._scale = tensor(np.float32(self._init_scale))
        self._growth_tracker = tensor(np.int32(self._init_growth_tracker))

    def _check_scale_growth_tracker(self, funcname: str) -> None:
        fix = "This may indicate your script did not use scaler.scale(loss or outputs) earlier in the iteration."
        if self._scale is None:
            raise AssertionError(f"Attempted {funcname} but _scale is None.  {fix}")

    def _state(self, optimizer) -> dict:
        return self._per_optimizer_states.setdefault(id(optimizer), _fresh_state())

    def scale(self, outputs):
        """``outputs`` (a tensor, or lists/tuples of them) times the scale."""
        if not self._enabled:
            return outputs
        if self._scale is None:
            self._lazy_init_scale_growth_tracker()
        if isinstance(outputs, Tensor):
            return outputs * self._scale
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(self.scale(o) for o in outputs)
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def unscale_(self, optimizer) -> None:
        """Divide ``optimizer``'s gradients by the scale (in place) and note whether any is inf/nan."""
        if not self._enabled:
            return
        self._check_scale_growth_tracker("unscale_")
        state = self._state(optimizer)
        if state["stage"] is OptState.UNSCALED:
            raise RuntimeError("unscale_() has already been called on this optimizer since the last update().")
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = tensor(np.float32(1.0 / np.float64(self._scale.item())))
        grads = [p.grad for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
        if any(g.dtype.name == "float16" for g in grads):
            raise ValueError("Attempting to unscale FP16 gradients.")
        found = 0.0
        if grads:
            found_inf, *unscaled = apply(_unscale_op(len(grads)), (), inv_scale, *grads)
            for g, u in zip(grads, unscaled):
                g._data = u._data
                g._version += 1
            found = float(found_inf.item())
        state["found_inf_per_device"] = {self._device: found}
        state["stage"] = OptState.UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """``optimizer.step()`` unless this iteration's gradients held an inf or nan (unscaling
        them first if ``unscale_`` was not called)."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        self._check_scale_growth_tracker("step")
        state = self._state(optimizer)
        if state["stage"] is OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is OptState.READY:
            self.unscale_(optimizer)
        if not state["found_inf_per_device"]:
            raise AssertionError("No inf checks were recorded for this optimizer.")
        result = None
        if not sum(state["found_inf_per_device"].values()):
            result = optimizer.step(*args, **kwargs)
        state["stage"] = OptState.STEPPED
        return result

    def update(self, new_scale=None) -> None:
        """Back off or grow the scale from this iteration's inf checks (or set it to ``new_scale``)."""
        if not self._enabled:
            return
        self._check_scale_growth_tracker("update")
        if new_scale is not None:
            value = new_scale.item() if isinstance(new_scale, Tensor) else new_scale
            self._scale = tensor(np.float32(value))
        else:
            found = [f for s in self._per_optimizer_states.values() for f in s["found_inf_per_device"].values()]
            if not found:
                raise AssertionError("No inf checks were recorded prior to update.")
            self._scale, self._growth_tracker = apply(
                _UPDATE_SCALE, (), self._scale, self._growth_tracker, tensor(np.float32(sum(found))),
                *self._factors())
        self._per_optimizer_states = {}

    def _factors(self) -> list:
        """growth factor, backoff factor (f32) and growth interval (i32): the update's operands."""
        return [tensor(np.float32(self._growth_factor)), tensor(np.float32(self._backoff_factor)),
                tensor(np.int32(self._growth_interval))]

    # --- what a compiled step with a scaler needs (lz.jit.compile_train_step) ---------------------------------------
    def compiled_state(self) -> list:
        """The scale, the growth tracker and the factors: the compiled step's scaler arguments."""
        if self._scale is None:
            self._lazy_init_scale_growth_tracker()
        return [self._scale, self._growth_tracker, *self._factors()]

    def compiled_step_done(self, new_scale: Tensor, new_tracker: Tensor, found_inf: float) -> None:
        """Take the compiled step's new scale and tracker (it ran scale, unscale_, step and update)."""
        self._scale, self._growth_tracker = new_scale, new_tracker
        self._per_optimizer_states = {}
        self.last_step_skipped = bool(found_inf)

    # --- settings and state -----------------------------------------------------------------------------------------
    def get_scale(self) -> float:
        if not self._enabled:
            return 1.0
        return float(self._init_scale) if self._scale is None else float(self._scale.item())

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = new_factor

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = new_factor

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = new_interval

    def _get_growth_tracker(self) -> int:
        if not self._enabled:
            return 0
        return self._init_growth_tracker if self._growth_tracker is None else int(self._growth_tracker.item())

    def is_enabled(self) -> bool:
        return self._enabled

    def state_dict(self) -> dict:
        if not self._enabled:
            return {}
        return {"scale": self.get_scale(), "growth_factor": self._growth_factor,
                "backoff_factor": self._backoff_factor, "growth_interval": self._growth_interval,
                "_growth_tracker": self._get_growth_tracker()}

    def load_state_dict(self, state_dict: dict) -> None:
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError("The source state dict is empty, possibly because it was saved from a disabled "
                               "instance of GradScaler.")
        self._init_scale = state_dict["scale"]
        self._growth_factor = state_dict["growth_factor"]
        self._backoff_factor = state_dict["backoff_factor"]
        self._growth_interval = state_dict["growth_interval"]
        self._init_growth_tracker = state_dict["_growth_tracker"]
        if self._scale is not None:
            self._scale = tensor(np.float32(self._init_scale))
        if self._growth_tracker is not None:
            self._growth_tracker = tensor(np.int32(self._init_growth_tracker))
