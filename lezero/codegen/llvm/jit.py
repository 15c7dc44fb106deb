"""Compile llvmlite modules for the host CPU and hand back callable function addresses.

Target machines are made for the host's CPU name and feature string (so AVX2 / AVX-512 FMA are
selected); modules are optimized with LLVM's new pass manager at O3 and JIT-compiled with MCJIT.
The shared machine also emits assembly (for tests) and, position-independent, object files (for
executables linked without Python). ``llvm.initialize()`` is gone from llvmlite (it raises);
only the native target and its assembly printer are registered.
"""
from __future__ import annotations

import ctypes
import functools
import threading

import llvmlite.binding as llvm
import llvmlite.ir as ir

_compile_lock = threading.Lock()  # LLVM contexts are not safe to mutate from several threads


@functools.cache
def _init_native_target() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@functools.cache
def host_cpu_features() -> frozenset[str]:
    """Names of the features the host CPU has, e.g. {'avx2', 'fma', 'avx512f', ...}."""
    features = llvm.get_host_cpu_features()
    return frozenset(name for name, enabled in features.items() if enabled)


@functools.cache
def host_target_machine(jit: bool = True) -> llvm.TargetMachine:
    """The shared target machine for this CPU at O3: host triple, CPU name and feature string.

    ``jit=False`` gives a position-independent machine for object files linked into executables.
    Never hand this one to an execution engine: an engine takes ownership of its target machine
    and destroys it with itself (``CompiledModule`` makes its own).
    """
    return new_host_target_machine(jit)


def new_host_target_machine(jit: bool = True) -> llvm.TargetMachine:
    """A fresh host target machine (see ``host_target_machine``)."""
    _init_native_target()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(
        cpu=llvm.get_host_cpu_name(),
        features=llvm.get_host_cpu_features().flatten(),
        opt=3,
        reloc="default" if jit else "pic",
        codemodel="jitdefault" if jit else "default",
        jit=jit,
    )


def parse_module(module: ir.Module | str, target_machine: llvm.TargetMachine) -> llvm.ModuleRef:
    """Parse and verify an llvmlite IR module, stamped with the machine's triple and layout."""
    parsed = llvm.parse_assembly(str(module))
    parsed.triple = target_machine.triple
    parsed.data_layout = str(target_machine.target_data)
    parsed.verify()
    return parsed


def optimize_module(parsed: llvm.ModuleRef, target_machine: llvm.TargetMachine, speed_level: int = 3) -> None:
    """Run LLVM's default O<speed_level> pipeline (new pass manager) over ``parsed`` in place."""
    tuning = llvm.create_pipeline_tuning_options(speed_level=speed_level)
    tuning.loop_vectorization = True
    tuning.slp_vectorization = True
    tuning.loop_unrolling = True
    pass_builder = llvm.create_pass_builder(target_machine, tuning)
    pass_builder.getModulePassManager().run(parsed, pass_builder)


def optimized_module(module: ir.Module | str, target_machine: llvm.TargetMachine | None = None) -> llvm.ModuleRef:
    """Parse, verify and O3-optimize ``module`` for the host (or the given) target machine."""
    target_machine = target_machine or host_target_machine()
    with _compile_lock:
        parsed = parse_module(module, target_machine)
        optimize_module(parsed, target_machine)
    return parsed


def emit_assembly(module: ir.Module | str, target_machine: llvm.TargetMachine | None = None) -> str:
    """The host assembly of ``module`` after O3, e.g. to check that vector FMA was selected."""
    target_machine = target_machine or host_target_machine()
    parsed = optimized_module(module, target_machine)
    with _compile_lock:
        return target_machine.emit_assembly(parsed)


def emit_object(module: ir.Module | str) -> bytes:
    """A relocatable (PIC) object file of ``module`` for the host, for linking into executables."""
    target_machine = host_target_machine(jit=False)
    parsed = optimized_module(module, target_machine)
    with _compile_lock:
        return target_machine.emit_object(parsed)


def emit_linked_object(modules, exported) -> bytes:
    """One relocatable (PIC) object file holding several modules, for native executables.

    Each module is O3-optimized on its own (exactly as the JIT compiles it), then they are linked
    into one. The functions named in ``exported`` keep external linkage with hidden visibility
    (the driver linked beside them calls them; a shared library does not export them); every
    other definition becomes internal, so equal helper names in different modules cannot clash.
    """
    target_machine = host_target_machine(jit=False)
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
        return target_machine.emit_object(linked)


class CompiledModule:
    """A JIT-compiled module. Keep it alive as long as any of its function addresses is used."""

    def __init__(self, module: ir.Module | str):
        parsed = optimized_module(module, host_target_machine())
        with _compile_lock:
            # The engine owns (and frees) the target machine it is given: give it its own.
            self._engine = llvm.create_mcjit_compiler(parsed, new_host_target_machine())
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


def compile_module(module: ir.Module | str) -> CompiledModule:
    """JIT-compile ``module`` for the host CPU at O3."""
    return CompiledModule(module)
