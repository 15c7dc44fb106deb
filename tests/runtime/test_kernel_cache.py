"""The kernel cache: memory and disk levels, corrupt and stale entries rebuilt, atomic writes; kernels keyed
by their content (identical kernels compiled once, a warm start lowering nothing)."""
from __future__ import annotations

import ctypes
import gc
import re

import numpy as np
import pytest

import lezero.runtime.kernel_cache as kernel_cache
from lezero.codegen.llvm.backend import lower_kernel
from lezero.codegen.llvm.target import cpu_target
from lezero.codegen.schedule import schedule
from lezero.ir import parse_module
from lezero.runtime.cpu import CompiledFunction
from lezero.runtime.kernel_cache import KernelCache

TEXT = """
func.func @f(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %0 = "lz.exp"(%x) : (tensor<4x8xf32>) -> tensor<4x8xf32>
  %1 = "lz.add"(%0, %x) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  func.return %1 : tensor<4x8xf32>
}
"""


@pytest.fixture(scope="module")
def kernel():
    module = schedule(parse_module(TEXT))
    (op,) = [op for op in module.lookup("f").entry_block.ops if op.name == "lz.kernel"]
    return lower_kernel(op)


def run(loaded, lowered):
    x = np.linspace(-2, 2, 32, dtype=np.float32).reshape(4, 8)
    out = np.empty_like(x)
    pointers = (ctypes.c_void_p * 2)(x.ctypes.data, out.ctypes.data)
    loaded.function(pointers, 0, lowered.work_items)
    np.testing.assert_allclose(out, np.exp(x) + x, rtol=1e-6)


def test_memory_then_disk_hits(tmp_path, kernel):
    cache = KernelCache(tmp_path)
    run(cache.load(kernel.llvm_ir, kernel.name), kernel)
    assert cache.stats.compiles == 1
    cache.load(kernel.llvm_ir, kernel.name)
    assert cache.stats.memory_hits == 1
    fresh = KernelCache(tmp_path)  # a new process, in effect
    run(fresh.load(kernel.llvm_ir, kernel.name), kernel)
    assert (fresh.stats.compiles, fresh.stats.objects_read) == (0, 1)


def test_a_module_is_compiled_once_then_read_from_disk(tmp_path, kernel, monkeypatch):
    """``load_module`` (the native thread pool's code): compiled on the first call, read from its
    entry by a later process, its functions callable; a symbol it lacks is an error."""
    engine, (address,) = KernelCache(tmp_path).load_module(kernel.llvm_ir, (kernel.name,))
    (entry,) = tmp_path.rglob("*.o")

    def compile_again(*args):
        raise AssertionError("the object is on disk: nothing compiles")

    monkeypatch.setattr(kernel_cache, "_compile_object", compile_again)
    engine, (address,) = KernelCache(tmp_path).load_module(kernel.llvm_ir, (kernel.name,))
    run(kernel_cache.LoadedKernel(engine, address, kernel.name), kernel)
    with pytest.raises(RuntimeError, match="no symbol 'lz_absent'"):
        KernelCache(tmp_path).load_module(kernel.llvm_ir, (kernel.name, "lz_absent"))
    assert [p.name for p in tmp_path.rglob("*.o")] == [entry.name]


def test_the_loop_walker_is_read_from_disk_by_a_later_process(tmp_path, monkeypatch):
    """Every plan runs through the loop walker (``lz_run_program``): a process compiles it once
    into the cache, a later one reads its object and compiles nothing."""
    from lezero.runtime import loop_driver

    monkeypatch.setattr(loop_driver, "default_cache", lambda: KernelCache(tmp_path))
    loop_driver._walker.__wrapped__()
    (entry,) = tmp_path.rglob("*.o")

    def compile_again(*args):
        raise AssertionError("the walker's object is on disk: nothing compiles")

    monkeypatch.setattr(kernel_cache, "_compile_object", compile_again)
    assert loop_driver._walker.__wrapped__().keepalive is not None
    assert [p.name for p in tmp_path.rglob("*.o")] == [entry.name]


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_corrupt_entries_are_rebuilt_never_loaded(tmp_path, kernel, damage):
    KernelCache(tmp_path).load(kernel.llvm_ir, kernel.name)
    (entry,) = tmp_path.rglob("*.o")
    data = entry.read_bytes()
    entry.write_bytes({"truncate": data[: len(data) // 2], "flip": data[:-10] + bytes(10), "empty": b"",
                       "garbage": b"\x7fELF" + bytes(100)}[damage])
    cache = KernelCache(tmp_path)
    run(cache.load(kernel.llvm_ir, kernel.name), kernel)
    assert (cache.stats.rejected, cache.stats.compiles) == (1, 1)
    assert entry.read_bytes() == data  # rebuilt in place


def test_another_compiler_version_misses(tmp_path, kernel, monkeypatch):
    KernelCache(tmp_path).load(kernel.llvm_ir, kernel.name)
    monkeypatch.setattr(kernel_cache, "CODEGEN_VERSION", "lezero-cpu-next")
    cache = KernelCache(tmp_path)
    cache.load(kernel.llvm_ir, kernel.name)
    assert (cache.stats.objects_read, cache.stats.compiles) == (0, 1)
    assert len(list(tmp_path.rglob("*.o"))) == 2


def test_cache_directory_comes_from_the_environment(tmp_path, monkeypatch, kernel):
    monkeypatch.setenv("LEZERO_CACHE_DIR", str(tmp_path / "here"))
    cache = KernelCache()
    cache.load(kernel.llvm_ir, kernel.name)
    assert list((tmp_path / "here").rglob("*.o"))
    assert not list(tmp_path.rglob(".tmp-*"))  # no half-written files left behind


def test_unwritable_cache_directory_still_compiles(tmp_path, kernel):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    cache = KernelCache(blocker)
    run(cache.load(kernel.llvm_ir, kernel.name), kernel)
    assert cache.stats.compiles == 1


# --- kernels keyed by their content (what CompiledFunction plans go through) ----------------------

TWICE = """
func.func @f(%x: tensor<16x16xf32>, %w: tensor<16x16xf32>) -> tensor<16x16xf32> {
  %0 = "lz.matmul"(%x, %w) : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %1 = "lz.tanh"(%0) : (tensor<16x16xf32>) -> tensor<16x16xf32>
  %2 = "lz.matmul"(%1, %w) : (tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<16x16xf32>
  %3 = "lz.tanh"(%2) : (tensor<16x16xf32>) -> tensor<16x16xf32>
  func.return %3 : tensor<16x16xf32>
}
"""


def compiled_twice(cache, cpu=None):
    """``TWICE`` (two kernels alike but for their names and arena offsets), run and checked."""
    f = CompiledFunction(parse_module(TWICE), "f", cache=cache, cpu=cpu)
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((16, 16), np.float32), rng.standard_normal((16, 16), np.float32) / 4
    np.testing.assert_allclose(f(x, w), np.tanh(np.tanh(x @ w) @ w), rtol=1e-5, atol=1e-6)
    return f


def kernel_ops(f):
    plan = f.plan_for([(16, 16), (16, 16)])
    return [launch.op for launch in plan.plan.launches]


def test_identical_kernels_are_lowered_and_compiled_once(tmp_path):
    cache = KernelCache(tmp_path)
    f = compiled_twice(cache)
    first, second = kernel_ops(f)
    assert first.attributes["name"] != second.attributes["name"]
    assert kernel_cache.kernel_text(first) == kernel_cache.kernel_text(second)
    assert (cache.stats.lowerings, cache.stats.compiles, cache.stats.memory_hits) == (1, 1, 1)
    assert len(list(tmp_path.rglob("*.k"))) == len(list(tmp_path.rglob("*.o"))) == 1


@pytest.mark.parametrize("enabled", [True, False])
def test_lowering_pauses_the_garbage_collector_and_restores_it(tmp_path, monkeypatch, enabled):
    """The collector is off while a kernel lowers (its full passes over the growing llvmlite
    module were half the lowering's time) and in its former state after, on and off alike."""
    seen = []

    def lower_and_look(op, cpu=None):
        seen.append(gc.isenabled())
        return lower_kernel(op, cpu=cpu)

    monkeypatch.setattr(kernel_cache, "lower_kernel", lower_and_look)
    (gc.enable if enabled else gc.disable)()
    try:
        compiled_twice(KernelCache(tmp_path))
        assert seen == [False] and gc.isenabled() == enabled  # one kernel lowered, its twin a hit
    finally:
        gc.enable()


def test_kernel_text_differs_with_what_the_kernel_computes(tmp_path):
    f = compiled_twice(KernelCache(tmp_path))
    g = CompiledFunction(parse_module(TWICE.replace("lz.tanh", "lz.sigmoid")), "f", cache=KernelCache(tmp_path))
    g.plan_for([(16, 16), (16, 16)])
    assert kernel_cache.kernel_text(kernel_ops(f)[0]) != kernel_cache.kernel_text(kernel_ops(g)[0])


def test_a_warm_start_neither_lowers_nor_compiles(tmp_path):
    compiled_twice(KernelCache(tmp_path))
    warm = KernelCache(tmp_path)  # a new process, in effect
    f = compiled_twice(warm)
    assert (warm.stats.lowerings, warm.stats.compiles, warm.stats.disk_hits, warm.stats.objects_read) == (0, 0, 1, 1)
    # what still needs the LLVM IR (a native build, --emit=llvm) lowers it on demand, under its own name
    second = f.plan_for([(16, 16), (16, 16)]).plan.launches[1].kernel
    assert second.name in second.llvm_ir.split("define", 1)[1].split("(", 1)[0]


@pytest.mark.skipif(cpu_target().arch != "x86_64" or cpu_target("x86-64-v2").missing_here(),
                    reason="needs an x86-64 host that runs x86-64-v2 and v3 code")
def test_entries_of_another_cpu_are_not_reused(tmp_path):
    if cpu_target("x86-64-v3").missing_here():
        pytest.skip("this host does not run x86-64-v3 code")
    compiled_twice(KernelCache(tmp_path), cpu="x86-64-v2")
    other = KernelCache(tmp_path)
    compiled_twice(other, cpu="x86-64-v3")
    assert (other.stats.disk_hits, other.stats.lowerings, other.stats.compiles) == (0, 1, 1)


def test_entries_of_another_llvm_are_not_reused(tmp_path, monkeypatch):
    compiled_twice(KernelCache(tmp_path))
    monkeypatch.setattr(kernel_cache.llvm, "llvm_version_info", (99, 0, 0))
    other = KernelCache(tmp_path)
    compiled_twice(other)
    assert (other.stats.disk_hits, other.stats.objects_read, other.stats.lowerings, other.stats.compiles) == \
        (0, 0, 1, 1)


def test_edited_lowering_sources_lower_again_and_reuse_unchanged_objects(tmp_path, monkeypatch):
    compiled_twice(KernelCache(tmp_path))
    monkeypatch.setattr(kernel_cache, "source_fingerprint", lambda: "after an edit")
    other = KernelCache(tmp_path)
    compiled_twice(other)
    assert (other.stats.disk_hits, other.stats.lowerings, other.stats.compiles, other.stats.objects_read) == \
        (0, 1, 0, 1)


@pytest.mark.parametrize("entry", [".k", ".o"])
@pytest.mark.parametrize("damage", ["truncate", "empty"])
def test_corrupt_content_or_object_entries_are_rebuilt(tmp_path, entry, damage):
    compiled_twice(KernelCache(tmp_path))
    (path,) = tmp_path.rglob("*" + entry)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"")
    cache = KernelCache(tmp_path)
    compiled_twice(cache)  # runs right
    assert cache.stats.rejected == 1
    assert (cache.stats.lowerings, cache.stats.compiles) == ((1, 0) if entry == ".k" else (1, 1))
    assert path.read_bytes() == data  # rebuilt in place


def test_a_cached_object_missing_its_symbol_is_an_error_not_a_crash(tmp_path):
    compiled_twice(KernelCache(tmp_path))
    (path,) = tmp_path.rglob("*.k")
    cache = KernelCache(tmp_path)
    payload = cache._read(path).replace(b'"symbol": "', b'"symbol": "gone_')
    cache._write(path, payload)
    with pytest.raises(RuntimeError, match="no symbol 'gone_"):
        compiled_twice(cache)


LAYER_NORM = """
func.func @f(%x: tensor<?x?x48xf32>, %g: tensor<48xf32>) -> tensor<?x?x48xf32> {
  %m = "lz.reduce_mean"(%x) {axes = array<i64: 2>, keepdims = true} : (tensor<?x?x48xf32>) -> tensor<?x?x1xf32>
  %c = "lz.sub"(%x, %m) : (tensor<?x?x48xf32>, tensor<?x?x1xf32>) -> tensor<?x?x48xf32>
  %s = "lz.mul"(%c, %c) : (tensor<?x?x48xf32>, tensor<?x?x48xf32>) -> tensor<?x?x48xf32>
  %v = "lz.reduce_mean"(%s) {axes = array<i64: -1>, keepdims = true} : (tensor<?x?x48xf32>) -> tensor<?x?x1xf32>
  %e = "lz.constant"() {value = dense<1.0e-05> : tensor<f32>} : () -> tensor<f32>
  %ve = "lz.add"(%v, %e) : (tensor<?x?x1xf32>, tensor<f32>) -> tensor<?x?x1xf32>
  %r = "lz.rsqrt"(%ve) : (tensor<?x?x1xf32>) -> tensor<?x?x1xf32>
  %n = "lz.mul"(%c, %r) : (tensor<?x?x48xf32>, tensor<?x?x1xf32>) -> tensor<?x?x48xf32>
  %y = "lz.mul"(%n, %g) : (tensor<?x?x48xf32>, tensor<48xf32>) -> tensor<?x?x48xf32>
  func.return %y : tensor<?x?x48xf32>
}
"""


def layer_norm_reference(x, g):
    c = x - x.mean(-1, keepdims=True)
    return c / np.sqrt((c * c).mean(-1, keepdims=True) + 1e-5) * g


def test_a_row_generic_kernel_compiles_once_for_every_batch_and_sequence(tmp_path):
    """A function over ``?`` dims serves many shapes: its layer norm's rows form is probed at the
    first shape (two lowerings, one compile); every later (batch, sequence) runs that code: nothing
    lowered or compiled, on a warm start (a fresh cache on the same directory) not even the probe.
    The same function with static dims waits for a second row count to probe."""
    cache = KernelCache(tmp_path)
    f = CompiledFunction(parse_module(LAYER_NORM), "f", cache=cache)
    rng = np.random.default_rng(0)
    g = rng.standard_normal(48).astype(np.float32)
    shapes = [(2, 8), (3, 5), (1, 1), (7, 13), (4, 64), (1, 255), (16, 3)]
    counts = []
    for batch, seq in shapes:
        x = rng.standard_normal((batch, seq, 48)).astype(np.float32) * 3
        np.testing.assert_allclose(f(x, g), layer_norm_reference(x, g), rtol=2e-5, atol=2e-5)
        counts.append((cache.stats.lowerings, cache.stats.compiles))
    assert counts[0] == (2, 1)  # the probe at two row counts, one object for every row count
    assert all(c == counts[0] for c in counts[1:])
    assert cache.stats.row_generic_hits == len(shapes)
    warm = KernelCache(tmp_path)
    x = rng.standard_normal((5, 9, 48)).astype(np.float32)
    np.testing.assert_allclose(CompiledFunction(parse_module(LAYER_NORM), "f", cache=warm)(x, g),
                               layer_norm_reference(x, g), rtol=2e-5, atol=2e-5)
    assert (warm.stats.lowerings, warm.stats.compiles, warm.stats.row_generic_hits) == (0, 0, 1)
    static = KernelCache(tmp_path / "static")
    for batch in (2, 3):
        text = LAYER_NORM.replace("?x?", f"{batch}x8")
        CompiledFunction(parse_module(text), "f", cache=static)(np.ones((batch, 8, 48), np.float32), g)
        assert static.stats.lowerings == {2: 1, 3: 3}[batch]  # lowered for its shape, then the probe


EMBEDDING = """module {
  func.func @f(%table: tensor<50x24xf32>, %ids: tensor<?x?xi64>, %g: tensor<24xf32>) -> tensor<?x?x24xf32> {
    %e = "lz.gather"(%table, %ids) {axis = 0 : i64} : (tensor<50x24xf32>, tensor<?x?xi64>) -> tensor<?x?x24xf32>
    %y = "lz.mul"(%e, %g) : (tensor<?x?x24xf32>, tensor<24xf32>) -> tensor<?x?x24xf32>
    func.return %y : tensor<?x?x24xf32>
  }
}"""


def test_a_kernel_with_bounds_checks_is_cached_and_row_generic(tmp_path):
    """An embedding lookup (a gather with bounds checks) is keyed by its content like any kernel:
    probed at the first shape, it serves every (batch, sequence) without lowering, and a cache hit
    (in this process or a warm start) still raises IndexError naming its own line."""
    cache = KernelCache(tmp_path)
    f = CompiledFunction(parse_module(EMBEDDING), "f", cache=cache)
    rng = np.random.default_rng(0)
    table, g = rng.standard_normal((50, 24)).astype(np.float32), rng.standard_normal(24).astype(np.float32)
    counts = []
    for batch, seq in [(2, 8), (3, 5), (1, 1), (7, 13), (4, 64)]:
        ids = rng.integers(-50, 50, (batch, seq))
        np.testing.assert_array_equal(f(table, ids, g), table[ids] * g)
        counts.append((cache.stats.lowerings, cache.stats.compiles))
    assert counts[0] == (2, 1) and all(c == counts[0] for c in counts[1:])  # the probe, then nothing
    assert cache.stats.row_generic_hits == 5
    tail = ": lz.gather: index 50 is out of range for axis 0 of size 50 (valid: -50 to 49)"
    bad = np.zeros((5, 9), np.int64)
    bad[4, 8] = 50
    # the same kernel one line lower, from a warm start: the message names its own line
    later = CompiledFunction(parse_module("\n" + EMBEDDING), "f", cache=KernelCache(tmp_path))
    for compiled, line in ((f, 3), (later, 4)):
        with pytest.raises(IndexError, match=re.escape(f"<string>:{line}:5{tail}")):
            compiled(table, bad, g)
    assert (later.cache.stats.lowerings, later.cache.stats.compiles) == (0, 0)  # its plan came from the facts
