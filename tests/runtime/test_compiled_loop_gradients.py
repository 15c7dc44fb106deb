"""The gradient of a loop and of a branch (lz.for's and lz.if's rules, built by the autodiff pass),
compiled for the CPU: the compiled @f_grad equals the reference interpreter's and torch's
autograd on the unrolled loop (f32, so to float32 rounding)."""
import numpy as np
import pytest
import torch

import lezero as lz
from lezero.ir.interpreter import interpret
from lezero.ir.parser import parse_module
from lezero.passes.autodiff import differentiate

from ir.test_control_flow import IF, rnn_inputs, rnn_module, rnn_numpy


@pytest.mark.parametrize("reverse", [False, True])
def test_compiled_loop_gradient_equals_the_interpreter_and_torch(reverse):
    module = rnn_module("f32", reverse)
    differentiate(module, "rnn")
    args = rnn_inputs(np.float32)
    rng = np.random.default_rng(2)
    cotangents = [rng.standard_normal(s).astype(np.float32) for s in [(1, 3), (1, 3), (4, 1, 3)]]
    compiled = lz.compile(module, "rnn_grad")(*args, *cotangents)
    interpreted = interpret(module, "rnn_grad", *args, *cotangents)
    leaves = [torch.tensor(a, requires_grad=True) for a in args]
    torch_grads = torch.autograd.grad(rnn_numpy(*leaves, reverse, lib=torch), leaves,
                                      [torch.tensor(c) for c in cotangents])
    assert len(compiled) == len(interpreted) == 8
    for k, (got, want) in enumerate(zip(compiled, interpreted)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"result #{k} vs the interpreter")
    for k, (got, want) in enumerate(zip(compiled[3:], torch_grads)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-5, err_msg=f"gradient #{k} vs torch")


@pytest.mark.parametrize("pred", [True, False])
def test_compiled_branch_gradient_equals_the_interpreter(pred):
    module = parse_module(IF)
    differentiate(module, "f")
    a, b, dr = np.array([1.0, 2.0, 3.0]), np.array([-1.0, 0.5, 2.0]), np.array([0.3, -2.0, 1.5])
    got = lz.compile(module, "f_grad")(np.bool_(pred), a, b, dr)
    want = interpret(module, "f_grad", np.bool_(pred), a, b, dr)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)
