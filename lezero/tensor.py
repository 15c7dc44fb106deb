"""``lezero.Tensor``: the eager tensor.

A tensor holds a C-contiguous numpy array (``_data``) of a lezero dtype; a cuda tensor a torch
tensor on the device instead (``lezero.device_arrays``: ``x.to("cuda")``, ``device=`` on creation,
``.numpy()``/``.item()`` copy to the host).  Every op on tensors is
an ``EagerOp`` (``lezero.dispatch``) run through ``_apply``: a dict lookup of ``(op, attributes,
input shapes and dtypes)`` to a compiled one-op function (compiled for the inputs' device), one
launch, a new tensor.  Python numbers
become rank-0 inputs, never constants, so ``x * lr`` compiles once whatever ``lr`` is.

Autograd: when grad mode is on and an input requires grad, the op is recorded as a ``Node``
(op, attributes, inputs) on its outputs; ``backward()`` replays the recording into one IR
function and differentiates it (``lezero.autograd``).  While tracing (``lezero.autograd.trace``)
every op is recorded, with the user's line.

Reshapes (``reshape``/``view``/``flatten``/``squeeze``/``unsqueeze``) of a contiguous array need no
kernel: they return a tensor sharing memory (PyTorch's views), recorded as ``lz.reshape``.
In-place ops (``add_``, ``zero_``, ``x += y``, ``x[i] = v``) write into the tensor's memory; on a
tensor the graph records, they are recorded functionally and bump the version, so a backward
that needs the old value fails loudly, as in PyTorch.
"""
from __future__ import annotations

import collections
import math
import numbers

import numpy as np

from lezero import device_arrays as _dev
from lezero import dtypes as _dt
from lezero.device_arrays import CATEGORY, FLOATS, KIND
from lezero.dispatch import _RUNNERS, EagerOp, OperatorError, lz_op, runner_for, user_location
from lezero.ir.types import ELEMENT_TYPES
from lezero.runtime.devices import Device
from lezero.runtime.devices import device as _device

_new = object.__new__


class _Mode:
    """Process-wide recording switches (class attributes: one lookup on the hot path)."""

    grad = True     # grad mode: record ops whose inputs require grad
    trace = 0       # > 0 while tracing: record every op, with its location
    session = None  # the trace recording now (lezero.autograd.trace)
    # While ``jit`` traces: an in-place op on a value the trace computed continues the graph from
    # its result (``_old()`` gives a stand-in for the old value, as with grad); one on an argument
    # (a parameter or buffer) records ``id(tensor) -> (tensor, the tensor of its new value, its
    # version after the update)`` here, the traced function's extra results; in-place ops chain.
    updates = None


class Node:
    """One recorded op: what ``backward`` and ``trace`` replay.  ``inputs`` are tensors;
    ``versions`` their versions when recorded (an in-place change after that is an error)."""

    __slots__ = ("op", "attrs", "inputs", "versions", "location", "session", "__weakref__")

    def __init__(self, op: EagerOp, attrs: tuple, inputs: tuple):
        self.op = op
        self.attrs = attrs
        self.inputs = inputs
        self.versions = tuple(t._version for t in inputs)
        if _Mode.trace:
            self.location, self.session = user_location(), _Mode.session
        else:
            self.location = self.session = None

    def name(self) -> str:
        return "".join(part.capitalize() for part in self.op.name.split("_")) + "Backward"

    @property
    def next_functions(self) -> tuple:
        if self.inputs is None:
            return ()
        return tuple((t._node, t._index) for t in self.inputs)

    def __repr__(self) -> str:
        return f"<{self.name()}>"


def _record(op: EagerOp, attrs: tuple, inputs: tuple, outputs) -> None:
    """Attach a node to ``outputs``; they require grad when grad mode is on, an input requires
    grad and they are floats."""
    grad = _Mode.grad and any(t.requires_grad for t in inputs)
    floats = [t._data.dtype in FLOATS for t in outputs]
    if not (_Mode.trace or any(floats)):
        return  # integer and boolean results carry no gradient: nothing to record
    node = Node(op, attrs, inputs)
    for i, (t, is_float) in enumerate(zip(outputs, floats)):
        if is_float or _Mode.trace:
            t._node, t._index = node, i
            if grad and is_float:
                t.requires_grad = True


def storage(value, dtype=None) -> np.ndarray:
    """``value`` as an array a tensor can hold: C-contiguous, aligned, native byte order (a 0-d
    array stays 0-d, unlike ``np.ascontiguousarray``)."""
    a = np.asarray(value, dtype)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    return a if a.flags.c_contiguous and a.flags.aligned else np.array(a, order="C")


def _wrap(array: np.ndarray) -> "Tensor":
    t = _new(Tensor)
    t._data = array
    return t


# --- the hot path: one op ---------------------------------------------------------------------------

def _apply1(op: EagerOp, attrs: tuple, x: "Tensor") -> "Tensor":
    a = x._data
    key = (op, attrs, a.shape, a.dtype)
    run = _RUNNERS.get(key)
    if run is None:
        run = runner_for(key, op, attrs, (a,))
    out = _new(Tensor)
    out._data = run([a])[0]
    if _Mode.trace or (x.requires_grad and _Mode.grad):
        _record(op, attrs, (x,), (out,))
    return out


def _apply2(op: EagerOp, attrs: tuple, x: "Tensor", y: "Tensor") -> "Tensor":
    a, b = x._data, y._data
    key = (op, attrs, a.shape, a.dtype, b.shape, b.dtype)
    run = _RUNNERS.get(key)
    if run is None:
        run = runner_for(key, op, attrs, (a, b))
    out = _new(Tensor)
    out._data = run([a, b])[0]
    if _Mode.trace or ((x.requires_grad or y.requires_grad) and _Mode.grad):
        _record(op, attrs, (x, y), (out,))
    return out


def apply(op: EagerOp, attrs: tuple, *inputs: "Tensor"):
    """Run ``op`` on tensors: one tensor, or a tuple for an op with several results."""
    arrays = [t._data for t in inputs]
    key = (op, attrs, *[x for a in arrays for x in (a.shape, a.dtype)])
    run = _RUNNERS.get(key)
    if run is None:
        run = runner_for(key, op, attrs, arrays)
    outs = [_wrap(r) for r in run(arrays)]
    if _Mode.trace or (_Mode.grad and any(t.requires_grad for t in inputs)):
        _record(op, attrs, inputs, outs)
    return outs[0] if op.num_results == 1 else tuple(outs)


def _reshaped(x: "Tensor", shape: tuple) -> "Tensor":
    """A tensor sharing ``x``'s memory with another shape (no kernel), recorded as lz.reshape."""
    out = _new(Tensor)
    try:
        out._data = x._data.reshape(shape)
    except (ValueError, RuntimeError):  # numpy's and torch's complaint
        raise OperatorError(f"reshape: cannot reshape a tensor of shape {_fmt(x.shape)} ({x.numel()} elements) "
                            f"to {_fmt(shape)}", user_location()) from None
    if _Mode.trace or (x.requires_grad and _Mode.grad):
        _record(_RESHAPE, (("shape", tuple(out._data.shape)),), (x,), (out,))
    return out


def _fmt(shape) -> str:
    return "x".join(map(str, shape)) if shape else "scalar"


# --- eager ops that are not a single lz op ------------------------------------------------------------

def _emit_clamp(b, attrs, x, *bounds):
    """Where ``x`` is below ``lo`` take ``lo``, above ``hi`` take ``hi``: the gradient reaches
    ``x`` on the closed interval, as PyTorch's."""
    bounds = list(bounds)
    if attrs["min"]:
        lo = bounds.pop(0)
        x = b.op("lz.select", b.op("lz.cmp", x, lo, predicate="lt"), lo, x)
    if attrs["max"]:
        hi = bounds.pop(0)
        x = b.op("lz.select", b.op("lz.cmp", x, hi, predicate="gt"), hi, x)
    return [x]


def _emit_index(b, attrs, x, *indices):
    """Basic indexing as one slice, an integer-array index as a gather, then the final shape."""
    if attrs["starts"]:
        x = b.op("lz.slice", x, starts=attrs["starts"], ends=attrs["ends"], axes=attrs["axes"],
                 steps=attrs["steps"])
    if indices:
        x = b.op("lz.gather", x, indices[0], axis=attrs["gather_axis"])
    if x.type.shape != attrs["shape"]:
        x = b.op("lz.reshape", x, shape=list(attrs["shape"]))
    return [x]


def _emit_concat(b, attrs, *xs):
    if attrs["stack"]:
        xs = [b.op("lz.reshape", x, shape=list(attrs["stacked_shape"])) for x in xs]
    return [b.op("lz.concat", *xs, axis=attrs["axis"])]


def _emit_var(b, attrs, x):
    """``sum((x - mean)^2) / (n - correction)`` over ``axes``."""
    axes = list(attrs["axes"])
    mean = b.op("lz.reduce_mean", x, axes=axes, keepdims=True)
    centered = b.op("lz.sub", x, mean)
    total = b.op("lz.reduce_sum", b.op("lz.mul", centered, centered), axes=axes, keepdims=attrs["keepdims"])
    divisor = max(attrs["count"] - attrs["correction"], 0)
    et = x.type.element_type
    d = b.constant(np.asarray(divisor, et.numpy_dtype))
    y = b.op("lz.div", total, d)
    if attrs["std"]:
        y = b.op("lz.sqrt", y)
    return [y]


def _emit_identity(b, attrs, x):
    return [x]


def _emit_floor_divide(b, attrs, x, y):
    if x.type.element_type.is_float:
        return [b.op("lz.floor", b.op("lz.div", x, y))]
    q = b.op("lz.div", x, y)  # truncates toward zero: step down where the signs differ and it was inexact
    r = b.op("lz.sub", x, b.op("lz.mul", q, y))
    zero = b.constant(np.zeros((), x.type.element_type.numpy_dtype))
    one = b.constant(np.ones((), x.type.element_type.numpy_dtype))
    inexact = b.op("lz.cmp", r, zero, predicate="ne")
    signs = b.op("lz.cmp", b.op("lz.cmp", x, zero, predicate="lt"), b.op("lz.cmp", y, zero, predicate="lt"),
                 predicate="ne")
    return [b.op("lz.select", b.op("lz.and", inexact, signs), b.op("lz.sub", q, one), q)]


def _emit_remainder(b, attrs, x, y):
    (q,) = _emit_floor_divide(b, attrs, x, y)
    return [b.op("lz.sub", x, b.op("lz.mul", q, y))]


def _emit_any_all(b, attrs, x):
    et = ELEMENT_TYPES["i32"]
    nonzero = b.op("lz.cmp", x, b.constant(np.zeros((), x.type.element_type.numpy_dtype)), predicate="ne")
    as_int = b.op("lz.cast", nonzero, to=et)
    reduce = "lz.reduce_max" if attrs["any"] else "lz.reduce_min"
    r = b.op(reduce, as_int, axes=list(attrs["axes"]) or None, keepdims=attrs["keepdims"])
    return [b.op("lz.cast", r, to=ELEMENT_TYPES["i1"])]


def _emit_log1p(b, attrs, x):
    one = b.constant(np.ones((), x.type.element_type.numpy_dtype))
    return [b.op("lz.log", b.op("lz.add", x, one))]


def _emit_expm1(b, attrs, x):
    one = b.constant(np.ones((), x.type.element_type.numpy_dtype))
    return [b.op("lz.sub", b.op("lz.exp", x), one)]


_RESHAPE = lz_op("lz.reshape")
_CAST = lz_op("lz.cast")
_CLAMP = EagerOp("clamp", _emit_clamp)
_INDEX = EagerOp("index", _emit_index)
_CONCAT = EagerOp("cat", _emit_concat)
_VAR = EagerOp("var", _emit_var)
_CLONE = EagerOp("clone", _emit_identity)
_FLOOR_DIVIDE = EagerOp("floor_divide", _emit_floor_divide)
_REMAINDER = EagerOp("remainder", _emit_remainder)
_ANY_ALL = EagerOp("any_all", _emit_any_all)
_LOG1P = EagerOp("log1p", _emit_log1p)
_EXPM1 = EagerOp("expm1", _emit_expm1)

_ADD, _SUB, _MUL, _DIV, _POW = (lz_op(f"lz.{n}") for n in ("add", "sub", "mul", "div", "pow"))
_MAX, _MIN, _AND, _OR = (lz_op(f"lz.{n}") for n in ("max", "min", "and", "or"))
_CMP, _SELECT, _MATMUL, _TRANSPOSE = (lz_op(f"lz.{n}") for n in ("cmp", "select", "matmul", "transpose"))
_BROADCAST, _ARGMAX = lz_op("lz.broadcast_to"), lz_op("lz.argmax")
_SOFTMAX, _LOG_SOFTMAX = lz_op("lz.softmax"), lz_op("lz.log_softmax")
_SWAP_2D = (("perm", (1, 0)),)
_CMP_ATTRS = {p: (("predicate", p),) for p in ("eq", "ne", "lt", "le", "gt", "ge")}
_UNARY = {n: lz_op(f"lz.{n}") for n in ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "relu",
                                          "erf", "sin", "cos", "floor", "ceil", "sign", "reciprocal", "not")}
_REDUCE = {n: lz_op(f"lz.reduce_{n}") for n in ("sum", "mean", "max", "min", "prod")}

MinMax = collections.namedtuple("MinMax", ["values", "indices"])


# --- dtype promotion ------------------------------------------------------------------------------------

def _is_number(v) -> bool:
    return isinstance(v, (numbers.Number, np.bool_)) and not isinstance(v, complex)


def _scalar(value, np_dtype, on=None) -> "Tensor":
    """``value`` as a rank-0 tensor of ``np_dtype``, on the device of the array ``on`` (default
    the CPU)."""
    t = _new(Tensor)
    a = np.asarray(value, np_dtype)
    t._data = a if on is None else _dev.like(a, on)
    return t


def _scalar_like(value, a) -> "Tensor":
    """``value`` as a rank-0 tensor of the array ``a``'s dtype, on its device."""
    t = _new(Tensor)
    t._data = np.asarray(value, a.dtype) if a.__class__ is np.ndarray else _dev.scalar_like(value, a)
    return t


def _kind(a) -> str:
    """numpy's kind letter of an array's elements (either kind of array)."""
    return a.dtype.kind if a.__class__ is np.ndarray else KIND[a.dtype]


def _cast_to(t: "Tensor", d: "_dt.dtype") -> "Tensor":
    a = t._data
    if a.dtype == d.numpy or (a.__class__ is not np.ndarray and _dev.numpy_dtype(a) == d.numpy):
        return t
    return _apply1(_CAST, (("to", d.element_type),), t)


def _operands(x: "Tensor", other, true_divide: bool = False):
    """``x`` and ``other`` (a tensor, a number, a numpy array) as tensors of one dtype, PyTorch's
    promotion; ``true_divide`` makes integers floats."""
    if isinstance(other, Tensor):
        if x._data.dtype is other._data.dtype and not (true_divide and x._data.dtype not in FLOATS):
            return x, other
        a, b = x.dtype, other.dtype
        dims, zero = [], []
        (dims if x._data.ndim else zero).append(a)
        (dims if other._data.ndim else zero).append(b)
        target = _dt.result_type(dims, zero)
        if true_divide and not target.is_floating_point:
            target = _dt.get_default_dtype()
        return _cast_to(x, target), _cast_to(other, target)
    if _is_number(other):
        a = x._data
        kind = CATEGORY[a.dtype]
        cat = _dt.scalar_category(other)
        if cat <= kind and not (true_divide and kind < 2):
            return x, _scalar_like(other, a)
        target = _dt.get_default_dtype() if (cat == 2 or true_divide) else _dt.int64
        x = _cast_to(x, target)
        return x, _scalar_like(other, x._data)
    if isinstance(other, (np.ndarray, list, tuple)):
        from lezero.creation import tensor
        return _operands(x, tensor(other, device=_dev.device_of(x._data)), true_divide)
    return None


def _binary(op: EagerOp, x: "Tensor", other, reverse: bool = False, attrs: tuple = (), true_divide=False):
    pair = _operands(x, other, true_divide)
    if pair is None:
        return NotImplemented
    a, b = pair
    if reverse:
        a, b = b, a
    return _apply2(op, attrs, a, b)


def _binary_method(op: EagerOp, reverse: bool = False, true_divide: bool = False):
    """A binary operator: straight to ``_apply2`` for two tensors of one dtype, else promote."""
    def method(self, other):
        if other.__class__ is Tensor and self._data.dtype is other._data.dtype and \
                not (true_divide and self._data.dtype not in FLOATS):
            return _apply2(op, (), other, self) if reverse else _apply2(op, (), self, other)
        return _binary(op, self, other, reverse, true_divide=true_divide)
    method.__name__ = f"__{'r' if reverse else ''}{op.name}__"
    return method


def _compare_method(predicate: str):
    attrs = _CMP_ATTRS[predicate]

    def method(self, other):
        if other.__class__ is Tensor and self._data.dtype is other._data.dtype:
            return _apply2(_CMP, attrs, self, other)
        return _compare(self, other, predicate)
    method.__name__ = f"__{predicate}__"
    return method


_EQ, _NE = _compare_method("eq"), _compare_method("ne")


def _compare(x: "Tensor", other, predicate: str):
    pair = _operands(x, other)
    if pair is None:
        return NotImplemented
    return _apply2(_CMP, _CMP_ATTRS[predicate], *pair)


def _float_input(x: "Tensor") -> "Tensor":
    """Integer inputs of float functions (exp, sqrt, ...) compute in the default float, as PyTorch."""
    if x._data.dtype in FLOATS:
        return x
    return _cast_to(x, _dt.get_default_dtype())


def _dims(dim, rank: int) -> tuple:
    """``dim`` (None, an int or a sequence) as sorted non-negative axes; None is every axis."""
    if dim is None:
        return tuple(range(rank))
    dims = (dim,) if isinstance(dim, (int, np.integer)) else tuple(dim)
    out = []
    for d in dims:
        if not -max(rank, 1) <= d < max(rank, 1):
            raise IndexError(f"Dimension out of range (expected to be in range of [{-max(rank, 1)}, "
                             f"{max(rank, 1) - 1}], but got {d})")
        out.append(int(d) % max(rank, 1))
    return tuple(sorted(set(out)))


def _dim(dim: int, rank: int) -> int:
    if not -max(rank, 1) <= dim < max(rank, 1):
        raise IndexError(f"Dimension out of range (expected to be in range of [{-max(rank, 1)}, {max(rank, 1) - 1}],"
                         f" but got {dim})")
    return int(dim) % max(rank, 1)


def _shape_args(args) -> tuple:
    """``f(2, 3)`` or ``f((2, 3))`` as ``(2, 3)``."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    return tuple(int(a) for a in args)


class Tensor:
    """An n-dimensional array on the CPU or on cuda; see the module docstring."""

    # Defaults as class attributes: a new tensor sets only ``_data``.
    requires_grad = False
    grad = None
    _node = None
    _index = 0
    _version = 0
    __array_priority__ = 1000  # numpy defers to our reflected operators
    __hash__ = object.__hash__

    def __init__(self, data=()):
        """``lz.Tensor(data)``: a float tensor (PyTorch's legacy constructor); prefer ``lz.tensor``."""
        self._data = storage(data, _dt.get_default_dtype().numpy)

    # --- properties -------------------------------------------------------------------------------
    @property
    def dtype(self) -> "_dt.dtype":
        a = self._data
        return _dt.from_numpy_dtype(a.dtype if a.__class__ is np.ndarray else _dev.numpy_dtype(a))

    @property
    def shape(self) -> tuple:
        s = self._data.shape
        return s if s.__class__ is tuple else tuple(s)

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def device(self) -> Device:
        return _dev.device_of(self._data)

    @property
    def is_cuda(self) -> bool:
        return self._data.__class__ is not np.ndarray

    @property
    def is_leaf(self) -> bool:
        return self._node is None

    @property
    def grad_fn(self):
        return self._node if self.requires_grad else None

    @property
    def data(self) -> "Tensor":
        """The same memory, detached from the graph."""
        return _wrap(self._data)

    @data.setter
    def data(self, value) -> None:
        value = value._data if isinstance(value, Tensor) else storage(value)
        self._data = value
        self._version += 1

    @property
    def T(self) -> "Tensor":  # noqa: N802
        return self.permute(*reversed(range(self.ndim)))

    @property
    def mT(self) -> "Tensor":  # noqa: N802
        return self.transpose(-2, -1)

    def size(self, dim=None):
        return self.shape if dim is None else self._data.shape[dim]

    def dim(self) -> int:
        return self._data.ndim

    def numel(self) -> int:
        return _dev.size(self._data)

    def element_size(self) -> int:
        return self._data.itemsize

    def is_floating_point(self) -> bool:
        return self._data.dtype in FLOATS

    def is_contiguous(self) -> bool:
        return True

    def contiguous(self) -> "Tensor":
        return self

    # --- numpy and Python interop -----------------------------------------------------------------
    def numpy(self) -> np.ndarray:
        """The tensor's memory as a numpy array (no copy); a cuda tensor's copied to the host."""
        if self.requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        return _dev.host(self._data)

    def __array__(self, dtype=None, copy=None):
        a = _dev.host(self._data)
        if dtype is not None and np.dtype(dtype) != a.dtype:
            return a.astype(dtype)
        return a.copy() if copy else a

    def item(self):
        n = _dev.size(self._data)
        if n != 1:
            raise RuntimeError(f"a Tensor with {n} elements cannot be converted to Scalar")
        return self._data.reshape(()).item()

    def tolist(self):
        return self._data.tolist()

    def __len__(self) -> int:
        if not self._data.ndim:
            raise TypeError("len() of a 0-d tensor")
        return self._data.shape[0]

    def __iter__(self):
        if not self._data.ndim:
            raise TypeError("iteration over a 0-d tensor")
        return (self[i] for i in range(self._data.shape[0]))

    def __bool__(self) -> bool:
        n = _dev.size(self._data)
        if n != 1:
            raise RuntimeError(f"Boolean value of Tensor with {n} values is ambiguous")
        return bool(self._data.reshape(()))

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if _kind(self._data) not in "iub" or _dev.size(self._data) != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __repr__(self) -> str:
        a = _dev.host(self._data)
        body = np.array2string(a, separator=", ", prefix="tensor(")
        extras = [] if self._data is a else [f"device='{self.device}'"]
        d = a.dtype
        if d not in (_dt.get_default_dtype().numpy, np.dtype(np.int64), np.dtype(np.bool_)) or a.size == 0:
            extras.append(f"dtype={self.dtype!r}")
        if self.grad_fn is not None:
            extras.append(f"grad_fn=<{self.grad_fn.name()}>")
        elif self.requires_grad:
            extras.append("requires_grad=True")
        return "tensor(" + body + "".join(", " + e for e in extras) + ")"

    def __reduce__(self):
        if self._data.__class__ is np.ndarray:
            return (_rebuild, (self._data, self.requires_grad))
        return (_rebuild, (_dev.host(self._data), self.requires_grad, str(self.device)))

    # --- autograd ---------------------------------------------------------------------------------
    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None) -> None:
        from lezero.autograd import backward
        backward(self, gradient, retain_graph=retain_graph, create_graph=create_graph, inputs=inputs)

    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        if not requires_grad and self._node is not None and self.requires_grad:
            raise RuntimeError("you can only change requires_grad flags of leaf variables.")
        if requires_grad and self._data.dtype not in FLOATS:
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        self.requires_grad = requires_grad
        return self

    def detach(self) -> "Tensor":
        return _wrap(self._data)

    def detach_(self) -> "Tensor":
        self._node = None
        self.requires_grad = False
        return self

    def clone(self) -> "Tensor":
        return _apply1(_CLONE, (), self)

    def _new_like(self, make, dtype) -> "Tensor":
        """A new tensor on ``self``'s device: ``make(numpy dtype)`` (a numpy array) of ``dtype``,
        default ``self``'s."""
        array = make(_dt.as_dtype(dtype).numpy if dtype else _dev.numpy_dtype(self._data))
        return _wrap(_dev.like(array, self._data))

    def new_zeros(self, *size, dtype=None) -> "Tensor":
        return self._new_like(lambda d: np.zeros(_shape_args(size), d), dtype)

    def new_ones(self, *size, dtype=None) -> "Tensor":
        return self._new_like(lambda d: np.ones(_shape_args(size), d), dtype)

    def new_full(self, size, fill_value, dtype=None) -> "Tensor":
        return self._new_like(lambda d: np.full(tuple(size), fill_value, d), dtype)

    def new_empty(self, *size, dtype=None) -> "Tensor":
        return self._new_like(lambda d: np.empty(_shape_args(size), d), dtype)

    def new_tensor(self, data, dtype=None) -> "Tensor":
        return self._new_like(lambda d: storage(data, d), dtype)

    # --- arithmetic --------------------------------------------------------------------------------
    __add__ = _binary_method(_ADD)
    __radd__ = _binary_method(_ADD, reverse=True)
    __sub__ = _binary_method(_SUB)
    __rsub__ = _binary_method(_SUB, reverse=True)
    __mul__ = _binary_method(_MUL)
    __rmul__ = _binary_method(_MUL, reverse=True)
    __truediv__ = _binary_method(_DIV, true_divide=True)
    __rtruediv__ = _binary_method(_DIV, reverse=True, true_divide=True)
    __floordiv__ = _binary_method(_FLOOR_DIVIDE)
    __rfloordiv__ = _binary_method(_FLOOR_DIVIDE, reverse=True)
    __mod__ = _binary_method(_REMAINDER)
    __rmod__ = _binary_method(_REMAINDER, reverse=True)
    __pow__ = _binary_method(_POW)
    __rpow__ = _binary_method(_POW, reverse=True)

    def __matmul__(self, other):
        return self.matmul(other)

    def __rmatmul__(self, other):
        from lezero.creation import tensor
        return tensor(other).matmul(self)

    def __neg__(self):
        return _apply1(_UNARY["neg"], (), self)

    def __pos__(self):
        return self

    def __abs__(self):
        return self.abs()

    def __invert__(self):
        return _apply1(_UNARY["not"], (), self)

    def __and__(self, other):
        return _binary(_AND, self, other)

    __rand__ = __and__

    def __or__(self, other):
        return _binary(_OR, self, other)

    __ror__ = __or__

    def __eq__(self, other):  # noqa: D105 - elementwise, as in PyTorch
        return False if other is None else _EQ(self, other)

    def __ne__(self, other):
        return True if other is None else _NE(self, other)

    __lt__ = _compare_method("lt")
    __le__ = _compare_method("le")
    __gt__ = _compare_method("gt")
    __ge__ = _compare_method("ge")

    def __iadd__(self, other):
        return self.add_(other)

    def __isub__(self, other):
        return self.sub_(other)

    def __imul__(self, other):
        return self.mul_(other)

    def __itruediv__(self, other):
        return self.div_(other)

    def add(self, other, alpha=1):
        return self + (other * alpha if alpha != 1 else other)

    def sub(self, other, alpha=1):
        return self - (other * alpha if alpha != 1 else other)

    def mul(self, other):
        return self * other

    def div(self, other):
        return self / other

    def pow(self, exponent):
        return self ** exponent

    def maximum(self, other):
        return _binary(_MAX, self, other)

    def minimum(self, other):
        return _binary(_MIN, self, other)

    def eq(self, other):
        return _compare(self, other, "eq")

    def ne(self, other):
        return _compare(self, other, "ne")

    def lt(self, other):
        return _compare(self, other, "lt")

    def le(self, other):
        return _compare(self, other, "le")

    def gt(self, other):
        return _compare(self, other, "gt")

    def ge(self, other):
        return _compare(self, other, "ge")

    def logical_not(self):
        return _apply1(_UNARY["not"], (), _cast_to(self, _dt.bool_))

    def matmul(self, other):
        if not isinstance(other, Tensor):
            from lezero.creation import tensor
            other = tensor(other)
        a, b = _operands(self, other)
        return _apply2(_MATMUL, (), a, b)

    def mm(self, other):
        return self.matmul(other)

    def bmm(self, other):
        return self.matmul(other)

    # --- elementwise functions ---------------------------------------------------------------------
    def _unary(self, name: str) -> "Tensor":
        return _apply1(_UNARY[name], (), _float_input(self))

    def exp(self):
        return self._unary("exp")

    def log(self):
        return self._unary("log")

    def sqrt(self):
        return self._unary("sqrt")

    def rsqrt(self):
        return self._unary("rsqrt")

    def tanh(self):
        return self._unary("tanh")

    def sigmoid(self):
        return self._unary("sigmoid")

    def erf(self):
        return self._unary("erf")

    def sin(self):
        return self._unary("sin")

    def cos(self):
        return self._unary("cos")

    def reciprocal(self):
        return self._unary("reciprocal")

    def log1p(self):
        return _apply1(_LOG1P, (), _float_input(self))

    def expm1(self):
        return _apply1(_EXPM1, (), _float_input(self))

    def relu(self):
        return _apply1(_UNARY["relu"], (), self)

    def abs(self):
        return _apply1(_UNARY["abs"], (), self)

    def neg(self):
        return -self

    def sign(self):
        return _apply1(_UNARY["sign"], (), self)

    def floor(self):
        return self if self._data.dtype not in FLOATS else _apply1(_UNARY["floor"], (), self)

    def ceil(self):
        return self if self._data.dtype not in FLOATS else _apply1(_UNARY["ceil"], (), self)

    def square(self):
        return self * self

    def clamp(self, min=None, max=None):  # noqa: A002 - PyTorch's names
        if min is None and max is None:
            raise RuntimeError("torch.clamp: At least one of 'min' or 'max' must not be None")
        bounds = []
        x = self
        for bound in (min, max):
            if bound is None:
                continue
            pair = _operands(x, bound)
            if pair is None:
                raise TypeError(f"clamp bound must be a number or a tensor, got {type(bound).__name__}")
            x, b = pair
            bounds.append(b)
        bounds = [_cast_to(b, x.dtype) for b in bounds]
        return apply(_CLAMP, (("min", min is not None), ("max", max is not None)), x, *bounds)

    clip = clamp

    def where(self, condition, other):
        from lezero.tensor_functions import where
        return where(condition, self, other)

    def masked_fill(self, mask, value):
        from lezero.tensor_functions import where
        return where(mask, value, self)

    def lerp(self, end, weight):
        return self + (end - self) * weight

    # --- reductions --------------------------------------------------------------------------------
    def _reduce(self, name: str, dim, keepdim: bool) -> "Tensor":
        axes = _dims(dim, self.ndim)
        attrs = (("axes", axes), ("keepdims", bool(keepdim))) if self.ndim else (("keepdims", bool(keepdim)),)
        return _apply1(_REDUCE[name], attrs, self)

    def sum(self, dim=None, keepdim=False, dtype=None):
        x = self
        if dtype is not None:
            x = _cast_to(x, _dt.as_dtype(dtype))
        elif _kind(x._data) in "bui" and x.dtype is not _dt.int64:
            x = _cast_to(x, _dt.int64)
        return x._reduce("sum", dim, keepdim)

    def mean(self, dim=None, keepdim=False, dtype=None):
        x = self if dtype is None else _cast_to(self, _dt.as_dtype(dtype))
        if x._data.dtype not in FLOATS:
            raise RuntimeError(f"mean(): could not infer output dtype. Input dtype must be either a floating point "
                               f"or complex dtype. Got: {x.dtype.name.capitalize()}")
        return x._reduce("mean", dim, keepdim)

    def prod(self, dim=None, keepdim=False):
        return self._reduce("prod", dim, keepdim)

    def var(self, dim=None, unbiased=None, keepdim=False, correction=None):
        return self._var(dim, unbiased, keepdim, correction, std=False)

    def std(self, dim=None, unbiased=None, keepdim=False, correction=None):
        return self._var(dim, unbiased, keepdim, correction, std=True)

    def _var(self, dim, unbiased, keepdim, correction, std):
        if correction is None:
            correction = 0 if unbiased is False else 1
        x = _float_input(self)
        axes = _dims(dim, x.ndim)
        count = math.prod(x.shape[a] for a in axes) if x.ndim else 1
        attrs = (("axes", axes), ("keepdims", bool(keepdim)), ("count", count), ("correction", correction),
                 ("std", std))
        return _apply1(_VAR, attrs, x)

    def _extremum(self, name: str, dim, keepdim: bool):
        if dim is None:
            return self._reduce(name, None, False)
        values = self._reduce(name, dim, keepdim)
        indices = (self if name == "max" else -self).argmax(dim, keepdim)
        return MinMax(values, indices)

    def max(self, dim=None, keepdim=False):
        if isinstance(dim, Tensor):
            return self.maximum(dim)
        return self._extremum("max", dim, keepdim)

    def min(self, dim=None, keepdim=False):
        if isinstance(dim, Tensor):
            return self.minimum(dim)
        return self._extremum("min", dim, keepdim)

    def amax(self, dim=None, keepdim=False):
        return self._reduce("max", dim, keepdim)

    def amin(self, dim=None, keepdim=False):
        return self._reduce("min", dim, keepdim)

    def argmax(self, dim=None, keepdim=False):
        if dim is None:
            return _apply1(_ARGMAX, (("axis", 0), ("keepdims", False)), self.reshape(-1))
        return _apply1(_ARGMAX, (("axis", _dim(dim, self.ndim)), ("keepdims", bool(keepdim))), self)

    def argmin(self, dim=None, keepdim=False):
        return (-self).argmax(dim, keepdim)

    def any(self, dim=None, keepdim=False):
        return _apply1(_ANY_ALL, (("any", True), ("axes", _dims(dim, self.ndim)), ("keepdims", bool(keepdim))), self)

    def all(self, dim=None, keepdim=False):
        return _apply1(_ANY_ALL, (("any", False), ("axes", _dims(dim, self.ndim)), ("keepdims", bool(keepdim))), self)

    def softmax(self, dim):
        return _apply1(_SOFTMAX, (("axis", _dim(dim, self.ndim)),), _float_input(self))

    def log_softmax(self, dim):
        return _apply1(_LOG_SOFTMAX, (("axis", _dim(dim, self.ndim)),), _float_input(self))

    def logsumexp(self, dim, keepdim=False):
        m = self.amax(dim, keepdim=True).detach()
        out = (self - m).exp().sum(dim, keepdim=True).log() + m
        return out if keepdim else out.squeeze(dim)

    def norm(self, p=2, dim=None, keepdim=False):
        if p == 2:
            return (self * self).sum(dim, keepdim).sqrt()
        if p == 1:
            return self.abs().sum(dim, keepdim)
        return (self.abs() ** p).sum(dim, keepdim) ** (1.0 / p)

    # --- shapes ------------------------------------------------------------------------------------
    def reshape(self, *shape) -> "Tensor":
        return _reshaped(self, _shape_args(shape))

    def view(self, *shape) -> "Tensor":
        if len(shape) == 1 and isinstance(shape[0], _dt.dtype):
            raise NotImplementedError("view(dtype) is not supported; use .to(dtype)")
        return _reshaped(self, _shape_args(shape))

    def view_as(self, other: "Tensor") -> "Tensor":
        return _reshaped(self, other.shape)

    def reshape_as(self, other: "Tensor") -> "Tensor":
        return _reshaped(self, other.shape)

    def flatten(self, start_dim=0, end_dim=-1) -> "Tensor":
        if self.ndim == 0:
            return _reshaped(self, (1,))
        s, e = _dim(start_dim, self.ndim), _dim(end_dim, self.ndim)
        shape = self.shape
        return _reshaped(self, shape[:s] + (math.prod(shape[s:e + 1]),) + shape[e + 1:])

    def unflatten(self, dim, sizes) -> "Tensor":
        d = _dim(dim, self.ndim)
        return _reshaped(self, self.shape[:d] + tuple(sizes) + self.shape[d + 1:])

    def unsqueeze(self, dim) -> "Tensor":
        d = _dim(dim, self.ndim + 1)
        return _reshaped(self, self.shape[:d] + (1,) + self.shape[d:])

    def squeeze(self, dim=None) -> "Tensor":
        if dim is None:
            return _reshaped(self, tuple(s for s in self.shape if s != 1))
        dims = _dims(dim, self.ndim)
        return _reshaped(self, tuple(s for i, s in enumerate(self.shape) if not (i in dims and s == 1)))

    def permute(self, *dims) -> "Tensor":
        perm = tuple(_dim(d, self.ndim) for d in _shape_args(dims))
        if sorted(perm) != list(range(self.ndim)):
            raise RuntimeError(f"permute(): dims {list(dims)} are not a permutation of the {self.ndim} dims")
        if perm == tuple(range(self.ndim)):
            return self
        return _apply1(_TRANSPOSE, (("perm", perm),), self)

    def transpose(self, dim0, dim1) -> "Tensor":
        perm = list(range(self.ndim))
        a, b = _dim(dim0, self.ndim), _dim(dim1, self.ndim)
        perm[a], perm[b] = perm[b], perm[a]
        return self.permute(*perm)

    swapaxes = transpose

    def t(self) -> "Tensor":
        if self._data.ndim < 2:
            return self
        if self._data.ndim > 2:
            raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {self.ndim}D")
        return _apply1(_TRANSPOSE, _SWAP_2D, self)

    def expand(self, *sizes) -> "Tensor":
        sizes = _shape_args(sizes)
        lead = len(sizes) - self.ndim
        if lead < 0:
            raise RuntimeError(f"expand: the number of sizes provided ({len(sizes)}) must be greater or equal to "
                               f"the number of dimensions in the tensor ({self.ndim})")
        shape = tuple(self.shape[i - lead] if s == -1 and i >= lead else s for i, s in enumerate(sizes))
        if shape == self.shape:
            return self
        return _apply1(_BROADCAST, (("shape", shape),), self)

    def expand_as(self, other: "Tensor") -> "Tensor":
        return self.expand(*other.shape)

    def broadcast_to(self, shape) -> "Tensor":
        return self.expand(*shape)

    def repeat(self, *sizes) -> "Tensor":
        sizes = _shape_args(sizes)
        x = self.reshape((1,) * (len(sizes) - self.ndim) + self.shape)
        # tile as broadcast + reshape: (r0, d0, r1, d1, ...) -> (r0*d0, r1*d1, ...)
        inter = tuple(v for r, d in zip(sizes, x.shape) for v in (1, d))
        target = tuple(v for r, d in zip(sizes, x.shape) for v in (r, d))
        return x.reshape(inter).expand(*target).reshape(tuple(r * d for r, d in zip(sizes, x.shape)))

    def chunk(self, chunks: int, dim=0):
        size = self.shape[_dim(dim, self.ndim)]
        step = -(-size // chunks)
        return self.split(step, dim)

    def split(self, split_size, dim=0):
        d = _dim(dim, self.ndim)
        size = self.shape[d]
        sizes = [split_size] * (size // split_size) + ([size % split_size] if size % split_size else []) \
            if isinstance(split_size, int) else list(split_size)
        out, start = [], 0
        for s in sizes:
            out.append(self.narrow(d, start, s))
            start += s
        return tuple(out)

    def narrow(self, dim, start, length) -> "Tensor":
        d = _dim(dim, self.ndim)
        index = [slice(None)] * self.ndim
        index[d] = slice(start, start + length)
        return self[tuple(index)]

    def unbind(self, dim=0):
        d = _dim(dim, self.ndim)
        return tuple(self.select(d, i) for i in range(self.shape[d]))

    def select(self, dim, index) -> "Tensor":
        d = _dim(dim, self.ndim)
        return self[(slice(None),) * d + (index,)]

    def index_select(self, dim, index) -> "Tensor":
        d = _dim(dim, self.ndim)
        return self[(slice(None),) * d + (index,)]

    # --- dtype and device -------------------------------------------------------------------------
    def to(self, *args, **kwargs) -> "Tensor":
        """``to(dtype)``, ``to("cuda")``, ``to(device, dtype)``, ``to(other)`` (its device and dtype).
        ``self`` when nothing changes; moving to another device copies (a cast happens on the CPU
        side of the move)."""
        dtype, target = _to_arguments(args, kwargs)
        if target is None or target == self.device:
            return self if dtype is None else _cast_to(self, dtype)
        if dtype is not None and target.type != "cpu":
            return _moved(_cast_to(self, dtype), target)
        moved = _moved(self, target)
        return moved if dtype is None else _cast_to(moved, dtype)

    def type(self, d=None):
        if d is None:
            return f"lezero.{self.dtype.name.capitalize()}Tensor"
        return _cast_to(self, _dt.as_dtype(d))

    def type_as(self, other: "Tensor") -> "Tensor":
        return _cast_to(self, other.dtype)

    def cpu(self) -> "Tensor":
        return self if self._data.__class__ is np.ndarray else _moved(self, _dev.CPU)

    def cuda(self, device=None, non_blocking: bool = False) -> "Tensor":
        return self.to(_cuda_device(device))

    def float(self):
        return _cast_to(self, _dt.float32)

    def double(self):
        return _cast_to(self, _dt.float64)

    def half(self):
        return _cast_to(self, _dt.float16)

    def long(self):
        return _cast_to(self, _dt.int64)

    def int(self):
        return _cast_to(self, _dt.int32)

    def bool(self):
        return _cast_to(self, _dt.bool_)

    # --- indexing ----------------------------------------------------------------------------------
    def __getitem__(self, key) -> "Tensor":
        return _getitem(self, key)

    def __setitem__(self, key, value) -> None:
        if self.requires_grad and _Mode.grad:
            raise RuntimeError("in-place assignment to a tensor that requires grad is not supported "
                               "(use lz.no_grad(), or build the result out of place)")
        if isinstance(value, Tensor):
            value = value._data
        key = _numpy_key(key)
        a = self._data
        if a.__class__ is np.ndarray:
            a[key] = _dev.host(value) if _dev.is_torch(value) else value
        else:
            a[key] = value if _dev.is_torch(value) or _is_number(value) else \
                _dev.like(np.asarray(value, _dev.numpy_dtype(a)), a)
        self._version += 1

    # --- in place ----------------------------------------------------------------------------------
    def _old(self) -> "Tensor":
        """A tensor standing for the current value before an in-place op changes ``self``: ``self``
        itself when nothing is recorded, else a tensor taking over its place in the graph."""
        if not (self.requires_grad and _Mode.grad):
            if _Mode.updates is not None:  # a jit trace: see ``_Mode.updates``
                if id(self) in _Mode.updates:
                    return _Mode.updates[id(self)][1]  # the traced value of an earlier in-place op
                if self._traced():  # a value the trace computed: a stand-in takes its place in the graph
                    old = _wrap(self._data)
                    old._node, old._index, old._version = self._node, self._index, self._version
                    return old
            return self
        if self._node is None:
            raise RuntimeError("a leaf Variable that requires grad is being used in an in-place operation.")
        old = _wrap(self._data)
        old._node, old._index, old.requires_grad, old._version = self._node, self._index, True, self._version
        return old

    def _traced(self) -> bool:
        """Whether the running trace computed this tensor (it is no argument of the traced graph)."""
        return self._node is not None and self._node.session is _Mode.session

    def _inplace(self, result: "Tensor") -> "Tensor":
        """Make ``self`` hold ``result`` (computed from ``_old()``).  Recorded: ``self`` takes a new
        buffer and continues the graph from ``result`` (earlier nodes saw the old version).  Not
        recorded: the result is written into ``self``'s memory, which views and numpy share."""
        if result._data.shape != self._data.shape:
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the broadcast shape "
                               f"{list(result.shape)}")
        if (self.requires_grad or result.requires_grad) and _Mode.grad:
            self._data = _dev.cast(result._data, _dev.numpy_dtype(self._data))
            self._node, self._index, self.requires_grad = result._node, result._index, result.requires_grad
        else:
            self._data[...] = result._data
            if _Mode.updates is not None and result._node is not None:
                if self._traced():  # the graph continues from ``result``
                    self._node, self._index = result._node, result._index
                else:  # an argument of the trace (a parameter or buffer): ``result`` is its new value
                    _Mode.updates[id(self)] = (self, result, self._version + 1)
        self._version += 1
        return self

    def _overwrite(self, array_or_value) -> "Tensor":
        """Fill ``self`` with data that does not depend on a graph (fill_, uniform_, copy_ of a
        constant): a number or an array on either device, broadcast."""
        self._old()
        if self.requires_grad and _Mode.grad:
            fresh = _dev.empty_like(self._data)
            _dev.copy_into(fresh, array_or_value)
            self._data = fresh
            self._node, self.requires_grad = None, False
        else:
            _dev.copy_into(self._data, array_or_value)
        self._version += 1
        return self

    def add_(self, other, alpha=1):
        return self._inplace(self._old().add(other, alpha=alpha).to(self.dtype))

    def sub_(self, other, alpha=1):
        return self._inplace(self._old().sub(other, alpha=alpha).to(self.dtype))

    def mul_(self, other):
        return self._inplace((self._old() * other).to(self.dtype))

    def div_(self, other):
        return self._inplace((self._old() / other).to(self.dtype))

    def pow_(self, other):
        return self._inplace((self._old() ** other).to(self.dtype))

    def clamp_(self, min=None, max=None):  # noqa: A002
        return self._inplace(self._old().clamp(min, max))

    def relu_(self):
        return self._inplace(self._old().relu())

    def copy_(self, src) -> "Tensor":
        if not isinstance(src, Tensor):
            from lezero.creation import tensor
            src = tensor(src)
        if src.requires_grad and _Mode.grad:
            self._old()
            return self._inplace(src.to(self.dtype).expand(*self.shape).clone())
        return self._overwrite(src._data)

    def zero_(self) -> "Tensor":
        return self._overwrite(0)

    def fill_(self, value) -> "Tensor":
        return self._overwrite(value.item() if isinstance(value, Tensor) else value)

    def uniform_(self, a=0.0, b=1.0, generator=None) -> "Tensor":
        from lezero.creation import _generator
        return self._overwrite(_generator(generator).uniform(a, b, self.shape).astype(_dev.numpy_dtype(self._data)))

    def normal_(self, mean=0.0, std=1.0, generator=None) -> "Tensor":
        from lezero.creation import _generator
        values = _generator(generator).standard_normal(self.shape) * std + mean
        return self._overwrite(values.astype(_dev.numpy_dtype(self._data)))


def _rebuild(data, requires_grad, device=None):
    t = _wrap(storage(data) if device is None else _dev.to_device(storage(data), device))
    if requires_grad:
        t.requires_grad = True
    return t


# --- devices --------------------------------------------------------------------------------------------

def _is_device_spec(value) -> bool:
    """Whether ``value`` names a device: a string, a ``Device``, a ``torch.device``."""
    return isinstance(value, (str, Device)) or type(value).__name__ == "device"


def _to_arguments(args, kwargs) -> tuple:
    """``to``'s arguments (``to(dtype)``, ``to(device, dtype)``, ``to(other)``, keywords) as
    ``(lz dtype or None, Device or None)``."""
    dtype, target = kwargs.get("dtype"), kwargs.get("device")
    for a in args:
        if isinstance(a, Tensor):
            dtype, target = a.dtype, a.device
        elif _is_device_spec(a):
            target = a
        elif a is not None:
            dtype = a
    return (None if dtype is None else _dt.as_dtype(dtype)), (None if target is None else _device(str(target)))


def _cuda_device(index) -> Device:
    """``cuda()``'s argument: None, an index or a device."""
    if index is None:
        return _dev.CUDA
    return _device(f"cuda:{index}" if isinstance(index, int) else str(index))


def _moved(x: Tensor, target: Device) -> Tensor:
    """A copy of ``x`` on ``target``.  Autograd does not record moves: moving a tensor the graph
    needs would cut it, so that is an error."""
    if _Mode.trace:
        raise OperatorError(f"jit.trace: moving a tensor to {target} inside a traced function is not supported: "
                            f"move the model and the inputs before tracing", user_location())
    if x.requires_grad and _Mode.grad:
        raise RuntimeError(f"moving a tensor that requires grad to {target} is not recorded by autograd: move it "
                           f"before it requires grad (x.to(device).requires_grad_()) or under lz.no_grad()")
    return _wrap(_dev.to_device(x._data, target))


# --- indexing ------------------------------------------------------------------------------------------


def _numpy_key(key):
    if isinstance(key, Tensor):
        return key._data
    if isinstance(key, tuple):
        return tuple(k._data if isinstance(k, Tensor) else k for k in key)
    return key


def _is_int_index(k) -> bool:
    if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
        return True
    array = k._data if isinstance(k, Tensor) else k if isinstance(k, np.ndarray) else None
    return array is not None and array.ndim == 0 and _kind(array) in "iu"


def _is_index_array(k) -> bool:
    return isinstance(k, (Tensor, np.ndarray, list))


def _basic_index(x: Tensor, key: tuple):
    """Indexing by ints and slices only (the common case, parsed lean), or None."""
    shape = x._data.shape
    if len(key) > len(shape):
        return None
    starts, ends, axes, steps, out = [], [], [], [], []
    for dim, k in enumerate(key):
        size = shape[dim]
        if k.__class__ is int:
            i = k + size if k < 0 else k
            if not 0 <= i < size:
                raise IndexError(f"index {k} is out of bounds for dimension {dim} with size {size}")
            starts.append(i), ends.append(i + 1), axes.append(dim), steps.append(1)
        elif k.__class__ is slice:
            start, stop, step = k.indices(size)
            if step <= 0:
                raise ValueError("step must be greater than zero")
            n = len(range(start, stop, step))
            if n != size:
                starts.append(start), ends.append(stop if n else start), axes.append(dim), steps.append(step)
            out.append(n)
        else:
            return None
    out.extend(shape[len(key):])
    if not starts:
        return x
    return _apply1(_INDEX, (("starts", tuple(starts)), ("ends", tuple(ends)), ("axes", tuple(axes)),
                            ("steps", tuple(steps)), ("gather_axis", None), ("shape", tuple(out))), x)


def _getitem(x: Tensor, key) -> Tensor:
    """ints, slices (positive steps), None, Ellipsis, and one integer-array or boolean-mask index."""
    if not isinstance(key, tuple):
        key = (key,)
    result = _basic_index(x, key)
    if result is not None:
        return result
    # a boolean mask over the leading dims: the indices of its true elements, gathered
    for i, k in enumerate(key):
        mask = k._data if isinstance(k, Tensor) else k if isinstance(k, np.ndarray) else None
        if mask is not None and _kind(mask) == "b":
            if any(_is_index_array(other) for j, other in enumerate(key) if j != i) or \
                    any(kk is Ellipsis or kk is None for kk in key[:i]):
                raise IndexError("a boolean mask index combines only with slices after it")
            lead = x.shape[i:i + mask.ndim]
            if mask.shape != lead:
                raise IndexError(f"the shape of the mask {list(mask.shape)} at index {i} does not match the shape "
                                 f"of the indexed tensor {list(x.shape)}")
            flat = x.reshape(x.shape[:i] + (-1,) + x.shape[i + mask.ndim:])
            positions = _wrap(_dev.like(np.flatnonzero(_dev.host(mask)), x._data))
            return flat[key[:i] + (positions,) + key[i + 1:]]
    explicit = sum(1 for k in key if k is not None and k is not Ellipsis)
    if explicit > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    if sum(k is Ellipsis for k in key) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    expanded = []
    for k in key:
        if k is Ellipsis:
            expanded.extend([slice(None)] * (x.ndim - explicit))
        else:
            expanded.append(k)
    if Ellipsis not in key:
        expanded.extend([slice(None)] * (x.ndim - explicit))
    starts, ends, axes, steps = [], [], [], []
    shape: list = []
    gather_axis, index_array, sliced_shape = None, None, list(x.shape)
    kinds = ["int" if _is_int_index(k) else "array" if _is_index_array(k) else "other" for k in expanded]
    dim = 0
    for k in expanded:
        if k is None:
            shape.append(1)
            continue
        size = x.shape[dim]
        if _is_int_index(k):
            i = int(k)
            if not -size <= i < size:
                raise IndexError(f"index {i} is out of bounds for dimension {dim} with size {size}")
            i %= size
            starts.append(i), ends.append(i + 1), axes.append(dim), steps.append(1)
            sliced_shape[dim] = 1
        elif isinstance(k, slice):
            start, stop, step = k.indices(size)
            if step <= 0:
                raise ValueError("step must be greater than zero")
            n = len(range(start, stop, step))
            if n != size:
                starts.append(start), ends.append(stop if n else start), axes.append(dim), steps.append(step)
            sliced_shape[dim] = n
            shape.append(n)
        elif _is_index_array(k):
            if index_array is not None:
                raise IndexError("lezero supports one integer-array index per indexing expression")
            array = _dev.host(k._data) if isinstance(k, Tensor) else np.asarray(k)
            if array.dtype.kind not in "iu":
                raise IndexError(f"tensors used as indices must be long, int or bool tensors, got {array.dtype}")
            if array.size and (array.min() < -size or array.max() >= size):
                bad = array[(array < -size) | (array >= size)].flat[0]
                raise IndexError(f"index {bad} is out of bounds for dimension {dim} with size {size}")
            index_array = storage(array, np.int64)
            gather_axis = dim
            shape.extend(array.shape)
        else:
            raise IndexError(f"only integers, slices, None, Ellipsis and integer or boolean tensors are valid "
                             f"indices, got {type(k).__name__}")
        dim += 1
    advanced = [i for i, kind in enumerate(kinds) if kind != "other"]
    if index_array is not None and "other" in kinds[advanced[0]:advanced[-1]]:
        # numpy and PyTorch move the indexed dims to the front when an int and an array index
        # are apart: not supported
        raise IndexError("an integer-array index combines with integer indices only next to them")
    attrs = (("starts", tuple(starts)), ("ends", tuple(ends)), ("axes", tuple(axes)), ("steps", tuple(steps)),
             ("gather_axis", gather_axis), ("shape", tuple(shape)))
    if index_array is None:
        if not starts:
            return _reshaped(x, tuple(shape)) if tuple(shape) != x.shape else x
        return _apply1(_INDEX, attrs, x)
    return _apply2(_INDEX, attrs, x, _wrap(_dev.like(index_array, x._data)))


