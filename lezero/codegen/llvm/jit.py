"""Compile llvmlite modules for a CPU target and hand back callable function addresses.

Target machines are made for a ``CpuTarget`` (``lezero.codegen.llvm.target``: the host by default,
or the CPU ``$LEZERO_CPU``/``cpu=`` names), so the code uses exactly that CPU's vector units;
modules are optimized with LLVM's new pass manager at ``OPT_LEVEL`` (O2: O3 does not pay, see
``object_compiler.py``) and JIT-compiled with MCJIT, which
refuses a target this machine cannot execute. The same machines emit assembly (for tests) and,
position-independent, object files (for executables linked without Python, also for other CPUs
and for AArch64).  Parsing, the pass pipeline and the target machines are ``object_compiler.py``'s,
which the kernel cache's compiler processes run without importing lezero.
"""
from __future__ import annotations

import ctypes
import functools
import threading

import llvmlite.binding as llvm
import llvmlite.ir as ir

from lezero.codegen.errors import TargetError
from lezero.codegen.llvm.object_compiler import OPT_LEVEL, apply_codegen_options, optimize_module, parse_module
from lezero.codegen.llvm.target import CpuTarget, cpu_target

_compile_lock = threading.Lock()  # LLVM contexts are not safe to mutate from several threads


@functools.cache
def shared_target_machine(target: CpuTarget, jit: bool = True) -> llvm.TargetMachine:
    """One target machine per target for optimizing and emitting (``jit=False``: position-independent).
    Never hand it to an execution engine: an engine owns and destroys the machine it is given."""
    return target.target_machine(jit)


def optimized_module(module: ir.Module | str, target_machine: llvm.TargetMachine,
                     speed_level: int = OPT_LEVEL) -> llvm.ModuleRef:
    """Parse, verify and optimize ``module`` (at O<speed_level>) for ``target_machine``."""
    with _compile_lock:
        parsed = parse_module(module, target_machine)
        optimize_module(parsed, target_machine, speed_level)
    return parsed


def emit_assembly(module: ir.Module | str, cpu: CpuTarget | str | None = None) -> str:
    """The assembly of ``module`` optimized for ``cpu``, e.g. to check that vector FMA was selected."""
    target_machine = shared_target_machine(cpu_target(cpu))
    parsed = optimized_module(module, target_machine)
    with _compile_lock:
        apply_codegen_options(target_machine.triple)
        return target_machine.emit_assembly(parsed)


def emit_object(module: ir.Module | str, cpu: CpuTarget | str | None = None) -> bytes:
    """A relocatable (PIC) object file of ``module`` for ``cpu``, for linking into executables."""
    target_machine = shared_target_machine(cpu_target(cpu), jit=False)
    parsed = optimized_module(module, target_machine)
    with _compile_lock:
        apply_codegen_options(target_machine.triple)
        return target_machine.emit_object(parsed)


def emit_linked_object(modules, exported, cpu: CpuTarget | str | None = None) -> bytes:
    """One relocatable (PIC) object file holding several modules, for native executables.

    Each module is optimized on its own (exactly as the JIT compiles it), then they are linked
    into one. The functions named in ``exported`` keep external linkage with hidden visibility
    (the driver linked beside them calls them; a shared library does not export them); every
    other definition becomes internal, so equal helper names in different modules cannot clash.
    """
    target_machine = shared_target_machine(cpu_target(cpu), jit=False)
    exported = set(exported)
    with _compile_lock:
        linked = llvm.parse_assembly("")
        linked.triple = target_machine.triple
        linked.data_layout = str(target_machine.target_data)
        for module in modules:
            parsed = parse_module(module, target_machine)
            optimize_module(parsed, target_machine)
            for value in list(parsed.functions) + list(parsed.global_variables):
                if value.is_declaration or value.name.startswith("llvm."):
                    continue
                if value.name in exported:
                    value.visibility = "hidden"
                else:
                    value.linkage = "internal"
            linked.link_in(parsed)
        apply_codegen_options(target_machine.triple)
        return target_machine.emit_object(linked)


@functools.cache
def load_compiler_runtime() -> None:
    """Make libgcc's helpers resolvable by MCJIT: without F16C (``x86-64``, ``x86-64-v2``) LLVM
    converts f16 by calling ``__extendhfsf2``/``__truncsfhf2``/``__truncdfhf2`` (libgcc_s since GCC
    12), which Python does not load, and an unresolved call jumps to address 0."""
    try:
        llvm.load_library_permanently("libgcc_s.so.1")
    except RuntimeError as e:
        raise TargetError(f"f16 code for x86 CPUs without F16C calls libgcc_s.so.1, which cannot be loaded: {e}")
    missing = [name for name in ("__extendhfsf2", "__truncsfhf2", "__truncdfhf2") if not llvm.address_of_symbol(name)]
    if missing:
        raise TargetError(f"libgcc_s.so.1 lacks {', '.join(missing)} (GCC 12 or newer has them), which f16 code "
                          "for x86 CPUs without F16C calls")


def execution_engine(cpu: CpuTarget, module: llvm.ModuleRef | None = None) -> llvm.ExecutionEngine:
    """An MCJIT engine for ``cpu`` (which must be executable here), owning its own target machine."""
    cpu.require_executable()
    if cpu.arch == "x86_64" and "f16c" not in cpu.features:
        load_compiler_runtime()
    return llvm.create_mcjit_compiler(module if module is not None else llvm.parse_assembly(""),
                                      cpu.target_machine(jit=True))


class CompiledModule:
    """A JIT-compiled module. Keep it alive as long as any of its function addresses is used."""

    def __init__(self, module: ir.Module | str, cpu: CpuTarget | str | None = None):
        cpu = cpu_target(cpu)
        cpu.require_executable()
        parsed = optimized_module(module, shared_target_machine(cpu))
        with _compile_lock:
            self._engine = execution_engine(cpu, parsed)
            apply_codegen_options(cpu.triple)
            self._engine.finalize_object()
        self.llvm_module = parsed

    def function_address(self, name: str) -> int:
        with _compile_lock:
            address = self._engine.get_function_address(name)
        if not address:
            raise KeyError(f"no function named {name!r} in the compiled module")
        return address

    def ctypes_function(self, name: str, restype, argtypes):
        """The function as a ctypes callable; calls release the GIL (CFUNCTYPE, not PYFUNCTYPE)."""
        prototype = ctypes.CFUNCTYPE(restype, *argtypes)
        function = prototype(self.function_address(name))
        function._owner = self  # the machine code lives as long as the engine
        return function


def compile_module(module: ir.Module | str, cpu: CpuTarget | str | None = None) -> CompiledModule:
    """JIT-compile ``module`` at ``OPT_LEVEL`` for ``cpu`` (default: ``$LEZERO_CPU`` or the host)."""
    return CompiledModule(module, cpu)
