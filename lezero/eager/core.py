"""The eager engine's core: what a tensor is, and the hot path of one op.

A tensor holds a numpy array (``_data``) of a lezero dtype, C-contiguous unless it is a view; a
cuda tensor a torch tensor on the device instead (``lezero.eager.device_arrays``: ``x.to("cuda")``, ``device=`` on
creation, ``.numpy()``/``.item()`` copy to the host).  Every op on tensors is an ``EagerOp``
(``lezero.eager.dispatch``) run through ``apply1``/``apply2``/``apply``: a dict lookup of ``(op,
attributes, input shapes and dtypes)`` to a compiled one-op function (compiled for the inputs'
device), one launch, a new tensor (``wrap``).  Python numbers become rank-0 inputs, never
constants, so ``x * lr`` compiles once whatever ``lr`` is.

Autograd: when grad mode is on and an input requires grad, the op is recorded as a ``Node``
(op, attributes, inputs) on its outputs (``record``); ``backward()`` replays the recording into one
IR function and differentiates it (``lezero.eager.autograd``).  While tracing
(``lezero.eager.autograd.trace``) every op is recorded, with the user's line.

``Tensor`` here holds the state, the properties and the conversions to Python and numpy; its ops
are installed onto it from one table by ``lezero.eager.tensor`` (the module to import it from),
since they need modules above this one (promotion, indexing, creation) that need the hot path here.

Views (``view_of``): a tensor may hold numpy's (or torch's) own view of another tensor's array,
which PyTorch's view ops return (reshapes here, ``reshaped``; indexing, ``t()``, ``expand``, ...
above): the same memory, with ``_base`` the tensor owning it and one version counter for both.
A view that is not C-contiguous is ``_strided``: an op on it takes ``apply_strided``, whose kernel
reads it through its strides.  In-place ops on views and autograd through them:
``lezero.eager.methods.InPlace``.

Why this file is long: the hot path (``apply1``/``apply2``/``apply``, written out for speed), the
recording it calls and the ``Tensor`` state it reads stay together, so one eager op runs on one
module's globals; the conversions to Python and numpy are the rest of ``Tensor``'s state.
"""
from __future__ import annotations

import __future__
import ast
import inspect
import textwrap

import numpy as np

from lezero.eager import device_arrays as _dev
from lezero.eager import dtypes as _dt
from lezero.eager.device_arrays import FLOATS, kind, storage
from lezero.eager.dispatch import RUNNERS, EagerOp, OperatorError, runner_for, user_location
from lezero.eager.dtypes import BFLOAT16_STORAGE
from lezero.eager.interop import not_a_tensor, storage_of
from lezero.eager.ops import CAST, CLONE, MEMORY_VIEW, RESHAPE
from lezero.eager.strided import strided_runner
from lezero.ir.location import NameLoc
from lezero.runtime.devices import Device

_new = object.__new__


class Mode:
    """Process-wide recording switches (class attributes: one lookup on the hot path)."""

    grad = True     # grad mode: record ops whose inputs require grad
    trace = 0       # > 0 while tracing: record every op, with its location
    session = None  # the trace recording now (lezero.eager.autograd.trace)
    # While ``jit`` traces (``lezero.eager.autograd.graph_capture``): an in-place op on a value the
    # trace computed continues the graph from its result (``_old()`` gives a stand-in for the old
    # value, as with grad); one on an argument (a parameter or buffer) records ``id(tensor) ->
    # (tensor, the tensor of its new value, its version after the update)`` here, the traced
    # function's extra results; in-place ops chain.
    updates = None
    # Also while ``jit`` traces: called with what is asked (``".item()"``) when a tensor the trace
    # computed is about to become a Python value, which would bake the example's value in; raises.
    on_escape = None
    # While a trace records (issue 16: ``SummaryWriter.add_graph`` of an ``nn.Module``): the module
    # path whose ``forward`` runs now (``"layer1.0.conv1"``); recorded ops are located
    # ``NameLoc(scope, the user's line)``, so the graph groups them by module.
    scope = None
    autocast = None  # inside lz.autocast (issue 13): its lezero.eager.autocast.AutocastState


def escaping(t: "Tensor", what: str) -> None:
    """Tell ``Mode.on_escape`` when the running trace computed ``t`` (tensors made before the
    trace, and every tensor outside one, convert as usual)."""
    node = t._node
    if Mode.trace and node is not None and node.session is Mode.session:
        Mode.on_escape(what)


class Node:
    """One recorded op: what ``backward`` and ``trace`` replay.  ``inputs`` are tensors;
    ``versions`` their versions when recorded (an in-place change after that is an error)."""

    __slots__ = ("op", "attrs", "inputs", "versions", "location", "session", "__weakref__")

    def __init__(self, op: EagerOp, attrs: tuple, inputs: tuple):
        self.op = op
        self.attrs = attrs
        self.inputs = inputs
        self.versions = tuple(t._version for t in inputs)
        if Mode.trace:
            location = user_location()
            self.location = location if Mode.scope is None else NameLoc(Mode.scope, location)
            self.session = Mode.session
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


def record(op: EagerOp, attrs: tuple, inputs: tuple, outputs) -> None:
    """Attach a node to ``outputs``; they require grad when grad mode is on, an input requires
    grad and they are floats.  A view input whose base changed in place since it took its node
    reads the base's new value first (``refresh_view``)."""
    for t in inputs:
        if t._base is not None and t._made != t._base._version_count:
            refresh_view(t)
    grad = Mode.grad and any(t.requires_grad for t in inputs)
    floats = [t._data.dtype in FLOATS for t in outputs]
    if not (Mode.trace or any(floats)):
        return  # integer and boolean results carry no gradient: nothing to record
    node = Node(op, attrs, inputs)
    for i, (t, is_float) in enumerate(zip(outputs, floats)):
        if is_float or Mode.trace:
            t._node, t._index = node, i
            if grad and is_float:
                t.requires_grad = True


def wrap(array) -> "Tensor":
    """A new tensor holding ``array`` (a storage array: ``device_arrays.storage``, or a kernel's result)."""
    t = _new(Tensor)
    t._data = array
    return t


# --- inputs from other libraries (lezero.eager.interop): off the hot path ---------------------------------

# Classes of values an input check lets through unconverted: tensors, and what is known to be no array
# (the slow path adds each class it meets: Parameter, str, ...).  One set lookup per argument.
NOT_FOREIGN = {type(None), bool, int, float}


def as_input(value, what: str) -> "Tensor":
    """``value`` as a tensor input of ``what`` (an op, a module, a function): a tensor itself; an
    array of another library (a torch tensor, a numpy array, DLPack, ``__array__``) a tensor
    sharing its memory; anything else a ``ForeignInputError`` naming it."""
    if isinstance(value, Tensor):
        return value
    array = storage_of(value, what)
    if array is None:
        raise not_a_tensor(value, what)
    return wrap(array)


def as_inputs(values: tuple, what: str) -> tuple:
    """``values`` (a call's arguments) with each array of another library as a tensor; tensors and
    other values as they are."""
    for v in values:
        if v.__class__ not in NOT_FOREIGN:
            break
    else:
        return values
    return tuple(_converted(v, what) for v in values)


def _converted(value, what: str):
    if value.__class__ in NOT_FOREIGN:
        return value
    if isinstance(value, Tensor):
        NOT_FOREIGN.add(value.__class__)
        return value
    array = storage_of(value, what)
    if array is None:
        NOT_FOREIGN.add(value.__class__)
        return value
    return wrap(array)


def accepting_arrays(fn):
    """``fn`` (a function of tensors: ``nn.functional``'s) taking arrays of other libraries in each
    parameter annotated ``Tensor`` too.  ``fn`` is compiled again from its source with one first
    statement added, so no wrapper frame is paid: a class lookup per such argument
    (``x.__class__ not in NOT_FOREIGN``), ``as_inputs`` only when one is not known.  Its file and
    line numbers stay, for tracebacks and ``user_location``."""
    checked = [p.name for p in inspect.signature(fn).parameters.values()
               if "Tensor" in str(p.annotation) and p.kind in _NAMED]
    if not checked:
        return fn
    func = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    if func.decorator_list or fn.__closure__ is not None:
        raise TypeError(f"accepting_arrays: {fn.__qualname__} is decorated or a closure; it can take only a plain "
                        f"module-level function (define it as one, or convert its inputs with as_inputs)")
    ast.increment_lineno(func, fn.__code__.co_firstlineno - func.lineno)
    names = ", ".join(checked)
    check = ast.parse(f"if {' or '.join(f'{n}.__class__ not in _lz_plain' for n in checked)}:\n"
                      f"    {names}, = _lz_as_inputs(({names},), {fn.__name__!r})").body[0]
    has_docstring = isinstance(func.body[0], ast.Expr) and isinstance(func.body[0].value, ast.Constant)
    first = func.body[1 if has_docstring and len(func.body) > 1 else 0]
    for node in ast.walk(check):
        ast.copy_location(node, first)
    func.body.insert(func.body.index(first), check)
    # def _make(_lz_plain, _lz_as_inputs): <fn>; return fn  -- the two names as closure cells
    make = ast.parse("def _make(_lz_plain, _lz_as_inputs):\n    pass").body[0]
    make.body = [func, ast.Return(ast.Name(fn.__name__, ast.Load()))]
    module = ast.fix_missing_locations(ast.Module([make], []))
    code = compile(module, fn.__code__.co_filename, "exec", flags=__future__.annotations.compiler_flag, dont_inherit=True)
    scope: dict = {}
    exec(code, fn.__globals__, scope)
    rebuilt = scope["_make"](NOT_FOREIGN, as_inputs)
    rebuilt.__qualname__, rebuilt.__wrapped__ = fn.__qualname__, fn
    return rebuilt


_NAMED = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


# --- the hot path: one op ---------------------------------------------------------------------------

def apply1(op: EagerOp, attrs: tuple, x: "Tensor") -> "Tensor":
    """``apply`` of a one-input, one-result op, written out: the commonest call."""
    if Mode.autocast is not None and op.name in Mode.autocast.table:  # issue 13: lz.autocast casts its inputs
        return Mode.autocast.apply(op, attrs, (x,))
    try:
        a = x._data
    except AttributeError:  # not a tensor (free in the common case: no exception)
        x = as_input(x, op.name)
        a = x._data
    if x._strided:
        return apply_strided(op, attrs, (x,))
    key = (op, attrs, a.shape, a.dtype)
    run = RUNNERS.get(key)
    if run is None:
        run = runner_for(key, op, attrs, (a,))
    out = _new(Tensor)
    out._data = run([a])[0]
    if Mode.trace or (x.requires_grad and Mode.grad):
        record(op, attrs, (x,), (out,))
    return out


def apply2(op: EagerOp, attrs: tuple, x: "Tensor", y: "Tensor") -> "Tensor":
    """``apply`` of a two-input, one-result op (binary operators), written out."""
    if Mode.autocast is not None and op.name in Mode.autocast.table:  # issue 13: lz.autocast casts its inputs
        return Mode.autocast.apply(op, attrs, (x, y))
    try:
        a, b = x._data, y._data
    except AttributeError:  # not tensors
        x, y = as_input(x, op.name), as_input(y, op.name)
        a, b = x._data, y._data
    if x._strided or y._strided:
        return apply_strided(op, attrs, (x, y))
    key = (op, attrs, a.shape, a.dtype, b.shape, b.dtype)
    run = RUNNERS.get(key)
    if run is None:
        run = runner_for(key, op, attrs, (a, b))
    out = _new(Tensor)
    out._data = run([a, b])[0]
    if Mode.trace or ((x.requires_grad or y.requires_grad) and Mode.grad):
        record(op, attrs, (x, y), (out,))
    return out


def apply(op: EagerOp, attrs: tuple, *inputs: "Tensor"):
    """Run ``op`` on tensors: one tensor, or a tuple for an op with several results."""
    if Mode.autocast is not None and op.name in Mode.autocast.table:  # issue 13: lz.autocast casts its inputs
        return Mode.autocast.apply(op, attrs, inputs)
    try:
        arrays = [t._data for t in inputs]
    except AttributeError:  # not tensors
        inputs = tuple(as_input(t, op.name) for t in inputs)
        arrays = [t._data for t in inputs]
    for t in inputs:
        if t._strided:
            return apply_strided(op, attrs, inputs)
    key = (op, attrs, *[x for a in arrays for x in (a.shape, a.dtype)])
    run = RUNNERS.get(key)
    if run is None:
        run = runner_for(key, op, attrs, arrays)
    outs = [wrap(r) for r in run(arrays)]
    if Mode.trace or (Mode.grad and any(t.requires_grad for t in inputs)):
        record(op, attrs, inputs, outs)
    return outs[0] if op.num_results == 1 else tuple(outs)


def reshaped(x: "Tensor", shape: tuple, copy: bool = True) -> "Tensor":
    """``x`` in another shape, a view of its memory (no kernel), recorded as lz.reshape.  A
    non-contiguous view whose strides cannot take the shape is copied first (``reshape``), or
    refused when ``copy`` is False (``view``), as PyTorch does."""
    a = x._data
    try:
        if not x._strided:  # the common case, ``view_of`` written out: the reshape of a contiguous array is a view
            out = _new(Tensor)
            out._data = a.reshape(shape)
            root = x._base
            if root is None:
                root = x
            out._base = root
            if root._version_count:
                out._made = root._version_count
            root._shared = True
            if Mode.trace or (x.requires_grad and Mode.grad):
                record(RESHAPE, (("shape", tuple(out._data.shape)),), (x,), (out,))
            return out
        b = _dev.reshaped_view(a, shape)
    except (ValueError, RuntimeError):  # numpy's and torch's complaint
        raise OperatorError(f"reshape: cannot reshape a tensor of shape {_fmt(x.shape)} ({x.numel()} elements) "
                            f"to {_fmt(shape)}", user_location()) from None
    if b is not None:
        return view_of(x, b, RESHAPE, not _dev.is_contiguous(b))
    if not copy:
        raise RuntimeError("view size is not compatible with input tensor's size and stride (at least one dimension "
                           "spans across two contiguous subspaces). Use .reshape(...) instead.")
    return reshaped(apply1(CLONE, (), x), shape)


# --- views: tensors sharing a base's memory -------------------------------------------------------------

def view_of(x: "Tensor", array, op: EagerOp | None = None, strided: bool = True, attrs: tuple | None = None):
    """A view of ``x``: a tensor holding ``array`` (numpy's or torch's view of ``x``'s memory),
    whose base is ``x``'s (the tensor that owns the memory), recorded as ``op`` (attributes
    ``attrs``, default the result's shape) when the graph needs it.  ``strided``: whether
    ``array`` may be non-contiguous (a kernel then reads it through its strides)."""
    out = _new(Tensor)
    out._data = array
    root = x._base
    if root is None:
        root = x
    out._base = root
    out._made = root._version_count
    root._shared = True
    if strided and not _dev.is_contiguous(array):
        out._strided = True
    if op is not None and (Mode.trace or (x.requires_grad and Mode.grad)):
        record(op, (("shape", tuple(array.shape)),) if attrs is None else attrs, (x,), (out,))
    return out


def alias(x: "Tensor") -> "Tensor":
    """A new tensor holding ``x``'s array (not a view in autograd's sense: no base)."""
    t = _new(Tensor)
    t._data = x._data
    if x._strided:
        t._strided = True
    root = x if x._base is None else x._base
    root._shared = True
    root._exposures += 1  # its in-place ops bump its own version, not x's
    return t


def _exposed(t: "Tensor") -> None:
    """``t``'s memory is handed out (see ``Tensor._exposures``)."""
    root = t if t._base is None else t._base
    root._exposures += 1


def geometry(t: "Tensor") -> tuple:
    """The attributes of ``MEMORY_VIEW`` and ``COPY_SLICES`` that place view ``t`` in its base's memory."""
    a, root = t._data, t._base._data
    return (("order", _dev.memory_order(root)), ("shape", tuple(a.shape)), ("strides", _dev.element_strides(a)),
            ("offset", _dev.element_offset(a, root)))


def refresh_view(t: "Tensor") -> None:
    """View ``t``'s base changed in place since ``t`` took its node: when the base's history is
    recorded, ``t`` becomes a view of the base's new value (PyTorch regenerates a view's grad_fn
    the same way)."""
    root = t._base
    if root.requires_grad and Mode.grad:
        remember_node(t, root._version_count - 1)
        t._node, t._index, t.requires_grad = Node(MEMORY_VIEW, geometry(t), (root,)), 0, True
    t._made = root._version_count


def remember_node(t: "Tensor", last_version: int) -> None:
    """Keep ``t``'s node before an in-place op replaces it: nodes recorded before read ``t`` there
    (``Tensor._history``: ``(last version with that node, node, result index)``)."""
    entry = (last_version, t._node, t._index)
    history = t.__dict__.get("_history")
    if history is None:
        t._history = [entry]
    else:
        history.append(entry)


def apply_strided(op: EagerOp, attrs: tuple, inputs: tuple):
    """``apply`` when an input is a non-contiguous view: its kernel reads the view's memory in
    place (``lezero.eager.strided``), keyed by the inputs' strides too.  On cuda, and for bfloat16
    (which the kernels read widened to float32: a copy anyway), the views are copied contiguous first."""
    arrays = [t._data for t in inputs]
    if any(a.__class__ is not np.ndarray or a.dtype is BFLOAT16_STORAGE for a in arrays):
        arrays = [_dev.contiguous(a) for a in arrays]
        key = (op, attrs, *[x for a in arrays for x in (a.shape, a.dtype)])
        run = RUNNERS.get(key) or runner_for(key, op, attrs, arrays)
        outs = [wrap(r) for r in run(arrays)]
    else:
        layouts = tuple(None if a.flags.c_contiguous else a.strides for a in arrays)
        key = (op, "strided", attrs, layouts, *[x for a in arrays for x in (a.shape, a.dtype)])
        run = RUNNERS.get(key)
        if run is None:
            run = RUNNERS[key] = strided_runner(op, attrs, arrays, layouts)
        results, strided = run(arrays)
        outs = [wrap(r) for r in results]
        if strided:
            for t in outs:
                t._strided = True
    if Mode.trace or (Mode.grad and any(t.requires_grad for t in inputs)):
        record(op, attrs, inputs, outs)
    return outs[0] if op.num_results == 1 else tuple(outs)


def _fmt(shape) -> str:
    return "x".join(map(str, shape)) if shape else "scalar"


def cast_to(t: "Tensor", d: "_dt.dtype") -> "Tensor":
    """``t`` with elements of ``d`` (``t`` itself when it has them)."""
    a = t._data
    if a.dtype == d.numpy or (a.__class__ is not np.ndarray and _dev.numpy_dtype(a) == d.numpy):
        return t
    return apply1(CAST, (("to", d.element_type),), t)


# --- dims -------------------------------------------------------------------------------------------

def axes_of(dim, rank: int) -> tuple:
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


def axis_of(dim: int, rank: int) -> int:
    """One ``dim`` of a tensor of ``rank`` dims, non-negative (PyTorch's wrapping and error)."""
    if not -max(rank, 1) <= dim < max(rank, 1):
        raise IndexError(f"Dimension out of range (expected to be in range of [{-max(rank, 1)}, {max(rank, 1) - 1}],"
                         f" but got {dim})")
    return int(dim) % max(rank, 1)


def shape_args(args) -> tuple:
    """``f(2, 3)`` or ``f((2, 3))`` as ``(2, 3)``."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        args = tuple(args[0])
    return tuple(int(a) for a in args)


# --- the tensor ---------------------------------------------------------------------------------------

class Tensor:
    """An n-dimensional array on the CPU or on cuda; see the module docstring.  Its ops come from
    ``lezero.eager.tensor``'s table."""

    # Defaults as class attributes: a new tensor sets only ``_data``.
    requires_grad = False
    grad = None
    _node = None
    _index = 0
    # Views (``view_of``): ``_base`` is the tensor owning the memory (PyTorch's ``._base``; None for
    # a tensor that owns it), ``_strided`` says the array is not C-contiguous (kernels read it
    # through its strides).  ``_shared``: views or aliases of this tensor's memory exist.  The
    # version counter lives on the base (``_version``), one for a base and all its views;
    # ``_made`` is the version at which the tensor took its node (a later change makes its value
    # stale for backward, and a view's node stale: ``refresh_view``).
    _base = None
    _strided = False
    _multi = None  # (function, output index) for one of several views a function returned (split, unbind)
    _shared = False
    _version_count = 0
    _made = 0
    # How many times the memory was handed out beyond lezero's tensors (``numpy()``, ``__array__``,
    # ``__dlpack__``, ``data_ptr()``, an alias: ``.data``), counted on the base like the version: a
    # write through such a handle bumps no version.  ``lezero.jit.trace`` keeps a weight pre-packed
    # only while version and exposures stay the same and no other object holds its array.
    _exposures = 0
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
    def _version(self) -> int:
        """How many in-place changes this tensor's memory has had (shared by a base and its views)."""
        root = self._base
        return (self if root is None else root)._version_count

    @_version.setter
    def _version(self, value: int) -> None:
        root = self._base
        (self if root is None else root)._version_count = value

    @property
    def data(self) -> "Tensor":
        """The same memory, detached from the graph (and from the version counter)."""
        return alias(self)

    @data.setter
    def data(self, value) -> None:
        if isinstance(value, Tensor):
            self._strided = value._strided
            value = value._data
        else:
            value = storage(value)
            self._strided = False
        self._data = value
        self._version += 1

    @property
    def T(self) -> "Tensor":  # noqa: N802
        return self.permute(*reversed(range(self.ndim)))

    @property
    def mT(self) -> "Tensor":  # noqa: N802
        return self.transpose(-2, -1)

    H = T    # noqa: N815 - the conjugate transposes: real tensors only
    mH = mT  # noqa: N815

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
        return not self._strided

    def contiguous(self) -> "Tensor":
        """``self`` when its elements lie in row-major order, else a copy that has them so."""
        return apply1(CLONE, (), self) if self._strided else self

    def stride(self, dim=None):
        """The step in elements between neighbours along each dim (PyTorch's ``stride()``)."""
        strides = _dev.element_strides(self._data)
        return strides if dim is None else strides[axis_of(dim, self.ndim)]

    def storage_offset(self) -> int:
        """Where the first element lies in the base's memory, in elements."""
        return 0 if self._base is None else _dev.element_offset(self._data, self._base._data)

    def data_ptr(self) -> int:
        """The address of the first element: views of one memory differ by their offsets."""
        _exposed(self)
        return _dev.data_address(self._data)

    # --- numpy and Python interop (what a trace cannot follow: see ``Mode.on_escape``) -------------
    def numpy(self) -> np.ndarray:
        """The tensor's memory as a numpy array (no copy); a cuda tensor's copied to the host."""
        if Mode.on_escape is not None:
            escaping(self, ".numpy()")
        if self.requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.")
        _exposed(self)
        return _dev.host(self._data)

    def __array__(self, dtype=None, copy=None):
        """``np.asarray(t)``: ``numpy()`` (the same memory; refused while ``t`` requires grad, as
        PyTorch), copied only for another ``dtype``, a cuda tensor, or ``copy=True``; ``copy=False``
        where a copy is needed raises, as numpy asks."""
        if Mode.on_escape is not None:
            escaping(self, "np.asarray()")
        a = self.numpy()
        converts = dtype is not None and np.dtype(dtype) != a.dtype
        if copy is False and (converts or a is not self._data):
            raise ValueError(f"np.asarray(copy=False): a {self.device} tensor of {self.dtype} needs a copy as a numpy "
                             f"array{' of ' + str(np.dtype(dtype)) if converts else ''}")
        if converts:
            return a.astype(dtype)
        return a.copy() if copy else a

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """The tensor as a DLPack capsule of the same memory (``torch.from_dlpack(t)``,
        ``np.from_dlpack(t)``, JAX, CuPy): its storage array's own export."""
        if Mode.on_escape is not None:
            escaping(self, "__dlpack__()")
        if self.requires_grad:
            raise BufferError("Can't export tensors that require gradient, use tensor.detach()")  # torch's
        _exposed(self)
        asked = {"stream": stream, "max_version": max_version, "dl_device": dl_device, "copy": copy}
        a = self._data
        if a.dtype is BFLOAT16_STORAGE:  # numpy exports no bfloat16; torch's view of the same memory does
            a = _dev.torch_of(a)
        return a.__dlpack__(**{k: v for k, v in asked.items() if v is not None})

    def __dlpack_device__(self) -> tuple:
        return self._data.__dlpack_device__()

    def item(self):
        if Mode.on_escape is not None:
            escaping(self, ".item()")
        n = _dev.size(self._data)
        if n != 1:
            raise RuntimeError(f"a Tensor with {n} elements cannot be converted to Scalar")
        return self._data.reshape(()).item()

    def tolist(self):
        if Mode.on_escape is not None:
            escaping(self, ".tolist()")
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
        if Mode.on_escape is not None:
            escaping(self, "bool()")
        n = _dev.size(self._data)
        if n != 1:
            raise RuntimeError(f"Boolean value of Tensor with {n} values is ambiguous")
        return bool(self._data.reshape(()))

    def __float__(self) -> float:
        return float(self.item())

    def __int__(self) -> int:
        return int(self.item())

    def __index__(self) -> int:
        if kind(self._data) not in "iub" or _dev.size(self._data) != 1:
            raise TypeError("only integer tensors of a single element can be converted to an index")
        return int(self.item())

    def __repr__(self) -> str:
        a = _dev.host(self._data)
        # bfloat16 shows its exact values as float32 prints them (ml_dtypes' own printing drops the point: "1")
        shown = a.astype(np.float32) if a.dtype is BFLOAT16_STORAGE else a
        body = np.array2string(shown, separator=", ", prefix="tensor(")
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

    # --- the graph --------------------------------------------------------------------------------
    def requires_grad_(self, requires_grad: bool = True) -> "Tensor":
        if not requires_grad and self._node is not None and self.requires_grad:
            raise RuntimeError("you can only change requires_grad flags of leaf variables.")
        if requires_grad and self._data.dtype not in FLOATS:
            raise RuntimeError("only Tensors of floating point dtype can require gradients")
        self.requires_grad = requires_grad
        return self

    def detach(self) -> "Tensor":
        """The same memory and version counter, out of the graph."""
        return view_of(self, self._data)

    def detach_(self) -> "Tensor":
        if self._base is not None:
            raise RuntimeError("Can't detach views in-place. Use detach() instead.")
        self._node = None
        self.requires_grad = False
        return self


NOT_FOREIGN.add(Tensor)


def _rebuild(data, requires_grad, device=None):
    t = wrap(storage(data) if device is None else _dev.to_device(storage(data), device))
    if requires_grad:
        t.requires_grad = True
    return t
