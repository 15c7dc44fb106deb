"""A process-wide thread pool that runs a kernel's work items on every core.

Kernels are called through ctypes, which releases the GIL, so the pool's threads really run in
parallel. The caller's thread takes a share of the work too. ``LEZERO_NUM_THREADS`` overrides the
thread count (default: the CPUs this process may run on).
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def default_num_threads() -> int:
    env = os.environ.get("LEZERO_NUM_THREADS")
    return max(1, int(env)) if env else usable_cpus()


class ThreadPool:
    def __init__(self, num_threads: int | None = None):
        self.num_threads = num_threads or default_num_threads()
        self._executor = ThreadPoolExecutor(self.num_threads - 1, thread_name_prefix="lezero") \
            if self.num_threads > 1 else None
        self._local = threading.local()

    def parallel_for(self, function, argument, work_items: int) -> None:
        """Call ``function(argument, begin, end)`` over ``[0, work_items)`` split into one
        contiguous range per thread."""
        threads = min(self.num_threads, work_items)
        if threads <= 1 or self._executor is None or getattr(self._local, "inside", False):
            function(argument, 0, work_items)
            return
        bounds = [work_items * t // threads for t in range(threads + 1)]
        futures = [self._executor.submit(self._run, function, argument, bounds[t], bounds[t + 1])
                   for t in range(1, threads)]
        function(argument, bounds[0], bounds[1])
        for f in futures:
            f.result()

    def _run(self, function, argument, begin, end):
        self._local.inside = True  # a kernel never spawns nested parallel work
        try:
            function(argument, begin, end)
        finally:
            self._local.inside = False


_POOL: ThreadPool | None = None
_POOL_LOCK = threading.Lock()


def default_pool() -> ThreadPool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPool()
        return _POOL
