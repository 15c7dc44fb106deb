"""Whole-model quantization, as ``torch.ao.quantization`` spells it:

- ``quantize_dynamic(model, qconfig_spec, dtype)``: each selected ``nn.Linear`` becomes a
  ``DynamicQuantizedLinear`` (int8 weights per output channel; activations quantized per call);
- ``prepare(model, qconfig)`` -> calibrate (run data through it) -> ``convert(model)``: static
  quantization, each Linear's and Conv2d's input range observed, then fixed in a
  ``QuantizedLinear`` / ``QuantizedConv2d`` (weights per output channel);
- ``prepare_qat(model, qconfig)`` -> train -> ``convert(model)``: quantization-aware training
  through fake quantization (``QATLinear``, ``QATConv2d``).

A CNN's batch norms and relus are fused into its convs first (``fuse_modules``, as in PyTorch).
``qconfig_spec`` selects what is quantized: None (every Linear, and for static/QAT every Conv2d), a set of module types, or a dict
from module types or qualified names (``"fc1"``) to a ``QuantConfig`` (None: left float).
Models are copied unless ``inplace=True``.
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field

from lezero.nn.convolution import Conv2d
from lezero.nn.layers import Linear
from lezero.nn.module import Module
from lezero.quantization.functional import _dtype_name
from lezero.quantization.modules import (
    ConvReLU2d,
    DynamicQuantizedLinear,
    ObservedConv2d,
    ObservedLinear,
    QATConv2d,
    QATLinear,
    QuantizedConv2d,
    QuantizedLinear,
)
from lezero.quantization.observers import MinMaxObserver, MovingAverageMinMaxObserver

SCHEMES = ("symmetric", "affine")


@dataclass
class QuantConfig:
    """How to quantize: the activations' and weights' dtypes (int8 or uint8), the weights'
    ``scheme`` (symmetric: zero point 0; affine: a zero point per channel), and the activation
    observer (a callable making one; default: min/max for static, a moving average for QAT)."""

    activation_dtype: str = "uint8"
    weight_dtype: str = "int8"
    scheme: str = "symmetric"
    activation_observer: Callable | None = None
    qat: bool = field(default=False, repr=False)

    def __post_init__(self):
        self.activation_dtype = _dtype_name(self.activation_dtype)
        self.weight_dtype = _dtype_name(self.weight_dtype)
        if self.scheme not in SCHEMES:
            raise ValueError(f"QuantConfig: scheme must be 'symmetric' or 'affine', got {self.scheme!r}")
        if self.activation_observer is None:
            kind = MovingAverageMinMaxObserver if self.qat else MinMaxObserver
            dtype = self.activation_dtype
            self.activation_observer = lambda: kind(dtype=dtype)

    @property
    def symmetric(self) -> bool:
        return self.scheme == "symmetric"


def _selected(qconfig_spec, name: str, module: Module, default: QuantConfig):
    if qconfig_spec is None:
        return default
    if isinstance(qconfig_spec, QuantConfig):
        return qconfig_spec
    if isinstance(qconfig_spec, (set, frozenset, list, tuple)):
        return default if type(module) in qconfig_spec or name in qconfig_spec else None
    if isinstance(qconfig_spec, dict):
        for key in (name, type(module)):
            if key in qconfig_spec:
                return qconfig_spec[key] if qconfig_spec[key] is not None else None
        return None
    raise TypeError(f"qconfig_spec must be None, a QuantConfig, a set of module types or names, or a dict, got "
                    f"{type(qconfig_spec).__name__}")


def _swap(model: Module, replace, prefix: str = "") -> None:
    """Replace each child ``replace(name, child)`` returns a module for, recursively."""
    for name, child in list(model.named_children()):
        qualified = f"{prefix}{name}"
        new = replace(qualified, child)
        if new is not None:
            setattr(model, name, new)
        else:
            _swap(child, replace, qualified + ".")


def quantize_dynamic(model: Module, qconfig_spec=None, dtype="int8", inplace: bool = False) -> Module:
    """``model`` with each selected Linear dynamically quantized (``dtype``: the weights')."""
    model = model if inplace else copy.deepcopy(model)
    default = QuantConfig(weight_dtype=dtype)

    def replace(name, child):
        config = _selected(qconfig_spec, name, child, default) if type(child) is Linear else None
        if config is None:
            return None
        return DynamicQuantizedLinear.from_float(child, config.weight_dtype, config.symmetric)
    _swap(model, replace)
    return model


# the float layers static quantization and QAT replace, and what with: (observed, QAT) forms
_PREPARED = {Linear: (ObservedLinear, QATLinear), Conv2d: (ObservedConv2d, QATConv2d),
             ConvReLU2d: (ObservedConv2d, QATConv2d)}


def _prepare(model: Module, qconfig, inplace: bool, qat: bool) -> Module:
    model = model if inplace else copy.deepcopy(model)

    def replace(name, child):
        kinds = _PREPARED.get(type(child))
        config = None if kinds is None else _selected(qconfig, name, child, QuantConfig(qat=qat))
        return None if config is None else kinds[qat].from_float(child, config)
    _swap(model, replace)
    return model


def prepare(model: Module, qconfig=None, inplace: bool = False) -> Module:
    """``model`` with an observer on each selected Linear's and Conv2d's input: run calibration
    data through it, then ``convert``."""
    return _prepare(model, qconfig, inplace, qat=False)


def prepare_qat(model: Module, qconfig=None, inplace: bool = False) -> Module:
    """``model`` training through fake quantization of each selected Linear's and Conv2d's input
    and weight."""
    if isinstance(qconfig, QuantConfig) and not qconfig.qat:
        qconfig = QuantConfig(qconfig.activation_dtype, qconfig.weight_dtype, qconfig.scheme, qat=True)
    return _prepare(model, qconfig, inplace, qat=True)


def convert(model: Module, inplace: bool = False) -> Module:
    """Each observed or QAT Linear (Conv2d) as a ``QuantizedLinear`` (``QuantizedConv2d``) with
    the parameters it found."""
    model = model if inplace else copy.deepcopy(model)

    def replace(name, child):
        if isinstance(child, ObservedLinear):
            return QuantizedLinear.from_observed(child)
        return QuantizedConv2d.from_observed(child) if isinstance(child, ObservedConv2d) else None
    _swap(model, replace)
    return model
