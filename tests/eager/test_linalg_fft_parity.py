"""``lz.linalg`` and ``lz.fft`` against torch in float64: forward and gradients with the same
arguments, and torch's errors for bad inputs.  Complex results are compared as
``torch.view_as_real`` gives them (lezero's representation of a complex tensor)."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import lezero as lz
from tests.support.eager_testing import compare

RNG = np.random.default_rng(7)
A = RNG.standard_normal((4, 4)) + 2 * np.eye(4)
BATCH = RNG.standard_normal((2, 3, 3)) + 2 * np.eye(3)
SPD = A @ A.T + np.eye(4)
TALL = RNG.standard_normal((5, 3))
WIDE = RNG.standard_normal((3, 5))


def both(name: str, *args, **kwargs):
    return (lambda *t: getattr(lz.linalg, name)(*t, *args, **kwargs),
            lambda *t: getattr(torch.linalg, name)(*t, *args, **kwargs))


NORM_CASES = [
    ("vector_norm", (), {}, TALL), ("vector_norm", (1,), {"dim": 0}, TALL), ("vector_norm", (3.5,), {"dim": 1}, TALL),
    ("vector_norm", (math.inf,), {"dim": (0, 1), "keepdim": True}, TALL), ("vector_norm", (-math.inf,), {}, TALL),
    ("vector_norm", (0,), {}, TALL), ("matrix_norm", (), {}, BATCH), ("matrix_norm", (1,), {}, TALL),
    ("matrix_norm", (-1,), {"keepdim": True}, BATCH), ("matrix_norm", (math.inf,), {}, WIDE),
    ("matrix_norm", (-math.inf,), {"dim": (0, 2)}, BATCH), ("norm", (), {}, BATCH), ("norm", (1,), {}, WIDE),
    ("norm", (), {"dim": 1}, WIDE), ("norm", (math.inf,), {}, TALL[0]),
]


@pytest.mark.parametrize("name,args,kwargs,x", NORM_CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(NORM_CASES)])
def test_norms_match_torch(name, args, kwargs, x):
    compare(*both(name, *args, **kwargs), x, grad=args[:1] != (0,))


@pytest.mark.parametrize("x", [A, BATCH, TALL, WIDE], ids=["square", "batch", "tall", "wide"])
@pytest.mark.parametrize("mode", ["reduced", "complete"])
def test_qr_matches_torch_signs_included(x, mode):
    grad = mode == "reduced" and x.shape[-2] >= x.shape[-1]  # torch differentiates these modes only
    compare(lambda a: tuple(lz.linalg.qr(a, mode)), lambda a: tuple(torch.linalg.qr(a, mode)), x, grad=grad)


def test_qr_r_mode():
    compare(lambda a: lz.linalg.qr(a, "r").R, lambda a: torch.linalg.qr(a, "r").R, TALL, grad=False)


@pytest.mark.parametrize("name", ["det", "inv"])
@pytest.mark.parametrize("x", [A, BATCH], ids=["square", "batch"])
def test_det_and_inv_match_torch(name, x):
    compare(*both(name), x)


def test_slogdet_matches_torch():
    compare(lambda a: tuple(lz.linalg.slogdet(a)), lambda a: tuple(torch.linalg.slogdet(a)), BATCH)
    negative = A.copy()
    negative[0] *= -1
    compare(lambda a: tuple(lz.linalg.slogdet(a)), lambda a: tuple(torch.linalg.slogdet(a)), negative)


@pytest.mark.parametrize("a,b,left", [(A, RNG.standard_normal((4, 2)), True), (A, RNG.standard_normal(4), True),
                                      (BATCH, RNG.standard_normal((2, 3, 5)), True),
                                      (A, RNG.standard_normal((3, 4)), False)],
                         ids=["matrix", "vector", "batch", "right"])
def test_solve_matches_torch(a, b, left):
    compare(lambda x, y: lz.linalg.solve(x, y, left=left), lambda x, y: torch.linalg.solve(x, y, left=left), a, b)


@pytest.mark.parametrize("upper", [True, False])
@pytest.mark.parametrize("left", [True, False])
def test_solve_triangular_matches_torch(upper, left):
    b = RNG.standard_normal((4, 3) if left else (3, 4))
    compare(lambda x, y: lz.linalg.solve_triangular(x, y, upper=upper, left=left),
            lambda x, y: torch.linalg.solve_triangular(x, y, upper=upper, left=left), A, b)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_matches_torch(upper):
    compare(lambda a: lz.linalg.cholesky(a, upper=upper), lambda a: torch.linalg.cholesky(a, upper=upper), SPD)
    batch = BATCH @ BATCH.transpose(0, 2, 1) + np.eye(3)
    compare(lambda a: lz.linalg.cholesky(a, upper=upper), lambda a: torch.linalg.cholesky(a, upper=upper), batch)


def test_cholesky_reads_the_lower_triangle_as_torch():
    lopsided = np.tril(SPD) + np.triu(RNG.standard_normal((4, 4)), 1)
    compare(both("cholesky")[0], both("cholesky")[1], lopsided, grad=False)


@pytest.mark.parametrize("call,message", [
    (lambda: lz.linalg.inv(lz.tensor(np.ones((3, 3)))), "singular"),
    (lambda: lz.linalg.solve(lz.tensor(np.zeros((2, 2))), lz.tensor(np.ones(2))), "singular"),
    (lambda: lz.linalg.cholesky(lz.tensor(-np.eye(3))), "not positive-definite"),
    (lambda: lz.linalg.det(lz.tensor(TALL)), "square matrices"),
    (lambda: lz.linalg.inv(lz.tensor(np.ones(3))), "at least 2 dimensions"),
    (lambda: lz.linalg.qr(lz.tensor(A), "full"), "unrecognized mode"),
    (lambda: lz.linalg.matrix_norm(lz.tensor(A), 3), "not supported"),
    (lambda: lz.linalg.solve(lz.tensor(A), lz.tensor(np.ones((3, 1)))), "Incompatible shapes"),
    (lambda: lz.linalg.det(lz.tensor(np.ones((2, 2), np.int64))), "floating point"),
])
def test_linalg_errors(call, message):
    with pytest.raises(RuntimeError, match=message):
        call()


# --- fft --------------------------------------------------------------------------------------------

SIGNAL = RNG.standard_normal((3, 8))
ODD = RNG.standard_normal((2, 7))
SPECTRUM = RNG.standard_normal((3, 5, 2))


def real_view(fn):
    return lambda *a, **k: torch.view_as_real(fn(*a, **k).resolve_conj())


FFT_CASES = [
    (lambda x: lz.fft.fft(x), real_view(lambda x: torch.fft.fft(x)), SIGNAL),
    (lambda x: lz.fft.fft(x, n=10, dim=0, norm="ortho"), real_view(lambda x: torch.fft.fft(x, n=10, dim=0, norm="ortho")),
     SIGNAL),
    (lambda x: lz.fft.fft(x, n=4, norm="forward"), real_view(lambda x: torch.fft.fft(x, n=4, norm="forward")), ODD),
    (lambda x: lz.fft.rfft(x), real_view(lambda x: torch.fft.rfft(x)), SIGNAL),
    (lambda x: lz.fft.rfft(x, norm="ortho"), real_view(lambda x: torch.fft.rfft(x, norm="ortho")), ODD),
    (lambda x: lz.fft.ifft(x, complex_input=False), real_view(lambda x: torch.fft.ifft(x)), ODD),
    (lambda z: lz.fft.ifft(z), real_view(lambda z: torch.fft.ifft(torch.view_as_complex(z))), SPECTRUM),
    (lambda z: lz.fft.fft(z, dim=0, complex_input=True),
     real_view(lambda z: torch.fft.fft(torch.view_as_complex(z), dim=0)), SPECTRUM),
    (lambda z: lz.fft.irfft(z), lambda z: torch.fft.irfft(torch.view_as_complex(z)), SPECTRUM),
    (lambda z: lz.fft.irfft(z, n=9, norm="ortho"), lambda z: torch.fft.irfft(torch.view_as_complex(z), n=9, norm="ortho"),
     SPECTRUM),
    (lambda z: lz.fft.irfft(z, dim=0), lambda z: torch.fft.irfft(torch.view_as_complex(z), dim=0), SPECTRUM),
]


@pytest.mark.parametrize("lz_fn,torch_fn,x", FFT_CASES, ids=[str(i) for i in range(len(FFT_CASES))])
def test_fft_matches_torch(lz_fn, torch_fn, x):
    compare(lz_fn, torch_fn, x)


def test_rfft_then_irfft_round_trips():
    x = lz.tensor(SIGNAL)
    np.testing.assert_allclose(lz.fft.irfft(lz.fft.rfft(x), n=8).numpy(), SIGNAL, atol=1e-12)


def test_fft_frequencies_and_errors():
    for n, d in [(8, 1.0), (7, 0.1)]:
        np.testing.assert_allclose(lz.fft.fftfreq(n, d).numpy(), torch.fft.fftfreq(n, d).numpy(), rtol=1e-6)
        np.testing.assert_allclose(lz.fft.rfftfreq(n, d).numpy(), torch.fft.rfftfreq(n, d).numpy(), rtol=1e-6)
    with pytest.raises(RuntimeError, match="pair in its last dim"):
        lz.fft.ifft(lz.tensor(SIGNAL))
    with pytest.raises(ValueError, match="Invalid normalization mode"):
        lz.fft.fft(lz.tensor(SIGNAL), norm="both")
    with pytest.raises(RuntimeError, match="Invalid number of data points"):
        lz.fft.fft(lz.tensor(SIGNAL), n=0)


# --- eigh and svd: eigenvectors and singular vectors up to sign, so compared squared -------------------

SQUARE = RNG.standard_normal((4, 4))
SYMMETRIC = SQUARE + SQUARE.T
LOW = 1e-7
LOOSE = {"rtol": LOW, "atol": LOW * 1e-2}  # svd squares the condition number (eigh of the Gram matrix)


def _eigh_parts(lib):
    def parts(a):
        values, vectors = lib.linalg.eigh(a)
        return values, vectors * vectors, lib.linalg.eigvalsh(a, UPLO="U")
    return parts


def test_eigh_matches_torch_with_gradients():
    compare(_eigh_parts(lz), _eigh_parts(torch), SYMMETRIC)
    batch = RNG.standard_normal((2, 3, 3))
    batch = batch + batch.transpose(0, 2, 1)
    compare(_eigh_parts(lz), _eigh_parts(torch), batch)


def test_eigh_reads_one_triangle_and_its_vectors_are_orthonormal():
    lopsided = np.tril(SYMMETRIC) + np.triu(RNG.standard_normal((4, 4)), 1)
    values, vectors = lz.linalg.eigh(lz.tensor(lopsided))
    np.testing.assert_allclose(values.numpy(), torch.linalg.eigvalsh(torch.tensor(lopsided)).numpy(), rtol=1e-10)
    v = vectors.numpy()
    np.testing.assert_allclose(v.T @ v, np.eye(4), atol=1e-12)
    np.testing.assert_allclose(v @ np.diag(values.numpy()) @ v.T, np.tril(lopsided) + np.tril(lopsided, -1).T,
                               atol=1e-12)


def _svd_parts(lib):
    def parts(a):
        u, s, vh = lib.linalg.svd(a, full_matrices=False)
        return u * u, s, vh * vh, lib.linalg.svdvals(a)
    return parts


@pytest.mark.parametrize("x", [TALL, WIDE], ids=["tall", "wide"])
def test_svd_matches_torch_with_gradients(x):
    compare(_svd_parts(lz), _svd_parts(torch), x, tol=LOOSE)


def test_full_svd_and_the_norms_of_singular_values():
    u, s, vh = lz.linalg.svd(lz.tensor(TALL))
    assert u.shape == (5, 5) and vh.shape == (3, 3)
    np.testing.assert_allclose(u.numpy().T @ u.numpy(), np.eye(5), atol=1e-10)
    np.testing.assert_allclose(u.numpy()[:, :3] @ np.diag(s.numpy()) @ vh.numpy(), TALL, atol=1e-10)
    for order in ("nuc", 2, -2):
        compare(lambda a, o=order: lz.linalg.matrix_norm(a, o), lambda a, o=order: torch.linalg.matrix_norm(a, o), WIDE,
                tol=LOOSE)
    compare(lambda a: lz.linalg.norm(a, 2, dim=(0, 2)), lambda a: torch.linalg.norm(a, 2, dim=(0, 2)), BATCH, tol=LOOSE)
    with pytest.raises(RuntimeError, match="full_matrices=True"):
        lz.linalg.svd(lz.tensor(TALL, requires_grad=True))
    with pytest.raises(RuntimeError, match="UPLO"):
        lz.linalg.eigh(lz.tensor(SYMMETRIC), UPLO="X")
