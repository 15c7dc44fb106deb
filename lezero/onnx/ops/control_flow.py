"""Converters of ONNX's control flow: ``Loop``, ``Scan`` and ``If`` as ``lz.for``, ``lz.while`` and
``lz.if`` (``lezero/ir/dialect/control_flow.py``), and the region building the recurrent layers
(``recurrent.py``) share.

A subgraph becomes one region of the op.  lz's regions are isolated from above while ONNX's
subgraphs read the enclosing graphs' values by name, so the names a subgraph reads and does not
define (``free_names``, nested subgraphs included) are bound on entry: a small constant is copied
into the region (so shape-like values still fold inside it), anything else becomes an invariant
operand of the op (``captured_values``).

- **Loop** is an ``lz.for`` when its trip count is known at import and its condition cannot stop
  it: no condition input, or a condition known true whose body's ``cond_out`` folds to true once
  ``cond_in`` is true (in every iteration that runs, ``cond_in`` was true).  Otherwise it is an
  ``lz.while`` carrying the iteration number and the condition beside the loop-carried values.
  Scan outputs need a count known at compile time: with them the trip count and condition must be
  known (a ``ValueDependentError`` otherwise, which ``CompiledModel`` answers by importing the model
  for the inputs' values), and a body condition computed at run time is refused naming the node.
- **Scan** is an ``lz.for`` over its scan inputs with their scan axes moved to the front; the op's
  ``reverse`` follows the first scan input's direction and only the inputs and outputs that go the
  other way are flipped.  Scan-8's batch axis (``upgrade`` keeps the node from ONNX's version
  converter, which drops it) is an outer ``lz.for`` over the batch around that loop.
- **If** with a condition known at import is the chosen branch inlined (a shape test); with a
  run-time condition it is an ``lz.if`` whose branches must compute the same types.
"""
from __future__ import annotations

import numpy as np
import onnx

from lezero.ir.core import Block, Operation
from lezero.ir.dialect.control_flow import CONDITION_TYPE, INDEX_TYPE
from lezero.ir.opdef import OpError, lookup
from lezero.ir.types import I1 as BOOL, I64, TensorType
from lezero.onnx.importer import SCAN8_DOMAIN, erase_dead_ops, free_names
from lezero.onnx.registry import converter

# An outer constant with at most this many elements is copied into a region rather than passed in.
COPY_MAX_ELEMENTS = 64


# --- regions -------------------------------------------------------------------------------------------

def region(ctx, arg_types: list, fill) -> Block:
    """A block with arguments ``arg_types`` whose ops ``fill(*args) -> [values]`` builds through
    ``ctx`` (folding as usual) and which yields those values."""
    block = Block(list(arg_types))
    with ctx.importer.inside(block):
        results = fill(*block.args)
        ctx.b.create("lz.yield", list(results), result_types=[])
    erase_dead_ops(block)
    return block


def structured(ctx, name: str, operands: list, blocks: list, **attrs) -> list:
    """The op ``name`` (``lz.for``, ``lz.while``, ``lz.if``) with one region per block, its result
    types inferred from the regions; folded when every operand is known."""
    definition = lookup(name)
    op = Operation(name, list(operands), [], definition.make_attributes(attrs), location=ctx.location)
    for block in blocks:
        op.add_region().add_block(block)
    try:
        for t in definition.infer_for_op(op):
            op.add_result(t)
        definition.verify_extra(op, definition.attrs(op))
    except OpError as e:
        raise ctx.error(f"'{name}' op {e}") from None
    ctx.b.insert(op)
    return ctx.importer.fold(op, ctx)


def captured_values(ctx, graphs) -> tuple[dict, list]:
    """The outer values ``graphs`` read: ``(copies, captured)``, small known constants to copy into
    a region (name -> array) and the rest as ``[(name, value)]`` (the op's invariant operands)."""
    copies, captured = {}, []
    for name in dict.fromkeys(n for g in graphs for n in free_names(g)):
        if name not in ctx.env:
            raise ctx.error(f"a subgraph reads '{name}', which no enclosing graph defines")
        v = ctx.env[name]
        if v is None:
            raise ctx.unsupported(f"a subgraph reads '{name}', an output lezero does not compute")
        known = ctx.constant_of(v)
        if known is not None and known.size <= COPY_MAX_ELEMENTS:
            copies[name] = (known, v.type)
        else:
            captured.append((name, v))
    return copies, captured


def convert_subgraph(ctx, graph: onnx.GraphProto, what: str, inputs: list, copies: dict, captured: dict) -> list:
    """Convert ``graph``'s nodes into the block being filled: its inputs are ``inputs`` (values of
    the block, in order), the outer values it reads ``captured`` (name -> value of the block) and
    ``copies``.  Returns its outputs."""
    outer = dict(captured)
    for name, (array, t) in copies.items():
        outer[name] = ctx.importer.constant(array, t, ctx.location)
    return ctx.inline_graph(graph, inputs, what, outer=outer)


def _as_declared(ctx, v, declared: onnx.ValueInfoProto):
    """``v`` (a rank-0 index or condition) reshaped to the rank ``declared`` gives it ([] or [1])."""
    t = declared.type
    if t.HasField("tensor_type") and t.tensor_type.HasField("shape") and len(t.tensor_type.shape.dim) == 1:
        return ctx.reshape(v, [1])
    return v


def _scalar(ctx, v, what: str):
    """A one-element ``v`` as rank 0."""
    if v.type.is_static and v.type.num_elements != 1:
        raise ctx.error(f"{what} must have one element, got {v.type}")
    return ctx.reshape(v, [])


def _is_true(array) -> bool:
    return array is not None and bool(np.all(np.asarray(array)))


def _check_carried(ctx, what: str, names, before: list, after: list) -> None:
    for name, b, a in zip(names, before, after):
        if b.type != a.type:
            raise ctx.unsupported(f"{what} '{name}' changes type from {b.type} to {a.type} across iterations "
                                  "(lezero's loops keep static types)")


# --- Loop ----------------------------------------------------------------------------------------------

@converter("Loop", since=11)
def loop(ctx):
    body = ctx.attr("body")
    trip, cond = ctx.optional(0), ctx.optional(1)
    inits = [ctx.input(k) for k in range(2, len(ctx.inputs))]
    nc = len(inits)
    n_scan = len(body.output) - 1 - nc
    if len(body.input) != 2 + nc or n_scan < 0:
        raise ctx.error(f"body takes {len(body.input)} inputs and gives {len(body.output)} outputs for {nc} "
                        "loop-carried values")
    if trip is None and cond is None:
        raise ctx.unsupported("has neither a trip count nor a condition: it would never stop")
    if n_scan:  # their length must be known at compile time
        if trip is not None:
            ctx.require_constant(trip, "the trip count of a Loop with scan outputs")
        if cond is not None:
            ctx.require_constant(cond, "the condition of a Loop with scan outputs")
    copies, captured = captured_values(ctx, [body])
    outer = [v for _, v in captured]
    carried_names = [i.name for i in body.input[2:]]
    trip_count, cond_known = ctx.constant_of(trip), ctx.constant_of(cond)
    if trip_count is not None and (cond is None or cond_known is not None):
        n = 0 if cond is not None and not _is_true(cond_known) else max(int(np.asarray(trip_count).reshape(-1)[0]), 0)
        stops = []

        def for_body(index, *args):
            ctx.importer.bounds[index] = (0, n - 1)  # a Slice starting at the index reads rows in range
            inner = dict(zip([name for name, _ in captured], args[:len(outer)]))
            carried = list(args[len(outer):])
            true = ctx.constant(np.array(True), BOOL)
            outs = convert_subgraph(ctx, body, "body", [_as_declared(ctx, index, body.input[0]),
                                                        _as_declared(ctx, true, body.input[1])] + carried,
                                    copies, inner)
            _check_carried(ctx, "the loop-carried value", carried_names, carried, outs[1:1 + nc])
            if cond is not None and not _is_true(ctx.constant_of(outs[0])):
                stops.append(outs[0])
            return outs[1:]

        block = region(ctx, [INDEX_TYPE] + [v.type for v in outer] + [v.type for v in inits], for_body)
        if not stops:
            return structured(ctx, "lz.for", outer + inits, [block], trip_count=n, num_invariant=len(outer),
                              num_carried=nc, reverse=False)
    if n_scan:
        raise ctx.unsupported("has scan outputs and a condition its body computes at run time: the outputs' "
                              "length would be known only at run time")
    return _while_loop(ctx, body, trip, cond, inits, copies, captured, carried_names)


def _while_loop(ctx, body, trip, cond, inits, copies, captured, carried_names) -> list:
    """An ``lz.while`` carrying (iteration number, condition, the loop-carried values); the trip
    count, when there is one, is its first invariant."""
    invariants = ([_scalar(ctx, trip, "the trip count")] if trip is not None else []) + [v for _, v in captured]
    start = [ctx.constant(np.zeros((), np.int64), I64),
             _scalar(ctx, ctx.cast(cond, BOOL), "the condition") if cond is not None
             else ctx.constant(np.array(True), BOOL)]
    types = [v.type for v in invariants] + [INDEX_TYPE, CONDITION_TYPE] + [v.type for v in inits]
    ni = len(invariants)
    has_trip = trip is not None

    def condition(*args):
        index, go = args[ni], args[ni + 1]
        if has_trip:
            go = ctx.op("lz.and", go, ctx.op("lz.cmp", index, args[0], predicate="lt"))
        return [go]

    def loop_body(*args):
        inner = dict(zip([name for name, _ in captured], args[int(has_trip):ni]))
        index, go, carried = args[ni], args[ni + 1], list(args[ni + 2:])
        outs = convert_subgraph(ctx, body, "body", [_as_declared(ctx, index, body.input[0]),
                                                    _as_declared(ctx, go, body.input[1])] + carried, copies, inner)
        _check_carried(ctx, "the loop-carried value", carried_names, carried, outs[1:])
        next_go = _scalar(ctx, ctx.cast(outs[0], BOOL), "the body's condition") if cond is not None else go
        return [ctx.op("lz.add", index, ctx.constant(np.ones((), np.int64), I64)), next_go] + outs[1:]

    blocks = [region(ctx, types, condition), region(ctx, types, loop_body)]
    results = structured(ctx, "lz.while", invariants + start + list(inits), blocks, num_invariant=ni)
    return results[2:]


# --- Scan ----------------------------------------------------------------------------------------------

def _flip(ctx, v):
    """``v`` reversed along its leading dim."""
    n = v.type.shape[0]
    return ctx.op("lz.slice", v, starts=[n - 1], ends=[-n - 1], axes=[0], steps=[-1]) if n > 1 else v


@converter("Scan", since=9)
def scan(ctx):
    body = ctx.attr("body")
    m = int(ctx.attr("num_scan_inputs"))
    ns = len(ctx.inputs) - m
    if m < 1 or ns < 0:
        raise ctx.error(f"num_scan_inputs is {m} with {len(ctx.inputs)} inputs")
    states, xs = [ctx.input(k) for k in range(ns)], [ctx.input(ns + k) for k in range(m)]
    k_out = len(body.output) - ns
    in_axes = list(ctx.attr("scan_input_axes", [0] * m))
    in_dirs = list(ctx.attr("scan_input_directions", [0] * m))
    out_axes = list(ctx.attr("scan_output_axes", [0] * k_out))
    out_dirs = list(ctx.attr("scan_output_directions", [0] * k_out))
    if len(in_axes) != m or len(in_dirs) != m or len(out_axes) != k_out or len(out_dirs) != k_out:
        raise ctx.error("scan_input_axes/directions need one value per scan input and scan_output_axes/directions "
                        "one per scan output")
    copies, captured = captured_values(ctx, [body])
    return _scan_loop(ctx, body, states, xs, (in_axes, in_dirs, out_axes, out_dirs), copies, captured)


@converter("Scan", domain=SCAN8_DOMAIN)
def scan8(ctx):
    """Scan-8 (``upgrade`` sets it aside in ``SCAN8_DOMAIN``, its body already upgraded): every
    state and scan input and output has a leading batch axis the body does not see.  It is an
    ``lz.for`` over the batch whose body is Scan-9's loop over one element's slices: the batch
    becomes the outer loop's scanned axis and its stacked outputs are the batched results, so the
    body is converted once and never needs to handle a batch dim it was not written for."""
    body = ctx.attr("body")
    m = int(ctx.attr("num_scan_inputs"))
    ns = len(ctx.inputs) - 1 - m
    if m < 1 or ns < 0:
        raise ctx.error(f"num_scan_inputs is {m} with {len(ctx.inputs)} inputs (sequence_lens first)")
    states, xs = [ctx.input(1 + k) for k in range(ns)], [ctx.input(1 + ns + k) for k in range(m)]
    batched = states + xs
    for k, v in enumerate(batched):
        ctx.shape(v, f"input #{k + 1}")
        if v.type.rank < (1 if k < ns else 2):
            raise ctx.error(f"input #{k + 1} has type {v.type}: Scan-8's states need a batch axis, its scan inputs "
                            "a batch and a sequence axis")
    batch, length = batched[0].type.shape[0], xs[0].type.shape[1]
    if any(v.type.shape[0] != batch for v in batched):
        raise ctx.error(f"inputs have different batch sizes: {[v.type.shape[0] for v in batched]}")
    lens = ctx.optional(0)
    if lens is not None:
        ctx.require_constant(lens, "Scan-8's sequence_lens")
        if not np.all(np.asarray(ctx.constant_of(lens)) == length):
            raise ctx.unsupported(f"sequence_lens {np.asarray(ctx.constant_of(lens)).tolist()} are not all the "
                                  f"sequence length {length}: only full sequences are supported")
    k_out = len(body.output) - ns
    directions = list(ctx.attr("directions", [0] * m))
    if len(directions) != m:
        raise ctx.error(f"directions needs one value per scan input ({m}), got {len(directions)}")
    copies, captured = captured_values(ctx, [body])
    names, outer = [name for name, _ in captured], [v for _, v in captured]

    def per_element(index, *args):
        inner = list(zip(names, args[:len(outer)]))
        slices = list(args[len(outer):])
        return _scan_loop(ctx, body, slices[:ns], slices[ns:], ([0] * m, directions, [0] * k_out, [0] * k_out),
                          copies, inner)

    element_types = [TensorType(v.type.shape[1:], v.type.element_type) for v in batched]
    block = region(ctx, [INDEX_TYPE] + [v.type for v in outer] + element_types, per_element)
    return structured(ctx, "lz.for", outer + batched, [block], trip_count=batch, num_invariant=len(outer),
                      num_carried=0, reverse=False)


def _scan_loop(ctx, body, states, xs, axes_and_directions, copies, captured) -> list:
    """Scan-9's ``lz.for`` over ``xs`` (in the block being filled) carrying ``states``:
    ``axes_and_directions`` is (scan_input_axes, scan_input_directions, scan_output_axes,
    scan_output_directions); ``captured`` the ``[(name, value)]`` of that block the body reads."""
    in_axes, in_dirs, out_axes, out_dirs = axes_and_directions
    ns = len(states)
    reverse = bool(in_dirs[0])
    leading = []
    for k, (x, axis) in enumerate(zip(xs, in_axes)):
        rank = ctx.rank(x)
        axis = axis + rank if axis < 0 else axis
        x = ctx.transpose(x, [axis] + [d for d in range(rank) if d != axis])
        ctx.shape(x, f"scan input #{k}")
        leading.append(_flip(ctx, x) if bool(in_dirs[k]) != reverse else x)
    n = leading[0].type.shape[0]
    if any(x.type.shape[0] != n for x in leading):
        raise ctx.error(f"scan inputs have different lengths along their scan axes: "
                        f"{[x.type.shape[0] for x in leading]}")
    outer = [v for _, v in captured]
    state_names = [i.name for i in body.input[:ns]]

    def scan_body(index, *args):
        inner = dict(zip([name for name, _ in captured], args[:len(outer)]))
        carried = list(args[len(outer):len(outer) + ns])
        outs = convert_subgraph(ctx, body, "body", carried + list(args[len(outer) + ns:]), copies, inner)
        _check_carried(ctx, "the state", state_names, carried, outs[:ns])
        return outs

    slices = [TensorType(x.type.shape[1:], x.type.element_type) for x in leading]
    block = region(ctx, [INDEX_TYPE] + [v.type for v in outer] + [v.type for v in states] + slices, scan_body)
    results = structured(ctx, "lz.for", outer + states + leading, [block], trip_count=n, num_invariant=len(outer),
                         num_carried=ns, reverse=reverse)
    outputs = list(results[:ns])
    for k, y in enumerate(results[ns:]):
        y = _flip(ctx, y) if bool(out_dirs[k]) != reverse else y
        rank = ctx.rank(y)
        axis = out_axes[k] + rank if out_axes[k] < 0 else out_axes[k]
        perm = list(range(1, rank))
        perm.insert(axis, 0)
        outputs.append(ctx.transpose(y, perm))
    return outputs


# --- If ------------------------------------------------------------------------------------------------

@converter("If")
def if_(ctx):
    """A condition known at import (a shape test, or bound with constant_inputs) inlines the
    chosen branch; a run-time one makes an ``lz.if``."""
    then_branch, else_branch = ctx.attr("then_branch"), ctx.attr("else_branch")
    known = ctx.const(0)
    if known is not None:
        condition = bool(np.asarray(known).reshape(-1)[0])
        branch, what = (then_branch, "then_branch") if condition else (else_branch, "else_branch")
        return ctx.inline_graph(branch, [], what)
    pred = _scalar(ctx, ctx.cast(ctx.input(0, "the condition"), BOOL), "the condition")
    copies, captured = captured_values(ctx, [then_branch, else_branch])
    names = [name for name, _ in captured]
    outer = [v for _, v in captured]

    def branch_of(graph, what):
        return lambda *args: convert_subgraph(ctx, graph, what, [], copies, dict(zip(names, args)))

    blocks = [region(ctx, [v.type for v in outer], branch_of(g, what))
              for g, what in ((then_branch, "then_branch"), (else_branch, "else_branch"))]
    then_types, else_types = (b.terminator.operand_types for b in blocks)
    if then_types != else_types:
        raise ctx.unsupported(f"its branches compute different types ({', '.join(map(str, then_types))} and "
                              f"{', '.join(map(str, else_types))}): lezero's lz.if needs the same static types")
    return structured(ctx, "lz.if", [pred] + outer, blocks)
