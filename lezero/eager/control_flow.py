"""Explicit loops and conditions: ``lz.scan``, ``lz.fori_loop``, ``lz.while_loop``, ``lz.cond``
(JAX's names and signatures), which a trace keeps as one ``lz.for`` / ``lz.while`` / ``lz.if``.

Python control flow in a traced function stays a trace, as in PyTorch: a ``for`` loop is
unrolled on the example and an ``if`` on a tensor raises (``lezero.jit.trace``).  These functions
are the loops a graph keeps:

- **eagerly** they run the Python functions step by step, each op eagerly, autograd recording
  every step as usual (so ``backward`` works through them with nothing new);
- **under a trace** (``lz.jit.trace``, ``compile_train_step``, ``lezero.eager.autograd.trace``)
  each function is recorded ONCE, under a trace session of its own, on placeholders for its
  arguments (the loop index, the carried values, one slice of each scanned input): that recording
  becomes the op's region.  What the function reads from outside (weights in its closure, values
  the outer trace computed) stops the recording's walk there, as a captured argument: those
  become the op's invariant operands (lz.if: extra operands), so the region is isolated from
  above.  The values the rest of the trace goes on with are computed by running the Python loop
  eagerly once more, outside the trace (the trace's cost, not the compiled code's); the op is
  recorded as one node of the outer trace on them.

``carry``, ``x`` and ``y`` are tensors or (nested) tuples and lists of tensors; ``y`` may be None.
A loop's trip count is a Python int (static shapes: the stacked outputs' leading dim).
"""
from __future__ import annotations

import contextlib

import numpy as np

from lezero.eager.autograd import build_function, no_grad, walk
from lezero.eager.core import Mode, Tensor, alias, record
from lezero.eager.creation import tensor, zeros
from lezero.eager.device_arrays import host
from lezero.eager.dispatch import EagerOp, tensor_type
from lezero.eager.dtypes import int64
from lezero.eager.functions import cat, stack
from lezero.ir.attributes import BoolAttr, IntegerAttr
from lezero.ir.core import Block, Operation, Region
from lezero.ir.dialect.control_flow import exceeded_bound_message
from lezero.ir.types import I1, I64, TensorType

INDEX_TYPE = TensorType((), I64)


# --- trees of tensors ---------------------------------------------------------------------------------

def flatten(tree) -> tuple[list, object]:
    """``(the tensors of tree in order, its structure)``; ``rebuild`` inverts it."""
    if tree is None:
        return [], None
    if isinstance(tree, Tensor):
        return [tree], 0
    if isinstance(tree, (tuple, list)):
        leaves, parts = [], []
        for t in tree:
            sub, structure = flatten(t)
            leaves.extend(sub)
            parts.append((len(sub), structure))
        return leaves, (type(tree), parts)
    raise TypeError(f"control flow carries tensors or tuples and lists of them, got {type(tree).__name__}")


def rebuild(structure, leaves: list):
    if structure is None:
        return None
    if structure == 0:
        return leaves[0]
    kind, parts = structure
    out, at = [], 0
    for n, sub in parts:
        out.append(rebuild(sub, leaves[at:at + n]))
        at += n
    return kind(out)


def _types(leaves: list) -> list:
    return [tensor_type(t._data) for t in leaves]


def _check_carry(what: str, before: list, after: list) -> None:
    if before != after:
        raise TypeError(f"{what}: the carried value must keep its types across iterations: "
                        f"({', '.join(map(str, before))}) became ({', '.join(map(str, after))})")


# --- recording a region --------------------------------------------------------------------------------

class RecordedRegion:
    """One function recorded as a region: ``block`` (its arguments in the op's order, ending with
    ``lz.yield``), ``captured`` (the outside tensors it reads, in invariant order) and the types
    of what it yields.  Hashable by identity: it is an attribute of a recorded node."""

    def __init__(self, block: Block, captured: list, result_types: list):
        self.block = block
        self.captured = captured
        self.result_types = result_types

    def region(self) -> Region:
        """A fresh copy of the block as a region (one per emitted op)."""
        region = Region()
        self.block.clone_into(region, {})
        return region


def record_region(fn, placeholders: list):
    """``fn(*placeholders)`` recorded under a trace session of its own: ``(the function
    @region(placeholders..., captured...) -> flat outputs, the captured tensors, the flat outputs,
    their structure)``."""
    session = object()
    previous = Mode.session
    Mode.session = session
    try:
        out = fn(*placeholders)
    finally:
        Mode.session = previous
    flat, structure = flatten(out)
    rec = walk(flat, placeholders, session=session)
    func = build_function(rec, "region", locations=True)
    return func, rec.args[len(placeholders):], flat, structure


def as_block(func, arg_types: list, positions: list) -> Block:
    """``func``'s body as a block with arguments ``arg_types``: argument ``j`` of ``func`` is block
    argument ``positions[j]``; its ``func.return`` becomes ``lz.yield``."""
    block = Block(arg_types)
    mapping = {a: block.args[k] for a, k in zip(func.arguments, positions)}
    for op in func.entry_block.ops:
        if op.name == "func.return":
            block.append(Operation("lz.yield", [mapping.get(v, v) for v in op.operands], location=op.location))
        else:
            block.append(op.clone(mapping))
    return block


def _union(*lists) -> list:
    seen, out = set(), []
    for t in (t for ts in lists for t in ts):
        if id(t) not in seen:
            seen.add(id(t))
            out.append(t)
    return out


def _placeholder(t: Tensor) -> Tensor:
    """A tensor holding ``t``'s value that no trace has seen: a region's argument."""
    return alias(t)


@contextlib.contextmanager
def outside_trace():
    """Eager execution with nothing recorded: the values a traced loop goes on with."""
    previous = Mode.trace, Mode.session
    Mode.trace, Mode.session = 0, None
    try:
        with no_grad():
            yield
    finally:
        Mode.trace, Mode.session = previous


def _emit_op(name: str):
    def emit(b, attrs, *values):
        regions = [r.region() for r in attrs["regions"]]
        attributes = {k: v for k, v in attrs.items() if k not in ("regions", "result_types")}
        op = Operation(name, values, attrs["result_types"], attributes, regions, b.location)
        return b.insert(op).results
    return EagerOp(name[3:], emit, num_results=None)


FOR = _emit_op("lz.for")
WHILE = _emit_op("lz.while")
IF = _emit_op("lz.if")


def _record_op(op: EagerOp, attrs: dict, inputs: list, outputs: list) -> list:
    """Record ``op`` as one node of the running trace, on ``outputs`` (fresh tensors: a loop may
    hand back its inputs as they were, which keep their own nodes)."""
    outputs = [alias(t) for t in outputs]
    record(op, tuple(attrs.items()), tuple(inputs), outputs)
    return outputs


# --- scan ------------------------------------------------------------------------------------------------

def scan(f, init, xs, length: int | None = None, reverse: bool = False):
    """``f(carry, x) -> (carry, y)`` over the leading dim of ``xs`` (a tensor, a tuple of them, or
    None with ``length``): ``(final carry, ys)``, ``ys[i]`` the ``y`` of step ``i`` (stacked along
    a new leading dim).  ``reverse`` runs ``i = length - 1`` down to 0.  JAX's ``lax.scan``."""
    x_leaves, x_structure = flatten(xs)
    n = _scan_length(x_leaves, length)
    if Mode.trace:
        return _traced_scan(f, init, xs, x_leaves, x_structure, n, reverse)
    carry, ys = init, [None] * n
    for i in (reversed(range(n)) if reverse else range(n)):
        carry, ys[i] = f(carry, rebuild(x_structure, [x[i] for x in x_leaves]))
    if n == 0:
        return init, _empty_ys(f, init, x_leaves, x_structure)
    y_leaves = [flatten(y)[0] for y in ys]
    structure = flatten(ys[0])[1]
    return carry, rebuild(structure, [stack_steps([leaves[k] for leaves in y_leaves]) for k in range(len(y_leaves[0]))])


STACK_FAN_IN = 16


def stack_steps(steps: list) -> Tensor:
    """``stack(steps)`` built from stacks and cats of at most ``STACK_FAN_IN`` tensors each.  One
    concat of n operands is a kernel of n inputs whose compile time grows much faster than n (a
    stack of 80 1x16 tensors: 0.9 s, of 120: 25 s), compiled again for every step count; these are a
    few kernels of at most 16 inputs, most of them shared by every step count."""
    parts = [stack(steps[k:k + STACK_FAN_IN]) for k in range(0, len(steps), STACK_FAN_IN)]
    while len(parts) > 1:
        parts = [cat(parts[k:k + STACK_FAN_IN]) for k in range(0, len(parts), STACK_FAN_IN)]
    return parts[0]


def _scan_length(x_leaves: list, length) -> int:
    lengths = {int(x.shape[0]) if x.dim() else None for x in x_leaves}
    if None in lengths:
        raise ValueError("scan: every scanned input needs a leading dim to scan over (a scalar has none)")
    if length is not None:
        lengths.add(int(length))
    if not lengths:
        raise ValueError("scan: with xs=None, length is required")
    if len(lengths) > 1:
        raise ValueError(f"scan: the scanned inputs and length disagree on the number of steps: {sorted(lengths)}")
    return lengths.pop()


def _slices(x_leaves: list) -> list:
    """One step's slice of each scanned input (zeros of that shape when there are no steps)."""
    return [x[0] if x.shape[0] else zeros(*x.shape[1:], dtype=x.dtype) for x in x_leaves]


def _empty_ys(f, init, x_leaves, x_structure):
    """The stacked outputs of zero steps: ``f`` evaluated once, for its output shapes only."""
    with outside_trace():
        _, y = f(init, rebuild(x_structure, _slices(x_leaves)))
    leaves, structure = flatten(y)
    return rebuild(structure, [zeros(0, *y.shape, dtype=y.dtype) for y in leaves])


def _traced_scan(f, init, xs, x_leaves, x_structure, n, reverse):
    c_leaves, c_structure = flatten(init)
    nc = len(c_leaves)
    index = tensor(0, dtype=int64)
    slots = [index] + [_placeholder(c) for c in c_leaves] + [_placeholder(x) for x in _slices(x_leaves)]

    y_structure = []

    def body(i, *args):
        carry, y = f(rebuild(c_structure, list(args[:nc])), rebuild(x_structure, list(args[nc:])))
        carry_leaves, carry_structure = flatten(carry)
        if carry_structure != c_structure:
            raise TypeError("scan: f must return the carry in the structure of init")
        y_leaves, structure = flatten(y)
        y_structure.append(structure)
        return carry_leaves + y_leaves

    func, captured, flat, _ = record_region(body, slots)
    carried_types = _types(c_leaves)
    _check_carry("scan", carried_types, _types(flat[:nc]))
    n_slots, ni = len(slots), len(captured)
    arg_types = [INDEX_TYPE] + _types(captured) + carried_types + [t.with_shape(t.shape[1:]) for t in _types(x_leaves)]
    positions = [0] + [1 + ni + k for k in range(n_slots - 1)] + [1 + k for k in range(ni)]
    block = as_block(func, arg_types, positions)
    y_types = _types(flat[nc:])
    result_types = carried_types + [t.with_shape((n,) + t.shape) for t in y_types]
    with outside_trace():
        carry, ys = scan(f, init, xs, n, reverse)
    attrs = {"regions": (RecordedRegion(block, captured, result_types),), "result_types": tuple(result_types),
             "trip_count": IntegerAttr(n, I64), "num_invariant": IntegerAttr(ni, I64),
             "num_carried": IntegerAttr(nc, I64), "reverse": BoolAttr(bool(reverse))}
    outputs = _record_op(FOR, attrs, captured + c_leaves + x_leaves, flatten(carry)[0] + flatten(ys)[0])
    return rebuild(c_structure, outputs[:nc]), rebuild(y_structure[0], outputs[nc:])


# --- fori_loop, while_loop, cond ------------------------------------------------------------------------

def fori_loop(lower: int, upper: int, body_fn, init_val):
    """``val = body_fn(i, val)`` for ``i`` in ``range(lower, upper)`` (``i`` an int64 scalar
    tensor); returns the last ``val``.  JAX's ``lax.fori_loop``; the bounds are Python ints."""
    lower, upper = _bound(lower, "lower"), _bound(upper, "upper")
    if not Mode.trace:
        val = init_val
        for i in range(lower, upper):
            val = body_fn(tensor(i, dtype=int64), val)
        return val
    return _traced_fori(lower, max(upper - lower, 0), body_fn, init_val)


def _bound(value, name: str) -> int:
    if isinstance(value, Tensor):
        raise TypeError(f"fori_loop: {name} must be a Python int (the trip count is static); "
                        f"use lz.while_loop for a bound computed by tensors")
    return int(value)


def _traced_fori(lower: int, n: int, body_fn, init_val):
    """A ``fori_loop`` under a trace: an ``lz.for`` of ``n`` steps over no scanned inputs, whose
    index argument (0-based) plus ``lower`` is ``i``."""
    c_leaves, c_structure = flatten(init_val)
    nc = len(c_leaves)
    slots = [tensor(0, dtype=int64)] + [_placeholder(c) for c in c_leaves]

    def body(i, *args):
        val = body_fn(i + lower if lower else i, rebuild(c_structure, list(args)))
        leaves, structure = flatten(val)
        if structure != c_structure:
            raise TypeError("fori_loop: body_fn must return val in the structure of init_val")
        return leaves

    func, captured, flat, _ = record_region(body, slots)
    carried_types = _types(c_leaves)
    _check_carry("fori_loop", carried_types, _types(flat))
    ni = len(captured)
    positions = [0] + [1 + ni + k for k in range(nc)] + [1 + k for k in range(ni)]
    block = as_block(func, [INDEX_TYPE] + _types(captured) + carried_types, positions)
    with outside_trace():
        val = fori_loop(lower, lower + n, body_fn, init_val)
    attrs = {"regions": (RecordedRegion(block, captured, carried_types),), "result_types": tuple(carried_types),
             "trip_count": IntegerAttr(n, I64), "num_invariant": IntegerAttr(ni, I64),
             "num_carried": IntegerAttr(nc, I64), "reverse": BoolAttr(False)}
    return rebuild(c_structure, _record_op(FOR, attrs, captured + c_leaves, flatten(val)[0]))


def _truth(pred: Tensor, what: str) -> bool:
    """The value of a rank-0 boolean tensor (read directly: under a trace, ``bool()`` would raise)."""
    if not isinstance(pred, Tensor) or pred.dim() != 0:
        raise TypeError(f"{what}: the condition must be a scalar (rank-0) tensor, got "
                        f"{pred.shape if isinstance(pred, Tensor) else type(pred).__name__}")
    return bool(np.asarray(host(pred._data)))


def while_loop(cond_fn, body_fn, init_val, max_trip_count: int | None = None):
    """``while cond_fn(val): val = body_fn(val)``; returns the last ``val``.  JAX's
    ``lax.while_loop``: ``cond_fn`` returns a rank-0 boolean tensor.  ``max_trip_count`` bounds
    the iterations: a traced loop then has a gradient (the lz.while's ``max_trip_count``: an
    lz.for of that many steps that stops changing its values once the condition is false), and
    running past the bound raises, eagerly and compiled.  Without it, a traced loop has no
    gradient (as in JAX); eagerly autograd records every step whatever the bound."""
    if max_trip_count is not None and int(max_trip_count) < 0:
        raise ValueError(f"while_loop: max_trip_count must be >= 0, got {max_trip_count}")
    if Mode.trace:
        return _traced_while(cond_fn, body_fn, init_val, max_trip_count)
    val, count = init_val, 0
    while _truth(cond_fn(val), "while_loop"):
        if count == max_trip_count:
            raise RuntimeError(exceeded_bound_message(count))
        val, count = body_fn(val), count + 1
    return val


def _traced_while(cond_fn, body_fn, init_val, max_trip_count):
    c_leaves, c_structure = flatten(init_val)
    nc = len(c_leaves)
    carried_types = _types(c_leaves)

    def cond(*args):
        go = cond_fn(rebuild(c_structure, list(args)))
        if not isinstance(go, Tensor) or tensor_type(go._data) != TensorType((), I1):
            raise TypeError("while_loop: cond_fn must return a rank-0 boolean tensor")
        return go

    def body(*args):
        leaves, structure = flatten(body_fn(rebuild(c_structure, list(args))))
        if structure != c_structure:
            raise TypeError("while_loop: body_fn must return val in the structure of init_val")
        return leaves

    cond_func, cond_captured, _, _ = record_region(cond, [_placeholder(c) for c in c_leaves])
    body_func, body_captured, flat, _ = record_region(body, [_placeholder(c) for c in c_leaves])
    _check_carry("while_loop", carried_types, _types(flat))
    invariants = _union(cond_captured, body_captured)
    at = {id(t): k for k, t in enumerate(invariants)}
    ni = len(invariants)
    arg_types = _types(invariants) + carried_types

    def block_of(func, captured):
        return as_block(func, arg_types, [ni + k for k in range(nc)] + [at[id(t)] for t in captured])

    regions = (RecordedRegion(block_of(cond_func, cond_captured), invariants, [TensorType((), I1)]),
               RecordedRegion(block_of(body_func, body_captured), invariants, carried_types))
    with outside_trace():
        val = while_loop(cond_fn, body_fn, init_val, max_trip_count)
    attrs = {"regions": regions, "result_types": tuple(carried_types), "num_invariant": IntegerAttr(ni, I64)}
    if max_trip_count is not None:
        attrs["max_trip_count"] = IntegerAttr(int(max_trip_count), I64)
    return rebuild(c_structure, _record_op(WHILE, attrs, invariants + c_leaves, flatten(val)[0]))


def cond(pred, true_fn, false_fn, *operands):
    """``true_fn(*operands)`` if ``pred`` (a rank-0 boolean tensor) else ``false_fn(*operands)``;
    both return the same structure of tensors of the same types.  JAX's ``lax.cond``."""
    taken = _truth(pred, "cond")
    if not Mode.trace:
        return true_fn(*operands) if taken else false_fn(*operands)
    o_leaves, o_structure = flatten(list(operands))
    recorded = [record_region(lambda *args, fn=fn: fn(*rebuild(o_structure, list(args))),
                              [_placeholder(o) for o in o_leaves]) for fn in (true_fn, false_fn)]
    (t_func, t_captured, t_flat, t_structure), (e_func, e_captured, e_flat, e_structure) = recorded
    if t_structure != e_structure or _types(t_flat) != _types(e_flat):
        raise TypeError(f"cond: true_fn and false_fn must return the same structure and types: "
                        f"({', '.join(map(str, _types(t_flat)))}) and ({', '.join(map(str, _types(e_flat)))})")
    extra = _union(t_captured, e_captured)
    at = {id(t): len(o_leaves) + k for k, t in enumerate(extra)}
    arg_types = _types(o_leaves) + _types(extra)
    result_types = _types(t_flat)

    def block_of(func, captured):
        return as_block(func, arg_types, list(range(len(o_leaves))) + [at[id(t)] for t in captured])

    regions = (RecordedRegion(block_of(t_func, t_captured), extra, result_types),
               RecordedRegion(block_of(e_func, e_captured), extra, result_types))
    with outside_trace():
        out = true_fn(*operands) if taken else false_fn(*operands)
    attrs = {"regions": regions, "result_types": tuple(result_types)}
    outputs = _record_op(IF, attrs, [pred] + o_leaves + extra, flatten(out)[0])
    return rebuild(t_structure, outputs)


__all__ = ["cond", "fori_loop", "scan", "while_loop"]
