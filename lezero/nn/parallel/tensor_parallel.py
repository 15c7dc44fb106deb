"""Megatron-LM's tensor-parallel linear layers: one ``Linear``'s weight split over the ranks.

- ``ColumnParallelLinear``: rank r holds rows ``[r*k, (r+1)*k)`` of the weight (output features):
  ``y_r = x W_r^T + b_r``; with ``gather_output`` the ranks' outputs are all-gathered into the full
  ``y`` (the gradient of ``y_r`` is its own columns of ``y``'s).  Its input is replicated, so the
  gradient of ``x`` is the sum of every rank's part: all-reduced in backward (Megatron's ``f``).
- ``RowParallelLinear``: rank r holds columns ``[r*k, (r+1)*k)`` (input features) and reads its
  slice of ``x`` (or the column-parallel layer's output as it is, ``input_is_parallel``):
  ``y = sum_r x_r W_r^T`` all-reduced in forward (Megatron's ``g``), whose gradient is the identity,
  plus the replicated bias.

Column then row (``input_is_parallel=True``) is Megatron's MLP: one all-reduce forward, one
backward.  Both start from one full ``Linear`` made the same way on every rank (same seed; or
``from_linear``), so they equal the single-process layer.  The forward all-reduce writes the
partial product in place: the product's node needs only its inputs for its gradient, so
autograd passes the gradient through unchanged, and every rank holds the same bytes.
"""
from __future__ import annotations

import lezero.distributed as dist
from lezero.eager.core import Tensor
from lezero.eager.creation import zeros_like
from lezero.eager.functions import cat
from lezero.nn import functional as F
from lezero.nn.layers import Linear
from lezero.nn.module import Module, Parameter


def _all_reduced_gradient(x: Tensor) -> Tensor:
    """``x`` in forward; in backward, its gradient summed over the ranks (Megatron's ``f``)."""
    if not x.requires_grad:
        return x
    y = x.clone()

    def reduce(grad: Tensor) -> Tensor:
        total = grad.detach().clone()
        dist.all_reduce(total, name="tensor-parallel input gradient")
        return total
    y.register_hook(reduce)
    return y


def _shard(rank: int, world: int, size: int, what: str) -> slice:
    if size % world:
        raise ValueError(f"{what}={size} is not divisible by the world size {world}")
    k = size // world
    return slice(rank * k, (rank + 1) * k)


class _ShardedLinear(Module):
    """What both layers share: made from a full ``Linear`` (a new one, or ``from_linear``), whose
    weight ``_take`` cuts to this rank's shard."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, **option):
        super().__init__()
        self._init_from(Linear(in_features, out_features, bias), **option)

    @classmethod
    def from_linear(cls, linear: Linear, **option):
        layer = cls.__new__(cls)
        Module.__init__(layer)
        layer._init_from(linear, **option)
        return layer

    def _init_from(self, linear: Linear, **option) -> None:
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self._take(linear, **option)


class ColumnParallelLinear(_ShardedLinear):
    """``ColumnParallelLinear(in_features, out_features, bias=True, gather_output=True)``."""

    def _take(self, linear: Linear, gather_output: bool = True) -> None:
        self.gather_output = gather_output
        rows = _shard(self.rank, self.world_size, linear.out_features, "out_features")
        self.weight = Parameter(linear.weight.detach()[rows].clone())
        self.bias = None if linear.bias is None else Parameter(linear.bias.detach()[rows].clone())

    def forward(self, x: Tensor) -> Tensor:
        local = F.linear(_all_reduced_gradient(x), self.weight, self.bias)
        if not self.gather_output:
            return local
        parts = [zeros_like(local) for _ in range(self.world_size)]
        dist.all_gather(parts, local.detach(), name="column-parallel output")
        parts[self.rank] = local  # the gradient of the gathered output reaches this rank's columns
        return cat(parts, dim=-1)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features} (this rank: {self.weight.shape[0]}), "
                f"gather_output={self.gather_output}")


class RowParallelLinear(_ShardedLinear):
    """``RowParallelLinear(in_features, out_features, bias=True, input_is_parallel=False)``."""

    def _take(self, linear: Linear, input_is_parallel: bool = False) -> None:
        self.input_is_parallel = input_is_parallel
        self.columns = _shard(self.rank, self.world_size, linear.in_features, "in_features")
        self.weight = Parameter(linear.weight.detach()[:, self.columns].clone())
        self.bias = None if linear.bias is None else Parameter(linear.bias.detach().clone())

    def forward(self, x: Tensor) -> Tensor:
        if not self.input_is_parallel:
            x = _all_reduced_gradient(x)[..., self.columns]
        partial = F.linear(x, self.weight)
        dist.all_reduce(partial, name="row-parallel output")  # in place: the gradient passes through (see above)
        return partial if self.bias is None else partial + self.bias

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features} (this rank: {self.weight.shape[1]}), "
                f"out_features={self.out_features}, input_is_parallel={self.input_is_parallel}")
