"""lz.nn modules: PyTorch's registration, names, shapes and layouts in state dicts, default
initializations; whole models (the seed program's SimpleMLP, a CNN with BatchNorm) give torch's
outputs, gradients and running statistics with copied weights; MultiheadAttention matches."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import lezero as lz

from support.eager_testing import F32, assert_same, assert_same_grads, copy_weights


def simple_mlp(lib):
    class SimpleMLP(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = lib.nn.Linear(784, 256)
            self.fc2 = lib.nn.Linear(256, 10)

        def forward(self, x):
            x = lib.nn.functional.relu(self.fc1(x))
            return self.fc2(x)
    return SimpleMLP()


def small_cnn(lib):
    nn = lib.nn
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, stride=2, bias=False), nn.BatchNorm2d(8), nn.GELU(), nn.AdaptiveAvgPool2d(1),
        nn.Flatten(), nn.Dropout(0.0), nn.Linear(8, 16), nn.LayerNorm(16), nn.Tanh(), nn.Linear(16, 5))


def test_state_dict_names_shapes_and_registration():
    ours, theirs = small_cnn(lz), small_cnn(torch)
    assert [(k, tuple(v.shape)) for k, v in ours.state_dict().items()] == \
        [(k, tuple(v.shape)) for k, v in theirs.state_dict().items()]
    assert [n for n, _ in ours.named_parameters()] == [n for n, _ in theirs.named_parameters()]
    assert [n for n, _ in ours.named_buffers()] == [n for n, _ in theirs.named_buffers()]
    assert ours.state_dict()["1.num_batches_tracked"].dtype is lz.int64
    assert len(list(ours.children())) == 14 and len(list(ours.modules())) == 15
    mlp = simple_mlp(lz)
    assert mlp.fc1.weight.shape == (256, 784) and isinstance(mlp.fc1.weight, lz.nn.Parameter)
    assert repr(mlp) == repr(simple_mlp(torch))
    with pytest.raises(TypeError, match="cannot assign"):
        mlp.fc1.weight = lz.ones(256, 784)
    mlp.extra = lz.nn.Parameter(lz.zeros(2))
    assert "extra" in dict(mlp.named_parameters())


def test_load_state_dict_checks_keys_and_shapes():
    model = lz.nn.Linear(3, 2)
    with pytest.raises(RuntimeError, match='Missing key.*"bias"'):
        model.load_state_dict({"weight": np.zeros((2, 3))})
    with pytest.raises(RuntimeError, match="size mismatch for weight"):
        model.load_state_dict({"weight": np.zeros((3, 2)), "bias": np.zeros(2)})
    result = model.load_state_dict({"weight": np.ones((2, 3)), "extra": np.ones(1)}, strict=False)
    assert result.missing_keys == ["bias"] and result.unexpected_keys == ["extra"]
    assert model.weight.tolist() == [[1.0] * 3] * 2


def test_default_initializations_follow_pytorch():
    lz.manual_seed(0)
    linear = lz.nn.Linear(400, 300)
    bound = 1 / math.sqrt(400)  # kaiming_uniform(a=sqrt(5)) and the bias share it
    for t in (linear.weight, linear.bias):
        values = t.detach().numpy()
        assert values.min() >= -bound and values.max() <= bound and values.std() > 0.9 * bound / math.sqrt(3)
    conv = lz.nn.Conv2d(4, 6, 3)
    assert np.abs(conv.weight.detach().numpy()).max() <= 1 / math.sqrt(36)
    t = lz.empty(300, 200)
    lz.nn.init.xavier_uniform_(t)
    a = math.sqrt(6 / 500)
    assert np.abs(t.numpy()).max() <= a and t.numpy().std() > 0.9 * a / math.sqrt(3)
    lz.nn.init.kaiming_normal_(t, nonlinearity="relu")
    assert abs(t.numpy().std() - math.sqrt(2 / 200)) < 0.01
    lz.nn.init.trunc_normal_(t, std=0.5, a=-1, b=1)
    assert np.abs(t.numpy()).max() <= 1
    lz.nn.init.zeros_(t)
    assert not t.numpy().any()
    assert lz.nn.init.calculate_gain("leaky_relu", 0.2) == math.sqrt(2 / 1.04)
    bn = lz.nn.BatchNorm2d(3)
    assert bn.weight.tolist() == [1.0] * 3 and bn.running_var.tolist() == [1.0] * 3
    emb = lz.nn.Embedding(10, 4, padding_idx=2)
    assert not emb.weight.detach().numpy()[2].any()


def test_simple_mlp_gradients_equal_torch():
    """The seed program's model with copied weights: same loss and parameter gradients."""
    ours, theirs = simple_mlp(lz).double(), simple_mlp(torch).double()
    copy_weights(theirs, ours)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((16, 784)), rng.integers(0, 10, 16)
    loss = lz.nn.CrossEntropyLoss()(ours(lz.tensor(x)), lz.tensor(y))
    want = torch.nn.CrossEntropyLoss()(theirs(torch.tensor(x)), torch.tensor(y))
    loss.backward()
    want.backward()
    assert_same(loss, want)
    assert_same_grads(theirs, ours)


def test_cnn_with_batch_norm_matches_torch_in_training_and_evaluation():
    torch.manual_seed(0)
    ours, theirs = small_cnn(lz).double(), small_cnn(torch).double()
    copy_weights(theirs, ours)
    rng = np.random.default_rng(1)
    for step in range(2):
        x, y = rng.standard_normal((4, 3, 10, 10)), rng.integers(0, 5, 4)
        ours.zero_grad()
        theirs.zero_grad()
        loss = lz.nn.functional.cross_entropy(ours(lz.tensor(x)), lz.tensor(y))
        want = torch.nn.functional.cross_entropy(theirs(torch.tensor(x)), torch.tensor(y))
        loss.backward()
        want.backward()
        assert_same(loss, want)
        assert_same_grads(theirs, ours)
    for (name, b), (_, tb) in zip(ours.named_buffers(), theirs.named_buffers()):
        assert_same(b, tb, what=name)
    ours.eval()
    theirs.eval()
    x = rng.standard_normal((2, 3, 10, 10))
    assert_same(ours(lz.tensor(x)), theirs(torch.tensor(x)))
    assert not ours.training and not ours[1].training


def test_float32_mlp_matches_torch():
    ours, theirs = simple_mlp(lz), simple_mlp(torch)
    copy_weights(theirs, ours)
    x = np.random.default_rng(2).standard_normal((8, 784)).astype(np.float32)
    out = ours(lz.tensor(x))
    assert out.dtype is lz.float32
    assert_same(out, theirs(torch.tensor(x)), F32)


@pytest.mark.parametrize("batch_first", [False, True])
def test_multihead_attention_matches_torch(batch_first):
    torch.manual_seed(0)
    ours = lz.nn.MultiheadAttention(8, 2, batch_first=batch_first).double()
    theirs = torch.nn.MultiheadAttention(8, 2, batch_first=batch_first).double()
    copy_weights(theirs, ours)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    rng = np.random.default_rng(3)
    shape = (2, 5, 8) if batch_first else (5, 2, 8)
    q, kv = rng.standard_normal(shape), rng.standard_normal((2, 4, 8) if batch_first else (4, 2, 8))
    padding = np.array([[False, False, False, True], [False, True, False, False]])
    results = {}
    for lib, module in ((lz, ours), (torch, theirs)):
        query = lib.tensor(q, requires_grad=True)
        key = lib.tensor(kv, requires_grad=True)
        out, weights = module(query, key, key, key_padding_mask=lib.tensor(padding))
        self_out, _ = module(query, query, query, need_weights=False,
                             attn_mask=lib.tensor(np.triu(np.ones((5, 5), bool), 1)))
        (out.sum() + (weights * weights).sum() + (self_out * self_out).sum()).backward()
        results[lib] = (out, weights, self_out, query.grad, key.grad)
    for got, want in zip(results[lz], results[torch]):
        assert_same(got, want)
    assert_same_grads(theirs, ours)


def test_module_api():
    model = lz.nn.Sequential(lz.nn.Linear(2, 3), lz.nn.ReLU())
    assert isinstance(model[0], lz.nn.Linear) and len(model) == 2
    layers = lz.nn.ModuleList([lz.nn.Linear(2, 2) for _ in range(3)])
    assert [n for n, _ in layers.named_parameters()][:2] == ["0.weight", "0.bias"]
    heads = lz.nn.ModuleDict({"a": lz.nn.Linear(1, 1)})
    assert list(heads.state_dict()) == ["a.weight", "a.bias"]
    model.double()
    assert model[0].weight.dtype is lz.float64 and model.to("cpu") is model
    model(lz.ones(1, 2, dtype=lz.float64)).sum().backward()
    assert model[0].weight.grad is not None
    model.zero_grad()
    assert model[0].weight.grad is None
    calls = []
    handle = model.register_forward_hook(lambda m, args, out: calls.append(out.shape))
    model(lz.ones(4, 2, dtype=lz.float64))
    handle.remove()
    model(lz.ones(4, 2, dtype=lz.float64))
    assert calls == [(4, 3)]
    model.requires_grad_(False)
    assert not any(p.requires_grad for p in model.parameters())


def test_replacing_a_child_or_parameter_keeps_its_place_as_in_torch():
    """``seq[0] = ...``-style replacement by attribute (what quantize_dynamic does) must not move the
    child to the end: Sequential runs its children in registration order."""
    model = lz.nn.Sequential(lz.nn.Linear(3, 4), lz.nn.ReLU(), lz.nn.Linear(4, 2))
    reference = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    setattr(model, "0", lz.nn.Linear(3, 4))
    setattr(reference, "0", torch.nn.Linear(3, 4))
    assert [name for name, _ in model.named_children()] == [name for name, _ in reference.named_children()]
    linear = lz.nn.Linear(2, 2)
    linear.weight = lz.nn.Parameter(lz.zeros(2, 2))
    assert [name for name, _ in linear.named_parameters()] == ["weight", "bias"]
