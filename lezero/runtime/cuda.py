"""The cuda runtime: ``lezero.compile(module, entry, target="cuda")``.

A ``CudaFunction`` is a ``CompiledFunction`` (the same input checks, ``InputError`` messages and
one plan per input-shape signature) whose execution plans (``lezero.runtime.plan``) are scheduled
with ``partition{target=cuda}``: kernels the Triton backend runs have ``device = "cuda"``, the
ops it cannot run are CPU kernels (automatic fallback), and ``transfer`` kernels copy values
between the two memories (``lezero.passes.placement``).  A plan bound to cuda (``CudaPlan``) holds:

- a **device arena**: one ``torch.uint8`` tensor on ``torch_device("cuda")`` of
  ``lz.device_arena_size`` bytes; each result of a cuda kernel is a view of it at its
  ``lz.offsets`` entry (64-byte aligned), of the result's torch dtype and shape;
- a **host arena**: the same over ``lz.arena_size`` bytes of host memory, for the CPU kernels'
  results and the transfers to the CPU;
- each constant once in host memory and, when a cuda kernel reads it, once on the device;
- a host step (``lz.for``, ``lz.while``, ``lz.if``, placed on the CPU with transfers around it)
  bound as the CPU runtime binds it (``lezero.runtime.cpu.BoundHostStep``: one implementation),
  on the host arena's memory;
- the launches, in schedule order: a cuda kernel through ``lezero.codegen.triton`` (lowered to
  a ``TritonKernel``, loaded by ``jit.load``; on a real GPU its launch configuration is chosen on
  the first run by timing each of ``kernel.configs`` on scratch results when it does at least
  ``AUTOTUNE_MIN_FLOPS``: autotuning; else, under the interpreter or with ``LEZERO_AUTOTUNE=0``,
  ``configs[0]``), a CPU kernel through the LLVM path and the kernel cache on host
  buffers, a transfer as ``tensor.copy_`` (``copy_into``).

A kernel with bounds checks (either side) gets a status tensor (``lezero/codegen/index_checks.py``)
on its device as its last buffer; after the last launch of a call the plan reads each (one
device-to-host copy each: a call that has such kernels waits for the GPU) and raises the first
launch's ``IndexError``, naming the op, the bad index and the valid range.

Buffers are torch tensors throughout: function arguments and results live on the device.  A
call with numpy arrays moves them there and returns numpy arrays; a call with torch tensors (on
``torch_device("cuda")``, of the arguments' storage dtypes) uses them as they are and returns
torch tensors.  ``runner(shapes)`` gives the eager frontend a lean ``run(tensors, outs=None)``.

Without a GPU, compiling for cuda raises ``DeviceError`` (``lezero.runtime.devices``), unless
``TRITON_INTERPRET=1``: then Triton runs every kernel in Python on the CPU and the "device"
buffers are torch CPU tensors.
"""
from __future__ import annotations

import ctypes
import functools
import math
import os
import threading
import time
from dataclasses import dataclass, field

import numpy as np

from lezero.codegen.index_checks import initial_status, status_error
from lezero.ir.core import ModuleOp
from lezero.ir.diagnostics import InputError, IRError
from lezero.ir.interpreter import check_arguments
from lezero.ir.types import BF16, TensorType
from lezero.passes.memory_plan import ALIGNMENT as ARENA_ALIGNMENT
from lezero.passes.placement import HOST
from lezero.runtime.cpu import BoundHostStep, CompiledFunction, bind_plan
from lezero.runtime.devices import interpreter_mode, require_device, torch_device
from lezero.runtime.plan import BoundPlan, ExecutionPlan, HostStep

# How often each launch configuration runs when autotuning (after one warm-up run).
AUTOTUNE_REPEATS = 5
# Only kernels doing at least this many flops are autotuned (each configuration is one more
# Triton compile, ~0.5-2 s): the GEMMs and convolutions that dominate a model's time.  The rest
# run their heuristic configuration.  LEZERO_AUTOTUNE=0 turns tuning off altogether.
AUTOTUNE_MIN_FLOPS = 50_000_000


def autotune_enabled() -> bool:
    return os.environ.get("LEZERO_AUTOTUNE", "1") != "0" and not interpreter_mode()


@functools.cache
def torch_dtype(numpy_dtype: np.dtype):
    """The torch dtype of a numpy storage dtype (``torch.from_numpy``'s)."""
    import torch

    return torch.from_numpy(np.empty(0, numpy_dtype)).dtype


def storage_dtype(t: TensorType, on_device: bool = True):
    """The torch dtype of a buffer of type ``t`` on the device (bf16: ``torch.bfloat16``, 2 bytes)
    or, ``on_device=False``, in host memory (the reference's numpy storage: bf16 is float32)."""
    if on_device and t.element_type == BF16:
        import torch

        return torch.bfloat16
    return torch_dtype(np.dtype(t.element_type.numpy_dtype))


def to_device(array: np.ndarray, t: TensorType, device):
    """A host array of type ``t`` (the reference's storage) as a tensor on ``device`` in its device
    storage: bf16 (float32 holding bf16 values) becomes ``torch.bfloat16``, exactly (``narrowed``)."""
    import torch

    tensor = torch.from_numpy(array)
    return (narrowed(tensor) if t.element_type == BF16 else tensor).to(device)


def narrowed(tensor):
    """A float32 tensor holding bf16 values as ``torch.bfloat16``: each value's high 16 bits, which
    are its bf16 bits (a nan keeps its sign and payload, where torch's conversion makes every nan
    0xFFFF); the way back, ``tensor.float()``, is exact."""
    import torch

    return (tensor.view(torch.int32) >> 16).to(torch.int16).view(torch.bfloat16)


def to_host(tensor, t: TensorType) -> np.ndarray:
    """A device tensor of type ``t`` as a numpy array in the reference's storage (bf16 as float32)."""
    return tensor.cpu().to(storage_dtype(t, on_device=False)).numpy()


def copy_into(dst, src) -> None:
    """``dst.copy_(src)`` across memories and storages: bf16 from the host's float32 is ``narrowed``."""
    import torch

    dst.copy_(narrowed(src) if dst.dtype == torch.bfloat16 and src.dtype == torch.float32 else src)


def _arena(size: int, device):
    """``size`` bytes as a ``torch.uint8`` tensor on ``device`` whose start is 64-byte aligned."""
    import torch

    raw = torch.empty(size + ARENA_ALIGNMENT, dtype=torch.uint8, device=device)
    start = (-raw.data_ptr()) % ARENA_ALIGNMENT
    return raw[start:start + size]


def _view(arena, offset: int, t: TensorType, on_device: bool):
    """The tensor of type ``t`` at byte ``offset`` of ``arena`` (the device's or the host's: the
    storage differs for bf16, and memory-plan sized each arena's slots in its storage,
    ``memory_plan.element_bytes``)."""
    dtype = storage_dtype(t, on_device)
    nbytes = math.prod(t.shape) * dtype.itemsize
    return arena[offset:offset + nbytes].view(dtype).view(t.shape)


# Where a launch finds a buffer: ("input", i), ("output", i) or ("fixed", tensor).
def _resolve(sources, inputs, outs) -> list:
    return [inputs[x] if kind == "input" else outs[x] if kind == "output" else x for kind, x in sources]


@dataclass
class _TritonLaunch:
    """A cuda kernel: its loaded Triton function and the configuration it runs with (None until
    autotuned)."""

    name: str
    loaded: object
    configs: tuple
    operands: int
    sources: list
    flops: int
    config: object = None
    checks: tuple | None = None  # bounds checks: then the last source is the status tensor

    def run(self, buffers) -> None:
        if self.config is None:
            tune = autotune_enabled() and len(self.configs) > 1 and self.flops >= AUTOTUNE_MIN_FLOPS
            self.config = self.tune(buffers) if tune else self.configs[0]
        self.loaded.launch(buffers, self.config)

    def tune(self, buffers):
        """The fastest of ``configs`` on these operands, writing scratch results (a kernel may
        write in place of an operand, so the real results are written once, afterwards)."""
        import torch

        trial = buffers[:self.operands] + [torch.empty_like(b) for b in buffers[self.operands:]]
        best, best_time = None, None
        for config in self.configs:
            self.loaded.launch(trial, config)
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(AUTOTUNE_REPEATS):
                self.loaded.launch(trial, config)
            torch.cuda.synchronize()
            elapsed = time.perf_counter() - start
            if best_time is None or elapsed < best_time:
                best, best_time = config, elapsed
        return best


@dataclass
class _HostLaunch:
    """A CPU kernel (the LLVM path) on host buffers."""

    name: str
    function: object
    work_items: int
    parallel: bool
    sources: list
    pool: object
    checks: tuple | None = None

    def run(self, buffers) -> None:
        pointers = (ctypes.c_void_p * max(len(buffers), 1))(*[b.data_ptr() for b in buffers])
        if self.parallel:
            self.pool.parallel_for(self.function, pointers, self.work_items)
        else:
            self.function(pointers, 0, self.work_items)


@dataclass
class _HostStepLaunch:
    """A host step on host memory: its operands and results are host arena slots and constants,
    which it resolved when bound (placement puts transfers between it and the device)."""

    name: str
    step: BoundHostStep
    pool: object
    sources: list = field(default_factory=list)
    checks = None

    def run(self, buffers) -> None:
        self.step.run((), (), self.pool)


@dataclass
class _TransferLaunch:
    """A transfer kernel: its operand copied into its result, across memories."""

    name: str
    sources: list

    def run(self, buffers) -> None:
        src, dst = buffers
        copy_into(dst, src)


@dataclass
class CudaPlan(BoundPlan):
    """An ``ExecutionPlan`` bound to cuda and host memory: everything needed to run one
    specialization on cuda."""

    plan: ExecutionPlan
    launches: list
    outputs: list            # per result: ("kernel", None) written in place, or where to copy it from
    result_types: list
    device: object           # the torch.device of arguments, results and the device arena
    arenas: list             # kept alive: the views point into them
    lock: threading.Lock = field(default_factory=threading.Lock)
    checked: list = field(default_factory=list)  # the launches with bounds checks, in order


def bind_cuda_plan(plan: ExecutionPlan, cache, pool, cpu=None) -> CudaPlan:
    """``plan`` with its Triton kernels loaded, its CPU kernels loaded through the kernel cache,
    both arenas allocated and each constant on the devices that read it."""
    import torch

    from lezero.codegen.triton.jit import load

    device = torch_device("cuda")
    host = torch.device("cpu")
    arenas = {"cuda": _arena(plan.arena_sizes["cuda"], device), HOST: _arena(plan.arena_sizes[HOST], host)}
    constants: dict[tuple, object] = {}  # (constant index, torch device) -> tensor

    def where(ref, t: TensorType, on_device: bool) -> tuple:
        """A buffer for a kernel running on the device (``on_device``) or the host: ("input", i),
        ("output", i) or ("fixed", tensor); each in its memory's storage (``_storage_dtype``)."""
        if ref.kind == "constant":
            key = (ref.where, on_device)
            if key not in constants:
                if (ref.where, False) not in constants:  # writable: torch wants it so
                    constants[ref.where, False] = torch.from_numpy(np.array(plan.constants[ref.where], order="C"))
                constants[key] = to_device(constants[ref.where, False].numpy(), t, device) if on_device else \
                    constants[ref.where, False]
            return ("fixed", constants[key])
        if ref.kind == "arena":
            return ("fixed", _view(arenas[ref.device], ref.where, t, ref.device == "cuda"))
        return (ref.kind, ref.where)

    launches = []
    for launch in plan.launches:
        if isinstance(launch, HostStep):
            if any(ref.kind in ("input", "output") for ref in launch.operands + launch.results):
                raise IRError(f"'{launch.name}' op reads or writes the function's arguments or results directly: "
                              f"on cuda a transfer must stand between them (run partition{{target=cuda}})",
                              launch.op.location)
            step = BoundHostStep(launch, [bind_plan(p, cache, cpu) for p in launch.region_plans], plan.constants,
                                 arenas[HOST].numpy())
            launches.append(_HostStepLaunch(launch.name, step, pool))
            continue
        op = launch.op
        on_device = launch.device == "cuda"
        on = device if on_device else host
        results = [where(ref, r.type, on_device) for ref, r in zip(launch.results, op.results)]
        if launch.kernel is None:  # a transfer: the operand lives on the other side (or is a constant:
            # any copy of it will do); bf16 converts between the two storages, exactly
            operand = op.operands[0]
            launches.append(_TransferLaunch(launch.name, [where(launch.operands[0], operand.type, not on_device),
                                                          *results]))
            continue
        sources = [where(ref, v.type, on_device) for ref, v in zip(launch.operands, op.operands)] + results
        kernel = launch.kernel
        _add_status(sources, kernel.index_checks, on)
        if launch.device == "cuda":
            launches.append(_TritonLaunch(launch.name, load(kernel), tuple(kernel.configs), len(op.operands), sources,
                                          kernel.flops, checks=kernel.index_checks))
        else:
            (loaded,) = cache.load_kernels([kernel], cpu)
            launches.append(_HostLaunch(launch.name, loaded.function, kernel.work_items, launch.split_over_threads,
                                        sources, pool, kernel.index_checks))

    outputs = [("kernel", None) if plan.written_in_place(i) else where(ref, t, True)
               for i, (ref, t) in enumerate(zip(plan.outputs, plan.result_types))]
    bound = CudaPlan(plan, launches, outputs, plan.result_types, device, list(arenas.values()))
    bound.checked = [launch for launch in launches if not isinstance(launch, _TransferLaunch) and launch.checks]
    return bound


def _add_status(sources: list, checks, device) -> None:
    """A status tensor on ``device`` as the last buffer of a kernel with bounds checks."""
    import torch

    if checks is not None:
        sources.append(("fixed", torch.tensor(initial_status(checks), dtype=torch.int64, device=device)))


def _check_statuses(plan: CudaPlan) -> None:
    """Raise the ``IndexError`` of the first launch whose status says an index was out of range
    (then every status is cleared for the next call)."""
    import torch

    for launch in plan.checked:
        message = status_error(launch.checks, launch.sources[-1][1].tolist())
        if message is not None:
            for other in plan.checked:
                other.sources[-1][1].copy_(torch.tensor(initial_status(other.checks), dtype=torch.int64))
            raise IndexError(message)


def run_cuda_plan(plan: CudaPlan, inputs: list, outs: "list | None" = None) -> list:
    """Run ``plan`` on torch tensors (contiguous, on the plan's device, of the argument types);
    results are new tensors, or written into ``outs``."""
    import torch

    if outs is None:
        outs = [torch.empty(t.shape, dtype=storage_dtype(t), device=plan.device) for t in plan.result_types]
    with plan.lock:
        for launch in plan.launches:
            launch.run(_resolve(launch.sources, inputs, outs))
        for i, (kind, x) in enumerate(plan.outputs):
            if kind != "kernel":
                copy_into(outs[i], _resolve([(kind, x)], inputs, outs)[0])
        if plan.checked:
            _check_statuses(plan)
    return outs


class CudaFunction(CompiledFunction):
    """A function compiled for cuda: call it with numpy arrays (numpy results) or with torch
    tensors on the device (torch results, no copies)."""

    target = "cuda"

    def __init__(self, module: ModuleOp, entry: str, cache=None, pool=None, cpu=None):
        require_device("cuda")
        super().__init__(module, entry, cache, pool, cpu)

    def bind_plan(self, plan: ExecutionPlan) -> CudaPlan:
        return bind_cuda_plan(plan, self.cache, self.pool, self.cpu)

    def runner(self, shapes):
        """``run(tensors, outs=None) -> list of tensors`` for argument ``shapes``, checking
        nothing: the caller passes contiguous torch tensors on the device, of the argument
        dtypes and exactly these shapes.  ``run.kernel_count``: the plan's launches."""
        plan = self.plan_for([tuple(s) for s in shapes])

        def run(inputs, outs=None):
            return run_cuda_plan(plan, inputs, outs)

        run.kernel_count = len(plan.launches)
        run.checks_indices = bool(plan.checked)
        return run

    def __call__(self, *arrays):
        import torch

        if any(isinstance(a, torch.Tensor) for a in arrays):
            inputs = self._check_tensors(arrays)
            results = run_cuda_plan(self.plan_for([tuple(t.shape) for t in inputs]), inputs)
        else:
            host = [np.require(a, requirements="CW") for a in check_arguments(self.func, arrays)]
            plan = self.plan_for([a.shape for a in host])
            inputs = [to_device(a, v.type, plan.device) for a, v in zip(host, self.func.arguments)]
            results = [to_host(r, t) for r, t in zip(run_cuda_plan(plan, inputs), plan.result_types)]
        return results[0] if len(results) == 1 else tuple(results)

    def _check_tensors(self, arrays) -> list:
        """Torch tensors (and arrays, moved to the device) as the arguments: each tensor must be on
        the device with the argument's storage dtype and dims (``InputError`` naming it)."""
        import torch

        device = torch_device("cuda")
        # count, dtype and dims checked as for numpy arrays, on zero-stride numpy probes (a bf16
        # argument's tensor is torch.bfloat16, the device's storage, probed as the host's float32)
        probes = [_probe(i, a, self.func) if isinstance(a, torch.Tensor) else a for i, a in enumerate(arrays)]
        checked = check_arguments(self.func, probes)
        inputs = []
        for i, (a, c, v) in enumerate(zip(arrays, checked, self.func.arguments)):
            if not isinstance(a, torch.Tensor):
                inputs.append(to_device(np.ascontiguousarray(c), v.type, device))
                continue
            if a.dtype != storage_dtype(v.type):
                raise InputError(f"argument #{i} of @{self.entry} is a tensor of dtype {a.dtype}; {v.type} is "
                                 f"{storage_dtype(v.type)} on the device", self.func.location)
            if a.device != device:
                raise InputError(f"argument #{i} of @{self.entry} is a tensor on {a.device}; the function runs on "
                                 f"{device} (move it with .to('{device}'))", self.func.location)
            inputs.append(a.contiguous())
        return inputs


def _probe(index: int, tensor, func) -> np.ndarray:
    """A zero-stride numpy array with ``tensor``'s shape and dtype (for ``check_arguments``; a
    ``torch.bfloat16`` tensor as the host's storage of bf16, float32)."""
    import torch

    if tensor.dtype == torch.bfloat16:
        return np.lib.stride_tricks.as_strided(np.zeros(1, np.float32), tuple(tensor.shape), (0,) * tensor.dim())
    try:
        dtype = tensor.new_empty(0, device="cpu").numpy().dtype
    except TypeError:
        raise InputError(f"argument #{index} of @{func.sym_name} is a tensor of dtype {tensor.dtype}, which has no "
                         "numpy storage", func.location) from None
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), tuple(tensor.shape), (0,) * tensor.dim())
