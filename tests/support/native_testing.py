"""ONNX models and helpers shared by the native-compilation tests (tests/onnx/test_native.py,
tests/onnx/test_native_cross.py, tests/cli/test_compile_cli.py, tests/codegen/llvm/test_integer_aarch64.py)."""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper


def _model(nodes, inputs, outputs, initializers=(), name="g", opset=17) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8  # what onnxruntime of this machine reads
    return model


def convnet_onnx(batch="N") -> onnx.ModelProto:
    """Conv + Relu + MaxPool + Flatten + Gemm + Softmax on 3x16x16 images; ``batch`` a dim_param
    (dynamic) or an int."""
    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array(rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3, "conv.w"),
               numpy_helper.from_array(rng.standard_normal(8).astype(np.float32) * 0.1, "conv.b"),
               numpy_helper.from_array(rng.standard_normal((10, 8 * 8 * 8)).astype(np.float32) * 0.05, "fc.w"),
               numpy_helper.from_array(rng.standard_normal(10).astype(np.float32) * 0.1, "fc.b")]
    nodes = [helper.make_node("Conv", ["image", "conv.w", "conv.b"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu1"),
             helper.make_node("MaxPool", ["r"], ["p"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten", axis=1),
             helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["logits"], name="fc", transB=1),
             helper.make_node("Softmax", ["logits"], ["probabilities"], name="softmax", axis=1)]
    return _model(nodes, [helper.make_tensor_value_info("image", TensorProto.FLOAT, [batch, 3, 16, 16])],
                  [helper.make_tensor_value_info("probabilities", TensorProto.FLOAT, [batch, 10])], weights,
                  name="convnet")


def elementwise_onnx() -> onnx.ModelProto:
    """Two inputs (one broadcast), two outputs: y = tanh(a * b + 1) / (1 + exp(-a)), s = a - b."""
    one = numpy_helper.from_array(np.array(1.0, np.float32), "one")
    nodes = [helper.make_node("Mul", ["a", "b"], ["ab"], name="mul"),
             helper.make_node("Add", ["ab", "one"], ["ab1"], name="add"),
             helper.make_node("Tanh", ["ab1"], ["t"], name="tanh"),
             helper.make_node("Sigmoid", ["a"], ["sig"], name="sigmoid"),
             helper.make_node("Mul", ["t", "sig"], ["y"], name="gate"),
             helper.make_node("Sub", ["a", "b"], ["difference"], name="sub")]
    return _model(nodes, [helper.make_tensor_value_info("a", TensorProto.FLOAT, [4, 5]),
                          helper.make_tensor_value_info("b", TensorProto.FLOAT, [5])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5]),
                   helper.make_tensor_value_info("difference", TensorProto.FLOAT, [4, 5])], [one], name="elementwise")


def unsupported_onnx() -> onnx.ModelProto:
    """A dynamic batch dim, an operator no converter has, and an attribute Relu does not take."""
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu_with_extra", frobnicate=1),
             helper.make_node("Frobnicate", ["x"], ["f"], name="mystery", domain="com.example"),
             helper.make_node("Add", ["r", "f"], ["y"], name="after")]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])], name="unsupported")
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    return model


def onnxruntime_outputs(model: onnx.ModelProto, feeds: dict) -> dict:
    import onnxruntime

    session = onnxruntime.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds)))


def run_executable(exe, *args, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=120, **kw)


TRIPLE = "aarch64-linux-gnu"
CROSS_CC, QEMU = "aarch64-linux-gnu-gcc", "qemu-aarch64"


@pytest.fixture
def cross_tools():
    """Skips, saying how to install them, where the cross compiler or qemu is missing (``make
    test`` installs them where it runs as root)."""
    missing = [tool for tool in (CROSS_CC, QEMU) if shutil.which(tool) is None]
    if missing:
        pytest.skip(f"needs {' and '.join(missing)}: apt-get install qemu-user gcc-aarch64-linux-gnu "
                    "libc6-dev-arm64-cross (make test installs them when run as root)")


def run_outputs(command: list, result, tmp_path, feeds: dict) -> dict:
    """Run the executable of ``result`` (through ``command``, e.g. qemu) on ``feeds``; its outputs by name."""
    args = []
    for i, (name, array) in enumerate(feeds.items()):
        np.save(tmp_path / f"input{i}.npy", array)
        args += ["--input", f"{name}={tmp_path / f'input{i}.npy'}"]
    done = subprocess.run([*command, str(result.paths[0]), *args, "--output-dir", str(tmp_path / "out"),
                           "--threads", "2"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return {t.name: np.load(tmp_path / "out" / f"{t.file_stem}.npy") for t in result.program.outputs}
