"""``lz.topk`` and ``lz.scatter_nd`` as ``single`` kernels: deterministic, with no atomics (but
the bounds checks' on the status buffer) and no sort, each output element computed by one lane
as the reference defines it.

topk is a rank per element: along a line (``outer x inner`` lines of ``n`` elements), element
``i`` goes to output position ``rank(i) = #{j : x_j comes before x_i}`` in the reference's
order (value, largest or smallest first, nan the largest value; equal values by index, the
first first), when ``rank(i) < k``.  The order is strict and total, so the ranks are a
permutation and every output position gets exactly one element.  A program takes ``ROWS``
lines, each whole in one block of ``N`` lanes (``n`` padded to a power of two, masked), and
walks ``j`` over the line once: ``n x n`` compares a line.  Lines longer than ``MAX_TOPK`` stay
on the CPU (``topk_unsupported_reason``).

scatter_nd is a gather: a lane per output element (flat blocks over ``data``) starts from
``data``'s value and walks the update rows in order, applying each one whose index tuple
(negative coordinates counted from the end; one outside the data is skipped and recorded in the
status buffer, as on the CPU, and the runtime raises)
targets the lane's slice, with the reduction (``none`` replaces; ``add``, ``mul``, ``max``,
``min`` combine, rounded to the element type after each update as numpy does, bf16 once at
the end as the reference, which computes it in float32).  Duplicate indices therefore apply in the
reference's order and the result is the reference's exactly.  The cost is ``output elements x
update rows`` compares; past ``MAX_SCATTER_COMPARES`` the op stays on the CPU
(``scatter_unsupported_reason``), whose one pass over the updates is cheaper there.
"""
from __future__ import annotations

import math

from lezero.codegen.kernel import lines_along_axis, single_buffers
from lezero.codegen.triton.context import TritonContext, next_pow2
from lezero.codegen.triton.elementwise import flat_blocks
from lezero.codegen.triton.kernel import LaunchConfig
from lezero.codegen.triton.reduction import TILE
from lezero.codegen.triton.scalar_builder import TValue
from lezero.ir.dialect.axes import normalize_axis
from lezero.ir.types import BF16

MAX_TOPK = 4096  # the longest line a topk ranks in one block
MAX_SCATTER_COMPARES = 2 ** 28  # output elements x update rows


def topk_unsupported_reason(op) -> str | None:
    x = op.operands[0].type
    n = x.shape[normalize_axis(op.definition.attrs(op).axis, x.rank)] if x.is_static else None
    if n is not None and n > MAX_TOPK:
        return f"lz.topk over an axis of {n} > {MAX_TOPK} elements runs on the CPU"
    return None


def scatter_unsupported_reason(op) -> str | None:
    data, indices, _ = (v.type for v in op.operands)
    if not (data.is_static and indices.is_static):
        return None
    compares = math.prod(data.shape) * math.prod(indices.shape[:-1])
    if compares > MAX_SCATTER_COMPARES:
        return (f"lz.scatter_nd of {math.prod(data.shape)} elements x {math.prod(indices.shape[:-1])} update rows "
                f"({compares} > 2**28 compares as a gather) runs on the CPU")
    return None


def lower_topk(ctx: TritonContext, op) -> tuple:
    code, s = ctx.code, ctx.s
    attrs = op.definition.attrs(op)
    (x_buffer,), (values_buffer, indices_buffer) = single_buffers(ctx, op)
    x = op.operands[0]
    dtype = x.type.element_type
    axis, outer, n, inner = lines_along_axis(op)
    lines, k = outer * inner, attrs.k
    if lines == 0 or k == 0:
        code.line("pass  # no output elements")
        return (LaunchConfig({}, (1,)),)
    pid = "tl.program_id(0)" if ctx.index_type() == "tl.int32" else "tl.program_id(0).to(tl.int64)"
    code.line(f"rows = {pid} * ROWS + tl.arange(0, ROWS)[:, None]  # lines along axis {axis}")
    code.line("cols = tl.arange(0, N)[None, :]  # positions along the line")
    code.line(f"row_mask = rows < {lines}")
    code.line(f"mask = row_mask & (cols < {n})")
    line_start = (lambda length: f"rows // {inner} * {length * inner} + rows % {inner}") if inner > 1 else \
        (lambda length: f"rows * {length}")
    base = code.assign("base", line_start(n))
    code.line(f"x = tl.load({x_buffer.pointer} + {base} + cols * {inner}, mask=mask, other=0)")
    xi = s.from_storage("x", dtype).value
    if dtype.is_float:
        code.line(f"x_nan = {xi} != {xi}")
    code.line("rank = tl.zeros([ROWS, N], dtype=tl.int32)  # the elements ordered before each one")
    with code.block(f"for j in range({n}):"):
        code.line(f"y = tl.load({x_buffer.pointer} + {base} + j * {inner}, mask=row_mask, other=0)")
        xj = s.from_storage("y", dtype).value
        if dtype.is_float:
            code.line(f"y_nan = {xj} != {xj}")
            if attrs.largest:
                code.line(f"strictly = ({xj} > {xi}) | (y_nan & ~x_nan)  # nan is the largest value")
            else:
                code.line(f"strictly = ({xj} < {xi}) | (~y_nan & x_nan)  # nan is the largest value")
            code.line(f"equal = ({xj} == {xi}) | (y_nan & x_nan)")
        else:
            code.line(f"strictly = {xj} {'>' if attrs.largest else '<'} {xi}")
            code.line(f"equal = {xj} == {xi}")
        code.line("rank += (strictly | (equal & (j < cols))).to(tl.int32)  # equal values: the first index first")
    code.line(f"keep = mask & (rank < {k})")
    slot = code.assign("slot", f"{line_start(k)} + rank * {inner}")
    if values_buffer is not None:
        code.line(f"tl.store({values_buffer.pointer} + {slot}, x, mask=keep)")
    if indices_buffer is not None:
        code.line(f"tl.store({indices_buffer.pointer} + {slot}, (cols + rows * 0).to(tl.int64), mask=keep)")
    block = next_pow2(n)
    rows = max(1, min(next_pow2(lines), TILE // block))
    return (LaunchConfig({"ROWS": rows, "N": block}, (math.ceil(lines / rows),), num_warps=4 if block <= 1024 else 8),)


def lower_scatter_nd(ctx: TritonContext, op) -> tuple:
    code, s = ctx.code, ctx.s
    attrs = op.definition.attrs(op)
    (data_buffer, indices_buffer, updates_buffer), (out_buffer,) = single_buffers(ctx, op)
    data, indices, _ = op.operands
    dtype = data.type.element_type
    shape = data.type.shape
    depth = indices.type.shape[-1]
    count = math.prod(indices.type.shape[:-1])
    piece = math.prod(shape[depth:])  # the elements of one update row: a slice of the trailing dims
    total = math.prod(shape)
    if total == 0 or out_buffer is None:
        code.line("pass  # no output elements")
        return (LaunchConfig({}, (1,)),)
    configs = flat_blocks(ctx, total)
    ctx.emitter.mask = "mask"  # the lanes whose bad indices count
    code.line(f"acc = tl.load({data_buffer.pointer} + offs, mask=mask, other=0)")
    acc = s.from_storage("acc", dtype)
    if acc.value != "acc":
        code.line(f"acc = {acc.value}")
    if count and piece:
        code.line(f"place = offs // {piece}  # the index tuple's flat position" if piece > 1 else "place = offs")
        element = f"offs % {piece}" if piece > 1 else "offs * 0"
        code.line(f"element = {element}  # the position inside the update row")
        combine = {"none": None, "add": s.add, "mul": s.mul, "max": s.max, "min": s.min}[attrs.reduction]
        with code.block(f"for u in range({count}):  # the update rows in order: duplicates as the reference"):
            target, valid = [], []
            for j in range(depth):
                stride = math.prod(shape[j + 1:depth])
                # every lane loads the coordinate (the interpreter's scalar loads and masks do not mix)
                raw = code.assign("index", f"tl.load({indices_buffer.pointer} + u * {depth} + {j} + offs * 0)")
                index, bad = ctx.emitter.checked_index(op, f"dim {j}", TValue(raw, indices.type.element_type),
                                                       shape[j])
                valid.append(f"~({bad.value})")
                target.append(index.value if stride == 1 else f"{index.value} * {stride}")
            hit = " & ".join(["mask", f"(place == {' + '.join(target)})" if target else "(place == 0)", *valid])
            code.line(f"hit = {hit}")
            code.line(f"update = tl.load({updates_buffer.pointer} + u * {piece} + element, mask=hit, other=0)")
            update = s.from_storage("update", dtype)
            if combine is not None:
                update = combine(TValue("acc", dtype), update)
                update = update if dtype == BF16 else s.round(update)
            code.line(f"acc = tl.where(hit, {update.value}, acc)")
    # the reference combines bf16 (float32 storage) in float32 and rounds the op's result once
    out = s.round(TValue("acc", dtype)) if dtype == BF16 else TValue("acc", dtype)
    code.line(f"tl.store({out_buffer.pointer} + offs, {s.to_storage(out)}, mask=mask)")
    return configs
