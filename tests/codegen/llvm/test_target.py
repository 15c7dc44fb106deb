"""CPU target selection: names, $LEZERO_CPU, what code for a CPU may contain, where it may run."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import lezero
from lezero.codegen.errors import TargetError
from lezero.codegen.llvm import jit
from lezero.codegen.llvm.target import X86_CPUS, cpu_target, executable_cpus, host_target, normalize_triple
from lezero.runtime.kernel_cache import KernelCache

ON_X86 = host_target().arch == "x86_64"
needs_x86 = pytest.mark.skipif(not ON_X86, reason="these CPU names are x86-64 ones; this host is "
                               f"{host_target().arch}")

MATMUL = """
module {
  func.func @f(%x: tensor<8x6xf32>, %w: tensor<6x40xf32>) -> tensor<8x40xf32> {
    %0 = "lz.matmul"(%x, %w) : (tensor<8x6xf32>, tensor<6x40xf32>) -> tensor<8x40xf32>
    func.return %0 : tensor<8x40xf32>
  }
}
"""


def test_default_is_the_host_and_lezero_cpu_overrides_it(monkeypatch):
    monkeypatch.delenv("LEZERO_CPU", raising=False)
    assert cpu_target() is host_target() and cpu_target("host") is host_target()
    assert host_target().name == "host" and host_target().features
    if ON_X86:
        monkeypatch.setenv("LEZERO_CPU", "x86-64-v2")
        assert cpu_target().cpu == "x86-64-v2" and cpu_target().vector_bytes == 16


@needs_x86
def test_named_cpus_carry_their_features():
    v3, v4 = cpu_target("x86-64-v3"), cpu_target("skylake-avx512")
    assert {"avx2", "fma"} <= v3.features and "avx512f" not in v3.features
    assert v3.vector_bytes == 32 and v3.vector_registers == 16
    assert v4.vector_bytes == 64 and v4.vector_registers == 32
    assert cpu_target("x86-64").vector_bytes == 16 and not cpu_target("x86-64").has_fma
    # every level contains the one below: code for an older CPU runs on a newer one
    levels = [X86_CPUS[n] for n in ("x86-64", "x86-64-v2", "x86-64-v3", "x86-64-v4")]
    assert all(a < b for a, b in zip(levels, levels[1:]))


def test_aarch64_targets():
    arm = cpu_target("cortex-a72", "aarch64-linux-gnu")
    assert arm.triple == "aarch64-unknown-linux-gnu" and "neon" in arm.features
    assert arm.vector_bytes == 16 and arm.vector_registers == 32 and arm.has_fma
    assert cpu_target(None, "aarch64-linux-gnu").cpu == ("generic" if ON_X86 else host_target().cpu)
    assert normalize_triple("arm64-linux-gnu") == "aarch64-unknown-linux-gnu"


@pytest.mark.parametrize("cpu, triple, message", [
    ("pentium-9000", None, "unknown cpu 'pentium-9000'"),
    ("generic", "sparc-linux-gnu", "unknown target triple 'sparc-linux-gnu'"),
])
def test_unknown_names_are_errors(cpu, triple, message):
    with pytest.raises(TargetError, match=re.escape(message)):
        cpu_target(cpu, triple)


def test_code_for_a_cpu_this_machine_lacks_does_not_run_here():
    foreign = cpu_target("cortex-a72", "aarch64-linux-gnu") if ON_X86 else cpu_target("x86-64-v3", "x86_64-linux-gnu")
    with pytest.raises(TargetError, match="cannot run .* on this machine"):
        lezero.compile(MATMUL, cpu=foreign)
    with pytest.raises(TargetError, match="cannot run"):
        jit.compile_module("define void @f() {\n  ret void\n}\n", foreign)
    # ... but it may go into an object file for that machine
    assert jit.emit_object("define void @f() {\n  ret void\n}\n", foreign)[:4] == b"\x7fELF"


@needs_x86
def test_every_executable_cpu_computes_the_same_matmul():
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((8, 6), np.float32), rng.standard_normal((6, 40), np.float32)
    cpus = executable_cpus()
    assert {"x86-64", "x86-64-v2"} <= set(cpus)
    for name in ("x86-64", "x86-64-v3", *(c for c in ("skylake-avx512",) if c in cpus)):
        np.testing.assert_allclose(lezero.compile(MATMUL, cpu=name)(x, w), x @ w, rtol=1e-5, atol=1e-5)


@needs_x86
def test_the_cpu_decides_the_vector_registers_in_the_machine_code():
    module = lezero.ir.parser.parse_module(MATMUL)
    from lezero.codegen.llvm.backend import kernel_text

    v3 = kernel_text(module, "x86-64-v3", assembly=True)
    assert "ymm" in v3 and "zmm" not in v3
    sse = kernel_text(module, "x86-64", assembly=True)
    assert "xmm" in sse and "ymm" not in sse and "zmm" not in sse
    assert "zmm" in kernel_text(module, "skylake-avx512", assembly=True)


@needs_x86
def test_kernel_cache_entries_are_per_cpu(tmp_path):
    cache = KernelCache(directory=tmp_path)
    ir_text = "define void @k(ptr %b, i64 %s, i64 %e) {\n  ret void\n}\n"
    assert cache.object_key(ir_text, cpu_target("x86-64-v3")) != cache.object_key(ir_text, cpu_target("x86-64-v2"))
    cache.load(ir_text, "k", "x86-64-v2")
    cache.load(ir_text, "k", "x86-64-v3")
    assert cache.stats.compiles == 2


@needs_x86
def test_lezero_cpu_reaches_eager_ops():
    """A whole process on another CPU: the environment variable is all it takes."""
    code = ("import lezero as lz, numpy as np\n"
            "from lezero.codegen.llvm.target import cpu_target\n"
            "assert cpu_target().cpu == 'x86-64-v2'\n"
            "x = lz.tensor(np.arange(6.0).reshape(2, 3))\n"
            "print(float((x @ x.T).sum()))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "LEZERO_CPU": "x86-64-v2"})
    assert out.returncode == 0, out.stderr
    x = np.arange(6.0).reshape(2, 3)
    assert float(out.stdout) == float((x @ x.T).sum())


@needs_x86
def test_traced_models_take_a_cpu():
    import lezero.nn as nn

    model = nn.Linear(6, 4)
    x = lezero.randn(3, 6)
    traced = lezero.jit.trace(model, x, cpu="x86-64-v3")
    assert traced.compiled.cpu.cpu == "x86-64-v3"
    np.testing.assert_allclose(traced(x).detach().numpy(), model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
