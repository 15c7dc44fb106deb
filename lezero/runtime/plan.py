"""The execution plan: a scheduled function as data, built once, run by three executors.

After ``lezero.codegen.schedule`` a function holds constants, ``lz.kernel`` ops in launch order
and its return, and memory-plan has given each kernel result a byte offset in the arena of its
kernel's device (``-1``: written straight into an output buffer).  ``build_plan`` reads that
once (the attribute names are memory-plan's constants) and returns an ``ExecutionPlan``:

- **buffers**: where each value lives, as a ``BufferRef``: an argument (``input``), a result
  buffer the caller provides (``output``), a byte offset in one device's arena (``arena``), a
  constant (``constant``: an index into ``plan.constants``, C-contiguous arrays of their storage
  dtypes); and each device's arena size;
- **launches**: per kernel, in schedule order, the device it runs on, its code lowered by that
  device's backend (none for a ``transfer``), its operand and result buffers, and whether it is
  worth splitting over the thread pool (``split_over_threads``: the one place that decides);
- **outputs**: where each result is after the last launch; ``BufferRef("output", i)`` means
  written in place, anything else is copied from there.

A bad schedule is rejected here, once: an op left outside any kernel.  The executors bind a plan
to memory and run it: ``runtime.cpu`` (a numpy arena, ctypes or the lean launcher),
``runtime.cuda`` (torch arenas, Triton launches, transfers) and ``runtime.native`` (C tables
around the kernels' object code: an executable without Python).  ``fold_constant_kernels`` (the
native build) evaluates a kernel that reads only constants here, with the reference, and its
results become constants: shipped as weights instead of launched.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lezero.codegen.schedule import schedule
from lezero.codegen.targets import backend
from lezero.ir.core import FuncOp, ModuleOp, Operation
from lezero.ir.diagnostics import IRError
from lezero.ir.dialect.device import DEVICES
from lezero.ir.types import FunctionType, TensorType
from lezero.passes.memory_plan import OFFSETS_ATTR, arena_attributes
from lezero.passes.partition import TRANSFER_KIND
from lezero.passes.placement import HOST

# A kernel runs on the calling thread unless it writes this many bytes or does this many flops.
# The native pool hands work over in ~1.3 us and the caller runs any chunk a late worker has not
# claimed, so splitting rarely loses; end to end on 2 threads (benchmarks/thread_pool.py and the
# model zoo) 16 KB / 1 MFLOP beat the Python pool's 256 KB / 20 MFLOP: mobilenet_v2 1.63x -> 1.28x
# ORT, efficientnet_b0 1.21x -> 1.12x; 4 KB / 0.25 MFLOP was the same within noise.
PARALLEL_MIN_BYTES = 1 << 14
PARALLEL_MIN_FLOPS = 1_000_000


def specialize(module: ModuleOp, entry: str, shapes: list[tuple], target: str = "cpu") -> ModuleOp:
    """A copy of ``module`` whose ``@entry`` has static argument types, optimized, partitioned
    for ``target``, fused and memory-planned (``lezero.codegen.schedule.schedule``)."""
    module = module.clone()
    func = module.lookup(entry)
    for arg, shape in zip(func.arguments, shapes):
        arg.type = TensorType(shape, arg.type.element_type)
    func.function_type = FunctionType([a.type for a in func.arguments], func.function_type.results)
    return schedule(module, target)


@dataclass(frozen=True)
class BufferRef:
    """Where a buffer is.  ``kind``: ``"input"`` / ``"output"`` (``where``: the argument or result
    index), ``"arena"`` (``where``: the byte offset in ``device``'s arena), ``"constant"``
    (``where``: the index in ``ExecutionPlan.constants``); a native program adds ``"weights"`` and
    ``"status"`` (byte offset in the weights blob, int64 offset in the status array)."""

    kind: str
    where: int
    device: str = HOST


@dataclass
class Launch:
    """One kernel of the schedule.  ``kernel``: what the device's backend lowered it to (a
    ``LoweredKernel`` on the CPU, a ``TritonKernel`` on cuda; None for a transfer)."""

    op: Operation
    name: str
    kind: str
    device: str
    operands: list
    results: list
    kernel: object = None
    split_over_threads: bool = False

    @property
    def buffers(self) -> list:
        """The kernel's buffers in ABI order: operands, then results."""
        return self.operands + self.results

    @property
    def index_checks(self):
        """The kernel's bounds checks (``lezero/codegen/index_checks.py``), or None."""
        return None if self.kernel is None else self.kernel.index_checks


@dataclass
class ExecutionPlan:
    """A scheduled function as data (see the module docstring)."""

    module: ModuleOp
    func: FuncOp
    arena_sizes: dict                    # device -> bytes of its arena
    constants: list = field(default_factory=list)
    launches: list = field(default_factory=list)
    outputs: list = field(default_factory=list)  # BufferRef per result
    folded_kernels: int = 0              # kernels of constants only, evaluated while planning

    @property
    def result_types(self) -> list:
        """The static type of each result (of the returned values: the schedule's)."""
        return [v.type for v in self.func.return_op.operands]

    def written_in_place(self, index: int) -> bool:
        """Whether the last kernel writing result ``index`` writes it into the output buffer."""
        return self.outputs[index] == BufferRef("output", index)


class BoundPlan:
    """What an executor's plan bound to memory (``CpuPlan``, ``CudaPlan``) shares: its ``plan``,
    and the scheduled module and function it came from (for tools and tests that read them)."""

    plan: ExecutionPlan

    @property
    def module(self) -> ModuleOp:
        return self.plan.module

    @property
    def func(self) -> FuncOp:
        return self.plan.func


def lower_for_device(op: Operation, device: str, cpu=None, cache=None):
    """``op`` lowered by the backend of ``device`` (``lezero.codegen.targets``: imported on first
    use, so cuda's needs torch and triton only then); the CPU's for ``cpu``, through ``cache`` (a
    ``KernelCache``) when given: a kernel it holds is not lowered again, one it lacks starts compiling."""
    if device == HOST and cache is not None:
        return cache.plan_kernel(op, cpu)
    lower = backend(device).lower_kernel
    return lower(op, cpu=cpu) if device == HOST else lower(op)


def splits_over_threads(kernel, op: Operation) -> bool:
    """Whether a CPU kernel has enough work to split over the thread pool."""
    out_bytes = sum(r.type.nbytes for r in op.results)
    return kernel.work_items > 1 and (out_bytes >= PARALLEL_MIN_BYTES or kernel.flops >= PARALLEL_MIN_FLOPS)


def build_plan(module: ModuleOp, entry: str, cpu=None, fold_constant_kernels: bool = False,
               cache=None) -> ExecutionPlan:
    """The ``ExecutionPlan`` of ``@entry`` in a scheduled ``module``, CPU kernels lowered for
    ``cpu`` (a ``CpuTarget``), through the kernel ``cache`` when given (the JIT's executors)."""
    func = module.lookup(entry)
    sizes = {}
    for device in DEVICES:
        attr = func.attributes.get(arena_attributes(device)[0])
        sizes[device] = int(attr.value) if attr is not None else 0
    plan = ExecutionPlan(module, func, sizes)
    returned = func.return_op.operands
    output_slot: dict[int, int] = {}
    for i, v in enumerate(returned):
        output_slot.setdefault(id(v), i)
    where: dict[int, BufferRef] = {id(a): BufferRef("input", i) for i, a in enumerate(func.arguments)}

    def constant(array: np.ndarray, t: TensorType) -> BufferRef:
        plan.constants.append(np.ascontiguousarray(array, t.element_type.numpy_dtype).reshape(t.shape))
        return BufferRef("constant", len(plan.constants) - 1)

    for op in func.entry_block.ops:
        if op.name == "lz.constant":
            where[id(op.result)] = constant(op.attributes["value"].array, op.result.type)
        elif op.name == "lz.kernel":
            operands = [where[id(v)] for v in op.operands]
            if fold_constant_kernels and all(ref.kind == "constant" for ref in operands):
                # It computes from constants only (a broadcast weight, a weight transposed):
                # evaluate it once here, with the reference.
                values = op.definition.evaluate(op, [plan.constants[ref.where] for ref in operands])
                for r, array in zip(op.results, values):
                    where[id(r)] = constant(array, r.type)
                plan.folded_kernels += 1
                continue
            attrs = op.definition.attrs(op)
            device = attrs.device  # where it runs and its results live (a transfer: its destination)
            for r, offset in zip(op.results, op.attributes[OFFSETS_ATTR].values):
                where[id(r)] = BufferRef("output", output_slot[id(r)]) if offset < 0 else \
                    BufferRef("arena", offset, device)
            launch = Launch(op, attrs.name, attrs.kind, device, operands, [where[id(r)] for r in op.results])
            if attrs.kind != TRANSFER_KIND:
                launch.kernel = lower_for_device(op, device, cpu, cache)
                launch.split_over_threads = device == HOST and splits_over_threads(launch.kernel, op)
            plan.launches.append(launch)
        elif op.name != "func.return":
            raise IRError(f"'{op.name}' op is left outside any kernel after fusion", op.location)
    plan.outputs = [where[id(v)] for v in returned]
    return plan
