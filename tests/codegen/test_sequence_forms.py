"""Elementwise and reduction kernels whose code reads the sequence length at run time (issue 11):
a sequence form (``row_generic.sequence_form``) of the transformer exports' per-length kernels --
the embedding plus position rows and its layer norm, the attention mask from the padding mask and a
causal triangle (or an all-true constant), the mask's cast -- is lowered with its dims of the length
as ``affine.RunTimeSize`` ints.  The two-probe proof keeps it, and the one compiled code gives the
reference's answer at many (rows, length) pairs; code that names the length (a mean over the
sequence axis divides by it) is refused."""
from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from codegen.kernel_testing import assert_matches, make_kernel, reference, run_kernel
from lezero.codegen.affine import RunTimeSize
from lezero.codegen import row_generic
from lezero.codegen.llvm.backend import lower_kernel
from lezero.codegen.row_generic import (DYNAMIC_SIZES_ATTR, MANY_SHAPES_ATTR, lower_row_generic, rows_form,
                                        sequence_lengths, widest_rows_form)
from lezero.ir.attributes import UnitAttr, i64_array

HIDDEN, VOCAB = 40, 30
BATCH, SEQ = 3, 5


def layer_norm(b, x):
    centered = b.op("lz.sub", x, b.op("lz.reduce_mean", x, axes=[2], keepdims=True))
    var = b.op("lz.reduce_mean", b.op("lz.mul", centered, centered), axes=[2], keepdims=True)
    return b.op("lz.mul", centered, b.op("lz.rsqrt", b.op("lz.add", var, b.constant(np.float32(1e-5)))))


def embedding(b, table, ids, positions):
    """Token rows looked up by ids (bounds-checked), the position rows ``[1, s, h]`` added, layer-normed."""
    x = b.op("lz.add", b.op("lz.gather", table, ids, axis=0), positions)
    return [x, layer_norm(b, x)]


def causal_mask(b, mask, triangle):
    """GPT-2's: the padding mask ``[b, s]`` and a causal ``[1, s, s]``, as 0 or the lowest float."""
    batch, seq = mask.type.shape
    both = b.op("lz.and", triangle, b.op("lz.reshape", mask, shape=[batch, 1, seq]))
    return b.op("lz.select", both, b.constant(np.float32(0)), b.constant(np.float32(-3.4028235e38)))


def padding_mask(b, mask):
    """BERT's: the padding mask ``[b, s]`` and an all-true ``[1, 1, s, 1]`` constant (a splat)."""
    batch, seq = mask.type.shape
    ones = b.constant(np.ones((1, 1, seq, 1), np.bool_))
    both = b.op("lz.and", ones, b.op("lz.reshape", mask, shape=[batch, 1, 1, seq]))
    return b.op("lz.select", both, b.constant(np.float32(0)), b.constant(np.float32(-3.4028235e38)))


def mask_cast(b, ids):
    return b.op("lz.cast", ids, to="i1")


# name: (body, argument types at (batch, seq), kind, work items per row as (c, power of the length))
KERNELS = {
    "embedding": (embedding, lambda batch, seq: [((VOCAB, HIDDEN), "f32"), ((batch, seq), "i64"),
                                                 ((1, seq, HIDDEN), "f32")], "reduction", (1, 1)),
    "causal_mask": (causal_mask, lambda batch, seq: [((batch, seq), "i1"), ((1, seq, seq), "i1")], "elementwise",
                    (1, 1)),
    "padding_mask": (padding_mask, lambda batch, seq: [((batch, seq), "i1")], "elementwise", (1, 1)),
    "mask_cast": (mask_cast, lambda batch, seq: [((batch, seq), "i64")], "elementwise", (1, 0)),
}
# (rows, length): a length of 1, short and odd ones, one past a vector of 16 and a long one
RUNS = [(2, 1), (1, 7), (4, 17), (2, 64), (3, 130)]
CASES = {f"{name}_r{rows}_s{length}": (name, rows, length) for name in KERNELS for rows, length in RUNS}


def inputs_for(name, types, rng):
    out = []
    for shape, dtype in types:
        if dtype == "i64":
            out.append(rng.integers(0, VOCAB if name == "embedding" else 2, shape).astype(np.int64))
        elif dtype == "i1":
            out.append(rng.random(shape) < 0.7)
        else:
            out.append(rng.standard_normal(shape).astype(np.float32))
    return out


@functools.cache
def probed(name, cpu):
    """``lower_row_generic`` of ``name`` at [BATCH, SEQ] over rows of the batch, with its sequence form."""
    body, types, kind, _ = KERNELS[name]
    _, kernel = make_kernel(types(BATCH, SEQ), body, kind=kind)
    return lower_row_generic(kernel, (BATCH,), lambda op: lower_kernel(op, cpu=cpu), SEQ)


@pytest.mark.cross_target(cases=CASES, group=lambda case: case[0])
def test_one_code_matches_the_reference_at_every_length(cpu, case):
    name, rows, length = case
    body, types, kind, per_row = KERNELS[name]
    found = probed(name, cpu)
    assert found is not None, f"{name}: its code should serve every row count and sequence length"
    shape, lowered = found
    assert (shape.items_per_row, shape.length_power) == per_row
    sized = types(rows, length)
    module, real = make_kernel(sized, body, kind=kind)
    inputs = inputs_for(name, sized, np.random.default_rng(rows * 1000 + length))
    here = dataclasses.replace(lowered, work_items=shape.work_items(rows, (length,)),
                               operand_types=tuple(v.type for v in real.operands),
                               result_types=tuple(r.type for r in real.results))
    got = run_kernel(real, inputs, 3, lowered=here, cpu=cpu, sizes=[length])
    for g, want in zip(got, reference(module, inputs)):
        assert_matches(g, want, rtol=2e-5, atol=1e-5)


def test_the_embedding_code_checks_its_ids_at_every_length():
    """The gather's bounds check in the sequence form's code names the kernel's op."""
    body, types, kind, _ = KERNELS["embedding"]
    shape, lowered = probed("embedding", None)
    sized = types(2, 9)
    _, real = make_kernel(sized, body, kind=kind)
    inputs = inputs_for("embedding", sized, np.random.default_rng(0))
    inputs[1][1, 8] = VOCAB
    here = dataclasses.replace(lowered, work_items=shape.work_items(2, (9,)),
                               operand_types=tuple(v.type for v in real.operands),
                               result_types=tuple(r.type for r in real.results))
    with pytest.raises(IndexError, match=f"index {VOCAB} is out of range for axis 0 of size {VOCAB}"):
        run_kernel(real, inputs, lowered=here, sizes=[9])


def test_code_that_names_the_length_is_refused():
    """A mean over the sequence axis divides by the length and blocks its loop by it: the code at
    the two probe lengths differs, so the kernel stays per length."""
    _, kernel = make_kernel([((BATCH, SEQ, HIDDEN), "f32")],
                            lambda b, x: b.op("lz.reduce_mean", x, axes=[1], keepdims=True), kind="reduction")
    assert lower_row_generic(kernel, (BATCH,), lambda op: lower_kernel(op), SEQ) is None


def test_the_lengths_a_kernel_tries_are_its_functions_dynamic_sizes_past_the_rows(monkeypatch):
    module, kernel = make_kernel(KERNELS["embedding"][1](BATCH, SEQ), embedding, kind="reduction")
    func = module.lookup("f")
    form = rows_form(kernel, (BATCH,), 4099)
    assert sequence_lengths(kernel, (BATCH,), form) == []  # a function of one shape
    func.attributes[MANY_SHAPES_ATTR] = UnitAttr()
    func.attributes[DYNAMIC_SIZES_ATTR] = i64_array([BATCH, SEQ])
    assert sequence_lengths(kernel, (BATCH,), form) == [SEQ]
    assert sequence_lengths(kernel, (BATCH, 1), form) == [SEQ]  # a unit dim in the rows is no dynamic dim
    assert sequence_lengths(kernel, (BATCH, SEQ), form) == []  # rows of batch x sequence: a dim of 5 is not it
    func.attributes[DYNAMIC_SIZES_ATTR] = i64_array([1, SEQ])
    assert sequence_lengths(kernel, (1, SEQ), form) == [] and sequence_lengths(kernel, (1, 1), form) == [SEQ]
    monkeypatch.setattr(row_generic, "MAX_RUN_TIME_LENGTH", SEQ - 1)  # past the probes' bounds: per length
    assert sequence_lengths(kernel, (1, 1), form) == []


def test_a_run_time_size_keeps_its_polynomial():
    s = RunTimeSize(40)
    assert (s * 256, s * s + 3 * s - 1, (s * 256) // 128) == (10240, 1719, 80)
    assert (s * s + 3 * s - 1).coefs == (-1, 3, 1) and ((s * 256) // 128).coefs == (0, 2)
    assert type(s - s) is int and type(s * 256 // 3) is int  # no polynomial: a plain int
    assert str(s * 2) == "80"


def test_a_mask_first_seen_at_batch_one_serves_every_batch_and_length():
    """At batch 1 the padding mask's all-true ``[1, 1, s, 1]`` constant starts with the rows' dims
    by chance: it is a weight, broadcast along the rows, so the kernel still has a rows form over
    the batch, and its sequence code serves (3, 17)."""
    body, types, kind, _ = KERNELS["padding_mask"]
    _, kernel = make_kernel(types(1, SEQ), body, kind=kind)
    prefix, _ = widest_rows_form(kernel)
    assert prefix == (1,)
    found = lower_row_generic(kernel, prefix, lambda op: lower_kernel(op), SEQ)
    assert found is not None
    shape, lowered = found
    sized = types(3, 17)
    module, real = make_kernel(sized, body, kind=kind)
    inputs = inputs_for("padding_mask", sized, np.random.default_rng(3))
    here = dataclasses.replace(lowered, work_items=shape.work_items(3, (17,)),
                               operand_types=tuple(v.type for v in real.operands),
                               result_types=tuple(r.type for r in real.results))
    (got,) = run_kernel(real, inputs, 2, lowered=here, sizes=[17])
    assert_matches(got, reference(module, inputs)[0])
