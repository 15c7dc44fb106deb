"""fuse-attention (``lezero/passes/attention.py``): the exports' attention chains become one
``attention`` kernel that reads q, k, v through their slices, reshapes and transposes and writes
the layout the output projection reads; what it must leave alone stays unfused; compiled, every
chain matches the interpreter on the unfused graph."""
from __future__ import annotations

import logging
import re

import numpy as np
import pytest

import lezero
from lezero.codegen.schedule import schedule
from lezero.ir.builder import Builder
from lezero.ir.core import FuncOp, ModuleOp
from lezero.ir.interpreter import interpret
from lezero.ir.types import F32, F64, I1, FunctionType, TensorType
from lezero.passes import run_pipeline
from lezero.passes.attention import view_of


def chain(b, s, h, d, *, mask=None, scaling="mul", dtype=F32, share_softmax=False, out_layout=True, select=None):
    """``@f(x: [b, s, 3 h d][, mask: [b, 1, s, s]])`` as the exports write attention: the QKV
    projection's output sliced, reshaped to heads, transposed, q k^T, scaled (``mul``, ``div``, or
    ``split``: q and k^T scaled apart, as ViT's export), masked, softmax, times v, back to
    ``[b, s, h d]`` (``out_layout``).  ``select``: a causal mask as a select of the scores and a
    fill (``"keep"``: ``select(keep, s, fill)``, ``"hide"``: ``select(hide, fill, s)``), the
    condition a ``[1, 1, s, s]`` argument."""
    args = [TensorType((b, s, 3 * h * d), dtype)] + ([TensorType(mask, dtype)] if mask else []) + \
        ([TensorType((1, 1, s, s), I1)] if select else [])
    func = FuncOp("f", FunctionType(args, []))
    bb = Builder.at_end(func.entry_block)
    x = func.arguments[0]
    heads = []
    for i in range(3):
        part = bb.op("lz.slice", x, starts=[i * h * d], ends=[(i + 1) * h * d], axes=[2])
        heads.append(bb.op("lz.reshape", part, shape=[b, s, h, d]))
    q = bb.op("lz.transpose", heads[0], perm=[0, 2, 1, 3])
    kt = bb.op("lz.transpose", heads[1], perm=[0, 2, 3, 1])
    v = bb.op("lz.transpose", heads[2], perm=[0, 2, 1, 3])

    def constant(value):
        return bb.constant(np.asarray(value, dtype.numpy_dtype), TensorType((), dtype))

    if scaling == "split":
        q = bb.op("lz.mul", q, constant(d ** -0.25))
        kt = bb.op("lz.mul", kt, constant(d ** -0.25))
    scores = bb.op("lz.matmul", q, kt)
    if scaling == "mul":
        scores = bb.op("lz.mul", scores, constant(d ** -0.5))
    elif scaling == "div":
        scores = bb.op("lz.div", scores, constant(d ** 0.5))
    if select == "keep":
        scores = bb.op("lz.select", func.arguments[-1], scores, constant(np.finfo(np.float32).min))
    elif select == "hide":
        scores = bb.op("lz.select", func.arguments[-1], constant(-np.inf), scores)
    if mask:  # after the select, as GPT-2's export adds the padding mask to the causally masked scores
        scores = bb.op("lz.add", scores, func.arguments[1])
    p = bb.op("lz.softmax", scores, axis=-1)
    out = bb.op("lz.matmul", p, v)
    if out_layout:
        out = bb.op("lz.reshape", bb.op("lz.transpose", out, perm=[0, 2, 1, 3]), shape=[b, s, h * d])
    results = [out, p] if share_softmax else [out]
    bb.create("func.return", results, result_types=[])
    func.update_function_type()
    return ModuleOp([func])


def kernel_kinds(module) -> list[str]:
    scheduled = schedule(run_pipeline(module, "shape-infer"))
    return [op.attributes["kind"].value for op in scheduled.functions[0].entry_block.ops if op.name == "lz.kernel"]


def inputs(module, seed=0, hide=False):
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(a.type.shape).astype(a.type.element_type.numpy_dtype)
              for a in module.functions[0].arguments]
    args = module.functions[0].arguments
    if args[-1].type.element_type == I1:  # a causal select's condition: keep keys up to the query (or hide the rest)
        s = args[-1].type.shape[-1]
        keep = np.tril(np.ones((s, s), bool)).reshape(1, 1, s, s)
        arrays[-1] = ~keep if hide else keep
    if len(arrays) >= 2 and arrays[1].dtype != bool:  # an additive padding mask: the lowest float on the last third
        s = arrays[1].shape[-1]
        arrays[1] = np.where(np.arange(s) >= s - s // 3, np.finfo(arrays[1].dtype).min, 0).astype(arrays[1].dtype) \
            * np.ones(arrays[1].shape, arrays[1].dtype)
    return arrays


CASES = {
    "bert": {"b": 2, "s": 64, "h": 4, "d": 64, "mask": (2, 1, 1, 64)},
    "gpt2_full_mask": {"b": 2, "s": 33, "h": 2, "d": 64, "mask": (2, 1, 33, 33)},
    "vit_split_scale": {"b": 1, "s": 197, "h": 3, "d": 64, "scaling": "split"},
    "div_scale_no_output_transpose": {"b": 1, "s": 7, "h": 2, "d": 80, "scaling": "div", "out_layout": False},
    "one_token": {"b": 3, "s": 1, "h": 2, "d": 32, "mask": (3, 1, 1, 1)},
    "causal_select_keep": {"b": 2, "s": 40, "h": 2, "d": 64, "select": "keep"},
    "causal_select_hide_and_padding": {"b": 2, "s": 40, "h": 2, "d": 64, "mask": (2, 1, 1, 40), "select": "hide"},
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_the_chain_is_one_kernel_reading_its_operands_in_place_and_matches_the_unfused_graph(case):
    module = chain(**CASES[case])
    select = CASES[case].get("select")
    kinds = kernel_kinds(chain(**CASES[case]))
    assert kinds[-1:] == ["attention"] and kinds.count("attention") == 1
    # a select's mask: elementwise kernels make the additive mask the attention kernel reads
    assert set(kinds[:-1]) == ({"elementwise"} if select else set())
    arrays = inputs(module, hide=select == "hide")
    want = interpret(module, "f", *arrays)
    got = lezero.compile(chain(**CASES[case]), "f")(*arrays)
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=2e-6 * scale)


def test_a_softmax_read_elsewhere_is_not_fused():
    """An autodiff graph keeps the softmax for its backward pass: the scores are needed anyway."""
    assert "attention" not in kernel_kinds(chain(1, 16, 2, 32, share_softmax=True))


def test_float64_stays_unfused():
    assert "attention" not in kernel_kinds(chain(1, 16, 2, 32, dtype=F64))


def test_other_targets_get_the_unfused_chain():
    module = run_pipeline(chain(1, 16, 2, 32), "shape-infer")
    scheduled = schedule(module, target="cuda")
    kinds = {op.attributes["kind"].value for op in scheduled.functions[0].entry_block.ops if op.name == "lz.kernel"}
    assert "attention" not in kinds and "matmul" in kinds


def test_views_read_memory_where_numpy_views_do():
    """``view_of`` against numpy on chains of transposes, slices and reshapes of an arange: the
    same elements where numpy makes a view, None exactly where numpy's reshape must copy."""
    rng = np.random.default_rng(0)
    for _ in range(300):
        shape = tuple(int(n) for n in rng.integers(1, 4, rng.integers(2, 5)))
        func = FuncOp("f", FunctionType([TensorType(shape, F32)], []))
        b = Builder.at_end(func.entry_block)
        value, array, copied = func.arguments[0], np.arange(int(np.prod(shape))).reshape(shape), False
        for _ in range(3):
            step = rng.integers(3)
            if step == 0:
                perm = [int(p) for p in rng.permutation(array.ndim)]
                value, array = b.op("lz.transpose", value, perm=perm), array.transpose(perm)
            elif step == 1:
                axis = int(rng.integers(array.ndim))
                start = int(rng.integers(array.shape[axis]))
                value = b.op("lz.slice", value, starts=[start], ends=[array.shape[axis]], axes=[axis])
                array = array[(slice(None),) * axis + (slice(start, None),)]
            else:
                new = [int(np.prod(array.shape))] if rng.random() < 0.3 else list(rng.permutation(array.shape))
                value, before, array = b.op("lz.reshape", value, shape=new), array, array.reshape(new)
                copied = copied or not np.shares_memory(before, array)
        view = view_of(value, func.arguments[0])
        assert (view is None) == copied
        if view is not None:
            offset, strides = view
            positions = offset + sum(np.arange(n).reshape([-1 if k == d else 1 for k in range(array.ndim)]) * s
                                     for d, (n, s) in enumerate(zip(array.shape, strides)))
            np.testing.assert_array_equal(np.broadcast_to(positions, array.shape), array)


def test_debug_fusion_logs_both_estimates(caplog):
    with caplog.at_level(logging.DEBUG, logger="lezero.fusion"):
        run_pipeline(chain(2, 64, 4, 64, mask=(2, 1, 1, 64)), "shape-infer,fuse-attention")
    (line,) = [r.getMessage() for r in caplog.records if "attention" in r.getMessage()]
    fused, unfused = (float(x) for x in re.findall(r"([0-9.]+) us", line))
    assert line.startswith("fusing attention") and fused < unfused, line


def projected_chain(b, s, h, d, *, bias: bool, same_input: bool = True):
    """BERT's self-attention from its input: q, k, v three Linears of ``x`` (``same_input=False``:
    k of another activation ``y``), each reshaped to heads and transposed, then the chain."""
    args = [TensorType((b, s, h * d), F32)] * (1 if same_input else 2)
    func = FuncOp("f", FunctionType(args, []))
    bb = Builder.at_end(func.entry_block)
    rng = np.random.default_rng(1)
    heads = []
    for i, perm in enumerate(([0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3])):
        x = func.arguments[1 if i == 1 and not same_input else 0]
        y = bb.op("lz.matmul", x, bb.constant((rng.standard_normal((h * d, h * d)) / 16).astype(np.float32)))
        if bias:
            y = bb.op("lz.add", y, bb.constant(rng.standard_normal(h * d).astype(np.float32)))
        heads.append(bb.op("lz.transpose", bb.op("lz.reshape", y, shape=[b, s, h, d]), perm=perm))
    scores = bb.op("lz.mul", bb.op("lz.matmul", heads[0], heads[1]),
                   bb.constant(np.asarray(d ** -0.5, np.float32), TensorType((), F32)))
    out = bb.op("lz.matmul", bb.op("lz.softmax", scores, axis=-1), heads[2])
    bb.create("func.return", [bb.op("lz.reshape", bb.op("lz.transpose", out, perm=[0, 2, 1, 3]), shape=[b, s, h * d])],
              result_types=[])
    func.update_function_type()
    return ModuleOp([func])


@pytest.mark.parametrize("bias", [False, True])
def test_three_projections_of_one_input_are_one_matmul(bias):
    """q, k, v of one activation by three constant weights: one GEMM by the weights side by side
    (its bias too), whose product the attention kernel reads through slices."""
    kinds = kernel_kinds(projected_chain(2, 24, 2, 32, bias=bias))
    assert kinds == ["matmul", "attention"]
    module = projected_chain(2, 24, 2, 32, bias=bias)
    arrays = inputs(module)
    want = interpret(module, "f", *arrays)
    got = lezero.compile(projected_chain(2, 24, 2, 32, bias=bias), "f")(*arrays)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-5, atol=2e-6 * float(np.abs(want).max()))


def test_projections_of_two_inputs_stay_apart():
    kinds = kernel_kinds(projected_chain(2, 24, 2, 32, bias=True, same_input=False))
    assert kinds.count("matmul") == 3 and kinds[-1] == "attention"
