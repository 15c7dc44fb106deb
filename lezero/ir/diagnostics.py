"""Diagnostics: errors that point at the source.

``file:line:col: error: 'lz.add' op operand shapes 2x3 and 4x3 are not broadcast-compatible``,
then the source line with a caret under the column, as MLIR prints them.  A user's mistake is an
``IRError`` carrying a location, never a Python traceback.
"""
from __future__ import annotations

from dataclasses import dataclass

from lezero.ir.location import UNKNOWN, Location


@dataclass
class Diagnostic:
    severity: str  # "error", "warning", "note" or "remark"
    message: str
    location: Location = UNKNOWN

    def __str__(self) -> str:
        return f"{self.location.describe()}: {self.severity}: {self.message}"


class IRError(Exception):
    """A user-facing error with a location (malformed text, an invalid op, a bad input)."""

    def __init__(self, message: str, location: Location = UNKNOWN):
        super().__init__(message)
        self.message = message
        self.location = location

    @property
    def diagnostic(self) -> Diagnostic:
        return Diagnostic("error", self.message, self.location)

    def __str__(self) -> str:
        return str(self.diagnostic)


class ParseError(IRError):
    pass


class VerifyError(IRError):
    pass


class SourceManager:
    """Remembers the text of each file so diagnostics can show the offending line."""

    def __init__(self):
        self._files: dict[str, list[str]] = {}

    def add(self, filename: str, text: str, first_line: int = 1) -> None:
        lines = self._files.setdefault(filename, [])
        needed = first_line - 1 + text.count("\n") + 1
        if len(lines) < needed:
            lines.extend([""] * (needed - len(lines)))
        for i, line in enumerate(text.split("\n")):
            lines[first_line - 1 + i] = line

    def line(self, filename: str, line: int) -> str | None:
        lines = self._files.get(filename)
        if lines is None or not 1 <= line <= len(lines):
            return None
        return lines[line - 1]

    def render(self, diagnostic: Diagnostic) -> str:
        """The diagnostic, then its source line and a caret, when the line is known."""
        text = str(diagnostic)
        flc = diagnostic.location.file_line_col()
        if flc is not None:
            src = self.line(flc.filename, flc.line)
            if src is not None:
                caret = " " * max(flc.col - 1, 0) + "^"
                text += f"\n{src}\n{caret}"
        return text


class InterpretError(IRError):
    """The reference interpreter could not run an op (a runtime shape mismatch, an index out of
    range, an op with no reference)."""


class InputError(InterpretError):
    """The arrays given to ``interpret`` do not match the function's signature."""
