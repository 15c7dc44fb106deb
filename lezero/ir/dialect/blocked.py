"""``lz.conv2d_blocked``: a float32 convolution over channel-blocked activations, its epilogue in
the op.

Why an op of its own: the CPU runs convolutional nets fastest with activations blocked by
channels, ``[N, C, H, W]`` held as ``[N, ceil(C / c), H, W, c]`` (NCHW16c on AVX-512, NCHW8c on
AVX2: MLAS's and oneDNN's layout), where one pixel's ``c`` channels are one vector
(``lezero/codegen/llvm/conv_nchwc.py``).  The blocked tensor is a distinct shape in the IR, so
nothing reads it as NCHW by mistake; the conversions are ordinary ops (``to_blocked``:
pad, reshape, transpose; ``from_blocked``: transpose, reshape, slice), which the compiler fuses
and cancels like any other.  Nobody writes the op: the ``blocked-layout`` pass
(``lezero/passes/layout.py``) forms it from ``conv2d -> add bias -> add residual -> relu`` chains of
the CPU's kernel pipeline.  It is composite: elsewhere it decomposes into those conversions and
``lz.conv2d`` (so autodiff and other targets need nothing new).

Operands: ``x`` ``[N, ceil(C / c), H, W, c]`` (channels past ``C`` zeros), ``w`` ``[O, C, kh,
kw]`` (OIHW, one group), ``bias`` ``[ceil(O / c) * c]`` (zeros past ``O``), optionally
``residual`` in the result's layout, all of one float type (the CPU kernel: f32); ``strides``,
``pads`` as ``lz.conv2d``'s, ``relu``.
Result ``[N, ceil(O / c), OH, OW, c]``: ``relu(conv(x, w) + bias + residual)``, channels past ``O``
zeros when the operands' are.

``lz.max_pool2d_blocked(x) {kernel, strides, pads}``: ``lz.max_pool2d`` of each channel of a
blocked ``x`` (the pools between vgg's stages, inside squeezenet's and inception's blocked
regions), a vector of ``c`` channels per pixel; composite too.  Channel concats of blocked tensors
need no op: where every input's channels are whole blocks, ``lz.concat`` over the ``C/c`` axis is
the blocked form of the NCHW concat.
"""
from __future__ import annotations

import numpy as np

from lezero.ir.dialect.constraints import FLOAT, check_element_type, check_rank, same_element_type
from lezero.ir.dialect.windows import check_window_attrs, window_output_size
from lezero.ir.opdef import COMPOSITE, PURE, AttrSpec, OpDef, OpError, register
from lezero.ir.types import TensorType, format_shape


def blocks(channels: int, block: int) -> int:
    return -(-channels // block)


def to_blocked(b, x, block: int):
    """``[N, C, H, W]`` as ``[N, ceil(C / block), H, W, block]`` (the padding channels zeros)."""
    n, c, h, w = x.type.shape
    padded = blocks(c, block) * block
    if padded != c:
        x = b.op("lz.pad", x, pads=[0, 0, 0, 0, 0, padded - c, 0, 0])
    x = b.op("lz.reshape", x, shape=[n, padded // block, block, h, w])
    return b.op("lz.transpose", x, perm=[0, 1, 3, 4, 2])


def from_blocked(b, x, channels: int):
    """The first ``channels`` channels of a blocked ``[N, CB, H, W, c]`` as ``[N, C, H, W]``."""
    n, cb, h, w, c = x.type.shape
    x = b.op("lz.reshape", b.op("lz.transpose", x, perm=[0, 1, 4, 2, 3]), shape=[n, cb * c, h, w])
    if cb * c != channels:
        x = b.op("lz.slice", x, starts=[0], ends=[channels], axes=[1])
    return x


@register
class Conv2dBlockedOp(OpDef):
    """``lz.conv2d_blocked(x, w, bias[, residual]) {strides, pads, relu}``: see the module docstring."""

    name = "lz.conv2d_blocked"
    operands = ("input", "weight", "bias", "residual")
    variadic = True  # the residual is optional
    traits = frozenset({PURE, COMPOSITE})
    attributes = {
        "strides": AttrSpec("i64_array", (1, 1)),
        "pads": AttrSpec("i64_array", (0, 0, 0, 0)),
        "relu": AttrSpec("bool", False),
    }
    summary = "2-D convolution over channel-blocked activations, bias, residual and relu fused"

    def check_operand_count(self, n: int) -> None:
        if n not in (3, 4):
            raise OpError(f"expects 3 operands (input, weight, bias) or 4 (and a residual), got {n}")

    def infer(self, operand_types, attrs):
        x, w, bias = operand_types[:3]
        check_rank(x, 5, "input", "N x C/c x H x W x c")
        check_rank(w, 4, "weight", "O x C x KH x KW")
        et = same_element_type(operand_types)
        check_element_type(x, FLOAT, "operands")
        check_window_attrs(2, strides=attrs.strides, pads=attrs.pads, dilations=(1, 1))
        n, cb, h, wd, c = x.shape
        o, ci, kh, kw = w.shape
        if blocks(ci, c) != cb:
            raise OpError(f"the input {format_shape(x.shape)} holds {cb} blocks of {c} channels, the weight "
                          f"{format_shape(w.shape)} reads {ci} channels")
        if bias.shape != (blocks(o, c) * c,):
            raise OpError(f"the bias must be {blocks(o, c) * c} values ({o} output channels in blocks of {c}), "
                          f"got {format_shape(bias.shape)}")
        (sh, sw), (top, left, bottom, right) = attrs.strides, attrs.pads
        shape = (n, blocks(o, c), window_output_size(h, kh, sh, top, bottom),
                 window_output_size(wd, kw, sw, left, right), c)
        if len(operand_types) == 4 and operand_types[3].shape != shape:
            raise OpError(f"the residual must be {format_shape(shape)}, got {format_shape(operand_types[3].shape)}")
        return [TensorType(shape, et)]

    def reference(self, attrs, x, w, bias, residual=None):
        from numpy.lib.stride_tricks import sliding_window_view

        n, cb, h, wd, c = x.shape
        o, ci, kh, kw = w.shape
        plain = x.transpose(0, 1, 4, 2, 3).reshape(n, cb * c, h, wd)[:, :ci].astype(np.float64)
        (sh, sw), (top, left, bottom, right) = attrs.strides, attrs.pads
        padded = np.pad(plain, ((0, 0), (0, 0), (top, bottom), (left, right)))
        windows = sliding_window_view(padded, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
        out = np.einsum("nchwij,ocij->nohw", windows, w.astype(np.float64), optimize=True)
        ob = blocks(o, c)
        full = np.zeros((n, ob * c) + out.shape[2:])
        full[:, :o] = out
        full += bias.reshape(1, -1, 1, 1)
        blocked = full.reshape(n, ob, c, *out.shape[2:]).transpose(0, 1, 3, 4, 2)
        if residual is not None:
            blocked = blocked + residual
        if attrs.relu:
            blocked = np.maximum(blocked, 0)
        return blocked.astype(x.dtype)

    def decompose(self, b, op, attrs):
        """The conversions around ``lz.conv2d`` and its epilogue, in NCHW."""
        x, w, bias = op.operands[:3]
        o, c = w.type.shape[0], x.type.shape[-1]
        y = b.op("lz.conv2d", from_blocked(b, x, w.type.shape[1]), w, strides=list(attrs.strides),
                 pads=list(attrs.pads))
        padded = blocks(o, c) * c
        if padded != o:
            y = b.op("lz.pad", y, pads=[0, 0, 0, 0, 0, padded - o, 0, 0])
        y = b.op("lz.add", y, b.op("lz.reshape", bias, shape=[1, padded, 1, 1]))
        y = to_blocked(b, y, c)
        if len(op.operands) == 4:
            y = b.op("lz.add", y, op.operands[3])
        return b.op("lz.relu", y) if attrs.relu else y


@register
class MaxPool2dBlockedOp(OpDef):
    """``lz.max_pool2d_blocked(x) {kernel, strides, pads}``: see the module docstring."""

    name = "lz.max_pool2d_blocked"
    operands = ("input",)
    traits = frozenset({PURE, COMPOSITE})
    attributes = {
        "kernel": AttrSpec("i64_array"),
        "strides": AttrSpec("i64_array", (1, 1)),
        "pads": AttrSpec("i64_array", (0, 0, 0, 0)),
    }
    summary = "2-D max pooling of channel-blocked activations"

    def infer(self, operand_types, attrs):
        (x,) = operand_types
        check_rank(x, 5, "input", "N x C/c x H x W x c")
        check_element_type(x, FLOAT, "input")
        check_window_attrs(2, kernel=attrs.kernel, strides=attrs.strides, pads=attrs.pads, dilations=(1, 1))
        n, cb, h, w, c = x.shape
        (kh, kw), (sh, sw), (top, left, bottom, right) = attrs.kernel, attrs.strides, attrs.pads
        return [x.with_shape((n, cb, window_output_size(h, kh, sh, top, bottom),
                              window_output_size(w, kw, sw, left, right), c))]

    def reference(self, attrs, x):
        from numpy.lib.stride_tricks import sliding_window_view

        (kh, kw), (sh, sw), (top, left, bottom, right) = attrs.kernel, attrs.strides, attrs.pads
        padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right), (0, 0)), constant_values=-np.inf)
        windows = sliding_window_view(padded, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]
        return windows.max(axis=(-2, -1)).astype(x.dtype)

    def decompose(self, b, op, attrs):
        x = op.operands[0]
        _, cb, _, _, c = x.type.shape
        y = b.op("lz.max_pool2d", from_blocked(b, x, cb * c), kernel=list(attrs.kernel),
                 strides=list(attrs.strides), pads=list(attrs.pads))
        return to_blocked(b, y, c)
