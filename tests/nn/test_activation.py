"""The activations against torch in float64 (modules and functional forms: outputs and input
gradients, PReLU's weight gradient), their arguments, reprs, in-place forms, gradients at large
inputs, and a trace exported to ONNX."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lezero as lz

from support.eager_testing import compare
from support.layer_testing import assert_traces_and_exports, compare_modules, twins

# away from the kinks (0, +-3, +-lambd), where the one-sided derivatives differ by convention
X = np.random.default_rng(0).uniform(-5, 5, (3, 4, 5))
X = X[np.all(np.abs(np.abs(X[..., None]) - np.array([0, 0.5, 1, 3, 1.5])) > 1e-3, axis=-1)].reshape(-1)[:48]
X = X.reshape(3, 4, 4)

MODULES = [
    lambda nn: nn.ELU(),
    lambda nn: nn.ELU(alpha=0.7),
    lambda nn: nn.SELU(),
    lambda nn: nn.CELU(alpha=1.5),
    lambda nn: nn.Mish(),
    lambda nn: nn.Hardswish(),
    lambda nn: nn.Hardsigmoid(),
    lambda nn: nn.Hardtanh(-2.0, 1.5),
    lambda nn: nn.Softsign(),
    lambda nn: nn.LogSigmoid(),
    lambda nn: nn.Tanhshrink(),
    lambda nn: nn.Softshrink(1.0),
    lambda nn: nn.Hardshrink(),
    lambda nn: nn.Threshold(0.3, -2.0),
    lambda nn: nn.GLU(dim=1),
    lambda nn: nn.PReLU(),
    lambda nn: nn.PReLU(4, init=0.1),
    lambda nn: nn.SiLU(),
    lambda nn: nn.Softplus(beta=2.0, threshold=3.0),
]


# torch's hardsigmoid backward multiplies by 1/6 rounded to float32, in float64 too
HARDSIGMOID_TOL = dict(rtol=1e-7, atol=1e-11)


@pytest.mark.parametrize("make", MODULES, ids=lambda m: repr(m(torch.nn)))
def test_modules_match_torch(make):
    torch_module, lz_module = twins(make)
    assert repr(lz_module) == repr(torch_module)
    compare_modules(torch_module, lz_module, X, **({"tol": HARDSIGMOID_TOL} if "Hardsigmoid" in repr(lz_module) else {}))


FUNCTIONS = [
    ("elu", dict(alpha=2.0)), ("selu", {}), ("celu", dict(alpha=0.5)), ("mish", {}), ("hardswish", {}),
    ("hardsigmoid", {}), ("hardtanh", dict(min_val=-0.5, max_val=2.0)), ("softsign", {}), ("logsigmoid", {}),
    ("tanhshrink", {}), ("softshrink", dict(lambd=1.5)), ("hardshrink", dict(lambd=1.0)),
    ("threshold", dict(threshold=1.0, value=0.5)), ("glu", dict(dim=-1)),
]


@pytest.mark.parametrize("name, kwargs", FUNCTIONS, ids=[f[0] for f in FUNCTIONS])
def test_functional_forms_match_torch(name, kwargs):
    compare(lambda x: getattr(lz.nn.functional, name)(x, **kwargs),
            lambda x: getattr(torch.nn.functional, name)(x, **kwargs), X,
            **({"tol": HARDSIGMOID_TOL} if name == "hardsigmoid" else {}))


def test_prelu_per_channel_and_errors():
    compare(lz.nn.functional.prelu, torch.nn.functional.prelu, X, np.array([0.1, -0.2, 0.3, 0.4]))
    with pytest.raises(RuntimeError, match="Mismatch of parameter numbers and input channel size"):
        lz.nn.functional.prelu(lz.tensor(X), lz.ones(3))
    with pytest.raises(RuntimeError, match="Halving dimension must be even"):
        lz.nn.functional.glu(lz.ones(3, 5))
    with pytest.raises(ValueError, match="min_val cannot be greater than max_val"):
        lz.nn.Hardtanh(1.0, -1.0)


def test_in_place_forms_write_the_input():
    x = lz.tensor(X)
    out = lz.nn.functional.elu(x, inplace=True)
    assert out is x
    np.testing.assert_allclose(x.numpy(), torch.nn.functional.elu(torch.tensor(X)).numpy(), rtol=1e-12)


@pytest.mark.parametrize("name", ["elu", "selu", "celu", "mish", "logsigmoid"])
def test_large_inputs_have_finite_gradients(name):
    """The exp branch a select does not take must not turn a zero cotangent into nan."""
    big = np.array([-800.0, -50.0, 50.0, 800.0], np.float32)
    compare(lambda x: getattr(lz.nn.functional, name)(x), lambda x: getattr(torch.nn.functional, name)(x), big,
            tol=dict(rtol=1e-6, atol=1e-6))


def test_trace_exports():
    model = lz.nn.Sequential(lz.nn.Linear(4, 6), lz.nn.ELU(), lz.nn.Hardswish(), lz.nn.Mish(), lz.nn.PReLU(),
                             lz.nn.SELU(), lz.nn.LogSigmoid(), lz.nn.Softshrink(), lz.nn.Hardtanh(), lz.nn.GLU())
    assert_traces_and_exports(model, np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32))
