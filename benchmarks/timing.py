"""Timing shared by the benchmarks (imported as a plain module: scripts here run from this folder)."""
from __future__ import annotations

import time


def best_seconds(run, budget: float, max_reps: int = 100) -> float:
    """The fastest of repeated calls of ``run()`` (at least 3, more while ``budget`` seconds last),
    after one warm-up call: caches, page faults and thread start-up are not measured."""
    run()
    times = []
    deadline = time.perf_counter() + budget
    while len(times) < 3 or (time.perf_counter() < deadline and len(times) < max_reps):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)
