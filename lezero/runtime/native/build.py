"""Build a native executable or shared library that runs without Python, from any lz module.

``lezero-compile`` (``lezero/cli/compile.py``) is the command; this is the library under it
(``lezero.onnx.native`` puts an ONNX model in front of it):

1. **bind, schedule, plan** (``lezero.runtime.native.program``): the entry function at static
   shapes, its ``ExecutionPlan`` and the ``NativeProgram`` of it (kernels by symbol, buffers as
   references, the weights blob);
2. **build** (``build_native``), in a temporary directory beside the destination:
   - ``kernels.o``: every kernel's LLVM module and the loop program's walker
     (``lezero.runtime.loop_driver``), each O3-optimized as the JIT does, linked into one
     module and emitted as one PIC object (``codegen.llvm.jit.emit_linked_object``). With many
     kernels and several CPUs the kernels are split by size into one group per job, each group one
     object compiled in its own process (``kernels_<i>.o``): LLVM is most of the build time
     (ResNet-50: ~8.5 of 13 s on one core);
   - ``weights.S``: ``.incbin`` of the weights blob into ``.rodata`` (the assembler copies the file:
     weights of any size cost about their disk write, never a C compiler's parse);
   - ``driver.c``: ``runtime.c`` (beside this file) with the generated tables (``driver``);
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

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import numpy as np

from lezero.codegen.errors import TargetError
from lezero.codegen.llvm.jit import emit_linked_object
from lezero.codegen.llvm.target import CpuTarget, cpu_target, host_target
from lezero.codegen.schedule import without_weight_arguments
from lezero.ir.core import ModuleOp
import lezero.runtime.native.driver as driver
from lezero.runtime.native.program import NativeCompileError, NativeProgram, bind_shapes, entry_function, plan_program
from lezero.runtime.loop_driver import WALKER, walker_ir
from lezero.runtime.plan import specialize
from lezero.runtime.progress import progress


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
        _RUNTIME_IDENTIFIERS = set(re.findall(r"\blz_\w+", driver.RUNTIME_SOURCE.read_text()))
    clash = sorted(s for s in program.kernels if s in _RUNTIME_IDENTIFIERS or s in ("main", "lz_weights"))
    if clash:
        raise NativeCompileError(f"kernel names clash with the native runtime: {', '.join(clash)}")


def write_sources(program: NativeProgram, directory: pathlib.Path) -> None:
    """The generated sources and the weights blob, in ``directory``."""
    (directory / "lz_model_api.h").write_text(driver.render_api_header(program))
    (directory / "lz_model_tables.h").write_text(driver.render_tables(program))
    shutil.copyfile(driver.RUNTIME_SOURCE, directory / "driver.c")
    with open(directory / "weights.bin", "wb") as f:
        position = 0
        for offset, array in program.weights:
            f.write(b"\0" * (offset - position))
            f.write(memoryview(array.reshape(-1).view(np.uint8)))
            position = offset + array.nbytes
    (directory / "weights.S").write_text(driver.render_weights_assembly("weights.bin",
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
            with progress(len(kernels), "compiling kernel objects") as bar:  # a terminal's bar (issue 16)
                objects = [emit_linked_object(list(groups[0].values()), list(groups[0]), cpu)]
                bar.update(len(groups[0]))
                for (process, obj), group in zip(workers, groups[1:]):
                    _, err = process.communicate()
                    if process.returncode != 0:
                        raise RuntimeError(f"a kernel compiler process failed (exit code {process.returncode}):\n"
                                           f"{err.decode(errors='replace')[-4000:]}")
                    objects.append(obj.read_bytes())
                    bar.update(len(group))
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
        # the kernels and the loop program's walker (lezero.runtime.loop_driver)
        modules = {**program.kernels, WALKER: walker_ir()}
        for i, code in enumerate(emit_kernel_objects(modules, jobs, program.cpu)):
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
    module = without_weight_arguments(module)  # a traced graph's weights are the executable's inputs: read as given
    func = entry_function(module)
    bound = bind_shapes(func, shapes or {}, dim_names)
    scheduled = specialize(module, func.sym_name, bound)
    seconds["schedule (passes)"] = time.perf_counter() - start
    start = time.perf_counter()
    program = plan_program(scheduled, scheduled.lookup(func.sym_name), name, source, target)
    seconds["plan and lower kernels"] = time.perf_counter() - start
    result = build_native(program, output, shared=shared, keep_build_dir=keep_build_dir, jobs=jobs)
    result.seconds = {**seconds, **result.seconds}
    return result
