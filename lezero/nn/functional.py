"""``lz.nn.functional``: layers and losses as functions, PyTorch's names and semantics.

Each function that is more than one lz op is one ``EagerOp`` whose ``emit`` builds its whole IR
(``linear`` is transpose + matmul + add, ``cross_entropy`` is log_softmax + a one-hot pick + a
masked mean, training ``batch_norm`` returns the batch statistics too): one dispatch, compiled
and fused as a unit, and replayed as the same IR by ``backward`` and ``trace``.
"""
from __future__ import annotations

import inspect as _inspect
import math

import numpy as np

from lezero.eager import dtypes as _dt
from lezero.eager.core import accepting_arrays as _accepting_arrays, apply, apply1 as _apply1, apply2 as _apply2, cast_to as _cast_to, wrap as _wrap
from lezero.eager.creation import default_generator
from lezero.eager.device_arrays import kind as _kind
from lezero.eager.dispatch import EagerOp, constant_of as _constant_of
from lezero.eager.functions import where
from lezero.eager.tensor import Tensor
from lezero.ir.types import ELEMENT_TYPES
# issue 19's functions, each beside its modules (they import nothing of this file)
from lezero.nn.activation import (celu, elu, glu, hardshrink, hardsigmoid, hardswish, hardtanh,  # noqa: F401
                                  logsigmoid, mish, prelu, selu, softshrink, softsign, tanhshrink, threshold)
from lezero.nn.convolution import conv1d, conv2d, conv3d, conv_transpose1d, conv_transpose2d, ntuple  # noqa: F401
from lezero.nn.embedding_bag import embedding_bag  # noqa: F401
from lezero.nn.normalization import group_norm, instance_norm, rms_norm  # noqa: F401
from lezero.nn.padding import pad  # noqa: F401
from lezero.nn.resampling import interpolate, pixel_shuffle, pixel_unshuffle, upsample  # noqa: F401


def _pair(v, what: str = "value") -> tuple:
    return ntuple(v, 2, what)


def _const(b, value, like) -> object:
    """A rank-0 constant of ``like``'s element type."""
    return _constant_of(b, value, like.type.element_type)


# --- activations -----------------------------------------------------------------------------------------

def relu(x: Tensor, inplace: bool = False) -> Tensor:
    return x.relu_() if inplace else x.relu()


def relu6(x: Tensor) -> Tensor:
    return x.clamp(0, 6)


def sigmoid(x: Tensor) -> Tensor:
    return x.sigmoid()


def tanh(x: Tensor) -> Tensor:
    return x.tanh()


def _emit_gelu(b, attrs, x):
    return [b.op("lz.gelu", x, approximate=attrs["approximate"])]


_GELU = EagerOp("gelu", _emit_gelu)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    if approximate not in ("none", "tanh"):
        raise ValueError(f"approximate argument must be either none or tanh, got {approximate!r}")
    return _apply1(_GELU, (("approximate", approximate),), x)


def silu(x: Tensor) -> Tensor:
    return x * x.sigmoid()


def _emit_leaky_relu(b, attrs, x):
    slope = _const(b, attrs["slope"], x)
    return [b.op("lz.select", b.op("lz.cmp", x, _const(b, 0, x), predicate="gt"), x, b.op("lz.mul", x, slope))]


_LEAKY_RELU = EagerOp("leaky_relu", _emit_leaky_relu)


def leaky_relu(x: Tensor, negative_slope: float = 0.01) -> Tensor:
    return _apply1(_LEAKY_RELU, (("slope", float(negative_slope)),), x)


def softplus(x: Tensor, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    scaled = x * beta
    return where(scaled > threshold, x, (scaled.exp().log1p()) / beta)


def softmax(x: Tensor, dim: int, dtype=None) -> Tensor:
    return (x if dtype is None else x.to(dtype)).softmax(dim)


def log_softmax(x: Tensor, dim: int, dtype=None) -> Tensor:
    return (x if dtype is None else x.to(dtype)).log_softmax(dim)


# --- linear ------------------------------------------------------------------------------------------------

def _emit_linear(b, attrs, x, w, *bias):
    y = b.op("lz.matmul", x, b.op("lz.transpose", w, perm=[1, 0]))
    if bias:
        y = b.op("lz.add", y, bias[0])
    return [y]


_LINEAR = EagerOp("linear", _emit_linear)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias``; ``weight`` is ``out x in`` as in PyTorch."""
    return apply(_LINEAR, (), x, weight) if bias is None else apply(_LINEAR, (), x, weight, bias)


# --- pooling ------------------------------------------------------------------------------------------------

def _emit_pool(b, attrs, x):
    return [b.op(attrs["op"], x, **{k: v for k, v in attrs.items() if k != "op"})]


_POOL = EagerOp("pool2d", _emit_pool)


def _pool_attrs(kernel_size, stride, padding) -> tuple:
    kernel = _pair(kernel_size, "kernel_size")
    stride = kernel if stride is None or (not isinstance(stride, int) and len(stride) == 0) else _pair(stride, "stride")
    ph, pw = _pair(padding, "padding")
    if ph * 2 > kernel[0] or pw * 2 > kernel[1]:
        raise RuntimeError(f"pad should be at most half of effective kernel size, but got pad={max(ph, pw)}, "
                           f"kernel_size={max(kernel)}")
    return kernel, stride, (ph, pw, ph, pw)


def _pooled(x: Tensor, attrs: tuple) -> Tensor:
    unbatched = x.ndim == 3
    y = _apply1(_POOL, attrs, x.unsqueeze(0) if unbatched else x)
    return y.squeeze(0) if unbatched else y


def max_pool2d(x: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor:
    if return_indices:
        raise NotImplementedError("max_pool2d(return_indices=True) is not supported")
    kernel, stride, pads = _pool_attrs(kernel_size, stride, padding)
    return _pooled(x, (("op", "lz.max_pool2d"), ("kernel", kernel), ("strides", stride), ("pads", pads),
                       ("dilations", _pair(dilation, "dilation")), ("ceil_mode", bool(ceil_mode))))


def avg_pool2d(x: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True, divisor_override=None) -> Tensor:
    if divisor_override is not None:
        raise NotImplementedError("avg_pool2d(divisor_override=...) is not supported")
    kernel, stride, pads = _pool_attrs(kernel_size, stride, padding)
    return _pooled(x, (("op", "lz.avg_pool2d"), ("kernel", kernel), ("strides", stride), ("pads", pads),
                       ("ceil_mode", bool(ceil_mode)), ("count_include_pad", bool(count_include_pad))))


def _emit_adaptive_avg_pool(b, attrs, x):
    """PyTorch's windows ``[floor(i*H/OH), ceil((i+1)*H/OH))``: each output cell's mean, joined."""
    _, _, h, w = x.type.shape
    oh, ow = attrs["output_size"]
    rows = []
    for i in range(oh):
        h0, h1 = (i * h) // oh, -((-(i + 1) * h) // oh)
        cells = []
        for j in range(ow):
            w0, w1 = (j * w) // ow, -((-(j + 1) * w) // ow)
            window = b.op("lz.slice", x, starts=[h0, w0], ends=[h1, w1], axes=[2, 3])
            cells.append(b.op("lz.reduce_mean", window, axes=[2, 3], keepdims=True))
        rows.append(cells[0] if len(cells) == 1 else b.op("lz.concat", *cells, axis=3))
    return [rows[0] if len(rows) == 1 else b.op("lz.concat", *rows, axis=2)]


def _emit_global_avg_pool(b, attrs, x):
    return [b.op("lz.reduce_mean", x, axes=[2, 3], keepdims=True)]


_ADAPTIVE_AVG_POOL = EagerOp("adaptive_avg_pool2d", _emit_adaptive_avg_pool)
_GLOBAL_AVG_POOL = EagerOp("adaptive_avg_pool2d", _emit_global_avg_pool)


def adaptive_avg_pool2d(x: Tensor, output_size) -> Tensor:
    unbatched = x.ndim == 3
    if unbatched:
        x = x.unsqueeze(0)
    h, w = x.shape[2:]
    size = output_size if isinstance(output_size, (tuple, list)) else (output_size, output_size)
    oh, ow = (h if size[0] is None else int(size[0])), (w if size[1] is None else int(size[1]))
    if (oh, ow) == (1, 1):
        y = _apply1(_GLOBAL_AVG_POOL, (), x)
    elif h % oh == 0 and w % ow == 0:
        y = avg_pool2d(x, (h // oh, w // ow))
    else:
        y = _apply1(_ADAPTIVE_AVG_POOL, (("output_size", (oh, ow)),), x)
    return y.squeeze(0) if unbatched else y


def _pool1d(pool2d, x: Tensor, name: str, *args) -> Tensor:
    """A 2-D pool over a unit height: ``N x C x L`` (or ``C x L``) as ``N x C x 1 x L`` (a view)."""
    if x.ndim not in (2, 3):
        raise RuntimeError(f"{name}: expected a 2-D (unbatched) or 3-D (batched) input, got shape {list(x.shape)}")
    return pool2d(x.unsqueeze(-2), *args).squeeze(-2)


def _single(v, what: str) -> int:
    return ntuple(v, 1, what)[0]


def max_pool1d(x: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
               return_indices: bool = False) -> Tensor:
    k = _single(kernel_size, "kernel_size")
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else _single(stride, "stride")
    return _pool1d(max_pool2d, x, "max_pool1d", (1, k), (1, s), (0, _single(padding, "padding")),
                   (1, _single(dilation, "dilation")), ceil_mode, return_indices)


def avg_pool1d(x: Tensor, kernel_size, stride=None, padding=0, ceil_mode: bool = False,
               count_include_pad: bool = True) -> Tensor:
    k = _single(kernel_size, "kernel_size")
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else _single(stride, "stride")
    return _pool1d(avg_pool2d, x, "avg_pool1d", (1, k), (1, s), (0, _single(padding, "padding")), ceil_mode,
                   count_include_pad)


def adaptive_avg_pool1d(x: Tensor, output_size) -> Tensor:
    return _pool1d(adaptive_avg_pool2d, x, "adaptive_avg_pool1d", (1, _single(output_size, "output_size")))


# --- normalization ------------------------------------------------------------------------------------------

def _emit_layer_norm(b, attrs, x, *params):
    et = x.type.element_type.numpy_dtype
    shape = attrs["normalized_shape"]
    scale = params[0] if attrs["weight"] else b.constant(np.ones(shape, et))
    bias = params[int(attrs["weight"])] if attrs["bias"] else b.constant(np.zeros(shape, et))
    return [b.op("lz.layer_norm", x, scale, bias, axis=-len(shape), epsilon=attrs["eps"])]


_LAYER_NORM = EagerOp("layer_norm", _emit_layer_norm)


def layer_norm(x: Tensor, normalized_shape, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(x.shape[x.ndim - len(shape):]) != shape:
        raise RuntimeError(f"Given normalized_shape={list(shape)}, expected input with shape [*, "
                           f"{', '.join(map(str, shape))}], but got input of size{list(x.shape)}")
    params = [p for p in (weight, bias) if p is not None]
    attrs = (("normalized_shape", shape), ("weight", weight is not None), ("bias", bias is not None),
             ("eps", float(eps)))
    return apply(_LAYER_NORM, attrs, x, *params)


def _emit_batch_norm_train(b, attrs, x, *params):
    """Normalized by the batch's statistics (mean, biased variance); also returns the mean and the
    unbiased variance (C), for the running statistics.  The latter's ``n / (n - 1)`` comes from a
    count in the graph, not a Python number, so a traced step stays right at any batch size (the
    count of ``x * 0 + 1`` is nan only where the variance is)."""
    axes = [0] + list(range(2, x.type.rank))
    column = [1, -1] + [1] * (x.type.rank - 2)
    mean = b.op("lz.reduce_mean", x, axes=axes, keepdims=True)
    centered = b.op("lz.sub", x, mean)
    var = b.op("lz.reduce_mean", b.op("lz.mul", centered, centered), axes=axes, keepdims=True)
    wide = ELEMENT_TYPES["f64" if x.type.element_type.name == "f64" else "f32"]  # f16 counts overflow
    zeros = b.op("lz.cast", b.op("lz.mul", x, _const(b, 0, x)), to=wide)
    count = b.op("lz.reduce_sum", b.op("lz.add", zeros, _const(b, 1, zeros)), axes=axes, keepdims=True)
    at_least_one = b.op("lz.max", b.op("lz.sub", count, _const(b, 1, count)), _const(b, 1, count))
    unbiased = b.op("lz.mul", var, b.op("lz.cast", b.op("lz.div", count, at_least_one), to=x.type.element_type))
    y = b.op("lz.mul", centered, b.op("lz.rsqrt", b.op("lz.add", var, _const(b, attrs["eps"], x))))
    if attrs["affine"]:
        w, bias = params
        y = b.op("lz.add", b.op("lz.mul", y, b.op("lz.reshape", w, shape=column)),
                 b.op("lz.reshape", bias, shape=column))
    c = x.type.shape[1]
    return [y, b.op("lz.reshape", mean, shape=[c]), b.op("lz.reshape", unbiased, shape=[c])]


def _emit_batch_norm_eval(b, attrs, x, mean, var, *params):
    et = x.type.element_type.numpy_dtype
    c = x.type.shape[1]
    w, bias = params if attrs["affine"] else (b.constant(np.ones(c, et)), b.constant(np.zeros(c, et)))
    return [b.op("lz.batch_norm", x, w, bias, mean, var, epsilon=attrs["eps"])]


_BATCH_NORM_TRAIN = EagerOp("batch_norm", _emit_batch_norm_train, num_results=3)
_BATCH_NORM_EVAL = EagerOp("batch_norm", _emit_batch_norm_eval)


def batch_norm(x: Tensor, running_mean: Tensor | None, running_var: Tensor | None, weight: Tensor | None = None,
               bias: Tensor | None = None, training: bool = False, momentum: "float | Tensor | None" = 0.1,
               eps: float = 1e-5) -> Tensor:
    """Channels are dim 1.  Training (or without running statistics): normalize by the batch's
    mean and biased variance and update the running ones (unbiased variance) in place, as PyTorch
    (``momentum`` may be a rank-0 tensor: ``BatchNorm``'s cumulative average)."""
    if (weight is None) != (bias is None):
        raise NotImplementedError("batch_norm needs both weight and bias, or neither")
    affine = weight is not None
    params = (weight, bias) if affine else ()
    attrs = (("eps", float(eps)), ("affine", affine))
    if training or running_mean is None:
        count = x.numel() // x.shape[1]
        if count <= 1 and training:
            raise ValueError(f"Expected more than 1 value per channel when training, got input size {list(x.shape)}")
        y, mean, unbiased = apply(_BATCH_NORM_TRAIN, attrs, x, *params)
        if training and running_mean is not None:
            from lezero.eager.autograd import no_grad
            with no_grad():  # nothing records a gradient; a jit trace records the updates
                m = 0.1 if momentum is None else momentum
                running_mean.mul_(1 - m).add_(mean * m)
                running_var.mul_(1 - m).add_(unbiased * m)
        return y
    return apply(_BATCH_NORM_EVAL, attrs, x, running_mean, running_var, *params)


# --- dropout and embedding -----------------------------------------------------------------------------------

def _emit_dropout(b, attrs, x, state):
    """``x / (1 - p)`` where a uniform number of ``state``'s draw is at least ``p``, else 0: one
    number per element, or with ``feature_dims`` one per (sample, channel), broadcast over the last
    ``feature_dims`` dims (the uniforms are f64 for f64 data, else f32: an f16 uniform could round
    up to 1)."""
    et = x.type.element_type
    features = attrs["feature_dims"]
    rank = x.type.rank
    like = x if not features else b.op("lz.slice", x, starts=[0] * features, ends=[1] * features,
                                       axes=list(range(rank - features, rank)))
    u = b.op("lz.random_uniform", state, like, dtype=ELEMENT_TYPES["f64" if et.name == "f64" else "f32"])
    keep = b.op("lz.cmp", u, _const(b, attrs["p"], u), predicate="ge")
    scaled = b.op("lz.mul", x, _const(b, 1 / (1 - attrs["p"]), x))
    return [b.op("lz.select", keep, scaled, _const(b, 0, x))]


_DROPOUT = EagerOp("dropout", _emit_dropout)


def _dropout(x: Tensor, p: float, training: bool, inplace: bool, generator, feature_dims: int = 0) -> Tensor:
    if not 0 <= p <= 1:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0:
        return x
    if not x.is_floating_point():
        raise RuntimeError(f"dropout needs a floating point tensor, got {x.dtype}")
    if p == 1:
        out = x * 0
    else:
        state = (generator or default_generator).random_state(x._data)
        out = _apply2(_DROPOUT, (("p", float(p)), ("feature_dims", feature_dims)), x, state)
    return x.copy_(out) if inplace else out


def dropout(x: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False, generator=None) -> Tensor:
    """Zero each element with probability ``p`` and scale the rest by ``1 / (1 - p)``.  The mask is
    ``lz.random_uniform`` of one draw of the generator (``lz.manual_seed``): an op of the graph,
    so a traced or compiled step draws a new mask at every call, the same one the eager op would."""
    return _dropout(x, p, training, inplace, generator)


def _feature_dropout(x: Tensor, p: float, training: bool, inplace: bool, feature_dims: int, name: str) -> Tensor:
    """Dropout of whole channels of an ``N x C x <feature_dims>`` (or unbatched ``C x ...``) tensor."""
    if x.dim() not in (feature_dims + 1, feature_dims + 2):
        raise RuntimeError(f"{name}: expected a {feature_dims + 1}-D or {feature_dims + 2}-D input, got a "
                           f"{x.dim()}-D input of shape {list(x.shape)}")
    return _dropout(x, p, training, inplace, None, feature_dims)


def dropout1d(x: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    return _feature_dropout(x, p, training, inplace, 1, "dropout1d")


def dropout2d(x: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    return _feature_dropout(x, p, training, inplace, 2, "dropout2d")


def dropout3d(x: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    return _feature_dropout(x, p, training, inplace, 3, "dropout3d")


def _emit_embedding(b, attrs, weight, indices):
    if attrs["padding_idx"] is not None:
        rows = weight.type.shape[0]
        keep = np.ones((rows, 1), weight.type.element_type.numpy_dtype)
        keep[attrs["padding_idx"]] = 0  # the padding row gets no gradient
        weight = b.op("lz.mul", weight, b.constant(keep))
    # PyTorch's range, [0, rows): checked by the gather, in compiled code too
    return [b.op("lz.gather", weight, indices, axis=0, negative_indices=False)]


_EMBEDDING = EagerOp("embedding", _emit_embedding)


def embedding(indices: Tensor, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """Rows of ``weight`` picked by ``indices`` (a gather; its gradient adds each row's
    cotangents back).  The ``padding_idx`` row reads as zeros and gets no gradient.  An index
    outside ``[0, rows)`` raises ``IndexError`` when the gather runs (eager, traced or compiled)."""
    if _kind(indices._data) not in "iu":
        raise RuntimeError(f"Expected tensor for argument #1 'indices' to have one of the following scalar types: "
                           f"Long, Int; but got {indices.dtype} instead")
    n = weight.shape[0]
    if padding_idx is not None:
        padding_idx = int(padding_idx) % n
    return _apply2(_EMBEDDING, (("padding_idx", padding_idx),), weight, _cast_to(indices, _dt.int64))


def _emit_one_hot(b, attrs, indices):
    n = attrs["num_classes"]
    iota = b.constant(np.arange(n, dtype=np.int64))
    expanded = b.op("lz.reshape", indices, shape=list(indices.type.shape) + [1])
    return [b.op("lz.cast", b.op("lz.cmp", expanded, iota, predicate="eq"), to=ELEMENT_TYPES["i64"])]


_ONE_HOT = EagerOp("one_hot", _emit_one_hot)


def one_hot(indices: Tensor, num_classes: int = -1) -> Tensor:
    if num_classes < 0:
        num_classes = int(np.asarray(indices).max()) + 1 if indices.numel() else 0
    return _apply1(_ONE_HOT, (("num_classes", int(num_classes)),), _cast_to(indices, _dt.int64))


# --- losses ---------------------------------------------------------------------------------------------------

_REDUCTIONS = ("none", "mean", "sum")


def _check_reduction(reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")


def _emit_nll(b, attrs, x, target, *weight):
    """``-x[n, target[n], ...]`` picked through a one-hot mask (``select``, so a -inf elsewhere
    cannot make a nan), weighted, reduced; ignored targets count for nothing.  The targets that
    are not ignored go through an ``lz.gather`` of the class numbers, which checks that they are
    in ``[0, classes)`` where it runs (eager, traced or compiled: ``IndexError``)."""
    if attrs["log_softmax"]:
        x = b.op("lz.log_softmax", x, axis=1)
    rank = x.type.rank
    c = x.type.shape[1]
    t_shape = target.type.shape
    ignore = b.constant(np.asarray(attrs["ignore_index"], np.int64))
    valid = b.op("lz.cmp", target, ignore, predicate="ne")  # ignore_index may be a class: mask it out
    kept = b.op("lz.select", valid, target, b.constant(np.asarray(0, np.int64)))
    checked = b.op("lz.gather", b.constant(np.arange(c, dtype=np.int64)), kept, axis=0, negative_indices=False)
    t = b.op("lz.reshape", checked, shape=[t_shape[0], 1] + list(t_shape[1:]))
    iota = b.constant(np.arange(c, dtype=np.int64).reshape([1, c] + [1] * (rank - 2)))
    hit = b.op("lz.and", b.op("lz.cmp", t, iota, predicate="eq"),
               b.op("lz.reshape", valid, shape=[t_shape[0], 1] + list(t_shape[1:])))
    zero = _const(b, 0, x)
    picked = b.op("lz.reduce_sum", b.op("lz.select", hit, x, zero), axes=[1])
    loss = b.op("lz.neg", picked)
    et = x.type.element_type
    if weight:
        w = b.op("lz.reshape", weight[0], shape=[1, c] + [1] * (rank - 2))
        per_target = b.op("lz.reduce_sum", b.op("lz.select", hit, w, zero), axes=[1])
        loss = b.op("lz.mul", loss, per_target)
    else:
        per_target = b.op("lz.cast", valid, to=et)
    smoothing = attrs["label_smoothing"]
    if smoothing:
        # (1 - e) * nll + e * mean over classes of -x, on the targets not ignored
        smooth = b.op("lz.mul", b.op("lz.neg", b.op("lz.reduce_mean", x, axes=[1])), per_target)
        loss = b.op("lz.add", b.op("lz.mul", loss, _const(b, 1 - smoothing, x)),
                    b.op("lz.mul", smooth, _const(b, smoothing, x)))
    if attrs["reduction"] == "none":
        return [loss]
    total = b.op("lz.reduce_sum", loss)
    if attrs["reduction"] == "sum":
        return [total]
    return [b.op("lz.div", total, b.op("lz.reduce_sum", per_target))]


_NLL = EagerOp("nll_loss", _emit_nll)


def _class_loss(x: Tensor, target: Tensor, weight, ignore_index: int, reduction: str, log_softmax: bool,
                label_smoothing: float = 0.0) -> Tensor:
    _check_reduction(reduction)
    if x.ndim < 2:
        raise NotImplementedError("class losses on unbatched (1-D) input are not supported: add a batch dim")
    if _kind(target._data) not in "iu":
        raise NotImplementedError("class losses take class indices (int64 targets); probability targets are not "
                                  "supported")
    if target.shape != (x.shape[0],) + tuple(x.shape[2:]):
        raise ValueError(f"Expected target size {[x.shape[0]] + list(x.shape[2:])}, got {list(target.shape)}")
    if weight is not None and label_smoothing:
        raise NotImplementedError("label_smoothing with class weights is not supported")
    attrs = (("log_softmax", log_softmax), ("ignore_index", int(ignore_index)), ("reduction", reduction),
             ("label_smoothing", float(label_smoothing)))
    target = _cast_to(target, _dt.int64)
    if weight is not None:
        return apply(_NLL, attrs, x, target, _cast_to(weight, x.dtype))
    return apply(_NLL, attrs, x, target)


def cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,  # noqa: A002
                  reduction: str = "mean", label_smoothing: float = 0.0) -> Tensor:
    """``log_softmax`` over dim 1, then ``nll_loss``; targets are int64 class indices."""
    return _class_loss(input, target, weight, ignore_index, reduction, True, label_smoothing)


def nll_loss(input: Tensor, target: Tensor, weight: Tensor | None = None, ignore_index: int = -100,  # noqa: A002
             reduction: str = "mean") -> Tensor:
    return _class_loss(input, target, weight, ignore_index, reduction, False)


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    _check_reduction(reduction)
    return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.mean()


def mse_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:  # noqa: A002
    diff = input - target
    return _reduce(diff * diff, reduction)


def l1_loss(input: Tensor, target: Tensor, reduction: str = "mean") -> Tensor:  # noqa: A002
    return _reduce((input - target).abs(), reduction)


def _emit_bce_logits(b, attrs, x, t, *extra):
    """PyTorch's stable form: ``(1 - t) x + lw (log(e^-m + e^(-x-m)) + m)``, ``m = max(-x, 0)``,
    ``lw = 1 + (pos_weight - 1) t``."""
    extra = list(extra)
    one, zero = _const(b, 1, x), _const(b, 0, x)
    neg_x = b.op("lz.neg", x)
    m = b.op("lz.max", neg_x, zero)
    soft = b.op("lz.add", b.op("lz.log", b.op("lz.add", b.op("lz.exp", b.op("lz.neg", m)),
                                              b.op("lz.exp", b.op("lz.sub", neg_x, m)))), m)
    if attrs["pos_weight"]:
        pw = extra.pop()
        soft = b.op("lz.mul", soft, b.op("lz.add", one, b.op("lz.mul", b.op("lz.sub", pw, one), t)))
    loss = b.op("lz.add", b.op("lz.mul", b.op("lz.sub", one, t), x), soft)
    if attrs["weight"]:
        loss = b.op("lz.mul", loss, extra.pop())
    if attrs["reduction"] == "none":
        return [loss]
    op = "lz.reduce_sum" if attrs["reduction"] == "sum" else "lz.reduce_mean"
    return [b.op(op, loss)]


_BCE_LOGITS = EagerOp("binary_cross_entropy_with_logits", _emit_bce_logits)


def binary_cross_entropy_with_logits(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                                     reduction: str = "mean", pos_weight: Tensor | None = None) -> Tensor:
    _check_reduction(reduction)
    if target.shape != input.shape:
        raise ValueError(f"Target size ({list(target.shape)}) must be the same as input size ({list(input.shape)})")
    target = _cast_to(target, input.dtype)
    extra = [_cast_to(w, input.dtype) for w in (weight, pos_weight) if w is not None]
    attrs = (("weight", weight is not None), ("pos_weight", pos_weight is not None), ("reduction", reduction))
    return apply(_BCE_LOGITS, attrs, input, target, *extra)


def binary_cross_entropy(input: Tensor, target: Tensor, weight: Tensor | None = None,  # noqa: A002
                         reduction: str = "mean") -> Tensor:
    """``-(t log p + (1 - t) log(1 - p))``, each log clamped at -100 as PyTorch's."""
    log_p = input.log().clamp(min=-100)
    log_q = (1 - input).log().clamp(min=-100)
    loss = -(target * log_p + (1 - target) * log_q)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def smooth_l1_loss(input: Tensor, target: Tensor, reduction: str = "mean", beta: float = 1.0) -> Tensor:  # noqa: A002
    d = (input - target).abs()
    loss = where(d < beta, 0.5 * d * d / beta, d - 0.5 * beta) if beta > 0 else d
    return _reduce(loss, reduction)


# --- attention ---------------------------------------------------------------------------------------------------

def scaled_dot_product_attention(query: Tensor, key: Tensor, value: Tensor, attn_mask: Tensor | None = None,
                                 dropout_p: float = 0.0, is_causal: bool = False, scale: float | None = None) -> Tensor:
    """``softmax(q k^T * scale + mask) v`` over the last two dims; a boolean mask keeps where true."""
    l, s = query.shape[-2], key.shape[-2]
    scale = 1 / math.sqrt(query.shape[-1]) if scale is None else scale
    scores = query.matmul(key.transpose(-2, -1)) * scale
    if is_causal:
        causal = np.tril(np.ones((l, s), bool))
        scores = scores.masked_fill(_wrap(~causal), float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(attn_mask.logical_not(), float("-inf")) if attn_mask.dtype is _dt.bool_ \
            else scores + attn_mask
    weights = scores.softmax(-1)
    if dropout_p:
        weights = dropout(weights, dropout_p)
    return weights.matmul(value)


def normalize(x: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12) -> Tensor:
    return x / x.norm(p, dim, keepdim=True).clamp(min=eps)


# --- arrays of other libraries: keep this block last ---------------------------------------------------------
# Every public function here takes a torch tensor, a numpy array or a DLPack array wherever it takes a Tensor
# (lezero.eager.core.accepting_arrays: one class lookup per Tensor argument when none is foreign).
for _name, _function in list(globals().items()):
    if not _name.startswith("_") and _inspect.isfunction(_function) and _function.__module__.startswith("lezero.nn"):
        globals()[_name] = _accepting_arrays(_function)
