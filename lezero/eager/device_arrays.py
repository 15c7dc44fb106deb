"""A tensor's storage on its device: a numpy array on the CPU, a torch tensor on cuda.

A cuda tensor holds a contiguous torch tensor on ``lezero.runtime.devices.torch_device`` (a torch
CPU tensor in interpreter mode, ``TRITON_INTERPRET=1``) whose dtype is ``torch.from_numpy`` of the
lezero dtype's numpy storage, so the compiled cuda functions take it as is.  torch is imported
when the first tensor goes to cuda, never by a CPU-only program: until then the tables below hold
numpy's dtypes only, and the CPU path reads them exactly as before (``a.dtype in FLOATS``).

Everything here takes either kind of array: ``KIND[a.dtype]`` (numpy's kind letter), ``numpy_dtype``,
``device_of``, ``host`` (a numpy copy), ``to_device``; ``storage`` makes the host array a tensor holds.

bfloat16 (``lezero.eager.dtypes.BFLOAT16_STORAGE``, ml_dtypes' on the host, ``torch.bfloat16`` on
cuda) crosses between numpy and torch as its bits (``torch.from_numpy`` and ``.numpy()`` know no
bfloat16: an int16 view of the same memory either way, ``torch_of``/``numpy_of``); compiled
functions take it widened to float32 (``widened``/``narrowed``).
"""
from __future__ import annotations

import numpy as np

from lezero.eager.dtypes import BFLOAT16_STORAGE, as_bfloat16
from lezero.runtime.devices import device, require_device, torch_device

CPU = device("cpu")
CUDA = device("cuda")

_NUMPY_DTYPES = [np.dtype(t) for t in (np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16,
                                       np.float32, np.float64)] + [BFLOAT16_STORAGE]

# storage dtype (numpy or torch) -> "b" "u" "i" "f" (ml_dtypes' bfloat16 says "V" itself)
KIND: dict = {d: "f" if d is BFLOAT16_STORAGE else d.kind for d in _NUMPY_DTYPES}
FLOATS: set = {d for d in _NUMPY_DTYPES if KIND[d] == "f"}  # the floating storage dtypes
CATEGORY: dict = {d: {"b": 0, "u": 1, "i": 1, "f": 2}[KIND[d]] for d in _NUMPY_DTYPES}  # promotion category
_TO_NUMPY: dict = {d: d for d in _NUMPY_DTYPES}           # storage dtype -> numpy dtype
_TO_TORCH: dict = {}                                      # numpy dtype -> torch dtype, once torch is loaded
_torch = None


def torch():
    """The torch module, imported on first use; registers its dtypes in the tables above."""
    global _torch
    if _torch is None:
        import torch as module

        for d in _NUMPY_DTYPES:
            t = module.bfloat16 if d is BFLOAT16_STORAGE else module.from_numpy(np.empty(0, d)).dtype
            _TO_TORCH[d], _TO_NUMPY[t], KIND[t], CATEGORY[t] = t, d, KIND[d], CATEGORY[d]
            if d in FLOATS:
                FLOATS.add(t)
        _torch = module
    return _torch


def numpy_dtype(a) -> np.dtype:
    """The numpy dtype of ``a``'s elements (its own for a numpy array)."""
    return _TO_NUMPY[a.dtype]


def kind(a) -> str:
    """numpy's kind letter of an array's elements (either kind of array; "f" for bfloat16)."""
    if a.__class__ is np.ndarray:
        return "f" if a.dtype is BFLOAT16_STORAGE else a.dtype.kind
    return KIND[a.dtype]


def torch_of(a: np.ndarray):
    """The torch CPU tensor of a numpy array's memory (shared; bfloat16 through its bits)."""
    t = torch()
    if a.dtype is BFLOAT16_STORAGE:
        return t.from_numpy(a.view(np.int16)).view(t.bfloat16)
    return t.from_numpy(a)


def numpy_of(t) -> np.ndarray:
    """The numpy array of a torch CPU tensor's memory (shared; bfloat16 through its bits)."""
    if t.dtype is torch().bfloat16:
        return t.view(_torch.int16).numpy().view(BFLOAT16_STORAGE)
    return t.numpy()


def widened(a):
    """A bfloat16 array (either kind) as float32, exactly: what a compiled function takes for bf16."""
    if a.__class__ is np.ndarray:
        return a.astype(np.float32)
    return a.float()


def narrowed(a):
    """A compiled function's bf16 result (float32 holding bf16 values) as bfloat16 storage, exactly."""
    if a.__class__ is np.ndarray:
        return a.astype(BFLOAT16_STORAGE)
    return a.to(_torch.bfloat16)


def storage(value, dtype=None) -> np.ndarray:
    """``value`` as an array a tensor can hold: C-contiguous, aligned, native byte order (a 0-d
    array stays 0-d, unlike ``np.ascontiguousarray``)."""
    a = as_bfloat16(value) if dtype is BFLOAT16_STORAGE else np.asarray(value, dtype)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    return a if a.flags.c_contiguous and a.flags.aligned else np.array(a, order="C")


def size(a) -> int:
    """The number of elements."""
    return a.size if a.__class__ is np.ndarray else a.numel()


def device_of(a):
    """The ``Device`` an array lives on."""
    return CPU if a.__class__ is np.ndarray else CUDA


def host(a) -> np.ndarray:
    """``a`` as a numpy array: ``a`` itself on the CPU, else a C-contiguous copy in host memory."""
    if a.__class__ is np.ndarray:
        return a
    return numpy_of(a.detach().to("cpu", copy=True).contiguous())


def to_device(a, target):
    """``a`` (either kind) on device ``target``: ``a`` itself when it is there already, else a copy.
    Asking for cuda where it cannot run raises ``DeviceError`` (``require_device``)."""
    target = device(target)
    if target.type == "cpu":
        return host(a)
    require_device(target)
    t = torch()
    if a.__class__ is np.ndarray:
        return torch_of(np.ascontiguousarray(a)).to(torch_device(target), copy=True)
    return a.to(torch_device(target))


def like(array: np.ndarray, other):
    """The numpy ``array`` on ``other``'s device (``array`` itself when ``other`` is a numpy array)."""
    if other.__class__ is np.ndarray:
        return array
    return torch_of(np.ascontiguousarray(array)).to(other.device)


def scalar_like(value, other):
    """``value`` as a rank-0 array of ``other``'s dtype, on its device."""
    if other.__class__ is np.ndarray:
        return np.asarray(value, other.dtype)
    return torch().tensor(value, dtype=other.dtype, device=other.device)


def zeros_like(a):
    return np.zeros_like(a) if a.__class__ is np.ndarray else torch().zeros_like(a)


def empty_like(a):
    return np.empty_like(a) if a.__class__ is np.ndarray else torch().empty_like(a)


def cast(a, np_dtype: np.dtype):
    """``a`` with elements of ``np_dtype`` (``a`` itself when it has them), contiguous."""
    if a.__class__ is np.ndarray:
        return a if a.dtype == np_dtype and a.flags.c_contiguous else np.ascontiguousarray(a, np_dtype)
    return a.to(_TO_TORCH[np.dtype(np_dtype)]).contiguous()


def is_torch(value) -> bool:
    """Whether ``value`` is a torch tensor (without importing torch)."""
    return _torch is not None and isinstance(value, _torch.Tensor)


def copy_into(out, value) -> None:
    """Write ``value`` (an array of either kind, or a number; broadcast) into ``out``."""
    if out.__class__ is np.ndarray:
        out[...] = host(value) if is_torch(value) else value
    elif is_torch(value):
        out.copy_(value)
    else:
        out.copy_(torch().as_tensor(np.asarray(value, _TO_NUMPY[out.dtype])))  # copy_ broadcasts


def same_device(arrays):
    """The one device all ``arrays`` are on (the CPU for none), or None when they are on several."""
    on_host = {a.__class__ is np.ndarray for a in arrays}
    if len(on_host) > 1:
        return None
    return CUDA if on_host == {False} else CPU


# --- strided views (the storage of a view tensor: lezero.eager.core.view_of) ------------------------------
# A view's array is numpy's (or torch's) own view of its base's array: the same memory, its shape,
# strides and offset; writes through either are seen by both.

def is_contiguous(a) -> bool:
    return a.flags.c_contiguous if a.__class__ is np.ndarray else a.is_contiguous()


def element_strides(a) -> tuple:
    """``a``'s strides in elements (PyTorch's ``stride()``)."""
    if a.__class__ is np.ndarray:
        return tuple(s // a.itemsize for s in a.strides)
    return tuple(a.stride())


def data_address(a) -> int:
    """The address of ``a``'s first element (PyTorch's ``data_ptr()``)."""
    return a.ctypes.data if a.__class__ is np.ndarray else a.data_ptr()


def element_offset(a, root) -> int:
    """Where ``a``'s first element lies in ``root``'s memory, in elements."""
    return (data_address(a) - data_address(root)) // a.itemsize if a.__class__ is np.ndarray else \
        a.storage_offset() - root.storage_offset()


def dense_order(shape, strides):
    """The dims of an array of ``shape`` and element ``strides`` from the slowest to the fastest
    in memory when its elements fill one block (the array is a permutation of a C-contiguous one:
    ``t()``, ``permute``), else None.  Size-1 dims come last: they address nothing."""
    order = tuple(sorted(range(len(shape)), key=lambda d: (shape[d] == 1, -strides[d])))
    expected = 1
    for d in reversed(order):
        if shape[d] != 1:
            if strides[d] != expected:
                return None
            expected *= shape[d]
    return order


def memory_order(a):
    """``dense_order`` of ``a`` (None also for a C-contiguous ``a``: row-major is its order)."""
    if is_contiguous(a):
        return None
    order = dense_order(a.shape, element_strides(a))
    if order is None:
        raise ValueError(f"an array of shape {tuple(a.shape)} and strides {element_strides(a)} owns no dense memory")
    return order


def memory_block(a):
    """``a``'s memory as a C-contiguous array (``a`` permuted to its ``memory_order``)."""
    order = memory_order(a)
    if order is None:
        return a
    return a.transpose(order) if a.__class__ is np.ndarray else a.permute(order)


def strided(root, shape, strides, offset: int):
    """The view ``(shape, strides, offset)`` (in elements) of ``root``'s memory, writable
    (PyTorch's ``as_strided``; ``root`` owns its memory: C-contiguous or a permutation of it)."""
    root = memory_block(root)
    if root.__class__ is np.ndarray:
        flat = root.reshape(-1)[offset:] if root.size else root.reshape(-1)
        return np.lib.stride_tricks.as_strided(flat, tuple(shape), tuple(s * root.itemsize for s in strides))
    return root.as_strided(tuple(shape), tuple(strides), root.storage_offset() + offset)


def reshaped_view(a, shape):
    """``a`` (a non-contiguous view) in ``shape`` without a copy, or None when its strides do not
    allow it (PyTorch's ``view`` refuses, ``reshape`` copies); a size mismatch raises ValueError."""
    if a.__class__ is not np.ndarray:
        try:
            return a.view(shape)
        except RuntimeError as e:
            if "view size is not compatible" in str(e):
                return None
            raise ValueError(str(e)) from None
    b = a.view()
    try:
        b.shape = shape
    except AttributeError:  # numpy: "Incompatible shape for in-place modification"
        return None
    return b


def contiguous(a):
    """``a`` as a C-contiguous array (itself when it is one)."""
    if a.__class__ is np.ndarray:
        return a if a.flags.c_contiguous else np.ascontiguousarray(a)
    return a.contiguous()


def copy_in_layout(a):
    """A copy of ``a`` (which owns its memory) with ``a``'s layout: the same strides."""
    order = memory_order(a)
    block = memory_block(a)
    copy = np.array(block, order="C") if block.__class__ is np.ndarray else block.clone()
    if order is None:
        return copy
    inverse = tuple(order.index(d) for d in range(len(order)))
    return copy.transpose(inverse) if copy.__class__ is np.ndarray else copy.permute(inverse)


def overlaps(a) -> bool:
    """Whether several elements of ``a`` share one memory location (a stride-0 dim: ``expand``),
    which PyTorch refuses to write through."""
    return any(s == 0 and d > 1 for s, d in zip(element_strides(a), a.shape))
