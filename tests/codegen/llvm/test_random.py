"""lz.random_uniform compiled for the CPU: bit for bit the reference's numbers (Philox in LLVM IR
through the scalar builder's integer primitives), alone and fused with what reads it."""
import numpy as np
import pytest

import lezero as lz
from lezero.codegen.schedule import schedule
from lezero.ir import interpret, parse_module

STATES = [(0, 0), (0x0123456789ABCDEF, 5), (2 ** 64 - 1, 2 ** 64 - 3)]


def _module(shape, dtype):
    t = f"tensor<{'x'.join(map(str, shape))}x{dtype}>"
    like = f"tensor<{'x'.join(map(str, shape))}xf32>"
    return parse_module(f'''
module {{
  func.func @f(%s: tensor<2xi64>, %x: {like}) -> {t} {{
    %0 = "lz.random_uniform"(%s, %x) {{dtype = {dtype}}} : (tensor<2xi64>, {like}) -> {t}
    func.return %0 : {t}
  }}
}}''')


@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("shape, dtype", [((4,), "ui32"), ((3, 37), "f32"), ((2, 5, 9), "f64"), ((1000,), "f32")])
def test_compiled_random_numbers_are_the_references_bits(state, shape, dtype):
    module = _module(shape, dtype)
    s, x = np.array(state, np.uint64).view(np.int64), np.zeros(shape, np.float32)
    want = interpret(module, "f", s, x)
    got = lz.compile(module, "f")(s, x)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_compiled_known_answer():
    got = lz.compile(_module((8,), "ui32"), "f")(np.zeros(2, np.int64), np.zeros(8, np.float32))
    # block 0 of offset 0 (elements 0..3) is Random123's zero vector; block 1 follows
    assert [hex(w) for w in got[:4]] == ["0x6627e8d5", "0xe169c58d", "0xbc57ac4c", "0x9b00dbd8"]
    assert not np.array_equal(got[4:], got[:4])


DROPOUT = '''
module {
  func.func @f(%s: tensor<2xi64>, %x: tensor<16x33xf32>, %w: tensor<33x20xf32>) -> tensor<16x20xf32> {
    %0 = "lz.matmul"(%x, %w) : (tensor<16x33xf32>, tensor<33x20xf32>) -> tensor<16x20xf32>
    %u = "lz.random_uniform"(%s, %0) : (tensor<2xi64>, tensor<16x20xf32>) -> tensor<16x20xf32>
    %p = "lz.constant"() {value = dense<0.25> : tensor<f32>} : () -> tensor<f32>
    %keep = "lz.cmp"(%u, %p) {predicate = "ge"} : (tensor<16x20xf32>, tensor<f32>) -> tensor<16x20xi1>
    %k = "lz.constant"() {value = dense<1.3333334> : tensor<f32>} : () -> tensor<f32>
    %z = "lz.constant"() {value = dense<0.0> : tensor<f32>} : () -> tensor<f32>
    %1 = "lz.mul"(%0, %k) : (tensor<16x20xf32>, tensor<f32>) -> tensor<16x20xf32>
    %2 = "lz.select"(%keep, %1, %z) : (tensor<16x20xi1>, tensor<16x20xf32>, tensor<f32>) -> tensor<16x20xf32>
    func.return %2 : tensor<16x20xf32>
  }
}'''


def test_dropout_fuses_into_the_matmul_epilogue():
    module = parse_module(DROPOUT)
    kernels = [op for op in schedule(parse_module(DROPOUT)).functions[0].entry_block.ops if op.name == "lz.kernel"]
    assert len(kernels) == 1 and kernels[0].attributes["kind"].value == "matmul"
    rng = np.random.default_rng(0)
    s = np.array([9, 1234], np.int64)
    x, w = rng.standard_normal((16, 33)).astype(np.float32), rng.standard_normal((33, 20)).astype(np.float32)
    want = interpret(module, "f", s, x, w)
    got = lz.compile(module, "f")(s, x, w)
    np.testing.assert_array_equal(got == 0, want == 0)  # the same mask
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert 0.15 < (got == 0).mean() < 0.35
