"""Attributes: compile-time constants attached to ops, printed in MLIR's syntax.

``1 : i64``, ``1.0e-05 : f32``, ``"text"``, ``true``, ``unit``, ``[a, b]``, ``array<i64: 1, 2>``,
``f16`` (a type), ``dense<[[1, 2], [3, 4]]> : tensor<2x2xi32>``, ``@symbol``.
"""
from __future__ import annotations

import math
import re
import struct
from dataclasses import dataclass

import numpy as np

from lezero.ir.types import F32, I64, ElementType, TensorType, Type


class Attribute:
    """Base of all attributes; immutable, compared by value."""


def escape_string(s: str) -> str:
    out = []
    for ch in s:
        if ch == '"' or ch == "\\":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\{ord(ch):02X}")
        else:
            out.append(ch)
    return "".join(out)


_NARROW_FLOATS = {"f32": np.float32, "f16": np.float16}


def format_float(value: float, type_: ElementType) -> str:
    """MLIR's float literal: always with a '.', hex bits for inf and nan."""
    if not math.isfinite(value):
        return _float_bits_hex(value, type_)
    text = repr(float(value))
    if type_.name in _NARROW_FLOATS:
        # the shortest text that reads back as the same value of the narrow type (1e-05, not
        # 9.999999747378752e-06), as MLIR prints
        with np.errstate(over="ignore"):
            narrow = _NARROW_FLOATS[type_.name](value)
        if np.isfinite(narrow) and float(narrow) == value:
            text = str(narrow)
    if "e" in text and "." not in text.split("e")[0]:
        mantissa, exp = text.split("e")
        text = f"{mantissa}.0e{exp}"
    return text


def round_to_float_type(value: float, type_: ElementType) -> float:
    """``value`` rounded to the precision of ``type_`` (to nearest even; overflow gives inf)."""
    if math.isnan(value):
        return value
    if type_.name == "bf16":
        bits = struct.unpack("<I", struct.pack("<f", round_to_float_type(value, F32)))[0]
        if math.isfinite(value):
            bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]
    if type_.name in _NARROW_FLOATS:
        with np.errstate(over="ignore"):
            return float(_NARROW_FLOATS[type_.name](value))
    return value


def _float_bits_hex(value: float, type_: ElementType) -> str:
    if type_.name == "f64":
        bits = struct.unpack("<Q", struct.pack("<d", value))[0]
        return f"0x{bits:016X}"
    if type_.name == "f16":
        bits = int(np.array(value, np.float16).view(np.uint16))
        return f"0x{bits:04X}"
    bits32 = struct.unpack("<I", struct.pack("<f", value))[0]
    if type_.name == "bf16":
        return f"0x{bits32 >> 16:04X}"
    return f"0x{bits32:08X}"


def float_from_bits(bits: int, type_: ElementType) -> float:
    if type_.name == "f64":
        return struct.unpack("<d", struct.pack("<Q", bits))[0]
    if type_.name == "f16":
        return float(np.array(bits, np.uint16).view(np.float16))
    if type_.name == "bf16":
        bits <<= 16
    return struct.unpack("<f", struct.pack("<I", bits))[0]


@dataclass(frozen=True)
class IntegerAttr(Attribute):
    value: int
    type: ElementType = I64

    def __str__(self) -> str:
        return f"{self.value} : {self.type}"


@dataclass(frozen=True)
class FloatAttr(Attribute):
    """A float of the given type; the value is held at that type's precision, as MLIR's APFloat
    does, so printing it shortest-first reads back to the same value."""

    value: float
    type: ElementType = F32

    def __post_init__(self):
        object.__setattr__(self, "value", round_to_float_type(float(self.value), self.type))

    def __eq__(self, other):
        # nan attributes are equal to themselves (needed for CSE and round-trips)
        return (isinstance(other, FloatAttr) and self.type == other.type
                and struct.pack("<d", self.value) == struct.pack("<d", other.value))

    def __hash__(self):
        return hash((struct.pack("<d", self.value), self.type))

    def __str__(self) -> str:
        return f"{format_float(self.value, self.type)} : {self.type}"


@dataclass(frozen=True)
class BoolAttr(Attribute):
    value: bool

    def __str__(self) -> str:
        return "true" if self.value else "false"


@dataclass(frozen=True)
class StringAttr(Attribute):
    value: str

    def __str__(self) -> str:
        return '"' + escape_string(self.value) + '"'


@dataclass(frozen=True)
class UnitAttr(Attribute):
    def __str__(self) -> str:
        return "unit"


@dataclass(frozen=True)
class SymbolRefAttr(Attribute):
    name: str

    def __str__(self) -> str:
        return "@" + (self.name if _is_bare_identifier(self.name) else '"' + escape_string(self.name) + '"')


@dataclass(frozen=True)
class ArrayAttr(Attribute):
    values: tuple

    def __post_init__(self):
        object.__setattr__(self, "values", tuple(self.values))

    def __str__(self) -> str:
        return "[" + ", ".join(map(str, self.values)) + "]"


@dataclass(frozen=True)
class DenseArrayAttr(Attribute):
    """``array<i64: 1, 2, 3>``: a flat list of scalars of one element type."""

    element_type: ElementType
    values: tuple

    def __post_init__(self):
        values = tuple(self.values)
        if self.element_type.is_float:
            values = tuple(round_to_float_type(float(v), self.element_type) for v in values)
        object.__setattr__(self, "values", values)

    def __str__(self) -> str:
        if not self.values:
            return f"array<{self.element_type}>"
        if self.element_type.is_float:
            body = ", ".join(format_float(v, self.element_type) for v in self.values)
        elif self.element_type.is_bool:
            body = ", ".join("true" if v else "false" for v in self.values)
        else:
            body = ", ".join(str(int(v)) for v in self.values)
        return f"array<{self.element_type}: {body}>"


@dataclass(frozen=True)
class DictionaryAttr(Attribute):
    """``{a = 1 : i64, b}``: named attributes as an attribute value (``arg_attrs`` of a function).

    Entries are kept sorted by name, as MLIR does, so equal dictionaries compare equal.
    """

    entries: tuple  # ((name, Attribute), ...)

    def __post_init__(self):
        items = self.entries.items() if isinstance(self.entries, dict) else self.entries
        object.__setattr__(self, "entries", tuple(sorted(items, key=lambda kv: kv[0])))

    def as_dict(self) -> dict:
        return dict(self.entries)

    def get(self, name: str, default=None):
        for k, v in self.entries:
            if k == name:
                return v
        return default

    def __len__(self) -> int:
        return len(self.entries)

    def __str__(self) -> str:
        return format_attr_dict(self.entries)


def format_attr_dict(items) -> str:
    """``{a = 1 : i64, b}`` from (name, attribute) pairs, sorted by name as MLIR prints them.

    A unit attribute prints as its bare name; a name that is not a bare identifier is quoted.
    """
    parts = []
    for name, attr in sorted(items, key=lambda kv: kv[0]):
        key = name if _is_bare_identifier(name) else '"' + escape_string(name) + '"'
        parts.append(key if isinstance(attr, UnitAttr) else f"{key} = {attr}")
    return "{" + ", ".join(parts) + "}"


@dataclass(frozen=True)
class TypeAttr(Attribute):
    type: Type

    def __str__(self) -> str:
        return str(self.type)


# Elements above which a dense attribute prints as MLIR's hex blob rather than nested lists.
DENSE_HEX_THRESHOLD = 256


# Elements of a dense attribute its hash reads (spread over it).
HASHED_ELEMENTS = 4096
# Elements a splat test compares at a time: an L2-sized slice, so that a weight that differs stops
# early and no temporary of the whole tensor's size is made (vgg19's folded 137M-element splat
# weights: 0.74 s of its warm compile in whole-tensor comparisons, issue 11).
SPLAT_TEST_ELEMENTS = 1 << 16


def _immutable(array: np.ndarray) -> bool:
    """Whether nothing can change ``array``, a C-contiguous read-only view over ``bytes`` (an ONNX
    tensor's raw data): kept as it is rather than copied (ResNet-50: 100 MB of weights)."""
    if not array.flags.c_contiguous:
        return False
    base = array
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            return False
        base = base.base
    return isinstance(base, bytes)


class DenseElementsAttr(Attribute):
    """``dense<...> : tensor<...>``: a constant tensor, stored as a read-only numpy array."""

    __slots__ = ("type", "array", "_hash", "_splat")

    def __init__(self, type_: TensorType, array):
        array = np.asarray(array, dtype=type_.element_type.numpy_dtype)
        if array.size == 1 and array.shape != type_.shape:
            array = np.broadcast_to(array.reshape(()), type_.shape)
        if array.shape != type_.shape:
            raise ValueError(f"dense attribute of shape {array.shape} does not match {type_}")
        if not _immutable(array):
            array = np.array(array, copy=True)
            array.flags.writeable = False
        self.type = type_
        self.array = array
        self._hash = None
        self._splat = None  # (the splat value or None,) once found

    def splat_value(self):
        """The one value every element holds, or None (found once: the array never changes)."""
        if self._splat is None:
            self._splat = (self._find_splat(),)
        return self._splat[0]

    def _find_splat(self):
        if self.array.size == 0:
            return None
        flat = self.array.reshape(-1)
        first = flat[0]
        is_float = self.type.element_type.is_float
        last = flat[-1]
        if not (last == first or (is_float and np.isnan(last) and np.isnan(first))):
            return None  # a weight differs here already: no need to read all of it
        for start in range(0, flat.size, SPLAT_TEST_ELEMENTS):
            part = flat[start:start + SPLAT_TEST_ELEMENTS]
            same = np.isnan(part).all() if is_float and np.isnan(first) else (part == first).all()
            if not same:
                return None
        return first.item()

    def __eq__(self, other):
        return (isinstance(other, DenseElementsAttr) and self.type == other.type
                and self.array.tobytes() == other.array.tobytes())

    def __hash__(self):
        # From at most HASHED_ELEMENTS elements spread over the tensor, not all of it: CSE hashes
        # every constant, and a ResNet-50's 25M weights cost 37 ms to copy and hash whole.
        # Equal hashes still compare every byte (__eq__).
        if self._hash is None:
            flat = self.array.reshape(-1)
            sample = flat[::max(1, flat.size // HASHED_ELEMENTS)]
            self._hash = hash((self.type, sample.tobytes()))
        return self._hash

    def __repr__(self) -> str:
        return f"DenseElementsAttr({self})"

    def _scalar(self, v) -> str:
        et = self.type.element_type
        if et.is_bool:
            return "true" if v else "false"
        if et.is_float:
            return format_float(float(v), et)
        return str(int(v))

    def __str__(self) -> str:
        et = self.type.element_type
        splat = self.splat_value()
        if self.array.size == 0:
            body = ""  # MLIR's form for a tensor with no elements, whatever its shape
        elif splat is not None and (self.array.size > 1 or self.type.rank == 0):
            body = self._element(self.array.reshape(-1)[0])
        elif self.array.size > DENSE_HEX_THRESHOLD:
            data = self.array
            if et.name == "bf16":
                data = (np.ascontiguousarray(data, np.float32).view(np.uint32) >> 16).astype("<u2")
            else:
                data = np.ascontiguousarray(data).astype(data.dtype.newbyteorder("<"))
            body = '"0x' + data.tobytes().hex().upper() + '"'
        else:
            body = self._nested(self.array)
        return f"dense<{body}> : {self.type}"

    def _element(self, v: np.generic) -> str:
        """One stored element; a non-finite float prints its own bits (keeping a nan's payload)."""
        et = self.type.element_type
        if et.is_float and not np.isfinite(v):
            bits = int(np.asarray(v).view(np.uint16 if et.name == "f16" else np.uint64 if et.name == "f64"
                                          else np.uint32))
            return f"0x{bits >> 16:04X}" if et.name == "bf16" else f"0x{bits:0{et.bitwidth // 4}X}"
        return self._scalar(v.item())

    def _nested(self, a: np.ndarray) -> str:
        if a.ndim == 0:
            return self._element(a[()])
        return "[" + ", ".join(self._nested(x) for x in a) + "]"


_BARE_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*")


def _is_bare_identifier(s: str) -> bool:
    return _BARE_IDENTIFIER.fullmatch(s) is not None


# Convenience constructors used by builders and frontends.
def i64(value: int) -> IntegerAttr:
    return IntegerAttr(int(value), I64)


def f32(value: float) -> FloatAttr:
    return FloatAttr(float(value), F32)


def i64_array(values) -> DenseArrayAttr:
    return DenseArrayAttr(I64, tuple(int(v) for v in values))


def dense(array: np.ndarray, type_: TensorType | None = None) -> DenseElementsAttr:
    from lezero.ir.types import tensor_type_of

    array = np.asarray(array)
    return DenseElementsAttr(type_ or tensor_type_of(array), array)


__all__ = [
    "Attribute", "IntegerAttr", "FloatAttr", "BoolAttr", "StringAttr", "UnitAttr", "SymbolRefAttr",
    "ArrayAttr", "DenseArrayAttr", "DictionaryAttr", "TypeAttr", "DenseElementsAttr", "escape_string", "format_float",
    "float_from_bits", "format_attr_dict", "i64", "f32", "i64_array", "dense",
]
