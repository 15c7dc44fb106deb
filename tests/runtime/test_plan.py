"""The execution plan's constants: a conv's constant weights packed once for its kernel (issue 11)."""
from __future__ import annotations

import numpy as np

import lezero
from lezero.codegen.packed_operands import PackedGemmA
from lezero.ir import interpret
from lezero.ir.builder import Builder
from lezero.ir.core import FuncOp, ModuleOp
from lezero.ir.types import FunctionType, TensorType, F32


def two_convs_sharing_weights(w: np.ndarray) -> ModuleOp:
    """f(x) = (conv(relu(conv(x, w)), w), w): one constant read by two conv kernels and returned."""
    x_type = TensorType((1, w.shape[1], 9, 11), F32)
    func = FuncOp("f", FunctionType([x_type], []))
    b = Builder.at_end(func.entry_block)
    weights = b.constant(w)
    attrs = dict(strides=[1, 1], pads=[1, 1, 1, 1], dilations=[1, 1], groups=1)
    y = b.op("lz.relu", b.op("lz.conv2d", func.arguments[0], weights, **attrs))
    z = b.op("lz.conv2d", y, weights, **attrs)
    b.create("func.return", [z, weights], result_types=[])
    func.update_function_type()
    return ModuleOp([func])


def test_constant_conv_weights_are_packed_once_and_kept_for_other_readers():
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((13, 13, 3, 3)) * 0.2).astype(np.float32)  # 13 rows: a partial sliver
    x = rng.standard_normal((1, 13, 9, 11)).astype(np.float32)
    module = two_convs_sharing_weights(w)
    compiled = lezero.compile(module)
    z, returned = compiled(x)
    want_z, _ = interpret(module, "f", x)
    np.testing.assert_allclose(z, want_z, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(returned, w)  # the constant itself is untouched

    plan = compiled.plan_for([x.shape]).plan
    convs = [launch for launch in plan.launches if launch.kind == "conv"]
    assert len(convs) == 2
    (spec,) = {spec for launch in convs for spec in launch.kernel.packed_operands}
    assert isinstance(spec, PackedGemmA) and (spec.groups, spec.rows, spec.depth) == (1, 13, 13 * 9)
    packed_refs = {launch.operands[spec.operand] for launch in convs}
    assert len(packed_refs) == 1  # packed once for both kernels
    (packed_ref,) = packed_refs
    np.testing.assert_array_equal(plan.constants[packed_ref.where], spec.pack(w))
