"""softmax, log_softmax, layer_norm, batch_norm: torch as the peer, and each decomposition run
against the composite's own reference."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from lezero.ir import Builder, OpError, interpret
from lezero.ir.opdef import COMPOSITE, lookup
from lezero.ir.types import tensor, tensor_type_of

COMPOSITES = ["lz.softmax", "lz.log_softmax", "lz.layer_norm", "lz.batch_norm"]
seeds = st.integers(0, 2**32 - 1)


def decomposed(harness, name, types, **attrs):
    """Two modules: ``@f`` with the composite op, and the same function with it decomposed the way
    the decompose pass does (build before it, replace its uses, erase it)."""
    original, _ = harness.build(name, types, **attrs)
    module, op = harness.build(name, types, **attrs)
    definition = lookup(name)
    replacements = definition.decompose(Builder.before(op), op, definition.attrs(op))
    for old, new in zip(op.results, replacements):
        assert new.type == old.type
        old.replace_all_uses_with(new)
    op.erase()
    names = {o.name for o in module.lookup("f").entry_block.ops}
    assert not any(lookup(n) is not None and lookup(n).has_trait(COMPOSITE) for n in names)
    return original, module


def test_composites_have_the_trait():
    for name in COMPOSITES:
        assert lookup(name).has_trait(COMPOSITE)


# --- softmax and log_softmax ---------------------------------------------------------------------

@pytest.mark.parametrize("name, peer", [("lz.softmax", F.softmax), ("lz.log_softmax", F.log_softmax)])
@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5), seed=seeds, data=st.data(),
       dtype=st.sampled_from([np.float32, np.float64]))
def test_softmax_family_matches_torch_and_decomposes(harness, name, peer, shape, seed, data, dtype):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = (harness.random_array(np.random.default_rng(seed), shape, dtype) * 30).astype(dtype)  # large: stability
    expected = peer(torch.from_numpy(x), dim=axis).numpy()
    harness.assert_close(harness.run(name, x, axis=axis), expected)
    original, lowered = decomposed(harness, name, [tensor_type_of(x)], axis=axis)
    harness.assert_close(interpret(lowered, "f", x), interpret(original, "f", x))


def test_softmax_default_axis_and_f16(harness):
    x = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float16)
    expected = F.softmax(torch.from_numpy(x).float(), dim=-1).numpy()
    np.testing.assert_allclose(harness.run("lz.softmax", x).astype(np.float32), expected, rtol=2e-3, atol=1e-3)


def test_softmax_errors(harness):
    with pytest.raises(OpError, match="'lz.softmax' op axis 2 is out of range for rank 2"):
        harness.infer("lz.softmax", tensor((2, 3)), axis=2)
    with pytest.raises(OpError, match="'lz.log_softmax' op operand must have a float element type"):
        harness.infer("lz.log_softmax", tensor((2, 3), "i32"))


# --- layer_norm ----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, axis, param_shape", [
    ((2, 5), -1, (5,)),
    ((2, 3, 4), 1, (3, 4)),
    ((2, 3, 4), -2, (4,)),   # scale broadcasts over the normalized dims
    ((4, 6), 0, (4, 6)),
    ((3, 1), -1, (1,)),
])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_matches_torch_and_decomposes(harness, shape, axis, param_shape, dtype):
    rng = np.random.default_rng(4)
    x = (harness.random_array(rng, shape, dtype) * 3 + 1).astype(dtype)
    scale, bias = (harness.random_array(rng, param_shape, dtype) for _ in range(2))
    got = harness.run("lz.layer_norm", x, scale, bias, axis=axis, epsilon=1e-3)
    normalized = shape[axis % len(shape):]
    expected = F.layer_norm(torch.from_numpy(x), normalized,
                            torch.from_numpy(np.broadcast_to(scale, normalized).copy()),
                            torch.from_numpy(np.broadcast_to(bias, normalized).copy()),
                            eps=1e-3).numpy()  # every digit of epsilon kept (an f64 attribute here)
    harness.assert_close(got, expected)
    original, lowered = decomposed(harness, "lz.layer_norm", [tensor_type_of(a) for a in (x, scale, bias)],
                                   axis=axis, epsilon=1e-3)
    harness.assert_close(interpret(lowered, "f", x, scale, bias), interpret(original, "f", x, scale, bias))


def test_layer_norm_errors(harness):
    with pytest.raises(OpError, match="scale shape 3 does not broadcast to the normalized shape 4"):
        harness.infer("lz.layer_norm", tensor((2, 4)), tensor((3,)), tensor((4,)))
    with pytest.raises(OpError, match="bias shape 2x4 does not broadcast to the normalized shape 4"):
        harness.infer("lz.layer_norm", tensor((2, 4)), tensor((4,)), tensor((2, 4)))
    with pytest.raises(OpError, match="operands must have the same element type, got f32 and f16"):
        harness.infer("lz.layer_norm", tensor((2, 4)), tensor((4,), "f16"), tensor((4,)))
    assert harness.infer("lz.layer_norm", tensor((None, 4)), tensor((4,)), tensor((4,))) == tensor((None, 4))


# --- batch_norm ----------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 5), (2, 4, 3, 3), (0, 2, 2, 2)])
def test_batch_norm_matches_torch_and_decomposes(harness, shape):
    rng = np.random.default_rng(5)
    c = shape[1]
    x = harness.random_array(rng, shape, np.float32)
    scale, bias, mean = (harness.random_array(rng, (c,), np.float32) for _ in range(3))
    var = np.abs(harness.random_array(rng, (c,), np.float32)) + 0.1
    params = (scale, bias, mean, var)
    got = harness.run("lz.batch_norm", x, *params)
    expected = F.batch_norm(torch.from_numpy(x), torch.from_numpy(mean), torch.from_numpy(var),
                            torch.from_numpy(scale), torch.from_numpy(bias), training=False,
                            eps=1e-5).numpy()
    harness.assert_close(got, expected)
    types = [tensor_type_of(a) for a in (x,) + params]
    original, lowered = decomposed(harness, "lz.batch_norm", types)
    np.testing.assert_allclose(interpret(lowered, "f", x, *params), interpret(original, "f", x, *params),
                               rtol=1e-5, atol=1e-5)


def test_batch_norm_decomposes_with_dynamic_channels(harness):
    types = [tensor((None, None, 2))] + [tensor((None,))] * 4
    original, lowered = decomposed(harness, "lz.batch_norm", types, epsilon=0.5)
    rng = np.random.default_rng(6)
    args = [harness.random_array(rng, (3, 4, 2), np.float32)] + \
        [np.abs(harness.random_array(rng, (4,), np.float32)) for _ in range(4)]
    np.testing.assert_allclose(interpret(lowered, "f", *args), interpret(original, "f", *args), rtol=1e-5, atol=1e-5)


def test_batch_norm_errors(harness):
    p = tensor((3,))
    with pytest.raises(OpError, match="mean has 4 elements but the input has 3 channels"):
        harness.infer("lz.batch_norm", tensor((2, 3, 5)), p, p, tensor((4,)), p)
    with pytest.raises(OpError, match=r"scale must have rank 1 \(C\), got tensor<1x3xf32>"):
        harness.infer("lz.batch_norm", tensor((2, 3, 5)), tensor((1, 3)), p, p, p)
    with pytest.raises(OpError, match=r"input must have rank at least 2 \(N x C x ...\)"):
        harness.infer("lz.batch_norm", tensor((3,)), p, p, p, p)
    with pytest.raises(OpError, match="'lz.batch_norm' op expects 5 operands, got 3"):
        harness.infer("lz.batch_norm", tensor((2, 3)), p, p)
