"""Kernels that run on any number of rows: one compile for every batch (and sequence) size.

A transformer serving many (batch, sequence) pairs runs the same kernels at many sizes of the
leading dims: a layer norm over ``[b, s, 256]``, an activation over ``[b, s, 1024]``, attention
over ``b`` batches.  Buffers are row-major, so the first ``k`` dims of such a kernel are one
dim of ``R = prod(dims)`` rows, and the code of one row never reads the number of rows: compiled
once, it serves every ``R`` when the runtime hands it ``[0, R x W)`` as its work items (the
kernel ABI's ``begin``/``end``, ``docs/architecture.md``, "Kernel ABI").

``rows_form(kernel, prefix, rows)`` is that kernel with its leading dims ``prefix`` collapsed
into one of ``rows`` (every value that starts with those dims or with their product; a value that
broadcasts along them keeps its type, or ``1`` for their run of ones), and None when an op of the body is not independent per row
(only ops whose row ``i`` reads row ``i`` alone pass: elementwise ops, reductions and slices over
other dims, a gather from a table, reshapes, broadcasts and transposes that keep the row dims in front,
matmuls and attention over them) or a rewritten type disagrees with its op's shape rule.

``lower_row_generic(kernel, lower)`` proves, for one lowering, that the code does not depend on the
rows: the rows form lowered at two row counts (``PROBE_ROWS``: a prime and a power of two, so no
divisibility test or tail choice agrees by chance) must give the same LLVM IR and work items in
the same proportion ``W`` to the rows.  The IR names no row count then, and its work item ``j``
is part of row ``j // W``: it serves every row count.  A lowering that fails the test (a GEMM whose
tiles and slices follow M, an elementwise loop that packs several short rows into a work item) is
kept per shape, as before.

``sequence_form(form, length, size)`` goes one step further for an attention kernel (issue 11): every
dim of ``length`` (the sequence length: the keys and the queries) becomes ``size``, marked
``lz.any_sequence``, and the CPU lowering reads the length at run time from one more buffer, an
int64 array of it after the results (``SEQUENCE_ATTR``; strides that are a power of the length
times a constant are computed from it).  The same proof holds it: lowered at two lengths
(``SEQUENCE_PROBES``) with the two row counts, the code must be equal; then it names neither, and
one compile serves every (batch, sequence).  Dims that only equal the length by chance become it
too: the form at ``length`` is still the kernel at hand, and another length whose kernel differs
in them has another form (another key).

The same holds for elementwise and reduction kernels whose rows keep a dim of the length (the
embedding plus position rows ``[b, s, h]`` over rows of b, the attention mask ``[b, s, s]``): a
function imported at one (batch, sequence) names its dynamic sizes (``DYNAMIC_SIZES_ATTR``), and
``sequence_lengths`` offers each that such a kernel's rows form holds.  Its sequence form's dims of
the length are ``affine.RunTimeSize`` ints: the lowerings decide on their value and emit their
polynomial of the loaded length as loop bounds, strides and divisors.  Its work items may follow
the length too (one per row of the mask's ``[s, s]``): ``RowGeneric.length_power``, read off the
two probes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from lezero.codegen.affine import RunTimeSize
from lezero.codegen.errors import LoweringError
from lezero.ir.attributes import DenseArrayAttr, DenseElementsAttr, IntegerAttr, UnitAttr, i64_array
from lezero.ir.core import Block, FuncOp, Operation
from lezero.ir.dialect.axes import normalize_axes
from lezero.ir.diagnostics import IRError
from lezero.ir.dialect.reduction import REDUCTION_OPS, reduced_axes
from lezero.ir.opdef import ELEMENTWISE, OpError
from lezero.ir.types import I64, TensorType

# Two row counts the rows form is lowered at: equal code at both is code that names no row count.
PROBE_ROWS = (4099, 4096)
# A rows form's mark (a discardable attribute of its lz.kernel): its lowerings make a work item of
# each row where they would otherwise cut the rows by their count (a GEMM's slices).
ANY_ROWS_ATTR = "lz.any_rows"
# A function's mark (a discardable attribute of its func.func): it is compiled for many input
# shapes (a function over `?` dims, an ONNX model imported per shape), so its kernels' rows forms
# are probed at the first row count, not when a second one shows up: the second shape then
# compiles nothing, and a new sequence length compiles each of its kernels once, not twice.
MANY_SHAPES_ATTR = "lz.many_shapes"
# Two sequence lengths a sequence form is lowered at (primes, none of PROBE_ROWS), and its mark
# (an i64 attribute of its lz.kernel: the size that stands for the run-time length).
SEQUENCE_PROBES = (4111, 4127)
SEQUENCE_ATTR = "lz.any_sequence"
# The longest length a sequence form's code runs at: the lowerings decide on index bounds at the
# probe lengths (a division they drop because its operand stays below the divisor), and a bound
# only grows with the length, so what holds at the shorter probe holds at every length up to it.
MAX_RUN_TIME_LENGTH = min(SEQUENCE_PROBES)
# A function's mark beside MANY_SHAPES_ATTR (an i64 array): the sizes of its dynamic dims in this
# specialization (an ONNX model imported per shape: its batch and sequence length), which the
# kernels' sequence forms may take at run time (``sequence_lengths``).
DYNAMIC_SIZES_ATTR = "lz.dynamic_sizes"
# Attributes that hold sizes, per op: a sequence form resizes the entries equal to the length.
_SIZE_ATTRS = {"lz.reshape": ("shape",), "lz.broadcast_to": ("shape",), "lz.slice": ("starts", "ends")}
# Ops whose types alone decide whether they are independent per row (checked against their
# shape rule after the rewrite): matmul and attention keep leading dims as batches or rows.
_BATCHED_OPS = frozenset({"lz.matmul", "lz.attention"})


@dataclass(frozen=True)
class RowGeneric:
    """A kernel whose code serves every row count: it runs ``items_per_row`` work items per row,
    times its run-time length to the ``length_power`` (a sequence form's rows of ``[s, s]``)."""

    items_per_row: int
    length_power: int = 0

    def work_items(self, rows: int, sizes: tuple = ()) -> int:
        return self.items_per_row * rows * (sizes[0] ** self.length_power if self.length_power else 1)


def _row_dims(shape: tuple, prefix: tuple) -> int:
    """How many leading dims of ``shape`` are the rows: ``len(prefix)`` when it starts with them,
    1 when its first dim is them flattened (GPT-2's projections see ``[b x s, h]``; never a vector,
    which is more often a weight of that length), else 0."""
    k = len(prefix)
    if shape[:k] == prefix:
        return k
    return 1 if k > 1 and len(shape) > 1 and shape[:1] == (math.prod(prefix),) else 0


def _collapse(t, prefix: tuple, rows: int, rest_rank: int, read_whole: bool = False, constant: bool = False):
    """``t`` in the rows form, or None when it neither has the rows in front nor broadcasts along
    them (``read_whole``: a value every row reads all of, a matmul's right operand or a gather's
    table, which keeps its type).  A ``constant`` operand over a prefix with a dim of 1 (batch 1)
    broadcasts along it: a weight of ``[1, s, h]`` (BERT's position rows) is the rows at batch 1
    only by chance, and the form of every other batch broadcasts it."""
    if not isinstance(t, TensorType):
        return None
    k = len(prefix)
    shape = t.shape
    if read_whole:
        return t
    row_dims = 0 if constant and 1 in prefix else _row_dims(shape, prefix)
    if row_dims:
        return TensorType((rows,) + shape[row_dims:], t.element_type)
    if len(shape) > k and all(d == 1 for d in shape[:k]):
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


def _rewrite_attributes(op: Operation, prefix: tuple, rows: int, split=frozenset()) -> dict | None:
    """The attributes of ``op`` in the rows form (its row dims collapsed), or None when it mixes rows
    (``split``: the arguments ``_split_rows`` found, whose one reshape makes rows of them)."""
    attrs = dict(op.attributes)
    row_dims = _row_dims(op.operands[0].type.shape, prefix) if op.operands else 0
    if op.name == "lz.reshape" and op.operands[0] in split:
        row_dims = 1
    if op.name in REDUCTION_OPS:
        axes = reduced_axes(op)
        if row_dims and min(axes, default=0) < row_dims:
            return None  # it reduces over rows
        shift = max(0, row_dims - 1)
        if op.name == "lz.argmax":
            attrs["axis"] = IntegerAttr(axes[0] - shift, I64)
        else:
            attrs["axes"] = i64_array(a - shift for a in axes)
        return attrs
    if op.name == "lz.broadcast_to":  # of what broadcasts along the rows (a token-type row), or of rows
        result = op.results[0].type.shape
        result_row_dims = _row_dims(result, prefix)
        if not result_row_dims:
            return None
        attrs["shape"] = i64_array((rows,) + result[result_row_dims:])
        return attrs
    if op.name == "lz.reshape":
        result = op.results[0].type.shape  # static: the attribute's -1 resolved
        result_row_dims = _row_dims(result, prefix)
        if not row_dims or not result_row_dims:
            return None
        attrs["shape"] = i64_array((rows,) + result[result_row_dims:])
        return attrs
    if op.name == "lz.slice":  # a window of each row
        rank = op.operands[0].type.rank
        given = op.definition.attrs(op).axes
        axes = normalize_axes(given if given is not None else range(len(op.definition.attrs(op).starts)), rank)
        if row_dims and min(axes, default=rank) < row_dims:
            return None
        attrs["axes"] = i64_array(a - max(0, row_dims - 1) for a in axes)
        return attrs
    if op.name == "lz.transpose":
        perm = tuple(op.definition.attrs(op).perm)
        if not row_dims or perm[:row_dims] != tuple(range(row_dims)):
            return None
        attrs["perm"] = i64_array((0,) + tuple(p - row_dims + 1 for p in perm[row_dims:]))
        return attrs
    if op.name == "lz.gather":
        return attrs if op.definition.attrs(op).axis == 0 and not row_dims else None
    if op.name in _BATCHED_OPS or op.name in ("lz.constant", "lz.yield"):
        return attrs
    definition = op.definition
    return attrs if definition is not None and definition.has_trait(ELEMENTWISE) else None


def _split_rows(body, operands, prefix: tuple) -> dict:
    """The arguments of ``body`` that hold each row's ``m`` lines in a row of their first dim, ``m``
    times the rows (GPT-2's fused projection ``[b x s, 3h]``, which its attention kernel reshapes to
    ``[b, s, 3h]``): not a weight, with one use, a reshape whose result starts with the rows -> ``m``."""
    count = math.prod(prefix)
    split = {}
    if count == 0:  # no rows (an empty tensor): nothing to split
        return split
    for a, v in zip(body.args, operands):
        shape = a.type.shape if isinstance(a.type, TensorType) else ()
        if not shape or _row_dims(shape, prefix) or _is_constant(v) or shape[0] % count or shape[0] == count:
            continue
        uses = [op for op in body.ops if a in op.operands]
        if len(uses) == 1 and uses[0].name == "lz.reshape" and _row_dims(uses[0].results[0].type.shape, prefix):
            split[a] = shape[0] // count
    return split


def _is_constant(v) -> bool:
    """Whether ``v`` (a kernel's operand) is an ``lz.constant`` of its function: a weight."""
    return isinstance(v.owner, Operation) and v.owner.name == "lz.constant"


def rows_form(kernel_op: Operation, prefix: tuple, rows: int) -> Operation | None:
    """A copy of ``kernel_op`` whose leading dims ``prefix`` (or a first dim of their product)
    are one dim of ``rows`` (module docstring), or None when it is not independent per row."""
    body = kernel_op.regions[0].blocks[0]
    values = list(body.args) + [r for op in body.ops for r in op.results]
    # the rank of a row, for what broadcasts along the rows; a gather's indices (an embedding's
    # ids, all rows or rows of the sequence) broadcast with nothing and do not count (what
    # broadcasts aligns with the others' rows: position rows [s, h] with [b, s, h])
    constants = {a for a, v in zip(body.args, kernel_op.operands) if _is_constant(v)} if 1 in prefix else set()
    indices = {op.operands[1] for op in body.ops if op.name == "lz.gather"}
    rests = [v.type.rank - _row_dims(v.type.shape, prefix) for v in values
             if isinstance(v.type, TensorType) and v not in constants | indices and _row_dims(v.type.shape, prefix)]
    rest_rank = min((r for r in rests if r), default=0)
    result_types = [_collapse(r.type, prefix, rows, rest_rank) for r in kernel_op.results]
    if any(t is None or t.shape[:1] != (rows,) for t in result_types):
        return None
    whole = _read_whole(body)
    split = _split_rows(body, kernel_op.operands, prefix)
    operand_types = [TensorType((rows * split[a],) + a.type.shape[1:], a.type.element_type) if a in split else
                     _collapse(a.type, prefix, rows, rest_rank, a in whole, a in constants) for a in body.args]
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
        attributes = _rewrite_attributes(original, prefix, rows, split)
        if attributes is None:
            return None
        op.attributes = attributes
        for old, r in zip(original.results, op.results):
            # a constant of the body is a weight: at batch 1 its leading 1s are not the rows
            r.type = _collapse(r.type, prefix, rows, rest_rank, old in whole, original.name == "lz.constant")
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


def _function_of(op: Operation) -> FuncOp | None:
    while op is not None and not isinstance(op, FuncOp):
        op = op.parent_op
    return op


def serves_many_shapes(op: Operation) -> bool:
    """Whether the function holding ``op`` carries ``MANY_SHAPES_ATTR``."""
    func = _function_of(op)
    return func is not None and MANY_SHAPES_ATTR in func.attributes


def sequence_lengths(kernel_op: Operation, prefix: tuple, form: Operation) -> list:
    """The lengths whose sequence forms ``kernel_op`` (in a function that serves many shapes), of
    rows form ``form`` over ``prefix``, tries: an attention kernel's ``sequence_length``; for any
    other, each of its function's ``DYNAMIC_SIZES_ATTR`` sizes past those the prefix's dims are in
    order (the rows are the leading dynamic dims: a prefix of the batch, or of the batch and a 1,
    leaves the sequence; one of batch x sequence leaves none, and a width equal to it is not it)
    above 1 that a dim of the form after its rows holds.  None is above ``MAX_RUN_TIME_LENGTH``."""
    if not serves_many_shapes(kernel_op):
        return []
    if kernel_op.definition.attrs(kernel_op).kind == "attention":
        length = sequence_length(form)
        return [] if length is None or length > MAX_RUN_TIME_LENGTH else [length]
    sizes = _function_of(kernel_op).attributes.get(DYNAMIC_SIZES_ATTR)
    if not isinstance(sizes, DenseArrayAttr):
        return []
    body = form.regions[0].blocks[0]
    dims = {d for v in list(body.args) + [r for op in body.ops for r in op.results]
            if isinstance(v.type, TensorType) for d in v.type.shape[1:]}
    covered = 0  # the sizes the prefix's dims are, in order (a unit dim between them is none)
    for d in prefix:
        if covered < len(sizes.values) and d == sizes.values[covered]:
            covered += 1
        elif d != 1:
            break
    return [size for size in dict.fromkeys(sizes.values[covered:]) if 1 < size <= MAX_RUN_TIME_LENGTH and size in dims]


def _inferred(op: Operation) -> list | None:
    """The result types ``op``'s shape rule gives its operands, None when it rejects them."""
    try:
        return list(op.definition.infer_for_op(op))
    except (IRError, OpError):
        return None


def widest_rows_form(kernel_op: Operation) -> tuple[tuple, Operation] | None:
    """``(prefix, the rows form at PROBE_ROWS[0] rows)`` for the longest leading dims of
    ``kernel_op``'s first result or operand (fewer than its rank: a row is not one element) its
    rows form takes, or None."""
    candidates = {v.type.shape[:k] for v in list(kernel_op.results[:1]) + list(kernel_op.operands[:1])
                  if isinstance(v.type, TensorType) for k in range(1, v.type.rank)}
    for prefix in sorted(candidates, key=len, reverse=True):
        form = rows_form(kernel_op, prefix, PROBE_ROWS[0])
        if form is not None:
            return prefix, form
    return None


def sequence_length(kernel_op: Operation) -> int | None:
    """The sequence length of an attention kernel (its one ``lz.attention``'s queries and keys,
    equal: self-attention), or None for any other kernel."""
    if kernel_op.definition.attrs(kernel_op).kind != "attention":
        return None
    found = [op for op in kernel_op.regions[0].blocks[0].ops if op.name == "lz.attention"]
    if len(found) != 1:
        return None
    q, k = (v.type.shape for v in found[0].operands[:2])
    return q[-2] if q[-2] == k[-2] else None


def sequence_form(kernel_op: Operation, length: int, size: int, instance: bool = False) -> Operation | None:
    """A copy of ``kernel_op`` whose dims of ``length`` are ``size`` (its types, reshape targets and
    slice bounds; module docstring), marked ``SEQUENCE_ATTR``; None when a dim is ``size`` already
    or a resized type disagrees with its op's shape rule.  ``instance``: ``kernel_op`` is a sequence
    form (its length a probe, a prime no other dim is) made at the length ``size`` of a kernel at
    hand, whose other dims may be ``size`` by chance (a head width of 64 at a length of 64)."""
    # a rows form's [rows x length, h] (``_split_rows``) is [rows x size, h]
    rows = kernel_op.results[0].type.shape[0] if any_rows(kernel_op) and length > 1 else None

    run_time = RunTimeSize(size)  # the lowerings emit it as the loaded length

    def resized_dim(d):
        return run_time if d == length else rows * run_time if rows is not None and d == rows * length else d

    def resized(t):
        if not isinstance(t, TensorType):
            return t
        return TensorType(tuple(resized_dim(d) for d in t.shape), t.element_type)

    body = kernel_op.regions[0].blocks[0]
    values = list(body.args) + [r for op in body.ops for r in op.results] + list(kernel_op.results)
    if not instance and any(isinstance(v.type, TensorType) and size in v.type.shape for v in values):
        return None
    operand_types = [resized(a.type) for a in body.args]
    result_types = [resized(r.type) for r in kernel_op.results]
    alone = Operation(kernel_op.name, Block(operand_types).args, result_types,
                      {**kernel_op.attributes, SEQUENCE_ATTR: IntegerAttr(size, I64)},
                      [region.clone({}) for region in kernel_op.regions], kernel_op.location)
    block = alone.regions[0].blocks[0]
    for arg, t in zip(block.args, operand_types):
        arg.type = t
    for op in block.ops:
        value = op.attributes.get("value") if op.name == "lz.constant" else None
        if isinstance(value, DenseElementsAttr) and length in value.type.shape:
            splat = value.splat_value()  # all true, of a [1, 1, s, 1] mask: the same at any length
            if splat is not None:
                op.attributes["value"] = DenseElementsAttr(resized(value.type), splat)
        for name in _SIZE_ATTRS.get(op.name, ()):
            if name in op.attributes:
                op.attributes[name] = i64_array(resized_dim(d) for d in op.attributes[name].values)
        for r in op.results:
            r.type = resized(r.type)
        if op.name != "lz.yield" and [r.type for r in op.results] != _inferred(op):
            return None
    if [v.type for v in block.terminator.operands] != result_types:
        return None
    return alone


def lower_row_generic(kernel_op: Operation, prefix: tuple, lower,
                      length: int | None = None) -> tuple[RowGeneric, object] | None:
    """``(RowGeneric, the lowering at PROBE_ROWS[0] rows)`` when ``lower`` (an ``lz.kernel`` ->
    ``LoweredKernel`` function) gives code for the rows form over ``prefix`` that serves every row
    count, else None; given the sequence ``length``, the rows form's sequence form, whose code must
    serve every length as well (lowered at ``SEQUENCE_PROBES[0]`` then)."""
    forms = [rows_form(kernel_op, prefix, rows) for rows in PROBE_ROWS]
    if forms[1] is None:  # a dim of the kernel is PROBE_ROWS[0] by chance
        return None
    if length is not None:
        forms = [sequence_form(form, length, size) for form, size in zip(forms, SEQUENCE_PROBES)]
        if None in forms:
            return None
    try:
        first, second = (lower(form) for form in forms)
    except LoweringError:
        if length is None:
            raise
        return None  # a lowering that takes no run-time length
    if first.llvm_ir != second.llvm_ir:
        return None
    per_row = [_per_row(lowered.work_items, rows) for lowered, rows in zip((first, second), PROBE_ROWS)]
    if per_row[0] is None or per_row[0] != per_row[1] or (per_row[0][1] and length is None):
        return None
    return RowGeneric(*per_row[0]), first


def _per_row(work_items: int, rows: int) -> tuple[int, int] | None:
    """``(c, p)`` when ``work_items`` is ``rows x c x length^p`` (c >= 1; p > 0 only for a
    ``RunTimeSize``, a polynomial of a sequence form's length), else None."""
    coefs = work_items.coefs if isinstance(work_items, RunTimeSize) else (int(work_items),)
    powers = [p for p, c in enumerate(coefs) if c]
    if len(powers) != 1 or coefs[powers[0]] % rows or coefs[powers[0]] < rows:
        return None
    return coefs[powers[0]] // rows, powers[0]
