"""DataLoader(num_workers=N): worker processes yield the batches num_workers=0 yields, in the same
order; seeds, worker_init_fn and get_worker_info; persistent workers; a worker's exception in the
main process naming the worker; timeouts; workers gone after an epoch, a break, or collection;
iterable datasets sharded by worker as torch's DataLoader shards them."""
from __future__ import annotations

import gc
import os
import time

import numpy as np
import pytest
import torch

import lezero as lz
from lezero.utils.data import DataLoader, Dataset, IterableDataset, TensorDataset, get_worker_info


def _dataset(n=23):
    return TensorDataset(lz.arange(n * 2, dtype=lz.float32).reshape(n, 2), lz.arange(n))


class Probe(Dataset):
    """Each sample: its index, the worker's id and pid, a draw from lezero's default generator and
    what ``worker_init_fn`` left."""

    def __init__(self, n=12, fail_at=None, slow_at=None):
        self.n, self.fail_at, self.slow_at = n, fail_at, slow_at

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.fail_at:
            raise ValueError(f"sample {i} is broken")
        if i == self.slow_at:
            time.sleep(5)
        info = get_worker_info()
        return {"index": i, "worker": -1 if info is None else info.id, "pid": os.getpid(),
                "draw": float(lz.rand(()).item()), "init": os.environ.get("LZ_TEST_INIT", "")}


def _values(loader):
    return [[t.tolist() for t in batch] for batch in loader]


def test_workers_yield_the_batches_of_the_main_process_in_order():
    for kwargs in (dict(batch_size=4, shuffle=True), dict(batch_size=5, drop_last=True), dict(batch_size=None)):
        single = DataLoader(_dataset(), generator=lz.Generator().manual_seed(3), **kwargs)
        workers = DataLoader(_dataset(), num_workers=3, generator=lz.Generator().manual_seed(3), prefetch_factor=1,
                             **kwargs)
        for _ in range(2):  # two epochs: the sampler's next permutation each
            assert _values(workers) == _values(single)
    assert get_worker_info() is None


def test_seeds_worker_init_fn_and_worker_info():
    def init(worker_id):
        os.environ["LZ_TEST_INIT"] = f"init{worker_id}"

    def epoch(seed):
        lz.manual_seed(seed)
        batches = list(DataLoader(Probe(), batch_size=2, num_workers=2, worker_init_fn=init))
        return {int(i): (int(w), d, name) for b in batches
                for i, w, d, name in zip(b["index"], b["worker"], b["draw"].tolist(), b["init"])}

    first, again, other = epoch(0), epoch(0), epoch(1)
    assert sorted(first) == list(range(12))
    assert {w for w, _, _ in first.values()} == {0, 1}
    assert all(name == f"init{w}" for w, _, name in first.values())
    assert first == again  # the workers' random draws are reproducible from lz.manual_seed
    assert [d for _, d, _ in first.values()] != [d for _, d, _ in other.values()]
    assert "LZ_TEST_INIT" not in os.environ  # it ran in the workers only


def test_persistent_workers_live_across_epochs_and_others_do_not():
    persistent = DataLoader(Probe(), batch_size=3, num_workers=2, persistent_workers=True)
    pids = [{int(p) for b in persistent for p in b["pid"]} for _ in range(2)]
    assert pids[0] == pids[1] and os.getpid() not in pids[0]
    fresh = DataLoader(Probe(), batch_size=3, num_workers=2)
    iterator = iter(fresh)
    assert len(list(iterator)) == 4
    assert not any(w.is_alive() for w in iterator._workers)  # stopped at the end of the epoch
    workers = persistent._workers._workers
    del persistent
    gc.collect()
    _wait_until_dead(workers)


def _wait_until_dead(workers, seconds=5.0):
    end = time.monotonic() + seconds
    while any(w.is_alive() for w in workers) and time.monotonic() < end:
        time.sleep(0.05)
    assert not any(w.is_alive() for w in workers)


def test_workers_are_cleaned_up_after_a_break_and_an_exception():
    loader = DataLoader(Probe(n=40), batch_size=2, num_workers=2)
    iterator = iter(loader)
    next(iterator)
    workers = iterator._workers
    del iterator
    gc.collect()
    _wait_until_dead(workers)

    def consume():
        for _ in DataLoader(Probe(n=40), batch_size=2, num_workers=2):
            raise KeyError("the training loop failed")

    with pytest.raises(KeyError):
        consume()
    gc.collect()
    import multiprocessing
    _wait_until_dead(multiprocessing.active_children())


def test_a_worker_exception_is_raised_in_the_main_process_naming_the_worker():
    loader = DataLoader(Probe(fail_at=5), batch_size=2, num_workers=2)
    with pytest.raises(ValueError, match=r"Caught ValueError in DataLoader worker process 0\.") as caught:
        list(loader)
    assert "sample 5 is broken" in str(caught.value) and "Traceback" in str(caught.value)

    def bad_init(worker_id):
        raise OSError(f"no data for worker {worker_id}")

    with pytest.raises(OSError, match="in DataLoader worker process [01]"):
        list(DataLoader(Probe(), batch_size=2, num_workers=2, worker_init_fn=bad_init))


def test_timeout_is_a_clear_error():
    loader = DataLoader(Probe(slow_at=0), batch_size=2, num_workers=1, timeout=0.5)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="DataLoader timed out after 0.5 seconds"):
        list(loader)
    assert time.monotonic() - start < 4


def _shard(n, info):
    """0..n-1, each worker taking every num_workers-th (the torch documentation's sharding)."""
    start, step = (0, 1) if info is None else (info.id, info.num_workers)
    return iter([np.float64(i) for i in range(start, n, step)])


class Shards(IterableDataset):
    def __iter__(self):
        return _shard(11, get_worker_info())


class TorchShards(torch.utils.data.IterableDataset):
    def __iter__(self):
        return _shard(11, torch.utils.data.get_worker_info())


def test_iterable_dataset_workers_yield_what_torch_yields():
    for kwargs in (dict(batch_size=2), dict(batch_size=2, drop_last=True), dict(batch_size=None)):
        got = [np.asarray(b.numpy() if isinstance(b, lz.Tensor) else b).tolist()
               for b in DataLoader(Shards(), num_workers=2, **kwargs)]
        want = [np.asarray(b).tolist() for b in torch.utils.data.DataLoader(TorchShards(), num_workers=2, **kwargs)]
        assert got == want and len(got) >= 5


def test_options_are_checked_as_torch_checks_them():
    with pytest.raises(ValueError, match="num_workers option should be non-negative"):
        DataLoader(_dataset(), num_workers=-1)
    with pytest.raises(ValueError, match="prefetch_factor option could only be specified in multiprocessing"):
        DataLoader(_dataset(), prefetch_factor=2)
    with pytest.raises(ValueError, match="persistent_workers option needs num_workers > 0"):
        DataLoader(_dataset(), persistent_workers=True)
    with pytest.raises(ValueError, match="timeout option should be non-negative"):
        DataLoader(_dataset(), timeout=-1)
    pinned = DataLoader(_dataset(), batch_size=4, pin_memory=True, num_workers=1)
    assert pinned.prefetch_factor == 2 and _values(pinned) == _values(DataLoader(_dataset(), batch_size=4))
