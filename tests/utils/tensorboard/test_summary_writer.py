"""lz.utils.tensorboard.SummaryWriter: the event files it writes read back with TensorBoard's own
EventAccumulator (scalars, histograms, images, text, hparams in the run's folder), and add_graph's
GraphDef matches the IR: one node per argument and op, grouped by module path, or per kernel."""
from __future__ import annotations

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

import lezero as lz
from lezero import nn
from lezero.utils.tensorboard import SummaryWriter


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        return self.fc2(lz.relu(self.fc1(x)))


def _read(path) -> EventAccumulator:
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0, "histograms": 0, "images": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_scalars_histograms_images_and_text_read_back(tmp_path):
    lz.manual_seed(0)
    weights = lz.randn(100)
    with SummaryWriter(tmp_path) as w:
        for step in range(5):
            w.add_scalar("loss", lz.tensor(1.0 / (step + 1)), step)  # an lz tensor
        w.add_scalar("lr", np.float32(0.5), 0)                      # numpy
        w.add_histogram("weights", weights, 3)
        w.add_image("image", lz.ones(3, 4, 5) * 0.5, 0)                # CHW floats in [0, 1]
        w.add_images("batch", np.zeros((2, 3, 4, 5), np.float32), 0)
        w.add_text("note", "hello *tensorboard*", 1)
    acc = _read(tmp_path)
    assert [(e.step, round(e.value, 6)) for e in acc.Scalars("loss")] == [(s, round(1.0 / (s + 1), 6)) for s in range(5)]
    assert acc.Scalars("lr")[0].value == 0.5
    hist = acc.Histograms("weights")[0]
    assert hist.step == 3 and hist.histogram_value.num == 100
    assert abs(hist.histogram_value.sum - float(weights.sum())) < 1e-3
    image = acc.Images("image")[0]
    assert (image.width, image.height) == (5, 4)
    assert len(acc.Images("batch")) == 1
    text = acc.Tensors("note/text_summary")[0]
    assert text.step == 1 and text.tensor_proto.string_val[0] == b"hello *tensorboard*"


def test_add_scalars_writes_one_run_per_key(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.add_scalars("loss", {"train": lz.tensor(1.0), "val": 2.0}, 0)
    assert _read(tmp_path / "loss_train").Scalars("loss")[0].value == 1.0
    assert _read(tmp_path / "loss_val").Scalars("loss")[0].value == 2.0


def test_hparams_stay_in_the_runs_folder(tmp_path):
    run = tmp_path / "lr0.1"
    with SummaryWriter(run) as w:
        w.add_scalar("train/loss", 0.3, 0)
        w.add_hparams({"lr": 0.1, "optimizer": "adam"}, {"hparam/accuracy": lz.tensor(0.9)})
    assert [p.name for p in tmp_path.iterdir()] == ["lr0.1"]  # no timestamped sub-folder, as PyTorch makes
    acc = _read(run)
    assert acc.Scalars("hparam/accuracy")[0].value == np.float32(0.9)
    content = acc.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    assert start.hparams["lr"].number_value == 0.1 and start.hparams["optimizer"].string_value == "adam"
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"]).experiment
    assert [m.name.tag for m in experiment.metric_infos] == ["hparam/accuracy"]


def _graph(path):
    return _read(path).Graph()


def test_graph_of_a_module_has_one_node_per_argument_and_op_grouped_by_module(tmp_path):
    model, x = MLP(), lz.randn(3, 8)
    with SummaryWriter(tmp_path) as w:
        w.add_graph(model, x)
    traced = lz.jit.trace(model, x)
    func = traced.module.functions[0]
    ops = [op for op in func.entry_block.ops if op.name != "func.return"]
    nodes = _graph(tmp_path).node
    assert len(nodes) == len(func.arguments) + len(ops)
    by_name = {n.name: n for n in nodes}
    assert sorted(by_name) == sorted(["input0", "fc1/weight", "fc1/bias", "fc2/weight", "fc2/bias",
                                      "fc1/transpose", "fc1/matmul", "fc1/add", "relu",
                                      "fc2/transpose", "fc2/matmul", "fc2/add"])
    matmul = by_name["fc1/matmul"]
    assert matmul.op == "lz.matmul" and list(matmul.input) == ["input0", "fc1/transpose"]
    assert [d.size for d in matmul.attr["_output_shapes"].list.shape[0].dim] == [3, 16]
    assert b"test_summary_writer.py" in by_name["relu"].attr["location"].s  # the user's line


def test_graph_of_a_traced_model_and_of_ir_text(tmp_path):
    traced = lz.jit.trace(MLP(), lz.randn(3, 8))
    with SummaryWriter(tmp_path / "traced") as w:
        w.add_graph(traced)
    nodes = _graph(tmp_path / "traced").node
    func = traced.module.functions[0]
    assert [n.op for n in nodes][len(func.arguments):] == [op.name for op in func.entry_block.ops][:-1]
    assert [d.size for d in nodes[0].attr["_output_shapes"].list.shape[0].dim] == [-1, 8]  # the dynamic batch
    module = lz.ir.parse_module("""
    func.func @f(%a: tensor<4xf32>) -> tensor<4xf32> {
      %0 = "lz.exp"(%a) : (tensor<4xf32>) -> tensor<4xf32>
      func.return %0 : tensor<4xf32>
    }""")
    with SummaryWriter(tmp_path / "ir") as w:
        w.add_graph(module)
    assert [(n.name, n.op) for n in _graph(tmp_path / "ir").node] == [("input0", "lz.argument"), ("exp", "lz.exp")]


def test_fused_graph_has_one_box_per_kernel_holding_its_ops(tmp_path):
    model, x = MLP(), lz.randn(3, 8)
    with SummaryWriter(tmp_path) as w:
        w.add_graph(model, x, fused=True)
    ops = [n for n in _graph(tmp_path).node if n.op != "lz.argument"]
    kernels = {}
    for n in ops:
        kernels.setdefault(n.name.split("/")[0], []).append(n.op)
    assert len(kernels) == 2 and all(k.startswith("lz_fused_") for k in kernels)
    first, second = kernels.values()
    assert first == ["lz.transpose", "lz.matmul", "lz.add", "lz.relu"] and second == ["lz.transpose", "lz.matmul", "lz.add"]


def test_graph_of_an_onnx_model_groups_by_node_name(tmp_path):
    from onnx import TensorProto, helper

    import lezero.onnx

    nodes = [helper.make_node("Relu", ["x"], ["r"], name="/block1/act/Relu"),
             helper.make_node("Exp", ["r"], ["y"], name="/block1/Exp")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])])
    model = lezero.onnx.compile(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    with SummaryWriter(tmp_path) as w:
        w.add_graph(model)
    assert [n.name for n in _graph(tmp_path).node] == ["input/x", "block1/act/Relu/relu", "block1/Exp/exp"]


def test_add_graph_of_a_module_without_inputs_is_a_clear_error(tmp_path):
    with SummaryWriter(tmp_path) as w, pytest.raises(ValueError, match="pass input_to_model"):
        w.add_graph(MLP())
