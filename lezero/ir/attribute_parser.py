"""Types, attributes and locations of MLIR's text format (the parts of the grammar that carry no
SSA values): ``tensor<2x?xf32>``, function types, the builtin attributes (integers, floats, hex
float bit patterns, strings, ``true``/``false``, ``unit``, arrays, ``array<T: ...>``, types,
``dense<...>`` including the hex blob form, ``@symbols``, dictionaries), attribute and type aliases
(``#a = ...``, ``!t = ...``) and every location form (``loc("f":1:2)``, ``loc("name")``,
``loc("name"(...))``, ``loc(unknown)``, ``loc(fused[...])``, ``loc(#alias)`` with the alias defined
anywhere at top level, resolved once the whole file is read).
"""
from __future__ import annotations

import numpy as np

from lezero.ir.attributes import (ArrayAttr, Attribute, BoolAttr, DenseArrayAttr, DenseElementsAttr,
                                  DictionaryAttr, FloatAttr, IntegerAttr, StringAttr, SymbolRefAttr,
                                  TypeAttr, UnitAttr, float_from_bits)
from lezero.ir.core import ModuleOp
from lezero.ir.diagnostics import ParseError
from lezero.ir.lexer import DIM, EOF, ERROR, MAX_NESTING, TokenCursor
from lezero.ir.location import UNKNOWN, FileLineColLoc, FusedLoc, Location, NameLoc
from lezero.ir.types import ELEMENT_TYPES, F64, I64, ElementType, FunctionType, TensorType, Type

_MAX_SPLAT_ELEMENTS = 1 << 28  # a splat is stored expanded: refuse absurd sizes
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


def _int_range(t: ElementType) -> tuple[int, int]:
    if t.name.startswith("ui"):
        return 0, (1 << t.bitwidth) - 1
    # signless, as MLIR: any bit pattern, written signed or unsigned
    return -(1 << (t.bitwidth - 1)), (1 << t.bitwidth) - 1


class AttributeParser(TokenCursor):
    """The type, attribute and location grammar over a ``TokenCursor``, with the file's aliases."""

    def __init__(self, text: str, filename: str, first_line: int):
        super().__init__(text, filename, first_line)
        self.attr_aliases: dict[str, Attribute] = {}
        self.type_aliases: dict[str, Type] = {}
        self.loc_aliases: dict[str, Location] = {}
        self.deferred_locs = False
        self.type_cache: dict = {}

    def symbol_name(self, token: int) -> str:
        text = self.texts[token]
        return self.string_value(token, text[1:]) if text.startswith('@"') else text[1:]

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
        for m in DIM.finditer(head, head.index("<")):
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
                if depth > MAX_NESTING:
                    raise self.error(f"nesting deeper than {MAX_NESTING} levels")
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
                if len(active) >= MAX_NESTING:
                    raise self.error_at(loc.token, f"location aliases nest deeper than {MAX_NESTING} levels")
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
