"""Triton matmul and conv kernels (``lezero/codegen/triton/contraction.py``) against the reference
interpreter, run by the Triton interpreter (``TRITON_INTERPRET=1``, set by conftest.py; torch CPU
tensors as buffers), as kernels made by hand and as the kernels partition makes of a function:
2-D, batched and broadcast, 1-D and thin matmuls, ragged tiles, operands read through a
transpose, fused epilogues (bias + relu, residual, several results), f32 / f16 / bf16 / f64 and
integer element types, conv2d with every attribute; the launch configurations; and every kind of
kernel built to PTX for sm_90."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from lezero.codegen.triton import jit
from lezero.codegen.triton.contraction import DotKind, Gemm, contraction_unsupported_reason
from lezero.codegen.triton.backend import lower_kernel, unsupported_reason
from lezero.ir.dialect.numerics import round_to_bf16
from lezero.ir.opdef import OpError
from lezero.ir.types import ELEMENT_TYPES, F16, F32, tensor

from codegen.kernel_testing import MOVED_OPERAND_SHAPES, batch_norm_epilogue, make_kernel, moved_operands_epilogue
from support.ir_building import build, random_array
from codegen.triton.triton_testing import assert_matches, check_triton, device_tensor, garbage, reference
from lezero.runtime.cuda import to_host

F32_TOL = dict(rtol=1e-4, atol=1e-4)  # f32 sums in another order than numpy's
BF16_TOL = dict(rtol=1e-2, atol=1e-2)  # one bf16 rounding of a sum may land on either side


def data(rng, shape, dtype: str) -> np.ndarray:
    array = random_array(rng, shape, ELEMENT_TYPES[dtype].numpy_dtype)
    if dtype == "bf16":
        array = round_to_bf16(array)
    if dtype == "i8":
        array = (array % 3).astype(np.int8)
    return array


def tolerance(dtype: str) -> dict:
    return {"f32": F32_TOL, "bf16": BF16_TOL}.get(dtype, {})


def run_kernel(kernel, inputs, config=None) -> list:
    """Lower ``kernel`` (an ``lz.kernel`` made by hand) and launch it with ``config`` (default: its
    first) on torch CPU tensors; the results (their buffers start as garbage)."""
    lowered = lower_kernel(kernel)
    buffers = [device_tensor(a, t) for a, t in zip(inputs, lowered.operand_types)]
    results = [garbage(t) for t in lowered.result_types]
    jit.load(lowered).launch(buffers + results, config)
    return [to_host(r, t) for r, t in zip(results, lowered.result_types)]


def check(module, kernel, inputs, **tol) -> None:
    got, want = run_kernel(kernel, inputs), reference(module, inputs)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_matches(g, w, **tol)


# --- matmul ------------------------------------------------------------------------------------------

def matmul_kernel(a_shape, b_shape, dtype="f32", extra=(), epilogue=None, transpose=None):
    """lz.kernel(a, b, *extra) { epilogue(b, a @ b, *extra) or a @ b }; ``transpose``: (operand
    number, perm) reads that operand through lz.transpose."""
    def body(b, x, y, *rest):
        operands = [x, y]
        if transpose is not None:
            which, perm = transpose
            operands[which] = b.op("lz.transpose", operands[which], perm=list(perm))
        product = b.op("lz.matmul", *operands)
        return epilogue(b, product, *rest) if epilogue else product

    return make_kernel([(a_shape, dtype), (b_shape, dtype)] + [(s, dtype) for s in extra], body, kind="matmul")


@pytest.mark.parametrize("m,k,n", [
    (37, 50, 70),  # ragged in every dim
    (64, 32, 48),  # whole tiles: no clamps, no masks
    (1, 40, 33),  # one row
    (29, 40, 1),  # one column (matrix-vector)
    (3, 5, 2),  # smaller than one tl.dot block everywhere
    (130, 20, 17),  # several row tiles: the grouped program order
    (4, 0, 3),  # K = 0: zeros
])
def test_matmul_2d(m, k, n):
    rng = np.random.default_rng(m * 100 + k * 10 + n)
    module, kernel = matmul_kernel((m, k), (k, n))
    check(module, kernel, [data(rng, (m, k), "f32"), data(rng, (k, n), "f32")], **F32_TOL)


@pytest.mark.parametrize("a_shape,b_shape", [
    ((2, 1, 9, 20), (3, 20, 33)),  # batch dims broadcast both ways
    ((4, 9, 20), (20, 17)),  # a 2-D rhs shared by every batch
    ((1, 9, 20), (5, 20, 17)),
    ((1, 9, 20), (20, 17)),  # batch dims of one GEMM
    ((1, 1, 9, 20), (1, 20, 17)),
    ((20,), (20, 33)),  # a 1-D lhs is a row
    ((3, 20), (2, 1, 20, 5)),
    ((9, 20), (20,)),  # a 1-D rhs is a column
    ((2, 9, 20), (20,)),
    ((20,), (20,)),  # a dot product: a scalar result
])
def test_batched_and_one_dimensional_matmul(a_shape, b_shape):
    rng = np.random.default_rng(len(a_shape) * 10 + len(b_shape))
    module, kernel = matmul_kernel(a_shape, b_shape, "f32", [()], lambda b, p, s: b.op("lz.add", p, s))
    check(module, kernel, [data(rng, a_shape, "f32"), data(rng, b_shape, "f32"), data(rng, (), "f32")], **F32_TOL)


@pytest.mark.parametrize("a_shape,b_shape,transpose", [
    ((9, 20), (33, 20), (1, (1, 0))),  # x @ w.T (a linear layer, ONNX Gemm transB)
    ((20, 9), (20, 33), (0, (1, 0))),  # x.T @ w
    ((2, 20, 9), (2, 20, 7), (0, (0, 2, 1))),  # batched
    ((3, 9, 20), (3, 17, 20), (1, (0, 2, 1))),
])
def test_matmul_through_transpose(a_shape, b_shape, transpose):
    rng = np.random.default_rng(sum(a_shape))
    module, kernel = matmul_kernel(a_shape, b_shape, "f32", transpose=transpose)
    source = lower_kernel(kernel).source
    assert "operands read through lz.transpose" in source
    check(module, kernel, [data(rng, a_shape, "f32"), data(rng, b_shape, "f32")], **F32_TOL)


EPILOGUES = {
    # name: (extra operand shapes for an m x n product, body)
    "bias_relu": ([("n",)], lambda b, p, bias: b.op("lz.relu", b.op("lz.add", p, bias))),
    "residual": ([("m", "n")], lambda b, p, r: b.op("lz.add", p, r)),
    "along_rows": ([("m", 1)], lambda b, p, s: b.op("lz.mul", p, s)),
    "gelu": ([], lambda b, p: b.op("lz.gelu", p)),
    # the product itself, a value of it, and one that does not read it at all
    "several_results": ([("m", "n"), ()], lambda b, p, r, s: [p, b.op("lz.tanh", b.op("lz.mul", p, s)),
                                                            b.op("lz.add", r, s)]),
    "cast_to_f16": ([("n",)], lambda b, p, c: b.op("lz.cast", b.op("lz.add", p, c), to="f16")),
    # operands read through reshape, transpose, broadcast_to and pad of memory
    "moved_operands": (MOVED_OPERAND_SHAPES, moved_operands_epilogue),
}


@pytest.mark.parametrize("name", list(EPILOGUES))
def test_matmul_epilogues(name):
    m, k, n = 37, 50, 70
    rng = np.random.default_rng(len(name))
    shapes, epilogue = EPILOGUES[name]
    extra = [tuple({"m": m, "n": n}.get(d, d) for d in s) for s in shapes]
    module, kernel = matmul_kernel((m, k), (k, n), "f32", extra, epilogue)
    lowered = lower_kernel(kernel)
    assert lowered.source.count("tl.store(") == len(kernel.results)  # one store per result, after the loop
    assert lowered.source.index("tl.dot(") < lowered.source.index("tl.store(")
    check(module, kernel, [data(rng, s, "f32") for s in [(m, k), (k, n)] + extra],
          **(dict(rtol=2e-3, atol=2e-3) if name == "cast_to_f16" else F32_TOL))


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f64", "i32", "i8", "ui8", "i64"])
def test_matmul_other_dtypes(dtype):
    """f16 and bf16 sum in f32 and round once, as the reference; f64 sums in f64; integers wrap."""
    rng = np.random.default_rng(5)
    a_shape, b_shape = (2, 6, 33), (33, 20)
    module, kernel = matmul_kernel(a_shape, b_shape, dtype, [(20,)], lambda b, p, c: b.op("lz.add", p, c))
    check(module, kernel, [data(rng, s, dtype) for s in (a_shape, b_shape, (20,))], **tolerance(dtype))


@settings(max_examples=12)
@given(m=st.integers(1, 40), k=st.integers(1, 70), n=st.integers(1, 40), batch=st.sampled_from([(), (2,), (2, 1)]),
       dtype=st.sampled_from(["f32", "f32", "f16", "i32"]))
def test_matmul_any_shape(m, k, n, batch, dtype):
    rng = np.random.default_rng(m * 10000 + k * 100 + n)
    module, kernel = matmul_kernel(batch + (m, k), (k, n), dtype)
    check(module, kernel, [data(rng, batch + (m, k), dtype), data(rng, (k, n), dtype)], **tolerance(dtype))


@pytest.mark.parametrize("a_shape,b_shape", [((0, 5), (5, 3)), ((4, 5), (5, 0)), ((2, 0, 4, 5), (5, 3))])
def test_empty_results(a_shape, b_shape):
    module, kernel = matmul_kernel(a_shape, b_shape)
    rng = np.random.default_rng(0)
    check(module, kernel, [data(rng, a_shape, "f32"), data(rng, b_shape, "f32")])


def test_integer_sums_wrap():
    """i8 products summed past 127 wrap as the reference's int8 sums do."""
    module, kernel = matmul_kernel((3, 40), (40, 5), "i8")
    a, b = np.full((3, 40), 7, np.int8), np.full((40, 5), 9, np.int8)
    got = run_kernel(kernel, [a, b])[0]
    assert_matches(got, reference(module, [a, b])[0])
    assert (got == np.int8(np.int64(7 * 9 * 40) - 256 * 10)).all()  # 2520 mod 256 = -40


def test_bf16_operands_multiply_exactly():
    """bf16 tiles (16-bit buffers) go to tl.dot as they are on a GPU, and as float32 in tf32
    precision under the interpreter: products of bf16 values are exact either way, so a product of
    two bf16 values is the reference's."""
    module, kernel = matmul_kernel((16, 16), (16, 16), "bf16")
    a = round_to_bf16(np.linspace(-3.0, 3.0, 256, dtype=np.float32).reshape(16, 16))
    b = np.eye(16, dtype=np.float32) * np.float32(1.0078125)  # 1 + 2^-7: exact in bf16
    got = run_kernel(kernel, [a, b])[0]
    np.testing.assert_array_equal(got, reference(module, [a, b])[0])
    source = lower_kernel(kernel).source
    assert "tl.dot(a, b, acc) if BF16_TILES else tl.dot(a.to(tl.float32), b.to(tl.float32), acc, " \
           "input_precision=\"tf32\")" in source
    assert lower_kernel(kernel).signature["b0"] == "*bf16"  # 16-bit buffers


# --- conv2d ------------------------------------------------------------------------------------------

def attrs_of(strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), groups=1):
    return {"strides": list(strides), "pads": list(pads), "dilations": list(dilations), "groups": groups}


def conv_kernel(x_shape, w_shape, attrs, dtype="f32", extra=(), epilogue=None):
    def body(b, x, w, *rest):
        y = b.op("lz.conv2d", x, w, **attrs)
        return epilogue(b, y, *rest) if epilogue else y

    return make_kernel([(x_shape, dtype), (w_shape, dtype)] + [(s, dtype) for s in extra], body, kind="conv")


CONV_CASES = {
    # name: (x shape, w shape, attrs)
    "3x3_pad1": ((2, 16, 14, 14), (32, 16, 3, 3), attrs_of(pads=(1, 1, 1, 1))),
    "stride_dilation_asymmetric_pads": ((1, 3, 9, 11), (5, 3, 3, 2),
                                        attrs_of(strides=(2, 3), pads=(1, 0, 2, 1), dilations=(2, 1))),
    "groups_1x1": ((2, 6, 7, 7), (4, 3, 1, 1), attrs_of(groups=2)),
    "depthwise": ((1, 4, 6, 6), (4, 1, 3, 3), attrs_of(groups=4, pads=(1, 1, 1, 1))),
    "window_covers_input": ((3, 5, 4, 4), (7, 5, 4, 4), attrs_of()),
    "groups_strides_pads": ((2, 6, 10, 9), (8, 3, 3, 2), attrs_of(strides=(2, 1), pads=(0, 2, 1, 0), groups=2)),
    "one_row_kernel": ((1, 2, 5, 8), (3, 2, 1, 3), attrs_of(strides=(1, 2), pads=(2, 1, 0, 1), dilations=(1, 3))),
}


@pytest.mark.parametrize("name", list(CONV_CASES))
def test_conv_attributes(name):
    x_shape, w_shape, attrs = CONV_CASES[name]
    rng = np.random.default_rng(len(name))
    module, kernel = conv_kernel(x_shape, w_shape, attrs)
    check(module, kernel, [data(rng, x_shape, "f32"), data(rng, w_shape, "f32")], **F32_TOL)


@st.composite
def conv_cases(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    cin = draw(st.integers(1, 4)) * groups
    cout = draw(st.sampled_from([1, 4, 7])) * groups
    window = (draw(st.integers(1, 4)), draw(st.integers(1, 3)))
    attrs = attrs_of(strides=(draw(st.integers(1, 3)), draw(st.integers(1, 2))),
                     pads=tuple(draw(st.integers(0, 2)) for _ in range(4)),
                     dilations=(draw(st.integers(1, 2)), draw(st.integers(1, 2))), groups=groups)
    x_shape = (draw(st.integers(1, 2)), cin, draw(st.integers(1, 12)), draw(st.integers(1, 12)))
    return x_shape, (cout, cin // groups) + window, attrs


@settings(max_examples=12)
@given(conv_cases())
def test_conv_any_attributes(case):
    x_shape, w_shape, attrs = case
    try:
        module, kernel = conv_kernel(x_shape, w_shape, attrs)
    except OpError:
        assume(False)  # the window does not fit the padded input
    rng = np.random.default_rng(sum(x_shape) + sum(w_shape))
    check(module, kernel, [data(rng, x_shape, "f32"), data(rng, w_shape, "f32")], **F32_TOL)


def test_conv_bias_relu_epilogue():
    x_shape, w_shape = (2, 8, 9, 9), (12, 4, 3, 3)
    attrs = attrs_of(strides=(2, 2), pads=(1, 1, 1, 1), groups=2)
    module, kernel = conv_kernel(x_shape, w_shape, attrs, "f32", [(12, 1, 1)],
                                 lambda b, y, c: b.op("lz.relu", b.op("lz.add", y, c)))
    source = lower_kernel(kernel).source
    assert "implicit GEMM" in source and "epilogue on the accumulator: lz.add, lz.relu" in source
    rng = np.random.default_rng(3)
    check(module, kernel, [data(rng, s, "f32") for s in (x_shape, w_shape, (12, 1, 1))], **F32_TOL)


def test_conv_residual_and_several_results():
    x_shape, w_shape = (1, 4, 6, 7), (6, 4, 3, 3)
    attrs = attrs_of(pads=(1, 1, 1, 1))
    module, kernel = conv_kernel(x_shape, w_shape, attrs, "f32", [(1, 6, 6, 7)],
                                 lambda b, y, r: [y, b.op("lz.relu", b.op("lz.add", y, r))])
    rng = np.random.default_rng(4)
    check(module, kernel, [data(rng, s, "f32") for s in (x_shape, w_shape, (1, 6, 6, 7))], **F32_TOL)


@pytest.mark.parametrize("dtype", ["f16", "bf16", "f64"])
def test_conv_other_dtypes(dtype):
    x_shape, w_shape = (1, 4, 7, 6), (6, 2, 3, 3)
    attrs = attrs_of(strides=(2, 1), pads=(1, 0, 2, 1), dilations=(1, 2), groups=2)
    rng = np.random.default_rng(11)
    module, kernel = conv_kernel(x_shape, w_shape, attrs, dtype, [(6, 1, 1)], lambda b, y, c: b.op("lz.add", y, c))
    check(module, kernel, [data(rng, s, dtype) for s in (x_shape, w_shape, (6, 1, 1))], **tolerance(dtype))


# --- the kernels partition makes ---------------------------------------------------------------------

def test_scheduled_linear_layer_with_transposed_weight():
    """relu(x @ w.T + b): one matmul kernel reading w through the transpose, bias and relu fused."""
    def body(b, x, w, bias):
        return b.op("lz.relu", b.op("lz.add", b.op("lz.matmul", x, b.op("lz.transpose", w, perm=[1, 0])), bias))

    module = build([tensor((9, 20), "f32"), tensor((33, 20), "f32"), tensor((33,), "f32")], body)
    rng = np.random.default_rng(1)
    kernels = check_triton(module, [data(rng, s, "f32") for s in [(9, 20), (33, 20), (33,)]], **F32_TOL)
    assert [k.kind for k in kernels] == ["matmul"]
    assert "lz.transpose" in kernels[0].source and "lz.relu" in kernels[0].source


def test_scheduled_conv_bias_relu_and_residual():
    """relu(conv(x, w) + b) + r: one conv kernel, the whole epilogue on its accumulator."""
    def body(b, x, w, bias, r):
        y = b.op("lz.conv2d", x, w, strides=[2, 2], pads=[1, 1, 1, 1])
        return b.op("lz.add", b.op("lz.relu", b.op("lz.add", y, bias)), r)

    shapes = [(2, 3, 9, 9), (8, 3, 3, 3), (8, 1, 1), (2, 8, 5, 5)]
    module = build([tensor(s, "f32") for s in shapes], body)
    rng = np.random.default_rng(2)
    kernels = check_triton(module, [data(rng, s, "f32") for s in shapes], **F32_TOL)
    assert [k.kind for k in kernels] == ["conv"]


def test_scheduled_conv_batch_norm_relu_reads_the_reshaped_vectors():
    """relu(batch_norm(conv(x, w))) with the per-channel parameters as arguments (a traced model):
    a 1-D kernel folds them into a scale and a shift, and the conv kernel reads both through
    their reshapes to C x 1 x 1 in its epilogue (no reshape kernels)."""
    def body(b, x, w, scale, bias, mean, var):
        y = b.op("lz.conv2d", x, w, pads=[1, 1, 1, 1])
        return b.op("lz.relu", b.op("lz.batch_norm", y, scale, bias, mean, var))

    shapes = [(2, 3, 7, 7), (8, 3, 3, 3), (8,), (8,), (8,), (8,)]
    module = build([tensor(s, "f32") for s in shapes], body)
    rng = np.random.default_rng(5)
    inputs = [data(rng, s, "f32") for s in shapes]
    inputs[-1] = np.abs(inputs[-1])  # a variance
    kernels = check_triton(module, inputs, **F32_TOL)
    assert [k.kind for k in kernels] == ["elementwise", "conv"]
    assert kernels[1].name == "lz_fused_conv2d_reshape_mul_add_relu_1"
    assert "# epilogue on the accumulator: lz.reshape, lz.reshape, lz.mul, lz.add, lz.relu" in kernels[1].source


def test_conv_batch_norm_epilogue_kernel():
    x_shape, w_shape = (2, 8, 9, 9), (12, 4, 3, 3)
    attrs = attrs_of(strides=(2, 2), pads=(1, 1, 1, 1), groups=2)
    module, kernel = conv_kernel(x_shape, w_shape, attrs, "f32", [(12,), (12,)], batch_norm_epilogue)
    rng = np.random.default_rng(6)
    check(module, kernel, [data(rng, s, "f32") for s in (x_shape, w_shape, (12,), (12,))], **F32_TOL)


# --- launch configurations, names, support -----------------------------------------------------------

def test_small_problems_get_small_grids():
    module, kernel = matmul_kernel((3, 5), (5, 2))
    (config,) = lower_kernel(kernel).configs  # nothing larger fits
    assert config.grid == (1,)
    assert (config.constexprs["BLOCK_M"], config.constexprs["BLOCK_N"]) == (16, 16)


def test_large_problems_get_autotuning_candidates():
    gemm = Gemm(1, 4096, 4096, 4096, DotKind.of(F32))
    configs = gemm.configs()
    first = configs[0]
    assert (first.constexprs["BLOCK_M"], first.constexprs["BLOCK_N"], first.num_warps) == (128, 128, 8)
    assert first.grid == (32 * 32,)
    assert len(configs) >= 6 and len(set(map(repr, configs))) == len(configs)
    for c in configs:
        assert c.grid == (gemm.tiles(c.constexprs["BLOCK_M"], c.constexprs["BLOCK_N"]),)
    half = Gemm(8, 1024, 1024, 1024, DotKind.of(F16)).configs()
    assert half[0].constexprs["BLOCK_K"] == 64 and half[0].grid[0] % 8 == 0  # a batch of 8 GEMMs


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_every_autotuning_config_computes_the_same(dtype):
    """Each candidate config (block sizes, the grouped program order with a partial last group)
    gives the reference's answer, not only the first."""
    m, k, n = 300, 40, 96
    module, kernel = matmul_kernel((m, k), (k, n), dtype, [(n,)], lambda b, p, c: b.op("lz.add", p, c))
    configs = lower_kernel(kernel).configs
    assert len(configs) >= 4
    rng = np.random.default_rng(6)
    inputs = [data(rng, s, dtype) for s in [(m, k), (k, n), (n,)]]
    want = reference(module, inputs)[0]
    for config in configs:
        assert_matches(run_kernel(kernel, inputs, config)[0], want, **tolerance(dtype))


def test_int64_offsets_for_huge_buffers():
    """A buffer of 2^31 elements or more makes every offset int64 (lowered only: no data)."""
    module, kernel = matmul_kernel((65536, 32768), (32768, 16))
    assert "pid = tl.program_id(0).to(tl.int64)" in lower_kernel(kernel).source
    module, kernel = matmul_kernel((64, 32), (32, 16))
    assert "pid = tl.program_id(0)\n" in lower_kernel(kernel).source


def test_every_numeric_dtype_is_supported():
    for name in ("f16", "bf16", "f32", "f64", "i8", "i16", "i32", "i64", "ui8", "ui16", "ui32", "ui64"):
        module, kernel = matmul_kernel((4, 4), (4, 4), name)
        (op,) = [o for o in kernel.regions[0].blocks[0].ops if o.name == "lz.matmul"]
        assert contraction_unsupported_reason(op) is None
        assert unsupported_reason(op) is None


def test_kernel_source_reads_like_triton():
    module, kernel = matmul_kernel((2, 37, 50), (50, 70), "f32", [(70,)],
                                   lambda b, p, c: b.op("lz.relu", b.op("lz.add", p, c)))
    lowered = lower_kernel(kernel)
    source = lowered.source
    assert "lz.matmul 2x37x50 @ 50x70 -> 2x37x70 f32: 2 GEMMs of 37x50 @ 50x70" in source
    assert "epilogue on the accumulator: lz.add, lz.relu" in source
    for name in ("rows", "cols", "a_tile", "b_tile", "acc", "GROUP_M"):
        assert name in source
    assert 'input_precision="ieee"' in source
    assert lowered.flops >= 2 * 2 * 37 * 50 * 70
    assert tuple(lowered.configs[0].constexprs) == ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")


# --- PTX -------------------------------------------------------------------------------------------

PTX_KERNELS = {
    # name: (kernel, a regex of the product's instructions in the PTX)
    "matmul_f32_bias_relu": (lambda: matmul_kernel((37, 50), (50, 70), "f32", [(70,)],
                                                   lambda b, p, c: b.op("lz.relu", b.op("lz.add", p, c))),
                             r"fma\.rn\.f32"),  # input_precision="ieee": float32 FMAs
    "matmul_bf16_batched_transposed": (lambda: matmul_kernel((2, 9, 20), (2, 17, 20), "bf16", transpose=(1, (0, 2, 1))),
                                       r"mma[.\w]*\.bf16\.bf16"),  # tensor cores on the 16-bit tiles
    "matmul_bf16_wgmma": (lambda: matmul_kernel((128, 256), (256, 128), "bf16"),
                          r"wgmma\.mma_async[.\w]*\.f32\.bf16\.bf16"),  # Hopper's, bf16 operands in shared memory
    "matmul_f16": (lambda: matmul_kernel((33, 64), (64, 40), "f16"), r"mma[.\w]*\.f16"),
    "matmul_f64": (lambda: matmul_kernel((20, 16), (16, 20), "f64"), r"mma[.\w]*\.f64"),
    "matmul_i32": (lambda: matmul_kernel((20, 16), (16, 20), "i32"), r"mad\.lo\.s32"),
    "conv_f32_bias_relu": (lambda: conv_kernel((2, 8, 9, 9), (12, 4, 3, 3),
                                               attrs_of(strides=(2, 2), pads=(1, 1, 1, 1), groups=2), "f32",
                                               [(12, 1, 1)], lambda b, y, c: b.op("lz.relu", b.op("lz.add", y, c))),
                           r"fma\.rn\.f32"),
    "conv_f16_dilated": (lambda: conv_kernel((1, 4, 9, 9), (16, 4, 3, 3), attrs_of(dilations=(2, 2)), "f16"),
                         r"mma[.\w]*\.f16"),
}


@pytest.mark.parametrize("name", list(PTX_KERNELS))
def test_kernels_build_to_ptx(name):
    make, product = PTX_KERNELS[name]
    module, kernel = make()
    lowered = lower_kernel(kernel)
    ptx = jit.build_ptx(lowered)
    assert ".target sm_90" in ptx and f".entry {lowered.name}" in ptx
    assert re.search(product, ptx), f"no {product} in the PTX of {name}"
