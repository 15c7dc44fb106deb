"""Fit the polynomial coefficients of lezero/codegen/polynomials.py (the transcendentals of both backends).

Each approximation is a polynomial on a small interval after range reduction.  The fit is
least squares on Chebyshev nodes, reweighted toward minimax (Lawson's algorithm), against mpmath
at 40 digits; the printed coefficients (lowest degree first) are pasted into polynomials.py.  The
script also prints each fit's maximum relative error in float64, before float32 rounding.

    .venv/bin/python tools/fit_scalar_math.py
"""
from __future__ import annotations

import mpmath as mp
import numpy as np
from numpy.polynomial import chebyshev, polynomial

mp.mp.dps = 40


def fit(target, lo: float, hi: float, degree: int, nodes: int = 2000, iterations: int = 40, relative: bool = True,
        weight=None):
    """Monomial coefficients (lowest first) of a near-minimax fit of ``target`` (relative error, or
    absolute; ``weight(x)``: the absolute error times it)."""
    k = np.arange(nodes)
    x = (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / nodes)
    y = np.array([float(target(mp.mpf(float(v)))) for v in x])
    vander = chebyshev.chebvander((2 * x - (lo + hi)) / (hi - lo), degree)
    weights = np.ones(nodes)
    if weight is not None:
        size = np.array([1 / float(weight(mp.mpf(float(v)))) for v in x])
    else:
        size = np.abs(y) if relative else np.ones_like(y)
    for _ in range(iterations):
        scale = np.sqrt(weights) / size
        coefs, *_ = np.linalg.lstsq(vander * scale[:, None], y * scale, rcond=None)
        error = np.abs(vander @ coefs - y) / size
        weights = weights * error
        weights /= weights.sum()
    in_t = polynomial.Polynomial(chebyshev.cheb2poly(coefs))
    mono = in_t(polynomial.Polynomial([-(lo + hi) / (hi - lo), 2 / (hi - lo)])).coef
    return mono, float(np.max(np.abs(polynomial.polyval(x, mono) - y) / size))


def show(name: str, coefs, error: float, note: str) -> None:
    print(f"# {note}; max error of the fit {error:.2e}")
    print(f"{name} = ({', '.join(repr(float(c)) for c in coefs)})")


def main() -> None:
    ln2 = float(mp.log(2))
    # exp(r) = 1 + r + r^2 P(r), |r| <= ln2 / 2
    coefs, err = fit(lambda r: (mp.exp(r) - 1 - r) / r ** 2 if r else mp.mpf(0.5), -ln2 / 2, ln2 / 2, 5)
    show("EXP_P", coefs, err, "exp(r) = 1 + r + r^2 * P(r) on [-ln2/2, ln2/2]")
    coefs, err = fit(lambda r: (mp.exp(r) - 1 - r) / r ** 2 if r else mp.mpf(0.5), -ln2 / 2, ln2 / 2, 4)
    show("EXP_SHORT_P", coefs, err, "the same with one degree less (where the result damps exp's error)")
    # log(1 + f) = f - f^2/2 + f^3 P(f), f in [sqrt(1/2) - 1, sqrt(2) - 1]
    lo, hi = float(mp.sqrt(0.5) - 1), float(mp.sqrt(2) - 1)
    coefs, err = fit(lambda f: (mp.log1p(f) - f + f ** 2 / 2) / f ** 3 if f else mp.mpf(1) / 3, lo, hi, 8)
    show("LOG_P", coefs, err, "log(1 + f) = f - f^2/2 + f^3 * P(f) on [sqrt(1/2) - 1, sqrt(2) - 1]")
    # tanh(x) = x + x^3 P(x^2), |x| < 0.625
    coefs, err = fit(lambda z: (mp.tanh(mp.sqrt(z)) - mp.sqrt(z)) / mp.sqrt(z) ** 3 if z else -mp.mpf(1) / 3,
                     0, 0.625 ** 2, 5)
    show("TANH_P", coefs, err, "tanh(x) = x + x^3 * P(x^2) for |x| < 0.625")
    coefs, err = fit(lambda z: (mp.tanh(mp.sqrt(z)) - mp.sqrt(z)) / mp.sqrt(z) ** 3 if z else -mp.mpf(1) / 3,
                     0, 0.6 ** 2, 4)
    show("TANH_SHORT_P", coefs, err, "the same with one degree less for |x| < 0.6 (the CPU's)")
    # erf(x) = x P(x^2), |x| < 1
    coefs, err = fit(lambda z: mp.erf(mp.sqrt(z)) / mp.sqrt(z) if z else 2 / mp.sqrt(mp.pi), 0, 1, 5)
    show("ERF_P", coefs, err, "erf(x) = x * P(x^2) for |x| < 1")
    # erfc(a) = P(a - 0.75) for 0.5 <= a < 1 (1 - erf(a) would cancel there)
    coefs, err = fit(lambda u: mp.erfc(u + 0.75), -0.25, 0.25, 7)
    show("ERFC_MID", coefs, err, "erfc(a) = P(a - 0.75) for 0.5 <= a < 1")
    # erfc(a) = exp(-a^2) G(1/a) for 1 <= a <= 10.1, G a polynomial in u = 1/a - center
    lo_t, hi_t = 1 / 10.1, 1.0
    center = (lo_t + hi_t) / 2
    coefs, err = fit(lambda u: mp.erfc(1 / (u + center)) * mp.exp(1 / (u + center) ** 2), lo_t - center,
                     hi_t - center, 10)
    print(f"ERFC_CENTER = {center!r}")
    show("ERFC_G", coefs, err, "erfc(a) = exp(-a^2) * G(1/a - ERFC_CENTER) for 1 <= a <= 10.1")
    # erf(a) = 1 - exp(P(a - 2.5)) for 1 <= a <= 4 (erf rounds to 1 beyond): P ~ ln erfc, its error
    # weighted by erfc (what 1 - erfc sees)
    coefs, err = fit(lambda u: mp.log(mp.erfc(u + 2.5)), -1.5, 1.5, 6, weight=lambda u: mp.erfc(u + 2.5))
    show("ERF_TAIL", coefs, err, "erf(a) = 1 - exp(P(a - 2.5)) for 1 <= a <= 4 (absolute error of 1 - erf)")
    # erfc(a) = t exp(-a^2 + Q(t)), t = 1 / (1 + a/2), for 0 <= a <= 10.1: one formula over the
    # whole range (Numerical Recipes' erfcc form, refitted); normcdf uses it.  Absolute error of Q.
    coefs, err = fit(lambda t: mp.log(mp.erfc(2 / t - 2) / t) + (2 / t - 2) ** 2, 1 / (1 + 10.1 / 2), 1.0, 9,
                     relative=False)
    show("ERFC_Q", coefs, err, "erfc(a) = t * exp(-a^2 + Q(t)), t = 1 / (1 + a/2), 0 <= a <= 10.1 (absolute error)")
    # float64 sine and cosine on |r| <= pi/4 (the float32 sin/cos evaluate in float64)
    q = float(mp.pi / 4) ** 2
    coefs, err = fit(lambda z: (mp.sin(mp.sqrt(z)) - mp.sqrt(z)) / mp.sqrt(z) ** 3 if z else -mp.mpf(1) / 6, 0, q, 4)
    show("SIN_P", coefs, err, "sin(r) = r + r^3 * P(r^2) for |r| <= pi/4, float64")
    coefs, err = fit(lambda z: (mp.cos(mp.sqrt(z)) - 1 + z / 2) / z ** 2 if z else mp.mpf(1) / 24, 0, q, 4)
    show("COS_P", coefs, err, "cos(r) = 1 - r^2/2 + r^4 * P(r^2) for |r| <= pi/4, float64")


if __name__ == "__main__":
    main()
