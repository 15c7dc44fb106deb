"""``F.group_norm``, ``F.instance_norm``, ``F.rms_norm`` and ``nn.GroupNorm``,
``nn.InstanceNorm1d/2d/3d``, ``nn.RMSNorm``, composed from reductions as PyTorch computes them
(mean, biased variance, ``rsqrt(var + eps)``), each one ``EagerOp``: one dispatch, fused.

Group and instance norm are the same normalization over different axes: a group's channels and
positions (the input reshaped to ``N x G x rest``), or one channel's positions.  Instance norm
with running statistics updates them in place with the batch's mean of the per-instance means
and unbiased variances, as PyTorch's (which runs batch norm on ``1 x NC x ...``).
"""
from __future__ import annotations

import numpy as np

from lezero.eager import dtypes as _dt
from lezero.eager.autograd import no_grad
from lezero.eager.core import apply
from lezero.eager.creation import ones, tensor, zeros
from lezero.eager.dispatch import EagerOp
from lezero.eager.tensor import Tensor
from lezero.ir.gradient import GradBuilder
import lezero.nn.init as init
from lezero.nn.module import Module, Parameter


def _normalized(g, x, axes: list, eps: float):
    """``(x - mean) / sqrt(var + eps)`` over ``axes`` (biased variance), and the mean and
    variance (kept dims)."""
    mean = g.op("lz.reduce_mean", x, axes=axes, keepdims=True)
    centered = g.sub(x, mean)
    var = g.op("lz.reduce_mean", g.mul(centered, centered), axes=axes, keepdims=True)
    return g.mul(centered, g.op("lz.rsqrt", g.add(var, eps))), mean, var


def _per_channel(g, attrs, y, params: tuple):
    """``y * weight + bias`` with ``weight``/``bias`` (C) along dim 1, those that are given
    (``attrs["weight"]``, ``attrs["bias"]``)."""
    column = [1, -1] + [1] * (y.type.rank - 2)
    params = list(params)
    if attrs["weight"]:
        y = g.mul(y, g.reshape(params.pop(0), column))
    if attrs["bias"]:
        y = g.add(y, g.reshape(params.pop(0), column))
    return y


def _emit_group_norm(b, attrs, x, *params):
    g = GradBuilder(b.block, b.index, b.location)
    shape = [-1] + list(x.type.shape[1:])
    grouped = g.reshape(x, [-1, attrs["groups"], int(np.prod(x.type.shape[1:])) // attrs["groups"]])
    y, _, _ = _normalized(g, grouped, [2], attrs["eps"])
    return [_per_channel(g, attrs, g.reshape(y, shape), params)]


def _emit_instance_norm(b, attrs, x, *params):
    """The normalized input, and each instance's mean and unbiased variance (N x C)."""
    g = GradBuilder(b.block, b.index, b.location)
    axes = list(range(2, x.type.rank))
    y, mean, var = _normalized(g, x, axes, attrs["eps"])
    count = int(np.prod(x.type.shape[2:]))
    unbiased = g.mul(var, count / max(count - 1, 1))
    return [_per_channel(g, attrs, y, params), g.reshape(mean, x.type.shape[:2]), g.reshape(unbiased, x.type.shape[:2])]


def _emit_running_norm(b, attrs, x, mean, var, *params):
    g = GradBuilder(b.block, b.index, b.location)
    column = [1, -1] + [1] * (x.type.rank - 2)
    y = g.mul(g.sub(x, g.reshape(mean, column)), g.op("lz.rsqrt", g.add(g.reshape(var, column), attrs["eps"])))
    return [_per_channel(g, attrs, y, params)]


def _emit_rms_norm(b, attrs, x, *weight):
    g = GradBuilder(b.block, b.index, b.location)
    axes = list(range(x.type.rank - attrs["dims"], x.type.rank))
    mean_square = g.op("lz.reduce_mean", g.mul(x, x), axes=axes, keepdims=True)
    y = g.mul(x, g.op("lz.rsqrt", g.add(mean_square, attrs["eps"])))
    return [g.mul(y, weight[0]) if weight else y]


_GROUP_NORM = EagerOp("group_norm", _emit_group_norm)
_INSTANCE_NORM = EagerOp("instance_norm", _emit_instance_norm, num_results=3)
_RUNNING_NORM = EagerOp("instance_norm", _emit_running_norm)
_RMS_NORM = EagerOp("rms_norm", _emit_rms_norm)


def _affine(weight, bias) -> tuple:
    """The attributes saying which of ``weight`` and ``bias`` are given, and those given."""
    return (("weight", weight is not None), ("bias", bias is not None)), [p for p in (weight, bias) if p is not None]


def group_norm(x: Tensor, num_groups: int, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """Normalize each sample's ``num_groups`` groups of channels (dim 1) with their positions."""
    if x.ndim < 2:
        raise RuntimeError(f"group_norm: expected an input with at least 2 dims (N x C x ...), got {list(x.shape)}")
    if x.shape[1] % num_groups:
        raise RuntimeError(f"Expected number of channels in input to be divisible by num_groups, but got input of "
                           f"shape {list(x.shape)} and num_groups={num_groups}")
    which, params = _affine(weight, bias)
    return apply(_GROUP_NORM, (("groups", int(num_groups)), ("eps", float(eps))) + which, x, *params)


def instance_norm(x: Tensor, running_mean: Tensor | None = None, running_var: Tensor | None = None,
                  weight: Tensor | None = None, bias: Tensor | None = None, use_input_stats: bool = True,
                  momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalize each channel of each sample over its positions (``use_input_stats``, updating
    the running statistics when given), or by the running statistics."""
    if x.ndim < 3:
        raise RuntimeError(f"instance_norm: expected an input with at least 3 dims (N x C x ...), got "
                           f"{list(x.shape)}")
    which, params = _affine(weight, bias)
    attrs = (("eps", float(eps)),) + which
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise ValueError("Expected running_mean and running_var to be defined when use_input_stats is false")
        return apply(_RUNNING_NORM, attrs, x, running_mean, running_var, *params)
    y, mean, unbiased = apply(_INSTANCE_NORM, attrs, x, *params)
    if running_mean is not None:
        with no_grad():  # nothing records a gradient; a jit trace records the updates
            running_mean.mul_(1 - momentum).add_(mean.mean(0) * momentum)
            running_var.mul_(1 - momentum).add_(unbiased.mean(0) * momentum)
    return y


def rms_norm(x: Tensor, normalized_shape, weight: Tensor | None = None, eps: float | None = None) -> Tensor:
    """``x / sqrt(mean(x^2) + eps) * weight`` over the last ``len(normalized_shape)`` dims;
    ``eps`` None is the dtype's machine epsilon, as PyTorch."""
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(x.shape[x.ndim - len(shape):]) != shape:
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape [*, "
                           f"{', '.join(map(str, shape))}], but got input of size{list(x.shape)}")
    if eps is None:
        eps = float(_dt.finfo(x.dtype).eps)
    attrs = (("dims", len(shape)), ("eps", float(eps)))
    return apply(_RMS_NORM, attrs, x) if weight is None else apply(_RMS_NORM, attrs, x, weight)


# --- modules ------------------------------------------------------------------------------------------------

def _float_dtype(dtype):
    return _dt.as_dtype(dtype) if dtype is not None else _dt.get_default_dtype()


def _affine_parameters(module: Module, channels: int, affine: bool, bias: bool, dtype) -> None:
    """``weight`` (ones) and, with ``bias``, ``bias`` (zeros) over the channels when ``affine``."""
    d = _float_dtype(dtype)
    if affine:
        module.weight = Parameter(ones(channels, dtype=d))
    else:
        module.register_parameter("weight", None)
    if affine and bias:
        module.bias = Parameter(zeros(channels, dtype=d))
    else:
        module.register_parameter("bias", None)


def _reset_affine(module: Module) -> None:
    if module.weight is not None:
        init.ones_(module.weight)
    if module.bias is not None:
        init.zeros_(module.bias)


class GroupNorm(Module):
    """``weight`` ones and ``bias`` zeros (C) when ``affine``."""

    def __init__(self, num_groups: int, num_channels: int, eps: float = 1e-5, affine: bool = True, device=None,
                 dtype=None, *, bias: bool = True):
        super().__init__()
        if num_channels % num_groups:
            raise ValueError("num_channels must be divisible by num_groups")
        self.num_groups, self.num_channels, self.eps, self.affine = num_groups, num_channels, eps, affine
        _affine_parameters(self, num_channels, affine, bias, dtype)

    def reset_parameters(self) -> None:
        _reset_affine(self)

    def forward(self, x: Tensor) -> Tensor:
        return group_norm(x, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class NormBase(Module):
    """What batch and instance norm share (PyTorch's ``_NormBase``): ``weight`` ones and ``bias``
    zeros (C) when ``affine``, and with ``track_running_stats`` the buffers ``running_mean``
    (zeros), ``running_var`` (ones) and ``num_batches_tracked``."""

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None, *, bias: bool = True):
        super().__init__()
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        _affine_parameters(self, num_features, affine, bias, dtype)
        d = _float_dtype(dtype)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=d))
            self.register_buffer("running_var", ones(num_features, dtype=d))
            self.register_buffer("num_batches_tracked", tensor(0, dtype=_dt.int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean.zero_()
            self.running_var.fill_(1)
            self.num_batches_tracked.zero_()

    def reset_parameters(self) -> None:
        self.reset_running_stats()
        _reset_affine(self)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"track_running_stats={self.track_running_stats}")


class _InstanceNorm(NormBase):
    """PyTorch's defaults: no affine parameters, no running statistics."""

    spatial_dims = 0

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = False,
                 track_running_stats: bool = False, device=None, dtype=None, *, bias: bool = True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype, bias=bias)

    def forward(self, x: Tensor) -> Tensor:
        n = self.spatial_dims
        if x.ndim not in (n + 1, n + 2):
            raise ValueError(f"expected {n + 1}D or {n + 2}D input (got {x.ndim}D input)")
        unbatched = x.ndim == n + 1
        if unbatched:
            x = x.unsqueeze(0)
        if self.affine and x.shape[1] != self.num_features:
            raise ValueError(f"expected input's size at dim=1 to match num_features ({self.num_features}), but got: "
                             f"{x.shape[1]}.")
        y = instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                          self.training or not self.track_running_stats,
                          self.momentum if self.momentum is not None else 0.0, self.eps)
        return y.squeeze(0) if unbatched else y

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
                f"bias={self.bias is not None}, track_running_stats={self.track_running_stats}")


class InstanceNorm1d(_InstanceNorm):
    spatial_dims = 1


class InstanceNorm2d(_InstanceNorm):
    spatial_dims = 2


class InstanceNorm3d(_InstanceNorm):
    spatial_dims = 3


class RMSNorm(Module):
    """``weight`` ones over ``normalized_shape`` when ``elementwise_affine``."""

    def __init__(self, normalized_shape, eps: float | None = None, elementwise_affine: bool = True, device=None,
                 dtype=None):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape, dtype=_float_dtype(dtype)))
        else:
            self.register_parameter("weight", None)

    def reset_parameters(self) -> None:
        if self.elementwise_affine:
            init.ones_(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
