"""``lz.transfer``: a value copied into another device's memory.

    %1 = "lz.transfer"(%0) {device = "cpu"} : (tensor<8x10xf32>) -> tensor<8x10xf32>

The value is unchanged (the reference copies it): the op only says where its result lives.
``partition{target=cuda}`` inserts one on every edge between an op placed on the CPU (one the
GPU backend cannot run) and one on the GPU, and makes each a kernel of kind ``transfer`` that
the runtime runs as a copy between the two memories.  Anywhere else (the CPU target, the
interpreter) it is an elementwise identity: its scalar facet is the operand, so the CPU code
generator lowers it as a copy, and its gradient passes the cotangent through (its placement is
partition's business, like the forward's).
"""
from __future__ import annotations

import numpy as np

from lezero.ir.dialect.constraints import ANY
from lezero.ir.dialect.elementwise import UnaryOp
from lezero.ir.opdef import AttrSpec, register

# The devices values live on: the host, and the GPU lezero.codegen.triton compiles for.
DEVICES = ("cpu", "cuda")


@register
class TransferOp(UnaryOp):
    """``lz.transfer {device = "cuda"}``: ``x`` copied to ``device``'s memory; same type."""

    name = "lz.transfer"
    domain = ANY
    attributes = {"device": AttrSpec("str", choices=DEVICES)}
    summary = "copy a value to a device's memory (identity)"

    def reference(self, attrs, x):
        return np.array(x, copy=True)

    def lower_scalar(self, s, attrs, x):
        return x

    def grad(self, b, op, attrs, dy):
        return [dy]
