"""Kernels compiled in the background, several at once: LLVM IR in, object code out (a ``Future``).

The kernel cache submits each kernel it had to lower right away, so LLVM compiles it while Python
lowers the next one.  llvmlite serializes every call into LLVM behind one lock, so one thread of
this process compiles at a time (ctypes releases the GIL: it runs beside the lowering); more
compilers are processes running ``lezero/codegen/llvm/object_compiler.py`` as a script (it imports
llvmlite only, ~0.1 s to start, not lezero), each fed one kernel at a time through a pipe.

A compiler is started when work waits for one: the first submission starts the thread in this
process, a submission that finds a kernel already waiting starts a process, up to ``jobs``
compilers (``$LEZERO_COMPILE_JOBS``, else the CPUs this process may use).  So an eager op (one
kernel at a time) never starts a process, and a model's kernels spread over every core.
Compilers live as long as the process; a process compiler ends when this one does (its stdin
closes).  An LLVM error, or a compiler process that dies, fails the kernel's future with the
error, never silently.

**fork**: a child (a DataLoader worker, a process pool) has none of its parent's compiler threads,
so it gets compilers of its own (``compiler_for`` forgets the parent's; the kernel cache forgets
the compilations the parent had in flight and compiles what it needs itself), closes its copies of
the pipes to the parent's compiler processes (they end with the parent, not with its last child),
and finds LLVM's lock free: a fork waits for the compilation holding it to finish.
"""
from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
from concurrent.futures import Future

from lezero.codegen.llvm import jit, object_compiler
from lezero.codegen.llvm.target import CpuTarget
from lezero.runtime.thread_pool import usable_cpus


def default_jobs() -> int:
    """``$LEZERO_COMPILE_JOBS``, else the CPUs this process may run on."""
    env = os.environ.get("LEZERO_COMPILE_JOBS", "").strip()
    return max(1, int(env)) if env else usable_cpus()


class KernelCompiler:
    """Compiles LLVM IR for one CPU target on up to ``jobs`` compilers (see the module docstring)."""

    def __init__(self, cpu: CpuTarget, jobs: int | None = None):
        self.cpu = cpu
        self.jobs = jobs or default_jobs()
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._waiting = 0       # submitted, not yet taken by a compiler
        self._compilers = 0     # started and alive
        self.processes: list[subprocess.Popen] = []

    def submit(self, llvm_ir: str, opt_level: int, name: str) -> Future:
        """A future of the object code of ``llvm_ir`` (kernel ``name``) at O<opt_level>."""
        future: Future = Future()
        with self._lock:
            self._waiting += 1
            start = self._compilers == 0 or (self._waiting > 1 and self._compilers < self.jobs)
            in_process = self._compilers == 0
            if start:
                self._compilers += 1
        self._queue.put((llvm_ir, opt_level, name, future))
        if start:
            target = self._compile_in_this_process if in_process else self._compile_in_child_process
            threading.Thread(target=target, name=f"lezero-kernel-compiler-{self._compilers}", daemon=True).start()
        return future

    def _take(self):
        job = self._queue.get()
        with self._lock:
            self._waiting -= 1
        return job

    def _compile_in_this_process(self) -> None:
        target_machine = jit.shared_target_machine(self.cpu)
        while True:
            llvm_ir, opt_level, name, future = self._take()
            try:
                parsed = jit.optimized_module(llvm_ir, target_machine, opt_level)
                with jit._compile_lock:
                    object_compiler.apply_codegen_options(target_machine.triple)
                    future.set_result(target_machine.emit_object(parsed))
            except Exception as e:  # noqa: BLE001 - the kernel's caller raises it
                future.set_exception(RuntimeError(f"LLVM failed to compile kernel {name}: {e}"))

    def _compile_in_child_process(self) -> None:
        process = subprocess.Popen([sys.executable, object_compiler.__file__], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.processes.append(process)
        machine = {"triple": self.cpu.triple, "cpu": self.cpu.cpu, "features": self.cpu.feature_string,
                   "jit": True}
        job = None
        try:
            process.stdin.write(json.dumps(machine).encode() + b"\n")
            while True:
                job = self._take()
                llvm_ir, opt_level, name, future = job
                object_compiler.write_frame(process.stdin, json.dumps({"opt_level": opt_level}).encode() + b"\n"
                                            + llvm_ir.encode())
                reply = object_compiler.read_frame(process.stdout)
                if reply is None:
                    raise EOFError("the compiler process ended")
                job = None
                if reply.startswith(object_compiler.ERROR_PREFIX):
                    future.set_exception(RuntimeError(f"LLVM failed to compile kernel {name}: "
                                                      f"{reply[1:].decode(errors='replace')}"))
                else:
                    future.set_result(reply)
        except (OSError, EOFError) as e:
            process.kill()
            err = process.communicate()[1].decode(errors="replace")[-4000:]
            with self._lock:
                self._compilers -= 1
            if job is not None:
                job[3].set_exception(RuntimeError(f"a kernel compiler process failed compiling {job[2]} "
                                                  f"(exit code {process.returncode}, {e}):\n{err}"))


_COMPILERS: dict[CpuTarget, KernelCompiler] = {}
_COMPILERS_LOCK = threading.Lock()


def compiler_for(cpu: CpuTarget) -> KernelCompiler:
    """This process's compiler for ``cpu``."""
    with _COMPILERS_LOCK:
        compiler = _COMPILERS.get(cpu)
        if compiler is None:
            compiler = _COMPILERS[cpu] = KernelCompiler(cpu)
        return compiler


def _before_fork() -> None:
    jit._compile_lock.acquire()
    _COMPILERS_LOCK.acquire()


def _after_fork_in_parent() -> None:
    _COMPILERS_LOCK.release()
    jit._compile_lock.release()


def _after_fork_in_child() -> None:
    global _COMPILERS_LOCK
    # Our copies of the pipes become /dev/null at the same numbers: the compiler processes see
    # their parent's end alone, and the file objects here still own a valid descriptor (closing
    # one, or flushing a half-written frame into it, touches nothing else).
    devnull = os.open(os.devnull, os.O_RDWR)
    for compiler in _COMPILERS.values():
        for process in compiler.processes:
            for pipe in (process.stdin, process.stdout, process.stderr):
                os.dup2(devnull, pipe.fileno())
    os.close(devnull)
    _COMPILERS.clear()
    _COMPILERS_LOCK = threading.Lock()
    jit._compile_lock.release()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child)
