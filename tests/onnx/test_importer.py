"""The ONNX importer (``lezero.onnx.import_model``), ``lezero.onnx.compile`` and the backend:
the module's shape and names, locations, constants folded at import, dynamic dims, value-
dependent shapes, external data, and the errors for bad, unsafe and unsupported models."""
from __future__ import annotations

import os
import unittest

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import lezero.onnx
from lezero.ir import print_module
from lezero.ir.location import NameLoc
from lezero.onnx import (FeedError, OnnxError, UnsupportedError, ValueDependentError, compile, import_model,
                         supported_operators)

F = TensorProto.FLOAT


def model(nodes, inputs, outputs, initializers=(), opset=17, **kwargs):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **kwargs)


def tensor(name, shape, elem=F):
    return helper.make_tensor_value_info(name, elem, shape)


def mlp():
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "w")
    b = numpy_helper.from_array(np.array([1, -2, 3, -4], np.float32), "b")
    nodes = [helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1, name="fc"),
             helper.make_node("Relu", ["h"], ["y"])]
    return model(nodes, [tensor("x", ["batch", 3])], [tensor("y", ["batch", 4])], [w, b])


def ort_run(proto, feeds):
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)


# --- the module -------------------------------------------------------------------------------------

def test_main_takes_the_non_initializer_inputs_and_names_them():
    m = mlp()
    m.graph.input.extend([tensor("w", [4, 3])])  # an initializer listed as an input stays a constant
    module = import_model(m)
    func = module.lookup("main")
    assert [str(a.type) for a in func.arguments] == ["tensor<?x3xf32>"]
    assert [str(t) for t in func.function_type.results] == ["tensor<?x4xf32>"]
    assert [a.value for a in func.attributes["lz.input_names"].values] == ["x"]
    assert [a.value for a in func.attributes["lz.output_names"].values] == ["y"]
    names = [op.name for op in func.entry_block.ops]
    assert names.count("lz.constant") == 2 and "lz.matmul" in names and "lz.relu" in names


def test_every_op_is_located_at_its_onnx_node():
    func = import_model(mlp()).lookup("main")
    located = {op.name: op.location for op in func.entry_block.ops if op.name != "func.return"}
    assert located["lz.matmul"] == NameLoc("fc") and located["lz.add"] == NameLoc("fc")
    assert located["lz.relu"] == NameLoc("Relu_1")  # a nameless node: <op_type>_<index>
    assert 'loc("fc")' in print_module(import_model(mlp()), debuginfo=True)


def test_dynamic_dims_stay_dynamic_and_compile_per_shape():
    m = mlp()
    compiled = compile(m)
    for batch in (1, 5):
        x = np.random.default_rng(batch).standard_normal((batch, 3)).astype(np.float32)
        got = compiled.run({"x": x})["y"]
        np.testing.assert_allclose(got, ort_run(m, {"x": x})[0], rtol=1e-5, atol=1e-6)


def test_shape_subgraphs_fold_to_a_static_reshape():
    """Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1])): the shape arithmetic runs at import."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "axes"], ["n1"]),
             helper.make_node("Concat", ["n1", "minus_one"], ["target"], axis=0),
             helper.make_node("Cast", ["target"], ["target64"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["x", "target64"], ["y"])]
    consts = [numpy_helper.from_array(np.array(0, np.int64), "zero"),
              numpy_helper.from_array(np.array([0], np.int64), "axes"),
              numpy_helper.from_array(np.array([-1], np.int64), "minus_one")]
    m = model(nodes, [tensor("x", [2, 3, 4])], [tensor("y", None)], consts)
    func = import_model(m).lookup("main")
    assert [op.name for op in func.entry_block.ops] == ["lz.reshape", "func.return"]
    assert str(func.function_type.results[0]) == "tensor<2x12xf32>"


def test_opsets_before_11_are_refused_unless_upgraded():
    m = model([helper.make_node("Relu", ["x"], ["y"])], [tensor("x", [2])], [tensor("y", [2])], opset=9)
    with pytest.raises(UnsupportedError, match="opset 9 .* opset 11 and later"):
        import_model(m)
    module = import_model(m, upgrade_opset=True)
    assert "lz.relu" in print_module(module)


def test_model_local_functions_are_inlined():
    body = [helper.make_node("Mul", ["a", "a"], ["sq"]), helper.make_node("Add", ["sq", "a"], ["out"])]
    fn = helper.make_function("custom", "SquarePlus", ["a"], ["out"], body, [helper.make_opsetid("", 17)])
    m = helper.make_model(helper.make_graph([helper.make_node("SquarePlus", ["x"], ["y"], domain="custom",
                                                              name="call")],
                                            "g", [tensor("x", [3])], [tensor("y", [3])]),
                          opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("custom", 1)],
                          functions=[fn])
    func = import_model(m).lookup("main")
    assert {op.location for op in func.entry_block.ops if op.name == "lz.mul"} == {NameLoc("call/Mul_0")}
    x = np.array([1, 2, 3], np.float32)
    np.testing.assert_array_equal(compile(m).run({"x": x})["y"], x * x + x)


# --- values known only at run time ------------------------------------------------------------------

def reshape_by_input():
    return model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")],
                 [tensor("x", [2, 6]), tensor("shape", [2], TensorProto.INT64)], [tensor("y", None)])


def test_a_shape_from_a_graph_input_names_the_input():
    with pytest.raises(ValueDependentError, match=r"node 'r' \(Reshape\): the target shape .*graph input 'shape'") as e:
        import_model(reshape_by_input())
    assert e.value.inputs == ("shape",)
    func = import_model(reshape_by_input(), constant_inputs={"shape": np.array([3, 4])}).lookup("main")
    assert [a.value for a in func.attributes["lz.input_names"].values] == ["x"]
    assert str(func.function_type.results[0]) == "tensor<3x4xf32>"


def test_compile_specializes_on_shape_inputs_per_value():
    compiled = compile(reshape_by_input())
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    assert compiled.run({"x": x, "shape": np.array([3, 4])})["y"].shape == (3, 4)
    assert compiled.run({"x": x, "shape": np.array([12, 1])})["y"].shape == (12, 1)
    assert compiled.value_inputs == ("shape",) and len(compiled._programs) == 2


# --- compile and feeds ---------------------------------------------------------------------------------

def test_compiled_model_names_its_inputs_and_outputs():
    compiled = compile(mlp())
    assert compiled.input_names == ["x"] and compiled.output_names == ["y"]


@pytest.mark.parametrize("feeds, message", [
    ({"x": np.ones((1, 3), np.float32), "z": np.ones(1)}, "unknown input 'z'; the model's inputs are 'x'"),
    ({}, "missing input 'x'"),
    ({"x": np.ones((1, 3), np.float64)}, "input 'x' expects tensor<\\?x3xf32> .*dtype float64"),
    ({"x": np.ones((1, 4), np.float32)}, "input 'x' expects tensor<\\?x3xf32>, got an array of shape \\(1, 4\\)"),
])
def test_bad_feeds_are_named(feeds, message):
    with pytest.raises(FeedError, match=message):
        compile(mlp()).run(feeds)


# --- bad and unsafe models -------------------------------------------------------------------------

def test_garbage_truncated_empty_and_missing_files(tmp_path):
    good = mlp().SerializeToString()
    (tmp_path / "garbage.onnx").write_bytes(b"\xff\xfe not a protobuf \x00" * 10)
    (tmp_path / "truncated.onnx").write_bytes(good[: len(good) // 2])
    (tmp_path / "empty.onnx").write_bytes(b"")
    for name, message in (("garbage", "not a valid ONNX model"), ("truncated", "not a valid ONNX model|no graph"),
                          ("empty", "the file is empty"), ("missing", "cannot read ONNX model")):
        with pytest.raises(OnnxError, match=message) as e:
            import_model(tmp_path / f"{name}.onnx")
        assert str(e.value).startswith(f"{tmp_path / name}.onnx: error: ")


def test_unknown_operator_names_node_and_op():
    m = model([helper.make_node("Frobnicate", ["x"], ["y"], name="n7")], [tensor("x", [2])], [tensor("y", [2])])
    with pytest.raises(UnsupportedError, match="node 'n7': ONNX operator Frobnicate is not supported") as e:
        import_model(m)
    assert e.value.location == NameLoc("n7")
    m = model([helper.make_node("Relu", ["x"], ["y"], domain="com.example")], [tensor("x", [2])], [tensor("y", [2])])
    with pytest.raises(UnsupportedError, match="com.example::Relu"):
        import_model(m)


def test_unsupported_attribute_and_undefined_input_name_the_node():
    m = model([helper.make_node("Relu", ["x"], ["y"], name="act", flavor=3)], [tensor("x", [2])], [tensor("y", [2])])
    with pytest.raises(UnsupportedError, match="node 'act' \\(Relu\\): attribute 'flavor' is not supported"):
        import_model(m)
    m = model([helper.make_node("Add", ["x", "nowhere"], ["y"], name="sum")], [tensor("x", [2])], [tensor("y", [2])])
    with pytest.raises(OnnxError, match="node 'sum' \\(Add\\) reads 'nowhere', which no earlier node"):
        import_model(m)


def test_unsupported_element_types_and_bad_shapes_name_what():
    m = model([helper.make_node("Identity", ["x"], ["y"])], [tensor("x", [2], TensorProto.STRING)], [tensor("y", [2])])
    with pytest.raises(UnsupportedError, match="graph input 'x' has element type STRING"):
        import_model(m)
    m = model([helper.make_node("Add", ["x", "x2"], ["y"], name="bad")],
              [tensor("x", [2, 3]), tensor("x2", [4, 3])], [tensor("y", None)])
    with pytest.raises(OnnxError, match="node 'bad' \\(Add\\): 'lz.add' op operand shapes 2x3 and 4x3"):
        import_model(m)


def test_supported_operators_lists_the_table():
    ops = supported_operators()
    assert {"Conv", "Gemm", "Resize", "Attention", "ai.onnx.preview.training::Adam"} <= set(ops)
    assert len(ops) > 150


# --- external data --------------------------------------------------------------------------------------

def external_model(tmp_path, location=None):
    w = numpy_helper.from_array(np.arange(1024, dtype=np.float32).reshape(32, 32), "weights")
    m = model([helper.make_node("MatMul", ["x", "weights"], ["y"])], [tensor("x", [1, 32])], [tensor("y", [1, 32])],
              [w])
    path = tmp_path / "model.onnx"
    onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True, location="weights.bin",
                    size_threshold=0)
    if location is not None:
        m = onnx.load(path, load_external_data=False)
        for entry in m.graph.initializer[0].external_data:
            if entry.key == "location":
                entry.value = location
        onnx.save_model(m, path)
    return path


def test_external_data_is_read_from_the_models_folder(tmp_path):
    path = external_model(tmp_path)
    x = np.ones((1, 32), np.float32)
    want = x @ np.arange(1024, dtype=np.float32).reshape(32, 32)
    np.testing.assert_allclose(compile(path).run({"x": x})["y"], want)
    proto = onnx.load(path, load_external_data=False)
    with pytest.raises(OnnxError, match="external data, but it was given as a ModelProto without base_dir"):
        import_model(proto)
    np.testing.assert_allclose(compile(proto, base_dir=tmp_path).run({"x": x})["y"], want)


@pytest.mark.parametrize("location, message", [
    ("../weights.bin", "outside the model's folder"),
    ("sub/../../weights.bin", "outside the model's folder"),
    ("/etc/passwd", "absolute path"),
    ("missing.bin", "does not exist"),
])
def test_external_data_outside_the_folder_is_refused(tmp_path, location, message):
    folder = tmp_path / "model"
    folder.mkdir()
    path = external_model(folder, location)
    with pytest.raises(OnnxError, match=f"tensor 'weights'.*{message}"):
        import_model(path)


def test_external_data_through_a_symlink_out_of_the_folder_is_refused(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    path = external_model(folder)
    os.replace(folder / "weights.bin", tmp_path / "outside.bin")
    os.symlink(tmp_path / "outside.bin", folder / "weights.bin")
    with pytest.raises(OnnxError, match="tensor 'weights'.*outside the model's folder"):
        import_model(path)


# --- the backend -------------------------------------------------------------------------------------

def test_backend_runs_models_and_nodes_on_the_cpu_only():
    backend = lezero.onnx.backend
    assert backend.supports_device("CPU") and not backend.supports_device("CUDA")
    x = np.array([[-1.0, 2.0, -3.0]], np.float32)
    (y,) = backend.run_model(mlp(), [x])
    np.testing.assert_allclose(y, ort_run(mlp(), {"x": x})[0], rtol=1e-6)
    (z,) = backend.run_node(helper.make_node("Sigmoid", ["a"], ["b"]), [x])
    np.testing.assert_allclose(z, 1 / (1 + np.exp(-x)), rtol=1e-6)


def test_onnx_backend_test_runs_against_lezero(monkeypatch):
    import onnx.backend.test
    import onnx.backend.test.runner as runner

    # The cases below are model-directory cases; the runner would also generate its ~1,900 node cases
    # (running every op's expect code: 23 s of a loaded run) to skip them all: they are
    # tests/onnx/test_conformance.py's.
    load = runner.load_model_tests
    monkeypatch.setattr(runner, "load_model_tests", lambda kind: [] if kind == "node" else load(kind=kind))
    suite = onnx.backend.test.BackendTest(lezero.onnx.backend, __name__)
    suite.include(r"^test_(operator_(relu|maxpool|add_broadcast)|Conv2d|Softmax|AvgPool2d|Linear)_cpu$")
    tests = unittest.TestSuite(
        unittest.defaultTestLoader.loadTestsFromTestCase(case) for case in suite.test_cases.values())
    result = unittest.TextTestRunner(verbosity=0).run(tests)
    assert result.testsRun >= 6 and result.wasSuccessful(), result.failures + result.errors


def test_a_graph_computing_with_a_dynamic_dim_compiles_per_input_shape():
    """Flatten as PyTorch exports it with a dynamic batch: Reshape(x, Concat(Shape(x)[0:1], [-1]))."""
    nodes = [helper.make_node("Shape", ["x"], ["s"], end=1, name="shape"),
             helper.make_node("Concat", ["s", "minus_one"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["y"])]
    m = model(nodes, [tensor("x", ["n", 2, 3])], [tensor("y", ["n", 6])],
              [numpy_helper.from_array(np.array([-1], np.int64), "minus_one")])
    with pytest.raises(lezero.onnx.DynamicShapeError, match="node 'shape' \\(Shape\\): the shape of tensor<\\?x2x3xf32>"):
        import_model(m)
    compiled = compile(m)
    for n in (1, 4):
        x = np.arange(n * 6, dtype=np.float32).reshape(n, 2, 3)
        np.testing.assert_array_equal(compiled.run({"x": x})["y"], x.reshape(n, 6))
    assert compiled.shape_specialized


def test_a_converter_surprised_by_an_attribute_still_names_the_node():
    m = model([helper.make_node("Concat", ["x", "x"], ["y"], name="join", axis="zero")], [tensor("x", [2])],
              [tensor("y", [4])])
    with pytest.raises(OnnxError, match="node 'join' \\(Concat\\): cannot convert: TypeError"):
        import_model(m)


def test_an_if_on_a_shape_is_decided_at_import():
    then_graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"])], "then", [], [tensor("r", [2, 3])])
    else_graph = helper.make_graph([helper.make_node("Neg", ["x"], ["r"])], "else", [], [tensor("r", [2, 3])])
    nodes = [helper.make_node("Size", ["x"], ["n"]),
             helper.make_node("Equal", ["n", "six"], ["is_six"]),
             helper.make_node("If", ["is_six"], ["y"], then_branch=then_graph, else_branch=else_graph, name="branch")]
    m = model(nodes, [tensor("x", [2, 3])], [tensor("y", [2, 3])], [numpy_helper.from_array(np.array(6, np.int64), "six")])
    func = import_model(m).lookup("main")
    assert [op.name for op in func.entry_block.ops] == ["lz.relu", "func.return"]
    assert func.entry_block.ops[0].location == NameLoc("branch/then_branch/Relu_0")
