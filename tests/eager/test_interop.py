"""Interop: torch tensors, numpy arrays, DLPack and ``__array__`` objects wherever lezero takes a
tensor (creation, operators, functions, modules, ``nn.functional``, jit, the compiled train step,
``lezero.compile``, data loaders), their memory shared where PyTorch shares it, the values and
gradients compared with torch in float64; and the errors for what lezero cannot take."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lezero as lz
from lezero import nn
from lezero.nn import functional as F

RNG = np.random.default_rng(0)


def _f64(*shape) -> np.ndarray:
    return RNG.standard_normal(shape)


class ArrayLike:
    """Speaks only ``__array__`` (as pandas and older array libraries do)."""

    def __init__(self, array):
        self.array = array

    def __array__(self, dtype=None, copy=None):
        return self.array if dtype is None else self.array.astype(dtype)


class DLPackOnly:
    """Speaks only DLPack, as a JAX or CuPy array does."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


# --- making tensors: what shares memory and what copies, as in torch ------------------------------------

def test_from_numpy_shares_memory_both_ways_as_torch():
    a, b = np.zeros(4, np.float32), np.zeros(4, np.float32)
    t, ref = lz.from_numpy(a), torch.from_numpy(b)
    a[0] = b[0] = 5                       # a write through numpy shows in the tensor
    t.add_(1), ref.add_(1)                # and an in-place op on the tensor shows in numpy
    t[2] = ref[2] = -3
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(t.numpy(), ref.numpy())
    assert t.numpy() is a or np.shares_memory(t.numpy(), a)
    with pytest.raises(TypeError, match=r"expected np.ndarray \(got list\)"):
        lz.from_numpy([1.0, 2.0])


def test_as_tensor_shares_when_dtype_and_device_allow_and_tensor_always_copies():
    for make in (lambda: np.arange(4.0), lambda: torch.arange(4.0, dtype=torch.float64)):
        source, peer = make(), make()
        shared, copied, cast = lz.as_tensor(source), lz.tensor(source), lz.as_tensor(source, dtype=lz.int64)
        ref_shared, ref_cast = torch.as_tensor(peer), torch.as_tensor(peer, dtype=torch.int64)
        ref_copied = torch.tensor(peer) if isinstance(peer, np.ndarray) else peer.clone()  # torch.tensor(t) warns
        source[1] = peer[1] = 40
        assert shared.tolist() == ref_shared.tolist() == [0, 40, 2, 3]
        assert copied.tolist() == ref_copied.tolist() == [0, 1, 2, 3]
        assert cast.tolist() == ref_cast.tolist() == [0, 1, 2, 3] and cast.dtype is lz.int64
        assert shared.dtype is copied.dtype is lz.float64  # the source's dtype, as torch keeps it
    assert lz.tensor(torch.tensor([1, 2], dtype=torch.int32)).dtype is lz.int32
    assert lz.as_tensor(np.float32(1.5)).dtype is lz.float32 and lz.as_tensor([1, 2]).dtype is lz.int64
    t = lz.ones(3)
    assert lz.as_tensor(t) is t and lz.tensor(t) is not t


def test_torch_dtypes_name_lezero_dtypes():
    assert lz.ones(2, dtype=torch.float64).dtype is lz.float64 and lz.ones(2).to(torch.int32).dtype is lz.int32
    assert lz.tensor(np.ones(2), dtype=torch.bool).dtype is lz.bool
    with pytest.raises(TypeError, match="torch dtype torch.complex64 has no lezero dtype"):
        lz.zeros(2, dtype=torch.complex64)
    other = torch.ones(1, dtype=torch.float64)
    assert lz.ones(2).type_as(other).dtype is lz.float64 and lz.ones(2).to(other).dtype is lz.float64


def test_torch_tensors_that_require_grad_or_are_strided_come_in_detached_or_contiguous():
    w = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    t = lz.as_tensor(w)
    assert not t.requires_grad and np.shares_memory(t.numpy(), w.detach().numpy())
    transposed = torch.arange(6.0).reshape(2, 3).t()
    np.testing.assert_array_equal(lz.as_tensor(transposed).numpy(), transposed.numpy())


def test_from_dlpack_shares_memory_with_torch_numpy_capsules_and_dlpack_objects():
    base = torch.zeros(3, dtype=torch.float64)
    sources = [base, torch.utils.dlpack.to_dlpack(base), DLPackOnly(base.numpy()), base.numpy()]
    tensors = [lz.from_dlpack(s) for s in sources]
    base[0] = 7
    for t in tensors:
        assert t.tolist() == [7, 0, 0] and t.dtype is lz.float64
    with pytest.raises(TypeError, match="lz.from_dlpack: expected an object with __dlpack__ or a DLPack capsule, got a list"):
        lz.from_dlpack([1, 2])


def test_dlpack_and_array_export_share_memory_with_torch_rules():
    t = lz.zeros(2, 3, dtype=lz.float64)
    assert t.__dlpack_device__() == (1, 0)
    via_torch, via_numpy, asarray = torch.from_dlpack(t), np.from_dlpack(t), np.asarray(t)
    via_torch[0, 0], via_numpy[0, 1], asarray[0, 2] = 1, 2, 3
    assert t.tolist()[0] == [1, 2, 3]
    assert np.asarray(t, dtype=np.float32).dtype == np.float32 and not np.shares_memory(np.array(t, copy=True), t)
    with pytest.raises(ValueError, match="needs a copy"):
        np.asarray(t, dtype=np.float32, copy=False)
    p, ref = lz.ones(2, requires_grad=True), torch.ones(2, requires_grad=True)
    for export in (np.asarray, lambda x: x.__dlpack__()):   # refused while it requires grad, as torch
        with pytest.raises(Exception) as ours:
            export(p)
        with pytest.raises(Exception) as theirs:
            export(ref)
        assert (type(ours.value), str(ours.value)) == (type(theirs.value), str(theirs.value))


def test_array_protocol_objects_are_tensors():
    a = _f64(2, 3)
    t = lz.as_tensor(ArrayLike(a))
    assert np.shares_memory(t.numpy(), a)
    np.testing.assert_array_equal((t + ArrayLike(a)).numpy(), 2 * a)


# --- ops, operators and functions ----------------------------------------------------------------------

def test_operators_take_torch_and_numpy_operands_on_either_side():
    a, b = _f64(3, 4), _f64(3, 4)
    x, tb = lz.tensor(a), torch.from_numpy(b)
    cases = {
        "x + tb": (x + tb, torch.from_numpy(a) + tb),
        "tb + x": (tb + x, tb + torch.from_numpy(a)),
        "x * b": (x * b, torch.from_numpy(a) * tb),
        "tb - x": (tb - x, tb - torch.from_numpy(a)),
        "x > tb": (x > tb, torch.from_numpy(a) > tb),
        "x @ tb.T": (x @ tb.T, torch.from_numpy(a) @ tb.T),
        "x / tb.int()": (x / tb.int(), torch.from_numpy(a) / tb.int()),
    }
    for what, (ours, theirs) in cases.items():
        assert isinstance(ours, lz.Tensor), what
        assert ours.dtype.name == str(theirs.dtype).removeprefix("torch."), what
        np.testing.assert_allclose(ours.numpy(), theirs.numpy(), rtol=1e-12, err_msg=what)


def test_eager_functions_take_foreign_arrays():
    a, b = _f64(2, 3), _f64(2, 3)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    np.testing.assert_allclose(lz.exp(ta).numpy(), torch.exp(ta).numpy())
    np.testing.assert_allclose(lz.cat([ta, lz.tensor(b)], 1).numpy(), torch.cat([ta, tb], 1).numpy())
    np.testing.assert_allclose(lz.where(ta > 0, ta, lz.tensor(b)).numpy(), torch.where(ta > 0, ta, tb).numpy())
    np.testing.assert_allclose(lz.maximum(a, tb).numpy(), torch.maximum(ta, tb).numpy())
    index = torch.tensor([[0, 2], [1, 1]])
    np.testing.assert_array_equal(lz.tensor(a).gather(1, index).numpy(), ta.gather(1, index).numpy())
    np.testing.assert_array_equal(lz.tensor(a).index_select(1, index[0]).numpy(), ta.index_select(1, index[0]).numpy())


def test_indexing_takes_torch_index_tensors_and_masks_as_torch():
    a = _f64(3, 4)
    x, ref = lz.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    keys = [torch.tensor([2, 0]), torch.tensor([True, False, True]), (slice(None), torch.tensor([3, 1]))]
    for key in keys:
        np.testing.assert_array_equal(x[key].detach().numpy(), ref[key].detach().numpy())
    x[keys[0]].sum().backward(), ref[keys[0]].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), ref.grad.numpy())
    y, ref = lz.tensor(a), torch.tensor(a)
    y[keys[1]] = ref[keys[1]] = torch.tensor(5.0, dtype=torch.float64)
    np.testing.assert_array_equal(y.numpy(), ref.numpy())


def test_functional_takes_torch_tensors_with_gradients_as_torch():
    x, w, bias, target = _f64(5, 4), _f64(3, 4), _f64(3), np.array([0, 2, 1, 1, 0])
    lw, lb = lz.tensor(w, requires_grad=True), lz.tensor(bias, requires_grad=True)
    tw, tb = torch.tensor(w, requires_grad=True), torch.tensor(bias, requires_grad=True)
    tx, tt = torch.from_numpy(x), torch.from_numpy(target)
    ours = F.cross_entropy(F.relu(F.linear(tx, lw, lb)), tt)   # torch input, torch target
    theirs = torch.nn.functional.cross_entropy(torch.relu(torch.nn.functional.linear(tx, tw, tb)), tt)
    assert isinstance(ours, lz.Tensor)
    ours.backward(), theirs.backward()
    np.testing.assert_allclose(ours.item(), theirs.item(), rtol=1e-12)
    np.testing.assert_allclose(lw.grad.numpy(), tw.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(lb.grad.numpy(), tb.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(F.gelu(x).numpy(), torch.nn.functional.gelu(tx).numpy(), rtol=1e-12)
    assert isinstance(F.relu(tx), lz.Tensor) and isinstance(F.softmax(x, dim=1), lz.Tensor)


def test_modules_take_torch_batches_with_gradients_as_torch():
    lz.manual_seed(0)
    ours = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)).double()
    theirs = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).double()
    theirs.load_state_dict({k: torch.from_numpy(v.numpy().copy()) for k, v in ours.state_dict().items()})
    x, y = torch.randn(6, 4, dtype=torch.float64), torch.tensor([0, 1, 2, 0, 1, 2])
    loss = nn.CrossEntropyLoss()(ours(x), y)                  # modules take torch input and target
    ref = torch.nn.CrossEntropyLoss()(theirs(x), y)
    loss.backward(), ref.backward()
    np.testing.assert_allclose(loss.item(), ref.item(), rtol=1e-12)
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters()):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-10, err_msg=name)
    np.testing.assert_allclose(ours(x.numpy()).detach().numpy(), theirs(x).detach().numpy(), rtol=1e-12)

    class Scaled(nn.Module):
        def forward(self, x, *, scale=None):
            assert isinstance(x, lz.Tensor) and isinstance(scale, lz.Tensor)  # keywords come in as tensors too
            return x * scale

    assert Scaled()(torch.ones(2), scale=np.full(2, 3.0)).tolist() == [3.0, 3.0]


# --- jit, the compiled step, lezero.compile, data loaders ---------------------------------------------------

def test_trace_takes_torch_example_inputs_and_the_traced_model_torch_batches():
    lz.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, 16), nn.ReLU(), nn.Linear(16, 10))
    traced = lz.jit.trace(model, example_inputs=torch.randn(1, 784))
    assert "tensor<?x784xf32>" in traced.graph
    x = torch.randn(5, 784)
    out = traced(x)
    assert isinstance(out, lz.Tensor)                        # torch in: tensors out
    np.testing.assert_allclose(out.numpy(), model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
    assert isinstance(traced(x.numpy()), np.ndarray)         # numpy in: numpy out, as before
    two = lz.jit.trace(lambda a, b: a * b, example_inputs=(torch.ones(2), np.ones(2, np.float32)))
    assert two(torch.full((2,), 3.0), lz.ones(2)).tolist() == [3.0, 3.0]


def test_compile_train_step_takes_torch_examples_and_batches():
    def make():
        lz.manual_seed(0)
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
        return model, lz.optim.SGD(model.parameters(), lr=0.1)

    batches = [(torch.randn(4, 8), torch.randint(0, 3, (4,))) for _ in range(3)]
    model, optimizer = make()
    step = lz.jit.compile_train_step(model, nn.CrossEntropyLoss(), optimizer, batches[0][0], batches[0][1])
    compiled = [step(x, y).item() for x, y in batches]
    model, optimizer = make()
    eager = []
    for x, y in batches:
        optimizer.zero_grad()
        loss = nn.CrossEntropyLoss()(model(lz.tensor(x.numpy())), lz.tensor(y.numpy()))
        loss.backward()
        optimizer.step()
        eager.append(loss.item())
    np.testing.assert_allclose(compiled, eager, rtol=1e-5)


def test_compiled_functions_take_torch_and_lezero_tensors():
    f = lz.compile('''module {
  func.func @f(%x: tensor<3xf32>, %y: tensor<3xf32>) -> tensor<3xf32> {
    %0 = "lz.add"(%x, %y) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    func.return %0 : tensor<3xf32>
  }
}''')
    np.testing.assert_array_equal(f(torch.ones(3), lz.full((3,), 2.0)), [3, 3, 3])


def test_data_loaders_take_torch_tensors_and_torch_loaders_feed_modules():
    x, y = torch.randn(10, 4), torch.randint(0, 3, (10,))
    dataset = lz.utils.data.TensorDataset(x, y)               # lezero's loader over torch tensors
    assert np.shares_memory(dataset.tensors[0].numpy(), x.numpy())
    batches = list(lz.utils.data.DataLoader(dataset, batch_size=4))
    assert [b[0].shape for b in batches] == [(4, 4), (4, 4), (2, 4)] and batches[0][1].dtype is lz.int64
    samples = [(x[i], y[i]) for i in range(3)]                 # a dataset yielding torch samples
    collated = lz.utils.data.default_collate(samples)
    np.testing.assert_array_equal(collated[0].numpy(), x[:3].numpy())
    model = nn.Linear(4, 3)
    for data, target in torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=5):
        loss = nn.CrossEntropyLoss()(model(data), target)     # torch's loader: torch batches
        loss.backward()
    assert model.weight.grad is not None and model.weight.grad.shape == (3, 4)


def test_on_cuda_host_arrays_join_the_tensor_on_its_device(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the cuda path on the CPU
    g = lz.ones(3).to("cuda")
    for other in (np.arange(3.0, dtype=np.float32), torch.arange(3.0)):
        out = g + other
        assert out.is_cuda and out.tolist() == [1.0, 2.0, 3.0]


# --- what lezero cannot take: the message says what it got and what to pass, at the user's line ------------

def test_inputs_lezero_cannot_take_are_clear_errors_at_the_users_line():
    x = lz.ones(2, 3)
    model = nn.Linear(3, 2)
    cases = [
        (lambda: x + torch.ones(3, dtype=torch.complex64), "torch tensor of dtype torch.complex64"),
        (lambda: model(np.ones((2, 3), np.complex64)), "numpy array of dtype complex64"),
        (lambda: lz.as_tensor(torch.ones(2, device="meta")), "torch tensor on meta"),
        (lambda: F.linear("x", model.weight), "got a str; pass an lz.Tensor, a torch tensor, a numpy array"),
        (lambda: lz.jit.trace(model, example_inputs={"x": x}), "jit.trace: example_inputs: expected a tensor, got a dict"),
        (lambda: lz.exp(object()), "lz.tensor: cannot make a tensor from an object"),
    ]
    for call, message in cases:
        with pytest.raises(lz.ForeignInputError, match=message.replace("(", r"\(").replace(")", r"\)")) as caught:
            call()
        assert isinstance(caught.value, TypeError)
        assert "test_interop.py" in str(caught.value), str(caught.value)  # the user's line, as eager errors
