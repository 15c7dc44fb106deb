"""Collectives: ``lz.all_reduce`` and its split form ``lz.all_reduce_start`` / ``lz.all_reduce_wait``.

    %s = "lz.all_reduce"(%g) {op = "avg"} : (tensor<64xf32>) -> tensor<64xf32>
    %r = "lz.all_reduce_start"(%g) {op = "avg", tag = "bucket0"} : (tensor<64xf32>) -> tensor<i64>
    %s = "lz.all_reduce_wait"(%r, %g, %r1) : (tensor<i64>, tensor<64xf32>, tensor<i64>) -> tensor<64xf32>

``lz.all_reduce`` is ``x`` reduced over the ranks of the process group (``op``: torch's
``ReduceOp`` names; ``avg`` divides the sum by the world size).  The split form lets the
communication run while other kernels do: the start hands ``x`` to the group's communication
thread and gives a request token (a rank-0 ``i64``: the runtime writes the request's number
into it); the wait takes the token and ``x`` again and gives the reduced value.  Taking ``x``
keeps its buffer alive (the memory planner's liveness) until the wait, so the runtime reduces
it in place when the start and its waits are its only readers (a bucket's flat array), and a
copy otherwise.  Any further operands of a wait are tokens of other
starts it must come after (ordering only, like MLIR's async tokens): the kernels are scheduled
in topological generations, so a wait with only its own token would run right after its start;
``bucket-all-reduce`` gives every wait the last start's token, so all the buckets are in flight
before the first wait blocks, and the backward kernels in between run meanwhile.

**Effects.** None of the three is ``PURE``: cse never merges two of them, dce never erases one
(every rank must issue the same collectives), constant-fold never evaluates one and licm never
hoists one out of a loop (``lezero/passes/rewriter.is_pure`` is what they all ask).  Partition
makes each a ``single`` kernel of its own (never fused), and the runtime runs that kernel as a
host step (``lezero/runtime/plan.py``): a start enqueues on the communication thread, a wait
blocks on it.

**Reference semantics** (the interpreter): with no communicator installed, identity (one rank);
otherwise the installed communicator's collective.  ``lz.distributed.init_process_group``
installs its group (``set_communicator``), which the CPU runtime uses too: this module is the
one place both layers below ``lz.distributed`` find it.
"""
from __future__ import annotations

from typing import Protocol

import numpy as np

from lezero.ir.core import Operation
from lezero.ir.opdef import AttrSpec, OpDef, OpError, register
from lezero.ir.types import I64, TensorType

REDUCE_OPS = ("sum", "avg", "product", "min", "max")
ALL_REDUCE, START, WAIT = "lz.all_reduce", "lz.all_reduce_start", "lz.all_reduce_wait"
COLLECTIVE_OPS = frozenset({ALL_REDUCE, START, WAIT})
TOKEN = TensorType((), I64)
NO_REQUEST = -1  # the token of a start with no communicator installed: its wait is the identity


class Communicator(Protocol):
    """What the collective ops need from a process group (``lz.distributed`` implements it)."""

    def start_all_reduce(self, array: np.ndarray, op: str, tag: str) -> int:
        """Queue an in-place all-reduce of ``array``; the request's number (>= 0)."""

    def wait(self, request: int) -> np.ndarray:
        """Block until request ``request`` is done; the reduced array."""


_COMMUNICATOR: Communicator | None = None


def set_communicator(communicator: Communicator | None) -> None:
    """Install the process group the collective ops reduce over (None: a single rank)."""
    global _COMMUNICATOR
    _COMMUNICATOR = communicator


def communicator() -> Communicator | None:
    return _COMMUNICATOR


def start_all_reduce(array: np.ndarray, op: str, tag: str) -> int:
    """``array`` (reduced in place) handed to the communicator: its request, or ``NO_REQUEST``."""
    c = _COMMUNICATOR
    return NO_REQUEST if c is None else c.start_all_reduce(array, op, tag)


def wait_all_reduce(request: int, array: np.ndarray) -> np.ndarray:
    """The reduced ``array`` of ``request`` (``array`` itself for ``NO_REQUEST``)."""
    return array if request == NO_REQUEST else _COMMUNICATOR.wait(request)


def _check_token(t, what: str) -> None:
    if t != TOKEN:
        raise OpError(f"{what} must be a request token tensor<i64>, got {t}")


_REDUCE_ATTRS = {"op": AttrSpec("str", "sum", choices=REDUCE_OPS), "tag": AttrSpec("str", "")}


@register
class AllReduceOp(OpDef):
    """``lz.all_reduce {op = "sum"}``: ``x`` reduced over the ranks (a start and its wait at once)."""

    name = ALL_REDUCE
    operands = ("x",)
    attributes = _REDUCE_ATTRS
    summary = "x reduced over the ranks of the process group"

    def infer(self, operand_types, attrs):
        return [operand_types[0]]

    def reference(self, attrs, x):
        reduced = np.array(x, copy=True)
        return wait_all_reduce(start_all_reduce(reduced, attrs.op, attrs.tag), reduced)

    def grad(self, b, op, attrs, dy):
        """A sum's (or mean's) cotangent is the sum (mean) of every rank's: each rank's ``x``
        reaches every rank's result."""
        if attrs.op not in ("sum", "avg"):
            raise OpError(f"no gradient rule for lz.all_reduce with op = \"{attrs.op}\" (sum and avg have one)")
        return [b.op(ALL_REDUCE, dy, op=attrs.op, tag=attrs.tag)]


@register
class AllReduceStartOp(OpDef):
    """``lz.all_reduce_start {op, tag}``: start reducing ``x`` in place; its request token."""

    name = START
    operands = ("x",)
    attributes = _REDUCE_ATTRS
    summary = "start an all-reduce of x on the communication thread (a request token)"

    def infer(self, operand_types, attrs):
        return [TOKEN]

    def reference(self, attrs, x):
        # the interpreter's arrays are values: reduce a copy, the wait returns it
        return np.int64(start_all_reduce(np.array(x, copy=True), attrs.op, attrs.tag))

    def verify_extra(self, op, attrs) -> None:
        # a token leaving its region (lz.yield) or its function (func.return: the eager engine's
        # one-op start, whose caller runs the wait) is waited for outside
        waits = [u.op for u in op.result.uses if u.op.name == WAIT and u.index == 0]
        if not waits and not any(u.op.name in ("lz.yield", "func.return") for u in op.result.uses):
            raise OpError("its request is never waited for (no lz.all_reduce_wait takes it)")


@register
class AllReduceWaitOp(OpDef):
    """``lz.all_reduce_wait(request, x, after...)``: the reduced ``x`` once its request is done;
    ``after``: tokens of starts it must follow (ordering only)."""

    name = WAIT
    operands = ("request", "x")
    variadic = True  # x, then the ordering tokens
    summary = "wait for an all-reduce started by lz.all_reduce_start: the reduced x"

    def infer(self, operand_types, attrs):
        _check_token(operand_types[0], "the request")
        for t in operand_types[2:]:
            _check_token(t, "an ordering operand")
        return [operand_types[1]]

    def reference(self, attrs, request, x, *after):
        return np.array(wait_all_reduce(int(request), x), copy=True)

    def verify_extra(self, op, attrs) -> None:
        start = op.operands[0].owner
        if not isinstance(start, Operation):
            return  # a block argument: inside a kernel, the start is outside
        if start.name != START:
            raise OpError(f"the request must come from lz.all_reduce_start, not '{start.name}'")
        if start.operands[0] is not op.operands[1]:
            raise OpError("x must be the value its lz.all_reduce_start reduces")
        if start.operands[0].type != op.operands[1].type:
            raise OpError(f"x is {op.operands[1].type}, the start reduces {start.operands[0].type}")
