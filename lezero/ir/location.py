"""Source locations, printed as MLIR's ``loc(...)``.

A location says where an op came from: ``file:line:col`` of IR text or a Python line, or a name
(an ONNX node), optionally wrapping another location.
"""
from __future__ import annotations

from dataclasses import dataclass


class Location:
    def describe(self) -> str:
        """The prefix an error message starts with."""
        raise NotImplementedError

    def file_line_col(self) -> "FileLineColLoc | None":
        return None


@dataclass(frozen=True)
class UnknownLoc(Location):
    def describe(self) -> str:
        return "<unknown>"

    def __str__(self) -> str:
        return "loc(unknown)"


def _quote(s: str) -> str:
    from lezero.ir.attributes import escape_string

    return '"' + escape_string(s) + '"'


@dataclass(frozen=True)
class FileLineColLoc(Location):
    filename: str
    line: int
    col: int

    def describe(self) -> str:
        return f"{self.filename}:{self.line}:{self.col}"

    def file_line_col(self):
        return self

    def body(self) -> str:
        return f"{_quote(self.filename)}:{self.line}:{self.col}"

    def __str__(self) -> str:
        return f"loc({self.body()})"


@dataclass(frozen=True)
class NameLoc(Location):
    name: str
    child: Location | None = None

    def describe(self) -> str:
        if self.child is not None and not isinstance(self.child, UnknownLoc):
            return f"{self.child.describe()} ({self.name})"
        return self.name

    def file_line_col(self):
        return self.child.file_line_col() if self.child is not None else None

    def body(self) -> str:
        inner = "" if self.child is None else f"({_body(self.child)})"
        return f"{_quote(self.name)}{inner}"

    def __str__(self) -> str:
        return f"loc({self.body()})"


@dataclass(frozen=True)
class FusedLoc(Location):
    locations: tuple

    def describe(self) -> str:
        return ", ".join(l.describe() for l in self.locations)

    def file_line_col(self):
        for l in self.locations:
            flc = l.file_line_col()
            if flc is not None:
                return flc
        return None

    def body(self) -> str:
        return "fused[" + ", ".join(_body(l) for l in self.locations) + "]"

    def __str__(self) -> str:
        return f"loc({self.body()})"


def _body(loc: Location) -> str:
    return "unknown" if isinstance(loc, UnknownLoc) else loc.body()


UNKNOWN = UnknownLoc()
