"""``lezero.compile``: a module and a target to the executor that runs it (``"cpu"``:
``runtime.cpu.CompiledFunction``; ``"cuda"``: ``runtime.cuda.CudaFunction``, imported only then).
The ahead-of-time build for an executable or a shared library is ``runtime.native``."""
from __future__ import annotations

from lezero.codegen.llvm.target import CpuTarget
from lezero.codegen.targets import check_target
from lezero.ir.parser import parse_module
from lezero.runtime.cpu import CompiledFunction


def compile(module_or_text, entry: str | None = None, target: str = "cpu",  # noqa: A001
            cpu: CpuTarget | str | None = None) -> CompiledFunction:
    """Compile ``@entry`` of a module (or of MLIR text) for ``target`` (``"cpu"``, or ``"cuda"``:
    ``lezero.runtime.cuda.CudaFunction``); returns a callable taking numpy arrays and returning a
    numpy array, or a tuple for several results.  ``cpu`` names the CPU the host code is generated
    for (LLVM's names: ``"x86-64-v3"``, ``"skylake-avx512"``, ...; default ``$LEZERO_CPU`` or
    ``"host"``); it must be one this machine can execute."""
    check_target(target)
    module = parse_module(module_or_text) if isinstance(module_or_text, str) else module_or_text
    if entry is None:
        functions = module.functions
        if len(functions) != 1:
            names = ", ".join("@" + f.sym_name for f in functions)
            raise ValueError(f"the module has {len(functions)} functions ({names}): name the entry")
        entry = functions[0].sym_name
    if target == "cuda":
        from lezero.runtime.cuda import CudaFunction

        return CudaFunction(module, entry, cpu=cpu)
    return CompiledFunction(module, entry, cpu=cpu)
