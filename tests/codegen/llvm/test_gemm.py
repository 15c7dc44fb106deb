"""The generated float32 GEMM against numpy: shapes, block edges, strides, threads, epilogues, FMA."""
from __future__ import annotations

import llvmlite.ir as ir
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lezero.codegen.llvm import cache_model, gemm, gemm_epilogue, jit, target
from lezero.codegen.llvm.target import cpu_target

from support import sgemm_kernel

HOST = gemm.GemmConfig.for_target()
# Tiny cache blocks so that small matrices cross every K, M and N block boundary.
TINY_AVX512 = gemm.GemmConfig(vector_width=16, mr=6, nr_vectors=2, kc=16, mc=12, nc=64)
TINY_AVX2 = gemm.GemmConfig(vector_width=8, mr=6, nr_vectors=2, kc=8, mc=18, nc=32)
TINY_SSE = gemm.GemmConfig(vector_width=4, mr=4, nr_vectors=3, kc=5, mc=8, nc=24)
CONFIGS = {"host": HOST, "tiny16": TINY_AVX512, "tiny8": TINY_AVX2, "tiny4": TINY_SSE}

_kernels: dict = {}


def kernel(config_name: str = "host", epilogue_name: str | None = None, threads: int = 1,
           backend: str = "pool") -> sgemm_kernel.SgemmKernel:
    """Compiled once per (config, epilogue, threads, thread backend); threaded kernels split even
    tiny problems."""
    key = (config_name, epilogue_name, threads, backend)
    if key not in _kernels:
        compiled = sgemm_kernel.SgemmKernel(CONFIGS[config_name], EPILOGUES[epilogue_name], num_threads=threads,
                                    threads=backend)
        compiled.parallel_threshold_flops = 0
        _kernels[key] = compiled
    return _kernels[key]


def random_matrix(rng, rows: int, cols: int) -> np.ndarray:
    return rng.uniform(-1, 1, size=(rows, cols)).astype(np.float32)


def assert_matches_matmul(c: np.ndarray, a: np.ndarray, b: np.ndarray, expected: np.ndarray | None = None) -> None:
    """|c - a@b| within float32 summation error (about K ulps of sum |a||b|), from float64."""
    if expected is None:
        expected = a.astype(np.float64) @ b.astype(np.float64)
    k = a.shape[1]
    bound = 4 * (k + 1) * np.finfo(np.float32).eps * (np.abs(a).astype(np.float64) @ np.abs(b) + 1.0)
    error = np.abs(c.astype(np.float64) - expected)
    assert c.shape == expected.shape
    assert np.all(error <= bound), f"max error {error.max()} at {np.unravel_index(np.argmax(error - bound), c.shape)}"


SHAPES = [
    (1, 1, 1), (1, 1, 7), (1, 17, 1), (17, 1, 1), (1, 100, 33), (100, 1, 33), (3, 5, 7), (6, 64, 1),
    (7, 65, 3), (13, 31, 129), (12, 64, 16), (37, 91, 53), (64, 64, 64), (145, 70, 17), (5, 300, 600),
    (200, 130, 513), (257, 129, 1025),
]


@pytest.mark.parametrize("config_name", list(CONFIGS))
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_matches_numpy(config_name, m, n, k):
    rng = np.random.default_rng(m * 10007 + n * 101 + k)
    a, b = random_matrix(rng, m, k), random_matrix(rng, k, n)
    out = np.full((m, n), np.nan, np.float32)  # every element must be written, none read first
    assert_matches_matmul(kernel(config_name)(a, b, out), a, b)


@given(m=st.integers(1, 70), n=st.integers(1, 70), k=st.integers(1, 70),
       config_name=st.sampled_from(["host", "tiny16", "tiny8", "tiny4"]), threads=st.sampled_from([1, 2, 3]),
       backend=st.sampled_from(["pool", "native"]))
def test_matches_numpy_any_shape(m, n, k, config_name, threads, backend):
    rng = np.random.default_rng(m * 4903 + n * 71 + k)
    a, b = random_matrix(rng, m, k), random_matrix(rng, k, n)
    assert_matches_matmul(kernel(config_name, threads=threads, backend=backend)(a, b), a, b)


LAYOUTS = {"a.T": dict(transpose_a=True), "b.T": dict(transpose_b=True),
           "both.T": dict(transpose_a=True, transpose_b=True), "b in place": dict(b_in_place=True)}


# A tile taller than a vector (a thin product's tile with SSE): A's transposed slivers copy
# element by element.
TALL_SSE = gemm.GemmConfig(vector_width=4, mr=8, nr_vectors=1, kc=5, mc=16, nc=8)


@pytest.mark.parametrize("config_name", list(CONFIGS) + ["tall4"])
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_operands_stored_transposed_or_read_in_place(config_name, layout):
    """a.T @ b and a @ b.T packed from the arrays as stored (B's slivers transposed in registers,
    W x W for every vector width), and B read in place with masked loads at its last columns."""
    options = LAYOUTS[layout]
    compiled = sgemm_kernel.SgemmKernel(CONFIGS.get(config_name, TALL_SSE), num_threads=2, **options)
    compiled.parallel_threshold_flops = 0
    for m, n, k in [(1, 1, 1), (7, 65, 3), (13, 31, 129), (37, 91, 53), (145, 70, 17), (5, 300, 600)]:
        rng = np.random.default_rng(m * 10007 + n * 101 + k)
        a, b = random_matrix(rng, m, k), random_matrix(rng, k, n)
        stored_a = np.ascontiguousarray(a.T) if options.get("transpose_a") else a
        stored_b = np.ascontiguousarray(b.T) if options.get("transpose_b") else b
        out = np.full((m, n), np.nan, np.float32)
        assert_matches_matmul(compiled(stored_a, stored_b, out), a, b)


@pytest.mark.parametrize("backend", ["pool", "native"])
@pytest.mark.parametrize("threads", [2, 3, 4])
@pytest.mark.parametrize("m,n,k", [(300, 200, 100), (7, 1000, 40), (1000, 7, 40), (130, 130, 600)])
def test_threads_split_the_output(backend, threads, m, n, k):
    rng = np.random.default_rng(threads)
    a, b = random_matrix(rng, m, k), random_matrix(rng, k, n)
    assert_matches_matmul(kernel("host", threads=threads, backend=backend)(a, b), a, b)


@pytest.mark.parametrize("m,n,k,tasks", [(1024, 1024, 1024, 2), (192, 192, 192, 2), (1, 1000, 9, 4), (5, 5, 5, 8),
                                         (1000, 3, 3, 3), (100, 100, 100, 1)])
def test_split_rectangles_cover_the_output_once(m, n, k, tasks):
    covered = np.zeros((m, n), np.int64)
    rectangles = sgemm_kernel.split_rectangles(m, n, k, tasks, 6, 64)
    assert 1 <= len(rectangles) <= tasks
    for m0, m1, n0, n1 in rectangles:
        covered[m0:m1, n0:n1] += 1
    assert np.all(covered == 1)


def test_zero_k_gives_zeros_and_empty_outputs_work():
    k = kernel("host")
    assert np.array_equal(k(np.ones((3, 0), np.float32), np.ones((0, 4), np.float32)), np.zeros((3, 4), np.float32))
    assert k(np.ones((0, 5), np.float32), np.ones((5, 4), np.float32)).shape == (0, 4)
    assert k(np.ones((3, 5), np.float32), np.ones((5, 0), np.float32)).shape == (3, 0)


def test_strided_views_and_other_layouts():
    rng = np.random.default_rng(1)
    big_a, big_b = random_matrix(rng, 80, 90), random_matrix(rng, 90, 100)
    a, b = big_a[3:70:2, 5:60], big_b[5:60, 7:93]  # row strides larger than the rows
    out_storage = np.full((40, 120), np.nan, np.float32)
    out = out_storage[2:2 + a.shape[0], 10:10 + b.shape[1]]
    result = kernel("tiny16")(a, b, out)
    assert result is out
    assert_matches_matmul(out, a, b)
    assert np.isnan(out_storage[:2]).all() and np.isnan(out_storage[:, :10]).all()  # nothing outside `out`
    assert np.isnan(out_storage[2 + a.shape[0]:]).all() and np.isnan(out_storage[:, 10 + b.shape[1]:]).all()
    # Transposed (column-major) and float64 inputs are converted.
    assert_matches_matmul(kernel("host")(big_b.T[:50, :60], big_a.T[:60].astype(np.float64)),
                          big_b.T[:50, :60], big_a.T[:60].astype(np.float32))


def test_shape_errors():
    k = kernel("host")
    with pytest.raises(ValueError, match="agree on K"):
        k(np.ones((2, 3), np.float32), np.ones((4, 2), np.float32))
    with pytest.raises(ValueError, match="out must be"):
        k(np.ones((2, 3), np.float32), np.ones((3, 2), np.float32), out=np.ones((2, 3), np.float32))
    square = np.ones((4, 4), np.float32)
    with pytest.raises(ValueError, match="overlap"):
        k(square, np.ones((4, 4), np.float32), out=square)
    with pytest.raises(ValueError, match="overlap"):
        kernel("host", "residual")(np.ones((4, 4), np.float32), np.ones((4, 4), np.float32), out=square,
                                   residual=square)


# -- epilogues ---------------------------------------------------------------------------------

EPILOGUES = {
    None: None,
    "bias_relu": sgemm_kernel.bias_add_epilogue().then(sgemm_kernel.relu_epilogue()),
    "residual": sgemm_kernel.residual_add_epilogue(),
    "scale_bias_residual_relu": gemm_epilogue.compose_epilogues(
        sgemm_kernel.scale_epilogue("alpha"), sgemm_kernel.bias_add_epilogue("b"), sgemm_kernel.residual_add_epilogue("r"),
        sgemm_kernel.relu_epilogue()),
}


@pytest.mark.parametrize("config_name,threads,backend", [("host", 1, "pool"), ("host", 2, "pool"), ("host", 2, "native"),
                                                        ("tiny16", 1, "pool"), ("tiny8", 3, "native"),
                                                        ("tiny4", 1, "pool")])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (7, 65, 3), (13, 31, 40), (64, 128, 64), (50, 70, 0), (150, 90, 600)])
def test_bias_relu_epilogue(config_name, threads, backend, m, n, k):
    rng = np.random.default_rng(m + n + k)
    a, b, bias = random_matrix(rng, m, k), random_matrix(rng, k, n), rng.uniform(-1, 1, n).astype(np.float32)
    product = a.astype(np.float64) @ b.astype(np.float64)
    expected = np.maximum(product + bias, 0)
    result = kernel(config_name, "bias_relu", threads, backend)(a, b, bias=bias)
    # relu is exact, so the bound of the plain product (plus the bias' rounding) still holds.
    assert (result >= 0).all()
    assert_matches_matmul(result, np.hstack([a, np.ones((m, 1), np.float32)]),
                          np.vstack([b, bias[None, :]]), expected)


@pytest.mark.parametrize("config_name", ["host", "tiny16", "tiny4"])
@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (9, 33, 20), (61, 131, 77)])
def test_residual_and_composed_epilogues(config_name, m, n, k):
    rng = np.random.default_rng(3)
    a, b = random_matrix(rng, m, k), random_matrix(rng, k, n)
    residual_storage = random_matrix(rng, m, n + 5)
    residual = residual_storage[:, 2:2 + n]  # a strided view: its own row stride is passed
    product = a.astype(np.float64) @ b.astype(np.float64)
    result = kernel(config_name, "residual")(a, b, residual=residual)
    np.testing.assert_allclose(result, product + residual, rtol=1e-5, atol=1e-5 * (k + 1))

    bias = rng.uniform(-1, 1, n).astype(np.float32)
    result = kernel(config_name, "scale_bias_residual_relu")(a, b, alpha=0.5, b=bias, r=residual)
    np.testing.assert_allclose(result, np.maximum(0.5 * product + bias + residual, 0), rtol=1e-5, atol=1e-5 * (k + 1))


def test_epilogue_sees_global_rows_and_columns():
    """A custom epilogue that stores its indices: row * 1000 + col, from IR values."""
    def emit(out: gemm_epilogue.OutputVector, acc):
        b = out.builder
        rows = out.splat(out.row)
        index = b.add(b.mul(rows, out.splat(ir.Constant(ir.IntType(64), 1000))), out.column_indices())
        return b.fadd(acc, b.sitofp(index, out.vector_type))

    compiled = sgemm_kernel.SgemmKernel(TINY_AVX512, gemm_epilogue.Epilogue("index", emit), num_threads=3, threads="native")
    compiled.parallel_threshold_flops = 0
    m, n = 41, 150
    result = compiled(np.zeros((m, 7), np.float32), np.zeros((7, n), np.float32))
    rows, cols = np.mgrid[:m, :n]
    assert np.array_equal(result, (rows * 1000 + cols).astype(np.float32))


def test_epilogue_arguments_are_checked():
    k = kernel("host", "bias_relu")
    a, b = np.ones((4, 3), np.float32), np.ones((3, 5), np.float32)
    with pytest.raises(TypeError, match="bias"):
        k(a, b)
    with pytest.raises(ValueError, match="shape"):
        k(a, b, bias=np.ones(4, np.float32))
    with pytest.raises(ValueError, match="collide"):
        gemm_epilogue.compose_epilogues(sgemm_kernel.bias_add_epilogue(), sgemm_kernel.bias_add_epilogue())


# -- the machine code ----------------------------------------------------------------------------


def test_micro_kernel_uses_vector_fma():
    assembly = jit.emit_assembly(gemm.build_sgemm_module(HOST))
    start = assembly.index("lz_sgemm_micro_kernel:")
    micro_kernel = assembly[start:assembly.index(".Lfunc_end", start)]
    fma_lines = [line for line in micro_kernel.splitlines() if "vfmadd" in line]
    features = cpu_target().features
    if "fma" not in features:
        pytest.skip("host CPU has no FMA")
    register = "%zmm" if "avx512f" in features else "%ymm"
    vector_fmas = [line for line in fma_lines if register in line]
    # One FMA per accumulator per k step, at least (the k loop may be unrolled).
    assert len(vector_fmas) >= HOST.mr * HOST.nr_vectors, micro_kernel[:2000]


def test_module_emits_an_object_file():
    """The same IR compiles to a relocatable object, for executables without Python."""
    module = gemm.build_sgemm_module(HOST, sgemm_kernel.bias_add_epilogue())
    assert jit.emit_object(module)[:4] == b"\x7fELF"


def test_micro_kernel_without_fma_multiplies_and_adds():
    """On a CPU without FMA (x86-64: SSE2) the micro-kernel multiplies and adds vectors; it never
    calls fmaf (llvm.fma would, per element)."""
    config = gemm.GemmConfig.for_target("x86-64")
    assembly = jit.emit_assembly(gemm.build_sgemm_module(config), "x86-64")
    start = assembly.index("lz_sgemm_micro_kernel:")
    micro_kernel = assembly[start:assembly.index(".Lfunc_end", start)]
    assert "fmaf" not in assembly and "vfmadd" not in micro_kernel
    assert micro_kernel.count("mulps") >= config.mr * config.nr_vectors


# -- tiles from the target and the caches -----------------------------------------------------------

KIB, MIB = cache_model.KIB, cache_model.MIB
ZEN4_HERE = cache_model.Caches(32 * KIB, 1 * MIB, 16 * MIB)  # this Zen 4 VM: 32 MiB L3 for 2 cores
CACHES = {"zen4 here": ZEN4_HERE, **{name: cache_model.TYPICAL_CACHES[name] for name in
                                     ("haswell", "skylake-avx512", "icelake-server", "sapphirerapids", "znver2",
                                      "cortex-a72", "neoverse-v1", "apple-m1")}}
TARGETS = [(name, None) for name in target.X86_CPUS] + [(name, "aarch64-linux-gnu") for name in target.AARCH64_CPUS]


def test_register_tiles_from_the_register_file():
    """32 registers (AVX-512): 6 x 4 vectors; 16 (AVX2, and SSE without FMA): 6 x 2."""
    assert gemm.register_tile(32, fma=True) == (6, 4)
    assert gemm.register_tile(16, fma=True) == (6, 2)
    assert gemm.register_tile(16, fma=False) == (6, 2)
    assert gemm.register_tile(8, fma=True) == (2, 2)


@pytest.mark.parametrize("cpu,triple", TARGETS)
def test_every_target_tile_fits_its_register_file(cpu, triple):
    t = cpu_target(cpu, triple)
    config = gemm.GemmConfig.for_target(t)
    assert config.vector_width * gemm.FLOAT_BYTES == t.vector_bytes
    accumulators = config.mr * config.nr_vectors
    # accumulators, the B vectors, one broadcast of A (and a product without FMA)
    assert accumulators + config.nr_vectors + 1 + (0 if t.has_fma else 1) <= t.vector_registers
    assert accumulators <= gemm.MAX_ACCUMULATORS
    assert config.mc % config.mr == 0 and config.nc % config.nr == 0


X86_TILES, AARCH64_TILES = [(6, 64), (6, 16), (6, 8), (14, 32)], [(8, 12), (6, 16)]


@pytest.mark.parametrize("caches_name,mr,nr", [(c, mr, nr) for c in CACHES for mr, nr in
                                               (AARCH64_TILES if c in ("cortex-a72", "neoverse-v1", "apple-m1")
                                                else X86_TILES)])
def test_cache_blocks_fit_the_caches(caches_name, mr, nr):
    """The B sliver in half of L1, or else an eighth of L2; the A block in a quarter of L2; the B
    block in a quarter of L3 (of L2 without one) unless nc is at its floor."""
    caches = CACHES[caches_name]
    kc, mc, nc = cache_model.cache_blocks(mr, nr, caches)
    sliver = kc * nr * 4
    assert kc <= cache_model.KC_MAX and kc & (kc - 1) == 0
    assert sliver <= caches.l1d // 2 or sliver <= caches.l2 // 8
    assert mc % mr == 0 and mc * kc * 4 <= caches.l2 // 4
    assert nc % nr == 0 and nc <= cache_model.NC_MAX
    assert kc * nc * 4 <= (caches.l3 or caches.l2) // 4 or nc > cache_model.NC_MIN - nr


def test_zen4_caches_give_the_measured_tiles():
    """This Zen 4's caches give the tiles measured fastest on it: 6x64, kc 512 (the 64-float
    sliver does not fit half of L1: it is read from L2), nc 2048, mc 126 (144 before: the same
    speed); AVX2 6x16 the same kc and mc (kc 256, BLIS's L1-resident sliver, was 7% slower);
    SSE's 6x8 sliver fits half of L1 at kc 512."""
    assert cache_model.cache_blocks(6, 64, ZEN4_HERE) == (512, 126, 2048)
    assert cache_model.cache_blocks(6, 16, ZEN4_HERE) == (512, 126, 2048)
    assert cache_model.cache_blocks(6, 8, ZEN4_HERE) == (512, 126, 2048)
    # small caches: a shallower sliver that still fits an eighth of L2; nc at its floor
    assert cache_model.cache_blocks(6, 64, cache_model.Caches(16 * KIB, 128 * KIB, 0)) == (64, 126, 1024)


def test_host_caches_are_read_and_cross_targets_use_typical_ones():
    host = cache_model.host_caches()
    assert host.l1d >= 8 * KIB and host.l2 >= host.l1d and host.source in ("sysfs", "sysconf") or \
        host.source.startswith("typical")
    here = cpu_target()
    other = ("cortex-a72", "aarch64-linux-gnu") if here.arch == "x86_64" else ("x86-64-v3", "x86_64-linux-gnu")
    assert cache_model.caches_for(cpu_target(*other)).source == f"typical {other[0]}"
    same_arch = "x86-64" if here.arch == "x86_64" else "generic"
    assert cache_model.caches_for(cpu_target(same_arch)) == host


def test_sysfs_caches_are_shared_among_the_cores_that_share_them(tmp_path):
    """L1 and L2 private to a core (its two SMT threads share them), L3 shared by 56 cores."""
    cpu = tmp_path / "cpu0"
    (cpu / "topology").mkdir(parents=True)
    (cpu / "topology" / "thread_siblings_list").write_text("0,56\n")
    for index, (level, kind, size, shared) in enumerate([(1, "Data", "48K", "0,56"), (1, "Instruction", "32K", "0,56"),
                                                         (2, "Unified", "2048K", "0,56"),
                                                         (3, "Unified", "107520K", "0-111")]):
        d = cpu / "cache" / f"index{index}"
        d.mkdir(parents=True)
        for name, value in (("level", level), ("type", kind), ("size", size), ("shared_cpu_list", shared)):
            (d / name).write_text(f"{value}\n")
    assert cache_model.read_sysfs_caches(cpu) == cache_model.Caches(48 * KIB, 2 * MIB, 107520 * KIB // 56, "sysfs")
    assert cache_model.read_sysfs_caches(tmp_path / "cpu9") is None


TARGET_SHAPES = [(7, 65, 3), (37, 91, 53), (5, 300, 600), (200, 130, 513), (257, 129, 1025)]


@pytest.mark.parametrize("cpu", [name for name in ("x86-64", "x86-64-v3") if name in target.executable_cpus()])
@pytest.mark.parametrize("m,n,k", TARGET_SHAPES)
def test_target_tiles_match_numpy(cpu, m, n, k):
    """Each x86 class's own tiles, compiled for it, cross K blocks and edge tiles correctly."""
    if cpu not in _kernels:
        _kernels[cpu] = sgemm_kernel.SgemmKernel(gemm.GemmConfig.for_target(cpu), num_threads=2, cpu=cpu)
        _kernels[cpu].parallel_threshold_flops = 0
    rng = np.random.default_rng(m * 31 + n * 7 + k)
    a, b = random_matrix(rng, m, k), random_matrix(rng, k, n)
    assert_matches_matmul(_kernels[cpu](a, b), a, b)


def test_narrow_last_column_tiles_get_narrow_micro_kernels():
    """A last column tile of a few columns runs a micro-kernel of as many vectors as it needs
    (65 columns: 64 + one vector, not 128), and a caller that knows N makes only that one."""
    assert all(f"lz_sgemm_micro_kernel_{v}" in str(gemm.build_sgemm_module(HOST))
               for v in range(1, HOST.nr_vectors))
    only_one = str(gemm.SgemmGenerator(HOST, edge_vectors=[1]).build_module())
    assert "lz_sgemm_micro_kernel_1" in only_one and "lz_sgemm_micro_kernel_2" not in only_one
    with pytest.raises(ValueError, match="narrower"):
        gemm.SgemmGenerator(HOST, edge_vectors=[HOST.nr_vectors])
