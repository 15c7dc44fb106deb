"""canonicalize's constant exponents (POWERS): ``x ** c`` for c in {0, 1, 2, 3, 4, 0.5, -1, -0.5}
becomes multiplies, a square root or a reciprocal, and gives IEEE ``pow``'s results: the
correctly rounded power (``decimal`` at 60 digits) bit for bit where one rounding suffices,
within the ulps of EXPONENTS where more are taken, the special values (signed zeros, infinities, nan) exactly, and
within 1 ulp more of numpy's own ``power`` (which is itself up to 1 ulp off in float32: its x**2
misses the correctly rounded x*x on 8% of normal inputs).  Measured in the interpreter, whose
numpy ops are the IEEE ops the kernels compute."""
from __future__ import annotations

from decimal import Decimal, localcontext

import numpy as np
import pytest
from pass_testing import build, op_names

from lezero.ir import interpret, tensor
from lezero.passes import run_pipeline
from lezero.runtime.cpu import CompiledFunction

# exponent -> (the ops it becomes, the most ulps from the correctly rounded power in f32 and f64);
# two-step powers round twice in their own type, as PyTorch and ONNX Runtime compute them (f32,
# measured over 4e6 inputs: x**3 and x**-0.5 1 ulp on about 26% of them, x**4 2 ulps)
EXPONENTS = {
    0: (["lz.constant"], 0, 0),
    1: ([], 0, 0),
    2: (["lz.mul"], 0, 0),
    3: (["lz.mul", "lz.mul"], 1, 2),
    4: (["lz.mul", "lz.mul"], 2, 2),
    0.5: (["lz.sqrt", "lz.abs", "lz.constant", "lz.cmp", "lz.constant", "lz.select"], 0, 0),
    -1: (["lz.reciprocal"], 0, 0),
    -0.5: (["lz.sqrt", "lz.abs", "lz.reciprocal", "lz.constant", "lz.cmp", "lz.constant", "lz.select"], 1, 2),
}


def special_and_random(dtype) -> np.ndarray:
    rng = np.random.default_rng(0)
    tiny = np.finfo(dtype).smallest_subnormal
    big = np.sqrt(np.finfo(dtype).max)  # its cube overflows
    values = [0.0, -0.0, np.inf, -np.inf, np.nan, 1, -1, 2, -3, 0.5, tiny, -tiny, tiny * 1e3, big, -big]
    with np.errstate(over="ignore"):
        wide = np.exp(rng.uniform(-80, 80, 4000)) * rng.choice([-1.0, 1.0], 4000)
    return np.concatenate([values, rng.standard_normal(4000) * 10, wide]).astype(dtype)


def correctly_rounded_power(x: np.ndarray, c) -> np.ndarray:
    """``x ** c`` rounded once from 60 digits (through float64 for float32: a double rounding off
    on about one input in 2^29), IEEE pow's values where x is 0, inf or nan."""
    with np.errstate(all="ignore"):
        out = np.power(x, np.full(x.shape, c, x.dtype))  # an array exponent: no numpy fast path
    with localcontext() as context, np.errstate(over="ignore"):  # a power past float32's range is inf
        context.prec = 60
        for i in np.flatnonzero(np.isfinite(x) & (x != 0) & ((x > 0) | (c == int(c)))):
            d = Decimal(float(x[i]))
            p = d ** int(c) if c == int(c) else d.sqrt() if c > 0 else 1 / d.sqrt()
            out[i] = float(p)
    return out


def power_function(dtype: str, c, n: int):
    t = tensor((n,), dtype)
    exponent = tensor((), dtype)
    return build([t], lambda b, x: b.op("lz.pow", x, b.constant(np.array(c, exponent.element_type.numpy_dtype),
                                                                   exponent)))


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Representable floats between ``a`` and ``b`` (0 for two nans)."""
    bits = np.int32 if a.dtype == np.float32 else np.int64
    lowest = np.iinfo(bits).min

    def ordered(x):  # the bit patterns as a monotone integer line (-0 next to +0)
        i = x.view(bits).astype(np.int64)
        return np.where(i < 0, lowest - i, i)

    d = np.abs(ordered(a) - ordered(b))
    return np.where(np.isnan(a) & np.isnan(b), 0, d)


@pytest.mark.parametrize("dtype", ["f32", "f64"])
@pytest.mark.parametrize("c", list(EXPONENTS))
def test_constant_exponent_matches_ieee_pow(dtype, c):
    x = special_and_random(np.dtype(np.float32 if dtype == "f32" else np.float64))
    m = power_function(dtype, c, x.size)
    run_pipeline(m, "canonicalize")
    ops, f32_ulps, f64_ulps = EXPONENTS[c]
    most_ulps = f32_ulps if dtype == "f32" else f64_ulps
    assert sorted(op_names(m)[:-1]) == sorted(ops)
    got = interpret(m, "f", x)
    want = correctly_rounded_power(x, c)
    with np.errstate(all="ignore"):
        numpy_power = np.power(x, np.full(x.shape, c, x.dtype))
    assert ulp_distance(got, want).max() <= most_ulps
    assert ulp_distance(got, numpy_power).max() <= most_ulps + 1
    special = (np.isinf(want) | (want == 0) | np.isinf(x) | (x == 0)) & ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[special]), np.signbit(want[special]))  # -0, +0, +-inf
    np.testing.assert_array_equal(got[special], want[special])
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))


@pytest.mark.parametrize("c, largest", [(3.0, 255), (4.0, 64)])
def test_integral_powers_are_exact_where_representable(c, largest):
    x = np.arange(-largest, largest + 1, dtype=np.float32)  # every power here fits 24 bits
    m = power_function("f32", c, x.size)
    run_pipeline(m, "canonicalize")
    np.testing.assert_array_equal(interpret(m, "f", x), np.power(x, np.float32(c)))


@pytest.mark.parametrize("c", [0, 2, 3, 4])
def test_integer_powers_are_multiplies_that_wrap(c):
    x = np.array([-(2 ** 31), -7, -1, 0, 1, 3, 46341, 2 ** 31 - 1], np.int32)
    m = power_function("i32", c, x.size)
    before = interpret(m, "f", x)
    run_pipeline(m, "canonicalize")
    assert "lz.pow" not in op_names(m)
    np.testing.assert_array_equal(interpret(m, "f", x), before)


@pytest.mark.parametrize("dtype, c", [("f16", 3), ("bf16", 4), ("f16", -0.5), ("i32", -1), ("f32", 2.5),
                                      ("f32", -2)])
def test_powers_kept(dtype, c):
    """Half types would round a two-step power twice to their short mantissa; an integer's -1 is
    trunc(1/x), not a reciprocal; other exponents stay pow."""
    m = power_function(dtype, c, 4)
    run_pipeline(m, "canonicalize")
    assert "lz.pow" in op_names(m)


def test_an_exponent_that_broadcasts_x_is_kept():
    m = build([tensor((3,), "f32")], lambda b, x: b.op("lz.pow", x, b.constant(np.full((2, 3), 2, np.float32))))
    run_pipeline(m, "canonicalize")
    assert "lz.pow" in op_names(m)


COMPILED_CASES = {f"{dtype}_{c}": (dtype, c) for dtype in ("f32", "f64") for c in [*EXPONENTS, 2.5, -2, 1.5]}


@pytest.mark.cross_target(cases=COMPILED_CASES, group=lambda case: case[0])
def test_compiled_powers_match_numpy_on_every_cpu(cpu, case):
    """The kernels compute the strength-reduced powers with the interpreter's IEEE ops, bit for bit
    (no contraction into an fma, no approximate reciprocal or square root), and the exponents kept
    as ``lz.pow`` within 2 ulps of numpy's ``power``."""
    dtype, c = case
    x = special_and_random(np.dtype(np.float32 if dtype == "f32" else np.float64))
    got = CompiledFunction(power_function(dtype, c, x.size), "f", cpu=cpu)(x)
    with np.errstate(all="ignore"):
        numpy_power = np.power(x, np.full(x.shape, c, x.dtype))
    if c in EXPONENTS:
        reduced = power_function(dtype, c, x.size)
        run_pipeline(reduced, "canonicalize")
        assert "lz.pow" not in op_names(reduced)
        want = interpret(reduced, "f", x)
        np.testing.assert_array_equal(got.view(f"i{x.itemsize}"), want.view(f"i{x.itemsize}"), err_msg=f"cpu {cpu}")
    else:
        assert ulp_distance(got, numpy_power).max() <= 2, f"cpu {cpu}"
    np.testing.assert_array_equal(np.isnan(got), np.isnan(numpy_power))
