"""The elementwise ops: unary table, cast, gelu, binary table, cmp, select."""
import math

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from lezero.ir import OpError
from lezero.ir.dialect.elementwise import BINARY_OPS, UNARY_OPS
from lezero.ir.dialect.numerics import round_to_bf16
from lezero.ir.opdef import COMMUTATIVE, ELEMENTWISE, PURE, lookup
from lezero.ir.types import BF16, tensor

FLOATS = [np.float16, np.float32, np.float64]
INTS = [np.int8, np.int32, np.int64]

shapes = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
seeds = st.integers(0, 2**32 - 1)


def _torch(fn):
    def run(x):
        return fn(torch.from_numpy(np.array(x))).numpy()
    return run


# The peer for each unary op, and the dtypes it accepts.
UNARY_PEERS = {
    "lz.neg": (_torch(torch.neg), FLOATS + INTS),
    "lz.abs": (_torch(torch.abs), FLOATS + INTS),
    "lz.exp": (_torch(torch.exp), FLOATS),
    "lz.log": (_torch(torch.log), FLOATS),
    "lz.sqrt": (_torch(torch.sqrt), FLOATS),
    "lz.rsqrt": (_torch(torch.rsqrt), FLOATS),
    "lz.tanh": (_torch(torch.tanh), FLOATS),
    "lz.sigmoid": (_torch(torch.sigmoid), FLOATS),
    "lz.relu": (_torch(torch.relu), FLOATS + INTS),
    "lz.erf": (_torch(torch.erf), FLOATS),
    "lz.sin": (_torch(torch.sin), FLOATS),
    "lz.cos": (_torch(torch.cos), FLOATS),
    "lz.floor": (_torch(torch.floor), FLOATS),
    "lz.ceil": (_torch(torch.ceil), FLOATS),
    "lz.sign": (_torch(torch.sign), FLOATS + INTS),
    "lz.reciprocal": (_torch(torch.reciprocal), FLOATS),
    "lz.not": (_torch(torch.bitwise_not), [np.bool_] + INTS),
    "lz.tan": (_torch(torch.tan), FLOATS),
    "lz.asin": (_torch(torch.asin), FLOATS),
    "lz.acos": (_torch(torch.acos), FLOATS),
    "lz.atan": (_torch(torch.atan), FLOATS),
    "lz.sinh": (_torch(torch.sinh), FLOATS),
    "lz.cosh": (_torch(torch.cosh), FLOATS),
    "lz.asinh": (_torch(torch.asinh), FLOATS),
    "lz.acosh": (_torch(torch.acosh), FLOATS),
    "lz.atanh": (_torch(torch.atanh), FLOATS),
    "lz.round": (_torch(torch.round), FLOATS),
}


def test_every_unary_op_has_a_peer():
    assert set(UNARY_OPS) == set(UNARY_PEERS)


@pytest.mark.parametrize("name", sorted(UNARY_PEERS))
@given(shape=shapes, seed=seeds, data=st.data())
def test_unary_matches_torch(harness, name, shape, seed, data):
    peer, dtypes = UNARY_PEERS[name]
    dtype = data.draw(st.sampled_from(dtypes))
    x = harness.random_array(np.random.default_rng(seed), shape, dtype)
    if name in ("lz.log", "lz.sqrt", "lz.rsqrt") and seed % 2:
        x = np.abs(x)  # half the cases stay in the real domain
    got = harness.run(name, x)
    assert got.dtype == x.dtype and got.shape == x.shape
    harness.assert_close(got, peer(x))


@pytest.mark.parametrize("name", sorted(n for n, (_, d) in UNARY_PEERS.items() if np.int32 not in d))
def test_float_only_unary_rejects_integers(harness, name):
    with pytest.raises(OpError, match=rf"'{name}' op operand must have a float element type .*, got i32"):
        harness.infer(name, tensor((2,), "i32"))


@pytest.mark.parametrize("name", ["lz.neg", "lz.abs", "lz.relu", "lz.exp"])
def test_numeric_unary_rejects_i1(harness, name):
    with pytest.raises(OpError, match="got i1"):
        harness.infer(name, tensor((2,), "i1"))


def test_not_rejects_floats(harness):
    with pytest.raises(OpError, match="operand must have i1 or an integer element type, got f32"):
        harness.infer("lz.not", tensor((2,), "f32"))


def test_unary_keeps_dynamic_dims(harness):
    assert harness.infer("lz.exp", tensor((None, 3), "bf16")) == tensor((None, 3), "bf16")


def test_unary_traits():
    for name in UNARY_OPS:
        assert lookup(name).has_trait(ELEMENTWISE) and lookup(name).has_trait(PURE)


def test_unary_bf16_rounds_results(harness):
    x = round_to_bf16(np.linspace(-3, 3, 17, dtype=np.float32))
    got = harness.run("lz.exp", x, types=[tensor((17,), BF16)])
    expected = torch.exp(torch.from_numpy(x).to(torch.bfloat16)).float().numpy()
    np.testing.assert_array_equal(got, expected)


def test_erf_is_accurate_in_f64(harness):
    x = np.linspace(-6, 6, 101)
    np.testing.assert_array_equal(harness.run("lz.erf", x), [math.erf(v) for v in x])


def test_sigmoid_does_not_overflow(harness):
    got = harness.run("lz.sigmoid", np.array([-1000.0, -30.0, 0.0, 30.0, 1000.0]))
    np.testing.assert_allclose(got, torch.sigmoid(torch.tensor([-1000.0, -30.0, 0.0, 30.0, 1000.0],
                                                               dtype=torch.float64)).numpy(), rtol=1e-15)


# --- gelu ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("approximate", ["none", "tanh"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_gelu_matches_torch(harness, approximate, dtype):
    x = (np.linspace(-6, 6, 241)).astype(dtype)
    kwargs = {} if approximate == "none" else {"approximate": approximate}
    got = harness.run("lz.gelu", x, **kwargs)
    peer = torch.nn.functional.gelu(torch.from_numpy(x.astype(np.float64)), approximate=approximate).numpy()
    harness.assert_close(got, peer.astype(dtype))


def test_gelu_rejects_unknown_approximation(harness):
    with pytest.raises(OpError, match="attribute 'approximate' must be one of 'none', 'tanh', got \"erf\""):
        harness.infer("lz.gelu", tensor((2,)), approximate="erf")


# --- cast ----------------------------------------------------------------------------------------

@given(seed=seeds, data=st.data())
def test_cast_matches_numpy(harness, seed, data):
    names = ["f16", "f32", "f64", "i1", "i8", "i32", "i64"]
    src, dst = data.draw(st.sampled_from(names)), data.draw(st.sampled_from(names))
    src_dtype = tensor((), src).element_type.numpy_dtype
    x = harness.random_array(np.random.default_rng(seed), (3, 2), src_dtype) * (
        np.array(3, src_dtype) if src_dtype.kind == "f" else 1)
    got = harness.run("lz.cast", x, to=dst)
    assert harness.infer("lz.cast", tensor((3, 2), src), to=dst) == tensor((3, 2), dst)
    np.testing.assert_array_equal(got, x.astype(tensor((), dst).element_type.numpy_dtype))


def test_cast_float_to_int_truncates_and_to_bool_is_nonzero(harness):
    x = np.array([-2.7, -0.5, 0.0, 0.5, 2.7], np.float32)
    np.testing.assert_array_equal(harness.run("lz.cast", x, to="i32"), [-2, 0, 0, 0, 2])
    np.testing.assert_array_equal(harness.run("lz.cast", x, to="i1"), [True, True, False, True, True])


def test_cast_to_bf16_rounds_to_nearest_even(harness):
    x = np.array([1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-8 + 2**-20, -1.0 - 2**-8, 3.4e38, np.inf, np.nan],
                 np.float32)
    got = harness.run("lz.cast", x, to="bf16")
    peer = torch.from_numpy(x).to(torch.bfloat16).float().numpy()
    np.testing.assert_array_equal(got, peer)


def test_cast_requires_a_type(harness):
    with pytest.raises(OpError, match="requires attribute 'to'"):
        harness.infer("lz.cast", tensor((2,)))


# --- binary --------------------------------------------------------------------------------------

BINARY_PEERS = {
    "lz.add": (np.add, FLOATS + INTS),
    "lz.sub": (np.subtract, FLOATS + INTS),
    "lz.mul": (np.multiply, FLOATS + INTS),
    "lz.div": (lambda x, y: torch.div(torch.from_numpy(x), torch.from_numpy(y), rounding_mode=None
                                      if x.dtype.kind == "f" else "trunc").numpy(), FLOATS + INTS),
    "lz.pow": (np.power, FLOATS),
    "lz.max": (np.maximum, FLOATS + INTS),
    "lz.min": (np.minimum, FLOATS + INTS),
    "lz.and": (np.bitwise_and, [np.bool_] + INTS),
    "lz.or": (np.bitwise_or, [np.bool_] + INTS),
    "lz.xor": (np.bitwise_xor, [np.bool_] + INTS),
    "lz.rem": (lambda x, y: torch.fmod(torch.from_numpy(x), torch.from_numpy(y)).numpy(), FLOATS + INTS),
    "lz.shift_left": (lambda x, y: _shift_peer(x, y, left=True), INTS),
    "lz.shift_right": (lambda x, y: _shift_peer(x, y, left=False), INTS),
}


def _shift_peer(x, y, left):
    """Shifts on Python integers, wrapped to the dtype; amounts outside [0, bits) give 0 (or -1
    for a right shift of a negative number)."""
    bits = 8 * x.dtype.itemsize
    out = []
    for a, n in zip(x.ravel().tolist(), y.ravel().tolist()):
        if not 0 <= n < bits:
            out.append(-1 if (not left and a < 0) else 0)
        else:
            out.append((a << n) if left else (a >> n))
    wrapped = [(v + (1 << (bits - 1))) % (1 << bits) - (1 << (bits - 1)) for v in out] if x.dtype.kind == "i" \
        else [v % (1 << bits) for v in out]
    return np.array(wrapped, dtype=x.dtype).reshape(x.shape)


def test_every_binary_op_has_a_peer():
    assert set(BINARY_OPS) == set(BINARY_PEERS)


@pytest.mark.parametrize("name", sorted(BINARY_PEERS))
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=0, max_side=4),
       seed=seeds, data=st.data())
def test_binary_broadcasts_like_numpy(harness, name, shapes, seed, data):
    peer, dtypes = BINARY_PEERS[name]
    dtype = data.draw(st.sampled_from(dtypes))
    rng = np.random.default_rng(seed)
    x, y = (harness.random_array(rng, s, dtype) for s in shapes.input_shapes)
    if name in ("lz.div", "lz.rem") and np.dtype(dtype).kind == "i":
        y = np.where(y == 0, np.ones((), dtype), y)
    if name == "lz.pow":
        x = np.abs(x)
    got = harness.run(name, x, y)
    assert got.shape == shapes.result_shape and got.dtype == x.dtype
    x_b, y_b = np.broadcast_arrays(x, y)
    with np.errstate(all="ignore"):
        harness.assert_close(got, np.asarray(peer(np.array(x_b), np.array(y_b))))


def test_integer_division_truncates_toward_zero(harness):
    x = np.array([7, -7, 7, -7, 0, 5, -128], np.int8)
    y = np.array([2, 2, -2, -2, 3, 0, -1], np.int8)
    # C semantics; x / 0 is defined as 0 and -128 / -1 wraps
    np.testing.assert_array_equal(harness.run("lz.div", x, y), [3, -3, -3, 3, 0, 0, -128])


def test_integer_pow(harness):
    x = np.array([2, -2, 3, 1, -1, -1, 2, 0, 0], np.int32)
    y = np.array([10, 3, 0, -7, -3, -4, -1, 0, -2], np.int32)
    np.testing.assert_array_equal(harness.run("lz.pow", x, y), [1024, -8, 1, 1, -1, 1, 0, 1, 0])


def test_float_division_by_zero_is_ieee(harness):
    got = harness.run("lz.div", np.array([1.0, -1.0, 0.0], np.float32), np.zeros(3, np.float32))
    np.testing.assert_array_equal(got, [np.inf, -np.inf, np.nan])


def test_max_min_propagate_nan(harness):
    x, y = np.array([np.nan, 1.0]), np.array([0.0, np.nan])
    assert np.isnan(harness.run("lz.max", x, y)).all() and np.isnan(harness.run("lz.min", x, y)).all()


def test_binary_traits():
    assert lookup("lz.add").has_trait(COMMUTATIVE) and lookup("lz.mul").has_trait(COMMUTATIVE)
    assert not lookup("lz.sub").has_trait(COMMUTATIVE) and not lookup("lz.div").has_trait(COMMUTATIVE)
    assert not lookup("lz.cmp").has_trait(COMMUTATIVE)


@pytest.mark.parametrize("a, b, out", [
    ((2, 3), (3,), (2, 3)),
    ((None, 3), (1, 3), (None, 3)),
    ((None, 1), (4, 5), (4, 5)),
    ((None,), (1,), (None,)),
    ((None,), (None,), (None,)),
    ((1, None), (7, 1), (7, None)),
    ((), (None, 0), (None, 0)),
])
def test_binary_infers_dynamic_broadcast(harness, a, b, out):
    assert harness.infer("lz.add", tensor(a), tensor(b)) == tensor(out)
    assert harness.infer("lz.add", tensor(b), tensor(a)) == tensor(out)


def test_binary_shape_error(harness):
    with pytest.raises(OpError, match="'lz.mul' op operand shapes 2x3 and 4x3 are not broadcast-compatible"):
        harness.infer("lz.mul", tensor((2, 3)), tensor((4, 3)))


def test_binary_element_type_error(harness):
    with pytest.raises(OpError, match="operands must have the same element type, got f32 and i32"):
        harness.infer("lz.add", tensor((2,), "f32"), tensor((2,), "i32"))


def test_binary_domain_errors(harness):
    with pytest.raises(OpError, match="operands must have a numeric element type .*, got i1"):
        harness.infer("lz.add", tensor((2,), "i1"), tensor((2,), "i1"))
    with pytest.raises(OpError, match="operands must have i1 or an integer element type, got f32"):
        harness.infer("lz.and", tensor((2,), "f32"), tensor((2,), "f32"))


# --- cmp and select ------------------------------------------------------------------------------

PREDICATES = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
              "ge": np.greater_equal}


@pytest.mark.parametrize("predicate", sorted(PREDICATES))
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3, min_side=0, max_side=3),
       seed=seeds, dtype=st.sampled_from([np.float32, np.int32, np.bool_]))
def test_cmp_matches_numpy(harness, predicate, shapes, seed, dtype):
    rng = np.random.default_rng(seed)
    x, y = (harness.random_array(rng, s, dtype) for s in shapes.input_shapes)
    if dtype == np.float32:
        x, y = np.round(x), np.round(y)  # so that equal pairs are common
    got = harness.run("lz.cmp", x, y, predicate=predicate)
    assert got.dtype == np.bool_
    np.testing.assert_array_equal(got, PREDICATES[predicate](x, y))


def test_cmp_nan_is_unordered(harness):
    x = np.array([np.nan, 1.0])
    assert not harness.run("lz.cmp", x, x, predicate="eq")[0]
    assert harness.run("lz.cmp", x, x, predicate="ne")[0]


def test_cmp_infers_i1_and_checks_predicate(harness):
    assert harness.infer("lz.cmp", tensor((None, 2), "f16"), tensor((2,), "f16"), predicate="lt") == \
        tensor((None, 2), "i1")
    with pytest.raises(OpError, match="requires attribute 'predicate'"):
        harness.infer("lz.cmp", tensor((2,)), tensor((2,)))
    with pytest.raises(OpError, match="attribute 'predicate' must be one of 'eq', 'ne', 'lt', 'le', 'gt', 'ge'"):
        harness.infer("lz.cmp", tensor((2,)), tensor((2,)), predicate="less")


@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3, min_side=0, max_side=3),
       seed=seeds, dtype=st.sampled_from([np.float16, np.int64, np.bool_]))
def test_select_broadcasts_three_ways(harness, shapes, seed, dtype):
    rng = np.random.default_rng(seed)
    c = harness.random_array(rng, shapes.input_shapes[0], np.bool_)
    a, b = (harness.random_array(rng, s, dtype) for s in shapes.input_shapes[1:])
    got = harness.run("lz.select", c, a, b)
    assert got.shape == shapes.result_shape
    np.testing.assert_array_equal(got, np.where(c, a, b))


def test_select_errors(harness):
    with pytest.raises(OpError, match="condition must have element type i1, got f32"):
        harness.infer("lz.select", tensor((2,)), tensor((2,)), tensor((2,)))
    with pytest.raises(OpError, match="true and false values must have the same element type, got f32 and f16"):
        harness.infer("lz.select", tensor((2,), "i1"), tensor((2,)), tensor((2,), "f16"))
    with pytest.raises(OpError, match="operand shapes 2, 3 and 1 are not broadcast-compatible"):
        harness.infer("lz.select", tensor((2,), "i1"), tensor((3,)), tensor((1,)))
