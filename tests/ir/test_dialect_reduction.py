"""reduce_* and argmax against numpy, over shapes with size-1 and empty dims."""
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from lezero.ir import OpError
from lezero.ir.dialect.reduction import REDUCE_OPS
from lezero.ir.types import tensor

seeds = st.integers(0, 2**32 - 1)


def _with_identity(fn, identity):
    return lambda x, axis, keepdims: fn(x, axis=axis, keepdims=keepdims, initial=identity(x.dtype))


def _lowest(dtype):
    return -np.inf if dtype.kind == "f" else np.iinfo(dtype).min


def _highest(dtype):
    return np.inf if dtype.kind == "f" else np.iinfo(dtype).max


PEERS = {
    "lz.reduce_sum": np.sum,
    "lz.reduce_prod": np.prod,
    "lz.reduce_max": _with_identity(np.max, _lowest),
    "lz.reduce_min": _with_identity(np.min, _highest),
    "lz.reduce_mean": np.mean,
}


def test_every_reduction_has_a_peer():
    assert set(REDUCE_OPS) == set(PEERS)


@st.composite
def shape_and_axes(draw):
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4))
    rank = len(shape)
    axes = draw(st.none() | st.lists(st.integers(0, max(rank - 1, 0)), unique=True, max_size=rank))
    if axes:  # some axes counted from the end
        axes = [a - rank if draw(st.booleans()) else a for a in axes]
    return shape, axes


@pytest.mark.parametrize("name", sorted(PEERS))
@given(case=shape_and_axes(), keepdims=st.booleans(), seed=seeds,
       dtype=st.sampled_from([np.float16, np.float32, np.float64, np.int32, np.int64]))
def test_reduction_matches_numpy(harness, name, case, keepdims, seed, dtype):
    shape, axes = case
    if name == "lz.reduce_mean" and np.dtype(dtype).kind != "f":
        dtype = np.float32
    x = harness.random_array(np.random.default_rng(seed), shape, dtype)
    kwargs = {"keepdims": keepdims} if keepdims else {}
    if axes is not None:
        kwargs["axes"] = axes
    got = harness.run(name, x, **kwargs)
    numpy_axes = tuple(axes) if axes else None
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # numpy warns about the mean of nothing
        expected = np.asarray(PEERS[name](x.astype(np.float64) if x.dtype.kind == "f" else x,
                                          axis=numpy_axes, keepdims=keepdims)).astype(dtype)
    assert got.dtype == dtype
    harness.assert_close(got, expected, dtype)


def test_empty_reductions_give_identities(harness):
    x = np.zeros((2, 0), np.float32)
    np.testing.assert_array_equal(harness.run("lz.reduce_sum", x, axes=[1]), [0, 0])
    np.testing.assert_array_equal(harness.run("lz.reduce_prod", x, axes=[1]), [1, 1])
    np.testing.assert_array_equal(harness.run("lz.reduce_max", x, axes=[1]), [-np.inf, -np.inf])
    np.testing.assert_array_equal(harness.run("lz.reduce_min", np.zeros((0,), np.int8)), 127)
    assert np.isnan(harness.run("lz.reduce_mean", x, axes=[1])).all()


def test_reduce_max_propagates_nan(harness):
    assert np.isnan(harness.run("lz.reduce_max", np.array([1.0, np.nan, 3.0])))


def test_f16_sums_accumulate_in_f32(harness):
    x = np.full(4096, 1.0, np.float16)  # in f16, 2048 + 1 == 2048
    assert harness.run("lz.reduce_sum", x) == 4096


@pytest.mark.parametrize("shape, attrs, out", [
    ((2, 3, 4), {"axes": [1]}, (2, 4)),
    ((2, 3, 4), {"axes": [-1, 0], "keepdims": True}, (1, 3, 1)),
    ((2, 3, 4), {}, ()),
    ((2, 3, 4), {"axes": []}, ()),
    ((2, 3, 4), {"keepdims": True}, (1, 1, 1)),
    ((None, 3, None), {"axes": [2]}, (None, 3)),
    ((None, 3), {"axes": [0], "keepdims": True}, (1, 3)),
    ((), {}, ()),
])
def test_reduction_shapes(harness, shape, attrs, out):
    assert harness.infer("lz.reduce_sum", tensor(shape, "f16"), **attrs) == tensor(out, "f16")


def test_reduction_errors(harness):
    with pytest.raises(OpError, match=r"'lz.reduce_sum' op axes entry 3 is out of range for rank 3 "
                                      r"\(valid: \[-3, 2\]\)"):
        harness.infer("lz.reduce_sum", tensor((2, 3, 4)), axes=[3])
    with pytest.raises(OpError, match=r"axes \[1, -1\] name an axis twice"):
        harness.infer("lz.reduce_max", tensor((2, 3)), axes=[1, -1])
    with pytest.raises(OpError, match="'lz.reduce_mean' op operand must have a float element type"):
        harness.infer("lz.reduce_mean", tensor((2, 3), "i32"))
    with pytest.raises(OpError, match="'lz.reduce_sum' op operand must have a numeric element type"):
        harness.infer("lz.reduce_sum", tensor((2, 3), "i1"))


# --- argmax ----------------------------------------------------------------------------------------

@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5), seed=seeds, data=st.data(),
       dtype=st.sampled_from([np.float32, np.int8, np.bool_]))
def test_argmax_matches_torch(harness, shape, seed, data, dtype):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    keepdims = data.draw(st.booleans())
    x = harness.random_array(np.random.default_rng(seed), shape, dtype)
    got = harness.run("lz.argmax", x, axis=axis, keepdims=keepdims)
    assert got.dtype == np.int64
    # torch returns the first maximum too
    expected = torch.argmax(torch.from_numpy(x.astype(np.float64)), dim=axis, keepdim=keepdims).numpy()
    np.testing.assert_array_equal(got, expected)


def test_argmax_picks_first_of_ties_and_nan(harness):
    np.testing.assert_array_equal(harness.run("lz.argmax", np.array([[1, 3, 3], [2, 2, 0]], np.int32), axis=1),
                                  [1, 0])
    assert harness.run("lz.argmax", np.array([1.0, np.nan, 5.0, np.nan]), axis=0) == 1


def test_argmax_shapes_and_errors(harness):
    assert harness.infer("lz.argmax", tensor((None, 4)), axis=1) == tensor((None,), "i64")
    assert harness.infer("lz.argmax", tensor((2, 4)), axis=-2, keepdims=True) == tensor((1, 4), "i64")
    with pytest.raises(OpError, match="requires attribute 'axis'"):
        harness.infer("lz.argmax", tensor((2, 4)))
    with pytest.raises(OpError, match="cannot take the argmax of axis 1, which has size 0"):
        harness.infer("lz.argmax", tensor((2, 0)), axis=1)
    with pytest.raises(OpError, match="axis 2 is out of range for rank 2"):
        harness.infer("lz.argmax", tensor((2, 4)), axis=2)
