"""ONNX Loop, Scan and If imported as lz.for / lz.while / lz.if (``lezero/onnx/ops/control_flow.py``),
compiled and compared with ONNX Runtime; and the same modules exported back to ONNX
(``lezero/onnx/export.py``: lz.for as Scan or Loop, lz.while as Loop, lz.if as If), checked by
``onnx.checker`` and run in ONNX Runtime."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import lezero.onnx as lo
from lezero.onnx import UnsupportedError

F = TensorProto.FLOAT
I64 = TensorProto.INT64
B = TensorProto.BOOL


def _model(nodes, inputs, outputs, initializers=(), opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def _ort(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _ops(module):
    return [op.name for op in module.functions[0].entry_block.ops]


def check(model, feeds, expect_op):
    """lezero equals ONNX Runtime on ``model``, which imports to ``expect_op``; so does the module
    exported back to ONNX."""
    want = _ort(model, feeds)
    module = lo.import_model(model)
    assert expect_op in _ops(module)
    got = list(lo.compile(model).run(feeds).values())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    exported = lo.to_onnx(module, input_names=[i.name for i in model.graph.input if i.name in feeds])
    again = _ort(exported, feeds)
    for g, w in zip(again, want):
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)
    return module


def _loop_body(cond_out_node=None):
    """Body (i, cond, acc[3]) -> (cond, acc + w * i, acc * 2); ``w`` from the outer scope."""
    nodes = [helper.make_node("Cast", ["i"], ["i_f"], to=F),
             helper.make_node("Mul", ["w", "i_f"], ["wi"]),
             helper.make_node("Add", ["acc", "wi"], ["acc_out"]),
             helper.make_node("Add", ["acc", "acc"], ["doubled"])]
    if cond_out_node is None:
        nodes.append(helper.make_node("Identity", ["cond"], ["cond_out"]))
    else:
        nodes += cond_out_node
    return helper.make_graph(
        nodes, "body",
        [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond", B, []),
         helper.make_tensor_value_info("acc", F, [3])],
        [helper.make_tensor_value_info("cond_out", B, []), helper.make_tensor_value_info("acc_out", F, [3]),
         helper.make_tensor_value_info("doubled", F, [3])])


def test_loop_with_a_static_trip_count_is_a_for_with_scan_outputs_and_outer_values():
    trip = helper.make_tensor("M", I64, [], [5])
    model = _model([helper.make_node("Loop", ["M", "", "acc0"], ["acc", "stack"], body=_loop_body())],
                   [helper.make_tensor_value_info("acc0", F, [3]), helper.make_tensor_value_info("w", F, [3])],
                   [helper.make_tensor_value_info("acc", F, [3]), helper.make_tensor_value_info("stack", F, [5, 3])],
                   [trip])
    feeds = {"acc0": np.array([1, 2, 3], np.float32), "w": np.array([0.5, -1, 2], np.float32)}
    module = check(model, feeds, "lz.for")
    loop = next(op for op in module.functions[0].entry_block.ops if op.name == "lz.for")
    assert loop.attributes["trip_count"].value == 5 and loop.attributes["num_invariant"].value == 1


def test_loop_whose_body_computes_its_condition_is_a_while():
    # runs while sum(acc) < 40 (and at most M = 100 times)
    stop = [helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
            helper.make_node("Less", ["total", "limit"], ["cond_out"])]
    body = _loop_body(stop)
    body.output.pop()  # no scan output
    body.node.pop(3)
    trip = helper.make_tensor("M", I64, [], [100])
    limit = helper.make_tensor("limit", F, [], [40.0])
    model = _model([helper.make_node("Loop", ["M", "c0", "acc0"], ["acc"], body=body)],
                   [helper.make_tensor_value_info("c0", B, []), helper.make_tensor_value_info("acc0", F, [3]),
                    helper.make_tensor_value_info("w", F, [3])],
                   [helper.make_tensor_value_info("acc", F, [3])], [trip, limit])
    for c0 in (True, False):
        feeds = {"c0": np.array(c0), "acc0": np.array([1, 2, 3], np.float32), "w": np.array([0.5, 1, 2], np.float32)}
        check(model, feeds, "lz.while")


def test_loop_with_a_run_time_trip_count_is_a_while():
    body = _loop_body()
    body.output.pop()
    body.node.pop(3)
    model = _model([helper.make_node("Loop", ["M", "", "acc0"], ["acc"], body=body)],
                   [helper.make_tensor_value_info("M", I64, []), helper.make_tensor_value_info("acc0", F, [3]),
                    helper.make_tensor_value_info("w", F, [3])],
                   [helper.make_tensor_value_info("acc", F, [3])])
    for m in (0, 1, 4):
        check(model, {"M": np.array(m, np.int64), "acc0": np.ones(3, np.float32), "w": np.arange(3, dtype=np.float32)},
              "lz.while")


def test_loop_with_scan_outputs_and_a_run_time_condition_is_refused_naming_the_node():
    stop = [helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
            helper.make_node("Less", ["total", "limit"], ["cond_out"])]
    model = _model([helper.make_node("Loop", ["M", "", "acc0"], ["acc", "stack"], body=_loop_body(stop),
                                     name="the_loop")],
                   [helper.make_tensor_value_info("acc0", F, [3]), helper.make_tensor_value_info("w", F, [3])],
                   [helper.make_tensor_value_info("acc", F, [3]), helper.make_tensor_value_info("stack", F, [5, 3])],
                   [helper.make_tensor("M", I64, [], [5]), helper.make_tensor("limit", F, [], [40.0])])
    model.graph.node[0].input[1] = "c0"
    model.graph.input.append(helper.make_tensor_value_info("c0", B, []))
    with pytest.raises(lo.ValueDependentError, match="the_loop"):
        lo.import_model(model)
    with pytest.raises(UnsupportedError, match="the_loop.*scan outputs"):
        lo.import_model(model, constant_inputs={"c0": np.array(True)})


def test_scan_with_axes_and_directions():
    # state s[2]; inputs a (scanned along axis 1, reversed) and b (axis 0); outputs s and s * b
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "a"], ["s1"]), helper.make_node("Mul", ["s1", "b"], ["s_out"]),
         helper.make_node("Mul", ["s_out", "k"], ["y"])],
        "body", [helper.make_tensor_value_info(n, F, [2]) for n in ("s", "a", "b")],
        [helper.make_tensor_value_info("s_out", F, [2]), helper.make_tensor_value_info("y", F, [2])])
    node = helper.make_node("Scan", ["s0", "a", "b"], ["s", "ys"], body=body, num_scan_inputs=2,
                            scan_input_axes=[1, 0], scan_input_directions=[1, 0], scan_output_axes=[1],
                            scan_output_directions=[1])
    model = _model([node], [helper.make_tensor_value_info("s0", F, [2]), helper.make_tensor_value_info("a", F, [2, 4]),
                            helper.make_tensor_value_info("b", F, [4, 2]), helper.make_tensor_value_info("k", F, [2])],
                   [helper.make_tensor_value_info("s", F, [2]), helper.make_tensor_value_info("ys", F, [2, 4])])
    rng = np.random.default_rng(0)
    feeds = {"s0": np.array([1, -1], np.float32), "a": rng.standard_normal((2, 4)).astype(np.float32),
             "b": rng.standard_normal((4, 2)).astype(np.float32), "k": np.array([2, 3], np.float32)}
    check(model, feeds, "lz.for")


def _scan8_model(sequence_lens=None):
    """Opset 8: Scan over a batch of 3, a state s[3,2] and scan inputs a, b [3,4,2] (b reversed);
    the body reads the outer ``k``: s' = (s + a) * b, y = s' * k."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s", "a"], ["s1"]), helper.make_node("Mul", ["s1", "b"], ["s_out"]),
         helper.make_node("Mul", ["s_out", "k"], ["y"])],
        "body", [helper.make_tensor_value_info(n, F, [2]) for n in ("s", "a", "b")],
        [helper.make_tensor_value_info("s_out", F, [2]), helper.make_tensor_value_info("y", F, [2])])
    initializers = [] if sequence_lens is None else [helper.make_tensor("lens", I64, [3], sequence_lens)]
    node = helper.make_node("Scan", ["" if sequence_lens is None else "lens", "s0", "a", "b"], ["s", "ys"], body=body,
                            num_scan_inputs=2, directions=[0, 1])
    inputs = [helper.make_tensor_value_info("s0", F, [3, 2]), helper.make_tensor_value_info("a", F, [3, 4, 2]),
              helper.make_tensor_value_info("b", F, [3, 4, 2]), helper.make_tensor_value_info("k", F, [2])]
    return _model([node], inputs,
                  [helper.make_tensor_value_info("s", F, [3, 2]), helper.make_tensor_value_info("ys", F, [3, 4, 2])],
                  initializers, opset=8)


def _scan8_feeds():
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((3, 4, 2)).astype(np.float32) for _ in range(2))
    return {"s0": rng.standard_normal((3, 2)).astype(np.float32), "a": a, "b": b, "k": np.array([2, -3], np.float32)}


def _scan8_reference(feeds):
    s, ys = feeds["s0"].copy(), []
    for t in range(4):
        s = (s + feeds["a"][:, t]) * feeds["b"][:, 3 - t]
        ys.append(s * feeds["k"])
    return s, np.stack(ys, axis=1)


@pytest.mark.parametrize("sequence_lens", [None, [4, 4, 4]])
def test_scan8_keeps_its_batch_axis_an_outer_for_over_the_batch(sequence_lens):
    model, feeds = _scan8_model(sequence_lens), _scan8_feeds()
    want = _ort(model, feeds)
    for w, r in zip(want, _scan8_reference(feeds)):
        np.testing.assert_allclose(w, r, rtol=1e-5, atol=1e-6)
    module = lo.import_model(model, upgrade_opset=True)
    outer = [op for op in module.functions[0].entry_block.ops if op.name == "lz.for"]
    assert len(outer) == 1 and outer[0].attributes["trip_count"].value == 3
    got = list(lo.compile(model, upgrade_opset=True).run(feeds).values())
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-6, atol=1e-6)


def test_scan8_with_short_sequence_lens_is_refused_naming_the_node():
    with pytest.raises(UnsupportedError, match=r"Scan.*sequence_lens \[4, 2, 4\]"):
        lo.import_model(_scan8_model([4, 2, 4]), upgrade_opset=True)


def _loop_slicing_at_the_index(size, axis, count, shift):
    """Loop of 5 iterations whose scan output is ``Slice(x, i - shift, i - shift + count)`` along
    ``axis`` of x (``size`` long there, 3 along the other axis)."""
    shape, rows = ([size, 3], [count, 3]) if axis == 0 else ([3, size], [3, count])
    body = helper.make_graph(
        [helper.make_node("Sub", ["i", "shift"], ["start0"]),
         helper.make_node("Unsqueeze", ["start0", "zero"], ["start"]),
         helper.make_node("Add", ["start", "count"], ["end"]),
         helper.make_node("Slice", ["x", "start", "end", "axis"], ["rows"]),
         helper.make_node("Identity", ["cond"], ["cond_out"])],
        "body", [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond", B, [])],
        [helper.make_tensor_value_info("cond_out", B, []), helper.make_tensor_value_info("rows", F, rows)])
    constants = [helper.make_tensor("M", I64, [], [5]), helper.make_tensor("shift", I64, [], [shift]),
                 helper.make_tensor("zero", I64, [1], [0]), helper.make_tensor("count", I64, [1], [count]),
                 helper.make_tensor("axis", I64, [1], [axis])]
    loop = helper.make_node("Loop", ["M", ""], ["stack"], body=body)
    return _model([loop], [helper.make_tensor_value_info("x", F, shape)],
                  [helper.make_tensor_value_info("stack", F, [5] + rows)], constants), shape


@pytest.mark.parametrize("axis,count,shift", [(0, 1, 0), (0, 2, 0), (1, 2, 0), (0, 1, 6)])
def test_slice_starting_at_the_loop_index_is_a_gather_of_rows_in_range(axis, count, shift):
    model, shape = _loop_slicing_at_the_index(6, axis, count, shift)
    feeds = {"x": np.random.default_rng(2).standard_normal(shape).astype(np.float32)}
    module = check(model, feeds, "lz.for")
    loop = next(op for op in module.functions[0].entry_block.ops if op.name == "lz.for")
    assert "lz.gather" in [op.name for op in loop.regions[0].blocks[0].ops]
    got = lo.compile(model).run(feeds)["stack"]
    want = np.stack([np.take(feeds["x"], range(i - shift, i - shift + count), axis=axis) for i in range(5)])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("count,shift", [(2, 0), (1, 3)])
def test_slice_starting_at_the_loop_index_that_onnx_would_clamp_is_refused(count, shift):
    # rows 4..5 of 5 (clamped to one row by ONNX), or starts -3..1 crossing zero
    with pytest.raises(UnsupportedError, match="starts must be known"):
        lo.import_model(_loop_slicing_at_the_index(5, 0, count, shift)[0])


def _branch(name, op_type, output):
    return helper.make_graph([helper.make_node(op_type, ["x", "y"], [output])], name, [],
                             [helper.make_tensor_value_info(output, F, [2, 3])])


def test_if_on_a_run_time_condition_is_an_lz_if_reading_outer_values():
    node = helper.make_node("If", ["c"], ["z"], then_branch=_branch("then", "Add", "t"),
                            else_branch=_branch("else", "Mul", "e"))
    model = _model([node], [helper.make_tensor_value_info("c", B, [1]), helper.make_tensor_value_info("x", F, [2, 3]),
                            helper.make_tensor_value_info("y", F, [2, 3])],
                   [helper.make_tensor_value_info("z", F, [2, 3])])
    x, y = np.arange(6, dtype=np.float32).reshape(2, 3), np.full((2, 3), 3, np.float32)
    for c in (True, False):
        check(model, {"c": np.array([c]), "x": x, "y": y}, "lz.if")


def test_if_whose_branches_compute_different_shapes_is_refused():
    then = helper.make_graph([helper.make_node("Identity", ["x"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", F, [2, 3])])
    other = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["e"], keepdims=0)], "else", [],
                              [helper.make_tensor_value_info("e", F, [])])
    model = _model([helper.make_node("If", ["c"], ["z"], then_branch=then, else_branch=other, name="pick")],
                   [helper.make_tensor_value_info("c", B, []), helper.make_tensor_value_info("x", F, [2, 3])],
                   [helper.make_tensor_value_info("z", F, [2, 3])])
    with pytest.raises(UnsupportedError, match="pick.*different types"):
        lo.import_model(model)


def test_loop_body_with_a_nested_if_on_the_iteration_number():
    # acc += x on even iterations, acc -= x on odd ones; x is read two scopes out
    parity = [helper.make_node("Mod", ["i", "two"], ["r"]), helper.make_node("Equal", ["r", "zero"], ["even"])]
    nested = helper.make_node(
        "If", ["even"], ["acc_out"],
        then_branch=helper.make_graph([helper.make_node("Add", ["acc", "x"], ["p"])], "then", [],
                                      [helper.make_tensor_value_info("p", F, [3])]),
        else_branch=helper.make_graph([helper.make_node("Sub", ["acc", "x"], ["m"])], "else", [],
                                      [helper.make_tensor_value_info("m", F, [3])]))
    body = helper.make_graph(parity + [nested, helper.make_node("Identity", ["cond"], ["cond_out"])], "body",
                             [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond", B, []),
                              helper.make_tensor_value_info("acc", F, [3])],
                             [helper.make_tensor_value_info("cond_out", B, []),
                              helper.make_tensor_value_info("acc_out", F, [3])],
                             [helper.make_tensor("two", I64, [], [2]), helper.make_tensor("zero", I64, [], [0])])
    model = _model([helper.make_node("Loop", ["M", "", "acc0"], ["acc"], body=body)],
                   [helper.make_tensor_value_info("acc0", F, [3]), helper.make_tensor_value_info("x", F, [3])],
                   [helper.make_tensor_value_info("acc", F, [3])], [helper.make_tensor("M", I64, [], [7])])
    check(model, {"acc0": np.zeros(3, np.float32), "x": np.array([1, 2, 3], np.float32)}, "lz.for")
