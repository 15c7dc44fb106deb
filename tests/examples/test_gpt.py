"""examples/gpt.py, small: the GPT compiled whole by ``compile_train_step`` follows its PyTorch copy's
loss curve step for step (dropout 0: the same function on the same batches), trains with dropout
(new masks every step), and samples reproducible text with ``lz.multinomial``."""
from __future__ import annotations

import importlib.util
import pathlib

import numpy as np
import pytest

import lezero as lz

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "gpt.py"
SPEC = importlib.util.spec_from_file_location("gpt_example", EXAMPLE)
gpt = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(gpt)

TEXT = gpt.CORPUS.read_text()[:20000]
SMALL = dict(block_size=16, d_model=32, n_head=4, n_layer=1)
STEPS = 6

pytestmark = pytest.mark.slow  # one cold compile of a whole training step (~10 s on 2 cores)


def _model(data, dropout=0.0):
    lz.manual_seed(0)
    return gpt.build_gpt(lz)(data.vocab_size, dropout=dropout, **SMALL)


def test_the_compiled_gpt_follows_its_torch_copy():
    data = gpt.CharData(TEXT, SMALL["block_size"])
    batches = [data.batch(8) for _ in range(STEPS)]
    model = _model(data)
    peer = gpt.torch_copy(model, 0.0)
    losses, _ = gpt.train_lezero(model, batches, lr=3e-3)
    torch_losses, _ = gpt.train_torch(peer, batches, lr=3e-3)
    np.testing.assert_allclose(losses, torch_losses, rtol=1e-5, atol=1e-5)
    assert losses[-1] < losses[0] - 0.1
    # (The parameters are not compared elementwise: the key projection's bias has a zero gradient in
    # exact arithmetic, softmax being blind to a constant added to a row of scores, so AdamW turns
    # each framework's rounding noise there into steps of up to lr in different directions.)


def test_dropout_training_and_sampling():
    data = gpt.CharData(TEXT, SMALL["block_size"])
    batch = data.batch(8)
    model = _model(data, dropout=0.2)
    losses, _ = gpt.train_lezero(model, [batch] * 3, lr=3e-3)
    assert len(set(np.round(losses, 6))) == 3  # one batch, new masks (and weights) every step
    text = gpt.sample(model, data, "The", 20, seed=1)
    assert text.startswith("The") and len(text) == 23 and set(text) <= set(data.chars)
    assert gpt.sample(model, data, "The", 20, seed=1) == text  # lz.manual_seed makes sampling reproducible
