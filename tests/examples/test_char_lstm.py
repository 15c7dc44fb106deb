"""examples/char_lstm.py, small: the character-level LSTM's training loss falls on the shipped text
within a few dozen Adam steps, compiled and eager, and sampling carries the LSTM state one character at a time;
the loss curve reaches TensorBoard (examples/training_log.py) as the example writes it."""
from __future__ import annotations

import importlib.util
import math
import pathlib

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import lezero as lz
from lezero.utils.tensorboard import SummaryWriter

EXAMPLE = pathlib.Path(__file__).resolve().parents[2] / "examples" / "char_lstm.py"
SPEC = importlib.util.spec_from_file_location("char_lstm_example", EXAMPLE)
char_lstm = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(char_lstm)


@pytest.mark.parametrize("compiled", [True, False])
def test_the_loss_falls_and_the_model_samples(compiled, tmp_path):
    data = char_lstm.CharData(char_lstm.TEXT.read_text(), 12)
    lz.manual_seed(0)
    model = char_lstm.CharLSTM(data.vocab_size, embedding=16, hidden=48, layers=1)
    with SummaryWriter(str(tmp_path)) as writer:
        losses = char_lstm.train(model, data, steps=40, batch_size=8, lr=1e-2, report_every=0, compiled=compiled,
                                 writer=writer, progress=True)
    events = EventAccumulator(str(tmp_path), size_guidance={"scalars": 0})
    events.Reload()
    logged = events.Scalars("train/loss")
    assert [e.step for e in logged] == list(range(40))
    np.testing.assert_allclose([e.value for e in logged], losses, rtol=1e-6)
    np.testing.assert_allclose([e.value for e in events.Scalars("train/lr")], [1e-2] * 40, rtol=1e-6)
    assert abs(losses[0] - math.log(data.vocab_size)) < 0.3  # starts near uniform
    assert losses[-5:].mean() < losses[:5].mean() - 0.8, losses
    text = char_lstm.sample(model, data, "We hold", 20)
    assert text.startswith("We hold") and len(text) == len("We hold") + 20
    assert set(text) <= set(data.chars)
