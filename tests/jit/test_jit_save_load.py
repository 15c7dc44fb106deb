"""lz.jit.save / lz.jit.load: IR text plus weights, no pickle, atomic; a loaded module runs as the
traced one did, at any batch size."""
from __future__ import annotations

import os

import numpy as np
import pytest

import lezero as lz
from lezero import nn
from lezero.eager.serialization import MAGIC, CheckpointError


def _model():
    lz.manual_seed(0)
    return nn.Sequential(nn.Linear(12, 16), nn.GELU(), nn.Linear(16, 4), nn.LogSoftmax(dim=1))


def test_round_trip_runs_identically(tmp_path):
    traced = lz.jit.trace(_model(), lz.randn(1, 12))
    path = tmp_path / "model.lzjit"
    lz.jit.save(traced, path)
    loaded = lz.jit.load(path)
    assert loaded.graph == traced.graph
    assert list(loaded.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    for batch in (1, 9):
        x = lz.randn(batch, 12)
        np.testing.assert_array_equal(loaded(x).numpy(), traced(x).numpy())


def test_the_file_is_data_only_and_written_atomically(tmp_path):
    traced = lz.jit.trace(_model(), lz.randn(2, 12))
    path = tmp_path / "m.lzjit"
    lz.jit.save(traced, str(path))
    lz.jit.save(traced, str(path))  # overwrite in place
    assert os.listdir(tmp_path) == ["m.lzjit"]  # no temporary file left behind
    data = path.read_bytes()
    assert data.startswith(MAGIC)
    assert b"\x80\x04" not in data[:16]  # not a pickle
    checkpoint = lz.load(path)  # an ordinary checkpoint: lz.load reads it too
    assert "func.func @forward" in checkpoint["graph"]  # the IR text (in lz.save's compressed header)
    assert checkpoint["format"] == "lezero.jit.TracedModule" and set(checkpoint["tensors"]) == {
        "0.weight", "0.bias", "2.weight", "2.bias"}


def test_loading_the_wrong_or_a_damaged_file_is_a_clear_error(tmp_path):
    state = tmp_path / "state.pt"
    lz.save(_model().state_dict(), state)
    with pytest.raises(CheckpointError, match="not a traced module"):
        lz.jit.load(state)
    path = tmp_path / "m.lzjit"
    lz.jit.save(lz.jit.trace(_model(), lz.randn(2, 12)), path)
    damaged = bytearray(path.read_bytes())
    damaged[-100] ^= 0xFF
    path.write_bytes(bytes(damaged))
    with pytest.raises(CheckpointError, match="checksum"):
        lz.jit.load(path)
    with pytest.raises(TypeError, match="TracedModule"):
        lz.jit.save(_model(), tmp_path / "x")


def test_a_file_name_of_another_format_is_an_error_not_lezeros_format(tmp_path):
    """issue 12: ``lz.jit.save(model, "m.onnx")`` must never write lezero's own format under that name."""
    traced = lz.jit.trace(_model(), lz.randn(1, 12))
    with pytest.raises(ValueError, match="lezero.onnx.export"):
        lz.jit.save(traced, tmp_path / "m.ONNX")
    assert not (tmp_path / "m.ONNX").exists()


def test_a_tflite_file_name_gets_a_tflite_flatbuffer(tmp_path):
    """issue 12: ``lz.jit.save(model, "quant_model.tflite")`` writes TFLite (tests/tflite check it runs)."""
    traced = lz.jit.trace(_model(), lz.randn(1, 12))
    lz.jit.save(traced, tmp_path / "quant_model.tflite")
    assert (tmp_path / "quant_model.tflite").read_bytes()[4:8] == b"TFL3"  # the schema's file identifier
