"""The pass manager: runs passes in order, verifies after each, prints and times them on request.

``run_pipeline(module, "canonicalize,cse,dce")`` is the one-line use.  A pass that raises a
user-facing error, or leaves IR the verifier rejects, surfaces as ``PassError``: an ``IRError``
whose message names the pass and whose location is the offending op's.
"""
from __future__ import annotations

import sys
import time
from typing import Callable, Iterable, TextIO

from lezero.ir.core import ModuleOp
from lezero.ir.diagnostics import Diagnostic, IRError, VerifyError
from lezero.ir.location import UNKNOWN
from lezero.ir.opdef import OpError
from lezero.passes.pass_base import Pass, PipelineError
from lezero.passes.pipeline import parse_pipeline


class PassError(IRError):
    """A pass failed, or left IR the verifier rejects.  ``pass_name`` says which pass."""

    def __init__(self, message: str, location=UNKNOWN, pass_name: str = "",
                 diagnostics: list[Diagnostic] | None = None):
        super().__init__(message, location)
        self.pass_name = pass_name
        self.diagnostics = diagnostics or [Diagnostic("error", message, location)]


class PassInstrumentation:
    """Hooks around each pass; subclass and give one to ``PassManager.add_instrumentation``."""

    def before_pass(self, pass_: Pass, module: ModuleOp) -> None:
        pass

    def after_pass(self, pass_: Pass, module: ModuleOp) -> None:
        pass

    def after_pipeline(self, module: ModuleOp) -> None:
        pass


def _print(module: ModuleOp) -> str:
    from lezero.ir.printer import print_module

    return print_module(module)


def _dump_header(when: str, pass_: Pass) -> str:
    return f"// -----// IR Dump {when} {type(pass_).__name__} ({pass_.name}) //----- //\n"


class IRPrinter(PassInstrumentation):
    """``--print-ir-before-all``, ``--print-ir-after-all``, ``--print-ir-after-change``."""

    def __init__(self, stream: TextIO, before_all=False, after_all=False, after_change=False):
        self.stream = stream
        self.before_all = before_all
        self.after_all = after_all
        self.after_change = after_change
        self._before_text: str | None = None

    def before_pass(self, pass_, module):
        if self.before_all or self.after_change:
            self._before_text = _print(module)
        if self.before_all:
            self.stream.write(_dump_header("Before", pass_) + self._before_text + "\n")

    def after_pass(self, pass_, module):
        if not (self.after_all or self.after_change):
            return
        text = _print(module)
        if self.after_all or text != self._before_text:
            self.stream.write(_dump_header("After", pass_) + text + "\n")
        self._before_text = None


class PassTimer:
    """Wall time per pass (in pipeline order) and of verification; reported as mlir's --time-passes."""

    def __init__(self):
        self.entries: list[tuple[str, float]] = []
        self.verifier = 0.0

    def report(self) -> str:
        total = sum(t for _, t in self.entries) + self.verifier
        rows = list(self.entries) + ([("(A) verifier", self.verifier)] if self.verifier else [])
        rule = "===" + "-" * 73 + "==="
        lines = [rule, "... Execution time report ...".center(79).rstrip(), rule,
                 f"  Total Execution Time: {total:.4f} seconds", "", "  ----Wall Time----  ----Name----"]
        for name, t in rows + [("Total", total)]:
            share = 100.0 * t / total if total > 0 else 0.0
            lines.append(f"  {t:8.4f} ({share:5.1f}%)  {name}")
        return "\n".join(lines) + "\n"


class PassManager:
    """An ordered list of passes and the checks around them."""

    def __init__(self, passes: Iterable[Pass] | str = (), *, verify_each: bool = True,
                 verify_input: bool = True, allow_unregistered: bool = False,
                 print_ir_before_all: bool = False, print_ir_after_all: bool = False,
                 print_ir_after_change: bool = False, time_passes: bool = False,
                 stream: TextIO | None = None):
        self.passes: list[Pass] = []
        self.verify_each = verify_each
        self.verify_input = verify_input
        self.allow_unregistered = allow_unregistered
        self.time_passes = time_passes
        self.stream = stream
        self.instrumentations: list[PassInstrumentation] = []
        self.timer: PassTimer | None = None  # the last run's timings, when time_passes
        if print_ir_before_all or print_ir_after_all or print_ir_after_change:
            self.add_instrumentation(IRPrinter(self._stream, print_ir_before_all, print_ir_after_all,
                                               print_ir_after_change))
        self.add(passes)

    @property
    def _stream(self) -> TextIO:
        return _LazyStream(self)

    def add(self, passes: Pass | Iterable[Pass] | str) -> "PassManager":
        """Append passes: an instance, a list of them, or pipeline text."""
        if isinstance(passes, str):
            passes = parse_pipeline(passes)
        elif isinstance(passes, Pass):
            passes = [passes]
        for p in passes:
            if not isinstance(p, Pass):
                raise TypeError(f"expected a Pass, got {type(p).__name__}")
            self.passes.append(p)
        return self

    def add_instrumentation(self, instrumentation: PassInstrumentation) -> "PassManager":
        self.instrumentations.append(instrumentation)
        return self

    def _verify(self, module: ModuleOp, after: Pass | None) -> None:
        from lezero.ir.verifier import verify

        start = time.perf_counter()
        try:
            verify(module, allow_unregistered=self.allow_unregistered)
        except VerifyError as e:
            what = f"pass '{after.name}' left invalid IR" if after is not None else "invalid IR before the first pass"
            diagnostics = getattr(e, "diagnostics", None) or [e.diagnostic]
            raise PassError(f"{what}: {e.message}", e.location, after.name if after else "",
                            [Diagnostic(d.severity, f"{what}: {d.message}", d.location) for d in diagnostics]) from e
        finally:
            if self.timer is not None:
                self.timer.verifier += time.perf_counter() - start

    def run(self, module: ModuleOp) -> ModuleOp:
        """Run every pass on ``module`` (in place) and return it."""
        self.timer = PassTimer() if self.time_passes else None
        if self.verify_each and self.verify_input and self.passes:
            self._verify(module, None)
        for p in self.passes:
            for inst in self.instrumentations:
                inst.before_pass(p, module)
            start = time.perf_counter()
            try:
                p.run(module)
            except PassError:
                raise
            except IRError as e:
                raise PassError(f"pass '{p.name}' failed: {e.message}", e.location, p.name) from e
            except OpError as e:
                raise PassError(f"pass '{p.name}' failed: {e}", UNKNOWN, p.name) from e
            except Exception as e:
                e.add_note(f"while running pass '{p.name}'")
                raise
            if self.timer is not None:
                self.timer.entries.append((p.name, time.perf_counter() - start))
            for inst in self.instrumentations:
                inst.after_pass(p, module)
            if self.verify_each:
                self._verify(module, p)
        for inst in self.instrumentations:
            inst.after_pipeline(module)
        if self.timer is not None:
            self._stream.write(self.timer.report())
        return module

    def __str__(self) -> str:
        from lezero.passes.pipeline import format_pipeline

        return format_pipeline(self.passes)


class _LazyStream:
    """The manager's stream, or sys.stderr as it is at write time (so tests can capture it)."""

    def __init__(self, pm: PassManager):
        self.pm = pm

    def write(self, text: str) -> int:
        return (self.pm.stream or sys.stderr).write(text)


def run_pipeline(module: ModuleOp, pipeline: str | Iterable[Pass], *, verify_each: bool = True,
                 **options) -> ModuleOp:
    """Run ``pipeline`` (text like ``"canonicalize,cse,dce"`` or Pass instances) on ``module``.

    Keyword options are those of ``PassManager`` (``print_ir_after_all``, ``time_passes``,
    ``stream``, ...).  Returns the module, transformed in place.
    """
    return PassManager(pipeline, verify_each=verify_each, **options).run(module)


def make_pipeline_runner(pipeline: str, **options) -> Callable[[ModuleOp], ModuleOp]:
    """Parse ``pipeline`` now (raising ``PipelineError``) and return a function running it on a module."""
    options.setdefault("verify_input", False)  # lezero-opt verifies what it parsed itself
    return PassManager(pipeline, **options).run


__all__ = ["PassError", "PassInstrumentation", "IRPrinter", "PassTimer", "PassManager", "run_pipeline",
           "make_pipeline_runner", "PipelineError"]
