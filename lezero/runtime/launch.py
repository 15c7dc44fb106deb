"""Lean plan runners, for callers that guarantee their inputs (the eager frontend, optimizers).

``CompiledFunction.__call__`` checks every input and patches pointers through numpy's ``ctypes``
attribute, which costs microseconds per array: fine for a whole model, too much for an eager
``a + b`` whose kernel runs in a microsecond.  ``lean_runner(plan, pool)`` turns a plan into
``run(inputs, outs=None) -> list of arrays`` that checks nothing and patches pointers in machine
code: a tiny *launcher*, JIT-compiled once per number of patched buffers, takes a launch
descriptor (the kernel's address, its work items, its fixed pointer table of constants and arena
slots, the slots to patch) and the numpy arrays themselves (as ``PyObject*``), copies the table
onto its stack, writes each array's data pointer into its slot (read straight from the
``PyArrayObject``: the ``data`` field follows ``PyObject_HEAD``, checked at start-up, else the
generic ``run_plan`` path is used), and calls the kernel: one ctypes call per launch, about
0.6 us.  It holds no shared state, so plans without an arena run without a lock.  A launch split
over the thread pool patches its fixed table in place instead (``lz_patch_<n>``: every thread
reads it) and hands the kernel itself to the pool; such a plan runs under its lock.

``outs`` lets a caller name the arrays the results go to, e.g. an optimizer writing a parameter's
update into the parameter itself (safe for an elementwise kernel that reads the aliased operand
at the index it writes, which the kernel ABI guarantees: all results of an index are computed
before any is stored).

A kernel with bounds checks has a status buffer among its fixed pointers; its launch reads each
check's flag afterwards (one ctypes read each: ~0.1 us when nothing is out of range, then
``check_status`` raises), and such a plan always runs under its lock, since the status buffer is
shared state (a concurrent call could otherwise report, and clear, another call's error).
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np

from lezero.codegen.llvm.jit import compile_module
from lezero.codegen.index_checks import SLOTS_PER_CHECK
from lezero.runtime.cpu import BoundHostStep, Profiling, check_status, run_launch
from lezero.runtime.plan import launch_count

# offsetof(PyArrayObject, data): PyObject_HEAD is a refcount and a type pointer.
_DATA_OFFSET = 2 * ctypes.sizeof(ctypes.c_void_p)


def _data_offset_ok() -> bool:
    """Whether ``PyArrayObject.data`` sits where the launcher reads it (not on a debug build)."""
    probe = [np.empty(n, np.float32) for n in (1, 7, 1024)]
    return all(ctypes.c_void_p.from_address(id(a) + _DATA_OFFSET).value == a.ctypes.data for a in probe)


USE_LAUNCHER = _data_offset_ok()


class _Descriptor(ctypes.Structure):
    """What a launcher reads besides the arrays (one per launch, never written after set-up)."""

    _fields_ = [("kernel", ctypes.c_void_p), ("work_items", ctypes.c_int64), ("total", ctypes.c_int64),
                ("fixed", ctypes.c_void_p), ("slots", ctypes.c_void_p)]


_DESCRIPTOR_TYPE = "{void (i8**, i64, i64)*, i64, i64, i8**, i64*}"


def _patch_lines(n: int, table: str) -> list[str]:
    """IR storing each object's data pointer into its slot of ``table``."""
    lines = [f"  %sp = getelementptr {_DESCRIPTOR_TYPE}, {_DESCRIPTOR_TYPE}* %d, i32 0, i32 4",
             "  %slots = load i64*, i64** %sp"]
    for i in range(n):
        lines += [
            f"  %field{i} = getelementptr i8, i8* %o{i}, i64 {_DATA_OFFSET}",
            f"  %fieldp{i} = bitcast i8* %field{i} to i8**",
            f"  %data{i} = load i8*, i8** %fieldp{i}",
            f"  %slotp{i} = getelementptr i64, i64* %slots, i64 {i}",
            f"  %slot{i} = load i64, i64* %slotp{i}",
            f"  %at{i} = getelementptr i8*, i8** {table}, i64 %slot{i}",
            f"  store i8* %data{i}, i8** %at{i}",
        ]
    return lines


def _launcher_ir(n: int) -> str:
    """``lz_launch_<n>(descriptor, obj_0 .. obj_{n-1})`` runs every work item on a copy of the
    pointer table on its stack; ``lz_patch_<n>(descriptor, obj_0 ..)`` patches the fixed table
    itself, for a launch split over the thread pool (whose threads all read that table; the
    caller holds the plan's lock)."""
    objects = "".join(f", i8* %o{i}" for i in range(n))
    fields = [f"  %{name}p = getelementptr {_DESCRIPTOR_TYPE}, {_DESCRIPTOR_TYPE}* %d, i32 0, i32 {i}"
              for i, name in enumerate(("k", "w", "t", "f"))]
    lines = [
        f"define void @lz_launch_{n}({_DESCRIPTOR_TYPE}* %d{objects}) {{",
        "entry:",
        *fields,
        "  %kernel = load void (i8**, i64, i64)*, void (i8**, i64, i64)** %kp",
        "  %w = load i64, i64* %wp",
        "  %total = load i64, i64* %tp",
        "  %fixed = load i8**, i8*** %fp",
        "  %buf = alloca i8*, i64 %total, align 16",
        "  %empty = icmp eq i64 %total, 0",
        "  br i1 %empty, label %patch, label %copy",
        "copy:",
        "  %i = phi i64 [0, %entry], [%next, %copy]",
        "  %src = getelementptr i8*, i8** %fixed, i64 %i",
        "  %p = load i8*, i8** %src",
        "  %dst = getelementptr i8*, i8** %buf, i64 %i",
        "  store i8* %p, i8** %dst",
        "  %next = add i64 %i, 1",
        "  %done = icmp eq i64 %next, %total",
        "  br i1 %done, label %patch, label %copy",
        "patch:",
        *_patch_lines(n, "%buf"),
        "  call void %kernel(i8** %buf, i64 0, i64 %w)",
        "  ret void",
        "}",
        f"define void @lz_patch_{n}({_DESCRIPTOR_TYPE}* %d{objects}) {{",
        fields[3],
        "  %fixed = load i8**, i8*** %fp",
        *_patch_lines(n, "%fixed"),
        "  ret void",
        "}",
    ]
    return "\n".join(lines) + "\n"


@functools.cache
def launcher(n: int):
    """The launchers for ``n`` patched buffers, as ctypes functions (calls release the GIL):
    ``(whole, patch)``."""
    module = compile_module(_launcher_ir(n))
    objects = [ctypes.py_object] * n
    whole = module.ctypes_function(f"lz_launch_{n}", None, [ctypes.c_void_p] + objects)
    patch = module.ctypes_function(f"lz_patch_{n}", None, [ctypes.c_void_p] + objects)
    return whole, patch


class _LeanLaunch:
    """One kernel launch: its descriptor (kernel, fixed pointer table, slots to patch)."""

    def __init__(self, launch):
        total = len(launch.pointers)
        self.fixed = (ctypes.c_void_p * max(total, 1))(*[launch.pointers[i] for i in range(total)])
        # inputs first (in argument order), then outputs: the order the objects are passed in
        patches = sorted(launch.patches, key=lambda p: (p[1] != "input", p[2], p[0]))
        self.inputs = [index for _, kind, index in patches if kind == "input"]
        self.outputs = [index for _, kind, index in patches if kind == "output"]
        self.slots = (ctypes.c_int64 * max(len(patches), 1))(*[slot for slot, _, _ in patches])
        self.descriptor = _Descriptor(ctypes.cast(launch.function, ctypes.c_void_p).value, launch.work_items,
                                      total, ctypes.addressof(self.fixed), ctypes.addressof(self.slots))
        self.address = ctypes.addressof(self.descriptor)
        self.work_items = launch.work_items
        self.parallel = launch.parallel
        self.name = launch.name
        self.checks, self.status = launch.checks, launch.status
        self.flags = () if launch.checks is None else tuple(range(0, SLOTS_PER_CHECK * len(launch.checks),
                                                                   SLOTS_PER_CHECK))
        self.function = launch.function
        self.whole, self.patch = launcher(len(patches))

    def objects(self, inputs, outs) -> list:
        return [inputs[i] for i in self.inputs] + [outs[j] for j in self.outputs]

    def run(self, objects, pool) -> None:
        if self.parallel:  # under the plan's lock: the fixed table is shared state
            self.patch(self.address, *objects)
            pool.parallel_for(self.function, self.fixed, self.work_items)
        else:
            self.whole(self.address, *objects)
        for k in self.flags:
            if self.status[k]:
                check_status(self.checks, self.status)


def lean_launches(plan) -> list:
    """``plan``'s launches as ``launch(inputs, outs, pool)`` calls: a kernel through its lean
    launcher (``run_launch`` without it), a host step as it is (a region's
    steps, ``lezero.runtime.cpu.BoundRegion``)."""
    calls = []
    for launch in plan.launches:
        if isinstance(launch, BoundHostStep):
            calls.append(launch.run)
        elif USE_LAUNCHER:
            lean = _LeanLaunch(launch)
            calls.append(lambda inputs, outs, pool, lean=lean: lean.run(lean.objects(inputs, outs), pool))
        else:
            calls.append(functools.partial(run_launch, launch))
    return calls


def lean_runner(plan, pool):
    """``run(inputs, outs=None, keys=None) -> list[np.ndarray]`` for ``plan``: no checks (the caller
    passes C-contiguous arrays of the argument dtypes and the plan's shapes; ``outs``, when given,
    are arrays of the result types to write into; ``keys``, per argument, say which weights read
    pre-packed are unchanged: ``lezero.runtime.cpu.PackedInput``).  ``run.kernel_count`` is the
    plan's number of launches (an output may alias an input only when it is 1);
    ``run.checks_indices``: whether a kernel has bounds checks (then a call may raise
    ``IndexError``)."""
    run = _lean_runner(plan, pool)
    run.kernel_count = launch_count(plan.plan)
    run.checks_indices = any(launch.checks is not None for launch in plan.launches) or bool(plan.plan.host_steps)
    return run


def _into(outs, results: list) -> list:
    """``results``, or copied into ``outs`` when the caller named the arrays to write."""
    if outs is None:
        return results
    for out, r in zip(outs, results):
        np.copyto(out, r)
    return outs


def _lean_runner(plan, pool):
    from lezero.runtime.cpu import run_plan

    specs = [(tuple(t.shape), t.element_type.numpy_dtype) for _, _, t in plan.outputs]
    all_in_place = all(in_place for in_place, _, _ in plan.outputs)
    # a host step runs its regions in Python; run_plan lays out the weights read pre-packed
    if not USE_LAUNCHER or not all_in_place or plan.plan.host_steps or plan.packed_inputs:
        def run_generic(inputs, outs=None, keys=None):
            recorder = Profiling.recorder
            return _into(outs, run_plan(plan, inputs, pool, keys) if recorder is None
                         else recorder.run_plan(plan, inputs, pool))
        return run_generic

    launches = [_LeanLaunch(launch) for launch in plan.launches]
    empty = np.empty
    lock = plan.lock
    if len(launches) == 1 and plan.arena.size == 0 and not launches[0].parallel:
        (only,) = launches
        f, d = only.whole, only.address
        n_in = len(only.inputs)
        if only.outputs == list(range(len(specs))) and len(specs) == 1 and only.inputs == list(range(n_in)):
            (shape, dtype), = specs
            if only.checks is None:
                def run_one(inputs, outs=None, keys=None, _keep=(plan, only)):  # _keep: the tables and kernels
                    out = empty(shape, dtype) if outs is None else outs[0]
                    f(d, *inputs, out)
                    return [out]
                return run_one
            status, flags, checks = only.status, only.flags, only.checks

            def run_one_checked(inputs, outs=None, keys=None, _keep=(plan, only)):
                out = empty(shape, dtype) if outs is None else outs[0]
                with lock:
                    f(d, *inputs, out)
                    for k in flags:
                        if status[k]:
                            check_status(checks, status)
                return [out]
            return run_one_checked

        if only.checks is None:
            def run_single(inputs, outs=None, keys=None, _keep=plan):
                if outs is None:
                    outs = [empty(shape, dtype) for shape, dtype in specs]
                f(d, *only.objects(inputs, outs))
                return outs
            return run_single

    def run_launches(inputs, outs=None, keys=None, _keep=plan):
        if Profiling.recorder is not None:  # lezero.profiler records: time each launch
            return _into(outs, Profiling.recorder.run_plan(plan, inputs, pool))
        if outs is None:
            outs = [empty(shape, dtype) for shape, dtype in specs]
        with lock:  # the arena is shared between calls
            for launch in launches:
                launch.run(launch.objects(inputs, outs), pool)
        return outs
    return run_launches
