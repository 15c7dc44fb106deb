"""An LLVM X86 AVX-512 miscompile (issue 10) and lezero's avoidance of it.

LLVM 22's X86 backend (llvmlite 0.50) compiles ``REPRODUCER`` wrongly for AVX-512 CPUs: splats of
elements 13 and 19 of a ``<24 x double>`` load, concatenated into a ``<20 x double>`` store, read
elements 9 and 15 (it loads bytes 64..127 of the operand, elements 8..15, and permutes them as if
they were elements 12..19).  The IR has no undefined behaviour; x86-64 and x86-64-v3 are right.
LLVM's loop vectorizer made that shape of code out of the f64 loop kernel of ``x @ w.T`` (4 x 6
times 6 x 5) when it vectorized the work-item loop, which the loop kernels of matmul and conv no
longer let it do (``ITEM_LOOP``; docs/architecture.md, "The f64 x @ w.T miscompile").  The tests
check that the bug is still there (when LLVM fixes it, the avoidance may go), in the machine code
on any x86 host and by running it on an AVX-512 one, and that f64 matmul kernels compiled for
AVX-512 CPUs, for AVX2 and for the host are right.
"""
from __future__ import annotations

import ctypes
import platform
import re

import llvmlite.binding as llvm
import numpy as np
import pytest

from codegen.kernel_testing import assert_matches, make_kernel, reference
from lezero.codegen.llvm import jit
from lezero.codegen.llvm.backend import lower_kernel

if platform.machine().lower() not in ("x86_64", "amd64"):
    pytest.skip(f"an X86 backend bug: the CPUs named here cannot be targeted from {platform.machine()}",
                allow_module_level=True)

FIXED = ("LLVM fixed the X86 AVX-512 shuffle miscompile: the workaround in "
         "lezero/codegen/llvm/contraction.py:lower_matmul_loops (ITEM_LOOP) may go")

# @f(a, out): out[5 * r + 2] = 2 * a[13], out[5 * r + 3] = 2 * a[19] for r in 0..3, the rest 0
REPRODUCER = r"""
define void @f(ptr %a, ptr %out) {
  %wide = load <24 x double>, ptr %a, align 8
  %s13 = shufflevector <24 x double> %wide, <24 x double> poison, <4 x i32> <i32 13, i32 13, i32 13, i32 13>
  %s19 = shufflevector <24 x double> %wide, <24 x double> poison, <4 x i32> <i32 19, i32 19, i32 19, i32 19>
  %d13 = fadd <4 x double> %s13, %s13
  %d19 = fadd <4 x double> %s19, %s19
  %c = shufflevector <4 x double> %d13, <4 x double> %d19, <8 x i32> <i32 0, i32 1, i32 2, i32 3, i32 4, i32 5, i32 6, i32 7>
  %c16 = shufflevector <8 x double> zeroinitializer, <8 x double> %c, <16 x i32> <i32 0, i32 1, i32 2, i32 3, i32 4, i32 5, i32 6, i32 7, i32 8, i32 9, i32 10, i32 11, i32 12, i32 13, i32 14, i32 15>
  %iv = shufflevector <16 x double> %c16, <16 x double> zeroinitializer, <20 x i32> <i32 0, i32 4, i32 8, i32 12, i32 16, i32 1, i32 5, i32 9, i32 13, i32 17, i32 2, i32 6, i32 10, i32 14, i32 18, i32 3, i32 7, i32 11, i32 15, i32 19>
  store <20 x double> %iv, ptr %out, align 8
  ret void
}
"""


def reproducer_expected(a: np.ndarray) -> np.ndarray:
    out = np.zeros((4, 5))
    out[:, 2], out[:, 3] = 2 * a[13], 2 * a[19]
    return out.reshape(-1)


def target_machine(cpu: str) -> llvm.TargetMachine:
    """A fresh JIT target machine for ``cpu`` ("host": this machine's CPU and features); an
    execution engine owns (and destroys) the machine it is given, so each use makes its own."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    target = llvm.Target.from_default_triple()
    if cpu == "host":
        return target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                            features=llvm.get_host_cpu_features().flatten(), opt=3, jit=True)
    return target.create_target_machine(cpu=cpu, features="", opt=3, jit=True)


def host_has_avx512f() -> bool:
    return bool(llvm.get_host_cpu_features().get("avx512f", False))


def require_avx512f():
    if not host_has_avx512f():
        pytest.skip("this host has no avx512f: code compiled for skylake-avx512 cannot run here")


def jit_function(parsed: llvm.ModuleRef, cpu: str, name: str, argtypes):
    engine = llvm.create_mcjit_compiler(parsed, target_machine(cpu))
    engine.finalize_object()
    return engine, ctypes.CFUNCTYPE(None, *argtypes)(engine.get_function_address(name))


def reproducer_output(cpu: str) -> np.ndarray:
    """``REPRODUCER`` compiled for ``cpu`` (no IR passes) run on a = 0, 1, ..., 23."""
    machine = target_machine(cpu)
    parsed = jit.parse_module(REPRODUCER, machine)
    engine, f = jit_function(parsed, cpu, "f", [ctypes.c_void_p, ctypes.c_void_p])
    a, out = np.arange(24.0), np.full(20, np.nan)
    f(a.ctypes.data, out.ctypes.data)
    return out


def test_reproducer_is_right_without_avx512():
    for cpu in ("x86-64", "x86-64-v3"):
        assert_matches(reproducer_output(cpu), reproducer_expected(np.arange(24.0)))


def test_llvm_still_miscompiles_the_reproducer_for_avx512():
    require_avx512f()
    for cpu in ("skylake-avx512", "x86-64-v4"):
        got = reproducer_output(cpu)
        assert not np.array_equal(got, reproducer_expected(np.arange(24.0))), f"{FIXED} ({cpu} now computes it right)"


def test_llvm_still_miscompiles_the_reproducer_in_the_assembly():
    """Without running the code (any x86 host): a right compilation must read element 19 of %a,
    bytes 152..159 of the first argument (%rdi); the miscompiled one loads bytes 64..127 only."""
    machine = target_machine("skylake-avx512")
    assembly = machine.emit_assembly(jit.parse_module(REPRODUCER, machine))
    offsets = [int(off or 0) for off in re.findall(r"(-?\d+)?\(%rdi\)", assembly)]
    assert offsets, assembly
    assert not any(off <= 152 < off + 64 for off in offsets), f"{FIXED} (element 19 is loaded now)\n{assembly}"


def transposed_matmul(m: int, k: int, n: int):
    """lz.kernel(x: m x k, w: n x k) { x @ w.T } in f64, as partition folds ``F.linear``."""
    return make_kernel([((m, k), "f64"), ((n, k), "f64")],
                       lambda b, x, w: b.op("lz.matmul", x, b.op("lz.transpose", w, perm=[1, 0])), kind="matmul")


def run_for_cpu(kernel, inputs, cpu: str):
    """Lower ``kernel``, optimize it with lezero's pipeline for ``cpu`` and run it (MCJIT)."""
    lowered = lower_kernel(kernel)
    parsed = jit.parse_module(lowered.llvm_ir, target_machine(cpu))
    jit.optimize_module(parsed, target_machine(cpu))
    engine, f = jit_function(parsed, cpu, lowered.name, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64])
    outputs = [np.full(t.shape, np.nan, t.element_type.numpy_dtype) for t in lowered.result_types]
    pointers = (ctypes.c_void_p * (len(inputs) + len(outputs)))(*[a.ctypes.data for a in list(inputs) + outputs])
    f(pointers, 0, lowered.work_items)
    return outputs


SHAPES = [(m, k, n) for k in range(1, 10) for m, n in ((4, 5), (4, 8), (1, 3), (2, 8), (5, 2), (8, 13))]


@pytest.mark.parametrize("cpu", ["skylake-avx512", "x86-64-v4", "x86-64-v3", "host"])
def test_f64_transposed_matmul_is_right_for_every_cpu(cpu):
    """x @ w.T in f64 for K = 1..9 (the miscompile was at 4 x 6 times 6 x 5), compiled for the
    AVX-512 CPUs LLVM miscompiled for, for AVX2 and for the host."""
    if cpu in ("skylake-avx512", "x86-64-v4"):
        require_avx512f()
    rng = np.random.default_rng(10)
    for m, k, n in SHAPES:
        module, kernel = transposed_matmul(m, k, n)
        inputs = [rng.standard_normal((m, k)), rng.standard_normal((n, k))]
        (got,), (want,) = run_for_cpu(kernel, inputs, cpu), reference(module, inputs)
        assert_matches(got, want)
