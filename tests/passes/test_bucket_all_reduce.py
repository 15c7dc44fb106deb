"""bucket-all-reduce and the collective ops on one process: DDP's buckets, the arena keeping a
bucket's buffer from its start to its wait, the compiled step equal to the interpreter, and the
runtime's host steps going through the installed communicator (a stand-in for a process group)."""
from __future__ import annotations

import re

import numpy as np
import pytest

import lezero as lz
from lezero.ir import parse_module
from lezero.ir.diagnostics import IRError
from lezero.ir.dialect import collective
from lezero.ir.interpreter import interpret
from lezero.ir.verifier import verify
from lezero.passes import run_pipeline
from lezero.passes.autodiff import differentiate
from lezero.passes.memory_plan import OFFSETS_ATTR

# a step's tail: three gradients (12, 4 and 3 floats), each averaged, each updating its parameter
STEP = '''
func.func @f(%x: tensor<4x3xf32>, %w: tensor<3x4xf32>, %b: tensor<4xf32>, %c: tensor<3xf32>)
    -> (tensor<3x4xf32>, tensor<4xf32>, tensor<3xf32>) {
  %xt = "lz.transpose"(%x) {perm = array<i64: 1, 0>} : (tensor<4x3xf32>) -> tensor<3x4xf32>
  %dw = "lz.matmul"(%xt, %x) : (tensor<3x4xf32>, tensor<4x3xf32>) -> tensor<3x3xf32>
  %gw = "lz.exp"(%w) : (tensor<3x4xf32>) -> tensor<3x4xf32>
  %gb = "lz.reduce_sum"(%x) {axes = array<i64: 1>} : (tensor<4x3xf32>) -> tensor<4xf32>
  %gc = "lz.reduce_sum"(%dw) {axes = array<i64: 0>} : (tensor<3x3xf32>) -> tensor<3xf32>
  %rw = "lz.all_reduce"(%gw) {op = "avg"} : (tensor<3x4xf32>) -> tensor<3x4xf32>
  %rb = "lz.all_reduce"(%gb) {op = "avg"} : (tensor<4xf32>) -> tensor<4xf32>
  %rc = "lz.all_reduce"(%gc) {op = "avg"} : (tensor<3xf32>) -> tensor<3xf32>
  %nw = "lz.sub"(%w, %rw) : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %nb = "lz.sub"(%b, %rb) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %nc = "lz.sub"(%c, %rc) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  func.return %nw, %nb, %nc : tensor<3x4xf32>, tensor<4xf32>, tensor<3xf32>
}
'''
SHAPES = [(4, 3), (3, 4), (4,), (3,)]


def inputs():
    rng = np.random.default_rng(0)
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


class Doubling:
    """A communicator of two ranks holding the same values: a sum doubles them, an average keeps
    them; it counts what it was handed and whether it reduced an array of the caller's in place."""

    def __init__(self):
        self.started, self.pending = [], {}

    def start_all_reduce(self, array, op, tag):
        if op == "sum":
            array *= 2
        self.started.append((tag, array.size))
        self.pending[len(self.started)] = array
        return len(self.started)

    def wait(self, request):
        return self.pending.pop(request)


@pytest.fixture
def doubling():
    c = Doubling()
    collective.set_communicator(c)
    yield c
    collective.set_communicator(None)


def test_buckets_are_ddps_reverse_order_split_at_the_cap():
    module = run_pipeline(parse_module(STEP), "bucket-all-reduce{bucket-bytes=32}")
    starts = [op for op in module.functions[0].walk() if op.name == "lz.all_reduce_start"]
    # reverse order: gc (12 B) + gb (16 B) fill bucket 0; gw (48 B) is over the cap with them: bucket 1
    assert sorted((s.attributes["tag"].value, s.operands[0].type.shape) for s in starts) == \
        [("bucket0", (7,)), ("bucket1", (3, 4))]
    starts.sort(key=lambda s: s.attributes["tag"].value)
    ops = module.functions[0].entry_block.ops
    names = [op.name for op in ops]
    # each start right after its bucket's last gradient (the concat of its values for bucket 0)
    for start in starts:
        assert ops[ops.index(start) - 1] is start.operands[0].owner
    assert starts[0].operands[0].owner.name == "lz.concat" and \
        ops[ops.index(starts[0].operands[0].owner) - 1].name == "lz.reduce_sum"
    # both waits after both starts, each right before the first update it feeds (through its slices)
    waits = [i for i, n in enumerate(names) if n == "lz.all_reduce_wait"]
    assert max(ops.index(s) for s in starts) < min(waits)
    assert [names[i + 1:names.index("lz.sub", i) + 1] for i in waits] == \
        [["lz.sub"], ["lz.slice", "lz.slice", "lz.sub"]]


def test_compiled_step_equals_the_interpreter_and_keeps_each_bucket_until_its_wait():
    module = run_pipeline(parse_module(STEP), "bucket-all-reduce{bucket-bytes=32}")
    want = interpret(parse_module(STEP), "f", *inputs())
    compiled = lz.compile(module, "f")
    for got, expected in zip(compiled(*inputs()), want):
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    scheduled = compiled.plan_for(SHAPES).module.functions[0]
    kernels = [op for op in scheduled.entry_block.ops if op.name == "lz.kernel"]
    body = {id(k): k.regions[0].block.ops[0].name for k in kernels}
    for k, start in enumerate(kernels):
        if body[id(start)] != "lz.all_reduce_start":
            continue
        flat = start.operands[0]
        wait = next(u.op for u in flat.uses if body.get(id(u.op)) == "lz.all_reduce_wait")
        producer = flat.owner
        low = producer.attributes[OFFSETS_ATTR].values[producer.results.index(flat)]
        high = low + flat.type.nbytes
        assert low >= 0, "a bucket lives in the arena"
        for between in kernels[k + 1:kernels.index(wait)]:  # nothing in flight's bytes is written meanwhile
            for r, offset in zip(between.results, between.attributes[OFFSETS_ATTR].values):
                assert offset < 0 or offset + r.type.nbytes <= low or offset >= high, between.attributes["name"]


def test_runtime_and_interpreter_reduce_through_the_communicator(doubling):
    text = STEP.replace('{op = "avg"}', '{op = "sum"}')
    x, w, b, c = inputs()
    want = interpret(parse_module(STEP), "f", x, w, b, c)
    doubled = [wv - 2 * (wv - g) for wv, g in zip((w, b, c), want)]  # w - 2 * gradient
    for got, expected in zip(interpret(run_pipeline(parse_module(text), "bucket-all-reduce"), "f", x, w, b, c),
                             doubled):
        np.testing.assert_allclose(got, expected, rtol=1e-5)
    doubling.started.clear()
    compiled = lz.compile(run_pipeline(parse_module(text), "bucket-all-reduce"), "f")
    for _ in range(2):  # the second call reuses the plan: same buffers, new requests
        for got, expected in zip(compiled(x, w, b, c), doubled):
            np.testing.assert_allclose(got, expected, rtol=1e-5)
    assert doubling.started == [("bucket0", 19)] * 2 and not doubling.pending
    # a blocking lz.all_reduce of an argument reduces a copy: the caller's array is left alone
    one = parse_module('''func.func @g(%x: tensor<4xf32>) -> tensor<4xf32> {
      %0 = "lz.all_reduce"(%x) : (tensor<4xf32>) -> tensor<4xf32>
      func.return %0 : tensor<4xf32>
    }''')
    np.testing.assert_array_equal(lz.compile(one, "g")(b), 2 * b)
    np.testing.assert_array_equal(b, inputs()[2])


def test_the_gradient_of_an_all_reduce_is_an_all_reduce():
    module = parse_module('''func.func @f(%x: tensor<3xf32>) -> tensor<f32> {
      %0 = "lz.all_reduce"(%x) {op = "avg"} : (tensor<3xf32>) -> tensor<3xf32>
      %1 = "lz.reduce_sum"(%0) : (tensor<3xf32>) -> tensor<f32>
      func.return %1 : tensor<f32>
    }''')
    grad = differentiate(module, "f")
    assert [op.attributes["op"].value for op in grad.walk() if op.name == "lz.all_reduce"] == ["avg", "avg"]


@pytest.mark.parametrize("body, message", [
    ('%t = "lz.all_reduce_start"(%x) : (tensor<4xf32>) -> tensor<i64>',
     "its request is never waited for"),
    (('%t = "lz.constant"() {value = dense<0> : tensor<i64>} : () -> tensor<i64>\n'
      '%r = "lz.all_reduce_wait"(%t, %x) : (tensor<i64>, tensor<4xf32>) -> tensor<4xf32>'),
     "the request must come from lz.all_reduce_start, not 'lz.constant'"),
    (('%t = "lz.all_reduce_start"(%x) : (tensor<4xf32>) -> tensor<i64>\n'
      '%y = "lz.exp"(%x) : (tensor<4xf32>) -> tensor<4xf32>\n'
      '%r = "lz.all_reduce_wait"(%t, %y) : (tensor<i64>, tensor<4xf32>) -> tensor<4xf32>'),
     "x must be the value its lz.all_reduce_start reduces"),
    (('%t = "lz.all_reduce_start"(%x) : (tensor<4xf32>) -> tensor<i64>\n'
      '%r = "lz.all_reduce_wait"(%t, %x, %x) : (tensor<i64>, tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>'),
     "an ordering operand must be a request token tensor<i64>, got tensor<4xf32>"),
    ('%r = "lz.all_reduce"(%x) {op = "mean"} : (tensor<4xf32>) -> tensor<4xf32>', "mean"),
])
def test_a_misused_collective_is_a_verifier_error_naming_it(body, message):
    text = f'func.func @f(%x: tensor<4xf32>) {{\n{body}\nfunc.return\n}}'
    with pytest.raises(IRError, match=re.escape(message)):
        verify(parse_module(text))
