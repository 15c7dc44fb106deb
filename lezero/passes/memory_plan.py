"""memory-plan: one static arena for every kernel result of a function (issue 3).

Runs after ``fuse``, on static shapes.  Over the kernel schedule (program order: the order the
runtime launches them) each kernel result is a buffer live from the kernel that writes it to the
last kernel that reads it, both included.  A result the function returns is written straight
into the output buffer the runtime allocates: offset -1, not in the arena.  Function arguments
and constants are not in the arena either.  A control-flow op (``lz.for``, ``lz.while``,
``lz.if``) is a step of the schedule like a kernel: its results are buffers of the function's
arena; its regions have arenas of their own (``lezero.codegen.schedule`` plans them as
functions), reused by every iteration.

In place: an ``elementwise`` kernel's result takes the slot of an operand when that operand is
an arena buffer this kernel is the last to read, of the same shape and element size, read only
at the index the result is written (every reader inside the kernel is an elementwise op of that
shape: no broadcast, no data movement).  The two then share one slot whose lifetime is the union.

Packing is *greedy by size, best fit*: slots sorted by size (largest first, then by start),
each placed at the smallest gap, between the slots already placed whose lifetimes overlap its
own, that holds it; at the top of them when none does.  Sizes are rounded up to 64 bytes, so
every offset is 64-byte aligned.

Written to the IR::

    lz.offsets = array<i64: 0, -1>      on each lz.kernel: one byte offset per result
    lz.arena_size = 4096 : i64          on the func.func: bytes the arena needs
    lz.arena_peak = 4096 : i64          on the func.func: the most bytes live at once (aligned
                                        sizes, in-place slots counted once): no plan can do better

**Devices** (after ``partition{target=cuda}``): a kernel's results live where the kernel runs,
its ``device`` attribute (``"cpu"`` when absent; a ``transfer`` kernel's device is its
destination), in that memory's storage (``element_bytes``: bf16 is 2 bytes on a GPU, the host's
float32 on the CPU).  Each memory gets its own arena, planned as above over the one schedule (the
runtime launches host and device kernels in program order, a device-to-host transfer waiting
for the device), and in place only within one arena::

    lz.offsets                          per result, an offset in the arena of its kernel's device
    lz.arena_size, lz.arena_peak        the host (CPU) arena, as without devices
    lz.device_arena_size = 8192 : i64   the device (GPU) arena, when any kernel has device "cuda"
    lz.device_arena_peak = 8192 : i64

With ``by-stage=true`` lifetimes are measured in ``lz.stage`` steps instead, for a runtime that
runs the kernels of one stage at the same time (a kernel then never writes over a buffer another
kernel of its stage reads).  Decisions are logged on ``lezero.memory_plan``
(``lezero-opt --debug=memory-plan``).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from lezero.ir.attributes import DenseArrayAttr, IntegerAttr, StringAttr
from lezero.ir.core import FuncOp, ModuleOp, Operation, OpResult, Value
from lezero.ir.diagnostics import IRError
from lezero.ir.opdef import ELEMENTWISE
from lezero.ir.types import I64, TensorType
from lezero.passes.partition import CONTROL_FLOW_OPS, STAGE_ATTR
from lezero.passes.pass_base import Pass, debug_channel, option
from lezero.passes.placement import HOST

MEMORY_LOG = debug_channel("memory-plan")

ALIGNMENT = 64
OFFSETS_ATTR = "lz.offsets"
ARENA_SIZE_ATTR = "lz.arena_size"
ARENA_PEAK_ATTR = "lz.arena_peak"
DEVICE_ARENA_SIZE_ATTR = "lz.device_arena_size"
DEVICE_ARENA_PEAK_ATTR = "lz.device_arena_peak"


def arena_attributes(device: str) -> tuple[str, str]:
    """The function attributes holding the size and peak of ``device``'s arena."""
    return (ARENA_SIZE_ATTR, ARENA_PEAK_ATTR) if device == HOST else (DEVICE_ARENA_SIZE_ATTR, DEVICE_ARENA_PEAK_ATTR)


def kernel_device(kernel: Operation) -> str:
    """Where an ``lz.kernel`` runs and its results live (``"cpu"`` unless placed elsewhere; a
    control-flow op runs on the host)."""
    if kernel.name in CONTROL_FLOW_OPS:
        return HOST
    return kernel.definition.attrs(kernel).device


def aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGNMENT) * ALIGNMENT


# An element's bytes in a device's memory where they differ from the reference's storage: bf16 is
# 16 bits on a GPU (the cuda runtime's torch.bfloat16), float32 on the host.
DEVICE_ELEMENT_BYTES = {"bf16": 2}


def element_bytes(t: TensorType, device: str) -> int:
    """Bytes of one element of ``t`` in ``device``'s memory."""
    name = t.element_type.name
    return t.element_type.itemsize if device == HOST else DEVICE_ELEMENT_BYTES.get(name, t.element_type.itemsize)


@dataclass
class Buffer:
    """One kernel result that lives in the arena."""

    value: OpResult
    size: int                      # aligned bytes
    start: int                     # step of the kernel that writes it
    end: int                       # step of the last kernel that reads it (start if none)
    device: str = HOST             # whose arena it is in
    slot: "Slot | None" = None
    in_place_of: int | None = None  # operand index of its kernel whose slot it took


@dataclass
class Slot:
    """Arena bytes shared by a chain of in-place buffers (usually just one buffer)."""

    buffers: list
    size: int
    start: int
    end: int
    offset: int = 0

    def overlaps(self, other: "Slot") -> bool:
        return self.start <= other.end and other.start <= self.end


@dataclass
class ArenaPlan:
    """One device's arena."""

    size: int = 0
    peak: int = 0
    slots: list = field(default_factory=list)


@dataclass
class FunctionMemory:
    """A function's memory plan: the offset of every kernel result, and the arenas."""

    offsets: dict = field(default_factory=dict)  # id(kernel result) -> offset in its device's arena (-1: returned)
    arenas: dict = field(default_factory=dict)   # device -> ArenaPlan (the host's always)


def _kernel_name(op: Operation) -> str:
    name = op.attributes.get("name")
    return name.value if isinstance(name, StringAttr) else op.name


def _steps(func: FuncOp, kernels: list, by_stage: bool) -> dict[int, int]:
    if not by_stage:
        return {id(k): i for i, k in enumerate(kernels)}
    steps = {}
    for k in kernels:
        stage = k.attributes.get(STAGE_ATTR)
        if not isinstance(stage, IntegerAttr):
            raise IRError(f"memory-plan{{by-stage=true}} needs {STAGE_ATTR} on every kernel (run partition "
                          f"and fuse): '{_kernel_name(k)}' has none", k.location)
        steps[id(k)] = stage.value
    for k in kernels:
        for v in k.operands:
            owner = v.owner
            if isinstance(owner, Operation) and id(owner) in steps and steps[id(owner)] >= steps[id(k)]:
                raise IRError(f"'{_kernel_name(k)}' is in stage {steps[id(k)]} but reads '{_kernel_name(owner)}' "
                              f"of stage {steps[id(owner)]}: rerun partition and fuse", k.location)
    return steps


def _reads_only_at_its_index(arg: Value) -> bool:
    """Every reader of a kernel argument is an elementwise op with the argument's shape."""
    for use in arg.uses:
        definition = use.op.definition
        if definition is None or not definition.has_trait(ELEMENTWISE):
            return False
        if any(r.type.shape != arg.type.shape for r in use.op.results):
            return False
    return True


def plan_function(func: FuncOp, by_stage: bool = False, in_place: bool = True) -> FunctionMemory:
    """The memory plan of ``func`` (a fused function with static shapes): one arena per device."""
    body = func.entry_block
    kernels = []
    for op in body.ops:
        if op.name == "lz.kernel" or op.name in CONTROL_FLOW_OPS:  # a host step's results are buffers too
            kernels.append(op)
            for r in op.results:
                if not (isinstance(r.type, TensorType) and r.type.is_static):
                    raise IRError(f"memory-plan needs static shapes; run shape-infer after binding the dims "
                                  f"('{_kernel_name(op)}' gives {r.type})", op.location)
        elif op.name not in ("lz.constant", "func.return"):
            raise IRError(f"memory-plan runs after fuse: '{op.name}' is outside any lz.kernel", op.location)
    steps = _steps(func, kernels, by_stage)
    returned = {id(v) for v in body.terminator.operands} if body.terminator is not None else set()
    plan = FunctionMemory()
    buffers: dict[int, Buffer] = {}
    for k in kernels:
        device = kernel_device(k)
        for r in k.results:
            if id(r) in returned:
                plan.offsets[id(r)] = -1
                continue
            readers = [u.op for u in r.uses]
            end = max([steps[id(u)] for u in readers if id(u) in steps], default=steps[id(k)])
            size = r.type.num_elements * element_bytes(r.type, device)
            buffers[id(r)] = Buffer(r, aligned(size), steps[id(k)], end, device)

    slots: list[Slot] = []
    for k in kernels:
        step = steps[id(k)]
        kind = k.attributes.get("kind")
        can_overwrite = in_place and isinstance(kind, StringAttr) and kind.value == "elementwise"
        taken = set()
        args = k.regions[0].blocks[0].args
        for r in k.results:
            buf = buffers.get(id(r))
            if buf is None:
                continue
            if can_overwrite:
                for j, v in enumerate(k.operands):
                    src = buffers.get(id(v))
                    if (src is None or src.device != buf.device or id(src.slot) in taken or src.end != step
                            or v.type.shape != r.type.shape
                            or element_bytes(v.type, buf.device) != element_bytes(r.type, buf.device)
                            or any(steps[id(u.op)] == step and u.op is not k for u in v.uses)
                            or not _reads_only_at_its_index(args[j])):
                        continue
                    slot = src.slot
                    taken.add(id(slot))
                    slot.buffers.append(buf)
                    slot.end = max(slot.end, buf.end)
                    buf.slot, buf.in_place_of = slot, j
                    break
            if buf.slot is None:
                buf.slot = Slot([buf], buf.size, buf.start, buf.end)
                slots.append(buf.slot)

    devices = [HOST] + sorted({kernel_device(k) for k in kernels} - {HOST})
    for device in devices:
        arena = [s for s in slots if s.buffers[0].device == device]
        _pack(arena)
        for slot in arena:
            for buf in slot.buffers:
                plan.offsets[id(buf.value)] = slot.offset
        plan.arenas[device] = ArenaPlan(
            max((s.offset + s.size for s in arena), default=0),
            max((sum(s.size for s in arena if s.start <= t <= s.end) for t in set(steps.values())), default=0),
            arena)
    return plan


def _pack(slots: list[Slot]) -> None:
    """Greedy by size, best fit (see the module docstring)."""
    placed: list[Slot] = []
    for slot in sorted(slots, key=lambda s: (-s.size, s.start, s.end)):
        if slot.size == 0:
            slot.offset = 0
            continue
        slot.offset = best_fit(slot.size, [(s.offset, s.offset + s.size) for s in placed if s.overlaps(slot)])
        placed.append(slot)


def best_fit(size: int, busy: list) -> int:
    """The start of the smallest free gap that holds ``size`` bytes between the ``busy``
    ``(begin, end)`` byte ranges, or the end of the highest one when no gap does."""
    best, best_gap, top = None, None, 0
    for lo, hi in sorted(busy):
        gap = lo - top
        if gap >= size and (best_gap is None or gap < best_gap):
            best, best_gap = top, gap
        top = max(top, hi)
    return best if best is not None else top


def _log_plan(func: FuncOp, plan: FunctionMemory) -> None:
    where = f"@{func.sym_name}: "
    for device, arena in plan.arenas.items():
        named = "" if device == HOST else f"{device} "
        for slot in sorted(arena.slots, key=lambda s: (s.offset, s.start)):
            for buf in slot.buffers:
                k = buf.value.op
                how = f", in place of operand #{buf.in_place_of}" if buf.in_place_of is not None else ""
                MEMORY_LOG.debug("%s%s result #%d: %d bytes, live %d..%d, %soffset %d%s", where, _kernel_name(k),
                                 buf.value.index, buf.size, buf.start, buf.end, named, slot.offset, how)
        MEMORY_LOG.debug("%s%sarena %d bytes, peak %d bytes", where, named, arena.size, arena.peak)


@dataclass
class MemoryPlan(Pass):
    name = "memory-plan"
    summary = "Place every kernel result in a static arena, one per device (lz.offsets, lz.arena_size, ...)"

    by_stage: bool = option(False, "measure lifetimes in lz.stage steps, for a runtime that runs a stage's "
                                   "kernels at once")
    in_place: bool = option(True, "let an elementwise kernel write a result over an operand it reads last")

    def run(self, module: ModuleOp) -> None:
        for func in module.functions:
            plan = plan_function(func, self.by_stage, self.in_place)
            for op in func.entry_block.ops:
                if op.name == "lz.kernel" or op.name in CONTROL_FLOW_OPS:
                    op.attributes[OFFSETS_ATTR] = DenseArrayAttr(I64, tuple(plan.offsets[id(r)] for r in op.results))
            for device, arena in plan.arenas.items():
                size_attr, peak_attr = arena_attributes(device)
                func.attributes[size_attr] = IntegerAttr(arena.size, I64)
                func.attributes[peak_attr] = IntegerAttr(arena.peak, I64)
            if MEMORY_LOG.isEnabledFor(logging.DEBUG):
                _log_plan(func, plan)
