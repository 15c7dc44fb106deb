"""The data caches a CPU target has, and the GEMM cache blocking sized for them.

GEMM blocking follows BLIS's analytical model (Low et al., "Analytical modeling is enough for
high-performance BLIS", TOMS 2016): each packed operand is sized for the cache level it is reused
from, leaving room there for the operands that stream past. In the loop nest of ``gemm.py``

    jc (nc) > pc (kc) > pack B block kc x nc (L3) > ic (mc) > pack A block mc x kc (L2)
      > jr (nr): B sliver kc x nr, reused by every ir step > ir (mr): micro-kernel

- kc: BLIS keeps the kc x nr B sliver in half of L1 (the other half for the A sliver streaming
  past and the C tile). That caps kc at 64 for a 64-float AVX-512 sliver and 256 for a 16-float
  AVX2 one, and deeper is faster: measured on Zen 4, AVX2 6x16 with kc 512 ran 1024^3 7% faster
  than with 256, AVX-512 6x64 with kc 512 7% faster than 256. L2 can feed the sliver (32-64
  bytes a cycle; the micro-kernel wants nr * 4 bytes per mr * nr / W FMAs, 11 bytes a cycle on
  Zen 4, 21 on a 2-FMA Intel core), so a sliver that does not fit half of L1 at KC_MAX is read
  from L2, sized to an eighth of it (one way of an 8-way L2, what Low et al. reserve for it).
  kc is a power of two, at most KC_MAX (1024 was 0-3% faster than 512 here: within noise).
- mc: the mc x kc A block takes a quarter of L2 (the rest holds the B sliver, the C tiles, the
  lines packing reads, the next sliver arriving). Measured on Zen 4 (1 thread, GFLOP/s): 6x64
  with kc 512, mc 318 (A and the sliver in 3/4 of L2) ran 256^3 at 73, mc 126 or 144 at 105,
  66 or 96 at 104, 1024^3 the same for all; AVX2 6x16 with kc 256: mc 750 at 75, 252 at 101,
  120 at 104.
- nc: the kc x nc B block takes a quarter of this core's share of L3 (of L2 without an L3), with
  nc in [NC_MIN, NC_MAX]: a smaller nc repacks A more often (A is packed once per nc columns).

On this Zen 4 (32 KiB L1, 1 MiB L2, 16 MiB L3 per core) the model gives the tiles measured
here: 6x64, kc 512, nc 2048; mc 126 (was 144, BLIS's Zen value: the same speed); AVX2 6x16,
kc 512, mc 126 (was kc 256, mc 120: 7% slower at 1024^3).

Caches: the host's are read from ``/sys/devices/system/cpu/cpu0/cache`` (each level's size divided
among the cores sharing it), else ``os.sysconf``, else the table below. A target of the host's
architecture uses the host's caches (it runs here, or on a machine like it); one of another
architecture uses ``TYPICAL_CACHES`` for its CPU name (what that CPU class usually has per core).
"""
from __future__ import annotations

import functools
import os
import pathlib
from dataclasses import dataclass

from lezero.codegen.llvm.target import CpuTarget, host_target

FLOAT_BYTES = 4
KC_MAX = 512
NC_MIN, NC_MAX = 1024, 4096
KIB, MIB = 1024, 1024 * 1024


@dataclass(frozen=True)
class Caches:
    """Data cache bytes one core may use: L1d, L2, its share of L3 (0: no L3), and where the
    numbers come from (``sysfs``, ``sysconf``, ``typical <cpu>``)."""

    l1d: int
    l2: int
    l3: int
    source: str = "given"

    def __str__(self) -> str:
        return (f"L1d {self.l1d // KIB} KiB, L2 {self.l2 // KIB} KiB, L3 {self.l3 / MIB:g} MiB per core "
                f"({self.source})")


# Per core, as those CPUs usually have them (a shared cache divided by the cores sharing it).
_HASWELL = Caches(32 * KIB, 256 * KIB, 2 * MIB)
_SKYLAKE_X = Caches(32 * KIB, 1 * MIB, 1408 * KIB)  # 1.375 MiB of L3 per core
_ICELAKE_X = Caches(48 * KIB, 1280 * KIB, 1536 * KIB)
_SAPPHIRE = Caches(48 * KIB, 2 * MIB, 1920 * KIB)  # 105 MiB / 56 cores
_ZEN2 = Caches(32 * KIB, 512 * KIB, 4 * MIB)  # 16 MiB per 4-core CCX
_ZEN4 = Caches(32 * KIB, 1 * MIB, 4 * MIB)  # 32 MiB per 8-core CCD
_CORTEX_A72 = Caches(32 * KIB, 256 * KIB, 0)  # 1 MiB L2 per 4 cores (Raspberry Pi 4), no L3
_NEOVERSE = Caches(64 * KIB, 1 * MIB, 512 * KIB)  # Graviton 2/3: 32 MiB / 64 cores
TYPICAL_CACHES: dict[str, Caches] = {
    **dict.fromkeys(["x86-64", "x86-64-v2", "nehalem", "x86-64-v3", "haswell", "broadwell", "skylake"], _HASWELL),
    "alderlake": Caches(48 * KIB, 1280 * KIB, 3 * MIB),
    **dict.fromkeys(["x86-64-v4", "skylake-avx512", "cascadelake", "cooperlake"], _SKYLAKE_X),
    **dict.fromkeys(["icelake-server", "icelake-client", "tigerlake"], _ICELAKE_X),
    **dict.fromkeys(["sapphirerapids", "emeraldrapids", "graniterapids"], _SAPPHIRE),
    "znver1": Caches(32 * KIB, 512 * KIB, 2 * MIB), "znver2": _ZEN2, "znver3": _ZEN2,
    "znver4": _ZEN4, "znver5": Caches(48 * KIB, 1 * MIB, 4 * MIB),
    "generic": _CORTEX_A72, "cortex-a53": Caches(32 * KIB, 128 * KIB, 0), "cortex-a55": Caches(32 * KIB, 128 * KIB, 0),
    "cortex-a72": _CORTEX_A72, "cortex-a76": Caches(64 * KIB, 512 * KIB, 512 * KIB),  # Raspberry Pi 5
    "neoverse-n1": _NEOVERSE, "neoverse-v1": _NEOVERSE, "neoverse-n2": _NEOVERSE,
    "apple-m1": Caches(128 * KIB, 3 * MIB, 2 * MIB),
}


def typical_caches(target: CpuTarget) -> Caches:
    """What ``target``'s CPU class usually has (the host's CPU name may be missing: then the
    class of its vector unit)."""
    known = TYPICAL_CACHES.get(target.cpu)
    if known is None:
        name = "generic" if target.arch == "aarch64" else "x86-64-v4" if target.vector_bytes == 64 else "x86-64-v3"
        known = TYPICAL_CACHES[name]
    else:
        name = target.cpu
    return Caches(known.l1d, known.l2, known.l3, f"typical {name}")


def _cpu_count(cpu_list: str) -> int:
    """CPUs in a sysfs list such as ``0-3,8-11``."""
    count = 0
    for part in cpu_list.strip().split(","):
        first, _, last = part.partition("-")
        count += int(last or first) - int(first) + 1
    return count


def _size_bytes(text: str) -> int:
    text = text.strip().upper()
    scale = {"K": KIB, "M": MIB, "G": 1024 * MIB}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def read_sysfs_caches(cpu_dir: pathlib.Path = pathlib.Path("/sys/devices/system/cpu/cpu0")) -> Caches | None:
    """cpu0's data caches, each level divided among the cores that share it (SMT siblings are one
    core); None when sysfs does not say."""
    try:
        threads_per_core = _cpu_count((cpu_dir / "topology" / "thread_siblings_list").read_text())
    except (OSError, ValueError):
        threads_per_core = 1
    sizes = {}
    for index in sorted(cpu_dir.glob("cache/index*")):
        try:
            if (index / "type").read_text().strip() not in ("Data", "Unified"):
                continue
            level = int((index / "level").read_text())
            size = _size_bytes((index / "size").read_text())
            cores = max(1, _cpu_count((index / "shared_cpu_list").read_text()) // threads_per_core)
        except (OSError, ValueError):
            continue
        sizes[level] = size // cores
    if 1 not in sizes or 2 not in sizes:
        return None
    return Caches(sizes[1], sizes[2], sizes.get(3, 0), "sysfs")


def _sysconf_caches() -> Caches | None:
    """glibc's view (CPUID): sizes of whole caches; L3 divided among all of this machine's CPUs."""
    try:
        l1d, l2, l3 = (os.sysconf(f"SC_LEVEL{n}_{kind}CACHE_SIZE") for n, kind in ((1, "D"), (2, ""), (3, "")))
    except (ValueError, OSError):
        return None
    if l1d <= 0 or l2 <= 0:
        return None
    return Caches(l1d, l2, max(l3, 0) // (os.cpu_count() or 1), "sysconf")


@functools.cache
def host_caches() -> Caches:
    return read_sysfs_caches() or _sysconf_caches() or typical_caches(host_target())


def caches_for(target: CpuTarget) -> Caches:
    """The caches to block for: the host's when ``target`` is of the host's architecture, else
    ``target``'s typical ones."""
    return host_caches() if target.arch == host_target().arch else typical_caches(target)


def _power_of_two_at_most(x: float) -> int:
    return 1 << max(0, int(x).bit_length() - 1)


def cache_blocks(mr: int, nr: int, caches: Caches) -> tuple[int, int, int]:
    """(kc, mc, nc) for an mr x nr micro-tile (floats), by the model in the module docstring."""
    sliver_row = nr * FLOAT_BYTES  # bytes of the B sliver per unit of kc
    kc = (caches.l1d // 2) // sliver_row
    if kc < KC_MAX:  # the sliver is read from L2 (unless even that holds less)
        kc = max(kc, (caches.l2 // 8) // sliver_row)
    kc = _power_of_two_at_most(min(max(kc, 1), KC_MAX))
    mc = max(mr, caches.l2 // 4 // (kc * FLOAT_BYTES) // mr * mr)
    last_level = caches.l3 or caches.l2
    nc = min(max(last_level // 4 // (kc * FLOAT_BYTES), NC_MIN), NC_MAX) // nr * nr
    return kc, mc, nc


def prepacked_b_depth(nr: int, caches: Caches) -> int:
    """The deepest K block (a power of two) whose kc x nr B sliver fits in two thirds of L1 (the
    rest for A's sliver and C's tile), for a GEMM whose B the plan packed once (a constant weight,
    or a loop invariant such as an LSTM's W_hh): with no packing per call to spread over a deep
    block, the sliver is best read from L1 rather than from L2 (the module docstring's kc, chosen
    for B packed per call).  Measured (Xeon, emeraldrapids, L1d 48 KiB, 6 x 64 tiles, 1 thread, the
    recurrent GEMM of an LSTM step, B pre-packed, alternating in one process, load ~1): kc 128
    instead of 256 or 512 is 6-9% faster at M = 32 to 256 rows, K = 256 and 512, N = 4K (64 x 256 x
    1024: 231 -> 213 us), the same within 2% at 8 x 256 x 1024 and 128 x 768 x 3072; kc 64 was 5%
    slower than 128 at 128 x 768 x 3072, and 8 x 3 tiles (48 columns) ran kc 128 faster than 256."""
    return _power_of_two_at_most(max(1, caches.l1d * 2 // 3 // (nr * FLOAT_BYTES)))


def direct_a_block_floats(caches: Caches) -> int:
    """A convolution's GEMM that reads its input in place (no packed B) keeps its packed A block
    (all of K, up to a depth) in 3/8 of L2: 96 Ki floats on Zen 4, where it was measured."""
    return caches.l2 * 3 // 8 // FLOAT_BYTES
