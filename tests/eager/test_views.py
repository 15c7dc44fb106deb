"""Views against torch: every view op shares its base's memory (writes through either are seen by
both), reports torch's shape, strides, offset and contiguity, and autograd through views and
in-place ops gives torch's gradients and torch's errors; kernels read non-contiguous views in
place (no copy kernel).  Each case is one script run on both libraries in float64."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lezero as lz
from lezero.eager import dispatch

from support.eager_testing import assert_same

# name -> the view of a 3x4 tensor ``x`` (``fw`` is lz or torch)
VIEWS = {
    "x[1]": lambda fw, x: x[1],
    "x[:, 1:3]": lambda fw, x: x[:, 1:3],
    "x[::2, 1::2]": lambda fw, x: x[::2, 1::2],
    "x[1, ::2]": lambda fw, x: x[1, ::2],
    "x[None, 2, ..., 1:]": lambda fw, x: x[None, 2, ..., 1:],
    "x[..., 3]": lambda fw, x: x[..., 3],
    "x[1, 2]": lambda fw, x: x[1, 2],
    "t": lambda fw, x: x.t(),
    "T": lambda fw, x: x.T,
    "mT": lambda fw, x: x.mT,
    "transpose": lambda fw, x: x.transpose(0, 1),
    "permute": lambda fw, x: x.permute(1, 0),
    "swapaxes": lambda fw, x: x.swapaxes(0, 1),
    "swapdims": lambda fw, x: x.swapdims(1, 0),
    "movedim": lambda fw, x: x.unsqueeze(0).movedim(0, 2),
    "narrow": lambda fw, x: x.narrow(1, 1, 2),
    "select": lambda fw, x: x.select(1, -1),
    "chunk": lambda fw, x: x.chunk(2, 1)[1],
    "split": lambda fw, x: x.split(2, 0)[1],
    "split sizes": lambda fw, x: x.split([1, 3], 1)[1],
    "unbind": lambda fw, x: x.unbind(1)[2],
    "split_with_sizes": lambda fw, x: x.split_with_sizes([1, 2], 0)[1],
    "tensor_split": lambda fw, x: x.tensor_split(3, 1)[0],
    "tensor_split indices": lambda fw, x: x.tensor_split([1, 3], 1)[1],
    "hsplit": lambda fw, x: x.hsplit(2)[1],
    "vsplit": lambda fw, x: x.vsplit([1])[1],
    "H": lambda fw, x: x.H,
    "mH": lambda fw, x: x.mH,
    "adjoint": lambda fw, x: x.adjoint(),
    "view": lambda fw, x: x.view(2, 6),
    "view -1": lambda fw, x: x.view(-1),
    "reshape": lambda fw, x: x.reshape(4, 3),
    "flatten": lambda fw, x: x.flatten(),
    "ravel": lambda fw, x: x.ravel(),
    "unflatten": lambda fw, x: x.unflatten(1, (2, 2)),
    "unsqueeze": lambda fw, x: x.unsqueeze(1),
    "squeeze": lambda fw, x: x[:, :1].squeeze(1),
    "view of a transpose": lambda fw, x: x.t().unsqueeze(0).view(4, 3),
    "reshape of a slice": lambda fw, x: x[:, 1:3].reshape(3, 2, 1),
    "expand": lambda fw, x: x[:1].expand(3, 4),
    "expand_as": lambda fw, x: x[:, :1].expand_as(x),
    "diagonal": lambda fw, x: x.diagonal(),
    "diagonal +1": lambda fw, x: x.diagonal(1),
    "diagonal -1 of a transpose": lambda fw, x: x.t().diagonal(-1),
    "as_strided": lambda fw, x: x.as_strided((2, 2), (1, 4), 1),
    "unfold": lambda fw, x: x.unfold(1, 2, 1),
    "unfold of a slice": lambda fw, x: x[:, 1:].unfold(0, 2, 1),
    "detach": lambda fw, x: x.detach(),
}
# expanded elements share memory, and overlapping windows: a write through them is not elementwise
WRITABLE = [name for name in VIEWS if not name.startswith(("expand", "unfold"))]


def base(fw, permuted: bool = False):
    """A 3x4 float64 tensor; ``permuted``: one whose memory holds it column by column (an
    elementwise op on a transpose returns that layout, in both libraries)."""
    if permuted:
        return fw.arange(12, dtype=fw.float64).reshape(4, 3).t() * 1
    return fw.arange(12, dtype=fw.float64).reshape(3, 4)


def layout(t) -> tuple:
    """Shape, strides (those of size-1 dims address nothing: numpy and torch pick them differently),
    offset and contiguity."""
    strides = tuple(s if d != 1 else None for s, d in zip(t.stride(), t.shape))
    return tuple(t.shape), strides, t.storage_offset(), t.is_contiguous()


def same_error(script, fragment: str):
    """``script(lz)`` and ``script(torch)`` both raise a RuntimeError holding ``fragment``."""
    for fw in (torch, lz):
        with pytest.raises(RuntimeError) as info:
            script(fw)
        assert fragment in str(info.value), f"{fw.__name__}: {info.value}"


@pytest.mark.parametrize("permuted", [False, True], ids=["row-major", "permuted"])
@pytest.mark.parametrize("name", VIEWS)
def test_a_view_shares_memory_and_layout_with_its_base(name, permuted):
    try:
        VIEWS[name](torch, base(torch, permuted))
    except RuntimeError as e:  # ``view`` of a layout that cannot take the shape: the same refusal
        same_error(lambda fw: VIEWS[name](fw, base(fw, permuted)), str(e).split(" (")[0])
        return
    results = {}
    for fw in (lz, torch):
        x = base(fw, permuted)
        assert x.is_contiguous() != permuted
        v = VIEWS[name](fw, x)
        shares = v.untyped_storage().data_ptr() == x.untyped_storage().data_ptr() if fw is torch else \
            np.shares_memory(v.numpy(), x.numpy())  # a reshape copies where the strides cannot take it
        seen = [layout(v), shares and (v.data_ptr() - x.data_ptr()) // 8, v.clone()]
        x.add_(100)  # a write to the base shows in the view
        seen.append(v.clone())
        if name in WRITABLE:
            v.mul_(-1)  # a write through the view shows in the base
            seen += [x.clone(), v.clone()]
        seen.append(v._version)
        results[fw] = seen
    for got, want in zip(results[lz], results[torch]):
        if isinstance(want, torch.Tensor):
            assert_same(got, want, what=name)
        else:
            assert got == want, name


@pytest.mark.parametrize("name", [n for n in VIEWS if n != "detach"])
def test_gradients_flow_through_a_view(name):
    rng = np.random.default_rng(0)
    w0 = rng.standard_normal((3, 4))
    grads = {}
    for fw in (lz, torch):
        w = fw.tensor(w0, requires_grad=True)
        v = VIEWS[name](fw, w)
        c = fw.tensor(np.random.default_rng(1).standard_normal(tuple(v.shape)))
        ((v * c).sum() + (v.exp() * v).sum()).backward()
        grads[fw] = w.grad
    assert_same(grads[lz], grads[torch], what=name)


# PyTorch refuses a recorded in-place op on one of several views a function returned
SEVERAL = {"chunk": "Output 1 of Split is a view", "split": "Output 1 of Split is a view",
           "split sizes": "Output 1 of SplitWithSizes is a view", "unbind": "Output 2 of Unbind is a view",
           "split_with_sizes": "Output 1 of SplitWithSizes is a view"}


@pytest.mark.parametrize("permuted", [False, True], ids=["row-major", "permuted"])
@pytest.mark.parametrize("name", [n for n in WRITABLE if n not in SEVERAL and n != "detach"])
def test_an_inplace_op_on_a_view_of_a_non_leaf_reaches_the_base(name, permuted):
    """``y = w * 2; v = view(y); v.mul_(c).add_(1)``: ``y`` now holds the written elements, and
    gradients through ``y`` (and the view, and a sibling view) reach ``w`` as torch's CopySlices."""
    if name.startswith("view") and permuted:
        pytest.skip("torch refuses the view of this layout (test_a_view_shares_memory_and_layout_with_its_base)")
    rng = np.random.default_rng(2)
    w0 = rng.standard_normal((3, 4))
    out = {}
    for fw in (lz, torch):
        w = fw.tensor(w0.T.copy() if permuted else w0, requires_grad=True)
        y = w.t() * 2 if permuted else w * 2
        assert y.is_contiguous() != permuted
        sibling = y[:, 1]  # made before the write: it reads the new base after it
        v = VIEWS[name](fw, y)
        c = fw.tensor(np.random.default_rng(3).standard_normal(tuple(v.shape)))
        v.mul_(c).add_(1)
        loss = (y * y).sum() + (v * 3).sum() + (sibling.exp()).sum()
        loss.backward()
        out[fw] = (y.detach(), sibling.detach(), loss.detach(), w.grad)
    for got, want in zip(out[lz], out[torch]):
        assert_same(got, want, what=name)


def test_setitem_writes_through_and_is_differentiable():
    out = {}
    for fw in (lz, torch):
        x = fw.zeros(3, 4, dtype=fw.float64)
        x[:, :3] += 1
        x[0] = 5
        x[1, ::2] = fw.tensor([7.0, 8.0], dtype=fw.float64)
        w = fw.tensor(np.arange(4.0), requires_grad=True)
        v = fw.tensor([2.0, 3.0], dtype=fw.float64, requires_grad=True)
        y = w * 1
        y[1:3] = v * v  # a plain tensor takes a value that requires grad, through a view
        z = fw.zeros(2, 4, dtype=fw.float64)
        z[1] = w
        ((y * y).sum() + (z * 3).sum()).backward()
        out[fw] = (x, y.detach(), z.detach(), w.grad, v.grad)
    for got, want in zip(out[lz], out[torch]):
        assert_same(got, want)


def test_the_version_counter_is_shared_by_a_base_and_its_views():
    for fw in (lz, torch):
        x = fw.zeros(3, 4)
        v, d = x[0], x.detach()
        x.add_(1)
        v.mul_(2)
        d[1, 1] = 0
        assert x._version == v._version == d._version == 3, fw.__name__
        assert v._base is x and x._base is None, fw.__name__


def test_contiguous_and_clone_copy_a_view():
    for fw in (lz, torch):
        x = base(fw)
        v = x.t()
        c = v.contiguous()
        assert not v.is_contiguous() and c.is_contiguous() and x.contiguous() is x
        assert c.stride() == (3, 1) and c.data_ptr() != x.data_ptr()
        c.zero_()
        v.clone().zero_()
        assert x.sum().item() == 66.0, fw.__name__


def test_errors_where_torch_raises():
    def leaf(fw):
        fw.ones(3, requires_grad=True).add_(1)

    def view_of_leaf(fw):
        fw.ones(3, 4, requires_grad=True)[0].mul_(2)

    def setitem_on_leaf(fw):
        fw.ones(3, requires_grad=True)[0] = 2

    def saved_input_modified(fw):
        a = fw.ones(3, requires_grad=True) * 1
        b = a * a
        a.add_(1)
        b.sum().backward()

    def saved_result_modified_through_detach(fw):
        e = (fw.ones(3, requires_grad=True) * 1).exp()
        e.detach().zero_()
        e.sum().backward()

    def modified_under_no_grad(fw):
        w = fw.ones(3, requires_grad=True)
        y = w * w
        with fw.no_grad():
            w.mul_(2)
        y.sum().backward()

    def sibling_view_read_then_written(fw):  # the sibling's version moves with its base's
        y = fw.ones(3, 4, requires_grad=True) * 2
        y[:, ::2].mul_(y[:, 1::2])
        (y * y).sum().backward()

    def write_to_expanded(fw):
        fw.zeros(1, 4).expand(3, 4).add_(1)

    def view_of_a_transpose(fw):
        fw.zeros(3, 4).t().view(12)

    same_error(leaf, "a leaf Variable that requires grad is being used in an in-place operation.")
    same_error(view_of_leaf, "a view of a leaf Variable that requires grad is being used in an in-place operation.")
    same_error(setitem_on_leaf, "a view of a leaf Variable that requires grad is being used in an in-place operation.")
    modified = "one of the variables needed for gradient computation has been modified by an inplace operation"
    same_error(saved_input_modified, modified)
    same_error(saved_result_modified_through_detach, modified)
    same_error(modified_under_no_grad, modified)
    same_error(sibling_view_read_then_written, modified)
    same_error(write_to_expanded, "more than one element of the written-to tensor refers to a single memory location")
    same_error(view_of_a_transpose, "view size is not compatible with input tensor's size and stride")
    same_error(lambda fw: fw.zeros(3, 4).hsplit(3), "is not divisible by the split_size 3")
    same_error(lambda fw: fw.zeros(3, 4)[0].detach_(), "Can't detach views in-place. Use detach() instead.")
    for name, fragment in SEVERAL.items():
        same_error(lambda fw: VIEWS[name](fw, fw.ones(3, 4, requires_grad=True) * 1).mul_(2), fragment)
        for fw in (lz, torch):  # allowed without grad
            VIEWS[name](fw, fw.ones(3, 4)).mul_(2)




@pytest.mark.parametrize("expr", ["x[:, ::2] * 2 + 1", "x.t().exp()", "x.narrow(1, 1, 2) - x[:, :2]",
                                  "x.t() @ x", "x.diagonal().sum()", "x.unfold(1, 2, 1).relu()",
                                  "x[:1].expand(3, 4) * x"])
def test_kernels_read_views_in_place(expr):
    """An op on a non-contiguous view is one kernel reading the view's memory through its strides
    (no copy kernel before it), with torch's values."""
    dispatch.clear_cache()
    values = {}
    for fw in (lz, torch):
        x = base(fw) / 7
        values[fw] = eval(expr, {"x": x})
    assert_same(values[lz], values[torch], what=expr)
    assert values[lz].stride() == values[torch].stride() or values[lz].ndim == 0, expr  # torch's result layout
    assert any(k[1] == "strided" for k in dispatch.RUNNERS), f"{expr}: no op read a view"
    kernels = [run.kernel_count for run in dispatch.RUNNERS.values() if hasattr(run, "kernel_count")]
    assert kernels and set(kernels) == {1}, f"{expr}: kernels per op {kernels}"


@pytest.mark.filterwarnings("ignore::RuntimeWarning:triton.runtime.interpreter")
def test_views_of_cuda_tensors_are_torch_views(monkeypatch):
    """On cuda (here Triton's interpreter: a cuda tensor holds a torch CPU tensor) a view is a
    torch view of the storage: writes go both ways and autograd reaches the base, as on the CPU."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    rng = np.random.default_rng(4)
    w0 = rng.standard_normal((3, 4))
    out = {}
    for fw, device in ((lz, "cuda"), (torch, "cpu")):
        x = base(fw).to(device)
        v = x.t()
        assert fw is torch or isinstance(v._data, torch.Tensor) and v._base is x and v.stride() == (1, 4)
        v[1:, 0].mul_(-1)
        d = x.diagonal(1)
        d.add_(100)
        w = fw.tensor(w0).to(device).requires_grad_()
        y = w * 2
        y[:, ::2].mul_(y[:, 1::2].clone())
        (y * y).sum().backward()
        out[fw] = (x.cpu(), (v * 2).cpu(), d.cpu(), w.grad.cpu())
    for got, want in zip(out[lz], out[torch]):
        assert_same(got, want)


def test_a_traced_function_writes_through_views_as_eager_does():
    def f(x):
        y = x * 1
        y[:, :2] += 1
        y[0].mul_(3)
        y.diagonal().zero_()
        return y * 2

    x = lz.tensor(np.arange(12.0).reshape(3, 4))
    traced = lz.jit.trace(f, example_inputs=x, dynamic_batch=False)
    assert_same(traced(x), f(torch.arange(12.0, dtype=torch.float64).reshape(3, 4)))
    assert_same(f(x), f(torch.arange(12.0, dtype=torch.float64).reshape(3, 4)))
    with pytest.raises(lz.jit.TraceError, match="dynamic_batch=False"):  # the write's positions fix the shape
        lz.jit.trace(f, example_inputs=x)
