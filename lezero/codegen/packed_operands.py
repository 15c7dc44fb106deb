"""Constant operands that a kernel reads pre-packed: laid out once, when the plan is built.

A GEMM copies its A operand into the micro-kernel's layout (MR-tall slivers, k-major) on every
call; when A is a constant (a convolution's weights in an ONNX model) that copy is the same each
time, and for a convolution with a small image (ResNet's 7x7 layers: 512 x 4608 weights, 49
pixels) it moves as many bytes as the products read.  MLAS and oneDNN pack such weights once.

``schedule`` marks the operands of each kernel that are ``lz.constant`` results
(``CONSTANT_OPERANDS_ATTR``, part of the kernel's text and so of its cache key); a backend that
wants one of them in a layout of its own says so in its lowered kernel (``packed_operands``, a
tuple of ``PackedGemmA``), and the plan replaces that operand's buffer by ``spec.pack(array)``,
a constant of its own (the original stays for any other reader).  The layout is data, so the
kernel cache's facts carry it and a native executable ships the packed weights.

A matmul's constant B (a transformer's projection weights) is the other case, ``PackedGemmB``:
at a few rows (decode and short sequences: 32 x 256 x 1024) packing B per call moves as many
bytes as the products read, and read in place its rows are far apart.  ``PackedIntegerGemmB`` is
an int8 matmul's constant B in the AMX int8 GEMM's panels (the packing it does per call otherwise).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from lezero.ir.dialect.kernel import CONSTANT_OPERANDS_ATTR  # noqa: F401  (set by schedule, read by backends)

# Packed operands start on a cache line: numpy puts a large array 16 bytes into its pages, so each
# 64-byte vector of a packed B sliver would straddle two lines (two loads' worth of L1 bandwidth);
# an AMX tile row across two lines loads at a sixth of the rate.  Float32 GEMMs with B pre-packed,
# 1 thread, lezero / ORT medians, Xeon (AMX class), load ~2: conv 2048->512 1x1 at 7x7 1.23-1.29x
# -> 1.15-1.18x, 3x3 256->256 at 14x14 1.12-1.20x -> 1.11-1.13x, 3x3 512->512 at 7x7 1.18-1.20x
# -> 1.15-1.18x.
PACKED_ALIGNMENT = 64


def aligned_empty(count: int, dtype) -> np.ndarray:
    """An uninitialized 1-D array of ``count`` elements whose data starts PACKED_ALIGNMENT-aligned."""
    itemsize = np.dtype(dtype).itemsize
    storage = np.empty(count * itemsize + PACKED_ALIGNMENT, np.uint8)
    start = -storage.ctypes.data % PACKED_ALIGNMENT
    return storage[start:start + count * itemsize].view(dtype)


@dataclass(frozen=True)
class PackedGemmA:
    """Operand ``operand``, ``groups`` row-major matrices of ``rows x depth`` floats (a conv's
    OIHW weights: rows the output channels of a group, depth ci * kh * kw), as the GEMM's packed A:
    per group ``group_floats`` floats; in a group, per block of ``depth_block`` along k (the last
    may be shallower, kc), per sliver of ``row_tile`` rows, k-major.  The sliver at row r0 of the
    block at k0 starts at ``k0 * padded_rows + r0 * kc``, its element (r0 + i, k0 + k) is ``k *
    row_tile + i`` further; rows past ``rows`` are zeros."""

    operand: int
    groups: int
    rows: int
    depth: int
    row_tile: int
    depth_block: int

    @property
    def padded_rows(self) -> int:
        return -(-self.rows // self.row_tile) * self.row_tile

    @property
    def group_floats(self) -> int:
        return self.padded_rows * self.depth

    def check(self, array: np.ndarray) -> None:
        """Raise ValueError unless ``array`` holds what this layout packs."""
        if array.size != self.groups * self.rows * self.depth or array.dtype != np.float32:
            raise ValueError(f"packing {array.dtype} {array.shape} as {self}: expected "
                             f"{self.groups * self.rows * self.depth} float32 values")

    def pack(self, array: np.ndarray) -> np.ndarray:
        self.check(array)
        # One pass, straight into the packed layout (no zero-padded copy first): a warm start packs
        # every conv's weights (ResNet-50: 25M floats) and first-touch page faults dominate its cost.
        g, rows, depth, tile = self.groups, self.padded_rows, self.depth, self.row_tile
        source = array.reshape(g, self.rows, depth)
        whole, left = divmod(self.rows, tile)
        slivers = source[:, :whole * tile].reshape(g, whole, tile, depth).transpose(0, 1, 3, 2)  # a view
        packed = aligned_empty(g * rows * depth, np.float32).reshape(g, rows * depth)
        for k0 in range(0, depth, self.depth_block):
            kc = min(self.depth_block, depth - k0)
            block = packed[:, k0 * rows:(k0 + kc) * rows].reshape(g, rows // tile, kc, tile)
            block[:, :whole] = slivers[:, :, k0:k0 + kc]
            if left:  # the last sliver: its rows past ``rows`` are zeros
                block[:, whole, :, :left] = source[:, whole * tile:, k0:k0 + kc].transpose(0, 2, 1)
                block[:, whole, :, left:] = 0
        return packed.reshape(-1)



@dataclass(frozen=True)
class PackedGemmB:
    """Operand ``operand``, a ``depth x cols`` matrix (B of a matmul: k by n) stored with element
    strides ``strides`` (per step of k and of n: row-major, transposed or any other view of the
    buffer), as the GEMM's packed B: slivers of ``col_tile`` columns, each all ``depth`` deep and
    k-major, ``col_tile`` floats per k; element (k, j) is at ``(j // col_tile) * col_tile * depth +
    k * col_tile + j % col_tile``; columns past ``cols`` are zeros.  The layout does not depend on
    the GEMM's K or N blocks (a block's sliver is at ``j * depth + k0 * col_tile``)."""

    operand: int
    depth: int
    cols: int
    col_tile: int
    strides: tuple

    groups = 1  # one matrix (the plan sizes a packed buffer as groups x group_floats)

    @property
    def padded_cols(self) -> int:
        return -(-self.cols // self.col_tile) * self.col_tile

    @property
    def group_floats(self) -> int:
        return self.padded_cols * self.depth

    def check(self, array: np.ndarray) -> None:
        """Raise ValueError unless ``array`` holds what this layout packs."""
        k_stride, n_stride = self.strides
        last = (self.depth - 1) * k_stride + (self.cols - 1) * n_stride
        if array.dtype != np.float32 or array.size <= last:
            raise ValueError(f"packing {array.dtype} {array.shape} as {self}: expected float32 values "
                             f"reaching element {last}")

    def pack(self, array: np.ndarray) -> np.ndarray:
        self.check(array)
        k_stride, n_stride = self.strides
        flat = np.ascontiguousarray(array).reshape(-1)
        matrix = np.lib.stride_tricks.as_strided(flat, (self.depth, self.cols),
                                                 (k_stride * flat.itemsize, n_stride * flat.itemsize), writeable=False)
        slivers = self.padded_cols // self.col_tile
        packed = aligned_empty(slivers * self.depth * self.col_tile, np.float32).reshape(
            slivers, self.depth, self.col_tile)
        whole = self.cols // self.col_tile
        packed[:whole] = matrix[:, :whole * self.col_tile].reshape(self.depth, whole, self.col_tile).transpose(1, 0, 2)
        if whole < slivers:  # the last sliver: its columns past ``cols`` are zeros
            left = self.cols - whole * self.col_tile
            packed[whole, :, :left] = matrix[:, whole * self.col_tile:]
            packed[whole, :, left:] = 0
        return packed.reshape(-1)


@dataclass(frozen=True)
class PackedIntegerGemmB:
    """Operand ``operand``, a row-major ``depth x cols`` matrix of 8-bit integers (B of
    ``lz.matmul_integer``; ``unsigned``: ui8), as the AMX int8 GEMM's packed panels
    (``codegen/llvm/integer_gemm.py``): per panel of ``panel`` columns, ``padded_depth`` rows (K in
    whole tile steps of 64) in groups of 4 k per column: byte (k, j) at ``(j // panel) * padded_depth
    * panel + (k // 4) * panel * 4 + (j % panel) * 4 + k % 4``; signed (an unsigned B's bytes with
    their top bit flipped: ``b - 128``, its zero points moved alike by the kernel); zero past
    ``depth`` and ``cols``."""

    operand: int
    depth: int
    cols: int
    unsigned: bool
    panel: int = 64

    groups = 1  # one matrix

    @property
    def padded_depth(self) -> int:
        return -(-self.depth // 64) * 64

    @property
    def panels(self) -> int:
        return -(-self.cols // self.panel)

    @property
    def group_floats(self) -> int:
        """The packed bytes in float32 words (the plan's packed buffers are float32 arrays)."""
        return self.panels * self.padded_depth * self.panel // 4

    def pack(self, array: np.ndarray) -> np.ndarray:
        if array.dtype not in (np.int8, np.uint8) or array.size != self.depth * self.cols \
                or (array.dtype == np.uint8) != self.unsigned:
            raise ValueError(f"packing {array.dtype} {array.shape} as {self}: expected {self.depth * self.cols} "
                             f"{'u' if self.unsigned else ''}int8 values")
        matrix = np.ascontiguousarray(array).reshape(self.depth, self.cols).view(np.uint8)
        padded = np.zeros((self.padded_depth, self.panels * self.panel), np.uint8)
        padded[:self.depth, :self.cols] = matrix ^ np.uint8(0x80) if self.unsigned else matrix
        packed = aligned_empty(self.group_floats * 4, np.uint8)
        packed.reshape(self.panels, self.padded_depth // 4, self.panel, 4)[...] = \
            padded.reshape(self.padded_depth // 4, 4, self.panels, self.panel).transpose(2, 0, 3, 1)
        return packed.view(np.float32)  # the bytes, as group_floats words


def packed_operand_from_fields(fields: dict):
    """The spec a kernel cache entry's facts hold (``dataclasses.asdict`` of one): which class is
    told by its fields."""
    if "unsigned" in fields:
        return PackedIntegerGemmB(**fields)
    if "out_tile" in fields:
        return PackedNchwcWeights(**fields)
    if "col_tile" in fields:
        return PackedGemmB(**{**fields, "strides": tuple(fields["strides"])})
    return PackedGemmA(**fields)


@dataclass(frozen=True)
class PackedNchwcWeights:
    """Operand ``operand``, OIHW conv weights (``out_channels x in_channels x kh x kw``, one group),
    as the blocked conv's (``codegen/llvm/conv_nchwc.py``): ``[O / (block * out_tile)][ceil(I /
    block)][kh][kw][block in][out_tile][block out]``, the output channels in blocks of ``block``,
    ``out_tile`` blocks side by side; channels past ``in_channels`` / ``out_channels`` are zeros."""

    operand: int
    out_channels: int
    in_channels: int
    kh: int
    kw: int
    block: int
    out_tile: int

    groups = 1

    @property
    def group_floats(self) -> int:
        c = self.block
        return -(-self.out_channels // c) * c * -(-self.in_channels // c) * c * self.kh * self.kw

    def pack(self, array: np.ndarray) -> np.ndarray:
        o, i, c, t = self.out_channels, self.in_channels, self.block, self.out_tile
        if array.dtype != np.float32 or array.size != o * i * self.kh * self.kw:
            raise ValueError(f"packing {array.dtype} {array.shape} as {self}: expected "
                             f"{o * i * self.kh * self.kw} float32 values")
        ob, ib = -(-o // c), -(-i // c)
        if ob % t:
            raise ValueError(f"packing as {self}: {ob} output blocks are not whole tiles of {t}")
        padded = np.zeros((ob * c, ib * c, self.kh, self.kw), np.float32)
        padded[:o, :i] = array.reshape(o, i, self.kh, self.kw)
        packed = aligned_empty(self.group_floats, np.float32)
        # [g, t, c_out, ib, c_in, kh, kw] -> [g, ib, kh, kw, c_in, t, c_out]
        packed.reshape(ob // t, ib, self.kh, self.kw, c, t, c)[...] = \
            padded.reshape(ob // t, t, c, ib, c, self.kh, self.kw).transpose(0, 3, 5, 6, 4, 1, 2)
        return packed


def nchw_to_blocked(array: np.ndarray, block: int) -> np.ndarray:
    """``[N, C, H, W]`` as ``[N, ceil(C / block), H, W, block]``, the padding channels zeros."""
    n, channels, h, w = array.shape
    blocks = -(-channels // block)
    padded = np.zeros((n, blocks * block, h, w), array.dtype)
    padded[:, :channels] = array
    return np.ascontiguousarray(padded.reshape(n, blocks, block, h, w).transpose(0, 1, 3, 4, 2))


def blocked_to_nchw(array: np.ndarray, channels: int) -> np.ndarray:
    """The inverse of ``nchw_to_blocked``: the first ``channels`` channels as ``[N, C, H, W]``."""
    n, blocks, h, w, block = array.shape
    return np.ascontiguousarray(array.transpose(0, 1, 4, 2, 3).reshape(n, blocks * block, h, w)[:, :channels])
