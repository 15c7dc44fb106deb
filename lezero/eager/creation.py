"""Making tensors: from data (``tensor`` copies; ``as_tensor``, ``from_numpy``, ``from_dlpack`` share
the memory of another library's array), filled (``zeros`` ... ``arange``), and
random (``randn`` ..., seeded by ``manual_seed`` or a ``Generator``).

``device="cuda"`` makes the values on the host and copies them to the device (``to_device``).

Random numbers for initialization (``randn``, ``uniform_``, shuffling) come from numpy's PCG64
generator: seeded runs repeat exactly, but the numbers differ from PyTorch's for the same seed
(tests copy weights instead).  Dropout's masks come from the IR's counter-based generator
(``lz.random_uniform``, Philox4x32-10): a ``Generator`` also holds a Philox offset, and each draw
takes the state ``[seed, offset]`` and advances the offset by one (every offset is a stream of its
own).  While ``random_arguments()`` is active (``jit.trace`` records), draws come from one
recorded state tensor per generator, the function argument of the traced graph (``RandomArgument``).
"""
from __future__ import annotations

import contextlib

import numpy as np

from lezero.eager import dtypes as _dt
from lezero.eager.core import Mode, Tensor, wrap
from lezero.eager.device_arrays import CPU, device_of, host, numpy_dtype, storage, to_device
from lezero.eager.device_arrays import like as storage_like
from lezero.eager.dispatch import OperatorError, user_location
from lezero.eager.interop import ForeignInputError, describe, storage_of
from lezero.runtime.devices import device as _device


_STATE_BITS = 2 ** 64


def _state_words(seed: int, offset: int) -> np.ndarray:
    """``[seed, offset]`` as ``lz.random_uniform``'s state: two 64-bit words in an int64 array."""
    return np.array([seed % _STATE_BITS, offset % _STATE_BITS], np.uint64).view(np.int64)


class Generator:
    """A seeded source of random numbers (``lz.Generator().manual_seed(0)``): numpy's PCG64 for
    initialization, and the seed and offset of the IR's Philox draws (``random_state``)."""

    def __init__(self, device="cpu"):
        self.manual_seed(int(np.random.SeedSequence().entropy % (2 ** 63)))

    def manual_seed(self, seed: int) -> "Generator":
        self._seed = int(seed)
        self._rng = np.random.default_rng(self._seed)
        self._offset = 0
        return self

    def seed(self) -> int:
        return self.manual_seed(int(np.random.SeedSequence().entropy % (2 ** 63)))._seed

    def initial_seed(self) -> int:
        return self._seed

    def get_state(self) -> dict:
        """Everything the next draws depend on: the PCG64 state, and the seed and offset of the
        Philox draws (numbers and strings only, so ``lz.save`` stores it)."""
        return {**self._rng.bit_generator.state, "philox_seed": self._seed, "philox_offset": self._offset}

    def set_state(self, state: dict) -> "Generator":
        state = dict(state)
        self._offset = int(state.pop("philox_offset", 0))
        self._seed = int(state.pop("philox_seed", self._seed))
        self._rng.bit_generator.state = state
        return self

    def random_state(self, like) -> Tensor:
        """The ``[seed, offset]`` (``tensor<2xi64>``) of one ``lz.random_uniform`` draw, on ``like``'s device
        (an array); the offset advances.  Recorded in a trace, see ``random_arguments``."""
        offset, self._offset = self._offset, (self._offset + 1) % _STATE_BITS
        if _RECORDING and Mode.trace:
            return _RECORDING[-1].state(self, offset, like)
        return wrap(storage_like(_state_words(self._seed, offset), like))


class RandomArgument:
    """One generator a traced function draws from: ``tensor``, its ``[seed, offset]`` when the
    call starts, is a function argument; draw ``k`` of the call is ``tensor + [0, k]``.  ``bind()``
    before each call sets the tensor from the generator and advances it by the ``draws`` the graph
    makes, as the eager ops would."""

    def __init__(self, generator: Generator, start: int, like):
        self.generator = generator
        self.seed = generator._seed
        self.start = start
        self.tensor = wrap(storage_like(_state_words(generator._seed, start), like))
        self.draws = 0

    def bind(self) -> None:
        g = self.generator
        self.tensor._data = storage_like(_state_words(g._seed, g._offset), self.tensor._data)
        g._offset = (g._offset + self.draws) % _STATE_BITS


class RandomArguments:
    """The generators one trace draws from, each a ``RandomArgument``."""

    def __init__(self):
        self.arguments: dict[int, RandomArgument] = {}

    def state(self, generator: Generator, offset: int, like) -> Tensor:
        arg = self.arguments.get(id(generator))
        if arg is None:
            arg = self.arguments[id(generator)] = RandomArgument(generator, offset, like)
        elif arg.seed != generator._seed or offset < arg.start:
            raise RuntimeError("a generator was seeded again (manual_seed) inside a traced function: the graph "
                               "draws from its state when called; seed it outside")
        k = offset - arg.start
        arg.draws = max(arg.draws, k + 1)
        if k == 0:
            return arg.tensor
        return arg.tensor + wrap(storage_like(_state_words(0, k), like))


_RECORDING: list[RandomArguments] = []


@contextlib.contextmanager
def random_arguments():
    """While recording a trace: draws from any generator become ops on its ``RandomArgument``
    (yielded as a ``RandomArguments``).  Afterwards each generator is back at the offset the trace
    found it at, so tracing consumes no random numbers (the first call draws what an eager call
    would have)."""
    recording = RandomArguments()
    _RECORDING.append(recording)
    try:
        yield recording
    finally:
        _RECORDING.pop()
        for arg in recording.arguments.values():
            arg.generator._offset = arg.start


default_generator = Generator().manual_seed(0)


def manual_seed(seed: int) -> Generator:
    """Seed the default generator (weights' initialization, dropout, ``randn``, shuffling)."""
    return default_generator.manual_seed(seed)


def seed() -> int:
    return default_generator.seed()


def initial_seed() -> int:
    return default_generator.initial_seed()


def get_rng_state() -> dict:
    """The default generator's state (``torch.get_rng_state``; a dict of numbers here, see
    ``Generator.get_state``)."""
    return default_generator.get_state()


def set_rng_state(new_state: dict) -> None:
    """Put the default generator back in a state ``get_rng_state`` returned."""
    default_generator.set_state(new_state)


def numpy_generator(generator: Generator | None) -> np.random.Generator:
    """The numpy generator of initialization-style draws (``rand``, ``randn``, ``uniform_``, ...).
    Their numbers are data, not ops: inside a traced function they would be frozen into the graph
    as one draw, repeated at every call, so there they are an error."""
    if _RECORDING and Mode.trace:
        raise OperatorError("random numbers drawn with numpy (lz.rand, randn, randint, normal, bernoulli, randperm, "
                            "Tensor.uniform_/normal_, nn.init) inside a traced function would be frozen into the "
                            "graph as one draw: draw them outside and pass them in, or use dropout (the IR's "
                            "random op, new at every call)", user_location())
    return (generator or default_generator)._rng


def _finish(array: np.ndarray, requires_grad: bool, device=None) -> Tensor:
    """A tensor of ``array`` on ``device`` (default the CPU)."""
    t = wrap(storage(array) if device is None else _on(storage(array), device))
    if requires_grad:
        t.requires_grad_(True)
    return t


def _infer_dtype(data) -> "_dt.dtype":
    """PyTorch's inference from Python data: floats -> the default float, ints -> int64,
    bools -> bool; numpy scalars keep their dtype."""
    if isinstance(data, np.generic):
        return _dt.from_numpy_dtype(data.dtype)
    array = np.asarray(_unwrap(data))
    if array.dtype.kind == "f":
        return _dt.get_default_dtype()
    if array.dtype.kind in "iu":
        return _dt.int64
    if array.dtype.kind == "b":
        return _dt.bool_
    raise ForeignInputError(f"lz.tensor: cannot make a tensor from {describe(data)} (numpy sees {array.dtype}): pass "
                            f"numbers, (nested) lists of them, or an array (torch, numpy, DLPack)", user_location())


def _on(array: np.ndarray, device):
    d = _device(device)
    return array if d == CPU else to_device(array, d)


def _unwrap(data):
    if isinstance(data, Tensor):
        return host(data._data)
    if isinstance(data, (list, tuple)):
        return [_unwrap(d) for d in data]
    return data


def tensor(data, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data``: nested lists, numbers, tensors, or an array of
    another library (torch, numpy, DLPack, ``__array__``: ``lezero.eager.interop``), which keeps
    its dtype and, unless ``device`` is given, its device."""
    source = data._data if isinstance(data, Tensor) else storage_of(data, "lz.tensor")
    if source is None:
        d = _dt.as_dtype(dtype) if dtype is not None else _infer_dtype(data)
        return _finish(d.array(_unwrap(data)), requires_grad, device)
    d = _dt.as_dtype(dtype) if dtype is not None else _dt.from_numpy_dtype(numpy_dtype(source))
    copy = d.array(host(source))
    return _finish(copy, requires_grad, device if device is not None else _storage_device(source))


def _storage_device(array):
    """The device of a storage array, None for the CPU (which needs no move)."""
    d = device_of(array)
    return None if d == CPU else d


def as_tensor(data, dtype=None, device=None) -> Tensor:
    """``data`` as a tensor, sharing its memory when it is a tensor or an array of another library
    whose dtype and device are the ones asked for (PyTorch's ``as_tensor``); converted otherwise
    (Python data is copied)."""
    if isinstance(data, Tensor):
        return data.to(dtype=dtype, device=device)
    source = storage_of(data, "lz.as_tensor")
    if source is None:
        return tensor(data, dtype, device)
    return wrap(source).to(dtype=dtype, device=device)


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing ``array``'s memory: a write through either shows in the other (C-contiguous
    arrays; others are copied, since kernels read contiguous buffers)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(array).__name__}); lz.as_tensor takes any array")
    return wrap(storage_of(array, "lz.from_numpy"))


def from_dlpack(ext_tensor) -> Tensor:
    """A tensor sharing the memory of ``ext_tensor``: an object with ``__dlpack__`` (a torch or
    JAX array, a numpy array, ...) or a DLPack capsule (``torch.utils.dlpack.to_dlpack``)."""
    if isinstance(ext_tensor, Tensor):
        return ext_tensor
    if not (hasattr(ext_tensor, "__dlpack__") or type(ext_tensor).__name__ == "PyCapsule"):
        raise ForeignInputError(f"lz.from_dlpack: expected an object with __dlpack__ or a DLPack capsule, got "
                                f"{describe(ext_tensor)} (lz.as_tensor takes any array)", user_location())
    return wrap(storage_of(ext_tensor, "lz.from_dlpack"))


def _shape(size) -> tuple:
    if len(size) == 1 and isinstance(size[0], (tuple, list)):
        size = tuple(size[0])
    return tuple(int(s) for s in size)


def _float_dtype(dtype) -> "_dt.dtype":
    return _dt.as_dtype(dtype) if dtype is not None else _dt.get_default_dtype()


def zeros(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _finish(np.zeros(_shape(size), _float_dtype(dtype).numpy), requires_grad, device)


def ones(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _finish(np.ones(_shape(size), _float_dtype(dtype).numpy), requires_grad, device)


def empty(*size, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _finish(np.empty(_shape(size), _float_dtype(dtype).numpy), requires_grad, device)


def full(size, fill_value, dtype=None, device=None, requires_grad=False) -> Tensor:
    d = _dt.as_dtype(dtype) if dtype is not None else _dt.scalar_dtype(fill_value)
    return _finish(d.array(np.full(tuple(size), fill_value)), requires_grad, device)


def arange(start, end=None, step=1, dtype=None, device=None, requires_grad=False) -> Tensor:
    if end is None:
        start, end = 0, start
    if dtype is None:
        d = _dt.int64 if all(isinstance(v, (int, np.integer)) for v in (start, end, step)) else \
            _dt.get_default_dtype()
    else:
        d = _dt.as_dtype(dtype)
    return _finish(d.array(np.arange(start, end, step)), requires_grad, device)


def linspace(start, end, steps, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _finish(_float_dtype(dtype).array(np.linspace(start, end, steps)), requires_grad, device)


def eye(n, m=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    return _finish(np.eye(n, m, dtype=_float_dtype(dtype).numpy), requires_grad, device)


def zeros_like(t: Tensor, dtype=None, device=None, requires_grad=False) -> Tensor:
    return zeros(t.shape, dtype=dtype or t.dtype, device=_like_device(t, device), requires_grad=requires_grad)


def ones_like(t: Tensor, dtype=None, device=None, requires_grad=False) -> Tensor:
    return ones(t.shape, dtype=dtype or t.dtype, device=_like_device(t, device), requires_grad=requires_grad)


def empty_like(t: Tensor, dtype=None, device=None, requires_grad=False) -> Tensor:
    return empty(t.shape, dtype=dtype or t.dtype, device=_like_device(t, device), requires_grad=requires_grad)


def _like_device(t: Tensor, device):
    """``*_like``'s device: ``t``'s unless given (None for the CPU, which needs no copy)."""
    return device if device is not None else _storage_device(t._data)


def full_like(t: Tensor, fill_value, dtype=None, device=None, requires_grad=False) -> Tensor:
    return full(t.shape, fill_value, dtype=dtype or t.dtype, device=_like_device(t, device),
                requires_grad=requires_grad)


def rand(*size, generator=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Uniform on [0, 1)."""
    d = _float_dtype(dtype)
    return _finish(d.array(numpy_generator(generator).random(_shape(size))), requires_grad, device)


def randn(*size, generator=None, dtype=None, device=None, requires_grad=False) -> Tensor:
    """Standard normal."""
    d = _float_dtype(dtype)
    return _finish(d.array(numpy_generator(generator).standard_normal(_shape(size))), requires_grad, device)


def randint(low, high=None, size=(), generator=None, dtype=None, device=None) -> Tensor:
    if high is None:
        low, high = 0, low
    d = _dt.as_dtype(dtype) if dtype is not None else _dt.int64
    return _finish(numpy_generator(generator).integers(low, high, tuple(size)).astype(d.numpy), False, device)


def randperm(n: int, generator=None, dtype=None, device=None) -> Tensor:
    d = _dt.as_dtype(dtype) if dtype is not None else _dt.int64
    return _finish(numpy_generator(generator).permutation(n).astype(d.numpy), False, device)


def rand_like(t: Tensor, dtype=None, device=None, requires_grad=False) -> Tensor:
    return rand(t.shape, dtype=dtype or t.dtype, device=_like_device(t, device), requires_grad=requires_grad)


def randn_like(t: Tensor, dtype=None, device=None, requires_grad=False) -> Tensor:
    return randn(t.shape, dtype=dtype or t.dtype, device=_like_device(t, device), requires_grad=requires_grad)


def normal(mean: float, std: float, size, generator=None, dtype=None, device=None) -> Tensor:
    d = _float_dtype(dtype)
    values = numpy_generator(generator).standard_normal(tuple(size)) * std + mean
    return _finish(values.astype(d.numpy), False, device)


def bernoulli(p: Tensor, generator=None) -> Tensor:
    """1 with probability ``p`` (elementwise), else 0, in ``p``'s dtype."""
    probabilities = np.asarray(p)
    return _finish((numpy_generator(generator).random(p.shape) < probabilities).astype(probabilities.dtype), False,
                   _like_device(p, None))
