"""lz.nn.functional against torch.nn.functional in float64: results and input gradients."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

import lezero as lz
import lezero.nn.functional as LF

from support.eager_testing import compare

rng = np.random.default_rng(7)
X = rng.standard_normal((4, 6))
W = rng.standard_normal((5, 6))
BIAS = rng.standard_normal(5)
IMAGE = rng.standard_normal((2, 3, 7, 7))
KERNEL = rng.standard_normal((4, 3, 3, 3))
KBIAS = rng.standard_normal(4)
GROUPED = rng.standard_normal((4, 1, 3, 3))
TARGET = np.array([1, 0, 5, 3])
PIXEL_TARGET = rng.integers(0, 3, (2, 7, 7))
PROBS = rng.uniform(0.05, 0.95, (4, 6))


def both(name, *args, **kwargs):
    """The same call on both libraries: ``both("relu")(x)``."""
    def call(*tensors):
        lib = LF if isinstance(tensors[0], lz.Tensor) else TF
        return getattr(lib, name)(*tensors, *args, **kwargs)
    return call


CASES = [
    ("relu", both("relu"), X),
    ("gelu", both("gelu"), X),
    ("gelu tanh", both("gelu", approximate="tanh"), X),
    ("sigmoid", both("sigmoid"), X),
    ("tanh", both("tanh"), X),
    ("silu", both("silu"), X),
    ("leaky_relu", both("leaky_relu", 0.1), X),
    ("softplus", both("softplus"), X),
    ("softmax", both("softmax", dim=1), X),
    ("log_softmax", both("log_softmax", dim=0), X),
    ("linear", both("linear"), X, W, BIAS),
    ("linear no bias", both("linear"), rng.standard_normal((2, 4, 6)), W),
    ("conv2d", both("conv2d", padding=1), IMAGE, KERNEL, KBIAS),
    ("conv2d stride dilation", both("conv2d", stride=2, dilation=2), IMAGE, KERNEL),
    ("conv2d same", both("conv2d", padding="same"), IMAGE, KERNEL, KBIAS),
    ("conv2d groups", both("conv2d", groups=3), IMAGE, rng.standard_normal((3, 1, 3, 3))),
    ("max_pool2d", both("max_pool2d", 2), IMAGE),
    ("max_pool2d stride pad", both("max_pool2d", 3, stride=2, padding=1), IMAGE),
    ("max_pool2d ceil", both("max_pool2d", 2, ceil_mode=True), IMAGE),
    ("avg_pool2d", both("avg_pool2d", 2), IMAGE),
    ("avg_pool2d pad", both("avg_pool2d", 3, stride=2, padding=1), IMAGE),
    ("avg_pool2d pad exclude", both("avg_pool2d", 3, stride=2, padding=1, count_include_pad=False), IMAGE),
    ("adaptive_avg_pool2d 1", both("adaptive_avg_pool2d", 1), IMAGE),
    ("adaptive_avg_pool2d 3", both("adaptive_avg_pool2d", (3, 2)), IMAGE),
    ("layer_norm", lambda x, w, b: (LF if isinstance(x, lz.Tensor) else TF).layer_norm(x, (6,), w, b), X,
     rng.standard_normal(6), rng.standard_normal(6)),
    ("layer_norm 2 dims", both("layer_norm", (3, 6)), rng.standard_normal((2, 3, 6))),
    ("batch_norm training", both("batch_norm", None, None, training=True), IMAGE),
    ("batch_norm eval", lambda x, m, v, w, b: (LF if isinstance(x, lz.Tensor) else TF).batch_norm(
        x, m.detach(), v.detach(), w, b, training=False), IMAGE, rng.standard_normal(3), rng.uniform(0.5, 2, 3),
     rng.standard_normal(3), rng.standard_normal(3)),
    ("embedding", lambda idx, w: (LF if isinstance(w, lz.Tensor) else TF).embedding(idx, w), np.array([[1, 3], [3, 0]]),
     rng.standard_normal((5, 3))),
    ("pad", both("pad", (1, 2, 0, 1)), IMAGE),
    ("pad crop", both("pad", (-1, 2), value=0.5), X),
    ("cross_entropy", both("cross_entropy"), X, TARGET),
    ("cross_entropy sum", both("cross_entropy", reduction="sum"), X, TARGET),
    ("cross_entropy none", both("cross_entropy", reduction="none"), X, TARGET),
    ("cross_entropy ignore", both("cross_entropy", ignore_index=5), X, TARGET),
    ("cross_entropy smoothing", both("cross_entropy", label_smoothing=0.2), X, TARGET),
    ("cross_entropy weight", lambda x, t, w: (LF if isinstance(x, lz.Tensor) else TF).cross_entropy(x, t, w.detach()),
     X, TARGET, rng.uniform(0.5, 2, 6)),
    ("cross_entropy pixels", both("cross_entropy"), IMAGE, PIXEL_TARGET),
    ("nll_loss", lambda x, t: (LF if isinstance(x, lz.Tensor) else TF).nll_loss(x.log_softmax(1), t), X, TARGET),
    ("mse_loss", both("mse_loss"), X, PROBS),
    ("mse_loss none", both("mse_loss", reduction="none"), X, PROBS),
    ("l1_loss", both("l1_loss"), X, PROBS),
    ("smooth_l1_loss", both("smooth_l1_loss"), X, PROBS),
    ("bce_with_logits", both("binary_cross_entropy_with_logits"), X, PROBS),
    ("bce_with_logits sum", both("binary_cross_entropy_with_logits", reduction="sum"), X, PROBS),
    ("bce_with_logits pos_weight", lambda x, t, p: (LF if isinstance(x, lz.Tensor) else TF)
     .binary_cross_entropy_with_logits(x, t, pos_weight=p.detach()), X, PROBS, rng.uniform(0.5, 2, 6)),
    ("binary_cross_entropy", both("binary_cross_entropy"), PROBS, np.clip(PROBS[::-1], 0, 1).copy()),
    ("scaled_dot_product_attention", both("scaled_dot_product_attention", is_causal=True),
     rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 4, 3)), rng.standard_normal((2, 4, 3))),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_functional_matches_torch(case):
    _, fn, *arrays = case
    compare(fn, fn, *arrays)


def test_dropout_is_seeded_and_scaled():
    x = lz.ones(1000, requires_grad=True)
    lz.manual_seed(0)
    y = LF.dropout(x, 0.3)
    lz.manual_seed(0)
    np.testing.assert_array_equal(LF.dropout(x, 0.3).detach().numpy(), y.detach().numpy())
    kept = y.detach().numpy() != 0
    assert 0.6 < kept.mean() < 0.8
    np.testing.assert_allclose(y.detach().numpy()[kept], 1 / 0.7, rtol=1e-6)
    y.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.where(kept, 1 / 0.7, 0), rtol=1e-6)
    assert LF.dropout(x, 0.3, training=False) is x


@pytest.mark.parametrize("p, dtype", [(0.1, "float32"), (0.5, "float32"), (0.8, "float64")])
def test_dropout_rate_and_inverted_scaling_are_right(p, dtype):
    n = 100_000
    x = lz.ones(n, dtype=dtype)
    y = LF.dropout(x, p, generator=lz.Generator().manual_seed(3)).numpy()
    kept = y != 0
    keep = 1 - p
    assert abs(kept.mean() - keep) < 5 * np.sqrt(keep * p / n)  # within 5 sigma of a binomial
    np.testing.assert_array_equal(y[kept], np.asarray(1 / keep, dtype))  # the same rounding as x / (1 - p)
    assert y.dtype == np.dtype(dtype)


def test_dropout_masks_are_the_reference_philox_draws():
    from lezero.ir.dialect.random import random_words, words_to
    from lezero.ir.types import F32

    g = lz.Generator().manual_seed(123)
    x = lz.ones(3, 50)
    first, second = LF.dropout(x, 0.4, generator=g).numpy(), LF.dropout(x, 0.4, generator=g).numpy()
    for offset, y in enumerate((first, second)):  # each draw takes the next offset
        u = words_to(random_words(123, offset, 150), F32).reshape(3, 50)
        np.testing.assert_array_equal(y != 0, u >= np.float32(0.4))
    assert not np.array_equal(first, second)


def test_channel_dropout_zeroes_whole_channels():
    lz.manual_seed(1)
    x = lz.ones(8, 16, 3, 3)
    y = LF.dropout2d(x, 0.5).numpy()
    per_channel = y.reshape(8, 16, 9)
    assert ((per_channel == 0).all(axis=2) | (per_channel == 2).all(axis=2)).all()
    assert 0 < (per_channel[:, :, 0] == 0).mean() < 1
    assert LF.dropout1d(lz.ones(4, 5, 7), 0.3).shape == (4, 5, 7)
    assert LF.dropout3d(lz.ones(2, 3, 2, 2, 2), 0.3, training=False).shape == (2, 3, 2, 2, 2)
    with pytest.raises(RuntimeError, match="dropout2d: expected a 3-D or 4-D input"):
        LF.dropout2d(lz.ones(4, 5), 0.5)
    assert (lz.nn.Dropout2d(0.5)(x).numpy().reshape(8, 16, 9).std(axis=2) == 0).all()


def test_attention_dropout_draws_from_the_generator():
    q = lz.randn(2, 4, 6, 8)
    lz.manual_seed(5)
    a = LF.scaled_dot_product_attention(q, q, q, dropout_p=0.5).numpy()
    b = LF.scaled_dot_product_attention(q, q, q, dropout_p=0.5).numpy()
    lz.manual_seed(5)
    np.testing.assert_array_equal(LF.scaled_dot_product_attention(q, q, q, dropout_p=0.5).numpy(), a)
    assert not np.array_equal(a, b)


def test_one_hot_and_errors():
    assert LF.one_hot(lz.tensor([2, 0]), 3).tolist() == [[0, 0, 1], [1, 0, 0]]
    with pytest.raises(IndexError, match="index 3 is out of range for axis 0 of size 3"):
        LF.cross_entropy(lz.randn(2, 3), lz.tensor([0, 3]))
    with pytest.raises(ValueError, match="Expected target size"):
        LF.cross_entropy(lz.randn(2, 3), lz.tensor([0, 1, 2]))
    with pytest.raises(IndexError, match="out of range"):
        LF.embedding(lz.tensor([5]), lz.randn(3, 2))


def test_float32_losses_match_torch():
    x = rng.standard_normal((8, 10)).astype(np.float32)
    t = rng.integers(0, 10, 8)
    got = LF.cross_entropy(lz.tensor(x), lz.tensor(t))
    want = TF.cross_entropy(torch.tensor(x), torch.tensor(t))
    assert got.dtype is lz.float32
    np.testing.assert_allclose(got.item(), want.item(), rtol=1e-6)
