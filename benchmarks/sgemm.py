"""float32 GEMM: lezero's generated kernel against numpy (OpenBLAS), both on the same threads.

Run it as

    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/sgemm.py [--threads 2] [--sizes 256,512,1024,2048]

This machine's environment sets OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE, which slow numpy's BLAS;
unset them so the peer is at its best. numpy is limited to --threads threads with threadpoolctl when
it is installed, else through OPENBLAS_NUM_THREADS (set here before numpy is imported).

Each time is the best of several repetitions (this machine is shared: the best is the least
disturbed). Two peaks are printed for scale:
  theoretical: cores x clock x FLOP per cycle per core, where the clock is /proc/cpuinfo's
               "cpu MHz" (the nominal/TSC clock; a boosting CPU may run faster) and FLOP per cycle
               is 2 (multiply + add) x FMA issue per cycle x floats per vector: with AVX-512 on
               Zen 4 one 16-float FMA per cycle (two 256-bit pipes), on Intel two; AVX2: two
               8-float FMAs per cycle.
  measured:    a generated loop of independent vector FMAs on every thread, which also shows the
               clock the cores actually run at.
"""
from __future__ import annotations

import argparse
import os
import sys

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--sizes", default="256,512,1024,2048")
parser.add_argument("--seconds", type=float, default=1.0, help="time budget per size and library")
args = parser.parse_args()
os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)  # before numpy loads OpenBLAS

import contextlib  # noqa: E402
import ctypes  # noqa: E402
import platform  # noqa: E402

import llvmlite.binding as llvm  # noqa: E402
import llvmlite.ir as ir  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import lezero  # noqa: E402
from lezero.codegen.llvm import gemm, jit  # noqa: E402
from timing import best_seconds  # noqa: E402

try:
    from threadpoolctl import threadpool_limits
except ImportError:
    threadpool_limits = None



def nominal_clock_ghz() -> float | None:
    try:
        with open("/proc/cpuinfo") as f:
            mhz = [float(line.split(":")[1]) for line in f if line.startswith("cpu MHz")]
        return max(mhz) / 1000 if mhz else None
    except OSError:
        return None


def fma_flops_per_cycle() -> tuple[int, str]:
    features = jit.host_cpu_features()
    name = llvm.get_host_cpu_name()
    if "avx512f" in features:
        # Zen 4 executes a 512-bit FMA on its two 256-bit FMA pipes: one per cycle. Intel server
        # cores with two 512-bit FMA units do two.
        per_cycle = 1 if name.startswith("znver") else 2
        return 2 * per_cycle * 16, f"AVX-512: 2 x {per_cycle} FMA/cycle x 16 floats ({name})"
    if "fma" in features:
        return 2 * 2 * 8, f"AVX2: 2 x 2 FMA/cycle x 8 floats ({name})"
    return 2 * 4, f"SSE: 2 x 1 x 4 floats, no FMA ({name})"


def build_fma_peak_module(width: int, chains: int = 24) -> ir.Module:
    """void fma_peak(i64 iterations, float* out): ``chains`` independent vector FMA chains."""
    f32, i64 = ir.FloatType(), ir.IntType(64)
    vector = ir.VectorType(f32, width)
    module = ir.Module("fma_peak")
    fma = ir.Function(module, ir.FunctionType(vector, [vector] * 3), f"llvm.fma.v{width}f32")
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64, ir.PointerType()]), "fma_peak")
    iterations, out = function.args
    b = ir.IRBuilder(function.append_basic_block("entry"))
    entry, loop, done = b.block, function.append_basic_block("loop"), function.append_basic_block("done")
    # Loaded, so unknown at compile time: the loop can't be folded away.
    x = b.load(out, typ=vector, align=4)
    y = b.load(b.gep(out, [ir.Constant(i64, width)], source_etype=f32), typ=vector, align=4)
    b.branch(loop)
    b.position_at_end(loop)
    i = b.phi(i64)
    i.add_incoming(ir.Constant(i64, 0), entry)
    accumulators = []
    for c in range(chains):
        phi = b.phi(vector)
        phi.add_incoming(ir.Constant(vector, [float(c)] * width), entry)
        accumulators.append(phi)
    updated = [b.call(fma, [x, y, phi]) for phi in accumulators]  # acc += x * y
    for phi, value in zip(accumulators, updated):
        phi.add_incoming(value, loop)
    i_next = b.add(i, ir.Constant(i64, 1))
    i.add_incoming(i_next, loop)
    b.cbranch(b.icmp_signed("<", i_next, iterations), loop, done)
    b.position_at_end(done)
    total = updated[0]  # the updated values: summing the phis would keep both copies live
    for value in updated[1:]:
        total = b.fadd(total, value)
    b.store(total, out, align=4)
    b.ret_void()
    return module


def measured_peak_gflops(threads: int) -> float:
    width = gemm.GemmConfig.for_host().vector_width
    chains = 24
    compiled = jit.compile_module(build_fma_peak_module(width, chains))
    fma_peak = compiled.ctypes_function("fma_peak", None, [ctypes.c_int64, ctypes.c_void_p])
    iterations = 2_000_000
    buffers = [np.full(2 * width, 1e-9, np.float32) for _ in range(threads)]
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(threads) as pool:
        def run():
            list(pool.map(lambda buf: fma_peak(iterations, buf.ctypes.data), buffers))
        seconds = best_seconds(run, 0.5, max_reps=5)
    return threads * iterations * chains * 2 * width / seconds / 1e9


def main() -> None:
    threads = args.threads
    sizes = [int(s) for s in args.sizes.split(",")]
    flop_per_cycle, fma_description = fma_flops_per_cycle()
    clock = nominal_clock_ghz()
    cores = min(threads, len(os.sched_getaffinity(0)))
    print(f"CPU: {platform.processor() or platform.machine()}, {len(os.sched_getaffinity(0))} cores available, "
          f"{threads} threads")
    if clock:
        print(f"theoretical peak: {cores} cores x {clock:.2f} GHz (nominal, /proc/cpuinfo) x {flop_per_cycle} "
              f"FLOP/cycle [{fma_description}] = {cores * clock * flop_per_cycle:.0f} GFLOP/s")
    measured = measured_peak_gflops(cores)
    print(f"measured peak (independent FMA chains on {cores} threads): {measured:.0f} GFLOP/s"
          f" (implies {measured / cores / flop_per_cycle:.2f} GHz)")
    config = gemm.GemmConfig.for_host()
    print(f"lezero kernel: {config}")
    print(f"numpy {np.__version__}, threads limited by "
          f"{'threadpoolctl' if threadpool_limits else 'OPENBLAS_NUM_THREADS'}={threads}")

    kernels = {backend: gemm.SgemmKernel(config, num_threads=threads, threads=backend) for backend in ("native", "pool")}
    rng = np.random.default_rng(0)
    problems = {n: (rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32),
                    np.empty((n, n), np.float32)) for n in sizes}
    seconds = {}
    # All lezero runs first, numpy's last: OpenBLAS's idle workers spin for a while after each
    # call, taking a core away from whatever runs next.
    for backend, kernel in kernels.items():
        for n, (a, b, c) in problems.items():
            seconds[backend, n] = best_seconds(lambda: kernel(a, b, c), args.seconds)
    for n, (a, b, c) in problems.items():  # the user's path: an lz.matmul function through lezero.compile
        t = f"tensor<{n}x{n}xf32>"
        compiled = lezero.compile(f'func.func @mm(%a: {t}, %b: {t}) -> {t} {{\n'
                                  f'  %0 = "lz.matmul"(%a, %b) : ({t}, {t}) -> {t}\n  func.return %0 : {t}\n}}')
        seconds["compiled", n] = best_seconds(lambda: compiled(a, b), args.seconds)
    with threadpool_limits(limits=threads) if threadpool_limits else contextlib.nullcontext():
        for n, (a, b, c) in problems.items():
            seconds["numpy", n] = best_seconds(lambda: np.matmul(a, b, out=c), args.seconds)
    for n, (a, b, c) in problems.items():  # checked last: numpy's float64 product starts BLAS threads
        np.testing.assert_allclose(kernels["native"](a, b), a.astype(np.float64) @ b, rtol=1e-3,
                                   atol=1e-3 * np.sqrt(n))

    print("lezero: the SgemmKernel with POSIX threads started by the generated code; pool: the same with a "
          "Python thread pool;\ncompile: an lz.matmul function through lezero.compile (the runtime's pool, output "
          "allocated per call)")
    print(f"{'size':>6} {'lezero GFLOP/s':>15} {'(pool)':>8} {'(compile)':>10} {'numpy GFLOP/s':>14} "
          f"{'lezero/numpy':>13} {'compile/numpy':>14}")
    for n in sizes:
        gflops = {key: 2.0 * n ** 3 / seconds[key, n] / 1e9 for key in ("native", "pool", "compiled", "numpy")}
        print(f"{n:>6} {gflops['native']:>15.1f} {gflops['pool']:>8.1f} {gflops['compiled']:>10.1f} "
              f"{gflops['numpy']:>14.1f} {gflops['native'] / gflops['numpy']:>13.2f} "
              f"{gflops['compiled'] / gflops['numpy']:>14.2f}")


if __name__ == "__main__":
    main()
