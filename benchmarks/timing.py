"""Timing shared by the benchmarks (imported as a plain module: scripts here run from this folder)."""
from __future__ import annotations

import random
import statistics
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


def alternating_times(runs: dict, budget: float, min_reps: int = 7, max_reps: int = 200,
                      warm_each: bool = False) -> dict:
    """The seconds of every timed call of each of ``runs`` (name -> list), called in turn one after
    another (at least ``min_reps`` rounds, more while ``budget`` seconds last), after one warm-up call
    each.  Alternating makes the peers share the same load on a busy machine.  ``warm_each``: every
    timed call follows an untimed call of the same callable, so that the thread pool it uses is awake
    and the previous peer's pool has gone idle (peers with their own pools, e.g. torch's OpenMP,
    otherwise pay for each other's)."""
    for run in runs.values():
        run()
    times: dict = {name: [] for name in runs}
    deadline = time.perf_counter() + budget
    rounds = 0
    while rounds < min_reps or (time.perf_counter() < deadline and rounds < max_reps):
        for name, run in runs.items():
            if warm_each:
                run()
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
        rounds += 1
    return times


def shuffled_times(runs: list, rounds: int, clock=time.perf_counter, seed: int = 0) -> tuple:
    """The seconds (by ``clock``) of every call of each of ``runs`` (a list per run), each called once
    per round for ``rounds`` rounds, in a new random order each round: a fixed order biased the medians
    of identical kernels by 6-10% (the one right after ORT finds its input and workspace out of cache)."""
    times = tuple([] for _ in runs)
    order = random.Random(seed)
    for _ in range(rounds):
        for i in order.sample(range(len(runs)), len(runs)):
            start = clock()
            runs[i]()
            times[i].append(clock() - start)
    return times


def alternating_medians(runs: dict, budget: float, min_reps: int = 7, max_reps: int = 200,
                        warm_each: bool = False) -> dict:
    """The median seconds of each of ``runs`` over ``alternating_times``' rounds: the median ignores
    the rounds someone else's burst disturbed."""
    times = alternating_times(runs, budget, min_reps, max_reps, warm_each)
    return {name: statistics.median(t) for name, t in times.items()}


# issue 14: the CPU a benchmark ran on, for its header (the benchmarks each read it themselves so far)
def cpu_model() -> str:
    """``/proc/cpuinfo``'s model name ("unknown CPU" where there is none)."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown CPU")
    except OSError:
        return "unknown CPU"
