"""The kernel cache: memory and disk levels, corrupt and stale entries rebuilt, atomic writes."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

import lezero.runtime.kernel_cache as kernel_cache
from lezero.codegen.llvm.backend import lower_kernel
from lezero.codegen.schedule import schedule
from lezero.ir import parse_module
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
    assert (fresh.stats.compiles, fresh.stats.disk_hits) == (0, 1)


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
    assert (cache.stats.disk_hits, cache.stats.compiles) == (0, 1)
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
