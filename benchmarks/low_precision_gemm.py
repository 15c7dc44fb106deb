"""bf16 and f16 matmul on the CPU against float32, lezero beside PyTorch (issue 13 item 3).

    LEZERO_NUM_THREADS=2 .venv/bin/python benchmarks/low_precision_gemm.py [--threads 2] [--sizes 256,1024,128x768x3072]

A bf16 lz.matmul runs tdpbf16ps on AMX tiles where the CPU has AMX-BF16 (Sapphire Rapids), else
vdpbf16ps on bf16 pairs packed from its float32 storage where it has AVX-512 BF16 (gemm_bf16.py),
else the float32 GEMM, and rounds each sum once to bf16; an f16 one
runs the float32 GEMM, widening its half operands as it packs them.  The casts from float32 are
timed too: they are the GEMM's operand prologue (each value rounded to bf16 or f16 where it is
packed, no kernel of its own), and rows ``bf16 cast`` / ``f16 cast`` are the same functions with
their casts as kernels of their own, as before that fusion (at 128x768x3072, B's cast reads and
writes 2.4M values per call; f16's cast kernels write half storage the GEMM then widens).  torch's tensors are in the dtype already (no casts timed).  Per size
(n: n x n times n x n; M x K x N), lezero's lz.matmul through ``lezero.compile`` in each dtype
(float32 arguments cast to it inside the function, as autocast does) and torch.matmul in each (torch.set_num_threads(--threads)) are called in turn, alternating, and the
medians are printed as GFLOP/s with each dtype's time over its float32 time, and lezero's over
torch's in the same dtype.  Results are checked against numpy's float32 product first.
"""
from __future__ import annotations

import argparse
import os
import sys
import unittest.mock

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--sizes", default="256,1024,128x768x3072")
parser.add_argument("--seconds", type=float, default=3.0, help="time budget per size")
args = parser.parse_args()
os.environ.setdefault("LEZERO_NUM_THREADS", str(args.threads))

import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lezero  # noqa: E402
from lezero.ir.dialect.numerics import round_to_bf16  # noqa: E402
from lezero.passes import partition  # noqa: E402
from timing import alternating_medians, cpu_model  # noqa: E402

torch.set_num_threads(args.threads)
DTYPES = {"f32": (np.float32, torch.float32), "bf16": (np.float32, torch.bfloat16), "f16": (np.float16, torch.float16),
          "bf16 cast": (np.float32, torch.bfloat16), "f16 cast": (np.float16, torch.float16)}


def parse(size: str) -> tuple[int, int, int]:
    dims = [int(d) for d in size.split("x")]
    return (dims[0],) * 3 if len(dims) == 1 else tuple(dims)


def matmul_function(m: int, k: int, n: int, dtype: str):
    """float32 A and B -> (A cast to ``dtype``) @ (B cast to ``dtype``), as autocast runs it: a
    function given bf16 arguments would round them in numpy first (the runtime's argument check),
    slower than the GEMM itself."""
    fa, fb = (f"tensor<{r}x{c}xf32>" for r, c in ((m, k), (k, n)))
    ta, tb, tc = (f"tensor<{r}x{c}x{dtype}>" for r, c in ((m, k), (k, n), (m, n)))
    casts = "" if dtype == "f32" else (f'  %a = "lz.cast"(%fa) {{to = {dtype}}} : ({fa}) -> {ta}\n'
                                       f'  %b = "lz.cast"(%fb) {{to = {dtype}}} : ({fb}) -> {tb}\n')
    a, b = ("%fa", "%fb") if dtype == "f32" else ("%a", "%b")
    if dtype.endswith(" cast"):  # the casts as kernels of their own: no matmul reads a cast (as before)
        with unittest.mock.patch.object(partition, "is_operand_cast", lambda op, anchor: False):
            fn = matmul_function(m, k, n, dtype.split()[0])
            fn.plan_for([(m, k), (k, n)])  # the plan is built (and scheduled) on first use
            return fn
    return lezero.compile(f'func.func @mm(%fa: {fa}, %fb: {fb}) -> {tc} {{\n{casts}'
                          f'  %0 = "lz.matmul"({a}, {b}) : ({ta}, {tb}) -> {tc}\n  func.return %0 : {tc}\n}}')


def main() -> None:
    print(f"# {cpu_model()}, {args.threads} threads; torch {torch.__version__}; load {open('/proc/loadavg').read().split()[0]}")
    print(f"{'size':>14} {'dtype':>9} {'lezero GF/s':>11} {'torch GF/s':>10} {'lz x/f32':>8} {'torch x/f32':>11} "
          f"{'lz/torch':>8}")
    rng = np.random.default_rng(0)
    for size in args.sizes.split(","):
        m, k, n = parse(size)
        a32, b32 = (round_to_bf16(rng.standard_normal(s, dtype=np.float32)) for s in ((m, k), (k, n)))
        runs = {}
        for dtype, (storage, torch_dtype) in DTYPES.items():
            a, b = a32.astype(storage), b32.astype(storage)
            fn = matmul_function(m, k, n, dtype)
            got = np.asarray(fn(a32, b32), dtype=np.float32)
            np.testing.assert_allclose(got, a.astype(np.float32) @ b.astype(np.float32), rtol=2e-2,
                                       atol=2e-2 * np.sqrt(k), err_msg=f"{size} {dtype}")
            ta, tb = (torch.from_numpy(x.astype(np.float32)).to(torch_dtype) for x in (a, b))
            runs[("lezero", dtype)] = lambda fn=fn, a32=a32, b32=b32: fn(a32, b32)
            if not dtype.endswith(" cast"):  # torch's bf16 and f16 are timed once
                runs[("torch", dtype)] = lambda ta=ta, tb=tb: torch.matmul(ta, tb)
        medians = alternating_medians(runs, args.seconds, warm_each=True)
        flop = 2.0 * m * k * n
        for dtype in DTYPES:
            lz, peer = medians[("lezero", dtype)], medians[("torch", dtype.split()[0])]
            print(f"{size:>14} {dtype:>9} {flop / lz / 1e9:>11.1f} {flop / peer / 1e9:>10.1f} "
                  f"{lz / medians[('lezero', 'f32')]:>8.2f} {peer / medians[('torch', 'f32')]:>11.2f} "
                  f"{lz / peer:>8.2f}", flush=True)


if __name__ == "__main__":
    main()
