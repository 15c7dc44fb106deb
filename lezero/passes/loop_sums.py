"""loop-sums: a sum of matrix products accumulated over a loop's iterations becomes one GEMM after it.

The gradient of an RNN's recurrent weight is ``dW = sum_t dgates_t^T h_{t-1}``: the reverse loop of
``lz.for``'s gradient carries it as an accumulator, ``acc + transpose(matmul(transpose(h_t),
dgates_t))`` per iteration (``lezero/ir/dialect/control_flow.py``), a small GEMM each step that
reads and writes the whole weight-sized accumulator (an LSTM at hidden 256, batch 16: 1 MB per
step, ~0.2 ms of the step's ~0.5 ms).  Stacking the two operands over the iterations instead, the
sum is one product contracting over (iterations x rows) at once, which is what PyTorch and ONNX
Runtime do after their loop:

    acc_final = acc_init + [transpose](transpose(reshape(A, (n*R, M))) @ reshape(Q, (n*R, N)))

where ``A`` and ``Q`` are the per-iteration operands stacked: a scanned input is its stack already
(the stored ``h_{t-1}``), a value the body yields already is its stacked output (``dgates``, which
the input projection's gradient reads too), anything else becomes a new stacked output.  The
accumulator leaves the loop (operand, block argument, yield, result).

What it matches, per carried value ``c`` of an ``lz.for`` with a known, non-zero trip count:
``yield`` of ``lz.add(c, t)`` (either order, ``c`` read by nothing else, same types) where ``t``
is ``lz.matmul(lz.transpose(a), q)``, optionally under an ``lz.transpose`` (2-D, perm [1, 0]),
with ``a`` and ``q`` 2-D of static shapes that change per iteration (an invariant or a carried value
does not match: its stack does not exist).  The order of the sum changes (floating point: the
same as a blocked GEMM's).  Run ``dce`` after it: the per-step product is left unused.
"""
from __future__ import annotations

from dataclasses import dataclass

from lezero.ir.builder import Builder
from lezero.ir.core import ModuleOp, Operation, Value
from lezero.ir.types import TensorType
from lezero.passes.pass_base import Pass


def _matrix_transpose_of(v: Value) -> Value | None:
    """``x`` when ``v`` is ``lz.transpose(x)`` of a matrix, else None."""
    op = v.owner
    if isinstance(op, Operation) and op.name == "lz.transpose" and v.type.rank == 2 \
            and list(op.attributes["perm"].values) == [1, 0]:
        return op.operands[0]
    return None


def _summed_product(arg: Value, y: Value):
    """``(a, q, transposed)`` when ``y`` is ``arg + [transpose](transpose(a) @ q)``, else None."""
    add = y.owner
    if not (isinstance(add, Operation) and add.name == "lz.add") or len(arg.uses) != 1 or arg.uses[0].op is not add \
            or len(y.uses) != 1:
        return None
    terms = [v for v in add.operands if v is not arg]
    if len(terms) != 1 or terms[0].type != arg.type:
        return None
    term = terms[0]
    product = _matrix_transpose_of(term)
    transposed = product is not None
    product = product if transposed else term
    op = product.owner
    if not (isinstance(op, Operation) and op.name == "lz.matmul"):
        return None
    a, q = _matrix_transpose_of(op.operands[0]), op.operands[1]
    if a is None or q.type.rank != 2 or not (a.type.is_static and q.type.is_static):
        return None
    return a, q, transposed


def hoist_summed_products(loop: Operation) -> int:
    """Rewrite each matching accumulator of ``loop`` (an ``lz.for``); return how many."""
    definition = loop.definition
    attrs = definition.attrs(loop)
    n, ni, nc = attrs.trip_count, attrs.num_invariant, attrs.num_carried
    if n <= 0:
        return 0
    body = loop.regions[0].blocks[0]
    terminator = body.terminator
    first_slice = 1 + ni + nc

    def per_iteration(v: Value) -> bool:  # a scanned slice, or computed in the body
        return (v.owner is body and v.index >= first_slice) or (isinstance(v.owner, Operation) and v.owner.parent is body)

    matches = {}
    for k in range(nc):
        found = _summed_product(body.args[1 + ni + k], terminator.operands[k])
        if found is not None and all(per_iteration(v) for v in found[:2]):
            matches[k] = found
    if not matches:
        return 0

    stacks: dict[int, tuple] = {}  # id(body value) -> where its stack is: ("operand", index) or ("y", index)

    def stack_of(v: Value):
        if v.owner is body:
            return ("operand", v.index - 1)  # the block arguments after the index are the operands
        ys = list(terminator.operands[nc:])
        for j, y in enumerate(ys):
            if y is v:
                return ("y", j)
        if id(v) not in stacks:
            terminator.set_operands(list(terminator.operands) + [v])
            stacks[id(v)] = ("y", len(terminator.operands) - 1 - nc)
        return stacks[id(v)]

    wanted = {k: (stack_of(a), stack_of(q), transposed) for k, (a, q, transposed) in matches.items()}
    ys_count = len(terminator.operands) - nc

    # the loop without the matched accumulators, with its new stacked outputs
    keep = [k for k in range(nc) if k not in matches]
    y_types = [TensorType((n,) + tuple(y.type.shape), y.type.element_type) for y in terminator.operands[nc:]]
    operands = list(loop.operands)
    new_operands = operands[:ni] + [operands[ni + k] for k in keep] + operands[ni + nc:]
    result_types = [loop.results[k].type for k in keep] + y_types
    new_attributes = dict(loop.attributes)
    new_attributes.update(definition.make_attributes({"num_carried": len(keep)}))
    region = loop.regions[0]
    loop.regions = []
    new_loop = Operation(loop.name, new_operands, result_types, new_attributes, [region], loop.location)
    b = Builder.before(loop)
    b.insert(new_loop)
    for old, k in zip(range(len(keep)), keep):
        loop.results[k].replace_all_uses_with(new_loop.results[old])
    for j in range(len(loop.results) - nc):
        loop.results[nc + j].replace_all_uses_with(new_loop.results[len(keep) + j])

    def stacked(where) -> Value:
        kind, index = where
        return operands[index] if kind == "operand" else new_loop.results[len(keep) + index]

    after = Builder.before(loop)
    for k, (a_where, q_where, transposed) in wanted.items():
        a, q = stacked(a_where), stacked(q_where)
        rows_a = after.op("lz.reshape", a, shape=[-1, a.type.shape[-1]])
        rows_q = after.op("lz.reshape", q, shape=[-1, q.type.shape[-1]])
        total = after.op("lz.matmul", after.op("lz.transpose", rows_a, perm=[1, 0]), rows_q)
        if transposed:
            total = after.op("lz.transpose", total, perm=[1, 0])
        loop.results[k].replace_all_uses_with(after.op("lz.add", operands[ni + k], total))
    loop.erase()

    # the body: drop the accumulators' yields, adds and block arguments
    yielded = list(terminator.operands)
    terminator.set_operands([yielded[k] for k in keep] + yielded[nc:nc + ys_count])
    for k in sorted(matches, reverse=True):
        add = yielded[k].owner
        if not add.results[0].uses:
            add.erase()
        body.erase_argument(1 + ni + k)
    return len(matches)


@dataclass
class LoopSums(Pass):
    name = "loop-sums"
    summary = "Turn a sum of matrix products accumulated by an lz.for into one GEMM after the loop"

    def run(self, module: ModuleOp) -> None:
        for loop in [op for op in module.walk() if op.name == "lz.for"]:
            hoist_summed_products(loop)
