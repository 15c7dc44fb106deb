"""lz.for, lz.while, lz.if: print/parse round trip, the interpreter's semantics, the verifier's errors,
shape inference through their regions, and their gradients (finite differences in f64, torch on the
unrolled loop)."""
import numpy as np
import pytest
import torch

from lezero.ir.diagnostics import IRError, VerifyError
from lezero.ir.interpreter import interpret
from lezero.ir.parser import parse_module
from lezero.ir.printer import print_op
from lezero.ir.types import FunctionType, TensorType
from lezero.ir.verifier import verify
from lezero.passes.autodiff import differentiate
from lezero.passes.shape_infer import infer_shapes

# h_{i+1} = tanh(h_i @ W + x_i @ U), s_{i+1} = s_i + h_{i+1}, y_i = h_{i+1} * h_i; a counter rides
# along as an integer carried value (no gradient) and is added to the index (unused by the math).
RNN = """
func.func @rnn(%w: tensor<3x3xT>, %u: tensor<2x3xT>, %h0: tensor<1x3xT>, %s0: tensor<1x3xT>, %xs: tensor<4x1x2xT>)
    -> (tensor<1x3xT>, tensor<1x3xT>, tensor<4x1x3xT>) {
  %n0 = "lz.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
  %h, %s, %n, %ys = "lz.for"(%w, %u, %h0, %s0, %n0, %xs) ({
  ^bb0(%i: tensor<i64>, %w_: tensor<3x3xT>, %u_: tensor<2x3xT>, %h_: tensor<1x3xT>, %s_: tensor<1x3xT>,
       %n_: tensor<i64>, %x: tensor<1x2xT>):
    %0 = "lz.matmul"(%h_, %w_) : (tensor<1x3xT>, tensor<3x3xT>) -> tensor<1x3xT>
    %1 = "lz.matmul"(%x, %u_) : (tensor<1x2xT>, tensor<2x3xT>) -> tensor<1x3xT>
    %2 = "lz.add"(%0, %1) : (tensor<1x3xT>, tensor<1x3xT>) -> tensor<1x3xT>
    %3 = "lz.tanh"(%2) : (tensor<1x3xT>) -> tensor<1x3xT>
    %4 = "lz.add"(%s_, %3) : (tensor<1x3xT>, tensor<1x3xT>) -> tensor<1x3xT>
    %5 = "lz.mul"(%3, %h_) : (tensor<1x3xT>, tensor<1x3xT>) -> tensor<1x3xT>
    %6 = "lz.add"(%n_, %i) : (tensor<i64>, tensor<i64>) -> tensor<i64>
    "lz.yield"(%3, %4, %6, %5) : (tensor<1x3xT>, tensor<1x3xT>, tensor<i64>, tensor<1x3xT>) -> ()
  }) {trip_count = 4 : i64, num_invariant = 2 : i64, num_carried = 3 : i64, reverse = REVERSE}
     : (tensor<3x3xT>, tensor<2x3xT>, tensor<1x3xT>, tensor<1x3xT>, tensor<i64>, tensor<4x1x2xT>)
     -> (tensor<1x3xT>, tensor<1x3xT>, tensor<i64>, tensor<4x1x3xT>)
  func.return %h, %s, %ys : tensor<1x3xT>, tensor<1x3xT>, tensor<4x1x3xT>
}
"""


def rnn_module(dtype="f32", reverse=False):
    return parse_module(RNN.replace("xT>", f"x{dtype}>").replace("REVERSE", str(reverse).lower()))


def rnn_inputs(dtype):
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype(dtype) * 0.7 for s in [(3, 3), (2, 3), (1, 3), (1, 3), (4, 1, 2)]]


def rnn_numpy(w, u, h, s, xs, reverse, lib=np):
    """The loop unrolled (numpy, or torch for autograd)."""
    ys = [None] * 4
    for i in (range(3, -1, -1) if reverse else range(4)):
        h_next = lib.tanh(h @ w + xs[i] @ u)
        s = s + h_next
        ys[i], h = h_next * h, h_next
    return h, s, lib.stack(ys)


@pytest.mark.parametrize("reverse", [False, True])
def test_for_round_trips_and_runs_like_the_unrolled_loop(reverse):
    module = rnn_module(reverse=reverse)
    verify(module)
    text = print_op(module)
    assert print_op(parse_module(text)) == text
    args = rnn_inputs(np.float32)
    for got, want in zip(interpret(module, "rnn", *args), rnn_numpy(*args, reverse)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_for_with_zero_iterations_gives_the_inits_and_empty_stacks():
    module = parse_module(RNN.replace("xT>", "xf32>").replace("REVERSE", "false")
                          .replace("4x1x", "0x1x").replace("trip_count = 4", "trip_count = 0"))
    w, u, h0, s0, _ = rnn_inputs(np.float32)
    h, s, ys = interpret(module, "rnn", w, u, h0, s0, np.zeros((0, 1, 2), np.float32))
    np.testing.assert_array_equal(h, h0)
    np.testing.assert_array_equal(s, s0)
    assert ys.shape == (0, 1, 3)


WHILE = """
func.func @f(%w: tensor<2xf32>, %acc0: tensor<2xf32>) -> (tensor<i64>, tensor<2xf32>) {
  %n0 = "lz.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
  %n, %acc = "lz.while"(%w, %n0, %acc0) ({
  ^bb0(%w_: tensor<2xf32>, %n_: tensor<i64>, %a: tensor<2xf32>):
    %five = "lz.constant"() {value = dense<5> : tensor<i64>} : () -> tensor<i64>
    %go = "lz.cmp"(%n_, %five) {predicate = "lt"} : (tensor<i64>, tensor<i64>) -> COND
    "lz.yield"(%go) : (COND) -> ()
  }, {
  ^bb0(%w_: tensor<2xf32>, %n_: tensor<i64>, %a: tensor<2xf32>):
    %one = "lz.constant"() {value = dense<1> : tensor<i64>} : () -> tensor<i64>
    %n1 = "lz.add"(%n_, %one) : (tensor<i64>, tensor<i64>) -> tensor<i64>
    %a1 = "lz.mul"(%a, %w_) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    "lz.yield"(%n1, %a1) : (tensor<i64>, tensor<2xf32>) -> ()
  }) {num_invariant = 1 : i64} : (tensor<2xf32>, tensor<i64>, tensor<2xf32>) -> (tensor<i64>, tensor<2xf32>)
  func.return %n, %acc : tensor<i64>, tensor<2xf32>
}
"""


def test_while_runs_until_its_condition_is_false():
    module = parse_module(WHILE.replace("COND", "tensor<i1>"))
    verify(module)
    text = print_op(module)
    assert print_op(parse_module(text)) == text
    w, acc0 = np.array([2, -1], np.float32), np.array([1, 3], np.float32)
    n, acc = interpret(module, "f", w, acc0)
    assert int(n) == 5
    np.testing.assert_array_equal(acc, acc0 * w ** 5)


IF = """
func.func @f(%p: tensor<i1>, %a: tensor<3xf64>, %b: tensor<3xf64>) -> tensor<3xf64> {
  %r = "lz.if"(%p, %a, %b) ({
  ^bb0(%a_: tensor<3xf64>, %b_: tensor<3xf64>):
    %0 = "lz.mul"(%a_, %b_) : (tensor<3xf64>, tensor<3xf64>) -> tensor<3xf64>
    "lz.yield"(%0) : (tensor<3xf64>) -> ()
  }, {
  ^bb0(%a_: tensor<3xf64>, %b_: tensor<3xf64>):
    %0 = "lz.sin"(%a_) : (tensor<3xf64>) -> tensor<3xf64>
    "lz.yield"(%0) : (tensor<3xf64>) -> ()
  }) : (tensor<i1>, tensor<3xf64>, tensor<3xf64>) -> tensor<3xf64>
  func.return %r : tensor<3xf64>
}
"""


def test_if_runs_the_branch_its_condition_picks():
    module = parse_module(IF)
    verify(module)
    text = print_op(module)
    assert print_op(parse_module(text)) == text
    a, b = np.array([1.0, 2.0, 3.0]), np.array([-1.0, 0.5, 2.0])
    np.testing.assert_array_equal(interpret(module, "f", np.bool_(True), a, b), a * b)
    np.testing.assert_array_equal(interpret(module, "f", np.bool_(False), a, b), np.sin(a))


# --- the verifier ---------------------------------------------------------------------------------

RNN32 = RNN.replace("xT>", "xf32>").replace("REVERSE", "false")


@pytest.mark.parametrize("text, message", [
    (RNN32.replace("trip_count = 4", "trip_count = -1"), "trip_count must be >= 0, got -1"),
    (RNN32.replace("num_carried = 3", "num_carried = 7"), r"num_invariant \(2\) \+ num_carried \(7\) is more than"),
    (RNN32.replace("trip_count = 4", "trip_count = 5"), r"scanned input #0 has type tensor<4x1x2xf32>, but its "
                                                        r"leading dim must be the trip_count \(5\)"),
    (RNN32.replace("%n_: tensor<i64>, %x: tensor<1x2xf32>", "%n_: tensor<i32>, %x: tensor<1x2xf32>")
          .replace('(%n_, %i) : (tensor<i64>', '(%i, %i) : (tensor<i64>'),
     r"body region argument #5 has type tensor<i32>, but the operands give tensor<i64>"),
    (RNN32.replace('"lz.yield"(%3, %4, %6, %5) : (tensor<1x3xf32>, tensor<1x3xf32>, tensor<i64>,',
                   '"lz.yield"(%3, %4, %x, %5) : (tensor<1x3xf32>, tensor<1x3xf32>, tensor<1x2xf32>,'),
     r"body region yields tensor<1x2xf32> as value #2, but the carried values have type tensor<i64>"),
    (WHILE.replace("COND", "tensor<2xi1>").replace('(%n_, %five) {predicate = "lt"} : (tensor<i64>, tensor<i64>)',
                                                   '(%a, %a) {predicate = "lt"} : (tensor<2xf32>, tensor<2xf32>)'),
     r"condition region yields tensor<2xi1> as value #0, but conditions have type tensor<i1>"),
    (WHILE.replace("COND", "tensor<i1>").replace("num_invariant = 1", "num_invariant = 4"),
     r"num_invariant \(4\) must be between 0 and the 3 operands"),
    (IF.replace("%p: tensor<i1>", "%p: tensor<2xi1>").replace("(tensor<i1>, tensor<3xf64>", "(tensor<2xi1>, tensor<3xf64>"),
     r"operand #0 \(the condition\) must be tensor<i1>, got tensor<2xi1>"),
    (IF.replace('%0 = "lz.sin"(%a_) : (tensor<3xf64>) -> tensor<3xf64>\n    "lz.yield"(%0) : (tensor<3xf64>)',
                '%0 = "lz.sin"(%a_) : (tensor<3xf64>) -> tensor<3xf64>\n    "lz.yield"(%0, %0) : (tensor<3xf64>, tensor<3xf64>)'),
     r"else region yields 2 values, but the then region's values are 1"),
])
def test_the_verifier_names_what_is_wrong(text, message):
    with pytest.raises(VerifyError, match=message):
        verify(parse_module(text))


def test_a_body_using_an_outer_value_is_an_error():
    """The parser's scopes reject it in text; IR built in Python meets the verifier."""
    module = parse_module(RNN32)
    func = module.lookup("rnn")
    loop = next(op for op in func.entry_block.ops if op.name == "lz.for")
    loop.regions[0].blocks[0].ops[0].set_operand(0, func.arguments[2])
    with pytest.raises(VerifyError, match="'lz.matmul' in the body region uses a value defined outside it"):
        verify(module)


def test_yield_outside_a_region_op_is_an_error():
    text = """
    func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
      "lz.yield"(%a) : (tensor<2xf32>) -> ()
      func.return %a : tensor<2xf32>
    }"""
    with pytest.raises(VerifyError) as error:
        verify(parse_module(text))
    assert any("'lz.yield' op expects its parent to be an op whose regions yield" in d.message
               for d in error.value.diagnostics)


def test_shape_inference_reinfers_the_body_from_new_operand_shapes():
    """What the runtime's shape specialization does: static argument types in, body and results refined."""
    module = parse_module(RNN32.replace("tensor<1x3xf32>", "tensor<?x3xf32>")
                          .replace("tensor<1x2xf32>", "tensor<?x2xf32>").replace("tensor<4x1x", "tensor<4x?x"))
    verify(module)
    func = module.lookup("rnn")
    for arg in func.arguments:
        arg.type = TensorType(tuple(5 if d is None else d for d in arg.type.shape), arg.type.element_type)
    func.function_type = FunctionType([a.type for a in func.arguments], func.function_type.results)
    infer_shapes(module)
    verify(module)
    loop = next(op for op in func.entry_block.ops if op.name == "lz.for")
    assert [str(a.type) for a in loop.regions[0].blocks[0].args[3:]] == [
        "tensor<5x3xf32>", "tensor<5x3xf32>", "tensor<i64>", "tensor<5x2xf32>"]
    assert [str(t) for t in func.function_type.results] == ["tensor<5x3xf32>", "tensor<5x3xf32>", "tensor<4x5x3xf32>"]


# --- gradients ------------------------------------------------------------------------------------

def _central_differences(loss, args, k, eps=1e-6):
    out = np.zeros_like(args[k])
    for idx in np.ndindex(args[k].shape):
        plus = [a.copy() for a in args]
        minus = [a.copy() for a in args]
        plus[k][idx] += eps
        minus[k][idx] -= eps
        out[idx] = (loss(plus) - loss(minus)) / (2 * eps)
    return out


@pytest.mark.parametrize("reverse", [False, True])
def test_for_gradient_equals_finite_differences_and_torch(reverse):
    module = rnn_module("f64", reverse)
    grad = differentiate(module, "rnn")
    verify(module)
    assert sum(op.name == "lz.for" for op in grad.entry_block.ops) == 2  # the forward (stacking) and reverse loop
    args = rnn_inputs(np.float64)
    rng = np.random.default_rng(1)
    cotangents = [rng.standard_normal(s) for s in [(1, 3), (1, 3), (4, 1, 3)]]
    outputs = interpret(module, "rnn_grad", *args, *cotangents)
    for got, want in zip(outputs[:3], rnn_numpy(*args, reverse)):
        np.testing.assert_allclose(got, want, rtol=1e-12)

    def loss(values):
        return sum(float((r * c).sum()) for r, c in zip(interpret(module, "rnn", *values), cotangents))

    leaves = [torch.tensor(a, requires_grad=True) for a in args]
    torch_results = rnn_numpy(*leaves, reverse, lib=torch)
    torch_grads = torch.autograd.grad(torch_results, leaves, [torch.tensor(c) for c in cotangents])
    for k, (got, want) in enumerate(zip(outputs[3:], torch_grads)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-12, err_msg=f"argument #{k} vs torch")
        np.testing.assert_allclose(got, _central_differences(loss, args, k), rtol=1e-6, atol=1e-8,
                                   err_msg=f"argument #{k} vs finite differences")


def test_the_gradient_of_a_loop_stacks_only_the_carried_values_it_reads():
    """After autodiff's dce, the forward loop of @rnn_grad stacks h (which the tanh's gradient
    reads) but not the sum s (whose gradient is the identity) nor the counter (no gradient), and
    the two products h @ w and x_i @ u, which the reverse body then reads instead of computing:
    its matmuls are the four gradient products only (d h, d w, d x_i, d u)."""
    module = rnn_module("f64")
    grad = differentiate(module, "rnn")
    forward, backward = [op for op in grad.entry_block.ops if op.name == "lz.for"]
    assert forward.definition.attrs(forward).num_carried == 2  # h and s: the counter is gone
    # ys, stacked h, stacked h @ w and x_i @ u
    assert [str(t) for t in forward.result_types[2:]] == ["tensor<4x1x3xf64>"] * 4
    assert backward.definition.attrs(backward).reverse
    reverse_body = backward.regions[0].blocks[0]
    assert sum(op.name == "lz.matmul" for op in reverse_body.ops) == 4
    assert all(op.name != "lz.matmul" or op.operands[1].owner.name == "lz.transpose" or
               op.operands[0].owner.name == "lz.transpose" for op in reverse_body.ops)
    args = rnn_inputs(np.float64)
    interpret(module, "rnn_grad", *args, *[np.ones(s) for s in [(1, 3), (1, 3), (4, 1, 3)]])


# an inner loop over the outer loop's carried value: g <- sin(g * exp(w)) twice, three times
NESTED = """
func.func @f(%w: tensor<3xf32>, %h0: tensor<3xf32>) -> tensor<3xf32> {
  %h = "lz.for"(%w, %h0) ({
  ^bb0(%i: tensor<i64>, %w_: tensor<3xf32>, %h_: tensor<3xf32>):
    %g = "lz.for"(%w_, %h_) ({
    ^bb0(%j: tensor<i64>, %v: tensor<3xf32>, %g_: tensor<3xf32>):
      %e = "lz.exp"(%v) : (tensor<3xf32>) -> tensor<3xf32>
      %0 = "lz.mul"(%g_, %e) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
      %1 = "lz.sin"(%0) : (tensor<3xf32>) -> tensor<3xf32>
      "lz.yield"(%1) : (tensor<3xf32>) -> ()
    }) {trip_count = 2 : i64, num_invariant = 1 : i64, num_carried = 1 : i64} : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    "lz.yield"(%g) : (tensor<3xf32>) -> ()
  }) {trip_count = 3 : i64, num_invariant = 1 : i64, num_carried = 1 : i64} : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  func.return %h : tensor<3xf32>
}
"""


def test_nested_loop_gradient_equals_finite_differences():
    module = parse_module(NESTED.replace("xf32>", "xf64>"))
    differentiate(module, "f")
    verify(module)
    w, h0, cotangent = np.array([0.1, -0.3, 0.2]), np.array([0.5, 1.0, -0.7]), np.array([1.0, 0.5, -2.0])
    _, dw, dh0 = interpret(module, "f_grad", w, h0, cotangent)

    def loss(values):
        return float((interpret(module, "f", *values) * cotangent).sum())

    for k, got in enumerate([dw, dh0]):
        np.testing.assert_allclose(got, _central_differences(loss, [w, h0], k), rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("pred", [True, False])
def test_if_gradient_is_the_taken_branchs(pred):
    module = parse_module(IF)
    differentiate(module, "f")
    verify(module)
    a, b, dr = np.array([1.0, 2.0, 3.0]), np.array([-1.0, 0.5, 2.0]), np.array([0.3, -2.0, 1.5])
    _, da, db = interpret(module, "f_grad", np.bool_(pred), a, b, dr)
    if pred:
        np.testing.assert_allclose(da, dr * b)
        np.testing.assert_allclose(db, dr * a)
    else:
        np.testing.assert_allclose(da, dr * np.cos(a))
        np.testing.assert_array_equal(db, np.zeros(3))


def test_while_has_no_gradient():
    module = parse_module(WHILE.replace("COND", "tensor<i1>"))
    with pytest.raises(IRError, match="'lz.while' op gradient: has no gradient without a 'max_trip_count' "
                                      "attribute: its trip count is known only at run time"):
        differentiate(module, "f")
