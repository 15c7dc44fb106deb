"""lz.save / lz.load: round trips of state dicts and nested structures, no pickle, atomic writes,
clear errors for truncated or corrupt files."""
from __future__ import annotations

import os
import pickle

import numpy as np
import pytest

import lezero as lz
from lezero.eager.serialization import CheckpointError


def _nested():
    return {
        "model": {"fc.weight": lz.randn(3, 4), "fc.bias": lz.zeros(3, dtype=lz.float64),
                  "bn.num_batches_tracked": lz.tensor(7)},
        "optimizer": {"state": {0: {"step": lz.tensor(3.0), "exp_avg": lz.ones(2, dtype=lz.float16)}},
                      "param_groups": [{"lr": 1e-3, "betas": (0.9, 0.999), "params": [0, 1], "name": None}]},
        "epoch": 5, "best": float("inf"), "mask": lz.tensor([True, False]), "raw": np.arange(4, dtype=np.int32),
        "empty": lz.zeros(0, 3), "scalar": lz.tensor(1.5),
    }


def _equal(a, b) -> bool:
    if isinstance(a, lz.Tensor):
        return isinstance(b, lz.Tensor) and a.dtype is b.dtype and a.shape == b.shape and \
            np.array_equal(a.numpy(), b.numpy())
    if isinstance(a, np.ndarray):
        return isinstance(b, lz.Tensor) and np.array_equal(a, b.numpy()) and a.dtype == b.numpy().dtype
    if isinstance(a, dict):
        return type(b) is dict and list(a) == list(b) and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b and type(a) is type(b)


def test_round_trip(tmp_path):
    obj = _nested()
    path = tmp_path / "checkpoint.lz"
    lz.save(obj, path)
    loaded = lz.load(path)
    assert _equal(obj, loaded)
    loaded["model"]["fc.weight"].add_(1)  # loaded tensors are writable, and not views of the file
    assert not np.array_equal(loaded["model"]["fc.weight"].numpy(), obj["model"]["fc.weight"].numpy())
    assert list(tmp_path.iterdir()) == [path]  # no temporary file left behind


def test_model_state_dict_round_trip(tmp_path):
    model = lz.nn.Sequential(lz.nn.Linear(4, 3), lz.nn.BatchNorm1d(3))
    lz.save(model.state_dict(), tmp_path / "m.lz")
    other = lz.nn.Sequential(lz.nn.Linear(4, 3), lz.nn.BatchNorm1d(3))
    other.load_state_dict(lz.load(tmp_path / "m.lz"))
    for (k, v), (k2, v2) in zip(model.state_dict().items(), other.state_dict().items()):
        assert k == k2 and np.array_equal(v.numpy(), v2.numpy())


def test_no_pickle_and_no_code_runs_on_load(tmp_path):
    path = tmp_path / "x.lz"
    lz.save({"w": lz.ones(2)}, path)
    data = path.read_bytes()
    assert data.startswith(b"LZCKPT01") and b"pickle" not in data
    with pytest.raises(TypeError, match="cannot store"):
        lz.save({"f": lambda: 0}, path)
    assert lz.load(path)["w"].tolist() == [1.0, 1.0]  # the failed save left the old file whole
    pickled = tmp_path / "p.pt"
    pickled.write_bytes(pickle.dumps({"w": 1}))
    with pytest.raises(CheckpointError, match="magic"):
        lz.load(pickled)


def test_atomic_write_keeps_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.lz"
    lz.save({"v": lz.tensor([1.0])}, path)

    def broken_fsync(fd):
        raise OSError("disk full")
    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        lz.save({"v": lz.tensor([2.0])}, path)
    monkeypatch.undo()
    assert lz.load(path)["v"].tolist() == [1.0]
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.lz"]


@pytest.mark.parametrize("damage, message", [
    (lambda d: d[:len(d) // 2], "truncated"),
    (lambda d: d[:10], "truncated"),
    (lambda d: b"", "truncated"),
    (lambda d: d[:-1] + bytes([d[-1] ^ 0xFF]), "checksum"),
    (lambda d: d[:20] + b"}" + d[21:], "header is corrupt"),
    (lambda d: d + b"extra", "unexpected bytes"),
    (lambda d: b"LZCKPT99" + d[8:], "format version"),
])
def test_damaged_files_give_clear_errors(tmp_path, damage, message):
    path = tmp_path / "ckpt.lz"
    lz.save({"w": lz.randn(16, 16), "b": lz.randn(16)}, path)
    path.write_bytes(damage(path.read_bytes()))
    with pytest.raises(CheckpointError, match=message) as info:
        lz.load(path)
    assert str(path) in str(info.value)


def test_file_objects(tmp_path):
    import io
    buffer = io.BytesIO()
    lz.save({"a": lz.arange(3)}, buffer)
    buffer.seek(0)
    assert lz.load(buffer)["a"].tolist() == [0, 1, 2]
