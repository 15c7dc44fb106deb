"""Pipeline parallelism, GPipe's and 1F1B's schedules: a model cut into stages on consecutive
ranks, each batch cut into micro-batches.

``Pipe(stage, chunks, loss_fn)`` on every rank (rank r runs stage r of ``world_size``);
``pipe.train_step(inputs, target)`` runs the forward pass of every micro-batch (activations sent
to the next stage with ``send``/``recv``: a small header with dtype and shape, then the data),
then their backward passes in reverse order (each stage's input gradient sent back), so every
stage's parameters hold the gradient of the mean loss over the whole batch, as one process on
the whole model would (the micro-batches' losses are each divided by ``chunks``; they must be of
equal size for that).  The first stage passes the inputs, the last one the target and gets the
loss; the others pass None.  The bubble is (K - 1) / (M + K - 1) of the step for K stages and M
micro-batches.

``Pipe(..., schedule="1f1b")`` runs PipeDream-flush's one-forward-one-backward schedule (torch's
``Schedule1F1B``, Megatron's non-interleaved one): stage r runs ``K - r - 1`` warm-up forwards,
then alternates one forward and one backward, then drains the backwards, so it holds at most
``K - r`` micro-batches' activations instead of all ``M`` (the bubble is GPipe's).  In the steady
state a stage sends to a neighbour while that neighbour sends to it (an activation one way, a
gradient the other), so those pairs go through ``send_recv`` (both posted before either waits:
two blocking sends toward each other would deadlock once a message outgrows MPI's eager
protocol).  The gradients are GPipe's, summed in another order.
"""
from __future__ import annotations

import numpy as np

from lezero.distributed.process_group import (
    DistributedError,
    get_rank,
    get_world_size,
    recv,
    send,
    send_recv,
)
from lezero.eager.core import Tensor, wrap
from lezero.eager.device_arrays import contiguous

HEADER_DIMS = 8
SCHEDULES = ("gpipe", "1f1b")
DTYPES = [np.dtype(t) for t in (np.float32, np.float64, np.float16, np.int64, np.int32)]


def _send_tensor(t: Tensor, dst: int, tag: int) -> None:
    array = np.ascontiguousarray(contiguous(t._data))
    send(wrap(_header(array)), dst, tag)
    send(wrap(array), dst, tag)


def _header(array: np.ndarray) -> np.ndarray:
    if array.ndim > HEADER_DIMS or array.dtype not in DTYPES:
        raise DistributedError(f"pipeline: a stage's output must be a tensor of at most {HEADER_DIMS} dims and one of "
                               f"{[d.name for d in DTYPES]}, got {array.dtype} {list(array.shape)}")
    header = np.zeros(2 + HEADER_DIMS, np.int64)
    header[0], header[1] = DTYPES.index(array.dtype), array.ndim
    header[2:2 + array.ndim] = array.shape
    return header


def _empty_like_header(h: np.ndarray) -> Tensor:
    return wrap(np.empty(tuple(int(d) for d in h[2:2 + int(h[1])]), DTYPES[int(h[0])]))


def _exchange_tensor(t: Tensor, peer: int, send_tag: int, recv_tag: int) -> Tensor:
    """Send ``t`` to ``peer`` and receive the tensor ``peer`` sends back, at once."""
    array = np.ascontiguousarray(contiguous(t._data))
    header = wrap(np.zeros(2 + HEADER_DIMS, np.int64))
    send_recv(wrap(_header(array)), peer, header, peer, send_tag, recv_tag)
    out = _empty_like_header(header._data)
    send_recv(wrap(array), peer, out, peer, send_tag, recv_tag)
    return out


def _recv_tensor(src: int, tag: int) -> Tensor:
    header = wrap(np.zeros(2 + HEADER_DIMS, np.int64))
    recv(header, src, tag)
    out = _empty_like_header(header._data)
    recv(out, src, tag)
    return out


class Pipe:
    """This rank's stage of a pipeline (see the module docstring)."""

    def __init__(self, stage, chunks: int, loss_fn=None, schedule: str = "gpipe"):
        if schedule not in SCHEDULES:
            raise DistributedError(f"pipeline: schedule must be one of {SCHEDULES}, got {schedule!r}")
        self.stage, self.chunks, self.loss_fn, self.schedule = stage, chunks, loss_fn, schedule
        self.rank, self.stages = get_rank(), get_world_size()
        self.is_first, self.is_last = self.rank == 0, self.rank == self.stages - 1
        if self.is_last and loss_fn is None:
            raise DistributedError(f"pipeline: the last stage (rank {self.rank}) needs a loss_fn")

    def train_step(self, inputs: Tensor | None = None, target: Tensor | None = None) -> Tensor | None:
        """Forward and backward of one batch; the loss (mean over the batch) on the last stage."""
        if self.is_first and inputs is None or self.is_last and target is None:
            raise DistributedError(f"pipeline: rank {self.rank} needs " +
                                   ("the inputs" if self.is_first and inputs is None else "the target"))
        micro_inputs = inputs.chunk(self.chunks) if self.is_first else [None] * self.chunks
        micro_targets = target.chunk(self.chunks) if self.is_last else [None] * self.chunks
        if len(micro_inputs) != self.chunks or len(micro_targets) != self.chunks:
            raise DistributedError(f"pipeline: a batch of {len(inputs if self.is_first else target)} cannot be cut "
                                   f"into {self.chunks} micro-batches")
        if self.schedule == "1f1b":
            return self._one_forward_one_backward(micro_inputs, micro_targets)
        received, produced = [], []
        for m in range(self.chunks):  # every forward pass first (GPipe)
            x = micro_inputs[m] if self.is_first else _recv_tensor(self.rank - 1, m).requires_grad_(True)
            out = self.stage(x)
            if self.is_last:
                out = self.loss_fn(out, micro_targets[m]) / self.chunks
            else:
                _send_tensor(out.detach(), self.rank + 1, m)
            received.append(x)
            produced.append(out)
        for m in reversed(range(self.chunks)):  # then the backward passes, latest micro-batch first
            if self.is_last:
                produced[m].backward()
            else:
                produced[m].backward(_recv_tensor(self.rank + 1, self.chunks + m))
            if not self.is_first:
                _send_tensor(received[m].grad, self.rank - 1, self.chunks + m)
        return self._total(produced)

    def _total(self, losses: list) -> Tensor | None:
        if not self.is_last:
            return None
        total = losses[0].detach()
        for loss in losses[1:]:
            total = total + loss.detach()
        return total

    def _one_forward_one_backward(self, micro_inputs: list, micro_targets: list) -> Tensor | None:
        """1F1B (see the module docstring); tags: micro-batch m's activation m, its gradient M + m."""
        chunks, prev, next_ = self.chunks, self.rank - 1, self.rank + 1
        warmup = min(self.stages - self.rank - 1, chunks)
        received, produced, losses = {}, {}, []

        def forward(m: int, x: Tensor) -> Tensor:
            received[m] = x
            out = self.stage(x)
            if self.is_last:
                out = self.loss_fn(out, micro_targets[m]) / chunks
                losses.append(out)
            produced[m] = out
            return out

        def backward(m: int, gradient: Tensor | None) -> Tensor | None:
            out = produced.pop(m)
            out.backward() if self.is_last else out.backward(gradient)
            return None if self.is_first else received.pop(m).grad

        def first_input(m: int) -> Tensor:
            return micro_inputs[m] if self.is_first else _recv_tensor(prev, m).requires_grad_(True)

        for m in range(warmup):
            out = forward(m, first_input(m))
            _send_tensor(out.detach(), next_, m)
        x = first_input(warmup) if warmup < chunks else None
        for b in range(chunks - warmup):  # steady state: forward of warmup + b, backward of b
            f = warmup + b
            out = forward(f, x)
            gradient = None if self.is_last else _exchange_tensor(out.detach(), next_, f, chunks + b)
            input_gradient = backward(b, gradient)
            if f + 1 == chunks:
                if not self.is_first:
                    _send_tensor(input_gradient, prev, chunks + b)
            elif self.is_first:
                x = micro_inputs[f + 1]
            else:
                x = _exchange_tensor(input_gradient, prev, chunks + b, f + 1).requires_grad_(True)
        for b in range(chunks - warmup, chunks):  # drain the backwards
            input_gradient = backward(b, _recv_tensor(next_, chunks + b))
            if not self.is_first:
                _send_tensor(input_gradient, prev, chunks + b)
        return self._total(losses)

    @staticmethod
    def bubble_fraction(stages: int, chunks: int) -> float:
        """GPipe's idle share of a step: (K - 1) / (M + K - 1)."""
        return (stages - 1) / (chunks + stages - 1)
