"""The native thread pool: every split covers each work item exactly once, for every work-item
count; errors reach the caller; nested and concurrent launches run inline; a forked child
rebuilds its workers."""
import ctypes
import gc
import os
import threading

import numpy as np
import pytest

from lezero.codegen.llvm.jit import compile_module
from lezero.runtime.thread_pool import ThreadPool

# A kernel-ABI function that adds 1 to counts[i] for each work item i of its range: a work item
# run twice or never shows in the counts.
COUNT_IR = """
define void @count(i8** %table, i64 %begin, i64 %end) {
entry:
  %p = load i8*, i8** %table
  %counts = bitcast i8* %p to i64*
  %empty = icmp sge i64 %begin, %end
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [%begin, %entry], [%next, %loop]
  %at = getelementptr i64, i64* %counts, i64 %i
  %old = load i64, i64* %at
  %new = add i64 %old, 1
  store i64 %new, i64* %at
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %end
  br i1 %more, label %loop, label %done
done:
  ret void
}
"""


@pytest.fixture(scope="module")
def count_kernel():
    module = compile_module(COUNT_IR, "host")
    return module.ctypes_function("count", None, [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64])


def counted(pool, kernel, work_items: int) -> np.ndarray:
    counts = np.zeros(max(work_items, 1), np.int64)
    table = (ctypes.c_void_p * 1)(counts.ctypes.data)
    pool.parallel_for(kernel, table, work_items)
    return counts[:work_items]


@pytest.mark.parametrize("threads", [1, 2, 3, 8])
def test_native_kernel_runs_each_work_item_once(count_kernel, threads):
    pool = ThreadPool(threads)
    try:
        for work_items in range(0, 40):
            for _ in range(3):  # repeated launches reuse the same workers
                np.testing.assert_array_equal(counted(pool, count_kernel, work_items), np.ones(work_items, np.int64))
    finally:
        pool.close()


def test_python_callable_ranges_cover_the_work_in_order_per_chunk():
    pool = ThreadPool(3)
    try:
        for work_items in range(0, 12):
            ranges = []
            pool.parallel_for(lambda argument, begin, end: ranges.append((argument, begin, end)), "arg", work_items)
            covered = sorted(ranges)
            assert all(argument == "arg" for argument, _, _ in covered)
            ends = [0] + [end for _, _, end in covered]
            assert [begin for _, begin, _ in covered] == ends[:-1]  # contiguous and disjoint
            assert ends[-1] == work_items
            assert len(covered) == (min(3, work_items) if work_items > 1 else 1)
    finally:
        pool.close()


def test_exception_in_a_python_callable_reaches_the_caller():
    pool = ThreadPool(2)
    try:
        def fail_on_second_half(_, begin, end):
            if begin > 0:
                raise IndexError(f"item {begin} out of range")
        with pytest.raises(IndexError, match="item 5 out of range"):
            pool.parallel_for(fail_on_second_half, None, 10)
        seen = []
        pool.parallel_for(lambda _, b, e: seen.append((b, e)), None, 4)  # still usable
        assert sorted(seen) == [(0, 2), (2, 4)]
    finally:
        pool.close()


def test_nested_parallel_for_runs_inline(count_kernel):
    pool = ThreadPool(2)
    try:
        inner = []

        def outer(_, begin, end):
            inner.append(counted(pool, count_kernel, 6).tolist())
        pool.parallel_for(outer, None, 2)
        assert inner == [[1] * 6, [1] * 6]
    finally:
        pool.close()


def test_many_threads_launching_at_once(count_kernel):
    pool = ThreadPool(2)
    failures = []

    def launch_many():
        for work_items in range(1, 60):
            counts = counted(pool, count_kernel, work_items)
            if not (counts == 1).all():
                failures.append((work_items, counts.tolist()))
    try:
        callers = [threading.Thread(target=launch_many) for _ in range(4)]
        for t in callers:
            t.start()
        for t in callers:
            t.join()
    finally:
        pool.close()
    assert failures == []


def test_forked_child_rebuilds_its_workers(count_kernel):
    pool = ThreadPool(2)
    try:
        np.testing.assert_array_equal(counted(pool, count_kernel, 9), np.ones(9, np.int64))  # workers running
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: the parent's workers do not exist here
            try:
                ok = all((counted(pool, count_kernel, n) == 1).all() for n in range(1, 20))
                os.write(write, b"1" if ok else b"0")
            finally:
                os._exit(0)
        os.close(write)
        answer = os.read(read, 1)
        os.close(read)
        os.waitpid(pid, 0)
        assert answer == b"1"
        np.testing.assert_array_equal(counted(pool, count_kernel, 9), np.ones(9, np.int64))  # the parent's still work
    finally:
        pool.close()


def test_closed_pool_starts_new_workers_on_the_next_launch(count_kernel):
    pool = ThreadPool(3)
    for _ in range(30):  # closed at once: a worker that has not run yet must still see the stop
        np.testing.assert_array_equal(counted(pool, count_kernel, 5), np.ones(5, np.int64))
        pool.close()


def test_a_collected_pool_joins_its_workers_before_its_state_is_freed(count_kernel):
    # the workers read the pool's native state until they are joined; a ThreadPool dropped
    # without close() (a test's ThreadPool(2)) used to free that state under them
    def tasks():
        return len(os.listdir("/proc/self/task"))

    before = tasks()
    pool = ThreadPool(3)
    np.testing.assert_array_equal(counted(pool, count_kernel, 6), np.ones(6, np.int64))
    stop = pool._workers.stop
    assert stop.alive and tasks() == before + 2
    del pool
    gc.collect()
    assert not stop.alive and tasks() == before


SPLIT_PLAN = """
func.func @f(%x: tensor<300x784xf32>, %w: tensor<784x256xf32>) -> tensor<300x256xf32> {
  %0 = "lz.matmul"(%x, %w) : (tensor<300x784xf32>, tensor<784x256xf32>) -> tensor<300x256xf32>
  %1 = "lz.relu"(%0) : (tensor<300x256xf32>) -> tensor<300x256xf32>
  %2 = "lz.mul"(%1, %1) : (tensor<300x256xf32>, tensor<300x256xf32>) -> tensor<300x256xf32>
  func.return %2 : tensor<300x256xf32>
}
"""


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_lean_runner_of_split_launches_matches_the_interpreter(threads):
    from lezero.ir import interpret, parse_module
    from lezero.runtime.cpu import CompiledFunction

    module = parse_module(SPLIT_PLAN)
    pool = ThreadPool(threads)
    try:
        f = CompiledFunction(module, "f", pool=pool)
        run = f.runner([(300, 784), (784, 256)])
        assert any(launch.parallel for launch in f.plan_for([(300, 784), (784, 256)]).launches)
        rng = np.random.default_rng(threads)
        for _ in range(3):  # new arrays each call: the split launch patches its table each time
            x = rng.standard_normal((300, 784), np.float32)
            w = rng.standard_normal((784, 256), np.float32) * 0.05
            (got,) = run([x, w])
            np.testing.assert_allclose(got, interpret(module, "f", x, w), rtol=1e-4, atol=1e-5)
    finally:
        pool.close()
