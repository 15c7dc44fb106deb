"""Compile time per kernel: cold (LLVM O3 + object code) and warm (loaded from the disk cache).

Compiles the seed's MLP (forward pass with softmax) and a transformer-style block of elementwise,
reduction and matmul kernels twice, each time in a fresh process: first with an empty cache
directory (cold), then with the same directory (warm: every kernel from disk).

    .venv/bin/python benchmarks/compile_time.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

PROGRAMS = {
    "mlp": ("""
func.func @f(%x: tensor<64x784xf32>, %w1: tensor<784x256xf32>, %b1: tensor<256xf32>,
             %w2: tensor<256x10xf32>, %b2: tensor<10xf32>) -> tensor<64x10xf32> {
  %0 = "lz.matmul"(%x, %w1) : (tensor<64x784xf32>, tensor<784x256xf32>) -> tensor<64x256xf32>
  %1 = "lz.add"(%0, %b1) : (tensor<64x256xf32>, tensor<256xf32>) -> tensor<64x256xf32>
  %2 = "lz.relu"(%1) : (tensor<64x256xf32>) -> tensor<64x256xf32>
  %3 = "lz.matmul"(%2, %w2) : (tensor<64x256xf32>, tensor<256x10xf32>) -> tensor<64x10xf32>
  %4 = "lz.add"(%3, %b2) : (tensor<64x10xf32>, tensor<10xf32>) -> tensor<64x10xf32>
  %5 = "lz.softmax"(%4) {axis = -1 : i64} : (tensor<64x10xf32>) -> tensor<64x10xf32>
  func.return %5 : tensor<64x10xf32>
}""", [(64, 784), (784, 256), (256,), (256, 10), (10,)]),
    "block": ("""
func.func @f(%x: tensor<128x256xf32>, %w: tensor<256x256xf32>, %g: tensor<256xf32>, %b: tensor<256xf32>) -> tensor<128x256xf32> {
  %0 = "lz.layer_norm"(%x, %g, %b) {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<128x256xf32>, tensor<256xf32>, tensor<256xf32>) -> tensor<128x256xf32>
  %1 = "lz.matmul"(%0, %w) : (tensor<128x256xf32>, tensor<256x256xf32>) -> tensor<128x256xf32>
  %2 = "lz.gelu"(%1) : (tensor<128x256xf32>) -> tensor<128x256xf32>
  %3 = "lz.add"(%2, %x) : (tensor<128x256xf32>, tensor<128x256xf32>) -> tensor<128x256xf32>
  %4 = "lz.softmax"(%3) {axis = -1 : i64} : (tensor<128x256xf32>) -> tensor<128x256xf32>
  func.return %4 : tensor<128x256xf32>
}""", [(128, 256), (256, 256), (256,), (256,)]),
}

CHILD = r"""
import json, sys, time
import numpy as np
import lezero
from lezero.runtime.kernel_cache import default_cache
text, shapes = json.loads(sys.argv[1])
start = time.perf_counter()
f = lezero.compile(text)
f(*[np.ones(s, np.float32) for s in shapes])
total = time.perf_counter() - start
s = default_cache().stats
print(json.dumps({"total": total, "kernels": s.compiles + s.disk_hits, "compiles": s.compiles,
                  "disk_hits": s.disk_hits, "compile_s": s.compile_seconds, "load_s": s.load_seconds}))
"""


def run(program, cache_dir):
    env = dict(os.environ, LEZERO_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(program)], env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


def main():
    print(f"{'program':8} {'kernels':>7} {'cold: LLVM ms/kernel':>21} {'warm: load ms/kernel':>21} "
          f"{'cold first call s':>18} {'warm first call s':>18}")
    for name, program in PROGRAMS.items():
        with tempfile.TemporaryDirectory() as cache_dir:
            cold = run(program, cache_dir)
            warm = run(program, cache_dir)
        assert warm["compiles"] == 0, warm
        n = cold["kernels"]
        print(f"{name:8} {n:7d} {1e3 * cold['compile_s'] / n:21.1f} {1e3 * warm['load_s'] / n:21.2f} "
              f"{cold['total']:18.3f} {warm['total']:18.3f}")


if __name__ == "__main__":
    main()
