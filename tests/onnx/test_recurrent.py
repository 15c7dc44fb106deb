"""ONNX LSTM, GRU and RNN imported as lz.for loops (``lezero/onnx/ops/recurrent.py``), compiled and
compared with ONNX Runtime over the attributes and optional inputs real exports use; torch's
nn.LSTM / nn.GRU (2 layers, bidirectional) exported by ``torch.onnx.export``; and the loops
exported back to ONNX."""
from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import lezero.onnx as lo
from lezero.onnx import UnsupportedError

GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
T, N, I, H = 5, 3, 4, 6


def layer_model(op_type, direction="forward", layout=0, seq_lens=False, initial=False, bias=True, peepholes=False,
                name="rnn_node", **attrs):
    """One ``op_type`` node with random weights as initializers; X (and sequence_lens, initial
    states) as graph inputs; every output."""
    rng = np.random.default_rng(len(op_type) + 3 * seq_lens)
    nd = 2 if direction == "bidirectional" else 1
    g = GATES[op_type]
    inits = [numpy_helper.from_array(rng.uniform(-0.5, 0.5, (nd, g * H, I)).astype(np.float32), "W"),
             numpy_helper.from_array(rng.uniform(-0.5, 0.5, (nd, g * H, H)).astype(np.float32), "R")]
    inputs = ["X", "W", "R", "", "", "", "", ""]
    x_shape = [N, T, I] if layout else [T, N, I]
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)]
    if bias:
        inits.append(numpy_helper.from_array(rng.uniform(-0.5, 0.5, (nd, 2 * g * H)).astype(np.float32), "B"))
        inputs[3] = "B"
    if seq_lens:
        inputs[4] = "lens"
        graph_inputs.append(helper.make_tensor_value_info("lens", TensorProto.INT32, [N]))
    state_shape = [N, nd, H] if layout else [nd, N, H]
    if initial:
        for k, state in enumerate(["h0", "c0"][:2 if op_type == "LSTM" else 1]):
            inputs[5 + k] = state
            graph_inputs.append(helper.make_tensor_value_info(state, TensorProto.FLOAT, state_shape))
    if peepholes:
        inits.append(numpy_helper.from_array(rng.uniform(-0.5, 0.5, (nd, 3 * H)).astype(np.float32), "P"))
        inputs[7] = "P"
    while inputs and not inputs[-1]:
        inputs.pop()
    outputs = ["Y", "Y_h"] + (["Y_c"] if op_type == "LSTM" else [])
    y_shape = [N, T, nd, H] if layout else [T, nd, N, H]
    node = helper.make_node(op_type, inputs, outputs, name=name, hidden_size=H, direction=direction,
                            **({"layout": layout} if layout else {}), **attrs)
    graph = helper.make_graph([node], "g", graph_inputs,
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, y_shape)]
                              + [helper.make_tensor_value_info(o, TensorProto.FLOAT, state_shape) for o in outputs[1:]],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    onnx.checker.check_model(model)
    return model


def feeds_of(model):
    rng = np.random.default_rng(1)
    feeds = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        if i.name == "lens":
            feeds[i.name] = np.array([T, 2, 4][:shape[0]], np.int32)
        else:
            feeds[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def ort_run(model, feeds):
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def ort_reference(model, feeds):
    """ONNX Runtime's outputs; a ``layout = 1`` model (which ONNX Runtime does not run) through
    the same node with ``layout = 0`` on transposed inputs, its outputs transposed back."""
    node = model.graph.node[0]
    if not any(a.name == "layout" and a.i == 1 for a in node.attribute):
        return ort_run(model, feeds)
    sequence_first = onnx.ModelProto()
    sequence_first.CopyFrom(model)
    seq_node = sequence_first.graph.node[0]
    seq_node.attribute.remove(next(a for a in seq_node.attribute if a.name == "layout"))
    for v in list(sequence_first.graph.input) + list(sequence_first.graph.output):
        dims = v.type.tensor_type.shape.dim
        order = {"X": [1, 0, 2], "Y": [1, 2, 0, 3]}.get(v.name, [1, 0, 2] if len(dims) == 3 else None)
        if order is not None:
            values = [d.dim_value for d in dims]
            for d, k in zip(dims, order):
                d.dim_value = values[k]
    moved = {k: (v.transpose(1, 0, 2) if v.ndim == 3 else v) for k, v in feeds.items()}
    outs = ort_run(sequence_first, moved)
    return [outs[0].transpose(2, 0, 1, 3)] + [o.transpose(1, 0, 2) for o in outs[1:]]


def check(model, feeds=None, tol=1e-5):
    feeds = feeds if feeds is not None else feeds_of(model)
    want = ort_reference(model, feeds)
    got = list(lo.compile(model).run(feeds).values())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape
        np.testing.assert_allclose(g, w, rtol=tol, atol=tol)
    return want


CASES = [
    ("LSTM", dict()),
    ("LSTM", dict(direction="reverse", seq_lens=True, initial=True)),
    ("LSTM", dict(direction="bidirectional", seq_lens=True, initial=True, peepholes=True)),
    ("LSTM", dict(layout=1, direction="bidirectional", initial=True)),
    ("LSTM", dict(bias=False, clip=0.7, input_forget=1)),
    ("LSTM", dict(activations=["HardSigmoid", "LeakyRelu", "Softsign"], activation_alpha=[0.3, 0.2],
                  activation_beta=[0.4])),
    ("GRU", dict(linear_before_reset=0, seq_lens=True, initial=True)),
    ("GRU", dict(linear_before_reset=1, direction="bidirectional", seq_lens=True)),
    ("GRU", dict(linear_before_reset=1, direction="reverse", layout=1, initial=True, clip=0.5)),
    ("GRU", dict(bias=False, activations=["Sigmoid", "Relu"])),
    ("RNN", dict(direction="bidirectional", seq_lens=True, initial=True)),
    ("RNN", dict(activations=["Relu"], layout=1)),
]


@pytest.mark.parametrize("op_type,options", CASES, ids=[f"{op}-{i}" for i, (op, _) in enumerate(CASES)])
def test_layer_matches_onnx_runtime(op_type, options):
    model = layer_model(op_type, **options)
    check(model)
    # one lz.for per direction, the sequence not unrolled; exported back, ONNX Runtime agrees
    module = lo.import_model(model)
    ops = [op.name for op in module.functions[0].entry_block.ops]
    directions = 2 if options.get("direction") == "bidirectional" else 1
    assert ops.count("lz.for") == directions
    assert ops.count("lz.matmul") == directions  # the input projection of all steps, one GEMM
    feeds = feeds_of(model)
    exported = lo.to_onnx(module, input_names=[i.name for i in model.graph.input])
    for g, w in zip(ort_run(exported, feeds), ort_reference(model, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_unsupported_attribute_values_name_the_node():
    bad = layer_model("LSTM", name="lstm_7")
    next(a for a in bad.graph.node[0].attribute if a.name == "direction").s = b"sideways"
    with pytest.raises(UnsupportedError, match="lstm_7.*direction 'sideways'"):
        lo.import_model(bad)
    bad = layer_model("GRU", name="gru_3")
    bad.graph.node[0].attribute.append(helper.make_attribute("activations", ["Sigmoid", "Swish"]))
    with pytest.raises(UnsupportedError, match="gru_3.*activation 'Swish'"):
        lo.import_model(bad)


@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_torch_two_layer_bidirectional_export_matches_onnx_runtime(kind):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    module = getattr(torch.nn, kind)(5, 7, num_layers=2, bidirectional=True).eval()
    x = torch.randn(6, 3, 5)
    buffer = io.BytesIO()
    torch.onnx.export(module, (x,), buffer, dynamo=False, opset_version=17, input_names=["x"],
                      dynamic_axes={"x": {0: "steps", 1: "batch"}})
    model = onnx.load_from_string(buffer.getvalue())
    want = check(model, {"x": x.numpy()})
    with torch.no_grad():
        out, _ = module(x)
    np.testing.assert_allclose(want[0], out.numpy(), rtol=1e-5, atol=1e-5)
    # the dynamic dims are bound per call: another length and batch
    check(model, {"x": np.random.default_rng(2).standard_normal((9, 2, 5)).astype(np.float32)})


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_traced_lz_nn_layer_exports_its_loops_and_runs_in_onnx_runtime(kind):
    import lezero as lz

    lz.manual_seed(0)
    layer = getattr(lz.nn, kind)(4, 5, num_layers=2, bidirectional=True)
    x = lz.randn(6, 3, 4)
    traced = lz.jit.trace(layer, x, dynamic_batch=False)
    proto = lo.to_onnx(traced)
    assert sum(n.op_type in ("Scan", "Loop") for n in proto.graph.node) == 4  # 2 layers x 2 directions
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    want = layer(x)[0].detach().numpy()
    np.testing.assert_allclose(got[0], want, rtol=1e-5, atol=1e-6)
