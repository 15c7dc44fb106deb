"""CPU targets: the CPU that code is generated for, named as LLVM names it, and what it may use.

Code is right only for the CPUs it was generated for, and the host is one CPU among many: every
CPU code generator decision (vector widths, GEMM tiles, which instructions LLVM may select, the
kernel cache key) reads a ``CpuTarget``, never the host directly.

- ``cpu_target(cpu=None, triple=None)`` resolves a name: ``None`` is the process default,
  ``$LEZERO_CPU`` or else ``"host"``; ``"host"`` is this machine (LLVM's host CPU name and its
  exact feature list); any other name is one of LLVM's (``x86-64-v3``, ``skylake-avx512``,
  ``znver4``, ``cortex-a72``, ...) with the CPU's own default features.
- ``features`` lists the instruction-set extensions code for that CPU may contain. LLVM does not
  tell which features a named CPU has (llvmlite exposes them only for the host), so the table
  below lists, per CPU, the extensions LLVM's code generator can select on its own (SIMD, FMA,
  F16C, BMI, ...); a CPU whose table entry the host does not cover cannot run here.
- Code that runs in this process (the JIT, the kernel cache) must be executable here:
  ``require_executable`` raises ``TargetError`` otherwise. Object files for other machines
  (``lezero-compile --cpu``/``--triple``) may target anything in the table.
"""
from __future__ import annotations

import functools
import os
import platform
from dataclasses import dataclass

import llvmlite.binding as llvm

from lezero.codegen.errors import TargetError
from lezero.codegen.llvm.amx import AMX_FEATURES, tile_data_permitted
from lezero.codegen.llvm.object_compiler import create_target_machine

# --- x86-64: the psABI micro-architecture levels, then named CPUs as level + extras ----------------
_X86_V1 = frozenset({"sse", "sse2"})
_X86_V2 = _X86_V1 | {"sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "cx16", "sahf"}
_X86_V3 = _X86_V2 | {"avx", "avx2", "bmi", "bmi2", "f16c", "fma", "lzcnt", "movbe"}
_X86_V4 = _X86_V3 | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
_ICELAKE = _X86_V4 | {"avx512vnni", "avx512vbmi", "avx512vbmi2", "avx512bitalg", "avx512vpopcntdq",
                      "avx512ifma", "gfni", "vaes", "vpclmulqdq"}
_SAPPHIRE = _ICELAKE | {"avx512bf16", "avx512fp16", "avxvnni", "amx-tile", "amx-int8", "amx-bf16"}
_ZNVER4 = _ICELAKE | {"avx512bf16"}

X86_CPUS: dict[str, frozenset[str]] = {
    "x86-64": _X86_V1, "x86-64-v2": _X86_V2, "x86-64-v3": _X86_V3, "x86-64-v4": _X86_V4,
    "nehalem": _X86_V2, "haswell": _X86_V3, "broadwell": _X86_V3, "skylake": _X86_V3,
    "alderlake": _X86_V3 | {"avxvnni"},
    "skylake-avx512": _X86_V4, "cascadelake": _X86_V4 | {"avx512vnni"},
    "cooperlake": _X86_V4 | {"avx512vnni", "avx512bf16"},
    "icelake-server": _ICELAKE, "icelake-client": _ICELAKE, "tigerlake": _ICELAKE,
    "sapphirerapids": _SAPPHIRE, "emeraldrapids": _SAPPHIRE, "graniterapids": _SAPPHIRE,
    "znver1": _X86_V3, "znver2": _X86_V3, "znver3": _X86_V3, "znver4": _ZNVER4, "znver5": _ZNVER4,
}
# LLVM tunes Intel's AVX-512 CPUs (skylake-avx512 .. sapphirerapids, and their host names) to
# prefer 256-bit vectors, so loops it vectorizes itself (elementwise, reductions, data movement) get
# ymm registers there and zmm on AMD's. The GEMM, conv and attention kernels choose 512-bit vectors
# explicitly (``CpuTarget.vector_bytes``), so the frequency cost of 512-bit code is paid anyway; with
# the preference off, the vectorized loops take zmm too: a GELU (tanh) over 256x1024 f32, 2 threads,
# Xeon (Sapphire Rapids class): 0.72 -> 0.47 ms.
PREFER_512_BIT = "-prefer-256-bit"

# --- AArch64: every Linux AArch64 CPU has NEON (Advanced SIMD); SVE is not used -----------------------
_ARMV8 = frozenset({"neon", "fp-armv8"})
AARCH64_CPUS: dict[str, frozenset[str]] = {
    name: _ARMV8 | extra for name, extra in {
        "generic": set(), "cortex-a53": set(), "cortex-a55": {"fullfp16", "dotprod"}, "cortex-a72": set(),
        "cortex-a76": {"fullfp16", "dotprod"}, "neoverse-n1": {"fullfp16", "dotprod"},
        "neoverse-v1": {"fullfp16", "dotprod", "bf16", "i8mm"}, "neoverse-n2": {"fullfp16", "dotprod", "bf16", "i8mm"},
        "apple-m1": {"fullfp16", "dotprod"},
    }.items()
}
_CPUS_BY_ARCH = {"x86_64": X86_CPUS, "aarch64": AARCH64_CPUS}


@dataclass(frozen=True)
class CpuTarget:
    """A CPU to generate code for.

    triple: LLVM's target triple (``x86_64-unknown-linux-gnu``, ``aarch64-unknown-linux-gnu``).
    cpu: LLVM's CPU name (the host's own name for ``host``).
    features: the instruction-set extensions the code may use (``avx2``, ``fma``, ``avx512f``, ``neon``).
    feature_string: what LLVM is given: the host's exact ``+a,-b,...`` list, or ``""`` (the named
        CPU's defaults); either with ``PREFER_512_BIT`` where the CPU has AVX-512.
    is_host: generated for this machine (``cpu="host"``).
    """

    triple: str
    cpu: str
    features: frozenset
    feature_string: str = ""
    is_host: bool = False

    @property
    def arch(self) -> str:
        return self.triple.split("-", 1)[0]

    @property
    def name(self) -> str:
        """How users name it: ``host`` or the LLVM CPU name (with the triple when not this machine's)."""
        if self.is_host:
            return "host"
        return self.cpu if self.triple == host_triple() else f"{self.triple}:{self.cpu}"

    @property
    def vector_bytes(self) -> int:
        """The widest vector register the code uses: 64 (AVX-512), 32 (AVX/AVX2), 16 (SSE, NEON)."""
        if "avx512f" in self.features:
            return 64
        return 32 if "avx" in self.features else 16

    @property
    def vector_registers(self) -> int:
        """Architectural vector registers: 32 on AVX-512 and AArch64, 16 on AVX2/SSE."""
        return 32 if "avx512f" in self.features or self.arch == "aarch64" else 16

    @property
    def has_fma(self) -> bool:
        return "fma" in self.features or self.arch == "aarch64"

    @property
    def identity(self) -> str:
        """Everything about the target that changes object code (for cache keys)."""
        return "|".join([self.triple, self.cpu, self.feature_string or ",".join(sorted(self.features))])

    def missing_here(self) -> list[str]:
        """The features this target's code may use that this machine lacks (or its architecture)."""
        if self.is_host:
            return []
        if self.arch != host_target().arch:
            return [f"a {self.arch} CPU (this machine is {host_target().arch})"]
        return sorted(self.features - host_target().features)

    def require_executable(self, what: str = "code") -> None:
        missing = self.missing_here()
        if missing:
            raise TargetError(f"cannot run {what} compiled for cpu {self.name!r} on this machine "
                              f"({host_target().cpu}): it lacks {', '.join(missing)}; compile for a CPU this "
                              f"machine has (e.g. 'host'), or only emit an object file for the other machine")

    def target_machine(self, jit: bool = True) -> llvm.TargetMachine:
        """A fresh LLVM target machine at O3 (``jit=False``: position-independent, for object files).
        An execution engine owns and frees the machine it is given: give each its own."""
        return create_target_machine(self.triple, self.cpu, self.feature_string, jit)


@functools.cache
def host_triple() -> str:
    return llvm.get_process_triple()


@functools.cache
def host_target() -> CpuTarget:
    """This machine: LLVM's host CPU and features, less AMX where the OS refuses the process its
    tile state (``amx.tile_data_permitted``), so no host kernel uses tiles it cannot run."""
    features = llvm.get_host_cpu_features()
    if features.get("amx-tile") and not tile_data_permitted():
        for name in AMX_FEATURES:
            features[name] = False
    enabled = frozenset(name for name, on in features.items() if on)
    tuning = "," + PREFER_512_BIT if "avx512f" in enabled else ""
    return CpuTarget(host_triple(), llvm.get_host_cpu_name(), enabled, features.flatten() + tuning, True)


def normalize_triple(triple: str) -> str:
    """``aarch64-linux-gnu`` -> ``aarch64-unknown-linux-gnu`` (LLVM's form); the arch must be known."""
    parts = triple.strip().split("-")
    arch = {"arm64": "aarch64", "amd64": "x86_64"}.get(parts[0], parts[0])
    if arch not in _CPUS_BY_ARCH:
        raise TargetError(f"unknown target triple {triple!r}: lezero generates code for "
                          f"{', '.join(sorted(_CPUS_BY_ARCH))} (e.g. aarch64-linux-gnu)")
    rest = parts[1:]
    if len(rest) == 2:  # arch-os-env without a vendor
        rest = ["unknown"] + rest
    return "-".join([arch] + (rest or ["unknown", "linux", "gnu"]))


@functools.cache
def _resolve(cpu: str, triple: str | None) -> CpuTarget:
    triple = normalize_triple(triple) if triple else host_triple()
    arch = triple.split("-", 1)[0]
    if cpu == "host":
        if triple != host_triple():
            raise TargetError(f"cpu 'host' is this machine ({host_triple()}); name a CPU for {triple} "
                              f"(one of: {', '.join(_CPUS_BY_ARCH[arch])})")
        return host_target()
    known = _CPUS_BY_ARCH[arch]
    if cpu not in known:
        raise TargetError(f"unknown cpu {cpu!r} for {arch}; known: host, {', '.join(known)}")
    features = known[cpu]
    return CpuTarget(triple, cpu, features, PREFER_512_BIT if "avx512f" in features else "")


def cpu_target(cpu: "str | CpuTarget | None" = None, triple: str | None = None) -> CpuTarget:
    """The ``CpuTarget`` for a name (see the module docstring); a ``CpuTarget`` is returned as is."""
    if isinstance(cpu, CpuTarget):
        return cpu
    if cpu is None:
        cpu = os.environ.get("LEZERO_CPU", "").strip() or "host"
        if triple is not None and normalize_triple(triple) != host_triple():
            arch = normalize_triple(triple).split("-", 1)[0]
            if cpu not in _CPUS_BY_ARCH[arch]:  # host, or $LEZERO_CPU naming a CPU of this machine's kind
                cpu = "generic" if arch == "aarch64" else "x86-64"
    return _resolve(cpu, triple)


def executable_cpus() -> list[str]:
    """The named CPUs of this machine's architecture whose code this machine can run."""
    arch = platform.machine().lower().replace("amd64", "x86_64").replace("arm64", "aarch64")
    return [name for name in _CPUS_BY_ARCH.get(arch, {}) if not cpu_target(name).missing_here()]
