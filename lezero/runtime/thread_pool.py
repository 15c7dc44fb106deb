"""A process-wide thread pool that runs a kernel's work items on every core, in machine code.

``ThreadPool.parallel_for(function, argument, work_items)`` calls ``function(argument, begin,
end)`` over ``[0, work_items)`` split into one contiguous range (a *chunk*) per thread.  Handing
work to another thread must cost far less than the kernels it splits: a Python executor
(``submit`` + ``result``) cost 40-100 us per launch, more than a layer norm's whole kernel, so
every small kernel lost end to end on 2 threads.  So the pool is native: its workers and its
hand-off are a small LLVM IR module (``_POOL_IR``), compiled like the kernels and kept in their
cache on disk (no C compiler at run time), called through ctypes (which releases the GIL).  A hand-off
is a few atomic stores and, only when a worker sleeps, one ``futex`` wake: a few microseconds.

How a launch runs (``lz_pool_run``):

- the caller publishes the job (function, argument, work items, chunk count) and a *ticket*,
  ``generation << 32 | chunks left``, then bumps ``generation`` (the word sleeping workers wait on);
- every thread, the caller included, claims chunks by compare-and-swap on the ticket until none
  is left, so a worker that wakes late costs nothing: the caller runs its chunk too.  A claim
  names its generation, so a worker still finishing an old job can never take a chunk of a new one;
- the caller waits for the chunks others claimed (``finished``), spinning briefly, then on a futex.

Workers spin ``SPIN_ITERATIONS`` ``pause``s (~20 us: the next kernel of a plan is usually
launched that soon) and then sleep on the ``generation`` futex: on 2 cores a worker that
spins long steals the core the caller needs for its next kernel.  A launch that finds the pool
busy (a kernel's Python callback calling ``parallel_for`` again, or another thread launching at
the same time) runs on its caller, whole: nested parallel work runs inline.

Python callables work too (wrapped in a ctypes callback; an exception is re-raised on the
caller), at the cost of the callback's GIL round trip.  After ``os.fork`` the child's pools
rebuild their workers on first use (the parent's threads do not exist there); at interpreter exit
the workers are stopped and joined.  ``LEZERO_NUM_THREADS`` overrides the thread count (default:
the CPUs this process may run on).
"""
from __future__ import annotations

import atexit
import ctypes
import functools
import os
import platform
import threading
import weakref

# Spin-wait iterations before sleeping on a futex (a worker for the next job, the caller for the
# last chunks): ~65 cycles per ``pause`` on Zen 4, so 1000 are about 20 us, the gap between a
# plan's kernels.  End to end on 2 threads against ORT, 150 / 1000 / 5000 iterations measured
# mobilenet_v2 1.68x / 1.51x / 1.45x, a layer norm + matmul block 0.84x / 0.78x / 0.78x: longer
# spins gain little and steal a shared core for longer.
SPIN_ITERATIONS = 1000

_FUTEX_WAIT_PRIVATE, _FUTEX_WAKE_PRIVATE = 128, 129
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}

# Fields of the pool's state (``%pool``), in order.
_FIELDS = [("generation", ctypes.c_int32),   # bumped per job: the futex workers sleep on
           ("stop", ctypes.c_int32),          # set once: workers return
           ("finished", ctypes.c_int32),      # chunks of this job done: the futex the caller sleeps on
           ("caller_waiting", ctypes.c_int32),  # the caller is asleep on ``finished``: wake it
           ("ticket", ctypes.c_int64),        # generation << 32 | chunks not yet claimed
           ("chunks", ctypes.c_int64),
           ("work_items", ctypes.c_int64),
           ("function", ctypes.c_void_p),     # void(i8* argument, i64 begin, i64 end)
           ("argument", ctypes.c_void_p),
           ("sleepers", ctypes.c_int32),      # workers asleep on ``generation``: wake them
           ("busy", ctypes.c_int32),          # a job is in flight: another launch runs inline
           ("spin", ctypes.c_int64)]


class _PoolState(ctypes.Structure):
    _fields_ = _FIELDS


def _pool_ir(sys_futex: int, pause: str) -> str:
    """The pool's functions: ``lz_pool_start``, ``lz_pool_stop``, ``lz_pool_run`` (see the module
    docstring), and the helpers ``lz_pool_work`` (claim and run chunks) and ``lz_pool_worker``;
    ``pause`` is the spin-wait hint's intrinsic call, without its ``@``."""
    index = {name: i for i, (name, _) in enumerate(_FIELDS)}
    fn = "void (i8*, i64, i64)*"

    short = {"generation": "gen", "work_items": "items", "caller_waiting": "waiting"}

    def fields(names: str) -> str:
        """The addresses of the named fields of ``%p``, as ``%<name>p`` (``short`` names some)."""
        return "\n".join(f"  %{short.get(name, name)}p = getelementptr %pool, %pool* %p, i32 0, i32 {index[name]}"
                         for name in names.split())

    pool_type = "%pool = type {" + ", ".join(
        {ctypes.c_int32: "i32", ctypes.c_int64: "i64", ctypes.c_void_p: "i8*"}[t] for _, t in _FIELDS) + "}"
    return f"""{pool_type}
declare i64 @syscall(i64, ...)
declare i32 @pthread_create(i64*, i8*, i8* (i8*)*, i8*)
declare i32 @pthread_join(i64, i8**)

declare void @{pause.replace("i32 1", "i32")}

define internal void @lz_pause() alwaysinline {{
  call void @{pause}
  ret void
}}

define internal void @futex_wait(i32* %word, i32 %expected) {{
  %e = zext i32 %expected to i64
  %r = call i64 (i64, ...) @syscall(i64 {sys_futex}, i32* %word, i64 {_FUTEX_WAIT_PRIVATE}, i64 %e, i8* null)
  ret void
}}

define internal void @futex_wake(i32* %word, i64 %count) {{
  %r = call i64 (i64, ...) @syscall(i64 {sys_futex}, i32* %word, i64 {_FUTEX_WAKE_PRIVATE}, i64 %count)
  ret void
}}

; Wait until *%word equals %value (%until_equal) or differs from it: spin %spin pauses, then
; sleep on the futex, counted in *%sleepers while asleep (whoever changes the word wakes it if
; any: the count is re-read after the change, the word after the count, so no wake-up is lost).
; Returns the word's value.
define internal i32 @lz_await(i32* %word, i32 %value, i1 %until_equal, i32* %sleepers, i64 %spin) {{
entry:
  br label %poll
poll:
  %i = phi i64 [0, %entry], [%i1, %pause], [0, %woken]
  %now = load atomic i32, i32* %word acquire, align 4
  %equal = icmp eq i32 %now, %value
  %done = icmp eq i1 %equal, %until_equal
  br i1 %done, label %exit, label %spinning
spinning:
  %more = icmp ult i64 %i, %spin
  br i1 %more, label %pause, label %sleep
pause:
  call void @lz_pause()
  %i1 = add i64 %i, 1
  br label %poll
sleep:
  %s0 = atomicrmw add i32* %sleepers, i32 1 seq_cst
  %again = load atomic i32, i32* %word seq_cst, align 4
  %equal_again = icmp eq i32 %again, %value
  %done_again = icmp eq i1 %equal_again, %until_equal
  br i1 %done_again, label %woken, label %futex
futex:
  call void @futex_wait(i32* %word, i32 %again)
  br label %woken
woken:
  %s1 = atomicrmw sub i32* %sleepers, i32 1 seq_cst
  br label %poll
exit:
  ret i32 %now
}}

; After changing *%word: wake up to %count of its sleepers, if *%sleepers says any sleep.
define internal void @lz_wake_sleepers(i32* %word, i32* %sleepers, i64 %count) {{
entry:
  %asleep = load atomic i32, i32* %sleepers seq_cst, align 4
  %any = icmp ne i32 %asleep, 0
  br i1 %any, label %wake, label %done
wake:
  call void @futex_wake(i32* %word, i64 %count)
  br label %done
done:
  ret void
}}

; Claim and run chunks of job %gen until none is left.
define internal void @lz_pool_work(%pool* %p, i32 %gen) {{
entry:
{fields("ticket chunks work_items function argument finished caller_waiting")}
  br label %claim
claim:
  %t = load atomic i64, i64* %ticketp acquire, align 8
  %tgen64 = lshr i64 %t, 32
  %tgen = trunc i64 %tgen64 to i32
  %left = and i64 %t, 4294967295
  %ours = icmp eq i32 %tgen, %gen
  %some = icmp ne i64 %left, 0
  %open = and i1 %ours, %some
  br i1 %open, label %read, label %done
read:
  ; the job's fields are those of %gen while the ticket is: the CAS below fails otherwise
  %chunks = load atomic i64, i64* %chunksp monotonic, align 8
  %items = load atomic i64, i64* %itemsp monotonic, align 8
  %fraw = load atomic i8*, i8** %functionp monotonic, align 8
  %arg = load atomic i8*, i8** %argumentp monotonic, align 8
  %t1 = sub i64 %t, 1
  %cas = cmpxchg i64* %ticketp, i64 %t, i64 %t1 acq_rel acquire
  %won = extractvalue {{i64, i1}} %cas, 1
  br i1 %won, label %run, label %claim
run:
  %chunk = sub i64 %chunks, %left
  %b0 = mul i64 %items, %chunk
  %begin = udiv i64 %b0, %chunks
  %chunk1 = add i64 %chunk, 1
  %e0 = mul i64 %items, %chunk1
  %end = udiv i64 %e0, %chunks
  %f = bitcast i8* %fraw to {fn}
  call void %f(i8* %arg, i64 %begin, i64 %end)
  %before = atomicrmw add i32* %finishedp, i32 1 seq_cst
  %after = add i32 %before, 1
  %after64 = sext i32 %after to i64
  %last = icmp eq i64 %after64, %chunks
  br i1 %last, label %last_chunk, label %claim
last_chunk:
  call void @lz_wake_sleepers(i32* %finishedp, i32* %waitingp, i64 1)
  br label %claim
done:
  ret void
}}

define internal i8* @lz_pool_worker(i8* %raw) {{
entry:
  %p = bitcast i8* %raw to %pool*
{fields("generation stop sleepers spin")}
  %spin = load i64, i64* %spinp
  br label %wait
wait:
  ; a worker starts from generation 0, the fresh state's, not from what it reads when it runs:
  ; a job (or the stop) published before it ran must not be missed
  %seen = phi i32 [0, %entry], [%gen, %work]
  %gen = call i32 @lz_await(i32* %genp, i32 %seen, i1 false, i32* %sleepersp, i64 %spin)
  br label %job
job:
  %stop = load atomic i32, i32* %stopp acquire, align 4
  %stopping = icmp ne i32 %stop, 0
  br i1 %stopping, label %exit, label %work
work:
  call void @lz_pool_work(%pool* %p, i32 %gen)
  br label %wait
exit:
  ret i8* null
}}

; Start %count workers (their thread ids into %threads); returns how many started.
define i32 @lz_pool_start(%pool* %p, i32 %count, i64* %threads) {{
entry:
  %raw = bitcast %pool* %p to i8*
  br label %loop
loop:
  %i = phi i32 [0, %entry], [%i1, %started]
  %more = icmp slt i32 %i, %count
  br i1 %more, label %create, label %done
create:
  %slot = getelementptr i64, i64* %threads, i32 %i
  %rc = call i32 @pthread_create(i64* %slot, i8* null, i8* (i8*)* @lz_pool_worker, i8* %raw)
  %ok = icmp eq i32 %rc, 0
  %i1 = add i32 %i, 1
  br i1 %ok, label %started, label %done
started:
  br label %loop
done:
  ret i32 %i
}}

; Stop and join the %count workers started.
define void @lz_pool_stop(%pool* %p, i32 %count, i64* %threads) {{
entry:
{fields("stop generation")}
  store atomic i32 1, i32* %stopp seq_cst, align 4
  %g = atomicrmw add i32* %genp, i32 1 seq_cst
  call void @futex_wake(i32* %genp, i64 2147483647)
  br label %loop
loop:
  %i = phi i32 [0, %entry], [%i1, %join]
  %more = icmp slt i32 %i, %count
  br i1 %more, label %join, label %done
join:
  %slot = getelementptr i64, i64* %threads, i32 %i
  %thread = load i64, i64* %slot
  %rc = call i32 @pthread_join(i64 %thread, i8** null)
  %i1 = add i32 %i, 1
  br label %loop
done:
  ret void
}}

; Run %function(%argument, begin, end) over [0, %items) in %chunks chunks, the caller taking part.
define void @lz_pool_run(%pool* %p, i8* %function, i8* %argument, i64 %items, i64 %chunks) {{
entry:
{fields("busy")}
  %claim = cmpxchg i32* %busyp, i32 0, i32 1 acquire monotonic
  %free = extractvalue {{i32, i1}} %claim, 1
  br i1 %free, label %publish, label %inline
inline:
  %f = bitcast i8* %function to {fn}
  call void %f(i8* %argument, i64 0, i64 %items)
  ret void
publish:
{fields("generation ticket chunks work_items function argument finished caller_waiting sleepers spin")}
  store atomic i64 %chunks, i64* %chunksp monotonic, align 8
  store atomic i64 %items, i64* %itemsp monotonic, align 8
  store atomic i8* %function, i8** %functionp monotonic, align 8
  store atomic i8* %argument, i8** %argumentp monotonic, align 8
  store atomic i32 0, i32* %finishedp monotonic, align 4
  %old = load atomic i32, i32* %genp monotonic, align 4
  %gen = add i32 %old, 1
  %gen64 = zext i32 %gen to i64
  %high = shl i64 %gen64, 32
  %ticket = or i64 %high, %chunks
  store atomic i64 %ticket, i64* %ticketp release, align 8
  store atomic i32 %gen, i32* %genp seq_cst, align 4
  call void @lz_wake_sleepers(i32* %genp, i32* %sleepersp, i64 2147483647)
  call void @lz_pool_work(%pool* %p, i32 %gen)
  %spin = load i64, i64* %spinp
  %chunks32 = trunc i64 %chunks to i32
  %all = call i32 @lz_await(i32* %finishedp, i32 %chunks32, i1 true, i32* %waitingp, i64 %spin)
  br label %finish
finish:
  store atomic i32 0, i32* %busyp release, align 4
  ret void
}}
"""


def _host_arch() -> str:
    return platform.machine().lower().replace("amd64", "x86_64").replace("arm64", "aarch64")


@functools.cache
def _native():
    """The pool's machine code for this machine (once per process, from the kernel cache's disk
    entry after the first): ``(start, stop, run)``."""
    # Imported here: the kernel cache imports this module (usable_cpus).
    from lezero.runtime.kernel_cache import default_cache

    arch = _host_arch()
    if arch not in _SYS_FUTEX or platform.system() != "Linux":
        raise OSError(f"the native thread pool needs Linux futexes on x86_64 or aarch64, not {platform.system()} "
                      f"{arch}; run with LEZERO_NUM_THREADS=1")
    pause = "llvm.x86.sse2.pause()" if arch == "x86_64" else "llvm.aarch64.hint(i32 1)"  # yield, on AArch64
    engine, addresses = default_cache().load_module(_pool_ir(_SYS_FUTEX[arch], pause),
                                                    ("lz_pool_start", "lz_pool_stop", "lz_pool_run"), "host")

    def function(address: int, restype, argtypes):
        """A ctypes function (its calls release the GIL) that keeps the engine owning its code alive."""
        f = ctypes.CFUNCTYPE(restype, *argtypes)(address)
        f._owner = engine
        return f

    state, threads = ctypes.POINTER(_PoolState), ctypes.POINTER(ctypes.c_int64)
    start = function(addresses[0], ctypes.c_int32, [state, ctypes.c_int32, threads])
    stop = function(addresses[1], None, [state, ctypes.c_int32, threads])
    # The function and argument go as c_void_p: ctypes passes a ctypes function's address, an
    # array's buffer and None as NULL without a Python-side conversion.
    run = function(addresses[2], None, [state, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64])
    return start, stop, run


_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def default_num_threads() -> int:
    env = os.environ.get("LEZERO_NUM_THREADS")
    return max(1, int(env)) if env else usable_cpus()


class _Workers:
    """One set of running workers and the state they share (a process's: rebuilt after fork)."""

    def __init__(self, count: int):
        start, stop, self.run = _native()
        self.state = _PoolState(spin=SPIN_ITERATIONS)
        self.pointer = ctypes.pointer(self.state)  # keeps the state alive as long as it lives
        threads = (ctypes.c_int64 * count)()
        started = start(self.pointer, count, threads)
        # The workers read the state until they are joined: stop and join them before it can be
        # freed, whether the pool is closed or garbage-collected (a collected ThreadPool(2) freed
        # the state under its running workers, which then crashed the process).  Called once.
        self.stop = weakref.finalize(self, stop, self.pointer, started, threads)
        if started < count:
            self.stop()
            raise OSError(f"could not start {count} thread pool workers (started {started})")


class ThreadPool:
    def __init__(self, num_threads: int | None = None):
        self.num_threads = num_threads or default_num_threads()
        self._workers: _Workers | None = None  # started on the first split launch
        self._start_lock = threading.Lock()
        _POOLS.add(self)

    def parallel_for(self, function, argument, work_items: int) -> None:
        """Call ``function(argument, begin, end)`` over ``[0, work_items)`` split into one
        contiguous range per thread.  ``function`` is a ctypes function with the kernel ABI
        (``argument``: its pointer table, a ctypes array or pointer, or None) or any Python
        callable (its exception is raised here)."""
        threads = min(self.num_threads, work_items)
        if threads <= 1:
            function(argument, 0, work_items)
            return
        workers = self._workers or self._start()
        if isinstance(function, ctypes._CFuncPtr):
            workers.run(workers.pointer, function, argument, work_items, threads)
            return
        errors = []

        def call(_, begin, end):
            try:
                function(argument, begin, end)
            except BaseException as e:  # raised on the caller below: a callback cannot raise
                errors.append(e)
        workers.run(workers.pointer, _CALLBACK(call), None, work_items, threads)
        if errors:
            raise errors[0]

    def native_entry(self) -> tuple[int, int]:
        """``(address of lz_pool_run, address of the pool's state)``, for machine code that splits
        launches itself (``lezero.runtime.loop_driver``'s loop): it calls ``lz_pool_run(state,
        function, argument, work_items, chunks)`` as ``parallel_for`` does.  Starts the workers."""
        workers = self._workers or self._start()
        return ctypes.cast(workers.run, ctypes.c_void_p).value, ctypes.addressof(workers.state)

    def _start(self) -> _Workers:
        with self._start_lock:
            if self._workers is None:
                self._workers = _Workers(self.num_threads - 1)
            return self._workers

    def close(self) -> None:
        """Stop and join the workers (a later launch starts new ones)."""
        with self._start_lock:
            workers, self._workers = self._workers, None
        if workers is not None:
            workers.stop()

    def _forget_workers(self) -> None:
        """In a forked child: the workers are the parent's, and not running here (nothing to join)."""
        if self._workers is not None:
            self._workers.stop.detach()
        self._workers = None
        self._start_lock = threading.Lock()


_POOLS: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for pool in list(_POOLS):
        pool._forget_workers()


def _close_all() -> None:
    for pool in list(_POOLS):
        pool.close()


os.register_at_fork(after_in_child=_after_fork_in_child)
atexit.register(_close_all)

_POOL: ThreadPool | None = None
_POOL_LOCK = threading.Lock()


def default_pool() -> ThreadPool:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPool()
        return _POOL
