"""What a contraction kernel computes, whatever the backend: which op it is built around, where
its operands lie, and its problem as GEMMs (``MatmulShape``) or a convolution (``ConvShape``).

A matmul or conv kernel (partition's ``matmul``/``conv`` kinds) holds one ``lz.matmul`` or
``lz.conv2d`` (or their 8-bit forms ``lz.matmul_integer``/``lz.conv_integer``: its *anchor*), an
elementwise epilogue, and no prologue but a matmul operand read through ``lz.transpose`` (``x @
w.T``), which is its kernel operand with permuted strides, or through an ``lz.cast`` from f32 to a
bf16 or f16 matmul's type (autocast's, rounded where the kernel reads the value: ``rounded_operands``),
or one of an integer matmul's two matrices read through ``lz.reshape`` (the same row-major bytes)
(``stored_operand``).  Both
backends tile the shapes described here (``llvm/contraction.py``, ``triton/contraction.py``), and
``estimate_flops`` counts their multiply-adds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from lezero.codegen.errors import LoweringError
from lezero.ir.core import Operation
from lezero.ir.dialect.data_movement import TransposeOp
from lezero.passes.partition import is_operand_cast

CONTRACTION_OPS = ("lz.matmul", "lz.conv2d")
# The int8 contractions (i32 sums of 8-bit operands less their zero points): a backend that keeps
# them whole (the CPU, the GPU) lowers their matmul and conv kernels.
INTEGER_CONTRACTIONS = ("lz.matmul_integer", "lz.conv_integer")
# The CPU's float32 matmul kernels (``matmul_kernel``): a matmul with A's rows contiguous along k
# and fewer columns than this, or fewer than THIN_ROWS rows and B's columns contiguous too, is dot
# products; the GEMM gives fewer than THIN_ROWS rows a register tile of their own height.
DOT_MAX_COLS = 16
THIN_ROWS = 4


def anchor_op(ctx) -> Operation:
    """The one contraction of a matmul or conv kernel (``ctx``: a backend's ``KernelContext``)."""
    ops = [op for op in ctx.body.ops if op.name in CONTRACTION_OPS or op.name in INTEGER_CONTRACTIONS]
    if len(ops) != 1:
        raise LoweringError(f"failed to lower {ctx.kernel.definition.attrs(ctx.kernel).kind} kernel {ctx.name} for "
                            f"{ctx.target}: it holds {len(ops)} contractions, not one", ctx.kernel.location)
    return ops[0]


def stored_operand(ctx, v, anchor: Operation):
    """The kernel operand (block argument) that contraction operand ``v`` reads, and ``v``'s strides
    in it (elements per step along each of ``v``'s dims): ``v`` itself, or a matmul operand
    read through ``lz.transpose``, or one of an integer matmul's matrices read through ``lz.reshape``
    (row-major in its source: the only prologues a contraction kernel takes)."""
    if v in ctx.body.args:
        return v, row_major(v.type.shape)
    op = v.owner
    if isinstance(op, Operation) and is_operand_cast(op, anchor):  # read as it is stored, rounded (rounded_operands)
        return stored_operand(ctx, op.operands[0], anchor)
    if anchor.name == "lz.matmul" and isinstance(op, Operation) and op.name == "lz.transpose":
        source, strides = stored_operand(ctx, op.operands[0], anchor)
        perm = TransposeOp.permutation(op.definition.attrs(op), len(strides))
        return source, tuple(strides[p] for p in perm)
    if anchor.name == "lz.matmul_integer" and isinstance(op, Operation) and op.name == "lz.reshape" \
            and op.operands[0] in ctx.body.args and any(v is x for x in anchor.operands[:2]):
        return op.operands[0], row_major(v.type.shape)
    raise LoweringError(f"failed to lower {anchor.name} for {ctx.target}: its operands must be kernel operands "
                        "(a contraction kernel takes no prologue but a matmul operand's transpose or cast to bf16 or "
                        "f16, or an integer matmul matrix's reshape)", anchor.location)


def rounded_operands(ctx, anchor: Operation) -> tuple:
    """Per operand of ``anchor``, whether it reads a float32 kernel operand through a cast to the
    matmul's type, bf16 or f16 (partition's ``is_operand_cast``, under a transpose or not): its values
    are rounded to that type where the kernel reads them from the float32 buffer (an f16 matmul's
    other operands stay half storage)."""
    def through_cast(v) -> bool:
        op = v.owner
        if v in ctx.body.args or not isinstance(op, Operation):
            return False
        return is_operand_cast(op, anchor) or through_cast(op.operands[0])

    return tuple(through_cast(v) for v in anchor.operands)


def row_major(shape) -> tuple:
    """Elements per step along each dim of a row-major array of ``shape``."""
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


def contraction_flops(op: Operation) -> int:
    """2 x multiply-adds of a matmul (``lz.matmul_integer`` too) or conv2d."""
    if op.name in ("lz.matmul", "lz.matmul_integer"):
        s = MatmulShape.of(op)
        return 2 * s.batches * s.m * s.n * s.k
    s = ConvShape.of(op)
    return 2 * math.prod(op.result.type.shape) * s.in_per_group * s.kh * s.kw


@dataclass(frozen=True)
class MatmulShape:
    """numpy matmul as ``batches`` GEMMs of m x k by k x n, with each operand's strides in the
    buffer it is read from (row-major, or permuted by a transpose the kernel reads it through)."""

    batch_shape: tuple
    a_batch_strides: tuple  # elements, 0 along broadcast dims
    b_batch_strides: tuple
    m: int
    n: int
    k: int
    has_rows: bool  # the result has the m dim (a 2-D+ lhs)
    has_cols: bool  # the result has the n dim (a 2-D+ rhs)
    a_matrix_strides: tuple = (0, 1)  # elements per step of (row, k) of A
    b_matrix_strides: tuple = (0, 1)  # elements per step of (k, column) of B
    row_batch_shape: tuple = ()  # batch dims folded into the rows (``batches_as_rows``): m counts them

    @staticmethod
    def of(op: Operation, a_strides: tuple | None = None, b_strides: tuple | None = None) -> "MatmulShape":
        """``a_strides``/``b_strides``: per dim of each operand (row-major when not given)."""
        a, b = (v.type.shape for v in op.operands[:2])  # lz.matmul_integer's zero points follow
        a_strides = row_major(a) if a_strides is None else tuple(a_strides)
        b_strides = row_major(b) if b_strides is None else tuple(b_strides)
        a2, as2 = (a, a_strides) if len(a) > 1 else ((1,) + a, (0,) + a_strides)
        b2, bs2 = (b, b_strides) if len(b) > 1 else (b + (1,), b_strides + (0,))
        m, k = a2[-2:]
        n = b2[-1]
        result = op.result.type.shape
        batch = tuple(result[:len(result) - (len(a) > 1) - (len(b) > 1)])

        def strides(shape, operand_strides):
            lead = len(batch) - len(shape)
            return tuple(operand_strides[d - lead] if d >= lead and shape[d - lead] != 1 else 0
                         for d in range(len(batch)))

        return MatmulShape(batch, strides(a2[:-2], as2[:-2]), strides(b2[:-2], bs2[:-2]), m, n, k, len(a) > 1,
                           len(b) > 1, tuple(as2[-2:]), tuple(bs2[-2:]))

    @property
    def batches(self) -> int:
        return math.prod(self.batch_shape)

    @property
    def row_dims(self) -> tuple:
        """The result dims a row of the GEMMs runs over, outer first: the folded batch dims, then
        the lhs's m dim (a 1-D lhs has none)."""
        inner = self.m // math.prod(self.row_batch_shape)
        return self.row_batch_shape + ((inner,) if self.has_rows else ())

    def batches_as_rows(self) -> "MatmulShape":
        """The same product with its innermost batch dims along which B is shared (batch stride 0)
        folded into A's rows, as far as A's rows still lie one stride apart: one GEMM of many rows
        instead of many GEMMs of a few, each of which would read all of B (ViT's
        ``Transpose(x, [1, 0, 2]) @ W`` is 197 batches of one row: 197 reads of W, or one).  The
        result is row-major, so its folded rows lie ``n`` apart as C's rows do."""
        batch, a_strides, b_strides = list(self.batch_shape), list(self.a_batch_strides), list(self.b_batch_strides)
        m, (row_stride, k_stride) = self.m, self.a_matrix_strides
        folded = list(self.row_batch_shape)
        while batch and b_strides[-1] == 0:
            size, stride = batch[-1], a_strides[-1]
            if size > 1:  # B's stride 0 along a dim of more than one index: A's is not 0
                if m == 1:
                    row_stride = stride
                elif stride != m * row_stride:
                    break
            m *= size
            folded.insert(0, size)
            del batch[-1], a_strides[-1], b_strides[-1]
        if len(batch) == len(self.batch_shape):
            return self
        return MatmulShape(tuple(batch), tuple(a_strides), tuple(b_strides), m, self.n, self.k, self.has_rows,
                           self.has_cols, (row_stride, k_stride), self.b_matrix_strides, tuple(folded))


@dataclass(frozen=True)
class ConvShape:
    n: int
    c: int
    h: int
    w: int
    o: int
    kh: int
    kw: int
    oh: int
    ow: int
    groups: int
    strides: tuple
    pads: tuple  # top, left, bottom, right
    dilations: tuple

    @staticmethod
    def of(op: Operation) -> "ConvShape":
        attrs = op.definition.attrs(op)
        n, c, h, w = op.operands[0].type.shape
        o, _, kh, kw = op.operands[1].type.shape
        _, _, oh, ow = op.result.type.shape
        return ConvShape(n, c, h, w, o, kh, kw, oh, ow, attrs.groups, tuple(attrs.strides), tuple(attrs.pads),
                         tuple(attrs.dilations))

    @property
    def in_per_group(self) -> int:
        return self.c // self.groups

    @property
    def out_per_group(self) -> int:
        return self.o // self.groups

    @property
    def k(self) -> int:
        return self.in_per_group * self.kh * self.kw


def gemm_layout(rows: int, cols: int, row_stride: int, col_stride: int) -> tuple[bool, int, int]:
    """How the GEMM packs a rows x cols operand with these strides (elements): ``(False, ld, 1)``
    for contiguous rows ``ld`` apart, ``(True, ld, 1)`` for contiguous columns ``ld`` apart (stored
    transposed), ``(False, row_stride, col_stride)`` for neither (gathered a float at a time)."""
    if col_stride == 1 or cols == 1:
        return False, max(row_stride, 1) if rows > 1 else 1, 1
    if row_stride == 1 or rows == 1:
        return True, max(col_stride, 1), 1
    return False, row_stride, col_stride


def dot_products(shape: MatmulShape) -> bool:
    """Whether a float32 matmul is a set of dot products: A's rows contiguous along k, and too
    few columns (DOT_MAX_COLS) to fill the GEMM's register tile, whose lanes run along columns
    (B's columns are copied contiguous first when they are not), or too few rows (THIN_ROWS) with
    B's columns contiguous (x @ w.T at batch 1; with B's rows contiguous the GEMM reads them in
    place)."""
    (_, a_k), (b_k, _) = shape.a_matrix_strides, shape.b_matrix_strides
    if not (a_k == 1 or shape.k == 1):
        return False
    return shape.n < DOT_MAX_COLS or (shape.m < THIN_ROWS and (b_k == 1 or shape.k == 1))


def matmul_kernel(op: Operation, a_strides: tuple | None = None, b_strides: tuple | None = None):
    """Which CPU kernel a float32 ``lz.matmul`` runs when its operands are read with these strides
    (elements per step along each of the operand's dims, as ``stored_operand`` gives them: a
    transpose fused into the operand permutes its buffer's strides; row-major when not given),
    and the product as that kernel sees it (``batches_as_rows``: ``shape.batches`` GEMMs of
    ``shape.m`` rows, each reading all of B).

    The kernel is "gemm" (packed, blocked, vector FMA: the fast path, whatever the strides) or
    "dots" (dot products along k, for thin shapes: as fast), or "loops" for K = 0.  A fusion's
    cost model asks it: fusing a transpose into a matmul operand costs nothing more than its
    packing (``gemm_layout``: a float at a time when neither the operand's rows nor its columns
    are contiguous) as long as ``shape.batches`` does not grow."""
    shape = MatmulShape.of(op, a_strides, b_strides).batches_as_rows()
    if shape.k == 0:
        return "loops", shape
    return ("dots" if dot_products(shape) else "gemm"), shape
