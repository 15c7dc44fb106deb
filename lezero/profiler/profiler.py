"""``lz.profiler.profile``: what ran, for how long, and how close each kernel came to the machine.

``with lz.profiler.profile() as prof:`` records, on the thread that calls them:

- every **eager op** (``lz.add``: the op's runner, timed; ``lezero.eager.dispatch.TimedRunners``
  swaps timing wrappers into the runner table for the duration, so eager code outside a profile
  runs the plain runners and checks no flag);
- every **call of a compiled function** (``lz.compile``, ``jit.trace`` results, compiled train
  steps, ONNX ``CompiledModel``s: an ``@entry`` event) and inside it each **kernel launch**
  (``lezero.runtime.cpu.profile_plan``'s ``KernelTiming``: name, kind, the ops fused into it, result
  shapes, FLOPs and bytes codegen estimated, whether it ran split over the thread pool);
- every **compile** of a plan (``compile @entry``: specialization, the pass pipeline, codegen,
  kernel-cache loads; one event for all of it);
- **``record_function(name)``** ranges, as torch's.

Events nest by time on their thread (a kernel inside its ``@main`` call inside a user range); an
event's *self* time is its time minus its children's, so the self times of a profile add up to
the time its outermost events cover: ``key_averages().table()`` prints PyTorch's columns (Self CPU %,
Self CPU, CPU total, CPU time avg, # of Calls) and each kernel's achieved GFLOP/s and GB/s against
the host's peak (``lezero.profiler.peak``).  ``export_chrome_trace(path)`` writes the events as
Chrome's trace-event JSON (Perfetto, chrome://tracing); ``tensorboard_trace_handler(dir)`` as
``on_trace_ready`` writes that trace where TensorBoard's profile plugin looks for it.
"""
from __future__ import annotations

import contextlib
import enum
import functools
import gzip
import json
import os
import socket
import threading
import time
from dataclasses import asdict, dataclass, field

from lezero.eager.dispatch import TimedRunners
from lezero.ir.types import TensorType, format_shape
from lezero.profiler.peak import host_peak
from lezero.profiler.table import EventList, averages
from lezero.runtime.cpu import Profiling, profile_plan
from lezero.runtime.plan import HostStep


class ProfilerAction(enum.Enum):
    """What a ``schedule`` says about a step (torch.profiler's names).  Warm-up steps are not
    recorded: lezero's recording costs nothing to start, so they only keep the step count."""

    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


_RECORDING = (ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)


def schedule(*, wait: int, warmup: int, active: int, repeat: int = 0, skip_first: int = 0):
    """torch.profiler.schedule: after ``skip_first`` steps, cycles of ``wait`` idle steps,
    ``warmup`` steps and ``active`` recorded steps, the last of which saves the trace; ``repeat``
    cycles (0: as long as steps come)."""
    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise ValueError(f"lz.profiler.schedule: wait={wait}, warmup={warmup}, repeat={repeat}, "
                         f"skip_first={skip_first} must be >= 0 and active={active} > 0")
    cycle = wait + warmup + active

    def action(step: int) -> ProfilerAction:
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if repeat and step >= repeat * cycle:
            return ProfilerAction.NONE
        position = step % cycle
        if position < wait:
            return ProfilerAction.NONE
        if position < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD_AND_SAVE if position == cycle - 1 else ProfilerAction.RECORD
    return action


class ProfilerActivity(enum.Enum):
    """torch.profiler's activities: lezero records the CPU (its kernels run on the calling thread
    and the native thread pool)."""

    CPU = "cpu"
    CUDA = "cuda"


@dataclass
class Event:
    """One recorded interval (``start``/``end``: ``time.perf_counter`` seconds).  ``kind``: ``op``
    (an eager op), ``call`` (a compiled function), ``kernel`` (a launch), ``compile``, ``user``
    (``record_function``)."""

    name: str
    kind: str
    start: float
    end: float
    thread: int
    shapes: tuple = ()
    flops: int = 0
    bytes: int = 0
    fused_ops: tuple = ()
    parallel: bool = False
    cache: dict = field(default_factory=dict)  # a compile's kernel-cache counts (CacheStats fields)
    children_seconds: float = 0.0  # filled by ``nest``

    @property
    def seconds(self) -> float:
        return self.end - self.start

    @property
    def self_seconds(self) -> float:
        return max(self.seconds - self.children_seconds, 0.0)


@dataclass
class _PlanFacts:
    """Per launch of a bound plan: the fused op names and the result shapes (read once per plan)."""

    fused_ops: list = field(default_factory=list)
    shapes: list = field(default_factory=list)


def _plan_facts(plan) -> _PlanFacts:
    facts = _PlanFacts()
    for launch in plan.plan.launches:
        op = launch.op
        if isinstance(launch, HostStep) or not op.regions:
            facts.fused_ops.append((op.name,))
        else:
            facts.fused_ops.append(tuple(o.name for o in op.regions[0].blocks[0].ops if o.name != "lz.yield"))
        facts.shapes.append(tuple(format_shape(r.type.shape) for r in op.results if isinstance(r.type, TensorType)))
    return facts


class profile:
    """Record what runs inside the ``with`` block (see the module docstring).  Shapes and FLOPs are
    always recorded (``record_shapes``, ``with_flops`` are torch's switches for them);
    ``on_trace_ready(prof)`` is called when the block ends (``tensorboard_trace_handler``);
    ``peak``: a ``HostPeak`` to rate kernels against (default: measured once per process when a
    table first needs it)."""

    def __init__(self, activities=None, schedule=None, on_trace_ready=None, record_shapes: bool = False,
                 profile_memory: bool = False, with_stack: bool = False, with_flops: bool = True,
                 with_modules: bool = False, peak=None):
        for flag, value in (("profile_memory", profile_memory), ("with_stack", with_stack),
                            ("with_modules", with_modules)):
            if value:
                raise NotImplementedError(f"lz.profiler.profile: {flag}=True is not recorded (kernels run in one "
                                          f"planned arena; events carry shapes, FLOPs and bytes)")
        for activity in activities or [ProfilerActivity.CPU]:
            if activity is not ProfilerActivity.CPU:
                raise ValueError(f"lz.profiler.profile records the CPU; {activity} is not recorded")
        self.on_trace_ready = on_trace_ready
        self.peak = peak
        self.schedule = schedule
        self.step_num = 0
        self.events: list[Event] = []
        self._facts: dict[int, _PlanFacts] = {}
        self.start_time = self.end_time = None
        self._lock = threading.Lock()
        self._recording = False

    # --- recording -----------------------------------------------------------------------------
    def __enter__(self) -> profile:
        if Profiling.recorder is not None or _Ranges.active is not None:
            raise RuntimeError("lz.profiler.profile: another profile is already recording")
        _Ranges.active = self  # holds the place while a schedule waits, so a second profile is refused
        self.step_num = 0
        self.start_time = time.perf_counter()
        try:
            if self._action() in _RECORDING:
                self._start_recording()
        except BaseException:
            _Ranges.active = None  # a failed start leaves nothing recording
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self._recording:
            self._stop_recording()
        _Ranges.active = None

    def start(self) -> None:
        self.__enter__()

    def stop(self) -> None:
        self.__exit__(None, None, None)

    def step(self) -> None:
        """torch's step marker.  With a ``schedule``, the step number moves on: a cycle's last
        active step (``RECORD_AND_SAVE``) ends its recording and calls ``on_trace_ready``, and a
        step the schedule records starts a new one (``events`` then hold that cycle only).
        Without a schedule every step is recorded."""
        before = self._action()
        self.step_num += 1
        after = self._action()
        if self._recording and (before is ProfilerAction.RECORD_AND_SAVE or after not in _RECORDING):
            self._stop_recording()
        if not self._recording and after in _RECORDING:
            self._start_recording()

    def _action(self) -> ProfilerAction:
        return ProfilerAction.RECORD if self.schedule is None else self.schedule(self.step_num)

    def _start_recording(self) -> None:
        self.events, self._facts = [], {}
        TimedRunners.start(self.eager_op)
        Profiling.recorder = self
        self._recording = True
        self.start_time, self.end_time = time.perf_counter(), None

    def _stop_recording(self) -> None:
        self.end_time = time.perf_counter()
        TimedRunners.stop()
        Profiling.recorder = None
        self._recording = False
        nest(self.events)
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)

    def _add(self, event: Event) -> None:
        if not self._recording:  # a record_function range while the schedule waits
            return
        with self._lock:
            self.events.append(event)

    def eager_op(self, name: str, shapes: tuple, start: float, end: float) -> None:
        self._add(Event(name, "op", start, end, threading.get_ident(), tuple(format_shape(s) for s in shapes)))

    def compiled(self, name: str, start: float, end: float, cache_before, cache_after) -> None:
        """A plan built: its time, and what the kernel cache did meanwhile (hits, lowerings, LLVM
        compiles and their seconds: the trace event's args)."""
        before, after = asdict(cache_before), asdict(cache_after)
        cache = {k: after[k] - before[k] for k in after if after[k] != before[k]}
        self._add(Event(f"compile {name}", "compile", start, end, threading.get_ident(), cache=cache))

    def run_plan(self, plan, inputs: list, pool) -> list:
        start = time.perf_counter()
        results, rows = profile_plan(plan, inputs, pool)
        end = time.perf_counter()
        facts = self._facts.get(id(plan))
        if facts is None:
            facts = self._facts[id(plan)] = _plan_facts(plan)
        thread = threading.get_ident()
        events = [Event(f"@{plan.plan.func.sym_name}", "call", start, end, thread,
                        tuple(format_shape(a.shape) for a in inputs))]
        for row, fused, shapes in zip(rows, facts.fused_ops, facts.shapes):
            events.append(Event(row.name, "kernel", row.start, row.start + row.seconds, thread, shapes, row.flops,
                                row.bytes, fused, row.parallel))
        with self._lock:
            self.events.extend(events)
        return results

    # --- reading -----------------------------------------------------------------------------
    @property
    def wall_seconds(self) -> float:
        """The time the ``with`` block took."""
        return (self.end_time or time.perf_counter()) - self.start_time

    def key_averages(self, group_by_input_shape: bool = False) -> EventList:
        """One row per event name (and per input shapes with ``group_by_input_shape``)."""
        rated = any(e.flops or e.bytes for e in self.events)
        peak = self.peak if self.peak is not None or not rated else host_peak()
        return averages(self.events, group_by_input_shape, peak, self.wall_seconds)

    def export_chrome_trace(self, path) -> None:
        """Chrome's trace-event JSON: one complete event (``ph: "X"``) per event, ``ts``/``dur``
        in microseconds from the profile's start, ``pid`` the process, ``tid`` the thread."""
        with open(path, "w") as f:
            json.dump(chrome_trace(self), f)


def nest(events: list[Event]) -> None:
    """Set each event's ``children_seconds``: the time of the events directly inside it on its
    thread (an event starting inside another and ending by its end is its child)."""
    by_thread: dict[int, list[Event]] = {}
    for e in events:
        by_thread.setdefault(e.thread, []).append(e)
    for thread_events in by_thread.values():
        thread_events.sort(key=lambda e: (e.start, -e.end))
        stack: list[Event] = []
        for e in thread_events:
            while stack and e.start >= stack[-1].end:
                stack.pop()
            if stack:
                stack[-1].children_seconds += min(e.end, stack[-1].end) - e.start
            stack.append(e)


def chrome_trace(prof: profile) -> dict:
    origin, pid = prof.start_time, os.getpid()
    trace_events = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "lezero"}}]
    for e in sorted(prof.events, key=lambda e: e.start):
        args = {"kind": e.kind}
        if e.shapes:
            args["shapes"] = list(e.shapes)
        if e.fused_ops:
            args["fused ops"] = list(e.fused_ops)
        if e.flops or e.bytes:
            args.update({"flops": e.flops, "bytes": e.bytes, "parallel": e.parallel})
        if e.cache:
            args["kernel cache"] = e.cache
        trace_events.append({"ph": "X", "cat": e.kind, "name": e.name, "pid": pid, "tid": e.thread,
                             "ts": (e.start - origin) * 1e6, "dur": e.seconds * 1e6, "args": args})
    return {"traceEvents": trace_events, "displayTimeUnit": "ms"}


class _Ranges:
    active = None  # the profile record_function ranges go to


@contextlib.contextmanager
def record_function(name: str):
    """A named range (``with record_function("forward"):``) in the active profile's events and
    table; outside a profile it records nothing."""
    prof = _Ranges.active
    start = time.perf_counter()
    try:
        yield
    finally:
        if prof is not None:
            prof._add(Event(name, "user", start, time.perf_counter(), threading.get_ident()))


def recorded(name: str):
    """A decorator: while a profile records, each call of the function is an event ``name`` (a
    compiled train step's whole call: its Python binding the batch and the optimizer state around
    the plan's kernels); otherwise one attribute check per call."""
    def wrap(fn):
        @functools.wraps(fn)
        def call(*args, **kwargs):
            prof = _Ranges.active
            if prof is None:
                return fn(*args, **kwargs)
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                prof._add(Event(name, "call", start, time.perf_counter(), threading.get_ident()))
        return call
    return wrap


def tensorboard_trace_handler(dir_name, worker_name: str | None = None, use_gzip: bool = False):
    """An ``on_trace_ready`` writing ``<dir_name>/<worker>.<ms>.pt.trace.json`` (gzipped with
    ``use_gzip``), the files TensorBoard's profile plugin lists, as torch's handler names them."""
    def handler(prof: profile) -> None:
        os.makedirs(dir_name, exist_ok=True)
        worker = worker_name or f"{socket.gethostname()}_{os.getpid()}"
        path = os.path.join(dir_name, f"{worker}.{int(time.time() * 1000)}.pt.trace.json")
        if use_gzip:
            with gzip.open(path + ".gz", "wt") as f:
                json.dump(chrome_trace(prof), f)
        else:
            prof.export_chrome_trace(path)
    return handler
