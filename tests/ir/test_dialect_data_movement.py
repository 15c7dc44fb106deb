"""reshape, transpose, broadcast_to, slice, concat, pad, gather and constant."""
import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from lezero.ir import OpError
from lezero.ir.attributes import dense
from lezero.ir.types import TensorType, tensor

seeds = st.integers(0, 2**32 - 1)
shapes = hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=4)
DTYPES = [np.float32, np.float16, np.int64, np.bool_]


# --- reshape -------------------------------------------------------------------------------------

@given(shape=shapes, seed=seeds, data=st.data())
def test_reshape_matches_numpy(harness, shape, seed, data):
    x = harness.random_array(np.random.default_rng(seed), shape, np.float32)
    # a new shape: the same elements regrouped, maybe with one -1
    new = list(data.draw(st.permutations(list(shape)))) + [1] * data.draw(st.integers(0, 1))
    if new and 0 not in new and data.draw(st.booleans()):
        new[data.draw(st.integers(0, len(new) - 1))] = -1
    got = harness.run("lz.reshape", x, shape=new)
    np.testing.assert_array_equal(got, x.reshape(new))


@pytest.mark.parametrize("src, new, out", [
    ((2, 3), [3, 2], (3, 2)),
    ((2, 3), [-1], (6,)),
    ((2, 3, 4), [2, -1], (2, 12)),
    ((None, 3), [-1, 3], (None, 3)),
    ((None, 3), [3, 2], (3, 2)),
    ((0, 3), [3, 0], (3, 0)),
    ((4,), [], None),
])
def test_reshape_shapes(harness, src, new, out):
    if out is None:
        with pytest.raises(OpError, match=r"cannot reshape 4 \(4 elements\) to scalar \(1 elements\)"):
            harness.infer("lz.reshape", tensor(src), shape=new)
    else:
        assert harness.infer("lz.reshape", tensor(src), shape=new) == tensor(out)


def test_reshape_errors(harness):
    with pytest.raises(OpError, match=r"'lz.reshape' op cannot reshape 2x3 \(6 elements\) to 4x2 \(8 elements\)"):
        harness.infer("lz.reshape", tensor((2, 3)), shape=[4, 2])
    with pytest.raises(OpError, match=r"at most one -1, got \[-1, -1\]"):
        harness.infer("lz.reshape", tensor((2, 3)), shape=[-1, -1])
    with pytest.raises(OpError, match="no size for -1 fits"):
        harness.infer("lz.reshape", tensor((2, 3)), shape=[4, -1])
    with pytest.raises(OpError, match=r"sizes >= 0 and at most one -1, got \[-2, 3\]"):
        harness.infer("lz.reshape", tensor((2, 3)), shape=[-2, 3])


def test_reshape_dynamic_runs(harness):
    module, _ = harness.build("lz.reshape", [tensor((None, 3))], shape=[-1])
    from lezero.ir import interpret
    np.testing.assert_array_equal(interpret(module, "f", np.ones((4, 3), np.float32)), np.ones(12))


# --- transpose -----------------------------------------------------------------------------------

@given(shape=shapes, seed=seeds, data=st.data())
def test_transpose_matches_numpy(harness, shape, seed, data):
    x = harness.random_array(np.random.default_rng(seed), shape, data.draw(st.sampled_from(DTYPES)))
    perm = data.draw(st.none() | st.permutations(range(len(shape))))
    got = harness.run("lz.transpose", x, **({} if perm is None else {"perm": perm}))
    np.testing.assert_array_equal(got, np.transpose(x, perm))


def test_transpose_shapes_and_errors(harness):
    assert harness.infer("lz.transpose", tensor((None, 2, 3)), perm=[2, 0, 1]) == tensor((3, None, 2))
    assert harness.infer("lz.transpose", tensor((None, 2, 3))) == tensor((3, 2, None))
    with pytest.raises(OpError, match=r"attribute 'perm' must be a permutation of 0..2, got \[0, 0, 1\]"):
        harness.infer("lz.transpose", tensor((1, 2, 3)), perm=[0, 0, 1])


# --- broadcast_to ----------------------------------------------------------------------------------

@given(case=hnp.mutually_broadcastable_shapes(num_shapes=1, min_dims=0, max_dims=3, min_side=0, max_side=4),
       seed=seeds)
def test_broadcast_to_matches_numpy(harness, case, seed):
    x = harness.random_array(np.random.default_rng(seed), case.input_shapes[0], np.int32)
    target = (2,) + case.result_shape
    np.testing.assert_array_equal(harness.run("lz.broadcast_to", x, shape=target), np.broadcast_to(x, target))


def test_broadcast_to_shapes_and_errors(harness):
    assert harness.infer("lz.broadcast_to", tensor((None, 1)), shape=[2, 3, 4]) == tensor((2, 3, 4))
    with pytest.raises(OpError, match="'lz.broadcast_to' op cannot broadcast 2x3 to 4x3"):
        harness.infer("lz.broadcast_to", tensor((2, 3)), shape=[4, 3])
    with pytest.raises(OpError, match="cannot broadcast 2x3 to 3"):
        harness.infer("lz.broadcast_to", tensor((2, 3)), shape=[3])


# --- slice ---------------------------------------------------------------------------------------

@st.composite
def slices(draw):
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5))
    axes = draw(st.lists(st.integers(0, len(shape) - 1), unique=True, min_size=1))
    bound = st.integers(-8, 8) | st.sampled_from([-2**63, 2**63 - 1])
    starts = [draw(bound) for _ in axes]
    ends = [draw(bound) for _ in axes]
    steps = [draw(st.integers(-3, 3).filter(bool)) for _ in axes]
    axes = [a - len(shape) if draw(st.booleans()) else a for a in axes]
    return shape, starts, ends, axes, steps


@given(case=slices(), seed=seeds)
def test_slice_matches_numpy(harness, case, seed):
    shape, starts, ends, axes, steps = case
    x = harness.random_array(np.random.default_rng(seed), shape, np.float32)
    got = harness.run("lz.slice", x, starts=starts, ends=ends, axes=axes, steps=steps)
    index = [slice(None)] * len(shape)
    for a, s, e, st_ in zip(axes, starts, ends, steps):
        index[a] = slice(s, e, st_)
    np.testing.assert_array_equal(got, x[tuple(index)])


def test_slice_onnx_examples(harness):
    x = np.arange(8, dtype=np.int32).reshape(2, 4)
    # ONNX's Slice examples: clamped ends, a negative step reversing the row
    np.testing.assert_array_equal(harness.run("lz.slice", x, starts=[1, 0], ends=[2, 3], axes=[0, 1], steps=[1, 2]),
                                  [[4, 6]])
    np.testing.assert_array_equal(harness.run("lz.slice", x, starts=[0, 1], ends=[-1, 1000]), [[1, 2, 3]])
    np.testing.assert_array_equal(harness.run("lz.slice", x, starts=[-1], ends=[-2**63], axes=[1], steps=[-1]),
                                  [[3, 2, 1, 0], [7, 6, 5, 4]])


def test_slice_shapes_and_errors(harness):
    assert harness.infer("lz.slice", tensor((None, 10)), starts=[1, 2], ends=[3, -1]) == tensor((None, 7))
    with pytest.raises(OpError, match=r"attribute 'steps' must not hold 0"):
        harness.infer("lz.slice", tensor((4,)), starts=[0], ends=[2], steps=[0])
    with pytest.raises(OpError, match=r"attributes 'starts' and 'ends' must have the same length, got \[0\] and \[\]"):
        harness.infer("lz.slice", tensor((4,)), starts=[0], ends=[])
    with pytest.raises(OpError, match=r"axes \[0, -2\] name an axis twice"):
        harness.infer("lz.slice", tensor((4, 4)), starts=[0, 0], ends=[1, 1], axes=[0, -2])


# --- concat --------------------------------------------------------------------------------------

@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=3), seed=seeds, data=st.data())
def test_concat_matches_numpy(harness, shape, seed, data):
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    dtype = data.draw(st.sampled_from(DTYPES))
    arrays = []
    for _ in range(data.draw(st.integers(1, 3))):
        s = list(shape)
        s[axis] = data.draw(st.integers(0, 3))
        arrays.append(harness.random_array(rng, s, dtype))
    got = harness.run("lz.concat", *arrays, axis=axis)
    np.testing.assert_array_equal(got, np.concatenate(arrays, axis=axis))


def test_concat_shapes_and_errors(harness):
    assert harness.infer("lz.concat", tensor((2, None)), tensor((3, 4)), axis=0) == tensor((5, 4))
    assert harness.infer("lz.concat", tensor((None, 2)), tensor((3, 2)), axis=0) == tensor((None, 2))
    with pytest.raises(OpError, match="operand shapes 2x3 and 2x4 differ in dim 1, not only in the concat axis 0"):
        harness.infer("lz.concat", tensor((2, 3)), tensor((2, 4)), axis=0)
    with pytest.raises(OpError, match="operands must have the same rank"):
        harness.infer("lz.concat", tensor((2, 3)), tensor((2,)), axis=0)
    with pytest.raises(OpError, match="operands must have the same element type, got f32 and i32"):
        harness.infer("lz.concat", tensor((2,)), tensor((2,), "i32"), axis=0)
    with pytest.raises(OpError, match="'lz.concat' op expects at least 1 operands, got 0"):
        harness.infer("lz.concat", axis=0)


# --- pad -----------------------------------------------------------------------------------------

@given(shape=hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4), seed=seeds, data=st.data())
def test_pad_matches_torch(harness, shape, seed, data):
    rank = len(shape)
    begins = [data.draw(st.integers(-shape[i], 3)) for i in range(rank)]
    ends = [data.draw(st.integers(-(shape[i] + min(begins[i], 0)), 3)) for i in range(rank)]
    value = data.draw(st.sampled_from([0.0, 1.5, -2.0]))
    x = harness.random_array(np.random.default_rng(seed), shape, np.float32)
    got = harness.run("lz.pad", x, pads=begins + ends, value=value)
    # torch's pad lists (begin, end) pairs from the last dim; negative pads crop there too
    torch_pads = [p for i in reversed(range(rank)) for p in (begins[i], ends[i])]
    expected = torch.nn.functional.pad(torch.from_numpy(x), torch_pads, value=value).numpy() if rank else x
    np.testing.assert_array_equal(got, expected)


def test_pad_integer_and_bool(harness):
    np.testing.assert_array_equal(harness.run("lz.pad", np.array([1, 2], np.int32), pads=[1, 2], value=7),
                                  [7, 1, 2, 7, 7])
    np.testing.assert_array_equal(harness.run("lz.pad", np.array([True]), pads=[1, 0]), [False, True])


def test_pad_shapes_and_errors(harness):
    assert harness.infer("lz.pad", tensor((None, 3)), pads=[1, 0, 1, -2]) == tensor((None, 1))
    with pytest.raises(OpError, match=r"attribute 'pads' must have 2 x rank = 4 values, got \[1, 1\]"):
        harness.infer("lz.pad", tensor((2, 3)), pads=[1, 1])
    with pytest.raises(OpError, match=r"pads \[0, -2, 0, -2\] crop more than the 3 elements of dim 1"):
        harness.infer("lz.pad", tensor((2, 3)), pads=[0, -2, 0, -2])


# --- gather --------------------------------------------------------------------------------------

@given(shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4),
       index_shape=hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=3), seed=seeds, data=st.data())
def test_gather_matches_numpy_take(harness, shape, index_shape, seed, data):
    rng = np.random.default_rng(seed)
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    size = shape[axis]
    indices = rng.integers(-size, size, size=index_shape).astype(data.draw(st.sampled_from([np.int32, np.int64])))
    x = harness.random_array(rng, shape, np.float16)
    got = harness.run("lz.gather", x, indices, axis=axis)
    np.testing.assert_array_equal(got, np.take(x, indices, axis=axis))


def test_gather_shapes_and_errors(harness):
    assert harness.infer("lz.gather", tensor((5, None, 3)), tensor((2, 4), "i64"), axis=1) == tensor((5, 2, 4, 3))
    assert harness.infer("lz.gather", tensor((5, 3)), tensor((), "i32")) == tensor((3,))
    with pytest.raises(OpError, match="indices must have an integer element type, got f32"):
        harness.infer("lz.gather", tensor((5, 3)), tensor((2,)))
    from lezero.ir.diagnostics import InterpretError
    with pytest.raises(InterpretError, match="'lz.gather' op index 5 is out of range for axis 0 of size 3"):
        harness.run("lz.gather", np.zeros(3, np.float32), np.array([0, 5], np.int64))


# --- constant ------------------------------------------------------------------------------------

def test_constant(harness):
    value = np.arange(6, dtype=np.int8).reshape(2, 3)
    module = harness.build_function("c", [], lambda b: b.constant(value))
    from lezero.ir import interpret
    got = interpret(module, "f")
    np.testing.assert_array_equal(got, value)
    assert got.dtype == np.int8 and got.flags.writeable
    assert harness.infer("lz.constant", value=dense(value)) == TensorType((2, 3), tensor((), "i8").element_type)
    with pytest.raises(OpError, match="requires attribute 'value'"):
        harness.infer("lz.constant")
    with pytest.raises(OpError, match="expects 0 operands, got 1"):
        harness.infer("lz.constant", tensor((2, 3), "i8"), value=dense(value))
