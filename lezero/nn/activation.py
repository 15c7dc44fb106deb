"""The activations beyond ReLU/GELU/SiLU: ``F.elu``, ``selu``, ``celu``, ``prelu``, ``mish``,
``hardswish``, ``hardsigmoid``, ``hardtanh``, ``softsign``, ``logsigmoid``, ``tanhshrink``,
``softshrink``, ``hardshrink``, ``threshold``, ``glu``, and their ``nn`` modules, with PyTorch's
arguments and defaults.

Each is one ``EagerOp`` of a few elementwise lz ops (one dispatch, one fused kernel), written
with ``GradBuilder``'s arithmetic on Python numbers.  The exponentials read ``min(x, 0)``: the
branch a ``select`` does not take still gets a zero cotangent, and ``0 * exp(large) = nan`` would
poison the gradient of large inputs.  Soft-plus terms use the stable ``max(x, 0) + log(1 +
e^-|x|)``.
"""
from __future__ import annotations

from lezero.eager import dtypes as _dt
from lezero.eager.core import apply, apply1
from lezero.eager.creation import full
from lezero.eager.dispatch import EagerOp
from lezero.eager.tensor import Tensor
from lezero.ir.gradient import GradBuilder
import lezero.nn.init as _init
from lezero.nn.module import Module, Parameter

SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _elementwise(name: str):
    """An ``EagerOp`` named ``name`` from ``formula(g, attrs, *values)`` built with a ``GradBuilder``."""
    def make(formula):
        def emit(b, attrs, *values):
            return [formula(GradBuilder(b.block, b.index, b.location), attrs, *values)]
        return EagerOp(name, emit)
    return make


def _expm1_nonpositive(g, x, scale=1.0):
    """``e^(min(x, 0) / scale) - 1``."""
    return g.sub(g.op("lz.exp", g.div(g.op("lz.min", x, g.scalar(0, x)), scale)), 1)


def _log1p_exp_neg_abs(g, x):
    """``log(1 + e^-|x|)``, the bounded part of the soft-plus."""
    return g.op("lz.log", g.add(g.op("lz.exp", g.neg(g.op("lz.abs", x))), 1))


@_elementwise("elu")
def _ELU(g, attrs, x):
    return g.select(g.cmp("gt", x, 0), x, g.mul(_expm1_nonpositive(g, x), attrs["alpha"]))


@_elementwise("selu")
def _SELU(g, attrs, x):
    negative = g.mul(_expm1_nonpositive(g, x), SELU_ALPHA * SELU_SCALE)
    return g.select(g.cmp("gt", x, 0), g.mul(x, SELU_SCALE), negative)


@_elementwise("celu")
def _CELU(g, attrs, x):
    alpha = attrs["alpha"]
    return g.select(g.cmp("gt", x, 0), x, g.mul(_expm1_nonpositive(g, x, alpha), alpha))


@_elementwise("prelu")
def _PRELU(g, attrs, x, weight):
    if x.type.rank >= 2 and weight.type.shape != (1,):
        weight = g.reshape(weight, [1, -1] + [1] * (x.type.rank - 2))
    return g.select(g.cmp("ge", x, 0), x, g.mul(weight, x))


@_elementwise("mish")
def _MISH(g, attrs, x):
    softplus = g.add(g.op("lz.max", x, g.scalar(0, x)), _log1p_exp_neg_abs(g, x))
    return g.mul(x, g.op("lz.tanh", softplus))


def _relu6_of_x_plus_3_over_6(g, x):
    shifted = g.add(x, 3)
    return g.div(g.op("lz.min", g.op("lz.max", shifted, g.scalar(0, x)), g.scalar(6, x)), 6)


@_elementwise("hardsigmoid")
def _HARDSIGMOID(g, attrs, x):
    return _relu6_of_x_plus_3_over_6(g, x)


@_elementwise("hardswish")
def _HARDSWISH(g, attrs, x):
    return g.mul(x, _relu6_of_x_plus_3_over_6(g, x))


@_elementwise("hardtanh")
def _HARDTANH(g, attrs, x):
    lo, hi = g.scalar(attrs["min_val"], x), g.scalar(attrs["max_val"], x)
    return g.select(g.cmp("lt", x, lo), lo, g.select(g.cmp("gt", x, hi), hi, x))


@_elementwise("softsign")
def _SOFTSIGN(g, attrs, x):
    return g.div(x, g.add(g.op("lz.abs", x), 1))


@_elementwise("logsigmoid")
def _LOGSIGMOID(g, attrs, x):
    return g.sub(g.op("lz.min", x, g.scalar(0, x)), _log1p_exp_neg_abs(g, x))


@_elementwise("tanhshrink")
def _TANHSHRINK(g, attrs, x):
    return g.sub(x, g.op("lz.tanh", x))


@_elementwise("softshrink")
def _SOFTSHRINK(g, attrs, x):
    lambd = attrs["lambd"]
    return g.select(g.cmp("gt", x, lambd), g.sub(x, lambd), g.select(g.cmp("lt", x, -lambd), g.add(x, lambd), 0))


@_elementwise("hardshrink")
def _HARDSHRINK(g, attrs, x):
    lambd = attrs["lambd"]
    return g.select(g.cmp("gt", g.op("lz.abs", x), lambd), x, 0)


@_elementwise("threshold")
def _THRESHOLD(g, attrs, x):
    return g.select(g.cmp("gt", x, attrs["threshold"]), x, attrs["value"])


def _in_place(x: Tensor, out: Tensor, inplace: bool) -> Tensor:
    return x.copy_(out) if inplace else out


def elu(x: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    return _in_place(x, apply1(_ELU, (("alpha", float(alpha)),), x), inplace)


def selu(x: Tensor, inplace: bool = False) -> Tensor:
    return _in_place(x, apply1(_SELU, (), x), inplace)


def celu(x: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    if alpha == 0:
        raise ValueError("ZeroDivisionError: alpha cannot be 0 for CELU")
    return _in_place(x, apply1(_CELU, (("alpha", float(alpha)),), x), inplace)


def prelu(x: Tensor, weight: Tensor) -> Tensor:
    """``x`` where non-negative, else ``weight * x``; ``weight`` has one value, or one per channel
    (dim 1)."""
    if weight.ndim != 1:
        raise RuntimeError(f"prelu: weight must be 1-D, got shape {list(weight.shape)}")
    channels = x.shape[1] if x.ndim >= 2 else 1
    if weight.numel() not in (1, channels):
        raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found parameter numbers = "
                           f"{weight.numel()} and channel size = {channels}.")
    return apply(_PRELU, (), x, weight)


def mish(x: Tensor, inplace: bool = False) -> Tensor:
    return _in_place(x, apply1(_MISH, (), x), inplace)


def hardswish(x: Tensor, inplace: bool = False) -> Tensor:
    return _in_place(x, apply1(_HARDSWISH, (), x), inplace)


def hardsigmoid(x: Tensor, inplace: bool = False) -> Tensor:
    return _in_place(x, apply1(_HARDSIGMOID, (), x), inplace)


def hardtanh(x: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False) -> Tensor:
    if min_val > max_val:
        raise ValueError(f"min_val cannot be greater than max_val, got {min_val} > {max_val}")
    return _in_place(x, apply1(_HARDTANH, (("min_val", float(min_val)), ("max_val", float(max_val))), x), inplace)


def softsign(x: Tensor) -> Tensor:
    return apply1(_SOFTSIGN, (), x)


def logsigmoid(x: Tensor) -> Tensor:
    return apply1(_LOGSIGMOID, (), x)


def tanhshrink(x: Tensor) -> Tensor:
    return apply1(_TANHSHRINK, (), x)


def softshrink(x: Tensor, lambd: float = 0.5) -> Tensor:
    if lambd < 0:
        raise RuntimeError(f"lambda must be greater or equal to 0, but found to be {lambd}.")
    return apply1(_SOFTSHRINK, (("lambd", float(lambd)),), x)


def hardshrink(x: Tensor, lambd: float = 0.5) -> Tensor:
    return apply1(_HARDSHRINK, (("lambd", float(lambd)),), x)


def threshold(x: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    return _in_place(x, apply1(_THRESHOLD, (("threshold", float(threshold)), ("value", float(value))), x), inplace)


def glu(x: Tensor, dim: int = -1) -> Tensor:
    """The first half of ``dim`` times the sigmoid of the second."""
    if x.ndim == 0 or x.shape[dim] % 2:
        raise RuntimeError(f"Halving dimension must be even, but dimension {dim} of {list(x.shape)} is not")
    a, b = x.chunk(2, dim)
    return a * b.sigmoid()


# --- modules ------------------------------------------------------------------------------------------------

class _Activation(Module):
    """A module whose ``forward`` is ``functional(x, *(its arguments))``, named in ``arguments``."""

    arguments: tuple = ()
    functional = None

    def forward(self, x: Tensor) -> Tensor:
        return type(self).functional(x, *(getattr(self, name) for name in self.arguments))

    def extra_repr(self) -> str:
        return ", ".join(f"{name}={getattr(self, name)}" for name in self.arguments
                         if name != "inplace" or self.inplace)


class ELU(_Activation):
    arguments, functional = ("alpha", "inplace"), staticmethod(elu)

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        self.alpha, self.inplace = alpha, inplace


class CELU(ELU):
    functional = staticmethod(celu)


class SELU(_Activation):
    arguments, functional = ("inplace",), staticmethod(selu)

    def __init__(self, inplace: bool = False):
        super().__init__()
        self.inplace = inplace


class Mish(SELU):
    functional = staticmethod(mish)


class Hardswish(SELU):
    functional = staticmethod(hardswish)


class Hardsigmoid(SELU):
    functional = staticmethod(hardsigmoid)


class Hardtanh(_Activation):
    arguments, functional = ("min_val", "max_val", "inplace"), staticmethod(hardtanh)

    def __init__(self, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False):
        super().__init__()
        if min_val > max_val:
            raise ValueError(f"min_val cannot be greater than max_val, got {min_val} > {max_val}")
        self.min_val, self.max_val, self.inplace = min_val, max_val, inplace


class Softsign(_Activation):
    functional = staticmethod(softsign)


class LogSigmoid(_Activation):
    functional = staticmethod(logsigmoid)


class Tanhshrink(_Activation):
    functional = staticmethod(tanhshrink)


class Softshrink(_Activation):
    arguments, functional = ("lambd",), staticmethod(softshrink)

    def __init__(self, lambd: float = 0.5):
        super().__init__()
        self.lambd = lambd

    def extra_repr(self) -> str:
        return str(self.lambd)


class Hardshrink(Softshrink):
    functional = staticmethod(hardshrink)


class Threshold(_Activation):
    arguments, functional = ("threshold", "value", "inplace"), staticmethod(threshold)

    def __init__(self, threshold: float, value: float, inplace: bool = False):
        super().__init__()
        self.threshold, self.value, self.inplace = threshold, value, inplace


class GLU(_Activation):
    arguments, functional = ("dim",), staticmethod(glu)

    def __init__(self, dim: int = -1):
        super().__init__()
        self.dim = dim


class PReLU(Module):
    """``weight``: ``num_parameters`` slopes (1, or one per channel), all ``init``."""

    def __init__(self, num_parameters: int = 1, init: float = 0.25, device=None, dtype=None):
        super().__init__()
        self.num_parameters, self.init = num_parameters, init
        d = _dt.as_dtype(dtype) if dtype is not None else _dt.get_default_dtype()
        self.weight = Parameter(full((num_parameters,), init, dtype=d))

    def reset_parameters(self) -> None:
        _init.constant_(self.weight, self.init)

    def forward(self, x: Tensor) -> Tensor:
        return prelu(x, self.weight)

    def extra_repr(self) -> str:
        return f"num_parameters={self.num_parameters}"
