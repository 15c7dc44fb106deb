"""Data loaders that resume (issue 15): a loader restored from ``state_dict()`` in a fresh loader
(other seeds, as a new process would build it) yields exactly the batches the first one would
have yielded next: mid-epoch, at an epoch's end, with and without worker processes, with the
default generator (whose state ``CheckpointManager`` saves), and with replacement."""
from __future__ import annotations

import numpy as np
import pytest

import lezero as lz
from lezero.utils.data import DataLoader, RandomSampler, TensorDataset

EPOCHS = 3


def _data():
    return TensorDataset(lz.from_numpy(np.arange(20, dtype=np.int64)))


def _batches(loader, epochs: int = EPOCHS):
    return [np.asarray(b[0] if isinstance(b, (list, tuple)) else b) for _ in range(epochs) for b in loader]


def _resumed_at(make, cut: int) -> list:
    """Batches of a loader that yields ``cut`` batches, saves, and a fresh loader resumes from
    (with the default generator's state, which ``CheckpointManager`` saves beside the loader's)."""
    first, seen = make(1), []
    while len(seen) < cut:
        for batch in first:
            seen.append(np.asarray(batch[0] if isinstance(batch, (list, tuple)) else batch))
            if len(seen) == cut:
                break
    state, default_state = first.state_dict(), lz.get_rng_state()
    second = make(99)
    lz.manual_seed(99)
    second.load_state_dict(state)
    lz.set_rng_state(default_state)
    rest = []
    while len(seen) + len(rest) < cut + 1 or second.epoch < EPOCHS:
        rest.extend(np.asarray(b[0] if isinstance(b, (list, tuple)) else b) for b in second)
    return seen + rest


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("cut", [1, 6, 7, 9, 13])  # 7 batches an epoch: 7 is an epoch's end
def test_a_resumed_loader_yields_the_batches_that_came_next(cut, num_workers):
    def make(seed):
        return DataLoader(_data(), batch_size=3, shuffle=True, generator=lz.Generator().manual_seed(seed),
                          num_workers=num_workers)

    expected = _batches(make(1))
    got = _resumed_at(make, cut)
    assert len(got) == len(expected)
    assert all(np.array_equal(a, b) for a, b in zip(got, expected))


@pytest.mark.parametrize("replacement", [False, True])
def test_the_default_generator_and_sampling_with_replacement_resume(replacement):
    def make(seed):
        lz.manual_seed(seed)
        return DataLoader(_data(), batch_size=4, sampler=RandomSampler(_data(), replacement=replacement))

    expected = _batches(make(1))
    got = _resumed_at(make, 8)
    assert all(np.array_equal(a, b) for a, b in zip(got, expected))
    assert len(got) == len(expected)


def test_the_state_says_where_the_loader_is():
    loader = DataLoader(_data(), batch_size=3, shuffle=True, generator=lz.Generator().manual_seed(0))
    assert loader.state_dict()["epoch"] == 0 and loader.state_dict()["batches_yielded"] == 0
    iterator = iter(loader)
    next(iterator)
    next(iterator)
    state = loader.state_dict()
    assert (state["epoch"], state["batches_yielded"]) == (0, 2)
    assert sorted(state["sampler"]["order"].tolist()) == list(range(20))  # the epoch's permutation
    for _ in iterator:
        pass
    assert (loader.state_dict()["epoch"], loader.state_dict()["batches_yielded"], loader.epoch) == (1, 0, 1)


def test_an_iterable_dataset_says_it_cannot_resume():
    class Stream(lz.utils.data.IterableDataset):
        def __iter__(self):
            return iter(range(4))

    with pytest.raises(TypeError, match="IterableDataset cannot say where it is"):
        DataLoader(Stream(), batch_size=2).state_dict()
