"""MLIR's text format as tokens, and the cursor the parsers walk them with.

``tokenize`` turns text into parallel lists (kinds, texts, start offsets) with one regular
expression; a bad character ends the list with an ``error`` token whose text is the message, so
the parser reports it at the right place.  ``TokenCursor`` holds the position, turns an offset into
a ``file:line:col`` location, and reports errors as MLIR does: an "expected ..." whose offending
token starts a line is reported at the end of the previous line of code (where the missing thing
belongs).  The parsers (``attribute_parser.AttributeParser`` for types, attributes and locations,
``parser`` for ops, regions and SSA names) extend it, as MLIR splits its Lexer, AttributeParser
and OperationParser.
"""
from __future__ import annotations

import bisect
import re

from lezero.ir.diagnostics import ParseError
from lezero.ir.location import FileLineColLoc

MAX_NESTING = 64

# --- lexer ------------------------------------------------------------------------------------------

_SUFFIX_ID = r"(?:[0-9]+|[A-Za-z_$.\-][A-Za-z0-9_$.\-]*)"
_TOKEN = re.compile(r"""
  (?P<tensor>tensor\s*<\s*(?:(?:[0-9]+|\?)\s*x\s*)*)   # tensor< and its dims: the 'x' is not a token
| (?P<percent>%""" + _SUFFIX_ID + r"""(?:\#[0-9]+)?)
| (?P<caret>\^""" + _SUFFIX_ID + r""")
| (?P<hash>\#""" + _SUFFIX_ID + r""")
| (?P<bang>!""" + _SUFFIX_ID + r""")
| (?P<at>@(?:[A-Za-z_][A-Za-z0-9_$.]*|"(?:[^"\\\n]|\\[^\n])*"))
| (?P<string>"(?:[^"\\\n]|\\[^\n])*")
| (?P<float>[0-9]+\.[0-9]*(?:[eE][+-]?[0-9]+)?)
| (?P<int>0x[0-9A-Fa-f]+|[0-9]+)
| (?P<ident>[A-Za-z_][A-Za-z0-9_$.]*)
| (?P<arrow>->)
| (?P<punct>[(){}\[\]<>,:=?*+\-])
""", re.VERBOSE)
_SKIP = re.compile(r"(?:[ \t\r\n\f\v]+|//[^\n]*)*")
DIM = re.compile(r"[0-9]+|\?")
_ESCAPE = re.compile(r"\\(?:([\\\"nt])|([0-9A-Fa-f]{2})|(.?))", re.DOTALL)
_SIMPLE_ESCAPES = {"\\": b"\\", '"': b'"', "n": b"\n", "t": b"\t"}

# Kinds of the tokens that are single punctuation characters are the character itself.
EOF, ERROR = "eof", "error"


def tokenize(text: str):
    """Parallel lists: kinds, texts, start offsets.  A bad character ends the list with an
    ``error`` token (its text is the message); every list ends with ``eof``."""
    kinds, texts, starts = [], [], []
    pos, n = 0, len(text)
    match_token, skip = _TOKEN.match, _SKIP.match
    while True:
        pos = skip(text, pos).end()
        if pos >= n:
            break
        m = match_token(text, pos)
        if m is None:
            ch = text[pos]
            if ch == '"' or (ch == "@" and text.startswith('@"', pos)):
                message = "unterminated string"
            else:
                message = f"unexpected character {ch!r}"
            kinds.append(ERROR)
            texts.append(message)
            starts.append(pos)
            break
        kind = m.lastgroup
        kinds.append(kind if kind != "punct" else m.group())
        texts.append(m.group())
        starts.append(pos)
        pos = m.end()
    kinds.append(EOF)
    texts.append("")
    starts.append(n)
    return kinds, texts, starts


def unescape(body: str):
    """The value of a string literal's body, or an error message (str, False)."""
    if "\\" not in body:
        return body, True
    out, last = [], 0
    raw = body
    for m in _ESCAPE.finditer(raw):
        out.append(raw[last:m.start()].encode("utf-8"))
        simple, hexpair, bad = m.groups()
        if simple is not None:
            out.append(_SIMPLE_ESCAPES[simple])
        elif hexpair is not None:
            out.append(bytes([int(hexpair, 16)]))
        else:
            return "unknown escape in string literal", False
        last = m.end()
    out.append(raw[last:].encode("utf-8"))
    try:
        return b"".join(out).decode("utf-8"), True
    except UnicodeDecodeError:
        return "string literal is not valid UTF-8", False


class TokenCursor:
    """The token lists of one text and the position in them; ``depth`` counts nesting (regions,
    attributes) so that absurdly deep input is an error, not a RecursionError."""

    def __init__(self, text: str, filename: str, first_line: int):
        self.text = text
        self.filename = filename
        self.first_line = first_line
        self.kinds, self.texts, self.starts = tokenize(text)
        self.i = 0
        self._line_starts = None
        self.depth = 0

    # --- positions and errors ---------------------------------------------------------------
    def location_at(self, pos: int) -> FileLineColLoc:
        if self._line_starts is None:
            self._line_starts = [0] + [m.end() for m in re.finditer("\n", self.text)]
        line = bisect.bisect_right(self._line_starts, pos)
        col = pos - self._line_starts[line - 1] + 1
        return FileLineColLoc(self.filename, self.first_line + line - 1, col)

    def error_at(self, token: int, message: str) -> ParseError:
        """An error at token index ``token`` (a lexer error there takes precedence)."""
        if self.kinds[token] == ERROR:
            message = self.texts[token]
        return ParseError(message, self.location_at(self.starts[token]))

    def error(self, message: str) -> ParseError:
        return self.error_at(self.i, message)

    def wrong_token(self, message: str) -> ParseError:
        """``expected ...`` at the current token; if it begins a line, at the end of the previous
        line of code (skipping blank lines and comments), as MLIR reports it."""
        if self.kinds[self.i] == ERROR:
            return self.error(message)
        text = self.text
        pos = self.starts[self.i]
        if self.kinds[self.i] == EOF and pos > 0:
            pos -= 1
        end = pos
        while end > 0 and text[end - 1] in " \t\r":
            end -= 1
        if end == 0 or text[end - 1] != "\n":
            return ParseError(message, self.location_at(pos))
        while True:
            end -= 1  # step over the newline
            line_start = text.rfind("\n", 0, end) + 1
            comment = text.find("//", line_start, end)
            if comment != -1:
                end = comment
            while end > 0 and text[end - 1] in " \t\r":
                end -= 1
            if end == 0:
                return ParseError(message, self.location_at(pos))
            if text[end - 1] != "\n":
                return ParseError(message, self.location_at(end))

    # --- token helpers --------------------------------------------------------------------------
    @property
    def kind(self) -> str:
        return self.kinds[self.i]

    def expect(self, kind: str, what: str | None = None) -> int:
        if self.kinds[self.i] != kind:
            raise self.wrong_token(f"expected {what or repr(kind)}")
        self.i += 1
        return self.i - 1

    def accept(self, kind: str) -> bool:
        if self.kinds[self.i] == kind:
            self.i += 1
            return True
        return False

    def at_keyword(self, word: str) -> bool:
        return self.kinds[self.i] == "ident" and self.texts[self.i] == word

    def enter(self) -> None:
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise self.error(f"nesting deeper than {MAX_NESTING} levels")

    def int_value(self, token: int) -> int:
        """An ``int`` token's value (decimal or ``0x`` hex)."""
        text = self.texts[token]
        if text.startswith("0x"):
            return int(text, 16)
        if len(text) > 64:
            raise self.error_at(token, "integer literal is too large")
        return int(text)

    def string_value(self, token: int, text: str | None = None) -> str:
        text = self.texts[token] if text is None else text
        value, ok = unescape(text[1:-1])
        if not ok:
            raise self.error_at(token, value)
        return value
