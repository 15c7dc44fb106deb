"""lezero-opt --emit=tensorboard -o DIR: the graph of each function, and after fusion its kernels,
as event files TensorBoard reads (read back with its EventAccumulator)."""
from __future__ import annotations

import io

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from lezero.cli.opt import run

MLP = """func.func @mlp(%x: tensor<4x8xf32>, %w: tensor<8x16xf32>, %b: tensor<16xf32>) -> tensor<4x16xf32> {
  %0 = "lz.matmul"(%x, %w) : (tensor<4x8xf32>, tensor<8x16xf32>) -> tensor<4x16xf32>
  %1 = "lz.add"(%0, %b) : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  %2 = "lz.relu"(%1) : (tensor<4x16xf32>) -> tensor<4x16xf32>
  func.return %2 : tensor<4x16xf32>
}
"""


def _opt(tmp_path, *argv):
    path = tmp_path / "mlp.mlir"
    path.write_text(MLP)
    out, err = io.StringIO(), io.StringIO()
    return run([str(path), *argv], stdout=out, stderr=err), out.getvalue(), err.getvalue()


def _nodes(path):
    acc = EventAccumulator(str(path))
    acc.Reload()
    return [(n.name, n.op) for n in acc.Graph().node]


def test_emit_tensorboard_writes_the_graph_and_the_fused_graph(tmp_path):
    code, out, err = _opt(tmp_path, "--emit=tensorboard", "-o", str(tmp_path / "tb"))
    assert code == 0, err
    assert f"{tmp_path / 'tb' / 'mlp'}: 6 nodes" in out
    assert _nodes(tmp_path / "tb" / "mlp") == [("input0", "lz.argument"), ("input1", "lz.argument"),
                                               ("input2", "lz.argument"), ("matmul", "lz.matmul"),
                                               ("add", "lz.add"), ("relu", "lz.relu")]
    fused = _nodes(tmp_path / "tb" / "mlp_fused")
    assert [op for _, op in fused[3:]] == ["lz.matmul", "lz.add", "lz.relu"]
    assert len({name.split("/")[0] for name, _ in fused[3:]}) == 1  # one kernel holds all three


def test_emit_tensorboard_needs_a_folder(tmp_path):
    code, _, err = _opt(tmp_path, "--emit=tensorboard")
    assert code == 1 and err == "lezero-opt: error: --emit=tensorboard writes event files: name their folder with -o DIR\n"
