"""The converter registry (``lezero.onnx.registry``): the converter with the greatest ``since`` at
or below the node's opset converts it, below every ``since`` the operator is unsupported, the
listed converter modules are all the families in ``lezero/onnx/ops`` and they all load."""
from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest
from onnx import TensorProto, helper

import lezero.onnx
from lezero.onnx import UnsupportedError, import_model, registry, supported_operators

F = TensorProto.FLOAT
DOMAIN = "test.registry"


def model(nodes, inputs, outputs, opsets):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets.items()])


def tensor(name, shape):
    return helper.make_tensor_value_info(name, F, shape)


@pytest.fixture
def toy_converters(monkeypatch):
    """``test.registry::Toy``: ``neg`` from opset 5, ``abs`` from opset 9 (registered into a copy
    of the table, which the test then drops)."""
    registry.converters()  # load the real converters first, into the real table
    monkeypatch.setattr(registry, "_CONVERTERS", dict(registry._CONVERTERS))

    @registry.converter("Toy", since=9, domain=DOMAIN)
    def toy_abs(ctx):
        return ctx.op("lz.abs", ctx.input(0))

    @registry.converter("Toy", since=5, domain=DOMAIN)
    def toy_neg(ctx):
        return ctx.op("lz.neg", ctx.input(0))

    return toy_neg, toy_abs


def toy_model(version):
    return model([helper.make_node("Toy", ["x"], ["y"], domain=DOMAIN, name="toy")], [tensor("x", [3])],
                 [tensor("y", [3])], {"": 17, DOMAIN: version})


@pytest.mark.parametrize("version, op", [(5, "lz.neg"), (8, "lz.neg"), (9, "lz.abs"), (20, "lz.abs")])
def test_the_greatest_since_at_or_below_the_opset_converts(toy_converters, version, op):
    toy_neg, toy_abs = toy_converters
    assert registry.versions_of(DOMAIN, "Toy") == ((5, toy_neg), (9, toy_abs))  # sorted, whatever the order
    names = [o.name for o in import_model(toy_model(version)).lookup("main").entry_block.ops]
    assert op in names


def test_an_opset_below_every_since_is_unsupported_naming_the_node(toy_converters):
    with pytest.raises(UnsupportedError, match=r"node 'toy': ONNX operator test.registry::Toy is not supported by "
                                               r"lezero before opset 5 \(this model imports opset 4\)"):
        import_model(toy_model(4))
    assert registry.converter_at(registry.versions_of(DOMAIN, "Toy"), 4) is None


def test_two_converters_from_one_opset_are_refused(toy_converters):
    with pytest.raises(ValueError, match="ONNX operator Toy has two converters from opset 5"):
        registry.converter("Toy", since=5, domain=DOMAIN)(lambda ctx: None)


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_reads_axes_from_the_attribute_then_the_input(opset):
    """Squeeze's ``axes`` is an attribute before opset 13 and an input from it: two converters."""
    if opset < 13:
        node = helper.make_node("Squeeze", ["x"], ["y"], axes=[1])
        inits = []
    else:
        node = helper.make_node("Squeeze", ["x", "axes"], ["y"])
        inits = [helper.make_tensor("axes", TensorProto.INT64, [1], [1])]
    graph = helper.make_graph([node], "g", [tensor("x", [2, 1, 3])], [tensor("y", [2, 3])], initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    compiled = lezero.onnx.compile(m)
    x = np.arange(6, dtype=np.float32).reshape(2, 1, 3)
    np.testing.assert_array_equal(compiled.run({"x": x})["y"], x.reshape(2, 3))
    assert [since for since, _ in registry.versions_of("", "Squeeze")] == [1, 13]


def test_every_family_in_ops_is_listed_and_loaded():
    families = {p.stem for p in pathlib.Path(registry.__file__).with_name("ops").glob("*.py")} - {"__init__",
                                                                                                  "common"}
    assert set(registry.CONVERTER_MODULES) == families
    registry.converters()
    assert all(f"lezero.onnx.ops.{family}" in sys.modules for family in registry.CONVERTER_MODULES)


def test_every_registered_operator_is_in_the_support_table():
    table = registry.converters()
    listed = set(supported_operators())
    assert {f"{d}::{t}" if d else t for d, t in table} == listed
    assert lezero.onnx.CONVERTERS == table
    assert all(versions and all(callable(fn) for _, fn in versions) for versions in table.values())
