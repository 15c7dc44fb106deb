"""The kernel cache: compiled kernels keyed by a hash of their LLVM IR, the target and the compiler.

Two levels: in memory (per process) and on disk in ``$LEZERO_CACHE_DIR`` (default
``~/.cache/lezero``), one object file per kernel. An entry on disk carries a header with the
SHA-256 of its payload; an entry that is truncated, corrupt or written by another compiler version
is detected, removed and rebuilt, never loaded. Files are written atomically (temp file + rename),
so a crash or a concurrent writer never leaves half an entry behind.
"""
from __future__ import annotations

import hashlib
import os
import pathlib
import tempfile
import threading
import time
from dataclasses import dataclass, field

import llvmlite
import llvmlite.binding as llvm

from lezero.codegen.llvm import jit
from lezero.codegen.llvm.target import CpuTarget, cpu_target

# Bump when generated code changes meaning, so old entries are never reused.
CODEGEN_VERSION = "lezero-cpu-1"
_MAGIC = b"LZKCACHE1\n"


def cache_directory() -> pathlib.Path:
    env = os.environ.get("LEZERO_CACHE_DIR")
    return pathlib.Path(env) if env else pathlib.Path.home() / ".cache" / "lezero"


def target_identity(cpu: CpuTarget) -> str:
    """Everything about the target and the compiler that changes the object code."""
    return "|".join([CODEGEN_VERSION, f"llvmlite-{llvmlite.__version__}", cpu.identity])


@dataclass
class CacheStats:
    memory_hits: int = 0
    disk_hits: int = 0
    compiles: int = 0
    rejected: int = 0  # corrupt or stale disk entries, rebuilt
    compile_seconds: float = 0.0
    load_seconds: float = 0.0


class LoadedKernel:
    """A kernel's machine code in this process: a ctypes function with the kernel ABI."""

    def __init__(self, engine, address: int, symbol: str):
        import ctypes

        self._engine = engine  # the code lives as long as its engine
        self.address = address
        self.symbol = symbol
        self.function = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(address)


@dataclass
class KernelCache:
    directory: pathlib.Path | None = None
    stats: CacheStats = field(default_factory=CacheStats)

    def __post_init__(self):
        self._memory: dict[str, LoadedKernel] = {}
        self._lock = threading.Lock()

    def key(self, llvm_ir: str, cpu: CpuTarget) -> str:
        return hashlib.sha256((target_identity(cpu) + "\n" + llvm_ir).encode()).hexdigest()

    def path(self, key: str) -> pathlib.Path:
        return (self.directory or cache_directory()) / key[:2] / f"{key}.o"

    def load(self, llvm_ir: str, symbol: str, cpu: CpuTarget | str | None = None) -> LoadedKernel:
        """The compiled ``symbol`` of ``llvm_ir`` for ``cpu`` (default: ``$LEZERO_CPU`` or the host;
        it must be executable here), from memory, disk, or a fresh compile."""
        cpu = cpu_target(cpu)
        key = self.key(llvm_ir, cpu)
        with self._lock:
            hit = self._memory.get(key)
            if hit is not None:
                self.stats.memory_hits += 1
                return hit
        obj = self._read(key)
        if obj is None:
            start = time.perf_counter()
            obj = _compile_object(llvm_ir, cpu)
            self.stats.compile_seconds += time.perf_counter() - start
            self.stats.compiles += 1
            self._write(key, obj)
        else:
            self.stats.disk_hits += 1
        start = time.perf_counter()
        kernel = _load_object(obj, symbol, cpu)
        self.stats.load_seconds += time.perf_counter() - start
        with self._lock:
            self._memory[key] = kernel
        return kernel

    def _read(self, key: str) -> bytes | None:
        path = self.path(key)
        try:
            data = path.read_bytes()
        except OSError:
            return None
        header_len = len(_MAGIC) + 64 + 1
        ok = len(data) > header_len and data.startswith(_MAGIC)
        if ok:
            digest = data[len(_MAGIC):len(_MAGIC) + 64].decode("ascii", "replace")
            payload = data[header_len:]
            ok = hashlib.sha256(payload).hexdigest() == digest
        if not ok:
            self.stats.rejected += 1
            try:
                path.unlink()
            except OSError:
                pass
            return None
        return payload

    def _write(self, key: str, obj: bytes) -> None:
        path = self.path(key)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as f:
                f.write(_MAGIC + hashlib.sha256(obj).hexdigest().encode("ascii") + b"\n" + obj)
            os.replace(tmp, path)
        except OSError:
            # A read-only or full cache directory costs speed, never correctness.
            pass

    def clear_memory(self) -> None:
        with self._lock:
            self._memory.clear()


def _compile_object(llvm_ir: str, cpu: CpuTarget) -> bytes:
    cpu.require_executable("kernels")
    tm = jit.shared_target_machine(cpu)
    parsed = jit.optimized_module(llvm_ir, tm)
    with jit._compile_lock:
        return tm.emit_object(parsed)


def _load_object(obj: bytes, symbol: str, cpu: CpuTarget) -> LoadedKernel:
    with jit._compile_lock:
        engine = jit.execution_engine(cpu)
        engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        engine.finalize_object()
        address = engine.get_function_address(symbol)
    if not address:
        raise RuntimeError(f"kernel object has no symbol {symbol!r}")
    return LoadedKernel(engine, address, symbol)


_DEFAULT: KernelCache | None = None


def default_cache() -> KernelCache:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = KernelCache()
    return _DEFAULT
