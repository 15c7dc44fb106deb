"""The attention part of vit_b_16, BERT 4x64 and GPT-2 4x64 (and a long sequence): lezero's fused
attention kernel against the same graph unfused and against ONNX Runtime.

Run it as

    LEZERO_NUM_THREADS=2 .venv/bin/python benchmarks/attention.py [--budget 3] [--only bert]

Each model is the chain the exports hold between the QKV projection and the output projection:
the projection's output ``[b, s, 3 h d]`` split into q, k, v, each reshaped to ``[b, s, h, d]``
and transposed to ``[b, h, s, d]`` (k to ``[b, h, d, s]``), ``MatMul``, the scale (ViT scales q
and k^T by ``d^-1/4`` each, as torchvision's export does), the additive mask (BERT's padding,
GPT-2's causal mask folded in), ``Softmax``, ``MatMul`` with v, the transpose back and the reshape
to ``[b, s, h d]``; ``decode_*`` is one query per sequence (its own input) against 513 keys.  Three runs called in turn (``timing.alternating_medians``, medians):
``fused`` (``lezero.onnx.compile``: one ``attention`` kernel), ``unfused`` (the same with
``fuse-attention`` left out of the kernel pipeline: the matmul, softmax and transpose kernels) and
ONNX Runtime (2 intra-op threads, spinning off).  Ratios are lezero / ORT: below 1, lezero is faster.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from onnx_models import cpu_model  # noqa: E402
from timing import alternating_medians  # noqa: E402

import lezero.codegen.schedule as schedule  # noqa: E402
import lezero.onnx  # noqa: E402

# name -> (batch, sequence, heads, head dim, mask: None, "padding" or "causal", scale q and k^T apart,
# queries: None for self-attention, else that many queries of their own against the sequence's keys)
SHAPES = {
    "vit_b_16": (1, 197, 12, 64, None, True, None),
    "bert_4x64": (4, 64, 4, 64, "padding", False, None),
    "gpt2_4x64": (4, 64, 4, 64, "causal", False, None),
    "bert_1x32": (1, 32, 4, 64, "padding", False, None),
    "long_1x513": (1, 513, 4, 64, "padding", False, None),
    "decode_4x1x513": (4, 513, 4, 64, "padding", False, 1),
}


def attention_model(b, s, h, d, mask, split_scale, queries) -> onnx.ModelProto:
    """The exports' attention chain (module docstring); with ``queries``, q is its own input
    ``[b, queries, h d]`` (a decoder's step against its cached keys and values)."""
    f = TensorProto.FLOAT
    sq = s if queries is None else queries
    inputs = [helper.make_tensor_value_info("x", f, [b, s, 3 * h * d])]
    scale = 1 / np.sqrt(d)
    inits = [helper.make_tensor("split", TensorProto.INT64, [3], [h * d] * 3),
             helper.make_tensor("heads", TensorProto.INT64, [4], [b, s, h, d]),
             helper.make_tensor("merged", TensorProto.INT64, [3], [b, sq, h * d]),
             helper.make_tensor("scale", f, [], [np.sqrt(scale) if split_scale else scale])]
    nodes = [helper.make_node("Split", ["x", "split"], ["q0", "k0", "v0"], axis=2)]
    nodes += [helper.make_node("Reshape", [n + "0", "heads"], [n + "1"]) for n in "kv"]
    if queries is None:
        nodes.append(helper.make_node("Reshape", ["q0", "heads"], ["q1"]))
    else:
        inputs.append(helper.make_tensor_value_info("queries", f, [b, sq, h * d]))
        inits.append(helper.make_tensor("query_heads", TensorProto.INT64, [4], [b, sq, h, d]))
        nodes.append(helper.make_node("Reshape", ["queries", "query_heads"], ["q1"]))
    nodes += [helper.make_node("Transpose", ["q1"], ["q"], perm=[0, 2, 1, 3]),
              helper.make_node("Transpose", ["k1"], ["kt"], perm=[0, 2, 3, 1]),
              helper.make_node("Transpose", ["v1"], ["v"], perm=[0, 2, 1, 3])]
    if split_scale:
        nodes += [helper.make_node("Mul", ["q", "scale"], ["qs"]), helper.make_node("Mul", ["kt", "scale"], ["kts"]),
                  helper.make_node("MatMul", ["qs", "kts"], ["scores"])]
    else:
        nodes += [helper.make_node("MatMul", ["q", "kt"], ["s0"]), helper.make_node("Mul", ["s0", "scale"], ["scores"])]
    last = "scores"
    if mask is not None:
        inputs.append(helper.make_tensor_value_info("mask", f, [b, 1, sq, s]))
        nodes.append(helper.make_node("Add", ["scores", "mask"], ["masked"]))
        last = "masked"
    nodes += [helper.make_node("Softmax", [last], ["p"], axis=-1), helper.make_node("MatMul", ["p", "v"], ["o"]),
              helper.make_node("Transpose", ["o"], ["ot"], perm=[0, 2, 1, 3]),
              helper.make_node("Reshape", ["ot", "merged"], ["y"])]
    graph = helper.make_graph(nodes, "attention", inputs, [helper.make_tensor_value_info("y", f, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def feeds_for(b, s, h, d, mask, queries) -> dict:
    rng = np.random.default_rng(0)
    sq = s if queries is None else queries
    feeds = {"x": rng.standard_normal((b, s, 3 * h * d)).astype(np.float32)}
    if queries is not None:
        feeds["queries"] = rng.standard_normal((b, sq, h * d)).astype(np.float32)
    if mask == "padding":
        m = np.zeros((b, 1, sq, s), np.float32)
        for i in range(b):
            m[i, :, :, s - i * s // 8:] = np.finfo(np.float32).min  # batch i pads its last i/8
        feeds["mask"] = m
    elif mask == "causal":
        feeds["mask"] = np.broadcast_to(np.triu(np.full((s, s), np.finfo(np.float32).min, np.float32), 1),
                                        (b, 1, s, s)).copy()
    return feeds


def unfused(m: onnx.ModelProto, feeds: dict):
    """The model compiled without ``fuse-attention`` (its plan is built at the first run)."""
    compiled = lezero.onnx.compile(m.SerializeToString())
    saved = schedule.KERNEL_PIPELINE
    schedule.KERNEL_PIPELINE = saved.replace("fuse-attention,", "")
    try:
        compiled.run(feeds)
    finally:
        schedule.KERNEL_PIPELINE = saved
    return compiled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--budget", type=float, default=3.0, help="seconds of alternating rounds per model")
    parser.add_argument("--only", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    args = parser.parse_args()
    threads = int(os.environ.get("LEZERO_NUM_THREADS", "2"))
    print(f"{cpu_model()}, {threads} threads, load {os.getloadavg()[0]:.2f}; ratio = lezero / ORT")
    print(f"{'model':>14} {'b x h x Sq x Sk x d':>18} {'fused ms':>9} {'unfused ms':>10} {'ORT ms':>8} {'fused/ORT':>9} "
          f"{'unfused/ORT':>11} {'max err':>8}")
    for name in args.only:
        b, s, h, d, mask, split_scale, queries = SHAPES[name]
        m = attention_model(b, s, h, d, mask, split_scale, queries)
        feeds = feeds_for(b, s, h, d, mask, queries)
        fused = lezero.onnx.compile(m.SerializeToString())
        plain = unfused(m, feeds)
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
        want = session.run(None, feeds)[0]
        error = max(float(np.abs(c.run(feeds)["y"] - want).max()) for c in (fused, plain))
        times = alternating_medians({"fused": lambda f=fused, x=feeds: f.run(x),
                                     "unfused": lambda f=plain, x=feeds: f.run(x),
                                     "ort": lambda f=session, x=feeds: f.run(None, x)}, args.budget)
        f_ms, u_ms, o_ms = (times[k] * 1e3 for k in ("fused", "unfused", "ort"))
        shape = f"{b}x{h}x{s if queries is None else queries}x{s}x{d}"
        print(f"{name:>14} {shape:>18} {f_ms:9.3f} {u_ms:10.3f} {o_ms:8.3f} {f_ms / o_ms:9.2f} "
              f"{u_ms / o_ms:11.2f} {error:8.1e}")


if __name__ == "__main__":
    main()
