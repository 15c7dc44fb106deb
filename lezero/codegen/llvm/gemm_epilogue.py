"""What the GEMM (``gemm.py``) lets its caller emit into the micro-kernel's store: an
``Epilogue`` transforms each accumulator vector of the last K block just before it is stored
(``OutputVector``: the vector's place in C and the epilogue's arguments), a ``TileStore`` instead
receives the whole tile's sums (``OutputTile``) and generates the stores itself (how
``contraction_gemm.py`` fuses a kernel's elementwise epilogue, whatever its results are).  Their
runtime arguments (``EpilogueArg``) become parameters of the GEMM function after its fixed ones.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import llvmlite.ir as ir

from lezero.codegen.llvm import vectors
from lezero.codegen.llvm.ir_types import FLOAT, I64, PTR

# Kinds of runtime argument an epilogue can ask for, and the IR parameters each one becomes.
#   "vector": a float32 array indexed by column (bias[col])      -> ptr
#   "matrix": a float32 2-D array indexed [row, col] (residual)  -> ptr, i64 row stride (floats)
#   "scalar": a float32 value (alpha)                             -> float
#   "pointer": any address (a kernel's buffer, for a TileStore)  -> ptr
#   "index": any i64 (which batch a call computes)                -> i64
ARG_KIND_PARAMS = {"vector": (PTR,), "matrix": (PTR, I64), "scalar": (FLOAT,), "pointer": (PTR,), "index": (I64,)}


@dataclass(frozen=True)
class EpilogueArg:
    """``noalias``: a "pointer" the micro-kernel may assume no other pointer reaches (LLVM then
    vectorizes the epilogue's loops without overlap checks)."""

    name: str
    kind: str  # "vector" | "matrix" | "scalar" | "pointer" | "index"
    noalias: bool = False

    def __post_init__(self):
        if self.kind not in ARG_KIND_PARAMS:
            raise ValueError(f"epilogue argument {self.name!r}: unknown kind {self.kind!r}")
        if not self.name.isidentifier() or self.name == "out":
            raise ValueError(f"epilogue argument name {self.name!r} must be an identifier other than 'out'")


class OutputVector:
    """What an epilogue sees of one accumulator vector: C[row, col : col + W] before the store.

    ``mask`` is None for a full tile, else an <W x i1> of the lanes inside C: any load of caller
    memory must use it (``load_columns`` and ``load_matrix`` do).
    """

    def __init__(self, builder: ir.IRBuilder, row: ir.Value, col: ir.Value, mask: ir.Value | None,
                 width: int, args: dict[str, tuple[ir.Value, ...]]):
        self.builder = builder
        self.row = row  # i64, global row of C
        self.col = col  # i64, global column of C of lane 0
        self.mask = mask
        self.width = width
        self.vector_type = ir.VectorType(FLOAT, width)
        self._args = args

    def column_indices(self) -> ir.Value:
        """<W x i64>: the global column of each lane, col + 0, ..., col + W - 1."""
        lanes = ir.Constant(ir.VectorType(I64, self.width), list(range(self.width)))
        return self.builder.add(vectors.splat(self.builder, self.col, self.width), lanes)

    def arg(self, name: str) -> ir.Value:
        """The IR value of a "vector" pointer or "scalar" argument."""
        return self._args[name][0]

    def splat(self, value: float | ir.Value) -> ir.Value:
        """A vector with every lane equal to ``value`` (a Python float, or an IR scalar of any type)."""
        if not isinstance(value, ir.Value):
            return ir.Constant(self.vector_type, [float(value)] * self.width)
        return vectors.splat(self.builder, value, self.width)

    def load_columns(self, name: str) -> ir.Value:
        """arg[col : col + W] of a "vector" argument (e.g. a bias indexed by column)."""
        address = self.builder.gep(self.arg(name), [self.col], source_etype=FLOAT)
        return vectors.load_vector(self.builder, address, self.width, self.mask)

    def load_matrix(self, name: str) -> ir.Value:
        """arg[row, col : col + W] of a "matrix" argument (e.g. a residual the shape of C)."""
        pointer, row_stride = self._args[name]
        offset = self.builder.add(self.builder.mul(self.row, row_stride), self.col)
        address = self.builder.gep(pointer, [offset], source_etype=FLOAT)
        return vectors.load_vector(self.builder, address, self.width, self.mask)

    def maximum(self, a: ir.Value, b: ir.Value) -> ir.Value:
        return vectors.call_intrinsic(self.builder, "llvm.maxnum", a, b)


@dataclass(frozen=True)
class Epilogue:
    """An elementwise transform of the GEMM output, emitted into the micro-kernel's store.

    ``emit(out, acc)`` is called during IR generation once per accumulator vector, with the
    builder positioned where the value is about to be stored; it returns the vector to store.
    ``args`` are the runtime arguments it reads; they become parameters of the GEMM function
    after the fixed ones, in order (keyword arguments of the test driver's
    ``SgemmKernel.__call__``, tests/support/sgemm_kernel.py).
    """

    name: str
    emit: Callable[[OutputVector, ir.Value], ir.Value]
    args: tuple[EpilogueArg, ...] = ()

    def then(self, other: "Epilogue") -> "Epilogue":
        """This epilogue followed by ``other``."""
        return compose_epilogues(self, other)


def compose_epilogues(*epilogues: Epilogue) -> Epilogue:
    """Apply ``epilogues`` left to right; their arguments are concatenated (names must differ)."""
    names = [arg.name for ep in epilogues for arg in ep.args]
    if len(names) != len(set(names)):
        raise ValueError(f"epilogue argument names collide: {names}")

    def emit(out: OutputVector, acc: ir.Value) -> ir.Value:
        for ep in epilogues:
            acc = ep.emit(out, acc)
        return acc

    return Epilogue("_".join(ep.name for ep in epilogues), emit,
                    tuple(arg for ep in epilogues for arg in ep.args))


class OutputTile:
    """What a ``TileStore`` sees: the final sums of one micro-tile,
    C[row : row + rows, col : col + cols], in ``sums``, a float[mr * nr] stack array with row
    stride nr (entries past ``rows``/``cols`` are not part of C). ``full`` says the tile is a whole
    one, and then ``rows``/``cols`` are constants: mr, and nr or an edge micro-kernel's width.
    """

    def __init__(self, builder: ir.IRBuilder, row: ir.Value, col: ir.Value, rows: ir.Value, cols: ir.Value,
                 sums: ir.Value, mr: int, nr: int, full: bool, args: dict[str, tuple[ir.Value, ...]]):
        self.builder = builder
        self.row, self.col = row, col  # i64: global row and column of C of the tile's corner
        self.rows, self.cols = rows, cols
        self.sums = sums
        self.mr, self.nr = mr, nr
        self.full = full
        self._args = args

    def arg(self, name: str) -> ir.Value:
        """The IR value of a "pointer", "index", "vector" or "scalar" argument."""
        return self._args[name][0]


@dataclass(frozen=True)
class TileStore:
    """An epilogue that stores the results itself: on the last K block, the micro-kernel puts the
    tile's sums in a stack array and calls ``emit(tile)`` (an ``OutputTile``) to generate the code
    that computes and stores whatever the results are, wherever they go. C then only holds partial
    sums between K blocks (untouched when K fits in one block), and may be the memory the
    results are stored to, so C is not ``noalias`` in the micro-kernel. A code generator
    uses it to fuse any elementwise epilogue, emitted as loops over the tile that LLVM vectorizes.
    """

    name: str
    emit: Callable[[OutputTile], None]
    args: tuple[EpilogueArg, ...] = ()
