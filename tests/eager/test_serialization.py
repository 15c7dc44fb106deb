"""lz.save / lz.load: round trips of state dicts and nested structures, no pickle, atomic writes,
clear errors for truncated or corrupt files; the lean layout of format 02 (small tensors packed at
their item size, large ones 64-byte aligned, a compressed header) and files of format 01 still load."""
from __future__ import annotations

import io
import os
import pathlib
import pickle

import numpy as np
import pytest

import lezero as lz
from lezero.eager import serialization
from lezero.eager.serialization import CheckpointError

DATA = pathlib.Path(__file__).parent / "data"


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
    assert data.startswith(b"LZCKPT02") and b"pickle" not in data
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
    buffer = io.BytesIO()
    lz.save({"a": lz.arange(3)}, buffer)
    buffer.seek(0)
    assert lz.load(buffer)["a"].tolist() == [0, 1, 2]


def _v1_object():
    """What tests/eager/data/checkpoint_v1.lz holds: written by lz.save of format 01 (before 02)."""
    return {"model": {"fc.weight": lz.tensor(np.arange(6, dtype=np.float32).reshape(2, 3) / 4),
                      "fc.bias": lz.tensor(np.array([-1.5, 2.25], np.float64)), "steps": lz.tensor(7),
                      "half": lz.tensor(np.array([0.5, -2.0], np.float16)),
                      "bf": lz.tensor([1.0, -3.0]).to(lz.bfloat16),
                      "q": lz.tensor(np.array([-128, 0, 127], np.int8)), "scale": lz.tensor(np.float32(0.125)),
                      "mask": lz.tensor([True, False]), "empty": lz.zeros(0, 3)},
            "rng": np.array([1, 2**32 - 1], np.uint32), 3: ("three", None, float("inf")), "epoch": 5}


def test_files_of_format_01_still_load():
    path = DATA / "checkpoint_v1.lz"
    assert path.read_bytes().startswith(b"LZCKPT01")
    loaded, want = lz.load(path), _v1_object()
    assert loaded["model"]["bf"].dtype is lz.bfloat16 and loaded["model"]["bf"].float().tolist() == [1.0, -3.0]
    bf = want["model"].pop("bf"), loaded["model"].pop("bf")
    rng = want.pop("rng"), loaded.pop("rng")
    assert isinstance(rng[1], np.ndarray) and rng[1].dtype == np.uint32 and np.array_equal(*rng)
    assert _equal(want, loaded), loaded
    assert len(serialization.verify(path)) == 64
    damaged = bytearray(path.read_bytes())
    damaged[-1] ^= 1
    with pytest.raises(CheckpointError, match="checksum"):
        lz.load(io.BytesIO(bytes(damaged)))


def test_small_tensors_are_packed_and_large_ones_aligned(tmp_path):
    """Format 02's layout: an int8 tensor right after another at any offset, a float32 scalar at a
    multiple of 4, a tensor of 4 KiB or more at a multiple of 64; ~11 bytes of overhead per small
    tensor in a quantized layer's state dict (format 01 spent ~140)."""
    layers = {f"features.{i}.{name}": t for i in range(8) for name, t in (
        ("weight", lz.tensor(np.full((3, 5), i, np.int8))), ("weight_scale", lz.tensor(np.float32(i / 8))),
        ("weight_zero_point", lz.tensor(np.int8(0))), ("bias", lz.tensor(np.arange(3, dtype=np.float32))))}
    big = lz.tensor(np.arange(1024, dtype=np.float32))
    obj = {"big0": lz.tensor(np.int8(1)), **layers, "big": big}
    path = tmp_path / "q.lz"
    lz.save(obj, path)
    data = path.read_bytes()
    assert _equal(obj, lz.load(path))
    payload = sum(t.numpy().nbytes for t in obj.values())
    assert len(data) - payload < 48 + 16 * len(obj) + 64, len(data) - payload  # 383 bytes when written
    offset = data.index(np.arange(1024, dtype="<f4").tobytes())
    assert offset % 64 == 0 and offset + 4096 == len(data)
    scale = data.index(np.float32(7 / 8).astype("<f4").tobytes())
    assert scale % 4 == 0
