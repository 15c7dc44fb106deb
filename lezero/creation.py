"""Making tensors: from data (``tensor``, ``from_numpy``), filled (``zeros`` ... ``arange``), and
random (``randn`` ..., seeded by ``manual_seed`` or a ``Generator``).

Random numbers come from numpy's PCG64 generator: seeded runs repeat exactly, but the numbers
differ from PyTorch's for the same seed (tests copy weights instead).
"""
from __future__ import annotations

import numpy as np

from lezero import dtypes as _dt
from lezero.tensor import Tensor, _wrap, storage


class Generator:
    """A seeded source of random numbers (``lz.Generator().manual_seed(0)``)."""

    def __init__(self, device="cpu"):
        self._seed = int(np.random.SeedSequence().entropy % (2 ** 63))
        self._rng = np.random.default_rng(self._seed)

    def manual_seed(self, seed: int) -> "Generator":
        self._seed = int(seed)
        self._rng = np.random.default_rng(self._seed)
        return self

    def seed(self) -> int:
        return self.manual_seed(int(np.random.SeedSequence().entropy % (2 ** 63)))._seed

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self) -> dict:
        return self._rng.bit_generator.state

    def set_state(self, state: dict) -> None:
        self._rng.bit_generator.state = state


default_generator = Generator().manual_seed(0)


def manual_seed(seed: int) -> Generator:
    """Seed the default generator (weights' initialization, dropout, ``randn``, shuffling)."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    return default_generator.seed()


def initial_seed() -> int:
    return default_generator.initial_seed()


def _generator(generator: Generator | None) -> np.random.Generator:
    return (generator or default_generator)._rng


def _finish(array: np.ndarray, requires_grad: bool) -> Tensor:
    t = _wrap(storage(array))
    if requires_grad:
        t.requires_grad_(True)
    return t


def _infer_dtype(data) -> "_dt.dtype":
    """PyTorch's inference from Python data: floats -> the default float, ints -> int64,
    bools -> bool; numpy arrays keep their dtype."""
    if isinstance(data, (np.ndarray, np.generic)) or (hasattr(data, "__array__") and hasattr(data, "dtype")):
        return _dt.from_numpy_dtype(np.asarray(data).dtype)  # numpy arrays (and torch tensors) keep theirs
    array = np.asarray(_unwrap(data))
    if array.dtype.kind == "f":
        return _dt.get_default_dtype()
    if array.dtype.kind in "iu":
        return _dt.int64
    if array.dtype.kind == "b":
        return _dt.bool_
    raise TypeError(f"cannot make a tensor from {type(data).__name__} holding {array.dtype}")


def _unwrap(data):
    if isinstance(data, Tensor):
        return data._data
    if isinstance(data, (list, tuple)):
        return [_unwrap(d) for d in data]
    return data


def tensor(data, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data`` (nested lists, numbers, numpy arrays, tensors)."""
    _check(device)
    d = _dt.as_dtype(dtype) if dtype is not None else \
        data.dtype if isinstance(data, Tensor) else _infer_dtype(data)
    return _finish(np.array(_unwrap(data), dtype=d.numpy, order="C"), requires_grad)


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """``data`` as a tensor, without a copy when it already is one (or a suitable numpy array)."""
    _check(device)
    if isinstance(data, Tensor):
        return data if dtype is None else data.to(dtype)
    if isinstance(data, np.ndarray) and (dtype is None or _dt.as_dtype(dtype).numpy == data.dtype):
        return from_numpy(data)
    return tensor(data, dtype)


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing ``array``'s memory (C-contiguous arrays; others are copied, since kernels
    read contiguous buffers)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(array).__name__})")
    _dt.from_numpy_dtype(array.dtype)  # a clear error for unsupported dtypes
    return _wrap(storage(array))


def _check(device) -> None:
    if device is not None and str(device).split(":")[0] != "cpu":
        raise RuntimeError(f"lezero's eager tensors live on the CPU; device {str(device)!r} is not available")


def _shape(size) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return tuple(int(s) for s in size)


def _float_dtype(dtype) -> "_dt.dtype":
    return _dt.as_dtype(dtype) if dtype is not None else _dt.get_default_dtype()


def zeros(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    _check(device)
    return _finish(np.zeros(_shape(size), _float_dtype(dtype).numpy), requires_grad)


def ones(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    _check(device)
    return _finish(np.ones(_shape(size), _float_dtype(dtype).numpy), requires_grad)


def empty(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    _check(device)
    return _finish(np.empty(_shape(size), _float_dtype(dtype).numpy), requires_grad)


def full(size, fill_value, dtype=None, device=None, requires_grad=False) -> Tensor:
    _check(device)
    d = _dt.as_dtype(dtype) if dtype is not None else _dt.scalar_dtype(fill_value)
    return _finish(np.full(tuple(size), fill_value, d.numpy), requires_grad)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False) -> Tensor:
    _check(device)
    if end is None:
        start, end = 0, start
    if dtype is None:
        d = _dt.int64 if all(isinstance(v, (int, np.integer)) for v in (start, end, step)) else \
            _dt.get_default_dtype()
    else:
        d = _dt.as_dtype(dtype)
    return _finish(np.arange(start, end, step).astype(d.numpy), requires_grad)


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False) -> Tensor:
    _check(device)
    return _finish(np.linspace(start, end, steps).astype(_float_dtype(dtype).numpy), requires_grad)


def eye(n, m=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    _check(device)
    return _finish(np.eye(n, m, dtype=_float_dtype(dtype).numpy), requires_grad)


def zeros_like(t: Tensor, dtype=None, requires_grad=False) -> Tensor:
    return zeros(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def ones_like(t: Tensor, dtype=None, requires_grad=False) -> Tensor:
    return ones(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def empty_like(t: Tensor, dtype=None, requires_grad=False) -> Tensor:
    return empty(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def full_like(t: Tensor, fill_value, dtype=None, requires_grad=False) -> Tensor:
    return full(t.shape, fill_value, dtype=dtype or t.dtype, requires_grad=requires_grad)


def rand(*size, generator=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Uniform on [0, 1)."""
    _check(device)
    d = _float_dtype(dtype)
    return _finish(_generator(generator).random(_shape(size)).astype(d.numpy), requires_grad)


def randn(*size, generator=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Standard normal."""
    _check(device)
    d = _float_dtype(dtype)
    return _finish(_generator(generator).standard_normal(_shape(size)).astype(d.numpy), requires_grad)


def randint(low, high=None, size=(), generator=None, dtype=None, device=None) -> Tensor:
    _check(device)
    if high is None:
        low, high = 0, low
    d = _dt.as_dtype(dtype) if dtype is not None else _dt.int64
    return _finish(_generator(generator).integers(low, high, tuple(size)).astype(d.numpy), False)


def randperm(n: int, generator=None, dtype=None, device=None) -> Tensor:
    _check(device)
    d = _dt.as_dtype(dtype) if dtype is not None else _dt.int64
    return _finish(_generator(generator).permutation(n).astype(d.numpy), False)


def rand_like(t: Tensor, dtype=None, requires_grad=False) -> Tensor:
    return rand(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def randn_like(t: Tensor, dtype=None, requires_grad=False) -> Tensor:
    return randn(t.shape, dtype=dtype or t.dtype, requires_grad=requires_grad)


def normal(mean: float, std: float, size, generator=None, dtype=None) -> Tensor:
    d = _float_dtype(dtype)
    return _finish((_generator(generator).standard_normal(tuple(size)) * std + mean).astype(d.numpy), False)


def bernoulli(p: Tensor, generator=None) -> Tensor:
    """1 with probability ``p`` (elementwise), else 0, in ``p``'s dtype."""
    return _finish((_generator(generator).random(p.shape) < p._data).astype(p._data.dtype), False)
