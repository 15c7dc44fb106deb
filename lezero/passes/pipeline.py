"""Pipeline text, as mlir-opt writes it: ``canonicalize,cse,fuse{max-ops=16 debug=true}``.

Passes are separated by commas; a pass's options sit in braces, separated by spaces, each
``key=value`` (a bare ``key`` means true).  A value may itself be a comma list
(``autodiff{wrt=0,1}``), a quoted string, or a braced group.  An outer ``builtin.module(...)``
is accepted and ignored, since every lezero pass runs on the module.
"""
from __future__ import annotations

from lezero.passes.pass_base import Pass, PipelineError
from lezero.passes.registry import _PASSES, unknown_pass_message

_NAME_CHARS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.")
_WRAPPERS = ("builtin.module",)


def parse_pipeline(text: str) -> list[Pass]:
    """The passes ``text`` names, configured; ``PipelineError`` pointing at the offending part."""
    return _Parser(text).parse()


def format_pipeline(passes) -> str:
    """The inverse of ``parse_pipeline`` (options at their defaults left out)."""
    return ",".join(p.pipeline_text() for p in passes)


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.pos = 0

    def error(self, message: str, position: int | None = None):
        raise PipelineError(message, self.text, self.pos if position is None else position)

    def skip_ws(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1

    def at_end(self) -> bool:
        return self.pos >= len(self.text)

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def parse(self) -> list[Pass]:
        self.skip_ws()
        passes = self.parse_list(closing="")
        if not self.at_end():
            self.error(f"unexpected '{self.peek()}' in pass pipeline")
        return passes

    def parse_list(self, closing: str) -> list[Pass]:
        """Comma-separated passes up to ``closing`` (a ')' or the end of the text)."""
        passes: list[Pass] = []
        if self.at_end() or self.peek() == closing:
            return passes
        while True:
            self.skip_ws()
            passes.extend(self.parse_element())
            self.skip_ws()
            if self.peek() == ",":
                self.pos += 1
                self.skip_ws()
                if self.at_end() or self.peek() == closing:
                    self.error("expected a pass name after ','")
                continue
            return passes

    def parse_name(self) -> str:
        start = self.pos
        while not self.at_end() and self.peek() in _NAME_CHARS:
            self.pos += 1
        if self.pos == start:
            what = f"'{self.peek()}'" if not self.at_end() else "the end of the pipeline"
            self.error(f"expected a pass name, got {what}")
        return self.text[start:self.pos]

    def parse_element(self) -> list[Pass]:
        start = self.pos
        name = self.parse_name()
        self.skip_ws()
        if self.peek() == "(":
            if name not in _WRAPPERS:
                self.error(f"unsupported nested pipeline '{name}(...)': lezero passes run on the whole "
                           f"module; write them at the top level or inside builtin.module(...)", start)
            self.pos += 1
            self.skip_ws()
            inner = self.parse_list(closing=")")
            self.skip_ws()
            if self.peek() != ")":
                self.error(f"expected ')' to close '{name}('")
            self.pos += 1
            return inner
        cls = _PASSES.get(name)
        if cls is None:
            self.error(unknown_pass_message(name), start)
        values: dict[str, str] = {}
        if self.peek() == "{":
            values = self.parse_options(cls)
        return [cls.from_options(values, self.text, start)]

    def parse_options(self, cls) -> dict[str, str]:
        open_pos = self.pos
        self.pos += 1
        values: dict[str, str] = {}
        while True:
            self.skip_ws()
            if self.at_end():
                self.error(f"unterminated options of pass '{cls.name}': expected '}}'", open_pos)
            if self.peek() == "}":
                self.pos += 1
                return values
            key_pos = self.pos
            key = self.parse_name()
            if self.peek() == "=":
                self.pos += 1
                value = self.parse_value(cls, key)
            elif self.at_end() or self.peek().isspace() or self.peek() == "}":
                value = "true"
            else:
                self.error(f"expected '=' or a space after option '{key}' of pass '{cls.name}', got '{self.peek()}'")
            if key in values:
                self.error(f"option '{key}' of pass '{cls.name}' is given twice", key_pos)
            cls.from_options({key: value}, self.text, key_pos)  # reject a bad key or value here, pointing at it
            values[key] = value

    def parse_value(self, cls, key: str) -> str:
        if self.peek() == '"':
            end = self.text.find('"', self.pos + 1)
            if end < 0:
                self.error(f"unterminated string in option '{key}' of pass '{cls.name}'")
            value = self.text[self.pos:end + 1]
            self.pos = end + 1
            return value
        if self.peek() == "{":
            depth, start = 0, self.pos
            while not self.at_end():
                c = self.peek()
                depth += (c == "{") - (c == "}")
                self.pos += 1
                if depth == 0:
                    return self.text[start + 1:self.pos - 1]
            self.error(f"unbalanced '{{' in option '{key}' of pass '{cls.name}'", start)
        start = self.pos
        while not self.at_end() and not self.peek().isspace() and self.peek() not in "{}":
            self.pos += 1
            # a comma list may continue after a space: wrt=0, 1
            if self.text[self.pos - 1] == ",":
                self.skip_ws()
        value = self.text[start:self.pos]
        if value == "":
            self.error(f"expected a value for option '{key}' of pass '{cls.name}'")
        return "".join(value.split())
