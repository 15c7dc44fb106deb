"""Kernels that run on any number of rows: one compile for every batch (and sequence) size.

A transformer serving many (batch, sequence) pairs runs the same kernels at many sizes of the
leading dims: a layer norm over ``[b, s, 256]``, an activation over ``[b, s, 1024]``, attention
over ``b`` batches.  Buffers are row-major, so the first ``k`` dims of such a kernel are one
dim of ``R = prod(dims)`` rows, and the code of one row never reads the number of rows: compiled
once, it serves every ``R`` when the runtime hands it ``[0, R x W)`` as its work items (the
kernel ABI's ``begin``/``end``, ``docs/architecture.md``, "Kernel ABI").

``rows_form(kernel, k, rows)`` is that kernel with its first ``k`` dims collapsed into one of
``rows`` (every value that starts with those dims; a value that broadcasts along them keeps its
type, or ``1`` for their run of ones), and None when an op of the body is not independent per row
(only ops whose row ``i`` reads row ``i`` alone pass: elementwise ops, reductions over other dims,
a gather from a table, reshapes and transposes that keep the row dims in front, matmuls and
attention over them) or a rewritten type disagrees with its op's shape rule.

``lower_row_generic(kernel, lower)`` proves, for one lowering, that the code does not depend on the
rows: the rows form lowered at two row counts (``PROBE_ROWS``: a prime and a power of two, so no
divisibility test or tail choice agrees by chance) must give the same LLVM IR and work items in
the same proportion ``W`` to the rows.  The IR names no row count then, and its work item ``j``
is part of row ``j // W``: it serves every row count.  A lowering that fails the test (a GEMM whose
tiles and slices follow M, an elementwise loop that packs several short rows into a work item) is
kept per shape, as before.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from lezero.ir.attributes import IntegerAttr, UnitAttr, i64_array
from lezero.ir.core import Block, Operation
from lezero.ir.diagnostics import IRError
from lezero.ir.dialect.reduction import REDUCTION_OPS, reduced_axes
from lezero.ir.opdef import ELEMENTWISE, OpError
from lezero.ir.types import I64, TensorType

# Two row counts the rows form is lowered at: equal code at both is code that names no row count.
PROBE_ROWS = (4099, 4096)
# A rows form's mark (a discardable attribute of its lz.kernel): its lowerings make a work item of
# each row where they would otherwise cut the rows by their count (a GEMM's slices).
ANY_ROWS_ATTR = "lz.any_rows"
# Ops whose types alone decide whether they are independent per row (checked against their
# shape rule after the rewrite): matmul and attention keep leading dims as batches or rows.
_BATCHED_OPS = frozenset({"lz.matmul", "lz.attention"})


@dataclass(frozen=True)
class RowGeneric:
    """A kernel whose code serves every row count: its first ``dims`` dims are the rows, and it
    runs ``items_per_row`` work items per row."""

    dims: int
    items_per_row: int

    def rows(self, kernel_op: Operation) -> int:
        return row_count(kernel_op, self.dims)


def row_count(kernel_op: Operation, dims: int) -> int:
    """The rows of ``kernel_op`` over its first ``dims`` dims (its first result's)."""
    return math.prod(kernel_op.results[0].type.shape[:dims])


def _collapse(t, prefix: tuple, rows: int, rest_rank: int, read_whole: bool = False):
    """``t`` in the rows form, or None when it neither starts with ``prefix`` nor broadcasts along
    it (``read_whole``: a value every row reads all of, a matmul's right operand or a gather's
    table, which keeps its type)."""
    if not isinstance(t, TensorType):
        return None
    k = len(prefix)
    shape = t.shape
    if read_whole:
        return t
    if shape[:k] == prefix:
        return TensorType((rows,) + shape[k:], t.element_type)
    if len(shape) > k and all(d == 1 for d in shape[:k]) and len(shape) - k <= rest_rank:
        return TensorType((1,) + shape[k:], t.element_type)
    return t if len(shape) <= rest_rank else None


def _read_whole(body) -> set:
    """The values of ``body`` every row reads all of: matmuls' right operands, gathers' tables."""
    whole = set()
    for op in body.ops:
        if op.name == "lz.matmul" and op.operands[1].type.rank == 2:
            whole.add(op.operands[1])
        elif op.name == "lz.gather":
            whole.add(op.operands[0])
    return whole


def _rewrite_attributes(op: Operation, k: int, prefix: tuple, rows: int) -> dict | None:
    """The attributes of ``op`` in the rows form (its row dims collapsed), or None when it mixes rows."""
    attrs = dict(op.attributes)
    prefixed = bool(op.operands) and op.operands[0].type.shape[:k] == prefix
    if op.name in REDUCTION_OPS:
        axes = reduced_axes(op)
        if prefixed and min(axes, default=0) < k:
            return None  # it reduces over rows
        shift = k - 1 if prefixed else 0
        if op.name == "lz.argmax":
            attrs["axis"] = IntegerAttr(axes[0] - shift, I64)
        else:
            attrs["axes"] = i64_array(a - shift for a in axes)
        return attrs
    if op.name == "lz.reshape":
        target = tuple(op.definition.attrs(op).shape)
        if not prefixed or target[:k] != prefix:
            return None
        attrs["shape"] = i64_array((rows,) + target[k:])
        return attrs
    if op.name == "lz.transpose":
        perm = tuple(op.definition.attrs(op).perm)
        if not prefixed or perm[:k] != tuple(range(k)):
            return None
        attrs["perm"] = i64_array((0,) + tuple(p - k + 1 for p in perm[k:]))
        return attrs
    if op.name == "lz.gather":
        data = op.operands[0].type
        return attrs if op.definition.attrs(op).axis == 0 and data.shape[:k] != prefix else None
    if op.name in _BATCHED_OPS or op.name in ("lz.constant", "lz.yield"):
        return attrs
    definition = op.definition
    return attrs if definition is not None and definition.has_trait(ELEMENTWISE) else None


def rows_form(kernel_op: Operation, k: int, rows: int) -> Operation | None:
    """A copy of ``kernel_op`` whose first ``k`` dims are one dim of ``rows`` (module docstring),
    or None when it is not independent per row."""
    prefix = tuple(kernel_op.results[0].type.shape[:k])
    body = kernel_op.regions[0].blocks[0]
    values = list(body.args) + [r for op in body.ops for r in op.results]
    rest_rank = min((v.type.rank - k for v in values
                     if isinstance(v.type, TensorType) and v.type.shape[:k] == prefix), default=0)
    result_types = [_collapse(r.type, prefix, rows, rest_rank) for r in kernel_op.results]
    if any(t is None or t.shape[:1] != (rows,) for t in result_types):
        return None
    whole = _read_whole(body)
    operand_types = [_collapse(a.type, prefix, rows, rest_rank, a in whole) for a in body.args]
    if any(t is None for t in operand_types):
        return None
    # The operands are stand-ins (a block's arguments of the collapsed types): the rows form is
    # lowered and keyed, never placed in a function.
    alone = Operation(kernel_op.name, Block(operand_types).args, result_types,
                      {**kernel_op.attributes, ANY_ROWS_ATTR: UnitAttr()},
                      [region.clone({}) for region in kernel_op.regions], kernel_op.location)
    block = alone.regions[0].blocks[0]
    for arg, t in zip(block.args, operand_types):
        arg.type = t
    originals = list(body.ops)
    for original, op in zip(originals, list(block.ops)):
        attributes = _rewrite_attributes(original, k, prefix, rows)
        if attributes is None:
            return None
        op.attributes = attributes
        for old, r in zip(original.results, op.results):
            r.type = _collapse(r.type, prefix, rows, rest_rank, old in whole)
            if r.type is None:
                return None
        if op.name != "lz.yield" and [r.type for r in op.results] != _inferred(op):
            return None  # the collapse changed what the op computes
    if [v.type for v in block.terminator.operands] != result_types:
        return None
    return alone


def any_rows(kernel_op: Operation) -> bool:
    """Whether ``kernel_op`` is a rows form: code for it must serve every row count."""
    return ANY_ROWS_ATTR in kernel_op.attributes


def _inferred(op: Operation) -> list | None:
    """The result types ``op``'s shape rule gives its operands, None when it rejects them."""
    try:
        return list(op.definition.infer_for_op(op))
    except (IRError, OpError):
        return None


def widest_rows_form(kernel_op: Operation) -> tuple[int, Operation] | None:
    """``(dims, the rows form at PROBE_ROWS[0] rows)`` over the most leading dims of ``kernel_op``
    a rows form takes (at least one, fewer than its first result's rank), or None."""
    rank = kernel_op.results[0].type.rank if kernel_op.results else 0
    for k in range(rank - 1, 0, -1):
        form = rows_form(kernel_op, k, PROBE_ROWS[0])
        if form is not None:
            return k, form
    return None


def lower_row_generic(kernel_op: Operation, dims: int, lower) -> tuple[RowGeneric, object] | None:
    """``(RowGeneric, the lowering at PROBE_ROWS[0] rows)`` when ``lower`` (an ``lz.kernel`` ->
    ``LoweredKernel`` function) gives code for the rows form over ``dims`` leading dims that
    serves every row count, else None."""
    forms = [rows_form(kernel_op, dims, rows) for rows in PROBE_ROWS]
    if forms[1] is None:  # a dim of the kernel is PROBE_ROWS[0] by chance
        return None
    first, second = (lower(form) for form in forms)
    per_row = first.work_items // PROBE_ROWS[0]
    if (first.llvm_ir == second.llvm_ir and per_row >= 1 and first.work_items == per_row * PROBE_ROWS[0]
            and second.work_items == per_row * PROBE_ROWS[1]):
        return RowGeneric(dims, per_row), first
    return None
