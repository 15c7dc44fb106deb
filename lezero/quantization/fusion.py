"""``fuse_modules``: the layer fusions PyTorch users run before quantizing a CNN
(``torch.ao.quantization.fuse_modules``), by qualified names:

- ``[conv, bn]``: the batch norm's running statistics (and affine parameters) folded into the
  conv's weight and bias, ``w' = w * gamma / sqrt(var + eps)`` per output channel and
  ``b' = (b - mean) * gamma / sqrt(var + eps) + beta``, so quantization sees the weights inference
  multiplies by;
- ``[conv, relu]`` and ``[conv, bn, relu]``: a ``ConvReLU2d``, whose quantized form applies the relu
  in the integer convolution's kernel (the activations after it are observed once, not twice).

The first name becomes the fused layer, the others ``nn.Identity`` (as in PyTorch).  Folding uses
the running statistics, so the model must be in eval mode (PyTorch's rule as well); for QAT fuse
in eval mode, then ``train()`` and ``prepare_qat``.
"""
from __future__ import annotations

import copy

import numpy as np

from lezero.eager.creation import as_tensor
from lezero.nn.convolution import Conv2d
from lezero.nn.layers import BatchNorm2d, Identity, ReLU
from lezero.nn.module import Module, Parameter
from lezero.quantization.modules import ConvReLU2d


def fold_batch_norm(conv: Conv2d, bn: BatchNorm2d) -> Conv2d:
    """A Conv2d computing ``bn(conv(x))`` with ``bn``'s running statistics."""
    if bn.running_mean is None:
        raise ValueError("fuse_modules: a BatchNorm2d without running statistics (track_running_stats=False) "
                         "cannot be folded")
    if bn.num_features != conv.out_channels:
        raise ValueError(f"fuse_modules: BatchNorm2d({bn.num_features}) does not follow a conv of "
                         f"{conv.out_channels} output channels")
    mean, var = bn.running_mean.numpy().astype(np.float64), bn.running_var.numpy().astype(np.float64)
    gamma = bn.weight.detach().numpy().astype(np.float64) if bn.weight is not None else np.ones_like(mean)
    beta = bn.bias.detach().numpy().astype(np.float64) if bn.bias is not None else np.zeros_like(mean)
    factor = gamma / np.sqrt(var + bn.eps)
    bias = conv.bias.detach().numpy().astype(np.float64) if conv.bias is not None else np.zeros_like(mean)
    folded = copy.deepcopy(conv)
    weight = conv.weight.detach().numpy() * factor.reshape(-1, 1, 1, 1)
    folded.weight = Parameter(as_tensor(weight.astype(np.float32)))
    folded.bias = Parameter(as_tensor(((bias - mean) * factor + beta).astype(np.float32)))
    return folded


def _fused(modules: list[Module], names: list[str]) -> Module:
    kinds = tuple(type(m) for m in modules)
    if kinds not in ((Conv2d, BatchNorm2d), (Conv2d, ReLU), (Conv2d, BatchNorm2d, ReLU)):
        got = ", ".join(f"{n} ({type(m).__name__})" for n, m in zip(names, modules))
        raise ValueError(f"fuse_modules: cannot fuse {got}; the fusions are [Conv2d, BatchNorm2d], [Conv2d, ReLU] "
                         "and [Conv2d, BatchNorm2d, ReLU]")
    conv = modules[0]
    if isinstance(modules[1], BatchNorm2d):
        conv = fold_batch_norm(conv, modules[1])
    if isinstance(modules[-1], ReLU):
        fused = ConvReLU2d.__new__(ConvReLU2d)
        fused.__dict__.update(copy.deepcopy(conv).__dict__)
        return fused
    return conv


def fuse_modules(model: Module, modules_to_fuse, inplace: bool = False) -> Module:
    """``model`` with each group of qualified names (a list of names, or a list of such lists)
    fused: the first becomes the fused layer, the rest ``Identity``."""
    if modules_to_fuse and isinstance(modules_to_fuse[0], str):
        modules_to_fuse = [modules_to_fuse]
    if model.training:
        raise RuntimeError("fuse_modules folds batch norms with their running statistics: call model.eval() first "
                           "(and train() after it for QAT)")
    model = model if inplace else copy.deepcopy(model)
    for names in modules_to_fuse:
        modules = [model.get_submodule(name) for name in names]
        fused = _fused(modules, list(names))
        for name, replacement in zip(names, [fused] + [Identity() for _ in names[1:]]):
            parent, _, child = name.rpartition(".")
            setattr(model.get_submodule(parent) if parent else model, child, replacement)
    return model
