"""``lz.kernel`` and ``lz.yield``: a fused group of ops that the code generators compile as one.

    %r:2 = "lz.kernel"(%a, %b) ({
    ^bb0(%x: tensor<64x256xf32>, %y: tensor<256xf32>):
      %0 = "lz.add"(%x, %y) : (tensor<64x256xf32>, tensor<256xf32>) -> tensor<64x256xf32>
      %1 = "lz.relu"(%0) : (tensor<64x256xf32>) -> tensor<64x256xf32>
      "lz.yield"(%1, %0) : (tensor<64x256xf32>, tensor<64x256xf32>) -> ()
    }) {kind = "elementwise", name = "lz_fused_add_relu_0"} : (...) -> (...)

The region's block arguments take the kernel's operands; ``lz.yield`` gives its results.  The
region is isolated from above: it sees only its arguments (and constants defined inside it), so a
kernel can be compiled on its own and cached by its text.  It stays valid IR: it prints, parses,
verifies and runs in the reference interpreter like any other op.

``device`` (optional, ``"cpu"`` when absent) says where the kernel runs and where its results
live; ``partition{target=cuda}`` sets it.  ``constant_operands`` (optional; issue 11) lists the
operands that are ``lz.constant`` results, known when the plan is built (``schedule`` sets it): a
backend may read them pre-packed (``lezero/codegen/packed_operands.py``).  A kernel of kind
``transfer`` holds one ``lz.transfer``: the runtime copies its operand into the memory of its
``device``.
"""
from __future__ import annotations

from lezero.ir.dialect.device import DEVICES
from lezero.ir.opdef import ISOLATED_FROM_ABOVE, PURE, TERMINATOR, YIELDS, AttrSpec, OpDef, OpError, register

# What the code generators see; the partitioner decides it.
KERNEL_KINDS = ("elementwise", "reduction", "matmul", "conv", "single", "transfer", "attention", "conv_blocked")
# The operands defined by lz.constant (issue 11: weights packed once when the plan is built).
CONSTANT_OPERANDS_ATTR = "constant_operands"


@register
class KernelOp(OpDef):
    name = "lz.kernel"
    operands = ()
    variadic = True
    num_results = None
    traits = frozenset({PURE, ISOLATED_FROM_ABOVE, YIELDS})
    attributes = {"kind": AttrSpec("str", "elementwise", choices=KERNEL_KINDS), "name": AttrSpec("str", "lz_kernel"),
                  "device": AttrSpec("str", "cpu", choices=DEVICES),
                  CONSTANT_OPERANDS_ATTR: AttrSpec("i64_array", ())}
    summary = "a fused group of ops compiled as one kernel"

    def region_argument_types(self, op) -> list[list]:
        return [list(op.operand_types)]

    def infer_for_op(self, op) -> list:
        body = _body(op)
        terminator = body.terminator
        if terminator is None or terminator.name != "lz.yield":
            raise OpError("region must end with 'lz.yield'")
        return terminator.operand_types

    def verify_extra(self, op, attrs) -> None:
        body = _body(op)
        arg_types = [a.type for a in body.args]
        if arg_types != op.operand_types:
            raise OpError(f"region arguments ({', '.join(map(str, arg_types))}) do not match the operands "
                          f"({', '.join(map(str, op.operand_types))})")
        inside = {id(a) for a in body.args}
        for inner in body.ops:
            for v in inner.operands:
                if id(v) not in inside:
                    raise OpError(f"'{inner.name}' inside the kernel uses a value defined outside it "
                                  "(kernels are isolated from above)")
            inside.update(id(r) for r in inner.results)

    def evaluate(self, op, inputs):
        from lezero.ir.interpreter import run_block

        return run_block(_body(op), inputs)


@register
class YieldOp(OpDef):
    name = "lz.yield"
    operands = ()
    variadic = True
    num_results = 0
    traits = frozenset({TERMINATOR})
    summary = "the results of a region of lz.kernel, lz.for, lz.while or lz.if"

    def infer_for_op(self, op) -> list:
        parent = op.parent_op
        definition = parent.definition if parent is not None else None
        if definition is None or not definition.has_trait(YIELDS):
            raise OpError("expects its parent to be an op whose regions yield ('lz.kernel', 'lz.for', "
                          "'lz.while' or 'lz.if')")
        return []


def _body(op):
    if len(op.regions) != 1 or len(op.regions[0].blocks) != 1:
        raise OpError("must have one region of one block")
    return op.regions[0].blocks[0]
