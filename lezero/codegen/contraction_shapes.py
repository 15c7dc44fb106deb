"""What a contraction kernel computes, whatever the backend: which op it is built around, where
its operands lie, and its problem as GEMMs (``MatmulShape``) or a convolution (``ConvShape``).

A matmul or conv kernel (partition's ``matmul``/``conv`` kinds) holds one ``lz.matmul`` or
``lz.conv2d`` (its *anchor*), an elementwise epilogue, and no prologue but a matmul operand read
through ``lz.transpose`` (``x @ w.T``): that operand is its kernel operand with permuted strides
(``stored_operand``).  Both backends tile the shapes described here (``llvm/contraction.py``,
``triton/contraction.py``), and ``estimate_flops`` counts their multiply-adds.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from lezero.codegen.errors import LoweringError
from lezero.ir.core import Operation
from lezero.ir.dialect.data_movement import TransposeOp

CONTRACTION_OPS = ("lz.matmul", "lz.conv2d")


def anchor_op(ctx) -> Operation:
    """The one contraction of a matmul or conv kernel (``ctx``: a backend's ``KernelContext``)."""
    ops = [op for op in ctx.body.ops if op.name in CONTRACTION_OPS]
    if len(ops) != 1:
        raise LoweringError(f"failed to lower {ctx.kernel.definition.attrs(ctx.kernel).kind} kernel {ctx.name} for "
                            f"{ctx.target}: it holds {len(ops)} contractions, not one", ctx.kernel.location)
    return ops[0]


def stored_operand(ctx, v, anchor: Operation):
    """The kernel operand (block argument) that contraction operand ``v`` reads, and ``v``'s strides
    in it (elements per step along each of ``v``'s dims): ``v`` itself, or a matmul operand
    read through ``lz.transpose`` (the only prologue a contraction kernel takes)."""
    if v in ctx.body.args:
        return v, row_major(v.type.shape)
    op = v.owner
    if anchor.name == "lz.matmul" and isinstance(op, Operation) and op.name == "lz.transpose":
        source, strides = stored_operand(ctx, op.operands[0], anchor)
        perm = TransposeOp.permutation(op.definition.attrs(op), len(strides))
        return source, tuple(strides[p] for p in perm)
    raise LoweringError(f"failed to lower {anchor.name} for {ctx.target}: its operands must be kernel operands "
                        "(a contraction kernel takes no prologue but a matmul operand's transpose)", anchor.location)


def row_major(shape) -> tuple:
    """Elements per step along each dim of a row-major array of ``shape``."""
    strides, step = [], 1
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


def contraction_flops(op: Operation) -> int:
    """2 x multiply-adds of a matmul or conv2d."""
    if op.name == "lz.matmul":
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

    @staticmethod
    def of(op: Operation, a_strides: tuple | None = None, b_strides: tuple | None = None) -> "MatmulShape":
        """``a_strides``/``b_strides``: per dim of each operand (row-major when not given)."""
        a, b = (v.type.shape for v in op.operands)
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
