"""GEMM and convolution edge shapes compiled for each CPU of the cross-target matrix, against the
reference interpreter: matmuls with K = 1..9 and M, N around the vector lanes and register tiles
(6 x 16 with AVX2, 6 x 64 with AVX-512), ``x @ w`` and ``x @ w.T`` (the transposed operand read in
place) in f32 and f64 (the default matrix runs EDGES_PER_CPU of each dtype, layout and K per CPU,
``--cpus`` all of them); on every CPU or spread, shapes once miscompiled, the cache blocks' edges
(kc = 256 / 512), the other dtypes, batched and broadcast batches, 1-D operands, and conv2d with
strides, pads, dilations, 1x1, groups and depthwise, in every dtype the op supports.

Results are held to a floating-point error bound, not a fixed tolerance: both sides sum k products
in some order, so each is within about k units of rounding of ``sum |a| |b|`` (computed by
interpreting the same function on the absolute values), plus one rounding of a f16 / bf16 result.
A miscompiled kernel (issue 10: f64 ``x @ w.T`` with K = 6 for AVX-512 was off by 4) is far outside."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pytest

from lezero.ir import interpret
from lezero.ir.dialect.numerics import round_to_bf16
from lezero.ir.types import ELEMENT_TYPES, TensorType

from support.backend_testing import BackendTarget
from support.ir_building import build

# M and N: up to and around the vector lanes (2, 4, 8 f64; 4, 8, 16 f32), the register tiles' rows (6)
# and columns (16 AVX2, 64 AVX-512), and past a tile
SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 15, 16, 17, 33)
EDGES_PER_CPU = 6  # of each (dtype, layout, K)'s 144 (M, N) in the default matrix
UNIT_ROUNDOFF = {"f16": 2.0 ** -11, "bf16": 2.0 ** -8, "f32": 2.0 ** -24, "f64": 2.0 ** -53}


@dataclass(frozen=True)
class Contraction:
    """One ``lz.matmul`` (``transposed``: its rhs stored as ``w`` and read as ``w.T``, the last
    two dims swapped) or ``lz.conv2d`` (``attrs``) over ``shapes`` of ``dtype`` (IR names)."""

    op: str
    shapes: tuple
    dtype: str
    kind: str  # which list of cases below (edges, known, blocks, dtypes, batches, conv)
    transposed: bool = False
    attrs: dict = field(default_factory=dict, hash=False)
    constant_rhs: bool = False  # the rhs a constant of the function (read pre-packed), not an argument

    @property
    def id(self) -> str:
        attrs = ",".join(f"{k}={v}" for k, v in self.attrs.items())
        return (f"{self.op}[{','.join('x'.join(map(str, s)) for s in self.shapes)}:{self.dtype}"
                f"{':w.T' if self.transposed else ''}{':constant' if self.constant_rhs else ''}"
                f"{':' + attrs if attrs else ''}]")

    @property
    def group(self) -> tuple:
        """What the default matrix spreads over the CPUs: each CPU gets some of every list below in
        every dtype and layout, and of the edge shapes some of each K."""
        return self.kind, self.dtype, self.transposed, self.shapes[0][-1] if self.kind == "edges" else None

    def module(self, absolute: bool = False):
        """``absolute``: a constant rhs holds its values' magnitudes (for the error bound)."""
        def body(b, a, w=None):
            if self.constant_rhs:
                values = self.rhs_values()
                w = b.constant(np.abs(values) if absolute else values)
            if self.op == "lz.conv2d":
                return b.create(self.op, [a, w], self.attrs).result
            if self.transposed:
                perm = list(range(len(self.shapes[1])))
                perm[-2:] = perm[:-3:-1]
                w = b.op("lz.transpose", w, perm=perm)
            return b.op(self.op, a, w)

        shapes = self.shapes[:1] if self.constant_rhs else self.shapes
        return build([TensorType(s, ELEMENT_TYPES[self.dtype]) for s in shapes], body)

    def rhs_values(self) -> np.ndarray:
        return np.random.default_rng(1).standard_normal(self.shapes[1]).astype(ELEMENT_TYPES[self.dtype].numpy_dtype)

    def arrays(self, rng) -> list[np.ndarray]:
        if self.constant_rhs:
            return [rng.standard_normal(self.shapes[0]).astype(ELEMENT_TYPES[self.dtype].numpy_dtype)]
        numpy_dtype = ELEMENT_TYPES[self.dtype].numpy_dtype
        if self.dtype[0] in "iu":  # small integers: products and sums exact (or wrapping alike)
            return [rng.integers(0 if self.dtype[0] == "u" else -5, 6, s).astype(numpy_dtype) for s in self.shapes]
        arrays = [rng.standard_normal(s).astype(numpy_dtype) for s in self.shapes]
        return [round_to_bf16(a) for a in arrays] if self.dtype == "bf16" else arrays

    @property
    def depth(self) -> int:
        """Products per result element."""
        if self.op == "lz.matmul":
            return self.shapes[0][-1]
        return int(np.prod(self.shapes[1][1:]))


def matmul(kind, m, n, k, dtype, transposed=False, batch=(), rhs_batch=None, constant_rhs=False) -> Contraction:
    """(batch..., m, k) @ (rhs_batch..., k, n); m = 0: the lhs is 1-D (k,), n = 0: the rhs."""
    rhs_batch = batch if rhs_batch is None else rhs_batch
    lhs = (*batch, m, k) if m else (k,)
    rhs = ((*rhs_batch, n, k) if transposed else (*rhs_batch, k, n)) if n else (k,)
    return Contraction("lz.matmul", (lhs, rhs), dtype, kind, transposed, constant_rhs=constant_rhs)


def conv(x, w, dtype="f32", **attrs) -> Contraction:
    return Contraction("lz.conv2d", (x, w), dtype, "conv", attrs=attrs)


EDGES = [matmul("edges", m, n, k, dtype, transposed) for dtype in ("f32", "f64") for transposed in (False, True)
         for k in range(1, 10) for m in SIZES for n in SIZES]
# shapes once miscompiled for some CPU, on every CPU: issue 10's f64 x @ w.T (K = 6, M = 4, N = 5..8
# were wrong for skylake-avx512, x86-64-v4, icelake-server; right for znver4 and AVX2)
CASES = [matmul("known", 4, 5, 6, "f64", True)]
# the cache blocks' edges (kc = 256 with AVX2, 512 with AVX-512; 64 columns per AVX-512 tile)
CASES += [matmul("blocks", m, n, k, "f32", transposed) for transposed in (False, True)
         for m, n, k in ((7, 65, 257), (145, 63, 513), (6, 64, 512), (13, 129, 33))]
CASES += [matmul("dtypes", m, n, k, dtype, transposed) for dtype in ("f16", "bf16", "i32", "i64", "i8", "ui8")
          for transposed in (False, True) for m, n, k in ((7, 17, 1), (6, 5, 6), (33, 16, 9))]
# batches (broadcast too) and 1-D operands (a row, a column)
CASES += [c for dtype in ("f32", "f64") for c in (
    matmul("batches", 5, 7, 6, dtype, batch=(3,)), matmul("batches", 6, 17, 6, dtype, True, batch=(2,)),
    matmul("batches", 7, 16, 9, dtype, batch=(4,), rhs_batch=()),
    matmul("batches", 4, 5, 6, dtype, True, batch=(2, 1), rhs_batch=(3,)),
    matmul("batches", 0, 33, 6, dtype), matmul("batches", 17, 0, 6, dtype))]
# a constant rhs (a model's weights: read as the GEMM's B pre-packed in slivers of the tile's
# columns): tile rows and columns, partial slivers, K blocks, rows folded from batches
CASES += [matmul("constant", m, n, k, "f32", transposed, batch=batch, rhs_batch=(), constant_rhs=True)
          for transposed in (False, True)
          for m, n, k, batch in ((32, 50, 40, ()), (5, 24, 7, ()), (4, 65, 513, ()), (7, 17, 9, (3,)), (33, 130, 3, ()))]
CASES += [
    conv((2, 3, 9, 9), (4, 3, 3, 3)),
    conv((1, 4, 10, 11), (8, 4, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1]),
    conv((2, 16, 7, 7), (17, 16, 1, 1)),
    conv((1, 5, 12, 12), (33, 5, 5, 5), pads=[2, 2, 2, 2]),
    conv((1, 6, 6, 13), (7, 6, 1, 5), strides=[1, 2]),
    conv((1, 4, 10, 8), (6, 2, 3, 2), strides=[2, 1], pads=[1, 0, 2, 1], dilations=[1, 2], groups=2),
    conv((1, 8, 9, 9), (8, 1, 3, 3), pads=[1, 1, 1, 1], groups=8),
    conv((1, 16, 8, 8), (16, 1, 3, 3), strides=[2, 2], pads=[0, 0, 1, 1], groups=16),
    # slabs of fewer phases than strides: the taps read one phase of four, or one of two
    conv((1, 8, 11, 11), (12, 8, 1, 1), strides=[2, 2]),
    conv((1, 4, 12, 11), (6, 4, 3, 3), strides=[2, 2], pads=[2, 2, 2, 2], dilations=[2, 2]),
    conv((1, 4, 9, 10), (5, 4, 1, 3), strides=[2, 1], pads=[0, 1, 1, 1]),
    conv((1, 8, 9, 9), (8, 1, 1, 1), strides=[2, 2], groups=8),
    conv((1, 3, 5, 75), (4, 3, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1]),  # the stride-2 slab copy's vectors
    conv((1, 4, 5, 67), (4, 1, 3, 3), strides=[2, 2], pads=[1, 1, 1, 1], groups=4),
    conv((1, 3, 8, 8), (5, 3, 3, 3), "f64", pads=[1, 1, 1, 1]),
    conv((2, 6, 7, 7), (6, 1, 3, 3), "f64", strides=[2, 2], groups=6),
    conv((1, 8, 6, 6), (6, 4, 1, 1), "f64", groups=2),
    conv((1, 3, 8, 8), (5, 3, 3, 3), "f16", pads=[1, 1, 1, 1]),
    conv((1, 4, 7, 7), (4, 1, 3, 3), "f16", groups=4),
    conv((1, 3, 8, 8), (6, 3, 2, 2), "bf16", strides=[2, 2]),
]


def assert_within_rounding(case: Contraction, got, want, magnitude, cpu: str) -> None:
    """|got - want| <= 4 (k + 1) u (sum |a||b| + 1) + 2 u_result |want|, u the unit roundoff of the
    accumulation (f32 for f16 / bf16) and u_result that of a f16 / bf16 result."""
    accumulation = "f32" if case.dtype in ("f16", "bf16") else case.dtype
    result = UNIT_ROUNDOFF[case.dtype] if accumulation != case.dtype else 0.0
    want = want.astype(np.float64)
    bound = 4 * (case.depth + 1) * UNIT_ROUNDOFF[accumulation] * (magnitude + 1) + 2 * result * np.abs(want)
    error = np.abs(got.astype(np.float64) - want)
    bad = np.argwhere(error > bound)
    assert not len(bad), (f"{case.id} compiled for cpu {cpu}: {len(bad)} of {error.size} results off, the worst "
                          f"by {error.max():.3g} (bound {bound.flat[error.argmax()]:.3g}), the first at "
                          f"{tuple(int(i) for i in bad[0])}")


@pytest.mark.cross_target(cases={c.id: c for c in EDGES}, group=lambda c: c.group,
                          per_cpu=EDGES_PER_CPU)
def test_edge_shape_matches_the_interpreter(cpu, case):
    check(case, cpu)


@pytest.mark.cross_target(cases={c.id: c for c in CASES}, group=lambda c: c.group)
def test_contraction_matches_the_interpreter(cpu, case):
    check(case, cpu)


def check(case: Contraction, cpu: str) -> None:
    module = case.module()
    arrays = case.arrays(np.random.default_rng(0))
    got = BackendTarget("cpu", cpu).compile(module)(*arrays)
    want = interpret(module, "f", *arrays)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    if got.dtype.kind != "f":
        np.testing.assert_array_equal(got, want, err_msg=f"{case.id} compiled for cpu {cpu}")
        return
    magnitude = interpret(case.module(absolute=True), "f", *[np.abs(a) for a in arrays]).astype(np.float64)
    assert_within_rounding(case, got, want, magnitude, cpu)
