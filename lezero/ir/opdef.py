"""Op definitions: everything the compiler knows about one op, declared in one place.

An ``OpDef`` subclass declares an op's name, operands, attributes (with their kinds and
defaults) and traits, and implements:

- ``infer(operand_types, attrs)``: result types (numpy broadcasting and friends), raising
  ``OpError`` with a message for bad operands or attributes;
- ``reference(attrs, *arrays)``: the numpy reference semantics (the interpreter, the oracle);
- ``decompose(builder, op, attrs)``: for composite ops, the primitive ops that replace it;
- ``verify_extra(op, attrs)``: whatever the declaration cannot say;
- ``grad(b, op, attrs, dy)``: the gradient rule, IR-building code returning one gradient (or
  None) per operand (``lezero/ir/gradient.py``; the autodiff pass calls it).

Later layers add their facets (the lowering) to the same class.  ``register``
instantiates a definition and makes it known by name.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from lezero.ir.attributes import (ArrayAttr, Attribute, BoolAttr, DenseArrayAttr, DenseElementsAttr,
                                  FloatAttr, IntegerAttr, StringAttr, TypeAttr, UnitAttr, round_to_float_type)
from lezero.ir.types import ELEMENT_TYPES, F32, F64, I64, ElementType, TensorType

# Traits: facts passes rely on.
PURE = "pure"                # no side effects: CSE and DCE may touch it
COMMUTATIVE = "commutative"  # operands may be swapped
ELEMENTWISE = "elementwise"  # result[i] depends on operands[i] (after broadcasting) only
COMPOSITE = "composite"      # the decompose pass expands it into primitives
TERMINATOR = "terminator"    # ends a block
ISOLATED_FROM_ABOVE = "isolated_from_above"  # its regions see no outer values (a new SSA name scope)
YIELDS = "yields"            # its regions end with lz.yield (lz.kernel, lz.for, lz.while, lz.if)


class OpError(Exception):
    """A problem with one op; the verifier adds the op's name and location."""


_MISSING = object()


class AttrSpec:
    """The kind of one attribute, its default, and its allowed values.

    Kinds: ``i64``, ``f64`` (any float; stored as f32 when f32 holds it exactly, else as f64, so an
    epsilon of 1e-5 or a fill value keeps every digit in a float64 graph), ``bool``,
    ``str``, ``i64_array``, ``f64_array``, ``type`` (an element type), ``dense``.
    """

    def __init__(self, kind: str, default: Any = _MISSING, choices: Sequence | None = None):
        self.kind = kind
        self.default = default
        self.choices = tuple(choices) if choices is not None else None

    @property
    def required(self) -> bool:
        return self.default is _MISSING

    def to_python(self, attr: Attribute):
        value = self._convert(attr)
        if self.choices is not None and value not in self.choices:
            raise OpError(f"must be one of {', '.join(map(repr, self.choices))}, got {attr}")
        return value

    def _convert(self, attr: Attribute):
        k = self.kind
        if k == "i64" and isinstance(attr, IntegerAttr) and not attr.type.is_bool:
            return int(attr.value)
        if k == "f64" and isinstance(attr, (FloatAttr, IntegerAttr)):
            return float(attr.value)
        if k == "bool":
            if isinstance(attr, BoolAttr):
                return attr.value
            if isinstance(attr, UnitAttr):
                return True
        if k == "str" and isinstance(attr, StringAttr):
            return attr.value
        if k in ("i64_array", "f64_array"):
            cast = int if k == "i64_array" else float
            if isinstance(attr, DenseArrayAttr) and (attr.element_type.is_int or k == "f64_array"):
                return tuple(cast(v) for v in attr.values)
            if isinstance(attr, ArrayAttr) and all(isinstance(v, (IntegerAttr, FloatAttr)) for v in attr.values):
                return tuple(cast(v.value) for v in attr.values)
        if k == "type" and isinstance(attr, TypeAttr) and isinstance(attr.type, ElementType):
            return attr.type
        if k == "dense" and isinstance(attr, DenseElementsAttr):
            return attr
        raise OpError(f"expected {_KIND_NAMES[k]}, got {attr}")

    def to_attr(self, value) -> Attribute:
        """A Python value (or an Attribute, kept as is) as this kind's attribute."""
        if isinstance(value, Attribute):
            return value
        k = self.kind
        if k == "i64":
            return IntegerAttr(int(value), I64)
        if k == "f64":
            value = float(value)
            exact_in_f32 = not math.isfinite(value) or round_to_float_type(value, F32) == value
            return FloatAttr(value, F32 if exact_in_f32 else F64)
        if k == "bool":
            return BoolAttr(bool(value))
        if k == "str":
            return StringAttr(str(value))
        if k == "i64_array":
            return DenseArrayAttr(I64, tuple(int(v) for v in value))
        if k == "f64_array":
            return DenseArrayAttr(ELEMENT_TYPES["f64"], tuple(float(v) for v in value))
        if k == "type":
            return TypeAttr(ELEMENT_TYPES[value] if isinstance(value, str) else value)
        raise TypeError(f"cannot make a {k} attribute from {value!r}")


_KIND_NAMES = {
    "i64": "an integer attribute (1 : i64)", "f64": "a float attribute (1.0 : f32)",
    "bool": "a bool attribute (true or false)", "str": 'a string attribute ("...")',
    "i64_array": "an integer array attribute (array<i64: ...>)",
    "f64_array": "a float array attribute (array<f64: ...>)",
    "type": "an element type attribute (f32)", "dense": "a dense attribute (dense<...> : tensor<...>)",
}


class Attrs:
    """An op's attributes as Python values, defaults filled in: ``attrs.axis``, ``attrs["axis"]``."""

    __slots__ = ("_values",)

    def __init__(self, values: dict):
        object.__setattr__(self, "_values", values)

    def __getattr__(self, name):
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, name):
        return self._values[name]

    def get(self, name, default=None):
        return self._values.get(name, default)

    def __repr__(self) -> str:
        return f"Attrs({self._values})"


class OpDef:
    name: str = ""
    operands: tuple = ()          # operand names; with ``variadic`` the last one takes the rest
    variadic: bool = False
    num_results: int | None = 1   # None: as many as the op says (lz.kernel)
    attributes: dict = {}
    traits: frozenset = frozenset()
    summary: str = ""
    # The gradient rule (lezero/ir/gradient.py): grad(b, op, attrs, dy) -> [Value | None per
    # operand]; None here means the op has no rule (a hard error in autodiff).
    grad = None

    # --- attributes ---------------------------------------------------------------------------
    def attrs(self, op_or_attributes) -> Attrs:
        """Typed attribute values with defaults; raises ``OpError`` naming a bad one."""
        given = op_or_attributes.attributes if hasattr(op_or_attributes, "attributes") else op_or_attributes
        values = {}
        for key, spec in self.attributes.items():
            if key in given:
                try:
                    values[key] = spec.to_python(given[key])
                except OpError as e:
                    raise OpError(f"attribute '{key}' {e}") from None
            elif spec.required:
                raise OpError(f"requires attribute '{key}'")
            else:
                values[key] = spec.default
        return Attrs(values)

    def make_attributes(self, values: dict) -> dict:
        """Python values (or Attributes) to the attribute dict of a new op."""
        out = {}
        for key, value in values.items():
            if value is None:
                continue
            spec = self.attributes.get(key)
            if spec is None:
                if not isinstance(value, Attribute):
                    raise TypeError(f"{self.name} has no attribute '{key}'")
                out[key] = value
            else:
                out[key] = spec.to_attr(value)
        return out

    # --- semantics: overridden by each op --------------------------------------------------------
    def infer(self, operand_types: list[TensorType], attrs: Attrs) -> list[TensorType]:
        raise NotImplementedError(f"{self.name} has no shape inference")

    def reference(self, attrs: Attrs, *inputs: np.ndarray):
        raise NotImplementedError(f"{self.name} has no reference implementation")

    def decompose(self, builder, op, attrs: Attrs):
        return None

    def verify_extra(self, op, attrs: Attrs) -> None:
        pass

    def region_argument_types(self, op) -> list[list] | None:
        """For ops with regions: the types each region's block arguments take from ``op``'s
        operands (shape inference refines the arguments from them); None: not stated."""
        return None

    # --- derived ------------------------------------------------------------------------------
    def check_operand_count(self, n: int) -> None:
        want = len(self.operands)
        if self.variadic:
            if n < want:
                raise OpError(f"expects at least {want} operands, got {n}")
        elif n != want:
            raise OpError(f"expects {want} operand{'s' if want != 1 else ''}, got {n}")

    def infer_op(self, operand_types: list, attrs: Attrs) -> list[TensorType]:
        self.check_operand_count(len(operand_types))
        for i, t in enumerate(operand_types):
            if not isinstance(t, TensorType):
                raise OpError(f"operand #{i} must be a tensor, got {t}")
        return list(self.infer(list(operand_types), attrs))

    def infer_for_op(self, op) -> list:
        """The result types ``op`` must have; ops with regions override this (their results
        follow from the region, not from operand types alone)."""
        return self.infer_op(op.operand_types, self.attrs(op))

    def evaluate(self, op, inputs: list[np.ndarray]) -> list[np.ndarray]:
        """Run the reference on concrete inputs; the interpreter calls this."""
        out = self.reference(self.attrs(op), *inputs)
        return list(out) if isinstance(out, (tuple, list)) else [out]

    def has_trait(self, trait: str) -> bool:
        return trait in self.traits


_REGISTRY: dict[str, OpDef] = {}


def register(cls):
    """Class decorator: instantiate the definition and make it known by its name."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no op name")
    if cls.name in _REGISTRY:
        raise ValueError(f"op {cls.name} is defined twice")
    _REGISTRY[cls.name] = cls()
    return cls


def lookup(name: str) -> OpDef | None:
    return _REGISTRY.get(name)


def registered_ops() -> dict[str, OpDef]:
    return dict(_REGISTRY)
