"""``lz.for``, ``lz.while``, ``lz.if``: loops and a run-time condition as structured ops with regions
(MLIR's scf.for / scf.while / scf.if, JAX's lax.scan / while_loop / cond).

    %h, %ys = "lz.for"(%w, %h0, %xs) ({
    ^bb0(%i: tensor<i64>, %w_: tensor<4x4xf32>, %h_: tensor<1x4xf32>, %x: tensor<1x4xf32>):
      ...
      "lz.yield"(%h_next, %y) : (tensor<1x4xf32>, tensor<1x4xf32>) -> ()
    }) {trip_count = 8 : i64, num_invariant = 1 : i64, num_carried = 1 : i64, reverse = false}
       : (tensor<4x4xf32>, tensor<1x4xf32>, tensor<8x1x4xf32>) -> (tensor<1x4xf32>, tensor<8x1x4xf32>)

- ``lz.for``: operands are ``num_invariant`` invariants, ``num_carried`` initial carried values,
  then the scanned inputs (leading dim ``trip_count``).  The body takes the index ``%i``
  (``tensor<i64>``), the invariants, the carried values and one slice ``xs[k][i]`` per scanned
  input, and yields the next carried values then any number of per-iteration outputs ``y``.
  Results: the final carried values, then one stacked output ``tensor<trip_count x y>`` per ``y``.
  ``reverse`` runs ``i`` from ``trip_count - 1`` down to 0 (``ys[i]`` is still iteration i's).
- ``lz.while``: operands are invariants then carried inits; region 0 (the condition) and region 1
  (the body) both take (invariants, carried); region 0 yields one ``tensor<i1>``, region 1 the
  next carried values.  Results: the carried values when the condition first yields false.  An
  optional ``max_trip_count`` (>= 0) bounds it: running past it is an error (interpreter, CPU
  runtime), and it gives the loop a gradient.
- ``lz.if``: operand 0 is a rank-0 ``tensor<i1>``; the others are passed to both regions, which
  yield the same types, the results.

Every region is isolated from above (as ``lz.kernel``'s): a body sees only its block arguments and
the constants defined inside it, so it compiles on its own and values from outside (weights) come
in as invariant operands.  The types are static across iterations.  ``region_argument_types``
states what each region's arguments are from the operands, so shape inference (and the runtime's
shape specialization) re-infers a body from new operand shapes and the results from its yield.

The gradients (``grad``, reverse mode, ``lezero/ir/gradient.py``): ``lz.for``'s is a reverse
``lz.for`` over the body's gradient.  The forward values that gradient needs are STORED, not
recomputed: the forward loop is rewritten to also stack its carried values per iteration (one
stacked output per carried value), the reverse loop scans over those stacks and recomputes only
the body's intermediates of one step from them (a step's worth of work, the same as the
forward's; recomputing whole loops instead would turn n steps into n^2/2, and a checkpointing
scheme is not worth it at the sizes of an RNN's state).  Except the products: a step's
``lz.matmul``/``lz.conv2d`` that depends on the iteration and that the gradient reads (an RNN's
recurrent GEMM, the gates' pre-activations) is stacked by the forward loop too and scanned by
the reverse one (``_store_products``): a row of floats per step instead of a GEMM per step,
one of the three a training step's iteration otherwise runs.  Invariants' gradients are summed over the
iterations in a carried accumulator of the reverse loop (a sum of matrix products, a recurrent
weight's, leaves it as one GEMM over the stacked operands: ``lezero/passes/loop_sums.py``); scanned
inputs' gradients are its stacked outputs.  ``lz.if``'s is an ``lz.if`` of the two branches' gradients.  An unbounded ``lz.while`` has none
(its trip count is known only at run time, so nothing can be stacked): a clear error, as in JAX.
A bounded one's is what JAX users write by hand: the loop rewritten as an ``lz.for`` of
``max_trip_count`` steps that carries a ``running`` flag and selects the unchanged values once
the condition has been false, whose gradient is then ``lz.for``'s (exact: the steps after the
stop pass the cotangents through).  That ``lz.for`` recomputes the forward in the gradient
function, always ``max_trip_count`` steps (the while beside it gives the results and checks the
bound), so a tight bound is cheaper.
"""
from __future__ import annotations

import numpy as np

from lezero.ir.core import Block, Operation
from lezero.ir.gradient import GradBuilder, backpropagate
from lezero.ir.opdef import ISOLATED_FROM_ABOVE, PURE, YIELDS, AttrSpec, OpDef, OpError, lookup, register
from lezero.ir.types import I1, I64, TensorType
from lezero.ir.verifier import types_compatible

INDEX_TYPE = TensorType((), I64)
CONDITION_TYPE = TensorType((), I1)


def _types(types) -> str:
    return ", ".join(map(str, types))


def region_block(op, index: int, what: str) -> Block:
    """Region ``index`` of ``op``, which must hold one block ending with ``lz.yield``."""
    region = op.regions[index]
    if len(region.blocks) != 1:
        raise OpError(f"{what} region must have one block, got {len(region.blocks)}")
    block = region.blocks[0]
    terminator = block.terminator
    if terminator is None or terminator.name != "lz.yield":
        raise OpError(f"{what} region must end with 'lz.yield'")
    return block


def _check_region_count(op, want: int) -> None:
    if len(op.regions) != want:
        raise OpError(f"expects {want} region{'s' if want != 1 else ''}, got {len(op.regions)}")


def _check_arguments(block: Block, want: list, what: str) -> None:
    have = [a.type for a in block.args]
    if len(have) != len(want):
        raise OpError(f"{what} region takes {len(have)} arguments, but the operands give {len(want)} "
                      f"({_types(want)})")
    for k, (h, w) in enumerate(zip(have, want)):
        if not types_compatible(h, w):
            raise OpError(f"{what} region argument #{k} has type {h}, but the operands give {w}")


def _check_yield(block: Block, want: list, what: str, of_what: str, more_allowed: bool = False) -> None:
    """The types ``block`` yields are ``want`` (its first ones, with ``more_allowed``)."""
    have = block.terminator.operand_types
    if more_allowed:
        have = have[:len(want)]
    if len(have) != len(want):
        raise OpError(f"{what} region yields {len(have)} values, but {of_what} are {len(want)} ({_types(want)})")
    for k, (h, w) in enumerate(zip(have, want)):
        if not types_compatible(h, w):
            raise OpError(f"{what} region yields {h} as value #{k}, but {of_what} have type {w}")


def _check_isolated(block: Block, what: str) -> None:
    inside = {id(a) for a in block.args}
    for op in _walk(block):
        for v in op.operands:
            if id(v) not in inside:
                raise OpError(f"'{op.name}' in the {what} region uses a value defined outside it "
                              "(the region is isolated from above: pass it as an operand)")
        inside.update(id(r) for r in op.results)
        for region in op.regions:
            for inner in region.blocks:
                inside.update(id(a) for a in inner.args)


def _walk(block: Block):
    for op in block.ops:
        yield from op.walk()


class _StructuredOp(OpDef):
    """What the three ops share: variadic operands and results, pure, regions ending with
    ``lz.yield`` and isolated from above, region arguments that follow from the operands (types
    compared as the verifier compares results: a ``?`` dim matches any size)."""

    operands = ()
    variadic = True
    num_results = None
    traits = frozenset({PURE, ISOLATED_FROM_ABOVE, YIELDS})
    region_names: tuple = ()

    def region_argument_types(self, op) -> list[list]:
        """The types each region's block arguments must have, from ``op``'s operand types."""
        raise NotImplementedError

    def verify_extra(self, op, attrs) -> None:
        for index, (want, what) in enumerate(zip(self.region_argument_types(op), self.region_names)):
            block = region_block(op, index, what)
            _check_arguments(block, want, what)
            _check_isolated(block, what)


@register
class ForOp(_StructuredOp):
    name = "lz.for"
    attributes = {"trip_count": AttrSpec("i64"), "num_invariant": AttrSpec("i64", 0),
                  "num_carried": AttrSpec("i64", 0), "reverse": AttrSpec("bool", False)}
    summary = "a counted loop with carried values, scanned inputs and stacked outputs (lax.scan)"
    region_names = ("body",)

    def counts(self, op, attrs=None) -> tuple[int, int, int, int]:
        """``(trip_count, num_invariant, num_carried, num_scanned)``, checked against the operands."""
        attrs = attrs or self.attrs(op)
        n, ni, nc = attrs.trip_count, attrs.num_invariant, attrs.num_carried
        if n < 0:
            raise OpError(f"trip_count must be >= 0, got {n}")
        if ni < 0 or nc < 0:
            raise OpError(f"num_invariant ({ni}) and num_carried ({nc}) must be >= 0")
        if ni + nc > len(op.operands):
            raise OpError(f"num_invariant ({ni}) + num_carried ({nc}) is more than the {len(op.operands)} operands")
        return n, ni, nc, len(op.operands) - ni - nc

    def region_argument_types(self, op) -> list[list]:
        n, ni, nc, _ = self.counts(op)
        types = op.operand_types
        slices = []
        for k, t in enumerate(types[ni + nc:]):
            if not isinstance(t, TensorType) or t.rank == 0 or t.shape[0] not in (None, n):
                raise OpError(f"scanned input #{k} has type {t}, but its leading dim must be the trip_count ({n})")
            slices.append(TensorType(t.shape[1:], t.element_type))
        return [[INDEX_TYPE] + types[:ni + nc] + slices]

    def infer_for_op(self, op) -> list:
        _check_region_count(op, 1)
        n, ni, nc, _ = self.counts(op)
        yielded = region_block(op, 0, "body").terminator.operand_types
        if len(yielded) < nc:
            raise OpError(f"body region yields {len(yielded)} values, fewer than the {nc} carried values")
        stacked = [TensorType((n,) + tuple(t.shape), t.element_type) for t in yielded[nc:]]
        return list(op.operand_types[ni:ni + nc]) + stacked

    def verify_extra(self, op, attrs) -> None:
        super().verify_extra(op, attrs)
        _, ni, nc, _ = self.counts(op, attrs)
        _check_yield(region_block(op, 0, "body"), list(op.operand_types[ni:ni + nc]), "body",
                     "the carried values", more_allowed=True)

    def evaluate(self, op, inputs):
        from lezero.ir.interpreter import run_block

        n, ni, nc, _ = self.counts(op)
        reverse = self.attrs(op).reverse
        body = region_block(op, 0, "body")
        invariants, carried, xs = inputs[:ni], list(inputs[ni:ni + nc]), inputs[ni + nc:]
        steps: dict[int, list] = {}
        for i in (range(n - 1, -1, -1) if reverse else range(n)):
            out = run_block(body, [np.asarray(i, np.int64), *invariants, *carried, *[x[i] for x in xs]])
            carried, steps[i] = list(out[:nc]), out[nc:]
        stacked = []
        for k, result in enumerate(op.results[nc:]):
            t = result.type
            if n:
                stacked.append(np.stack([steps[i][k] for i in range(n)]))
            elif t.is_static:
                stacked.append(np.zeros(t.shape, t.element_type.numpy_dtype))
            else:
                raise OpError(f"stacked output #{k} of zero iterations has the dynamic type {t}")
        return carried + stacked

    def grad(self, b, op, attrs, dys):
        return for_gradient(b, op, attrs, dys)


@register
class WhileOp(_StructuredOp):
    name = "lz.while"
    attributes = {"num_invariant": AttrSpec("i64", 0), "max_trip_count": AttrSpec("i64", None)}
    summary = "a loop that runs while its condition region yields true (lax.while_loop)"
    region_names = ("condition", "body")

    def carried_start(self, op, attrs=None) -> int:
        ni = (attrs or self.attrs(op)).num_invariant
        if not 0 <= ni <= len(op.operands):
            raise OpError(f"num_invariant ({ni}) must be between 0 and the {len(op.operands)} operands")
        return ni

    def region_argument_types(self, op) -> list[list]:
        self.carried_start(op)
        return [list(op.operand_types), list(op.operand_types)]

    def infer_for_op(self, op) -> list:
        _check_region_count(op, 2)
        return list(op.operand_types[self.carried_start(op):])

    def verify_extra(self, op, attrs) -> None:
        super().verify_extra(op, attrs)
        if attrs.max_trip_count is not None and attrs.max_trip_count < 0:
            raise OpError(f"max_trip_count must be >= 0, got {attrs.max_trip_count}")
        _check_yield(region_block(op, 0, "condition"), [CONDITION_TYPE], "condition", "conditions")
        _check_yield(region_block(op, 1, "body"), list(op.operand_types[self.carried_start(op, attrs):]), "body",
                     "the carried values")

    def evaluate(self, op, inputs):
        from lezero.ir.interpreter import run_block

        ni = self.carried_start(op)
        condition, body = region_block(op, 0, "condition"), region_block(op, 1, "body")
        invariants, carried = list(inputs[:ni]), list(inputs[ni:])
        bound, count = self.attrs(op).max_trip_count, 0
        while bool(run_block(condition, invariants + carried)[0]):
            if count == bound:
                raise OpError(exceeded_bound_message(bound))
            carried, count = list(run_block(body, invariants + carried)), count + 1
        return carried

    def grad(self, b, op, attrs, dys):
        if attrs.max_trip_count is None:
            raise OpError("has no gradient without a 'max_trip_count' attribute: its trip count is known only at "
                          "run time, so the forward values cannot be stored (set max_trip_count, e.g. "
                          "lz.while_loop(..., max_trip_count=N), or use lz.for with a static trip count)")
        return while_gradient(b, op, attrs, dys)


def exceeded_bound_message(bound: int) -> str:
    """The error of a bounded ``lz.while`` whose condition still holds after ``bound`` iterations
    (the interpreter's, the CPU runtime's and eager ``lz.while_loop``'s)."""
    return (f"lz.while ran past its max_trip_count ({bound}): the condition still holds after {bound} "
            "iterations (raise max_trip_count)")


@register
class IfOp(_StructuredOp):
    name = "lz.if"
    summary = "runs one of two regions on a run-time condition (lax.cond)"
    region_names = ("then", "else")

    def region_argument_types(self, op) -> list[list]:
        types = op.operand_types
        if not types or types[0] != CONDITION_TYPE:
            raise OpError(f"operand #0 (the condition) must be {CONDITION_TYPE}, got "
                          f"{types[0] if types else 'no operands'}")
        return [list(types[1:]), list(types[1:])]

    def infer_for_op(self, op) -> list:
        _check_region_count(op, 2)
        self.region_argument_types(op)
        return list(region_block(op, 0, "then").terminator.operand_types)

    def verify_extra(self, op, attrs) -> None:
        super().verify_extra(op, attrs)
        _check_yield(region_block(op, 1, "else"), region_block(op, 0, "then").terminator.operand_types, "else",
                     "the then region's values")

    def evaluate(self, op, inputs):
        from lezero.ir.interpreter import run_block

        taken = 0 if bool(inputs[0]) else 1
        return run_block(region_block(op, taken, self.region_names[taken]), list(inputs[1:]))

    def grad(self, b, op, attrs, dys):
        return if_gradient(b, op, dys)


# --- gradients -----------------------------------------------------------------------------------

def _is_float(t) -> bool:
    return isinstance(t, TensorType) and t.element_type.is_float


def _inline(region: Block, block: Block, arg_map: dict) -> list:
    """Copy ``region``'s ops (not its yield) into ``block`` with ``arg_map`` (region argument ->
    value of ``block``); the values it yields, as values of ``block``."""
    value_map = dict(arg_map)
    for inner in region.ops[:-1]:
        block.append(inner.clone(value_map))
    return [value_map.get(v, v) for v in region.terminator.operands]


def differentiate_region(body: Block, block: Block, arg_map: dict, cotangents: list, wrt: list):
    """Copy ``body``'s ops (not its yield) into ``block`` with ``arg_map`` (body argument -> value
    of ``block``) and build their gradient after them: ``cotangents`` (a value of ``block`` or None
    per yielded value) flow back to ``wrt`` (values of ``block``).  Returns the builder at the end
    of ``block`` and the gradients (value -> its gradient; absent where none flowed)."""
    outputs = _inline(body, block, arg_map)[:len(cotangents)]
    b = GradBuilder.at_end(block, body.parent_op.location)
    return b, backpropagate(b, list(block.ops), outputs, cotangents, wrt)


def _gradient_or_zeros(b, gradients: dict, value):
    g = gradients.get(value)
    return g if g is not None else b.zeros(value.type)


def _stacked(t: TensorType, n: int) -> TensorType:
    return TensorType((n,) + tuple(t.shape), t.element_type)


def _stack_carried(op: Operation, nc: int) -> list:
    """Make ``op`` (an lz.for) also stack its carried values per iteration (the value at the
    iteration's start) as extra outputs at the end; return those."""
    attrs = op.definition.attrs(op)
    body = op.regions[0].blocks[0]
    carried_args = body.args[1 + attrs.num_invariant:][:nc]
    body.terminator.set_operands(list(body.terminator.operands) + carried_args)
    return [op.add_result(_stacked(a.type, attrs.trip_count)) for a in carried_args]


# Body ops whose results the gradient of an lz.for reads from a stack instead of recomputing them.
STORED_PRODUCTS = ("lz.matmul", "lz.conv2d")


def _store_products(op: Operation, block: Block, varying: list) -> list:
    """Stack the products of ``op``'s body that the reverse body ``block`` (its ops start with a
    copy of the body's, in order) still reads, and make ``block`` scan them instead of computing
    them: each becomes a stacked output of ``op`` and a last scanned argument of ``block`` (its
    copy's uses read the argument; the copy is erased, its gradient is already built from its
    operands).  Only products of values that change per iteration (``varying``: body arguments):
    one of invariants alone is the same every step, and licm moves it out of the loop.  Returns
    the stacks, the reverse loop's last scanned operands."""
    attrs = op.definition.attrs(op)
    body = op.regions[0].blocks[0]
    changing = set(varying)
    for inner in body.ops[:-1]:
        if any(v in changing for v in inner.operands):
            changing.update(inner.results)
    read = set(block.terminator.operands)  # the reverse body's values its yield needs
    for inner in reversed(block.ops[:-1]):
        if any(r in read for r in inner.results):
            read.update(inner.operands)
    stored = [(forward, copy) for forward, copy in zip(body.ops[:-1], block.ops)
              if forward.name in STORED_PRODUCTS and forward.results[0] in changing and copy.results[0] in read]
    body.terminator.set_operands(list(body.terminator.operands) + [forward.results[0] for forward, _ in stored])
    stacks = []
    for forward, copy in stored:
        value = forward.results[0]
        stacks.append(op.add_result(_stacked(value.type, attrs.trip_count)))
        copy.results[0].replace_all_uses_with(block.add_argument(value.type))
        copy.erase()
    return stacks


def for_gradient(b, op, attrs, dys):
    """The reverse-mode rule of ``lz.for`` (see the module docstring)."""
    n, ni, nc, ns = op.definition.counts(op, attrs)
    ny = len(op.results) - nc
    stacks = _stack_carried(op, nc)
    body = op.regions[0].blocks[0]
    index, invariants = body.args[0], body.args[1:1 + ni]
    carried, slices = body.args[1 + ni:1 + ni + nc], body.args[1 + ni + nc:]
    ys = body.terminator.operands[nc:nc + ny]
    float_inv = [k for k, a in enumerate(invariants) if _is_float(a.type)]
    float_carried = [k for k, a in enumerate(carried) if _is_float(a.type)]
    float_xs = [k for k, a in enumerate(slices) if _is_float(a.type)]
    float_ys = [k for k, y in enumerate(ys) if _is_float(y.type)]

    # the reverse body: (i, invariants, d carried, d invariants so far, carried_i, x_i, dy_i)
    block = Block([INDEX_TYPE] + [a.type for a in invariants] + [carried[k].type for k in float_carried]
                  + [invariants[k].type for k in float_inv] + [a.type for a in carried] + [a.type for a in slices]
                  + [ys[k].type for k in float_ys])
    args = iter(block.args)
    r_index = next(args)
    r_inv = [next(args) for _ in invariants]
    r_dcarried = {k: next(args) for k in float_carried}
    r_dinv = {k: next(args) for k in float_inv}
    r_carried = [next(args) for _ in carried]
    r_slices = [next(args) for _ in slices]
    r_dys = {k: next(args) for k in float_ys}
    arg_map = dict(zip([index, *invariants, *carried, *slices], [r_index, *r_inv, *r_carried, *r_slices]))
    cotangents = [r_dcarried.get(k) for k in range(nc)] + [r_dys.get(k) for k in range(len(ys))]
    wrt = [r_inv[k] for k in float_inv] + [r_carried[k] for k in float_carried] + [r_slices[k] for k in float_xs]
    rb, gradients = differentiate_region(body, block, arg_map, cotangents, wrt)
    yielded = ([_gradient_or_zeros(rb, gradients, r_carried[k]) for k in float_carried]
               + [r_dinv[k] if r_inv[k] not in gradients else rb.add(r_dinv[k], gradients[r_inv[k]])
                  for k in float_inv]
               + [_gradient_or_zeros(rb, gradients, r_slices[k]) for k in float_xs])
    rb.create("lz.yield", yielded, result_types=[])
    products = _store_products(op, block, [index, *carried, *slices])

    # the reverse loop: its operands are the ones the reverse body's arguments take, in order
    outer_inv = list(op.operands[:ni])
    final_d = [dys[k] if dys[k] is not None else b.zeros(op.results[k].type) for k in float_carried]
    d_ys = [dys[nc + k] if dys[nc + k] is not None else b.zeros(op.results[nc + k].type) for k in float_ys]
    operands = (outer_inv + final_d + [b.zeros(outer_inv[k].type) for k in float_inv] + stacks
                + list(op.operands[ni + nc:]) + d_ys + products)
    result_types = ([carried[k].type for k in float_carried] + [invariants[k].type for k in float_inv]
                    + [op.operands[ni + nc + k].type for k in float_xs])
    region_holder = Operation("lz.for", operands, result_types,
                              op.definition.make_attributes({"trip_count": n, "num_invariant": ni,
                                                             "num_carried": len(float_carried) + len(float_inv),
                                                             "reverse": not attrs.reverse}),
                              location=op.location)
    region_holder.add_region().add_block(block)
    b.insert(region_holder)
    results = iter(region_holder.results)
    d_init = {k: next(results) for k in float_carried}
    d_inv = {k: next(results) for k in float_inv}
    d_xs = {k: next(results) for k in float_xs}
    return ([d_inv.get(k) for k in range(ni)] + [d_init.get(k) for k in range(nc)]
            + [d_xs.get(k) for k in range(ns)])


def bounded_while_as_for(b, op, attrs) -> Operation:
    """An ``lz.for`` of ``max_trip_count`` iterations equal to the bounded ``lz.while`` ``op``,
    inserted at ``b``: it carries a ``running`` flag (true at the start, ``running and
    condition`` each iteration) before the while's carried values, and each iteration yields
    ``select(running, body(carried), carried)``, so the values stay unchanged once the condition
    has been false.  Results: the final flag, then the while's results (when the loop stops within
    the bound).  The body is still evaluated after the stop (on the frozen values), as a select's
    two sides are; its gradient there is multiplied by zero."""
    ni = attrs.num_invariant
    condition, body = region_block(op, 0, "condition"), region_block(op, 1, "body")
    carried_types = list(op.operand_types[ni:])
    flag = TensorType((), I1)
    block = Block([INDEX_TYPE] + list(op.operand_types[:ni]) + [flag] + carried_types)
    invariants, running, carried = block.args[1:1 + ni], block.args[1 + ni], block.args[2 + ni:]
    inner = GradBuilder.at_end(block, op.location)
    outer_args = list(invariants) + list(carried)
    go = _inline(condition, block, dict(zip(condition.args, outer_args)))[0]
    still_running = inner.op("lz.and", running, go)
    stepped = _inline(body, block, dict(zip(body.args, outer_args)))
    kept = [inner.select(still_running, new, old) for new, old in zip(stepped, carried)]
    inner.create("lz.yield", [still_running] + kept, result_types=[])
    start = b.constant(np.asarray(True), flag)
    loop = Operation("lz.for", list(op.operands[:ni]) + [start] + list(op.operands[ni:]), [flag] + carried_types,
                     lookup("lz.for").make_attributes(
                         {"trip_count": attrs.max_trip_count, "num_invariant": ni,
                          "num_carried": 1 + len(carried_types), "reverse": False}),
                     location=op.location)
    loop.add_region().add_block(block)
    b.insert(loop)
    return loop


def while_gradient(b, op, attrs, dys):
    """The reverse-mode rule of a bounded ``lz.while``: the gradient of the equal ``lz.for``
    (``bounded_while_as_for``), which recomputes the forward once with its carried values stored.
    Exact: the iterations after the stop are selects that pass the cotangents through unchanged."""
    loop = bounded_while_as_for(b, op, attrs)
    ni = attrs.num_invariant
    grads = for_gradient(b, loop, loop.definition.attrs(loop), [None] + list(dys))
    return grads[:ni] + grads[ni + 1:]


def if_gradient(b, op, dys):
    """The reverse-mode rule of ``lz.if``: an ``lz.if`` on the same condition whose branches are
    the gradients of the two branches (the operands' gradients, zeros where a branch has none)."""
    passed = list(op.operands[1:])
    float_operands = [k for k, v in enumerate(passed) if _is_float(v.type)]
    float_results = [k for k, r in enumerate(op.results) if _is_float(r.type) and dys[k] is not None]
    if not float_operands:
        return [None] * len(op.operands)
    regions = []
    for index in (0, 1):
        body = op.regions[index].blocks[0]
        block = Block([v.type for v in passed] + [op.results[k].type for k in float_results])
        inner_args, inner_dys = block.args[:len(passed)], block.args[len(passed):]
        cotangents = [None] * len(op.results)
        for k, d in zip(float_results, inner_dys):
            cotangents[k] = d
        rb, gradients = differentiate_region(body, block, dict(zip(body.args, inner_args)), cotangents,
                                             [inner_args[k] for k in float_operands])
        rb.create("lz.yield", [_gradient_or_zeros(rb, gradients, inner_args[k]) for k in float_operands],
                  result_types=[])
        regions.append(block)
    grad_if = Operation("lz.if", [op.operands[0]] + passed + [dys[k] for k in float_results],
                        [passed[k].type for k in float_operands], location=op.location)
    for block in regions:
        grad_if.add_region().add_block(block)
    b.insert(grad_if)
    grads = dict(zip(float_operands, grad_if.results))
    return [None] + [grads.get(k) for k in range(len(passed))]
