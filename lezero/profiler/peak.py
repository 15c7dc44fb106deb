"""The host's peak, measured, so a profile can say how far each kernel is from it.

A datasheet peak (cores x clock x FMA width) overstates what a shared VM gives and needs the clock
the CPU runs at, which a guest cannot read; so ``host_peak()`` measures the two bounds a kernel
meets, once per process (about a second): compute, as the best of a few 1024^3 float32 matrix
products by numpy's BLAS and by lezero's GEMM (on the thread pool: numpy's BLAS may run on one
thread where lezero's kernels run on all), and memory bandwidth, as the best of a few copies
of 64 MiB (bytes read + written).  Both are the same measurements ``benchmarks/onnx_models.py
--profile`` makes.
"""
from __future__ import annotations

import functools
import time
from dataclasses import dataclass

import numpy as np

from lezero.runtime import compile as compile_module


@dataclass(frozen=True)
class HostPeak:
    gflops: float   # float32 GFLOP/s of a large matrix product
    gbytes: float   # GB/s of a large copy (read + write)


def _best_seconds(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


@functools.cache
def host_peak() -> HostPeak:
    n = 1024
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    matmul = compile_module(f"""
    func.func @mm(%a: tensor<{n}x{n}xf32>, %b: tensor<{n}x{n}xf32>) -> tensor<{n}x{n}xf32> {{
      %0 = "lz.matmul"(%a, %b) : (tensor<{n}x{n}xf32>, tensor<{n}x{n}xf32>) -> tensor<{n}x{n}xf32>
      func.return %0 : tensor<{n}x{n}xf32>
    }}""")
    matmul(a, b)  # compiled and its arena touched before the timing
    seconds = min(_best_seconds(lambda: a @ b, 5), _best_seconds(lambda: matmul(a, b), 5))
    gflops = 2 * n ** 3 / seconds / 1e9
    src = np.ones(16 << 20, np.float32)
    dst = np.empty_like(src)
    gbytes = 2 * src.nbytes / _best_seconds(lambda: np.copyto(dst, src), 5) / 1e9
    return HostPeak(gflops, gbytes)
