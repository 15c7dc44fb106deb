"""The Transformer layers and stacks against torch in float64 with copied state dicts: outputs,
input and parameter gradients for post-norm and pre-norm, relu and gelu, batch_first, causal and
padding masks; the causal mask; dropout in train and eval mode; a trace exported to ONNX."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

import lezero as lz

from support.eager_testing import assert_same
from support.layer_testing import assert_traces_and_exports, compare_modules, twins

RNG = np.random.default_rng(0)
SMALL = dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0)
# a few dozen float64 ops deep, through layer norms: summation order shows at 1e-11
TOL = dict(rtol=1e-9, atol=1e-10)


def randn(*shape):
    return RNG.standard_normal(shape)


def test_causal_mask():
    assert_same(lz.nn.Transformer.generate_square_subsequent_mask(4),
                torch.nn.Transformer.generate_square_subsequent_mask(4))
    assert lz.nn.Transformer.generate_square_subsequent_mask(3, dtype=lz.float64).dtype is lz.float64


@pytest.mark.parametrize("options", [
    dict(), dict(activation="gelu", norm_first=True), dict(batch_first=True, bias=False),
    # an eps float32 cannot hold: the epsilon attribute keeps every digit (an f64 attribute)
    dict(batch_first=True, norm_first=True, layer_norm_eps=1e-3),
])
def test_encoder_layer(options):
    torch_layer, lz_layer = twins(lambda nn: nn.TransformerEncoderLayer(**SMALL, **options))
    seq, batch = 5, 3
    shape = (batch, seq, 8) if options.get("batch_first") else (seq, batch, 8)
    compare_modules(torch_layer, lz_layer, randn(*shape), tol=TOL)
    causal = torch.nn.Transformer.generate_square_subsequent_mask(seq, dtype=torch.float64).numpy()
    padding = np.zeros((batch, seq), bool)
    padding[1, 3:] = True
    compare_modules(torch_layer, lz_layer, randn(*shape), causal, padding, tol=TOL)
    compare_modules(torch_layer, lz_layer, randn(seq, 8), tol=TOL)  # unbatched


@pytest.mark.parametrize("options", [dict(), dict(norm_first=True, activation="gelu", batch_first=True)])
def test_decoder_layer(options):
    torch_layer, lz_layer = twins(lambda nn: nn.TransformerDecoderLayer(**SMALL, **options))
    tgt, src, batch = 4, 6, 2
    shape = (lambda n: (batch, n, 8)) if options.get("batch_first") else (lambda n: (n, batch, 8))
    causal = torch.nn.Transformer.generate_square_subsequent_mask(tgt, dtype=torch.float64).numpy()
    memory_padding = np.zeros((batch, src), bool)
    memory_padding[0, 4:] = True
    compare_modules(torch_layer, lz_layer, randn(*shape(tgt)), randn(*shape(src)), causal, None, None,
                    memory_padding, tol=TOL)


def test_stacks_and_transformer():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch's note that the nested-tensor fast path is off
        torch_encoder, lz_encoder = twins(lambda nn: nn.TransformerEncoder(
            nn.TransformerEncoderLayer(**SMALL), 2, nn.LayerNorm(8)))
    assert list(lz_encoder.state_dict())[:2] == ["layers.0.self_attn.in_proj_weight", "layers.0.self_attn.in_proj_bias"]
    compare_modules(torch_encoder, lz_encoder, randn(5, 2, 8), tol=TOL)
    torch_decoder, lz_decoder = twins(lambda nn: nn.TransformerDecoder(nn.TransformerDecoderLayer(**SMALL), 1,
                                                                      nn.LayerNorm(8)))
    compare_modules(torch_decoder, lz_decoder, randn(3, 2, 8), randn(5, 2, 8), tol=TOL)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch_model, lz_model = twins(lambda nn: nn.Transformer(num_encoder_layers=1, num_decoder_layers=1,
                                                                batch_first=True, **SMALL))
    mask = torch.nn.Transformer.generate_square_subsequent_mask(3, dtype=torch.float64).numpy()
    compare_modules(torch_model, lz_model, randn(2, 5, 8), randn(2, 3, 8), tgt_mask=mask, tol=TOL)
    with pytest.raises(RuntimeError, match="the batch number of src and tgt must be equal"):
        lz_model(lz.randn(2, 5, 8), lz.randn(3, 3, 8))
    with pytest.raises(RuntimeError, match="activation should be relu/gelu, not tanh"):
        lz.nn.TransformerEncoderLayer(8, 2, activation="tanh")


def test_default_initialization():
    model = lz.nn.Transformer(d_model=16, nhead=2, num_encoder_layers=2, num_decoder_layers=1, dim_feedforward=32)
    first, second = (layer.linear1.weight.detach().numpy() for layer in model.encoder.layers)
    assert np.abs(first).max() <= np.sqrt(6 / (16 + 32))  # Xavier-uniform
    assert np.abs(first).max() > 0.5 * np.sqrt(6 / (16 + 32))
    assert not np.shares_memory(first, second) and not np.allclose(first, second)  # copies, then each drawn


def test_dropout_in_train_and_eval_mode():
    lz.manual_seed(0)
    layer = lz.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.5)
    x = lz.randn(4, 2, 8)
    lz.manual_seed(1)
    first = layer(x).detach().numpy()
    lz.manual_seed(1)
    np.testing.assert_array_equal(layer(x).detach().numpy(), first)  # the seed makes the masks
    assert not np.allclose(layer(x).detach().numpy(), first)
    layer.eval()
    deterministic = lz.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0)
    deterministic.load_state_dict(layer.state_dict())
    np.testing.assert_allclose(layer(x).detach().numpy(), deterministic(x).detach().numpy(), rtol=1e-6)


def test_trace_exports():
    lz.manual_seed(0)
    layer = lz.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, norm_first=True)
    x = np.random.default_rng(2).standard_normal((2, 5, 8)).astype(np.float32)
    assert_traces_and_exports(layer, x)  # the batch (dim 0) dynamic
