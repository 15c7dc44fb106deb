"""The "light" CNNs shipped inside the onnx package (opset 9, so upgraded to 11 first) compiled by
lezero and compared with ONNX Runtime.  Their weights are ``ConstantOfShape(0.02)`` generators,
which make every class score equal, so each model also runs with those replaced by random
weights: then the comparison sees every layer.  The four fastest run here (three with random weights); all nine are timed by
``benchmarks/onnx_models.py``."""
from __future__ import annotations

import os

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

import lezero.onnx
from lezero.onnx.importer import upgrade

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
FASTEST = ["zfnet512", "bvlc_alexnet", "vgg19", "squeezenet"]
# vgg19 with random weights took 37 s of the suite (548 MB of weights that cannot fold): its layers
# (3x3 convs, the big fully connected ones) are alexnet's and zfnet's kinds, checked with random weights
RANDOM_WEIGHTS = [name for name in FASTEST if name != "vgg19"]
RTOL = 1e-3


def load(name: str) -> onnx.ModelProto:
    return onnx.load(os.path.join(LIGHT, f"light_{name}.onnx"))


def with_random_weights(m: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """Each ``ConstantOfShape`` of a constant shape becomes a random initializer, scaled by
    ``1/sqrt(fan_in)`` so activations stay of order one through the network."""
    rng = np.random.default_rng(seed)
    out = onnx.ModelProto()
    out.CopyFrom(m)
    shapes = {t.name: numpy_helper.to_array(t) for t in out.graph.initializer}
    keep = []
    for node in out.graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in shapes:
            shape = tuple(int(d) for d in shapes[node.input[0]])
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            values = rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))
            if len(shape) == 1:  # biases and batch-norm parameters: positive, near one for variances
                values = 0.5 + rng.random(shape)
            out.graph.initializer.append(numpy_helper.from_array(values.astype(np.float32), node.output[0]))
            # IR version 3 lists initializers among the graph inputs too
            out.graph.input.append(onnx.helper.make_tensor_value_info(node.output[0], onnx.TensorProto.FLOAT, shape))
        else:
            keep.append(node)
    del out.graph.node[:]
    out.graph.node.extend(keep)
    return out


def feeds_for(m: onnx.ModelProto, seed: int = 1) -> dict:
    rng = np.random.default_rng(seed)
    initializers = {t.name for t in m.graph.initializer}
    feeds = {}
    for i in m.graph.input:
        if i.name not in initializers:
            shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
            feeds[i.name] = rng.random(shape, dtype=np.float32)
    return feeds


def onnxruntime_outputs(m: onnx.ModelProto, feeds: dict) -> list:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    options.log_severity_level = 3
    session = ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def check(m: onnx.ModelProto, upgrade_opset: bool = True) -> None:
    feeds = feeds_for(m)
    got = lezero.onnx.compile(m, upgrade_opset=upgrade_opset).run(feeds)
    for name, want in zip(got, onnxruntime_outputs(m, feeds)):
        np.testing.assert_allclose(got[name], want, rtol=RTOL, atol=1e-6 * float(np.abs(want).max()), err_msg=name)


@pytest.mark.slow
@pytest.mark.parametrize("name", FASTEST)
def test_light_model_matches_onnxruntime(name):
    check(load(name))


@pytest.mark.slow
@pytest.mark.parametrize("name", RANDOM_WEIGHTS)
def test_light_model_with_random_weights_matches_onnxruntime(name):
    # weights put in after the upgrade to opset 11 (which test_light_model_matches_onnxruntime checks):
    # ONNX's version converter copies every initializer, 5 of zfnet512's 21 s with them in
    m = with_random_weights(upgrade(load(name)))
    outputs = onnxruntime_outputs(m, feeds_for(m))
    assert np.ptp(outputs[0]) > 1e-6  # the random weights make the scores differ: the check sees every layer
    check(m, upgrade_opset=False)
