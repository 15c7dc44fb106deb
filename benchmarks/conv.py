"""3x3 convolution, 64 -> 64 channels at 56x56, pads 1: lezero against torch, same threads.

Run it as

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE .venv/bin/python benchmarks/conv.py [--threads 2] [--batches 1,8]

lezero: ``lezero.compile`` of an ``lz.conv2d`` function (and of conv + bias + relu, the epilogue
fused into the GEMM's micro-kernel), called on numpy arrays: the real path (plan lookup, ctypes
calls on the runtime's thread pool, output allocation).  The runtime's pool has
``LEZERO_NUM_THREADS`` = --threads threads (set here before lezero is imported).
torch: ``torch.nn.functional.conv2d`` (and ``relu(conv2d(x, w, b))``) on CPU tensors,
``torch.set_num_threads(--threads)``, under ``torch.no_grad()``.

``--lowerings`` also times the ways lezero can lower the convolution (batch 1, no epilogue):
"direct" (the GEMM's micro-kernel reads the padded input's rows in place, what lz.conv2d does),
"implicit im2col" (the same GEMM packing the im2col matrix's rows from the padded input per K
block: ``lezero.codegen.llvm.contraction.CONV_B = "packed"``) and "explicit im2col" (a function that builds the
576 x 3136 im2col matrix with lz.pad/lz.slice/lz.concat, one elementwise kernel, then multiplies it
with lz.matmul, a second kernel).

Each time is the best of several repetitions (the machine is shared: the best is the least
disturbed).  Ratios are torch time / lezero time: above 1, lezero is faster.

``--mobile`` instead times the convolutions of mobilenet_v2 and efficientnet_b0 (depthwise 3x3
and 5x5 at strides 1 and 2, 1x1 pointwise, the squeeze-excite block's 1x1 convs on a 1x1 image),
each a one-node ONNX model (Conv with bias, then ReLU6 or SiLU) run by ``lezero.onnx.compile``
and by ONNX Runtime (``intra_op_num_threads`` = --threads, thread spinning off, so that neither
steals a core from the other's next call), the two alternating call by call in this process (in a
new random order each round): medians, and lezero / ORT (below 1, lezero is faster).  ORT's own
graph optimizations run (its NCHWc layout too, with reorders around the one node that a whole model
would not pay).

``--resnet`` times the regular convolutions of resnet18/50 and densenet121 the same way (the 7x7
stem, 3x3 and 1x1 at strides 1 and 2, Conv + bias + ReLU or nothing); both print the minimums too,
which on this shared machine move least.  ``--prepacking`` (with either) also runs each layer
compiled with its constant weights packed on every call, as before issue 11 packed them once when
the plan is built (``lezero.codegen.schedule.PACKED_CONSTANT_KINDS`` emptied), in the same
alternation: its median and pre-packed / per-call.  ``--host-tile`` (with either) also runs each
layer compiled with the target's GEMM register tile (6 x 4 vectors of 16 on AVX-512), as before
convs chose their own (``contraction_gemm.conv_register_tile``), in the same alternation: its
median and conv tile / host tile.  ``--pixel-lanes`` (with --mobile) also runs each layer compiled
with its depthwise conv on the kernel with pixels in the vector lanes (``depthwise.LANES_MAX_PIXELS``
and ``LANES_MAX_PIXELS_FEW_TAPS`` 0), not channels: its median and channels / pixels in lanes.
``--only "r18,dw 5x5,7x7"`` (with either) times only the layers whose printed name contains one of
the words.
"""
from __future__ import annotations

import argparse
import os
import sys

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--batches", default="1,8")
parser.add_argument("--channels", type=int, default=64)
parser.add_argument("--size", type=int, default=56)
parser.add_argument("--seconds", type=float, default=2.0, help="time budget per implementation and shape")
parser.add_argument("--lowerings", action="store_true", help="also compare direct, implicit and explicit im2col")
parser.add_argument("--mobile", action="store_true", help="the mobile nets' layer shapes against ONNX Runtime instead")
parser.add_argument("--resnet", action="store_true", help="resnet18/50's and densenet121's layer shapes against ONNX Runtime")
parser.add_argument("--reps", type=int, default=100, help="--mobile/--resnet: alternating calls per layer")
parser.add_argument("--prepacking", action="store_true",
                    help="--mobile/--resnet: also time each layer with its weights packed per call")
parser.add_argument("--host-tile", action="store_true",
                    help="--mobile/--resnet: also time each layer with the target's GEMM tile, not the conv's")
parser.add_argument("--pixel-lanes", action="store_true",
                    help="--mobile: also time each layer with its depthwise conv on the pixels-in-lanes kernel")
parser.add_argument("--only", default="", help="--mobile/--resnet: only the layers whose names contain one of "
                    "these comma-separated words (e.g. r18,dw 5x5)")
args = parser.parse_args()
os.environ["LEZERO_NUM_THREADS"] = str(args.threads)  # before the runtime's pool is made

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lezero  # noqa: E402
from lezero.codegen.llvm import contraction  # noqa: E402
from timing import best_seconds, shuffled_times  # noqa: E402


def conv_function(batch: int, c: int, size: int, epilogue: bool) -> str:
    x = f"tensor<{batch}x{c}x{size}x{size}xf32>"
    w = f"tensor<{c}x{c}x3x3xf32>"
    y = f"tensor<{batch}x{c}x{size}x{size}xf32>"
    attrs = "{pads = array<i64: 1, 1, 1, 1>}"
    if not epilogue:
        return f"""
func.func @f(%x: {x}, %w: {w}) -> {y} {{
  %0 = "lz.conv2d"(%x, %w) {attrs} : ({x}, {w}) -> {y}
  func.return %0 : {y}
}}"""
    bias = f"tensor<{c}x1x1xf32>"
    return f"""
func.func @f(%x: {x}, %w: {w}, %b: {bias}) -> {y} {{
  %0 = "lz.conv2d"(%x, %w) {attrs} : ({x}, {w}) -> {y}
  %1 = "lz.add"(%0, %b) : ({y}, {bias}) -> {y}
  %2 = "lz.relu"(%1) : ({y}) -> {y}
  func.return %2 : {y}
}}"""


def main() -> None:
    torch.set_num_threads(args.threads)
    c, size = args.channels, args.size
    rng = np.random.default_rng(0)
    print(f"conv2d 3x3, {c} -> {c} channels, {size}x{size}, pads 1, float32, {args.threads} threads "
          f"(torch {torch.__version__})")
    print(f"{'case':<22}{'lezero ms':>11}{'torch ms':>11}{'torch/lezero':>14}{'lezero GFLOP/s':>16}")
    for batch in (int(b) for b in args.batches.split(",")):
        x = rng.standard_normal((batch, c, size, size), np.float32)
        w = (rng.standard_normal((c, c, 3, 3)) * 0.05).astype(np.float32)
        bias = rng.standard_normal((c, 1, 1)).astype(np.float32)
        tx, tw, tb = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(bias.reshape(c))
        flops = 2 * batch * c * size * size * c * 9
        for epilogue in (False, True):
            f = lezero.compile(conv_function(batch, c, size, epilogue))
            inputs = (x, w, bias) if epilogue else (x, w)
            with torch.no_grad():
                if epilogue:
                    expected = torch.relu(torch.nn.functional.conv2d(tx, tw, tb, padding=1)).numpy()
                    peer = lambda: torch.relu(torch.nn.functional.conv2d(tx, tw, tb, padding=1))  # noqa: E731
                else:
                    expected = torch.nn.functional.conv2d(tx, tw, padding=1).numpy()
                    peer = lambda: torch.nn.functional.conv2d(tx, tw, padding=1)  # noqa: E731
                np.testing.assert_allclose(f(*inputs), expected, rtol=1e-3, atol=1e-3)
                ours = best_seconds(lambda: f(*inputs), args.seconds)
                theirs = best_seconds(peer, args.seconds)
            name = f"batch {batch}" + (" +bias+relu" if epilogue else "")
            print(f"{name:<22}{ours * 1e3:>11.3f}{theirs * 1e3:>11.3f}{theirs / ours:>14.2f}"
                  f"{flops / ours / 1e9:>16.1f}", flush=True)


def explicit_im2col_function(c: int, size: int) -> str:
    """col[ci * 9 + kh * 3 + kw, p] = xpad[ci, oh + kh, ow + kw], then w (c x 9c) @ col."""
    x, xp = f"tensor<1x{c}x{size}x{size}xf32>", f"tensor<1x{c}x{size + 2}x{size + 2}xf32>"
    tap, taps = f"tensor<{c}x1x{size * size}xf32>", f"tensor<{c}x9x{size * size}xf32>"
    lines = [f'%xp = "lz.pad"(%x) {{pads = array<i64: 0, 0, 1, 1, 0, 0, 1, 1>, value = 0.0 : f32}} : ({x}) -> {xp}']
    names = []
    for kh in range(3):
        for kw in range(3):
            window = f"tensor<1x{c}x{size}x{size}xf32>"
            lines.append(f'%s{kh}{kw} = "lz.slice"(%xp) {{starts = array<i64: {kh}, {kw}>, '
                         f'ends = array<i64: {kh + size}, {kw + size}>, axes = array<i64: 2, 3>}} : ({xp}) -> {window}')
            lines.append(f'%t{kh}{kw} = "lz.reshape"(%s{kh}{kw}) {{shape = array<i64: {c}, 1, {size * size}>}} '
                         f': ({window}) -> {tap}')
            names.append(f"%t{kh}{kw}")
    lines.append(f'%taps = "lz.concat"({", ".join(names)}) {{axis = 1 : i64}} : ({", ".join([tap] * 9)}) -> {taps}')
    col = f"tensor<{9 * c}x{size * size}xf32>"
    lines.append(f'%col = "lz.reshape"(%taps) {{shape = array<i64: {9 * c}, {size * size}>}} : ({taps}) -> {col}')
    out = f"tensor<{c}x{size * size}xf32>"
    lines.append(f'%y = "lz.matmul"(%w, %col) : (tensor<{c}x{9 * c}xf32>, {col}) -> {out}')
    body = "\n  ".join(lines)
    return f"func.func @f(%x: {x}, %w: tensor<{c}x{9 * c}xf32>) -> {out} {{\n  {body}\n  func.return %y : {out}\n}}"


def compare_lowerings() -> None:
    c, size = args.channels, args.size
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, c, size, size), np.float32)
    w = (rng.standard_normal((c, c, 3, 3)) * 0.05).astype(np.float32)
    expected = torch.nn.functional.conv2d(torch.from_numpy(x), torch.from_numpy(w), padding=1).numpy()
    print(f"\nlowerings of the batch-1 convolution ({2 * c * c * 9 * size * size / 1e6:.0f} MFLOP):")
    saved = contraction.CONV_B
    for name, reading in (("direct", "direct"), ("implicit im2col", "packed")):
        contraction.CONV_B = reading
        f = lezero.compile(conv_function(1, c, size, False))
        np.testing.assert_allclose(f(x, w), expected, rtol=1e-3, atol=1e-3)
        print(f"  {name:<18}{best_seconds(lambda: f(x, w), args.seconds) * 1e3:>9.3f} ms", flush=True)
    contraction.CONV_B = saved
    f = lezero.compile(explicit_im2col_function(c, size))
    w2 = w.reshape(c, 9 * c)
    np.testing.assert_allclose(f(x, w2).reshape(expected.shape), expected, rtol=1e-3, atol=1e-3)
    print(f"  {'explicit im2col':<18}{best_seconds(lambda: f(x, w2), args.seconds) * 1e3:>9.3f} ms", flush=True)


# (name, C_in, C_out, image size, kernel, stride, groups, activation): mobilenet_v2 (ReLU6) and
# efficientnet_b0 (SiLU) at 224 x 224, the layers that take the most time of each kind.
MOBILE_LAYERS = [
    ("dw 3x3", 32, 32, 112, 3, 1, 32, "relu6"),
    ("dw 3x3 s2", 96, 96, 112, 3, 2, 96, "relu6"),
    ("dw 3x3", 144, 144, 56, 3, 1, 144, "relu6"),
    ("dw 3x3 s2", 144, 144, 56, 3, 2, 144, "relu6"),
    ("dw 3x3", 384, 384, 14, 3, 1, 384, "relu6"),
    ("dw 3x3", 960, 960, 7, 3, 1, 960, "relu6"),
    ("dw 5x5 s2", 144, 144, 56, 5, 2, 144, "silu"),
    ("dw 5x5", 240, 240, 28, 5, 1, 240, "silu"),
    ("dw 5x5", 672, 672, 14, 5, 1, 672, "silu"),
    ("dw 5x5", 1152, 1152, 7, 5, 1, 1152, "silu"),
    ("pw", 16, 96, 112, 1, 1, 1, "relu6"),
    ("pw", 24, 144, 56, 1, 1, 1, "relu6"),
    ("pw", 144, 24, 56, 1, 1, 1, "none"),
    ("pw", 96, 576, 14, 1, 1, 1, "relu6"),
    ("pw", 576, 96, 14, 1, 1, 1, "none"),
    ("pw", 960, 320, 7, 1, 1, 1, "none"),
    ("pw", 320, 1280, 7, 1, 1, 1, "relu6"),
    ("pw", 192, 1152, 7, 1, 1, 1, "silu"),
    ("SE 1x1", 1152, 48, 1, 1, 1, 1, "silu"),
    ("SE 1x1", 48, 1152, 1, 1, 1, 1, "none"),
    ("first 3x3 s2", 3, 32, 224, 3, 2, 1, "relu6"),
]


# (name, C_in, C_out, image size, kernel, stride, groups, activation): the regular convolutions of
# resnet18 (r18), resnet50 (r50, torchvision's: stride on the 3x3) and densenet121 (d121) at 224 x 224.
RESNET_LAYERS = [
    ("r18 stem 7x7 s2", 3, 64, 224, 7, 2, 1, "relu"),
    ("r18 3x3", 64, 64, 56, 3, 1, 1, "relu"),
    ("r18 3x3 s2", 64, 128, 56, 3, 2, 1, "relu"),
    ("r18 1x1 s2", 64, 128, 56, 1, 2, 1, "none"),
    ("r18 3x3", 128, 128, 28, 3, 1, 1, "relu"),
    ("r18 3x3 s2", 128, 256, 28, 3, 2, 1, "relu"),
    ("r18 3x3", 256, 256, 14, 3, 1, 1, "relu"),
    ("r18 3x3 s2", 256, 512, 14, 3, 2, 1, "relu"),
    ("r18 1x1 s2", 256, 512, 14, 1, 2, 1, "none"),
    ("r18 3x3", 512, 512, 7, 3, 1, 1, "relu"),
    ("r50 1x1", 64, 256, 56, 1, 1, 1, "none"),
    ("r50 1x1", 256, 64, 56, 1, 1, 1, "relu"),
    ("r50 3x3 s2", 128, 128, 56, 3, 2, 1, "relu"),
    ("r50 1x1", 512, 128, 28, 1, 1, 1, "relu"),
    ("r50 1x1", 256, 1024, 14, 1, 1, 1, "none"),
    ("r50 1x1", 1024, 256, 14, 1, 1, 1, "relu"),
    ("r50 1x1 s2", 512, 1024, 28, 1, 2, 1, "none"),
    ("r50 1x1", 512, 2048, 7, 1, 1, 1, "none"),
    ("r50 1x1", 2048, 512, 7, 1, 1, 1, "relu"),
    ("d121 1x1", 256, 128, 56, 1, 1, 1, "relu"),
    ("d121 3x3", 128, 32, 56, 3, 1, 1, "none"),
    ("d121 1x1", 1024, 128, 7, 1, 1, 1, "relu"),
    ("d121 3x3", 128, 32, 7, 3, 1, 1, "none"),
]


def mobile_layer_model(c, o, size, k, stride, groups, activation):
    """Conv(x, w, b) then ReLU, ReLU6 (Clip 0..6), SiLU (x * sigmoid(x)) or nothing, pads k // 2."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(c * o + size)
    out = (size + 2 * (k // 2) - k) // stride + 1
    inits = [numpy_helper.from_array((rng.standard_normal((o, c // groups, k, k)) * 0.1).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal(o).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["conv"], kernel_shape=[k, k], strides=[stride] * 2,
                              pads=[k // 2] * 4, group=groups)]
    if activation == "relu":
        nodes.append(helper.make_node("Relu", ["conv"], ["y"]))
    elif activation == "relu6":
        inits += [numpy_helper.from_array(np.array(v, np.float32), n) for n, v in (("lo", 0), ("hi", 6))]
        nodes.append(helper.make_node("Clip", ["conv", "lo", "hi"], ["y"]))
    elif activation == "silu":
        nodes += [helper.make_node("Sigmoid", ["conv"], ["s"]), helper.make_node("Mul", ["conv", "s"], ["y"])]
    else:
        nodes.append(helper.make_node("Identity", ["conv"], ["y"]))
    graph = helper.make_graph(nodes, "layer", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, size, size])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, o, out, out])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), 2 * o * out * out * (c // groups) * k * k


def compare_layers(title: str, layers) -> None:
    import platform

    import onnxruntime as ort
    import lezero.onnx

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
               platform.processor())
    print(f"{title} convolutions, batch 1, {args.threads} threads, {cpu}, "
          f"onnxruntime {ort.__version__}; medians and minimums of {args.reps} alternating calls (on a shared "
          "machine the minimums are the least disturbed)")
    # (column, ratio column, the layer compiled that way) of each variant asked for
    variants = [(name, ratio, build) for wanted, name, ratio, build in (
        (args.prepacking, "per-call ms", "pre/per-call", per_call_packing),
        (args.host_tile, "host-tile ms", "conv/host tile", with_host_tile),
        (args.pixel_lanes, "pixel-lanes ms", "ch/px lanes", with_pixels_in_lanes)) if wanted]
    print(f"{'layer':<40}{'lezero ms':>10}{'ORT ms':>9}{'lezero/ORT':>12}{'min ratio':>10}{'lezero GFLOP/s':>16}"
          f"{'ORT GFLOP/s':>13}" + "".join(f"{name:>15}{ratio:>15}" for name, ratio, _ in variants))
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    options.log_severity_level = 3
    ratios, min_ratios = [], []
    words = [word for word in args.only.split(",") if word]
    for name, c, o, size, k, stride, groups, activation in layers:
        label = f"{name} {c}->{o} {size}x{size} {activation}"
        if words and not any(word in label for word in words):
            continue
        proto, flops = mobile_layer_model(c, o, size, k, stride, groups, activation)
        feeds = {"x": np.random.default_rng(size).standard_normal((1, c, size, size)).astype(np.float32)}
        ours = lezero.onnx.compile(proto)
        theirs = ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
        expected = theirs.run(None, feeds)[0]
        np.testing.assert_allclose(ours.run(feeds)["y"], expected, rtol=1e-4, atol=1e-4)
        runs = [lambda: ours.run(feeds), lambda: theirs.run(None, feeds)]
        for _, _, build in variants:
            compiled = build(proto, feeds)
            np.testing.assert_allclose(compiled.run(feeds)["y"], expected, rtol=1e-4, atol=1e-4)
            runs.append(lambda compiled=compiled: compiled.run(feeds))
        times = shuffled_times(runs, args.reps)
        a, b = (float(np.median(t)) for t in times[:2])
        fastest_ours, fastest_theirs = (min(t) for t in times[:2])
        ratios.append(a / b)
        min_ratios.append(fastest_ours / fastest_theirs)
        print(f"{label:<40}{a * 1e3:>10.3f}{b * 1e3:>9.3f}{a / b:>12.2f}{fastest_ours / fastest_theirs:>10.2f}"
              f"{flops / fastest_ours / 1e9:>16.1f}{flops / fastest_theirs / 1e9:>13.1f}"
              + "".join(f"{np.median(t) * 1e3:>15.3f}{a / np.median(t):>15.3f}" for t in times[2:]), flush=True)
    print(f"geometric mean lezero/ORT {float(np.exp(np.mean(np.log(ratios)))):.2f} (medians), "
          f"{float(np.exp(np.mean(np.log(min_ratios)))):.2f} (minimums)")


def per_call_packing(proto, feeds):
    """``proto`` compiled with its conv weights packed by every call (no kernel marked as reading
    constants pre-packed), lowered now, while the marking is off."""
    import lezero.onnx
    from lezero.codegen import schedule

    kinds, schedule.PACKED_CONSTANT_KINDS = schedule.PACKED_CONSTANT_KINDS, ()
    try:
        compiled = lezero.onnx.compile(proto)
        compiled.run(feeds)  # the plan (and its kernels) is built on the first run
    finally:
        schedule.PACKED_CONSTANT_KINDS = kinds
    return compiled


def compiled_with(proto, feeds, owner, values: dict, tag: str):
    """``proto`` compiled, and lowered now, with the attributes ``values`` of ``owner`` set.  The
    kernel's text is the same either way, so the lowering sources' fingerprint (part of the cache
    key) is changed by ``tag`` while it is lowered."""
    import lezero.onnx
    from lezero.runtime import kernel_cache

    old, fingerprint = {name: getattr(owner, name) for name in values}, kernel_cache.source_fingerprint
    for name, value in values.items():
        setattr(owner, name, value)
    kernel_cache.source_fingerprint = lambda: fingerprint() + tag
    try:
        compiled = lezero.onnx.compile(proto)
        compiled.run(feeds)
    finally:
        for name, value in old.items():
            setattr(owner, name, value)
        kernel_cache.source_fingerprint = fingerprint
    return compiled


def with_host_tile(proto, feeds):
    """``proto`` compiled with the target's GEMM register tile for its convs."""
    from lezero.codegen.llvm import contraction_gemm

    return compiled_with(proto, feeds, contraction_gemm.ConvGemm, {
        "register_tile": lambda self, host, cpu, narrower_vectors: (host.vector_width, host.mr, host.nr_vectors)},
        "-host-tile")


def with_pixels_in_lanes(proto, feeds):
    """``proto`` compiled with every depthwise conv on the kernel with pixels in the vector lanes."""
    from lezero.codegen.llvm import depthwise

    return compiled_with(proto, feeds, depthwise, {"LANES_MAX_PIXELS": 0, "LANES_MAX_PIXELS_FEW_TAPS": 0},
                         "-pixel-lanes")


if __name__ == "__main__":
    if args.mobile:
        compare_layers("mobilenet_v2 / efficientnet_b0", MOBILE_LAYERS)
    elif args.resnet:
        compare_layers("resnet18 / resnet50 / densenet121", RESNET_LAYERS)
    else:
        main()
        if args.lowerings:
            compare_lowerings()
