"""matmul, conv2d and the pools: shapes, errors, and numerics against numpy and torch."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from lezero.ir import OpError
from lezero.ir.types import tensor

seeds = st.integers(0, 2**32 - 1)


# --- matmul --------------------------------------------------------------------------------------

@st.composite
def matmul_shapes(draw):
    m, k, n = (draw(st.integers(0, 4)) for _ in range(3))
    batch = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=2, max_side=3))
    a = draw(st.sampled_from([(k,), batch.input_shapes[0] + (m, k)]))
    b = draw(st.sampled_from([(k,), batch.input_shapes[1] + (k, n)]))
    return a, b


@given(shapes=matmul_shapes(), seed=seeds, dtype=st.sampled_from([np.float16, np.float32, np.float64, np.int32]))
def test_matmul_matches_numpy(harness, shapes, seed, dtype):
    rng = np.random.default_rng(seed)
    a, b = (harness.random_array(rng, s, dtype) for s in shapes)
    got = harness.run("lz.matmul", a, b)
    expected = np.matmul(a.astype(np.float64), b.astype(np.float64)).astype(dtype)
    assert got.shape == expected.shape and got.dtype == dtype
    harness.assert_close(got, expected)


@pytest.mark.parametrize("a, b, out", [
    ((2, 3), (3, 4), (2, 4)),
    ((3,), (3, 4), (4,)),
    ((2, 3), (3,), (2,)),
    ((3,), (3,), ()),
    ((5, 1, 2, 3), (4, 3, 6), (5, 4, 2, 6)),
    ((None, 2, 3), (3, None), (None, 2, None)),
    ((2, None), (7, 4), (2, 4)),
    ((None, 2, 3), (5, 3, 4), (5, 2, 4)),
])
def test_matmul_shapes(harness, a, b, out):
    assert harness.infer("lz.matmul", tensor(a), tensor(b)) == tensor(out)


def test_matmul_errors(harness):
    with pytest.raises(OpError, match="'lz.matmul' op contracting dimensions differ: "
                                      "2x3 has 3 columns, 4x5 has 4 rows"):
        harness.infer("lz.matmul", tensor((2, 3)), tensor((4, 5)))
    with pytest.raises(OpError, match="batch shapes 2 and 3 are not broadcast-compatible"):
        harness.infer("lz.matmul", tensor((2, 1, 3)), tensor((3, 3, 1)))
    with pytest.raises(OpError, match="operands must have rank at least 1"):
        harness.infer("lz.matmul", tensor(()), tensor((3,)))
    with pytest.raises(OpError, match="operands must have the same element type, got f32 and f16"):
        harness.infer("lz.matmul", tensor((2, 3)), tensor((3, 2), "f16"))
    with pytest.raises(OpError, match="operands must have a numeric element type"):
        harness.infer("lz.matmul", tensor((2, 3), "i1"), tensor((3, 2), "i1"))


# --- conv2d --------------------------------------------------------------------------------------

CONV_CASES = [
    # N, C, H, W, O, KH, KW, strides, pads [t, l, b, r], dilations, groups
    (1, 1, 5, 5, 1, 3, 3, (1, 1), (0, 0, 0, 0), (1, 1), 1),
    (2, 3, 7, 6, 4, 3, 2, (2, 1), (1, 0, 2, 1), (1, 1), 1),
    (1, 4, 9, 9, 6, 3, 3, (1, 2), (2, 2, 2, 2), (2, 3), 2),
    (2, 6, 5, 4, 6, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 6),  # depthwise, 1x1
    (1, 2, 4, 4, 2, 4, 4, (3, 3), (0, 1, 1, 0), (1, 1), 1),
    (0, 2, 4, 4, 2, 2, 2, (1, 1), (0, 0, 0, 0), (1, 1), 1),  # empty batch
]


def _torch_conv(x, w, strides, pads, dilations, groups):
    t, l, b, r = pads
    xt = F.pad(torch.from_numpy(x), (l, r, t, b))
    return F.conv2d(xt, torch.from_numpy(w), stride=strides, dilation=dilations, groups=groups).numpy()


@pytest.mark.parametrize("case", CONV_CASES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_conv2d_matches_torch(harness, case, dtype):
    n, c, h, w_, o, kh, kw, strides, pads, dilations, groups = case
    rng = np.random.default_rng(0)
    x = harness.random_array(rng, (n, c, h, w_), dtype)
    w = harness.random_array(rng, (o, c // groups, kh, kw), dtype)
    got = harness.run("lz.conv2d", x, w, strides=strides, pads=pads, dilations=dilations, groups=groups)
    harness.assert_close(got, _torch_conv(x, w, strides, pads, dilations, groups))


def test_conv2d_f16_accumulates_in_f32(harness):
    rng = np.random.default_rng(1)
    x = harness.random_array(rng, (1, 16, 6, 6), np.float16)
    w = harness.random_array(rng, (8, 16, 3, 3), np.float16)
    got = harness.run("lz.conv2d", x, w)
    expected = _torch_conv(x.astype(np.float32), w.astype(np.float32), (1, 1), (0, 0, 0, 0), (1, 1), 1)
    np.testing.assert_allclose(got.astype(np.float32), expected, rtol=2e-3, atol=2e-2)


def test_conv2d_defaults_and_dynamic_shapes(harness):
    assert harness.infer("lz.conv2d", tensor((1, 3, 8, 8)), tensor((4, 3, 3, 3))) == tensor((1, 4, 6, 6))
    assert harness.infer("lz.conv2d", tensor((None, 3, None, 8)), tensor((4, 3, 3, 3)), pads=[1, 1, 1, 1]) == \
        tensor((None, 4, None, 8))
    assert harness.infer("lz.conv2d", tensor((2, None, 5, 5)), tensor((4, 3, 3, 3)), groups=2) == \
        tensor((2, 4, 3, 3))


def test_conv2d_errors(harness):
    x, w = tensor((1, 3, 8, 8)), tensor((4, 3, 3, 3))
    cases = [
        ((tensor((3, 8, 8)), w), {}, r"input must have rank 4 \(N x C x H x W\), got tensor<3x8x8xf32>"),
        ((x, tensor((4, 2, 3, 3))), {}, "input has 3 channels but weights 4x2x3x3 with groups = 1 expect 2"),
        ((tensor((1, 4, 8, 8)), tensor((3, 2, 3, 3))), {"groups": 2},
         "3 output channels are not divisible by groups = 2"),
        ((x, w), {"strides": [1]}, r"attribute 'strides' must have 2 values, got \[1\]"),
        ((x, w), {"strides": [0, 1]}, "attribute 'strides' values must be positive"),
        ((x, w), {"pads": [0, 0, -1, 0]}, "attribute 'pads' values must be non-negative"),
        ((x, w), {"groups": 0}, "attribute 'groups' must be positive"),
        ((tensor((1, 3, 2, 8)), w), {}, "window of size 3 is larger than the padded input size 2 in dim 2"),
        ((x, w), {"dilations": [4, 1]}, "window of size 9 is larger than the padded input size 8 in dim 2"),
        ((tensor((1, 3, 8, 8), "i32"), tensor((4, 3, 3, 3), "i32")), {}, "must have a float element type"),
    ]
    for operands, attrs, message in cases:
        with pytest.raises(OpError, match=message):
            harness.infer("lz.conv2d", *operands, **attrs)


# --- pools ---------------------------------------------------------------------------------------

POOL_CASES = [
    # H, W, kernel, strides, pads [t, l, b, r], ceil_mode
    (5, 5, (2, 2), (2, 2), (0, 0, 0, 0), False),
    (5, 5, (2, 2), (2, 2), (0, 0, 0, 0), True),
    (7, 6, (3, 3), (2, 2), (1, 1, 1, 1), True),
    (6, 7, (3, 2), (1, 2), (1, 0, 1, 0), False),
    (8, 8, (3, 3), (3, 3), (1, 1, 1, 1), True),
    (4, 9, (1, 3), (1, 3), (0, 1, 0, 1), False),
]


def _torch_pads(pads):
    t, l, b, r = pads
    assert (t, l) == (b, r), "torch pads symmetrically"
    return (t, l)


@pytest.mark.parametrize("case", POOL_CASES)
@pytest.mark.parametrize("dilations", [(1, 1), (2, 1)])
def test_max_pool2d_matches_torch(harness, case, dilations):
    h, w, kernel, strides, pads, ceil_mode = case
    if (h + pads[0] + pads[2]) < dilations[0] * (kernel[0] - 1) + 1:
        pytest.skip("window larger than input")
    x = harness.random_array(np.random.default_rng(2), (2, 3, h, w), np.float32)
    got = harness.run("lz.max_pool2d", x, kernel=kernel, strides=strides, pads=pads, dilations=dilations,
                      ceil_mode=ceil_mode)
    expected = F.max_pool2d(torch.from_numpy(x), kernel, strides, _torch_pads(pads), dilations,
                            ceil_mode=ceil_mode).numpy()
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("case", POOL_CASES)
@pytest.mark.parametrize("count_include_pad", [False, True])
def test_avg_pool2d_matches_torch(harness, case, count_include_pad):
    h, w, kernel, strides, pads, ceil_mode = case
    x = harness.random_array(np.random.default_rng(3), (2, 3, h, w), np.float32)
    got = harness.run("lz.avg_pool2d", x, kernel=kernel, strides=strides, pads=pads, ceil_mode=ceil_mode,
                      count_include_pad=count_include_pad)
    expected = F.avg_pool2d(torch.from_numpy(x), kernel, strides, _torch_pads(pads), ceil_mode=ceil_mode,
                            count_include_pad=count_include_pad).numpy()
    harness.assert_close(got, expected)


def test_max_pool2d_integers_and_padding_never_wins(harness):
    x = -np.arange(16, dtype=np.int8).reshape(1, 1, 4, 4) - 100
    got = harness.run("lz.max_pool2d", x, kernel=[2, 2], strides=[2, 2], pads=[1, 1, 1, 1])
    np.testing.assert_array_equal(got[0, 0], [[-100, -101, -103], [-104, -105, -107], [-112, -113, -115]])


def test_pool_shapes(harness):
    assert harness.infer("lz.max_pool2d", tensor((1, 3, 32, 32)), kernel=[3, 3], strides=[2, 2]) == \
        tensor((1, 3, 15, 15))
    assert harness.infer("lz.max_pool2d", tensor((1, 3, 32, 32)), kernel=[3, 3], strides=[2, 2], ceil_mode=True) == \
        tensor((1, 3, 16, 16))
    assert harness.infer("lz.avg_pool2d", tensor((None, 3, None, 7)), kernel=[2, 2]) == tensor((None, 3, None, 6))


def test_pool_errors(harness):
    with pytest.raises(OpError, match="'lz.max_pool2d' op requires attribute 'kernel'"):
        harness.infer("lz.max_pool2d", tensor((1, 1, 4, 4)))
    with pytest.raises(OpError, match="attribute 'kernel' must have 2 values"):
        harness.infer("lz.avg_pool2d", tensor((1, 1, 4, 4)), kernel=[2])
    with pytest.raises(OpError, match="must have a float element type"):
        harness.infer("lz.avg_pool2d", tensor((1, 1, 4, 4), "i32"), kernel=[2, 2])
    with pytest.raises(OpError, match="window of size 5 is larger than the padded input size 4 in dim 3"):
        harness.infer("lz.max_pool2d", tensor((1, 1, 8, 4)), kernel=[2, 5])
    with pytest.raises(TypeError, match="lz.avg_pool2d has no attribute 'dilations'"):
        harness.infer("lz.avg_pool2d", tensor((1, 1, 4, 4)), kernel=[2, 2], dilations=[1, 1])


# --- max_pool2d_grad ----------------------------------------------------------------------------

def _torch_max_pool_grad(x, dy, kernel, strides, pads, dilations, ceil_mode):
    xt = torch.from_numpy(x).requires_grad_()
    y = F.max_pool2d(xt, kernel, strides, _torch_pads(pads), dilations, ceil_mode=ceil_mode)
    (dx,) = torch.autograd.grad(y, xt, torch.from_numpy(dy))
    return dx.numpy()


@pytest.mark.parametrize("case", POOL_CASES)
@pytest.mark.parametrize("dilations", [(1, 1), (2, 1)])
@pytest.mark.parametrize("values", ["normal", "ties"])
def test_max_pool2d_grad_matches_torch(harness, case, dilations, values):
    h, w, kernel, strides, pads, ceil_mode = case
    if (h + pads[0] + pads[2]) < dilations[0] * (kernel[0] - 1) + 1:
        pytest.skip("window larger than input")
    rng = np.random.default_rng(4)
    x = harness.random_array(rng, (2, 3, h, w), np.float64)
    if values == "ties":  # few distinct values: ties in most windows go to the first maximum
        x = np.round(x)
    attrs = dict(kernel=kernel, strides=strides, pads=pads, dilations=dilations, ceil_mode=ceil_mode)
    y = harness.run("lz.max_pool2d", x, **attrs)
    dy = harness.random_array(rng, y.shape, np.float64)
    got = harness.run("lz.max_pool2d_grad", x, dy, **attrs)
    np.testing.assert_allclose(got, _torch_max_pool_grad(x, dy, kernel, strides, pads, dilations, ceil_mode),
                               rtol=1e-12, atol=1e-12)


def test_max_pool2d_grad_nan_and_minus_infinity_as_torch(harness):
    inf, nan = np.inf, np.nan
    x = np.array([[[[1, nan, 3, nan], [-inf, -inf, 2, 0], [-inf, -inf, 5, 5], [-inf, -inf, 5, 1]]]])
    dy_shape = (1, 1, 3, 3)
    dy = np.arange(1, 10, dtype=np.float64).reshape(dy_shape)
    for pads in ([0, 0, 0, 0], [1, 1, 1, 1]):
        attrs = dict(kernel=[2, 2], strides=[1, 1] if pads[0] == 0 else [2, 2], pads=pads)
        y = harness.run("lz.max_pool2d", x, **attrs)
        dy = np.arange(1, y.size + 1, dtype=np.float64).reshape(y.shape)
        got = harness.run("lz.max_pool2d_grad", x, dy, **attrs)
        want = _torch_max_pool_grad(x, dy, attrs["kernel"], attrs["strides"], pads, (1, 1), False)
        np.testing.assert_array_equal(got, want)


def test_max_pool2d_grad_f16_accumulates_in_f32(harness):
    x = np.array([0, 0, 9, 0, 0], np.float16).reshape(1, 1, 1, 5)  # all three windows pick the 9
    dy = np.array([1000, 0.25, 0.25], np.float16).reshape(1, 1, 1, 3)
    got = harness.run("lz.max_pool2d_grad", x, dy, kernel=[1, 3])
    # in f16, 1000 + 0.25 rounds back to 1000 (twice); in f32 the sum is 1000.5
    np.testing.assert_array_equal(got[0, 0, 0], np.array([0, 0, 1000.5, 0, 0], np.float16))


def test_max_pool2d_grad_shapes_and_errors(harness):
    x = tensor((1, 3, 8, 8))
    assert harness.infer("lz.max_pool2d_grad", x, tensor((1, 3, 4, 4)), kernel=[2, 2], strides=[2, 2]) == x
    assert harness.infer("lz.max_pool2d_grad", tensor((None, 3, 8, 8)), tensor((None, 3, 4, 4)), kernel=[2, 2],
                         strides=[2, 2]) == tensor((None, 3, 8, 8))
    with pytest.raises(OpError, match="output_grad shape 1x3x5x4 is not the pooled shape 1x3x4x4"):
        harness.infer("lz.max_pool2d_grad", x, tensor((1, 3, 5, 4)), kernel=[2, 2], strides=[2, 2])
    with pytest.raises(OpError, match="operands must have the same element type, got f32 and f64"):
        harness.infer("lz.max_pool2d_grad", x, tensor((1, 3, 4, 4), "f64"), kernel=[2, 2], strides=[2, 2])
    with pytest.raises(OpError, match="must have a float element type"):
        harness.infer("lz.max_pool2d_grad", tensor((1, 3, 8, 8), "i32"), tensor((1, 3, 4, 4), "i32"),
                      kernel=[2, 2], strides=[2, 2])
    with pytest.raises(OpError, match=r"output_grad must have rank 4"):
        harness.infer("lz.max_pool2d_grad", x, tensor((3, 4, 4)), kernel=[2, 2], strides=[2, 2])
