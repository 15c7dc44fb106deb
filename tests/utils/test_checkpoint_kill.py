"""The kill test (issue 15): ``examples/train_resumable.py`` under ``lezero-run --max-restarts`` (one
process, and two DDP ranks) is killed with SIGKILL at a random step, and then while a checkpoint is
being written (a random rank each time); each time lezero-run starts it again and it restores the
newest complete checkpoint.  Its final parameters, and its losses from the last restore on, are
bit-identical to those of a run never interrupted (run alongside, the same way)."""
from __future__ import annotations

import os
import pathlib
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import lezero as lz

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "examples" / "train_resumable.py"
STEPS, EVERY = 16, 3
RUN_TIMEOUT = 240  # seconds, for a whole interrupted run


def _env(ranks: int) -> dict:
    return {**os.environ, "LEZERO_NUM_THREADS": str(max(1, 2 // ranks)), "PYTHONPATH": str(ROOT)}


@pytest.fixture(scope="module")
def digits_files(tmp_path_factory) -> dict[str, pathlib.Path]:
    """The training images for each model, loaded once (the runs need not import scikit-learn)."""
    sys.path.insert(0, str(ROOT / "examples"))
    import digits
    folder = tmp_path_factory.mktemp("digits")
    files = {}
    for model, size in (("cnn", 8), ("mlp", 28)):
        x_train, y_train, _, _ = digits.load(size)
        files[model] = folder / f"{model}.npz"
        np.savez(files[model], x_train=x_train, y_train=y_train)
    return files


def _args(model: str, folder: pathlib.Path, name: str, data: pathlib.Path) -> list[str]:
    return [str(SCRIPT), "--model", model, "--steps", str(STEPS), "--every", str(EVERY), "--data", str(data),
            "--checkpoints", str(folder / f"{name}_checkpoints"), "--log", str(folder / f"{name}.log"),
            "--out", str(folder / f"{name}.lz")]


def _log(path: pathlib.Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _losses_after_last_restore(lines: list[str]) -> dict[int, str]:
    last = max(i for i, line in enumerate(lines) if line.startswith("restored"))
    return {int(step): loss for step, loss in (line.split() for line in lines[last + 1:])}


def _running_pid(lines: list[str]) -> int | None:
    starts = [line for line in lines if line.startswith("restored")]
    return int(starts[-1].split()[-1]) if starts else None


def _last_step(lines: list[str]) -> int:
    steps = [int(line.split()[0]) for line in lines if not line.startswith("restored")]
    return steps[-1] if steps else 0


def _save_under_way(checkpoints: pathlib.Path) -> bool:
    """A step folder without its metadata: a save has begun and not finished."""
    try:
        return any(not (f / "metadata.json").exists() for f in checkpoints.iterdir())
    except FileNotFoundError:
        return False


def _wait(predicate, deadline: float, what: str, process: subprocess.Popen, poll_seconds: float = 0.01):
    while not predicate():
        if process.poll() is not None:
            pytest.fail(f"lezero-run exited ({process.returncode}) while waiting for {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(poll_seconds)


def _rank_log(log: pathlib.Path, rank: int) -> pathlib.Path:
    return log if rank == 0 else log.with_name(f"{log.name}.rank{rank}")


def _launch(model: str, ranks: int, folder: pathlib.Path, name: str, data: pathlib.Path, restarts: int):
    ddp = ["--nproc-per-node", str(ranks)] if ranks > 1 else []
    return subprocess.Popen([sys.executable, "-m", "lezero.cli.run", *ddp, "--max-restarts", str(restarts),
                             *_args(model, folder, name, data), *(["--ddp"] if ranks > 1 else [])],
                            env=_env(ranks), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def _stop(process: subprocess.Popen, pids: set[int]) -> None:
    """lezero-run forwards SIGTERM to its ranks; any rank still alive after is killed."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=30)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.mark.slow
@pytest.mark.parametrize("model,ranks", [("cnn", 1), ("mlp", 1), ("cnn", 2)], ids=["cnn", "mlp", "cnn-ddp-2-ranks"])
def test_sigkill_at_random_steps_and_during_a_save_resumes_bit_identically(model, ranks, tmp_path, digits_files):
    reference = _launch(model, ranks, tmp_path, "reference", digits_files[model], restarts=0)  # meanwhile
    chance = random.Random(f"{model} {ranks} {os.getpid()}")
    kills = [(chance.randrange(4, STEPS - 4), chance.randrange(ranks)), ("during a save", chance.randrange(ranks))]
    log, checkpoints = tmp_path / "killed.log", tmp_path / "killed_checkpoints"
    runner = _launch(model, ranks, tmp_path, "killed", digits_files[model], restarts=3)
    deadline = time.monotonic() + RUN_TIMEOUT
    mid_save, pids = [], set()
    try:
        for target, rank in kills:
            victim = _rank_log(log, rank)
            started = len(_log(victim))
            _wait(lambda n=started, v=victim: _last_step(_log(v)[n:]) >= 1, deadline, "a step of the (re)started run",
                  runner)
            pid = _running_pid(_log(victim))
            pids.add(pid)
            if target == "during a save":
                _wait(lambda: _save_under_way(checkpoints), deadline, "a save under way", runner, poll_seconds=0.0005)
            else:
                _wait(lambda step=target: _last_step(_log(log)) >= step, deadline, f"step {target}", runner)
            os.kill(pid, signal.SIGKILL)
            mid_save.append(_save_under_way(checkpoints))
            _wait(lambda dead=pid, v=victim: _running_pid(_log(v)) != dead, deadline, "the restart", runner)
        err = runner.communicate(timeout=max(deadline - time.monotonic(), 1))[1]
        reference_err = reference.communicate(timeout=max(deadline - time.monotonic(), 1))[1]
    finally:
        pids.update(_running_pid(_log(_rank_log(log, r))) or 0 for r in range(ranks))
        pids.discard(0)
        _stop(runner, pids)
        _stop(reference, set())
    assert reference.returncode == 0, reference_err[-3000:]
    assert runner.returncode == 0, err[-3000:]
    assert mid_save[-1], "the last kill did not land while a checkpoint was being written"
    lines = _log(log)
    # the first start and a restart per kill; --max-restarts 3 leaves one spare, which a loaded machine
    # can use (make test under load: a 2-rank restart whose ranks did not meet failed once more); the
    # launcher's stderr says why each restart happened
    starts = sum(line.startswith("restored") for line in lines)
    assert 3 <= starts <= 4, err[-3000:]
    after = _losses_after_last_restore(lines)
    expected = _losses_after_last_restore(_log(tmp_path / "reference.log"))
    assert after and max(after) == STEPS
    assert after == {step: expected[step] for step in after}  # the loss curve, bit for bit
    final, wanted = lz.load(tmp_path / "killed.lz"), lz.load(tmp_path / "reference.lz")
    assert list(final) == list(wanted)
    for name in wanted:
        assert final[name].numpy().tobytes() == wanted[name].numpy().tobytes(), name
    assert not np.isnan(float.fromhex(after[STEPS]))
