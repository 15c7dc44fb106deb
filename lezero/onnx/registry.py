"""The ONNX converter table: which function converts an ONNX operator at a model's opset.

A converter is a function of a ``NodeContext`` (``lezero.onnx.importer``) returning one value per
node output, built from lz ops.  It carries the opset it applies from::

    @converter("Squeeze", since=13)   # axes became an input in opset 13
    def squeeze(ctx): ...

An operator may have several converters, one per opset range: a node is converted by the one with
the greatest ``since`` at or below its domain's opset; below every ``since`` the operator is
unsupported, as an operator with no converter is.

The converter modules are the families listed in ``CONVERTER_MODULES`` (``lezero/onnx/ops/``),
imported on the first lookup: the importer and the converters both import this module, and
neither imports the other.
"""
from __future__ import annotations

import importlib
from typing import Callable

# Every converter module, by family (lezero/onnx/ops/<family>.py).
CONVERTER_MODULES = ("attention", "control_flow", "elementwise", "indexing", "losses", "nn", "quantization",
                     "recurrent", "reduction", "resize", "sampling", "tensor", "training")

# (domain, op_type) -> ((since, converter), ...) in increasing ``since``; domain "" is the default ONNX domain.
_CONVERTERS: dict[tuple[str, str], tuple[tuple[int, Callable], ...]] = {}
_loaded = False


def converter(*op_types: str, since: int = 1, domain: str = ""):
    """Register the decorated function as the converter of ``op_types`` in ``domain`` from opset
    ``since`` on (until the ``since`` of the next converter of the same operator)."""
    def register(fn):
        for op_type in op_types:
            key = (domain, op_type)
            versions = _CONVERTERS.get(key, ())
            if any(s == since for s, _ in versions):
                raise ValueError(f"ONNX operator {op_type} has two converters from opset {since}")
            _CONVERTERS[key] = tuple(sorted(versions + ((since, fn),), key=lambda v: v[0]))
        return fn
    return register


def _load() -> None:
    global _loaded
    if not _loaded:
        for family in CONVERTER_MODULES:
            importlib.import_module(f"lezero.onnx.ops.{family}")
        _loaded = True


def converters() -> dict[tuple[str, str], tuple[tuple[int, Callable], ...]]:
    """The whole table: ``(domain, op_type) -> ((since, converter), ...)``."""
    _load()
    return dict(_CONVERTERS)


def versions_of(domain: str, op_type: str) -> tuple[tuple[int, Callable], ...]:
    """The converters of ``op_type`` in ``domain`` as ``(since, converter)``, oldest first (empty
    when lezero has none)."""
    _load()
    return _CONVERTERS.get((domain, op_type), ())


def converter_at(versions: tuple[tuple[int, Callable], ...], opset: int) -> Callable | None:
    """The converter of ``versions`` (``versions_of``'s) for ``opset``: the greatest ``since`` at
    or below it; None when ``opset`` is below every ``since``."""
    chosen = None
    for since, fn in versions:
        if since <= opset:
            chosen = fn
    return chosen
