"""canonicalize: each rule of the table on a small function (the IR after, and the interpreter's
results before and after), the result-type guard, and a property test over random chains."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

from lezero.ir import F16, F32, F64, I1, I8, I32, I64, UI8, BF16, tensor
from lezero.ir.types import I16
from lezero.passes import run_pipeline
from lezero.passes.canonicalize import CANONICALIZATION_RULES, cast_is_lossless
from pass_testing import build, op_names, run_and_compare

F = tensor((2, 3), "f32")
I = tensor((2, 3), "i32")
B = tensor((2, 3), "i1")


def f32(v, shape=()):
    return np.full(shape, v, np.float32)


def i32(v, shape=()):
    return np.full(shape, v, np.int32)


def canonicalized(arg_types, body):
    """Build, canonicalize (checking results are kept), and return the module."""
    return run_and_compare(build(arg_types, body), "canonicalize")


def ops_after(arg_types, body):
    return op_names(canonicalized(arg_types, body))


def returned(m):
    return m.lookup("f").return_op.operands


# --- arithmetic ------------------------------------------------------------------------------------

@pytest.mark.parametrize("body", [
    lambda b, x: b.op("lz.mul", x, b.constant(f32(1))),           # x*1
    lambda b, x: b.op("lz.mul", b.constant(f32(1, (3,))), x),     # 1*x (1 broadcasts, x does not grow)
    lambda b, x: b.op("lz.add", x, b.constant(f32(0, (2, 3)))),   # x+0
    lambda b, x: b.op("lz.add", b.constant(f32(-0.0)), x),        # 0+x (-0.0 is a zero too)
    lambda b, x: b.op("lz.sub", x, b.constant(f32(0))),           # x-0
    lambda b, x: b.op("lz.div", x, b.constant(f32(1))),           # x/1
    lambda b, x: b.op("lz.pow", x, b.constant(f32(1))),           # x**1
    lambda b, x: b.op("lz.neg", b.op("lz.neg", x)),               # neg(neg x)
    lambda b, x: b.op("lz.max", x, x),
    lambda b, x: b.op("lz.min", x, x),
], ids=["x*1", "1*x", "x+0", "0+x", "x-0", "x/1", "x**1", "neg-neg", "max-xx", "min-xx"])
def test_identities_fold_to_x(body):
    m = canonicalized([F], body)
    assert op_names(m) == ["func.return"]
    assert returned(m)[0] is m.lookup("f").arguments[0]


@pytest.mark.parametrize("body", [
    lambda b, x: b.op("lz.mul", x, b.constant(i32(1))),
    lambda b, x: b.op("lz.add", b.constant(i32(0)), x),
    lambda b, x: b.op("lz.div", x, b.constant(i32(1))),
    lambda b, x: b.op("lz.neg", b.op("lz.neg", x)),
    lambda b, x: b.op("lz.not", b.op("lz.not", x)),
    lambda b, x: b.op("lz.or", x, b.constant(i32(0))),
    lambda b, x: b.op("lz.and", x, x),
])
def test_integer_identities(body):
    assert ops_after([I], body) == ["func.return"]


def test_broadcasting_by_one_is_not_the_identity():
    # x: 2x3, the 1 is 4x2x3: x*1 is 4x2x3, so x cannot replace it
    m = canonicalized([F], lambda b, x: b.op("lz.mul", x, b.constant(f32(1, (4, 2, 3)))))
    assert op_names(m) == ["lz.constant", "lz.mul", "func.return"]
    m = canonicalized([tensor((3,))], lambda b, x: b.op("lz.add", x, b.constant(f32(0, (2, 3)))))
    assert op_names(m) == ["lz.constant", "lz.add", "func.return"]


def test_times_zero_only_for_integers():
    m = canonicalized([I], lambda b, x: b.op("lz.mul", x, b.constant(i32(0))))
    assert op_names(m) == ["lz.constant", "func.return"]
    const = m.lookup("f").entry_block.ops[0]
    assert const.result.type == I and const.attributes["value"].splat_value() == 0
    assert ops_after([I], lambda b, x: b.op("lz.mul", b.constant(i32(0)), x)) == ["lz.constant", "func.return"]
    # floats: nan*0 and inf*0 are nan
    assert ops_after([F], lambda b, x: b.op("lz.mul", x, b.constant(f32(0)))) == ["lz.constant", "lz.mul",
                                                                                  "func.return"]


def test_x_minus_x_only_for_integers():
    assert ops_after([I], lambda b, x: b.op("lz.sub", x, x)) == ["lz.constant", "func.return"]
    assert ops_after([F], lambda b, x: b.op("lz.sub", x, x)) == ["lz.sub", "func.return"]


def test_zero_of_a_dynamic_type_is_left_alone():
    assert ops_after([tensor((None, 3), "i32")], lambda b, x: b.op("lz.sub", x, x)) == ["lz.sub", "func.return"]


def test_non_splat_and_other_constants_are_left_alone():
    assert ops_after([F], lambda b, x: b.op("lz.mul", x, b.constant(np.array([1, 1, 2], np.float32)))) == [
        "lz.constant", "lz.mul", "func.return"]
    assert ops_after([F], lambda b, x: b.op("lz.mul", x, b.constant(f32(-1)))) == [
        "lz.constant", "lz.mul", "func.return"]


def test_idempotent_unary_ops_collapse():
    assert ops_after([F], lambda b, x: b.op("lz.abs", b.op("lz.abs", b.op("lz.abs", x)))) == ["lz.abs", "func.return"]
    assert ops_after([F], lambda b, x: b.op("lz.relu", b.op("lz.relu", x))) == ["lz.relu", "func.return"]


def test_neg_of_neg_inside_a_chain():
    m = canonicalized([F], lambda b, x: b.op("lz.exp", b.op("lz.neg", b.op("lz.neg", b.op("lz.neg", x)))))
    assert op_names(m) == ["lz.neg", "lz.exp", "func.return"]


# --- logic -----------------------------------------------------------------------------------------

def test_not_not_and_boolean_identities():
    assert ops_after([B], lambda b, x: b.op("lz.not", b.op("lz.not", x))) == ["func.return"]
    assert ops_after([B], lambda b, x: b.op("lz.and", x, b.constant(np.bool_(True)))) == ["func.return"]
    assert ops_after([B], lambda b, x: b.op("lz.or", b.constant(np.bool_(False)), x)) == ["func.return"]
    assert ops_after([B], lambda b, x: b.op("lz.and", x, b.constant(np.bool_(False)))) == [
        "lz.constant", "lz.and", "func.return"]


@pytest.mark.parametrize("cond, which", [(True, 0), (False, 1)])
def test_select_of_a_constant_condition(cond, which):
    m = canonicalized([F, F], lambda b, x, y: b.op("lz.select", b.constant(np.full((2, 3), cond)), x, y))
    assert op_names(m) == ["func.return"]
    assert returned(m)[0] is m.lookup("f").arguments[which]


def test_select_whose_chosen_value_would_broadcast_is_left_alone():
    body = lambda b, x, y: b.op("lz.select", b.constant(np.full((2, 3), True)), x, y)  # noqa: E731
    assert ops_after([tensor((3,)), F], body) == ["lz.constant", "lz.select", "func.return"]


def test_select_of_the_same_value():
    assert ops_after([B, F], lambda b, c, x: b.op("lz.select", c, x, x)) == ["func.return"]


# --- casts -----------------------------------------------------------------------------------------

def test_cast_to_the_same_type():
    assert ops_after([F], lambda b, x: b.op("lz.cast", x, to=F32)) == ["func.return"]


def test_lossless_cast_chains_collapse():
    m = canonicalized([tensor((2, 3), "f16")], lambda b, x: b.op("lz.cast", b.op("lz.cast", x, to=F32), to=F64))
    (cast, _) = m.lookup("f").entry_block.ops
    assert cast.name == "lz.cast" and cast.operands[0] is m.lookup("f").arguments[0]
    assert cast.result.type == tensor((2, 3), "f64")
    # widening and back is the identity
    assert ops_after([I], lambda b, x: b.op("lz.cast", b.op("lz.cast", x, to=I64), to=I32)) == ["func.return"]


def test_lossy_cast_chains_stay():
    assert ops_after([F], lambda b, x: b.op("lz.cast", b.op("lz.cast", x, to=F16), to=F32)) == [
        "lz.cast", "lz.cast", "func.return"]
    assert ops_after([F], lambda b, x: b.op("lz.cast", b.op("lz.cast", x, to=I32), to=F32)) == [
        "lz.cast", "lz.cast", "func.return"]


@pytest.mark.parametrize("src, dst, lossless", [
    (I1, F16, True), (I1, I8, True), (I8, I16, True), (I8, UI8, False), (UI8, I8, False), (UI8, I16, True),
    (I32, I64, True), (I64, I32, False), (I8, BF16, True), (UI8, BF16, True), (I16, F16, False),
    (I16, F32, True), (I32, F32, False), (I32, F64, True), (I64, F64, False), (F16, F32, True),
    (BF16, F32, True), (F16, BF16, False), (BF16, F16, False), (F32, F64, True), (F64, F32, False),
    (F32, I64, False), (F32, I1, False), (I32, I1, False),
])
def test_cast_is_lossless(src, dst, lossless):
    assert cast_is_lossless(src, dst) is lossless


# --- data movement ---------------------------------------------------------------------------------

def test_identity_transpose():
    assert ops_after([F], lambda b, x: b.op("lz.transpose", x, perm=[0, 1])) == ["func.return"]
    assert ops_after([tensor((5,))], lambda b, x: b.op("lz.transpose", x)) == ["func.return"]


def test_transposes_compose():
    x_type = tensor((2, 3, 4))
    m = canonicalized([x_type], lambda b, x: b.op("lz.transpose", b.op("lz.transpose", x, perm=[1, 2, 0]),
                                                  perm=[1, 2, 0]))
    (t, _) = m.lookup("f").entry_block.ops
    assert t.name == "lz.transpose" and t.operands[0] is m.lookup("f").arguments[0]
    assert list(t.attributes["perm"].values) == [2, 0, 1] and t.result.type == tensor((4, 2, 3))
    # a transpose and its inverse vanish; so do two default (reversing) transposes
    assert ops_after([x_type], lambda b, x: b.op("lz.transpose", b.op("lz.transpose", x, perm=[1, 2, 0]),
                                                 perm=[2, 0, 1])) == ["func.return"]
    assert ops_after([x_type], lambda b, x: b.op("lz.transpose", b.op("lz.transpose", x))) == ["func.return"]


def test_reshapes_collapse_and_vanish():
    m = canonicalized([F], lambda b, x: b.op("lz.reshape", b.op("lz.reshape", x, shape=[6]), shape=[3, 2]))
    (r, _) = m.lookup("f").entry_block.ops
    assert r.operands[0] is m.lookup("f").arguments[0] and r.result.type == tensor((3, 2))
    assert ops_after([F], lambda b, x: b.op("lz.reshape", b.op("lz.reshape", x, shape=[6]), shape=[2, -1])) == [
        "func.return"]
    assert ops_after([tensor((None, 3))], lambda b, x: b.op("lz.reshape", x, shape=[-1, 3])) == ["func.return"]


def test_reshape_of_a_dynamic_tensor_to_a_different_layout_stays():
    t = tensor((None, None))
    m = build([t], lambda b, x: b.create("lz.reshape", [x], {"shape": [4, -1]}, result_types=[t]).result)
    run_pipeline(m, "canonicalize")
    assert op_names(m) == ["lz.reshape", "func.return"]


def test_broadcast_to():
    assert ops_after([F], lambda b, x: b.op("lz.broadcast_to", x, shape=[2, 3])) == ["func.return"]
    m = canonicalized([tensor((3,))], lambda b, x: b.op("lz.broadcast_to", b.op("lz.broadcast_to", x, shape=[2, 3]),
                                                        shape=[4, 2, 3]))
    (bc, _) = m.lookup("f").entry_block.ops
    assert bc.operands[0] is m.lookup("f").arguments[0] and bc.result.type == tensor((4, 2, 3))
    # a dynamic dim may be 1 at run time: broadcasting it is not the identity
    t = tensor((None, 3))
    m = build([t], lambda b, x: b.create("lz.broadcast_to", [x], {"shape": [2, 3]}, result_types=[t]).result)
    run_pipeline(m, "canonicalize")
    assert op_names(m) == ["lz.broadcast_to", "func.return"]


@pytest.mark.parametrize("attrs, vanishes", [
    (dict(starts=[0], ends=[2]), True),
    (dict(starts=[0, 0], ends=[100, 3], steps=[1, 1]), True),
    (dict(starts=[-2], ends=[2], axes=[0]), True),
    (dict(starts=[0], ends=[3], axes=[1], steps=[2]), False),
    (dict(starts=[-1], ends=[-100], axes=[1], steps=[-1]), False),   # reversed: same shape, not the identity
    (dict(starts=[1], ends=[3], axes=[1]), False),
])
def test_whole_slice(attrs, vanishes):
    names = ops_after([F], lambda b, x: b.op("lz.slice", x, **attrs))
    assert names == (["func.return"] if vanishes else ["lz.slice", "func.return"])


def test_concat_of_one_and_zero_pad():
    assert ops_after([F], lambda b, x: b.op("lz.concat", x, axis=0)) == ["func.return"]
    assert ops_after([F], lambda b, x: b.op("lz.pad", x, pads=[0, 0, 0, 0])) == ["func.return"]
    assert ops_after([F], lambda b, x: b.op("lz.pad", x, pads=[0, 1, 0, 0])) == ["lz.pad", "func.return"]


def test_dead_pure_ops_go_and_the_rule_list_is_documented():
    assert ops_after([F], lambda b, x: [b.op("lz.exp", x), x][1]) == ["func.return"]
    assert all(r.doc and r.op.startswith("lz.") for r in CANONICALIZATION_RULES)


# --- property: random elementwise chains with 0s and 1s ---------------------------------------------

FLOAT_BINARY = ["lz.add", "lz.sub", "lz.mul", "lz.max", "lz.min"]
FLOAT_UNARY = ["lz.neg", "lz.abs", "lz.relu", "lz.tanh"]
INT_BINARY = ["lz.add", "lz.sub", "lz.mul", "lz.max", "lz.min"]
INT_UNARY = ["lz.neg", "lz.abs", "lz.not"]
CONST_SHAPES = [(), (3,), (1, 3), (2, 3), (2, 2, 3)]


@st.composite
def chains(draw):
    """(element type, steps): each step is an op over earlier values and constants 0, 1, 2, -1."""
    dtype = draw(st.sampled_from(["f32", "i32"]))
    binary, unary = (FLOAT_BINARY, FLOAT_UNARY) if dtype == "f32" else (INT_BINARY, INT_UNARY)
    steps = []
    for i in range(draw(st.integers(1, 8))):
        operand = lambda: draw(st.integers(0, i + 1))  # noqa: E731  value index: args are 0 and 1
        kind = draw(st.sampled_from(["unary", "binary", "const", "const", "div"]))
        if kind == "unary":
            steps.append(("unary", draw(st.sampled_from(unary)), operand()))
        elif kind == "binary":
            steps.append(("binary", draw(st.sampled_from(binary)), operand(), operand()))
        else:
            value = draw(st.sampled_from([0, 1, 1, 2, -1]))
            shape = draw(st.sampled_from(CONST_SHAPES))
            op = "lz.div" if kind == "div" else draw(st.sampled_from(binary))
            if op == "lz.div" and value == 0:
                value = 1  # divide only by nonzero constants: x/0 is inf or nan, whose sign x+0 may flip
            steps.append(("const", op, operand(), value, shape, draw(st.booleans())))
    return dtype, steps


def build_chain(dtype, steps):
    def body(b, x, y):
        values = [x, y]
        for step in steps:
            if step[0] == "unary":
                values.append(b.op(step[1], values[step[2]]))
            elif step[0] == "binary":
                values.append(b.op(step[1], values[step[2]], values[step[3]]))
            else:
                _, op, a, value, shape, const_first = step
                c = b.constant(np.full(shape, value, np.dtype(np.float32 if dtype == "f32" else np.int32)))
                operands = (c, values[a]) if const_first and op != "lz.div" else (values[a], c)
                values.append(b.op(op, *operands))
        return [values[-1], values[len(values) // 2]]
    t = tensor((2, 3), dtype)
    return build([t, t], body)


@given(chains(), st.integers(0, 2 ** 16))
def test_simplifying_pipelines_keep_results(chain, seed):
    dtype, steps = chain
    run_and_compare(build_chain(dtype, steps), "canonicalize,cse,dce,constant-fold,canonicalize", seed=seed)


# --- as text ---------------------------------------------------------------------------------------

def test_canonicalize_on_text():
    from pass_testing import assert_transforms

    assert_transforms("""
    func.func @f(%x: tensor<2x3xf32>, %y: tensor<3xf32>) -> (tensor<3x2xf32>, tensor<4x2x3xf32>) {
      %one = "lz.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
      %ones = "lz.constant"() {value = dense<1.0> : tensor<4x2x3xf32>} : () -> tensor<4x2x3xf32>
      %0 = "lz.mul"(%x, %one) : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
      %1 = "lz.transpose"(%0) {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
      %2 = "lz.transpose"(%1) {perm = array<i64: 1, 0>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
      %3 = "lz.transpose"(%2) {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
      %4 = "lz.mul"(%x, %ones) : (tensor<2x3xf32>, tensor<4x2x3xf32>) -> tensor<4x2x3xf32>
      func.return %3, %4 : tensor<3x2xf32>, tensor<4x2x3xf32>
    }""", "canonicalize", """
    func.func @f(%x: tensor<2x3xf32>, %y: tensor<3xf32>) -> (tensor<3x2xf32>, tensor<4x2x3xf32>) {
      %ones = "lz.constant"() {value = dense<1.0> : tensor<4x2x3xf32>} : () -> tensor<4x2x3xf32>
      %3 = "lz.transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
      %4 = "lz.mul"(%x, %ones) : (tensor<2x3xf32>, tensor<4x2x3xf32>) -> tensor<4x2x3xf32>
      func.return %3, %4 : tensor<3x2xf32>, tensor<4x2x3xf32>
    }""")


def _gates_gradient(order):
    """pad(g_k) summed in ``order``: an LSTM step's four gate gradients ([2, 3] each) placed at
    columns 3k of [2, 12], as the gradient of four slices is."""
    def body(b, *gs):
        padded = [b.op("lz.pad", g, pads=[0, 3 * k, 0, 9 - 3 * k]) for k, g in enumerate(gs)]
        total = padded[order[0]]
        for k in order[1:]:
            total = b.op("lz.add", total, padded[k])
        return total
    return body


@pytest.mark.parametrize("order", [(0, 1, 2, 3), (3, 2, 1, 0), (1, 0, 3, 2)])
def test_sum_of_touching_zero_pads_is_a_concat(order):
    m = canonicalized([F] * 4, _gates_gradient(order))
    if order == (1, 0, 3, 2):  # g1 + g0 folds; g3 does not touch g0..g1, and then an add is not a pad
        assert op_names(m).count("lz.add") == 2 and op_names(m).count("lz.concat") == 1
        return
    (concat, _) = m.lookup("f").entry_block.ops
    assert concat.name == "lz.concat" and list(concat.operands) == list(m.lookup("f").arguments)


def test_pads_that_overlap_leave_a_gap_or_pad_a_nonzero_value_stay():
    overlap = lambda b, x, y: b.op("lz.add", b.op("lz.pad", x, pads=[0, 0, 0, 3]), b.op("lz.pad", y, pads=[0, 2, 0, 1]))
    gap = lambda b, x, y: b.op("lz.add", b.op("lz.pad", x, pads=[0, 0, 0, 4]), b.op("lz.pad", y, pads=[0, 4, 0, 0]))
    ones = lambda b, x, y: b.op("lz.add", b.op("lz.pad", x, pads=[0, 0, 0, 3], value=1.0),
                                b.op("lz.pad", y, pads=[0, 3, 0, 0]))
    two_axes = lambda b, x, y: b.op("lz.add", b.op("lz.pad", x, pads=[1, 0, 0, 3]), b.op("lz.pad", y, pads=[0, 3, 1, 0]))
    for body in (overlap, gap, ones):
        assert "lz.concat" not in ops_after([F, F] if body is not overlap else [F, tensor((2, 3))], body)
    assert "lz.concat" not in ops_after([F, F], two_axes)


def test_nested_concats_along_one_axis_flatten():
    m = canonicalized([F, F, F], lambda b, x, y, z: b.op("lz.concat", x, b.op("lz.concat", y, z, axis=-1), axis=1))
    (concat, _) = m.lookup("f").entry_block.ops
    assert len(concat.operands) == 3
    # along another axis it stays nested
    assert ops_after([tensor((4, 3)), F, F], lambda b, x, y, z: b.op("lz.concat", x, b.op("lz.concat", y, z, axis=0),
                                                                       axis=1)).count("lz.concat") == 2
