"""Layers with PyTorch's constructors, parameter names, shapes and default initializations."""
from __future__ import annotations

import math

from lezero.eager import dtypes as _dt
from lezero.eager.creation import empty, ones, zeros
from lezero.eager.tensor import Tensor
import lezero.nn.functional as F
import lezero.nn.init as init
from lezero.nn.module import Module, Parameter
from lezero.nn.normalization import NormBase


def _float_dtype(dtype):
    return _dt.as_dtype(dtype) if dtype is not None else _dt.get_default_dtype()


class Identity(Module):
    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, x):
        return x


class Linear(Module):
    """``y = x @ weight.T + bias``; ``weight`` is ``out_features x in_features``, initialized
    Kaiming-uniform (a = sqrt(5)), ``bias`` uniform on ``[-1/sqrt(in), 1/sqrt(in)]``."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, device=None, dtype=None):
        super().__init__()
        self.in_features, self.out_features = in_features, out_features
        d = _float_dtype(dtype)
        self.weight = Parameter(empty(out_features, in_features, dtype=d))
        self.bias = Parameter(empty(out_features, dtype=d)) if bias else None
        if not bias:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.kaiming_uniform_(self.weight, a=math.sqrt(5))
        if self.bias is not None:
            fan_in = self.in_features
            bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
            init.uniform_(self.bias, -bound, bound)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}"


class MaxPool2d(Module):
    functional = staticmethod(F.max_pool2d)

    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices: bool = False,
                 ceil_mode: bool = False):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride if stride is not None else kernel_size, padding
        self.dilation, self.return_indices, self.ceil_mode = dilation, return_indices, ceil_mode

    def forward(self, x: Tensor) -> Tensor:
        return type(self).functional(x, self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode,
                                     self.return_indices)

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True,
                 divisor_override=None):
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride if stride is not None else kernel_size, padding
        self.ceil_mode, self.count_include_pad, self.divisor_override = ceil_mode, count_include_pad, divisor_override

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad,
                            self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    functional = staticmethod(F.adaptive_avg_pool2d)

    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, x: Tensor) -> Tensor:
        return type(self).functional(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


class MaxPool1d(MaxPool2d):
    """``MaxPool2d`` over a unit height (``F.max_pool1d``)."""

    functional = staticmethod(F.max_pool1d)


class AvgPool1d(AvgPool2d):
    """``AvgPool2d`` over a unit height (``F.avg_pool1d``); the sizes are 1-tuples, as PyTorch's."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode: bool = False, count_include_pad: bool = True):
        single = F.ntuple
        super().__init__(single(kernel_size, 1), single(stride if stride is not None else kernel_size, 1),
                         single(padding, 1), ceil_mode, count_include_pad)

    def forward(self, x: Tensor) -> Tensor:
        return F.avg_pool1d(x, self.kernel_size, self.stride, self.padding, self.ceil_mode, self.count_include_pad)


class AdaptiveAvgPool1d(AdaptiveAvgPool2d):
    functional = staticmethod(F.adaptive_avg_pool1d)


class _BatchNorm(NormBase):
    """Per-channel (dim 1) normalization: batch statistics in training (updating the running
    ones), running statistics in evaluation."""

    expected_ranks: tuple = ()

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, device=None, dtype=None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device, dtype)

    def forward(self, x: Tensor) -> Tensor:
        if x.ndim not in self.expected_ranks:
            raise ValueError(f"expected {' or '.join(f'{r}D' for r in self.expected_ranks)} input (got {x.ndim}D input)")
        factor = 0.0 if self.momentum is None else self.momentum
        if self.training and self.track_running_stats:
            if self.momentum is None:  # a cumulative moving average: 1 / batches, a tensor (a trace keeps it)
                factor = (self.num_batches_tracked + 1).to(self.running_mean.dtype).reciprocal()
            self.num_batches_tracked.add_(1)
        batch_stats = self.training or self.running_mean is None
        tracked = not self.training or self.track_running_stats
        return F.batch_norm(x, self.running_mean if tracked else None, self.running_var if tracked else None,
                            self.weight, self.bias, batch_stats, factor, self.eps)


class BatchNorm1d(_BatchNorm):
    expected_ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    expected_ranks = (4,)


class LayerNorm(Module):
    """Normalize over the last ``len(normalized_shape)`` dims; ``weight`` ones, ``bias`` zeros."""

    def __init__(self, normalized_shape, eps: float = 1e-5, elementwise_affine: bool = True, bias: bool = True,
                 device=None, dtype=None):
        super().__init__()
        self.normalized_shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        d = _float_dtype(dtype)
        if elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape, dtype=d))
            if bias:
                self.bias = Parameter(zeros(self.normalized_shape, dtype=d))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class Dropout(Module):
    """Zeroes elements with probability ``p`` in training (masks from the seeded generator, drawn
    in the graph: ``F.dropout``)."""

    functional = staticmethod(F.dropout)

    def __init__(self, p: float = 0.5, inplace: bool = False):
        super().__init__()
        if not 0 <= p <= 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p, self.inplace = p, inplace

    def forward(self, x: Tensor) -> Tensor:
        return self.functional(x, self.p, self.training, self.inplace)

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(Dropout):
    """Zeroes whole channels of ``N x C x L`` (or ``C x L``) inputs."""

    functional = staticmethod(F.dropout1d)


class Dropout2d(Dropout):
    """Zeroes whole channels of ``N x C x H x W`` (or ``C x H x W``) inputs."""

    functional = staticmethod(F.dropout2d)


class Dropout3d(Dropout):
    """Zeroes whole channels of ``N x C x D x H x W`` (or ``C x D x H x W``) inputs."""

    functional = staticmethod(F.dropout3d)


class Embedding(Module):
    """``weight`` is ``num_embeddings x embedding_dim``, standard normal (the padding row zero)."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None, device=None,
                 dtype=None, _weight: Tensor | None = None):
        super().__init__()
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            if not -num_embeddings <= padding_idx < num_embeddings:
                raise AssertionError("Padding_idx must be within num_embeddings")
            padding_idx %= num_embeddings
        self.padding_idx = padding_idx
        if _weight is not None:
            self.weight = Parameter(_weight)
        else:
            self.weight = Parameter(empty(num_embeddings, embedding_dim, dtype=_float_dtype(dtype)))
            self.reset_parameters()

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight._data[self.padding_idx] = 0

    def forward(self, indices: Tensor) -> Tensor:
        return F.embedding(indices, self.weight, self.padding_idx)

    @classmethod
    def from_pretrained(cls, embeddings: Tensor, freeze: bool = True, padding_idx: int | None = None) -> "Embedding":
        rows, dim = embeddings.shape
        module = cls(rows, dim, padding_idx, _weight=embeddings)
        module.weight.requires_grad = not freeze
        return module

    def extra_repr(self) -> str:
        s = f"{self.num_embeddings}, {self.embedding_dim}"
        return s + (f", padding_idx={self.padding_idx}" if self.padding_idx is not None else "")


class Flatten(Module):
    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


class Unflatten(Module):
    def __init__(self, dim: int, unflattened_size):
        super().__init__()
        self.dim, self.unflattened_size = dim, tuple(unflattened_size)

    def forward(self, x: Tensor) -> Tensor:
        return x.unflatten(self.dim, self.unflattened_size)


# --- activations --------------------------------------------------------------------------------------------

class ReLU(Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(x)


class ReLU6(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.relu6(x)


class GELU(Module):
    def __init__(self, approximate: str = "none"):
        super().__init__()
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return F.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Sigmoid(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.sigmoid()


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.tanh()


class SiLU(Module):
    def forward(self, x: Tensor) -> Tensor:
        return F.silu(x)


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        self.negative_slope = negative_slope

    def forward(self, x: Tensor) -> Tensor:
        return F.leaky_relu(x, self.negative_slope)


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, x: Tensor) -> Tensor:
        return F.softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class Softmax(Module):
    def __init__(self, dim: int | None = None):
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return x.softmax(self.dim if self.dim is not None else (0 if x.ndim in (0, 1, 3) else 1))

    def extra_repr(self) -> str:
        return f"dim={self.dim}"


class LogSoftmax(Softmax):
    def forward(self, x: Tensor) -> Tensor:
        return x.log_softmax(self.dim if self.dim is not None else (0 if x.ndim in (0, 1, 3) else 1))
