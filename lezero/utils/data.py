"""``lz.utils.data``: datasets, samplers and ``DataLoader`` (batching, seeded shuffling,
``drop_last``, worker processes), yielding lezero tensors.

Collation stacks samples with numpy (loading data is not a tensor op: nothing to compile), and a
``TensorDataset`` batch is one numpy ``take`` per tensor rather than a stack of samples.  With
``num_workers=0`` loading runs in the calling process; with more, in worker processes
(``lezero.utils.data_workers``), the batches in the same order.  ``pin_memory`` is accepted and
does nothing: batches are host arrays, and a copy to cuda happens where they are used.

A loader resumes (``state_dict``/``load_state_dict``, as torchdata's ``StatefulDataLoader``): its
state is the epoch, the number of batches yielded in it, the epoch's base seed (the workers'),
the sampler's order for the epoch (``RandomSampler`` keeps the permutation it drew) and the
generator's state, so a loader restored in a new process yields exactly the batches the old one
would have yielded next.  The batches already seen are skipped by their indices, not loaded.  A
custom sampler without ``state_dict`` is taken to give the same order again when iterated again.
What worker processes draw from their own generators (random augmentations) is not part of the
state: those generators live in the workers, which after a restore start from their seeds again;
for an exact resume with workers, derive a sample's randomness from its index.
"""
from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Mapping, Sequence

import numpy as np

from lezero.eager.core import as_input, wrap as _wrap
from lezero.eager.creation import Generator, default_generator, numpy_generator as _generator
from lezero.eager.device_arrays import storage
from lezero.eager.interop import storage_of
from lezero.eager.tensor import Tensor
from lezero.runtime.heartbeat import beat as _heartbeat  # issue 15: lezero-run --heartbeat-timeout
import lezero.distributed as _distributed  # issue 14: DistributedSampler's default rank and world size
from lezero.utils.data_workers import Fetcher, WorkerInfo, WorkerIterator, get_worker_info  # noqa: F401


class Dataset:
    """A map-style dataset: ``__getitem__(i)`` and ``__len__``."""

    def __getitem__(self, index):
        raise NotImplementedError

    def __add__(self, other: "Dataset") -> "ConcatDataset":
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A dataset that is an iterable of samples."""

    def __iter__(self):
        raise NotImplementedError


class TensorDataset(Dataset):
    """Samples are the ``i``-th rows of each tensor (all with the same first dim)."""

    def __init__(self, *tensors: Tensor):
        if not tensors:
            raise ValueError("TensorDataset needs at least one tensor")
        tensors = tuple(as_input(t, "TensorDataset") for t in tensors)  # torch, numpy: their memory, shared
        n = tensors[0].shape[0]
        if any(t.shape[0] != n for t in tensors):
            raise ValueError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(_wrap(storage(t._data[index])) for t in self.tensors)

    def __getitems__(self, indices):
        """A whole batch at once: each tensor's rows taken in one go (``DataLoader`` uses it)."""
        index = np.asarray(indices, np.int64)
        return _Batch(tuple(_wrap(np.take(t._data, index, axis=0)) for t in self.tensors))

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class _Batch(tuple):
    """Rows already stacked into a batch: ``default_collate`` passes them through."""


class Subset(Dataset):
    def __init__(self, dataset: Dataset, indices):
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, index):
        if isinstance(index, list):
            return self.dataset[[self.indices[i] for i in index]]
        return self.dataset[self.indices[index]]

    def __len__(self) -> int:
        return len(self.indices)


class ConcatDataset(Dataset):
    def __init__(self, datasets):
        self.datasets = list(datasets)
        self.cumulative_sizes = list(np.cumsum([len(d) for d in self.datasets]))

    def __len__(self) -> int:
        return int(self.cumulative_sizes[-1]) if self.cumulative_sizes else 0

    def __getitem__(self, index: int):
        if index < 0:
            index += len(self)
        which = int(np.searchsorted(self.cumulative_sizes, index, side="right"))
        start = 0 if which == 0 else int(self.cumulative_sizes[which - 1])
        return self.datasets[which][index - start]


def random_split(dataset: Dataset, lengths, generator: Generator | None = None) -> list:
    """Split into non-overlapping subsets of ``lengths`` (counts, or fractions summing to 1)."""
    n = len(dataset)
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        counts = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if sum(lengths) != n:
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    order = _generator(generator).permutation(n).tolist()
    out, start = [], 0
    for length in lengths:
        out.append(Subset(dataset, order[start:start + length]))
        start += length
    return out


# --- samplers -------------------------------------------------------------------------------------------------

class Sampler:
    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self) -> int:
        return len(self.data_source)


class RandomSampler(Sampler):
    """A fresh permutation each epoch from ``generator`` (else from the default generator, which
    ``lz.manual_seed`` seeds)."""

    def __init__(self, data_source, replacement: bool = False, num_samples: int | None = None,
                 generator: Generator | None = None):
        self.data_source, self.replacement = data_source, replacement
        self._num_samples, self.generator = num_samples, generator

    @property
    def num_samples(self) -> int:
        return len(self.data_source) if self._num_samples is None else self._num_samples

    _order: np.ndarray | None = None   # the order of the epoch under way
    _resumed: np.ndarray | None = None  # the order a restored state says the next epoch continues

    def __iter__(self):
        if self._resumed is not None:
            self._order, self._resumed = self._resumed, None
            return iter(self._order.tolist())
        rng = (self.generator or default_generator)._rng
        n = len(self.data_source)
        if self.replacement:
            self._order = rng.integers(0, n, self.num_samples)
        else:
            order = np.concatenate([rng.permutation(n) for _ in range(-(-self.num_samples // max(n, 1)))]) \
                if n else np.zeros(0, np.int64)
            self._order = order[:self.num_samples]
        return iter(self._order.tolist())

    def __len__(self) -> int:
        return self.num_samples

    def state_dict(self) -> dict:
        """The current epoch's order and the generator's state (the next epochs' orders)."""
        return {"order": None if self._order is None else np.asarray(self._order, np.int64),
                "generator": None if self.generator is None else self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        """The next iteration gives the saved epoch's order again (``DataLoader`` skips what was seen)."""
        order = state["order"]
        self._resumed = None if order is None else np.asarray(order.numpy() if isinstance(order, Tensor) else order,
                                                                np.int64)
        if state["generator"] is not None:
            if self.generator is None:
                raise ValueError("RandomSampler.load_state_dict: the state has a generator's state but this sampler "
                                 "draws from the default generator")
            self.generator.set_state(state["generator"])


class BatchSampler(Sampler):
    def __init__(self, sampler, batch_size: int, drop_last: bool):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self):
        batch = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def state_dict(self) -> dict:
        return _state_of(self.sampler)

    def load_state_dict(self, state: dict) -> None:
        _load_state_of(self.sampler, state)


def _state_of(sampler) -> dict | None:
    return sampler.state_dict() if hasattr(sampler, "state_dict") else None


def _load_state_of(sampler, state) -> None:
    if state is not None:
        sampler.load_state_dict(state)


# --- collation ----------------------------------------------------------------------------------------------------

def default_collate(batch):
    """Stack a list of samples into a batch, field by field: tensors and arrays (numpy, torch) stack along
    a new dim 0, Python ints become int64, floats float64 (as PyTorch's), tuples, lists and dicts
    collate per element."""
    if isinstance(batch, _Batch):
        return tuple(batch)
    first = batch[0]
    if isinstance(first, Tensor) or storage_of(first, "default_collate") is not None:  # torch, numpy, DLPack too
        return _wrap(np.stack([as_input(t, "default_collate")._data for t in batch]))
    if isinstance(first, (bool, np.bool_)):
        return _wrap(np.asarray(batch, np.bool_))
    if isinstance(first, numbers.Integral):
        return _wrap(np.asarray(batch, np.int64))
    if isinstance(first, numbers.Real):
        return _wrap(np.asarray(batch, np.float64))
    if isinstance(first, (str, bytes)):
        return list(batch)
    if isinstance(first, Mapping):
        return {key: default_collate([sample[key] for sample in batch]) for key in first}
    if isinstance(first, tuple) and hasattr(first, "_fields"):  # a namedtuple
        return type(first)(*(default_collate(list(field)) for field in zip(*batch)))
    if isinstance(first, Sequence):
        if any(len(sample) != len(first) for sample in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        collated = [default_collate(list(field)) for field in zip(*batch)]
        return tuple(collated) if isinstance(first, tuple) else collated
    raise TypeError(f"default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found "
                    f"{type(first).__name__}")


class DataLoader:
    """Batches of a dataset: ``DataLoader(dataset, batch_size=64, shuffle=True, drop_last=True,
    generator=lz.Generator().manual_seed(0))``."""

    def __init__(self, dataset, batch_size: int | None = 1, shuffle: bool | None = None, sampler=None,
                 batch_sampler=None, num_workers: int = 0, collate_fn=None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn=None, multiprocessing_context=None,
                 generator: Generator | None = None, *, prefetch_factor: int | None = None,
                 persistent_workers: bool = False, pin_memory_device: str = ""):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; use num_workers=0 to disable "
                             "multiprocessing.")
        if timeout < 0:
            raise ValueError("timeout option should be non-negative")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor option could only be specified in multiprocessing.let num_workers > 0 "
                             "to enable multiprocessing, otherwise set prefetch_factor to None.")
        if prefetch_factor is not None and prefetch_factor < 0:
            raise ValueError("prefetch_factor option should be non-negative")
        if persistent_workers and num_workers == 0:
            raise ValueError("persistent_workers option needs num_workers > 0")
        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = 2 if num_workers > 0 and prefetch_factor is None else prefetch_factor
        self.timeout, self.worker_init_fn, self.persistent_workers = timeout, worker_init_fn, persistent_workers
        self.multiprocessing_context = multiprocessing_context
        self.pin_memory, self.pin_memory_device = pin_memory, pin_memory_device
        self.generator = generator
        self._workers: WorkerIterator | None = None  # the persistent workers, once started
        self.collate_fn = collate_fn or default_collate
        self._iterable = isinstance(dataset, IterableDataset)
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, shuffle, sampler, "
                                 "and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually exclusive with drop_last")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if self._iterable and (shuffle or sampler is not None or batch_sampler is not None):
            raise ValueError("DataLoader with IterableDataset: expected unspecified shuffle, sampler and "
                             "batch_sampler options")
        if sampler is None and not self._iterable:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None and not self._iterable:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size, self.drop_last = batch_size, drop_last
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self._epoch, self._started = 0, False  # the epoch under way (or next, before the first __iter__)
        self._batches_yielded = 0   # in the epoch under way
        self._base_seed: int | None = None
        self._resumed: dict | None = None  # a loaded state, for the next __iter__

    @property
    def _auto_collation(self) -> bool:
        return self.batch_size is not None if self._iterable else self.batch_sampler is not None

    def _index_source(self):
        """What the sampler gives per batch: index lists, or single indices (``batch_size=None``)."""
        return self.batch_sampler if self.batch_sampler is not None else self.sampler

    def _epoch_tasks(self, skip: int):
        """The epoch's index batches, less the first ``skip`` (already seen before a restore)."""
        if self._iterable:
            return None
        return itertools.islice(self._index_source(), skip, None)

    def _count_batch(self) -> None:
        _heartbeat()
        self._batches_yielded += 1

    def _fetch_many(self):
        """A whole batch at once (``dataset.__getitems__``), unless a custom collate_fn wants the samples."""
        return getattr(self.dataset, "__getitems__", None) if self.collate_fn is default_collate else None

    def __iter__(self):
        """Each epoch draws a base seed from the loader's generator (the workers' seeds), with or
        without workers, so that the sampler's order is the same either way.  After
        ``load_state_dict`` the first epoch continues the saved one."""
        resumed, self._resumed = self._resumed, None
        if resumed is not None:
            skip, base_seed = resumed["batches_yielded"], resumed["base_seed"]
        else:
            self._epoch += self._started
            skip, base_seed = 0, int(_generator(self.generator).integers(0, 2 ** 62))
        self._started, self._base_seed, self._batches_yielded = True, base_seed, skip
        tasks = self._epoch_tasks(skip)
        if self.num_workers == 0:
            return self._batches(tasks)
        if self._workers is not None:
            self._workers.reset(base_seed, tasks)
            return self._workers
        workers = WorkerIterator(self, base_seed, tasks)
        if self.persistent_workers:
            self._workers = workers
        return workers

    def _batches(self, tasks):
        fetch = Fetcher(self.dataset, self.collate_fn, self._auto_collation, self.batch_size, self.drop_last,
                        self._iterable, self._fetch_many())
        if not self._iterable:
            for indices in tasks:
                batch = fetch(indices)
                self._count_batch()
                yield batch
            return
        while True:
            try:
                batch = fetch(None)
            except StopIteration:
                return
            _heartbeat()  # the iterable path counts no batches
            yield batch

    # --- resuming ----------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Where the loader is: ``epoch`` (epochs started before this one), ``batches_yielded`` in
        it, its ``base_seed``, the sampler's state (its order for the epoch) and the generator's.
        Once an epoch's last batch is out the state is that of the next epoch, not started yet."""
        if self._iterable:
            raise TypeError("DataLoader.state_dict: a loader over an IterableDataset cannot say where it is (the "
                            "dataset's iterator holds that); only map-style datasets resume")
        finished = self._epoch_finished()
        return {"epoch": self.epoch,
                "batches_yielded": 0 if finished else self._batches_yielded,
                "base_seed": None if finished else self._base_seed,
                "sampler": None if finished else _state_of(self._index_source()),
                "generator": None if self.generator is None else self.generator.get_state()}

    def load_state_dict(self, state: dict) -> None:
        """Continue from ``state`` (``state_dict``'s): the next ``iter(loader)`` yields the batches
        that followed it."""
        if self._iterable:
            raise TypeError("DataLoader.load_state_dict: a loader over an IterableDataset cannot resume; only "
                            "map-style datasets do")
        if state["generator"] is not None:
            if self.generator is None:
                raise ValueError("DataLoader.load_state_dict: the state has a generator's state but this loader has "
                                 "no generator (pass generator= as the saved loader had)")
            self.generator.set_state(state["generator"])
        _load_state_of(self._index_source(), state["sampler"])
        self._epoch, self._started, self._batches_yielded = int(state["epoch"]), False, 0
        self._resumed = None if state["base_seed"] is None else \
            {"batches_yielded": int(state["batches_yielded"]), "base_seed": int(state["base_seed"])}

    def _epoch_finished(self) -> bool:
        return not self._started or self._batches_yielded >= len(self)

    @property
    def epoch(self) -> int:
        """The epoch under way, counted from 0; once its last batch is out, the next one (so
        ``sampler.set_epoch(loader.epoch)`` before each ``for`` is right after a restore too)."""
        return self._epoch + (self._started and self._epoch_finished())

    def __len__(self) -> int:
        if self._iterable:
            n = len(self.dataset)
            return n if self.batch_size is None else (n // self.batch_size if self.drop_last else
                                                      -(-n // self.batch_size))
        return len(self.batch_sampler) if self.batch_sampler is not None else len(self.sampler)


# --- issue 14: the sampler of data-parallel training ------------------------------------------------------------

class DistributedSampler(Sampler):
    """torch's ``DistributedSampler``: rank ``rank`` of ``num_replicas`` takes every
    ``num_replicas``-th index (from ``rank`` on) of one order all ranks share: a permutation drawn
    from ``seed + epoch`` when ``shuffle`` (call ``set_epoch`` each epoch for a new one), padded by
    repeating its start so every rank gets ``num_samples`` indices (or cut, with ``drop_last``).
    The rank and world size default to ``lz.distributed``'s group."""

    def __init__(self, dataset, num_replicas: int | None = None, rank: int | None = None, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = False):
        num_replicas = _distributed.get_world_size() if num_replicas is None else num_replicas
        rank = _distributed.get_rank() if rank is None else rank
        if not 0 <= rank < num_replicas:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval [0, {num_replicas - 1}]")
        self.dataset, self.num_replicas, self.rank = dataset, num_replicas, rank
        self.shuffle, self.seed, self.drop_last, self.epoch = shuffle, seed, drop_last, 0
        n = len(dataset)
        self.num_samples = n // num_replicas if drop_last and n % num_replicas else -(-n // num_replicas)
        self.total_size = self.num_samples * num_replicas

    def __iter__(self):
        n = len(self.dataset)
        order = np.random.default_rng(self.seed + self.epoch).permutation(n) if self.shuffle else np.arange(n)
        if self.total_size > n:
            order = np.resize(order, self.total_size)  # repeats the order's start
        return iter(order[:self.total_size][self.rank::self.num_replicas].tolist())

    def __len__(self) -> int:
        return self.num_samples

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def state_dict(self) -> dict:
        """The epoch: the order follows from ``seed + epoch`` (``DataLoader`` skips the batches seen)."""
        return {"epoch": self.epoch}

    def load_state_dict(self, state: dict) -> None:
        self.epoch = int(state["epoch"])
