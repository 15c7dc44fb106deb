"""Autograd: grad mode, recordings replayed as IR functions, ``backward``, ``grad``, ``trace``.

Eager ops record ``Node``s (``lezero.eager.core``).  Everything here starts from a *recording*: the
nodes between some output tensors and the tensors the walk stops at (given inputs, leaves,
tensors that need no grad), found by ``walk`` together with a structural key: each node's op,
attributes and operand references, and each argument's shape and dtype, never a value.

- ``build_function(recording)`` replays the nodes through the same ``EagerOp.emit`` that eager
  execution compiles, into ``@f(inputs..., captured...) -> outputs``: one IR function.
- ``backward()`` differentiates that function with the autodiff pass (``differentiate``), then
  feeds the values the forward pass already computed into it instead of recomputing them: each
  recorded output's op is tagged ``lz.eager_value = array<i64: node, result>``; in ``@f_grad`` the
  tagged values the gradient needs become arguments, the forward ops die, and what remains is the
  backward pass alone.  It is compiled once per structure (``_GRADIENTS``), so a training loop
  compiles its backward pass on the first step and then only walks and launches; for the device
  the recording's tensors are on (the key holds their storage dtypes, which tell it).
- ``create_graph=True`` records that gradient function as one node (an ``EagerOp`` that inlines
  it), so gradients of gradients differentiate through it again: ``grad(grad(f))``.
- ``trace(fn, *examples)`` runs ``fn`` with every op recorded, at the user's lines: the function
  ``lezero.jit`` compiles whole, under ``graph_capture`` (in-place updates of parameters become
  results; converting a traced tensor to a Python value raises).
- Tensor hooks (``register_hook``, ``retain_grad``): ``backward`` and ``grad`` run in segments
  between the hooked tensors when there are any, as PyTorch's engine fires them (``_by_segments``).

Why this file is long: ``backward``, ``grad`` and ``trace`` are three readers of one recording
(``walk``) and one cache of compiled gradient functions, and the hooks' segments are ``backward``
and ``grad`` run piecewise through the same two; apart, each would import the others' private
parts.
"""
from __future__ import annotations

import contextlib
import functools
import weakref
from dataclasses import dataclass, field

import numpy as np

from lezero.eager.core import Mode, Tensor, alias, record, wrap
from lezero.eager.creation import tensor, zeros_like
from lezero.eager.device_arrays import contiguous, like, numpy_dtype, size, storage
from lezero.eager.dispatch import EagerOp, compile_for, device_of_arrays, tensor_type
from lezero.ir.attributes import DenseArrayAttr
from lezero.ir.builder import Builder
from lezero.ir.core import FuncOp, ModuleOp, OpResult
from lezero.ir.types import I64, FunctionType

TAG = "lz.eager_value"


# --- grad mode ---------------------------------------------------------------------------------------

class _GradMode:
    """A context manager and decorator: grad mode is ``self.mode`` while it is active."""

    mode = True

    def __enter__(self):
        self.previous = Mode.grad
        Mode.grad = self.mode
        return self

    def __exit__(self, *exc) -> bool:
        Mode.grad = self.previous
        return False

    def __call__(self, fn):
        mode = self.mode

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            previous, Mode.grad = Mode.grad, mode
            try:
                return fn(*args, **kwargs)
            finally:
                Mode.grad = previous
        return wrapper


class no_grad(_GradMode):  # noqa: N801 - PyTorch's names
    """``with lz.no_grad():`` records nothing (evaluation, optimizer updates)."""

    mode = False


class enable_grad(_GradMode):  # noqa: N801
    mode = True


class inference_mode(_GradMode):  # noqa: N801
    def __init__(self, mode: bool = True):
        self.mode = not mode


class set_grad_enabled(_GradMode):  # noqa: N801
    """``set_grad_enabled(False)`` switches at once (as PyTorch's); as a context manager it
    switches back on exit."""

    def __init__(self, mode: bool):
        self.mode = bool(mode)
        self.previous = Mode.grad
        Mode.grad = self.mode

    def __enter__(self):
        return self


def is_grad_enabled() -> bool:
    return Mode.grad


# --- recordings ---------------------------------------------------------------------------------------

@dataclass
class Recording:
    """The nodes between ``outputs`` and the tensors the walk stopped at.

    ``args``: the function's arguments, the given inputs first, then each captured tensor (a leaf,
    a constant, a tensor that needs no grad) in the order first met.  ``nodes`` in topological
    order, ``refs[n]`` the operands of node ``n`` (``("a", i)`` argument i, ``("n", m, k)`` result
    k of node m), ``outputs`` the references of the outputs, ``tensors[(m, k)]`` the tensor of each
    node result met.  ``key`` says everything that decides the function, and nothing else.
    """

    args: list
    nodes: list
    refs: list
    outputs: list
    tensors: dict
    key: tuple = ()
    used_args: set = field(default_factory=set)
    stale_args: set = field(default_factory=set)  # arguments changed in place since a node read them


def walk(outputs, inputs=(), stop_at_constants: bool = False, session=None) -> Recording:
    """Find the nodes between ``outputs`` and ``inputs``.  The walk also stops at tensors without
    a node, at those that need no grad when ``stop_at_constants`` (backward), and at nodes not
    recorded in trace ``session`` when one is given (``trace``).

    A node's input changed in place after the node read it (its version moved on) is read where
    it stood then: at the node it had (``Tensor._history``), with ``_made`` the version read, so a
    gradient that needs its value finds it stale (``_run_gradient`` raises PyTorch's error; one
    that does not, runs)."""
    args = list(inputs)
    arg_index = {id(t): i for i, t in enumerate(args)}
    number: dict[int, int] = {}
    expanded: set[int] = set()
    nodes, refs, tensors, stale_args = [], [], {}, set()
    read: dict[int, list] = {}  # id(node) -> the tensors standing for its inputs

    def stops(t: Tensor) -> bool:
        if id(t) in arg_index:
            return True
        node = t._node
        if node is None or (stop_at_constants and not t.requires_grad):
            return True
        return session is not None and node.session is not session

    def ref(t: Tensor) -> tuple:
        i = arg_index.get(id(t))
        if i is not None:
            return ("a", i)
        if stops(t):
            arg_index[id(t)] = len(args)
            args.append(t)
            return ("a", len(args) - 1)
        r = ("n", number[id(t._node)], t._index)
        seen = tensors.get(r[1:])
        if seen is None or seen._version != seen._made:  # prefer a tensor still holding the value
            tensors[r[1:]] = t
        return r

    def inputs_of(node) -> list:
        out = read.get(id(node))
        if out is None:
            out = read[id(node)] = [_as_read(x, version) for x, version in zip(node.inputs, node.versions)]
        return out

    for root in outputs:
        stack = [root]
        while stack:
            t = stack[-1]
            if stops(t) or id(t._node) in number:
                stack.pop()
                continue
            node = t._node
            if node.inputs is None:
                raise RuntimeError("Trying to backward through the graph a second time (or directly access saved "
                                   "tensors after they have already been freed). Specify retain_graph=True if you "
                                   "need to backward through the graph a second time.")
            if id(node) not in expanded:
                expanded.add(id(node))
                stack.extend(x for x in reversed(inputs_of(node)) if not (stops(x) or id(x._node) in number))
                continue
            stack.pop()
            number[id(node)] = len(nodes)
            nodes.append(node)
            node_refs = []
            for x, version in zip(inputs_of(node), node.versions):
                r = ref(x)
                # a jit trace reads an updated parameter or buffer before its update as the argument
                if r[0] == "a" and x._version != version and not (Mode.updates and id(x) in Mode.updates):
                    stale_args.add(r[1])
                node_refs.append(r)
            refs.append(tuple(node_refs))
    out_refs = [ref(t) for t in outputs]
    key = (tuple((a._data.shape, a._data.dtype) for a in args),
           tuple((node.op, node.attrs, r) for node, r in zip(nodes, refs)), tuple(out_refs))
    used = {r[1] for rs in refs for r in rs if r[0] == "a"} | {r[1] for r in out_refs if r[0] == "a"}
    return Recording(args, nodes, refs, out_refs, tensors, key, used, stale_args)


def _as_read(x: Tensor, version: int) -> Tensor:
    """``x`` as a node read it at ``version``: ``x`` itself, unless an in-place op gave it another
    node since; then a stand-in at the node it had, on ``x``'s memory, made at ``version``."""
    history = x.__dict__.get("_history")
    if history is None or x._version == version:
        return x
    for last, node, index in history:  # (the last version with that node, the node, its result index)
        if last >= version:
            if node is None:
                return x
            stand_in = alias(x)  # x's memory holds a later value: stale (``_version != _made``)
            stand_in._node, stand_in._index, stand_in.requires_grad = node, index, True
            stand_in._version_count, stand_in._made = x._version, version
            return stand_in
    return x


def build_function(rec: Recording, name: str = "f", locations: bool = False, tag: bool = False,
                   same_value: dict | None = None) -> FuncOp:
    """``@name(args...) -> outputs``: the recorded nodes replayed through their ``emit``.  With
    ``locations``, ops carry the user's lines the nodes were recorded at; with ``tag``, each node
    result's op carries ``lz.eager_value = array<i64: node, result>``, and ``same_value`` gets,
    for each tagged result, the later node results that are the same value (``clone`` emits its
    input)."""
    func = FuncOp(name, FunctionType([tensor_type(a._data) for a in rec.args], []))
    block = func.entry_block
    b = Builder.at_end(block)
    values: list[list] = []

    def value(r):
        return block.args[r[1]] if r[0] == "a" else values[r[1]][r[2]]

    for n, (node, refs) in enumerate(zip(rec.nodes, rec.refs)):
        if locations and node.location is not None:
            b.location = node.location
        results = node.op.build(b, node.attrs, [value(r) for r in refs])
        if tag:
            for k, v in enumerate(results):
                if isinstance(v, OpResult) and len(v.op.results) == 1:
                    if TAG not in v.op.attributes:
                        v.op.attributes[TAG] = DenseArrayAttr(I64, (n, k))
                    elif same_value is not None:
                        same_value.setdefault(tuple(v.op.attributes[TAG].values), []).append((n, k))
        values.append(results)
    b.create("func.return", [value(r) for r in rec.outputs], result_types=[])
    func.update_function_type()
    return func


# --- gradient functions --------------------------------------------------------------------------------

@dataclass
class GradientFunction:
    """``@backward_grad`` for one recorded structure, compiled: ``sources`` say what feeds each
    argument (``("a", i)`` recording argument i, ``("seed", j)`` output j's cotangent,
    ``("n", m, k)`` the forward value of node m's result k)."""

    func: FuncOp
    sources: list
    run: object
    op: EagerOp  # inlines ``func``: how create_graph records it
    same_value: dict  # (node, result) -> later node results holding the same value (``build_function``)


_GRADIENTS: dict[tuple, GradientFunction] = {}


def gradient_function(rec: Recording, wrt: tuple) -> GradientFunction:
    key = (rec.key, wrt)
    cached = _GRADIENTS.get(key)
    if cached is None:
        cached = _GRADIENTS[key] = _build_gradient_function(rec, wrt)
    return cached


def _build_gradient_function(rec: Recording, wrt: tuple) -> GradientFunction:
    from lezero.passes.autodiff import differentiate  # the compiler loads on first use
    from lezero.passes.dce import erase_dead_ops

    same_value: dict = {}
    forward = build_function(rec, "backward", tag=True, same_value=same_value)
    grad = differentiate(forward, wrt=list(wrt))
    block = grad.entry_block
    n_args, n_out = len(rec.args), len(rec.outputs)
    sources = [("a", i) for i in range(n_args)] + [("seed", j) for j in range(n_out)]
    # the forward values the gradient reads become arguments
    for op in list(block.ops):
        tag = op.attributes.pop(TAG, None)
        if tag is None:
            continue
        n, k = tag.values
        if (n, k) in rec.tensors and op.result.uses:
            arg = block.add_argument(op.result.type)
            op.result.replace_all_uses_with(arg)
            sources.append(("n", n, k))
    ret = grad.return_op
    ret.set_operands(list(ret.operands)[n_out:])  # the gradients only: the forward results are known
    erase_dead_ops(grad)
    for i in reversed(range(len(block.args))):
        if not block.args[i].uses:
            block.erase_argument(i)
            del sources[i]
    grad.update_function_type()
    module = ModuleOp([grad])
    shapes = [a.type.shape for a in block.args]
    device = device_of_arrays("backward", [a._data for a in rec.args])
    run = compile_for(module, grad.sym_name, device).runner(shapes)
    return GradientFunction(grad, sources, run, EagerOp("backward", functools.partial(_inline, grad),
                                                           len(grad.function_type.results)), same_value)


def _inline(func: FuncOp, b: Builder, attrs: dict, *values) -> list:
    """Emit ``func``'s body into ``b`` on ``values``; its returned values."""
    value_map = dict(zip(func.arguments, values))
    for op in func.entry_block.ops[:-1]:
        b.insert(op.clone(value_map))
    return [value_map.get(v, v) for v in func.return_op.operands]


def _run_gradient(rec: Recording, wrt: tuple, seeds: list, create_graph: bool) -> list:
    """The gradients of ``rec``'s outputs (weighted by ``seeds``) to the arguments ``wrt``."""
    gf = gradient_function(rec, wrt)
    inputs = []
    for src in gf.sources:
        if src[0] == "a":
            if src[1] in rec.stale_args:
                t = rec.args[src[1]]
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation: a tensor of shape {list(t.shape)} is at version {t._version}, changed after "
                    f"the graph read it.")
            inputs.append(rec.args[src[1]])
        elif src[0] == "seed":
            inputs.append(seeds[src[1]])
        else:
            t = rec.tensors[src[1:]]
            for other in gf.same_value.get(src[1:], ()):
                if t._version == t._made:
                    break
                t = rec.tensors.get(other, t)  # another tensor of the same value, still holding it
            if t._version != t._made:  # the forward value the gradient reads was overwritten in place
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified by an inplace "
                    f"operation: a tensor of shape {list(t.shape)}, output {src[2]} of {rec.nodes[src[1]].op.name}, "
                    f"is at version {t._version}; expected version {t._made} instead.")
            inputs.append(t)
    # the gradient function takes contiguous arrays: a view's elements are copied (once, here)
    outs = [wrap(a) for a in gf.run([contiguous(t._data) if t._strided else t._data for t in inputs])]
    if create_graph and Mode.grad or Mode.trace:
        record(gf.op, (), tuple(inputs), outs)
    return outs


def _seeds(outputs, grad_outputs) -> list:
    seeds = []
    for i, (out, g) in enumerate(zip(outputs, grad_outputs)):
        if g is None:
            if size(out._data) != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            seeds.append(wrap(like(np.ones(out.shape, numpy_dtype(out._data)), out._data)))
            continue
        g = g if isinstance(g, Tensor) else wrap(like(storage(g, numpy_dtype(out._data)), out._data))
        if g.shape != out.shape:
            raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of {list(g.shape)} and output[{i}] "
                               f"has a shape of {list(out.shape)}.")
        if g._data.dtype != out._data.dtype:
            g = g.to(out.dtype)
        seeds.append(g)
    return seeds


def _free(rec: Recording) -> None:
    for node in rec.nodes:
        node.inputs = None


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph: bool = False, inputs=None) -> None:
    """Accumulate into each leaf's ``.grad`` the gradient of ``tensors`` (weighted by
    ``grad_tensors``; required for non-scalars)."""
    outputs = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    if grad_tensors is None or isinstance(grad_tensors, Tensor):
        grad_tensors = [grad_tensors] * len(outputs) if grad_tensors is None else [grad_tensors]
    for i, t in enumerate(outputs):
        if not t.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
    seeds = _seeds(outputs, grad_tensors)
    retain_graph = create_graph if retain_graph is None else retain_graph
    stop = list(inputs) if inputs is not None else []
    if isinstance(inputs, Tensor):
        stop = [inputs]
    if HOOKED and not stop:
        return _backward_by_segments(outputs, seeds, retain_graph, create_graph)
    rec = walk(outputs, stop, stop_at_constants=True)
    if stop:
        wrt = tuple(range(len(stop)))
    else:
        wrt = tuple(i for i, t in enumerate(rec.args) if t.requires_grad and t._node is None)
    if wrt:
        with set_grad_enabled(create_graph):
            grads = _run_gradient(rec, wrt, seeds, create_graph)
            for i, g in zip(wrt, grads):
                _accumulate(rec.args[i], g, create_graph)
    if not retain_graph:
        _free(rec)


def _accumulate(t: Tensor, g: Tensor, create_graph: bool) -> None:
    """Add ``g`` (after ``t``'s hooks) into ``t.grad``."""
    g = _run_hooks(t, g)
    if t.grad is None:
        t.grad = g
    elif create_graph or t.grad.shape != g.shape:
        t.grad = t.grad + g
    else:
        t.grad.add_(g)  # in place, as PyTorch accumulates


# --- tensor hooks and retained gradients ------------------------------------------------------------------
# ``register_hook(fn)`` calls ``fn(grad)`` when the gradient of the tensor is computed (a result
# not None replaces it); ``retain_grad()`` keeps a non-leaf tensor's gradient in ``.grad``.  A
# leaf's hooks run before its ``.grad`` accumulates.  A non-leaf's gradient is no value of the
# one recorded function ``backward`` compiles, so when some non-leaf is hooked (``HOOKED``; none
# is the common case, which costs one dict lookup) ``backward`` runs in segments: from the
# outputs to the hooked tensors and the leaves, then from each hooked tensor, latest first (it is
# complete once every later one has passed its gradient on), to the next ones.  ``grad`` does the
# same where hooks are involved, firing only those PyTorch's engine fires (``_grad_by_segments``).

HOOKED: "weakref.WeakValueDictionary[int, Tensor]" = weakref.WeakValueDictionary()


def _run_hooks(t: Tensor, g: Tensor) -> Tensor:
    for hook in list(getattr(t, "_hooks", {}).values()):
        replaced = hook(g)
        if replaced is not None:
            g = replaced
    return g


def _backward_by_segments(outputs, seeds, retain_graph: bool, create_graph: bool) -> None:
    whole = walk(outputs, stop_at_constants=True)
    position = {id(node): i for i, node in enumerate(whole.nodes)}
    hooked = [t for t in whole.tensors.values() if HOOKED.get(id(t)) is t]
    leaves, _, recordings = _by_segments(outputs, seeds, hooked, position, lambda t: t._node is None,
                                         lambda t: True, create_graph)
    for t, g in leaves.values():
        _accumulate(t, g, create_graph)
    if not retain_graph:
        for rec in recordings:
            _free(rec)


def _by_segments(outputs, seeds, boundary: list, position: dict, is_target, continues, create_graph: bool):
    """The gradients of ``outputs`` (weighted by ``seeds``) in segments, running hooks on the way:
    from the outputs to the ``boundary`` tensors (non-leaves whose gradient is wanted on its own)
    and to the tensors ``is_target`` accepts; then from each boundary tensor, latest first
    (``position``: its node's place in the whole recording; it is complete once every later one
    has passed its gradient on), whose hooks run and whose retained ``.grad`` takes the hooked
    value, on to the next ones when ``continues(t)``.  Returns ``({id: (target, its summed
    gradient)}, {id(boundary tensor): (its gradient, after its hooks)}, the recordings)``."""
    ordered = sorted(boundary, key=lambda t: position[id(t._node)], reverse=True)
    first = [t for t in outputs if any(t is b for b in ordered)]  # their gradient is the seed
    ordered = first + [t for t in ordered if not any(t is o for o in first)]
    in_boundary = {id(t) for t in ordered}
    pending: dict[int, tuple] = {}
    recordings = []

    def segment(sources, cotangents, stop) -> None:
        rec = walk(sources, stop, stop_at_constants=True)
        recordings.append(rec)
        wrt = tuple(i for i, t in enumerate(rec.args) if t.requires_grad and (id(t) in in_boundary or is_target(t)))
        if not wrt:
            return
        with set_grad_enabled(create_graph):
            for i, g in zip(wrt, _run_gradient(rec, wrt, cotangents, create_graph)):
                t = rec.args[i]
                pending[id(t)] = (t, g) if id(t) not in pending else (t, pending[id(t)][1] + g)

    segment(outputs, seeds, ordered)
    reached = {}
    for t in ordered:
        g = pending.pop(id(t), (None, None))[1]
        if g is None:
            continue
        hooked = _run_hooks(t, g)
        if getattr(t, "_retains_grad", False):
            t.grad = hooked if t.grad is None else t.grad + hooked
        reached[id(t)] = (g, hooked)
        if continues(t):
            segment([t], [hooked], [h for h in ordered if h is not t])
    return pending, reached, recordings


def _grad_by_segments(outputs, inputs, seeds, retain_graph: bool, create_graph: bool) -> list:
    """``grad`` as PyTorch's engine runs it when hooks are involved or an input lies below another:
    it runs the nodes from which an input is reached, so the hooks (and retained ``.grad``) of the
    non-leaves there fire, their results passed on, and the hooks of the inputs themselves; other
    tensors' hooks do not.  A leaf input gets its gradient after its hooks, as does a non-leaf one
    whose node runs for nothing else; one whose node passes gradients on to another input gets it
    before its hooks (PyTorch captures it there)."""
    whole = walk(outputs, stop_at_constants=True)
    position = {id(node): i for i, node in enumerate(whole.nodes)}
    wanted = {id(t) for t in inputs}
    input_refs = {("a", i) for i, a in enumerate(whole.args) if id(a) in wanted}
    input_refs |= {("n", position[id(t._node)], t._index) for t in inputs if id(t._node) in position}
    reaches_input = []  # per node: an input lies below it (walk lists a node after those it reads)
    for refs in whole.refs:
        reaches_input.append(any(r in input_refs or (r[0] == "n" and reaches_input[r[1]]) for r in refs))

    def runs(t) -> bool:
        return reaches_input[position[id(t._node)]]

    in_graph = [t for t in HOOKED.values() if id(t._node) in position]
    boundary = [t for t in in_graph if id(t) in wanted or runs(t)]
    boundary += [t for t in inputs if t._node is not None and id(t._node) in position
                 and not any(t is b for b in boundary)]
    leaves, reached, recordings = _by_segments(outputs, seeds, boundary, position, lambda t: id(t) in wanted,
                                               runs, create_graph)
    if not retain_graph:
        for rec in recordings:
            _free(rec)
    grads = []
    for t in inputs:
        if t._node is None:
            g = leaves.get(id(t), (None, None))[1]
            grads.append(None if g is None else _run_hooks(t, g))
        else:
            before, after = reached.get(id(t), (None, None))
            grads.append(before if before is None or runs(t) else after)
    return grads


class RemovableHandle:
    """What ``register_hook`` returns: ``remove()`` takes the hook off again."""

    def __init__(self, hooks: dict, key: int):
        self.hooks, self.key = hooks, key

    def remove(self) -> None:
        self.hooks.pop(self.key, None)


class Hooks:
    """The ``Tensor`` methods of hooks and retained gradients (installed by ``lezero.eager.tensor``)."""

    def register_hook(self, hook) -> RemovableHandle:
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require gradient")
        hooks = self.__dict__.setdefault("_hooks", {})
        key = max(hooks, default=-1) + 1
        hooks[key] = hook
        if self._node is not None:
            HOOKED[id(self)] = self
        return RemovableHandle(hooks, key)

    def retain_grad(self) -> None:
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        if self._node is not None:
            self._retains_grad = True
            HOOKED[id(self)] = self

    @property
    def retains_grad(self) -> bool:
        return bool(getattr(self, "_retains_grad", False)) and self._node is not None


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph: bool = False,
         allow_unused: bool = False, materialize_grads: bool = False):
    """``torch.autograd.grad``: the gradients of ``outputs`` to ``inputs``, as a tuple (nothing
    accumulates into the leaves' ``.grad``).  Tensor hooks fire as PyTorch's do
    (``_grad_by_segments``)."""
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    single = isinstance(inputs, Tensor)
    inputs = [inputs] if single else list(inputs)
    if grad_outputs is None or isinstance(grad_outputs, Tensor):
        grad_outputs = [grad_outputs] * len(outputs) if grad_outputs is None else [grad_outputs]
    for i, t in enumerate(outputs):
        if not t.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not have a grad_fn")
    for t in inputs:
        if not t.requires_grad:
            raise RuntimeError("One of the differentiated Tensors does not require grad")
    seeds = _seeds(outputs, grad_outputs)
    retain_graph = create_graph if retain_graph is None else retain_graph
    rec = walk(outputs, inputs, stop_at_constants=True)
    hooked = any(getattr(t, "_hooks", None) or id(t) in HOOKED for t in list(rec.tensors.values()) + rec.args)
    nested = len(inputs) > 1 and any(t._node is not None for t in inputs)  # one input may lie below another
    if hooked or nested:
        grads = _grad_by_segments(outputs, inputs, seeds, retain_graph, create_graph)
        unused = [i for i, g in enumerate(grads) if g is None]
    else:
        unused = [i for i in range(len(inputs)) if i not in rec.used_args]
    if unused and not (allow_unused or materialize_grads):
        raise RuntimeError("One of the differentiated Tensors appears to not have been used in the graph. "
                           "Set allow_unused=True if this is the desired behavior.")
    if hooked or nested:
        if materialize_grads:
            grads = [zeros_like(t) if g is None else g for t, g in zip(inputs, grads)]
        return tuple(grads)
    with set_grad_enabled(create_graph):
        grads = _run_gradient(rec, tuple(range(len(inputs))), seeds, create_graph)
    if not retain_graph:
        _free(rec)
    if not materialize_grads:
        grads = [None if i in unused else g for i, g in enumerate(grads)]
    return tuple(grads)


# --- functional transforms ------------------------------------------------------------------------------

def _differentiable(x) -> Tensor:
    """``x`` as a tensor a gradient can be taken to: itself if it already requires grad (it may be
    an outer derivative's input), else a new leaf on the same memory; while tracing, a recorded
    copy, so the traced function still reads its input."""
    t = x if isinstance(x, Tensor) else tensor(x, dtype=np.float32 if isinstance(x, float) else None)
    if t.requires_grad and Mode.grad:
        return t
    if Mode.trace:
        with enable_grad():
            c = t.clone()
        c.requires_grad = True
        return c
    return t.detach().requires_grad_()


def grad_transform(fn, argnums=0, has_aux: bool = False):
    """``lz.grad(fn)``: a function returning the gradient of ``fn`` (a scalar function) to its
    argument(s) ``argnums``.  ``fn`` is recorded into IR, differentiated by the autodiff pass and
    compiled; nested, ``lz.grad(lz.grad(f))`` differentiates the gradient function again."""
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)

    @functools.wraps(fn)
    def gradient(*args, **kwargs):
        args = list(args)
        # the gradient must be differentiable again when an outer derivative or trace is running
        nested = bool(Mode.trace) or any(isinstance(args[i], Tensor) and args[i].requires_grad and Mode.grad
                                          for i in nums)
        for i in nums:
            args[i] = _differentiable(args[i])
        with enable_grad():
            out = fn(*args, **kwargs)
        aux = None
        if has_aux:
            out, aux = out
        if not isinstance(out, Tensor) or out.numel() != 1:
            raise RuntimeError(f"lz.grad(f): f must return a tensor with a single element, got "
                               f"{type(out).__name__}{'' if not isinstance(out, Tensor) else list(out.shape)}")
        wrt = [args[i] for i in nums]
        if not out.requires_grad:
            grads = [None] * len(wrt)
        else:
            grads = grad([out], wrt, create_graph=nested, allow_unused=True)
        grads = [zeros_like(w) if g is None else g for g, w in zip(grads, wrt)]
        result = grads[0] if isinstance(argnums, int) else tuple(grads)
        return (result, aux) if has_aux else result

    return gradient


def value_and_grad(fn, argnums=0, has_aux: bool = False):
    """``fn``'s value and its gradient, from one recording."""
    holder = {}

    def keep(*args, **kwargs):
        out = fn(*args, **kwargs)
        holder["value"] = out
        return out

    g = grad_transform(keep, argnums, has_aux)

    def both(*args, **kwargs):
        grads = g(*args, **kwargs)
        value = holder.pop("value")
        return value, grads
    return both


# --- tracing ------------------------------------------------------------------------------------------

@dataclass
class Trace:
    """``fn`` recorded over example inputs: ``func`` is ``@name(inputs..., captured...) ->
    outputs``; ``captured`` are the tensors ``fn`` read that are not inputs (parameters, buffers,
    constants), in argument order; ``outputs`` the example outputs (flattened)."""

    func: FuncOp
    inputs: list
    captured: list
    outputs: list
    recording: Recording


def trace(fn, *example_inputs, name: str = "traced", **kwargs) -> Trace:
    """Run ``fn`` on ``example_inputs`` recording every op (at the user's source lines) and return
    it as one IR function.  ``fn`` returns a tensor or a (nested) tuple/list of tensors."""
    inputs = [alias(x) if isinstance(x, Tensor) else tensor(x) for x in example_inputs]
    session = object()  # marks the nodes this trace records: earlier recordings are constants to it
    previous = (Mode.trace, Mode.session)
    Mode.trace, Mode.session = previous[0] + 1, session
    try:
        outputs = fn(*inputs, **kwargs)
    finally:
        Mode.trace, Mode.session = previous
    flat = _flatten(outputs)
    rec = walk(flat, inputs, session=session)
    func = build_function(rec, name, locations=True)
    return Trace(func, inputs, rec.args[len(inputs):], flat, rec)


@contextlib.contextmanager
def graph_capture(on_escape):
    """The tracing hook ``lezero.jit`` records whole graphs under (around ``trace``).

    While active, an in-place op on a tensor the trace did not compute (a parameter or buffer) is
    collected in the yielded dict, ``id(tensor) -> (tensor, the tensor of its new value, its version
    after the update)``: the traced function returns those values as extra results.  And a tensor
    the trace computed that is about to become a Python value (``bool()``, ``.item()``,
    ``.tolist()``, ``.numpy()``, ``np.asarray()``) calls ``on_escape(what)`` first, which raises:
    the value would be the example's, baked into the graph."""
    previous = Mode.updates, Mode.on_escape
    Mode.updates, Mode.on_escape = {}, on_escape
    try:
        yield Mode.updates
    finally:
        Mode.updates, Mode.on_escape = previous


def _flatten(outputs) -> list:
    if isinstance(outputs, Tensor):
        return [outputs]
    if isinstance(outputs, (list, tuple)):
        return [t for o in outputs for t in _flatten(o)]
    if isinstance(outputs, dict):
        return [t for o in outputs.values() for t in _flatten(o)]
    raise TypeError(f"a traced function must return tensors (or tuples, lists, dicts of them), got "
                    f"{type(outputs).__name__}")
