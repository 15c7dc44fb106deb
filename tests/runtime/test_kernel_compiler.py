"""Kernels compiled in the background: in this process and in compiler processes, errors raised."""
from __future__ import annotations

import ctypes
import json
import subprocess
import sys

import llvmlite.binding as llvm
import pytest

from lezero.codegen.llvm import jit, object_compiler
from lezero.codegen.llvm.target import cpu_target
from lezero.runtime.kernel_compiler import KernelCompiler, default_jobs


def kernel_ir(value: int) -> str:
    """A kernel (the kernel ABI) that stores ``value`` into its first buffer."""
    return (f"define void @k{value}(ptr %buffers, i64 %begin, i64 %end) {{\n"
            f"  %out = load ptr, ptr %buffers\n  store i64 {value}, ptr %out\n  ret void\n}}\n")


def run_object(obj: bytes, value: int) -> int:
    engine = jit.execution_engine(cpu_target())
    engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
    engine.finalize_object()
    function = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)(
        engine.get_function_address(f"k{value}"))
    out = ctypes.c_int64(-1)
    pointers = (ctypes.c_void_p * 1)(ctypes.addressof(out))
    function(pointers, 0, 1)
    return out.value


def test_kernels_waiting_start_compiler_processes_and_come_back_right():
    compiler = KernelCompiler(cpu_target(), jobs=3)
    futures = {value: compiler.submit(kernel_ir(value), 2, f"k{value}") for value in range(1, 9)}
    for value, future in futures.items():
        assert run_object(future.result(timeout=60), value) == value
    assert 1 <= len(compiler.processes) <= 2  # the third compiler is this process's thread


def test_one_kernel_at_a_time_starts_no_process():
    compiler = KernelCompiler(cpu_target(), jobs=4)
    for value in (1, 2, 3):
        assert run_object(compiler.submit(kernel_ir(value), 3, f"k{value}").result(timeout=60), value) == value
    assert compiler.processes == []


def test_an_llvm_error_fails_the_kernels_future():
    compiler = KernelCompiler(cpu_target(), jobs=1)
    with pytest.raises(RuntimeError, match="LLVM failed to compile kernel broken"):
        compiler.submit("define void @broken( {", 3, "broken").result(timeout=60)
    assert run_object(compiler.submit(kernel_ir(5), 3, "k5").result(timeout=60), 5) == 5  # it goes on


def test_the_compiler_script_answers_each_job_or_its_error():
    cpu = cpu_target()
    machine = {"triple": cpu.triple, "cpu": cpu.cpu, "features": cpu.feature_string, "jit": True}
    process = subprocess.Popen([sys.executable, object_compiler.__file__], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE)
    process.stdin.write(json.dumps(machine).encode() + b"\n")
    for text in (kernel_ir(7), "not llvm ir"):
        object_compiler.write_frame(process.stdin, b'{"opt_level": 1}\n' + text.encode())
    process.stdin.close()
    good, bad = object_compiler.read_frame(process.stdout), object_compiler.read_frame(process.stdout)
    assert object_compiler.read_frame(process.stdout) is None
    assert process.wait(timeout=60) == 0
    assert run_object(good, 7) == 7
    assert bad.startswith(object_compiler.ERROR_PREFIX) and b"error" in bad.lower()


def test_jobs_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("LEZERO_COMPILE_JOBS", "3")
    assert default_jobs() == 3
    monkeypatch.delenv("LEZERO_COMPILE_JOBS")
    assert default_jobs() >= 1


def _in_forked_child(body, timeout: float = 120.0) -> int:
    """Run ``body`` in a forked child; its exit code (the test fails, not hangs, past ``timeout``)."""
    import os
    import time
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = body()
        finally:
            os._exit(code)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail(f"the forked child did not finish within {timeout} s (a compiler of the parent's waited on?)")


def test_a_forked_child_compiles_with_compilers_of_its_own(tmp_path, monkeypatch):
    """The parent's compiler threads and processes are not in a forked child (a DataLoader worker,
    a process pool): the child's kernels must still compile, not wait forever on them."""
    import numpy as np

    import lezero as lz
    from lezero.runtime.kernel_compiler import compiler_for

    monkeypatch.setenv("LEZERO_CACHE_DIR", str(tmp_path))
    (lz.tensor(np.ones((3, 5), np.float32)) * 2).numpy()  # the parent's compiler thread is started
    parent = compiler_for(cpu_target())
    assert parent.submit(kernel_ir(7), 2, "k7").result(timeout=60)
    several = KernelCompiler(cpu_target(), jobs=2)
    [f.result(timeout=60) for f in [several.submit(kernel_ir(v), 2, f"k{v}") for v in (1, 2, 3)]]

    def child() -> int:
        assert compiler_for(cpu_target()) is not parent
        x = lz.tensor(np.arange(7 * 11, dtype=np.float32).reshape(7, 11))
        got = (x.exp() + 1).numpy()  # a kernel the parent never compiled
        return 0 if np.allclose(got, np.exp(np.arange(77, dtype=np.float32).reshape(7, 11)) + 1) else 3

    assert _in_forked_child(child) == 0
    assert [p.poll() for p in several.processes] == [None] * len(several.processes)  # the parent's live on
    assert run_object(several.submit(kernel_ir(4), 2, "k4").result(timeout=60), 4) == 4
