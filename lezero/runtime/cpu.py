"""The CPU executor: ``lezero.compile(module, entry)`` (``target="cpu"``) returns a
``CompiledFunction``; ``lezero.runtime.cuda`` subclasses it and shares its checking and its
one plan per shape signature.

A ``CompiledFunction`` takes numpy arrays and returns numpy arrays. On a call it checks the inputs
(count, dtype, static dims: a clear ``InputError`` naming the argument), binds every dynamic dim
from them, and runs the plan for that shape signature, building it on first use:

1. specialize and plan: ``lezero.runtime.plan`` (a copy of the function at those shapes,
   scheduled by ``lezero.codegen.schedule``, its kernels lowered to LLVM IR: an ``ExecutionPlan``);
2. bind it to memory (``bind_plan``): each kernel's machine code loaded through the kernel cache,
   its pointer table filled with what never changes (the arena's slots: a numpy byte array,
   allocated once per plan; the constants' arrays) and the slots of the inputs and outputs
   patched on each call (the caller's arrays).

Running a plan is a loop over kernel launches: patch the input/output pointers, call the kernel
(across the thread pool when the plan says it splits).  A plan whose host steps can be encoded too
runs that loop in machine code, in one ctypes call (``CpuPlan.native``: ``loop_driver.native_plan``,
a loop program run once), so no launch or iteration returns to Python; otherwise (a collective, a
region packing an invariant) it launches from Python, one ctypes call per kernel or step.  One
lock per plan: the arena is shared state.
A kernel with bounds checks also gets its status buffer (``lezero/codegen/index_checks.py``), read
after the launch (after the last launch of a native plan: a kernel that sees a bad index reads a
clamped address, so the kernels after it are safe): an index out of range raises ``IndexError``
naming the op, its location, the index and the valid range.  ``runner`` gives callers that check their
inputs themselves the lean launcher (``lezero.runtime.launch``): the eager hot path.

A host step (``lz.for``, ``lz.while``, ``lz.if``: ``lezero.runtime.plan.HostStep``) is bound as a
``BoundHostStep``: a bound plan per region, each with its arena (allocated once, reused by every
iteration), and a second buffer per carried value.  ``lz.for`` runs its body plan ``trip_count``
times with its inputs bound to the carried values' current buffers and to views ``xs[k][i]`` (no
copies), its outputs to ``ys[k][i]`` (written in place into the stacked results) and to the
carried values' other buffer, the two swapped each iteration and chosen so the last iteration
writes the final carried values into the step's result buffers; the initial values are read
where they are.  ``lz.while`` runs its condition plan before each body run (the carried values
copied into the results at the end when the count came out even; one that has a max_trip_count
raises when its condition still holds after that many runs); ``lz.if`` runs the plan of the
branch the predicate picks, straight into the results.  A step whose regions (nested steps
included) hold kernels and control flow only runs as one native call instead
(``BoundHostStep.native``, ``lezero.runtime.loop_driver``: the same buffers, the condition read
between iterations in machine code), which saves the ~3 us per iteration and launch that the
Python loop costs; ``native_refusal`` says why a step runs in Python.  The cuda executor runs the
same ``BoundHostStep`` (control flow is placed on the CPU, with transfers around it).

``CompiledFunction.profile`` (``profile_plan``) runs a plan once with ``time.perf_counter``
around each launch and returns a ``KernelTiming`` per launch: name, kind, seconds, and the flops
and bytes codegen estimated for the kernel, so a caller can put achieved GFLOP/s and GB/s next to
the machine's peak (``benchmarks/onnx_models.py --profile``).  It is a loop of its own beside
``run_plan``'s (they share the launch step), so running without profiling checks no flag.
``Profiling.recorder`` (issue 16) is ``lezero.profiler``'s hook: while a ``profile`` records, a
call of a ``CompiledFunction`` (and a lean runner of several launches) runs through the
recorder, which calls ``profile_plan``; one check per call of a whole function, none per launch.
"""
from __future__ import annotations

import ctypes
import threading
import time
import weakref
from dataclasses import dataclass, field, replace

import numpy as np

from lezero.codegen.index_checks import initial_status, status_error
from lezero.codegen.llvm.pack_kernels import pack_kernel
from lezero.codegen.llvm.target import CpuTarget, cpu_target
from lezero.codegen.packed_operands import aligned_empty
from lezero.codegen.schedule import without_weight_arguments
from lezero.ir.core import ModuleOp
from lezero.ir.diagnostics import InputError, IRError
from lezero.ir.dialect.collective import (ALL_REDUCE, COLLECTIVE_OPS, START, WAIT, start_all_reduce,
                                          wait_all_reduce)
from lezero.ir.dialect.control_flow import exceeded_bound_message
from lezero.ir.interpreter import check_arguments
from lezero.ir.types import format_shape
from lezero.ir.verifier import verify
from lezero.passes.memory_plan import ALIGNMENT as ARENA_ALIGNMENT
from lezero.passes.placement import HOST
from lezero.runtime.kernel_cache import KernelCache, default_cache
from lezero.runtime.loop_driver import native_plan, native_step
from lezero.runtime.plan import (BoundPlan, ExecutionPlan, HostStep, build_plan, collective_in,
                                 specialize)
from lezero.runtime.thread_pool import ThreadPool, default_pool


@dataclass
class _Launch:
    function: object            # ctypes function with the kernel ABI
    pointers: ctypes.Array      # c_void_p per buffer: operands, then results
    patches: list               # (slot, "input"|"output", index): pointers that change per call
    work_items: int
    parallel: bool
    name: str
    checks: tuple | None = None  # the kernel's bounds checks; then ``status`` is its status buffer
    status: ctypes.Array | None = None


def status_buffer(checks) -> ctypes.Array:
    """A kernel's status buffer, ready for its first launch."""
    values = initial_status(checks)
    return (ctypes.c_int64 * len(values))(*values)


def check_status(checks, status) -> None:
    """Raise the ``IndexError`` a launch left in its status buffer (cleared for the next launch)."""
    message = status_error(checks, status)
    if message is not None:
        status[:] = initial_status(checks)
        raise IndexError(message)


@dataclass
class CpuPlan(BoundPlan):
    """An ``ExecutionPlan`` bound to CPU memory: everything needed to run one specialization."""

    plan: ExecutionPlan
    launches: list[_Launch]
    outputs: list               # per result: (written in place, its BufferRef, its type)
    arena: np.ndarray
    keepalive: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    packed_inputs: list = field(default_factory=list)  # PackedInput per argument its kernels read pre-packed
    native: object = None  # the launches as one native program (loop_driver.native_plan), or None


def _aligned_bytes(size: int) -> np.ndarray:
    raw = np.empty(size + ARENA_ALIGNMENT, np.uint8)
    start = (-raw.ctypes.data) % ARENA_ALIGNMENT
    return raw[start:start + size]


def bind_plan(plan: ExecutionPlan, cache: KernelCache, cpu: CpuTarget | None = None) -> CpuPlan:
    """``plan`` (every kernel on the CPU) with its kernels loaded and its arena allocated."""
    arena = _aligned_bytes(plan.arena_sizes[HOST])
    keepalive: list = [arena]
    # a loop body's invariants and a traced module's weights read pre-packed (issue 17): buffers of
    # this binding (aligned as a constant's packed copy), packed into per run (PackedInput.refresh)
    packed = {index: aligned_empty(plan.constants[index].size, np.float32) for _, _, index in plan.packed_inputs}
    for buffer in packed.values():
        buffer[:] = 0

    def fixed_address(ref) -> int | None:
        if ref.kind == "arena":
            return arena.ctypes.data + ref.where
        if ref.kind == "constant":
            return packed.get(ref.where, plan.constants[ref.where]).ctypes.data
        return None

    kernels = [launch for launch in plan.launches if not isinstance(launch, HostStep)]
    loaded_kernels = dict(zip(map(id, kernels), cache.load_kernels([launch.kernel for launch in kernels], cpu)))
    launches = []
    for launch in plan.launches:
        if isinstance(launch, HostStep):
            bound_step = BoundCollectiveStep if launch.name in COLLECTIVE_OPS else BoundHostStep  # issue 14
            launches.append(bound_step(launch, [bind_plan(p, cache, cpu) for p in launch.region_plans],
                                       plan.constants, arena))
            continue
        loaded = loaded_kernels[id(launch)]
        lowered = launch.kernel
        checks = lowered.index_checks
        status = None if checks is None else status_buffer(checks)
        buffers = launch.buffers
        pointers = (ctypes.c_void_p * max(len(buffers) + (status is not None), 1))()
        patches = []
        for slot, ref in enumerate(buffers):
            address = fixed_address(ref)
            if address is None:
                patches.append((slot, ref.kind, ref.where))
            else:
                pointers[slot] = address
        if status is not None:
            pointers[len(buffers)] = ctypes.addressof(status)
        launches.append(_Launch(loaded.function, pointers, patches, lowered.work_items, launch.split_over_threads,
                                lowered.name, checks, status))
        keepalive.append(loaded)
    outputs = [(plan.written_in_place(i), ref, t) for i, (ref, t) in enumerate(zip(plan.outputs, plan.result_types))]
    packed_inputs = [PackedInput(where, spec, packed[index], _pack_function(spec, cache, cpu))
                     for where, spec, index in plan.packed_inputs]
    bound = CpuPlan(plan, launches, outputs, arena, keepalive, packed_inputs=packed_inputs)
    bound.native = native_plan(bound)
    return bound


def _pack_function(spec, cache: KernelCache, cpu):
    """``spec``'s pack kernel (``lezero.codegen.llvm.pack_kernels``) loaded, with its work items;
    None for a layout packed by its numpy ``pack``."""
    kernel = pack_kernel(spec, cpu_target(cpu))
    return None if kernel is None else (cache.load(kernel.llvm_ir, kernel.symbol, cpu).function, kernel.work_items)


class PackedInput:
    """An argument that a plan's kernels read pre-packed (``ExecutionPlan.packed_inputs``: a loop's
    invariant, a traced module's weight: ``schedule.WEIGHT_ARGUMENTS_ATTR``) and this binding's
    packed buffer of it.  ``refresh(array, key, pool)`` packs ``array`` unless it is the array last
    packed and ``key`` equals the key given then: a caller that can vouch that the contents did not
    change since passes the same key (``lezero.jit.trace``: a weight's version and exposures while
    only its tensor holds its memory), any other caller None, which always packs.  The pack is the
    GEMM's own packing routine as a kernel (``function``, its slivers split over ``pool``), or the
    spec's numpy ``pack`` for a layout without one: a 1024 x 1024 ``x @ w.T`` weight took 3.0 ms in
    numpy and 0.15 in the kernel (1 thread, AMD EPYC znver4)."""

    def __init__(self, where: int, spec, packed: np.ndarray, function=None):
        self.where, self.spec, self.packed = where, spec, packed
        self.function, self.work_items = function if function is not None else (None, 0)
        self.pointers = (ctypes.c_void_p * 2)(0, packed.ctypes.data)  # the argument, its packed buffer
        self.key = None
        self.source = None  # a weak reference to the array last packed

    def refresh(self, array: np.ndarray, key, pool: ThreadPool) -> None:
        if key is not None and key == self.key and self.source() is array:
            return
        contiguous = np.ascontiguousarray(array)
        if self.function is None:
            np.copyto(self.packed, self.spec.pack(contiguous))
        else:
            self.spec.check(contiguous)
            self.pointers[0] = contiguous.ctypes.data
            pool.parallel_for(self.function, self.pointers, self.work_items)
        self.key, self.source = key, weakref.ref(array)


def _result_arrays(plan: CpuPlan) -> list:
    """A new array for each result the last kernel writes in place, None for the others."""
    return [np.empty(t.shape, t.element_type.numpy_dtype) if written_in_place else None
            for written_in_place, _, t in plan.outputs]


def run_launch(launch: _Launch, inputs: list[np.ndarray], results: list, pool: ThreadPool, keys=None) -> None:
    """Patch ``launch``'s per-call pointers and run it (across ``pool`` when the plan splits it);
    ``keys``: the plan's (``run_plan``), for a host step's pre-packed invariants."""
    if launch.__class__ is BoundHostStep or launch.__class__ is BoundCollectiveStep:
        launch.run(inputs, results, pool, keys)
        return
    for slot, kind, index in launch.patches:
        array = inputs[index] if kind == "input" else results[index]
        launch.pointers[slot] = array.ctypes.data
    if launch.parallel:
        pool.parallel_for(launch.function, launch.pointers, launch.work_items)
    else:
        launch.function(launch.pointers, 0, launch.work_items)
    if launch.checks is not None:
        check_status(launch.checks, launch.status)


def _copy_results(plan: CpuPlan, inputs: list[np.ndarray], results: list) -> None:
    """Fill in the results not written in place: copies of an input, another result, a constant
    or an arena buffer."""
    for i, (written_in_place, ref, t) in enumerate(plan.outputs):
        if written_in_place:
            continue
        if ref.kind == "input":
            results[i] = inputs[ref.where].copy()
        elif ref.kind == "output":
            results[i] = results[ref.where].copy()
        elif ref.kind == "constant":
            results[i] = plan.plan.constants[ref.where].copy()
        else:  # an arena buffer
            nbytes = t.nbytes
            results[i] = plan.arena[ref.where:ref.where + nbytes].view(t.element_type.numpy_dtype) \
                .reshape(t.shape).copy()


def _buffer(ref, t, arena: np.ndarray, constants: list) -> np.ndarray | None:
    """The array of a fixed buffer (an arena slot, a constant); None for an input or output."""
    if ref.kind == "arena":
        return arena[ref.where:ref.where + t.nbytes].view(t.element_type.numpy_dtype).reshape(t.shape)
    if ref.kind == "constant":
        return constants[ref.where]
    return None


class BoundHostStep:
    """A ``HostStep`` bound to memory: its regions' bound plans (CPU plans whatever the target:
    control flow is placed on the host), a second buffer per carried value and the index /
    condition arrays the regions read and write (see the module docstring).  Its arena and
    constant buffers are numpy arrays resolved once: the cuda executor binds it on its host
    arena's memory (``lezero.runtime.cuda``), where placement puts every control-flow op."""

    def __init__(self, step: HostStep, regions: list, constants: list, arena: np.ndarray):
        self.step, self.regions, self.name = step, [BoundRegion(plan) for plan in regions], step.name
        self.checks = None  # a region's kernels check their own bounds
        op = step.op
        self.operands = [(ref, _buffer(ref, v.type, arena, constants)) for ref, v in zip(step.operands, op.operands)]
        self.results = [(ref, _buffer(ref, r.type, arena, constants)) for ref, r in zip(step.results, op.results)]
        carried = {"lz.for": op.results[:step.num_carried], "lz.while": op.results, "lz.if": []}[step.name]
        self.spare = [np.empty(r.type.shape, r.type.element_type.numpy_dtype) for r in carried]
        self.index = np.zeros((), np.int64)
        self.go = np.zeros((), np.bool_)
        bound = op.get_attr("max_trip_count") if step.name == "lz.while" else None
        self.max_trip_count = None if bound is None else bound.value  # a bounded while raises past it
        # the whole step in machine code (lezero.runtime.loop_driver), unless a region needs Python
        self.native, self.native_refusal = native_step(self)

    @staticmethod
    def _arrays(refs, inputs, results) -> list:
        return [a if a is not None else (inputs if ref.kind == "input" else results)[ref.where] for ref, a in refs]

    def run(self, inputs: list, results: list, pool: ThreadPool, keys=None) -> None:
        operands = self._arrays(self.operands, inputs, results)
        outs = self._arrays(self.results, inputs, results)
        self._pack(operands, [None if keys is None or ref.kind != "input" else keys[ref.where]
                              for ref, _ in self.operands], pool)
        if self.native is not None:
            self.native.run([a.ctypes.data for a in operands] + [a.ctypes.data for a in outs], pool)
        elif self.name == "lz.if":
            self.regions[0 if operands[0] else 1].run(operands[1:], outs, pool)
        elif self.name == "lz.for":
            self._run_for(operands, outs, pool)
        else:
            self._run_while(operands, outs, pool)

    def _pack(self, operands: list, keys: list, pool: ThreadPool) -> None:
        """Lay out the invariants the regions read pre-packed (``BoundRegion.pack``), once per run
        (``keys``: per operand, ``PackedInput.refresh``'s)."""
        if self.name == "lz.for":
            ni = self.step.num_invariant
            self.regions[0].pack([self.index] + operands[:ni], [None] + keys[:ni], pool)
        else:
            first, last = (0, self.step.num_invariant) if self.name == "lz.while" else (1, len(operands))
            for region in self.regions:
                region.pack(operands[first:last], keys[first:last], pool)

    def _run_for(self, operands: list, outs: list, pool: ThreadPool) -> None:
        step, body = self.step, self.regions[0]
        ni, nc, n = step.num_invariant, step.num_carried, step.trip_count
        invariants, current, xs = operands[:ni], operands[ni:ni + nc], operands[ni + nc:]
        finals, ys = outs[:nc], outs[nc:]
        if n == 0:
            for final, init in zip(finals, current):
                np.copyto(final, init)
            return
        prefix = [self.index] + invariants
        for count, i in enumerate(range(n - 1, -1, -1) if step.reverse else range(n)):
            # the buffers alternate so that the last iteration (count n - 1) writes into finals
            written = finals if (n - 1 - count) % 2 == 0 else self.spare
            self.index[()] = i
            # x[i, ...]: a view even of a 1-d stack (x[i] would be a numpy scalar, a copy)
            body.run(prefix + current + [x[i, ...] for x in xs], written + [y[i, ...] for y in ys], pool)
            current = written

    def _run_while(self, operands: list, outs: list, pool: ThreadPool) -> None:
        ni = self.step.num_invariant
        condition, body = self.regions
        invariants, current = operands[:ni], operands[ni:]
        buffers = (outs, self.spare)
        count, bound = 0, self.max_trip_count
        while True:
            condition.run(invariants + current, [self.go], pool)
            if not self.go:
                break
            if count == bound:
                raise RuntimeError(exceeded_bound_message(count))
            written = buffers[count % 2]
            body.run(invariants + current, written, pool)
            current, count = written, count + 1
        if current is not outs:
            for out, value in zip(outs, current):
                np.copyto(out, value)


class BoundRegion:
    """A region's bound plan, run once per iteration with its results written into arrays the
    caller owns (views into stacked results, a carried value's next buffer).  Its kernels go
    through the lean launcher (``lezero.runtime.launch``: one ctypes call each, the per-iteration
    cost of a loop); the caller holds the lock of the plan the region belongs to, which guards the
    region's arena too."""

    def __init__(self, plan: CpuPlan):
        from lezero.runtime.launch import lean_launches  # launch.py imports this module

        self.plan = plan
        self.launches = lean_launches(plan)
        self.copies = [(i, ref, t) for i, (written_in_place, ref, t) in enumerate(plan.outputs) if not written_in_place]

    def pack(self, arguments: list, keys: list, pool: ThreadPool) -> None:
        """Lay out the loop invariants its kernels read pre-packed (``CpuPlan.packed_inputs``),
        once per run of the loop: ``arguments`` are the region's first arguments (the index, if
        any, and the invariants), ``keys`` theirs (``PackedInput.refresh``)."""
        for packed in self.plan.packed_inputs:
            packed.refresh(arguments[packed.where], keys[packed.where], pool)

    def fixed_array(self, ref, t) -> np.ndarray:
        """The array of an arena slot or constant of the region."""
        return _buffer(ref, t, self.plan.arena, self.plan.plan.constants)

    def run(self, inputs: list, outputs: list, pool: ThreadPool) -> None:
        for launch in self.launches:
            launch(inputs, outputs, pool)
        for i, ref, t in self.copies:
            source = (inputs if ref.kind == "input" else outputs)[ref.where] if ref.kind in ("input", "output") \
                else self.fixed_array(ref, t)
            np.copyto(outputs[i], source)


def run_plan(plan: CpuPlan, inputs: list[np.ndarray], pool: ThreadPool, keys=None) -> list[np.ndarray]:
    """The plan's results; ``keys``: per argument, what ``PackedInput.refresh`` compares (None: pack
    every argument that a kernel reads pre-packed)."""
    results = _result_arrays(plan)
    with plan.lock:
        for packed in plan.packed_inputs:  # a traced module's weights (issue 17)
            packed.refresh(inputs[packed.where], None if keys is None else keys[packed.where], pool)
        if plan.native is not None:
            plan.native.run_once(inputs, results, pool)
        else:
            for launch in plan.launches:
                run_launch(launch, inputs, results, pool, keys)
        _copy_results(plan, inputs, results)
    return results


# issue 14: the collectives' host steps
class BoundCollectiveStep(BoundHostStep):
    """A collective's ``HostStep`` bound to memory.  ``lz.all_reduce_start`` hands its operand's
    buffer to the process group's communication thread and writes the request's number into its
    token; ``lz.all_reduce_wait`` blocks on the token's request and copies the reduced buffer into
    its result; ``lz.all_reduce`` does both at once, in its result buffer.  The start reduces an
    arena slot in place when only it and its waits read the value (a bucket's flat array: the
    memory plan keeps it until the wait, which reads it), else a fresh copy per run: an eager
    one-op start (a function argument) is one cached runner that several buckets' requests may be
    in flight through at once, so a buffer of the step's own would be shared between them."""

    def __init__(self, step: HostStep, regions: list, constants: list, arena: np.ndarray):
        self.step, self.name, self.checks = step, step.name, None
        kernel = step.op
        self.operands = [(ref, _buffer(ref, v.type, arena, constants)) for ref, v in zip(step.operands, kernel.operands)]
        self.results = [(ref, _buffer(ref, r.type, arena, constants)) for ref, r in zip(step.results, kernel.results)]
        op = collective_in(kernel)
        attrs = op.definition.attrs(op)
        self.reduce_op, self.tag = attrs.get("op"), attrs.get("tag")
        self.copies = False  # whether a start reduces a copy of its operand (see the docstring)
        if self.name == START:
            x = kernel.operands[0]
            exclusive = step.operands[0].kind == "arena" and all(
                u.op is kernel or (u.op.name == "lz.kernel" and getattr(collective_in(u.op), "name", "") == WAIT)
                for u in x.uses)
            self.copies = not exclusive

    def run(self, inputs: list, results: list, pool: ThreadPool, keys=None) -> None:
        operands = self._arrays(self.operands, inputs, results)
        (out,) = self._arrays(self.results, inputs, results)
        if self.name == START:
            x = np.array(operands[0], copy=True) if self.copies else operands[0]
            out[()] = start_all_reduce(x, self.reduce_op, self.tag)
            return
        if self.name == ALL_REDUCE:
            np.copyto(out, operands[0])
            wait_all_reduce(start_all_reduce(out, self.reduce_op, self.tag), out)
            return
        reduced = wait_all_reduce(int(operands[0]), operands[1])
        if reduced.ctypes.data != out.ctypes.data:
            np.copyto(out, reduced)


class Profiling:
    """The hook ``lezero.profiler.profile`` sets while it records (issue 16): ``recorder`` has
    ``run_plan(plan, inputs, pool) -> results`` (times each launch with ``profile_plan``) and
    ``compiled(name, start, end, cache stats before, after)`` (a plan built); ``None`` when nothing
    records."""

    recorder = None


@dataclass(frozen=True)
class KernelTiming:
    """One launch of a profiled run: the kernel's ``name`` (its symbol), ``kind`` (partition's:
    ``elementwise``, ``reduction``, ``single``, ``matmul``, ``conv``), wall ``seconds`` of the
    launch (``time.perf_counter`` around it: the ctypes call and, for a ``parallel`` launch, the
    hand-off to the thread pool), ``flops`` (codegen's ``estimate_flops``), ``bytes`` (every
    operand and result buffer read or written once: ``bytes_accessed``) and whether the launch
    was split over the thread pool (``parallel``; else it ran on the calling thread)."""

    name: str
    kind: str
    seconds: float
    flops: int
    bytes: int
    parallel: bool
    start: float = 0.0  # time.perf_counter() when the launch began (lezero.profiler's trace)

    @property
    def gflops_per_second(self) -> float:
        return self.flops / self.seconds / 1e9 if self.seconds > 0 else 0.0

    @property
    def gbytes_per_second(self) -> float:
        return self.bytes / self.seconds / 1e9 if self.seconds > 0 else 0.0


def profile_plan(plan: CpuPlan, inputs: list[np.ndarray], pool: ThreadPool) -> tuple[list, list[KernelTiming]]:
    """Run ``plan`` once as ``run_plan`` does, timing each launch: ``(results, one KernelTiming
    per launch in launch order)``.  A loop of its own: ``run_plan``'s has no profiling branch."""
    results = _result_arrays(plan)
    rows = []
    clock = time.perf_counter
    with plan.lock:
        for packed in plan.packed_inputs:
            packed.refresh(inputs[packed.where], None, pool)
        for planned, launch in zip(plan.plan.launches, plan.launches):
            start = clock()
            run_launch(launch, inputs, results, pool)
            seconds = clock() - start
            if isinstance(planned, HostStep):  # the whole step, its regions' kernels inside it
                rows.append(KernelTiming(launch.name, "control_flow", seconds, 0, 0, False, start))
                continue
            rows.append(KernelTiming(launch.name, planned.kind, seconds, planned.kernel.flops,
                                     planned.kernel.bytes_accessed, launch.parallel, start))
        _copy_results(plan, inputs, results)
    return results, rows


class CompiledFunction:
    """A function compiled for the CPU; call it with numpy arrays (``profile`` for a call that
    times each kernel).  Subclasses for other targets set ``target`` and override ``bind_plan``,
    ``__call__`` and ``runner``.

    ``prepacked_weights``: the kernels read the function's weight arguments pre-packed
    (``schedule.WEIGHT_ARGUMENTS_ATTR``), packed before a call unless its keys say they are
    unchanged (``run_plan``; ``lezero.jit.trace`` gives them).  Without it (``lz.compile`` of a
    traced graph: no keys) the list is dropped and each GEMM packs a weight block by block as it
    reads it, in cache: a pack of the whole weight before the call writes and reads back its packed
    copy, and measured no faster (``benchmarks/packed_weights.py``)."""

    target = "cpu"

    def __init__(self, module: ModuleOp, entry: str, cache: KernelCache | None = None,
                 pool: ThreadPool | None = None, cpu: CpuTarget | str | None = None,
                 prepacked_weights: bool = False):
        self.cpu = cpu_target(cpu)  # host code (kernels, CPU fallbacks) is generated for this CPU
        self.cpu.require_executable(f"@{entry}")
        verify(module)
        self.module = module if prepacked_weights else without_weight_arguments(module)
        self.entry = entry
        self.func = self.module.lookup(entry)
        self.cache = cache or default_cache()
        self.pool = pool or default_pool()
        self._plans: dict[tuple, CpuPlan] = {}
        self._plans_lock = threading.Lock()

    def plan_for(self, shapes: list[tuple], planned: list | None = None):
        """The bound plan for argument ``shapes`` (built on first use; ``planned``: its kernels where
        the caller has them, ``lezero.runtime.plan.build_plan``)."""
        key = tuple(shapes)
        plan = self._plans.get(key)
        if plan is None:
            with self._plans_lock:
                plan = self._plans.get(key)
                if plan is None:
                    started, cache_before = time.perf_counter(), replace(self.cache.stats)  # for lezero.profiler
                    try:
                        specialized = specialize(self.module, self.entry, list(shapes), self.target)
                    except IRError as e:
                        shown = ", ".join(format_shape(s) for s in shapes)
                        raise InputError(f"@{self.entry} cannot run on inputs of shapes ({shown}): {e.message}",
                                         e.location) from None
                    plan = self.bind_plan(build_plan(specialized, self.entry, self.cpu, cache=self.cache,
                                                     planned=planned))
                    self._plans[key] = plan
                    if Profiling.recorder is not None:
                        Profiling.recorder.compiled(f"@{self.entry}", started, time.perf_counter(), cache_before,
                                                    self.cache.stats)
        return plan

    def bind_plan(self, plan: ExecutionPlan):
        return bind_plan(plan, self.cache, self.cpu)

    def runner(self, shapes):
        """The plan for argument ``shapes`` as a lean ``run(inputs, outs=None) -> list of arrays``
        (``lezero.runtime.launch``) that checks nothing: the caller guarantees C-contiguous arrays
        of the argument dtypes and exactly these shapes.  For the eager frontend and optimizers."""
        from lezero.runtime.launch import lean_runner

        return lean_runner(self.plan_for([tuple(s) for s in shapes]), self.pool)

    def _checked_inputs(self, arrays) -> list[np.ndarray]:
        return [np.require(a, requirements="C") for a in check_arguments(self.func, arrays)]

    def __call__(self, *arrays):
        inputs = self._checked_inputs(arrays)
        plan = self.plan_for([a.shape for a in inputs])
        if Profiling.recorder is not None and isinstance(plan, CpuPlan):
            results = Profiling.recorder.run_plan(plan, inputs, self.pool)
        else:
            results = run_plan(plan, inputs, self.pool)
        return results[0] if len(results) == 1 else tuple(results)

    def profile(self, *arrays) -> tuple[list[np.ndarray], list[KernelTiming]]:
        """Call the function once, timing each kernel launch: ``(the list of results, a
        KernelTiming per launch)``.  The plan is built and its kernels loaded before the timing;
        the first run of a plan still touches its arena first, so profile a warmed-up function
        to see steady-state times.  CPU plans only (a subclass's plans raise)."""
        inputs = self._checked_inputs(arrays)
        plan = self.plan_for([a.shape for a in inputs])
        if not isinstance(plan, CpuPlan):
            raise NotImplementedError(f"profile times CPU launches; {self.target} plans are not profiled")
        return profile_plan(plan, inputs, self.pool)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} @{self.entry}: {self.func.function_type}, {len(self._plans)} plan(s)>"
