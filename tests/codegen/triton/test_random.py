"""lz.random_uniform as Triton (in the interpreter): the reference's bits, ``tl.umulhi`` for
Philox's multiply-high, the known answer."""
import numpy as np
import pytest

import lezero.codegen.triton  # noqa: F401  (registers the cuda target)
from lezero.ir import interpret, parse_module

from triton_testing import run_triton


def _module(n, dtype):
    return parse_module(f'''
module {{
  func.func @f(%s: tensor<2xi64>, %x: tensor<{n}xf32>) -> tensor<{n}x{dtype}> {{
    %0 = "lz.random_uniform"(%s, %x) {{dtype = {dtype}}} : (tensor<2xi64>, tensor<{n}xf32>) -> tensor<{n}x{dtype}>
    func.return %0 : tensor<{n}x{dtype}>
  }}
}}''')


@pytest.mark.parametrize("state", [(0, 0), (0xFEDCBA9876543210, 2 ** 64 - 7)])
@pytest.mark.parametrize("dtype", ["ui32", "f32", "f64"])
def test_triton_random_numbers_are_the_references_bits(state, dtype):
    module = _module(300, dtype)
    s, x = np.array(state, np.uint64).view(np.int64), np.zeros(300, np.float32)
    kernels = []
    (got,) = run_triton(module, [s, x], kernels=kernels)
    assert kernels and "tl.umulhi" in kernels[0].source
    np.testing.assert_array_equal(got, interpret(module, "f", s, x))


def test_triton_known_answer():
    (got,) = run_triton(_module(4, "ui32"), [np.zeros(2, np.int64), np.zeros(4, np.float32)])
    assert [hex(w) for w in got] == ["0x6627e8d5", "0xe169c58d", "0xbc57ac4c", "0x9b00dbd8"]
