"""The passes inside lz.for / lz.while / lz.if bodies: canonicalize, cse, constant-fold and dce work
there and never reach across the isolation boundary; dce prunes what the loops compute for
nobody; licm moves invariant work out as new invariant operands.  Every case runs the interpreter
before and after (``run_and_compare``)."""
from lezero.ir.parser import parse_module
from lezero.ir.verifier import verify

from ir.test_control_flow import NESTED
from pass_testing import run_and_compare


def loop_of(module, name="lz.for", func="f"):
    return next(op for op in module.lookup(func).entry_block.ops if op.name == name)


def body_ops(loop, region=0):
    return [op.name for op in loop.regions[region].blocks[0].ops]


LOCAL_ALGEBRA = """
func.func @f(%w: tensor<3xf32>, %h0: tensor<3xf32>) -> tensor<3xf32> {
  %one = "lz.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
  %h = "lz.for"(%w, %h0) ({
  ^bb0(%i: tensor<i64>, %w_: tensor<3xf32>, %h_: tensor<3xf32>):
    %one_ = "lz.constant"() {value = dense<1.0> : tensor<f32>} : () -> tensor<f32>
    %two = "lz.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
    %three = "lz.add"(%one_, %two) : (tensor<f32>, tensor<f32>) -> tensor<f32>
    %0 = "lz.mul"(%h_, %one_) : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
    %1 = "lz.mul"(%0, %w_) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %2 = "lz.mul"(%w_, %0) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %3 = "lz.add"(%1, %2) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %4 = "lz.mul"(%3, %three) : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
    %5 = "lz.tanh"(%4) : (tensor<3xf32>) -> tensor<3xf32>
    "lz.yield"(%5) : (tensor<3xf32>) -> ()
  }) {trip_count = 3 : i64, num_invariant = 1 : i64, num_carried = 1 : i64} : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  %r = "lz.mul"(%h, %one) : (tensor<3xf32>, tensor<f32>) -> tensor<3xf32>
  func.return %r : tensor<3xf32>
}
"""


def test_canonicalize_cse_and_constant_fold_simplify_a_loop_body_in_place():
    module = run_and_compare(parse_module(LOCAL_ALGEBRA), "canonicalize,cse,constant-fold,dce")
    verify(module)  # nothing inside uses an outer value: the body stays isolated
    loop = loop_of(module)
    # x*1 gone, w*h and h*w merged (commutative), 1+2 folded to one constant inside the body
    assert body_ops(loop) == ["lz.constant", "lz.mul", "lz.add", "lz.mul", "lz.tanh", "lz.yield"]
    assert loop.regions[0].blocks[0].ops[0].attributes["value"].splat_value() == 3.0
    assert [op.name for op in module.lookup("f").entry_block.ops] == ["lz.for", "func.return"]


PRUNABLE = """
func.func @f(%w: tensor<3xf32>, %unused: tensor<3xf32>, %h0: tensor<3xf32>, %s0: tensor<3xf32>,
             %xs: tensor<4x3xf32>, %zs: tensor<4x3xf32>) -> tensor<3xf32> {
  %n0 = "lz.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
  %h, %s, %n, %ys = "lz.for"(%w, %unused, %h0, %s0, %n0, %xs, %zs) ({
  ^bb0(%i: tensor<i64>, %w_: tensor<3xf32>, %u_: tensor<3xf32>, %h_: tensor<3xf32>, %s_: tensor<3xf32>,
       %n_: tensor<i64>, %x: tensor<3xf32>, %z: tensor<3xf32>):
    %0 = "lz.mul"(%h_, %w_) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %1 = "lz.add"(%0, %x) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %2 = "lz.tanh"(%1) : (tensor<3xf32>) -> tensor<3xf32>
    %3 = "lz.add"(%s_, %2) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %4 = "lz.add"(%n_, %i) : (tensor<i64>, tensor<i64>) -> tensor<i64>
    %5 = "lz.mul"(%2, %z) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    "lz.yield"(%2, %3, %4, %5) : (tensor<3xf32>, tensor<3xf32>, tensor<i64>, tensor<3xf32>) -> ()
  }) {trip_count = 4 : i64, num_invariant = 2 : i64, num_carried = 3 : i64}
     : (tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<3xf32>, tensor<i64>, tensor<4x3xf32>, tensor<4x3xf32>)
     -> (tensor<3xf32>, tensor<3xf32>, tensor<i64>, tensor<4x3xf32>)
  func.return RETURNED : tensor<3xf32>
}
"""


def test_dce_drops_what_a_loop_computes_for_nobody():
    module = run_and_compare(parse_module(PRUNABLE.replace("RETURNED", "%h")), "dce")
    verify(module)
    loop = loop_of(module)
    # left: the invariant w, the carried h, the scanned xs; the counter, the sum s (only feeding
    # itself), the stacked ys, the unused invariant and the scanned zs are gone
    assert [a.type for a in loop.operands] == [a.type for a in module.lookup("f").arguments[:1]] * 2 + [
        module.lookup("f").arguments[4].type]
    assert loop.operands[0] is module.lookup("f").arguments[0]
    assert loop.operands[1] is module.lookup("f").arguments[2]
    assert loop.operands[2] is module.lookup("f").arguments[4]
    assert len(loop.results) == 1
    assert body_ops(loop) == ["lz.mul", "lz.add", "lz.tanh", "lz.yield"]
    assert [op.name for op in module.lookup("f").entry_block.ops] == ["lz.for", "func.return"]


def test_dce_keeps_a_carried_value_that_feeds_a_kept_one():
    module = run_and_compare(parse_module(PRUNABLE.replace("RETURNED", "%s")), "dce")
    loop = loop_of(module)
    assert len(loop.results) == 2 and loop.definition.attrs(loop).num_carried == 2  # h feeds s: both stay


WHILE_AND_IF = """
func.func @f(%p: tensor<i1>, %w: tensor<2xf32>, %unused: tensor<2xf32>, %a0: tensor<2xf32>, %b0: tensor<2xf32>)
    -> (tensor<i64>, tensor<2xf32>) {
  %n0 = "lz.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>
  %n, %a, %b = "lz.while"(%w, %unused, %n0, %a0, %b0) ({
  ^bb0(%w_: tensor<2xf32>, %u_: tensor<2xf32>, %n_: tensor<i64>, %x: tensor<2xf32>, %y: tensor<2xf32>):
    %three = "lz.constant"() {value = dense<3> : tensor<i64>} : () -> tensor<i64>
    %go = "lz.cmp"(%n_, %three) {predicate = "lt"} : (tensor<i64>, tensor<i64>) -> tensor<i1>
    "lz.yield"(%go) : (tensor<i1>) -> ()
  }, {
  ^bb0(%w_: tensor<2xf32>, %u_: tensor<2xf32>, %n_: tensor<i64>, %x: tensor<2xf32>, %y: tensor<2xf32>):
    %one = "lz.constant"() {value = dense<1> : tensor<i64>} : () -> tensor<i64>
    %n1 = "lz.add"(%n_, %one) : (tensor<i64>, tensor<i64>) -> tensor<i64>
    %x1 = "lz.mul"(%x, %w_) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    %y1 = "lz.add"(%y, %x) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
    "lz.yield"(%n1, %x1, %y1) : (tensor<i64>, tensor<2xf32>, tensor<2xf32>) -> ()
  }) {num_invariant = 2 : i64} : (tensor<2xf32>, tensor<2xf32>, tensor<i64>, tensor<2xf32>, tensor<2xf32>)
     -> (tensor<i64>, tensor<2xf32>, tensor<2xf32>)
  %r, %dead = "lz.if"(%p, %a, %w, %unused) ({
  ^bb0(%a_: tensor<2xf32>, %w_: tensor<2xf32>, %u_: tensor<2xf32>):
    %0 = "lz.exp"(%a_) : (tensor<2xf32>) -> tensor<2xf32>
    "lz.yield"(%0, %u_) : (tensor<2xf32>, tensor<2xf32>) -> ()
  }, {
  ^bb0(%a_: tensor<2xf32>, %w_: tensor<2xf32>, %u_: tensor<2xf32>):
    %0 = "lz.neg"(%a_) : (tensor<2xf32>) -> tensor<2xf32>
    "lz.yield"(%0, %w_) : (tensor<2xf32>, tensor<2xf32>) -> ()
  }) : (tensor<i1>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>)
  func.return %n, %r : tensor<i64>, tensor<2xf32>
}
"""


def test_dce_prunes_while_and_if():
    module = run_and_compare(parse_module(WHILE_AND_IF), "dce", trials=3)
    verify(module)
    loop = loop_of(module, "lz.while")
    # the unused invariant and y (carried, read by nobody but itself) are gone; w, the counter
    # and x (the if reads it) stay
    func = module.lookup("f")
    assert list(loop.operands[::2]) == [func.arguments[1], func.arguments[3]]
    assert loop.definition.attrs(loop).num_invariant == 1 and len(loop.results) == 2
    branch = loop_of(module, "lz.if")
    assert len(branch.results) == 1 and len(branch.operands) == 2  # the condition and a
    assert [a.type for a in branch.regions[1].blocks[0].args] == [branch.operands[1].type]


LICM = """
func.func @f(%w: tensor<3x3xf32>, %b: tensor<3xf32>, %h0: tensor<1x3xf32>, %xs: tensor<4x1x3xf32>)
    -> (tensor<1x3xf32>, tensor<4x3xf32>) {
  %h, %ys = "lz.for"(%w, %b, %h0, %xs) ({
  ^bb0(%i: tensor<i64>, %w_: tensor<3x3xf32>, %b_: tensor<3xf32>, %h_: tensor<1x3xf32>, %x: tensor<1x3xf32>):
    %two = "lz.constant"() {value = dense<2.0> : tensor<f32>} : () -> tensor<f32>
    %wt = "lz.transpose"(%w_) {perm = array<i64: 1, 0>} : (tensor<3x3xf32>) -> tensor<3x3xf32>
    %w2 = "lz.mul"(%wt, %two) : (tensor<3x3xf32>, tensor<f32>) -> tensor<3x3xf32>
    %bb = "lz.exp"(%b_) : (tensor<3xf32>) -> tensor<3xf32>
    %0 = "lz.matmul"(%h_, %w2) : (tensor<1x3xf32>, tensor<3x3xf32>) -> tensor<1x3xf32>
    %1 = "lz.add"(%0, %x) : (tensor<1x3xf32>, tensor<1x3xf32>) -> tensor<1x3xf32>
    %2 = "lz.mul"(%1, %two) : (tensor<1x3xf32>, tensor<f32>) -> tensor<1x3xf32>
    %3 = "lz.add"(%2, %bb) : (tensor<1x3xf32>, tensor<3xf32>) -> tensor<1x3xf32>
    %4 = "lz.tanh"(%3) : (tensor<1x3xf32>) -> tensor<1x3xf32>
    "lz.yield"(%4, %bb) : (tensor<1x3xf32>, tensor<3xf32>) -> ()
  }) {trip_count = 4 : i64, num_invariant = 2 : i64, num_carried = 1 : i64}
     : (tensor<3x3xf32>, tensor<3xf32>, tensor<1x3xf32>, tensor<4x1x3xf32>) -> (tensor<1x3xf32>, tensor<4x3xf32>)
  func.return %h, %ys : tensor<1x3xf32>, tensor<4x3xf32>
}
"""


def test_licm_moves_invariant_work_before_the_loop():
    module = run_and_compare(parse_module(LICM), "licm,dce")
    verify(module)
    func = module.lookup("f")
    assert [op.name for op in func.entry_block.ops] == ["lz.transpose", "lz.constant", "lz.mul", "lz.exp", "lz.for",
                                                        "func.return"]
    loop = loop_of(module)
    # 2*W^T and exp(b) are the invariants now; W and b themselves are no longer read inside
    assert loop.operands[0] is func.entry_block.ops[2].result and loop.operands[1] is func.entry_block.ops[3].result
    assert loop.definition.attrs(loop).num_invariant == 2
    # what depends on the carried h or the scanned x stays (the constant 2 too: %2 reads it)
    assert body_ops(loop) == ["lz.constant", "lz.matmul", "lz.add", "lz.mul", "lz.add", "lz.tanh", "lz.yield"]


def test_licm_with_zero_iterations_keeps_the_results():
    text = LICM.replace("4x1x3", "0x1x3").replace("4x3xf32", "0x3xf32").replace("trip_count = 4", "trip_count = 0")
    run_and_compare(parse_module(text), "licm,dce")


def test_licm_moves_out_of_nested_loops_all_the_way():
    module = run_and_compare(parse_module(NESTED), "licm,dce")
    verify(module)
    assert [op.name for op in module.lookup("f").entry_block.ops] == ["lz.exp", "lz.for", "func.return"]
    outer = loop_of(module)
    inner = next(op for op in outer.regions[0].blocks[0].ops if op.name == "lz.for")
    assert body_ops(inner) == ["lz.mul", "lz.sin", "lz.yield"]


def test_licm_hoists_from_both_regions_of_a_while():
    module = run_and_compare(parse_module(WHILE_AND_IF.replace(
        '%x1 = "lz.mul"(%x, %w_)', '%wx = "lz.exp"(%w_) : (tensor<2xf32>) -> tensor<2xf32>\n'
        '    %x1 = "lz.mul"(%x, %wx)')), "licm", trials=3)
    verify(module)
    func = module.lookup("f")
    assert func.entry_block.ops[1].name == "lz.exp"
    loop = loop_of(module, "lz.while")
    assert loop.definition.attrs(loop).num_invariant == 3
    assert len(loop.regions[0].blocks[0].args) == len(loop.regions[1].blocks[0].args) == len(loop.operands)
    assert "lz.exp" not in body_ops(loop, 1)
