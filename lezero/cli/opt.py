"""lezero-opt: run pass pipelines on IR files, like mlir-opt.

    lezero-opt model.mlir -p canonicalize,cse,dce
    lezero-opt invalid.mlir --split-input-file --verify-diagnostics

Malformed input gets ``file:line:col: error: ...`` with the source line and exit code 1, never a
Python traceback.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile

from lezero.cli import expected_diagnostics
from lezero.ir.diagnostics import Diagnostic, IRError, SourceManager
from lezero.ir.graphviz import module_to_dot
from lezero.ir.parser import parse_module, split_input_file
from lezero.ir.printer import print_module
from lezero.ir.verifier import collect_diagnostics

SPLIT_MARKER = "// -----"


def build_arg_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lezero-opt", description="Run lezero pass pipelines on IR files.")
    p.add_argument("input", nargs="?", default="-", help="input .mlir file, or - for standard input")
    p.add_argument("-p", "--pass-pipeline", default="", help="passes to run, e.g. 'canonicalize,cse,fuse{max-ops=16}'")
    p.add_argument("-o", dest="output", default="-", help="output file (written atomically), - for stdout")
    p.add_argument("--print-ir-after-all", action="store_true", help="print the IR after every pass (to stderr)")
    p.add_argument("--print-ir-after-change", action="store_true", help="print the IR after each pass that changed it")
    p.add_argument("--no-verify-each", dest="verify_each", action="store_false",
                   help="do not run the verifier after every pass")
    p.add_argument("--split-input-file", action="store_true", help="split the input on '// -----' lines")
    p.add_argument("--verify-diagnostics", action="store_true",
                   help="check reported diagnostics against '// expected-error {{...}}' comments")
    p.add_argument("--print-op-generic", action="store_true", help="print every op in the generic form")
    p.add_argument("--print-debuginfo", action="store_true", help="print op locations")
    p.add_argument("--time-passes", action="store_true", help="report the time spent in each pass (to stderr)")
    p.add_argument("--list-passes", action="store_true", help="list the registered passes and their options")
    p.add_argument("--allow-unregistered-dialect", action="store_true", help="accept ops no dialect defines")
    p.add_argument("--emit", choices=["mlir", "dot"], default="mlir",
                   help="output: the IR (mlir) or a Graphviz picture of each function's data flow (dot)")
    return p


class _ChunkFailed(Exception):
    """A chunk reported errors; its diagnostics are already collected."""


def _process_chunk(text: str, first_line: int, filename: str, args, pipeline_runner,
                   diagnostics: list[Diagnostic]) -> str | None:
    try:
        module = parse_module(text, filename=filename, first_line=first_line)
    except IRError as e:
        diagnostics.append(e.diagnostic)
        return None
    errors = collect_diagnostics(module, args.allow_unregistered_dialect)
    if errors:
        diagnostics.extend(errors)
        return None
    if pipeline_runner is not None:
        try:
            pipeline_runner(module)
        except IRError as e:
            diagnostics.extend(getattr(e, "diagnostics", None) or [e.diagnostic])
            return None
    if args.emit == "dot":
        return module_to_dot(module)
    return print_module(module, generic=args.print_op_generic, debuginfo=args.print_debuginfo)


def _write_atomically(path: str, text: str) -> None:
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".lezero-opt-")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def run(argv: list[str] | None = None, stdout=None, stderr=None) -> int:
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    args = build_arg_parser().parse_args(argv)

    from lezero.passes import PipelineError, format_pass_list, make_pipeline_runner

    if args.list_passes:
        stdout.write(format_pass_list())
        return 0

    try:
        runner = make_pipeline_runner(args.pass_pipeline, verify_each=args.verify_each,
                                      print_ir_after_all=args.print_ir_after_all,
                                      print_ir_after_change=args.print_ir_after_change,
                                      time_passes=args.time_passes,
                                      allow_unregistered=args.allow_unregistered_dialect,
                                      stream=stderr) if args.pass_pipeline else None
    except PipelineError as e:
        stderr.write(f"lezero-opt: error: {e}\n")
        return 1

    filename = "<stdin>" if args.input == "-" else args.input
    try:
        text = sys.stdin.read() if args.input == "-" else open(args.input, encoding="utf-8").read()
    except (OSError, UnicodeDecodeError) as e:
        stderr.write(f"lezero-opt: error: cannot read '{filename}': {getattr(e, 'strerror', None) or e}\n")
        return 1

    sources = SourceManager()
    sources.add(filename, text)
    chunks = split_input_file(text) if args.split_input_file else [(text, 1)]

    outputs, failed = [], False
    for chunk, first_line in chunks:
        diagnostics: list[Diagnostic] = []
        out = _process_chunk(chunk, first_line, filename, args, runner, diagnostics)
        if args.verify_diagnostics:
            problems = expected_diagnostics.check(
                diagnostics, expected_diagnostics.parse_expectations(chunk, first_line), filename)
            for p in problems:
                stderr.write(p + "\n")
            failed |= bool(problems)
        else:
            for d in diagnostics:
                stderr.write(sources.render(d) + "\n")
            failed |= bool(diagnostics)
        if out is not None:
            outputs.append(out)

    if args.verify_diagnostics:
        rc = 1 if failed else 0
    elif failed:
        return 1
    else:
        rc = 0
    result = f"\n{SPLIT_MARKER}\n".join(o.rstrip("\n") for o in outputs) + ("\n" if outputs else "")
    if args.output == "-":
        stdout.write(result)
    else:
        try:
            _write_atomically(args.output, result)
        except OSError as e:
            stderr.write(f"lezero-opt: error: cannot write '{args.output}': {e.strerror}\n")
            return 1
    return rc


def main() -> None:
    try:
        sys.exit(run())
    except KeyboardInterrupt:
        sys.exit(130)


if __name__ == "__main__":
    main()
