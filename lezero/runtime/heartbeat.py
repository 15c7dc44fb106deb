"""A rank's heartbeat for ``lezero-run --heartbeat-timeout`` (issue 15): the launcher notices a rank
that hangs (a deadlocked collective, a stuck data worker) by the age of a file it gave the rank.

``beat()`` touches the file named by ``LEZERO_HEARTBEAT_FILE`` (``os.utime``), at most once a
second, so that calling it every training step costs a clock read.  The places every training loop
passes through each step call it: ``compile_train_step``'s step, ``DataLoader`` iteration,
``Optimizer.step`` and ``CheckpointManager.save``; a script with its own loop calls
``lezero.runtime.heartbeat.beat()``.  Outside lezero-run (no variable) it does nothing.  It lives in
the runtime, the lowest layer all of those callers (optim, utils, jit) may import.
"""
from __future__ import annotations

import os
import time

ENV_VAR = "LEZERO_HEARTBEAT_FILE"
MIN_INTERVAL_S = 1.0

_last_beat = -MIN_INTERVAL_S


def beat() -> None:
    """Tell the launcher this rank still makes progress (at most one touch a second)."""
    global _last_beat
    now = time.monotonic()
    if now - _last_beat < MIN_INTERVAL_S:
        return
    _last_beat = now  # outside lezero-run too: the environment is read at most once a second
    path = os.environ.get(ENV_VAR)
    if not path:
        return
    try:
        os.utime(path)
    except FileNotFoundError:  # the launcher removed it while stopping this run: recreate it
        open(path, "a").close()
