"""Types of the IR: element (scalar) types, ranked tensor types and function types.

Text forms follow MLIR: ``f32``, ``tensor<2x?x3xf32>``, ``tensor<f32>`` (rank 0),
``(tensor<2xf32>) -> tensor<2xf32>``.  A dynamic dimension is ``None`` in Python and ``?`` in text.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


class Type:
    """Base of all IR types; instances are immutable and compare by value."""


@dataclass(frozen=True)
class ElementType(Type):
    name: str
    kind: str  # "float", "int" or "bool"
    bitwidth: int

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def is_int(self) -> bool:
        return self.kind == "int"

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def numpy_dtype(self) -> np.dtype:
        return NUMPY_DTYPES[self.name]

    @property
    def itemsize(self) -> int:
        return self.numpy_dtype.itemsize

    def __str__(self) -> str:
        return self.name

    __repr__ = __str__


F16 = ElementType("f16", "float", 16)
# numpy has no bfloat16: the reference interpreter stores bf16 in float32 and rounds on cast.
BF16 = ElementType("bf16", "float", 16)
F32 = ElementType("f32", "float", 32)
F64 = ElementType("f64", "float", 64)
I1 = ElementType("i1", "bool", 1)
I8 = ElementType("i8", "int", 8)
I16 = ElementType("i16", "int", 16)
I32 = ElementType("i32", "int", 32)
I64 = ElementType("i64", "int", 64)
UI8 = ElementType("ui8", "int", 8)
UI16 = ElementType("ui16", "int", 16)
UI32 = ElementType("ui32", "int", 32)
UI64 = ElementType("ui64", "int", 64)

ELEMENT_TYPES: dict[str, ElementType] = {t.name: t for t in (F16, BF16, F32, F64, I1, I8, I16, I32, I64,
                                                              UI8, UI16, UI32, UI64)}

NUMPY_DTYPES: dict[str, np.dtype] = {
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(np.float32),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "i1": np.dtype(np.bool_),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "ui8": np.dtype(np.uint8),
    "ui16": np.dtype(np.uint16),
    "ui32": np.dtype(np.uint32),
    "ui64": np.dtype(np.uint64),
}

_FROM_NUMPY = {np.dtype(v): ELEMENT_TYPES[k] for k, v in NUMPY_DTYPES.items() if k != "bf16"}


def element_type_of(dtype) -> ElementType:
    """The element type holding numpy ``dtype`` (float32 maps to f32, never bf16)."""
    try:
        return _FROM_NUMPY[np.dtype(dtype)]
    except KeyError:
        raise TypeError(f"numpy dtype {np.dtype(dtype)} has no lezero element type") from None


@dataclass(frozen=True)
class TensorType(Type):
    """A ranked tensor.  ``shape`` holds ints, or ``None`` for a dynamic dimension."""

    shape: tuple
    element_type: ElementType

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(self.shape))
        for d in self.shape:
            if d is not None and (not isinstance(d, (int, np.integer)) or d < 0):
                raise ValueError(f"bad tensor dimension {d!r}")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(d is not None for d in self.shape)

    @property
    def num_elements(self) -> int:
        if not self.is_static:
            raise ValueError(f"{self} has dynamic dimensions")
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.num_elements * self.element_type.itemsize

    @property
    def dtype(self) -> ElementType:
        return self.element_type

    def with_shape(self, shape) -> "TensorType":
        return TensorType(tuple(shape), self.element_type)

    def with_element_type(self, element_type: ElementType) -> "TensorType":
        return TensorType(self.shape, element_type)

    def __str__(self) -> str:
        dims = "".join(("?" if d is None else str(d)) + "x" for d in self.shape)
        return f"tensor<{dims}{self.element_type}>"

    __repr__ = __str__


@dataclass(frozen=True)
class FunctionType(Type):
    inputs: tuple
    results: tuple

    def __post_init__(self):
        object.__setattr__(self, "inputs", tuple(self.inputs))
        object.__setattr__(self, "results", tuple(self.results))

    def __str__(self) -> str:
        ins = ", ".join(map(str, self.inputs))
        if len(self.results) == 1 and not isinstance(self.results[0], FunctionType):
            outs = str(self.results[0])
        else:
            outs = "(" + ", ".join(map(str, self.results)) + ")"
        return f"({ins}) -> {outs}"

    __repr__ = __str__


def tensor(shape, element_type: ElementType | str = F32) -> TensorType:
    """Shorthand: ``tensor((2, None), "f32")``."""
    if isinstance(element_type, str):
        element_type = ELEMENT_TYPES[element_type]
    return TensorType(tuple(shape), element_type)


def tensor_type_of(array: np.ndarray) -> TensorType:
    return TensorType(array.shape, element_type_of(array.dtype))


def format_shape(shape) -> str:
    """``2x?x3`` (``scalar`` for rank 0), as error messages show shapes."""
    return "x".join("?" if d is None else str(d) for d in shape) if shape else "scalar"
