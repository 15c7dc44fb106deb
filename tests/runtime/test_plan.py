"""The execution plan's constants: a conv's constant weights, a matmul's constant B, packed once for their kernels
(issue 11)."""
from __future__ import annotations

import numpy as np
import pytest

import lezero
from lezero.codegen.packed_operands import PackedGemmA, PackedGemmB, PackedNchwcWeights
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


def test_constant_conv_weights_are_packed_once_and_kept_for_other_readers(monkeypatch):
    from lezero.codegen.llvm import backend

    monkeypatch.setattr(backend, "layout_block", lambda: None)  # NCHW convs (the blocked ones: below)
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


def test_blocked_conv_weights_are_packed_once_too(monkeypatch):
    from lezero.codegen.llvm import backend

    from lezero.passes import layout

    monkeypatch.setattr(backend, "layout_block", lambda: 8)
    monkeypatch.setattr(layout, "MAX_CONVERSIONS_PER_CONV", 1.0)  # a region of two convs and two conversions
    w = (np.random.default_rng(4).standard_normal((15, 15, 3, 3)) * 0.2).astype(np.float32)  # 15 of 16 lanes
    x = np.random.default_rng(5).standard_normal((1, 15, 9, 11)).astype(np.float32)
    module = two_convs_sharing_weights(w)
    compiled = lezero.compile(module)
    z, returned = compiled(x)
    np.testing.assert_allclose(z, interpret(module, "f", x)[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(returned, w)
    plan = compiled.plan_for([x.shape]).plan
    convs = [launch for launch in plan.launches if launch.kind == "conv_blocked"]
    assert len(convs) == 2
    (spec,) = {spec for launch in convs for spec in launch.kernel.packed_operands}
    assert isinstance(spec, PackedNchwcWeights) and spec.block == 8
    (packed_ref,) = {launch.operands[spec.operand] for launch in convs}
    np.testing.assert_array_equal(plan.constants[packed_ref.where], spec.pack(w))


@pytest.mark.parametrize("m,k,n,transposed", [
    (32, 600, 50, False),  # whole 4-row tiles (AVX2), two K blocks, a partial last column sliver
    (3, 9, 130, True),    # x @ w.T: w stored n x k, packed from its columns
])
def test_constant_matmul_weights_are_packed_once_as_b(m, k, n, transposed):
    """Matmuls read a constant B pre-packed: y = x @ w + 1 and z = relu(x) @ w share w's packed
    copy, and w itself is returned untouched."""
    rng = np.random.default_rng(4)
    w = rng.standard_normal((n, k) if transposed else (k, n)).astype(np.float32)
    x = rng.standard_normal((2, m, k)).astype(np.float32)
    func = FuncOp("f", FunctionType([TensorType(x.shape, F32)], []))
    b = Builder.at_end(func.entry_block)
    weights = b.constant(w)
    rhs = b.op("lz.transpose", weights, perm=[1, 0]) if transposed else weights
    y = b.op("lz.add", b.op("lz.matmul", func.arguments[0], rhs), b.constant(np.float32(1.0)))
    z = b.op("lz.matmul", b.op("lz.relu", func.arguments[0]), rhs)
    b.create("func.return", [y, z, weights], result_types=[])
    func.update_function_type()
    module = ModuleOp([func])
    compiled = lezero.compile(module)
    got = compiled(x)
    for g, want in zip(got, interpret(module, "f", x)):
        np.testing.assert_allclose(g, want, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(got[2], w)
    plan = compiled.plan_for([x.shape]).plan
    matmuls = [launch for launch in plan.launches if launch.kind == "matmul"]
    assert len(matmuls) == 2
    (spec,) = {spec for launch in matmuls for spec in launch.kernel.packed_operands}
    assert isinstance(spec, PackedGemmB) and (spec.depth, spec.cols) == (k, n)
    (packed_ref,) = {launch.operands[spec.operand] for launch in matmuls}  # packed once for both
    # B's values in the layout, whichever way the constant it was packed from is stored
    b_matrix = np.ascontiguousarray(w.T if transposed else w)
    layout = PackedGemmB(spec.operand, k, n, spec.col_tile, (n, 1))
    np.testing.assert_array_equal(plan.constants[packed_ref.where], layout.pack(b_matrix))
