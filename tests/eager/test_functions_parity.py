"""Issue 19's tensor functions against torch in float64: forward and gradients with the same
arguments, and the errors torch raises for bad ones (selection, scans, masks, einsum, sampling,
hooks and retained gradients)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lezero as lz
from tests.support.eager_testing import assert_same, compare

RNG = np.random.default_rng(19)
X = RNG.standard_normal((3, 5))
X3 = RNG.standard_normal((2, 3, 4))


def both(name: str, *args, **kwargs):
    """``lz.<name>`` and ``torch.<name>`` applied with the given extra arguments."""
    return (lambda *t: getattr(lz, name)(*t, *args, **kwargs), lambda *t: getattr(torch, name)(*t, *args, **kwargs))


SELECTION_CASES = [
    ("topk", (2,), {}, X), ("topk", (3,), {"dim": 0, "largest": False}, X), ("topk", (2, 1, True, True), {}, X3),
    ("sort", (), {}, X), ("sort", (0,), {"descending": True}, X), ("sort", (), {"dim": 1, "stable": True}, X3),
    ("argsort", (), {"descending": True}, X), ("msort", (), {}, X),
    ("cumsum", (1,), {}, X), ("cumsum", (-3,), {}, X3), ("cumprod", (1,), {}, X), ("cumprod", (0,), {}, X3),
    ("cummax", (1,), {}, X), ("cummin", (0,), {}, X3), ("logcumsumexp", (1,), {}, X),
    ("triu", (), {}, X), ("triu", (1,), {}, X3), ("tril", (-1,), {}, X), ("tril", (), {"diagonal": 2}, X3),
]


@pytest.mark.parametrize("name,args,kwargs,x", SELECTION_CASES,
                         ids=[f"{c[0]}-{i}" for i, c in enumerate(SELECTION_CASES)])
def test_selection_scans_and_masks_match_torch(name, args, kwargs, x):
    compare(*both(name, *args, **kwargs), x, grad=name != "argsort")


def test_methods_match_the_functions():
    x = lz.tensor(X)
    assert_same(x.topk(2).values, torch.tensor(X).topk(2).values)
    assert_same(x.sort(descending=True).indices, torch.tensor(X).sort(descending=True).indices)
    assert_same(x.cumsum(0), torch.tensor(X).cumsum(0))
    assert_same(x.tril(), torch.tensor(X).tril())
    y = lz.tensor(X.copy())
    y.tril_()
    assert_same(y, torch.tensor(X).tril())
    z = lz.tensor(X.copy())
    z.cumsum_(1)
    assert_same(z, torch.tensor(X).cumsum(1))


def test_integer_scans_promote_to_int64_as_torch():
    a = np.array([[1, 2, 3], [4, 5, 6]], np.int32)
    assert_same(lz.tensor(a).cumsum(1), torch.tensor(a).cumsum(1))
    assert_same(lz.tensor(a).cumprod(0, dtype=lz.float64), torch.tensor(a).cumprod(0, dtype=torch.float64))
    assert lz.tensor(a).cumsum(1).dtype == lz.int64


def test_cumprod_gradient_with_zeros_is_exact():
    x = np.array([[2.0, 0.0, 3.0, 0.5], [0.0, 0.0, 1.5, 2.0]])
    compare(*both("cumprod", 1), x)


def test_sort_is_stable_and_nan_is_largest():
    x = np.array([3.0, 1.0, np.nan, 1.0, 3.0, -2.0])
    for descending in (False, True):
        got = lz.tensor(x).sort(descending=descending, stable=True)
        want = torch.tensor(x).sort(descending=descending, stable=True)
        assert_same(got.values, want.values)
        assert_same(got.indices, want.indices)


GATHER_INDEX = np.array([[0, 4, 1], [2, 2, 0], [3, 1, 4]])


def test_gather_take_along_dim_and_index_select():
    compare(lambda x: lz.gather(x, 1, lz.tensor(GATHER_INDEX)), lambda x: torch.gather(x, 1, torch.tensor(GATHER_INDEX)),
            X)
    compare(lambda x: x.gather(0, lz.tensor([[0, 2], [1, 1]])), lambda x: x.gather(0, torch.tensor([[0, 2], [1, 1]])),
            X)
    compare(lambda x: lz.take_along_dim(x, lz.tensor(GATHER_INDEX), 1),
            lambda x: torch.take_along_dim(x, torch.tensor(GATHER_INDEX), 1), X)
    compare(lambda x: lz.take_along_dim(x, lz.tensor([14, 0, 3])), lambda x: torch.take_along_dim(x, torch.tensor([14, 0, 3])),
            X)
    compare(lambda x: x.index_select(1, lz.tensor([4, 0, 0])), lambda x: x.index_select(1, torch.tensor([4, 0, 0])), X)


def test_gather_of_a_large_axis_has_the_scatter_gradient():
    big = RNG.standard_normal((2, 3000))
    index = RNG.integers(0, 3000, (2, 400))
    compare(lambda x: x.gather(1, lz.tensor(index)), lambda x: x.gather(1, torch.tensor(index)), big)


SCATTER_INDEX = np.array([[0, 1, 2], [2, 0, 4]])
SRC = RNG.standard_normal((2, 3))  # index's shape: torch's gradient rejects a larger src


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_matches_torch(reduce, include_self):
    def lz_fn(x, s):
        return x.scatter_reduce(1, lz.tensor(SCATTER_INDEX), s, reduce, include_self=include_self)

    def torch_fn(x, s):
        return x.scatter_reduce(1, torch.tensor(SCATTER_INDEX), s, reduce, include_self=include_self)
    compare(lz_fn, torch_fn, X[:2], SRC, grad=reduce in ("sum", "mean"))


def test_scatter_and_scatter_add_with_gradients():
    index = np.array([[0, 1, 2, 3], [4, 3, 2, 1]])  # no place written twice: torch's order is unspecified
    src = RNG.standard_normal((2, 4))
    compare(lambda x, s: x.scatter(1, lz.tensor(index), s), lambda x, s: x.scatter(1, torch.tensor(index), s), X[:2], src)
    larger = RNG.standard_normal((3, 6))  # only src[:2, :3] is read
    compare(lambda x, s: x.scatter_add(1, lz.tensor(SCATTER_INDEX), s),
            lambda x, s: x.scatter_add(1, torch.tensor(SCATTER_INDEX), s), X[:2], larger, grad=False)
    compare(lambda x, s: lz.scatter_add(x, 1, lz.tensor(SCATTER_INDEX), s),
            lambda x, s: torch.scatter_add(x, 1, torch.tensor(SCATTER_INDEX), s), X[:2], SRC)
    compare(lambda x: x.scatter(0, lz.tensor([[1, 0, 2]]), 7.5), lambda x: x.scatter(0, torch.tensor([[1, 0, 2]]), 7.5), X)
    y, t = lz.tensor(X.copy()), torch.tensor(X.copy())
    y.scatter_add_(1, lz.tensor(SCATTER_INDEX), lz.tensor(SRC))
    t.scatter_add_(1, torch.tensor(SCATTER_INDEX), torch.tensor(SRC))
    assert_same(y[:2], t[:2])


def test_masked_select_nonzero_and_float_classes():
    mask = X > 0
    compare(lambda x: x.masked_select(lz.tensor(mask)), lambda x: x.masked_select(torch.tensor(mask)), X)
    compare(lambda x: lz.masked_select(x, lz.tensor(mask[0])), lambda x: torch.masked_select(x, torch.tensor(mask[0])), X)
    assert_same(lz.tensor(mask).nonzero(), torch.tensor(mask).nonzero())
    for got, want in zip(lz.tensor(mask).nonzero(as_tuple=True), torch.tensor(mask).nonzero(as_tuple=True)):
        assert_same(got, want)
    special = np.array([0.0, np.nan, np.inf, -np.inf, -1.5, 1e308])
    for name in ("isnan", "isinf", "isposinf", "isneginf", "isfinite"):
        assert_same(getattr(lz, name)(lz.tensor(special)), getattr(torch, name)(torch.tensor(special)), what=name)
        assert_same(getattr(lz.tensor([1, 2]), name)(), getattr(torch.tensor([1, 2]), name)(), what=name)


def test_triangle_indices():
    for args in [(3, 4), (4, 3, 1), (5, 5, -2)]:
        assert_same(lz.tril_indices(*args), torch.tril_indices(*args))
        assert_same(lz.triu_indices(*args), torch.triu_indices(*args))


EINSUM_CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ii->i", [(4, 4)]), ("ii", [(4, 4)]),
    ("i,j", [(3,), (4,)]), ("ij->", [(3, 4)]), ("ij->ji", [(3, 4)]), ("...ij,...jk", [(2, 3, 4), (4, 5)]),
    ("bhqd,bhkd->bhqk", [(2, 2, 3, 4), (2, 2, 5, 4)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("iij->j", [(3, 3, 2)]), ("i,i->", [(5,), (5,)]), ("bn,anm,bm->ba", [(2, 3), (4, 3, 5), (2, 5)]),
]


@pytest.mark.parametrize("equation,shapes", EINSUM_CASES, ids=[c[0] for c in EINSUM_CASES])
def test_einsum_matches_torch(equation, shapes):
    arrays = [RNG.standard_normal(s) for s in shapes]
    compare(lambda *xs: lz.einsum(equation, *xs), lambda *xs: torch.einsum(equation, *xs), *arrays)


def test_einsum_takes_a_list_of_operands():
    a, b = RNG.standard_normal((2, 3)), RNG.standard_normal((3, 2))
    assert_same(lz.einsum("ij,jk", [lz.tensor(a), lz.tensor(b)]), torch.einsum("ij,jk", [torch.tensor(a), torch.tensor(b)]))


def test_multinomial_is_reproducible_and_follows_the_distribution():
    p = lz.tensor([[0.1, 0.0, 0.6, 0.3], [0.25, 0.25, 0.25, 0.25]], dtype=lz.float64)
    lz.manual_seed(3)
    first = p.multinomial(4000, replacement=True)
    lz.manual_seed(3)
    again = lz.multinomial(p, 4000, replacement=True)
    np.testing.assert_array_equal(first.numpy(), again.numpy())
    assert first.dtype == lz.int64 and first.shape == (2, 4000)
    frequencies = np.stack([np.bincount(row, minlength=4) / 4000 for row in first.numpy()])
    np.testing.assert_allclose(frequencies, p.numpy(), atol=0.03)
    assert not (first.numpy()[0] == 1).any()  # a category of probability 0 is never drawn
    g = lz.Generator().manual_seed(5)
    draws = np.stack([lz.tensor([0.5, 0.3, 0.2]).multinomial(3, generator=g).numpy() for _ in range(600)])
    assert all(sorted(d) == [0, 1, 2] for d in draws)  # without replacement: each category once
    first_pick = np.bincount(draws[:, 0], minlength=3) / 600
    np.testing.assert_allclose(first_pick, [0.5, 0.3, 0.2], atol=0.06)


@pytest.mark.parametrize("call,message", [
    (lambda: lz.tensor([0.5, -0.1]).multinomial(1), "probability tensor contains"),
    (lambda: lz.tensor([0.0, 0.0]).multinomial(1), "sum of probabilities"),
    (lambda: lz.tensor([0.5, 0.5]).multinomial(3), "without replacement"),
    (lambda: lz.tensor([0.5, 0.0]).multinomial(2), "not enough non-negative category"),
    (lambda: lz.tensor([[[0.5]]]).multinomial(1), "prob_dist must be 1 or 2 dim"),
    (lambda: lz.tensor(X).topk(6), "selected index k out of range"),
    (lambda: lz.tensor(X).gather(1, lz.tensor([[0, 5]])), "out of range"),
    (lambda: lz.tensor(X).gather(1, lz.tensor([[0, 1]], dtype=lz.int32)), "Expected dtype int64 for index"),
    (lambda: lz.tensor(X).gather(1, lz.tensor([0, 1])), "same number of dimensions"),
    (lambda: lz.tensor(X).index_select(0, lz.tensor([[0]])), "Index is supposed to be a vector"),
    (lambda: lz.tensor([1.0, 2.0]).triu(), "at least 2 dimensions"),
    (lambda: lz.tensor(X).masked_select(lz.tensor(X)), "expected BoolTensor"),
    (lambda: lz.tensor(X).scatter_reduce(1, lz.tensor([[0]]), lz.tensor([[1.0]]), "median"), "reduce argument"),
    (lambda: lz.einsum("ij,jk", lz.tensor(X)), "fewer operands"),
    (lambda: lz.einsum("ijk", lz.tensor(X)), "does not match the number of dimensions"),
    (lambda: lz.einsum("ij->ii", lz.tensor(X)), "appears more than once"),
    (lambda: lz.einsum("ij->k", lz.tensor(X)), "does not appear in the equation"),
    (lambda: lz.einsum("i1", lz.tensor(X)), "invalid subscript"),
])
def test_bad_arguments_raise_as_torch(call, message):
    with pytest.raises((RuntimeError, ValueError, IndexError, TypeError), match=message):
        call()


# --- hooks and retained gradients ---------------------------------------------------------------------

def _hooked_graph(lib):
    x = lib.tensor(X, requires_grad=True)
    seen = {}
    h = x * 2
    h.retain_grad()
    h.register_hook(lambda g: g * 10)  # replaces h's gradient before it reaches x
    y = (h.sin() * h).sum(1)
    y.register_hook(lambda g: seen.setdefault("y", g.clone()))
    z = y.exp()
    z.retain_grad()
    x.register_hook(lambda g: seen.setdefault("x", g.clone()))
    (z.sum() + h.sum()).backward()
    return x, h, z, seen


def test_hooks_and_retained_gradients_match_torch():
    lx, lh, lzz, lseen = _hooked_graph(lz)
    tx, th, tzz, tseen = _hooked_graph(torch)
    assert_same(lx.grad, tx.grad, what="x.grad")
    assert_same(lh.grad, th.grad, what="h.grad (retained before its hook changed it)")
    assert_same(lzz.grad, tzz.grad, what="z.grad")
    assert_same(lseen["y"], tseen["y"], what="y's hook")
    assert_same(lseen["x"], tseen["x"], what="x's hook")
    assert lh.retains_grad and not lx.retains_grad


def test_a_hook_removed_no_longer_runs_and_hooks_need_grad():
    x = lz.tensor([1.0, 2.0], requires_grad=True)
    handle = x.register_hook(lambda g: g * 0)
    handle.remove()
    (x * 3).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])
    with pytest.raises(RuntimeError, match="doesn't require gradient"):
        lz.tensor([1.0]).register_hook(lambda g: g)
    with pytest.raises(RuntimeError, match="requires_grad=False"):
        lz.tensor([1.0]).retain_grad()


# --- the names issue 19 lists for this part (and their neighbours) exist, as functions and methods -----

FUNCTIONS = ["einsum", "triu", "tril", "topk", "sort", "argsort", "msort", "cumsum", "cumprod", "cummax", "cummin",
             "logcumsumexp", "gather", "take_along_dim", "scatter", "scatter_add", "scatter_reduce", "index_select",
             "masked_fill", "masked_select", "nonzero", "argwhere", "multinomial", "isnan", "isinf", "isposinf",
             "isneginf", "isfinite", "tril_indices", "triu_indices"]
METHODS = ["topk", "sort", "argsort", "msort", "cumsum", "cumprod", "cumsum_", "cumprod_", "cummax", "cummin",
           "logcumsumexp", "tril", "triu", "tril_", "triu_", "gather", "take_along_dim", "scatter", "scatter_",
           "scatter_add", "scatter_add_", "scatter_reduce", "scatter_reduce_", "index_select", "masked_select",
           "nonzero", "argwhere", "multinomial", "isnan", "isinf", "isposinf", "isneginf", "isfinite",
           "register_hook", "retain_grad", "retains_grad"]
LINALG = ["norm", "vector_norm", "matrix_norm", "solve", "solve_triangular", "inv", "det", "slogdet", "qr", "svd",
          "svdvals", "eigh", "eigvalsh", "cholesky"]
FFT = ["fft", "ifft", "rfft", "irfft", "fftfreq", "rfftfreq"]


def test_every_listed_name_exists_where_torch_has_it():
    for names, ours, theirs in [(FUNCTIONS, lz, torch), (METHODS, lz.Tensor, torch.Tensor),
                                (LINALG, lz.linalg, torch.linalg), (FFT, lz.fft, torch.fft)]:
        assert all(hasattr(theirs, n) for n in names), [n for n in names if not hasattr(theirs, n)]
        missing = [n for n in names if not hasattr(ours, n)]
        assert not missing, f"{ours.__name__} lacks {missing}"
