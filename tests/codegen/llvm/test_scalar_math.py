"""Accuracy of the float32 approximations of scalar_math (exp, log, tanh, sigmoid, erf, erfc via
gelu, sin, cos), measured in ulps against float64 references, and their special values, on every
CPU of the cross-target matrix (FMA or not, 128- to 512-bit vectors) and on AArch64 under qemu;
float64 transcendentals (libm) and f16 against the reference interpreter."""
from __future__ import annotations

import math

import numpy as np
import pytest

from codegen.kernel_testing import assert_matches, make_kernel, reference, run_kernel
from lezero.ir.types import tensor
from lezero.runtime.native import compile_module_native
from support.ir_building import build
from support.native_testing import QEMU, TRIPLE, cross_tools, run_outputs  # noqa: F401 (cross_tools: a fixture)

_erf64 = np.frompyfunc(math.erf, 1, 1)
_erfc64 = np.frompyfunc(math.erfc, 1, 1)


def _sigmoid64(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _gelu64(x):
    return 0.5 * x * _erfc64(-x / math.sqrt(2)).astype(np.float64)


# op, float64 reference, ranges sampled, ulp bound (the docstring of scalar_math states these)
CASES = [
    ("exp", np.exp, [(-103.9, 88.7), (-1, 1)], 1.0),
    ("log", np.log, [(1e-6, 10), (0.5, 2)], 1.0),
    ("tanh", np.tanh, [(-10, 10), (-1, 1), (0.6, 0.65), (8.9, 9.6)], 2.0),
    ("sigmoid", _sigmoid64, [(-100, 40), (-5, 5), (-104.5, -86)], 3.0),
    ("erf", lambda x: _erf64(x).astype(np.float64), [(-5, 5), (-1.1, 1.1)], 3.0),
    ("gelu", _gelu64, [(-9, 6), (-1.5, -0.5)], 8.0),
    ("sin", np.sin, [(-10, 10), (-1e5, 1e5), (-3e38, 3e38)], 1.0),
    ("cos", np.cos, [(-10, 10), (-1e5, 1e5), (-3e38, 3e38)], 1.0),
]


def _ulp_error(got, want):
    ulp = np.maximum(np.spacing(np.abs(want.astype(np.float32))).astype(np.float64), 2.0 ** -149)
    return np.abs(got.astype(np.float64) - want) / ulp


def _samples(name, ranges) -> np.ndarray:
    rng = np.random.default_rng(7)
    x = np.concatenate([np.concatenate([rng.uniform(lo, hi, 20000), np.linspace(lo, hi, 20000)])
                        for lo, hi in ranges]).astype(np.float32)
    if name == "log":  # every binade, denormals included
        x = np.concatenate([x, np.exp2(rng.uniform(-149, 128, 40000)).astype(np.float32)])
    return x


def _assert_within(name, ref, bound, x, got, where):
    err = _ulp_error(got, ref(x.astype(np.float64)))
    worst = int(np.argmax(err))
    assert err[worst] <= bound, f"{name}({x[worst]!r}) = {got[worst]!r}: {err[worst]:.2f} ulp on {where}"


@pytest.mark.cross_target(cases={c[0]: c for c in CASES}, group=lambda case: 0)
def test_f32_ulp_error(cpu, case):
    name, ref, ranges, bound = case
    x = _samples(name, ranges)
    _, kernel = make_kernel([((x.size,), "f32")], lambda b, v: b.op("lz." + name, v))
    (got,) = run_kernel(kernel, [x], cpu=cpu)
    _assert_within(name, ref, bound, x, got, cpu)


def test_f32_ulp_error_on_aarch64(cross_tools, tmp_path):
    """The same approximations in an AArch64 executable (NEON: 128-bit vectors, FMA), run under
    qemu: every case within its bound."""
    samples = [_samples(name, ranges) for name, _, ranges, _ in CASES]
    module = build([tensor((x.size,), "f32") for x in samples],
                   lambda b, *xs: [b.op("lz." + case[0], x) for case, x in zip(CASES, xs)], name="main")
    result = compile_module_native(module, tmp_path / "math", triple=TRIPLE, cpu="cortex-a72")
    outputs = run_outputs([QEMU], result, tmp_path, {t.name: x for t, x in zip(result.program.inputs, samples)})
    for (name, ref, _, bound), x, t in zip(CASES, samples, result.program.outputs):
        _assert_within(name, ref, bound, x, outputs[t.name], "cortex-a72 (qemu)")


def test_erfc_ulp_error(monkeypatch):
    """The erfc primitive (no lz op uses it yet): lz.erf's facet swapped for it."""
    from lezero.ir.opdef import lookup

    monkeypatch.setattr(type(lookup("lz.erf")), "scalar", staticmethod(lambda s, x: s.erfc(x)))
    rng = np.random.default_rng(8)
    x = np.concatenate([rng.uniform(-4, 9.3, 40000), np.linspace(0.4, 1.1, 20000)]).astype(np.float32)
    _, kernel = make_kernel([((x.size,), "f32")], lambda b, v: b.op("lz.erf", v))
    (got,) = run_kernel(kernel, [x])
    err = _ulp_error(got, _erfc64(x.astype(np.float64)).astype(np.float64))
    worst = int(np.argmax(err))
    assert err[worst] <= 8, f"erfc({x[worst]!r}) = {got[worst]!r}: {err[worst]:.2f} ulp"


SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-40, 1.17e-38, 3e38, -3e38, 88.72,
                    88.73, -87.0, -103.9, -104.5, 10.5, -10.5, 13.0, -13.0, 1.0, -1.0, 0.5, -0.5, 0.625,
                    -0.625, 1e6, -1e6, 1e30], np.float32)
FLOAT_UNARY = ["exp", "log", "tanh", "sigmoid", "erf", "sin", "cos", "sqrt", "rsqrt", "floor", "ceil", "sign",
               "reciprocal", "abs", "neg", "relu"]


@pytest.mark.cross_target(cases={"f32": "f32", "f64": "f64"}, group=lambda dtype: dtype)
def test_special_values(cpu, case):
    """inf, nan, zeros, denormals, overflow and underflow thresholds, huge arguments."""
    dtype = case
    x = SPECIAL.astype(np.float64 if dtype == "f64" else np.float32)
    names = FLOAT_UNARY + ["gelu"]
    module, kernel = make_kernel([((x.size,), dtype)], lambda b, v: [b.op("lz." + n, v) for n in names])
    got = run_kernel(kernel, [x], cpu=cpu)
    want = reference(module, [x])
    for name, g, w in zip(names, got, want):
        with np.errstate(invalid="ignore"):
            close = np.abs(g - w) <= 4 * np.spacing(np.abs(w).astype(g.dtype))
        same = (g == w) | (np.isnan(g) & np.isnan(w)) | close
        if name == "gelu":  # the reference is 0 where 1 + erf(x/sqrt 2) rounds to 0; lezero keeps the tail
            same |= (w == 0) & (np.abs(g) < 1e-20)
        assert same.all(), f"{name} on {cpu}: x={x[~same]} got {g[~same]} want {w[~same]}"
        if name in ("exp", "tanh", "sigmoid", "erf", "gelu"):  # +-0, +-inf and nan exactly, zeros' signs too
            at = np.isin(x, [0.0, np.inf, -np.inf]) | np.isnan(x)
            exact = ((g == w) & (np.signbit(g) == np.signbit(w))) | (np.isnan(g) & np.isnan(w))
            assert exact[at].all(), f"{name} on {cpu}: x={x[at & ~exact]} got {g[at & ~exact]} want {w[at & ~exact]}"


def test_f64_and_f16_transcendentals():
    """float64 calls libm (the kernel lists the symbols); f16 computes in f32 and rounds."""
    rng = np.random.default_rng(3)
    x64 = rng.standard_normal(257) * 3
    names = ["exp", "log", "tanh", "sigmoid", "erf", "sin", "cos"]
    module, kernel = make_kernel([((257,), "f64")], lambda b, v: [b.op("lz." + n, v) for n in names]
                                 + [b.op("lz.gelu", v)])
    from lezero.codegen.llvm.backend import lower_kernel

    lowered = lower_kernel(kernel)
    assert set(lowered.external_symbols) == {"exp", "log", "tanh", "erf", "erfc", "sin", "cos"}
    for g, w in zip(run_kernel(kernel, [x64], lowered=lowered), reference(module, [x64])):
        assert_matches(g, w, rtol=1e-12, atol=1e-14)
    x16 = x64.astype(np.float16)
    module, kernel = make_kernel([((257,), "f16")], lambda b, v: [b.op("lz." + n, v) for n in names]
                                 + [b.op("lz.gelu", v)])
    assert lower_kernel(kernel).external_symbols == ()
    for name, g, w in zip(names + ["gelu"], run_kernel(kernel, [x16]), reference(module, [x16])):
        # one f16 ulp: the reference rounds numpy's float16 math, lezero its float32 math
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=1e-3, atol=1e-4,
                                   equal_nan=True, err_msg=name)
