"""The execution plan: a scheduled function as data, built once, run by three executors.

After ``lezero.codegen.schedule`` a function holds constants, ``lz.kernel`` ops in launch order
and its return, and memory-plan has given each kernel result a byte offset in the arena of its
kernel's device (``-1``: written straight into an output buffer).  ``build_plan`` reads that
once (the attribute names are memory-plan's constants) and returns an ``ExecutionPlan``:

- **buffers**: where each value lives, as a ``BufferRef``: an argument (``input``), a result
  buffer the caller provides (``output``), a byte offset in one device's arena (``arena``), a
  constant (``constant``: an index into ``plan.constants``, C-contiguous arrays of their storage
  dtypes; a constant a CPU kernel reads pre-packed, its ``packed_operands``, is packed here once,
  a constant of its own: issue 11); and each device's arena size;
- **launches**: per kernel, in schedule order, the device it runs on, its code lowered by that
  device's backend (none for a ``transfer``), its operand and result buffers, and whether it is
  worth splitting over the thread pool (``split_over_threads``: the one place that decides);
- **outputs**: where each result is after the last launch; ``BufferRef("output", i)`` means
  written in place, anything else is copied from there.

- **host steps**: a control-flow op of the schedule (``lz.for``, ``lz.while``, ``lz.if``) is a
  ``HostStep`` among the launches: its operand and result buffers and one ``ExecutionPlan`` per
  region (``region_plans``, built here from the region ``lezero.codegen.schedule`` scheduled as a
  function: its arguments are the block's arguments, its outputs the yielded values, its arena its
  own).  An executor runs a region's plan once per iteration with its inputs bound to views (the
  carried values' current buffers, ``xs[i]``) and its outputs to the buffers the next iteration
  reads (``ys[i]`` written in place, the carried values into a second buffer, swapped); the
  kernels of a region are lowered once.  A kernel holding a collective (``lz.all_reduce``,
  ``lz.all_reduce_start``, ``lz.all_reduce_wait``: issue 14) is a ``HostStep`` too, named after
  it, with no region plan: the executor enqueues it on the process group's communication thread
  or waits.

A bad schedule is rejected here, once: an op left outside any kernel.  The executors bind a plan
to memory and run it: ``runtime.cpu`` (a numpy arena, ctypes or the lean launcher),
``runtime.cuda`` (torch arenas, Triton launches, transfers) and ``runtime.native`` (C tables
around the kernels' object code: an executable without Python).  ``fold_constant_kernels`` (the
native build) evaluates a kernel that reads only constants here, with the reference, and its
results become constants: shipped as weights instead of launched.
"""
from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import numpy as np

from lezero.codegen.row_generic import MANY_SHAPES_ATTR
from lezero.codegen.schedule import REGION_ARENAS_ATTR, is_scheduled, schedule
from lezero.codegen.targets import backend
from lezero.ir.attributes import UnitAttr
from lezero.ir.core import FuncOp, ModuleOp, Operation
from lezero.ir.diagnostics import IRError
from lezero.ir.dialect.collective import COLLECTIVE_OPS
from lezero.ir.dialect.device import DEVICES
from lezero.ir.types import FunctionType, TensorType
from lezero.passes.memory_plan import OFFSETS_ATTR, arena_attributes
from lezero.passes.partition import CONTROL_FLOW_OPS, TRANSFER_KIND
from lezero.passes.placement import HOST
from lezero.runtime.progress import advance, progress

# A kernel runs on the calling thread unless it writes this many bytes or does this many flops.
# The native pool hands work over in ~1.3 us and the caller runs any chunk a late worker has not
# claimed, so splitting rarely loses; end to end on 2 threads (benchmarks/thread_pool.py and the
# model zoo) 16 KB / 1 MFLOP beat the Python pool's 256 KB / 20 MFLOP: mobilenet_v2 1.63x -> 1.28x
# ORT, efficientnet_b0 1.21x -> 1.12x; 4 KB / 0.25 MFLOP was the same within noise.
PARALLEL_MIN_BYTES = 1 << 14
PARALLEL_MIN_FLOPS = 1_000_000
# ... or reads this many bytes: a matrix-vector product over a weight (an LSTM step at batch 1:
# 1x256 @ 256x1024, 0.5 MFLOP and a 4 KB result) is bound by streaming the 1 MB weight, and split
# over 2 threads each core streams half of it from its own L2: 21 us -> 12 us per launch, b1 h256
# LSTM inference 9.3 -> 7.0 ms (benchmarks/rnn.py).
PARALLEL_MIN_READ_BYTES = 1 << 18


def specialize(module: ModuleOp, entry: str, shapes: list[tuple], target: str = "cpu") -> ModuleOp:
    """A copy of ``module`` whose ``@entry`` has static argument types, optimized, partitioned
    for ``target``, fused and memory-planned (``lezero.codegen.schedule.schedule``).  A function
    over ``?`` dims is marked as serving many shapes (``row_generic.MANY_SHAPES_ATTR``).  A module
    scheduled for ``target`` already, ``@entry`` at exactly ``shapes``, is returned as it is (a copy
    would change nothing: a schedule made by ``lezero.runtime.shape_substitution``)."""
    func = module.lookup(entry)
    if is_scheduled(module, target) and [a.type for a in func.arguments] == \
            [TensorType(tuple(s), a.type.element_type) for a, s in zip(func.arguments, shapes)]:
        return module
    module = module.clone()
    func = module.lookup(entry)
    if not all(arg.type.is_static for arg in func.arguments if isinstance(arg.type, TensorType)):
        func.attributes[MANY_SHAPES_ATTR] = UnitAttr()
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
    ``LoweredKernel`` on the CPU, a ``TritonKernel`` on cuda; None for a transfer).  ``sizes``: the
    constant of the sizes a kernel whose code serves every sequence length reads (its length,
    ``CachedKernel.sizes``), None for every other."""

    op: Operation
    name: str
    kind: str
    device: str
    operands: list
    results: list
    kernel: object = None
    split_over_threads: bool = False
    sizes: BufferRef | None = None

    @property
    def buffers(self) -> list:
        """The kernel's buffers in ABI order: operands, results, then its sizes if it reads any."""
        return self.operands + self.results + ([self.sizes] if self.sizes is not None else [])

    @property
    def index_checks(self):
        """The kernel's bounds checks (``lezero/codegen/index_checks.py``), or None."""
        return None if self.kernel is None else self.kernel.index_checks


@dataclass
class HostStep:
    """A control-flow op of the schedule, run on the host: ``name`` (``lz.for``, ``lz.while``,
    ``lz.if``), its ``operands`` and ``results`` (``BufferRef``s, as a launch's), one plan per
    region (``region_plans``) and, for ``lz.for``, its attributes.  Not a kernel: ``kernel`` is None."""

    op: Operation
    name: str
    operands: list
    results: list
    region_plans: list
    trip_count: int = 0
    num_invariant: int = 0
    num_carried: int = 0
    reverse: bool = False
    kernel = None
    split_over_threads = False

    @property
    def launch_count(self) -> int:
        """The step itself and the launches of one run of each region (nested steps counted through)."""
        return 1 + sum(launch_count(p) for p in self.region_plans)


@dataclass
class ExecutionPlan:
    """A scheduled function (or region: ``block``) as data (see the module docstring)."""

    module: ModuleOp
    func: FuncOp
    arena_sizes: dict                    # device -> bytes of its arena
    constants: list = field(default_factory=list)
    launches: list = field(default_factory=list)  # Launch or HostStep, in schedule order
    outputs: list = field(default_factory=list)  # BufferRef per result
    folded_kernels: int = 0              # kernels of constants only, evaluated while planning
    block: object = None                 # the block planned: the function's entry block, or a region's
    # A loop body's invariants read pre-packed (issue 17): (argument index, spec, constant index),
    # the constant packed from the argument by the loop's host step once per run of the loop.
    packed_inputs: list = field(default_factory=list)

    @property
    def result_types(self) -> list:
        """The static type of each result (of the returned or yielded values: the schedule's)."""
        return [v.type for v in self.block.terminator.operands]

    @property
    def host_steps(self) -> list:
        return [launch for launch in self.launches if isinstance(launch, HostStep)]

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
    return kernel.work_items > 1 and (out_bytes >= PARALLEL_MIN_BYTES or kernel.flops >= PARALLEL_MIN_FLOPS
                                      or kernel.bytes_accessed >= PARALLEL_MIN_READ_BYTES)


def launch_count(plan: ExecutionPlan) -> int:
    """The launches of one run of ``plan`` (a host step counted with one run of each region)."""
    return sum(launch.launch_count if isinstance(launch, HostStep) else 1 for launch in plan.launches)


def build_plan(module: ModuleOp, entry: str, cpu=None, fold_constant_kernels: bool = False,
               cache=None, planned: list | None = None) -> ExecutionPlan:
    """The ``ExecutionPlan`` of ``@entry`` in a scheduled ``module``, CPU kernels lowered for
    ``cpu`` (a ``CpuTarget``), through the kernel ``cache`` when given (the JIT's executors).
    ``planned``: per ``lz.kernel`` of ``@entry``'s body, in order, a planned ``CachedKernel`` of the
    same text, which the plan takes (``CachedKernel.for_op``) instead of looking it up (a schedule
    made by substitution: ``lezero.runtime.shape_substitution``)."""
    func = module.lookup(entry)
    sizes = {}
    for device in DEVICES:
        attr = func.attributes.get(arena_attributes(device)[0])
        sizes[device] = int(attr.value) if attr is not None else 0
    kernels = sum(op.name == "lz.kernel" for op in func.walk())
    with progress(kernels, f"lowering @{entry}"):  # a bar on a terminal when it takes a while (issue 16)
        return _plan_block(ExecutionPlan(module, func, sizes, block=func.entry_block), cpu, fold_constant_kernels,
                           cache, iter(planned) if planned is not None else None)


def _host_step(plan: ExecutionPlan, op: Operation, operands: list, results: list, cpu, cache) -> HostStep:
    """A control-flow op's step: a plan per region, each in an arena of its own."""
    sizes = op.attributes[REGION_ARENAS_ATTR].values
    region_plans = [_plan_block(ExecutionPlan(plan.module, plan.func, {**{d: 0 for d in DEVICES}, HOST: int(size)},
                                              block=region.block), cpu, False, cache)
                    for region, size in zip(op.regions, sizes)]
    attrs = {k: op.attributes[k].value for k in ("trip_count", "num_invariant", "num_carried", "reverse")
             if k in op.attributes}
    return HostStep(op, op.name, operands, results, region_plans, **attrs)


def collective_in(kernel: Operation) -> Operation | None:
    """The collective a kernel holds (partition makes each a ``single`` kernel of its own), or None."""
    body = kernel.regions[0].block.ops
    return body[0] if len(body) == 2 and body[0].name in COLLECTIVE_OPS else None


# (id of an lz.constant's array, layout) -> (a weak reference to that array, it packed): a weight is
# packed once for all the plans that read it (every shape of a model: 16 matmul weights of GPT-2
# small took ~10 ms and 14 MB again per new shape).  Read-only, as every constant of a plan.
_PACKED: dict[tuple, tuple] = {}


def packed_once(source: np.ndarray, array: np.ndarray, spec) -> np.ndarray:
    """``spec.pack(array)`` (``array``: the plan's contiguous copy or view of the constant
    ``source``), the one packed array per ``source`` and layout while ``source`` lives."""
    key = (id(source), spec)
    hit = _PACKED.get(key)
    if hit is not None and hit[0]() is source:
        return hit[1]
    result = spec.pack(array)
    result.flags.writeable = False
    _PACKED[key] = (weakref.ref(source, lambda _, key=key: _PACKED.pop(key, None)), result)
    return result


def _plan_block(plan: ExecutionPlan, cpu, fold_constant_kernels: bool, cache, planned=None) -> ExecutionPlan:
    block = plan.block
    returned = block.terminator.operands
    output_slot: dict[int, int] = {}
    for i, v in enumerate(returned):
        output_slot.setdefault(id(v), i)
    where: dict[int, BufferRef] = {id(a): BufferRef("input", i) for i, a in enumerate(block.args)}

    sources: dict[int, np.ndarray] = {}  # constant index -> the lz.constant's own array

    def constant(array: np.ndarray, t: TensorType) -> BufferRef:
        plan.constants.append(np.ascontiguousarray(array, t.element_type.numpy_dtype).reshape(t.shape))
        sources[len(plan.constants) - 1] = array
        return BufferRef("constant", len(plan.constants) - 1)

    packed: dict[tuple, BufferRef] = {}

    def packed_constant(ref: BufferRef, spec, op: Operation) -> BufferRef:
        """The constant ``ref`` in the layout ``spec`` asks (a kernel's ``packed_operands``), packed
        once per plan; the constant itself stays for its other readers.  In a loop's region, an
        argument (a loop invariant: schedule's ``mark_invariant_operands``) gets a constant buffer
        of the packed size, which the loop packs into once per run (``packed_inputs``)."""
        if ref.kind not in ("constant", "input"):
            raise IRError(f"a kernel reads operand {spec.operand} pre-packed, but it is not a constant "
                          f"({ref.kind})", op.location)
        key = (ref.kind, ref.where, spec)
        if key not in packed:
            if ref.kind == "constant":
                plan.constants.append(packed_once(sources[ref.where], plan.constants[ref.where], spec))
            else:
                plan.constants.append(np.zeros(spec.groups * spec.group_floats, np.float32))
                plan.packed_inputs.append((ref.where, spec, len(plan.constants) - 1))
            packed[key] = BufferRef("constant", len(plan.constants) - 1)
        return packed[key]

    for op in block.ops:
        if op.name == "lz.constant":
            where[id(op.result)] = constant(op.attributes["value"].array, op.result.type)
        elif op.name in CONTROL_FLOW_OPS:
            for r, offset in zip(op.results, op.attributes[OFFSETS_ATTR].values):
                where[id(r)] = BufferRef("output", output_slot[id(r)]) if offset < 0 else BufferRef("arena", offset)
            plan.launches.append(_host_step(plan, op, [where[id(v)] for v in op.operands],
                                            [where[id(r)] for r in op.results], cpu, cache))
        elif op.name == "lz.kernel":
            known = next(planned) if planned is not None else None
            operands = [where[id(v)] for v in op.operands]
            collective = collective_in(op)  # issue 14: a host step on the process group's thread
            if collective is not None:
                for r, offset in zip(op.results, op.attributes[OFFSETS_ATTR].values):
                    where[id(r)] = BufferRef("output", output_slot[id(r)]) if offset < 0 else BufferRef("arena", offset)
                plan.launches.append(HostStep(op, collective.name, operands, [where[id(r)] for r in op.results], []))
                continue
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
                launch.kernel = known.for_op(op) if known is not None else lower_for_device(op, device, cpu, cache)
                advance()
                launch.split_over_threads = device == HOST and splits_over_threads(launch.kernel, op)
                if getattr(launch.kernel, "sizes", ()):  # code serving every sequence length (issue 11)
                    plan.constants.append(np.array(launch.kernel.sizes, np.int64))
                    launch.sizes = BufferRef("constant", len(plan.constants) - 1)
                for spec in launch.kernel.packed_operands if device == HOST else ():  # issue 11
                    launch.operands[spec.operand] = packed_constant(operands[spec.operand], spec, op)
            plan.launches.append(launch)
        elif op is not block.terminator:
            raise IRError(f"'{op.name}' op is left outside any kernel after fusion", op.location)
    plan.outputs = [where[id(v)] for v in returned]
    return plan
