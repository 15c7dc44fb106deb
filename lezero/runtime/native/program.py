"""The native program: what ``lezero-compile`` builds, as data (``lezero.runtime.native.build``
builds it; ``driver`` renders it as C tables around ``runtime.c``'s run loop).

1. **bind** (``bind_shapes``): every dynamic dim of the entry function's arguments takes a size
   from ``--shape``; what stays dynamic is an error listing each dim and how to bind it.
2. **schedule and plan**: the function specialized at those shapes and its ``ExecutionPlan``
   (``lezero.runtime.plan``: the same schedule, buffers and launches the CPU executor runs), with
   ``fold_constant_kernels``: a kernel that reads only constants (a weight broadcast or
   transposed) is evaluated by the reference and its results become weights.
3. **program** (``plan_program``): the plan for C: per kernel its symbol (kernels whose LLVM IR
   differs only in their name, ResNet's repeated blocks, share one, so they are compiled once),
   work items, whether to split it over threads, and its buffers as ``BufferRef``s (a graph input,
   an output, an arena offset, a ``weights`` offset); where each output comes from; the
   constants laid out in one weights blob (64-byte aligned, equal constants stored once). A
   kernel with bounds checks also gets a slice of the model's status array (``status`` buffer,
   ``lezero/codegen/index_checks.py``), and the program lists its checks, which the run loop
   reads after the launch.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

import numpy as np

from lezero.codegen.index_checks import initial_status
from lezero.codegen.llvm.target import CpuTarget, cpu_target
from lezero.ir.attributes import ArrayAttr, StringAttr
from lezero.ir.core import INPUT_NAMES_ATTR, OUTPUT_NAMES_ATTR, FuncOp, ModuleOp
from lezero.ir.diagnostics import IRError
from lezero.ir.types import TensorType, format_shape
from lezero.passes.placement import HOST
from lezero.runtime.plan import BufferRef, HostStep, build_plan

WEIGHT_ALIGNMENT = 64


class NativeCompileError(Exception):
    """A user's mistake or a missing tool, with a message saying what to do (no traceback)."""


class ShapeBindingError(NativeCompileError):
    """Input shapes that do not bind: a dim left dynamic, a ``--shape`` for no input or of the wrong
    rank. One problem per line."""


@dataclass
class NativeTensor:
    name: str
    type: TensorType
    file_stem: str = ""  # outputs: the executable writes <output-dir>/<file_stem>.npy


@dataclass
class NativeLaunch:
    name: str       # the kernel's name in the IR
    symbol: str     # the function called (shared between identical kernels)
    work_items: int
    parallel: bool
    buffers: list   # BufferRef per operand, then per result (then the status, with checks)
    checks: tuple = ()  # the kernel's bounds checks (IndexCheck), in slot order
    flops: int = 0  # codegen's estimate and the bytes it reads and writes: the --profile table's rates
    bytes: int = 0


@dataclass
class OutputSource:
    written_by_kernel: bool
    source: BufferRef | None  # copied from here after the last kernel when not written in place


@dataclass
class NativeProgram:
    name: str
    source: str
    inputs: list
    outputs: list
    launches: list
    output_sources: list
    arena_size: int
    kernels: dict = field(default_factory=dict)   # symbol -> LLVM IR
    weights: list = field(default_factory=list)   # (offset, C-contiguous array)
    weights_size: int = 0
    external_symbols: set = field(default_factory=set)
    folded_kernels: int = 0  # kernels of constants only, evaluated at build time
    cpu: CpuTarget = field(default_factory=cpu_target)  # what the kernels are generated for
    status_size: int = 0  # int64 slots of the bounds checks' status array

    @property
    def num_kernels(self) -> int:
        return len(self.launches)


def entry_function(module: ModuleOp, entry: str | None = None) -> FuncOp:
    if entry is not None:
        return module.lookup(entry)
    functions = module.functions
    if len(functions) == 1:
        return functions[0]
    for f in functions:
        if f.sym_name == "main":
            return f
    names = ", ".join("@" + f.sym_name for f in functions)
    raise NativeCompileError(f"the module has {len(functions)} functions ({names}) and none is @main")


def io_names(func: FuncOp) -> tuple[list[str], list[str]]:
    """The graph's input and output names (``lz.input_names`` / ``lz.output_names``), else
    ``input<i>`` / ``output<i>``."""
    def names(key: str, count: int, default: str) -> list[str]:
        attr = func.attributes.get(key)
        if isinstance(attr, ArrayAttr) and len(attr.values) == count and \
                all(isinstance(v, StringAttr) for v in attr.values):
            return [v.value for v in attr.values]
        return [f"{default}{i}" for i in range(count)]

    return (names(INPUT_NAMES_ATTR, len(func.arguments), "input"),
            names(OUTPUT_NAMES_ATTR, len(func.function_type.results), "output"))


def resolve_shapes(declared: list, shapes: dict) -> list[tuple]:
    """The static shape of each input: ``declared`` holds ``(name, shape with None for a dynamic
    dim, [dim name or None per dim])``; ``shapes`` (input name -> tuple) binds them. Raises
    ``NativeCompileError`` naming every problem at once: an unknown name, a shape that does not fit
    its input, a dim left dynamic (with the ``--shape`` that binds it)."""
    names = [name for name, _, _ in declared]
    problems = []
    for name in shapes:
        if name not in names:
            problems.append(f"--shape names '{name}', which is not an input (inputs: "
                            f"{', '.join(repr(n) for n in names) or 'none'})")
    bound = []
    for name, shape, dim_names in declared:
        shown = format_shape(shape) if shape else "() (a scalar)"
        given = shapes.get(name)
        if given is not None:
            given = tuple(given)
            if len(given) != len(shape) or any(d is not None and d != g for d, g in zip(shape, given)):
                problems.append(f"--shape {name}={_dims(given)} does not fit input '{name}' of shape {shown}")
            bound.append(given)
        elif any(d is None for d in shape):
            where = [f"dim {i}" + (f" ('{dim_names[i]}')" if dim_names and i < len(dim_names) and dim_names[i]
                                   else "") for i, d in enumerate(shape) if d is None]
            example = "x".join(str(1 if d is None else d) for d in shape)
            problems.append(f"input '{name}' has dynamic dims: {shown}, {', '.join(where)} unbound; "
                            f"bind them with --shape {name}={example} (your sizes)")
            bound.append(None)
        else:
            bound.append(tuple(shape))
    if problems:
        raise ShapeBindingError("\n".join(problems))
    return bound


def bind_shapes(func: FuncOp, shapes: dict, dim_names: dict | None = None) -> list[tuple]:
    """``resolve_shapes`` for the arguments of ``func``; ``dim_names`` (input name -> [ONNX
    dim_param or None per dim]) lets the message name the dims."""
    input_names, _ = io_names(func)
    dim_names = dim_names or {}
    return resolve_shapes([(n, a.type.shape, dim_names.get(n)) for n, a in zip(input_names, func.arguments)],
                          shapes)


def _dims(shape) -> str:
    return "x".join(str(d) for d in shape)


def _file_stems(names: list[str]) -> list[str]:
    """Output file names: the output's name, other characters than [A-Za-z0-9._-] made '_', no
    leading '.', unique."""
    stems, seen = [], set()
    for i, name in enumerate(names):
        stem = re.sub(r"[^A-Za-z0-9._-]", "_", name) or f"output{i}"
        if stem.startswith("."):
            stem = "_" + stem
        base, n = stem, 1
        while stem in seen:
            stem, n = f"{base}_{n}", n + 1
        seen.add(stem)
        stems.append(stem)
    return stems


def plan_program(module: ModuleOp, func: FuncOp, name: str, source: str,
                 cpu: CpuTarget | str | None = None) -> NativeProgram:
    """The ``NativeProgram`` of a scheduled function (see the module docstring), its kernels
    lowered for ``cpu`` (default: ``$LEZERO_CPU`` or the host)."""
    target = cpu_target(cpu)
    plan = build_plan(module, func.sym_name, target, fold_constant_kernels=True)
    input_names, output_names = io_names(func)
    inputs = [NativeTensor(n, a.type) for n, a in zip(input_names, func.arguments)]
    outputs = [NativeTensor(n, t, stem) for n, t, stem in zip(output_names, plan.result_types,
                                                               _file_stems(output_names))]
    program = NativeProgram(name, source, inputs, outputs, [], [], plan.arena_sizes[HOST], cpu=target,
                            folded_kernels=plan.folded_kernels)
    weight_offsets: dict[tuple, int] = {}

    def ref(buffer: BufferRef) -> BufferRef:
        """``buffer`` as the C tables name it: a constant by its offset in the weights blob."""
        if buffer.kind != "constant":
            return buffer
        array = plan.constants[buffer.where]
        key = (array.nbytes, hashlib.sha256(array.reshape(-1).view(np.uint8)).digest())
        if key not in weight_offsets:
            offset = -(-program.weights_size // WEIGHT_ALIGNMENT) * WEIGHT_ALIGNMENT
            program.weights.append((offset, array))
            program.weights_size = offset + array.nbytes
            weight_offsets[key] = offset
        return BufferRef("weights", weight_offsets[key])

    symbols_by_code: dict[str, str] = {}
    for launch in plan.launches:
        if isinstance(launch, HostStep):
            raise IRError(f"'{launch.name}' op: a native executable does not run control flow yet "
                          f"(lezero.compile runs it)", launch.op.location)
        lowered = launch.kernel
        code = lowered.llvm_ir.replace(lowered.name, "\0kernel\0")
        symbol = symbols_by_code.setdefault(code, lowered.name)
        if symbol == lowered.name:
            program.kernels[symbol] = lowered.llvm_ir
        program.external_symbols.update(lowered.external_symbols)
        buffers = [ref(b) for b in launch.buffers]
        if lowered.index_checks is not None:
            buffers.append(BufferRef("status", program.status_size))
            program.status_size += len(initial_status(lowered.index_checks))
        program.launches.append(NativeLaunch(lowered.name, symbol, lowered.work_items, launch.split_over_threads,
                                             buffers, lowered.index_checks or (), lowered.flops,
                                             lowered.bytes_accessed))

    for i, buffer in enumerate(plan.outputs):
        in_place = plan.written_in_place(i)
        program.output_sources.append(OutputSource(in_place, None if in_place else ref(buffer)))
    return program
