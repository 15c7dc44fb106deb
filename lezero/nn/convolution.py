"""Convolutions of 1, 2 and 3 spatial dims and their transposes: ``F.conv1d/2d/3d``,
``F.conv_transpose1d/2d`` and the ``nn.Conv*`` / ``nn.ConvTranspose*`` modules, with PyTorch's
arguments, weight layouts, initialization and ``padding_mode``.

Everything is ``lz.conv2d``, the one convolution the compiler has a real kernel for:

- ``conv1d`` is ``conv2d`` over a unit height (the reshapes are views, no copies);
- ``conv3d`` is one ``conv2d`` whose batch is ``N x OD`` and whose channels are the ``KD`` depth
  taps of each group side by side: the input's depth windows are sliced out and stacked (``KD``
  copies of the input, as im2col would make), the weights reordered to match;
- ``conv_transpose2d`` is ``conv2d``'s input gradient (``conv2d_input_grad``: zeros between the
  rows for the strides, then a correlation with the flipped weights), which is what a transposed
  convolution is; ``output_padding`` only moves where the result ends.

Gradients come from the ops they are made of, so there is no new rule to get wrong.
"""
from __future__ import annotations

import math

import numpy as np

from lezero.eager import dtypes as _dt
from lezero.eager.core import apply
from lezero.eager.creation import empty
from lezero.eager.dispatch import EagerOp
from lezero.eager.tensor import Tensor
from lezero.ir.dialect.contraction import conv2d_input_grad
from lezero.ir.gradient import GradBuilder
import lezero.nn.init as init
from lezero.nn.module import Module, Parameter
from lezero.nn.padding import pad as _pad


def ntuple(v, n: int, what: str = "value") -> tuple:
    """``v`` (an int, or a sequence of 1 or ``n`` ints) as ``n`` ints, as PyTorch's ``_ntuple``."""
    if isinstance(v, (int, np.integer)):
        return (int(v),) * n
    v = tuple(int(x) for x in v)
    if len(v) == 1:
        return v * n
    if len(v) != n:
        raise ValueError(f"{what} must be an int or {n} ints, got {v}")
    return v


def conv_padding(padding, kernel_size: tuple, dilation: tuple) -> tuple:
    """``[begin..., end...]`` per spatial dim from PyTorch's ``padding`` (an int, a tuple,
    ``'valid'``, ``'same'``: the odd pad at the end, as PyTorch)."""
    n = len(kernel_size)
    if padding == "valid":
        return (0,) * (2 * n)
    if padding == "same":
        totals = [d * (k - 1) for k, d in zip(kernel_size, dilation)]
        return tuple(t // 2 for t in totals) + tuple(t - t // 2 for t in totals)
    if isinstance(padding, str):
        raise ValueError(f"Invalid padding string {padding!r}, should be one of ['valid', 'same']")
    p = ntuple(padding, n, "padding")
    return p + p


def _emit_conv2d(b, attrs, x, w, *bias):
    y = b.op("lz.conv2d", x, w, strides=attrs["strides"], pads=attrs["pads"], dilations=attrs["dilations"],
             groups=attrs["groups"])
    if bias:
        y = b.op("lz.add", y, b.op("lz.reshape", bias[0], shape=[1, -1, 1, 1]))
    return [y]


def _emit_conv3d(b, attrs, x, w, *bias):
    """``N x C x D x H x W`` by ``O x C/G x KD x KH x KW`` as one ``conv2d`` (module docstring):
    channels of the stacked input ordered (group, depth tap, channel), as the reordered weights."""
    _, _, _, h, wd = x.type.shape
    o, cg, kd, kh, kw = w.type.shape
    g = attrs["groups"]
    sd, sh, sw = attrs["strides"]
    dd, dh, dw = attrs["dilations"]
    pads = attrs["pads"]
    if pads[0] or pads[3]:
        x = b.op("lz.pad", x, pads=[0, 0, pads[0], 0, 0, 0, 0, pads[3], 0, 0])
    depth = x.type.shape[2]
    od = (depth - dd * (kd - 1) - 1) // sd + 1
    if od <= 0:
        raise ValueError(f"conv3d: the kernel's depth {dd * (kd - 1) + 1} is larger than the padded input's {depth}")
    taps = []
    for k in range(kd):
        tap = b.op("lz.slice", x, starts=[k * dd], ends=[k * dd + (od - 1) * sd + 1], axes=[2], steps=[sd])
        taps.append(b.op("lz.reshape", tap, shape=[-1, g, 1, cg, od, h, wd]))
    stacked = taps[0] if kd == 1 else b.op("lz.concat", *taps, axis=2)
    stacked = b.op("lz.transpose", stacked, perm=[0, 4, 1, 2, 3, 5, 6])
    stacked = b.op("lz.reshape", stacked, shape=[-1, g * kd * cg, h, wd])
    w2 = b.op("lz.reshape", b.op("lz.transpose", w, perm=[0, 2, 1, 3, 4]), shape=[o, kd * cg, kh, kw])
    y = b.op("lz.conv2d", stacked, w2, strides=[sh, sw], pads=[pads[1], pads[2], pads[4], pads[5]],
             dilations=[dh, dw], groups=g)
    oh, ow = y.type.shape[2:]
    y = b.op("lz.transpose", b.op("lz.reshape", y, shape=[-1, od, o, oh, ow]), perm=[0, 2, 1, 3, 4])
    if bias:
        y = b.op("lz.add", y, b.op("lz.reshape", bias[0], shape=[1, -1, 1, 1, 1]))
    return [y]


def _emit_conv_transpose2d(b, attrs, x, w, *bias):
    """The input gradient of ``conv2d`` with these weights, for an input of the output's size."""
    n, _, h, wd = x.type.shape
    _, cout_g, kh, kw = w.type.shape
    (sh, sw), (ph, pw), (oph, opw), (dh, dw) = attrs["strides"], attrs["padding"], attrs["output_padding"], \
        attrs["dilations"]
    out_shape = (n, cout_g * attrs["groups"], (h - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1,
                 (wd - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1)
    y = conv2d_input_grad(GradBuilder(b.block, b.index, b.location), x, w, out_shape, strides=(sh, sw),
                          pads=(ph, pw, ph, pw), dilations=(dh, dw), groups=attrs["groups"])
    if bias:
        y = b.op("lz.add", y, b.op("lz.reshape", bias[0], shape=[1, -1, 1, 1]))
    return [y]


_CONV2D = EagerOp("conv2d", _emit_conv2d)
_CONV3D = EagerOp("conv3d", _emit_conv3d)
_CONV_TRANSPOSE2D = EagerOp("conv_transpose2d", _emit_conv_transpose2d)


def _check_input(x: Tensor, weight: Tensor, spatial: int, name: str) -> bool:
    """Whether ``x`` is unbatched; raises for a rank that is neither."""
    if x.ndim not in (spatial + 1, spatial + 2):
        raise RuntimeError(f"{name}: expected a {spatial + 1}-D (unbatched) or {spatial + 2}-D (batched) input, "
                           f"got a {x.ndim}-D input of shape {list(x.shape)}")
    if weight.ndim != spatial + 2:
        raise RuntimeError(f"{name}: expected a {spatial + 2}-D weight, got shape {list(weight.shape)}")
    return x.ndim == spatial + 1


def _convolve(op: EagerOp, x: Tensor, weight: Tensor, bias, attrs: tuple, unbatched: bool) -> Tensor:
    if unbatched:
        x = x.unsqueeze(0)
    y = apply(op, attrs, x, weight) if bias is None else apply(op, attrs, x, weight, bias)
    return y.squeeze(0) if unbatched else y


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """2-D cross-correlation of ``N x C x H x W`` (or ``C x H x W``) input with ``O x C/groups x KH
    x KW`` weights."""
    unbatched = _check_input(x, weight, 2, "conv2d")
    dilation = ntuple(dilation, 2, "dilation")
    attrs = (("strides", ntuple(stride, 2, "stride")), ("pads", conv_padding(padding, weight.shape[2:], dilation)),
             ("dilations", dilation), ("groups", int(groups)))
    return _convolve(_CONV2D, x, weight, bias, attrs, unbatched)


def conv1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """``N x C x L`` (or ``C x L``) by ``O x C/groups x K``: ``conv2d`` over a unit height."""
    unbatched = _check_input(x, weight, 1, "conv1d")
    dilation = ntuple(dilation, 1, "dilation")
    begin, end = conv_padding(padding, weight.shape[2:], dilation)
    x2 = x.unsqueeze(-2)
    attrs = (("strides", (1,) + ntuple(stride, 1, "stride")), ("pads", (0, begin, 0, end)),
             ("dilations", (1,) + dilation), ("groups", int(groups)))
    return _convolve(_CONV2D, x2, weight.unsqueeze(-2), bias, attrs, unbatched).squeeze(-2)


def conv3d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, dilation=1,
           groups: int = 1) -> Tensor:
    """``N x C x D x H x W`` (or unbatched) by ``O x C/groups x KD x KH x KW``."""
    unbatched = _check_input(x, weight, 3, "conv3d")
    dilation = ntuple(dilation, 3, "dilation")
    channels = x.shape[-4]
    if channels != weight.shape[1] * groups:
        raise RuntimeError(f"conv3d: the input has {channels} channels, the weight {list(weight.shape)} with "
                           f"groups={groups} expects {weight.shape[1] * groups}")
    attrs = (("strides", ntuple(stride, 3, "stride")), ("pads", conv_padding(padding, weight.shape[2:], dilation)),
             ("dilations", dilation), ("groups", int(groups)))
    return _convolve(_CONV3D, x, weight, bias, attrs, unbatched)


def _transpose_attrs(stride, padding, output_padding, groups, dilation, n: int) -> tuple:
    stride, dilation = ntuple(stride, n, "stride"), ntuple(dilation, n, "dilation")
    output_padding = ntuple(output_padding, n, "output_padding")
    for op, s, d in zip(output_padding, stride, dilation):
        if op >= max(s, d):
            raise ValueError(f"output padding must be smaller than either stride or dilation, got "
                             f"output_padding={output_padding}, stride={stride}, dilation={dilation}")
    return stride, ntuple(padding, n, "padding"), output_padding, int(groups), dilation


def conv_transpose2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1) -> Tensor:
    """The transposed convolution of ``N x C_in x H x W`` with ``C_in x C_out/groups x KH x KW``
    weights: ``H_out = (H - 1) stride - 2 padding + dilation (KH - 1) + output_padding + 1``."""
    unbatched = _check_input(x, weight, 2, "conv_transpose2d")
    stride, padding, output_padding, groups, dilation = _transpose_attrs(stride, padding, output_padding, groups,
                                                                         dilation, 2)
    attrs = (("strides", stride), ("padding", padding), ("output_padding", output_padding), ("groups", groups),
             ("dilations", dilation))
    return _convolve(_CONV_TRANSPOSE2D, x, weight, bias, attrs, unbatched)


def conv_transpose1d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride=1, padding=0, output_padding=0,
                     groups: int = 1, dilation=1) -> Tensor:
    """``conv_transpose2d`` over a unit height."""
    _check_input(x, weight, 1, "conv_transpose1d")
    stride, padding, output_padding, groups, dilation = _transpose_attrs(stride, padding, output_padding, groups,
                                                                         dilation, 1)
    return conv_transpose2d(x.unsqueeze(-2), weight.unsqueeze(-2), bias, (1,) + stride, (0,) + padding,
                            (0,) + output_padding, groups, (1,) + dilation).squeeze(-2)


# --- modules ------------------------------------------------------------------------------------------------

_PADDING_MODES = ("zeros", "reflect", "replicate", "circular")


class _ConvNd(Module):
    """What every ``Conv*``/``ConvTranspose*`` shares: the arguments, ``weight`` (``out x
    in/groups x *kernel``, transposed: ``in x out/groups x *kernel``) and ``bias``, initialized as
    PyTorch (Kaiming-uniform with a = sqrt(5), the bias uniform on ``1/sqrt(fan_in)``)."""

    spatial_dims = 0
    transposed = False

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", output_padding=0, device=None,
                 dtype=None):
        super().__init__()
        n = self.spatial_dims
        if groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups:
            raise ValueError("out_channels must be divisible by groups")
        if padding_mode not in _PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {list(_PADDING_MODES)}, but got padding_mode="
                             f"'{padding_mode}'")
        if self.transposed and padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for {type(self).__name__}')
        if isinstance(padding, str):
            if padding not in ("valid", "same"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of ['valid', 'same']")
            if padding == "same" and any(s != 1 for s in ntuple(stride, n, "stride")):
                raise ValueError("padding='same' is not supported for strided convolutions")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = ntuple(kernel_size, n, "kernel_size")
        self.stride = ntuple(stride, n, "stride")
        self.padding = padding if isinstance(padding, str) else ntuple(padding, n, "padding")
        self.dilation = ntuple(dilation, n, "dilation")
        self.output_padding = ntuple(output_padding, n, "output_padding")
        self.groups, self.padding_mode = groups, padding_mode
        d = _dt.as_dtype(dtype) if dtype is not None else _dt.get_default_dtype()
        shape = (in_channels, out_channels // groups) if self.transposed else (out_channels, in_channels // groups)
        self.weight = Parameter(empty(*shape, *self.kernel_size, dtype=d))
        if bias:
            self.bias = Parameter(empty(out_channels, dtype=d))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in, _ = init._calculate_fan_in_and_fan_out(self.weight)
            if fan_in:
                bound = 1 / math.sqrt(fan_in)
                init.uniform_(self.bias, -bound, bound)

    def _padded(self, x: Tensor) -> tuple:
        """``(input, padding)`` for the convolution: with a ``padding_mode`` other than zeros the
        input is padded by ``F.pad`` in that mode and the convolution pads nothing."""
        if self.padding_mode == "zeros":
            return x, self.padding
        begins_ends = conv_padding(self.padding, self.kernel_size, self.dilation)
        n = self.spatial_dims
        pads = []
        for i in reversed(range(n)):  # F.pad lists the last dim first
            pads += [begins_ends[i], begins_ends[n + i]]
        return _pad(x, pads, mode=self.padding_mode), 0

    def extra_repr(self) -> str:
        n = self.spatial_dims
        s = f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}"
        if self.padding != (0,) * n:
            s += f", padding={self.padding}"
        if self.dilation != (1,) * n:
            s += f", dilation={self.dilation}"
        if self.output_padding != (0,) * n:
            s += f", output_padding={self.output_padding}"
        if self.groups != 1:
            s += f", groups={self.groups}"
        if self.bias is None:
            s += ", bias=False"
        if self.padding_mode != "zeros":
            s += f", padding_mode={self.padding_mode}"
        return s


class _Conv(_ConvNd):
    """A convolution whose ``forward`` is ``functional(x, weight, bias, ...)``."""

    functional = None

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, dilation=1,
                 groups: int = 1, bias: bool = True, padding_mode: str = "zeros", device=None, dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, 0, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        x, padding = self._padded(x)
        return type(self).functional(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)


class Conv1d(_Conv):
    spatial_dims = 1
    functional = staticmethod(conv1d)


class Conv2d(_Conv):
    spatial_dims = 2
    functional = staticmethod(conv2d)


class Conv3d(_Conv):
    spatial_dims = 3
    functional = staticmethod(conv3d)


class _ConvTranspose(_ConvNd):
    transposed = True
    functional = None

    def __init__(self, in_channels: int, out_channels: int, kernel_size, stride=1, padding=0, output_padding=0,
                 groups: int = 1, bias: bool = True, dilation=1, padding_mode: str = "zeros", device=None,
                 dtype=None):
        super().__init__(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode, output_padding, device, dtype)

    def forward(self, x: Tensor, output_size=None) -> Tensor:
        output_padding = self.output_padding
        if output_size is not None:
            output_padding = self._output_padding_for(x, output_size)
        return type(self).functional(x, self.weight, self.bias, self.stride, self.padding, output_padding,
                                     self.groups, self.dilation)

    def _output_padding_for(self, x: Tensor, output_size) -> tuple:
        """The ``output_padding`` that makes the output ``output_size`` (its last spatial dims),
        which must lie within a stride of the smallest size, as PyTorch."""
        n = self.spatial_dims
        size = tuple(int(s) for s in output_size)[-n:]
        pads = []
        for i in range(n):
            smallest = ((x.shape[x.ndim - n + i] - 1) * self.stride[i] - 2 * self.padding[i]
                        + self.dilation[i] * (self.kernel_size[i] - 1) + 1)
            if not smallest <= size[i] < smallest + self.stride[i]:
                raise ValueError(f"requested an output size of {list(size)}, but valid sizes range from "
                                 f"{smallest} to {smallest + self.stride[i] - 1} in dim {i}")
            pads.append(size[i] - smallest)
        return tuple(pads)


class ConvTranspose1d(_ConvTranspose):
    spatial_dims = 1
    functional = staticmethod(conv_transpose1d)


class ConvTranspose2d(_ConvTranspose):
    spatial_dims = 2
    functional = staticmethod(conv_transpose2d)
