"""matmul and conv kernels against the reference interpreter: single ops and fused epilogues (bias +
relu, residual, gelu, operands broadcast along rows and along columns, several results), odd and
size-1 shapes, batched and 1-D matmul, operands read through a transpose, every conv2d attribute,
f32 (the GEMM with thin tiles for thin shapes, both ways of reading a conv's input) and the loop
kernels (f64, f16, bf16, integers, convolutions too thin for the GEMM),
partial sums across K blocks, work items run in any pieces, and the machine code."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from codegen.kernel_testing import (MOVED_OPERAND_SHAPES, assert_matches, batch_norm_epilogue, check_kernel, make_kernel,
                            moved_operands_epilogue, random_array, reference, run_kernel)
from lezero.codegen.llvm.target import cpu_target
from lezero.codegen.llvm import cache_model, contraction, contraction_gemm, depthwise, gemm, gemm_bf16, jit
from lezero.codegen.llvm.backend import lower_kernel
from lezero.codegen.packed_operands import PackedGemmA, PackedGemmB
from lezero.ir.attributes import DenseArrayAttr
from lezero.ir.types import BF16, F16, I64
from lezero.ir.dialect.numerics import round_to_bf16
from lezero.ir.dialect.windows import window_output_size
from lezero.ir.opdef import OpError

F32_TOL = dict(rtol=1e-4, atol=1e-4)  # f32 sums in another order than numpy's BLAS
NUMPY_DTYPE = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "bf16": np.float32, "i32": np.int32,
               "i8": np.int8, "ui8": np.uint8}


def tolerance(dtype: str) -> dict:
    return F32_TOL if dtype in ("f32", "bf16") else {}


def data(rng, shape, dtype: str):
    array = random_array(rng, shape, NUMPY_DTYPE[dtype])
    if dtype == "bf16":
        array = round_to_bf16(array)
    if dtype == "i8":
        array = (array % 3).astype(np.int8)  # sums of products stay inside int8
    return array


# --- matmul -----------------------------------------------------------------------------------------

def matmul_kernel(a_shape, b_shape, dtype="f32", extra=(), epilogue=None):
    """lz.kernel(a, b, *extra) { epilogue(b, a @ b, *extra) or a @ b }."""
    def body(b, x, y, *rest):
        product = b.op("lz.matmul", x, y)
        return epilogue(b, product, *rest) if epilogue else product

    return make_kernel([(a_shape, dtype), (b_shape, dtype)] + [(s, dtype) for s in extra], body, kind="matmul")


@settings(max_examples=10)
@given(m=st.sampled_from([1, 2, 4, 5, 7, 13]), k=st.sampled_from([1, 3, 16, 37]),
       n=st.sampled_from([1, 15, 16, 17, 80]), dtype=st.sampled_from(["f32", "f64"]), splits=st.integers(1, 3))
def test_matmul_any_shape(m, k, n, dtype, splits):
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    module, kernel = matmul_kernel((m, k), (k, n), dtype)
    check_kernel(module, kernel, [data(rng, (m, k), dtype), data(rng, (k, n), dtype)], splits, **tolerance(dtype))


EPILOGUES = {
    # name: (extra operand shapes for an m x n product, body)
    "bias_relu": ([("n",)], lambda b, p, bias: b.op("lz.relu", b.op("lz.add", p, bias))),
    "residual": ([("m", "n")], lambda b, p, r: b.op("lz.add", p, r)),
    "gelu": ([], lambda b, p: b.op("lz.gelu", p)),
    "along_rows": ([("m", 1)], lambda b, p, s: b.op("lz.mul", p, s)),  # one value per row
    "along_columns": ([(1, "n")], lambda b, p, s: b.op("lz.sub", s, p)),  # one value per column
    "several_results": ([("m", "n"), ()], lambda b, p, r, s: [p, b.op("lz.tanh", b.op("lz.mul", p, s)),
                                                            b.op("lz.add", r, s)]),
}


def resolve(shape, m, n):
    return tuple({"m": m, "n": n}.get(d, d) for d in shape)


@pytest.mark.parametrize("name", list(EPILOGUES))
def test_matmul_epilogues(name):
    m, k, n = 37, 50, 70
    rng = np.random.default_rng(len(name))
    extra_shapes, epilogue = EPILOGUES[name]
    extra = [resolve(s, m, n) for s in extra_shapes]
    module, kernel = matmul_kernel((m, k), (k, n), "f32", extra, epilogue)
    inputs = [data(rng, s, "f32") for s in [(m, k), (k, n)] + extra]
    check_kernel(module, kernel, inputs, splits=2, **F32_TOL)


@pytest.mark.parametrize("m,k,n,dtype", [
    (37, 50, 70, "f32"),  # the GEMM: the epilogue inside the micro-kernel
    (37, 50, 10, "f32"),  # dot products (few columns)
    (2, 50, 70, "f32"),  # a thin tile, B read in place
    (9, 20, 33, "f64"),  # loops
])
def test_matmul_epilogue_reads_moved_operands(m, k, n, dtype):
    """Operands read through reshape, transpose, broadcast_to and pad of memory (index arithmetic
    in the epilogue's value-at-index walk) on every way a matmul lowers."""
    rng = np.random.default_rng(m + n)
    extra = [resolve(s, m, n) for s in MOVED_OPERAND_SHAPES]
    module, kernel = matmul_kernel((m, k), (k, n), dtype, extra, moved_operands_epilogue)
    inputs = [data(rng, s, dtype) for s in [(m, k), (k, n)] + extra]
    check_kernel(module, kernel, inputs, splits=2, **tolerance(dtype))


@pytest.mark.parametrize("a_shape,b_shape,dtype", [
    ((2, 1, 9, 20), (3, 20, 33), "f32"),  # batch dims broadcast both ways
    ((4, 9, 20), (20, 40), "f32"),  # a 2-D rhs shared by every batch
    ((1, 9, 20), (5, 20, 17), "f64"),
    ((20,), (20, 33), "f32"),  # a 1-D lhs is a row
    ((3, 20,), (2, 1, 20, 5), "f32"),
    ((9, 20), (20,), "f32"),  # a 1-D rhs is a column
    ((2, 9, 20), (20,), "f64"),
    ((20,), (20,), "f32"),
])
def test_batched_and_one_dimensional_matmul(a_shape, b_shape, dtype):
    rng = np.random.default_rng(len(a_shape) * 10 + len(b_shape))
    module, kernel = matmul_kernel(a_shape, b_shape, dtype, [()], lambda b, p, s: b.op("lz.add", p, s))
    inputs = [data(rng, a_shape, dtype), data(rng, b_shape, dtype), data(rng, (), dtype)]
    check_kernel(module, kernel, inputs, splits=3, **tolerance(dtype))


@pytest.mark.parametrize("dtype", ["f16", "bf16", "i32", "i8", "ui8"])
def test_matmul_other_dtypes(dtype):
    """f16 and bf16 sum in f32 and round once, as the reference; integers wrap."""
    rng = np.random.default_rng(5)
    shape_a, shape_b = (2, 6, 33), (33, 20)
    module, kernel = matmul_kernel(shape_a, shape_b, dtype, [(20,)], lambda b, p, c: b.op("lz.add", p, c))
    inputs = [data(rng, s, dtype) for s in (shape_a, shape_b, (20,))]
    check_kernel(module, kernel, inputs, splits=2, **({"rtol": 1e-2, "atol": 1e-2} if dtype == "bf16" else {}))


def test_matmul_partial_sums_across_k_blocks():
    """K = 1100 is three K blocks: partial sums wait in a float32 result, or, when every result
    is f16, in the workspace."""
    m, k, n = 20, 1100, 40
    rng = np.random.default_rng(7)
    inputs = [data(rng, (m, k), "f32"), data(rng, (k, n), "f32"), data(rng, (n,), "f32")]
    for epilogue in (lambda b, p, c: [b.op("lz.add", p, c), b.op("lz.cast", p, to="f16")],
                     lambda b, p, c: b.op("lz.cast", b.op("lz.add", p, c), to="f16")):
        module, kernel = matmul_kernel((m, k), (k, n), "f32", [(n,)], epilogue)
        check_kernel(module, kernel, inputs, splits=3, rtol=1e-3, atol=1e-3)


def test_matmul_work_items_in_any_pieces():
    """Every (batch, rectangle) work item on its own, in reverse order, and in uneven pieces (B
    per batch: a shared B would make the batches rows of one GEMM)."""
    shape_a, shape_b = (2, 300, 256), (2, 256, 330)
    module, kernel = matmul_kernel(shape_a, shape_b, "f32", [(330,)], lambda b, p, c: b.op("lz.add", p, c))
    lowered = lower_kernel(kernel)
    assert lowered.work_items == 2 * contraction_gemm.MAX_SLICES  # 50 tiles of 6 rows per batch, in 32 slices
    assert lowered.flops >= 2 * 2 * 300 * 256 * 330
    rng = np.random.default_rng(8)
    inputs = [data(rng, s, "f32") for s in (shape_a, shape_b, (330,))]
    want = reference(module, inputs)[0]
    for splits in (lowered.work_items, 2, 5):  # slices alone, whole batches, pieces across batches
        assert_matches(run_kernel(kernel, inputs, splits, lowered)[0], want, **F32_TOL)


def test_matmul_zero_sizes():
    rng = np.random.default_rng(9)
    module, kernel = matmul_kernel((5, 0), (0, 20), "f32", [(20,)], lambda b, p, c: b.op("lz.add", p, c))
    check_kernel(module, kernel, [np.zeros((5, 0), np.float32), np.zeros((0, 20), np.float32),
                                  data(rng, (20,), "f32")])
    module, kernel = matmul_kernel((0, 4), (4, 3), "f32")
    assert lower_kernel(kernel).work_items == 1
    check_kernel(module, kernel, [np.zeros((0, 4), np.float32), data(rng, (4, 3), "f32")])


# --- operands read through a transpose ---------------------------------------------------------------

def swapped(shape):
    return shape[:-2] + (shape[-1], shape[-2])


def transposed_matmul_kernel(a_shape, b_shape, transpose_a, transpose_b, dtype="f32", extra=(), epilogue=None):
    """lz.kernel(a, b, *extra) { a @ b } where a or b is stored transposed (the last two dims
    swapped) and read through lz.transpose, as partition folds ``x @ w.T`` (``a_shape``/``b_shape``
    are the matmul's operand shapes)."""
    def read(b, v, transposed):
        rank = v.type.rank
        return b.op("lz.transpose", v, perm=list(range(rank - 2)) + [rank - 1, rank - 2]) if transposed else v

    def body(b, x, y, *rest):
        product = b.op("lz.matmul", read(b, x, transpose_a), read(b, y, transpose_b))
        return epilogue(b, product, *rest) if epilogue else product

    stored = [swapped(a_shape) if transpose_a else a_shape, swapped(b_shape) if transpose_b else b_shape]
    return make_kernel([(s, dtype) for s in stored] + [(s, dtype) for s in extra], body, kind="matmul"), stored


@settings(max_examples=25)
@given(m=st.sampled_from([1, 2, 3, 4, 7, 13, 64]), k=st.sampled_from([1, 3, 16, 37]),
       n=st.sampled_from([1, 5, 10, 16, 17, 80]), which=st.sampled_from(["a", "b", "both"]),
       dtype=st.sampled_from(["f32", "f32", "f64"]), splits=st.integers(1, 3))
def test_matmul_reads_transposed_operands(m, k, n, which, dtype, splits):
    """x.T @ w, x @ w.T and x.T @ w.T over thin, odd and size-1 shapes: the GEMM packs from the
    transposed layout (or computes C^T for a few rows times a transposed B); f64 loops read any
    strides."""
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    (module, kernel), stored = transposed_matmul_kernel((m, k), (k, n), which in ("a", "both"), which in ("b", "both"),
                                                        dtype)
    check_kernel(module, kernel, [data(rng, s, dtype) for s in stored], splits, **tolerance(dtype))


@pytest.mark.parametrize("a_shape,b_shape,transpose_a,transpose_b", [
    ((64, 784), (784, 256), False, True),  # Linear: x @ w.T
    ((256, 64), (64, 784), True, False),  # its weight gradient: dy.T @ x
    ((64, 256), (256, 10), False, True),  # the logits layer: ten columns
    ((1, 784), (784, 256), False, True),  # one row times a transposed B: C^T = B^T A^T
    ((3, 50), (50, 33), True, True),
    ((2, 3, 9, 20), (3, 20, 33), True, True),  # batched, B broadcast along the first batch dim
    ((4, 9, 20), (20, 40), False, True),
])
def test_transposed_operands_with_an_epilogue(a_shape, b_shape, transpose_a, transpose_b):
    n = b_shape[-1]
    rng = np.random.default_rng(a_shape[-1] + n)
    (module, kernel), stored = transposed_matmul_kernel(
        a_shape, b_shape, transpose_a, transpose_b, "f32", [(n,)],
        lambda b, p, c: [b.op("lz.relu", b.op("lz.add", p, c)), b.op("lz.cast", p, to="f16")])
    inputs = [data(rng, s, "f32") for s in stored + [(n,)]]
    check_kernel(module, kernel, inputs, splits=3, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("m,k,n", [(20, 1100, 40), (2, 1100, 37)])
def test_transposed_b_partial_sums_across_k_blocks(m, k, n):
    """Three K blocks with B stored transposed (the K remainder of each block is packed one
    vector at a time); with two rows the GEMM computes C^T, its partial sums in the workspace."""
    rng = np.random.default_rng(m)
    (module, kernel), stored = transposed_matmul_kernel((m, k), (k, n), False, True, "f32", [(n,)],
                                                        lambda b, p, c: b.op("lz.add", p, c))
    check_kernel(module, kernel, [data(rng, s, "f32") for s in stored + [(n,)]], splits=2, rtol=1e-3, atol=1e-3)


def test_epilogue_reads_the_transposed_operand():
    """The transposed value is also read by the epilogue, at the result's index."""
    rng = np.random.default_rng(15)
    (module, kernel), stored = transposed_matmul_kernel(
        (24, 24), (24, 24), False, True, "f32", [],
        lambda b, p: b.op("lz.add", p, p.owner.operands[1]))
    check_kernel(module, kernel, [data(rng, s, "f32") for s in stored], splits=2, **F32_TOL)


@pytest.mark.parametrize("a_shape,b_shape,transpose_b", [
    ((2, 3, 9, 20), (3, 20, 5), False),  # batched, B broadcast: copied transposed once per batch
    ((64, 256), (256, 10), False),
    ((1, 37), (37, 300), True),  # one row; K % 16 = 5 columns read by masked loads
    ((7, 1), (1, 3), False),  # K = 1
    ((33, 50), (50,), False),  # a matrix times a vector
])
def test_dot_product_matmuls(a_shape, b_shape, transpose_b):
    """Few columns (or one row times a transposed B): dot products along k, no GEMM."""
    n = b_shape[-1] if len(b_shape) > 1 else 1
    rng = np.random.default_rng(a_shape[-1] * n)
    epilogue = (lambda b, p, c: b.op("lz.mul", p, c)) if len(b_shape) > 1 else None
    extra = [(n,)] if epilogue else []
    (module, kernel), stored = transposed_matmul_kernel(a_shape, b_shape, False, transpose_b, "f32", extra, epilogue)
    lowered = check_kernel(module, kernel, [data(rng, s, "f32") for s in stored + extra], splits=3, **F32_TOL)
    assert "micro_kernel" not in lowered.llvm_ir


def test_dot_tiles_cover_few_columns_or_one_row():
    """Tiles of at most 12 accumulators: ten columns as 5 x 2 (whole along n), one row 1 x 12."""
    assert contraction.dot_tile(64, 10, 12) == (5, 2)
    assert contraction.dot_tile(1, 256, 12) == (1, 12)
    assert contraction.dot_tile(4096, 1, 12) == (12, 1)


def test_thin_matmuls_get_thin_tiles():
    """Ten columns: as few vectors as cover them (one on AVX-512: then eight rows tall); one row: a
    row of vectors over B read in place (no packing), narrow enough for THIN_COLUMN_TILES column
    tiles (work items) but at least THIN_MIN_VECTORS."""
    host = gemm.GemmConfig.for_target()
    thin_n = contraction_gemm.matmul_config(host, 64, 10, 256, direct=False)
    vectors = min(-(-10 // host.vector_width), host.nr_vectors)
    assert (thin_n.mr, thin_n.nr_vectors) == (max(host.mr, 8) if vectors == 1 else host.mr, vectors)
    one_row = contraction_gemm.matmul_config(host, 1, 256, 784, direct=True)
    vectors = -(-256 // host.vector_width)
    assert one_row.mr == 1 and one_row.nr_vectors == min(
        vectors, max(contraction_gemm.THIN_MIN_VECTORS, vectors // contraction_gemm.THIN_COLUMN_TILES))
    assert one_row.kc == 784  # B in place: no K blocks
    module, kernel = matmul_kernel((1, 784), (784, 256))
    assert "pack_b" not in lower_kernel(kernel).llvm_ir


# --- conv2d ----------------------------------------------------------------------------------------

def conv_kernel(x_shape, w_shape, attrs, dtype="f32", extra=(), epilogue=None):
    def body(b, x, w, *rest):
        y = b.op("lz.conv2d", x, w, **attrs)
        return epilogue(b, y, *rest) if epilogue else y

    return make_kernel([(x_shape, dtype), (w_shape, dtype)] + [(s, dtype) for s in extra], body, kind="conv")


def conv_output_shape(x_shape, w_shape, attrs):
    n, _, h, w = x_shape
    o, _, kh, kw = w_shape
    pt, pl, pb, pr = attrs["pads"]
    return (n, o, window_output_size(h, kh, attrs["strides"][0], pt, pb, attrs["dilations"][0]),
            window_output_size(w, kw, attrs["strides"][1], pl, pr, attrs["dilations"][1]))


@st.composite
def conv_cases(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    cin = draw(st.integers(1, 4)) * groups
    cout = draw(st.sampled_from([1, 4, 7, 9])) * groups  # fewer than 4 per group: depthwise.py (f64: loops)
    kernel = (draw(st.integers(1, 4)), draw(st.integers(1, 3)))
    attrs = {"strides": [draw(st.integers(1, 3)), draw(st.integers(1, 2))],
             "pads": [draw(st.integers(0, 2)) for _ in range(4)],
             "dilations": [draw(st.integers(1, 2)), draw(st.integers(1, 2))], "groups": groups}
    x_shape = (draw(st.integers(1, 2)), cin, draw(st.integers(1, 12)), draw(st.integers(1, 12)))
    return x_shape, (cout, cin // groups) + kernel, attrs


@settings(max_examples=14)
@given(conv_cases(), st.sampled_from(["f32", "f32", "f64"]), st.sampled_from(["direct", "packed"]),
       st.integers(1, 3))
def test_conv_any_attributes(case, dtype, reading, splits):
    x_shape, w_shape, attrs = case
    try:
        out_shape = conv_output_shape(x_shape, w_shape, attrs)
    except OpError:
        assume(False)
    rng = np.random.default_rng(sum(x_shape) + sum(w_shape))
    channel = (out_shape[1], 1, 1)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(contraction, "CONV_B", reading)
        module, kernel = conv_kernel(x_shape, w_shape, attrs, dtype, [channel], lambda b, y, c: b.op("lz.add", y, c))
        inputs = [data(rng, x_shape, dtype), data(rng, w_shape, dtype), data(rng, channel, dtype)]
        check_kernel(module, kernel, inputs, splits, **tolerance(dtype))


def attrs_of(strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), groups=1):
    return {"strides": list(strides), "pads": list(pads), "dilations": list(dilations), "groups": groups}


CONV_CASES = {
    # name: (x shape, w shape, attrs, extra operand shapes, epilogue)
    "3x3_pad1_bias_relu": ((2, 16, 12, 12), (16, 16, 3, 3), attrs_of(pads=(1, 1, 1, 1)), [(16, 1, 1)],
                           lambda b, y, c: b.op("lz.relu", b.op("lz.add", y, c))),
    "stride2_residual": ((1, 8, 11, 13), (12, 8, 3, 3), attrs_of(strides=(2, 2), pads=(1, 1, 1, 1)),
                         [(1, 12, 6, 7)], lambda b, y, r: b.op("lz.add", y, r)),
    "groups_dilation_asymmetric_pads": ((2, 6, 10, 9), (8, 3, 3, 2),
                                        attrs_of(strides=(1, 2), pads=(2, 0, 1, 3), dilations=(2, 1), groups=2),
                                        [], lambda b, y: b.op("lz.gelu", y)),
    "1x1": ((1, 24, 7, 9), (20, 24, 1, 1), attrs_of(), [(7, 9)], lambda b, y, s: b.op("lz.mul", y, s)),
    "depthwise_bias_relu": ((2, 8, 9, 9), (8, 1, 3, 3), attrs_of(pads=(1, 1, 1, 1), groups=8), [(8, 1, 1)],
                            lambda b, y, c: b.op("lz.relu", b.op("lz.add", y, c))),
}


@pytest.mark.parametrize("reading", ["direct", "packed"])
@pytest.mark.parametrize("name", list(CONV_CASES))
def test_conv_epilogues(name, reading, monkeypatch):
    monkeypatch.setattr(contraction, "CONV_B", reading)
    x_shape, w_shape, attrs, extra, epilogue = CONV_CASES[name]
    rng = np.random.default_rng(len(name))
    module, kernel = conv_kernel(x_shape, w_shape, attrs, "f32", extra, epilogue)
    inputs = [data(rng, s, "f32") for s in [x_shape, w_shape] + extra]
    check_kernel(module, kernel, inputs, splits=2, **F32_TOL)


@pytest.mark.parametrize("reading", ["direct", "packed"])
@pytest.mark.parametrize("x_shape,w_shape,attrs", [
    ((2, 16, 12, 12), (16, 16, 3, 3), attrs_of(pads=(1, 1, 1, 1))),  # the GEMM
    ((1, 16, 9, 9), (16, 16, 1, 1), attrs_of()),  # the GEMM, B packed in place
    ((2, 8, 9, 9), (8, 1, 3, 3), attrs_of(pads=(1, 1, 1, 1), groups=8)),  # depthwise: depthwise.py
])
def test_conv_batch_norm_epilogue_reads_reshaped_vectors(x_shape, w_shape, attrs, reading, monkeypatch):
    """relu(conv * scale + shift) with the 1-D per-channel vectors read through their reshapes to
    C x 1 x 1 (a traced BatchNorm), and a residual stored NHWC read through a transpose."""
    monkeypatch.setattr(contraction, "CONV_B", reading)
    out = conv_output_shape(x_shape, w_shape, attrs)
    nhwc = (out[0], out[2], out[3], out[1])

    def epilogue(b, y, scale, shift, residual):
        nchw = b.op("lz.transpose", residual, perm=[0, 3, 1, 2])
        return b.op("lz.add", batch_norm_epilogue(b, y, scale, shift), nchw)

    extra = [(out[1],), (out[1],), nhwc]
    module, kernel = conv_kernel(x_shape, w_shape, attrs, "f32", extra, epilogue)
    rng = np.random.default_rng(sum(x_shape))
    check_kernel(module, kernel, [data(rng, s, "f32") for s in [x_shape, w_shape] + extra], splits=2, **F32_TOL)


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f64"])
def test_conv_other_dtypes(dtype):
    x_shape, w_shape = (1, 4, 7, 6), (6, 2, 3, 3)
    attrs = attrs_of(strides=(2, 1), pads=(1, 0, 2, 1), dilations=(1, 2), groups=2)
    rng = np.random.default_rng(11)
    module, kernel = conv_kernel(x_shape, w_shape, attrs, dtype, [(6, 1, 1)], lambda b, y, c: b.op("lz.add", y, c))
    inputs = [data(rng, s, dtype) for s in (x_shape, w_shape, (6, 1, 1))]
    check_kernel(module, kernel, inputs, splits=2, **({"rtol": 1e-2, "atol": 1e-2} if dtype == "bf16" else {}))


@pytest.mark.parametrize("reading,x_shape,w_shape,pads", [
    ("direct", (1, 257, 4, 5), (4, 257, 3, 3), (1, 1, 1, 1)),  # K = 2313: two K blocks, sums in the workspace
    ("packed", (1, 600, 3, 5), (5, 600, 1, 1), (0, 0, 0, 0)),  # K = 600 in place: sums in the result
    ("packed", (1, 70, 5, 4), (6, 70, 3, 3), (1, 0, 1, 2)),  # K = 630 through the slab: in the workspace
])
def test_conv_partial_sums_across_k_blocks(reading, x_shape, w_shape, pads, monkeypatch):
    monkeypatch.setattr(contraction, "CONV_B", reading)
    rng = np.random.default_rng(12)
    module, kernel = conv_kernel(x_shape, w_shape, attrs_of(pads=pads), "f32")
    check_kernel(module, kernel, [data(rng, x_shape, "f32"), data(rng, w_shape, "f32")], splits=2,
                 rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("reading", ["direct", "packed"])
@pytest.mark.parametrize("x_shape,w_shape,attrs,phases", [
    ((1, 8, 11, 12), (12, 8, 1, 1), attrs_of(strides=(2, 2)), [(0, 0)]),  # a 1x1 downsample
    ((1, 8, 11, 12), (12, 8, 1, 1), attrs_of(strides=(2, 2), pads=(1, 0, 0, 1)), [(0, 0)]),
    ((2, 4, 12, 11), (6, 4, 3, 3), attrs_of(strides=(2, 2), pads=(2, 2, 2, 2), dilations=(2, 2)), [(0, 0)]),
    ((1, 4, 9, 10), (5, 4, 1, 3), attrs_of(strides=(2, 1), pads=(0, 1, 1, 1)), [(0, 0)]),
    ((1, 4, 9, 10), (5, 4, 3, 1), attrs_of(strides=(3, 2), pads=(1, 1, 1, 1)), [(0, 0), (1, 0), (2, 0)]),
    ((1, 4, 13, 13), (8, 4, 3, 3), attrs_of(strides=(2, 2), pads=(1, 1, 1, 1)), [(0, 0), (0, 1), (1, 0), (1, 1)]),
    ((1, 8, 9, 9), (8, 1, 1, 1), attrs_of(strides=(2, 2), groups=8), [(0, 0)]),  # depthwise.py
    # rows wide enough for the stride-2 copy's vector steps (then the scalar rest), odd and even pads
    ((1, 3, 5, 75), (4, 3, 3, 3), attrs_of(strides=(2, 2), pads=(1, 1, 1, 1)), [(0, 0), (0, 1), (1, 0), (1, 1)]),
    ((1, 2, 6, 70), (5, 2, 3, 4), attrs_of(strides=(2, 2), pads=(0, 2, 1, 3)), [(0, 0), (0, 1), (1, 0), (1, 1)]),
    ((1, 4, 5, 67), (4, 1, 3, 3), attrs_of(strides=(2, 2), pads=(1, 1, 1, 1), groups=4),
     [(0, 0), (0, 1), (1, 0), (1, 1)]),
    ((1, 6, 9, 28), (8, 6, 3, 3), attrs_of(strides=(2, 2), pads=(1, 1, 1, 1)), [(0, 0), (0, 1), (1, 0), (1, 1)]),
])
def test_conv_slab_holds_the_phases_its_taps_read(x_shape, w_shape, attrs, phases, reading, monkeypatch):
    """A strided conv's slab lays out only the phases (row % sh, column % sw) that some tap reads
    (a 1x1 stride-2 conv reads one of four), and the tap offsets index those; a stride-2 row is
    copied by vector steps, then a scalar rest."""
    monkeypatch.setattr(contraction, "CONV_B", reading)
    monkeypatch.setattr(depthwise, "ROWS_MIN_VECTORS", 10 ** 6)  # the depthwise case: its slab, not rows in place
    module, kernel = conv_kernel(x_shape, w_shape, attrs, "f32", [(w_shape[0], 1, 1)],
                                 lambda b, y, c: b.op("lz.add", y, c))
    anchor = next(op for op in kernel.regions[0].blocks[0].ops if op.name == "lz.conv2d")
    plan = contraction_gemm.ConvGemm(contraction.ConvShape.of(anchor), True, 1 << 16)
    assert plan.phases == phases
    plan.lay_out_slab(16)
    planes = plan.shape.in_per_group * len(phases)
    assert plan.slab_floats == planes * plan.rows_per_plane * plan.wq + 2 * (16 + plan.wq)
    vector_steps = attrs["strides"][1] == 2 and x_shape[3] >= 28
    assert ("slab_v" in lower_kernel(kernel).llvm_ir) == vector_steps
    rng = np.random.default_rng(sum(x_shape))
    inputs = [data(rng, s, "f32") for s in (x_shape, w_shape, (w_shape[0], 1, 1))]
    check_kernel(module, kernel, inputs, splits=3, **F32_TOL)


PATCHIFY_CASES = {
    # name: (x shape, w shape, attrs): more slab phases than UNROLLED_SLAB_PHASES (a table loop),
    # pads on every side (each phase's columns inside x differ)
    "5x5_s5_pads": ((1, 3, 21, 22), (8, 3, 5, 5), attrs_of(strides=(5, 5), pads=(1, 2, 0, 1))),
}


@pytest.mark.cross_target(cases=PATCHIFY_CASES, group=lambda case: 0)
def test_patchify_conv_copies_its_phases_in_one_loop(cpu, case):
    """A patchify conv (stride = kernel: 20-25 phases here, ViT-B/16's 256) copies the slab's
    phases in a loop over a table of their bounds, not one copy of the loops per phase (one
    row loop: its body and the if/else/endif of a row inside the image or not)."""
    x_shape, w_shape, attrs = case
    module, kernel = conv_kernel(x_shape, w_shape, attrs)
    lowered = lower_kernel(kernel, cpu=cpu)
    assert "slab_phases" in lowered.llvm_ir and len(re.findall(r"^slab_r\.body\S*:", lowered.llvm_ir, re.M)) == 4
    rng = np.random.default_rng(sum(x_shape))
    inputs = [data(rng, x_shape, "f32"), data(rng, w_shape, "f32")]
    want = reference(module, inputs)[0]
    assert_matches(run_kernel(kernel, inputs, 3, lowered, cpu=cpu)[0], want, **F32_TOL)


PRE_PACKED_CASES = {
    # name: (x shape, w shape, attrs, reading): issue 11, a constant weight packed once by the plan
    "3x3_pad1_odd_channels": ((2, 5, 9, 11), (13, 5, 3, 3), attrs_of(pads=(1, 1, 1, 1)), "direct"),
    "groups_stride2": ((1, 6, 13, 12), (14, 3, 3, 3), attrs_of(strides=(2, 2), pads=(1, 1, 1, 1), groups=2),
                       "direct"),
    "two_k_blocks": ((1, 257, 4, 5), (7, 257, 3, 3), attrs_of(pads=(1, 1, 1, 1)), "direct"),  # K = 2313
    "1x1_in_place": ((1, 600, 3, 5), (11, 600, 1, 1), attrs_of(), "packed"),  # K blocks of the host's kc
    "7x7_image": ((1, 40, 7, 7), (20, 40, 3, 3), attrs_of(pads=(1, 1, 1, 1)), "direct"),
}


@pytest.mark.cross_target(cases=PRE_PACKED_CASES, group=lambda case: case[3])  # each CPU: both readings
def test_conv_reads_constant_weights_pre_packed(cpu, case, monkeypatch):
    """A conv whose weights are a constant (``constant_operands``) asks for them as the GEMM's packed
    A (``packed_operands``: one PackedGemmA of the tile and K block it was lowered with), and reads
    that layout right: rows past a whole sliver, several K blocks, groups, the slab and in place.
    (Output channels as the GEMM's rows: pixels as rows, test_conv_pixel_rows, are off.)"""
    x_shape, w_shape, attrs, reading = case
    monkeypatch.setattr(contraction, "CONV_B", reading)
    monkeypatch.setattr(contraction_gemm, "PIXEL_ROWS_MAX_PIXELS", 0)
    extra = [(w_shape[0], 1, 1)]
    module, kernel = conv_kernel(x_shape, w_shape, attrs, "f32", extra,
                                 lambda b, y, c: b.op("lz.relu", b.op("lz.add", y, c)))
    kernel.attributes["constant_operands"] = DenseArrayAttr(I64, (1,))
    lowered = lower_kernel(kernel, cpu=cpu)
    groups = attrs["groups"]
    (spec,) = lowered.packed_operands
    assert (spec.operand, spec.groups, spec.rows, spec.depth) == (1, groups, w_shape[0] // groups,
                                                                  int(np.prod(w_shape[1:])))
    assert "_pack_a" not in lowered.llvm_ir  # nothing left to pack per call
    rng = np.random.default_rng(sum(x_shape) + sum(w_shape))
    x, w, bias = (data(rng, s, "f32") for s in [x_shape, w_shape] + extra)
    want = reference(module, [x, w, bias])[0]
    for splits in (1, 3):
        got = run_kernel(kernel, [x, spec.pack(w), bias], splits, lowered, cpu=cpu)[0]
        assert_matches(got, want, **F32_TOL)


PRE_PACKED_B_CASES = {
    # name: (a shape, b shape): a constant B (an LSTM's W_hh, a model's weights), packed once by the plan
    "lstm_step": ((64, 256), (256, 1024)),     # K blocks of the L1 depth (128 with 6 x 64 tiles)
    "uneven_depth": ((13, 300), (300, 70)),    # equal blocks of 100, a partial column sliver
    "one_block": ((9, 40), (40, 33)),          # shallower than the L1 depth: one block
}


@pytest.mark.cross_target(cases=PRE_PACKED_B_CASES, group=lambda case: 0)
def test_matmul_reads_constant_b_pre_packed_in_l1_deep_blocks(cpu, case):
    """A matmul whose B is a constant reads it as the GEMM's packed B (``PackedGemmB``), in K blocks
    no deeper than the B sliver that fits L1 (``prepacked_b_blocks``), and matches the reference
    with an epilogue whatever the blocks and work-item pieces."""
    a_shape, b_shape = case
    module, kernel = matmul_kernel(a_shape, b_shape, "f32", [(b_shape[1],)],
                                   lambda b, y, c: b.op("lz.relu", b.op("lz.add", y, c)))
    kernel.attributes["constant_operands"] = DenseArrayAttr(I64, (1,))
    lowered = lower_kernel(kernel, cpu=cpu)
    (spec,) = lowered.packed_operands
    assert isinstance(spec, PackedGemmB) and (spec.depth, spec.cols) == b_shape
    rng = np.random.default_rng(sum(a_shape) + sum(b_shape))
    a, w, bias = (data(rng, s, "f32") for s in (a_shape, b_shape, (b_shape[1],)))
    want = reference(module, [a, w, bias])[0]
    for splits in (1, 3):
        got = run_kernel(kernel, [a, spec.pack(w), bias], splits, lowered, cpu=cpu)[0]
        assert_matches(got, want, **F32_TOL)


def test_prepacked_b_blocks_are_equal_and_fit_l1():
    """K blocks for a pre-packed B: the host's kc cut to equal blocks no deeper than the L1 depth
    (two thirds of 48 KiB of L1: 128 for 64- and 48-float slivers) when all rows are one A block,
    kept when already that shallow."""
    caches = cache_model.Caches(48 * 1024, 2 << 20, 0)
    assert [cache_model.prepacked_b_depth(nr, caches) for nr in (64, 48, 24)] == [128, 128, 256]
    config = gemm.GemmConfig(16, 6, 4, 512, 66, 1024)
    assert contraction_gemm.prepacked_b_blocks(config, 64, 256, caches).kc == 128
    assert contraction_gemm.prepacked_b_blocks(config, 64, 300, caches).kc == 100
    assert contraction_gemm.prepacked_b_blocks(config, 67, 300, caches) is config  # rows past one A block
    shallow = gemm.GemmConfig(16, 6, 4, 40, 12, 64)
    assert contraction_gemm.prepacked_b_blocks(shallow, 12, 40, caches) is shallow


@pytest.mark.parametrize("cpu, m, n, tile", [
    ("skylake-avx512", 16, 1024, (16, 8, 3)),  # 6-row tiles pad 16 rows to 18, 8 x 48 columns none
    ("skylake-avx512", 64, 1024, (16, 6, 4)),  # the same padded work either way: the target's tile
    ("skylake-avx512", 16, 256, (16, 6, 4)),   # 48-column tiles pad 256 columns to 288
    ("znver4", 16, 1024, (16, 6, 4)),          # half-rate 512-bit FMA: not measured, kept
    ("x86-64-v3", 16, 1024, (8, 4, 3)),        # AVX2's matmul tile stays
])
def test_prepacked_b_matmul_tile_pads_least(cpu, m, n, tile):
    """A matmul reading a constant B pre-packed takes the tile that pads less of C (8 x 3 vectors
    for 6 x 4 on a full-rate AVX-512 CPU); its packed B follows the tile; it matches the reference."""
    k = 40
    module, kernel = matmul_kernel((m, k), (k, n))
    kernel.attributes["constant_operands"] = DenseArrayAttr(I64, (1,))
    lowered = lower_kernel(kernel, cpu=cpu)
    (spec,) = lowered.packed_operands
    width, _, vectors = tile
    assert spec.col_tile == width * vectors and f"<{width} x float>" in lowered.llvm_ir
    if not cpu_target(cpu).missing_here():  # run where this machine can
        rng = np.random.default_rng(m + n)
        a, w = data(rng, (m, k), "f32"), data(rng, (k, n), "f32")
        assert_matches(run_kernel(kernel, [a, spec.pack(w)], 2, lowered, cpu=cpu)[0], reference(module, [a, w])[0],
                       **F32_TOL)


@pytest.mark.parametrize("cpu, image, tile", [
    ("x86-64-v4", 9, (16, 8, 3)),   # 6 x 4 vectors of 16 -> 8 x 3: 32 channels are 4 tiles, not 6
    ("x86-64-v3", 9, (8, 6, 2)),    # AVX2's 6 x 2 stays
    ("znver4", 8, (16, 8, 3)),      # 64 pixels: 64 lanes either way, 8 rows pad none
    ("znver4", 7, (8, 3, 7)),       # 7 x 7: 49 pixels, 56 lanes of 8 (64 of 16); 512-bit FMA is 2 x 256
    ("skylake-avx512", 7, (16, 6, 4)),  # a full-rate 512-bit FMA: 49 pixels one 4-vector tile, not 48 + 1
    ("skylake-avx512", 6, (16, 8, 3)),  # 36 pixels: one 3-vector tile
])
def test_conv_register_tile_fits_the_channels_and_pixels(cpu, image, tile, monkeypatch):
    """A conv's register tile (vector width, rows, vectors) pads few rows and lanes; the weights
    pre-packed for it follow it, and the kernel matches the reference (channels as rows: pixels as
    rows, test_conv_pixel_rows, are off)."""
    monkeypatch.setattr(contraction_gemm, "PIXEL_ROWS_MAX_PIXELS", 0)
    module, kernel = conv_kernel((1, 8, image, image), (32, 8, 1, 1), attrs_of())
    kernel.attributes["constant_operands"] = DenseArrayAttr(I64, (1,))
    lowered = lower_kernel(kernel, cpu=cpu)
    (spec,) = lowered.packed_operands
    width, rows, vectors = tile
    assert (spec.row_tile, spec.padded_rows) == (rows, -(-32 // rows) * rows)
    assert f"<{width} x float>" in lowered.llvm_ir
    assert ("<16 x float>" in lowered.llvm_ir) == (width == 16)
    if width == 16 or cpu_target(cpu).missing_here():
        return  # every other conv test runs the 16-float tiles
    rng = np.random.default_rng(image)
    x, w = data(rng, (1, 8, image, image), "f32"), data(rng, (32, 8, 1, 1), "f32")
    want = reference(module, [x, w])[0]
    assert_matches(run_kernel(kernel, [x, spec.pack(w)], 2, lowered, cpu=cpu)[0], want, **F32_TOL)


PIXEL_ROWS_CASES = {
    # name: (x shape, w shape, attrs, pixel rows on a full-rate AVX-512 CPU): issue 11
    "3x3_7x7_edge_tile": ((1, 32, 7, 7), (50, 32, 3, 3), attrs_of(pads=(1, 1, 1, 1)), True),  # 50 = 48 + 2
    "1x1_in_place_two_k_blocks": ((1, 600, 14, 14), (36, 600, 1, 1), attrs_of(), True),  # 14 x 2 tiles
    "3x3_stride2_phases": ((2, 32, 14, 14), (40, 32, 3, 3), attrs_of(strides=(2, 2), pads=(1, 1, 1, 1)), True),
    "1x1_stride2": ((1, 300, 28, 28), (33, 300, 1, 1), attrs_of(strides=(2, 2)), True),
    "no_pads_3x3_in_place": ((1, 32, 9, 16), (32, 32, 3, 3), attrs_of(), True),  # 7 x 14: rows of 14
    "28x28_too_many_pixels": ((1, 32, 28, 28), (32, 32, 3, 3), attrs_of(pads=(1, 1, 1, 1)), False),
    "width_not_of_7": ((1, 300, 8, 8), (32, 300, 1, 1), attrs_of(), False),
    "groups": ((1, 64, 7, 7), (32, 32, 3, 3), attrs_of(pads=(1, 1, 1, 1), groups=2), False),
    "too_shallow": ((1, 28, 7, 7), (32, 28, 3, 3), attrs_of(pads=(1, 1, 1, 1)), False),  # K = 252
    "3x3_14x14_offsets_table": ((1, 32, 14, 14), (40, 32, 3, 3), attrs_of(pads=(1, 1, 1, 1)), True),
    # K = 549 in blocks of 279 and 270: whole input channels (the k loop steps a channel's 9 taps)
    "3x3_k_blocks_of_whole_channels": ((1, 61, 7, 7), (48, 61, 3, 3), attrs_of(pads=(1, 1, 1, 1)), True),
    # 64 taps, more than DIRECT_PERIOD_MAX_TAPS: A gathered into the packed layout (a patchify conv)
    "8x8_patchify_packs_a": ((1, 4, 56, 56), (20, 4, 8, 8), attrs_of(strides=(8, 8)), True),
}


@pytest.mark.cross_target(cases=PIXEL_ROWS_CASES, group=lambda case: case[3])
def test_conv_pixel_rows(cpu, case):
    """On a full-rate AVX-512 CPU a small image's conv with constant weights is a GEMM of pixels
    (rows, runs of 7 or 14 inside one output row, broadcast from the slab or the input where they lie,
    or for kernels of many taps gathered into packed slivers) by channels
    (the weights pre-packed as B: a PackedGemmB of W^T); elsewhere (other CPUs, larger images,
    widths not of 7, groups, shallow products) channels stay the rows.  Either way the kernel matches the reference,
    its work items run in any pieces, and a residual epilogue reads the output's index."""
    x_shape, w_shape, attrs, pixel_rows = case
    out_shape = conv_output_shape(x_shape, w_shape, attrs)
    extra = [(w_shape[0], 1, 1), out_shape]
    module, kernel = conv_kernel(x_shape, w_shape, attrs, "f32", extra,
                                 lambda b, y, c, r: b.op("lz.relu", b.op("lz.add", b.op("lz.add", y, c), r)))
    kernel.attributes["constant_operands"] = DenseArrayAttr(I64, (1,))
    lowered = lower_kernel(kernel, cpu=cpu)
    (spec,) = lowered.packed_operands
    full_rate = gemm.GemmConfig.for_target(cpu).vector_width == 16 and \
        cpu not in contraction_gemm.HALF_RATE_512_BIT_CPUS
    k = int(np.prod(w_shape[1:]))
    if pixel_rows and full_rate:
        rows = 14 if out_shape[3] % 14 == 0 else 7
        assert spec == PackedGemmB(1, k, w_shape[0], {7: 48, 14: 32}[rows], (1, k))  # 7 x 3, 14 x 2 vectors
        # A in place (no copy of it; 14-pixel tiles read its offsets from a table, 7-pixel ones step
        # a channel's taps unrolled); a 1x1 or many taps: gathered by the plan's tap table
        taps = w_shape[2] * w_shape[3]
        packs = taps == 1 or taps > contraction_gemm.DIRECT_PERIOD_MAX_TAPS
        assert ("pixel_rows_taps" in lowered.llvm_ir) == packs
        assert ("_a_offsets" in lowered.llvm_ir) == (not packs and rows == 14)
        assert "_pack_a" not in lowered.llvm_ir
    else:
        assert isinstance(spec, PackedGemmA) and "pixel_rows_taps" not in lowered.llvm_ir
    rng = np.random.default_rng(sum(x_shape) + sum(w_shape))
    x, w, bias, residual = (data(rng, s, "f32") for s in [x_shape, w_shape] + extra)
    want = reference(module, [x, w, bias, residual])[0]
    for splits in (1, 3, lowered.work_items):
        got = run_kernel(kernel, [x, spec.pack(w), bias, residual], splits, lowered, cpu=cpu)[0]
        assert_matches(got, want, **F32_TOL)


def test_conv_work_items_in_any_pieces():
    x_shape, w_shape = (3, 8, 20, 20), (16, 4, 3, 3)
    module, kernel = conv_kernel(x_shape, w_shape, attrs_of(pads=(1, 1, 1, 1), groups=2))
    lowered = lower_kernel(kernel)
    # (image, group) GEMMs of 19 * 22 + 20 q-space columns, sliced by the conv's register tile's
    # width (10 slices of 48 on AVX-512), MAX_SLICES at most
    width, _, vectors = contraction_gemm.conv_register_tile(gemm.GemmConfig.for_target(), cpu_target(), 8, 19 * 22 + 20)
    column_tiles = -(-(19 * 22 + 20) // (width * vectors))
    assert lowered.work_items == 3 * 2 * min(column_tiles, contraction_gemm.MAX_SLICES)
    rng = np.random.default_rng(13)
    inputs = [data(rng, x_shape, "f32"), data(rng, w_shape, "f32")]
    want = reference(module, inputs)[0]
    for splits in (lowered.work_items, 4, 5):
        assert_matches(run_kernel(kernel, inputs, splits, lowered)[0], want, **F32_TOL)


# --- the machine code --------------------------------------------------------------------------------

def micro_kernel_assembly(kernel) -> str:
    asm = jit.emit_assembly(lower_kernel(kernel).llvm_ir)
    start = asm.index("micro_kernel:")
    return asm[start:asm.index(".Lfunc_end", start)]


def test_bare_matmul_stores_tiles_from_registers():
    """A bare float32 matmul into its C-layout result stores each tile straight from the
    accumulators; a fused epilogue goes through the TileStore's stack copy of the tile."""
    _, bare = matmul_kernel((64, 300), (300, 70))
    _, fused = matmul_kernel((64, 300), (300, 70), "f32", [(70,)], lambda b, p, c: b.op("lz.add", p, c))
    assert '"sums"' not in lower_kernel(bare).llvm_ir and '"sums"' in lower_kernel(fused).llvm_ir


def test_dot_products_without_fma_multiply_and_add():
    """For a CPU without FMA (x86-64) the dot-product kernel multiplies and adds vectors: llvm.fma
    would be a call of fmaf per lane."""
    _, kernel = matmul_kernel((64, 256), (256, 8))
    lowered = lower_kernel(kernel, cpu="x86-64")
    assert "micro_kernel" not in lowered.llvm_ir  # the dot products, not the GEMM
    asm = jit.emit_assembly(lowered.llvm_ir, "x86-64")
    assert "fmaf" not in asm and "mulps" in asm


def test_epilogue_is_vectorized_inside_the_micro_kernel():
    """gelu(conv + bias) + residual: vector FMAs in the K loop, and the epilogue's loops are
    vectorized with masked tails: no scalar float code, no calls."""
    features = cpu_target().features
    if "fma" not in features:
        pytest.skip("host CPU has no FMA")
    x_shape = (1, 16, 14, 14)
    module, kernel = conv_kernel(x_shape, (16, 16, 3, 3), attrs_of(pads=(1, 1, 1, 1)), "f32",
                                 [(16, 1, 1), x_shape],
                                 lambda b, y, c, r: b.op("lz.add", b.op("lz.gelu", b.op("lz.add", y, c)), r))
    asm = micro_kernel_assembly(kernel)
    register = "zmm" if "avx512f" in features else "ymm"
    assert len(re.findall(rf"vfmadd\S*\s+.*%{register}", asm)) >= 24
    assert not re.search(r"v(fmadd|fmsub|fnmadd|add|mul|sub|max|min|div)\d*ss\s", asm), "scalar float code"
    assert "call" not in asm


def test_reshaped_vector_in_the_epilogue_is_the_same_machine_code():
    """A conv epilogue reading a per-channel vector through its reshape to C x 1 x 1 (a traced
    BatchNorm) compiles to exactly the micro-kernel of one reading a C x 1 x 1 operand: the
    reshape folds away in the index arithmetic, the epilogue stays vectorized."""
    x_shape, w_shape, attrs = (1, 16, 14, 14), (16, 16, 3, 3), attrs_of(pads=(1, 1, 1, 1))
    _, stored = conv_kernel(x_shape, w_shape, attrs, "f32", [(16, 1, 1)],
                            lambda b, y, c: b.op("lz.relu", b.op("lz.add", y, c)))
    _, reshaped = conv_kernel(x_shape, w_shape, attrs, "f32", [(16,)], lambda b, y, c: b.op(
        "lz.relu", b.op("lz.add", y, b.op("lz.reshape", c, shape=[16, 1, 1]))))
    assert micro_kernel_assembly(reshaped) == micro_kernel_assembly(stored)


def test_float64_epilogue_reports_its_libm_calls():
    module, kernel = matmul_kernel((8, 5), (5, 20), "f32", [],
                                   lambda b, p: b.op("lz.exp", b.op("lz.cast", p, to="f64")))
    assert lower_kernel(kernel).external_symbols == ("exp",)
    rng = np.random.default_rng(14)
    check_kernel(module, kernel, [data(rng, (8, 5), "f32") * 0.3, data(rng, (5, 20), "f32")], rtol=1e-5, atol=1e-6)


# --- bf16 and f16 on the float32 kernels (issue 13 item 3) -------------------------------------------

LOW_PRECISION_CASES = {
    # name: (matmul (a, b) or conv (x, w, attrs), the float32 kernel a bf16 one runs: "gemm" names its
    # GEMM, "tiles" a GEMM that a bf16 one runs on AMX tiles (B packed) where the CPU has
    # them; an f16 one runs the GEMM on float32 copies of its operands, and loops for the others)
    "gemm_tails": (((37, 50), (50, 70)), "tiles"),  # AMX: 32 x 32 tiles, one of 5 rows, 6 columns, 25 pairs
    "tiles_k_blocks": (((40, 1100), (1100, 45)), "tiles"),  # AMX: partial sums in the result, odd K blocks
    "gemm_k_blocks": (((13, 700), (700, 21)), "tiles"),  # partial sums across K blocks, in the workspace
    "batched_broadcast": (((2, 1, 9, 20), (3, 20, 33)), "tiles"),  # 9 rows: B packed for the tiles
    "thin_rows": (((2, 50), (50, 70)), "gemm"),
    "dots": (((37, 50), (50, 3)), "dots"),
    "conv_groups_strides": (((2, 6, 10, 9), (8, 3, 3, 2),
                             attrs_of(strides=(1, 2), pads=(2, 0, 1, 3), dilations=(2, 1), groups=2)), "tiles"),
    "conv_1x1_in_place": (((1, 24, 7, 9), (20, 24, 1, 1), attrs_of()), "tiles"),
    "depthwise": (((2, 8, 9, 9), (8, 1, 3, 3), attrs_of(pads=(1, 1, 1, 1), groups=8)), "depthwise"),
}
# One step of the type, relative: a sum whose float32 value differs from the reference's in the
# last bits (another summation order) may round to the neighbouring value.
LOW_PRECISION_STEP = {"bf16": 2.0 ** -7, "f16": 2.0 ** -10}


@pytest.mark.parametrize("dtype", ["bf16", "f16"])
@pytest.mark.cross_target(cases=LOW_PRECISION_CASES, group=lambda case: case[1])  # each CPU: each kernel
def test_low_precision_contractions_round_each_float32_sum_once(cpu, case, dtype):
    """A bf16 matmul or conv (bf16 values in float32 storage) runs the float32 GEMM, dot-product or
    depthwise kernel, an f16 one the GEMM on float32 copies of its operands, and each float32 sum
    rounds once to the type in the epilogue, as the reference's does: every result is a value of
    the type, nearly all equal the reference's bit for bit (the rest differ by one step of the
    type, from the summation order), and the epilogue computes on the rounded sum."""
    shapes, kernel_kind = case
    rng = np.random.default_rng(sum(map(sum, shapes[:2])))

    def epilogue(b, y, c):
        return [y, b.op("lz.relu", b.op("lz.add", y, c))]

    if len(shapes) == 2:
        bias = (shapes[1][-1],)
        module, kernel = matmul_kernel(*shapes, dtype, [bias], epilogue)
    else:
        bias = (shapes[1][0], 1, 1)
        module, kernel = conv_kernel(*shapes, dtype, [bias], epilogue)
    lowered = lower_kernel(kernel, cpu=cpu)
    assert (f"{kernel.attributes['name'].value}.gemm" in lowered.llvm_ir) == (kernel_kind in ("gemm", "tiles"))
    # a bf16 GEMM runs tdpbf16ps on AMX tiles where the target has AMX-BF16 (sapphirerapids) and B
    # is packed, else vdpbf16ps on bf16 pairs where it has AVX-512 BF16 (znver4, sapphirerapids)
    tiles = dtype == "bf16" and kernel_kind == "tiles" and takes_tiles(cpu)
    assert (TILE_DOT in lowered.llvm_ir) == tiles
    assert (PAIRS in lowered.llvm_ir) == (dtype == "bf16" and kernel_kind in ("gemm", "tiles") and takes_pairs(cpu)
                                          and not tiles)
    inputs = [data(rng, s, dtype) for s in shapes[:2] + (bias,)]
    want = reference(module, inputs)
    for splits in (1, 3):
        got = run_kernel(kernel, inputs, splits, lowered, cpu=cpu)
        for g, w in zip(got, want):
            if dtype == "bf16":
                np.testing.assert_array_equal(round_to_bf16(g), g)
            assert_matches(g, w, rtol=LOW_PRECISION_STEP[dtype], atol=1e-5)
            assert np.mean(g == w) > 0.98, np.mean(g == w)


PAIRS = "llvm.x86.avx512bf16.dpbf16ps"  # either width


TILE_DOT = "llvm.x86.tdpbf16ps"


def takes_pairs(cpu: str) -> bool:
    return gemm_bf16.pairs_available(cpu_target(cpu), gemm.GemmConfig.for_target(cpu))


def takes_tiles(cpu: str) -> bool:
    return gemm_bf16.amx_available(cpu_target(cpu))


@pytest.mark.parametrize("rows, depth", [(8, 6), (40, 20)])  # too shallow for AMX tiles; AMX tiles
@pytest.mark.cross_target
def test_bf16_gemm_denormals_flush_only_on_vdpbf16ps_and_amx(cpu, rows, depth):
    """vdpbf16ps and AMX's tdpbf16ps read a denormal input as zero and flush a denormal sum to
    zero; the float32 GEMM, like the reference, keeps them.  Which CPUs take which: AVX-512 BF16
    (znver4, sapphirerapids) vdpbf16ps, AMX-BF16 (sapphirerapids) tdpbf16ps where the GEMM packs B
    for the tiles (8 rows or more, 16 deep or more), the others the float32 GEMM.  Row 0: a
    denormal bf16 (2^-130) times 1; row 1: a product of normals below 2^-126 (2^-64 * 2^-64); row
    2: the smallest normal sum, which all keep; the other rows are ordinary values, bit-equal on
    every path."""
    rng = np.random.default_rng(21)
    a, b = data(rng, (rows, depth), "bf16"), data(rng, (depth, 40), "bf16")
    a[:3] = 0.0
    a[0, 0], a[1, 1], a[2, 2] = 2.0 ** -130, 2.0 ** -64, 2.0 ** -63
    b[:3] = 0.0
    b[0, :], b[1, :], b[2, :] = 1.0, 2.0 ** -64, 2.0 ** -63
    module, kernel = matmul_kernel(a.shape, b.shape, "bf16")
    lowered = lower_kernel(kernel, cpu=cpu)
    want = reference(module, [a, b])[0]
    got = run_kernel(kernel, [a, b], 1, lowered, cpu=cpu)[0]
    tiles = depth >= gemm_bf16.AMX_MIN_DEPTH and takes_tiles(cpu)
    flushed = takes_pairs(cpu) or tiles
    assert (TILE_DOT in lowered.llvm_ir) == tiles
    assert (PAIRS in lowered.llvm_ir) == (flushed and not tiles)
    assert want[0, 0] == np.float32(2.0 ** -130) and want[1, 0] == np.float32(2.0 ** -128)
    np.testing.assert_array_equal(got[:2], 0.0 if flushed else want[:2])
    np.testing.assert_array_equal(got[2:], want[2:])
    assert got[2, 0] == np.float32(2.0 ** -126)


@pytest.mark.parametrize("case", ["two_k_blocks", "groups_stride2", "1x1_in_place"])
def test_bf16_conv_converts_pre_packed_weights_to_pairs_or_tiles(case, monkeypatch):
    """A bf16 conv with constant weights on the host: the plan's float32 packed A is turned into
    bf16 pairs per call where the host has AVX-512 BF16 (an odd K block too: K = 2313), into AMX
    tile rows where it has AMX-BF16 and B is packed (two K blocks of 300), and the result is the
    reference's."""
    x_shape, w_shape, attrs, reading = PRE_PACKED_CASES[case]
    monkeypatch.setattr(contraction, "CONV_B", reading)
    module, kernel = conv_kernel(x_shape, w_shape, attrs, "bf16")
    kernel.attributes["constant_operands"] = DenseArrayAttr(I64, (1,))
    lowered = lower_kernel(kernel)
    (spec,) = lowered.packed_operands
    tiles = reading == "packed" and takes_tiles("host")
    assert (TILE_DOT in lowered.llvm_ir) == tiles
    assert (PAIRS in lowered.llvm_ir) == (takes_pairs("host") and not tiles)
    rng = np.random.default_rng(sum(x_shape))
    x, w = data(rng, x_shape, "bf16"), data(rng, w_shape, "bf16")
    want = reference(module, [x, w])[0]
    got = run_kernel(kernel, [x, spec.pack(w)], 2, lowered)[0]
    np.testing.assert_array_equal(round_to_bf16(got), got)
    assert_matches(got, want, rtol=LOW_PRECISION_STEP["bf16"], atol=1e-5)
    assert np.mean(got == want) > 0.98


AMX_CASES = {
    # name: (A's stored shape, transposed?, B's stored shape, transposed?, runs on AMX tiles where the CPU
    # has them): a bf16 GEMM's tails, depths and layouts on 32 x 32 tiles of 16-pair chunks
    "edges": ((70, 33), False, (33, 37), False, True),  # 6 rows and 5 columns past whole tiles (one C tile)
    "one_chunk": ((32, 16), False, (16, 48), False, True),  # the shallowest K block: 8 pairs padded to 16
    "k_blocks": ((33, 1025), False, (1025, 40), False, True),  # 5 blocks of 205: partial sums as tiles, odd depths
    "transposed": ((47, 64), True, (80, 47), True, True),  # x.T @ w.T: both packed from their transposes
    "batched": ((3, 40, 50), False, (3, 50, 20), False, True),
    "too_shallow": ((40, 15), False, (15, 50), False, False),  # K < 16: vdpbf16ps
    "few_rows": ((8, 300), False, (300, 70), False, True),  # B packed for the tiles (read in place for f32)
    "too_few_rows": ((6, 64), False, (64, 70), False, False),  # B read in place: vdpbf16ps
}


@pytest.mark.cross_target(cases=AMX_CASES, group=lambda case: 0)
def test_bf16_gemm_on_amx_tiles(cpu, case):
    """A bf16 matmul of 8 rows or more and 16 deep or more runs tdpbf16ps on AMX tiles where the CPU
    has AMX-BF16 (sapphirerapids; the assembly has the tile configuration, the dots and the release), vdpbf16ps
    or the float32 GEMM elsewhere; each float32 sum rounds once to bf16 as the reference's does:
    nearly all bit-equal, the rest one step of bf16 away (another summation order)."""
    a_shape, a_transposed, b_shape, b_transposed, on_tiles = case

    def body(b, x, y):
        x = b.op("lz.transpose", x, perm=[0, 2, 1] if len(a_shape) == 3 else [1, 0]) if a_transposed else x
        y = b.op("lz.transpose", y, perm=[1, 0]) if b_transposed else y
        return b.op("lz.matmul", x, y)

    module, kernel = make_kernel([(a_shape, "bf16"), (b_shape, "bf16")], body, kind="matmul")
    lowered = lower_kernel(kernel, cpu=cpu)
    tiles = on_tiles and takes_tiles(cpu)
    assert (TILE_DOT in lowered.llvm_ir) == tiles
    if tiles:
        asm = jit.emit_assembly(lowered.llvm_ir, cpu)
        for instruction in ("ldtilecfg", "tilezero", "tileloadd", "tdpbf16ps", "tilestored", "tilerelease"):
            assert instruction in asm, instruction
    rng = np.random.default_rng(sum(a_shape) + sum(b_shape))
    inputs = [data(rng, a_shape, "bf16"), data(rng, b_shape, "bf16")]
    want = reference(module, inputs)[0]
    for splits in (1, 3):
        got = run_kernel(kernel, inputs, splits, lowered, cpu=cpu)[0]
        np.testing.assert_array_equal(round_to_bf16(got), got)
        assert_matches(got, want, rtol=LOW_PRECISION_STEP["bf16"], atol=1e-5)
        assert np.mean(got == want) > 0.98, np.mean(got == want)


def test_bf16_gemm_on_8_float_vectors_takes_the_256_bit_vdpbf16ps(monkeypatch):
    """A GEMM tile of 8-float vectors (a narrow conv tile on Zen 4) on an AVX-512 BF16 target takes
    the 256-bit vdpbf16ps (AVX-512VL), with the reference's result: AVX2's tile on the host stands
    in for it (a host without AVX-512 BF16 runs the float32 GEMM on it; AMX tiles are off, which
    the GEMM would take on an AMX host)."""
    narrow = gemm.GemmConfig.for_target("x86-64-v3")
    monkeypatch.setattr(gemm.GemmConfig, "for_target", classmethod(lambda cls, cpu=None, *rest: narrow))
    monkeypatch.setattr(gemm_bf16, "amx_available", lambda cpu: False)
    rng = np.random.default_rng(22)
    a, b = data(rng, (37, 50), "bf16"), data(rng, (50, 70), "bf16")
    module, kernel = matmul_kernel(a.shape, b.shape, "bf16")
    lowered = lower_kernel(kernel)
    assert (gemm_bf16.DPBF16PS[8] in lowered.llvm_ir) == takes_pairs("host")
    assert gemm_bf16.DPBF16PS[16] not in lowered.llvm_ir
    got = run_kernel(kernel, [a, b], 2, lowered)[0]
    assert_matches(got, reference(module, [a, b])[0], rtol=LOW_PRECISION_STEP["bf16"], atol=1e-5)


F16_LAYOUT_CASES = {
    # name: (A's stored shape, its transpose perm or None, B's, its perm or None): the GEMM packs
    # each layout from half storage
    "both_transposed": ((30, 40), (1, 0), (50, 30), (1, 0)),
    "few_rows_swapped": ((5, 30), None, (70, 30), (1, 0)),  # C^T = B^T A^T
    "batch_innermost": ((13, 7, 3), (2, 0, 1), (3, 17, 7), (0, 2, 1)),  # A gathered a value at a time
    "b_batch_innermost": ((3, 13, 7), None, (7, 17, 3), (2, 0, 1)),
}


@pytest.mark.cross_target(cases=F16_LAYOUT_CASES, group=lambda case: 0)
def test_f16_matmul_widens_its_operands_while_packing(cpu, case):
    """An f16 matmul's GEMM reads A and B in half storage, converting as it packs (no float32
    copies of the operands): transposed, swapped for few rows, and with a batch dim innermost."""
    a_shape, a_perm, b_shape, b_perm = case

    def body(b, x, y):
        x = b.op("lz.transpose", x, perm=list(a_perm)) if a_perm else x
        y = b.op("lz.transpose", y, perm=list(b_perm)) if b_perm else y
        return b.op("lz.matmul", x, y)

    module, kernel = make_kernel([(a_shape, "f16"), (b_shape, "f16")], body, kind="matmul")
    lowered = lower_kernel(kernel, cpu=cpu)
    assert f"{kernel.attributes['name'].value}.gemm" in lowered.llvm_ir and "widen" not in lowered.llvm_ir
    rng = np.random.default_rng(sum(a_shape) + sum(b_shape))
    inputs = [data(rng, a_shape, "f16"), data(rng, b_shape, "f16")]
    want = reference(module, inputs)[0]
    got = run_kernel(kernel, inputs, 3, lowered, cpu=cpu)[0]
    assert_matches(got, want, rtol=LOW_PRECISION_STEP["f16"], atol=1e-3)
    assert np.mean(got == want) > 0.98


CAST_PROLOGUE_CASES = {
    # name: (A's stored shape, B's stored shape, B stored transposed?, which operands are cast from
    # float32, cast before the transpose?): each bf16 matmul kernel reading float32 through lz.cast
    "tiles": ((70, 300), (300, 37), False, "ab", True),  # AMX tiles / vdpbf16ps / float32 GEMM, edges
    "k_blocks": ((33, 1025), (1025, 40), False, "ab", True),  # K blocks: partial sums
    "b_only": ((40, 64), (64, 70), False, "b", True),  # A already bf16 (its rounding would be a no-op)
    "weight_transposed": ((48, 96), (70, 96), True, "ab", True),  # x @ w.T, w cast then transposed
    "cast_of_transpose": ((48, 96), (70, 96), True, "b", False),  # cast(w.T): the same read
    "few_rows": ((6, 64), (64, 70), False, "ab", True),  # B's rows read in place
    "swapped": ((2, 64), (70, 64), True, "ab", True),  # C^T = B^T A^T: the flags swap
    "dots": ((40, 64), (10, 64), True, "ab", True),  # 10 columns: dot products (f16: the loop kernel)
    "a_only": ((40, 64), (64, 70), False, "a", True),  # f16: A float32, B half storage in one GEMM
}
ROUNDINGS = {"bf16": round_to_bf16, "f16": lambda x: x.astype(np.float16)}  # the casts' results


@pytest.mark.cross_target(cases={f"{low}_{name}": (low, *case) for low in ROUNDINGS
                                 for name, case in CAST_PROLOGUE_CASES.items()}, group=lambda case: case[0])
def test_low_precision_matmul_rounds_cast_operands_as_it_reads_them(cpu, case):
    """A bf16 or f16 matmul kernel reading float32 operands through lz.cast to its type (autocast's
    casts, partition's operand prologue) rounds each value where it reads it (packing, B in place,
    dot products, the loops): bit-identical to the same kernel on the cast's results (the unfused
    path), whatever kernel and instruction (AMX tiles, vdpbf16ps, float32 FMAs, F16C conversions)
    the CPU takes; values include exact ties, which round to even.  An f16 kernel reads its other
    operands as half storage."""
    low, a_shape, b_shape, b_transposed, cast, cast_first = case
    rounding = ROUNDINGS[low]
    rng = np.random.default_rng(sum(a_shape) + sum(b_shape))
    a, b = (random_array(rng, s, np.float32) for s in (a_shape, b_shape))
    for x, step in ((a, 7), (b, 5)):  # some exact ties: halfway between two values of the type
        if low == "bf16":
            x.flat[::step] = round_to_bf16(x.flat[::step]) + np.float32(2.0 ** -9) * np.sign(x.flat[::step])
        else:
            h = x.flat[::step].astype(np.float16)
            x.flat[::step] = (h.astype(np.float32) + np.nextafter(h, np.float16(np.inf)).astype(np.float32)) / 2
    element = {"bf16": BF16, "f16": F16}[low]

    def body(builder, x, y):
        def operand(v, name, transposed):
            if transposed and not cast_first:
                v = builder.op("lz.transpose", v, perm=[1, 0])
            if name in cast:
                v = builder.op("lz.cast", v, to=element)
            return builder.op("lz.transpose", v, perm=[1, 0]) if transposed and cast_first else v
        return builder.op("lz.matmul", operand(x, "a", False), operand(y, "b", b_transposed))

    types = [(s, "f32" if name in cast else low) for s, name in ((a_shape, "a"), (b_shape, "b"))]
    module, kernel = make_kernel(types, body, kind="matmul")
    inputs = [x if name in cast else rounding(x) for x, name in ((a, "a"), (b, "b"))]

    def unfused(builder, x, y):
        return builder.op("lz.matmul", x, builder.op("lz.transpose", y, perm=[1, 0]) if b_transposed else y)

    _, plain = make_kernel([(a_shape, low), (b_shape, low)], unfused, kind="matmul")
    want = run_kernel(plain, [rounding(x) for x in (a, b)], 1, cpu=cpu)[0]
    for splits in (1, 3):
        np.testing.assert_array_equal(run_kernel(kernel, inputs, splits, cpu=cpu)[0], want)
    assert_matches(np.asarray(want, np.float32), np.asarray(reference(module, inputs)[0], np.float32),
                   rtol=LOW_PRECISION_STEP[low], atol=1e-5 if low == "bf16" else 1e-3)


def test_bf16_matmul_cast_prologue_on_amx_tiles_rounds_as_it_packs():
    """For a CPU with AMX-BF16 (sapphirerapids: compiled, not run, where the machine has no AMX) a
    bf16 matmul reading float32 through casts runs tdpbf16ps, its pack routines rounding to bf16
    (ties to even: the 0x7FFF bias) where the unfused kernel's only pair the bf16 values' bits."""
    a_shape, b_shape, *_ = CAST_PROLOGUE_CASES["tiles"]

    def body(builder, x, y):
        return builder.op("lz.matmul", builder.op("lz.cast", x, to=BF16), builder.op("lz.cast", y, to=BF16))

    _, fused = make_kernel([(a_shape, "f32"), (b_shape, "f32")], body, kind="matmul")
    _, plain = matmul_kernel(a_shape, b_shape, "bf16")
    fused_ir, plain_ir = (lower_kernel(k, cpu="sapphirerapids").llvm_ir for k in (fused, plain))
    assert TILE_DOT in fused_ir and TILE_DOT in plain_ir
    bias = re.compile(r'add <16 x i32> %"?[\w.]+"?, <i32 32767')  # vectors of A's and B's values
    assert bias.search(fused_ir) and not bias.search(plain_ir)
    jit.emit_assembly(fused_ir, "sapphirerapids")
