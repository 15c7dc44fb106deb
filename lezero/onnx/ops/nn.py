"""Neural-network operators: Gemm, MatMul, Conv, ConvTranspose, pooling, normalizations, softmax.

1-D convolutions and pools run as 2-D ones over a height of 1; 3-D ones are not supported.
"""
from __future__ import annotations

import math

import numpy as np

from lezero.ir.dialect.contraction import conv2d_input_grad
from lezero.ir.types import F32
from lezero.onnx.ops.common import axis_of, product, scaled
from lezero.onnx.registry import converter

# --- matrix products ----------------------------------------------------------------------------------

@converter("MatMul")
def matmul(ctx):
    return ctx.op("lz.matmul", ctx.input(0), ctx.input(1))


@converter("Gemm")
def gemm(ctx):
    """``alpha * A' B' + beta * C`` with ``A'``, ``B'`` transposed as asked."""
    a, b, c = ctx.input(0), ctx.input(1), ctx.optional(2)
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    if ctx.attr("transA", 0):
        a = ctx.transpose(a, [1, 0])
    if ctx.attr("transB", 0):
        b = ctx.transpose(b, [1, 0])
    y = scaled(ctx, ctx.op("lz.matmul", a, b), alpha)
    if c is not None and beta != 0:
        y = ctx.op("lz.add", y, scaled(ctx, c, beta))
    return y


# --- convolution --------------------------------------------------------------------------------------

def spatial_rank(ctx, x, what: str, most: int = 2) -> int:
    n = ctx.rank(x) - 2
    if not 1 <= n <= most:
        raise ctx.unsupported(f"{n}-D {what} is not supported (1-D to {most}-D are)")
    return n


def window_pads(ctx, sizes, kernel, strides, dilations, pads, auto_pad, ceil_mode=False) -> list[int]:
    """``[begin..., end...]`` from ``pads`` or ``auto_pad`` (SAME_UPPER puts the odd one at the end)."""
    n = len(kernel)
    if auto_pad in ("NOTSET", "", None):
        return list(pads) if pads is not None else [0] * (2 * n)
    if auto_pad == "VALID":
        return [0] * (2 * n)
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise ctx.error(f"attribute 'auto_pad' must be NOTSET, VALID, SAME_UPPER or SAME_LOWER, got {auto_pad!r}")
    if any(s is None for s in sizes):
        raise ctx.dynamic(f"auto_pad={auto_pad} needs static spatial dims")
    begins, ends = [], []
    for size, k, s, d in zip(sizes, kernel, strides, dilations):
        out = -(-size // s)
        total = max((out - 1) * s + (k - 1) * d + 1 - size, 0)
        small, large = total // 2, total - total // 2
        begins.append(small if auto_pad == "SAME_UPPER" else large)
        ends.append(large if auto_pad == "SAME_UPPER" else small)
    return begins + ends


def _window_attrs(ctx, x, n, kernel):
    strides = list(ctx.attr("strides", [1] * n))
    dilations = list(ctx.attr("dilations", [1] * n))
    pads = window_pads(ctx, x.type.shape[2:], kernel, strides, dilations, ctx.attr("pads", None),
                       ctx.attr("auto_pad", "NOTSET"))
    return strides, pads, dilations


def _as_2d(ctx, x):
    """N x C x L as N x C x 1 x L."""
    shape = x.type.shape
    return ctx.reshape(x, [-1 if shape[0] is None else shape[0], shape[1], 1, shape[2]])


def _from_2d(ctx, y):
    n, c, _, length = y.type.shape
    return ctx.reshape(y, [-1 if n is None else n, c, length])


def _lift(strides, pads, dilations):
    """1-D window attributes as 2-D ones over a height of 1."""
    return [1] + strides, [0, pads[0], 0, pads[1]], [1] + dilations


def _bias(ctx, y, bias):
    if bias is None:
        return y
    return ctx.op("lz.add", y, ctx.reshape(bias, [-1] + [1] * (ctx.rank(y) - 2)))


def conv3d(ctx, x, w, strides, pads, dilations, group):
    """A 3-D convolution as a sum over the window's depth of 2-D convolutions: for each kernel
    slice ``kd``, the input planes it meets (a strided slice of the depth-padded input) are
    batched as N * OD images and convolved with ``w[:, :, kd]``."""
    n, c, depth, h, width = ctx.shape(x)
    o, _, kd_size, kh, kw = ctx.shape(w)
    (sd, sh, sw), (dd, dh, dw) = strides, dilations
    front, back = pads[0], pads[3]
    from lezero.ir.dialect.windows import window_output_size

    od = window_output_size(depth, kd_size, sd, front, back, dd)
    if front or back:
        x = ctx.op("lz.pad", x, pads=[0, 0, front, 0, 0, 0, 0, back, 0, 0])
    total = None
    for kd in range(kd_size):
        start = kd * dd
        planes = ctx.op("lz.slice", x, starts=[start], ends=[start + sd * (od - 1) + 1], axes=[2], steps=[sd])
        images = ctx.reshape(ctx.transpose(planes, [0, 2, 1, 3, 4]), [n * od, c, h, width])
        kernel = ctx.reshape(ctx.op("lz.slice", w, starts=[kd], ends=[kd + 1], axes=[2]), [o, -1, kh, kw])
        y = ctx.op("lz.conv2d", images, kernel, strides=[sh, sw], pads=[pads[1], pads[2], pads[4], pads[5]],
                   dilations=[dh, dw], groups=group)
        total = y if total is None else ctx.op("lz.add", total, y)
    oh, ow = total.type.shape[2:]
    return ctx.transpose(ctx.reshape(total, [n, od, o, oh, ow]), [0, 2, 1, 3, 4])


def conv2d(ctx, x, w, strides, pads, dilations, group):
    """``lz.conv2d`` on N x C x (L | H x W | D x H x W) operands (``pads`` as [begin..., end...])."""
    n = ctx.rank(x) - 2
    if n == 3:
        return conv3d(ctx, x, w, strides, pads, dilations, group)
    if n == 1:
        s, p, d = _lift(strides, pads, dilations)
        y = ctx.op("lz.conv2d", _as_2d(ctx, x), _as_2d(ctx, w), strides=s, pads=p, dilations=d, groups=group)
        return _from_2d(ctx, y)
    return ctx.op("lz.conv2d", x, w, strides=strides, pads=[pads[0], pads[1], pads[2], pads[3]],
                  dilations=dilations, groups=group)


@converter("Conv")
def conv(ctx):
    x, w, bias = ctx.input(0), ctx.input(1), ctx.optional(2)
    n = spatial_rank(ctx, x, "convolution", most=3)
    kernel = list(ctx.attr("kernel_shape", w.type.shape[2:]))
    strides, pads, dilations = _window_attrs(ctx, x, n, kernel)
    y = conv2d(ctx, x, w, strides, pads, dilations, ctx.attr("group", 1))
    return _bias(ctx, y, bias)


class _GradBuilderAdapter:
    """The builder interface ``conv2d_input_grad`` expects, building through the node context."""

    def __init__(self, ctx):
        self.ctx = ctx

    def op(self, name, *operands, **attrs):
        return self.ctx.op(name, *operands, **attrs)

    def reshape(self, v, shape):
        return self.ctx.reshape(v, shape)

    def transpose(self, v, perm):
        return self.ctx.transpose(v, perm)


@converter("ConvTranspose")
def conv_transpose(ctx):
    """The gradient of a convolution to its input (``conv2d_input_grad``): zeros inserted for the
    strides, padding, a convolution with the flipped, transposed weights."""
    x, w, bias = ctx.input(0), ctx.input(1), ctx.optional(2)
    n = spatial_rank(ctx, x, "transposed convolution")
    sizes = ctx.shape(x)[2:]
    kernel = list(ctx.attr("kernel_shape", w.type.shape[2:]))
    strides = list(ctx.attr("strides", [1] * n))
    dilations = list(ctx.attr("dilations", [1] * n))
    output_padding = list(ctx.attr("output_padding", [0] * n))
    group = ctx.attr("group", 1)
    auto_pad = ctx.attr("auto_pad", "NOTSET")
    output_shape = ctx.attr("output_shape", None)
    pads = ctx.attr("pads", None)
    full = [s * (i - 1) + op + (k - 1) * d + 1 for s, i, op, k, d in zip(strides, sizes, output_padding, kernel,
                                                                         dilations)]
    if output_shape is not None or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        target = list(output_shape)[-n:] if output_shape is not None else [i * s for i, s in zip(sizes, strides)]
        total = [f - t for f, t in zip(full, target)]
        if auto_pad == "SAME_UPPER":
            pads = [t // 2 for t in total] + [t - t // 2 for t in total]
        else:
            pads = [t - t // 2 for t in total] + [t // 2 for t in total]
    elif pads is None or auto_pad == "VALID":
        pads = [0] * (2 * n)
    out = [f - pads[i] - pads[n + i] for i, f in enumerate(full)]
    if n == 1:
        x, w = _as_2d(ctx, x), _as_2d(ctx, w)
        strides, pads, dilations = _lift(strides, pads, dilations)
        out = [1] + out
    batch, c_out = ctx.shape(x)[0], w.type.shape[1] * group
    # a convolution's input gradient, with ConvTranspose's end padding (output_padding adds rows)
    y = conv2d_input_grad(_GradBuilderAdapter(ctx), x, w, (batch, c_out, *out), strides,
                          [pads[0], pads[1], pads[2], pads[3]], dilations, group)
    if n == 1:
        y = _from_2d(ctx, y)
    return _bias(ctx, y, bias)


# --- pooling --------------------------------------------------------------------------------------------

def _pool(ctx, name, extra):
    x = ctx.input(0)
    if ctx.rank(x) == 5:
        return _pool3d(ctx, name, extra)
    n = spatial_rank(ctx, x, "pooling")
    kernel = list(ctx.attr("kernel_shape"))
    strides, pads, dilations = _window_attrs(ctx, x, n, kernel)
    ceil_mode = bool(ctx.attr("ceil_mode", 0))
    if name == "lz.avg_pool2d" and any(d != 1 for d in dilations):
        return _dilated_average(ctx, x, kernel, strides, pads, dilations, ceil_mode, extra["count_include_pad"])
    if name == "lz.avg_pool2d":
        extra = dict(extra)
    else:
        extra = dict(extra, dilations=dilations)
    if n == 1:
        strides, pads, dilations = _lift(strides, pads, dilations)
        if "dilations" in extra:
            extra["dilations"] = dilations
        y = ctx.op(name, _as_2d(ctx, x), kernel=[1] + kernel, strides=strides, pads=pads, ceil_mode=ceil_mode,
                   **extra)
        return _from_2d(ctx, y)
    return ctx.op(name, x, kernel=kernel, strides=strides, pads=pads, ceil_mode=ceil_mode, **extra)


def _pool3d(ctx, name, extra):
    """3-D max and average pooling are separable: a 2-D pool over H x W, then one over D (as a
    2-D pool with a D x 1 window); an average's count is the product of the per-dim counts."""
    x = ctx.input(0)
    kernel = list(ctx.attr("kernel_shape"))
    strides, pads, dilations = _window_attrs(ctx, x, 3, kernel)
    ceil_mode = bool(ctx.attr("ceil_mode", 0))
    if name == "lz.avg_pool2d" and any(d != 1 for d in dilations):
        return _dilated_average(ctx, x, kernel, strides, pads, dilations, ceil_mode, extra["count_include_pad"])
    n, c, d, h, w = ctx.shape(x)

    def pool(v, k, s, p, dil):
        attrs = dict(extra, kernel=k, strides=s, pads=p, ceil_mode=ceil_mode)
        if name == "lz.max_pool2d":
            attrs["dilations"] = dil
        return ctx.op(name, v, **attrs)
    planes = pool(ctx.reshape(x, [n, c * d, h, w]), kernel[1:], strides[1:],
                  [pads[1], pads[2], pads[4], pads[5]], dilations[1:])
    oh, ow = planes.type.shape[2:]
    columns = pool(ctx.reshape(planes, [n, c, d, oh * ow]), [kernel[0], 1], [strides[0], 1],
                   [pads[0], 0, pads[3], 0], [dilations[0], 1])
    return ctx.reshape(columns, [n, c, columns.type.shape[2], oh, ow])


@converter("MaxPool")
def max_pool(ctx):
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        raise ctx.unsupported("the Indices output is not supported")
    ctx.ignore_attrs("storage_order")  # only affects Indices
    return _pool(ctx, "lz.max_pool2d", {})


@converter("AveragePool")
def average_pool(ctx):
    return _pool(ctx, "lz.avg_pool2d", {"count_include_pad": bool(ctx.attr("count_include_pad", 0))})


def _dilated_average(ctx, x, kernel, strides, pads, dilations, ceil_mode, include_pad):
    """Average pooling with dilations: window sums (a convolution with ones, padded at the end
    for ceil mode's last windows) divided by each window's count, the product of its per-dim
    counts (input elements, plus padding with count_include_pad; never the ceil-mode overhang)."""
    from lezero.ir.dialect.windows import window_output_size

    sizes = ctx.shape(x)[2:]
    n = len(sizes)
    begins, ends = list(pads[:n]), list(pads[n:])
    counts = np.ones(())
    for i, (size, k, s, d) in enumerate(zip(sizes, kernel, strides, dilations)):
        out = window_output_size(size, k, s, begins[i], ends[i], d, ceil_mode)
        lo, hi = (-begins[i], size + ends[i]) if include_pad else (0, size)
        per = np.array([sum(lo <= o * s - begins[i] + j * d < hi for j in range(k)) for o in range(out)], np.float64)
        counts = np.multiply.outer(counts, per)
        ends[i] += max(0, (out - 1) * s + (k - 1) * d + 1 - (size + begins[i] + ends[i]))
    sums = _window_sum_nd(ctx, x, kernel, strides, begins + ends, dilations)
    return ctx.op("lz.div", sums, ctx.constant(counts, ctx.dtype(x)))


def _window_sum(ctx, x, kernel, strides, pads, dilations):
    """Sums over each window (zero padding): a depthwise convolution with a window of ones."""
    c = ctx.shape(x)[1]
    ones = ctx.constant(np.ones([c, 1] + list(kernel)), ctx.dtype(x))
    return conv2d(ctx, x, ones, strides, pads, dilations, c)


@converter("LpPool")
def lp_pool(ctx):
    x = ctx.input(0)
    if ctx.rank(x) == 5:
        if ctx.attr("ceil_mode", 0):
            raise ctx.unsupported("LpPool with ceil_mode")
        p = ctx.attr("p", 2)
        return _root(ctx, _window_sum_3d(ctx, _abs_pow(ctx, x, p)), p)
    n = spatial_rank(ctx, x, "pooling")
    kernel = list(ctx.attr("kernel_shape"))
    strides, pads, dilations = _window_attrs(ctx, x, n, kernel)
    if ctx.attr("ceil_mode", 0):
        raise ctx.unsupported("LpPool with ceil_mode")
    p = ctx.attr("p", 2)
    powered = _abs_pow(ctx, x, p)
    return _root(ctx, _window_sum(ctx, powered, kernel, strides, pads, dilations), p)


def _window_sum_3d(ctx, x):
    kernel = list(ctx.attr("kernel_shape"))
    strides, pads, dilations = _window_attrs(ctx, x, 3, kernel)
    return _window_sum_nd(ctx, x, kernel, strides, pads, dilations)


def _window_sum_nd(ctx, x, kernel, strides, pads, dilations):
    """Window sums (zero padding) of a 1-, 2- or 3-D image; 3-D separably: over H x W, then D."""
    if ctx.rank(x) < 5:
        return _window_sum(ctx, x, kernel, strides, pads, dilations)
    n, c, d, h, w = ctx.shape(x)
    planes = _window_sum(ctx, ctx.reshape(x, [n, c * d, h, w]), kernel[1:], strides[1:],
                         [pads[1], pads[2], pads[4], pads[5]], dilations[1:])
    oh, ow = planes.type.shape[2:]
    columns = _window_sum(ctx, ctx.reshape(planes, [n, c, d, oh * ow]), [kernel[0], 1], [strides[0], 1],
                          [pads[0], 0, pads[3], 0], [dilations[0], 1])
    return ctx.reshape(columns, [n, c, columns.type.shape[2], oh, ow])


def _abs_pow(ctx, x, p):
    a = ctx.op("lz.abs", x)
    if p == 1:
        return a
    if p == 2:
        return ctx.op("lz.mul", x, x)
    return ctx.op("lz.pow", a, ctx.scalar(p, x))


def _root(ctx, s, p):
    if p == 1:
        return s
    if p == 2:
        return ctx.op("lz.sqrt", s)
    return ctx.op("lz.pow", s, ctx.scalar(1 / p, s))


@converter("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def global_pool(ctx):
    x = ctx.input(0)
    axes = list(range(2, ctx.rank(x)))
    if ctx.op_type == "GlobalAveragePool":
        return ctx.op("lz.reduce_mean", x, axes=axes, keepdims=True)
    if ctx.op_type == "GlobalMaxPool":
        return ctx.op("lz.reduce_max", x, axes=axes, keepdims=True)
    p = ctx.attr("p", 2)
    return _root(ctx, ctx.op("lz.reduce_sum", _abs_pow(ctx, x, p), axes=axes, keepdims=True), p)


# --- normalization --------------------------------------------------------------------------------------

def _mean_var(ctx, x, axes):
    """Mean and biased variance over ``axes`` (kept as size 1)."""
    mean = ctx.op("lz.reduce_mean", x, axes=axes, keepdims=True)
    centered = ctx.op("lz.sub", x, mean)
    var = ctx.op("lz.reduce_mean", ctx.op("lz.mul", centered, centered), axes=axes, keepdims=True)
    return mean, centered, var


def _inv_std(ctx, var, epsilon):
    return ctx.op("lz.rsqrt", ctx.op("lz.add", var, ctx.scalar(epsilon, var)))


def _channel(ctx, v, rank, et):
    return ctx.reshape(ctx.cast(v, et), [-1] + [1] * (rank - 2))


@converter("BatchNormalization")
def batch_norm_inference(ctx):
    return batch_norm(ctx, training=0)


@converter("BatchNormalization", since=14)
def batch_norm_training_mode(ctx):
    return batch_norm(ctx, training=ctx.attr("training_mode", 0))


def batch_norm(ctx, training):
    """Inference: ``lz.batch_norm`` with the running statistics; training: the batch's, and the new
    running ones as outputs 1 and 2."""
    x, scale, bias, mean, var = (ctx.input(i) for i in range(5))
    epsilon = ctx.attr("epsilon", 1e-5)
    momentum = ctx.attr("momentum", 0.9)
    et = ctx.dtype(x)
    if not training:
        params = [ctx.cast(v, et) for v in (scale, bias, mean, var)]
        if ctx.rank(x) == 1:
            raise ctx.error(f"input must have rank at least 2, got {x.type}")
        return ctx.op("lz.batch_norm", x, *params, epsilon=epsilon)
    rank = ctx.rank(x)
    axes = [0] + list(range(2, rank))
    batch_mean, centered, batch_var = _mean_var(ctx, x, axes)
    y = ctx.op("lz.mul", centered, _inv_std(ctx, batch_var, epsilon))
    y = ctx.op("lz.add", ctx.op("lz.mul", y, _channel(ctx, scale, rank, et)), _channel(ctx, bias, rank, et))
    flat_mean, flat_var = ctx.reshape(batch_mean, [-1]), ctx.reshape(batch_var, [-1])
    running_mean = ctx.op("lz.add", scaled(ctx, ctx.cast(mean, et), momentum), scaled(ctx, flat_mean, 1 - momentum))
    running_var = ctx.op("lz.add", scaled(ctx, ctx.cast(var, et), momentum), scaled(ctx, flat_var, 1 - momentum))
    return [y, running_mean, running_var]


@converter("InstanceNormalization")
def instance_norm(ctx):
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    rank = ctx.rank(x)
    _, centered, var = _mean_var(ctx, x, list(range(2, rank)))
    y = ctx.op("lz.mul", centered, _inv_std(ctx, var, ctx.attr("epsilon", 1e-5)))
    et = ctx.dtype(x)
    return ctx.op("lz.add", ctx.op("lz.mul", y, _channel(ctx, scale, rank, et)), _channel(ctx, bias, rank, et))


@converter("GroupNormalization")
def group_norm(ctx):
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.input(2)
    groups = ctx.attr("num_groups")
    epsilon = ctx.attr("epsilon", 1e-5)
    stash = ctx.attr("stash_type", 1)
    shape = ctx.shape(x)
    n, c = shape[:2]
    et = ctx.dtype(x)
    work = ctx.cast(x, F32) if stash == 1 and et != F32 and et.is_float and et.bitwidth < 32 else x
    grouped = ctx.reshape(work, [n, groups, -1])
    _, centered, var = _mean_var(ctx, grouped, [2])
    y = ctx.reshape(ctx.op("lz.mul", centered, _inv_std(ctx, var, epsilon)), shape)
    y = ctx.cast(y, et)
    rank = len(shape)
    if scale.type.shape[0] == c:
        s, b = _channel(ctx, scale, rank, et), _channel(ctx, bias, rank, et)
    else:  # opset 18: one scale and bias per group
        per = [c // groups] * groups
        s = _channel(ctx, ctx.op("lz.gather", scale, ctx.constant(np.repeat(np.arange(groups), per))), rank, et)
        b = _channel(ctx, ctx.op("lz.gather", bias, ctx.constant(np.repeat(np.arange(groups), per))), rank, et)
    return ctx.op("lz.add", ctx.op("lz.mul", y, s), b)


def _stashed(ctx, x):
    """The type LayerNormalization and RMSNormalization compute in (stash_type 1: float32)."""
    stash = ctx.attr("stash_type", 1)
    et = ctx.dtype(x)
    if stash == 1 and et.is_float and et.bitwidth < 32:
        return F32
    return et


@converter("LayerNormalization")
def layer_norm(ctx):
    x, scale, bias = ctx.input(0), ctx.input(1), ctx.optional(2)
    rank = ctx.rank(x)
    axis = axis_of(ctx, ctx.attr("axis", -1), rank)
    epsilon = ctx.attr("epsilon", 1e-5)
    et = ctx.dtype(x)
    work = _stashed(ctx, x)
    axes = list(range(axis, rank))
    mean, centered, var = _mean_var(ctx, ctx.cast(x, work), axes)
    inv_std = _inv_std(ctx, var, epsilon)
    y = ctx.cast(ctx.op("lz.mul", centered, inv_std), et)
    y = ctx.op("lz.mul", y, ctx.cast(scale, et))
    if bias is not None:
        y = ctx.op("lz.add", y, ctx.cast(bias, et))
    return [y, ctx.cast(mean, et), ctx.cast(inv_std, et)]


@converter("RMSNormalization")
def rms_norm(ctx):
    x, scale = ctx.input(0), ctx.input(1)
    rank = ctx.rank(x)
    axis = axis_of(ctx, ctx.attr("axis", -1), rank)
    epsilon = ctx.attr("epsilon", 1e-5)
    et = ctx.dtype(x)
    w = ctx.cast(x, _stashed(ctx, x))
    mean_square = ctx.op("lz.reduce_mean", ctx.op("lz.mul", w, w), axes=list(range(axis, rank)), keepdims=True)
    y = ctx.cast(ctx.op("lz.mul", w, _inv_std(ctx, mean_square, epsilon)), et)
    return ctx.op("lz.mul", y, ctx.cast(scale, et))


@converter("MeanVarianceNormalization")
def mean_variance_norm(ctx):
    x = ctx.input(0)
    axes = [axis_of(ctx, a, ctx.rank(x)) for a in ctx.attr("axes", [0, 2, 3])]
    mean = ctx.op("lz.reduce_mean", x, axes=axes, keepdims=True)
    mean_square = ctx.op("lz.reduce_mean", ctx.op("lz.mul", x, x), axes=axes, keepdims=True)
    std = ctx.op("lz.sqrt", ctx.op("lz.sub", mean_square, ctx.op("lz.mul", mean, mean)))
    return ctx.op("lz.div", ctx.op("lz.sub", x, mean), ctx.op("lz.add", std, ctx.scalar(1e-9, x)))


@converter("LpNormalization")
def lp_norm(ctx):
    x = ctx.input(0)
    axis = axis_of(ctx, ctx.attr("axis", -1), ctx.rank(x))
    p = ctx.attr("p", 2)
    if p not in (1, 2):
        raise ctx.error(f"attribute 'p' must be 1 or 2, got {p}")
    norm = _root(ctx, ctx.op("lz.reduce_sum", _abs_pow(ctx, x, p), axes=[axis], keepdims=True), p)
    zero = ctx.op("lz.cmp", norm, ctx.scalar(0, norm), predicate="eq")  # 0 / 0 gives 0
    return ctx.op("lz.select", zero, ctx.scalar(0, x), ctx.op("lz.div", x, norm))


@converter("LRN")
def lrn(ctx):
    """``x / (bias + alpha/size * sum of squares over a window of channels) ^ beta``; the window sum
    is a convolution of the squares (channels as rows) with a column of ones."""
    x = ctx.input(0)
    alpha, beta, bias, size = ctx.attr("alpha", 1e-4), ctx.attr("beta", 0.75), ctx.attr("bias", 1.0), ctx.attr("size")
    shape = ctx.shape(x)
    n, c = shape[:2]
    rest = product(shape[2:])
    squares = ctx.reshape(ctx.op("lz.mul", x, x), [n, 1, c, rest])
    ones = ctx.constant(np.ones((1, 1, size, 1)), ctx.dtype(x))
    before, after = (size - 1) // 2, math.ceil((size - 1) / 2)
    sums = ctx.reshape(ctx.op("lz.conv2d", squares, ones, pads=[before, 0, after, 0]), shape)
    denominator = ctx.op("lz.add", ctx.scalar(bias, x), scaled(ctx, sums, alpha / size))
    return ctx.op("lz.div", x, ctx.op("lz.pow", denominator, ctx.scalar(beta, x)))


# --- softmax --------------------------------------------------------------------------------------------

# ONNX operator -> lz op (None: Hardmax, a comparison with the argmax)
_SOFTMAX_FAMILY = {"Softmax": "lz.softmax", "LogSoftmax": "lz.log_softmax", "Hardmax": None}


@converter(*_SOFTMAX_FAMILY)
def softmax_flattened(ctx):
    """Before opset 13: over all dims from ``axis`` on, as one."""
    name = _SOFTMAX_FAMILY[ctx.op_type]
    x = ctx.input(0)
    axis = axis_of(ctx, ctx.attr("axis", 1), ctx.rank(x))
    shape = ctx.shape(x)
    flat = ctx.reshape(x, [product(shape[:axis]), product(shape[axis:])])
    y = ctx.op(name, flat, axis=1) if name else _hardmax(ctx, flat, 1)
    return ctx.reshape(y, shape)


@converter(*_SOFTMAX_FAMILY, since=13)
def softmax(ctx):
    name = _SOFTMAX_FAMILY[ctx.op_type]
    x = ctx.input(0)
    axis = axis_of(ctx, ctx.attr("axis", -1), ctx.rank(x))
    return ctx.op(name, x, axis=axis) if name else _hardmax(ctx, x, axis)


def _hardmax(ctx, x, axis):
    index = ctx.op("lz.argmax", x, axis=axis, keepdims=True)
    view = [1] * ctx.rank(x)
    view[axis] = ctx.shape(x)[axis]
    hit = ctx.op("lz.cmp", index, ctx.constant(np.arange(view[axis], dtype=np.int64).reshape(view)), predicate="eq")
    return ctx.cast(hit, ctx.dtype(x))

