"""fold-qdq: a float matmul of two dequantized 8-bit tensors becomes ``lz.matmul_integer``.

The QDQ format (ONNX Runtime's ``quantize_static`` with ``QuantFormat.QDQ``, lezero's own QDQ
export) writes a quantized linear layer as float ops between quantize/dequantize pairs::

    x_q = quantize(x)      y = matmul(dequantize(x_q, sx, zx), dequantize(w_q, sw, zw)) [+ bias]
    y_q = quantize(y)      (the next layer's input)

Computed as written, the 8-bit tensors are widened to float, multiplied in float32 and quantized
again.  Since ``(x_q - zx) sx @ (w_q - zw) sw = ((x_q - zx) @ (w_q - zw)) sx sw``, the product is
the exact integer GEMM scaled once::

    y = cast(matmul_integer(x_q, w_q, zx, zw), f32) * (sx * sw)

and what follows (the bias, an activation, the next ``quantize``) is the integer GEMM's
elementwise epilogue: partition puts it in the GEMM's kernel, so neither the i32 product nor a
float tensor is stored between the 8-bit input and the 8-bit output (the requantize epilogue of
``lezero/codegen/llvm/integer_gemm.py``).  The sum is exact instead of float32's rounded one: the
results differ from the float chain by float32 rounding, as ONNX Runtime's fused QLinearMatMul
does.

What it matches: ``lz.matmul(a, b)`` with a float32 result, ``a`` an ``lz.dequantize`` of an
8-bit tensor per tensor, ``b`` a 2-D ``lz.dequantize`` of an 8-bit tensor per tensor or per
column (``axis`` its last dim), or such a dequantize read through a 2-D ``lz.transpose`` (ONNX
Gemm's ``transB``, torch's ``x @ w.T``: per row of the stored weight, its output channels).  The
transposed weight is an ``lz.transpose`` of the 8-bit tensor (constant-fold makes a constant
weight's transpose a constant).  Run before ``decompose`` (the CPU kernel pipeline does), while
the dequantizes are still whole ops.

Convolutions the same way (``fold_conv``): ``conv2d(dequantize(x), dequantize(w))`` with ``x`` per
tensor and ``w`` per tensor or per output channel becomes ``cast(conv_integer(...)) * (sx * sw)``
(``lz.conv_integer``: on the CPU the same GEMM over an implicit im2col, its requantize fused), so
ORT's QDQ CNNs compute in integers too.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lezero.ir.builder import Builder
from lezero.ir.core import ModuleOp, Operation, Value
from lezero.ir.dialect.axes import normalize_axis
from lezero.ir.types import F32
from lezero.passes.pass_base import Pass

EIGHT_BIT = ("i8", "ui8")


def _dequantized(v: Value) -> Operation | None:
    """The ``lz.dequantize`` of an 8-bit tensor with float32 scales that defines ``v``, or None."""
    op = v.owner
    if not (isinstance(op, Operation) and op.name == "lz.dequantize"):
        return None
    q, scale, _ = op.operands
    if q.type.element_type.name not in EIGHT_BIT or scale.type.element_type != F32:
        return None
    return op


def _lhs(v: Value):
    """``(q, zero, scale)`` of a matmul lhs dequantized per tensor, else None."""
    dq = _dequantized(v)
    if dq is None or dq.operands[1].type.rank != 0:
        return None
    q, scale, zero = dq.operands
    return q, zero, scale


def _rhs(v: Value):
    """``(q, zero, scale, transposed)`` of a 2-D matmul rhs dequantized per tensor or per column,
    directly or through a matrix transpose, else None."""
    op = v.owner
    transposed = (isinstance(op, Operation) and op.name == "lz.transpose" and v.type.rank == 2
                  and list(op.attributes["perm"].values) == [1, 0])
    dq = _dequantized(op.operands[0] if transposed else v)
    if dq is None or dq.result.type.rank != 2:
        return None
    q, scale, zero = dq.operands
    if scale.type.rank == 1:
        axis = normalize_axis(dq.definition.attrs(dq).axis, 2)
        if axis != (0 if transposed else 1):  # the scales must run along the product's columns
            return None
    return q, zero, scale, transposed


def fold_matmul(op: Operation) -> bool:
    """Rewrite ``op`` (an ``lz.matmul``) when it multiplies two dequantized 8-bit tensors."""
    a, b = op.operands
    if op.result.type.element_type != F32 or b.type.rank != 2:
        return False
    lhs, rhs = _lhs(a), _rhs(b)
    if lhs is None or rhs is None:
        return False
    qa, za, sa = lhs
    qb, zb, sb, transposed = rhs
    builder = Builder.before(op)  # the new ops keep the matmul's location
    if transposed:
        qb = builder.op("lz.transpose", qb, perm=[1, 0])
    product = builder.op("lz.matmul_integer", qa, qb, za, zb)
    scaled = builder.op("lz.mul", builder.op("lz.cast", product, to=F32), builder.op("lz.mul", sa, sb))
    op.result.replace_all_uses_with(scaled)
    op.erase()
    return True


# --- issue 12, qconv: convolutions (ORT's QDQ CNNs) --------------------------------------------------
def fold_conv(op: Operation) -> bool:
    """Rewrite ``op`` (an ``lz.conv2d``) of a dequantized 8-bit input (per tensor) and weight (per
    tensor, or per output channel: ``axis`` 0) as ``cast(conv_integer) * (sx * sw)``, ``sw`` one
    per output channel.  The float convolution pads with 0.0, the dequantized zero point, and
    ``lz.conv_integer`` pads with ``zx``: the same."""
    x, w = op.operands
    lhs, dq = _lhs(x), _dequantized(w)
    if op.result.type.element_type != F32 or lhs is None or dq is None:
        return False
    qw, sw, zw = dq.operands
    if sw.type.rank == 1 and normalize_axis(dq.definition.attrs(dq).axis, 4) != 0:
        return False
    qx, zx, sx = lhs
    builder = Builder.before(op)
    if isinstance(zw.owner, Operation) and zw.owner.name == "lz.constant" and zw.type.rank == 1:
        values = zw.owner.attributes["value"].array
        if (values == values.flat[0]).all():  # one zero point (symmetric: 0): the weights can be the GEMM's lhs
            zw = builder.constant(np.asarray(values.flat[0], values.dtype))
    window = {key: op.attributes[key] for key in ("strides", "pads", "dilations", "groups") if key in op.attributes}
    sums = builder.create("lz.conv_integer", [qx, qw, zx, zw], window).result
    scale = builder.op("lz.mul", sx, sw)
    if sw.type.rank == 1:
        scale = builder.op("lz.reshape", scale, shape=[1, sw.type.shape[0], 1, 1])
    scaled = builder.op("lz.mul", builder.op("lz.cast", sums, to=F32), scale)
    op.result.replace_all_uses_with(scaled)
    op.erase()
    return True


@dataclass
class FoldQdq(Pass):
    name = "fold-qdq"
    summary = "Fold matmul(dequantize(x), dequantize(w)) into lz.matmul_integer scaled once (QDQ models)"

    def run(self, module: ModuleOp) -> None:
        for func in module.functions:
            for op in [op for op in func.walk() if op.name == "lz.matmul"]:
                fold_matmul(op)
            for op in [op for op in func.walk() if op.name == "lz.conv2d"]:  # issue 12, qconv
                fold_conv(op)
