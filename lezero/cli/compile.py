"""lezero-compile: an ONNX model to a native executable or shared library that runs without Python.

    lezero-compile model.onnx -o out/model [--shape x=1x3x224x224]
        out/model --input x=x.npy --output-dir results/      (writes results/<output>.npy)
    lezero-compile --shared model.onnx -o out/
        out/libmodel.so and out/model.h (create, run with named buffers, destroy, errors)
    lezero-compile --check model.onnx
        every unsupported op or attribute and every dynamic dim, with its node; exit 1 if any
    lezero-compile model.onnx --triple aarch64-linux-gnu --cpu cortex-a72 -o out/model
        for 64-bit ARM Linux (a static executable; needs aarch64-linux-gnu-gcc), or --cpu alone
        for another x86-64 CPU (x86-64-v3, skylake-avx512, ...: LLVM's names)

Models older than opset 11 are converted with ONNX's version converter first. An lz IR file
(``.mlir``) is accepted too: its ``@main`` (or only function) is compiled, named by
its ``lz.input_names`` / ``lz.output_names`` attributes. A user's mistake gets
``lezero-compile: error: ...`` naming the file, node or input, and exit code 1, never a traceback.
The library is ``lezero/runtime/native/`` (``lezero/onnx/native.py`` for an ONNX model).
"""
from __future__ import annotations

import argparse
import contextlib
import os
import pathlib
import re
import sys
import time
import traceback

from lezero.ir.diagnostics import IRError
from lezero.runtime.progress import quiet

PROG = "lezero-compile"


class UsageError(Exception):
    """A bad command line or input file; the message says what to do."""


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog=PROG, description="Compile an ONNX model (or an lz .mlir file) to a native executable or shared "
                               "library that runs without Python.")
    p.add_argument("model", help="the .onnx model (or an lz IR .mlir file)")
    p.add_argument("-o", dest="output", default=None,
                   help="the executable to write (default: ./<model name>); with --shared, the directory for "
                        "lib<name>.so and <name>.h (default: .)")
    p.add_argument("--shared", action="store_true", help="build a shared library and its C header")
    p.add_argument("--check", action="store_true",
                   help="only report what stops the model from compiling: unsupported ops and attributes, "
                        "dynamic dims (exit 0 when there is nothing)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=DIMS",
                   help="bind an input's shape, e.g. --shape x=1x3x224x224 (needed for dynamic dims; repeatable)")
    p.add_argument("--constant-input", action="append", default=[], metavar="NAME=FILE.npy",
                   help="compile with this graph input fixed to the array in FILE.npy (it is no longer an input)")
    p.add_argument("--name", default=None,
                   help="the model's name: lib<name>.so and <name>.h (default: the model file's name)")
    p.add_argument("--cpu", default=None, metavar="NAME",
                   help="the CPU the kernels are generated for, by LLVM's name (x86-64-v3, skylake-avx512, znver4; "
                        "with --triple aarch64-linux-gnu: generic, cortex-a53, cortex-a72, neoverse-n1, ...; "
                        "default $LEZERO_CPU or host); it need not be this machine's")
    p.add_argument("--triple", default=None, metavar="TRIPLE",
                   help="build for another architecture, e.g. aarch64-linux-gnu (64-bit ARM Linux: kernels by "
                        "LLVM's AArch64 backend, the driver by the cross compiler aarch64-linux-gnu-gcc)")
    p.add_argument("-j", "--jobs", type=int, default=None,
                   help="processes compiling kernels (default: the CPUs this process may use)")
    p.add_argument("-v", "--verbose", action="store_true", help="report the kernels and the time of each stage")
    p.add_argument("-q", "--quiet", action="store_true",
                   help="no progress bars (drawn only when stderr is a terminal and a stage takes over 0.5 s)")
    p.add_argument("--keep-build-dir", action="store_true",
                   help="keep the generated sources and objects (their directory is reported)")
    p.add_argument("--traceback", action="store_true", help="show Python tracebacks of internal errors")
    return p


def parse_shape(text: str) -> tuple[str, tuple]:
    """``NAME=1x3x224x224`` (``,`` separates dims too; ``NAME=`` is a scalar)."""
    name, eq, dims = text.rpartition("=")
    if not eq or not name:
        raise UsageError(f"--shape takes NAME=DIMS (e.g. x=1x3x224x224), got '{text}'")
    dims = dims.strip()
    if not dims:
        return name, ()
    parts = re.split(r"[x,]", dims)
    if not all(p.strip().isdigit() for p in parts):
        raise UsageError(f"--shape {text}: dims must be non-negative integers separated by 'x' (e.g. 1x3x224x224)")
    return name, tuple(int(p) for p in parts)


def model_name(path: str, given: str | None) -> str:
    name = given if given is not None else pathlib.Path(path).stem
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", name).lstrip(".")
    if not cleaned:
        raise UsageError(f"--name '{name}' leaves no usable file name")
    return cleaned


def check_readable(path: str) -> None:
    if not os.path.exists(path):
        raise UsageError(f"cannot read '{path}': No such file or directory")
    if os.path.isdir(path):
        raise UsageError(f"cannot read '{path}': it is a directory")


def load_mlir(path: str):
    from lezero.ir.parser import parse_module
    from lezero.ir.verifier import verify

    try:
        text = open(path, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"cannot read '{path}': {getattr(e, 'strerror', None) or e}") from None
    module = parse_module(text, filename=path)
    verify(module)
    return module


def load_constant_inputs(specs: list[str]) -> dict:
    """``--constant-input NAME=FILE.npy`` as ``{name: array}``."""
    import numpy as np

    arrays = {}
    for spec in specs:
        name, eq, path = spec.partition("=")
        if not eq or not name or not path:
            raise UsageError(f"--constant-input takes NAME=FILE.npy, got '{spec}'")
        try:
            arrays[name] = np.load(path, allow_pickle=False)
        except (OSError, ValueError) as e:
            raise UsageError(f"--constant-input {name}: cannot read '{path}' as a .npy file: "
                             f"{getattr(e, 'strerror', None) or e}") from None
    return arrays


def _report_times(stderr, seconds: dict, total: float) -> None:
    for stage, s in seconds.items():
        stderr.write(f"{PROG}: {stage}: {s:.2f} s\n")
    stderr.write(f"{PROG}: total: {total:.2f} s\n")


def _compile(args, stdout, stderr) -> int:
    from lezero.onnx.native import compile_onnx_native
    from lezero.runtime.native import compile_module_native

    shapes = dict(parse_shape(s) for s in args.shape)
    constant_inputs = load_constant_inputs(args.constant_input)
    name = model_name(args.model, args.name)
    if args.shared:
        output = pathlib.Path(args.output or ".")
        if output.suffix == ".so" and not output.is_dir():
            raise UsageError(f"with --shared, -o names a directory (lib<name>.so and <name>.h go there; --name "
                             f"sets <name>), got '{args.output}'")
    else:
        output = pathlib.Path(args.output or name)
        if (args.output or "").endswith(os.sep) or output.is_dir():
            output = output / name
    check_readable(args.model)
    start = time.perf_counter()
    if args.jobs is not None and args.jobs < 1:
        raise UsageError(f"--jobs takes a positive number, got {args.jobs}")
    common = dict(shared=args.shared, name=name, keep_build_dir=args.keep_build_dir, jobs=args.jobs,
                  cpu=args.cpu, triple=args.triple)
    if args.model.endswith(".mlir"):
        if constant_inputs:
            raise UsageError("--constant-input applies to ONNX models")
        result = compile_module_native(load_mlir(args.model), output, shapes=shapes,
                                       source=os.path.basename(args.model), **common)
    else:
        result = compile_onnx_native(args.model, output, shapes=shapes, constant_inputs=constant_inputs, **common)
    if args.verbose:
        program = result.program
        folded = f", {program.folded_kernels} evaluated at build time" if program.folded_kernels else ""
        stderr.write(f"{PROG}: {len(program.launches)} kernels for {program.cpu.name} "
                     f"({len(program.kernels)} distinct{folded}), "
                     f"{program.weights_size} bytes of weights, arena {program.arena_size} bytes\n")
        _report_times(stderr, result.seconds, time.perf_counter() - start)
    if result.build_dir is not None:
        stderr.write(f"{PROG}: the generated sources and objects are in {result.build_dir}\n")
    for path in result.paths:
        stdout.write(f"{path}\n")
    return 0


def _check(args, stdout, stderr) -> int:
    from lezero.onnx.loading import load_model
    from lezero.onnx.preflight import check_model

    if args.model.endswith(".mlir"):
        raise UsageError("--check reads ONNX models")
    check_readable(args.model)
    shapes = dict(parse_shape(s) for s in args.shape)
    findings = check_model(load_model(args.model), shapes, load_constant_inputs(args.constant_input))
    for finding in findings:
        stdout.write(f"{args.model}: {finding}\n")
    if findings:
        stdout.write(f"{args.model}: {len(findings)} problem(s) stop the model from compiling\n")
        return 1
    stdout.write(f"{args.model}: every op is supported and every dim is bound\n")
    return 0


def run(argv: list[str] | None = None, stdout=None, stderr=None) -> int:
    from lezero.runtime.native import NativeCompileError, ShapeBindingError

    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    args = build_arg_parser().parse_args(argv)
    try:
        with quiet() if args.quiet else contextlib.nullcontext():
            return _check(args, stdout, stderr) if args.check else _compile(args, stdout, stderr)
    except ShapeBindingError as e:
        for line in str(e).splitlines():
            stderr.write(f"{PROG}: error: {args.model}: {line}\n")
    except (UsageError, NativeCompileError) as e:
        stderr.write(f"{PROG}: error: {e}\n")
    except IRError as e:  # the importer's and the compiler's, located at an ONNX node when one is to blame
        where = e.location.describe()
        where = "" if where == "<unknown>" or e.message.startswith(f"node '{where}'") else f"node '{where}': "
        model = "" if args.model in e.message else f"{args.model}: "
        stderr.write(f"{PROG}: error: {model}{where}{e.message}\n")
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # a bug, not the user's mistake: one line unless asked
        if args.traceback:
            traceback.print_exc(file=stderr)
        stderr.write(f"{PROG}: internal error: {type(e).__name__}: {e} (compiling {args.model}; "
                     "--traceback shows where)\n")
    return 1


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
