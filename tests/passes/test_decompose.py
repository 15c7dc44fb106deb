"""decompose: composite ops become the primitives their definitions build."""
from __future__ import annotations

import pytest

from lezero.ir.opdef import COMPOSITE, registered_ops
from lezero.ir.parser import parse_module
from lezero.passes import PassError, run_pipeline
from pass_testing import op_names, run_and_compare

COMPOSITES = """
func.func @f(%x: tensor<2x3x4xf32>, %s: tensor<4xf32>, %b: tensor<4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>) {
  %0 = "lz.softmax"(%x) : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %1 = "lz.log_softmax"(%x) {axis = 1} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
  %2 = "lz.layer_norm"(%x, %s, %b) : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x3x4xf32>
  func.return %0, %1, %2 : tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<2x3x4xf32>
}
func.func @bn(%x: tensor<2x3x2x2xf32>, %s: tensor<3xf32>, %b: tensor<3xf32>, %m: tensor<3xf32>, %v: tensor<3xf32>) -> tensor<2x3x2x2xf32> {
  %0 = "lz.abs"(%v) : (tensor<3xf32>) -> tensor<3xf32>
  %1 = "lz.batch_norm"(%x, %s, %b, %m, %0) : (tensor<2x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3x2x2xf32>
  func.return %1 : tensor<2x3x2x2xf32>
}
"""


def composite_names(m):
    return [op.name for op in m.walk() if op.definition is not None and op.definition.has_trait(COMPOSITE)]


def test_every_composite_is_replaced_and_results_are_kept():
    m = run_and_compare(parse_module(COMPOSITES), "decompose", trials=3)
    assert composite_names(m) == []
    names = op_names(m)
    assert "lz.exp" in names and "lz.reduce_max" in names and "lz.rsqrt" in names
    assert "lz.reshape" in op_names(m, "bn")


def test_the_ops_option_limits_what_is_decomposed():
    m = run_and_compare(parse_module(COMPOSITES), "decompose{ops=lz.softmax,lz.batch_norm}")
    assert composite_names(m) == ["lz.log_softmax", "lz.layer_norm"]


def test_the_dialect_has_composites_to_decompose():
    assert {"lz.softmax", "lz.log_softmax", "lz.layer_norm", "lz.batch_norm"} <= {
        name for name, d in registered_ops().items() if d.has_trait(COMPOSITE)}


def test_a_declared_dynamic_result_type_is_kept():
    m = parse_module("""
    func.func @f(%x: tensor<2x4xf32>) -> tensor<?x4xf32> {
      %0 = "lz.softmax"(%x) : (tensor<2x4xf32>) -> tensor<?x4xf32>
      func.return %0 : tensor<?x4xf32>
    }""")
    run_and_compare(m, "decompose")
    assert composite_names(m) == [] and m.lookup("f").return_op.operands[0].type.shape == (None, 4)


def test_a_decomposition_of_the_wrong_type_is_an_error(monkeypatch):
    softmax = registered_ops()["lz.softmax"]
    monkeypatch.setattr(type(softmax), "decompose", lambda self, b, op, attrs: [b.op("lz.reduce_sum", op.operands[0])])
    m = parse_module("""
    func.func @f(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
      %0 = "lz.softmax"(%x) : (tensor<2x4xf32>) -> tensor<2x4xf32>
      func.return %0 : tensor<2x4xf32>
    }""", filename="t.mlir")
    with pytest.raises(PassError) as info:
        run_pipeline(m, "decompose")
    assert info.value.message == ("pass 'decompose' failed: 'lz.softmax' op decomposition returned tensor<f32> "
                                  "for a result of type tensor<2x4xf32>")
    assert info.value.location.describe().startswith("t.mlir:3:")
