"""float32 GEMM: lezero against numpy (OpenBLAS) and ONNX Runtime (MLAS), on the same threads.

Run it as

    .venv/bin/python benchmarks/sgemm.py [--threads 2] [--sizes 256,512,1024,2048,197x768x2304,...]

Sizes are n (n x n times n x n), M x K x N ((M x K) @ (K x N)) or B x M x K x N (B products at
once); the default is 256..2048 squared and the transformer shapes 197x768x2304 (ViT-B's QKV
projection), 256x256x1024 and 12x197x64x197 (ViT-B's attention scores, 12 heads).

Two tables, each measured in a child process with its own environment (OpenBLAS reads it when
numpy loads):
  host:      lezero for cpu="host" against numpy and ONNX Runtime, OPENBLAS_CORETYPE and
             OPENBLAS_L2_SIZE unset (this machine's environment sets them, which slows numpy's BLAS)
             so that OpenBLAS picks its kernel for this CPU;
  x86-64-v3: lezero for cpu="x86-64-v3" (AVX2 + FMA, no AVX-512) against numpy with
             OPENBLAS_CORETYPE=Haswell (OpenBLAS's AVX2 kernel; threadpoolctl must report it).
             ONNX Runtime picks its kernels from the CPU and cannot be held to AVX2: not in it.

lezero is timed three ways: ``compile``, an lz.matmul function through ``lezero.compile`` (what a
user gets: plan lookup, the runtime's thread pool, the output allocated per call), and the raw
``SgemmKernel`` with POSIX threads started by the generated code (``native``) or a Python thread
pool (``pool``), single products only. ONNX Runtime runs a one-node MatMul model,
intra_op_num_threads = --threads, no spinning. numpy is limited to --threads threads with
threadpoolctl. Libraries alternate within each round, and each time is the best over the rounds
(this machine is shared: the best is the least disturbed); OpenBLAS's idle workers spin for a
while after its calls, so each round ends with numpy and a pause. Ratios are lezero's compiled
GFLOP/s over the best peer's.

Two peaks are printed for scale:
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
import subprocess
import sys

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--threads", type=int, default=2)
parser.add_argument("--sizes", default="256,512,1024,2048,197x768x2304,256x256x1024,12x197x64x197")
parser.add_argument("--seconds", type=float, default=1.0, help="time budget per size and library")
parser.add_argument("--rounds", type=int, default=3, help="rounds the libraries alternate in")
parser.add_argument("--targets", default="host,x86-64-v3", help="the tables to print")
parser.add_argument("--part", help=argparse.SUPPRESS)  # a child process: the table of this target
args = parser.parse_args()
os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)  # before numpy loads OpenBLAS
os.environ["LEZERO_NUM_THREADS"] = str(args.threads)  # before the runtime's pool is made

import contextlib  # noqa: E402
import ctypes  # noqa: E402
import time  # noqa: E402

import llvmlite.binding as llvm  # noqa: E402
import llvmlite.ir as ir  # noqa: E402
import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
# the standalone GEMM driver lives with the test helpers (tests/support/sgemm_kernel.py)
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import lezero  # noqa: E402
from lezero.codegen.llvm import cache_model, gemm, jit  # noqa: E402
from lezero.codegen.llvm.target import cpu_target  # noqa: E402
from support.sgemm_kernel import SgemmKernel  # noqa: E402
from timing import best_seconds  # noqa: E402

try:
    from threadpoolctl import threadpool_info, threadpool_limits
except ImportError:
    threadpool_info = threadpool_limits = None

# What each table's child process is run with (None: unset).
TARGET_ENV = {"host": {"OPENBLAS_CORETYPE": None, "OPENBLAS_L2_SIZE": None},
              "x86-64-v3": {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": None}}
OPENBLAS_PAUSE = 0.2  # seconds after numpy's calls: its workers spin about 0.1 s (2^28 cycles)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return llvm.get_host_cpu_name()


def nominal_clock_ghz() -> float | None:
    try:
        with open("/proc/cpuinfo") as f:
            mhz = [float(line.split(":")[1]) for line in f if line.startswith("cpu MHz")]
        return max(mhz) / 1000 if mhz else None
    except OSError:
        return None


def fma_flops_per_cycle(cpu: str) -> tuple[int, str]:
    features = cpu_target(cpu).features
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


def measured_peak_gflops(threads: int, cpu: str) -> float:
    width = gemm.GemmConfig.for_target(cpu).vector_width
    chains = 24
    compiled = jit.compile_module(build_fma_peak_module(width, chains), cpu)
    fma_peak = compiled.ctypes_function("fma_peak", None, [ctypes.c_int64, ctypes.c_void_p])
    iterations = 2_000_000
    buffers = [np.full(2 * width, 1e-9, np.float32) for _ in range(threads)]
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(threads) as pool:
        def run():
            list(pool.map(lambda buf: fma_peak(iterations, buf.ctypes.data), buffers))
        seconds = best_seconds(run, 0.5, max_reps=5)
    return threads * iterations * chains * 2 * width / seconds / 1e9


def parse_size(text: str) -> tuple[int, int, int, int]:
    """(batches, M, K, N) from ``n``, ``MxKxN`` or ``BxMxKxN``."""
    dims = [int(d) for d in text.lower().split("x")]
    if len(dims) == 1:
        return 1, dims[0], dims[0], dims[0]
    if len(dims) in (3, 4):
        return tuple([1] * (4 - len(dims)) + dims)
    raise SystemExit(f"--sizes: {text!r} is not n, MxKxN or BxMxKxN")


def size_name(size) -> str:
    batches, m, k, n = size
    if batches == 1 and m == k == n:
        return str(n)
    return "x".join(str(d) for d in ((batches,) if batches > 1 else ()) + (m, k, n))


def matmul_function(size, cpu: str):
    """An lz.matmul function through lezero.compile, as a user gets it."""
    batches, m, k, n = size
    lead = f"{batches}x" if batches > 1 else ""
    ta, tb, tc = (f"tensor<{lead}{r}x{c}xf32>" for r, c in ((m, k), (k, n), (m, n)))
    return lezero.compile(f'func.func @mm(%a: {ta}, %b: {tb}) -> {tc} {{\n'
                          f'  %0 = "lz.matmul"(%a, %b) : ({ta}, {tb}) -> {tc}\n  func.return %0 : {tc}\n}}',
                          cpu=cpu)


def onnx_runtime_matmul(size, threads: int):
    """A one-node MatMul model in an InferenceSession: run(a, b) -> a @ b."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    batches, m, k, n = size
    lead = [batches] if batches > 1 else []
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])], "matmul",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, lead + [m, k]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, lead + [k, n])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, lead + [m, n])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    return lambda a, b: session.run(None, {"a": a, "b": b})[0]


def openblas_kernel() -> str:
    """The kernel OpenBLAS says it runs (threadpoolctl's 'architecture'), or why it is unknown."""
    if threadpool_info is None:
        return "unknown (threadpoolctl is not installed)"
    blas = [info for info in threadpool_info() if info.get("internal_api") == "openblas"]
    return blas[0].get("architecture", "unknown") if blas else "not OpenBLAS"


def run_table(cpu: str) -> None:
    """Measure and print one target's table (in the child process whose environment it needs)."""
    threads = args.threads
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    flop_per_cycle, fma_description = fma_flops_per_cycle(cpu)
    clock = nominal_clock_ghz()
    cores = min(threads, len(os.sched_getaffinity(0)))
    config = gemm.GemmConfig.for_target(cpu)
    kernel_of_blas = openblas_kernel()
    print(f"\n== target {cpu}: lezero {config}")
    print(f"   blocked for {cache_model.caches_for(cpu_target(cpu))}")
    if clock:
        print(f"theoretical peak: {cores} cores x {clock:.2f} GHz (nominal, /proc/cpuinfo) x {flop_per_cycle} "
              f"FLOP/cycle [{fma_description}] = {cores * clock * flop_per_cycle:.0f} GFLOP/s")
    measured = measured_peak_gflops(cores, cpu)
    print(f"measured peak (independent FMA chains on {cores} threads): {measured:.0f} GFLOP/s"
          f" (implies {measured / cores / flop_per_cycle:.2f} GHz)")
    blas_env = ", ".join(f"{name}={os.environ.get(name, '(unset)')}" for name in TARGET_ENV[cpu])
    print(f"numpy {np.__version__}: OpenBLAS kernel {kernel_of_blas} ({blas_env}), "
          f"{'threadpoolctl' if threadpool_limits else 'OPENBLAS_NUM_THREADS'}={threads}")
    if TARGET_ENV[cpu]["OPENBLAS_CORETYPE"] and kernel_of_blas.lower() != TARGET_ENV[cpu]["OPENBLAS_CORETYPE"].lower():
        raise SystemExit(f"OpenBLAS runs its {kernel_of_blas} kernel, not {TARGET_ENV[cpu]['OPENBLAS_CORETYPE']}")
    with_ort = cpu == "host"
    if with_ort:
        import onnxruntime
        print(f"onnxruntime {onnxruntime.__version__}: a one-node MatMul model, intra_op_num_threads={threads}, "
              f"no spinning")
    kernels = {backend: SgemmKernel(config, num_threads=threads, threads=backend, cpu=cpu)
               for backend in ("native", "pool")}
    rng = np.random.default_rng(0)
    runs = {}  # (library, size) -> a call
    results = {}
    for size in sizes:
        batches, m, k, n = size
        lead = (batches,) if batches > 1 else ()
        a = rng.standard_normal(lead + (m, k), dtype=np.float32)
        b = rng.standard_normal(lead + (k, n), dtype=np.float32)
        c = np.empty(lead + (m, n), np.float32)
        expected = np.matmul(a.astype(np.float64), b.astype(np.float64))
        compiled = matmul_function(size, cpu)
        runs["compile", size] = lambda a=a, b=b, f=compiled: f(a, b)
        if batches == 1:
            for backend, kernel in kernels.items():
                runs[backend, size] = lambda a=a, b=b, c=c, f=kernel: f(a, b, c)
        if with_ort:
            runs["onnxruntime", size] = lambda a=a, b=b, f=onnx_runtime_matmul(size, threads): f(a, b)
        runs["numpy", size] = lambda a=a, b=b, c=c: np.matmul(a, b, out=c)
        for (library, s), run in runs.items():
            if s == size:  # a copy: the raw kernels and numpy return the same output array
                results[library, s] = (np.array(run()), expected)
    for (library, size), (got, expected) in results.items():  # every result right before timing
        np.testing.assert_allclose(got, expected, rtol=1e-3, atol=1e-3 * np.sqrt(size[2]),
                                   err_msg=f"{library} {size_name(size)}")

    libraries = ["native", "pool", "compile"] + (["onnxruntime"] if with_ort else []) + ["numpy"]
    seconds = {}
    blas_threads = threadpool_limits(limits=threads) if threadpool_limits else contextlib.nullcontext()
    with blas_threads:
        for _ in range(args.rounds):
            for size in sizes:
                for library in libraries:  # numpy last, then a pause: its workers spin after a call
                    if (library, size) in runs:
                        t = best_seconds(runs[library, size], args.seconds / args.rounds)
                        seconds[library, size] = min(seconds.get((library, size), t), t)
                time.sleep(OPENBLAS_PAUSE)

    peers = ["onnxruntime", "numpy"] if with_ort else ["numpy"]
    print(f"GFLOP/s ({threads} threads); native/pool: the raw SgemmKernel (POSIX threads / Python pool); "
          f"compile: lz.matmul through lezero.compile;\nratio: compile / the best peer ({', '.join(peers)})")
    header = f"{'size':>16} {'native':>8} {'pool':>8} {'compile':>8}" + "".join(f" {p:>11}" for p in peers)
    print(header + f" {'ratio':>6}  best peer")
    for size in sizes:
        batches, m, k, n = size
        flop = 2.0 * batches * m * n * k

        def gflops(library):
            return flop / seconds[library, size] / 1e9 if (library, size) in seconds else None

        best_peer = max(peers, key=gflops)
        cells = "".join(f" {g:>8.1f}" if g else f" {'-':>8}" for g in map(gflops, ("native", "pool", "compile")))
        cells += "".join(f" {gflops(p):>11.1f}" for p in peers)
        print(f"{size_name(size):>16}{cells} {gflops('compile') / gflops(best_peer):>6.2f}  {best_peer}")
    sys.stdout.flush()


def main() -> None:
    if args.part:
        run_table(args.part)
        return
    print(f"CPU: {cpu_model()} ({llvm.get_host_cpu_name()}), {len(os.sched_getaffinity(0))} cores available, "
          f"{args.threads} threads; load average {os.getloadavg()[0]:.2f} before")
    for cpu in args.targets.split(","):
        if cpu not in TARGET_ENV:
            raise SystemExit(f"--targets: {cpu!r} is not one of {', '.join(TARGET_ENV)}")
        env = dict(os.environ)
        for name, value in TARGET_ENV[cpu].items():
            env.pop(name, None)
            if value is not None:
                env[name] = value
        command = [sys.executable, os.path.abspath(__file__), "--part", cpu, "--threads", str(args.threads),
                   "--sizes", args.sizes, "--seconds", str(args.seconds), "--rounds", str(args.rounds)]
        subprocess.run(command, env=env, check=True)
    print(f"load average {os.getloadavg()[0]:.2f} after")


if __name__ == "__main__":
    main()
