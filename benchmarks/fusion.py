"""Fusion never loses: for every kernel kind, the kernels partition chooses against the same
function compiled as its unfused parts (every op a kernel of its own), on a set of shapes.

Run it as

    LEZERO_NUM_THREADS=2 .venv/bin/python benchmarks/fusion.py [--threads 2] [--rounds 41] [--only NAME]

Each case is one small function (an elementwise chain, a reduction with its prologue and
epilogue, a matmul or conv with its epilogue or a transposed operand, pooling, selection...)
compiled three ways through the whole pipeline (lezero.runtime's CompiledFunction):

- ``chosen``: the default pipeline, with partition's cost model (lezero/passes/fusion_cost.py);
- ``legal``: ``partition{cost-model=false}``: every legal fusion taken, most profitable first
  (what partition did before the cost model);
- ``parts``: ``partition{max-ops=1}``: each op a kernel of its own.

The three run alternately in the same process (``--rounds`` rounds of a batch of calls each, the
median of each), and a case PASSES when ``chosen`` is at most ``parts`` times 1 + ``--tolerance``
(the machine is shared: two medians of the same kernel differ by a few percent, and a burst of
other work can slow one variant's rounds more: a failing case is measured again, up to ATTEMPTS
times, and FAILS only when every attempt does).  ``legal/parts``
shows what the cost model refuses: above 1, fusing everything legal loses.  The exit status is 1
when a case FAILS.  The outputs of all three are checked against each other first.
"""
from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# functions are built with the test helpers' builder (tests/support/ir_building.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from lezero.ir import ModuleOp, tensor  # noqa: E402
from lezero.passes import run_pipeline  # noqa: E402
from lezero.runtime.cpu import CompiledFunction  # noqa: E402
from lezero.runtime.thread_pool import ThreadPool  # noqa: E402
from support.ir_building import build  # noqa: E402

PIPELINE = ("shape-infer,decompose,canonicalize,cse,constant-fold,dce,shape-infer,partition{%s},fuse,"
            "memory-plan")
VARIANTS = {"chosen": "", "legal": "cost-model=false", "parts": "max-ops=1"}
ATTEMPTS = 3  # a case that fails is measured again, up to this many times in all


def function(arg_shapes, body) -> ModuleOp:
    """``@f`` over float32 arguments of ``arg_shapes``, returning ``body(builder, *args)``."""
    return build([tensor(s, "f32") for s in arg_shapes], body)


def scalar(b, v):
    return b.constant(np.array(v, np.float32))


# --- the cases: (name, kind, argument shapes, body) -----------------------------------------------

def gelu_tanh(b, x):
    """GPT-2's GELU as torch exports it: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    cube = b.op("lz.pow", x, scalar(b, 3.0))
    inner = b.op("lz.mul", b.op("lz.add", x, b.op("lz.mul", cube, scalar(b, 0.044715))),
                 scalar(b, math.sqrt(2 / math.pi)))
    return b.op("lz.mul", b.op("lz.mul", x, scalar(b, 0.5)), b.op("lz.add", b.op("lz.tanh", inner), scalar(b, 1.0)))


def bias_gelu(b, x, w, bias):
    return b.op("lz.gelu", b.op("lz.add", b.op("lz.matmul", x, w), bias))


def softmax(b, x):
    m = b.op("lz.reduce_max", x, axes=[-1], keepdims=True)
    e = b.op("lz.exp", b.op("lz.sub", x, m))
    return b.op("lz.div", e, b.op("lz.reduce_sum", e, axes=[-1], keepdims=True))


def masked_scaled_softmax(b, x, mask):
    return softmax(b, b.op("lz.add", b.op("lz.mul", x, scalar(b, 0.125)), mask))


def layer_norm(b, x, scale, bias):
    mean = b.op("lz.reduce_mean", x, axes=[-1], keepdims=True)
    centered = b.op("lz.sub", x, mean)
    var = b.op("lz.reduce_mean", b.op("lz.mul", centered, centered), axes=[-1], keepdims=True)
    inv = b.op("lz.rsqrt", b.op("lz.add", var, scalar(b, 1e-5)))
    return b.op("lz.add", b.op("lz.mul", b.op("lz.mul", centered, inv), scale), bias)


def erf_prologue_row_sums(b, x):
    """An expensive prologue under a reduction: computed once per element either way."""
    return b.op("lz.reduce_sum", b.op("lz.erf", b.op("lz.mul", x, scalar(b, 0.7))), axes=[-1])


def column_sums_of_exp(b, x):
    return b.op("lz.reduce_sum", b.op("lz.exp", x), axes=[0])


def transposed_a_matmul(perm):
    return lambda b, x, w: b.op("lz.matmul", b.op("lz.transpose", x, perm=perm), w)


def transposed_b_matmul(perm):
    return lambda b, x, w: b.op("lz.matmul", x, b.op("lz.transpose", w, perm=perm))


def matmul_residual_add(b, x, w, r):
    return b.op("lz.add", b.op("lz.matmul", x, w), r)


def conv_bias_relu(b, x, w, bias):
    y = b.op("lz.conv2d", x, w, pads=[1, 1, 1, 1])
    return b.op("lz.relu", b.op("lz.add", y, b.op("lz.reshape", bias, shape=[-1, 1, 1])))


def depthwise_bn_relu6(b, x, w, scale, shift):
    y = b.op("lz.conv2d", x, w, pads=[1, 1, 1, 1], groups=x.type.shape[1])
    y = b.op("lz.add", b.op("lz.mul", y, b.op("lz.reshape", scale, shape=[-1, 1, 1])),
             b.op("lz.reshape", shift, shape=[-1, 1, 1]))
    return b.op("lz.min", b.op("lz.max", y, scalar(b, 0.0)), scalar(b, 6.0))


def max_pool_relu(b, x):
    return b.op("lz.relu", b.op("lz.max_pool2d", b.op("lz.add", x, scalar(b, 1.0)), kernel=[3, 3],
                                strides=[2, 2], pads=[1, 1, 1, 1]))


def transpose_add(b, x, y):
    return b.op("lz.add", b.op("lz.transpose", x, perm=[1, 0]), y)


def argmax_of_scaled(b, x):
    return b.op("lz.argmax", b.op("lz.mul", x, scalar(b, 2.0)), axis=-1)


def gather_rows_add(b, table, bias):
    index = b.constant(np.arange(0, 4096, 3, dtype=np.int64) % table.type.shape[0])
    return b.op("lz.add", b.op("lz.gather", table, index, axis=0), bias)


def concat_relu(b, x, y):
    return b.op("lz.relu", b.op("lz.concat", x, y, axis=1))


CASES = [
    ("gelu_tanh 256x1024", "elementwise", [(256, 1024)], gelu_tanh),
    ("gelu_tanh 4096x1024", "elementwise", [(4096, 1024)], gelu_tanh),
    ("transpose+add 1024^2", "elementwise", [(1024, 1024), (1024, 1024)], transpose_add),
    ("gather rows+add 4096/1366x768", "elementwise", [(4096, 768), (768,)], gather_rows_add),
    ("concat+relu 2x(64x56x56)", "elementwise", [(1, 64, 56, 56), (1, 64, 56, 56)], concat_relu),
    ("softmax 12x197x197", "reduction", [(12, 197, 197)], softmax),
    ("scale+mask+softmax 4x4x64x64", "reduction", [(4, 4, 64, 64), (4, 1, 1, 64)], masked_scaled_softmax),
    ("layer norm 197x768", "reduction", [(197, 768), (768,), (768,)], layer_norm),
    ("layer norm 256x256", "reduction", [(256, 256), (256,), (256,)], layer_norm),
    ("erf prologue row sums 512x1024", "reduction", [(512, 1024)], erf_prologue_row_sums),
    ("exp column sums 1024x512", "reduction", [(1024, 512)], column_sums_of_exp),
    ("argmax of scaled 512x1000", "reduction", [(512, 1000)], argmax_of_scaled),
    ("matmul+bias+gelu 197x768x3072", "matmul", [(197, 768), (768, 3072), (3072,)], bias_gelu),
    ("matmul+bias+gelu 4x768x768", "matmul", [(4, 768), (768, 768), (768,)], bias_gelu),
    ("matmul+residual 256x512x512", "matmul", [(256, 512), (512, 512), (256, 512)], matmul_residual_add),
    ("transpose[1,0,2] A 1x197x768 @ 768x2304", "matmul", [(1, 197, 768), (768, 2304)],
     transposed_a_matmul([1, 0, 2])),
    ("transpose[1,0] A 768x197 @ 768x768", "matmul", [(768, 197), (768, 768)], transposed_a_matmul([1, 0])),
    ("transpose[1,0,2] A 197x12x64 @ 64x64", "matmul", [(197, 12, 64), (64, 64)], transposed_a_matmul([1, 0, 2])),
    ("x @ w.T 197x768 @ (2304x768).T", "matmul", [(197, 768), (2304, 768)], transposed_b_matmul([1, 0])),
    ("x @ w.T 4x768 @ (768x768).T", "matmul", [(4, 768), (768, 768)], transposed_b_matmul([1, 0])),
    ("QK^T 12x197x64 @ (12x197x64)^T", "matmul", [(12, 197, 64), (12, 197, 64)], transposed_b_matmul([0, 2, 1])),
    ("conv3x3+bias+relu 64x56x56", "conv", [(1, 64, 56, 56), (64, 64, 3, 3), (64,)], conv_bias_relu),
    ("depthwise3x3+bn+relu6 144x56x56", "conv", [(1, 144, 56, 56), (144, 1, 3, 3), (144,), (144,)],
     depthwise_bn_relu6),
    ("add+maxpool3x3/2+relu 64x112x112", "single", [(1, 64, 112, 112)], max_pool_relu),
]


# --- measuring ------------------------------------------------------------------------------------

def compile_variant(module: ModuleOp, options: str, pool: ThreadPool):
    scheduled = run_pipeline(module.clone(), PIPELINE % options)
    kernels = [op.attributes["name"].value for op in scheduled.lookup("f").entry_block.ops if op.name == "lz.kernel"]
    return CompiledFunction(scheduled, "f", pool=pool), kernels


def calls_per_batch(run) -> int:
    """Calls that take about 2 ms: well above the timer's resolution, and short enough that the
    variants alternate faster than the shared machine's load changes."""
    start = time.perf_counter()
    run()
    once = max(time.perf_counter() - start, 1e-6)
    return max(1, min(200, int(0.002 / once)))


def measure(compiled: dict, inputs, rounds: int) -> dict:
    """Median seconds per call of each variant, the variants alternating batch by batch."""
    runs = {name: (lambda c=c: c(*inputs)) for name, (c, _) in compiled.items()}
    for run in runs.values():
        run()
    batch = min(calls_per_batch(run) for run in runs.values())
    times = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            start = time.perf_counter()
            for _ in range(batch):
                run()
            times[name].append((time.perf_counter() - start) / batch)
    return {name: float(np.median(t)) for name, t in times.items()}


def check_outputs(compiled: dict, inputs, name: str) -> None:
    outputs = {variant: c(*inputs) for variant, (c, _) in compiled.items()}
    want = outputs["parts"]
    for variant, got in outputs.items():
        got, expected = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        for g, w in zip(got, expected):
            if not np.allclose(g, w, rtol=1e-4, atol=1e-4, equal_nan=True):
                raise SystemExit(f"{name}: the {variant} kernels compute other results than the unfused parts")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=41, help="alternating rounds (batches of calls) per variant")
    parser.add_argument("--tolerance", type=float, default=0.05, help="chosen may be this much slower (noise)")
    parser.add_argument("--only", default="", help="run the cases whose name contains this")
    args = parser.parse_args()

    print(f"cpu: {platform.processor() or platform.machine()} {_cpu_model()}, {args.threads} threads; medians "
          f"of {args.rounds} alternating rounds; PASS: chosen <= parts x {1 + args.tolerance:.2f}")
    pool = ThreadPool(args.threads)
    rng = np.random.default_rng(0)
    failed = []
    print(f"{'case':44} {'kind':11} {'chosen ms':>9} {'legal ms':>9} {'parts ms':>9} {'chosen/parts':>12} "
          f"{'legal/parts':>11}  kernels chosen")
    for name, kind, shapes, body in CASES:
        if args.only not in name:
            continue
        module = function(shapes, body)
        compiled = {variant: compile_variant(module, options, pool) for variant, options in VARIANTS.items()}
        inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        check_outputs(compiled, inputs, name)
        for attempt in range(ATTEMPTS):  # a real loss repeats; a burst of the machine's load does not
            t = measure(compiled, inputs, args.rounds)
            ratio = t["chosen"] / t["parts"]
            if ratio <= 1 + args.tolerance:
                break
        verdict = "PASS" if ratio <= 1 + args.tolerance else "FAIL"
        if verdict == "FAIL":
            failed.append(name)
        verdict += f" ({attempt + 1} runs)" if attempt else ""
        print(f"{name:44} {kind:11} {t['chosen'] * 1e3:9.3f} {t['legal'] * 1e3:9.3f} {t['parts'] * 1e3:9.3f} "
              f"{ratio:12.2f} {t['legal'] / t['parts']:11.2f}  {verdict} {len(compiled['chosen'][1])}: "
              f"{', '.join(compiled['chosen'][1])}", flush=True)
    print(f"{len(failed)} FAIL" + (": " + "; ".join(failed) if failed else ""))
    return 1 if failed else 0


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return ""


if __name__ == "__main__":
    sys.exit(main())
