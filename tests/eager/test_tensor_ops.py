"""Every Tensor op against torch in float64: results, and gradients through backward() for a random
cotangent; non-differentiable ops forward only; dtype promotion; creation and numpy interop."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lezero as lz

from support.eager_testing import compare

rng = np.random.default_rng(42)
A = rng.standard_normal((3, 4))
B = rng.standard_normal((3, 4))
ROW = rng.standard_normal(4)
POS = rng.uniform(0.5, 2.0, (3, 4))
CUBE = rng.standard_normal((2, 3, 4))
SQUARE = rng.standard_normal((4, 4))

# name, function (the same code runs on lezero and torch tensors), inputs
DIFFERENTIABLE = [
    ("add broadcast", lambda a, b: a + b, A, ROW),
    ("sub", lambda a, b: a - b, A, B),
    ("mul broadcast", lambda a, b: a * b, A, ROW),
    ("div", lambda a, b: a / b, A, POS),
    ("pow", lambda a, b: a ** b, POS, B),
    ("maximum", lambda a, b: a.maximum(b), A, B),
    ("minimum", lambda a, b: a.minimum(b), A, B),
    ("add number", lambda a: a + 2.5, A),
    ("rsub number", lambda a: 2.5 - a, A),
    ("rdiv number", lambda a: 3.0 / a, POS),
    ("pow number", lambda a: a ** 3, A),
    ("rpow number", lambda a: 2.0 ** a, A),
    ("neg", lambda a: -a, A),
    ("abs", lambda a: a.abs(), A),
    ("exp", lambda a: a.exp(), A),
    ("log", lambda a: a.log(), POS),
    ("sqrt", lambda a: a.sqrt(), POS),
    ("rsqrt", lambda a: a.rsqrt(), POS),
    ("tanh", lambda a: a.tanh(), A),
    ("sigmoid", lambda a: a.sigmoid(), A),
    ("relu", lambda a: a.relu(), A),
    ("sin cos", lambda a: a.sin() * a.cos(), A),
    ("reciprocal", lambda a: a.reciprocal(), POS),
    ("erf", lambda a: a.erf(), A),
    ("log1p expm1", lambda a: a.log1p() + a.expm1(), POS),
    ("square", lambda a: a.square(), A),
    ("clamp", lambda a: a.clamp(-0.5, 0.5), A),
    ("clamp min", lambda a: a.clamp(min=0.1), A),
    ("sum", lambda a: a.sum(), A),
    ("sum dim", lambda a: a.sum(1), A),
    ("sum dims keepdim", lambda a: a.sum((0, 2), keepdim=True), CUBE),
    ("mean", lambda a: a.mean(), A),
    ("mean dim", lambda a: a.mean(-1, keepdim=True), CUBE),
    ("max", lambda a: a.max(), A),
    ("max dim", lambda a: a.max(1).values, A),
    ("min dim", lambda a: a.min(0)[0], A),
    ("amax", lambda a: a.amax((1, 2)), CUBE),
    ("var", lambda a: a.var(1), A),
    ("std unbiased=False", lambda a: a.std(unbiased=False), A),
    ("prod", lambda a: a.prod(1), A),
    ("logsumexp", lambda a: a.logsumexp(1), A),
    ("norm", lambda a: a.norm(), A),
    ("softmax", lambda a: a.softmax(1), A),
    ("log_softmax", lambda a: a.log_softmax(-1), CUBE),
    ("matmul 2d", lambda a, b: a @ b, A, SQUARE),
    ("matmul batched", lambda a, b: a.matmul(b), CUBE, rng.standard_normal((2, 4, 5))),
    ("matmul broadcast", lambda a, b: a @ b, CUBE, SQUARE),
    ("matmul vector", lambda a, b: a @ b, A, ROW),
    ("vector matmul", lambda a, b: a @ b, ROW, SQUARE),
    ("reshape", lambda a: a.reshape(4, 3) * 2, A),
    ("view -1", lambda a: a.view(-1, 2) * 2, CUBE),
    ("transpose", lambda a: a.transpose(0, 2), CUBE),
    ("permute", lambda a: a.permute(1, 2, 0), CUBE),
    ("t", lambda a: a.t(), A),
    ("T", lambda a: a.T, A),
    ("mT", lambda a: a.mT, CUBE),
    ("unsqueeze squeeze", lambda a: a.unsqueeze(1).squeeze(), A),
    ("flatten", lambda a: a.flatten(1) * 1, CUBE),
    ("expand", lambda a: a.unsqueeze(0).expand(2, 3, 4), A),
    ("repeat", lambda a: a.repeat(2, 1), A),
    ("cat", lambda a, b: torch_or_lz(a).cat([a, b], 1), A, B),
    ("stack", lambda a, b: torch_or_lz(a).stack([a, b], 0), A, B),
    ("chunk", lambda a: a.chunk(2, 1)[1], A),
    ("narrow", lambda a: a.narrow(1, 1, 2), A),
    ("index int", lambda a: a[1], A),
    ("index slices", lambda a: a[:, 1:3], A),
    ("index step", lambda a: a[..., ::2], CUBE),
    ("index None", lambda a: a[None, 0, :, None], CUBE),
    ("index negative", lambda a: a[-1, -2], A),
    ("index list", lambda a: a[[2, 0, 2]], A),
    ("index tensor", lambda a: a[:, torch_or_lz(a).tensor([3, 0])], A),
    ("index int and list", lambda a: a[1, [2, 0]], CUBE),
    ("where", lambda a, b: torch_or_lz(a).where(a > b, a, b), A, B),
    ("where number", lambda a: torch_or_lz(a).where(a > 0, a, 0.0), A),
    ("masked_fill", lambda a: a.masked_fill(a < 0, 1.5), A),
    ("lerp", lambda a, b: a.lerp(b, 0.3), A, B),
    ("float64 to float32", lambda a: a.float(), A),
    ("clone", lambda a: a.clone() * 1, A),
    ("unbind", lambda a: a.unbind(1)[2], A),
]


def torch_or_lz(t):
    """The library of ``t``: one lambda serves both."""
    return torch if isinstance(t, torch.Tensor) else lz


@pytest.mark.parametrize("case", DIFFERENTIABLE, ids=[c[0] for c in DIFFERENTIABLE])
def test_op_and_gradient_match_torch(case):
    _, fn, *arrays = case
    tol = dict(rtol=2e-6, atol=1e-7) if case[0] == "float64 to float32" else None
    compare(fn, fn, *arrays, **({"tol": tol} if tol else {}))


NOT_DIFFERENTIABLE = [
    ("argmax", lambda a: a.argmax(), A),
    ("argmax dim", lambda a: a.argmax(1, keepdim=True), A),
    ("argmin dim", lambda a: a.argmin(0), A),
    ("max indices", lambda a: a.max(1).indices, A),
    ("compare", lambda a, b: (a > b, a <= b, a == a, a != b), A, B),
    ("compare number", lambda a: (a > 0.5, a < 0), A),
    ("floor ceil sign", lambda a: (a.floor(), a.ceil(), a.sign()), A),
    ("any all", lambda a: ((a > 0).any(), (a > -5).all(1)), A),
    ("logical", lambda a, b: ((a > 0) & (b > 0), (a > 0) | (b > 0), ~(a > 0)), A, B),
    ("floor divide", lambda a: (a // 0.7, a % 0.7), A),
    ("integer floor divide", lambda a: (a // 3, a % 3), np.arange(-7, 8).reshape(3, 5)),
    ("integer sum", lambda a: (a.sum(), a.sum(0)), np.arange(12, dtype=np.int32).reshape(3, 4)),
    ("bool sum", lambda a: (a > 5).sum(1), np.arange(12).reshape(3, 4)),
    ("boolean mask", lambda a: a[a > 0], A),
]


@pytest.mark.parametrize("case", NOT_DIFFERENTIABLE, ids=[c[0] for c in NOT_DIFFERENTIABLE])
def test_op_matches_torch(case):
    _, fn, *arrays = case
    compare(fn, fn, *arrays, grad=False)


@pytest.mark.parametrize("make", [
    lambda lib: lib.tensor([1, 2, 3]) + 1.5,                                  # int + float number
    lambda lib: lib.tensor([1, 2, 3]) / lib.tensor([2, 2, 2]),                # true division of ints
    lambda lib: lib.tensor([1.0, 2.0]) + lib.tensor([1.0, 2.0], dtype=lib.float64),
    lambda lib: lib.tensor([1.0, 2.0]) * lib.tensor(3.0, dtype=lib.float64),  # a 0-d tensor does not promote
    lambda lib: lib.tensor([1, 2]) * lib.tensor(3.0, dtype=lib.float64),      # unless of a higher category
    lambda lib: lib.tensor([True, False]) + 1,
    lambda lib: lib.tensor([1, 2], dtype=lib.int32) + lib.tensor([1, 2]),
    lambda lib: lib.tensor([1.0, 2.0], dtype=lib.float16) * 2,
    lambda lib: lib.arange(5) * 2,
    lambda lib: lib.arange(0, 1, 0.25),
    lambda lib: lib.tensor([[1, 2], [3, 4]]).float().mean(),
], ids=["int+float", "int/int", "f32+f64", "f32*f64 0-d", "int*f64 0-d", "bool+int", "i32+i64", "f16*int",
        "arange int", "arange float", "float mean"])
def test_dtype_promotion_matches_torch(make):
    got, want = make(lz), make(torch)
    assert got.dtype.name == str(want.dtype).split(".")[-1]
    np.testing.assert_allclose(got.numpy(), want.numpy())


def test_creation_and_numpy_interop():
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    shared = lz.from_numpy(array)
    array[0, 0] = 42
    assert shared[0, 0].item() == 42                           # no copy
    assert lz.tensor(array).numpy() is not array                # a copy
    assert lz.tensor([[1, 2]]).dtype is lz.int64 and lz.tensor([1.5]).dtype is lz.float32
    assert lz.tensor([True]).dtype is lz.bool and lz.tensor(array, dtype=lz.float64).dtype is lz.float64
    assert lz.zeros(2, 3).shape == (2, 3) and lz.ones((4,), dtype=lz.int32).dtype is lz.int32
    assert lz.full((2,), 7).tolist() == [7, 7] and lz.full((2,), 7.0).dtype is lz.float32
    assert lz.arange(3).tolist() == [0, 1, 2] and lz.arange(1, 2, 0.5).tolist() == [1.0, 1.5]
    assert lz.tensor(3.5).item() == 3.5 and lz.tensor([[1]]).item() == 1
    assert lz.zeros_like(shared).shape == (2, 3) and lz.randn(2, 2).dtype is lz.float32
    assert lz.tensor([1.0]).device == "cpu" and lz.tensor([1.0]).to("cpu").to(lz.float64).dtype is lz.float64
    assert np.asarray(lz.ones(2)).tolist() == [1.0, 1.0]
    lz.manual_seed(3)
    first = lz.randn(5).numpy().copy()
    lz.manual_seed(3)
    np.testing.assert_array_equal(lz.randn(5).numpy(), first)
    g = lz.Generator().manual_seed(1)
    assert lz.rand(3, generator=g).numpy().tolist() == lz.rand(3, generator=lz.Generator().manual_seed(1)).tolist()
    with pytest.raises(RuntimeError, match="requires grad"):
        lz.ones(2, requires_grad=True).numpy()


def test_in_place_ops_write_into_memory():
    array = np.zeros(3, np.float32)
    t = lz.from_numpy(array)
    t += 1
    t.mul_(3).sub_(1)
    t[0] = 10
    assert array.tolist() == [10.0, 2.0, 2.0]
    t.zero_()
    assert array.tolist() == [0.0, 0.0, 0.0]
    view = t.reshape(3, 1)  # reshapes share memory, as PyTorch's views
    view.fill_(5)
    assert array.tolist() == [5.0, 5.0, 5.0]


def test_in_place_on_a_recorded_tensor_is_differentiated():
    x = lz.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2
    y.add_(1)
    (y * y).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 4 * (2 * x.detach().numpy() + 1))


def test_in_place_errors():
    leaf = lz.ones(3, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        leaf.add_(1)
    with lz.no_grad():
        leaf.add_(1)  # fine without grad mode (what optimizers do)
    assert leaf.tolist() == [2.0, 2.0, 2.0]
    y = leaf * 2
    z = y * y
    y.add_(1)  # changes a value z's gradient needs
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_tensor_protocols():
    t = lz.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert len(t) == 2 and [row.tolist() for row in t] == [[1.0, 2.0], [3.0, 4.0]]
    assert float(t[1, 1]) == 4.0 and int(lz.tensor(3)) == 3 and bool(lz.tensor([1.0]))
    assert t.size() == (2, 2) and t.size(1) == 2 and t.dim() == 2 and t.numel() == 4
    assert repr(lz.tensor([1.0], requires_grad=True)) == "tensor([1.], requires_grad=True)"
    assert "grad_fn" in repr(lz.tensor([1.0], requires_grad=True) * 2)
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(t)
    with pytest.raises(IndexError, match="out of bounds"):
        t[5]
    with pytest.raises(IndexError, match="out of bounds"):
        t[:, [0, 9]]
