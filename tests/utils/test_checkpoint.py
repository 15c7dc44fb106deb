"""CheckpointManager: a run's whole state round-trips (model, optimizer, scheduler, loader, every
RNG, user values), saves happen every N steps and are pruned to ``keep``, and the documented
behaviour of damaged checkpoints: a truncated or corrupted shard and a missing metadata file are
skipped with a warning naming them, a crash during a save keeps the last good checkpoint, and a
checkpoint of another world size is an error."""
from __future__ import annotations

import json
import os
import random

import numpy as np
import pytest

import lezero as lz
from lezero.eager.serialization import CheckpointError
from lezero.utils.checkpoint import CheckpointManager, rng_state, set_rng_state
from lezero.utils.data import DataLoader, TensorDataset


def _run(seed: int = 0):
    lz.manual_seed(seed)
    model = lz.nn.Linear(4, 3)
    optimizer = lz.optim.Adam(model.parameters(), lr=0.1)
    scheduler = lz.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    data = TensorDataset(lz.from_numpy(np.arange(80, dtype=np.float32).reshape(20, 4) / 80))
    loader = DataLoader(data, batch_size=3, shuffle=True, generator=lz.Generator().manual_seed(seed + 1))
    return model, optimizer, scheduler, loader


def _train(model, optimizer, scheduler, batches) -> list[float]:
    losses = []
    for (x,) in batches:
        optimizer.zero_grad()
        loss = (model(x) ** 2).sum() + lz.randn(1).sum() * 0  # draws from the default generator too
        loss.backward()
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
    return losses


def _batches(loader, n):
    while True:
        for batch in loader:
            yield batch
            n -= 1
            if n == 0:
                return


def test_a_restored_run_continues_exactly(tmp_path):
    model, optimizer, scheduler, loader = _run()
    manager = CheckpointManager(tmp_path, every_n_steps=4, keep=2)
    batches = _batches(loader, 100)
    for step in range(1, 9):
        _train(model, optimizer, scheduler, [next(batches)])
        scaler = lz.amp.GradScaler("cpu", init_scale=2.0 ** step, growth_interval=step)
        manager.save(step, model=model, optimizer=optimizer, scheduler=scheduler, loader=loader, scaler=scaler,
                     best=0.5, tags=["a", {"b": 1}])
    manager.wait()
    expected = _train(model, optimizer, scheduler, [next(batches) for _ in range(9)])
    draws = (random.random(), np.random.rand(), lz.rand(2).numpy().tolist())
    assert manager.steps() == [4, 8]  # every 4 steps, the last two kept

    fresh = _run(seed=7)  # other weights, another loader seed: all overwritten by restore
    random.seed(1)
    np.random.seed(1)
    fresh_scaler = lz.amp.GradScaler("cpu")
    step, state = CheckpointManager(tmp_path).restore(model=fresh[0], optimizer=fresh[1], scheduler=fresh[2],
                                                      loader=fresh[3], scaler=fresh_scaler)
    assert step == 8 and state["best"] == 0.5 and state["tags"] == ["a", {"b": 1}]
    assert fresh_scaler.state_dict() == lz.amp.GradScaler("cpu", init_scale=2.0 ** 8, growth_interval=8).state_dict()
    assert _train(*fresh[:3], _batches(fresh[3], 9)) == expected
    assert (random.random(), np.random.rand(), lz.rand(2).numpy().tolist()) == draws
    assert all(np.array_equal(a.detach().numpy(), b.detach().numpy())
               for a, b in zip(model.parameters(), fresh[0].parameters()))


def test_an_empty_directory_restores_nothing(tmp_path):
    assert CheckpointManager(tmp_path / "new").restore() == (None, {})


def test_rng_state_round_trips_through_a_checkpoint(tmp_path):
    lz.manual_seed(3)
    random.seed(3)
    np.random.seed(3)
    lz.save(rng_state(), tmp_path / "rng.lz")
    first = (random.random(), np.random.rand(), lz.randn(3).numpy().tolist())
    set_rng_state(lz.load(tmp_path / "rng.lz"))
    assert (random.random(), np.random.rand(), lz.randn(3).numpy().tolist()) == first


def test_lz_get_and_set_rng_state():
    state = lz.get_rng_state()
    a = lz.rand(4).numpy()
    lz.set_rng_state(state)
    assert np.array_equal(lz.rand(4).numpy(), a)


def _saved(tmp_path, steps=(1, 2)) -> CheckpointManager:
    model = lz.nn.Linear(2, 2)
    manager = CheckpointManager(tmp_path, keep=None, async_save=False)
    for step in steps:
        manager.save(step, model=model, step_value=step)
    return manager


def _shard(manager, step) -> str:
    return os.path.join(manager.folder(step), "rank-00000-of-00001.lzckpt")


def test_a_truncated_shard_is_skipped_with_a_warning(tmp_path):
    manager = _saved(tmp_path)
    with open(_shard(manager, 2), "r+b") as f:
        f.truncate(os.path.getsize(_shard(manager, 2)) - 10)
    with pytest.warns(RuntimeWarning, match=r"step-00000002: its shard .* bytes.*truncated"):
        step, state = manager.restore()
    assert step == 1 and state["step_value"] == 1


def test_a_corrupted_shard_is_skipped_with_a_warning(tmp_path):
    manager = _saved(tmp_path)
    with open(_shard(manager, 2), "r+b") as f:
        f.seek(-3, os.SEEK_END)
        f.write(b"\xff\xfe\xfd")
    with pytest.warns(RuntimeWarning, match=r"step-00000002: its shard .* (does not match its checksum|the data does not match its checksum)"):
        assert manager.restore()[0] == 1


def test_a_missing_metadata_file_is_skipped_with_a_warning(tmp_path):
    manager = _saved(tmp_path)
    os.unlink(os.path.join(manager.folder(2), "metadata.json"))
    with pytest.warns(RuntimeWarning, match=r"step-00000002: it has no metadata.json"):
        assert manager.restore()[0] == 1
    assert manager.steps() == [1]  # the unfinished save is cleared: its step will be saved again


def test_a_crash_during_a_save_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    manager = _saved(tmp_path, steps=(1,))
    manager.keep = 1

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr("lezero.utils.checkpoint._write_json", crash)  # the shard lands, the metadata does not
    async_manager = CheckpointManager(tmp_path, keep=1)
    async_manager.save(2, model=lz.nn.Linear(2, 2), step_value=2)
    with pytest.raises(CheckpointError, match="disk full"):
        async_manager.wait()
    monkeypatch.undo()
    with pytest.warns(RuntimeWarning, match="step-00000002: it has no metadata.json"):
        step, state = manager.restore()
    assert step == 1 and state["step_value"] == 1


def test_a_checkpoint_of_another_world_size_is_an_error(tmp_path):
    _saved(tmp_path)
    with pytest.raises(CheckpointError, match="saved by 1 ranks, and this run has 2"):
        CheckpointManager(tmp_path, rank=1, world_size=2).restore()


def test_ranks_write_their_shards_and_rank_0_the_metadata_last(tmp_path):
    rank1 = CheckpointManager(tmp_path, rank=1, world_size=2)
    rank1.save(5, value=lz.ones(3))
    rank1.wait()
    assert not os.path.exists(os.path.join(rank1.folder(5), "metadata.json"))  # rank 0 has not saved
    rank0 = CheckpointManager(tmp_path, rank=0, world_size=2)
    rank0.save(5, value=lz.zeros(3))
    rank0.wait()
    with open(os.path.join(rank0.folder(5), "metadata.json")) as f:
        metadata = json.load(f)
    assert metadata["world_size"] == 2 and [s["file"] for s in metadata["shards"]] == \
        ["rank-00000-of-00002.lzckpt", "rank-00001-of-00002.lzckpt"]
    assert rank1.restore()[1]["value"].numpy().tolist() == [1, 1, 1]
    assert rank0.restore()[1]["value"].numpy().tolist() == [0, 0, 0]


def test_restore_names_a_state_that_was_not_saved(tmp_path):
    _saved(tmp_path)
    with pytest.raises(KeyError, match="has no optimizer"):
        CheckpointManager(tmp_path).restore(optimizer=lz.optim.SGD(lz.nn.Linear(2, 2).parameters(), lr=0.1))


def test_an_async_save_copies_the_values_before_training_changes_them(tmp_path):
    weights = lz.zeros(1000)
    manager = CheckpointManager(tmp_path)
    manager.save(1, weights=weights)
    weights.add_(1.0)  # an in-place update while the write may still be under way
    manager.wait()
    assert manager.restore()[1]["weights"].numpy().max() == 0


def test_comm_hook_states_round_trip(tmp_path):
    """PowerSGD's error feedback, Q and random state, and top-k's errors (DDP comm hooks)."""
    from lezero.nn.parallel.comm_hooks import PowerSGDState, TopKState

    power = PowerSGDState(random_seed=3)
    power.iter, power.errors, power.qs = 12, {(0, 1): np.ones((3, 2), np.float32)}, {(0, 1): np.eye(2, 1)}
    top = TopKState()
    top.errors = {2: np.arange(3.0)}
    with CheckpointManager(tmp_path) as manager:  # closing waits for the write
        manager.save(1, power=power, top=top)
    power_again, top_again = PowerSGDState(), TopKState()
    CheckpointManager(tmp_path).restore(power=power_again, top=top_again)
    assert power_again.iter == 12 and list(power_again.errors) == [(0, 1)] and list(top_again.errors) == [2]
    assert np.array_equal(power_again.errors[(0, 1)], power.errors[(0, 1)])
    assert np.array_equal(power_again.qs[(0, 1)], power.qs[(0, 1)])
    assert np.array_equal(top_again.errors[2], top.errors[2])
    assert power_again.rng.standard_normal() == power.rng.standard_normal()
