"""Kernels that serve every row count (``lezero/codegen/row_generic.py``): the rows form of a kernel
(its leading dims collapsed into one), refused where a row reads another row, and the code the
probe accepts (layer norm, softmax, an activation, attention over batches, GEMMs with epilogues,
an embedding lookup with its bounds check) run at many row counts (1, odd, a partial last tile,
large) on every CPU of the cross-target matrix against the numpy reference of the kernel at that
size; code that follows the row count is refused.  Attention's sequence form (its code reads the
sequence length at run time, with and without a mask ``[b, 1, s, s]``) runs at many lengths (1, a
partial score tile, several key blocks) on every CPU of the matrix too."""
from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from codegen.kernel_testing import assert_matches, lz_attrs, make_kernel, reference, run_kernel
from lezero.codegen.llvm.backend import lower_kernel
from lezero.codegen.schedule import mark_constant_operands
from lezero.codegen.row_generic import (
    PROBE_ROWS,
    SEQUENCE_ATTR,
    SEQUENCE_PROBES,
    lower_row_generic,
    rows_form,
    sequence_form,
    sequence_length,
    widest_rows_form,
)
from lezero.ir import Block, Builder, FuncOp, FunctionType, Operation, Region
from lezero.ir.types import tensor
from lezero.runtime.kernel_cache import kernel_text

HIDDEN = 48  # not a multiple of any vector width


def layer_norm(b, x, gamma):
    """(x - mean) * rsqrt(var + eps) * gamma over the last dim, gamma a [HIDDEN] vector."""
    centered = b.op("lz.sub", x, b.op("lz.reduce_mean", x, axes=[2], keepdims=True))
    var = b.op("lz.reduce_mean", b.op("lz.mul", centered, centered), axes=[-1], keepdims=True)
    return b.op("lz.mul", b.op("lz.mul", centered, b.op("lz.rsqrt", b.op("lz.add", var, b.constant(np.float32(1e-5))))), gamma)


def softmax_rows(b, x):
    """softmax over the last dim, spelled as the decomposition fusion sees."""
    shifted = b.op("lz.sub", x, b.op("lz.reduce_max", x, axes=[-1], keepdims=True))
    e = b.op("lz.exp", shifted)
    return b.op("lz.div", e, b.op("lz.reduce_sum", e, axes=[-1], keepdims=True))


def gelu_bias(b, x, bias):
    return b.op("lz.gelu", b.op("lz.add", x, bias))


def attention_heads(b, q, k, v):
    """[batch, s, 2 x 16] projections split into 2 heads, attention per (batch, head), merged back."""
    batch, seq = q.type.shape[:2]

    def heads(x):
        return b.op("lz.transpose", b.op("lz.reshape", x, shape=[batch, seq, 2, 16]), perm=[0, 2, 1, 3])
    out = b.op("lz.attention", heads(q), heads(k), heads(v), scale=0.25)
    return b.op("lz.reshape", b.op("lz.transpose", out, perm=[0, 2, 1, 3]), shape=[batch, seq, 32])


def matmul_bias_gelu(b, x, w, bias):
    return b.op("lz.gelu", b.op("lz.add", b.op("lz.matmul", x, w), bias))


def matmul_residual(b, x, w, residual):
    return b.op("lz.add", b.op("lz.matmul", x, w), residual)


VOCAB = 50


def embedding_layer_norm(b, table, ids, gamma):
    """BERT's first kernel: rows of a table looked up by int64 ids (bounds-checked), layer-normed."""
    return layer_norm(b, b.op("lz.gather", table, ids, axis=0), gamma)


BATCH, SEQ = 3, 5
# name: (body, argument types at [BATCH, SEQ, ...], kind, how many leading dims are the rows)
KERNELS = {
    "layer_norm": (layer_norm, [((BATCH, SEQ, HIDDEN), "f32"), ((HIDDEN,), "f32")], "reduction", 2),
    "softmax": (softmax_rows, [((BATCH, SEQ, HIDDEN), "f32")], "reduction", 2),
    "gelu_bias": (gelu_bias, [((BATCH, SEQ, 4 * HIDDEN), "f32"), ((4 * HIDDEN,), "f32")], "elementwise", 2),
    "attention": (attention_heads, [((BATCH, SEQ, 32), "f32")] * 3, "attention", 1),
    "matmul": (lambda b, x, w: b.op("lz.matmul", x, w), [((BATCH, SEQ, HIDDEN), "f32"), ((HIDDEN, 40), "f32")],
               "matmul", 2),
    "matmul_bias_gelu": (matmul_bias_gelu, [((BATCH, SEQ, HIDDEN), "f32"), ((HIDDEN, 200), "f32"), ((200,), "f32")],
                         "matmul", 2),
    # K = 700: several K blocks, the partial sums wait in the result
    "matmul_residual": (matmul_residual, [((BATCH, SEQ, 700), "f32"), ((700, HIDDEN), "f32"),
                                          ((BATCH, SEQ, HIDDEN), "f32")], "matmul", 2),
    "embedding": (embedding_layer_norm, [((VOCAB, HIDDEN), "f32"), ((BATCH, SEQ), "i64"), ((HIDDEN,), "f32")],
                  "reduction", 2),
}
ROWS = (1, 2, 7, 64, 255)  # a partial register tile, several M blocks
CASES = {f"{name}_r{rows}": (name, rows) for name in KERNELS for rows in ROWS}


def kernel_named(name, shapes=None):
    body, types, kind, _ = KERNELS[name]
    return make_kernel(shapes or types, body, kind=kind)


def test_rows_form_collapses_the_leading_dims():
    _, kernel = kernel_named("layer_norm")
    prefix, _ = widest_rows_form(kernel)
    assert prefix == (BATCH, SEQ)
    form = rows_form(kernel, prefix, 60)
    assert [tuple(v.type.shape) for v in form.operands] == [(60, HIDDEN), (HIDDEN,)]
    assert tuple(form.results[0].type.shape) == (60, HIDDEN)
    (first_mean, *_) = [op for op in form.regions[0].blocks[0].ops if op.name == "lz.reduce_mean"]
    assert list(first_mean.definition.attrs(first_mean).axes) == [1]  # axis 2 of [b, s, h] is axis 1 of [r, h]
    _, attention = kernel_named("attention")
    assert widest_rows_form(attention)[0] == (BATCH,)  # the heads split s: only the batch is rows


@pytest.mark.parametrize("body", [
    lambda b, x: b.op("lz.reduce_sum", x, axes=[0, 2], keepdims=True),   # sums over rows
    lambda b, x: b.op("lz.transpose", x, perm=[1, 0, 2]),                 # swaps the row dims
    lambda b, x: b.op("lz.cumulative", x, axis=0, combine="add"),         # a scan along the rows
], ids=["reduce_rows", "transpose_rows", "scan_rows"])
def test_a_kernel_that_mixes_rows_has_no_rows_form(body):
    _, kernel = make_kernel([((BATCH, SEQ, HIDDEN), "f32")], body, kind="single")
    assert widest_rows_form(kernel) is None


@dataclasses.dataclass
class Lowered:
    llvm_ir: str
    work_items: int


@pytest.mark.parametrize("lowering", [
    lambda op: Lowered(f"tiles of {op.results[0].type.shape[0]} rows", 1),      # the IR names the rows
    lambda op: Lowered("same code", -(-op.results[0].type.shape[0] // 4)),     # 4 rows per work item
], ids=["names_rows", "rows_per_item"])
def test_code_that_follows_the_row_count_is_refused(lowering):
    _, kernel = kernel_named("layer_norm")
    assert lower_row_generic(kernel, (BATCH, SEQ), lowering) is None


@functools.cache
def probed(name, cpu):
    """``lower_row_generic`` of kernel ``name`` for ``cpu`` (once per kernel and CPU: the cases share it)."""
    _, kernel = kernel_named(name)
    return lower_row_generic(kernel, (BATCH, SEQ)[:KERNELS[name][3]], lambda op: lower_kernel(op, cpu=cpu))


@pytest.mark.cross_target(cases=CASES, group=lambda case: case[0])
def test_row_generic_code_matches_the_reference_at_every_row_count(cpu, case):
    name, rows = case
    _, types, _, dims = KERNELS[name]
    found = probed(name, cpu)
    assert found is not None, f"{name}: its code should serve every row count"
    shape, lowered = found
    assert lowered.work_items == shape.items_per_row * PROBE_ROWS[0]
    # the same code at `rows` rows: [1, rows, ...] (the rows of b x s), or a batch of `rows`
    lead = (1, rows) if dims == 2 else (rows, SEQ)
    prefix = lead[:dims]
    sized = [(lead + s[2:] if s[:2] == (BATCH, SEQ) else s, dtype) for s, dtype in types]
    module, real = kernel_named(name, sized)
    assert widest_rows_form(real)[0] == prefix
    rng = np.random.default_rng(rows)
    inputs = [rng.integers(-VOCAB, VOCAB, s) if dtype == "i64" else rng.standard_normal(s).astype(np.float32)
              for s, dtype in sized]
    here = dataclasses.replace(lowered, work_items=shape.items_per_row * rows,
                               operand_types=tuple(v.type for v in real.operands),
                               result_types=tuple(r.type for r in real.results))
    got = run_kernel(real, inputs, 3, lowered=here, cpu=cpu)
    (want,) = reference(module, inputs)
    # (sums of 700 products in another order than numpy's: error relative to the output's scale)
    assert_matches(got[0], want, rtol=2e-5, atol=1e-6 * max(1.0, float(np.abs(want).max())))
    if name == "embedding":  # the bounds check of the code probed at other row counts
        inputs[1].flat[-1] = VOCAB
        with pytest.raises(IndexError, match=f"index {VOCAB} is out of range for axis 0 of size {VOCAB}"):
            run_kernel(real, inputs, 3, lowered=here, cpu=cpu)


def test_a_weight_is_not_rows_at_batch_one():
    """At batch 1 a constant [1, s, h] (BERT's position rows) could be read as the rows or as
    broadcast along them: it is a weight, so it broadcasts, and batch 1 probes the rows form every
    other batch has (not one no other batch shares)."""
    def kernel_at(batch):
        func = FuncOp("f", FunctionType([tensor((batch, SEQ, HIDDEN), "f32")], []))
        fb = Builder.at_end(func.entry_block)
        position = fb.constant(np.ones((1, SEQ, HIDDEN), np.float32))
        block = Block([tensor((batch, SEQ, HIDDEN), "f32"), tensor((1, SEQ, HIDDEN), "f32")])
        b = Builder.at_end(block)
        b.create("lz.yield", [b.op("lz.add", *block.args)], result_types=[])
        kernel = Operation("lz.kernel", [func.arguments[0], position], [tensor((batch, SEQ, HIDDEN), "f32")],
                           lz_attrs(kind="elementwise", name="k"), [Region([block])])
        fb.insert(kernel)
        return kernel

    forms = {batch: widest_rows_form(kernel_at(batch)) for batch in (1, 2, 3)}
    assert [prefix for prefix, _ in forms.values()] == [(1,), (2,), (3,)]
    assert len({kernel_text(form) for _, form in forms.values()}) == 1
    assert [tuple(a.type.shape) for a in forms[1][1].operands] == [(PROBE_ROWS[0], SEQ, HIDDEN), (1, SEQ, HIDDEN)]


def masked_attention_heads(b, q, k, v, mask):
    """``attention_heads`` with an additive mask ``[batch, 1, s, s]`` (BERT's), broadcast over the heads."""
    batch, seq = q.type.shape[:2]

    def heads(x):
        return b.op("lz.transpose", b.op("lz.reshape", x, shape=[batch, seq, 2, 16]), perm=[0, 2, 1, 3])
    out = b.op("lz.attention", heads(q), heads(k), heads(v), mask, scale=0.25)
    return b.op("lz.reshape", b.op("lz.transpose", out, perm=[0, 2, 1, 3]), shape=[batch, seq, 32])


def fused_projection_attention(b, qkv, mask):
    """GPT-2's: one projection ``[b x s, 3 x 32]`` reshaped to ``[b, s, 96]`` and sliced into q, k
    and v, a mask ``[b, 1, s, s]``."""
    batch, seq = mask.type.shape[0], mask.type.shape[-1]
    rows = b.op("lz.reshape", qkv, shape=[batch, seq, 96])
    q, k, v = (b.op("lz.slice", rows, starts=[32 * i], ends=[32 * i + 32], axes=[2]) for i in range(3))
    return masked_attention_heads(b, q, k, v, mask)


SEQUENCE_KERNELS = {
    "attention": (attention_heads, lambda batch, seq: [((batch, seq, 32), "f32")] * 3),
    "masked_attention": (masked_attention_heads,
                         lambda batch, seq: [((batch, seq, 32), "f32")] * 3 + [((batch, 1, seq, seq), "f32")]),
    "fused_projection": (fused_projection_attention,
                         lambda batch, seq: [((batch * seq, 96), "f32"), ((batch, 1, seq, seq), "f32")]),
}
# 1, a partial score tile, several key blocks (256 keys each) with a partial last one
LENGTHS = (1, 6, 17, 300)
SEQUENCE_CASES = {f"{name}_s{length}": (name, length) for name in SEQUENCE_KERNELS for length in LENGTHS}


@functools.cache
def probed_sequence(name, cpu):
    """``lower_row_generic`` of sequence kernel ``name`` at [BATCH, SEQ] with its sequence form."""
    body, types = SEQUENCE_KERNELS[name]
    _, kernel = make_kernel(types(BATCH, SEQ), body, kind="attention")
    return lower_row_generic(kernel, (BATCH,), lambda op: lower_kernel(op, cpu=cpu), sequence_length(kernel))


def test_an_empty_prefix_is_not_divided_by():
    """A kernel whose result has no rows (ONNX's slice_start_out_of_bounds: [20, 10, 5] sliced to
    [20, 0, 5]): its rows form is looked for without dividing by the row count, and there is none
    (row i of the result is not row i of the operand)."""
    _, kernel = make_kernel([((20, 10, 5), "f32")],
                            lambda b, x: b.op("lz.slice", x, starts=[1000], ends=[1000], axes=[1]), kind="single")
    assert tuple(kernel.results[0].type.shape) == (20, 0, 5)
    found = widest_rows_form(kernel)
    assert found is not None and found[0] == (20,)


def test_the_sequence_form_resizes_every_dim_of_the_length():
    body, types = SEQUENCE_KERNELS["masked_attention"]
    _, kernel = make_kernel(types(BATCH, SEQ), body, kind="attention")
    assert sequence_length(kernel) == SEQ
    size = SEQUENCE_PROBES[0]
    form = sequence_form(kernel, SEQ, size)
    assert form.attributes[SEQUENCE_ATTR].value == size
    assert [tuple(v.type.shape) for v in form.operands] == [(BATCH, size, 32)] * 3 + [(BATCH, 1, size, size)]
    reshapes = [op for op in form.regions[0].blocks[0].ops if op.name == "lz.reshape"]
    assert list(reshapes[0].definition.attrs(reshapes[0]).shape) == [BATCH, size, 2, 16]
    assert sequence_form(form, size, SEQUENCE_PROBES[1]) is not None
    assert sequence_form(kernel, SEQ, 16) is None  # a dim is 16 already (the heads' width)


@pytest.mark.cross_target(cases=SEQUENCE_CASES, group=lambda case: case[0])
def test_sequence_generic_attention_matches_the_reference_at_every_length(cpu, case):
    name, length = case
    body, types = SEQUENCE_KERNELS[name]
    found = probed_sequence(name, cpu)
    assert found is not None, f"{name}: its code should serve every row count and sequence length"
    shape, lowered = found
    rows = 2
    sized = types(rows, length)
    module, real = make_kernel(sized, body, kind="attention")
    rng = np.random.default_rng(length)
    inputs = [rng.standard_normal(s).astype(np.float32) for s, _ in sized]
    here = dataclasses.replace(lowered, work_items=shape.items_per_row * rows,
                               operand_types=tuple(v.type for v in real.operands),
                               result_types=tuple(r.type for r in real.results))
    got = run_kernel(real, inputs, 3, lowered=here, cpu=cpu, sizes=[length])
    (want,) = reference(module, inputs)
    assert_matches(got[0], want, rtol=2e-5, atol=1e-5)


@pytest.mark.cross_target(cases={"qkv_768": 768, "narrow_40": 40})
def test_a_matmul_over_a_constant_weight_serves_every_row_count(cpu, case):
    """GPT-2's fused q/k/v projection: rows x 256 @ a constant 256 x 768 that the plan packs once.
    Its register tile for a pre-packed B (contraction_gemm.prepacked_b_tile) follows the row count
    in a static kernel; in a rows form it must not (it made the code at 4096 and 4099 rows differ,
    so every new batch x sequence compiled the GEMM again)."""
    func = FuncOp("f", FunctionType([tensor((BATCH, SEQ, 256), "f32")], []))
    fb = Builder.at_end(func.entry_block)
    weight = fb.constant(np.random.default_rng(0).standard_normal((256, case)).astype(np.float32))
    block = Block([tensor((BATCH, SEQ, 256), "f32"), tensor((256, case), "f32")])
    b = Builder.at_end(block)
    b.create("lz.yield", [b.op("lz.matmul", *block.args)], result_types=[])
    kernel = Operation("lz.kernel", [func.arguments[0], weight], [tensor((BATCH, SEQ, case), "f32")],
                       lz_attrs(kind="matmul", name="k"), [Region([block])])
    fb.insert(kernel)
    fb.create("func.return", kernel.results, result_types=[])
    func.update_function_type()
    mark_constant_operands(func)
    assert kernel.attributes["constant_operands"]
    assert lower_row_generic(kernel, (BATCH, SEQ), lambda op: lower_kernel(op, cpu=cpu)) is not None
