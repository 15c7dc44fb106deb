"""Element-type constraints: which element types an op accepts, and agreement between operands."""
from __future__ import annotations

from dataclasses import dataclass

from lezero.ir.opdef import OpError
from lezero.ir.types import ElementType, TensorType


@dataclass(frozen=True)
class Domain:
    """A set of element-type kinds ("float", "int", "bool") with the words an error uses."""

    kinds: frozenset
    description: str

    def __contains__(self, element_type: ElementType) -> bool:
        return element_type.kind in self.kinds


FLOAT = Domain(frozenset({"float"}), "a float element type (f16, bf16, f32, f64)")
NUMERIC = Domain(frozenset({"float", "int"}), "a numeric element type (float or integer, not i1)")
INTEGER = Domain(frozenset({"int"}), "an integer element type")
LOGICAL = Domain(frozenset({"bool", "int"}), "i1 or an integer element type")
BOOL = Domain(frozenset({"bool"}), "element type i1")
ANY = Domain(frozenset({"float", "int", "bool"}), "any element type")


def check_element_type(t: TensorType, domain: Domain, what: str = "operand") -> ElementType:
    """``t``'s element type, or ``OpError`` ("operand must have a float element type ..., got i32")."""
    if t.element_type not in domain:
        raise OpError(f"{what} must have {domain.description}, got {t.element_type}")
    return t.element_type


def same_element_type(types, what: str = "operands") -> ElementType:
    """The one element type of ``types``; ``OpError`` ("operands must have the same element type,
    got f32 and i32")."""
    first = types[0].element_type
    for t in types[1:]:
        if t.element_type != first:
            raise OpError(f"{what} must have the same element type, got {first} and {t.element_type}")
    return first


def check_rank(t: TensorType, rank: int, what: str = "operand", layout: str = "") -> None:
    if t.rank != rank:
        layout = f" ({layout})" if layout else ""
        raise OpError(f"{what} must have rank {rank}{layout}, got {t}")
