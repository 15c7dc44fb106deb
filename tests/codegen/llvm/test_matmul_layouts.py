"""float32 matmuls whose operands are read through any permutation of their stored dims, and
batches folded into rows, against the reference interpreter: every permutation of 3-D operands
(rows contiguous, columns contiguous, or neither: gathered by the packing), batches along which B
is shared folded into one GEMM (ViT's ``Transpose(x, [1, 0, 2]) @ W``) with an epilogue that reads
the result's every index (the GEMM, the dot products and the loop kernels of other dtypes), few rows
times B in place, and which kernel ``contraction_shapes.matmul_kernel`` reports; the same
edge cases compiled for every CPU of the cross-target matrix."""
from __future__ import annotations

import ctypes
import itertools

import numpy as np
import pytest

from codegen.kernel_testing import KERNEL_SIGNATURE, check_kernel, make_kernel, random_array, reference
from lezero.codegen.contraction_shapes import matmul_kernel, row_major
from lezero.codegen.llvm import contraction_gemm, gemm, jit
from lezero.codegen.llvm.backend import lower_kernel
from lezero.ir.dialect.data_movement import TransposeOp

TOL = dict(rtol=1e-4, atol=1e-4)
PERMS_3D = list(itertools.permutations(range(3)))


def stored_shape(shape, perm):
    """The stored shape whose transpose by ``perm`` is ``shape``."""
    stored = [0] * len(shape)
    for i, p in enumerate(perm):
        stored[p] = shape[i]
    return tuple(stored)


def permuted_matmul(a_shape, b_shape, a_perm, b_perm, extra=(), epilogue=None):
    """lz.kernel(a, b, *extra) { epilogue(transpose(a, a_perm) @ transpose(b, b_perm)) }, the
    operands stored so that the transposes have ``a_shape`` and ``b_shape``; (module, kernel,
    stored shapes)."""
    def body(b, x, y, *rest):
        x = b.op("lz.transpose", x, perm=list(a_perm)) if a_perm is not None else x
        y = b.op("lz.transpose", y, perm=list(b_perm)) if b_perm is not None else y
        product = b.op("lz.matmul", x, y)
        return epilogue(b, product, *rest) if epilogue else product

    stored = [stored_shape(a_shape, a_perm) if a_perm is not None else a_shape,
              stored_shape(b_shape, b_perm) if b_perm is not None else b_shape]
    module, kernel = make_kernel([(s, "f32") for s in stored] + [(s, "f32") for s in extra], body, kind="matmul")
    return module, kernel, stored


def anchor(kernel):
    return next(op for op in kernel.regions[0].blocks[0].ops if op.name == "lz.matmul")


@pytest.mark.parametrize("a_perm,b_perm", [(p, q) for p in PERMS_3D for q in PERMS_3D][::5] + [
    ((2, 0, 1), (1, 2, 0)), ((1, 2, 0), (2, 0, 1)), ((0, 2, 1), (2, 1, 0))])
def test_any_permutation_of_3d_operands_runs_the_gemm(a_perm, b_perm):
    """(3 x 13 x 7) @ (3 x 7 x 17) with each operand stored in a permuted order: rows, columns
    or neither contiguous (a batch dim innermost: packed a float at a time), never the loops."""
    rng = np.random.default_rng(sum(a_perm) * 7 + sum(b_perm))
    module, kernel, stored = permuted_matmul((3, 13, 7), (3, 7, 17), a_perm, b_perm)
    assert matmul_kernel(anchor(kernel), *_strides(kernel))[0] == "gemm"
    check_kernel(module, kernel, [random_array(rng, s, np.float32) for s in stored], splits=3, **TOL)


def _strides(kernel):
    """The matmul operands' strides in the kernel's operands (through the transposes)."""
    strides = []
    for v in anchor(kernel).operands:
        op = v.owner
        if getattr(op, "name", None) == "lz.transpose":
            base = row_major(op.operands[0].type.shape)
            perm = TransposeOp.permutation(op.definition.attrs(op), len(base))
            strides.append(tuple(base[p] for p in perm))
        else:
            strides.append(row_major(v.type.shape))
    return strides


# (a_shape, b_shape, a_perm, b_perm): batches along which B is shared
FOLDED = [
    ((197, 1, 40), (40, 70), (1, 0, 2), None),  # ViT: 197 batches of one row -> one 197-row GEMM
    ((9, 1, 33), (33, 12), (1, 0, 2), (1, 0)),  # ... times w.T
    ((2, 5, 3, 16), (16, 21), None, None),  # rows continue across the batches: 30 rows per GEMM... all of them
    ((2, 5, 3, 16), (2, 1, 16, 21), None, None),  # B per outer batch: 2 GEMMs of 15 rows
    ((4, 6, 11), (11, 19), (1, 0, 2), None),  # stored (6, 4, 11): rows 11 apart, batches 66: not folded
    ((7, 1, 1), (1, 18), None, None),  # K = 1
    ((5, 2, 9), (9,), None, None),  # a 1-D rhs: rows of dot products
]


@pytest.mark.parametrize("a_shape,b_shape,a_perm,b_perm", FOLDED)
def test_batches_along_a_shared_b_are_rows_of_one_gemm(a_shape, b_shape, a_perm, b_perm):
    """The epilogue reads a residual at the result's every index (the row unravels back into its
    batch dims) and a bias along the columns."""
    out_shape = np.broadcast_shapes(a_shape[:-2], b_shape[:-2] if len(b_shape) > 1 else ()) + (
        (a_shape[-2],) + ((b_shape[-1],) if len(b_shape) > 1 else ()))
    extra = [out_shape] + ([(b_shape[-1],)] if len(b_shape) > 1 else [])

    def epilogue(b, p, residual, *bias):
        y = b.op("lz.add", p, residual)
        return b.op("lz.relu", b.op("lz.add", y, bias[0]) if bias else y)

    module, kernel, stored = permuted_matmul(a_shape, b_shape, a_perm, b_perm, extra, epilogue)
    _, shape = matmul_kernel(anchor(kernel), *_strides(kernel))
    rng = np.random.default_rng(len(a_shape) * 31 + a_shape[-1])
    check_kernel(module, kernel, [random_array(rng, s, np.float32) for s in stored + extra], splits=3, **TOL)
    b_batches = b_shape[:-2]
    a_batches = a_shape[:-2]
    if not any(d > 1 for d in b_batches) and (a_perm is None or a_shape[1] == 1):
        assert shape.batches == 1 and shape.m == int(np.prod(a_batches)) * a_shape[-2]
    if a_shape == (4, 6, 11):
        assert shape.batches == 4  # A's rows in different batches are not one stride apart


@pytest.mark.parametrize("dtype", ["f64", "f16", "i32"])
def test_loop_kernels_read_folded_rows(dtype):
    """The loop kernels (other dtypes) run the folded product too: Transpose(x, [1, 0, 2]) @ w
    plus a residual at every index."""
    numpy_dtype = {"f64": np.float64, "f16": np.float16, "i32": np.int32}[dtype]
    shapes = [(1, 7, 5), (5, 9), (7, 1, 9)]

    def body(b, x, y, residual):
        return b.op("lz.add", b.op("lz.matmul", b.op("lz.transpose", x, perm=[1, 0, 2]), y), residual)

    module, kernel = make_kernel([(s, dtype) for s in shapes], body, kind="matmul")
    rng = np.random.default_rng(0)
    inputs = [rng.integers(-3, 4, s).astype(numpy_dtype) if dtype == "i32" else random_array(rng, s, numpy_dtype)
              for s in shapes]
    check_kernel(module, kernel, inputs, splits=3, **({"rtol": 2e-3, "atol": 2e-3} if dtype == "f16" else {}))


def test_folded_decode_matmul_reads_b_once():
    """197 one-row batches through a transpose: one GEMM, as many work items as the 2-D product's."""
    module, kernel, _ = permuted_matmul((197, 1, 64), (64, 256), (1, 0, 2), None)
    plain_module, plain_kernel, _ = permuted_matmul((197, 64), (64, 256), None, None)
    assert lower_kernel(kernel).work_items == lower_kernel(plain_kernel).work_items


def test_small_m_reads_b_in_place():
    """Up to PACK_B_MIN_ROWS rows B's rows are read where they lie (no packed copy of B per call)."""
    shape = matmul_kernel(anchor(permuted_matmul((8, 64), (64, 300), None, None)[1]))[1]
    assert not contraction_gemm.MatmulGemm(shape).pack_b
    shape = matmul_kernel(anchor(permuted_matmul((64 * 6, 64), (64, 300), None, None)[1]))[1]
    assert contraction_gemm.MatmulGemm(shape).pack_b


@pytest.mark.parametrize("m", [4, 5, 7, 8, 9, 12, 13, 17, 31])
@pytest.mark.parametrize("n", [17, 53, 200])
def test_few_rows_times_b_in_place(m, n):
    """Rows up to PACK_B_MIN_ROWS: one tile of all rows where it fits (8 x 3 vectors, ...), else
    the host's tiles, B's rows read in place with masked loads at the right edge; K = 33 (a tail
    of every vector width)."""
    rng = np.random.default_rng(m * 100 + n)
    module, kernel, stored = permuted_matmul((m, 33), (33, n), None, None, [(n,)],
                                             lambda b, p, bias: b.op("lz.add", p, bias))
    check_kernel(module, kernel, [random_array(rng, s, np.float32) for s in stored + [(n,)]], splits=2, **TOL)


def test_few_rows_are_one_tile():
    avx512, avx2 = gemm.GemmConfig.for_target("x86-64-v4"), gemm.GemmConfig.for_target("x86-64-v3")
    tiles = {(cfg.vector_width, m): (c.mr, c.nr_vectors) for cfg in (avx512, avx2) for m in (5, 8, 12, 13)
             for c in [contraction_gemm.matmul_config(cfg, m, 3072, 768, direct=True)]}
    assert tiles == {(16, 5): (5, 4), (16, 8): (8, 3), (16, 12): (12, 2), (16, 13): (6, 4),
                     (8, 5): (5, 2), (8, 8): (6, 2), (8, 12): (6, 2), (8, 13): (6, 2)}


# --- every CPU ------------------------------------------------------------------------------------

CROSS = {f"{a}@{p}x{b}@{q}": (a, b, p, q) for a, b, p, q in [
    ((3, 13, 7), (3, 7, 17), (2, 0, 1), (1, 2, 0)),  # both gathered
    ((2, 6, 5), (2, 5, 65), (1, 2, 0), (0, 2, 1)),  # A gathered, B transposed
    ((4, 1, 9), (9, 33), (1, 0, 2), None),  # folded rows
    ((5, 9, 1), (1, 7), (2, 1, 0), None),  # K = 1, gathered
    ((2, 3, 17), (2, 17, 6), (2, 1, 0), (1, 0, 2)),  # few columns: dots with B copied
    ((8, 19), (19, 53), None, None),  # few rows: one tile, B in place
    ((12, 7), (7, 100), None, None),
]}


@pytest.mark.cross_target(cases=CROSS)
def test_permuted_operands_on_every_cpu(cpu, case):
    """The kernels (gathered packing, folded rows, dots) lowered and compiled for each CPU."""
    a_shape, b_shape, a_perm, b_perm = case
    module, kernel, stored = permuted_matmul(a_shape, b_shape, a_perm, b_perm)
    rng = np.random.default_rng(3)
    inputs = [random_array(rng, s, np.float32) for s in stored]
    lowered = lower_kernel(kernel, cpu=cpu)
    function = jit.compile_module(lowered.llvm_ir, cpu).ctypes_function(lowered.name, KERNEL_SIGNATURE[0],
                                                                          KERNEL_SIGNATURE[1:])
    out = np.full(lowered.result_types[0].shape, np.nan, np.float32)
    pointers = (ctypes.c_void_p * 3)(*[a.ctypes.data for a in inputs + [out]])
    half = lowered.work_items // 2
    function(pointers, half, lowered.work_items)
    function(pointers, 0, half)
    np.testing.assert_allclose(out, reference(module, inputs)[0], err_msg=f"cpu {cpu}", **TOL)
