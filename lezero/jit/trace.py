"""``lz.jit.trace``: run a model once, recording every op, and compile the whole graph.

``trace(model, example_inputs)`` records the forward pass through the eager frontend
(``lezero.eager.autograd.trace``: the ops replayed through the same ``emit`` eager execution compiles)
into one IR function, ``@forward(inputs..., parameters and buffers...) -> outputs``, and returns a
``TracedModule`` that runs it through ``lezero.compile``: fused, memory-planned, one plan per input
shape.

**Parameters are arguments, not constants.**  Each parameter and buffer the forward pass reads is
a function argument named by its state-dict key (``arg_attrs``: ``{lz.name = "fc1.weight"}``), bound
at every call from the module's *current* tensors.  So ``.graph`` stays a readable page rather than
megabytes of hex, the traced module follows the model when it trains on, the compiled kernels do
not depend on weight values (the kernel cache is shared with eager code and other models of the
same shapes), and ``jit.save`` stores weights as tensors beside the text.  The cost is what
constant folding would have done once: e.g. ``Linear``'s weight transpose runs per call.  The
function lists its weight arguments (``lz.weight_arguments``), and the CPU plan reads a matmul's
weight pre-packed, packing it again only when ``_weight_keys`` cannot vouch that it is unchanged:
its version or exposures moved (a write through a numpy array, an alias or a DLPack export bumps
no version, but handing the memory out counts), or another object holds its array (then the
GEMM's own packing routine packs it, as a kernel: ``codegen/llvm/pack_kernels.py``).
``lz.compile(traced.module)`` has no keys: its plans read the weights as plain inputs (each GEMM
packs as it reads).  Other
tensors the forward reads (made from Python values inside ``forward``) are baked in as
``lz.constant``s: they were fixed when traced.

**The batch dimension is dynamic.**  Dim 0 of every input whose leading size equals the first
input's becomes ``?``: the recorded function's types are inferred again from those arguments (a
``reshape`` whose leading size was the batch takes ``-1`` there), and the result is checked at a
second batch size, so a graph that bakes the batch size in fails at trace time, naming the op and
the user's line, not at the first call of another size.

**It runs where the parameters are.**  A traced model whose parameters and buffers are on cuda
runs its graph compiled for cuda (``lezero.compile(..., target="cuda")``), and follows the model
when ``model.to(device)`` moves it later; a function without parameters runs on its inputs'
device.  Numpy inputs go to that device and the results come back as numpy arrays.

**Random numbers and in-place updates are part of the graph.**  Dropout draws through
``lz.random_uniform`` from a generator's ``[seed, offset]``: each generator the trace draws from
becomes one argument (``{lz.name = "rng"}``) that every call binds from the generator and
advances, as the eager ops would (``lezero.eager.creation.RandomArgument``), so each call draws new
masks and a seeded traced loop draws the eager loop's.  An in-place op on a parameter or buffer
(a BatchNorm's running statistics in training mode) becomes an extra result of the function, written
back into the tensor after each call; reading such a tensor again after its update in the same
traced call raises ``TraceError``.

**What a trace cannot see**: Python control flow runs once, on the example.  Converting a tensor
the trace computed into a Python value (``bool()``, ``if``, ``.item()``, ``float()``, ``.tolist()``,
``.numpy()``) would bake the example's value into the graph, so it raises ``TraceError`` at the
user's line (the eager engine calls ``escape_error`` for it: ``lezero.eager.autograd.graph_capture``).
As in PyTorch, a Python ``for`` loop is unrolled into the graph.  The loops a graph keeps are
explicit: ``lz.scan``, ``lz.fori_loop``, ``lz.while_loop`` and ``lz.cond`` (JAX's names,
``lezero.eager.control_flow``) record their function once, as the region of one ``lz.for`` /
``lz.while`` / ``lz.if``, which the runtime runs as a loop around the region's kernels; ``reinfer``
carries the dynamic batch dim into the regions (``region_argument_types``).
"""
from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass

import numpy as np

from lezero.codegen.schedule import WEIGHT_ARGUMENTS_ATTR
from lezero.eager.autograd import graph_capture
from lezero.eager.autograd import trace as record
from lezero.eager.core import Mode, as_input, as_inputs, wrap
from lezero.eager.creation import random_arguments
from lezero.passes.autocast import autocast_function  # issue 13
from lezero.eager.device_arrays import CPU, copy_into, device_of, host, is_torch, like, numpy_dtype, to_device
from lezero.eager.dispatch import (OperatorError, bf16_storage_runner, compile_for, constant_of, device_of_arrays,
                                   tensor_type, user_location)
from lezero.eager.tensor import Tensor
from lezero.ir.attributes import ArrayAttr, DenseArrayAttr, DictionaryAttr, StringAttr
from lezero.ir.builder import Builder
from lezero.ir.core import FuncOp, ModuleOp, OpResult
from lezero.ir.interpreter import check_argument
from lezero.ir.opdef import OpError
from lezero.ir.printer import print_module
from lezero.ir.types import BF16, I64, TensorType
from lezero.ir.verifier import verify
from lezero.runtime.cpu import CompiledFunction

NAME_ATTR = "lz.name"


class TraceError(OperatorError):
    """A model that cannot be traced as written: ``model.py:12:9: error: ...`` then the user's line
    with a caret (rendered as ``OperatorError``)."""


# --- recording ------------------------------------------------------------------------------------------

def escape_error(what: str):
    """The hook ``graph_capture`` calls when a tensor the trace computed is about to become a Python
    value (``what``: ``"bool()"``, ``".item()"``, ...): that value would be the example's, baked
    into the graph."""
    raise TraceError(
        f"jit.trace: {what} of a tensor computed inside the traced function would bake the example's value "
        f"into the graph: data-dependent Python control flow (if/while on a tensor, .item(), float(), int()) "
        f"cannot be traced; express it with tensor ops (lz.where, masks) or compute it outside the model",
        user_location())


def state_tensors(model) -> dict:
    """``id(tensor) -> state-dict name`` of a module's parameters and buffers (empty for a plain
    function)."""
    names = {}
    if hasattr(model, "named_parameters") and hasattr(model, "named_buffers"):
        for name, t in list(model.named_parameters()) + list(model.named_buffers()):
            if t is not None:
                names.setdefault(id(t), name)
    return names


@contextlib.contextmanager
def preserved_buffers(model):
    """Run a trace without side effects on the module's buffers (BatchNorm's running statistics,
    counters): their contents are restored afterwards.  Yields the names of the buffers the traced
    code changed in place."""
    saved = []
    if hasattr(model, "named_buffers"):
        saved = [(name, b, np.array(host(b._data)), b._version) for name, b in model.named_buffers()
                 if b is not None]
    changed: list[str] = []
    try:
        yield changed
    finally:
        for name, b, data, version in saved:
            if b._version != version or not np.array_equal(host(b._data), data, equal_nan=True):
                changed.append(name)
                if b._data.shape == data.shape:
                    copy_into(b._data, data)
                else:
                    b._data = like(data, b._data)


def as_input_tuple(example_inputs) -> tuple:
    """``example_inputs`` (a tensor, an array of another library such as ``torch.randn(1, 784)``, or
    a tuple or list of them) as a tuple of tensors (``lezero.eager.core.as_input``)."""
    if isinstance(example_inputs, (tuple, list)):
        return tuple(as_input(x, "jit.trace: example_inputs") for x in example_inputs)
    return (as_input(example_inputs, "jit.trace: example_inputs"),)


def output_structure(outputs, counter=None):
    """``outputs`` with each tensor replaced by its index in the flattened outputs (the order
    ``lezero.eager.autograd.trace`` flattens them in)."""
    counter = counter if counter is not None else [0]
    if isinstance(outputs, Tensor):
        counter[0] += 1
        return counter[0] - 1
    if isinstance(outputs, tuple):
        return tuple(output_structure(o, counter) for o in outputs)
    if isinstance(outputs, list):
        return [output_structure(o, counter) for o in outputs]
    if isinstance(outputs, dict):
        return {k: output_structure(v, counter) for k, v in outputs.items()}
    raise TypeError(f"a traced function must return tensors (or tuples, lists, dicts of them), got "
                    f"{type(outputs).__name__}")


def rebuild(structure, flat: list):
    if isinstance(structure, int):
        return flat[structure]
    if isinstance(structure, tuple):
        return tuple(rebuild(s, flat) for s in structure)
    if isinstance(structure, list):
        return [rebuild(s, flat) for s in structure]
    return {k: rebuild(v, flat) for k, v in structure.items()}


@dataclass
class Recorded:
    """``fn`` recorded by ``record_function``.  ``trace.func`` returns ``fn``'s outputs (in
    ``structure``), then the new value of each tensor in ``updates`` (``(name, tensor)``: the
    parameters and buffers ``fn`` changed in place); ``random`` holds the ``RandomArgument`` of
    each generator it drew from; ``names`` maps ``id(tensor)`` to the argument name of every
    parameter, buffer and random state."""

    trace: object
    structure: object
    updates: list
    random: list
    names: dict


def record_function(fn, inputs: tuple, name: str, module=None) -> Recorded:
    """Record ``fn(*inputs)`` with its random draws and in-place updates of the parameters and
    buffers of ``module`` (default ``fn``), which are restored afterwards, as the generators are."""
    owner = fn if module is None else module
    names = state_tensors(owner)
    holder = {}

    def run(*args):
        out = fn(*args)
        holder["structure"] = output_structure(out)
        holder["updates"] = list(captured_updates.values())
        return out, [new for _, new, _ in holder["updates"]]

    with preserved_buffers(owner) as changed, random_arguments() as random, \
            graph_capture(escape_error) as captured_updates:
        traced = record(run, *inputs, name=name)
    if Mode.autocast is not None:  # issue 13: recorded inside lz.autocast (its casts are in the graph)
        autocast_function(traced.func, Mode.autocast.dtype.element_type, Mode.autocast.device_type)
    updates = holder["updates"]
    _check_updates(traced, updates, names)
    missed = [n for n in changed if n not in {names[id(t)] for t, _, _ in updates}]
    if missed:
        raise TraceError(f"jit.trace: the traced code changes buffer(s) {', '.join(missed)} in place in a way a "
                         f"graph cannot carry (fill_, zero_, copy_ or item assignment); change them with "
                         f"arithmetic in-place ops (add_, mul_) or outside the traced code", user_location())
    arguments = list(random.arguments.values())
    for k, arg in enumerate(arguments):
        names[id(arg.tensor)] = "rng" if k == 0 else f"rng{k}"
    return Recorded(traced, holder["structure"], [(names[id(t)], t) for t, _, _ in updates], arguments, names)


def _check_updates(traced, updates: list, names: dict) -> None:
    """Only parameters and buffers may change in place, and no op may read one after its update
    (it would read the argument, the value before)."""
    after = {id(t): version for t, _, version in updates}
    for t, new, _ in updates:
        if id(t) not in names:
            raise TraceError("jit.trace: the traced code changes a tensor in place that is neither a parameter "
                             "nor a buffer of the traced module; a graph carries only their updates",
                             new._node.location)
    for node in traced.recording.nodes:
        for x, version in zip(node.inputs, node.versions):
            if id(x) in after and version >= after[id(x)]:
                raise TraceError(f"jit.trace: {node.op.name} reads {names[id(x)]} after an in-place update in the "
                                 f"same traced call, which a graph cannot express yet (it would read the value "
                                 f"before the update)", node.location)


def bind_arguments(func: FuncOp, inputs: list, captured: list, names: dict) -> list:
    """Turn the recorded function's captured arguments into named arguments (parameters and
    buffers, in first-use order) or constants (anything else); returns the named tensors in
    argument order, after the inputs."""
    block = func.entry_block
    n_inputs = len(inputs)
    b = Builder(block, 0)
    for i in reversed(range(len(captured))):
        t = captured[i]
        arg = block.args[n_inputs + i]
        if id(t) in names:
            continue
        array = np.array(host(t._data), order="C")  # ascontiguousarray makes a scalar 1-d
        constant = constant_of(b, array, tensor_type(array).element_type)  # bf16 storage too (issue 13)
        arg.replace_all_uses_with(constant)
        block.erase_argument(n_inputs + i)
    bound = [t for t in captured if id(t) in names]
    attrs = [DictionaryAttr({NAME_ATTR: StringAttr(f"input{i}" if n_inputs > 1 else "input")}) for i in range(n_inputs)]
    attrs += [DictionaryAttr({NAME_ATTR: StringAttr(names[id(t)])}) for t in bound]
    func.attributes["arg_attrs"] = ArrayAttr(attrs)
    func.update_function_type()
    return bound


def argument_names(func: FuncOp) -> list[str]:
    dicts = func.attributes.get("arg_attrs")
    if dicts is None:
        return [f"arg{i}" for i in range(len(func.arguments))]
    return [d.get(NAME_ATTR).value if d.get(NAME_ATTR) is not None else f"arg{i}" for i, d in enumerate(dicts.values)]


# --- the dynamic batch dimension --------------------------------------------------------------------------

def reinfer(func: FuncOp, batch: int | None = None) -> None:
    """Infer every op's result types again from the (changed) argument types, in program order.
    With ``batch``, a ``reshape`` of a value whose leading dim is now ``?`` and whose target shape
    starts with ``batch`` takes ``-1`` there.  Raises ``TraceError`` at the op's location."""
    _reinfer_block(func.entry_block, batch)
    func.update_function_type()


def _reinfer_block(block, batch: int | None) -> None:
    """``reinfer`` of one block; a control-flow op's regions first (their arguments follow its
    operands: ``region_argument_types``), then its results from their yields."""
    for op in block.ops:
        definition = op.definition
        if definition is None or not op.results:
            continue
        if op.regions and hasattr(definition, "region_argument_types"):
            try:
                region_types = definition.region_argument_types(op)
            except OpError as e:
                raise TraceError(f"'{op.name}' op {e}", op.location) from None
            for region, types in zip(op.regions, region_types):
                for arg, t in zip(region.blocks[0].args, types):
                    arg.type = t
                _reinfer_block(region.blocks[0], batch)
        if batch is not None and op.name == "lz.reshape":
            x = op.operands[0].type
            shape = list(op.attributes["shape"].values)
            if x.rank and x.shape[0] is None and shape and shape[0] == batch and -1 not in shape:
                op.attributes["shape"] = DenseArrayAttr(I64, tuple([-1] + shape[1:]))
        try:
            types = definition.infer_for_op(op)
        except OpError as e:
            raise TraceError(f"'{op.name}' op {e}", op.location) from None
        for result, t in zip(op.results, types):
            result.type = t


def with_batch(func: FuncOp, batch_args: list[int], size) -> FuncOp:
    """A copy of ``func`` whose ``batch_args`` have leading dim ``size`` (None: ``?``)."""
    func = func.clone()
    for i in batch_args:
        arg = func.arguments[i]
        arg.type = TensorType((size,) + tuple(arg.type.shape[1:]), arg.type.element_type)
    return func


def generalize_batch(func: FuncOp, batch_args: list[int], batch: int) -> FuncOp:
    """``func`` with dim 0 of ``batch_args`` dynamic, checked at another batch size."""
    general = with_batch(func, batch_args, None)
    reinfer(general, batch)
    _check_batch_reaches_results(general, batch)
    other = batch + 1 if batch > 1 else 2
    probe = with_batch(general, batch_args, other)
    try:
        reinfer(probe)
    except TraceError as e:
        raise TraceError(f"the traced graph bakes the batch size {batch} in and cannot run at batch {other}: "
                         f"{e.message} (pass dynamic_batch=False to keep every shape static)",
                         e.location) from None
    return general


def _check_batch_reaches_results(general: FuncOp, batch: int) -> None:
    """Refuse a graph whose result has the example's batch size as a static leading dim: a size
    read from the example (``x.shape[0]`` given to ``expand``, ``zeros``, ``reshape``) fixed it, and
    at another batch the result would silently keep ``batch`` rows.  (A result whose leading dim
    is ``batch`` by coincidence is refused too; ``dynamic_batch=False`` keeps it.)"""
    returned = general.entry_block.terminator
    for i, value in enumerate(returned.operands):
        t = value.type
        if isinstance(t, TensorType) and t.rank and t.shape[0] == batch:
            location = value.op.location if isinstance(value, OpResult) else returned.location
            raise TraceError(f"the traced graph bakes the batch size {batch} in: result {i} ({t}) keeps it as a "
                             "fixed leading dim (a size read from an example input, e.g. x.shape[0] given to "
                             "expand, zeros or reshape), so at another batch size it would keep "
                             f"{batch} rows (pass dynamic_batch=False to keep every shape static)", location)


# --- the traced module ----------------------------------------------------------------------------------

def bound_arrays(named_tensors: list, args, device=CPU) -> list:
    """The arrays of the tensors bound to ``args``, checked against the argument types and
    ``device`` (the compiled code trusts them: a model moved to another dtype after tracing, or
    partly to another device, must fail here)."""
    arrays = []
    on_host = device == CPU
    for (name, t), arg in zip(named_tensors, args):
        a = t._data
        want = arg.type
        if (a.__class__ is np.ndarray) is not on_host:
            raise RuntimeError(f"{name} is on {device_of(a)}, the other tensors the graph reads on {device}: "
                               f"expected all tensors to be on the same device")
        if on_host and (a.dtype != want.element_type.numpy_dtype or a.shape != want.shape or not a.flags.c_contiguous):
            raise RuntimeError(f"{name} is now {a.dtype}{list(a.shape)}; it was traced as {want} (trace again)")
        if not on_host and (numpy_dtype(a) != want.element_type.numpy_dtype or tuple(a.shape) != want.shape):
            raise RuntimeError(f"{name} is now {numpy_dtype(a)}{list(a.shape)}; it was traced as {want} (trace again)")
        arrays.append(a)
    return arrays


def run_device(what: str, named_tensors: list, inputs: tuple):
    """The device a graph runs on: its bound tensors' (a model's parameters and buffers), else its
    tensor inputs'.  Tensor inputs on another device are an ``OperatorError`` naming ``what``, as
    in eager code; numpy inputs go to the device."""
    tensors = [x._data for x in inputs if isinstance(x, Tensor)]
    if named_tensors:
        tensors.insert(0, named_tensors[0][1]._data)
    return device_of_arrays(what, tensors) if tensors else CPU


def device_inputs(func, arrays: list, device) -> list:
    """``arrays`` (numpy arrays, Python data, or torch tensors on ``device``) as ``func``'s first
    arguments on ``device``: numpy data checked (``check_argument``) and copied there; a tensor of
    the wrong dtype or shape is an error naming the argument."""
    out = []
    for i, a in enumerate(arrays):
        if is_torch(a):
            want = func.arguments[i].type
            if numpy_dtype(a) != want.element_type.numpy_dtype or not _shape_matches(tuple(a.shape), want.shape):
                check_argument(func, i, host(a))  # raises, naming the argument
            out.append(a.contiguous())
        else:
            out.append(to_device(np.ascontiguousarray(check_argument(func, i, a)), device))
    return out


def _shape_matches(shape: tuple, want: tuple) -> bool:
    return len(shape) == len(want) and all(w is None or w == d for d, w in zip(shape, want))


def _holders(t) -> int:
    """The references to ``t._data`` (``sys.getrefcount``: every object holding it, and this frame's)."""
    a = t._data
    return sys.getrefcount(a)


class _Holder:
    pass


_probe = _Holder()
_probe._data = np.empty(1)
_SOLE = _holders(_probe)  # what _holders counts when only the tensor holds its array
del _probe


def _sole_holder(t) -> bool:
    """Whether ``t`` alone holds its numpy array, which owns its memory (no view, numpy array, alias
    or torch tensor of it exists that could write it unseen)."""
    a = t._data
    return a.__class__ is np.ndarray and a.base is None and _holders(t) == _SOLE + 1  # + 1: this frame's `a`


class TracedModule:
    """A traced model: ``.graph`` (MLIR text), ``.module`` (the IR), callable on lz tensors, arrays of
    other libraries (torch, DLPack: tensors out) or numpy arrays (numpy in, numpy out), running the whole graph compiled.  Parameters and buffers are
    read from ``named_tensors`` at every call: for a traced ``nn.Module`` these are its own
    tensors, so the traced module follows its weights, and their device (``run_device``)."""

    def __init__(self, module: ModuleOp, entry: str, named_tensors: list, structure, n_inputs: int,
                 updates: list = (), random: list = (), cpu=None):
        self.module = module
        self.entry = entry
        self.func = module.lookup(entry)
        self.named_tensors = list(named_tensors)   # [(name, Tensor)] in argument order after the inputs
        self.structure = structure
        self.n_inputs = n_inputs
        self.updates = list(updates)  # [(name, Tensor)]: written from the results after the outputs
        self.random = list(random)    # RandomArgument per generator: bound before each call
        # cpu: the CPU its host code is for; the weights pre-packed, kept while _weight_keys vouch for them
        self.compiled = CompiledFunction(module, entry, cpu=cpu, prepacked_weights=True)
        self._runners: dict[tuple, object] = {}

    @property
    def graph(self) -> str:
        """The IR, in MLIR's syntax."""
        return print_module(self.module)

    @property
    def code(self) -> str:
        return self.graph

    def state_dict(self) -> dict:
        return {name: t for name, t in self.named_tensors}

    def __call__(self, *inputs):
        if len(inputs) != self.n_inputs:
            raise TypeError(f"the traced module takes {self.n_inputs} input{'s' if self.n_inputs != 1 else ''}, "
                            f"got {len(inputs)}")
        # torch and DLPack arrays come in as tensors (tensors out); numpy arrays stay (numpy out)
        inputs = tuple(x if x.__class__ is np.ndarray else t for x, t in zip(inputs, as_inputs(inputs, f"@{self.entry}")))
        as_numpy = all(not isinstance(x, Tensor) for x in inputs)
        for r in self.random:
            r.bind()
        device = run_device(f"@{self.entry}", self.named_tensors, inputs)
        if device.type != "cpu":
            return self._call_on(device, inputs, as_numpy)
        arrays = [x._data if isinstance(x, Tensor) else x for x in inputs]
        key = tuple((getattr(a, "shape", None), getattr(a, "dtype", None)) for a in arrays)
        run = self._runners.get(key)
        if run is None or not all(isinstance(a, np.ndarray) for a in arrays):
            arrays = [np.ascontiguousarray(check_argument(self.func, i, a)) for i, a in enumerate(arrays)]
            key = tuple((a.shape, a.dtype) for a in arrays)
            run = self._runners.get(key)
            if run is None:
                shapes = [a.shape for a in arrays] + [t._data.shape for _, t in self.named_tensors]
                run = self._runners[key] = self._bf16_as_storage(self.compiled.runner(shapes))
        else:
            arrays = [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in arrays]
        keys = self._weight_keys()
        results = self._write_updates(run(arrays + bound_arrays(self.named_tensors,
                                                                self.func.arguments[self.n_inputs:]), keys=keys))
        flat = list(results) if as_numpy else [wrap(r) for r in results]
        return rebuild(self.structure, flat)

    def _weight_keys(self) -> list:
        """Per argument, what the CPU plan compares to keep a weight pre-packed
        (``lezero.runtime.cpu.PackedInput``): for a parameter or buffer whose array no other object
        holds (no numpy array, alias, view or torch tensor could then write it unseen), its version
        and exposures (``Tensor._exposures``: each way of handing its memory out counts); None
        otherwise, which packs it again."""
        keys = [None] * self.n_inputs
        for _, t in self.named_tensors:
            keys.append((t._version_count, t._exposures) if t._base is None and _sole_holder(t) else None)
        return keys

    def _bf16_as_storage(self, run):
        """``run`` taking and giving bf16 values as bfloat16 storage, as eager bf16 tensors hold them
        (a model traced in ``autocast(bf16)`` returns bf16 tensors, not float32 ones holding bf16)."""
        signature = self.func.function_type
        if any(t.element_type == BF16 for t in (*signature.inputs, *signature.results)):
            return bf16_storage_runner(run, signature)
        return run

    def _write_updates(self, results: list) -> list:
        """The outputs; the results after them are copied into the updated tensors."""
        n = len(results) - len(self.updates)
        for (_, t), new in zip(self.updates, results[n:]):
            copy_into(t._data, new)
            t._version += 1
        return list(results[:n])

    def _call_on(self, device, inputs: tuple, as_numpy: bool):
        """The call on a GPU device: the graph compiled for it (one runner per input shapes, keyed
        by the device arrays' dtypes, which tell the device)."""
        arrays = device_inputs(self.func, [x._data if isinstance(x, Tensor) else x for x in inputs], device)
        key = tuple((a.shape, a.dtype) for a in arrays)
        run = self._runners.get(key)
        if run is None:
            shapes = [tuple(a.shape) for a in arrays] + [tuple(t._data.shape) for _, t in self.named_tensors]
            run = self._runners[key] = compile_for(self.module, self.entry, device, self.compiled.cpu).runner(shapes)
        results = self._write_updates(run(arrays + bound_arrays(self.named_tensors,
                                                                self.func.arguments[self.n_inputs:], device)))
        flat = [host(r) for r in results] if as_numpy else [wrap(r) for r in results]
        return rebuild(self.structure, flat)

    forward = __call__

    def __repr__(self) -> str:
        return f"<TracedModule @{self.entry}: {self.func.function_type}>"


def trace(model, example_inputs, *, dynamic_batch: bool = True, name: str = "forward", cpu=None) -> TracedModule:
    """Trace ``model`` (an ``nn.Module`` or a function of tensors) on ``example_inputs`` (a tensor or
    a tuple of them) into one compiled function, its CPU code generated for ``cpu`` (LLVM's names,
    default ``$LEZERO_CPU`` or ``"host"``); see the module docstring."""
    inputs = as_input_tuple(example_inputs)
    if not inputs:
        raise TypeError("jit.trace needs at least one example input")
    recorded = record_function(model, inputs, name)
    traced, names = recorded.trace, recorded.names
    func = traced.func
    bound = bind_arguments(func, traced.inputs, traced.captured, names)
    # the parameters and buffers: the CPU plan keeps them pre-packed while their contents stay the same
    states = {id(r.tensor) for r in recorded.random}
    weights = tuple(len(traced.inputs) + i for i, t in enumerate(bound) if id(t) not in states)
    if weights:
        func.attributes[WEIGHT_ARGUMENTS_ATTR] = DenseArrayAttr(I64, weights)
    if dynamic_batch:
        shapes = [t._data.shape for t in traced.inputs]
        if shapes[0]:
            batch = shapes[0][0]
            batch_args = [i for i, s in enumerate(shapes) if s and s[0] == batch]
            func = generalize_batch(func, batch_args, batch)
    module = ModuleOp([func])
    verify(module)
    return TracedModule(module, func.sym_name, [(names[id(t)], t) for t in bound], recorded.structure, len(inputs),
                         recorded.updates, recorded.random, cpu)
