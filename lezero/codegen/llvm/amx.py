"""Intel AMX tiles for the CPU kernels: the OS permission, the tile configuration, the tile ops.

AMX (Sapphire Rapids and later: ``amx-tile``, ``amx-int8``, ``amx-bf16``) adds eight tile
registers ``tmm0..tmm7`` of up to 16 rows x 64 bytes and dot-product instructions on them:
``tdpbusd``/``tdpbssd``/``tdpbsud``/``tdpbuud`` (C[16x16 i32] += A[16 x 64 bytes] . B, four 8-bit
products per i32, signed or unsigned on each side) and ``tdpbf16ps`` (C[16x16 f32] += A[16 x 32
bf16] . B, pairs of bf16). B is read in the *VNNI layout*: row r of a B tile holds, for each of its
16 columns, the 4 bytes (or 2 bf16) at k = 4r..4r+3 (2r, 2r+1), i.e. ``packed[k/4][col][k%4]``.

- **Permission.** Linux (5.16+) gives a process the 8 KiB of tile state only after it asks with
  ``arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)``; a tile instruction before that is
  SIGILL. ``tile_data_permitted()`` asks once per process (the permission is process-wide, so the
  runtime's worker threads have it); ``target.host_target()`` drops the AMX features where it is
  refused, so no kernel for the host is ever built with tiles it cannot use. A native executable
  asks in its own ``main`` (``runtime/native/runtime.c``).
- **Configuration.** The tile shapes are per thread state loaded by ``ldtilecfg`` from a 64-byte
  block (palette 1; per tile: bytes per row at 16 + 2t, rows at 48 + t). A kernel configures the
  tiles on entry to each work item (``configure``) and releases them at its end (``release``):
  work items run on the runtime's threads, and the state of one kernel must not leak into the next.
- **Tile ops** take the tile numbers as immediates (LLVM's non-``internal`` intrinsics), so the
  register allocation of tiles is the kernel's own: ``load``/``store`` (a base pointer and the
  row stride in bytes), ``zero``, ``dot`` (one of ``DOTS``).
"""
from __future__ import annotations

import ctypes
import functools
import platform
import sys

from llvmlite import ir

from lezero.codegen.llvm.ir_types import PTR
from lezero.codegen.llvm.loops import declare, i64

AMX_FEATURES = frozenset({"amx-tile", "amx-int8", "amx-bf16"})
TILES = 8
MAX_ROWS, MAX_ROW_BYTES = 16, 64

_SYS_ARCH_PRCTL = 158  # x86-64 Linux
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18

# the dot-product instructions: (lhs signed, rhs signed) -> intrinsic, and bf16 pairs
DOTS = {
    ("u8", "s8"): "llvm.x86.tdpbusd", ("s8", "s8"): "llvm.x86.tdpbssd",
    ("s8", "u8"): "llvm.x86.tdpbsud", ("u8", "u8"): "llvm.x86.tdpbuud",
    ("bf16", "bf16"): "llvm.x86.tdpbf16ps",
}

_VOID, _I8 = ir.VoidType(), ir.IntType(8)


@functools.cache
def tile_data_permitted() -> bool:
    """Whether this process may use AMX tiles: asks Linux once (``arch_prctl``), False elsewhere."""
    if sys.platform != "linux" or platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(_SYS_ARCH_PRCTL, _ARCH_REQ_XCOMP_PERM, _XFEATURE_XTILEDATA) == 0


def has_amx(target, kind: str = "int8") -> bool:
    """Whether code for ``target`` (a ``CpuTarget``) may use AMX tiles of ``kind`` (``int8``, ``bf16``)."""
    return "amx-tile" in target.features and f"amx-{kind}" in target.features


def configure(b: ir.IRBuilder, shapes: dict[int, tuple[int, int]]) -> None:
    """``ldtilecfg`` of palette 1 with ``shapes`` = {tile: (rows, bytes per row)}; other tiles unused."""
    for tile, (rows, row_bytes) in shapes.items():
        if not (0 <= tile < TILES and 0 < rows <= MAX_ROWS and 0 < row_bytes <= MAX_ROW_BYTES):
            raise ValueError(f"AMX tile {tile}: {rows} rows x {row_bytes} bytes is not a tile shape")
    block = bytearray(64)
    block[0] = 1
    for tile, (rows, row_bytes) in shapes.items():
        block[16 + 2 * tile:18 + 2 * tile] = row_bytes.to_bytes(2, "little")
        block[48 + tile] = rows
    module = b.module
    name = "lz.amx.tilecfg." + block[16:].hex()
    config = module.globals.get(name)
    if config is None:
        array = ir.ArrayType(_I8, 64)
        config = ir.GlobalVariable(module, array, name)
        config.initializer = ir.Constant(array, bytearray(block))
        config.global_constant = True
        config.linkage = "internal"
        config.align = 64
    b.call(declare(module, "llvm.x86.ldtilecfg", _VOID, [PTR]), [config])


def release(b: ir.IRBuilder) -> None:
    """``tilerelease``: the tiles back to their initial (unconfigured) state."""
    b.call(declare(b.module, "llvm.x86.tilerelease", _VOID, []), [])


def _tile(number: int) -> ir.Constant:
    if not 0 <= number < TILES:
        raise ValueError(f"there is no AMX tile {number}")
    return ir.Constant(_I8, number)


def load(b: ir.IRBuilder, tile: int, pointer, stride_bytes) -> None:
    """``tileloadd``: tile rows from ``pointer``, ``stride_bytes`` apart."""
    fn = declare(b.module, "llvm.x86.tileloadd64", _VOID, [_I8, PTR, ir.IntType(64)])
    b.call(fn, [_tile(tile), pointer, i64(stride_bytes)])


def store(b: ir.IRBuilder, tile: int, pointer, stride_bytes) -> None:
    """``tilestored``: the tile's rows to ``pointer``, ``stride_bytes`` apart."""
    fn = declare(b.module, "llvm.x86.tilestored64", _VOID, [_I8, PTR, ir.IntType(64)])
    b.call(fn, [_tile(tile), pointer, i64(stride_bytes)])


def zero(b: ir.IRBuilder, tile: int) -> None:
    b.call(declare(b.module, "llvm.x86.tilezero", _VOID, [_I8]), [_tile(tile)])


def dot(b: ir.IRBuilder, operands: tuple[str, str], acc: int, lhs: int, rhs: int) -> None:
    """tile ``acc`` += tile ``lhs`` . tile ``rhs`` (the VNNI layout) with the instruction for
    ``operands`` (a key of ``DOTS``: ``("u8", "s8")`` is ``tdpbusd``, ``("bf16", "bf16")`` ``tdpbf16ps``)."""
    fn = declare(b.module, DOTS[operands], _VOID, [_I8, _I8, _I8])
    b.call(fn, [_tile(acc), _tile(lhs), _tile(rhs)])
