"""lezero-opt: run pass pipelines on IR files, like mlir-opt.

    lezero-opt model.mlir -p canonicalize,cse,dce
    lezero-opt invalid.mlir --split-input-file --verify-diagnostics
    lezero-opt model.mlir --emit=llvm                  # each CPU kernel's LLVM IR
    lezero-opt model.mlir --emit=asm --cpu=x86-64-v3   # ... its machine code for a CPU (LLVM's names)
    lezero-opt model.mlir --emit=asm --triple=aarch64-linux-gnu --cpu=cortex-a72
    lezero-opt model.mlir --target=cuda --emit=triton  # each GPU kernel's Triton source
    lezero-opt model.mlir --target=cuda --emit=ptx     # ... built to PTX for sm_90
    lezero-opt model.mlir --emit=tensorboard -o runs/  # the graph (and the fused graph) for TensorBoard

``--emit=llvm``/``--emit=asm`` are the CPU's code (for ``--cpu``, default ``$LEZERO_CPU`` or
``host``; ``--triple`` for another architecture) and ``--emit=triton``/``--emit=ptx`` the GPU's: each implies its
target (``--target`` may be left out), and a ``--target`` that contradicts the emitted code is an
error.  Malformed input gets ``file:line:col: error: ...`` with the source line and exit code 1, never a
Python traceback.
"""
from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
import tempfile

from lezero.cli import expected_diagnostics
from lezero.ir.core import ModuleOp
from lezero.ir.diagnostics import Diagnostic, IRError, SourceManager
from lezero.ir.graphviz import module_to_dot
from lezero.ir.parser import parse_module, split_input_file
from lezero.ir.printer import print_module
from lezero.ir.types import TensorType
from lezero.ir.verifier import collect_diagnostics

SPLIT_MARKER = "// -----"
# The code each --emit value prints is compiled for one target.
EMIT_TARGET = {"llvm": "cpu", "asm": "cpu", "triton": "cuda", "ptx": "cuda"}


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
    p.add_argument("--debug", default="", metavar="CHANNELS",
                   help="print the decisions of these debug channels to stderr, a comma list (e.g. fusion, "
                        "memory-plan; --debug=list names them all)")
    p.add_argument("--target", choices=sorted(set(EMIT_TARGET.values())), default=None,
                   help="the target the kernels are compiled for: cpu (--emit=llvm) or cuda (--emit=triton, "
                        "--emit=ptx); implied by --emit")
    p.add_argument("--emit", choices=["mlir", "dot", "llvm", "asm", "triton", "ptx", "tensorboard"], default="mlir",
                   help="output: the IR (mlir), a Graphviz picture of each function's data flow (dot), the LLVM "
                        "IR of every CPU kernel (llvm) or its machine code (asm), the Triton source of every GPU "
                        "kernel (triton) or its PTX for sm_90 (ptx; needs the triton package); the last four need "
                        "static shapes")
    p.add_argument("--cpu", default=None, metavar="NAME",
                   help="the CPU --emit=llvm/asm generate code for, by LLVM's name (x86-64-v3, skylake-avx512, "
                        "znver4, cortex-a72, ...; default $LEZERO_CPU or host)")
    p.add_argument("--triple", default=None, metavar="TRIPLE",
                   help="the target triple for --emit=llvm/asm, e.g. aarch64-linux-gnu (default: this machine's)")
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
    if args.emit == "tensorboard":
        try:
            return _write_tensorboard(module, args.output)
        except IRError as e:
            diagnostics.extend(getattr(e, "diagnostics", None) or [e.diagnostic])
            return None
    if args.emit in EMIT_TARGET:
        try:
            return _kernel_text(module, args.emit, args.cpu_target)
        except IRError as e:
            diagnostics.extend(getattr(e, "diagnostics", None) or [e.diagnostic])
            return None
    return print_module(module, generic=args.print_op_generic, debuginfo=args.print_debuginfo)


def _write_tensorboard(module, log_dir: str) -> str:
    """``--emit=tensorboard -o DIR`` (issue 16): the graph of each function as TensorBoard draws it
    (``lezero.utils.tensorboard.graph``) into the run ``DIR/<function>``, and, for a function of
    static shapes, the graph after fusion (one box per kernel) into ``DIR/<function>_fused``;
    returns what it wrote, for stdout.  Imported here: tensorboardX loads torch when it is installed
    (1.5 s), which every other lezero-opt run would pay."""
    from lezero.utils.tensorboard import SummaryWriter, fused_graph_def, graph_def

    lines = []
    for func in module.functions:
        one = ModuleOp([func.clone()])
        runs = [(os.path.join(log_dir, func.sym_name), graph_def(one))]
        if all(isinstance(a.type, TensorType) and a.type.is_static for a in func.arguments):
            runs.append((os.path.join(log_dir, func.sym_name + "_fused"), fused_graph_def(one)))
        else:
            lines.append(f"// @{func.sym_name}: no fused graph (its arguments have dynamic dims)")
        for path, graph in runs:
            with SummaryWriter(path) as writer:
                writer._get_file_writer().add_onnx_graph(graph)
            lines.append(f"// {path}: {len(graph.node)} nodes")
    return "\n".join(lines) + "\n"


def _kernel_text(module, emit: str, cpu=None) -> str:
    """The code of every kernel of ``module``, scheduled for the target of ``emit`` (``cpu``: the
    resolved ``CpuTarget`` for llvm/asm)."""
    from lezero.codegen import targets

    if emit in ("llvm", "asm"):
        return targets.backend("cpu").kernel_text(module, cpu, assembly=emit == "asm")
    if emit == "triton":
        return targets.backend("cuda").kernel_text(module)
    return _ptx_text(module)


def _ptx_text(module) -> str:
    """``--emit=ptx``: each GPU kernel built for sm_90, under a comment naming it and its launch."""
    from lezero.codegen import targets
    from lezero.codegen.triton.jit import build_ptx

    parts = []
    for kernel in targets.backend("cuda").lower_module(module):
        config = kernel.configs[0]
        parts.append(f"// ---- kernel {kernel.name}: {kernel.kind}, grid {list(config.grid)}, "
                     f"num_warps={config.num_warps}\n{build_ptx(kernel, config).strip()}\n")
    return "\n".join(parts)


def _target_error(args) -> str | None:
    """Why ``--target`` does not fit ``--emit`` (None when it does)."""
    if args.target is None:
        return None
    if args.emit not in EMIT_TARGET:
        return f"--target={args.target} needs code to emit: --emit=llvm (cpu), --emit=triton or --emit=ptx (cuda)"
    if EMIT_TARGET[args.emit] != args.target:
        wanted = " or ".join(f"--emit={e}" for e, t in EMIT_TARGET.items() if t == args.target)
        return f"--emit={args.emit} is code for {EMIT_TARGET[args.emit]}, not --target={args.target} (use {wanted})"
    return None


def _write_atomically(path: str, text: str) -> None:
    """Write through a temporary file renamed over ``path``, so a failed run leaves no half-written
    output.  What is not a regular file (/dev/null, /dev/stdout, a pipe) is written directly, a
    symlink is followed, and the file gets the mode a plain open() would give it (mkstemp's is 0600)."""
    import stat

    if os.path.exists(path) and not os.path.isfile(path):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return
    path = os.path.realpath(path)
    try:
        mode = stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        mode = 0o666 & ~umask
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".lezero-opt-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def run(argv: list[str] | None = None, stdout=None, stderr=None) -> int:
    stdout = stdout or sys.stdout
    stderr = stderr or sys.stderr
    args = build_arg_parser().parse_args(argv)

    from lezero.passes import debug_channels, format_pass_list

    if args.list_passes:
        stdout.write(format_pass_list())
        return 0
    if args.debug.strip() == "list":
        stdout.write("".join(f"{name}\n" for name in sorted(debug_channels())))
        return 0
    try:
        with debug_output(args.debug, stderr):
            return _run(args, stdout, stderr)
    except UnknownDebugChannel as e:
        stderr.write(f"lezero-opt: error: {e}\n")
        return 1


class UnknownDebugChannel(ValueError):
    """``--debug`` names a channel no pass registered."""


class _ChannelFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{record.name.removeprefix('lezero.').replace('_', '-')}: {record.getMessage()}"


@contextlib.contextmanager
def debug_output(spec: str, stream):
    """Send the named debug channels (``"fusion,memory-plan"``) to ``stream`` while in the block."""
    from lezero.passes import debug_channels

    channels = debug_channels()
    names = [n.strip() for n in spec.split(",") if n.strip()]
    for n in names:
        if n not in channels:
            raise UnknownDebugChannel(f"unknown debug channel '{n}' (channels: {', '.join(sorted(channels))})")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(_ChannelFormatter())
    saved = []
    for n in names:
        logger = channels[n]
        saved.append((logger, logger.level, logger.propagate))
        logger.setLevel(logging.DEBUG)
        logger.propagate = False
        logger.addHandler(handler)
    try:
        yield
    finally:
        for logger, level, propagate in saved:
            logger.removeHandler(handler)
            logger.setLevel(level)
            logger.propagate = propagate


def _run(args, stdout, stderr) -> int:
    from lezero.passes import PipelineError, make_pipeline_runner

    problem = _target_error(args)
    args.cpu_target = None
    if problem is None and (args.cpu or args.triple):
        if EMIT_TARGET.get(args.emit) != "cpu":
            problem = "--cpu/--triple choose the CPU code is generated for: use them with --emit=llvm or --emit=asm"
        else:
            from lezero.codegen.errors import TargetError
            from lezero.codegen.llvm.target import cpu_target

            try:
                args.cpu_target = cpu_target(args.cpu, args.triple)
            except TargetError as e:
                problem = str(e)
    if problem is None and args.emit == "tensorboard" and args.output == "-":
        problem = "--emit=tensorboard writes event files: name their folder with -o DIR"
    if problem is None and args.emit == "ptx":
        from lezero.codegen.triton.jit import MISSING_TRITON

        try:
            import triton  # noqa: F401  (--emit=ptx builds with triton.compile)
        except ImportError:
            problem = f"--emit=ptx: {MISSING_TRITON}"
    if problem is not None:
        stderr.write(f"lezero-opt: error: {problem}\n")
        return 1

    from lezero.codegen import targets

    targets.register_all()  # a pipeline may name any target: partition{target=cuda}

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
    if args.output == "-" or args.emit == "tensorboard":  # tensorboard: -o is the log folder, written above
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
