"""lz.nn.RNN/LSTM/GRU and the cells against torch.nn with copied weights (float64): outputs, final
states and the gradients of the input, the initial states and every weight, over the product of
the layers' arguments (small sizes); unbatched inputs; packed sequences (sorted and not) and the
lz.nn.utils.rnn helpers; dropout between layers; float32 within a tolerance; the errors PyTorch
raises."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

import lezero as lz
from lezero.nn.utils import rnn as lz_rnn

from support.eager_testing import F32, F64, assert_same, assert_same_grads, flat
from support.layer_testing import twins

RNG = np.random.default_rng(0)
INPUT, HIDDEN, STEPS, BATCH = 3, 4, 4, 2


def randn(*shape):
    return RNG.standard_normal(shape)


def _layer(nn, kind, **options):
    if kind in ("tanh", "relu"):
        return nn.RNN(INPUT, HIDDEN, nonlinearity=kind, **options)
    return getattr(nn, kind)(INPUT, HIDDEN, **options)


def _states(kind, layers, batch, proj=0):
    """Random initial states: ``h0`` (LSTM: ``(h0, c0)``), ``layers x batch x H`` (no batch dim
    when ``batch`` is None)."""
    shape = lambda n: (layers, n) if batch is None else (layers, batch, n)  # noqa: E731
    if kind == "LSTM":
        return (randn(*shape(proj or HIDDEN)), randn(*shape(HIDDEN)))
    return randn(*shape(HIDDEN))


def _tensors(lib, tree, dtype):
    if tree is None:
        return None
    if isinstance(tree, tuple):
        return tuple(_tensors(lib, t, dtype) for t in tree)
    return lib.tensor(tree, dtype=dtype, requires_grad=True)


def compare(torch_module, lz_module, x, hx=None, tol=F64, dtype="float64"):
    """The same outputs and final states; for random cotangents the same gradients of ``x``,
    of the initial states and of every parameter."""
    lz_x, torch_x = _tensors(lz, x, getattr(lz, dtype)), _tensors(torch, x, getattr(torch, dtype))
    lz_h, torch_h = _tensors(lz, hx, getattr(lz, dtype)), _tensors(torch, hx, getattr(torch, dtype))
    lz_out = flat(lz_module(lz_x) if hx is None else lz_module(lz_x, lz_h))
    torch_out = flat(torch_module(torch_x) if hx is None else torch_module(torch_x, torch_h))
    assert len(lz_out) == len(torch_out)
    for i, (l, t) in enumerate(zip(lz_out, torch_out)):
        assert_same(l, t, tol, f"output {i}")
    cotangents = [RNG.standard_normal(t.shape) for t in torch_out]
    lz.autograd.backward(lz_out, [lz.tensor(c, dtype=getattr(lz, dtype)) for c in cotangents])
    torch.autograd.backward(torch_out, [torch.tensor(c, dtype=getattr(torch, dtype)) for c in cotangents])
    for i, (l, t) in enumerate(zip(flat(lz_x), flat(torch_x)) if hx is None else
                               zip(flat((lz_x, lz_h)), flat((torch_x, torch_h)))):
        assert_same(l.grad, t.grad, tol, f"gradient of input {i}")
    assert_same_grads(torch_module, lz_module, tol)


LAYER_CASES = [dict(kind=kind, num_layers=layers, bias=bias, batch_first=batch_first, bidirectional=bidirectional)
               for kind, layers, bias, batch_first, bidirectional
               in itertools.product(("tanh", "relu", "LSTM", "GRU"), (1, 2), (True, False), (False, True),
                                    (False, True))]
LAYER_CASES += [dict(kind="LSTM", num_layers=layers, bias=bias, batch_first=False, bidirectional=bidirectional,
                     proj_size=2) for layers, bias, bidirectional in itertools.product((1, 2), (True, False),
                                                                                      (False, True))]


@pytest.mark.parametrize("case", LAYER_CASES, ids=lambda c: "-".join(f"{k}={v}" for k, v in c.items()))
def test_layer_against_torch(case):
    options = dict(case)
    kind = options.pop("kind")
    torch_layer, lz_layer = twins(_layer, kind, **options)
    directions = 2 if options["bidirectional"] else 1
    shape = (BATCH, STEPS, INPUT) if options["batch_first"] else (STEPS, BATCH, INPUT)
    hx = _states(kind, options["num_layers"] * directions, BATCH, options.get("proj_size", 0))
    compare(torch_layer, lz_layer, randn(*shape), hx)


@pytest.mark.parametrize("kind", ["tanh", "LSTM", "GRU"])
def test_unbatched_and_default_states(kind):
    torch_layer, lz_layer = twins(_layer, kind, num_layers=2, bidirectional=True)
    compare(torch_layer, lz_layer, randn(STEPS, INPUT))  # zeros for h0 (and c0)
    compare(torch_layer, lz_layer, randn(STEPS, INPUT), _states(kind, 4, None))
    compare(torch_layer, lz_layer, randn(STEPS, BATCH, INPUT))


def test_one_step_and_long_sequences():
    torch_layer, lz_layer = twins(_layer, "LSTM", num_layers=2)
    compare(torch_layer, lz_layer, randn(1, BATCH, INPUT))
    compare(torch_layer, lz_layer, randn(16, 1, INPUT))


@pytest.mark.parametrize("kind", ["tanh", "relu", "LSTM", "GRU"])
@pytest.mark.parametrize("bias", [True, False])
def test_cells_against_torch(kind, bias):
    name = {"tanh": "RNNCell", "relu": "RNNCell", "LSTM": "LSTMCell", "GRU": "GRUCell"}[kind]
    extra = dict(nonlinearity=kind) if name == "RNNCell" else {}
    torch_cell, lz_cell = twins(lambda nn: getattr(nn, name)(INPUT, HIDDEN, bias=bias, **extra))
    compare(torch_cell, lz_cell, randn(BATCH, INPUT))
    hx = (randn(BATCH, HIDDEN), randn(BATCH, HIDDEN)) if kind == "LSTM" else randn(BATCH, HIDDEN)
    compare(torch_cell, lz_cell, randn(BATCH, INPUT), hx)
    unbatched = (randn(HIDDEN), randn(HIDDEN)) if kind == "LSTM" else randn(HIDDEN)
    compare(torch_cell, lz_cell, randn(INPUT), unbatched)


def test_float32_within_a_tolerance():
    torch_layer, lz_layer = twins(_layer, "LSTM", num_layers=2, bidirectional=True, proj_size=2)
    torch_layer, lz_layer = torch_layer.float(), lz_layer.to(lz.float32)
    compare(torch_layer, lz_layer, randn(STEPS, BATCH, INPUT), _states("LSTM", 4, BATCH, 2), tol=F32,
            dtype="float32")
    assert lz_layer(lz.randn(STEPS, BATCH, INPUT))[0].dtype is lz.float32


def test_state_dict_names_shapes_and_initialization():
    torch_layer = torch.nn.LSTM(INPUT, 8, num_layers=2, bidirectional=True, proj_size=3)
    lz_layer = lz.nn.LSTM(INPUT, 8, num_layers=2, bidirectional=True, proj_size=3)
    assert [(k, tuple(v.shape)) for k, v in lz_layer.state_dict().items()] == \
           [(k, tuple(v.shape)) for k, v in torch_layer.state_dict().items()]
    bound = 1 / np.sqrt(8)
    for p in lz_layer.parameters():
        values = p.detach().numpy()
        assert np.all(np.abs(values) <= bound) and values.std() > bound / 4  # uniform on +-1/sqrt(hidden)
    assert len(lz_layer.all_weights) == 4 and len(lz_layer.all_weights[0]) == 5
    assert repr(lz_layer) == repr(torch_layer)


# --- dropout between layers ----------------------------------------------------------------------------

def test_dropout_between_layers_only_in_training():
    torch_layer, lz_layer = twins(_layer, "GRU", num_layers=2, dropout=1.0)
    x, hx = randn(STEPS, BATCH, INPUT), _states("GRU", 2, BATCH)
    compare(torch_layer, lz_layer, x, hx)  # p = 1: the second layer sees zeros in both
    lz_layer.eval(), torch_layer.eval()
    compare(torch_layer, lz_layer, x, hx)  # eval: no dropout
    half = lz.nn.GRU(INPUT, HIDDEN, num_layers=2, dropout=0.5)
    inputs = lz.tensor(x, dtype=lz.float32)
    with lz.no_grad():
        first, second = half(inputs)[0].numpy(), half(inputs)[0].numpy()
        assert not np.allclose(first, second)  # new masks every call
        half.eval()
        np.testing.assert_array_equal(half(inputs)[0].numpy(), half(inputs)[0].numpy())


# --- packed sequences ----------------------------------------------------------------------------------

LENGTHS = [5, 3, 3, 1]


def _packed(lib, padded, lengths, enforce_sorted, batch_first=False):
    x = lib.tensor(padded, requires_grad=True)
    utils = torch.nn.utils.rnn if lib is torch else lz_rnn
    return x, utils.pack_padded_sequence(x, lengths, batch_first=batch_first, enforce_sorted=enforce_sorted)


def _assert_same_packing(lz_packed, torch_packed, tol=F64):
    assert_same(lz_packed.data, torch_packed.data, tol, "data")
    np.testing.assert_array_equal(lz_packed.batch_sizes.numpy(), torch_packed.batch_sizes.numpy())
    for mine, theirs in zip(lz_packed[2:], torch_packed[2:]):
        assert (mine is None) == (theirs is None)
        if mine is not None:
            np.testing.assert_array_equal(mine.numpy(), theirs.numpy())


@pytest.mark.parametrize("enforce_sorted", [True, False])
@pytest.mark.parametrize("batch_first", [False, True])
def test_pack_and_pad_against_torch(enforce_sorted, batch_first):
    lengths = LENGTHS if enforce_sorted else [3, 5, 1, 3]
    padded = randn(len(lengths), 6, INPUT) if batch_first else randn(6, len(lengths), INPUT)
    (lz_x, lz_packed), (torch_x, torch_packed) = (_packed(lib, padded, lengths, enforce_sorted, batch_first)
                                                  for lib in (lz, torch))
    _assert_same_packing(lz_packed, torch_packed)
    for total_length in (None, 7):
        lz_padded, lz_lengths = lz_rnn.pad_packed_sequence(lz_packed, batch_first, -1.0, total_length)
        torch_padded, torch_lengths = torch.nn.utils.rnn.pad_packed_sequence(torch_packed, batch_first, -1.0,
                                                                             total_length)
        assert_same(lz_padded, torch_padded, F64, "padded")
        np.testing.assert_array_equal(lz_lengths.numpy(), torch_lengths.numpy())
    cotangent = randn(*torch_padded.shape)
    lz_padded.backward(lz.tensor(cotangent))
    torch_padded.backward(torch.tensor(cotangent))
    assert_same(lz_x.grad, torch_x.grad, F64, "gradient through pack and pad")
    for mine, theirs in zip(lz_rnn.unpack_sequence(lz_packed), torch.nn.utils.rnn.unpack_sequence(torch_packed)):
        assert_same(mine, theirs, F64, "unpacked")


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize("padding_side", ["right", "left"])
def test_pad_and_pack_sequence_against_torch(batch_first, padding_side):
    sequences = [randn(n, 2) for n in (2, 4, 1)]
    assert_same(lz_rnn.pad_sequence([lz.tensor(s) for s in sequences], batch_first, 0.5, padding_side),
                torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s in sequences], batch_first, 0.5,
                                                padding_side), F64, "pad_sequence")
    _assert_same_packing(lz_rnn.pack_sequence([lz.tensor(s) for s in sequences], enforce_sorted=False),
                         torch.nn.utils.rnn.pack_sequence([torch.tensor(s) for s in sequences], enforce_sorted=False))
    ordered = sorted(sequences, key=len, reverse=True)
    _assert_same_packing(lz_rnn.pack_sequence([lz.tensor(s) for s in ordered]),
                         torch.nn.utils.rnn.pack_sequence([torch.tensor(s) for s in ordered]))


def test_packing_errors():
    with pytest.raises(RuntimeError, match="sorted in decreasing order"):
        lz_rnn.pack_padded_sequence(lz.randn(5, 2, 3), [2, 5])
    with pytest.raises(RuntimeError, match="greater than 0"):
        lz_rnn.pack_padded_sequence(lz.randn(5, 2, 3), [5, 0])
    packed = lz_rnn.pack_padded_sequence(lz.randn(5, 2, 3), [5, 2])
    with pytest.raises(ValueError, match="total_length"):
        lz_rnn.pad_packed_sequence(packed, total_length=4)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "relu"])
@pytest.mark.parametrize("enforce_sorted", [True, False])
def test_layers_take_packed_sequences(kind, enforce_sorted):
    """Outputs (packed), final states (each sequence's own last step; the reverse direction starts
    at it) and gradients through a two-layer bidirectional layer."""
    lengths = LENGTHS if enforce_sorted else [3, 5, 1, 3]
    torch_layer, lz_layer = twins(_layer, kind, num_layers=2, bidirectional=True)
    padded = randn(max(lengths), len(lengths), INPUT)
    hx = _states(kind, 4, len(lengths))
    (lz_x, lz_packed), (torch_x, torch_packed) = (_packed(lib, padded, lengths, enforce_sorted) for lib in (lz, torch))
    lz_h, torch_h = _tensors(lz, hx, lz.float64), _tensors(torch, hx, torch.float64)
    (lz_out, lz_state), (torch_out, torch_state) = lz_layer(lz_packed, lz_h), torch_layer(torch_packed, torch_h)
    _assert_same_packing(lz_out, torch_out)
    for i, (l, t) in enumerate(zip(flat(lz_state), flat(torch_state))):
        assert_same(l, t, F64, f"final state {i}")
    cotangents = [randn(*t.shape) for t in [torch_out.data] + flat(torch_state)]
    lz.autograd.backward([lz_out.data] + flat(lz_state), [lz.tensor(c) for c in cotangents])
    torch.autograd.backward([torch_out.data] + flat(torch_state), [torch.tensor(c) for c in cotangents])
    assert_same(lz_x.grad, torch_x.grad, F64, "gradient of the padded input")
    for i, (l, t) in enumerate(zip(flat(lz_h), flat(torch_h))):
        assert_same(l.grad, t.grad, F64, f"gradient of initial state {i}")
    assert_same_grads(torch_layer, lz_layer)


# --- errors ---------------------------------------------------------------------------------------------

def test_errors_name_the_mistake():
    with pytest.raises(ValueError, match="proj_size argument is only supported for LSTM"):
        lz.nn.GRU(3, 4, proj_size=2)
    with pytest.raises(ValueError, match="proj_size has to be smaller"):
        lz.nn.LSTM(3, 4, proj_size=4)
    with pytest.raises(ValueError, match="Unknown nonlinearity"):
        lz.nn.RNN(3, 4, nonlinearity="gelu")
    with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater than 1"):
        lz.nn.LSTM(3, 4, dropout=0.5)
    layer = lz.nn.LSTM(3, 4)
    with pytest.raises(RuntimeError, match="input.size\\(-1\\) must be equal to input_size"):
        layer(lz.randn(5, 2, 7))
    with pytest.raises(RuntimeError, match="Expected hidden size"):
        layer(lz.randn(5, 2, 3), (lz.randn(1, 3, 4), lz.randn(1, 3, 4)))
    with pytest.raises(RuntimeError, match="input has inconsistent input_size"):
        lz.nn.GRUCell(3, 4)(lz.randn(2, 5))


# --- traced and compiled: the time loop stays one lz.for ------------------------------------------------

def _count(graph, name: str) -> int:
    return str(graph).count(f'"{name}"(')


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "tanh"])
def test_traced_layers_keep_one_loop_per_layer_and_direction(kind):
    layer = _layer(lz.nn, kind, num_layers=2, bidirectional=True, batch_first=True).eval()
    x = randn(BATCH, 6, INPUT).astype(np.float32)
    with lz.no_grad():
        eager = flat(layer(lz.tensor(x)))
    # static shapes: the zero initial states are constants of the example's batch size
    traced = lz.jit.trace(layer, example_inputs=(lz.tensor(x),), dynamic_batch=False)
    assert _count(traced.graph, "lz.for") == 4
    for got, want in zip(flat(traced(x)), eager):
        np.testing.assert_allclose(np.asarray(got), want.numpy(), rtol=1e-5, atol=1e-6)


def test_compiled_train_step_through_the_loops_equals_the_eager_step():
    torch_layer, lz_layer = twins(_layer, "LSTM", num_layers=2)
    x, target = randn(STEPS, BATCH, INPUT), randn(STEPS, BATCH, HIDDEN)
    optimizer = lz.optim.SGD(lz_layer.parameters(), lr=0.1)
    step = lz.jit.compile_train_step(lz_layer, lambda out, y: lz.nn.functional.mse_loss(out[0], y), optimizer,
                                     (lz.tensor(x),), lz.tensor(target), dynamic_batch=False)
    assert _count(step.graph, "lz.for") >= 4  # two layers forward, and their gradient loops
    torch_optimizer = torch.optim.SGD(torch_layer.parameters(), lr=0.1)
    for _ in range(2):
        loss = step(lz.tensor(x), lz.tensor(target))
        torch_optimizer.zero_grad()
        torch_loss = torch.nn.functional.mse_loss(torch_layer(torch.tensor(x))[0], torch.tensor(target))
        torch_loss.backward()
        torch_optimizer.step()
        np.testing.assert_allclose(float(np.asarray(loss)), torch_loss.item(), rtol=1e-10)
    for name, p in torch_layer.named_parameters():
        assert_same(dict(lz_layer.named_parameters())[name], p, F64, f"{name} after two steps")
