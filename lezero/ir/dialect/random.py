"""``lz.random_uniform``: counter-based random numbers (Philox4x32-10), a pure function of its state.

    %u = "lz.random_uniform"(%state, %x) {dtype = f32} : (tensor<2xi64>, tensor<8x16xf32>) -> tensor<8x16xf32>

``state`` is ``[seed, offset]``, two 64-bit words (``tensor<2xi64>``, read as unsigned: the
frontends' tensors have no ``ui64``); the result has ``like``'s shape (its values
are never read: it only carries the shape, so a dynamic batch dim flows through shape inference).
Element ``i`` (row-major) is word ``i mod 4`` of Philox4x32-10 (Salmon et al., "Parallel random
numbers: as easy as 1, 2, 3", SC'11; the generator of cuRAND, JAX and PyTorch's CUDA backend) at

    counter = (lo32(i div 4), hi32(i div 4), lo32(offset), hi32(offset)),  key = (lo32(seed), hi32(seed))

The 128-bit counter's high half is the draw (``offset``), its low half the element's block: every
offset is a stream of its own, of up to 2^66 numbers, so a draw consumes exactly one offset
whatever its size.  (A traced graph therefore places its draws at fixed offsets from its state
argument, at any batch size, as the eager ops draw them one after another.)  The words become
``dtype``: ``ui32`` the words themselves, ``f32`` ``(w >> 8) * 2^-24`` (24 bits, in
``[0, 1)``), ``f64`` ``w * 2^-32`` (32 bits, in ``[0, 1)``).  Both conversions are exact, so every
backend gives the reference's bits.

Being a function of its operands, the op is pure (CSE may merge two draws of one state) and has
no gradient.  It lowers like an elementwise op of its result's shape: ``lower_at_position``
computes one element from its row-major position and the two state words (the value-at-index
walk, ``lezero/codegen/value_at_index.py``), with integer primitives of the ``ScalarBuilder``
(``umulhi`` for Philox's multiply-high).
"""
from __future__ import annotations

import numpy as np

from lezero.ir.gradient import no_gradient
from lezero.ir.opdef import ELEMENTWISE, PURE, AttrSpec, OpDef, OpError, register
from lezero.ir.types import F32, F64, I64, UI32, UI64, TensorType

# Philox4x32's round multipliers and Weyl key increments (Random123's PHILOX_M4x32_*, PHILOX_W32_*).
PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
PHILOX_ROUNDS = 10
WORDS_PER_COUNTER = 4
RANDOM_DTYPES = (UI32, F32, F64)
_MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32(counter, key, rounds: int = PHILOX_ROUNDS) -> np.ndarray:
    """Philox4x32-``rounds`` of ``counter`` (4 words, each an array of uint32 values) under ``key``
    (2 words, broadcasting against them): the 4 output words, a ``(4, ...)`` uint32 array.
    Products are formed exactly in uint64 (both factors are below 2^32)."""
    c0, c1, c2, c3 = (np.asarray(c, np.uint64) for c in counter)
    k0, k1 = (np.asarray(k, np.uint64) for k in key)
    m0, m1 = (np.uint64(m) for m in PHILOX_M)
    w0, w1 = (np.uint64(w) for w in PHILOX_W)
    shift = np.uint64(32)
    for r in range(rounds):
        p0, p1 = m0 * c0, m1 * c2
        c0, c1, c2, c3 = (p1 >> shift) ^ c1 ^ k0, p1 & _MASK32, (p0 >> shift) ^ c3 ^ k1, p0 & _MASK32
        if r + 1 < rounds:
            k0, k1 = (k0 + w0) & _MASK32, (k1 + w1) & _MASK32
    return np.stack(np.broadcast_arrays(c0, c1, c2, c3)).astype(np.uint32)


def random_words(seed: int, offset: int, n: int) -> np.ndarray:
    """The ``n`` uint32 words ``lz.random_uniform`` draws for ``state = [seed, offset]``."""
    block = np.arange(-(-n // WORDS_PER_COUNTER), dtype=np.uint64)
    offset, seed, high = np.uint64(offset), np.uint64(seed), np.uint64(32)
    words = philox4x32((block & _MASK32, block >> high, offset & _MASK32, offset >> high),
                       (seed & _MASK32, seed >> high))
    return words.T.reshape(-1)[:n]


def words_to(words: np.ndarray, dtype) -> np.ndarray:
    """Philox words as ``dtype`` (see the module docstring): exact in every case."""
    if dtype == UI32:
        return words.astype(np.uint32)
    if dtype == F32:
        return (words >> np.uint32(8)).astype(np.float32) * np.float32(2.0 ** -24)
    return words.astype(np.float64) * 2.0 ** -32


@register
class RandomUniformOp(OpDef):
    """``lz.random_uniform {dtype = f32}``: uniform numbers of ``like``'s shape from ``state``."""

    name = "lz.random_uniform"
    operands = ("state", "like")
    attributes = {"dtype": AttrSpec("type", F32)}
    # elementwise in its result's position: it fuses and lowers as an elementwise op of that shape
    traits = frozenset({PURE, ELEMENTWISE})
    summary = "counter-based uniform random numbers (Philox4x32-10)"
    grad = staticmethod(no_gradient)

    def infer(self, operand_types, attrs):
        state, like = operand_types
        if state.shape != (2,) or state.element_type != I64:
            raise OpError(f"state must be tensor<2xi64> ([seed, offset]), got {state}")
        if attrs.dtype not in RANDOM_DTYPES:
            raise OpError(f"dtype must be one of {', '.join(t.name for t in RANDOM_DTYPES)}, got {attrs.dtype}")
        return [TensorType(like.shape, attrs.dtype)]

    def reference(self, attrs, state, like):
        seed, offset = (int(v) % 2 ** 64 for v in state)
        words = random_words(seed, offset, like.size)
        return words_to(words, attrs.dtype).reshape(like.shape)

    def lower_at_position(self, s, attrs, position, element):
        """Element ``position`` (an i64 value of ``s``) of the result; ``element(k, i)`` reads
        element ``i`` of operand ``k`` (only the state's two words are read)."""
        seed, offset = s.cast(element(0, 0), UI64), s.cast(element(0, 1), UI64)
        u32 = lambda v: s.constant(v, UI32)  # noqa: E731
        u64 = lambda v: s.constant(v, UI64)  # noqa: E731
        pos = s.cast(position, UI64)
        block = s.shift_right(pos, u64(2))
        word = s.cast(s.and_(pos, u64(WORDS_PER_COUNTER - 1)), UI32)
        low, high = lambda v: s.cast(v, UI32), lambda v: s.cast(s.shift_right(v, u64(32)), UI32)  # noqa: E731
        c0, c1, c2, c3 = low(block), high(block), low(offset), high(offset)
        k0, k1 = low(seed), high(seed)
        m0, m1 = u32(PHILOX_M[0]), u32(PHILOX_M[1])
        for r in range(PHILOX_ROUNDS):
            hi0, lo0, hi1, lo1 = s.umulhi(m0, c0), s.mul(m0, c0), s.umulhi(m1, c2), s.mul(m1, c2)
            c0, c1, c2, c3 = _xor(s, _xor(s, hi1, c1), k0), lo1, _xor(s, _xor(s, hi0, c3), k1), lo0
            if r + 1 < PHILOX_ROUNDS:
                k0, k1 = s.add(k0, u32(PHILOX_W[0])), s.add(k1, u32(PHILOX_W[1]))
        bits = s.select(s.cmp("eq", word, u32(0)), c0,
                        s.select(s.cmp("eq", word, u32(1)), c1, s.select(s.cmp("eq", word, u32(2)), c2, c3)))
        if attrs.dtype == UI32:
            return bits
        if attrs.dtype == F32:
            return s.mul(s.cast(s.shift_right(bits, u32(8)), F32), s.constant(2.0 ** -24, F32))
        return s.mul(s.cast(bits, F64), s.constant(2.0 ** -32, F64))


def _xor(s, x, y):
    # as lz.xor lowers (the builders fold it to one xor)
    return s.and_(s.or_(x, y), s.not_(s.and_(x, y)))
