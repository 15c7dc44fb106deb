"""``DataLoader(num_workers=N)``: batches loaded by N worker processes, yielded in the order the
sampler gives them, so a seeded loader yields the same batches with workers as without.

The main process keeps the sampler and hands each worker batch indices through the worker's own
queue (round robin, ``prefetch_factor`` batches per worker in flight); a worker fetches and
collates them and sends ``(batch number, batch)`` back on one shared result queue, and the main
process puts the batches back in order.  With an ``IterableDataset`` each worker iterates its own
copy of the dataset (``get_worker_info()`` tells it which one it is, to shard), and the batches
come round robin from the workers that still have data.

A worker seeds lezero's default generator, Python's ``random`` and numpy's global generator
from the loader's base seed plus its id (the base seed is drawn from the loader's generator at
each epoch, as PyTorch does), so random augmentations are reproducible.  An exception in a worker
comes back to the main process as the same exception type, naming the worker and carrying its
traceback.  Workers stop when an epoch ends (unless ``persistent_workers``), when the iterator is
closed or collected, and with the main process (they are daemons, and they also watch their
parent).
"""
from __future__ import annotations

import multiprocessing
import os
import queue
import random
import sys
import traceback
from dataclasses import dataclass

import numpy as np

_POLL_SECONDS = 0.1  # how often a waiting worker checks that it should stop, and the parent its workers


@dataclass(frozen=True)
class WorkerInfo:
    id: int
    num_workers: int
    seed: int
    dataset: object


_worker_info: WorkerInfo | None = None


def get_worker_info() -> WorkerInfo | None:
    """In a ``DataLoader`` worker process: its id, the number of workers, its seed and its copy of
    the dataset; ``None`` in the main process."""
    return _worker_info


class _ExceptionInWorker:
    """An exception raised in a worker, sent to the main process to be raised there again."""

    def __init__(self, worker_id: int, where: str = "in DataLoader worker process"):
        exc_type = sys.exc_info()[0]
        self.exc_type = exc_type
        self.message = f"Caught {exc_type.__name__} {where} {worker_id}.\nOriginal {traceback.format_exc()}"

    def reraise(self):
        if self.exc_type is KeyError:  # KeyError quotes its message: keep the traceback readable
            raise KeyError(_Quoted(self.message))
        try:
            error = self.exc_type(self.message)
        except Exception:  # an exception class that needs other arguments
            raise RuntimeError(self.message) from None
        raise error


class _Quoted(str):
    def __repr__(self) -> str:
        return str(self)


class _EndOfData:
    """An ``IterableDataset`` worker's copy ran out."""

    def __init__(self, worker_id: int):
        self.worker_id = worker_id


class Fetcher:
    """What a worker does with one task: a map-style batch from its indices (``dataset.__getitems__``
    when the default collate can use it), or the next batch of an iterable dataset's copy."""

    def __init__(self, dataset, collate_fn, auto_collation: bool, batch_size, drop_last: bool, iterable: bool,
                 fetch_many):
        self.dataset, self.collate_fn, self.auto_collation = dataset, collate_fn, auto_collation
        self.batch_size, self.drop_last, self.iterable, self.fetch_many = batch_size, drop_last, iterable, fetch_many
        self._samples = None

    def __call__(self, indices):
        if self.iterable:
            if self._samples is None:
                self._samples = iter(self.dataset)
            if not self.auto_collation:
                return next(self._samples)
            batch = []
            for sample in self._samples:
                batch.append(sample)
                if len(batch) == self.batch_size:
                    break
            if not batch or (self.drop_last and len(batch) < self.batch_size):
                raise StopIteration
            return self.collate_fn(batch)
        if not self.auto_collation:  # batch_size=None: the samples as they are
            return self.dataset[indices]
        if self.fetch_many is not None:
            return self.collate_fn(self.fetch_many(indices))
        return self.collate_fn([self.dataset[i] for i in indices])


def _worker_loop(fetcher: Fetcher, index_queue, result_queue, done, worker_id: int, num_workers: int, seed: int,
                 worker_init_fn, parent_pid: int) -> None:
    """Fetch the tasks of ``index_queue`` until a ``None`` task, ``done`` (an event: a shutdown
    from a garbage collection may find the queues' feeder threads already stopped) or the parent's
    end."""
    global _worker_info
    from lezero.eager.creation import default_generator
    default_generator.manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2 ** 32)
    _worker_info = WorkerInfo(worker_id, num_workers, seed, fetcher.dataset)
    init_error = None
    if worker_init_fn is not None:
        try:
            worker_init_fn(worker_id)
        except Exception:
            init_error = _ExceptionInWorker(worker_id)
    while True:
        try:
            task = index_queue.get(timeout=_POLL_SECONDS)
        except queue.Empty:
            if done.is_set() or os.getppid() != parent_pid:
                return
            continue
        if task is None or done.is_set():
            return
        number, indices = task
        if init_error is not None:
            result = init_error
        else:
            try:
                result = fetcher(indices)
            except StopIteration:
                result = _EndOfData(worker_id)
            except Exception:
                result = _ExceptionInWorker(worker_id)
        try:
            result_queue.put((number, result))
        except Exception:  # a batch that cannot be sent (pickled): say so from the main process
            result_queue.put((number, _ExceptionInWorker(worker_id)))


class WorkerIterator:
    """One epoch (or, with ``persistent_workers``, every epoch) of a loader's batches from its
    worker processes."""

    _shut = True  # until workers exist: nothing to shut down

    def __init__(self, loader, base_seed: int, tasks):
        self._loader = loader
        self._timeout = loader.timeout
        self._prefetch = loader.prefetch_factor
        context = loader.multiprocessing_context
        if isinstance(context, str) or context is None:
            context = multiprocessing.get_context(context)
        fetcher = Fetcher(loader.dataset, loader.collate_fn, loader._auto_collation, loader.batch_size,
                          loader.drop_last, loader._iterable, loader._fetch_many())
        self._result_queue = context.Queue()
        self._done = context.Event()
        self._index_queues, self._workers = [], []
        self._shut = False
        n = loader.num_workers
        for worker_id in range(n):
            index_queue = context.Queue()
            worker = context.Process(target=_worker_loop, daemon=True,
                                     args=(fetcher, index_queue, self._result_queue, self._done, worker_id, n,
                                           base_seed + worker_id, loader.worker_init_fn, os.getpid()))
            worker.start()
            self._index_queues.append(index_queue)
            self._workers.append(worker)
        self._start_epoch(tasks)

    def _start_epoch(self, tasks) -> None:
        """``tasks``: the epoch's index batches (``None`` for an iterable dataset)."""
        self._tasks = tasks
        self._active = list(range(len(self._workers)))  # workers with data left (iterable datasets)
        self._next_worker = 0
        self._sent = self._received = 0
        self._waiting: dict[int, object] = {}   # batch number -> batch that came early
        self._exhausted = False
        for _ in range(self._prefetch * len(self._workers)):
            self._send()

    def reset(self, base_seed: int, tasks) -> None:
        """A new epoch on the same (persistent) workers: what the last one left in flight is
        drained first.  The workers keep their seeds."""
        del base_seed
        while self._received < self._sent:
            self._receive()
        self._start_epoch(tasks)

    def _send(self) -> None:
        if self._exhausted or not self._active:
            return
        if self._tasks is None:  # iterable: ask the next worker that still has data
            indices = None
        else:
            try:
                indices = next(self._tasks)
            except StopIteration:
                self._exhausted = True
                return
        worker = self._active[self._next_worker % len(self._active)]
        self._next_worker += 1
        self._index_queues[worker].put((self._sent, indices))
        self._sent += 1

    def __iter__(self):
        return self

    def __next__(self):
        while True:
            if self._received in self._waiting:
                result = self._waiting.pop(self._received)
                self._received += 1
                if isinstance(result, _EndOfData):
                    if result.worker_id in self._active:
                        self._active.remove(result.worker_id)
                    self._send()
                    continue
                self._send()
                if isinstance(result, _ExceptionInWorker):
                    result.reraise()
                self._loader._count_batch()
                return result
            if self._received >= self._sent:
                if not self._loader.persistent_workers:
                    self.shutdown()
                raise StopIteration
            number, result = self._receive()
            self._waiting[number] = result

    def _receive(self):
        waited = 0.0
        while True:
            try:
                item = self._result_queue.get(timeout=_POLL_SECONDS if self._timeout <= 0 else
                                              min(_POLL_SECONDS, self._timeout - waited))
            except queue.Empty:
                waited += _POLL_SECONDS if self._timeout <= 0 else min(_POLL_SECONDS, self._timeout - waited)
                if self._timeout > 0 and waited >= self._timeout:
                    self.shutdown()
                    raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds") from None
                dead = [w.pid for w in self._workers if not w.is_alive()]
                if dead:
                    self.shutdown()
                    raise RuntimeError(f"DataLoader worker (pid(s) {', '.join(map(str, dead))}) exited "
                                       "unexpectedly") from None
                continue
            return item

    def shutdown(self) -> None:
        """Stop the workers (idempotent): the done event and a stop task each, then each is
        joined, and terminated if it has not stopped."""
        if self._shut:
            return
        self._shut = True
        self._done.set()
        for q in self._index_queues:
            try:
                q.put(None)
            except Exception:  # a queue already closed at interpreter exit
                pass
        for w in self._workers:
            w.join(timeout=10 * _POLL_SECONDS)
            if w.is_alive():
                w.terminate()
                w.join(timeout=10 * _POLL_SECONDS)
        for q in self._index_queues + [self._result_queue]:
            q.cancel_join_thread()
            q.close()

    def __del__(self):
        self.shutdown()
