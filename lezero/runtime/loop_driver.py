"""The native loop of ``lz.for``: every iteration of a body's kernel launches run in machine code.

``BoundHostStep`` runs a loop body once per iteration (``lezero.runtime.cpu``); from Python that
costs ~3 us per iteration and launch (the body's region call, the slices ``xs[i]``/``ys[i]``, a
lean launch per kernel) besides the kernels themselves: for an LSTM step at batch 1 (a 12 us
recurrent GEMM and a 1 us gate kernel) the host loop was a third of the time.  So a body made of
kernels only runs as one ctypes call to ``lz_run_for`` (``_DRIVER_IR``, JIT-compiled once per
process, like the launchers and the thread pool; ``@KERNEL_FIELDS@`` and ``@COPY_FIELDS@`` stand
for the loads of an entry's fields), which walks a *loop program*: an int64 array
that lists, for each kernel of the body in launch order, the kernel, its pointer table, its work
items, its thread count and the table slots to write before each launch; and for each result the
body passes through unchanged (``BoundRegion.copies``) a ``memcpy``.

Every slot the program writes holds a buffer of the body (an argument or a result), whose address
at iteration ``c`` (``c`` counts 0..n-1; the index ``i`` is ``c``, or ``n - 1 - c`` in a reverse
loop) is ``(c == 0 ? first : c odd ? odd : even) + i * stride``: an invariant or the index buffer
has one address, a scanned input's slice or a stacked output's row moves by its row's bytes each
iteration, and a carried value alternates between its two buffers (the initial value read where
it is first, see ``BoundHostStep._run_for``).  Those four numbers per buffer are the only part of
the program that changes per call (the operands are the caller's arrays): ``NativeFor.run`` fills
them with one numpy scatter, then makes the one call.  A split launch goes to the thread pool's
native entry (``ThreadPool.native_entry``) from the machine code, as ``parallel_for`` would.

A body with a host step of its own (a nested loop) or a kernel with bounds checks (its status
buffer is read from Python after each launch) runs in the Python loop instead: ``native_for``
says why not (``None`` and the reason), and ``BoundHostStep`` keeps it as ``native_refusal``.
"""
from __future__ import annotations

import ctypes
import functools

import numpy as np

from lezero.codegen.index_checks import initial_status, status_error
from lezero.codegen.llvm.jit import compile_module

KERNEL, COPY = 0, 1
# A buffer's record in the program: first, even, odd (addresses), stride (bytes per index).
RECORD = 4

_DRIVER_IR = """
declare void @llvm.memcpy.p0.p0.i64(i8*, i8*, i64, i1)

define internal i64 @address(i64* %prog, i64 %at, i64 %select, i64 %i) alwaysinline {
entry:
  %base_at = add i64 %at, %select
  %base_p = getelementptr i64, i64* %prog, i64 %base_at
  %base = load i64, i64* %base_p
  %stride_at = add i64 %at, 3
  %stride_p = getelementptr i64, i64* %prog, i64 %stride_at
  %stride = load i64, i64* %stride_p
  %offset = mul i64 %i, %stride
  %address = add i64 %base, %offset
  ret i64 %address
}

define i64 @lz_run_for(i64* %prog, i64 %length, i64 %n, i64 %reverse, i64* %index, i8* %pool,
                       void (i8*, i8*, i8*, i64, i64)* %pool_run) {
entry:
  %any = icmp sgt i64 %n, 0
  br i1 %any, label %iteration, label %done
iteration:
  %c = phi i64 [0, %entry], [%c_next, %iteration_end]
  %last = sub i64 %n, 1
  %down = sub i64 %last, %c
  %is_reverse = icmp ne i64 %reverse, 0
  %i = select i1 %is_reverse, i64 %down, i64 %c
  store i64 %i, i64* %index
  %parity = and i64 %c, 1
  %alternate = add i64 %parity, 1
  %is_first = icmp eq i64 %c, 0
  %select = select i1 %is_first, i64 0, i64 %alternate
  br label %next_entry
next_entry:
  %pc = phi i64 [0, %iteration], [%slot_pc, %launched], [%copy_next, %copy]
  %more = icmp slt i64 %pc, %length
  br i1 %more, label %dispatch, label %iteration_end
dispatch:
  %kind_p = getelementptr i64, i64* %prog, i64 %pc
  %kind = load i64, i64* %kind_p
  %is_kernel = icmp eq i64 %kind, 0
  br i1 %is_kernel, label %kernel, label %copy
kernel:
@KERNEL_FIELDS@  %first_slot = add i64 %pc, 6
  br label %slot_loop
slot_loop:
  %slot_pc = phi i64 [%first_slot, %kernel], [%slot_next, %slot]
  %k = phi i64 [0, %kernel], [%k_next, %slot]
  %slots_left = icmp slt i64 %k, %slots
  br i1 %slots_left, label %slot, label %launch
slot:
  %where_p = getelementptr i64, i64* %prog, i64 %slot_pc
  %where = load i64, i64* %where_p
  %record_at = add i64 %slot_pc, 1
  %value = call i64 @address(i64* %prog, i64 %record_at, i64 %select, i64 %i)
  %where_ptr = inttoptr i64 %where to i64*
  store i64 %value, i64* %where_ptr
  %slot_next = add i64 %slot_pc, 5
  %k_next = add i64 %k, 1
  br label %slot_loop
launch:
  %fn = inttoptr i64 %fn_i to void (i8**, i64, i64)*
  %table = inttoptr i64 %table_i to i8**
  %split = icmp sgt i64 %threads, 1
  br i1 %split, label %pooled, label %serial
pooled:
  %fn_raw = inttoptr i64 %fn_i to i8*
  %table_raw = inttoptr i64 %table_i to i8*
  call void %pool_run(i8* %pool, i8* %fn_raw, i8* %table_raw, i64 %work, i64 %threads)
  br label %launched
serial:
  call void %fn(i8** %table, i64 0, i64 %work)
  br label %launched
launched:
  br label %next_entry
copy:
@COPY_FIELDS@  %dst_at = add i64 %pc, 2
  %dst_i = call i64 @address(i64* %prog, i64 %dst_at, i64 %select, i64 %i)
  %src_at = add i64 %pc, 6
  %src_i = call i64 @address(i64* %prog, i64 %src_at, i64 %select, i64 %i)
  %dst = inttoptr i64 %dst_i to i8*
  %src = inttoptr i64 %src_i to i8*
  call void @llvm.memcpy.p0.p0.i64(i8* %dst, i8* %src, i64 %bytes, i1 false)
  %copy_next = add i64 %pc, 10
  br label %next_entry
iteration_end:
  %c_next = add i64 %c, 1
  %again = icmp slt i64 %c_next, %n
  br i1 %again, label %iteration, label %done
done:
  ret i64 0
}
"""


def _entry_fields(fields) -> str:
    """IR loading the int64 fields ``(name, offset)`` of the program entry at ``%pc``."""
    return "".join(f"  %{name}_at = add i64 %pc, {offset}\n"
                   f"  %{name}_p = getelementptr i64, i64* %prog, i64 %{name}_at\n"
                   f"  %{name} = load i64, i64* %{name}_p\n" for name, offset in fields)


@functools.cache
def _driver():
    """``lz_run_for`` as a ctypes function (compiled once per process; calls release the GIL)."""
    module = compile_module(_DRIVER_IR
                            .replace("@KERNEL_FIELDS@", _entry_fields([("fn_i", 1), ("table_i", 2), ("work", 3),
                                                                       ("threads", 4), ("slots", 5)]))
                            .replace("@COPY_FIELDS@", _entry_fields([("bytes", 1)])))
    return module.ctypes_function("lz_run_for", ctypes.c_int64,
                                  [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int64,
                                   ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p])


def _refusal(launches, checks_allowed: bool = False) -> str | None:
    """Why these launches cannot run as one native program (None: they can)."""
    for launch in launches:
        if not hasattr(launch, "pointers"):
            return f"it holds a host step ({launch.name})"
        if launch.checks is not None and not checks_allowed:
            return f"{launch.name} checks its indices (its status is read after each launch)"
    return None


def native_for(region) -> tuple[NativeFor | None, str | None]:
    """``(NativeFor, None)`` for a ``BoundRegion`` whose iterations can run natively, else
    ``(None, why not)``."""
    why = _refusal(region.plan.launches)
    if why is not None:
        return None, f"its body: {why}: the loop runs in Python"
    return NativeFor(region.plan, region.copies, region.fixed_array), None


def native_plan(plan) -> NativeFor | None:
    """A whole ``CpuPlan`` as one native program run once per call (``NativeFor.run_once``):
    its launches without returning to Python between kernels; None for a plan with a host step
    (the launches then go one by one from Python).  Bounds checks are read after the last launch
    (``run_once``): a kernel that sees a bad index reads a clamped address, so the launches after
    it are safe, and the error raised is the same."""
    if len(plan.launches) < 2 or _refusal(plan.launches, checks_allowed=True) is not None:
        return None
    return NativeFor(plan)


class NativeFor:
    """A loop program (see the module docstring): built once per bound step or plan, its buffer
    records filled per call.  Buffers are numbered as the body sees them: its arguments, then its
    results, then fixed buffers that a pass-through result copies (an arena slot, a constant: the
    ``copies`` of a loop body, read through ``fixed_array``).  A plan's program has no copies
    (``run_plan`` copies those results) and runs as one iteration (``run_once``)."""

    def __init__(self, plan, copies=(), fixed_array=None):
        self.inputs = len(plan.plan.block.args)
        program: list[int] = []
        positions, buffers = [], []  # where each record goes, and which buffer it describes
        fixed: list[int] = []
        self.thread_at, self.work_items, self.parallel = [], [], []

        def record(buffer: int) -> None:
            positions.append(len(program))
            buffers.append(buffer)
            program.extend([0] * RECORD)

        for launch in plan.launches:
            self.thread_at.append(len(program) + 4)
            self.work_items.append(launch.work_items)
            self.parallel.append(launch.parallel)
            table = ctypes.addressof(launch.pointers)
            program += [KERNEL, ctypes.cast(launch.function, ctypes.c_void_p).value, table, launch.work_items, 1,
                        len(launch.patches)]
            for slot, kind, index in launch.patches:
                program.append(table + slot * ctypes.sizeof(ctypes.c_void_p))
                record(index if kind == "input" else self.inputs + index)
        for i, ref, t in copies:
            program += [COPY, t.nbytes]
            record(self.inputs + i)
            if ref.kind == "input":
                record(ref.where)
            elif ref.kind == "output":
                record(self.inputs + ref.where)
            else:  # an arena slot or a constant: one address
                record(-1 - len(fixed))
                source = fixed_array(ref, t)
                fixed.append(source.ctypes.data)
        self.program = np.array(program, np.int64)
        self.keepalive = [launch.pointers for launch in plan.launches]
        self.slots = (np.array(positions, np.int64)[:, None] + np.arange(RECORD)).reshape(-1)
        self.count = self.inputs + len(plan.outputs)
        self.records = np.zeros((self.count + len(fixed), RECORD), np.int64)
        for k, address in enumerate(fixed):
            self.records[self.count + k, :3] = address
        self.order = np.array([b if b >= 0 else self.count - 1 - b for b in buffers], np.int64)
        self.threads = 0
        self.index = np.zeros(1, np.int64)  # the iteration number run_once's program is given
        self.checked = [launch for launch in plan.launches if launch.checks is not None]

    def _use_threads(self, threads: int) -> None:
        """Each launch's thread count on a pool of ``threads`` (set when that changes)."""
        for at, items, parallel in zip(self.thread_at, self.work_items, self.parallel):
            self.program[at] = min(threads, items) if parallel else 1
        self.threads = threads

    def run(self, records: np.ndarray, n: int, reverse: bool, index: np.ndarray, pool) -> None:
        """Run ``n`` iterations; ``records`` is ``(first, even, odd, stride)`` per body argument
        and result (``self.records[:self.count]``, filled by the caller)."""
        if pool.num_threads != self.threads:
            self._use_threads(pool.num_threads)
        # asked per call: the workers (and their state) are new after a fork or a close()
        pool_run, pool_state = pool.native_entry() if pool.num_threads > 1 else (None, None)
        self.program[self.slots] = records[self.order].reshape(-1)
        _driver()(self.program.ctypes.data, len(self.program), n, int(reverse), index.ctypes.data, pool_state,
                  pool_run)

    def run_once(self, inputs: list, results: list, pool) -> None:
        """A plan's launches in one call: ``inputs`` and ``results`` (None where no kernel writes
        a result) are the plan's arguments and result arrays, each at one address."""
        addresses = [a.ctypes.data for a in inputs] + [0 if r is None else r.ctypes.data for r in results]
        self.records[:self.count, :3] = np.array(addresses, np.int64)[:, None]
        self.run(self.records, 1, False, self.index, pool)
        if self.checked:
            _raise_first_failed_check(self.checked)


def _raise_first_failed_check(launches) -> None:
    """The ``IndexError`` of the first of ``launches`` (in launch order) whose status says a check
    failed; every failed status is cleared for the next run."""
    first = None
    for launch in launches:
        message = status_error(launch.checks, launch.status)
        if message is not None:
            launch.status[:] = initial_status(launch.checks)
            first = first or message
    if first is not None:
        raise IndexError(first)
