"""Parse MLIR's text format into the IR: a recursive-descent parser of ops, regions and SSA names
over the tokens of ``lexer`` and the types, attributes and locations of ``attribute_parser``.

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

from lezero.ir.attribute_parser import AttributeParser
from lezero.ir.attributes import ArrayAttr, Attribute, DictionaryAttr, StringAttr, TypeAttr
from lezero.ir.core import Block, FuncOp, ModuleOp, Operation, Region, Value
from lezero.ir.lexer import EOF
from lezero.ir.location import FileLineColLoc
from lezero.ir.opdef import ISOLATED_FROM_ABOVE, lookup
from lezero.ir.types import FunctionType, Type

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


# --- parser -------------------------------------------------------------------------------------------

_ISOLATED = ("builtin.module", "func.func")
_VISIBILITIES = ("private", "public", "nested")


def _is_isolated(name: str) -> bool:
    """Whether the op's regions start a new SSA name scope (MLIR's IsolatedFromAbove)."""
    if name in _ISOLATED:
        return True
    definition = lookup(name)
    return definition is not None and definition.has_trait(ISOLATED_FROM_ABOVE)


class _Parser(AttributeParser):
    """Ops, regions and blocks, with SSA names scoped as in MLIR."""

    def __init__(self, text: str, filename: str, first_line: int):
        super().__init__(text, filename, first_line)
        # SSA names: one table per isolated-from-above scope; each region records what it
        # defined so its names go out of scope at its end.
        self.values: dict[str, list[Value]] = {}  # `%name` -> its result group (or argument)
        self.isolated_stack: list[dict] = []
        self.region_defs: list[list[str]] = []
        self.func_depth = 0

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


def parse_module(text: str, filename: str = "<string>", first_line: int = 1) -> ModuleOp:
    """Parse ``text`` into a module.  Top-level ops without a ``module`` around them are wrapped
    in one, as mlir-opt does.  ``first_line`` is the line ``text`` starts at in ``filename`` (for
    chunks from ``split_input_file``)."""
    return _Parser(text, filename, first_line).parse_top()


__all__ = ["parse_module", "split_input_file", "SPLIT_MARKER"]
