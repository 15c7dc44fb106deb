"""The eager frontend's dtypes (``lz.float32`` ...): each names an IR element type and its numpy
storage, and type promotion follows PyTorch's rules.

``lz.bfloat16``: numpy has no bfloat16, so an eager bf16 tensor holds ml_dtypes' ``bfloat16``
(``BFLOAT16_STORAGE``: two bytes, what JAX uses, a dtype of its own, so the storage says what the
tensor is, as ``lz.float16``'s does).  The IR's bf16 buffers are float32 holding bf16 values
(``lezero.ir.types.BF16``), and its kernels round every result to bf16: a compiled function is
given its bf16 inputs widened to float32 (exact) and its bf16 results narrowed back (exact: they
hold bf16 values), ``lezero.eager.dispatch.compile_for``.  Data become bf16 through float32
(``dtype.array``), as torch converts (float64 -> float32 -> bf16, each to nearest even).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from lezero.ir.types import ELEMENT_TYPES, ElementType

BFLOAT16_STORAGE = np.dtype(ml_dtypes.bfloat16)


def finfo(d: "dtype"):
    """The machine limits of a float dtype's storage (``eps``, ``max`` ...): ml_dtypes' ``finfo``,
    which knows bfloat16 as well as numpy's types (numpy's own ``finfo`` refuses bfloat16)."""
    return ml_dtypes.finfo(d.numpy)


def as_bfloat16(data) -> np.ndarray:
    """``data`` as a new C-contiguous bfloat16 array, through float32 as torch converts (beyond
    float32's range is inf, as there)."""
    with np.errstate(over="ignore"):
        return np.asarray(data, np.float32).astype(BFLOAT16_STORAGE, order="C")


class dtype:  # noqa: N801 - PyTorch's spelling
    """An element type as the eager API shows it: ``lz.float32``."""

    __slots__ = ("name", "element_type", "numpy", "is_floating_point", "itemsize", "_rank")

    def __init__(self, name: str, element_type: str, rank: int):
        self.name = name
        self.element_type: ElementType = ELEMENT_TYPES[element_type]
        self.numpy = BFLOAT16_STORAGE if element_type == "bf16" else self.element_type.numpy_dtype
        self.is_floating_point = self.element_type.is_float
        self.itemsize = self.numpy.itemsize
        self._rank = rank  # position in the promotion lattice within a category

    @property
    def category(self) -> int:
        """0 bool, 1 integer, 2 float: promotion never goes down a category."""
        return {"bool": 0, "int": 1, "float": 2}[self.element_type.kind]

    def array(self, data) -> np.ndarray:
        """``data`` (numbers, lists, an array) as a new C-contiguous array of this dtype's storage;
        bf16 through float32, as torch rounds (each step to nearest, ties to even)."""
        if self.numpy is BFLOAT16_STORAGE:
            return as_bfloat16(data)
        return np.array(data, dtype=self.numpy, order="C")

    def __repr__(self) -> str:
        return f"lezero.{self.name}"

    def __reduce__(self):
        return (_by_name, (self.name,))


bool_ = dtype("bool", "i1", 0)
uint8 = dtype("uint8", "ui8", 1)
int8 = dtype("int8", "i8", 1)
int16 = dtype("int16", "i16", 2)
int32 = dtype("int32", "i32", 3)
int64 = dtype("int64", "i64", 4)
float16 = dtype("float16", "f16", 1)
bfloat16 = dtype("bfloat16", "bf16", 1)
float32 = dtype("float32", "f32", 2)
float64 = dtype("float64", "f64", 3)

ALL = (bool_, uint8, int8, int16, int32, int64, float16, bfloat16, float32, float64)
_BY_NUMPY = {d.numpy: d for d in ALL}
_BY_NAME = {d.name: d for d in ALL}
_BY_NAME.update({"bool_": bool_, "float": float32, "double": float64, "half": float16, "long": int64, "int": int32})

# aliases with PyTorch's names
half, double, long, int_ = float16, float64, int64, int32

_default_float = float32


def _by_name(name: str) -> dtype:
    return _BY_NAME[name]


def from_numpy_dtype(np_dtype) -> dtype:
    try:
        return _BY_NUMPY[np.dtype(np_dtype)]
    except KeyError:
        raise TypeError(f"numpy dtype {np.dtype(np_dtype)} has no lezero dtype "
                        f"(supported: {', '.join(d.name for d in ALL)})") from None


def as_dtype(value) -> dtype:
    """``lz.float32``, a numpy dtype, a torch dtype, a Python type (float, int, bool) or a name."""
    if isinstance(value, dtype):
        return value
    if value is float:
        return _default_float
    if value is int:
        return int64
    if value is bool:
        return bool_
    if isinstance(value, str) and value in _BY_NAME:
        return _BY_NAME[value]
    if type(value).__module__ == "torch" and type(value).__name__ == "dtype":  # torch.float32: lezero's of that name
        name = str(value).removeprefix("torch.")
        if name not in _BY_NAME:
            raise TypeError(f"torch dtype {value} has no lezero dtype (supported: {', '.join(d.name for d in ALL)})")
        return _BY_NAME[name]
    return from_numpy_dtype(value)


def get_default_dtype() -> dtype:
    return _default_float


def set_default_dtype(d) -> None:
    global _default_float
    d = as_dtype(d)
    if not d.is_floating_point:
        raise TypeError(f"the default dtype must be a float dtype, got {d}")
    _default_float = d


def promote(a: dtype, b: dtype) -> dtype:
    """The smallest dtype holding both (bool < integers < floats)."""
    if a is b:
        return a
    if a.category != b.category:
        return a if a.category > b.category else b
    if a.category == 1 and {a, b} == {uint8, int8}:
        return int16
    if {a, b} == {float16, bfloat16}:  # neither holds the other: PyTorch's float32
        return float32
    return a if a._rank >= b._rank else b


def scalar_dtype(value) -> dtype:
    """The dtype a Python number takes on its own."""
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, (int, np.integer)):
        return int64
    return _default_float


def scalar_category(value) -> int:
    if isinstance(value, (bool, np.bool_)):
        return 0
    if isinstance(value, (int, np.integer)):
        return 1
    return 2


def result_type(tensor_dtypes, zero_dim_dtypes=(), scalars=()) -> dtype:
    """PyTorch's rule: tensors with dims decide; a zero-dim tensor, then a Python number, only
    when it is of a higher category (a float scalar with an int tensor gives the default float)."""
    result = None
    for d in tensor_dtypes:
        result = d if result is None else promote(result, d)
    zero = None
    for d in zero_dim_dtypes:
        zero = d if zero is None else promote(zero, d)
    if zero is not None and (result is None or zero.category > result.category):
        result = zero
    for s in scalars:
        cat = scalar_category(s)
        if result is None:
            result = scalar_dtype(s)
        elif cat > result.category:
            result = _default_float if cat == 2 else int64 if cat == 1 else result
    return result
