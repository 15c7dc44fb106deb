"""ONNX models with loops as native executables (issue 17): LSTM and GRU (lz.for per direction, the
recurrent weight packed at build time), Loop with a data-dependent trip count and condition (an
lz.while whose condition the executable reads between iterations), Scan, If, and an If nested in
a Loop, built by ``lezero-compile`` and run without Python, against ONNX Runtime; an LSTM built
for AArch64 and run under qemu."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import lezero as lz
import lezero.onnx as lo
from lezero.ir.interpreter import interpret
from lezero.onnx.native import compile_onnx_native
from lezero.runtime.cpu import BoundHostStep

from support.native_testing import QEMU, TRIPLE, cross_tools, onnxruntime_outputs, run_outputs  # noqa: F401
from test_control_flow_import import _branch, _loop_body, _model
from test_recurrent import feeds_of, layer_model

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _check(tmp_path, model, feeds, rtol=1e-5, atol=1e-6, command=(), **build):
    result = compile_onnx_native(model, tmp_path / "model", **build)
    got = run_outputs(list(command), result, tmp_path, feeds)
    want = onnxruntime_outputs(model, feeds)
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        assert got[name].shape == w.shape and got[name].dtype == w.dtype, name
        np.testing.assert_allclose(got[name], w, rtol=rtol, atol=atol, err_msg=name)
    return result


@pytest.mark.parametrize("op_type, options", [
    ("LSTM", dict(direction="bidirectional", seq_lens=True, initial=True, peepholes=True)),
    ("GRU", dict(direction="reverse", linear_before_reset=1)),
    ("GRU", dict(initial=True)),
    ("LSTM", dict(direction="forward")),
], ids=["lstm-bidirectional-lens", "gru-reverse-lbr", "gru", "lstm"])
def test_recurrent_layer_executable_matches_onnxruntime(tmp_path, op_type, options):
    # an LSTM's body reads W_hh pre-packed: without packing at build time this is an IRError.
    # The plain LSTM's input projection and its body's recurrent GEMM are both kernels named
    # lz_fused_matmul_add_0 (names are numbered per block) with different code: each needs its own
    # symbol in the executable (one took the other's, and every output was wrong)
    model = layer_model(op_type, **options)
    _check(tmp_path, model, feeds_of(model))


def test_a_constant_weight_a_loop_body_reads_pre_packed_is_packed_once_in_the_jit_too():
    # the same encoding in this process: the plan (its LSTM loops included) is one native call,
    # W_hh packed while encoding, equal to the reference and to ONNX Runtime
    model = layer_model("LSTM", direction="bidirectional", initial=True)
    module = lo.import_model(model)
    entry = module.functions[0].sym_name
    compiled = lz.compile(module, entry)
    feeds = feeds_of(model)
    args = [feeds[i.name] for i in model.graph.input]
    plan = compiled.plan_for([a.shape for a in args])
    steps = [launch for launch in plan.launches if isinstance(launch, BoundHostStep)]
    assert len(steps) == 2 and all(s.regions[0].plan.packed_inputs for s in steps) and plan.native is not None
    got = compiled(*args)
    for g, r, w in zip(got, interpret(module, entry, *args), onnxruntime_outputs(model, feeds).values()):
        np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def _while_loop_model():
    """Loop(M, c0, acc) running while sum(acc) < limit and at most M times: M, c0 and the data
    are graph inputs, so the executable decides the trip count at run time."""
    stop = [helper.make_node("ReduceSum", ["acc_out"], ["total"], keepdims=0),
            helper.make_node("Less", ["total", "limit"], ["cond_out"])]
    body = _loop_body(stop)
    body.output.pop()  # no scan output
    body.node.pop(3)
    return _model([helper.make_node("Loop", ["M", "c0", "acc0"], ["acc"], body=body)],
                  [helper.make_tensor_value_info("M", I64, []), helper.make_tensor_value_info("c0", B, []),
                   helper.make_tensor_value_info("acc0", F, [3]), helper.make_tensor_value_info("w", F, [3])],
                  [helper.make_tensor_value_info("acc", F, [3])], [helper.make_tensor("limit", F, [], [40.0])])


def test_loop_with_a_data_dependent_trip_count_matches_onnxruntime(tmp_path):
    model = _while_loop_model()
    result = compile_onnx_native(model, tmp_path / "loop")
    for m, c0, w in ((100, True, [0.5, 1, 2]), (2, True, [0.5, 1, 2]), (100, False, [1, 1, 1]), (0, True, [1, 1, 1]),
                     (100, True, [3, 3, 3])):
        feeds = {"M": np.array(m, np.int64), "c0": np.array(c0), "acc0": np.array([1, 2, 3], np.float32),
                 "w": np.array(w, np.float32)}
        got = run_outputs([], result, tmp_path, feeds)["acc"]
        np.testing.assert_allclose(got, onnxruntime_outputs(model, feeds)["acc"], rtol=1e-6)


def test_scan_and_an_if_nested_in_a_loop_match_onnxruntime(tmp_path):
    # Scan: s <- tanh(s + a_t) * b_t with the stacked states; then a Loop of 7 whose body adds x
    # on even iterations and subtracts it on odd ones (an If on the iteration number)
    scan_body = helper.make_graph(
        [helper.make_node("Add", ["s", "a"], ["sa"]), helper.make_node("Tanh", ["sa"], ["t"]),
         helper.make_node("Mul", ["t", "b"], ["s_out"]), helper.make_node("Identity", ["s_out"], ["y"])],
        "scan_body", [helper.make_tensor_value_info(n, F, [4]) for n in ("s", "a", "b")],
        [helper.make_tensor_value_info("s_out", F, [4]), helper.make_tensor_value_info("y", F, [4])])
    parity = [helper.make_node("Mod", ["i", "two"], ["r"]), helper.make_node("Equal", ["r", "zero"], ["even"])]
    nested = helper.make_node(
        "If", ["even"], ["acc_out"],
        then_branch=helper.make_graph([helper.make_node("Add", ["acc", "x"], ["p"])], "then", [],
                                      [helper.make_tensor_value_info("p", F, [4])]),
        else_branch=helper.make_graph([helper.make_node("Sub", ["acc", "x"], ["m"])], "else", [],
                                      [helper.make_tensor_value_info("m", F, [4])]))
    loop_body = helper.make_graph(
        parity + [nested, helper.make_node("Identity", ["cond"], ["cond_out"])], "body",
        [helper.make_tensor_value_info("i", I64, []), helper.make_tensor_value_info("cond", B, []),
         helper.make_tensor_value_info("acc", F, [4])],
        [helper.make_tensor_value_info("cond_out", B, []), helper.make_tensor_value_info("acc_out", F, [4])],
        [helper.make_tensor("two", I64, [], [2]), helper.make_tensor("zero", I64, [], [0])])
    model = _model([helper.make_node("Scan", ["s0", "a", "b"], ["s", "ys"], body=scan_body, num_scan_inputs=2),
                    helper.make_node("Loop", ["M", "", "s"], ["acc"], body=loop_body)],
                   [helper.make_tensor_value_info("s0", F, [4]), helper.make_tensor_value_info("a", F, [6, 4]),
                    helper.make_tensor_value_info("b", F, [6, 4]), helper.make_tensor_value_info("x", F, [4])],
                   [helper.make_tensor_value_info("ys", F, [6, 4]), helper.make_tensor_value_info("acc", F, [4])],
                   [helper.make_tensor("M", I64, [], [7])])
    rng = np.random.default_rng(0)
    feeds = {k: rng.standard_normal(s).astype(np.float32) for k, s in (("s0", 4), ("a", (6, 4)), ("b", (6, 4)),
                                                                        ("x", 4))}
    _check(tmp_path, model, feeds)


@pytest.mark.parametrize("c", [True, False])
def test_if_on_a_run_time_condition_matches_onnxruntime(tmp_path, c):
    node = helper.make_node("If", ["c"], ["z"], then_branch=_branch("then", "Add", "t"),
                            else_branch=_branch("else", "Mul", "e"))
    model = _model([node], [helper.make_tensor_value_info("c", B, [1]), helper.make_tensor_value_info("x", F, [2, 3]),
                            helper.make_tensor_value_info("y", F, [2, 3])],
                   [helper.make_tensor_value_info("z", F, [2, 3])])
    _check(tmp_path, model, {"c": np.array([c]), "x": np.arange(6, dtype=np.float32).reshape(2, 3),
                             "y": np.full((2, 3), 3, np.float32)})


def test_aarch64_lstm_executable_under_qemu_matches_onnxruntime(cross_tools, tmp_path):
    model = layer_model("LSTM", direction="bidirectional", initial=True)
    _check(tmp_path, model, feeds_of(model), rtol=1e-5, atol=1e-6, command=[QEMU], triple=TRIPLE, cpu="cortex-a72")
