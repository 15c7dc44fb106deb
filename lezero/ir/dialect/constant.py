"""``lz.constant {value = dense<...> : tensor<...>}``: a tensor known at compile time."""
from __future__ import annotations

from lezero.ir.gradient import no_gradient
from lezero.ir.opdef import PURE, AttrSpec, OpDef, register


@register
class ConstantOp(OpDef):
    """No operands; the result type is the ``value`` attribute's type."""

    name = "lz.constant"
    operands = ()
    traits = frozenset({PURE})
    attributes = {"value": AttrSpec("dense")}
    summary = "a constant tensor"

    def infer(self, operand_types, attrs):
        return [attrs.value.type]

    def reference(self, attrs):
        return attrs.value.array

    grad = staticmethod(no_gradient)  # no operands
