"""lezero-compile: an ONNX model to a native executable or shared library that runs without Python.

    lezero-compile model.onnx -o out/model [--shape x=1x3x224x224]
        out/model --input x=x.npy --output-dir results/      (writes results/<output>.npy)
    lezero-compile --shared model.onnx -o out/
        out/libmodel.so and out/model.h (create, run with named buffers, destroy, errors)
    lezero-compile --check model.onnx
        every unsupported op or attribute and every dynamic dim, with its node; exit 1 if any

An lz IR file (``.mlir``) is accepted too: its ``@main`` (or only function) is compiled, named by
its ``lz.input_names`` / ``lz.output_names`` attributes. A user's mistake gets
``lezero-compile: error: ...`` naming the file, node or input, and exit code 1, never a traceback.
The library is ``lezero/onnx/native.py``.
"""
from __future__ import annotations

import argparse
import os
import pathlib
import re
import sys
import time
import traceback

from lezero.ir.diagnostics import IRError

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
    p.add_argument("--name", default=None,
                   help="the model's name: lib<name>.so and <name>.h (default: the model file's name)")
    p.add_argument("-v", "--verbose", action="store_true", help="report the kernels and the time of each stage")
    p.add_argument("--keep-build-dir", action="store_true",
                   help="keep the generated sources and objects (the directory is named with -v)")
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


def load_module(path: str):
    """The lz module of ``path`` and, for ONNX, the ``dim_param`` names of each graph input."""
    if not os.path.exists(path):
        raise UsageError(f"cannot read '{path}': No such file or directory")
    if os.path.isdir(path):
        raise UsageError(f"cannot read '{path}': it is a directory")
    if path.endswith(".mlir"):
        from lezero.ir.parser import parse_module
        from lezero.ir.verifier import verify

        try:
            text = open(path, encoding="utf-8").read()
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"cannot read '{path}': {getattr(e, 'strerror', None) or e}") from None
        module = parse_module(text, filename=path)
        verify(module)
        return module, {}
    model = load_onnx(path)
    from lezero.onnx import import_model

    return import_model(model), onnx_dim_names(model)


def load_onnx(path: str):
    import onnx

    try:
        return onnx.load(path)
    except Exception as e:  # protobuf's DecodeError, a truncated file, missing external data
        raise UsageError(f"cannot read '{path}' as an ONNX model: {e}") from None


def onnx_dim_names(model) -> dict:
    """Input name -> the ``dim_param`` (or None) of each dim, for messages about dynamic dims."""
    names = {}
    for value in model.graph.input:
        t = value.type.tensor_type
        if t.HasField("shape"):
            names[value.name] = [d.dim_param if d.HasField("dim_param") else None for d in t.shape.dim]
    return names


def _report_times(stderr, seconds: dict, total: float) -> None:
    for stage, s in seconds.items():
        stderr.write(f"{PROG}: {stage}: {s:.2f} s\n" if s else f"{PROG}: {stage}\n")
    stderr.write(f"{PROG}: total: {total:.2f} s\n")


def _compile(args, stdout, stderr) -> int:
    from lezero.onnx.native import compile_module_native

    shapes = dict(parse_shape(s) for s in args.shape)
    name = model_name(args.model, args.name)
    if args.shared:
        output = pathlib.Path(args.output or ".")
    else:
        output = pathlib.Path(args.output or name)
        if (args.output or "").endswith(os.sep) or output.is_dir():
            output = output / name
    start = time.perf_counter()
    module, dim_names = load_module(args.model)
    load_seconds = time.perf_counter() - start
    result = compile_module_native(module, output, shapes=shapes, shared=args.shared, name=name,
                                   source=os.path.basename(args.model), dim_names=dim_names,
                                   keep_build_dir=args.keep_build_dir)
    if args.verbose:
        program = result.program
        stderr.write(f"{PROG}: {len(program.launches)} kernels ({len(program.kernels)} distinct), "
                     f"{program.weights_size} bytes of weights, arena {program.arena_size} bytes\n")
        _report_times(stderr, {"load and import": load_seconds, **result.seconds}, time.perf_counter() - start)
    for path in result.paths:
        stdout.write(f"{path}\n")
    return 0


def _check(args, stdout, stderr) -> int:
    from lezero.onnx.preflight import check_model

    if args.model.endswith(".mlir"):
        raise UsageError("--check reads ONNX models")
    if not os.path.exists(args.model):
        raise UsageError(f"cannot read '{args.model}': No such file or directory")
    shapes = dict(parse_shape(s) for s in args.shape)
    findings = check_model(load_onnx(args.model), shapes)
    for finding in findings:
        stdout.write(f"{args.model}: {finding}\n")
    if findings:
        stdout.write(f"{args.model}: {len(findings)} problem(s): the model does not compile as it is\n")
        return 1
    stdout.write(f"{args.model}: every op is supported and every dim is bound\n")
    return 0


def run(argv: list[str] | None = None, stdout=None, stderr=None) -> int:
    from lezero.onnx.native import NativeCompileError

    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    args = build_arg_parser().parse_args(argv)
    try:
        return _check(args, stdout, stderr) if args.check else _compile(args, stdout, stderr)
    except (UsageError, NativeCompileError) as e:
        stderr.write(f"{PROG}: error: {e}\n")
    except IRError as e:
        stderr.write(f"{PROG}: error: {args.model}: {e.diagnostic}\n")
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
