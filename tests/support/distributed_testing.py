"""Running a script on several ranks from a test: through ``lezero-run``, bounded in time, with
every process stopped even when the test fails (the launcher stops its ranks when it is told to)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import numpy as np


def run_ranks(script: str, args: list[str], nproc: int = 2, backend: str = "gloo", timeout: float = 120.0,
              extra_flags: tuple = ()) -> subprocess.CompletedProcess:
    """``lezero-run --nproc-per-node nproc --backend backend script args``; a run past ``timeout``
    seconds is stopped (SIGTERM to the launcher, which stops the ranks; SIGKILL after 10 s) and fails."""
    command = [sys.executable, "-m", "lezero.cli.run", "--nproc-per-node", str(nproc), "--backend", backend,
               "--stop-timeout", "3", *extra_flags, script, *args]
    env = dict(os.environ, LEZERO_NUM_THREADS="1", OMP_NUM_THREADS="1")  # the ranks share the cores
    launcher = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                                start_new_session=True)
    try:
        stdout, stderr = launcher.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        launcher.send_signal(signal.SIGTERM)
        try:
            stdout, stderr = launcher.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(launcher.pid, signal.SIGKILL)
            stdout, stderr = launcher.communicate()
        raise AssertionError(f"{nproc} ranks of {script} ({backend}) ran past {timeout} s:\n{stderr[-4000:]}")
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, signal.SIGKILL)
            launcher.wait()
    return subprocess.CompletedProcess(command, launcher.returncode, stdout, stderr)


def rank_results(out_dir, nproc: int) -> list[dict]:
    return [dict(np.load(os.path.join(out_dir, f"rank{r}.npz"))) for r in range(nproc)]


def relative_difference(a: np.ndarray, b: np.ndarray) -> float:
    """||a - b|| / ||b|| (2-norms over all elements)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))
