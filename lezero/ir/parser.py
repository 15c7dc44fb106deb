"""Parse MLIR's text format into the IR: a small lexer and a recursive-descent parser.

Accepted: MLIR's generic op form (with ``<{properties}>``, taken as attributes, and regions),
the custom forms of ``module``/``builtin.module``, ``func.func`` and ``func.return`` (bare
``return`` inside a function), the builtin types lezero uses and the builtin attributes
(integers, floats, hex float bit patterns, strings, ``true``/``false``, ``unit``, arrays,
``array<T: ...>``, types, ``dense<...>`` including the hex blob form, ``@symbols``,
dictionaries), every location form (``loc("f":1:2)``, ``loc("name")``, ``loc("name"(...))``,
``loc(unknown)``, ``loc(fused[...])``, ``loc(#alias)`` with ``#alias = loc(...)`` defined anywhere
at top level, as mlir-opt prints them), attribute and type aliases (``#a = ...``, ``!t = ...``)
and ``//`` comments.

Each op gets the ``FileLineColLoc`` of the start of its statement unless a trailing ``loc(...)``
says otherwise; block arguments get the location of their name.  Malformed text raises
``ParseError`` at the offending token, never another exception.  Values must be defined before
they are used (lezero's regions are SSA CFG regions): a use before the definition is reported as
an undeclared value.  Names are scoped as in MLIR: a region sees the values of the regions around
it, except that ``builtin.module``, ``func.func`` and ops whose definition has the
``isolated_from_above`` trait start a fresh scope.  Following MLIR, an "expected ..." error whose
offending token starts a line is reported at the end of the previous line of code (where the
missing thing belongs).
"""
from __future__ import annotations

import bisect
import re

import numpy as np

from lezero.ir.attributes import (ArrayAttr, Attribute, BoolAttr, DenseArrayAttr, DenseElementsAttr,
                                  DictionaryAttr, FloatAttr, IntegerAttr, StringAttr, SymbolRefAttr,
                                  TypeAttr, UnitAttr, float_from_bits)
from lezero.ir.core import Block, FuncOp, ModuleOp, Operation, Region, Value
from lezero.ir.diagnostics import ParseError
from lezero.ir.location import UNKNOWN, FileLineColLoc, FusedLoc, Location, NameLoc
from lezero.ir.opdef import ISOLATED_FROM_ABOVE, lookup
from lezero.ir.types import ELEMENT_TYPES, F64, I64, ElementType, FunctionType, TensorType, Type

SPLIT_MARKER = "// -----"

# --- splitting ------------------------------------------------------------------------------------


def split_input_file(text: str) -> list[tuple[str, int]]:
    """Split on ``// -----`` lines: ``(chunk, line number of the chunk's first line)`` pairs.

    The marker lines belong to no chunk; line numbers stay those of the whole file.
    """
    chunks, current, first = [], [], 1
    for number, line in enumerate(text.split("\n"), start=1):
        if line.strip().startswith(SPLIT_MARKER):
            chunks.append(("\n".join(current), first))
            current, first = [], number + 1
        else:
            current.append(line)
    chunks.append(("\n".join(current), first))
    return chunks


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
_DIM = re.compile(r"[0-9]+|\?")
_ESCAPE = re.compile(r"\\(?:([\\\"nt])|([0-9A-Fa-f]{2})|(.?))", re.DOTALL)
_SIMPLE_ESCAPES = {"\\": b"\\", '"': b'"', "n": b"\n", "t": b"\t"}

# Kinds of the tokens that are single punctuation characters are the character itself.
EOF, ERROR = "eof", "error"


def _tokenize(text: str):
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


def _unescape(body: str):
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


# --- parser -------------------------------------------------------------------------------------------

_MAX_NESTING = 64
_MAX_SPLAT_ELEMENTS = 1 << 28  # a splat is stored expanded: refuse absurd sizes
_ISOLATED = ("builtin.module", "func.func")
_VISIBILITIES = ("private", "public", "nested")


class _AliasLoc(Location):
    """A ``loc(#name)`` whose alias is defined later in the file; replaced once all is parsed."""

    def __init__(self, name: str, token: int):
        self.name = name
        self.token = token


class _Bits:
    """A float element of a dense literal written as its bit pattern (``0x7FC00001``)."""

    __slots__ = ("bits",)

    def __init__(self, bits: int):
        self.bits = bits


def _is_isolated(name: str) -> bool:
    """Whether the op's regions start a new SSA name scope (MLIR's IsolatedFromAbove)."""
    if name in _ISOLATED:
        return True
    definition = lookup(name)
    return definition is not None and definition.has_trait(ISOLATED_FROM_ABOVE)


def _int_range(t: ElementType) -> tuple[int, int]:
    if t.name.startswith("ui"):
        return 0, (1 << t.bitwidth) - 1
    # signless, as MLIR: any bit pattern, written signed or unsigned
    return -(1 << (t.bitwidth - 1)), (1 << t.bitwidth) - 1


class _Parser:
    def __init__(self, text: str, filename: str, first_line: int):
        self.text = text
        self.filename = filename
        self.first_line = first_line
        self.kinds, self.texts, self.starts = _tokenize(text)
        self.i = 0
        self._line_starts = None
        # SSA names: one table per isolated-from-above scope; each region records what it
        # defined so its names go out of scope at its end.
        self.values: dict[str, list[Value]] = {}  # `%name` -> its result group (or argument)
        self.isolated_stack: list[dict] = []
        self.region_defs: list[list[str]] = []
        self.depth = 0
        self.func_depth = 0
        self.attr_aliases: dict[str, Attribute] = {}
        self.type_aliases: dict[str, Type] = {}
        self.loc_aliases: dict[str, Location] = {}
        self.deferred_locs = False
        self.type_cache: dict = {}

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
        if self.depth > _MAX_NESTING:
            raise self.error(f"nesting deeper than {_MAX_NESTING} levels")

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
        value, ok = _unescape(text[1:-1])
        if not ok:
            raise self.error_at(token, value)
        return value

    # --- SSA names ----------------------------------------------------------------------------------
    def push_isolated(self) -> None:
        self.isolated_stack.append(self.values)
        self.values = {}

    def pop_isolated(self) -> None:
        self.values = self.isolated_stack.pop()

    def define(self, token: int, name: str, values: list) -> None:
        if name in self.values:
            raise self.error_at(token, f"redefinition of SSA value '{name}'")
        self.values[name] = values
        self.region_defs[-1].append(name)

    def resolve(self, token: int, type_: Type) -> Value:
        """The value named by the ``%`` token, checked to have ``type_``."""
        text = self.texts[token]
        name, _, number = text.partition("#")
        group = self.values.get(name)
        if group is None:
            raise self.error_at(token, f"use of undeclared SSA value name '{name}'")
        index = int(number) if number and len(number) < 10 else len(group) if number else 0
        if index >= len(group):
            raise self.error_at(token, f"reference to invalid result number '{text}'")
        value = group[index]
        if value.type != type_:
            raise self.error_at(token, f"use of value '{text}' expects different type than prior uses: "
                                       f"'{type_}' vs '{value.type}'")
        return value

    # --- top level --------------------------------------------------------------------------------------
    def parse_top(self) -> ModuleOp:
        module = ModuleOp(location=FileLineColLoc(self.filename, self.first_line, 1))
        body = module.body
        self.region_defs.append([])
        while self.kind != EOF:
            if self.kind in ("hash", "bang") and self.kinds[self.i + 1] == "=":
                self.parse_alias_definition()
            else:
                self.parse_operation(body)
        if self.deferred_locs:
            self.resolve_deferred_locations(module)
        if len(body.ops) == 1 and isinstance(body.ops[0], ModuleOp):
            inner = body.ops[0]
            body.remove(inner)
            return inner
        return module

    def parse_alias_definition(self) -> None:
        token = self.i
        kind, name = self.kind, self.texts[self.i][1:]
        self.i += 2
        taken = name in self.type_aliases if kind == "bang" else name in self.attr_aliases or name in self.loc_aliases
        if taken:
            raise self.error_at(token, f"redefinition of alias id '{name}'")
        if kind == "bang":
            self.type_aliases[name] = self.parse_type()
        elif self.at_keyword("loc") and self.kinds[self.i + 1] == "(":
            self.loc_aliases[name] = self.parse_location()
        else:
            self.attr_aliases[name] = self.parse_attribute()

    # --- operations -----------------------------------------------------------------------------------------
    def parse_operation(self, block: Block) -> Operation:
        start = self.i
        bound: list[tuple[int, str, int]] = []  # (token, name, count)
        if self.kind == "percent":
            while True:
                token = self.expect("percent", "SSA value name")
                name = self.texts[token]
                if "#" in name:
                    raise self.error_at(token, "result name cannot have a result number")
                if name in self.values or any(name == b[1] for b in bound):
                    raise self.error_at(token, f"redefinition of SSA value '{name}'")
                count = 1
                if self.accept(":"):
                    count_token = self.expect("int", "integer number of results")
                    count = self.int_value(count_token)
                    if count < 1:
                        raise self.error_at(count_token, "expected a positive number of results")
                bound.append((token, name, count))
                if not self.accept(","):
                    break
            self.expect("=", "'='")
        n_bound = sum(b[2] for b in bound)
        if self.kind == "string":
            op = self.parse_generic_operation(n_bound if bound else None)
        elif self.kind == "ident":
            op = self.parse_custom_operation(n_bound if bound else None)
        else:
            raise self.wrong_token("expected operation name in quotes")
        if self.at_keyword("loc") and self.kinds[self.i + 1] == "(":
            op.location = self.parse_location()
        else:
            op.location = self.location_at(self.starts[start])
        block.ops.append(op)
        op.parent = block
        index = 0
        for token, name, count in bound:
            self.define(token, name, op.results[index:index + count])
            index += count
        return op

    def parse_generic_operation(self, n_bound: int | None) -> Operation:
        name_token = self.i
        name = self.string_value(name_token)
        if not name:
            raise self.error_at(name_token, "empty operation name")
        self.i += 1
        self.expect("(", "'(' to start operand list")
        operand_tokens = []
        if self.kind != ")":
            while True:
                operand_tokens.append(self.expect("percent", "SSA operand"))
                if not self.accept(","):
                    break
        self.expect(")", "')' to end operand list")
        if self.kind == "[":
            raise self.error("block successors are not supported")
        attributes: dict[str, Attribute] = {}
        if self.kind == "<":
            self.i += 1
            self.parse_attr_dict_into(attributes)
            self.expect(">", "'>' to end properties")
        isolated = _is_isolated(name)
        regions = []
        if self.kind == "(":
            self.i += 1
            if isolated:
                self.push_isolated()
            self.func_depth += name == "func.func"
            while True:
                regions.append(self.parse_region())
                if not self.accept(","):
                    break
            self.func_depth -= name == "func.func"
            if isolated:
                self.pop_isolated()
            self.expect(")", "')' to end region list")
        if self.kind == "{":
            self.parse_attr_dict_into(attributes)
        self.expect(":", "':' followed by the operation's type")
        type_token = self.i
        op_type = self.parse_type()
        if not isinstance(op_type, FunctionType):
            raise self.error_at(type_token, "expected function type")
        if len(op_type.inputs) != len(operand_tokens):
            plural = "" if len(operand_tokens) == 1 else "s"
            raise self.error_at(type_token, f"expected {len(operand_tokens)} operand type{plural} "
                                            f"but had {len(op_type.inputs)}")
        if n_bound is not None and n_bound != len(op_type.results):
            raise self.error_at(type_token, f"expected {n_bound} results, got {len(op_type.results)}")
        operands = [self.resolve(t, ty) for t, ty in zip(operand_tokens, op_type.inputs)]
        if name in _ISOLATED:
            return self.make_structural(name_token, name, operands, op_type, attributes, regions)
        return Operation(name, operands, op_type.results, attributes, regions)

    def make_structural(self, token, name, operands, op_type, attributes, regions) -> Operation:
        """A generic-form ``builtin.module`` or ``func.func`` as a ModuleOp / FuncOp."""
        if operands or op_type.results:
            raise self.error_at(token, f"'{name}' op takes no operands and has no results")
        if len(regions) != 1:
            raise self.error_at(token, f"'{name}' op expects 1 region, got {len(regions)}")
        region = regions[0]
        sym_name = attributes.get("sym_name")
        if sym_name is not None and not isinstance(sym_name, StringAttr):
            raise self.error_at(token, f"'{name}' op attribute 'sym_name' must be a string")
        if name == "builtin.module":
            return self.module_from_region(region, attributes, token)
        if sym_name is None:
            raise self.error_at(token, "'func.func' op requires attribute 'sym_name'")
        ft = attributes.get("function_type")
        if not isinstance(ft, TypeAttr) or not isinstance(ft.type, FunctionType):
            raise self.error_at(token, "'func.func' op requires a function type attribute 'function_type'")
        if region.blocks:
            args = region.blocks[0].args
            if len(args) != len(ft.type.inputs):
                raise self.error_at(token, f"entry block must have {len(ft.type.inputs)} arguments to match "
                                           f"function signature")
            for i, (arg, t) in enumerate(zip(args, ft.type.inputs)):
                if arg.type != t:
                    raise self.error_at(token, f"type of entry block argument #{i}('{arg.type}') must match "
                                               f"the type of the corresponding argument in function "
                                               f"signature('{t}')")
        rest = {k: v for k, v in attributes.items() if k not in ("sym_name", "function_type")}
        return FuncOp(sym_name.value, ft.type, attributes=rest, body=region)

    def parse_custom_operation(self, n_bound: int | None) -> Operation:
        token = self.i
        name = self.texts[token]
        if name in ("module", "builtin.module"):
            parse = self.parse_module_op
        elif name == "func.func":
            parse = self.parse_func_op
        elif name == "func.return" or (name == "return" and self.func_depth):
            parse = self.parse_return_op
        else:
            raise self.error_at(token, f"custom op '{name}' is unknown")
        if n_bound:
            raise self.error_at(token, f"operation defines 0 results but was provided {n_bound} to bind")
        self.i += 1
        return parse()

    def parse_module_op(self) -> ModuleOp:
        attributes: dict[str, Attribute] = {}
        if self.kind == "at":
            attributes["sym_name"] = StringAttr(self.symbol_name(self.i))
            self.i += 1
        if self.at_keyword("attributes"):
            self.i += 1
            dict_token = self.i
            self.parse_attr_dict_into(attributes)
            if not isinstance(attributes.get("sym_name", StringAttr("")), StringAttr):
                raise self.error_at(dict_token, "'builtin.module' op attribute 'sym_name' must be a string")
        region_token = self.i
        self.push_isolated()
        region = self.parse_region()
        self.pop_isolated()
        return self.module_from_region(region, attributes, region_token)

    def module_from_region(self, region, attributes, token) -> ModuleOp:
        if len(region.blocks) > 1 or (region.blocks and region.blocks[0].args):
            raise self.error_at(token, "'builtin.module' op expects one block without arguments")
        op = ModuleOp(attributes=attributes)
        if region.blocks:
            op.regions = []
            op.add_region(region)
        return op

    def parse_func_op(self) -> FuncOp:
        attributes: dict[str, Attribute] = {}
        if self.kind == "ident" and self.texts[self.i] in _VISIBILITIES:
            attributes["sym_visibility"] = StringAttr(self.texts[self.i])
            self.i += 1
        if self.kind != "at":
            raise self.wrong_token("expected valid '@'-identifier for symbol name")
        name = self.symbol_name(self.i)
        self.i += 1
        # arguments: `%name: type {attrs} loc(...)`, or `type {attrs}` in a declaration
        self.expect("(", "'(' in function signature")
        args = []  # (name token or None, type, attrs, location or None)
        named = self.kind == "percent"
        if self.kind != ")":
            while True:
                name_token = None
                if named:
                    name_token = self.expect("percent", "SSA identifier")
                    if "#" in self.texts[name_token]:
                        raise self.error_at(name_token, "argument name cannot have a result number")
                    self.expect(":", "':'")
                arg_type = self.parse_type()
                arg_attrs = self.parse_attr_dict() if self.kind == "{" else None
                loc = None
                if self.at_keyword("loc") and self.kinds[self.i + 1] == "(":
                    loc = self.parse_location()
                args.append((name_token, arg_type, arg_attrs, loc))
                if not self.accept(","):
                    break
        self.expect(")", "')' in function signature")
        results = []  # (type, attrs)
        if self.accept("arrow"):
            if self.accept("("):
                if self.kind != ")":
                    while True:
                        t = self.parse_type()
                        results.append((t, self.parse_attr_dict() if self.kind == "{" else None))
                        if not self.accept(","):
                            break
                self.expect(")", "')' in function result list")
            else:
                results.append((self.parse_non_function_type(), None))
        if self.at_keyword("attributes"):
            self.i += 1
            dict_token = self.i
            self.parse_attr_dict_into(attributes)
            for key in ("sym_name", "function_type"):
                if key in attributes:
                    raise self.error_at(dict_token, f"'{key}' of a 'func.func' is given by its signature, "
                                                    f"not in its attributes")
        for key, entries in (("arg_attrs", [a[2] for a in args]), ("res_attrs", [r[1] for r in results])):
            if any(e is not None for e in entries):
                if key in attributes:
                    raise self.error(f"'{key}' given both in the signature and as an attribute")
                attributes[key] = ArrayAttr(e if e is not None else DictionaryAttr(()) for e in entries)
        function_type = FunctionType([a[1] for a in args], [r[0] for r in results])
        body = Region()
        if self.kind == "{":
            if args and not named:
                raise self.error("expected named arguments in a function with a body")
            self.push_isolated()
            self.func_depth += 1
            block = Block()
            entry_names = []
            for name_token, arg_type, _, loc in args:
                if loc is None:
                    loc = self.location_at(self.starts[name_token])
                entry_names.append((name_token, block.add_argument(arg_type, location=loc)))
            body = self.parse_region(entry=block, entry_names=entry_names)
            self.func_depth -= 1
            self.pop_isolated()
        return FuncOp(name, function_type, attributes=attributes, body=body)

    def parse_return_op(self) -> Operation:
        attributes: dict[str, Attribute] = {}
        if self.kind == "{":
            self.parse_attr_dict_into(attributes)
        operand_tokens = []
        if self.kind == "percent":
            while True:
                operand_tokens.append(self.expect("percent", "SSA operand"))
                if not self.accept(","):
                    break
            self.expect(":", "':' followed by the operand types")
            types_token = self.i
            types = [self.parse_type()]
            while self.accept(","):
                types.append(self.parse_type())
            if len(types) != len(operand_tokens):
                raise self.error_at(types_token, f"{len(types)} types present, but expected "
                                                 f"{len(operand_tokens)}")
            operands = [self.resolve(t, ty) for t, ty in zip(operand_tokens, types)]
        else:
            operands = []
        return Operation("func.return", operands, (), attributes)

    def symbol_name(self, token: int) -> str:
        text = self.texts[token]
        return self.string_value(token, text[1:]) if text.startswith('@"') else text[1:]

    # --- regions and blocks -------------------------------------------------------------------------------------
    def parse_region(self, entry: Block | None = None, entry_names=()) -> Region:
        """``{ ops  ^bb1(...): ops ... }``.  With ``entry`` (a function body), the entry block has
        no label and its arguments are named by ``entry_names`` ((token, argument) pairs)."""
        self.enter()
        self.expect("{", "'{' to begin a region")
        region = Region()
        defs: list[str] = []
        self.region_defs.append(defs)
        if entry is not None:
            for token, arg in entry_names:
                self.define(token, self.texts[token], [arg])
            region.add_block(entry)
            if self.kind == "caret":
                raise self.error("invalid block name in region with named arguments")
            self.parse_block_body(entry)
        elif self.kind not in ("}", "caret"):
            block = region.add_block(Block())
            self.parse_block_body(block)
        labels = set()
        while self.kind == "caret":
            label_token = self.i
            label = self.texts[label_token]
            if label in labels:
                raise self.error_at(label_token, f"redefinition of block '{label}'")
            labels.add(label)
            self.i += 1
            block = region.add_block(Block())
            if self.accept("("):
                if self.kind != ")":
                    while True:
                        arg_token = self.expect("percent", "SSA identifier")
                        if "#" in self.texts[arg_token]:
                            raise self.error_at(arg_token, "argument name cannot have a result number")
                        self.expect(":", "':'")
                        arg_type = self.parse_type()
                        if self.at_keyword("loc") and self.kinds[self.i + 1] == "(":
                            loc = self.parse_location()
                        else:
                            loc = self.location_at(self.starts[arg_token])
                        arg = block.add_argument(arg_type, location=loc)
                        self.define(arg_token, self.texts[arg_token], [arg])
                        if not self.accept(","):
                            break
                self.expect(")", "')' to end argument list")
            self.expect(":", "':' after block name")
            self.parse_block_body(block)
        self.expect("}", "'}' to end a region")
        values = self.values
        for name in defs:
            del values[name]
        self.region_defs.pop()
        self.depth -= 1
        return region

    def parse_block_body(self, block: Block) -> None:
        kinds = self.kinds
        while kinds[self.i] not in ("}", "caret", EOF):
            self.parse_operation(block)
        if kinds[self.i] == EOF:
            raise self.wrong_token("expected '}' to end a region")

    # --- types ------------------------------------------------------------------------------------------------------
    def parse_type(self) -> Type:
        kind = self.kind
        if kind == "tensor":
            return self.parse_tensor_type()
        if kind == "ident":
            t = ELEMENT_TYPES.get(self.texts[self.i])
            if t is None:
                raise self.error(f"unknown type '{self.texts[self.i]}'")
            self.i += 1
            return t
        if kind == "(":
            return self.parse_function_type()
        if kind == "bang":
            return self.use_alias(self.type_aliases)
        raise self.wrong_token("expected type")

    def parse_non_function_type(self) -> Type:
        if self.kind == "(":
            raise self.wrong_token("expected non-function type")
        return self.parse_type()

    def parse_tensor_type(self) -> TensorType:
        head_token = self.i
        head = self.texts[head_token]
        self.i += 1
        if self.kind == "ident":
            key = (head, self.texts[self.i])
            cached = self.type_cache.get(key)
            if cached is not None and self.kinds[self.i + 1] == ">":
                self.i += 2
                return cached
        dims = []
        for m in _DIM.finditer(head, head.index("<")):
            if len(m.group()) > 18:
                raise ParseError("tensor dimension is too large",
                                 self.location_at(self.starts[head_token] + m.start()))
            dims.append(None if m.group() == "?" else int(m.group()))
        if self.kind == "*":
            raise self.error("unranked tensors are not supported")
        if self.kind != "ident":
            raise self.wrong_token("expected element type of tensor")
        element = ELEMENT_TYPES.get(self.texts[self.i])
        if element is None:
            raise self.error(f"unknown type '{self.texts[self.i]}'")
        key = (head, self.texts[self.i])
        self.i += 1
        if self.kind == ",":
            raise self.error("tensor encodings are not supported")
        self.expect(">", "'>' to end tensor type")
        t = TensorType(dims, element)
        self.type_cache[key] = t
        return t

    def parse_function_type(self) -> FunctionType:
        self.enter()
        self.expect("(", "'('")
        inputs = []
        if self.kind != ")":
            inputs.append(self.parse_type())
            while self.accept(","):
                inputs.append(self.parse_type())
        self.expect(")", "')'")
        self.expect("arrow", "'->' in function type")
        if self.accept("("):
            results = []
            if self.kind != ")":
                results.append(self.parse_type())
                while self.accept(","):
                    results.append(self.parse_type())
            self.expect(")", "')'")
        else:
            results = [self.parse_non_function_type()]
        self.depth -= 1
        return FunctionType(inputs, results)

    # --- attributes -----------------------------------------------------------------------------------------------
    def parse_attr_dict(self) -> DictionaryAttr:
        entries: dict[str, Attribute] = {}
        self.parse_attr_dict_into(entries)
        return DictionaryAttr(entries)

    def parse_attr_dict_into(self, into: dict) -> None:
        """``{name = attr, unit_name, "quoted name" = attr}`` into ``into``."""
        self.expect("{", "'{' to start an attribute dictionary")
        if not self.accept("}"):
            while True:
                key_token = self.i
                if self.kind == "ident":
                    key = self.texts[key_token]
                elif self.kind == "string":
                    key = self.string_value(key_token)
                    if not key:
                        raise self.error("expected a non-empty attribute name")
                else:
                    raise self.wrong_token("expected attribute name")
                self.i += 1
                if key in into:
                    raise self.error_at(key_token, f"duplicate key '{key}' in dictionary attribute")
                into[key] = self.parse_attribute() if self.accept("=") else UnitAttr()
                if not self.accept(","):
                    break
            self.expect("}", "'}' to end an attribute dictionary")

    def parse_attribute(self) -> Attribute:
        kind = self.kind
        if kind in ("int", "float", "-"):
            return self.parse_number_attribute()
        if kind == "string":
            value = self.string_value(self.i)
            self.i += 1
            return StringAttr(value)
        if kind == "ident":
            word = self.texts[self.i]
            if word == "true" or word == "false":
                self.i += 1
                return BoolAttr(word == "true")
            if word == "unit":
                self.i += 1
                return UnitAttr()
            if word == "dense" and self.kinds[self.i + 1] == "<":
                return self.parse_dense()
            if word == "array" and self.kinds[self.i + 1] == "<":
                return self.parse_dense_array()
            if word in ELEMENT_TYPES:
                return TypeAttr(self.parse_type())
            raise self.error("expected attribute value")
        if kind == "tensor" or kind == "(" or kind == "bang":
            return TypeAttr(self.parse_type())
        if kind == "[":
            self.enter()
            self.i += 1
            values = []
            if self.kind != "]":
                values.append(self.parse_attribute())
                while self.accept(","):
                    values.append(self.parse_attribute())
            self.expect("]", "']' to end an array attribute")
            self.depth -= 1
            return ArrayAttr(values)
        if kind == "{":
            self.enter()
            d = self.parse_attr_dict()
            self.depth -= 1
            return d
        if kind == "at":
            if self.kinds[self.i + 1] == ":" and self.kinds[self.i + 2] == ":":
                raise self.error_at(self.i + 1, "nested symbol references are not supported")
            name = self.symbol_name(self.i)
            self.i += 1
            return SymbolRefAttr(name)
        if kind == "hash":
            return self.use_alias(self.attr_aliases)
        raise self.wrong_token("expected attribute value")

    def use_alias(self, aliases: dict):
        """The value of the ``!name``/``#name`` alias at the current token, consumed."""
        value = aliases.get(self.texts[self.i][1:])
        if value is None:
            raise self.error(f"undefined symbol alias id '{self.texts[self.i][1:]}'")
        self.i += 1
        return value

    def parse_number_attribute(self) -> Attribute:
        start = self.i
        negative = self.accept("-")
        token = self.i
        kind = self.kind
        if kind not in ("int", "float"):
            raise self.wrong_token("expected integer or float literal")
        self.i += 1
        text = self.texts[token]
        type_: Type | None = None
        if self.kind == ":":
            self.i += 1
            type_token = self.i
            type_ = self.parse_type()
            if not isinstance(type_, ElementType):
                raise self.error_at(type_token, "expected an integer or float type")
        if kind == "float":
            if type_ is None:
                type_ = F64
            if not type_.is_float:
                raise self.error_at(token, "floating point value not valid for specified type")
            value = float(text)
            return FloatAttr(-value if negative else value, type_)
        if type_ is None:
            type_ = I64
        if type_.is_float:
            if not text.startswith("0x"):
                raise self.error_at(token, "unexpected decimal integer literal for a floating point value")
            if negative:
                raise self.error_at(start, "hexadecimal float literal should not have a leading minus")
            return FloatAttr(self.float_bits(token, type_), type_)
        value = self.int_value(token)
        if negative:
            value = -value
        lo, hi = _int_range(type_)
        if not lo <= value <= hi:
            raise self.error_at(token, "integer constant out of range for attribute")
        return IntegerAttr(value, type_)

    def float_bits(self, token: int, type_: ElementType) -> float:
        bits = int(self.texts[token], 16)
        width = 16 if type_.name == "bf16" else type_.bitwidth
        if bits >> width:
            raise self.error_at(token, "hexadecimal float constant out of range for type")
        return float_from_bits(bits, type_)

    def parse_dense_array(self) -> DenseArrayAttr:
        self.i += 2  # array <
        type_token = self.i
        if self.kind != "ident" or self.texts[self.i] not in ELEMENT_TYPES:
            if self.kind == "ident":
                raise self.error(f"unknown type '{self.texts[self.i]}'")
            raise self.wrong_token("expected element type of array")
        et = ELEMENT_TYPES[self.texts[type_token]]
        self.i += 1
        values = []
        if self.accept(":"):
            values.append(self.parse_scalar(et))
            while self.accept(","):
                values.append(self.parse_scalar(et))
        self.expect(">", "'>' to end an array<...> attribute")
        return DenseArrayAttr(et, values)

    def parse_scalar(self, et: ElementType, raw_bits: bool = False):
        """One element of ``array<...>`` or ``dense<...>`` as a Python value of ``et``; with
        ``raw_bits``, a float written as its bit pattern stays one (``_Bits``), so that a nan's
        payload survives."""
        token = self.i
        if self.kind == "ident" and self.texts[token] in ("true", "false"):
            if not et.is_bool:
                raise self.error("expected an integer or float literal, not a boolean")
            self.i += 1
            return self.texts[token] == "true"
        negative = self.accept("-")
        token = self.i
        kind = self.kind
        if kind not in ("int", "float"):
            raise self.wrong_token("expected integer or float literal")
        self.i += 1
        text = self.texts[token]
        if et.is_float:
            if kind == "int" and text.startswith("0x"):
                if negative:
                    raise self.error_at(token - 1, "hexadecimal float literal should not have a leading minus")
                value = self.float_bits(token, et)
                return _Bits(int(self.texts[token], 16)) if raw_bits else value
            if kind == "int":
                raise self.error_at(token, "unexpected decimal integer literal for a floating point value")
            value = float(text)
            return -value if negative else value
        if kind == "float":
            raise self.error_at(token, "floating point value not valid for specified type")
        value = self.int_value(token)
        if negative:
            value = -value
        if et.is_bool:
            if value not in (0, 1):
                raise self.error_at(token, "integer constant out of range for i1")
            return bool(value)
        lo, hi = _int_range(et)
        if not lo <= value <= hi:
            raise self.error_at(token, "integer constant out of range for attribute")
        return value

    def parse_dense(self) -> DenseElementsAttr:
        self.i += 2  # dense <
        literal = None  # ("hex", string token) or ("tokens", first token of a nested literal)
        body_token = self.i
        if self.kind == "string":
            literal = ("hex", self.i)
            self.i += 1
        elif self.kind != ">":
            literal = ("tokens", self.i)
            self.skip_dense_literal()
        close = self.expect(">", "'>' to end a dense attribute")
        self.expect(":", "':' followed by the dense attribute's type")
        type_token = self.i
        t = self.parse_type()
        if not isinstance(t, TensorType):
            raise self.error_at(type_token, "elements literal must be a tensor type")
        if not t.is_static:
            raise self.error_at(type_token, "elements literal type must have static shape")
        et = t.element_type
        n = t.num_elements
        if literal is None:
            if n != 0:
                raise self.error_at(body_token, f"parsed zero elements, but type ('{t}') expected at least 1")
            return DenseElementsAttr(t, np.zeros(t.shape, et.numpy_dtype))
        if literal[0] == "hex":
            return self.dense_from_hex(literal[1], t)
        end = self.i
        self.i = literal[1]
        flat, shape = self.parse_dense_literal(et)
        if self.i != close:
            raise self.wrong_token("expected '>' to end a dense attribute")
        self.i = end
        if shape == ():
            if n > _MAX_SPLAT_ELEMENTS:
                raise self.error_at(body_token, "dense splat is too large")
            return DenseElementsAttr(t, self.to_array(flat, et))
        if not flat and n == 0:  # `[]` (or `[[], []]`) for any tensor with no elements
            return DenseElementsAttr(t, np.zeros(t.shape, et.numpy_dtype))
        if shape != t.shape:
            fmt = lambda s: "[" + ", ".join(map(str, s)) + "]"  # noqa: E731
            raise self.error_at(body_token, f"inferred shape of elements literal ({fmt(shape)}) does not "
                                            f"match type ({fmt(t.shape)})")
        return DenseElementsAttr(t, self.to_array(flat, et).reshape(shape))

    def skip_dense_literal(self) -> None:
        """Step over a nested literal (its type comes after it, so it is read in a second pass)."""
        depth = 0
        kinds = self.kinds
        while True:
            k = kinds[self.i]
            if k == "[":
                depth += 1
                if depth > _MAX_NESTING:
                    raise self.error(f"nesting deeper than {_MAX_NESTING} levels")
            elif k == "]":
                depth -= 1
                if depth < 0:
                    raise self.error("unexpected ']'")
            elif k in (">", EOF, ERROR):
                if depth == 0:
                    return
                raise self.wrong_token("expected ']'")
            self.i += 1

    def parse_dense_literal(self, et: ElementType):
        """A scalar (shape ``()``) or nested lists: (flat values, shape)."""
        if self.kind != "[":
            return [self.parse_scalar(et, raw_bits=True)], ()
        flat: list = []
        shape = self.parse_dense_list(et, flat)
        return flat, shape

    def parse_dense_list(self, et: ElementType, flat: list) -> tuple:
        open_token = self.expect("[", "'['")
        shapes = []
        count = 0
        if self.kind != "]":
            while True:
                if self.kind == "[":
                    shapes.append(self.parse_dense_list(et, flat))
                else:
                    flat.append(self.parse_scalar(et, raw_bits=True))
                    shapes.append(())
                count += 1
                if not self.accept(","):
                    break
        self.expect("]", "']'")
        if any(s != shapes[0] for s in shapes):
            raise self.error_at(open_token, "tensor literal is invalid; ranks or shapes are not consistent "
                                            "between elements")
        return (count,) + (shapes[0] if shapes else ())

    def to_array(self, flat: list, et: ElementType) -> np.ndarray:
        with np.errstate(over="ignore", invalid="ignore"):
            if et.is_float:
                hex_at = [i for i, v in enumerate(flat) if type(v) is _Bits]
                if not hex_at:
                    return np.array(flat, dtype=np.float64).astype(et.numpy_dtype)
                array = np.array([0.0 if type(v) is _Bits else v for v in flat], np.float64).astype(et.numpy_dtype)
                view = array.view(np.uint16 if et.name == "f16" else np.uint64 if et.name == "f64" else np.uint32)
                shift = 16 if et.name == "bf16" else 0
                for i in hex_at:
                    view[i] = flat[i].bits << shift
                return array
            if et.is_bool:
                return np.array(flat, dtype=np.bool_)
            return np.array(flat, dtype=object).astype(et.numpy_dtype) if flat else \
                np.zeros(0, et.numpy_dtype)

    def dense_from_hex(self, token: int, t: TensorType) -> DenseElementsAttr:
        text = self.string_value(token)
        if not text.startswith("0x") or len(text) % 2:
            raise self.error_at(token, "expected a hex string of whole bytes (\"0x...\")")
        try:
            data = bytes.fromhex(text[2:])
        except ValueError:
            raise self.error_at(token, "expected a hex string of whole bytes (\"0x...\")") from None
        et = t.element_type
        n = t.num_elements
        itemsize = 2 if et.name == "bf16" else et.itemsize
        if et.is_bool and len(data) == (n + 7) // 8 and len(data) != n and n > 1:
            bits = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")[:n]
            return DenseElementsAttr(t, bits.astype(np.bool_).reshape(t.shape))
        if len(data) == n * itemsize:
            count = n
        elif len(data) == itemsize and n > 0:
            count = 1  # a splat
            if n > _MAX_SPLAT_ELEMENTS:
                raise self.error_at(token, "dense splat is too large")
        else:
            raise self.error_at(token, f"elements hex data size is invalid for provided type: "
                                       f"{len(data)} bytes for {n} elements of {et}")
        if et.name == "bf16":
            raw = np.frombuffer(data, "<u2").astype(np.uint32) << 16
            array = raw.view(np.float32)
        elif et.is_bool:
            array = np.frombuffer(data, np.uint8) != 0
        else:
            array = np.frombuffer(data, et.numpy_dtype.newbyteorder("<")).astype(et.numpy_dtype)
        if count == 1 and n != 1:
            return DenseElementsAttr(t, array.reshape(()))
        return DenseElementsAttr(t, array.reshape(t.shape))

    # --- locations ---------------------------------------------------------------------------------------------------
    def parse_location(self) -> Location:
        """``loc(...)``."""
        self.i += 1  # loc
        self.expect("(", "'(' in location")
        loc = self.parse_location_body()
        self.expect(")", "')' in location")
        return loc

    def parse_location_body(self) -> Location:
        kind = self.kind
        if kind == "ident":
            word = self.texts[self.i]
            if word == "unknown":
                self.i += 1
                return UNKNOWN
            if word == "fused":
                self.enter()
                self.i += 1
                if self.accept("<"):
                    self.parse_attribute()  # fusion metadata: not kept
                    self.expect(">", "'>' after fused location metadata")
                self.expect("[", "'[' in fused location")
                locs = [self.parse_location_body()]
                while self.accept(","):
                    locs.append(self.parse_location_body())
                self.expect("]", "']' in fused location")
                self.depth -= 1
                return FusedLoc(tuple(locs))
            if word == "callsite":
                raise self.error("callsite locations are not supported")
            raise self.wrong_token("expected location instance")
        if kind == "string":
            token = self.i
            name = self.string_value(token)
            self.i += 1
            if self.accept(":"):
                line = self.int_value(self.expect("int", "line number in file location"))
                self.expect(":", "':' in file location")
                col = self.int_value(self.expect("int", "column number in file location"))
                if self.at_keyword("to"):  # a line:col range: keep its start
                    self.i += 1
                    if self.kind == "int":  # to line:col
                        self.i += 1
                    self.expect(":", "':' in file location range")
                    self.expect("int", "column number in file location range")
                return FileLineColLoc(name, line, col)
            if self.accept("("):
                self.enter()
                child = self.parse_location_body()
                self.depth -= 1
                self.expect(")", "')' after child location of NameLoc")
                return NameLoc(name, child)
            return NameLoc(name)
        if kind == "hash":
            name = self.texts[self.i][1:]
            loc = self.loc_aliases.get(name)
            if loc is None:
                if name in self.attr_aliases:
                    raise self.error(f"expected location, but alias '#{name}' is an attribute")
                self.deferred_locs = True
                loc = _AliasLoc(name, self.i)
            self.i += 1
            return loc
        raise self.wrong_token("expected location instance")

    def resolve_deferred_locations(self, module: ModuleOp) -> None:
        memo: dict[str, Location] = {}

        def resolve(loc: Location, active: tuple = ()) -> Location:
            if isinstance(loc, _AliasLoc):
                if loc.name in memo:
                    return memo[loc.name]
                target = self.loc_aliases.get(loc.name)
                if target is None:
                    raise self.error_at(loc.token, "operation location alias was never defined")
                if loc.name in active:
                    raise self.error_at(loc.token, f"location alias '#{loc.name}' refers to itself")
                if len(active) >= _MAX_NESTING:
                    raise self.error_at(loc.token, f"location aliases nest deeper than {_MAX_NESTING} levels")
                memo[loc.name] = resolve(target, active + (loc.name,))
                return memo[loc.name]
            if isinstance(loc, NameLoc) and loc.child is not None:
                child = resolve(loc.child, active)
                return loc if child is loc.child else NameLoc(loc.name, child)
            if isinstance(loc, FusedLoc):
                parts = tuple(resolve(l, active) for l in loc.locations)
                return loc if all(a is b for a, b in zip(parts, loc.locations)) else FusedLoc(parts)
            return loc

        for op in module.walk():
            op.location = resolve(op.location)
            for region in op.regions:
                for block in region.blocks:
                    for arg in block.args:
                        arg.location = resolve(arg.location)


def parse_module(text: str, filename: str = "<string>", first_line: int = 1) -> ModuleOp:
    """Parse ``text`` into a module.  Top-level ops without a ``module`` around them are wrapped
    in one, as mlir-opt does.  ``first_line`` is the line ``text`` starts at in ``filename`` (for
    chunks from ``split_input_file``)."""
    return _Parser(text, filename, first_line).parse_top()


__all__ = ["parse_module", "split_input_file", "SPLIT_MARKER"]
