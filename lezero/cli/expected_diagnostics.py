"""MLIR's ``--verify-diagnostics``: match ``// expected-error @+1 {{...}}`` comments to what was reported.

A comment names a severity (error, warning, note, remark), an optional line designator (``@+N``,
``@-N``, ``@above``, ``@below``, ``@N`` absolute; none means its own line) and a message substring
in ``{{...}}``.  Every expectation must be met by a diagnostic on that line, and every diagnostic
must be expected.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from lezero.ir.diagnostics import Diagnostic

_EXPECTED = re.compile(r"//\s*expected-(error|warning|note|remark)\s*(@[-+]?\d+|@above|@below)?\s*\{\{(.*?)\}\}")


@dataclass
class Expectation:
    severity: str
    line: int
    message: str
    comment_line: int
    met: bool = False


def parse_expectations(text: str, first_line: int) -> list[Expectation]:
    out = []
    lines = text.split("\n")
    for i, line in enumerate(lines):
        lineno = first_line + i
        for m in _EXPECTED.finditer(line):
            where = m.group(2)
            if where is None:
                target = lineno
            elif where == "@above":
                target = lineno - 1
            elif where == "@below":
                target = lineno + 1
            elif where[1] in "+-":
                target = lineno + int(where[1:])
            else:
                target = int(where[1:])
            out.append(Expectation(m.group(1), target, m.group(3), lineno))
    return out


def check(diagnostics: list[Diagnostic], expectations: list[Expectation], filename: str) -> list[str]:
    """Problems as ``file:line: error: ...`` lines; empty when everything matched."""
    problems = []
    for d in diagnostics:
        flc = d.location.file_line_col()
        line = flc.line if flc is not None else None
        match = next((e for e in expectations if not e.met and e.severity == d.severity and e.line == line
                      and e.message in d.message), None)
        if match is None:
            problems.append(f"{d.location.describe()}: error: unexpected {d.severity}: {d.message}")
        else:
            match.met = True
    for e in expectations:
        if not e.met:
            problems.append(f"{filename}:{e.comment_line}: error: expected {e.severity} \"{e.message}\" "
                            f"was not produced (on line {e.line})")
    return problems
