"""Compile a model to a native executable or shared library that runs without Python.

``lezero-compile`` (``lezero/cli/compile.py``) is the command; this is the library under it:

1. **bind** (``bind_shapes``): every dynamic dim of the entry function's arguments takes a size
   from ``--shape``; what stays dynamic is an error listing each dim and how to bind it.
2. **schedule**: the function specialized at those shapes (``runtime.compiled_function.specialize``:
   shape-infer, then ``codegen.pipeline.schedule``: optimize, partition, fuse, memory-plan).
3. **plan** (``plan_program``): the ``NativeProgram``, what ``runtime.compiled_function.build_plan``
   builds for Python, as data: per kernel its symbol, work items, whether to split it over threads,
   and its buffers as references (a graph input, an output, an arena offset, a weights offset);
   where each output comes from; the weights laid out in one blob (64-byte aligned, equal
   constants stored once). A kernel that reads only constants (a weight broadcast or transposed)
   is evaluated here, by the reference, and its results become weights. Kernels whose LLVM IR
   differs only in their name (ResNet's repeated blocks) share one symbol, so they are compiled
   once. A kernel with bounds checks also gets a slice of the model's status array
   (``lezero/codegen/index_checks.py``), and the program lists its checks, which the run loop reads
   after the launch.
4. **build** (``build_native``), in a temporary directory beside the destination:
   - ``kernels.o``: every kernel's LLVM module, each O3-optimized as the JIT does, linked into one
     module and emitted as one PIC object (``codegen.llvm.jit.emit_linked_object``). With many
     kernels and several CPUs the kernels are split by size into one group per job, each group one
     object compiled in its own process (``kernels_<i>.o``): LLVM is most of the build time
     (ResNet-50: ~8.5 of 13 s on one core);
   - ``weights.S``: ``.incbin`` of the weights blob into ``.rodata`` (the assembler copies the file:
     weights of any size cost about their disk write, never a C compiler's parse);
   - ``driver.c``: ``native_runtime.c`` with the generated tables (``native_driver``);
   then one ``cc -O2`` call compiles and links them (``-lm -lpthread``), and the results are
   renamed into place, so a failed build never leaves a partial output.

**Targets** (``native_target``): the kernels are lowered (vector widths, GEMM tiles) and emitted
for one ``CpuTarget`` (``codegen/llvm/target.py``): the host, ``$LEZERO_CPU``, or any CPU LLVM
names (``--cpu``), since the code only goes into files. ``--triple aarch64-linux-gnu`` builds for
64-bit ARM Linux: LLVM's AArch64 backend for the kernels, ``aarch64-linux-gnu-gcc`` for the driver
(its absence is an error saying what to install, never a host build), executables linked
statically so that they run on any AArch64 Linux and under ``qemu-aarch64``.
"""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np

from lezero.codegen.index_checks import initial_status
from lezero.codegen.errors import TargetError
from lezero.codegen.llvm.jit import emit_linked_object
from lezero.codegen.llvm.lower_kernel import lower_kernel
from lezero.codegen.llvm.target import CpuTarget, cpu_target, host_target
from lezero.ir.attributes import ArrayAttr, StringAttr
from lezero.ir.core import FuncOp, ModuleOp
from lezero.ir.diagnostics import IRError
from lezero.ir.types import TensorType, format_shape
from lezero.onnx import native_driver
from lezero.runtime.compiled_function import PARALLEL_MIN_BYTES, PARALLEL_MIN_FLOPS, specialize

WEIGHT_ALIGNMENT = 64


class NativeCompileError(Exception):
    """A user's mistake or a missing tool, with a message saying what to do (no traceback)."""


class ShapeBindingError(NativeCompileError):
    """Input shapes that do not bind: a dim left dynamic, a ``--shape`` for no input or of the wrong
    rank. One problem per line."""


# ------------------------------------------------------------------------------------------------
# The program: the schedule as data
# ------------------------------------------------------------------------------------------------


@dataclass
class NativeTensor:
    name: str
    type: TensorType
    file_stem: str = ""  # outputs: the executable writes <output-dir>/<file_stem>.npy


@dataclass(frozen=True)
class BufferRef:
    kind: str   # "input" | "output" | "arena" | "weights" | "status"
    where: int  # an input or output index, a byte offset, or an int64 offset into the status array


@dataclass
class NativeLaunch:
    name: str       # the kernel's name in the IR
    symbol: str     # the function called (shared between identical kernels)
    work_items: int
    parallel: bool
    buffers: list   # BufferRef per operand, then per result (then the status, with checks)
    checks: tuple = ()  # the kernel's bounds checks (IndexCheck), in slot order


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

    return (names("lz.input_names", len(func.arguments), "input"),
            names("lz.output_names", len(func.function_type.results), "output"))


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


def schedule_for_shapes(module: ModuleOp, func: FuncOp, shapes: list[tuple]) -> ModuleOp:
    """A copy of ``module`` whose ``func`` is specialized at ``shapes`` and scheduled."""
    return specialize(module, func.sym_name, shapes)


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
    input_names, output_names = io_names(func)
    returned = list(func.return_op.operands)
    inputs = [NativeTensor(n, a.type) for n, a in zip(input_names, func.arguments)]
    outputs = [NativeTensor(n, v.type, stem) for n, v, stem in zip(output_names, returned,
                                                                     _file_stems(output_names))]
    arena_attr = func.attributes.get("lz.arena_size")
    program = NativeProgram(name, source, inputs, outputs, [], [], int(arena_attr.value) if arena_attr else 0,
                            cpu=cpu_target(cpu))

    output_slot: dict[int, int] = {}
    for i, v in enumerate(returned):
        output_slot.setdefault(id(v), i)
    where: dict[int, BufferRef] = {id(a): BufferRef("input", i) for i, a in enumerate(func.arguments)}
    constants: dict[int, np.ndarray] = {}
    weight_offsets: dict[tuple, int] = {}

    def weight(value) -> BufferRef:
        array = constants[id(value)]
        key = (array.nbytes, hashlib.sha256(array.reshape(-1).view(np.uint8)).digest())
        if key not in weight_offsets:
            offset = -(-program.weights_size // WEIGHT_ALIGNMENT) * WEIGHT_ALIGNMENT
            program.weights.append((offset, array))
            program.weights_size = offset + array.nbytes
            weight_offsets[key] = offset
        return BufferRef("weights", weight_offsets[key])

    def ref(value) -> BufferRef:
        if id(value) in constants:
            return weight(value)
        return where[id(value)]

    symbols_by_code: dict[str, str] = {}
    for op in func.entry_block.ops:
        if op.name == "lz.constant":
            t = op.result.type
            constants[id(op.result)] = np.ascontiguousarray(op.attributes["value"].array, t.element_type.numpy_dtype)
        elif op.name == "lz.kernel" and all(id(v) in constants for v in op.operands):
            # It computes from constants only (a broadcast weight, a weight transposed): evaluate it
            # once here, with the reference, and ship its results as weights.
            results = op.definition.evaluate(op, [constants[id(v)] for v in op.operands])
            for r, array in zip(op.results, results):
                constants[id(r)] = np.ascontiguousarray(array, r.type.element_type.numpy_dtype).reshape(r.type.shape)
            program.folded_kernels += 1
        elif op.name == "lz.kernel":
            for r, offset in zip(op.results, op.attributes["lz.offsets"].values):
                where[id(r)] = BufferRef("output", output_slot[id(r)]) if offset < 0 else BufferRef("arena", offset)
            lowered = lower_kernel(op, cpu=program.cpu)
            code = lowered.llvm_ir.replace(lowered.name, "\0kernel\0")
            symbol = symbols_by_code.setdefault(code, lowered.name)
            if symbol == lowered.name:
                program.kernels[symbol] = lowered.llvm_ir
            program.external_symbols.update(lowered.external_symbols)
            out_bytes = sum(r.type.nbytes for r in op.results)
            parallel = lowered.work_items > 1 and (out_bytes >= PARALLEL_MIN_BYTES or lowered.flops >= PARALLEL_MIN_FLOPS)
            buffers = [ref(v) for v in list(op.operands) + list(op.results)]
            if lowered.index_checks is not None:
                buffers.append(BufferRef("status", program.status_size))
                program.status_size += len(initial_status(lowered.index_checks))
            program.launches.append(NativeLaunch(lowered.name, symbol, lowered.work_items, parallel, buffers,
                                                 lowered.index_checks or ()))
        elif op.name != "func.return":
            raise IRError(f"'{op.name}' op is left outside any kernel after fusion", op.location)

    for i, v in enumerate(returned):
        r = ref(v)
        in_place = r == BufferRef("output", i)
        program.output_sources.append(OutputSource(in_place, None if in_place else r))
    return program


# ------------------------------------------------------------------------------------------------
# Building
# ------------------------------------------------------------------------------------------------


@dataclass
class BuildResult:
    paths: list            # what was written
    program: NativeProgram
    seconds: dict          # stage -> seconds
    build_dir: pathlib.Path | None = None  # the generated sources and objects, when kept


# Debian's names for an architecture, in its cross-toolchain packages (gcc-<arch>-linux-gnu is
# spelled with '-' for '_'; the C library is libc6-dev-<debian arch>-cross).
_DEBIAN_ARCH = {"aarch64": "arm64", "x86_64": "amd64"}


def native_target(cpu: CpuTarget | str | None = None, triple: str | None = None) -> CpuTarget:
    """The CPU a native build is for (``cpu_target``: default ``$LEZERO_CPU`` or the host; a
    ``triple`` for another architecture). Any CPU in the table will do, executable here or not:
    the code only goes into files. Linux only (the driver is ELF and pthreads)."""
    try:
        target = cpu_target(cpu, triple)
    except TargetError as e:
        raise NativeCompileError(str(e)) from None
    if "-linux" not in target.triple:
        raise NativeCompileError(f"native executables and libraries are built for Linux, not {target.triple} "
                                 f"(e.g. --triple aarch64-linux-gnu)")
    return target


def c_compiler(target: CpuTarget | None = None) -> list[str]:
    """The C compiler command for ``target``: ``$CC`` (default ``cc``) for this machine's
    architecture, the GNU cross compiler ``<arch>-linux-gnu-gcc`` for another one (never a host
    build in its place)."""
    target = target or host_target()
    if target.arch == host_target().arch:
        cc = os.environ.get("CC", "cc")
        if not (cc.strip() and shutil.which(cc.split()[0])):
            raise NativeCompileError(f"no C compiler: '{cc}' is not on PATH (install gcc or clang, or set CC)")
        return cc.split()
    cross = f"{target.arch}-linux-gnu-gcc"
    if not shutil.which(cross):
        debian = _DEBIAN_ARCH.get(target.arch, target.arch)
        raise NativeCompileError(
            f"no C compiler for {target.arch}: '{cross}' is not on PATH (on Debian or Ubuntu: apt-get install "
            f"gcc-{target.arch.replace('_', '-')}-linux-gnu libc6-dev-{debian}-cross)")
    return [cross]


_RUNTIME_IDENTIFIERS: set | None = None


def _check_symbols(program: NativeProgram) -> None:
    global _RUNTIME_IDENTIFIERS
    if _RUNTIME_IDENTIFIERS is None:
        _RUNTIME_IDENTIFIERS = set(re.findall(r"\blz_\w+", native_driver.RUNTIME_SOURCE.read_text()))
    clash = sorted(s for s in program.kernels if s in _RUNTIME_IDENTIFIERS or s in ("main", "lz_weights"))
    if clash:
        raise NativeCompileError(f"kernel names clash with the native runtime: {', '.join(clash)}")


def write_sources(program: NativeProgram, directory: pathlib.Path) -> None:
    """The generated sources and the weights blob, in ``directory``."""
    (directory / "lz_model_api.h").write_text(native_driver.render_api_header(program))
    (directory / "lz_model_tables.h").write_text(native_driver.render_tables(program))
    shutil.copyfile(native_driver.RUNTIME_SOURCE, directory / "driver.c")
    with open(directory / "weights.bin", "wb") as f:
        position = 0
        for offset, array in program.weights:
            f.write(b"\0" * (offset - position))
            f.write(memoryview(array.reshape(-1).view(np.uint8)))
            position = offset + array.nbytes
    (directory / "weights.S").write_text(native_driver.render_weights_assembly("weights.bin",
                                                                               program.weights_size))


def _run_compiler(command: list[str], cwd: pathlib.Path) -> None:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        raise NativeCompileError(f"the C compiler failed ({' '.join(command)}):\n{done.stderr.strip()}")


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


# Below this many distinct kernels one process compiles them all: a worker process takes ~0.7 s to
# start (importing lezero and llvmlite), more than a few kernels take to compile.
PARALLEL_MIN_KERNELS = 8

# A worker: compile the modules in a JSON file to one object file (a fresh interpreter, so that
# nothing depends on the caller's __main__, as multiprocessing's spawn would), for the CPU the
# job names.
_WORKER = ("import json, sys\n"
           "from lezero.codegen.llvm.jit import emit_linked_object\n"
           "from lezero.codegen.llvm.target import cpu_target\n"
           "job = json.load(open(sys.argv[1]))\n"
           "cpu = cpu_target(job['cpu'], job['triple'])\n"
           "open(sys.argv[2], 'wb').write(emit_linked_object(job['modules'], job['exported'], cpu))\n")


def emit_kernel_objects(kernels: dict, jobs: int | None = None, cpu: CpuTarget | None = None) -> list[bytes]:
    """Object files holding ``kernels`` (symbol -> LLVM IR) for ``cpu`` (default: ``$LEZERO_CPU``
    or the host): one, or one per job when there are many kernels; groups past the first compile
    in worker processes (LLVM holds a global lock and the GIL) while this process compiles the first."""
    cpu = cpu_target(cpu)
    jobs = min(jobs or default_jobs(), len(kernels))
    if jobs <= 1 or len(kernels) < PARALLEL_MIN_KERNELS:
        return [emit_linked_object(list(kernels.values()), list(kernels), cpu)]
    groups = [dict() for _ in range(jobs)]  # largest first into the lightest group
    sizes = [0] * jobs
    for symbol, code in sorted(kernels.items(), key=lambda item: -len(item[1])):
        lightest = sizes.index(min(sizes))
        groups[lightest][symbol] = code
        sizes[lightest] += len(code)
    with tempfile.TemporaryDirectory(prefix="lezero-kernels-") as scratch:
        workers = []
        try:
            for i, group in enumerate(groups[1:], 1):
                job, obj = pathlib.Path(scratch, f"group_{i}.json"), pathlib.Path(scratch, f"group_{i}.o")
                job.write_text(json.dumps({"modules": list(group.values()), "exported": list(group),
                                           "cpu": "host" if cpu.is_host else cpu.cpu, "triple": cpu.triple}))
                workers.append((subprocess.Popen([sys.executable, "-c", _WORKER, str(job), str(obj)],
                                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE), obj))
            objects = [emit_linked_object(list(groups[0].values()), list(groups[0]), cpu)]
            for process, obj in workers:
                _, err = process.communicate()
                if process.returncode != 0:
                    raise RuntimeError(f"a kernel compiler process failed (exit code {process.returncode}):\n"
                                       f"{err.decode(errors='replace')[-4000:]}")
                objects.append(obj.read_bytes())
        finally:
            for process, _ in workers:
                if process.poll() is None:
                    process.kill()
                    process.wait()
    return objects


def build_native(program: NativeProgram, output: str | os.PathLike, shared: bool = False,
                 keep_build_dir: bool = False, jobs: int | None = None) -> BuildResult:
    """Build ``program``: an executable at ``output``, or with ``shared`` the library
    ``output/lib<name>.so`` and its header ``output/<name>.h``. Files appear only when complete.
    ``jobs``: processes compiling kernels (default: the CPUs this process may use). For another
    architecture (``program.cpu``) the cross compiler builds it, an executable linked statically."""
    cc = c_compiler(program.cpu)
    _check_symbols(program)
    output = pathlib.Path(output)
    destination = output if shared else output.parent
    try:
        destination.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise NativeCompileError(f"cannot create '{destination}': {e.strerror}") from None
    if shared and not destination.is_dir():
        raise NativeCompileError(f"'{destination}' is not a directory (--shared writes lib<name>.so and <name>.h there)")
    if not shared and output.is_dir():
        raise NativeCompileError(f"'{output}' is a directory: -o names the executable to write")
    seconds = {}
    build_dir = pathlib.Path(tempfile.mkdtemp(prefix=".lezero-compile-", dir=destination))
    try:
        start = time.perf_counter()
        objects = []
        for i, code in enumerate(emit_kernel_objects(program.kernels, jobs, program.cpu)):
            objects.append(f"kernels_{i}.o")
            (build_dir / objects[-1]).write_bytes(code)
        seconds["kernels (LLVM)"] = time.perf_counter() - start

        start = time.perf_counter()
        write_sources(program, build_dir)
        seconds["sources and weights"] = time.perf_counter() - start

        start = time.perf_counter()
        flags = cc + ["-O2", "-std=gnu11", "-fno-strict-aliasing"]
        inputs = ["driver.c", "weights.S"] + objects
        libraries = ["-lm", "-lpthread", "-Wl,-z,noexecstack"]
        if shared:
            built = [(f"lib{program.name}.so", destination / f"lib{program.name}.so"),
                     ("lz_model_api.h", destination / f"{program.name}.h")]
            _run_compiler(flags + ["-shared", "-fPIC", "-o", built[0][0]] + inputs + libraries, build_dir)
        else:
            built = [(output.name, output)]
            # Static for another architecture: it runs on any such Linux whatever its C library
            # (and under qemu-user without a sysroot).
            static = ["-static"] if program.cpu.arch != host_target().arch else []
            _run_compiler(flags + static + ["-DLZ_EXECUTABLE", "-o", output.name] + inputs + libraries, build_dir)
        seconds["C compile and link"] = time.perf_counter() - start

        for name, target in built:
            os.replace(build_dir / name, target)
    finally:
        if not keep_build_dir:
            shutil.rmtree(build_dir, ignore_errors=True)
    return BuildResult([target for _, target in built], program, seconds, build_dir if keep_build_dir else None)


def compile_module_native(module: ModuleOp, output: str | os.PathLike, *, shapes: dict | None = None,
                          shared: bool = False, name: str = "model", source: str = "<module>",
                          dim_names: dict | None = None, keep_build_dir: bool = False,
                          jobs: int | None = None, cpu: CpuTarget | str | None = None,
                          triple: str | None = None) -> BuildResult:
    """Bind, schedule, plan and build ``module``'s entry function (``@main``, or its only one),
    for ``cpu`` and ``triple`` (``native_target``: default ``$LEZERO_CPU`` or the host)."""
    target = native_target(cpu, triple)
    c_compiler(target)  # a missing (cross) compiler fails before the long part
    seconds = {}
    start = time.perf_counter()
    func = entry_function(module)
    bound = bind_shapes(func, shapes or {}, dim_names)
    scheduled = schedule_for_shapes(module, func, bound)
    seconds["schedule (passes)"] = time.perf_counter() - start
    start = time.perf_counter()
    program = plan_program(scheduled, scheduled.lookup(func.sym_name), name, source, target)
    seconds["plan and lower kernels"] = time.perf_counter() - start
    result = build_native(program, output, shared=shared, keep_build_dir=keep_build_dir, jobs=jobs)
    result.seconds = {**seconds, **result.seconds}
    return result


# ------------------------------------------------------------------------------------------------
# From an ONNX model
# ------------------------------------------------------------------------------------------------


def onnx_inputs(model, constant_inputs=()) -> list[tuple]:
    """``(name, shape with None for a dynamic dim, [dim_param or None per dim])`` of each graph
    input that is an argument (not an initializer, not bound by ``constant_inputs``)."""
    initializers = {t.name for t in model.graph.initializer}
    declared = []
    for value in model.graph.input:
        if value.name in initializers or value.name in constant_inputs:
            continue
        t = value.type.tensor_type
        if not value.type.HasField("tensor_type") or not t.HasField("shape"):
            continue  # the importer says what is wrong with it
        dims = tuple(d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim)
        names = [d.dim_param if d.HasField("dim_param") and d.dim_param else None for d in t.shape.dim]
        declared.append((value.name, dims, names))
    return declared


def bind_onnx_shapes(model, shapes: dict, constant_inputs=()):
    """``model`` with every graph input's dynamic dims bound from ``shapes`` (a copy when anything
    changes), before import: the importer then folds shape computations (Shape -> Gather ->
    Reshape) to constants. ``NativeCompileError`` lists every dim left dynamic, every bad name."""
    declared = onnx_inputs(model, constant_inputs)
    bound = resolve_shapes(declared, shapes)
    if all(tuple(shape) == tuple(b) for (_, shape, _), b in zip(declared, bound)):
        return model
    import onnx

    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    by_name = {name: b for (name, _, _), b in zip(declared, bound)}
    for value in copy.graph.input:
        if value.name in by_name:
            for dim, size in zip(value.type.tensor_type.shape.dim, by_name[value.name]):
                dim.dim_value = size  # clears dim_param (a oneof)
    return copy


def compile_onnx_native(source, output: str | os.PathLike, *, shapes: dict | None = None,
                        constant_inputs: dict | None = None, shared: bool = False, name: str = "model",
                        keep_build_dir: bool = False, jobs: int | None = None, cpu: CpuTarget | str | None = None,
                        triple: str | None = None) -> BuildResult:
    """An ONNX model (a path or a ``ModelProto``) built as a native executable or shared library
    (``build_native``) for ``cpu`` and ``triple`` (``native_target``). Dynamic dims of graph inputs
    must be bound by ``shapes``; models older than opset 11 are converted with ONNX's version
    converter."""
    from lezero.onnx.importer import import_model
    from lezero.onnx.loading import load_model

    target = native_target(cpu, triple)
    c_compiler(target)  # a missing (cross) compiler fails before the long part
    start = time.perf_counter()
    constant_inputs = dict(constant_inputs or {})
    model = bind_onnx_shapes(load_model(source), shapes or {}, constant_inputs)
    module = import_model(model, constant_inputs=constant_inputs, upgrade_opset=True)
    import_seconds = time.perf_counter() - start
    label = os.path.basename(str(source)) if isinstance(source, (str, os.PathLike)) else (model.graph.name or "model")
    result = compile_module_native(module, output, shared=shared, name=name, source=label,
                                   keep_build_dir=keep_build_dir, jobs=jobs, cpu=target)
    result.seconds = {"load and import ONNX": import_seconds, **result.seconds}
    return result
