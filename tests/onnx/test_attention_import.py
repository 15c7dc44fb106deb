"""ONNX's ``Attention`` (opset 23) in float32 without softcap, another softmax precision or a
``qk_matmul_output_mode``: imported as the chain ``fuse-attention`` makes one ``attention`` kernel
of (``lezero/onnx/ops/attention.py``), checked against ONNX Runtime, fully masked rows (0 in ONNX)
included; the other cases keep ONNX's reference form (ONNX's node tests cover them)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import lezero.onnx
from lezero.runtime.plan import specialize

B, D, SQ, SK = 2, 8, 5, 7
HIDDEN_ROW = {TensorProto.FLOAT: 1, TensorProto.BOOL: 2}  # the query feeds_for's mask hides every key from


def attention_model(rank3: bool, heads: tuple, mask, causal: int, outputs: int):
    """One Attention node: q, k, v (3-D with the heads attributes, or 4-D), an optional
    ``SQ x SK`` mask (``TensorProto.FLOAT`` or ``BOOL``); ``outputs``: 1, or 4 (up to the qk
    product); returns the model and the inputs' shapes."""
    hq, hkv = heads
    shapes = [(B, SQ, hq * D), (B, SK, hkv * D), (B, SK, hkv * D)] if rank3 else \
        [(B, hq, SQ, D), (B, hkv, SK, D), (B, hkv, SK, D)]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in zip("qkv", shapes)]
    if mask is not None:
        inputs.append(helper.make_tensor_value_info("mask", mask, (SQ, SK)))
    attrs = {"is_causal": causal, **({"q_num_heads": hq, "kv_num_heads": hkv} if rank3 else {})}
    names = ["y", "present_key", "present_value", "qk"][:outputs]
    node = helper.make_node("Attention", [i.name for i in inputs], names, **attrs)
    graph = helper.make_graph([node], "attention", inputs,
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in names])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)]), shapes


def feeds_for(shapes, mask, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip("qkv", shapes)}
    if mask == TensorProto.FLOAT:
        feeds["mask"] = np.where(rng.random((SQ, SK)) < 0.3, -np.inf, 0).astype(np.float32)
        feeds["mask"][HIDDEN_ROW[mask]] = -np.inf  # a query that sees no key: ONNX's output row is 0
    elif mask == TensorProto.BOOL:
        feeds["mask"] = rng.random((SQ, SK)) < 0.7
        feeds["mask"][HIDDEN_ROW[mask]] = False
    return feeds


@pytest.mark.parametrize("rank3, heads, mask, causal, outputs, fused", [
    (False, (2, 2), None, 0, 1, True),
    (False, (2, 2), TensorProto.FLOAT, 1, 1, True),
    (True, (2, 2), TensorProto.BOOL, 0, 1, True),
    (True, (2, 2), None, 1, 1, True),
    (False, (4, 2), TensorProto.BOOL, 1, 1, True),  # grouped-query heads: k and v repeated
    (False, (2, 2), TensorProto.FLOAT, 0, 4, False),  # the qk product is an output: the chain stays unfused
])
def test_attention_matches_onnxruntime_and_fuses(rank3, heads, mask, causal, outputs, fused):
    model, shapes = attention_model(rank3, heads, mask, causal, outputs)
    feeds = feeds_for(shapes, mask)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    got = list(lezero.onnx.compile(model).run(feeds).values())
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and not np.isnan(g).any()
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)
    if mask is not None:  # the query row feeds_for hides: zeros (the query axis is -2 in both layouts)
        assert np.all(np.take(got[0], HIDDEN_ROW[mask], axis=-2) == 0)
    module = lezero.onnx.import_model(model)
    main = module.functions[0]
    scheduled = specialize(module, main.sym_name, [a.type.shape for a in main.arguments])
    kinds = [op.attributes["kind"].value for op in scheduled.functions[0].entry_block.ops if op.name == "lz.kernel"]
    assert ("attention" in kinds) == fused, kinds
