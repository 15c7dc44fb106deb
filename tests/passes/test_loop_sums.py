"""loop-sums: an accumulator of matrix products carried by an lz.for (an RNN weight's gradient)
leaves the loop as one GEMM over the stacked operands; what does not match is left alone.  Every
case runs the interpreter before and after (``run_and_compare``)."""
from lezero.ir.parser import parse_module
from lezero.ir.verifier import verify

from pass_testing import run_and_compare

# acc1 += transpose(x_i^T @ g_i) (x a scanned slice, g yielded: both stacks exist already);
# acc2 = g_i^T @ h_i + acc2 (h computed in the body: a new stacked output)
SUMS = """
func.func @f(%w: tensor<3x3xf32>, %u: tensor<3x4xf32>, %h0: tensor<2x3xf32>, %z1: tensor<4x3xf32>,
             %z2: tensor<4x3xf32>, %xs: tensor<5x2x3xf32>) -> (tensor<2x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<5x2x4xf32>) {
  %h, %r1, %r2, %gs = "lz.for"(%w, %u, %h0, %z1, %z2, %xs) ({
  ^bb0(%i: tensor<i64>, %w_: tensor<3x3xf32>, %u_: tensor<3x4xf32>, %h_: tensor<2x3xf32>, %acc1: tensor<4x3xf32>,
       %acc2: tensor<4x3xf32>, %x: tensor<2x3xf32>):
    %0 = "lz.matmul"(%h_, %w_) : (tensor<2x3xf32>, tensor<3x3xf32>) -> tensor<2x3xf32>
    %1 = "lz.add"(%0, %x) : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
    %h1 = "lz.tanh"(%1) : (tensor<2x3xf32>) -> tensor<2x3xf32>
    %g0 = "lz.matmul"(%h1, %u_) : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
    %g = "lz.tanh"(%g0) : (tensor<2x4xf32>) -> tensor<2x4xf32>
    %xt = "lz.transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
    %p = "lz.matmul"(%xt, %g) : (tensor<3x2xf32>, tensor<2x4xf32>) -> tensor<3x4xf32>
    %pt = "lz.transpose"(%p) {perm = array<i64: 1, 0>} : (tensor<3x4xf32>) -> tensor<4x3xf32>
    %a1 = "lz.add"(%acc1, %pt) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    %gt = "lz.transpose"(%g) {perm = array<i64: 1, 0>} : (tensor<2x4xf32>) -> tensor<4x2xf32>
    %q = "lz.matmul"(%gt, %h1) : (tensor<4x2xf32>, tensor<2x3xf32>) -> tensor<4x3xf32>
    %a2 = "lz.add"(%q, %acc2) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    "lz.yield"(%h1, %a1, %a2, %g) : (tensor<2x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<2x4xf32>) -> ()
  }) {trip_count = 5 : i64, num_invariant = 2 : i64, num_carried = 3 : i64, reverse = true}
     : (tensor<3x3xf32>, tensor<3x4xf32>, tensor<2x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<5x2x3xf32>)
     -> (tensor<2x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<5x2x4xf32>)
  func.return %h, %r1, %r2, %gs : tensor<2x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<5x2x4xf32>
}
"""


def _loop(module):
    return next(op for op in module.lookup("f").entry_block.ops if op.name == "lz.for")


def test_accumulated_products_become_one_gemm_after_the_loop():
    module = run_and_compare(parse_module(SUMS), "loop-sums,dce")
    verify(module)
    loop = _loop(module)
    attrs = loop.definition.attrs(loop)
    assert attrs.num_carried == 1 and attrs.reverse  # only h is carried now
    # h's final value, the yielded g stacked, and h1 stacked for acc2's product
    assert [str(r.type) for r in loop.results] == ["tensor<2x3xf32>", "tensor<5x2x4xf32>", "tensor<5x2x3xf32>"]
    body = [op.name for op in loop.regions[0].blocks[0].ops]
    assert body.count("lz.matmul") == 2 and "lz.add" in body  # the recurrence and g; no per-step product
    after = [op.name for op in module.lookup("f").entry_block.ops]
    assert after.count("lz.matmul") == 2 and after[-1] == "func.return"
    # the scanned input is read where it is: x's stack is the loop operand, not a new output
    products = [op for op in module.lookup("f").entry_block.ops if op.name == "lz.matmul"]
    lhs_sources = [op.operands[0].owner.operands[0].owner.operands[0] for op in products]
    assert module.lookup("f").arguments[5] in lhs_sources


def test_an_accumulator_read_by_something_else_stays():
    text = SUMS.replace('"lz.yield"(%h1, %a1, %a2, %g)', '%g2 = "lz.mul"(%g, %g) : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>\n'
                        '    %seen = "lz.add"(%acc2, %acc2) : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>\n'
                        '    "lz.yield"(%h1, %a1, %seen, %g2)')
    module = run_and_compare(parse_module(text), "loop-sums,dce")
    loop = _loop(module)
    assert loop.definition.attrs(loop).num_carried == 2  # acc1 left, acc2 (read twice) stayed


def test_no_iterations_no_rewrite():
    text = SUMS.replace("5x2x", "0x2x").replace("trip_count = 5", "trip_count = 0")
    module = run_and_compare(parse_module(text), "loop-sums,dce")
    assert _loop(module).definition.attrs(_loop(module)).num_carried == 3


def test_an_lstm_train_step_sums_its_recurrent_weight_gradient_after_the_loop():
    import numpy as np

    import lezero as lz
    from lezero.runtime.plan import HostStep

    model = lz.nn.LSTM(4, 3)
    rng = np.random.default_rng(0)
    x, target = (lz.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in ((5, 2, 4), (5, 2, 3)))
    step = lz.jit.compile_train_step(model, lambda out, y: lz.nn.functional.mse_loss(out[0], y),
                                     lz.optim.SGD(model.parameters(), lr=0.1), (x,), target, dynamic_batch=False)
    step(x, target)
    ((compiled, _),) = step._steps.values()
    (plan,) = compiled._plans.values()
    loops = [launch for launch in plan.plan.launches if isinstance(launch, HostStep)]
    (backward,) = [loop for loop in loops if loop.reverse]
    carried = [r.type.shape for r in backward.op.results[:backward.num_carried]]
    assert carried and (12, 3) not in carried  # dh, dc carried; dW_hh (4H x H) is one GEMM after the loop
