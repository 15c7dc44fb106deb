"""Malformed text: a ParseError with MLIR's message, at the offending token (line:col)."""
from __future__ import annotations

import pytest

from lezero.ir.diagnostics import ParseError, SourceManager
from lezero.ir.location import FileLineColLoc
from lezero.ir.parser import parse_module, split_input_file

F = "func.func @f(%a: tensor<2xf32>) {\n"  # prefix: line 1

# (text, message, line, col)
CASES = [
    # tokens and punctuation
    ('"t.op"(%a : () -> ()', "expected ')' to end operand list", 1, 11),
    ('"t.op"(', "expected SSA operand", 1, 7),  # at EOF: its last character
    ('"t.op"() $', "unexpected character '$'", 1, 10),
    ('"t.op"() {s = "abc} : () -> ()', "unterminated string", 1, 15),
    ('"t.op() : () -> ()', "unterminated string", 1, 1),
    ('"t.op"() {v = "\\q"} : () -> ()', "unknown escape in string literal", 1, 15),
    ('"t.op"() {v = "\\FF"} : () -> ()', "string literal is not valid UTF-8", 1, 15),
    ('"t.op"() {a = 1, a = 2} : () -> ()', "duplicate key 'a' in dictionary attribute", 1, 18),
    ("lz.add %a, %b", "custom op 'lz.add' is unknown", 1, 1),
    ("return", "custom op 'return' is unknown", 1, 1),  # bare `return` only inside func.func
    ('"t.op"()[^bb1] : () -> ()', "block successors are not supported", 1, 9),
    # a missing token at the end of a line is reported there, not on the next line (as MLIR does)
    ('"t.op"() {v = 1,\n} : () -> ()', "expected attribute name", 1, 17),
    ('"t.op"()\n// comment\n\n"t.b"() : () -> ()', "expected ':' followed by the operation's type", 1, 9),
    ("func.func @f() {\n  \"t.op\"() : () -> ()\n", "expected '}' to end a region", 2, 22),
    # SSA values
    (F + '  "t.op"(%x) : (tensor<2xf32>) -> ()\n  return\n}', "use of undeclared SSA value name '%x'", 2, 10),
    ('%0 = "t.a"() : () -> tensor<2xf32>\n%0 = "t.b"() : () -> tensor<2xf32>', "redefinition of SSA value '%0'", 2, 1),
    ('%0 = "t.a"() : () -> tensor<2xf32>\n"t.b"(%0) : (tensor<3xf32>) -> ()',
     "use of value '%0' expects different type than prior uses: 'tensor<3xf32>' vs 'tensor<2xf32>'", 2, 7),
    ('%0:2 = "t.a"() : () -> (f32, f32)\n"t.b"(%0#2) : (f32) -> ()', "reference to invalid result number '%0#2'", 2, 7),
    ("func.func @f(%a: f32, %a: f32) {\n  return\n}", "redefinition of SSA value '%a'", 1, 23),
    # a use before the definition (lezero's regions are SSA CFG regions)
    ('func.func @f() {\n  "t.use"(%1) : (f32) -> ()\n  %1 = "t.def"() : () -> f32\n  return\n}',
     "use of undeclared SSA value name '%1'", 2, 11),
    # a value of an enclosing region may not be redefined inside it
    ('%0 = "t.a"() : () -> f32\n"t.b"() ({\n  %0 = "t.c"() : () -> f32\n}) : () -> ()', "redefinition of SSA value '%0'", 3, 3),
    # functions are isolated from above
    ('%0 = "t.a"() : () -> f32\nfunc.func @f() {\n  "t.b"(%0) : (f32) -> ()\n  return\n}',
     "use of undeclared SSA value name '%0'", 3, 9),
    # a name defined inside a region is not visible after it
    ('"t.r"() ({\n  %in = "t.a"() : () -> f32\n}) : () -> ()\n"t.b"(%in) : (f32) -> ()',
     "use of undeclared SSA value name '%in'", 4, 7),
    # result counts
    ('%0:3 = "t.a"() : () -> (tensor<2xf32>, tensor<2xf32>)', "expected 3 results, got 2", 1, 18),
    ('%0 = "t.a"() : () -> ()', "expected 1 results, got 0", 1, 16),
    ('"t.a"(%x) : () -> ()', "expected 1 operand type but had 0", 1, 13),
    ('"t.a"() : (f32) -> ()', "expected 0 operand types but had 1", 1, 11),
    ("func.func @f() {\n  %0 = return\n}", "operation defines 0 results but was provided 1 to bind", 2, 8),
    (F + "  return %a, %a : tensor<2xf32>\n}", "1 types present, but expected 2", 2, 19),
    (F + "  return %a : tensor<3xf32>\n}",
     "use of value '%a' expects different type than prior uses: 'tensor<3xf32>' vs 'tensor<2xf32>'", 2, 10),
    # types
    ('"t.a"() : () -> foo', "unknown type 'foo'", 1, 17),
    ('"t.a"() : () -> tensor<2xfoo>', "unknown type 'foo'", 1, 26),
    ('"t.a"() : () -> tensor<*xf32>', "unranked tensors are not supported", 1, 24),
    ('"t.a"() : () -> tensor<2x3>', "expected element type of tensor", 1, 26),
    ('"t.a"() : () -> tensor<2xf32, "enc">', "tensor encodings are not supported", 1, 29),
    ('"t.a"() : f32', "expected function type", 1, 11),
    # attributes
    ('"t.a"() {v = 300 : i8} : () -> ()', "integer constant out of range for attribute", 1, 14),
    ('"t.a"() {v = 1 : f32} : () -> ()', "unexpected decimal integer literal for a floating point value", 1, 14),
    ('"t.a"() {v = 1.5 : i32} : () -> ()', "floating point value not valid for specified type", 1, 14),
    ('"t.a"() {v = -0x7F800000 : f32} : () -> ()', "hexadecimal float literal should not have a leading minus", 1, 14),
    ('"t.a"() {v = 0x1FFFFFFFF : f32} : () -> ()', "hexadecimal float constant out of range for type", 1, 14),
    ('"t.a"() {v = foo} : () -> ()', "expected attribute value", 1, 14),
    ('"t.a"() {v = #nope} : () -> ()', "undefined symbol alias id 'nope'", 1, 14),
    ('"t.a"() {v = @a::@b} : () -> ()', "nested symbol references are not supported", 1, 16),
    ('"t.a"() {v = array<i32: 1.5>} : () -> ()', "floating point value not valid for specified type", 1, 25),
    ('"t.a"() {v = array<f32: 1>} : () -> ()', "unexpected decimal integer literal for a floating point value", 1, 25),
    ('"t.a"() {v = dense<[1.0, 2.0]> : tensor<3xf32>} : () -> ()',
     "inferred shape of elements literal ([2]) does not match type ([3])", 1, 20),
    ('"t.a"() {v = dense<[[1.0], [2.0, 3.0]]> : tensor<2x2xf32>} : () -> ()',
     "tensor literal is invalid; ranks or shapes are not consistent between elements", 1, 20),
    ('"t.a"() {v = dense<"0x0000"> : tensor<3xf32>} : () -> ()',
     "elements hex data size is invalid for provided type: 2 bytes for 3 elements of f32", 1, 20),
    ('"t.a"() {v = dense<"0xZZ"> : tensor<1xi8>} : () -> ()', "expected a hex string of whole bytes (\"0x...\")", 1, 20),
    ('"t.a"() {v = dense<1.0> : tensor<?xf32>} : () -> ()', "elements literal type must have static shape", 1, 27),
    ('"t.a"() {v = dense<1.0> : f32} : () -> ()', "elements literal must be a tensor type", 1, 27),
    ('"t.a"() {v = dense<> : tensor<2xf32>} : () -> ()',
     "parsed zero elements, but type ('tensor<2xf32>') expected at least 1", 1, 20),
    ('"t.a"() {v = dense<1 2> : tensor<2xi32>} : () -> ()', "expected '>' to end a dense attribute", 1, 22),
    ('"t.a"() {v = dense<[1, 2> : tensor<2xi32>} : () -> ()', "expected ']'", 1, 25),
    ('"t.a"() {v = dense<[true]> : tensor<1xf32>} : () -> ()',
     "expected an integer or float literal, not a boolean", 1, 21),
    ("#a = 1\n#a = 2", "redefinition of alias id 'a'", 2, 1),
    # locations
    ('"t.a"() : () -> () loc(#nope)', "operation location alias was never defined", 1, 24),
    ('"t.a"() : () -> () loc(callsite("a" at "b"))', "callsite locations are not supported", 1, 24),
    ('"t.a"() : () -> () loc("f":1)', "expected ':' in file location", 1, 29),
    ('#l = loc(#l)\n"t.a"() : () -> () loc(#l)', "location alias '#l' refers to itself", 1, 10),
    # blocks and structural ops
    ('"t.a"() ({\n^bb0:\n^bb0:\n}) : () -> ()', "redefinition of block '^bb0'", 3, 1),
    ("func.func @f(%a: f32) {\n^bb0:\n  return\n}", "invalid block name in region with named arguments", 2, 1),
    ("func.func @f(f32) {\n  return\n}", "expected named arguments in a function with a body", 1, 19),
    ("func.func f() {\n}", "expected valid '@'-identifier for symbol name", 1, 11),
    ("func.func @f() attributes {sym_name = \"g\"} {\n}",
     "'sym_name' of a 'func.func' is given by its signature, not in its attributes", 1, 27),
    ('"func.func"() <{function_type = (f32) -> (), sym_name = "f"}> ({\n^bb0(%a: f16):\n  "func.return"() : () -> ()\n}) : () -> ()',
     "type of entry block argument #0('f16') must match the type of the corresponding argument in function "
     "signature('f32')", 1, 1),
    ('"func.func"() <{function_type = (f32) -> (), sym_name = "f"}> ({\n^bb0:\n  "func.return"() : () -> ()\n}) : () -> ()',
     "entry block must have 1 arguments to match function signature", 1, 1),
    ('"func.func"() <{sym_name = "f"}> ({\n}) : () -> ()',
     "'func.func' op requires a function type attribute 'function_type'", 1, 1),
    ('"builtin.module"() ({\n^bb0(%a: f32):\n}) : () -> ()', "'builtin.module' op expects one block without arguments", 1, 1),
    ('"builtin.module"() : () -> ()', "'builtin.module' op expects 1 region, got 0", 1, 1),
    # limits
    ('"t.a"() : () -> tensor<99999999999999999999999xf32>', "tensor dimension is too large", 1, 24),
    ('"t.a"() {v = ' + "[" * 80 + "1" + "]" * 80 + "} : () -> ()", "nesting deeper than 64 levels", 1, 78),
    ('"t.a"() {v = ' + "9" * 100 + "} : () -> ()", "integer literal is too large", 1, 14),
]


@pytest.mark.parametrize("text, message, line, col", CASES, ids=[c[1][:60] for c in CASES])
def test_parse_error(text, message, line, col):
    with pytest.raises(ParseError) as info:
        parse_module(text, filename="bad.mlir")
    assert info.value.message == message
    assert info.value.location == FileLineColLoc("bad.mlir", line, col)


def test_error_lines_count_from_the_chunk_start():
    text = '"t.a"() : () -> ()\n// -----\n"t.b"() : () -> ()\n"t.c"(%x) : (f32) -> ()\n'
    chunk, first = split_input_file(text)[1]
    with pytest.raises(ParseError) as info:
        parse_module(chunk, filename="s.mlir", first_line=first)
    assert info.value.location == FileLineColLoc("s.mlir", 4, 7)


def test_error_renders_with_the_source_line_and_a_caret():
    text = F + '  "t.op"(%x) : (tensor<2xf32>) -> ()\n  return\n}'
    sources = SourceManager()
    sources.add("bad.mlir", text)
    with pytest.raises(ParseError) as info:
        parse_module(text, filename="bad.mlir")
    assert sources.render(info.value.diagnostic) == (
        "bad.mlir:2:10: error: use of undeclared SSA value name '%x'\n"
        '  "t.op"(%x) : (tensor<2xf32>) -> ()\n'
        "         ^")
