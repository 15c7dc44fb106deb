"""Whole-function execution: ``lezero.compile(module, entry, target="cpu")`` (``target="cuda"``:
``lezero.runtime.cuda``, which shares the checking and the per-shape plans defined here).

A ``CompiledFunction`` takes numpy arrays and returns numpy arrays. On a call it checks the inputs
(count, dtype, static dims: a clear ``InputError`` naming the argument), binds every dynamic dim
from them, and runs the *plan* for that shape signature, building it on first use:

1. specialize: a copy of the function with static argument types, ``shape-infer``;
2. optimize and schedule: ``lezero.codegen.pipeline.schedule`` (decompose, canonicalize, cse,
   constant-fold, dce, partition, fuse, memory-plan);
3. lower each ``lz.kernel`` to LLVM IR and load its machine code through the kernel cache;
4. lay out buffers: inputs and outputs are the caller's arrays, kernel results live in one arena
   (a numpy byte array, allocated once per plan), weights stay in the constants' arrays.

Running a plan is a loop over kernel launches: patch the input/output pointers, call the kernel
through ctypes (across the thread pool when it has enough work). One lock per plan: the arena is
shared state.  A kernel with bounds checks also gets its status buffer (``lezero/codegen/
index_checks.py``), read after the launch: an index out of range raises ``IndexError`` naming
the op, its location, the index and the valid range.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass, field

import numpy as np

from lezero.ir.core import FuncOp, ModuleOp
from lezero.ir.diagnostics import InputError, IRError
from lezero.ir.interpreter import check_arguments
from lezero.ir.parser import parse_module
from lezero.ir.types import FunctionType, TensorType, format_shape
from lezero.ir.verifier import verify
from lezero.codegen.index_checks import initial_status, status_error
from lezero.codegen.pipeline import TARGETS, schedule
from lezero.codegen.llvm.lower_kernel import lower_kernel
from lezero.codegen.llvm.target import CpuTarget, cpu_target
from lezero.runtime.kernel_cache import KernelCache, default_cache
from lezero.runtime.thread_pool import ThreadPool, default_pool

ARENA_ALIGNMENT = 64
# A kernel runs on the calling thread unless it writes this many bytes or does this many flops:
# handing work to another thread costs ~20-80 us.
PARALLEL_MIN_BYTES = 1 << 18
PARALLEL_MIN_FLOPS = 20_000_000


def specialize(module: ModuleOp, entry: str, shapes: list[tuple], target: str = "cpu") -> ModuleOp:
    """A copy of ``module`` whose ``@entry`` has static argument types, optimized, partitioned
    for ``target``, fused and memory-planned (``lezero.codegen.pipeline.schedule``)."""
    module = module.clone()
    func = module.lookup(entry)
    for arg, shape in zip(func.arguments, shapes):
        arg.type = TensorType(shape, arg.type.element_type)
    func.function_type = FunctionType([a.type for a in func.arguments], func.function_type.results)
    return schedule(module, target)


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
class Plan:
    """Everything needed to run one specialization."""

    module: ModuleOp
    func: FuncOp
    launches: list[_Launch]
    outputs: list               # per result: ("kernel", dtype, shape) written in place, or a copy recipe
    arena: np.ndarray
    keepalive: list = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _aligned_bytes(size: int) -> np.ndarray:
    raw = np.empty(size + ARENA_ALIGNMENT, np.uint8)
    start = (-raw.ctypes.data) % ARENA_ALIGNMENT
    return raw[start:start + size]


def build_plan(module: ModuleOp, entry: str, cache: KernelCache, cpu: CpuTarget | None = None) -> Plan:
    func = module.lookup(entry)
    arena_size = func.attributes.get("lz.arena_size")
    arena = _aligned_bytes(int(arena_size.value) if arena_size is not None else 0)
    returned = func.return_op.operands
    output_slot = {}
    for i, v in enumerate(returned):
        output_slot.setdefault(id(v), i)

    source: dict[int, tuple] = {}  # value -> ("input", i) | ("pointer", address) | ("output", i)
    keepalive: list = [arena]
    for i, arg in enumerate(func.arguments):
        source[id(arg)] = ("input", i)
    launches = []
    for op in func.entry_block.ops:
        if op.name == "lz.constant":
            array = np.ascontiguousarray(op.attributes["value"].array)
            keepalive.append(array)
            source[id(op.result)] = ("pointer", array.ctypes.data, array)
        elif op.name == "lz.kernel":
            offsets = op.attributes["lz.offsets"].values
            for r, offset in zip(op.results, offsets):
                if offset < 0:
                    source[id(r)] = ("output", output_slot[id(r)])
                else:
                    source[id(r)] = ("pointer", arena.ctypes.data + offset, None)
            lowered = lower_kernel(op, cpu=cpu)
            loaded = cache.load(lowered.llvm_ir, lowered.name, cpu)
            values = list(op.operands) + list(op.results)
            checks = lowered.index_checks
            status = None if checks is None else status_buffer(checks)
            pointers = (ctypes.c_void_p * max(len(values) + (status is not None), 1))()
            patches = []
            for slot, v in enumerate(values):
                kind = source[id(v)]
                if kind[0] == "pointer":
                    pointers[slot] = kind[1]
                else:
                    patches.append((slot, kind[0], kind[1]))
            if status is not None:
                pointers[len(values)] = ctypes.addressof(status)
            out_bytes = sum(r.type.nbytes for r in op.results)
            launches.append(_Launch(loaded.function, pointers, patches, lowered.work_items,
                                    (out_bytes >= PARALLEL_MIN_BYTES or lowered.flops >= PARALLEL_MIN_FLOPS)
                                    and lowered.work_items > 1,
                                    lowered.name, checks, status))
            keepalive.append(loaded)
        elif op.name != "func.return":
            raise IRError(f"'{op.name}' op is left outside any kernel after fusion", op.location)

    outputs = []
    for i, v in enumerate(returned):
        kind = source[id(v)]
        written_in_place = kind[0] == "output" and kind[1] == i
        outputs.append((written_in_place, kind, v.type))
    return Plan(module, func, launches, outputs, arena, keepalive)


def run_plan(plan: Plan, inputs: list[np.ndarray], pool: ThreadPool) -> list[np.ndarray]:
    results = []
    for written_in_place, kind, t in plan.outputs:
        results.append(np.empty(t.shape, t.element_type.numpy_dtype) if written_in_place else None)
    with plan.lock:
        for launch in plan.launches:
            for slot, kind, index in launch.patches:
                array = inputs[index] if kind == "input" else results[index]
                launch.pointers[slot] = array.ctypes.data
            if launch.parallel:
                pool.parallel_for(launch.function, launch.pointers, launch.work_items)
            else:
                launch.function(launch.pointers, 0, launch.work_items)
            if launch.checks is not None:
                check_status(launch.checks, launch.status)
        for i, (written_in_place, kind, t) in enumerate(plan.outputs):
            if written_in_place:
                continue
            if kind[0] == "input":
                results[i] = inputs[kind[1]].copy()
            elif kind[0] == "output":
                results[i] = results[kind[1]].copy()
            else:  # a constant or an arena buffer
                address = kind[1]
                nbytes = t.nbytes
                buf = (ctypes.c_char * nbytes).from_address(address) if nbytes else b""
                results[i] = np.frombuffer(bytes(buf), t.element_type.numpy_dtype).reshape(t.shape).copy()
    return results


class CompiledFunction:
    """A function compiled for the CPU; call it with numpy arrays.  Subclasses for other targets
    set ``target`` and override ``build_plan``, ``__call__`` and ``runner``."""

    target = "cpu"

    def __init__(self, module: ModuleOp, entry: str, cache: KernelCache | None = None,
                 pool: ThreadPool | None = None, cpu: CpuTarget | str | None = None):
        self.cpu = cpu_target(cpu)  # host code (kernels, CPU fallbacks) is generated for this CPU
        self.cpu.require_executable(f"@{entry}")
        verify(module)
        self.module = module
        self.entry = entry
        self.func = module.lookup(entry)
        self.cache = cache or default_cache()
        self.pool = pool or default_pool()
        self._plans: dict[tuple, Plan] = {}
        self._plans_lock = threading.Lock()

    def plan_for(self, shapes: list[tuple]) -> Plan:
        key = tuple(shapes)
        plan = self._plans.get(key)
        if plan is None:
            with self._plans_lock:
                plan = self._plans.get(key)
                if plan is None:
                    try:
                        specialized = specialize(self.module, self.entry, list(shapes), self.target)
                    except IRError as e:
                        shown = ", ".join(format_shape(s) for s in shapes)
                        raise InputError(f"@{self.entry} cannot run on inputs of shapes ({shown}): {e.message}",
                                         e.location) from None
                    plan = self.build_plan(specialized)
                    self._plans[key] = plan
        return plan

    def build_plan(self, specialized: ModuleOp):
        return build_plan(specialized, self.entry, self.cache, self.cpu)

    def runner(self, shapes):
        """The plan for argument ``shapes`` as a lean ``run(inputs, outs=None) -> list of arrays``
        (``lezero.runtime.launch``) that checks nothing: the caller guarantees C-contiguous arrays
        of the argument dtypes and exactly these shapes.  For the eager frontend and optimizers."""
        from lezero.runtime.launch import lean_runner

        return lean_runner(self.plan_for([tuple(s) for s in shapes]), self.pool)

    def __call__(self, *arrays):
        inputs = [np.require(a, requirements="C") for a in check_arguments(self.func, arrays)]
        plan = self.plan_for([a.shape for a in inputs])
        results = run_plan(plan, inputs, self.pool)
        return results[0] if len(results) == 1 else tuple(results)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} @{self.entry}: {self.func.function_type}, {len(self._plans)} plan(s)>"


def compile(module_or_text, entry: str | None = None, target: str = "cpu",  # noqa: A001
            cpu: CpuTarget | str | None = None) -> CompiledFunction:
    """Compile ``@entry`` of a module (or of MLIR text) for ``target`` (``"cpu"``, or ``"cuda"``:
    ``lezero.runtime.cuda.CudaFunction``); returns a callable taking numpy arrays and returning a
    numpy array, or a tuple for several results.  ``cpu`` names the CPU the host code is generated
    for (LLVM's names: ``"x86-64-v3"``, ``"skylake-avx512"``, ...; default ``$LEZERO_CPU`` or
    ``"host"``); it must be one this machine can execute."""
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r} (targets: {', '.join(map(repr, TARGETS))})")
    module = parse_module(module_or_text) if isinstance(module_or_text, str) else module_or_text
    if entry is None:
        functions = module.functions
        if len(functions) != 1:
            names = ", ".join("@" + f.sym_name for f in functions)
            raise ValueError(f"the module has {len(functions)} functions ({names}): name the entry")
        entry = functions[0].sym_name
    if target == "cuda":
        from lezero.runtime.cuda import CudaFunction

        return CudaFunction(module, entry, cpu=cpu)
    return CompiledFunction(module, entry, cpu=cpu)
