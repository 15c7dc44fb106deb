"""Errors of the ONNX frontend: each names the file, the tensor or the node it is about."""
from __future__ import annotations

from lezero.ir.diagnostics import IRError


class OnnxError(IRError):
    """A model lezero cannot read: not ONNX, truncated, inconsistent, or an unsafe external-data
    location.  Located at the ONNX node (``NameLoc``) when one is to blame."""


class UnsupportedError(OnnxError):
    """A valid model using something lezero does not implement: an operator, an attribute value,
    an element type, an opset."""


class DynamicShapeError(UnsupportedError):
    """A computation needs a dim the graph leaves dynamic (``?``): Shape of it, a reshape that
    copies it, ... ``CompiledModel`` then compiles per input shape, with the inputs' dims bound."""


class ValueDependentError(UnsupportedError):
    """A shape (or another compile-time parameter, such as Reshape's target or TopK's K) is
    computed from graph inputs.  ``inputs`` names them: binding their values with
    ``import_model(..., constant_inputs={...})`` makes the model compile for those values
    (``CompiledModel`` does that by itself, once per distinct set of values)."""

    def __init__(self, message: str, location, inputs):
        super().__init__(message, location)
        self.inputs = tuple(inputs)
