"""Pipeline parallelism, GPipe's schedule: a model cut into stages on consecutive ranks, each batch
cut into micro-batches.

``Pipe(stage, chunks, loss_fn)`` on every rank (rank r runs stage r of ``world_size``);
``pipe.train_step(inputs, target)`` runs the forward pass of every micro-batch (activations sent
to the next stage with ``send``/``recv``: a small header with dtype and shape, then the data),
then their backward passes in reverse order (each stage's input gradient sent back), so every
stage's parameters hold the gradient of the mean loss over the whole batch, as one process on
the whole model would (the micro-batches' losses are each divided by ``chunks``; they must be of
equal size for that).  The first stage passes the inputs, the last one the target and gets the
loss; the others pass None.  The bubble is (K - 1) / (M + K - 1) of the step for K stages and M
micro-batches.

Only GPipe's schedule: 1F1B interleaves forward and backward sends in both directions, which the
blocking point-to-point calls of one communication thread per rank would deadlock on once a
message is too large for MPI's eager protocol; it needs nonblocking sends first.
"""
from __future__ import annotations

import numpy as np

from lezero.distributed.process_group import (
    DistributedError,
    get_rank,
    get_world_size,
    recv,
    send,
)
from lezero.eager.core import Tensor, wrap
from lezero.eager.device_arrays import contiguous

HEADER_DIMS = 8
DTYPES = [np.dtype(t) for t in (np.float32, np.float64, np.float16, np.int64, np.int32)]


def _send_tensor(t: Tensor, dst: int, tag: int) -> None:
    array = np.ascontiguousarray(contiguous(t._data))
    if array.ndim > HEADER_DIMS or array.dtype not in DTYPES:
        raise DistributedError(f"pipeline: a stage's output must be a tensor of at most {HEADER_DIMS} dims and one of "
                               f"{[d.name for d in DTYPES]}, got {array.dtype} {list(array.shape)}")
    header = np.zeros(2 + HEADER_DIMS, np.int64)
    header[0], header[1] = DTYPES.index(array.dtype), array.ndim
    header[2:2 + array.ndim] = array.shape
    send(wrap(header), dst, tag)
    send(wrap(array), dst, tag)


def _recv_tensor(src: int, tag: int) -> Tensor:
    header = wrap(np.zeros(2 + HEADER_DIMS, np.int64))
    recv(header, src, tag)
    h = header._data
    out = wrap(np.empty(tuple(int(d) for d in h[2:2 + int(h[1])]), DTYPES[int(h[0])]))
    recv(out, src, tag)
    return out


class Pipe:
    """This rank's stage of a pipeline (see the module docstring)."""

    def __init__(self, stage, chunks: int, loss_fn=None):
        self.stage, self.chunks, self.loss_fn = stage, chunks, loss_fn
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
        if not self.is_last:
            return None
        total = produced[0].detach()
        for loss in produced[1:]:
            total = total + loss.detach()
        return total

    @staticmethod
    def bubble_fraction(stages: int, chunks: int) -> float:
        """GPipe's idle share of a step: (K - 1) / (M + K - 1)."""
        return (stages - 1) / (chunks + stages - 1)
