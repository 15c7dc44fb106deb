"""``compile_train_step`` of a ``DistributedDataParallel`` model: the compiled backward overlaps
the gradients' all-reduce.

The step is built for the wrapped module as usual, in its gradient phase (the function that
returns the loss, every gradient and the new buffers: what ``accumulate`` runs on its first
micro-batches), and run kernel by kernel (``runtime.cpu.run_plan_notifying``): right after the
kernel writing a parameter's gradient, DDP's reducer takes it (``gradient_ready``), and a bucket
whose gradients are all in is all-reduced on the communication thread while the later kernels of
the backward pass run.  The last gradient waits for every bucket; the optimizer's own update then
runs on the averaged gradients (its fused eager kernel, the rule ``compile_train_step`` compiles
into a single-process step).  ``last_trace`` holds each kernel's and each bucket's
``time.perf_counter`` interval of the latest call: the overlap, shown.

What a DDP step does not take yet: gradient clipping, ``accumulate`` and a ``GradScaler``
(each acts on the averaged gradients, after the reduction; run them eagerly), and cuda models
(their kernels run through the cuda executor, which has no callback between kernels).
"""
from __future__ import annotations

import numpy as np

import lezero.distributed as dist
from lezero.eager.core import as_inputs, wrap
from lezero.eager.device_arrays import CPU
from lezero.eager.dispatch import user_location
from lezero.ir.interpreter import check_argument
from lezero.jit.trace import TraceError, bound_arrays
from lezero.runtime.cpu import run_plan_notifying
from lezero.runtime.heartbeat import beat as _heartbeat  # issue 15: lezero-run --heartbeat-timeout


class DistributedTrainStep:
    """``loss = step(*inputs, target)`` for a DDP model (see the module docstring)."""

    def __init__(self, step, ddp):
        if step.clipping is not None or step.accumulate > 1 or step.scaler is not None:
            raise TraceError("compile_train_step of a DistributedDataParallel model: clip_grad_norm/clip_grad_value, "
                             "accumulate and scaler are not supported (they act on the averaged gradients); "
                             "run them eagerly after backward()", user_location())
        self.step, self.ddp = step, ddp
        self.params = [p for _, p, _ in step.updated]
        self.last_trace: dict = {"kernels": [], "all_reduce": []}

    def __call__(self, *data):
        _heartbeat()
        s = self.step
        if len(data) != s.n_inputs + 1:
            raise TypeError(f"the train step takes {s.n_inputs} input(s) and a target, got {len(data)} arguments")
        data = as_inputs(data, "train_step")
        device = s._device(data)
        if device != CPU:
            raise TraceError(f"compile_train_step of a DistributedDataParallel model runs on the CPU; the model is "
                             f"on {device}", user_location())
        self.ddp.before_forward()
        for r in s.random:
            r.bind()
        arrays = [x._data if hasattr(x, "_data") else np.asarray(x) for x in data]
        compiled, _ = s._compiled_for([tuple(a.shape) for a in arrays], [], device, False, False)
        func = compiled.func
        arrays = [np.ascontiguousarray(check_argument(func, i, a)) for i, a in enumerate(arrays)]
        inputs = arrays + bound_arrays(s.bound, func.arguments[len(arrays):], device)
        self.ddp.prepare_reduction({id(p) for p in self.params})
        kernels: list = []
        group = dist.group()
        group.timeline.clear()
        group.record_timeline = True

        def on_gradient(i: int, array: np.ndarray) -> None:
            p = self.params[i - 1]
            p.grad = wrap(self.ddp.gradient_ready(p, array))
        plan = compiled.plan_for([a.shape for a in inputs])
        results = run_plan_notifying(plan, inputs, compiled.pool, set(range(1, 1 + len(self.params))), on_gradient,
                                     lambda name, start, end: kernels.append((name, start, end)))
        for t, new in zip(s.buffers, results[1 + len(self.params):]):
            t._data = new
            t._version += 1
        group.record_timeline = False
        self.last_trace = {"kernels": kernels, "all_reduce": list(group.timeline)}
        group.timeline.clear()
        s.optimizer.step()
        return wrap(results[0])

    def __repr__(self) -> str:
        return f"<DistributedTrainStep: {len(self.params)} parameters>"
