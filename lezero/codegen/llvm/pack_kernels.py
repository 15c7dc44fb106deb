"""The GEMM's packing routines as kernels of their own: a weight the plan packs at run time.

A matmul or conv kernel reads an operand pre-packed (``lezero/codegen/packed_operands.py``) when it
is a constant, a loop's invariant (an LSTM's ``W_hh``) or a traced module's weight (issue 17).
The last two are function arguments, so the plan lays them out when it runs (``runtime/cpu.py``'s
``PackedInput``), on every call unless the caller vouches that the weight is unchanged.  Packed
by numpy (``spec.pack``), a 1024 x 1024 ``x @ w.T`` weight took 1.0-3.0 ms (the strided
transpose, a temporary and a copy), where the GEMM's own packing of the same weight, W x W blocks
transposed in registers, had taken a fraction of a millisecond.  So the plan runs that routine
(``gemm.SgemmGenerator.build_pack_a`` / ``build_pack_b``, the same code a GEMM packs with) as a
kernel with the kernel ABI: ``buffers[0]`` the weight as stored, ``buffers[1]`` the packed buffer
(64-byte aligned), a work item per sliver (independent, so the thread pool splits them).

``pack_kernel(spec, cpu)`` gives the kernel's LLVM IR for a ``PackedGemmB`` (any strides: stored
as B, transposed or gathered) or a ``PackedGemmA`` (a conv's weights); the layouts of the int8 and
blocked conv weights are packed by their numpy ``pack`` (no kernel: None).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

import llvmlite.ir as ir

from lezero.codegen.contraction_shapes import gemm_layout
from lezero.codegen.llvm import vectors
from lezero.codegen.llvm.context import KernelFunction
from lezero.codegen.llvm.contraction_gemm import HALF_RATE_512_BIT_CPUS
from lezero.codegen.llvm.gemm import GemmConfig, SgemmGenerator
from lezero.codegen.llvm.ir_types import FLOAT
from lezero.codegen.llvm.loops import i64
from lezero.codegen.llvm.target import CpuTarget
from lezero.codegen.llvm.vectors import FLOAT_BYTES
from lezero.codegen.packed_operands import PackedGemmA, PackedGemmB


@dataclass(frozen=True)
class PackKernel:
    """A pack kernel's LLVM IR, its symbol and its work items (slivers)."""

    llvm_ir: str
    symbol: str
    work_items: int


def pack_kernel(spec, cpu: CpuTarget) -> PackKernel | None:
    """The kernel that lays out ``spec``'s operand (its ``pack`` in machine code), or None for a
    layout that has none."""
    if isinstance(spec, (PackedGemmA, PackedGemmB)):
        return _pack_kernel(replace(spec, operand=0), cpu)  # the operand's index is no part of the layout
    return None


# The vector width a pack transposes or interleaves with, where it is not the target's: a CPU of
# half-rate 512-bit units shuffles 8-float vectors at twice the rate of 16-float ones.  Zen 4
# (znver4), 1 thread, minima of 40, load ~6: a 1024 x 1024 transposed B (col_tile 64) 0.223 ->
# 0.153 ms from L3, 0.310 -> 0.194 from DRAM (a copy of it: 0.143), 4-float vectors 0.215; a
# conv's 512 x 4608 A 0.409 -> 0.381.
PACK_WIDTH = {cpu: 8 * FLOAT_BYTES for cpu in HALF_RATE_512_BIT_CPUS}  # bytes


@functools.lru_cache(maxsize=256)
def _pack_kernel(spec, cpu: CpuTarget) -> PackKernel:
    width = min(PACK_WIDTH.get(cpu.cpu, cpu.vector_bytes), cpu.vector_bytes) // FLOAT_BYTES
    module = ir.Module(name="lz_pack")
    if isinstance(spec, PackedGemmB):
        symbol = f"lz_pack_b_{spec.depth}x{spec.cols}_{spec.col_tile}_{spec.strides[0]}_{spec.strides[1]}"
        work_items = spec.padded_cols // spec.col_tile
        _build_pack_b(module, symbol, spec, math.gcd(spec.col_tile, width))
    else:
        symbol = f"lz_pack_a_{spec.groups}x{spec.rows}x{spec.depth}_{spec.row_tile}_{spec.depth_block}"
        work_items = spec.groups * (spec.padded_rows // spec.row_tile)
        _build_pack_a(module, symbol, spec, width)
    return PackKernel(str(module), symbol, work_items)


def _build_pack_b(module: ir.Module, symbol: str, spec: PackedGemmB, width: int) -> None:
    """Work item s: the sliver of columns [s * NR, (s + 1) * NR), all K deep, at ``s * NR * K``."""
    nr, depth = spec.col_tile, spec.depth
    transposed, ld, col_stride = gemm_layout(depth, spec.cols, *spec.strides)
    config = GemmConfig(width, 1, nr // width, depth, 1, nr)
    pack = SgemmGenerator(config, name=symbol, transpose_b=transposed, b_col_stride=col_stride).build_pack_b(module)
    column_step = ld if transposed else col_stride  # elements between B's columns as stored
    fn = KernelFunction(module, symbol, 2)
    b = fn.builder
    source, packed = fn.buffers
    first = b.mul(fn.begin, i64(nr))
    last = vectors.select_min(b, b.mul(fn.end, i64(nr)), i64(spec.cols))
    b.call(pack, [b.gep(source, [b.mul(first, i64(column_step))], source_etype=FLOAT), i64(ld), i64(0), i64(depth),
                  b.sub(last, first), b.gep(packed, [b.mul(first, i64(depth))], source_etype=FLOAT)])
    fn.finish()


def _build_pack_a(module: ir.Module, symbol: str, spec: PackedGemmA, width: int) -> None:
    """Work item i: sliver s = i % S of group g = i // S (S slivers of MR rows a group), every
    block of ``depth_block`` along k."""
    tile, depth, kc = spec.row_tile, spec.depth, spec.depth_block
    slivers, padded = spec.padded_rows // tile, spec.padded_rows
    pack = SgemmGenerator(GemmConfig(width, tile, 1, kc, tile, width), name=symbol).build_pack_a(module)
    fn = KernelFunction(module, symbol, 2)
    b = fn.builder
    source, packed = fn.buffers
    with vectors.counted_loop(b, fn.begin, fn.end, 1, "item") as item:
        group, sliver = b.sdiv(item, i64(slivers)), b.srem(item, i64(slivers))
        row0 = b.mul(sliver, i64(tile))
        rows = vectors.select_min(b, i64(tile), b.sub(i64(spec.rows), row0))
        stored = b.add(b.mul(group, i64(spec.rows * depth)), b.mul(row0, i64(depth)))
        group_start = b.mul(group, i64(spec.group_floats))
        with vectors.counted_loop(b, i64(0), i64(depth), kc, "k0") as k0:
            block_depth = vectors.select_min(b, i64(kc), b.sub(i64(depth), k0))
            # the block at k0 starts at k0 * padded rows; its slivers are block_depth deep
            where = b.add(group_start, b.add(b.mul(k0, i64(padded)), b.mul(row0, block_depth)))
            b.call(pack, [b.gep(source, [b.add(stored, k0)], source_etype=FLOAT), i64(depth), rows, block_depth,
                          b.gep(packed, [where], source_etype=FLOAT)])
    fn.finish()
