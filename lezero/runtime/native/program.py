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
   work items and whether to split it over threads; the constants laid out in one weights blob
   (64-byte aligned, equal constants stored once); and the whole schedule, control flow included
   (``lz.for``, ``lz.while``, ``lz.if``, nested), as one loop program
   (``lezero.runtime.loop_driver``: the encoding and the walker the JIT runs), its addresses
   relocations against the model's arena, weights, status array and kernels, which ``runtime.c``
   applies when a model is created.  Region arenas and the loops' own buffers (a carried value's
   second buffer, the index, the condition) are laid out after the plan's arena.  A kernel with
   bounds checks gets a slice of the model's status array, and the program lists its checks,
   which the run loop reads after the run; what the program cannot hold is an ``IRError`` naming
   the op.
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
from lezero.runtime.loop_driver import ProgramEncoder
from lezero.runtime.plan import BufferRef, build_plan

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
    code_at: int    # its KERNEL entry in the program's code
    checks: tuple = ()  # the kernel's bounds checks (IndexCheck), in slot order
    status: int = 0  # where its checks' slots start in the status array
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
    words: np.ndarray | None = None  # the loop program: frame words, then code (loop_driver)
    frame_words: int = 0
    relocations: list = field(default_factory=list)  # (word, "kernel" | "arena" | "weights" | "status")
    symbols: list = field(default_factory=list)  # a "kernel" relocation's value indexes this
    whiles: list = field(default_factory=list)  # (code position, max_trip_count) of each lz.while

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
    binding = _Binding(program, plan)
    encoder = ProgramEncoder(binding, len(inputs) + len(outputs))
    encoder.plan(plan, list(range(len(encoder.frame))), copy_outputs=False)
    program.words, program.frame_words = encoder.words(), len(encoder.frame)
    program.relocations, program.whiles = encoder.relocations, encoder.whiles
    for i, buffer in enumerate(plan.outputs):
        in_place = plan.written_in_place(i)
        program.output_sources.append(OutputSource(in_place, None if in_place else binding.reference(plan, buffer)))
    return program


class _Binding:
    """``ProgramEncoder``'s addresses in an executable: relocations (``kind``, value) against the
    model's arena (each region plan's arena and each loop's own buffers laid out after the
    plan's), the weights blob, the status array and the kernel symbols; it also records each
    kernel (``NativeProgram.launches``, symbols shared by identical kernels)."""

    def __init__(self, program: NativeProgram, plan):
        self.program = program
        self.arena_base = {id(plan): 0}
        self.weight_offsets: dict[tuple, int] = {}
        self.symbols_by_code: dict[str, str] = {}
        self.status_at: dict[int, int] = {}

    def _arena(self, nbytes: int) -> int:
        offset = -(-self.program.arena_size // WEIGHT_ALIGNMENT) * WEIGHT_ALIGNMENT
        self.program.arena_size = offset + nbytes
        return offset

    def _weight(self, array: np.ndarray) -> int:
        key = (array.nbytes, hashlib.sha256(array.reshape(-1).view(np.uint8)).digest())
        if key not in self.weight_offsets:
            offset = -(-self.program.weights_size // WEIGHT_ALIGNMENT) * WEIGHT_ALIGNMENT
            self.program.weights.append((offset, array))
            self.program.weights_size = offset + array.nbytes
            self.weight_offsets[key] = offset
        return self.weight_offsets[key]

    def reference(self, plan, buffer: BufferRef) -> BufferRef:
        """``buffer`` of ``plan`` as the C tables name it: a constant by its offset in the weights
        blob, an arena slot of a region by its offset in the model's arena."""
        if buffer.kind == "constant":
            return BufferRef("weights", self._weight(plan.constants[buffer.where]))
        if buffer.kind == "arena":
            if id(plan) not in self.arena_base:
                self.arena_base[id(plan)] = self._arena(plan.arena_sizes[HOST])
            return BufferRef("arena", self.arena_base[id(plan)] + buffer.where)
        return buffer

    def fixed(self, plan, ref, t):
        ref = self.reference(plan, ref)
        return ref.kind, ref.where

    def function(self, plan, launch, at):
        program, lowered = self.program, launch.kernel
        code = lowered.llvm_ir.replace(lowered.name, "\0kernel\0")
        symbol = self.symbols_by_code.get(code)
        if symbol is None:
            # kernel names are numbered per block: a loop body's kernel may share its name with one
            # outside the loop whose code differs, and each needs its own symbol
            symbol, n = lowered.name, 1
            while symbol in program.kernels:
                symbol, n = f"{lowered.name}_{n}", n + 1
            self.symbols_by_code[code] = symbol
            program.kernels[symbol] = code.replace("\0kernel\0", symbol)
            program.symbols.append(symbol)
        program.external_symbols.update(lowered.external_symbols)
        status = program.status_size
        if lowered.index_checks is not None:
            self.status_at[id(launch)] = status
            program.status_size += len(initial_status(lowered.index_checks))
        program.launches.append(NativeLaunch(lowered.name, symbol, lowered.work_items, launch.split_over_threads, at,
                                             lowered.index_checks or (), status, lowered.flops,
                                             lowered.bytes_accessed))
        return "kernel", program.symbols.index(symbol)

    def table(self, plan, launch):
        slots = [(None, 0) if ref.kind in ("input", "output") else self.fixed(plan, ref, None)
                 for ref in launch.buffers]
        if id(launch) in self.status_at:
            slots.append(("status", 8 * self.status_at[id(launch)]))  # bytes into the int64 array
        return slots

    def step_buffer(self, step, role, k, t):
        return "arena", self._arena(t.nbytes)

    def packed(self, plan, where, index, array):
        plan.constants[index] = array  # shipped as a weight, packed at build time
