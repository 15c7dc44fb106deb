"""``lz.bfloat16`` against torch's: a dtype of its own (ml_dtypes' two-byte storage), data rounded
through float32 as torch does, elementwise results bit-equal to torch's CPU kernels (float32
arithmetic rounded to bf16 after every op), reductions and matmul accumulating in float32, torch
interop through the bits, checkpoints, state dicts, printing and the cuda path."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

import lezero as lz


def bits(t) -> np.ndarray:
    """A bf16 tensor (lezero's or torch's) as its 16-bit patterns, NaNs made one pattern."""
    a = t.detach().float().numpy()
    a = np.where(np.isnan(a), np.float32("nan"), a)
    return (a.view(np.uint32) >> 16).astype(np.uint16)


def pair(array):
    return lz.tensor(array, dtype=lz.bfloat16), torch.tensor(array, dtype=torch.bfloat16)


@pytest.fixture
def rng():
    return np.random.default_rng(19)


def test_bfloat16_is_a_dtype_of_its_own():
    x = lz.tensor([1.0, 2.0], dtype=lz.bfloat16)
    assert x.dtype == lz.bfloat16 and str(lz.bfloat16) == "lezero.bfloat16"
    assert x.element_size() == 2 and x.is_floating_point() and lz.bfloat16.is_floating_point
    assert x.numpy().dtype == ml_dtypes.bfloat16
    assert lz.ones(3).bfloat16().dtype == lz.bfloat16 == lz.ones(3).to(torch.bfloat16).dtype
    assert x.float().dtype == lz.float32 and x.to(lz.float64).dtype == lz.float64
    assert lz.zeros(2, dtype="bfloat16").dtype == lz.bfloat16


def test_data_become_bfloat16_through_float32_as_torch_rounds(rng):
    tie = float(np.float32(1.0) + np.float32(2 ** -8))  # halfway between two bf16 values
    special = [tie + 2 ** -40, tie - 2 ** -40, 0.1, -0.0, np.inf, -np.inf, np.nan, 1e-40, 3.4e38, 65504.0, 1e39]
    values = np.concatenate([rng.standard_normal(1000) * 10.0 ** rng.integers(-8, 8, 1000), special])
    ours, theirs = pair(values)
    assert (bits(ours) == bits(theirs)).all()
    assert (bits(lz.tensor(values).to(lz.bfloat16)) == bits(theirs)).all()      # the IR's cast, f64 -> bf16
    assert (bits(lz.tensor(values.tolist(), dtype=lz.bfloat16)) == bits(theirs)).all()
    ints = np.array([16777217, -3, 2 ** 40 + 1, 255], np.int64)
    assert (bits(lz.tensor(ints).bfloat16()) == bits(torch.tensor(ints).bfloat16())).all()
    assert (bits(lz.tensor(theirs.float().numpy()).bfloat16()) == bits(theirs)).all()


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "maximum", "minimum", "pow"])
def test_binary_ops_are_bit_equal_to_torch(name, rng):
    a, b = rng.standard_normal((16, 33)), rng.standard_normal((16, 33))
    if name == "pow":
        a = np.abs(a)
    (la, ta), (lb, tb) = pair(a), pair(b)
    assert (bits(getattr(lz, name)(la, lb)) == bits(getattr(torch, name)(ta, tb))).all()
    # transposed views take the strided path, a row broadcasts
    assert (bits(getattr(lz, name)(la.t(), lb.t())) == bits(getattr(torch, name)(ta.t(), tb.t()))).all()
    assert (bits(getattr(lz, name)(la, lb[0])) == bits(getattr(torch, name)(ta, tb[0]))).all()


@pytest.mark.parametrize("name", ["exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "sin", "cos", "abs", "neg",
                                  "relu", "floor", "reciprocal", "erf"])
def test_unary_ops_are_bit_equal_to_torch(name, rng):
    a = rng.standard_normal((8, 40)) * 3
    if name in ("log", "sqrt", "rsqrt"):
        a = np.abs(a) + 1e-3
    la, ta = pair(a)
    fw_lz = getattr(lz, name) if hasattr(lz, name) else getattr(lz.nn.functional, name)
    fw_torch = getattr(torch, name)
    assert (bits(fw_lz(la)) == bits(fw_torch(ta))).all()
    assert (bits(fw_lz(la.t())) == bits(fw_torch(ta.t()))).all()


def test_comparisons_views_and_scalar_operands_as_torch(rng):
    (la, ta), (lb, tb) = pair(rng.standard_normal((5, 7))), pair(rng.standard_normal((5, 7)))
    assert ((la > lb).numpy() == (ta > tb).numpy()).all() and (la > lb).dtype == lz.bool
    assert (bits(la[:, 2:5] + lb[:, 1:4]) == bits(ta[:, 2:5] + tb[:, 1:4])).all()
    assert (bits(la + 0.1) == bits(ta + 0.1)).all() and (bits(la - 3) == bits(ta - 3)).all()
    # torch's add rounds a Python float to bf16 first, as lezero does for every op; its mul and div take
    # the float32 value: lezero multiplies by the rounded one (at most one bf16 step apart)
    rounded = torch.tensor(0.1, dtype=torch.bfloat16)
    assert (bits(la * 0.1) == bits(ta * rounded)).all()
    assert np.allclose(bits(la * 0.1).astype(int), bits(ta * 0.1).astype(int), atol=1, rtol=0)


def test_reductions_and_matmul_accumulate_in_float32_as_torch(rng):
    (la, ta), (lb, tb) = pair(rng.standard_normal((64, 300))), pair(rng.standard_normal((300, 48)))
    step = 2.0 ** -7  # one bf16 step, relative
    for ours, theirs in [(la.sum(1), ta.sum(1)), (la.mean(0), ta.mean(0)), (la @ lb, ta @ tb),
                         (lz.softmax(la, 1), torch.softmax(ta, 1)), (la.amax(1), ta.amax(1))]:
        assert ours.dtype == lz.bfloat16
        expected = theirs.float().numpy()
        assert np.allclose(ours.float().numpy(), expected, rtol=2 * step, atol=2 * step * np.abs(expected).max())
    assert (bits(la.amax(1)) == bits(ta.amax(1))).all() and (la.argmax(1).numpy() == ta.argmax(1).numpy()).all()
    # a sum whose float32 total needs rounding once (not per element): 256 ones and a small part
    ones = lz.ones(257, dtype=lz.bfloat16)
    assert ones.sum().item() == torch.ones(257, dtype=torch.bfloat16).sum().item() == 256.0


@pytest.mark.parametrize("other, expected", [
    (lz.float16, lz.float32), (lz.float32, lz.float32), (lz.float64, lz.float64), (lz.int64, lz.bfloat16),
    (lz.bool, lz.bfloat16), (lz.bfloat16, lz.bfloat16)])
def test_promotion_is_torchs(other, expected):
    x = lz.ones(2, dtype=lz.bfloat16)
    y = lz.ones(2, dtype=other)
    assert (x + y).dtype == expected == (y + x).dtype
    torch_other = getattr(torch, other.name)
    assert str((torch.ones(2, dtype=torch.bfloat16) + torch.ones(2, dtype=torch_other)).dtype) == \
        f"torch.{expected.name}"
    assert (x + 1.5).dtype == lz.bfloat16 and (x + lz.tensor(2.0)).dtype == lz.bfloat16  # rank 0 stays below
    assert (lz.arange(3) / lz.ones(3, dtype=lz.bfloat16)).dtype == lz.bfloat16


def test_gradients_are_bfloat16_and_bit_equal_to_torch(rng):
    a, b = rng.standard_normal((4, 6)), rng.standard_normal((4, 6))
    x, tx = lz.tensor(a, dtype=lz.bfloat16, requires_grad=True), torch.tensor(a, dtype=torch.bfloat16,
                                                                                requires_grad=True)
    y, ty = lz.tensor(b, dtype=lz.bfloat16, requires_grad=True), torch.tensor(b, dtype=torch.bfloat16,
                                                                                requires_grad=True)
    ((x * y).exp() * x - y / x).backward(lz.ones(4, 6, dtype=lz.bfloat16))
    ((tx * ty).exp() * tx - ty / tx).backward(torch.ones(4, 6, dtype=torch.bfloat16))
    assert x.grad.dtype == lz.bfloat16
    assert (bits(x.grad) == bits(tx.grad)).all() and (bits(y.grad) == bits(ty.grad)).all()


def test_torch_interop_goes_through_the_bits_and_shares_memory():
    t = torch.tensor([1.5, -2.25, 3.0], dtype=torch.bfloat16)
    shared = lz.as_tensor(t)
    assert shared.dtype == lz.bfloat16 and shared.tolist() == [1.5, -2.25, 3.0]
    t[0] = 7.0
    assert shared[0].item() == 7.0  # the same memory: an int16 view of torch's
    copied = lz.tensor(t)
    t[1] = 0.0
    assert copied[1].item() == -2.25
    back = torch.from_dlpack(shared)
    assert back.dtype == torch.bfloat16 and torch.equal(back, t)
    shared.add_(1.0)
    assert t[0].item() == 8.0  # torch's view of lezero's memory
    assert lz.from_dlpack(torch.ones(2, dtype=torch.bfloat16)).dtype == lz.bfloat16
    assert lz.from_numpy(np.ones(2, ml_dtypes.bfloat16)).dtype == lz.bfloat16
    assert (lz.ones(2) + t[:2]).dtype == lz.float32  # a torch bf16 operand promotes as a tensor


def test_checkpoints_state_dicts_and_printing(tmp_path):
    x = lz.tensor([1.0, 0.1, -np.inf, np.nan], dtype=lz.bfloat16)
    path = tmp_path / "bf16.lz"
    lz.save({"x": x}, path)
    loaded = lz.load(path)["x"]
    assert loaded.dtype == lz.bfloat16 and (bits(loaded) == bits(x)).all()
    assert repr(lz.tensor([1.0, 0.1], dtype=lz.bfloat16)) == "tensor([1.        , 0.10009766], dtype=lezero.bfloat16)"
    peer = torch.nn.Linear(3, 2).bfloat16()
    model = lz.nn.Linear(3, 2).bfloat16()
    model.load_state_dict({k: lz.tensor(v) for k, v in peer.state_dict().items()})
    inputs = torch.randn(4, 3).bfloat16()
    assert model.weight.dtype == lz.bfloat16
    expected = peer(inputs).detach().float().numpy()
    assert np.allclose(model(lz.tensor(inputs)).detach().float().numpy(), expected, rtol=2 ** -6, atol=2 ** -6)


def test_bfloat16_on_cuda_under_the_interpreter(monkeypatch, rng):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    (la, ta), (lb, tb) = pair(rng.standard_normal((6, 9))), pair(rng.standard_normal((6, 9)))
    ga, gb = la.to("cuda"), lb.to("cuda")
    out = ga * gb + ga.exp()
    assert out.is_cuda and out.dtype == lz.bfloat16
    assert (bits(out.cpu()) == bits(ta * tb + ta.exp())).all()
