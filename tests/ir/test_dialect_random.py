"""lz.random_uniform: Philox4x32-10 against Random123's known answers, the counter layout, the
conversions to floats, the shape rule and its errors."""
import numpy as np
import pytest

from lezero.ir import OpError
from lezero.ir.dialect.random import philox4x32, random_words, words_to
from lezero.ir.opdef import ELEMENTWISE, PURE, lookup
from lezero.ir.types import F32, F64, UI32, tensor

# Random123's kat_vectors for philox4x32 10: (counter, key, output)
KNOWN_ANSWERS = [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
]
OP = lookup("lz.random_uniform")


@pytest.mark.parametrize("counter, key, want", KNOWN_ANSWERS)
def test_philox_known_answers(counter, key, want):
    got = philox4x32(np.array(counter, np.uint32), np.array(key, np.uint32))
    assert got.dtype == np.uint32 and [int(w) for w in got] == list(want)


def test_philox_is_vectorized_over_counters():
    counters = np.array([c for c, _, _ in KNOWN_ANSWERS], np.uint32).T  # (4, 3)
    keys = np.array([k for _, k, _ in KNOWN_ANSWERS], np.uint32).T
    assert philox4x32(counters, keys).T.tolist() == [list(w) for _, _, w in KNOWN_ANSWERS]


def test_element_i_is_word_i_mod_4_of_its_block_under_the_offset():
    seed, offset = 0x0123456789ABCDEF, 2 ** 64 - 2
    words = random_words(seed, offset, 11)
    for i in range(11):
        block = philox4x32(np.array([i // 4, 0, offset & 0xFFFFFFFF, offset >> 32], np.uint32),
                           np.array([seed & 0xFFFFFFFF, seed >> 32], np.uint32))
        assert words[i] == block[i % 4], i


def test_each_offset_is_a_stream_of_its_own():
    long, short = random_words(7, 100, 40), random_words(7, 100, 8)
    np.testing.assert_array_equal(long[:8], short)  # a longer draw extends a shorter one
    assert not np.array_equal(random_words(7, 101, 8), short)  # the next offset: other numbers
    assert not np.array_equal(random_words(8, 100, 8), short)  # another seed: other numbers
    assert len(set(random_words(7, 100, 4000).tolist())) > 3990  # no short cycle


def test_float_conversions_are_exact_and_in_the_unit_interval():
    words = np.array([0, 1, 255, 256, 0xFFFFFFFF, 0x80000000], np.uint32)
    f32, f64 = words_to(words, F32), words_to(words, F64)
    assert f32.dtype == np.float32 and f64.dtype == np.float64
    np.testing.assert_array_equal(f32.astype(np.float64) * 2 ** 24, (words >> 8).astype(np.float64))
    np.testing.assert_array_equal(f64 * 2 ** 32, words.astype(np.float64))
    assert f32.max() < 1 and f64.max() < 1 and f32.min() == 0
    np.testing.assert_array_equal(words_to(words, UI32), words)


def test_reference_has_the_shape_of_like_and_is_uniform():
    state = np.array([42, 0], np.int64)
    like = np.zeros((100, 1000), np.float32)
    u = OP.reference(OP.attrs({}), state, like)
    assert u.shape == like.shape and u.dtype == np.float32
    n = u.size
    # mean of n uniforms: 1/2 with standard deviation 1/sqrt(12 n); a quarter below 1/4
    assert abs(u.mean() - 0.5) < 5 / np.sqrt(12 * n)
    assert abs((u < 0.25).mean() - 0.25) < 5 * np.sqrt(0.25 * 0.75 / n)


def test_traits_and_shape_rule():
    assert OP.has_trait(PURE) and OP.has_trait(ELEMENTWISE)
    attrs = OP.attrs(OP.make_attributes({"dtype": "f64"}))
    (t,) = OP.infer_op([tensor((2,), "i64"), tensor((None, 5), "i32")], attrs)
    assert t == tensor((None, 5), "f64")
    assert OP.grad(None, type("Op", (), {"operands": [1, 2]})(), attrs, None) == [None, None]


@pytest.mark.parametrize("state, dtype, message", [
    (tensor((2,), "ui32"), "f32", "state must be tensor<2xi64>"),
    (tensor((3,), "i64"), "f32", "state must be tensor<2xi64>"),
    (tensor((2,), "ui64"), "f32", "state must be tensor<2xi64>"),
    (tensor((2,), "i64"), "f16", "dtype must be one of ui32, f32, f64"),
])
def test_shape_rule_errors(state, dtype, message):
    with pytest.raises(OpError, match=message):
        OP.infer_op([state, tensor((4,), "f32")], OP.attrs(OP.make_attributes({"dtype": dtype})))
