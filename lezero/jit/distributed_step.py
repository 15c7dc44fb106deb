"""``compile_train_step`` of a ``DistributedDataParallel`` model: the whole step compiled, its
gradients' all-reduce inside it, overlapping the backward pass.

The step is the wrapped module's ``TrainStep`` built with ``all_reduce_gradients``: its function
averages every gradient over the ranks (an ``lz.all_reduce {op = "avg"}`` each, right before the
clipping, the ``GradScaler``'s unscale and the optimizer's update, where PyTorch's DDP has them
done) and the ``bucket-all-reduce`` pass turns those into DDP's buckets (the DDP model's
``bucket_cap_mb``, reverse parameter order), each a start right after the kernel producing its
last gradient and a wait right before the update.  The runtime runs a start as a host step that
enqueues the bucket on the process group's communication thread (``lezero/runtime/cpu.py``), so
the bucket is reduced while the later backward kernels run.  With ``accumulate=k`` the first
``k - 1`` micro-batches only sum their gradients, with no communication (what ``no_sync`` does
eagerly), and the last reduces the sums.

``record_trace = True`` makes each call keep ``last_trace``: the ``time.perf_counter`` interval of
each kernel, of each start and wait (``host_steps``) and of each all-reduce on the communication
thread (the overlap, shown).  Not supported: comm hooks (their Python runs
on the gradients between kernels: train eagerly with them) and cuda models.
"""
from __future__ import annotations

import lezero.distributed as dist
from lezero.eager.device_arrays import CPU
from lezero.eager.dispatch import user_location
from lezero.jit.trace import TraceError
from lezero.runtime.cpu import Profiling, profile_plan


class _KernelTrace:
    """A ``Profiling.recorder`` that keeps each launch's interval of the step's plan."""

    def __init__(self):
        self.kernels: list = []
        self.host_steps: list = []  # the collectives' starts and waits

    def run_plan(self, plan, inputs, pool):
        results, rows = profile_plan(plan, inputs, pool)
        for row in rows:
            (self.host_steps if row.kind == "control_flow" else self.kernels).append(
                (row.name, row.start, row.start + row.seconds))
        return results

    def compiled(self, *_):
        pass


class DistributedTrainStep:
    """``loss = step(*inputs, target)`` for a DDP model (see the module docstring)."""

    def __init__(self, step, ddp):
        if ddp.has_comm_hook:
            raise TraceError("compile_train_step of a DistributedDataParallel model: a comm hook runs Python on the "
                             "gradients between kernels; train eagerly with it (loss.backward(); optimizer.step())",
                             user_location())
        self.step, self.ddp = step, ddp
        self.record_trace = False
        self.last_trace: dict = {"kernels": [], "host_steps": [], "all_reduce": []}

    @property
    def graph(self) -> str:
        """The compiled step's IR: its buckets' starts and waits among the kernels."""
        return self.step.graph

    def __call__(self, *data):
        device = self.step._device(data)
        if device != CPU:
            raise TraceError(f"compile_train_step of a DistributedDataParallel model runs on the CPU; the model is "
                             f"on {device}", user_location())
        self.ddp.before_forward()
        if not self.record_trace:
            return self.step(*data)
        group, trace, previous = dist.group(), _KernelTrace(), Profiling.recorder
        group.timeline.clear()
        group.record_timeline, Profiling.recorder = True, trace
        try:
            loss = self.step(*data)
        finally:
            group.record_timeline, Profiling.recorder = False, previous
        self.last_trace = {"kernels": trace.kernels, "host_steps": trace.host_steps, "all_reduce": list(group.timeline)}
        group.timeline.clear()
        return loss

    def __repr__(self) -> str:
        return f"<DistributedTrainStep: {len(self.step.updated)} parameters>"
