"""``lz.utils.checkpoint.CheckpointManager``: everything a training run needs to continue exactly,
saved every N steps without stopping training for the write, and restored from the newest
checkpoint that is complete.

A checkpoint is a folder per step, in the layout of PyTorch's distributed checkpoint::

    directory/step-00000120/rank-00000-of-00002.lzckpt   one shard per rank (``lz.save``'s format)
    directory/step-00000120/rank-00001.json              rank 1's shard is durable: size, header SHA-256
    directory/step-00000120/metadata.json                rank 0, last: world size, every shard's checksum

Each file is written to a temporary name, fsynced and renamed, the folder fsynced once its
shard and record are in, and the metadata only after every rank's record exists (the
``lz.save`` write path: ``atomic_write``), so a folder without ``metadata.json`` is a save that
did not finish.  ``restore`` walks the folders from the newest: one without metadata,
or whose shards do not match their checksums (truncated, corrupt), is skipped with a warning
naming it; one saved with another world size is an error (a shard per rank cannot be re-split).
Old checkpoints are pruned (``keep``) only once a newer one is complete.

A shard holds the values ``save(step, **state)`` was given (an object with ``state_dict()``, a
model, an optimizer, an LR scheduler, a GradScaler, a ``DataLoader``, is stored as its state dict;
a ``lz.Generator`` as its state; DDP comm-hook states such as ``PowerSGDState`` have state dicts
too), plus the process's random number generators: lezero's default
generator, numpy's global one and Python's ``random``.  ``restore(**targets)`` loads each saved
state dict back into the object given under the same name and puts the generators back.

Saving is asynchronous, as DCP's ``async_save``: ``save`` copies the values (a memory copy, the
only stall) and a background thread writes, fsyncs and publishes them; the next ``save``, ``wait``
or ``close`` waits for it and raises what it raised.  Ranks meet through the file system only
(rank 0 waits for the others' ``rank-N.json``), so the directory must be one every rank sees.
A new run in a directory that holds another run's unfinished save of the same step should
``restore`` first (which clears it): rank 0 could otherwise read a stale record, and the
checkpoint would then fail its checksum and be skipped.
"""
from __future__ import annotations

import json
import os
import random
import re
import shutil
import threading
import time
import warnings

import numpy as np

from lezero.eager.creation import Generator, default_generator
from lezero.eager.serialization import CheckpointError, atomic_write, fsync_directory, load, snapshot, verify
from lezero.runtime.heartbeat import beat as _heartbeat  # issue 15: lezero-run --heartbeat-timeout

FORMAT = "lezero-checkpoint/1"
_STEP_FOLDER = re.compile(r"^step-(\d+)$")


def rng_state() -> dict:
    """The process's global random number generators: lezero's default generator, numpy's global
    generator and Python's ``random`` (as numbers and arrays, no pickle)."""
    version, words, gauss = random.getstate()
    return {"lezero": default_generator.get_state(), "numpy": np.random.get_state(legacy=False),
            "python": {"version": version, "state": np.asarray(words, np.uint32), "gauss": gauss}}


def set_rng_state(state: dict) -> None:
    """Put back what ``rng_state`` returned."""
    default_generator.set_state(state["lezero"])
    np.random.set_state(state["numpy"])
    python = state["python"]
    random.setstate((python["version"], tuple(int(w) for w in python["state"]), python["gauss"]))


def _stored(value):
    """What a shard holds for ``value``: its state dict, a generator's state, or the value itself."""
    if isinstance(value, Generator):
        return value.get_state()
    if hasattr(value, "state_dict") and callable(value.state_dict):
        return value.state_dict()
    return value


def _load_into(name: str, target, saved) -> None:
    if isinstance(target, Generator):
        target.set_state(saved)
    elif hasattr(target, "load_state_dict"):
        target.load_state_dict(saved)
    else:
        raise TypeError(f"CheckpointManager.restore: {name}= is a {type(target).__name__}, which has no "
                        "load_state_dict (pass the objects to load into; plain values come back in the state)")


def _write_json(path: str, value, sync_directory: bool = True) -> None:
    data = json.dumps(value, indent=1).encode()
    atomic_write(path, lambda out: out.write(data), sync_directory)


class CheckpointManager:
    """Checkpoints of a training run in ``directory`` (``every_n_steps``: ``save`` saves at the
    steps it divides; ``keep``: how many complete checkpoints stay).  ``rank`` and ``world_size``
    default to the ``RANK`` and ``WORLD_SIZE`` that ``lezero-run`` (and torchrun) set."""

    def __init__(self, directory, every_n_steps: int | None = None, keep: int | None = 3, *,
                 rank: int | None = None, world_size: int | None = None, async_save: bool = True,
                 save_rng: bool = True, rank_timeout: float = 600.0):
        if every_n_steps is not None and (not isinstance(every_n_steps, int) or every_n_steps <= 0):
            raise ValueError(f"CheckpointManager: every_n_steps must be a positive int or None, got {every_n_steps!r}")
        if keep is not None and (not isinstance(keep, int) or keep <= 0):
            raise ValueError(f"CheckpointManager: keep must be a positive int or None (keep all), got {keep!r}")
        self.directory = os.fspath(directory)
        self.every_n_steps, self.keep = every_n_steps, keep
        self.rank = int(os.environ.get("RANK", "0")) if rank is None else int(rank)
        self.world_size = int(os.environ.get("WORLD_SIZE", "1")) if world_size is None else int(world_size)
        if not 0 <= self.rank < self.world_size:
            raise ValueError(f"CheckpointManager: rank {self.rank} is not in [0, world_size={self.world_size})")
        self.async_save, self.save_rng, self.rank_timeout = async_save, save_rng, rank_timeout
        self._writer: threading.Thread | None = None
        self._error: BaseException | None = None
        self.last_stall_seconds = 0.0  # how long the last save held the caller (the snapshot copy, or the write)
        os.makedirs(self.directory, exist_ok=True)

    # --- saving ----------------------------------------------------------------------------------------------
    def should_save(self, step: int) -> bool:
        return self.every_n_steps is None or step % self.every_n_steps == 0

    def save(self, step: int, *, force: bool = False, **state) -> bool:
        """Save ``state`` as the checkpoint of ``step`` if ``every_n_steps`` divides it (or
        ``force``); returns whether it did.  The values are copied now and written in the
        background (``async_save``), or written before returning."""
        _heartbeat()
        if not (force or self.should_save(step)):
            return False
        started = time.perf_counter()
        self.wait()  # one save in flight: saving more often than the disk writes stalls here
        shard = {"step": int(step), "rank": self.rank, "world_size": self.world_size,
                 "rng": rng_state() if self.save_rng else None,
                 "state": {name: _stored(value) for name, value in state.items()}}
        taken = snapshot(shard, copy=self.async_save)
        self.last_stall_seconds = time.perf_counter() - started
        if not self.async_save:
            self._write(int(step), taken)
            return True
        self._writer = threading.Thread(target=self._write_in_background, args=(int(step), taken),
                                        name=f"lezero checkpoint step {step}")  # not a daemon: exit waits for it
        self._writer.start()
        return True

    def wait(self) -> None:
        """Wait for the save under way; raise what it raised."""
        if self._writer is not None:
            self._writer.join()
            self._writer = None
        if self._error is not None:
            error, self._error = self._error, None
            raise CheckpointError(f"saving a checkpoint in {self.directory} failed: {error}") from error

    def close(self) -> None:
        self.wait()

    def __enter__(self) -> "CheckpointManager":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _write_in_background(self, step: int, taken) -> None:
        try:
            self._write(step, taken)
        except BaseException as error:  # handed to the caller by wait()
            self._error = error

    def folder(self, step: int) -> str:
        return os.path.join(self.directory, f"step-{step:08d}")

    def _shard_name(self, rank: int) -> str:
        return f"rank-{rank:05d}-of-{self.world_size:05d}.lzckpt"

    def _write(self, step: int, taken) -> None:
        folder = self.folder(step)
        os.makedirs(folder, exist_ok=True)
        metadata = os.path.join(folder, "metadata.json")
        if self.rank == 0 and os.path.exists(metadata):  # left by a save that did not finish: not one yet
            os.unlink(metadata)
        shard = os.path.join(folder, self._shard_name(self.rank))
        digest = taken.write(shard, sync_directory=False)  # the file fsynced; the folder below
        record = {"file": os.path.basename(shard), "bytes": os.path.getsize(shard), "sha256": digest}
        if self.rank != 0:  # rank 0 needs the record to publish the checkpoint
            _write_json(os.path.join(folder, f"rank-{self.rank:05d}.json"), record, sync_directory=False)
            fsync_directory(folder)  # the shard and its record are durable
            return
        fsync_directory(folder)  # the shard is durable before the metadata can be
        shards = [record] + [self._wait_for_rank(folder, rank, step) for rank in range(1, self.world_size)]
        _write_json(metadata, {"format": FORMAT, "step": step, "world_size": self.world_size, "shards": shards,
                               "saved_at": time.time()})
        fsync_directory(self.directory)  # the folder itself
        self._prune(step)

    def _wait_for_rank(self, folder: str, rank: int, step: int) -> dict:
        path = os.path.join(folder, f"rank-{rank:05d}.json")
        deadline = time.monotonic() + self.rank_timeout
        while not os.path.exists(path):
            if time.monotonic() > deadline:
                raise CheckpointError(f"{folder}: rank {rank} did not write its shard of step {step} within "
                                      f"{self.rank_timeout:g} s")
            time.sleep(0.01)
        with open(path) as f:
            return json.load(f)

    def steps(self) -> list[int]:
        """The steps that have a folder here (complete or not), oldest first."""
        found = [int(m.group(1)) for name in os.listdir(self.directory) if (m := _STEP_FOLDER.match(name))]
        return sorted(found)

    def _prune(self, newest: int) -> None:
        """Keep the newest ``keep`` complete checkpoints; folders of saves older than ``newest``
        that did not finish go too (a crash left them)."""
        complete = [s for s in self.steps() if os.path.exists(os.path.join(self.folder(s), "metadata.json"))]
        kept = set(complete if self.keep is None else complete[-self.keep:])
        pruned = [s for s in self.steps() if s < newest and s not in kept]
        for s in pruned:
            shutil.rmtree(self.folder(s), ignore_errors=True)
        if pruned:
            fsync_directory(self.directory)

    # --- restoring -------------------------------------------------------------------------------------------
    def latest_step(self) -> int | None:
        """The newest step with a valid checkpoint (``None``: none), warning about the ones skipped."""
        for step in reversed(self.steps()):
            if self._check(step):
                return step
        return None

    def _check(self, step: int) -> bool:
        """Whether the checkpoint of ``step`` is complete and intact; warns why not."""
        folder = self.folder(step)

        def skip(why: str) -> bool:
            warnings.warn(f"CheckpointManager: skipping the checkpoint {folder}: {why}", RuntimeWarning, stacklevel=4)
            return False

        try:
            with open(os.path.join(folder, "metadata.json")) as f:
                metadata = json.load(f)
        except FileNotFoundError:
            return skip("it has no metadata.json (its save did not finish)")
        except (OSError, ValueError) as error:
            return skip(f"its metadata.json cannot be read ({error})")
        if metadata.get("format") != FORMAT or not isinstance(metadata.get("shards"), list):
            return skip(f"its metadata.json is not of the format {FORMAT}")
        if metadata["world_size"] != self.world_size:
            raise CheckpointError(f"{folder} was saved by {metadata['world_size']} ranks, and this run has "
                                  f"{self.world_size}: each rank restores its own shard, so resume with "
                                  f"{metadata['world_size']} ranks (or start in a new directory)")
        for entry in metadata["shards"]:
            path = os.path.join(folder, entry["file"])
            if not os.path.exists(path):
                return skip(f"its shard {entry['file']} is missing")
            if os.path.getsize(path) != entry["bytes"]:
                return skip(f"its shard {entry['file']} has {os.path.getsize(path)} bytes, not the {entry['bytes']} "
                            "it was saved with (truncated?)")
            try:
                digest = verify(path)
            except CheckpointError as error:
                return skip(f"its shard {entry['file']} is damaged: {error}")
            if digest != entry["sha256"]:
                return skip(f"its shard {entry['file']} does not match its checksum (corrupt)")
        return True

    def restore(self, **targets) -> tuple[int | None, dict]:
        """Load the newest valid checkpoint: each object in ``targets`` gets the state saved under its
        name (``load_state_dict``), the random number generators theirs.  Returns ``(step, state)``,
        ``state`` being everything saved (state dicts and plain values); ``(None, {})`` when the
        directory holds no valid checkpoint (a fresh start)."""
        self.wait()
        step = self.latest_step()
        if step is None:
            return None, {}
        for newer in self.steps():  # saves that did not finish: their step will be saved again
            if newer > step and self.rank == 0:
                shutil.rmtree(self.folder(newer), ignore_errors=True)
        shard = load(os.path.join(self.folder(step), self._shard_name(self.rank)))
        state = shard["state"]
        missing = [name for name in targets if name not in state]
        if missing:
            raise KeyError(f"CheckpointManager.restore: the checkpoint of step {step} has no {', '.join(missing)} "
                           f"(it holds {', '.join(state) or 'nothing'})")
        for name, target in targets.items():
            _load_into(name, target, state[name])
        if shard["rng"] is not None and self.save_rng:
            set_rng_state(shard["rng"])
        return step, state
