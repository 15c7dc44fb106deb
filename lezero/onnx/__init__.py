"""lezero's ONNX frontend.

- ``import_model(path_or_model) -> ModuleOp``: the graph as ``func.func @main`` of lz ops
  (``lezero/onnx/importer.py``; the converters per ONNX operator and opset in ``lezero/onnx/ops``,
  found through ``lezero/onnx/registry.py``);
- ``compile(path_or_model) -> CompiledModel``: imported and compiled for the CPU,
  ``.run({name: array}) -> {name: array}``;
- ``lezero.onnx.backend``: ``onnx.backend.base.Backend`` for ONNX's own test suites;
- ``export(traced_or_ir_module, path)``: lz IR (or a ``lz.jit.trace`` result) to an ONNX file.

Errors: ``OnnxError`` (a model lezero cannot read), ``UnsupportedError`` (something lezero does
not implement, naming the node and operator), ``ValueDependentError`` (a shape computed from graph
inputs' values), ``DynamicShapeError`` (a computation with a dim the graph leaves dynamic).
"""
from lezero.onnx.errors import DynamicShapeError, OnnxError, UnsupportedError, ValueDependentError
from lezero.onnx.importer import MIN_OPSET, import_model
from lezero.onnx.registry import converters
from lezero.onnx.compiled_model import CompiledModel, FeedError, compile  # noqa: A004
from lezero.onnx.export import ExportError, export, to_onnx  # noqa: E402

__all__ = ["import_model", "compile", "CompiledModel", "OnnxError", "UnsupportedError", "ValueDependentError",
           "DynamicShapeError",
           "FeedError", "export", "to_onnx", "ExportError", "CONVERTERS", "MIN_OPSET", "supported_operators"]


def supported_operators() -> list[str]:
    """``domain::op_type`` (just ``op_type`` in the default domain) of every converter."""
    return sorted(f"{d}::{t}" if d else t for d, t in converters())


def __getattr__(name):
    if name == "CONVERTERS":  # public since issue 5: the table, ``(domain, op_type) -> ((since, fn), ...)``
        return converters()
    if name == "backend":  # imported on use: it pulls in onnx.backend
        import importlib

        return importlib.import_module("lezero.onnx.backend")
    raise AttributeError(name)
