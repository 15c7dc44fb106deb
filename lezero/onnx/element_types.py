"""ONNX element types (``TensorProto.DataType``) and lezero's, both ways, with numpy's in between."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from lezero.ir.types import BF16, F16, F32, F64, I1, I8, I16, I32, I64, UI8, UI16, UI32, UI64, ElementType

_FROM_ONNX: dict[int, ElementType] = {
    TensorProto.FLOAT: F32, TensorProto.DOUBLE: F64, TensorProto.FLOAT16: F16, TensorProto.BFLOAT16: BF16,
    TensorProto.BOOL: I1, TensorProto.INT8: I8, TensorProto.INT16: I16, TensorProto.INT32: I32,
    TensorProto.INT64: I64, TensorProto.UINT8: UI8, TensorProto.UINT16: UI16, TensorProto.UINT32: UI32,
    TensorProto.UINT64: UI64,
}
_TO_ONNX = {v: k for k, v in _FROM_ONNX.items()}


def onnx_type_name(code: int) -> str:
    try:
        return TensorProto.DataType.Name(code)
    except ValueError:
        return f"data type {code}"


def supports(code: int) -> bool:
    return code in _FROM_ONNX


def from_onnx(code: int) -> ElementType | None:
    """lezero's element type for an ONNX data type, or None when lezero has none (strings,
    complex numbers, float8, float4 and the 4- and 2-bit integers)."""
    return _FROM_ONNX.get(code)


def to_onnx(element_type: ElementType) -> int:
    return _TO_ONNX[element_type]


def bfloat16_dtype():
    """ml_dtypes' bfloat16 (what onnx's numpy_helper uses), or None when it is missing."""
    try:
        import ml_dtypes
    except ImportError:  # pragma: no cover - onnx depends on it
        return None
    return np.dtype(ml_dtypes.bfloat16)


def to_storage_array(array: np.ndarray, element_type: ElementType) -> np.ndarray:
    """An array from ONNX (ml_dtypes' bfloat16 for bf16) in lezero's storage (float32 for bf16)."""
    if element_type == BF16:
        return np.asarray(array).astype(np.float32)
    return np.asarray(array)


def from_storage_array(array: np.ndarray, element_type: ElementType) -> np.ndarray:
    """A lezero result as ONNX gives it: bf16 as ml_dtypes' bfloat16 (exact: it holds bf16 values)."""
    if element_type == BF16:
        bf16 = bfloat16_dtype()
        if bf16 is not None:
            return array.astype(bf16)
    return array
