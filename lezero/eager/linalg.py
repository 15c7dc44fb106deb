"""``lz.linalg``: norms, QR, determinants, linear solves, inverses and Cholesky, over batches of
matrices (``(..., m, n)``), composed from tensor methods, so their gradients are the autodiff of
the steps (the exact derivative wherever the factorization is smooth, as PyTorch's formulas).

The factorizations are unrolled over the columns (``n`` steps of a few ops each, for the small
matrices of models and tests; there is no blocked kernel):

- ``qr`` is Householder's, with LAPACK's convention (``geqrf``: the reflection sends a column to
  ``-sign(a) |x|``; a column already zero below the diagonal is left as it is), so ``Q`` and ``R``
  are PyTorch's, signs included.  ``det`` and ``slogdet`` are the product of ``R``'s diagonal,
  the sign flipped once per reflection; ``solve`` and ``inv`` back-substitute ``R x = Q^T b``.
- ``cholesky`` is the column algorithm on the lower triangle (as LAPACK reads it); its gradient is
  the symmetric one PyTorch gives (the lower triangle mirrored carries the values, the symmetric
  part the gradient).

A singular matrix (``solve``, ``inv``) or one that is not positive-definite (``cholesky``) is the
error PyTorch raises, found from the factorization's values on the host.

``eigh`` is iterative: cyclic Jacobi rotations (each a few lz ops on the batch) until the
off-diagonal part is below rounding, under ``no_grad``, on the lower triangle (as LAPACK reads
it).  Its gradient is not the iteration's: the results are rebuilt as expressions of ``A`` whose
values are the converged ones and whose first derivatives are the analytic ones PyTorch uses,
``dL = diag(V^T dA V)`` and ``dV = V (F * (V^T dA V))`` with ``F_ij = 1 / (L_j - L_i)`` and ``dA``
the symmetric part of the change (the detached factors make every other term vanish), so
first-order gradients equal PyTorch's (not second-order ones).  ``svd`` is ``eigh`` of ``A^T A`` (or ``A A^T`` for wide matrices):
``S = sqrt(L)``, ``U = A V / S``, differentiated through those ops (distinct, nonzero singular
values; the squared condition number limits its precision).  ``eig`` (complex) and ``lstsq`` are
not here.
"""
from __future__ import annotations

import collections
import math

import numpy as np

from lezero.eager import dtypes as _dt
from lezero.eager.autograd import no_grad
from lezero.eager.core import Tensor
from lezero.eager.creation import eye, tensor
from lezero.eager.functions import cat, where

__all__ = ["vector_norm", "matrix_norm", "norm", "qr", "det", "slogdet", "solve", "solve_triangular", "inv",
           "cholesky", "eigh", "eigvalsh", "svd", "svdvals"]

QR = collections.namedtuple("qr", ["Q", "R"])
SlogDet = collections.namedtuple("slogdet", ["sign", "logabsdet"])
Eigh = collections.namedtuple("eigh", ["eigenvalues", "eigenvectors"])
SVD = collections.namedtuple("svd", ["U", "S", "Vh"])
JACOBI_SWEEPS = 30  # cyclic Jacobi converges quadratically: a few sweeps for the matrices it is used on


def _square(name: str, a: Tensor) -> None:
    if a.ndim < 2:
        raise RuntimeError(f"linalg.{name}: The input tensor A must have at least 2 dimensions.")
    if a.shape[-1] != a.shape[-2]:
        raise RuntimeError(f"linalg.{name}: A must be batches of square matrices, but they are {a.shape[-2]} by "
                           f"{a.shape[-1]} matrices")


def _float(name: str, a: Tensor) -> None:
    if not a.is_floating_point():
        raise RuntimeError(f"linalg.{name}: Expected a floating point or complex tensor as input. Got {a.dtype}")


def _constant(array: np.ndarray, like: Tensor) -> Tensor:
    return tensor(array, dtype=like.dtype, device=like.device)


# --- norms -------------------------------------------------------------------------------------------

def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None) -> Tensor:  # noqa: A002 - PyTorch's names
    """``(sum |x|^ord)^(1/ord)`` over ``dim`` (every dim when None); ``inf``/``-inf`` the largest /
    smallest ``|x|``, ``0`` the count of nonzeros."""
    _float("vector_norm", x)
    if dtype is not None:
        x = x.to(dtype)
    if ord == math.inf:
        return x.abs().amax(dim, keepdim)
    if ord == -math.inf:
        return x.abs().amin(dim, keepdim)
    if ord == 0:
        return (x != 0).to(x.dtype).sum(dim, keepdim)
    if ord == 2:
        return (x * x).sum(dim, keepdim).sqrt()
    if ord == 1:
        return x.abs().sum(dim, keepdim)
    return (x.abs() ** ord).sum(dim, keepdim) ** (1.0 / ord)


def matrix_norm(a, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None) -> Tensor:  # noqa: A002
    """The Frobenius norm, or the largest (smallest) absolute column (``1``, ``-1``) or row
    (``inf``, ``-inf``) sum over the two dims ``dim``."""
    _float("matrix_norm", a)
    if a.ndim < 2:
        raise RuntimeError("linalg.matrix_norm: The input tensor A must have at least 2 dimensions.")
    if dtype is not None:
        a = a.to(dtype)
    rows, columns = (d % a.ndim for d in dim)
    if ord == "fro":
        return vector_norm(a, 2, (rows, columns), keepdim)
    if ord in (1, -1, math.inf, -math.inf):
        summed, over = (rows, columns) if ord in (1, -1) else (columns, rows)
        sums = a.abs().sum(summed, keepdim=True)
        out = sums.amax(over, keepdim=True) if ord > 0 else sums.amin(over, keepdim=True)
        return out if keepdim else out.squeeze((rows, columns))
    if ord in ("nuc", 2, -2):
        rest = [d for d in range(a.ndim) if d not in (rows, columns)]
        values = svdvals(a.permute(*rest, rows, columns))
        out = values.sum(-1) if ord == "nuc" else values.amax(-1) if ord == 2 else values.amin(-1)
        return out.unsqueeze(min(rows, columns)).unsqueeze(max(rows, columns)) if keepdim else out
    raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")


def norm(x, ord=None, dim=None, keepdim=False, *, dtype=None) -> Tensor:  # noqa: A002
    """``vector_norm`` over one dim (or every dim, ``ord`` None), ``matrix_norm`` over two."""
    if isinstance(dim, int):
        dim = (dim,)
    if dim is None and ord is None:
        return vector_norm(x, 2, None, keepdim, dtype=dtype)
    if dim is None:
        dim = tuple(range(x.ndim))
        if len(dim) not in (1, 2):
            raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. Got "
                               f"{x.ndim}D.")
    if len(dim) == 2:
        return matrix_norm(x, "fro" if ord is None else ord, dim, keepdim, dtype=dtype)
    return vector_norm(x, 2 if ord is None else ord, dim, keepdim, dtype=dtype)


# --- QR and what it gives ---------------------------------------------------------------------------------

def _householder(a: Tensor) -> tuple:
    """``Q`` (``m x m``), ``R`` (``m x n``) and the number of reflections of ``a``'s Householder QR."""
    m, n = a.shape[-2:]
    rows = np.arange(m)
    r, q = a, eye(m, dtype=a.dtype, device=a.device).expand(*a.shape[:-2], m, m)
    reflections = 0
    for j in range(min(m, n)):  # a last column of one row reflects nothing (LAPACK's tau = 0)
        column = r.select(-1, j)
        below = column * _constant(rows > j, a)
        sigma = (below * below).sum(-1, keepdim=True)
        alpha = column.narrow(-1, j, 1)
        size = (alpha * alpha + sigma).sqrt()
        beta = where(alpha >= 0, -size, size)
        v = below + _constant(rows == j, a) * (alpha - beta)
        reflect = sigma > 0
        scale = where(reflect, 2 / where(reflect, (v * v).sum(-1, keepdim=True), 1.0), 0.0)
        reflections = reflections + reflect.to(a.dtype)
        r = r - (scale * v).unsqueeze(-1) * (v.unsqueeze(-2) @ r)
        q = q - (q @ v.unsqueeze(-1)) * (scale * v).unsqueeze(-2)
    return q, r, reflections


def qr(a: Tensor, mode: str = "reduced") -> QR:
    """``a = Q R``, ``Q`` with orthonormal columns, ``R`` upper triangular (``mode``: ``reduced``
    ``k = min(m, n)`` columns of Q, ``complete`` all, ``r`` R alone and an empty Q)."""
    if mode not in ("reduced", "complete", "r"):
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of 'reduced' (default), 'r', "
                           f"or 'complete'")
    _float("qr", a)
    if a.ndim < 2:
        raise RuntimeError("linalg.qr: The input tensor A must have at least 2 dimensions.")
    m, n = a.shape[-2:]
    q, r, _ = _householder(a)
    r = r.triu()
    if mode == "complete":
        return QR(q, r)
    k = min(m, n)
    r = r.narrow(-2, 0, k)
    if mode == "r":
        return QR(tensor(np.zeros((0,)), dtype=a.dtype, device=a.device), r)
    return QR(q.narrow(-1, 0, k), r)


def _diagonal(a: Tensor) -> Tensor:
    n = a.shape[-1]
    return (a * _constant(np.eye(n, dtype=bool), a)).sum(-1)


def slogdet(a: Tensor) -> SlogDet:
    """The sign and the log of the absolute value of the determinant."""
    _square("slogdet", a)
    _float("slogdet", a)
    _, r, reflections = _householder(a)
    d = _diagonal(r)
    flips = reflections.squeeze(-1)
    sign = d.sign().prod(-1) * (1 - 2 * (flips - 2 * (flips / 2).floor()))
    return SlogDet(sign, d.abs().log().sum(-1))


def det(a: Tensor) -> Tensor:
    """The determinant: ``R``'s diagonal product, negated once per reflection."""
    _square("det", a)
    _float("det", a)
    _, r, reflections = _householder(a)
    flips = reflections.squeeze(-1)
    return _diagonal(r).prod(-1) * (1 - 2 * (flips - 2 * (flips / 2).floor()))


def _back_substitute(r: Tensor, c: Tensor, name: str, unitriangular: bool = False) -> Tensor:
    """``x`` with ``r x = c`` (``r`` upper triangular ``n x n``, ``c`` ``n x k``), row by row from the last."""
    n = r.shape[-1]
    if not unitriangular:
        zero = np.flatnonzero((_diagonal(r).detach().numpy().reshape(-1, n) == 0).any(axis=0))
        if zero.size:
            raise RuntimeError(f"linalg.{name}: The solver failed because the input matrix is singular (the diagonal "
                               f"element {int(zero[0]) + 1} is zero).")
    rows = []
    for i in reversed(range(n)):
        value = c.narrow(-2, i, 1)
        if rows:
            done = cat(rows, -2)  # x[i+1:]
            value = value - r.narrow(-2, i, 1).narrow(-1, i + 1, n - i - 1) @ done
        if not unitriangular:
            value = value / r.narrow(-2, i, 1).narrow(-1, i, 1)
        rows.insert(0, value)
    return cat(rows, -2)


def _as_matrix_rhs(a: Tensor, b: Tensor) -> tuple:
    """``b`` as ``(..., n, k)``; whether it was a vector (``b.ndim == a.ndim - 1``, PyTorch's rule)."""
    vector = b.ndim == 1 or (b.ndim == a.ndim - 1 and b.shape == a.shape[:-1])
    return (b.unsqueeze(-1), True) if vector else (b, False)


def solve(a: Tensor, b: Tensor, *, left: bool = True) -> Tensor:
    """``x`` with ``a x = b`` (``x a = b`` when not ``left``), by QR."""
    _square("solve", a)
    _float("solve", a)
    if not left:
        return solve(a.mT, b.mT).mT
    rhs, vector = _as_matrix_rhs(a, b)
    if rhs.shape[-2] != a.shape[-1]:
        raise RuntimeError(f"linalg.solve: Incompatible shapes of A and B for the equation AX = B "
                           f"({a.shape[-2]}x{a.shape[-1]} and {rhs.shape[-2]}x{rhs.shape[-1]})")
    q, r, _ = _householder(a)
    x = _back_substitute(r.triu(), q.mT @ rhs, "solve")
    return x.squeeze(-1) if vector else x


def solve_triangular(a: Tensor, b: Tensor, *, upper: bool, left: bool = True, unitriangular: bool = False) -> Tensor:
    """``x`` with ``a x = b`` for triangular ``a`` (its other triangle is not read)."""
    _square("solve_triangular", a)
    if not left:
        return solve_triangular(a.mT, b.mT, upper=not upper, unitriangular=unitriangular).mT
    if upper:
        return _back_substitute(a.triu(), b, "solve_triangular", unitriangular)
    flipped = _reversal(a.shape[-1], a)  # the lower triangle reversed in both orders is upper
    return flipped @ _back_substitute(flipped @ a.tril() @ flipped, flipped @ b, "solve_triangular", unitriangular)


def _reversal(n: int, like: Tensor) -> Tensor:
    return _constant(np.eye(n)[::-1].copy(), like)


def inv(a: Tensor) -> Tensor:
    """``a^-1``: ``solve(a, I)``."""
    _square("inv", a)
    _float("inv", a)
    n = a.shape[-1]
    q, r, _ = _householder(a)
    return _back_substitute(r.triu(), q.mT @ eye(n, dtype=a.dtype, device=a.device), "inv")


def cholesky(a: Tensor, *, upper: bool = False) -> Tensor:
    """``L`` lower triangular with ``a = L L^T`` (``L^T`` when ``upper``), from ``a``'s lower triangle."""
    _square("cholesky", a)
    _float("cholesky", a)
    n = a.shape[-1]
    mirrored = a.tril() + a.tril(-1).mT
    symmetric = (a + a.mT) / 2
    a = symmetric + (mirrored - symmetric).detach()  # the values of the lower triangle, the symmetric gradient
    rows = np.arange(n)
    lower = a * 0
    for j in range(n):
        column = a.select(-1, j) - (lower @ lower.select(-2, j).unsqueeze(-1)).squeeze(-1)
        pivot = column.narrow(-1, j, 1)
        if (pivot.detach().numpy() <= 0).any():
            raise RuntimeError(f"linalg.cholesky: The factorization could not be completed because the input is not "
                               f"positive-definite (the leading minor of order {j + 1} is not positive-definite).")
        root = pivot.sqrt()
        new = column / root * _constant(rows > j, a) + _constant(rows == j, a) * root
        lower = lower + new.unsqueeze(-1) * _constant(rows == j, a)
    return lower.mT if upper else lower


# --- symmetric eigenproblems and singular values ------------------------------------------------------

def _jacobi(a: Tensor) -> tuple:
    """The eigenvalues (ascending) and eigenvectors of the symmetric ``a``, by cyclic Jacobi
    rotations (no gradient: see the module docstring)."""
    n = a.shape[-1]
    unit = np.eye(n)
    v = eye(n, dtype=a.dtype, device=a.device).expand(*a.shape).clone()
    scale = (a * a).sum((-2, -1)).amax().item() or 1.0
    tolerance = (_dt.finfo(a.dtype).eps * n) ** 2 * scale
    for _ in range(JACOBI_SWEEPS):
        if (a * a).sum((-2, -1)).amax().item() - \
                (_diagonal(a) ** 2).sum(-1).amin().item() <= tolerance:
            break
        for p in range(n - 1):
            for q in range(p + 1, n):
                app, aqq = a.select(-2, p).select(-1, p), a.select(-2, q).select(-1, q)
                apq = a.select(-2, p).select(-1, q)
                zero = apq == 0
                tau = (aqq - app) / (2 * where(zero, 1.0, apq))
                sign = where(tau >= 0, tau * 0 + 1, tau * 0 - 1)
                t = where(zero, 0.0, sign / (tau.abs() + (1 + tau * tau).sqrt()))
                c = (1 / (1 + t * t).sqrt()).unsqueeze(-1).unsqueeze(-1)
                s = (t * c.squeeze(-1).squeeze(-1)).unsqueeze(-1).unsqueeze(-1)
                ep, eq = unit[:, [p]], unit[:, [q]]
                rotation = eye(n, dtype=a.dtype, device=a.device) + (c - 1) * _constant(ep @ ep.T + eq @ eq.T, a) + \
                    s * _constant(ep @ eq.T - eq @ ep.T, a)
                a = rotation.mT @ a @ rotation
                v = v @ rotation
    values = _diagonal(a)
    order = values.argsort(-1)
    return values.gather(-1, order), v.gather(-1, order.unsqueeze(-2).expand(*v.shape))


def eigh(a: Tensor, UPLO: str = "L") -> Eigh:  # noqa: N803 - PyTorch's names
    """The eigenvalues (ascending) and orthonormal eigenvectors of a symmetric matrix, from its
    ``UPLO`` triangle."""
    _square("eigh", a)
    _float("eigh", a)
    if UPLO not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    with no_grad():
        triangle = a.detach().tril() if UPLO == "L" else a.detach().triu()
        values, vectors = _jacobi(triangle + triangle.mT - triangle * _constant(np.eye(a.shape[-1]), a))
    n = a.shape[-1]
    symmetric = (a + a.mT) / 2
    change = symmetric - symmetric.detach()  # zero, with the gradient of ``a`` (symmetric, as PyTorch's)
    projected = vectors.mT @ change @ vectors
    gaps = values.unsqueeze(-2) - values.unsqueeze(-1)  # L_j - L_i
    off = _constant(~np.eye(n, dtype=bool), a)
    inverse_gaps = where(off > 0, 1 / where(off > 0, gaps, 1.0), 0.0)
    return Eigh(values + _diagonal(projected), vectors + vectors @ (inverse_gaps * projected))


def eigvalsh(a: Tensor, UPLO: str = "L") -> Tensor:  # noqa: N803
    return eigh(a, UPLO).eigenvalues


def svd(a: Tensor, full_matrices: bool = True) -> SVD:
    """``a = U diag(S) Vh``, ``S`` descending; from ``eigh`` of the Gram matrix of the short side."""
    _float("svd", a)
    if a.ndim < 2:
        raise RuntimeError("linalg.svd: The input tensor A must have at least 2 dimensions.")
    m, n = a.shape[-2:]
    if m < n:
        u, s, vh = svd(a.mT, full_matrices)
        return SVD(vh.mT, s, u.mT)
    values, vectors = eigh(a.mT @ a)
    descending = tensor(np.arange(n - 1, -1, -1), device=a.device)
    values, vectors = values.index_select(-1, descending), vectors.index_select(-1, descending)
    s = values.clamp(min=0).sqrt()
    u = (a @ vectors) / s.unsqueeze(-2)
    if full_matrices and m > n:
        if a.requires_grad:
            raise RuntimeError("linalg.svd: The derivative of linalg.svd is not implemented when full_matrices=True "
                               "(the completed columns of U are arbitrary); use full_matrices=False")
        completion = qr(u.detach(), "complete").Q.narrow(-1, n, m - n)
        u = cat([u, completion], -1)
    return SVD(u, s, vectors.mT)


def svdvals(a: Tensor) -> Tensor:
    """The singular values, descending."""
    return svd(a, full_matrices=False).S
