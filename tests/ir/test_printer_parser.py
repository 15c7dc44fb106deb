"""The text format: print -> parse -> print gives the same text, the printed forms are MLIR's, and
the parser builds the right IR (structure, values, attributes, locations)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from lezero.ir.attributes import (ArrayAttr, BoolAttr, DenseArrayAttr, DenseElementsAttr, DictionaryAttr,
                                  FloatAttr, IntegerAttr, StringAttr, SymbolRefAttr, TypeAttr, UnitAttr)
from lezero.ir.core import Block, BlockArgument, FuncOp, ModuleOp, Operation, OpResult
from lezero.ir.diagnostics import ParseError
from lezero.ir.location import UNKNOWN, FileLineColLoc, FusedLoc, NameLoc
from lezero.ir.parser import parse_module, split_input_file
from lezero.ir.printer import print_module, print_op
from lezero.ir.types import ELEMENT_TYPES, FunctionType, tensor

from support.ir_text_samples import SAMPLES, T2, function, large_dense_values, op

FLAGS = [dict(generic=g, debuginfo=d) for g in (False, True) for d in (False, True)]


def roundtrip(module, **flags) -> str:
    text = print_module(module, **flags)
    again = print_module(parse_module(text), **flags)
    assert again == text
    return text


# --- round trips ------------------------------------------------------------------------------------

@pytest.mark.parametrize("flags", FLAGS, ids=lambda f: f"generic={f['generic']},debuginfo={f['debuginfo']}")
@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_roundtrip(sample, flags):
    roundtrip(SAMPLES[sample](), **flags)


@pytest.mark.parametrize("sample", sorted(SAMPLES))
def test_generic_and_custom_forms_describe_the_same_ir(sample):
    module = SAMPLES[sample]()
    custom = print_module(module, debuginfo=True)
    assert print_module(parse_module(print_module(module, generic=True, debuginfo=True)), debuginfo=True) == custom


def test_parsed_attributes_equal_the_originals():
    module = SAMPLES["every_attribute"]()
    original = module.functions[0].entry_block.ops[0].attributes
    parsed = parse_module(print_module(module)).functions[0].entry_block.ops[0].attributes
    assert parsed == original
    assert list(parsed) == sorted(original)  # printed sorted; the parser keeps text order


@pytest.mark.parametrize("name", ["f32", "f16", "bf16", "f64", "i1", "i8", "i32", "i64", "ui8"])
def test_large_dense_uses_the_hex_form_and_keeps_every_bit(name):
    attr = large_dense_values(name)
    text = str(attr)
    assert text.startswith('dense<"0x')
    f = function("f", [], lambda block: [op(block, "test.constant", [], [attr.type], {"value": attr}).result])
    parsed = parse_module(roundtrip(ModuleOp([f]))).functions[0].entry_block.ops[0].attributes["value"]
    assert parsed.type == attr.type
    assert parsed.array.dtype == attr.array.dtype
    assert parsed.array.tobytes() == attr.array.tobytes()


def test_edge_floats_keep_their_bits():
    module = SAMPLES["edge_floats"]()
    original = module.functions[0].entry_block.ops[0].attributes
    parsed = parse_module(print_module(module)).functions[0].entry_block.ops[0].attributes
    for key, attr in original.items():
        back = parsed[key]
        if isinstance(attr, FloatAttr):
            assert back == attr, key  # FloatAttr compares bit patterns: nan == nan, -0.0 != 0.0
        elif isinstance(attr, DenseArrayAttr):
            assert [np.float64(v).tobytes() for v in back.values] == [np.float64(v).tobytes() for v in attr.values], key
        else:
            assert back.array.tobytes() == attr.array.tobytes(), key


@pytest.mark.parametrize("value, type_name, text", [
    (math.inf, "f32", "0x7F800000 : f32"), (-math.inf, "f64", "0xFFF0000000000000 : f64"),
    (math.nan, "f16", "0x7E00 : f16"), (math.inf, "bf16", "0x7F80 : bf16"), (-0.0, "f32", "-0.0 : f32"),
    (1e-45, "f32", "1.0e-45 : f32"), (1e-05, "f32", "1.0e-05 : f32"), (2.5, "f64", "2.5 : f64"),
])
def test_float_attribute_text(value, type_name, text):
    attr = FloatAttr(value, ELEMENT_TYPES[type_name])
    assert str(attr) == text
    assert _parse_attr(text) == attr


# --- the printed forms -------------------------------------------------------------------------------

MLP = """\
module {
  func.func @mlp(%arg0: tensor<64x784xf32>, %arg1: tensor<784x256xf32>, %arg2: tensor<256xf32>) -> tensor<64x256xf32> {
    %0 = "lz.matmul"(%arg0, %arg1) : (tensor<64x784xf32>, tensor<784x256xf32>) -> tensor<64x256xf32>
    %1 = "lz.add"(%0, %arg2) : (tensor<64x256xf32>, tensor<256xf32>) -> tensor<64x256xf32>
    %2 = "lz.relu"(%1) : (tensor<64x256xf32>) -> tensor<64x256xf32>
    func.return %2 : tensor<64x256xf32>
  }
}"""


def test_custom_form_matches_mlir_opt():
    assert print_module(SAMPLES["mlp"]()) == MLP


def test_design_doc_example_parses_with_named_values():
    text = MLP.replace("%arg0", "%x").replace("%arg1", "%w").replace("%arg2", "%b")
    module = parse_module(text)
    assert print_module(module) == MLP
    f = module.lookup("mlp")
    assert isinstance(f, FuncOp) and module.functions == [f]
    assert [str(a.type) for a in f.arguments] == ["tensor<64x784xf32>", "tensor<784x256xf32>", "tensor<256xf32>"]
    assert f.function_type == FunctionType([a.type for a in f.arguments], [tensor((64, 256))])
    matmul, add, relu, ret = f.entry_block.ops
    assert matmul.operands == (f.arguments[0], f.arguments[1])
    assert add.operands == (matmul.result, f.arguments[2])
    assert ret.name == "func.return" and ret.operands == (relu.result,)
    assert [u.op for u in matmul.result.uses] == [add]


def test_generic_form():
    text = print_module(SAMPLES["mlp"](), generic=True)
    assert text.split("\n")[:3] == [
        '"builtin.module"() ({',
        '  "func.func"() <{function_type = (tensor<64x784xf32>, tensor<784x256xf32>, tensor<256xf32>) -> '
        'tensor<64x256xf32>, sym_name = "mlp"}> ({',
        "  ^bb0(%arg0: tensor<64x784xf32>, %arg1: tensor<784x256xf32>, %arg2: tensor<256xf32>):",
    ]
    assert text.endswith('    "func.return"(%2) : (tensor<64x256xf32>) -> ()\n  }) : () -> ()\n}) : () -> ()')


def test_structural_forms():
    text = print_module(SAMPLES["structure"]())
    lines = text.split("\n")
    assert lines[0] == "module @top attributes {lz.version = 1 : i64} {"
    assert "  func.func @no_results() {" in lines
    assert ("  func.func @two_results(%arg0: tensor<?x3xf16>, %arg1: tensor<i64>) -> (tensor<?x3xf16>, tensor<i64>)"
            " attributes {flag, lz.note = \"x\"} {") in lines
    assert "  func.func private @decl(tensor<2xf32>, tensor<?x3xf16>) -> tensor<2xf32>" in lines
    assert ('  func.func @with_arg_attrs(%arg0: tensor<2xf32> {lz.name = "x"}, %arg1: tensor<2xf32>)'
            " -> (tensor<2xf32> {lz.out}) {") in lines
    assert "    func.return" in lines
    assert "  module @inner_mod {" in lines
    generic = print_module(SAMPLES["structure"](), generic=True)
    assert ('"func.func"() <{function_type = (tensor<2xf32>, tensor<?x3xf16>) -> tensor<2xf32>, sym_name = "decl", '
            'sym_visibility = "private"}> ({\n  }) : () -> ()') in generic
    assert '"builtin.module"() <{sym_name = "top"}> ({' in generic and "}) {lz.version = 1 : i64} : () -> ()" in generic


def test_parsed_structure():
    module = parse_module(print_module(SAMPLES["structure"]()))
    assert module.sym_name == "top"
    names = [f.sym_name for f in module.functions]
    assert names == ["no_results", "two_results", "decl", "with_arg_attrs", "returns_function_type"]
    decl = module.lookup("decl")
    assert decl.regions[0].blocks == [] and decl.attributes["sym_visibility"] == StringAttr("private")
    f = module.lookup("with_arg_attrs")
    assert f.attributes["arg_attrs"] == ArrayAttr([DictionaryAttr({"lz.name": StringAttr("x")}), DictionaryAttr({})])
    assert f.attributes["res_attrs"] == ArrayAttr([DictionaryAttr({"lz.out": UnitAttr()})])
    inner = module.body.ops[-1]
    assert isinstance(inner, ModuleOp) and inner.sym_name == "inner_mod" and inner.functions[0].sym_name == "inner"


def test_value_numbering_follows_mlir():
    text = print_module(SAMPLES["regions"]())
    assert "    %1:3 = \"test.wrap\"(%0#0) ({" in text
    # a nested region continues from where its parent region ended; sibling regions restart there
    assert "    ^bb0(%arg2: tensor<2xf32>, %arg3: tensor<i64>):\n      %4 = \"test.use\"(%arg2, %0#1, %arg0)" in text
    assert "      ^bb0(%arg4: tensor<2xf32>):\n        %8 = \"test.neg\"(%arg4)" in text
    # arguments of a block that is not an entry block are numbered like results
    assert "    ^bb1(%6: tensor<2xf32>, %7: tensor<2xf32>):\n      \"test.yield\"(%7)" in text
    assert "    ^bb2:\n" in text
    assert "    }, {\n    ^bb0:\n    }, {\n    }, {\n      \"test.yield\"(%arg1)" in text
    assert "    %3 = \"test.sibling\"() ({\n    ^bb0(%arg2: tensor<2xf32>):\n      %4 = \"test.neg\"(%2)" in text
    assert "    func.return %1#1, %3 : tensor<2xf32>, tensor<2xf32>" in text


def test_parsed_regions():
    f = parse_module(print_module(SAMPLES["regions"]())).functions[0]
    pair, wrap, after, sibling, no_results, ret = f.entry_block.ops
    assert len(pair.results) == 2 and len(wrap.results) == 3
    assert wrap.operands == (pair.results[0],)
    inner, empty_block, empty, no_args = wrap.regions
    assert [len(r.blocks) for r in wrap.regions] == [3, 1, 0, 1]
    assert empty_block.blocks[0].ops == [] and no_args.blocks[0].args == []
    entry, second, third = inner.blocks
    use = entry.ops[0]
    assert use.operands == (entry.args[0], pair.results[1], f.arguments[0])
    assert [str(a.type) for a in entry.args] == ["tensor<2xf32>", "tensor<i64>"]
    assert second.ops[0].operands == (second.args[1],)
    nest = entry.ops[1]
    assert nest.regions[0].blocks[0].ops[-1].operands[1] is use.result
    assert after.operands == (wrap.results[2], wrap.results[0])
    assert ret.operands == (wrap.results[1], sibling.result)
    assert isinstance(entry.args[0], BlockArgument) and entry.args[0].block is entry
    assert isinstance(wrap.results[2], OpResult) and wrap.results[2].index == 2


def test_attribute_dictionaries_print_sorted_with_bare_unit_names():
    f = function("f", [T2], lambda block, x: [op(block, "test.op", [x], [T2], {
        "zeta": IntegerAttr(1, ELEMENT_TYPES["i64"]), "alpha": UnitAttr(), "mid": StringAttr("m")}).result])
    text = print_module(ModuleOp([f]))
    assert '"test.op"(%arg0) {alpha, mid = "m", zeta = 1 : i64} : (tensor<2xf32>) -> tensor<2xf32>' in text


def test_printing_a_nested_op_numbers_values_as_its_function_does():
    module = SAMPLES["regions"]()
    f = module.functions[0]
    after = f.entry_block.ops[2]
    assert print_op(after) == '%2 = "test.after"(%1#2, %1#0) : (tensor<i1>, tensor<2xf32>) -> tensor<2xf32>'
    assert str(after) == print_op(after)
    assert print_op(after, debuginfo=True).endswith(" loc(unknown)")
    assert str(f).startswith("func.func @regions(%arg0: tensor<2xf32>, %arg1: tensor<2xf32>)")


def test_detached_op_prints():
    block = Block([T2])
    o = Operation("test.free", [block.args[0]], [T2, T2])
    assert print_op(o) == '%0:2 = "test.free"(<<UNKNOWN SSA VALUE>>) : (tensor<2xf32>) -> (tensor<2xf32>, tensor<2xf32>)'


def test_func_whose_block_disagrees_with_its_type_prints_generically():
    f = FuncOp("bad", FunctionType([T2], []))
    f.entry_block.add_argument(T2)
    op(f.entry_block, "func.return", [])
    text = print_module(ModuleOp([f]))
    assert '"func.func"() <{function_type = (tensor<2xf32>) -> (), sym_name = "bad"}> ({' in text
    assert "^bb0(%arg0: tensor<2xf32>, %arg1: tensor<2xf32>):" in text
    assert "    func.return\n" in text


def test_return_with_attributes_prints_generically():
    f = function("f", [T2], lambda block, x: [x])
    f.return_op.attributes["note"] = UnitAttr()
    text = roundtrip(ModuleOp([f]))
    assert '"func.return"(%arg0) {note} : (tensor<2xf32>) -> ()' in text


def test_return_in_the_middle_of_a_block_prints_generically():
    f = function("f", [T2], lambda block, x: [])
    op(f.entry_block, "test.after", [f.arguments[0]], [T2])  # invalid IR (after the terminator), still printable
    text = roundtrip(ModuleOp([f]))
    assert '    "func.return"() : () -> ()\n    %0 = "test.after"(%arg0)' in text


def test_debuginfo_prints_every_location():
    text = print_module(SAMPLES["locations"](), debuginfo=True)
    assert text.startswith('module {\n  func.func @located(%arg0: tensor<2xf32> loc("input_x"("model.py":16:9)), '
                           "%arg1: tensor<2xf32> loc(unknown)) -> tensor<2xf32> {")
    assert text.endswith('  } loc("model.py":15:8)\n} loc("model.py":1:1)')
    assert '-> tensor<2xf32> loc(fused["model.py":12:5, "fused", unknown])' in text
    assert 'loc("node \\"2\\""("model.py":11:4))' in text
    assert '^bb0(%arg2: tensor<2xf32> loc("path with spaces/and \\"quotes\\".py":1:1)):' in text


def test_parsed_locations_equal_the_originals():
    module = SAMPLES["locations"]()
    parsed = parse_module(print_module(module, debuginfo=True))
    for a, b in zip(module.walk(), parsed.walk()):
        assert a.location == b.location
        for ra, rb in zip(a.regions, b.regions):
            for ba, bb in zip(ra.blocks, rb.blocks):
                assert [x.location for x in ba.args] == [x.location for x in bb.args]


def test_no_trailing_newline():
    assert not print_module(SAMPLES["mlp"]()).endswith("\n")
    assert print_module(ModuleOp()) == "module {\n}"


# --- parsing -------------------------------------------------------------------------------------------

def _parse_attr(text):
    module = parse_module(f'"test.op"() {{a = {text}}} : () -> ()')
    return module.body.ops[0].attributes["a"]


@pytest.mark.parametrize("text, expected", [
    ("1", IntegerAttr(1, ELEMENT_TYPES["i64"])),
    ("-7 : i8", IntegerAttr(-7, ELEMENT_TYPES["i8"])),
    ("255 : i8", IntegerAttr(255, ELEMENT_TYPES["i8"])),  # signless: any 8-bit pattern
    ("0x10 : i32", IntegerAttr(16, ELEMENT_TYPES["i32"])),
    ("1.5", FloatAttr(1.5, ELEMENT_TYPES["f64"])),
    ("1.0e-05 : f32", FloatAttr(1e-05, ELEMENT_TYPES["f32"])),
    ("-2. : f16", FloatAttr(-2.0, ELEMENT_TYPES["f16"])),
    ("0x7FC00000 : f32", FloatAttr(math.nan, ELEMENT_TYPES["f32"])),
    ("0x3C00 : f16", FloatAttr(1.0, ELEMENT_TYPES["f16"])),
    ("0x3F80 : bf16", FloatAttr(1.0, ELEMENT_TYPES["bf16"])),
    ('"a\\22b\\0A\\\\"', StringAttr('a"b\n\\')),
    ('"caf\\C3\\A9"', StringAttr("café")),
    ("true", BoolAttr(True)), ("unit", UnitAttr()),
    ("[1, [], @s]", ArrayAttr([IntegerAttr(1), ArrayAttr([]), SymbolRefAttr("s")])),
    ("array<i64: 1, -2>", DenseArrayAttr(ELEMENT_TYPES["i64"], (1, -2))),
    ("array<f32>", DenseArrayAttr(ELEMENT_TYPES["f32"], ())),
    ("array<f32: 0x7F800000, -1.5>", DenseArrayAttr(ELEMENT_TYPES["f32"], (math.inf, -1.5))),
    ("f16", TypeAttr(ELEMENT_TYPES["f16"])),
    ("tensor<2x?xi1>", TypeAttr(tensor((2, None), "i1"))),
    ("tensor < 2 x 3 x f32 >", TypeAttr(tensor((2, 3), "f32"))),
    ("tensor<0x3xf32>", TypeAttr(tensor((0, 3), "f32"))),
    ("(f32) -> (f32, i1)", TypeAttr(FunctionType([ELEMENT_TYPES["f32"]], [ELEMENT_TYPES["f32"], ELEMENT_TYPES["i1"]]))),
    ("() -> ()", TypeAttr(FunctionType([], []))),
    ("@sym", SymbolRefAttr("sym")), ('@"a b"', SymbolRefAttr("a b")),
    ("{b = 2, a}", DictionaryAttr({"a": UnitAttr(), "b": IntegerAttr(2)})),
    ("dense<1.0> : tensor<2x2xf32>", DenseElementsAttr(tensor((2, 2), "f32"), 1.0)),
    ("dense<[[1, 2], [3, 4]]> : tensor<2x2xi8>", DenseElementsAttr(tensor((2, 2), "i8"), [[1, 2], [3, 4]])),
    ("dense<[true, false]> : tensor<2xi1>", DenseElementsAttr(tensor((2,), "i1"), [True, False])),
    ("dense<[0x7F800000, -0.0]> : tensor<2xf32>", DenseElementsAttr(tensor((2,), "f32"), [math.inf, -0.0])),
    ('dense<"0x0000803F00000040"> : tensor<2xf32>', DenseElementsAttr(tensor((2,), "f32"), [1.0, 2.0])),
    ('dense<"0x0000803F"> : tensor<3xf32>', DenseElementsAttr(tensor((3,), "f32"), 1.0)),  # hex splat
    ('dense<"0x803F0040"> : tensor<2xbf16>', DenseElementsAttr(tensor((2,), "bf16"), [1.0, 2.0])),
    ('dense<"0x0100"> : tensor<2xi1>', DenseElementsAttr(tensor((2,), "i1"), [True, False])),
    ('dense<"0x05"> : tensor<3xi1>', DenseElementsAttr(tensor((3,), "i1"), [True, False, True])),  # bit-packed
    ("dense<> : tensor<0xf32>", DenseElementsAttr(tensor((0,), "f32"), np.zeros(0, np.float32))),
    ("dense<[[], []]> : tensor<2x0xi32>", DenseElementsAttr(tensor((2, 0), "i32"), np.zeros((2, 0), np.int32))),
    ("dense<7> : tensor<i64>", DenseElementsAttr(tensor((), "i64"), 7)),
])
def test_parse_attribute(text, expected):
    assert _parse_attr(text) == expected


def test_unit_attribute_forms():
    attrs = parse_module('"test.op"() {a, b = unit, "c d"} : () -> ()').body.ops[0].attributes
    assert attrs == {"a": UnitAttr(), "b": UnitAttr(), "c d": UnitAttr()}


def test_properties_are_attributes():
    o = parse_module('"test.op"() <{p = 1 : i32}> {q = 2 : i32} : () -> ()').body.ops[0]
    assert o.attributes == {"p": IntegerAttr(1, ELEMENT_TYPES["i32"]), "q": IntegerAttr(2, ELEMENT_TYPES["i32"])}


def test_op_locations_are_where_their_statements_start():
    text = "\n".join([
        "// a comment",
        "func.func @f(%a: tensor<2xf32>, %b: tensor<2xf32>) -> tensor<2xf32> {",
        '    %0 = "lz.add"(%a, %b) : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>',
        '  "lz.print"(%0) : (tensor<2xf32>) -> ()',
        '  %1 = "lz.neg"(%0) : (tensor<2xf32>) -> tensor<2xf32> loc("m.py":7:9)',
        "  return %1 : tensor<2xf32>",
        "}",
    ])
    module = parse_module(text, filename="t.mlir")
    f = module.functions[0]
    assert f.location == FileLineColLoc("t.mlir", 2, 1)
    assert [o.location for o in f.entry_block.ops] == [
        FileLineColLoc("t.mlir", 3, 5), FileLineColLoc("t.mlir", 4, 3), FileLineColLoc("m.py", 7, 9),
        FileLineColLoc("t.mlir", 6, 3)]
    assert [a.location for a in f.arguments] == [FileLineColLoc("t.mlir", 2, 14), FileLineColLoc("t.mlir", 2, 33)]
    assert module.location == FileLineColLoc("t.mlir", 1, 1)  # the implicit module
    later = parse_module(text, filename="t.mlir", first_line=40)
    assert later.functions[0].entry_block.ops[0].location == FileLineColLoc("t.mlir", 42, 5)


@pytest.mark.parametrize("loc_text, expected", [
    ('loc("f.py":12:3)', FileLineColLoc("f.py", 12, 3)),
    ('loc("name")', NameLoc("name")),
    ('loc("name"("f":1:2))', NameLoc("name", FileLineColLoc("f", 1, 2))),
    ("loc(unknown)", UNKNOWN),
    ('loc(fused["a":1:2, "b", unknown])', FusedLoc((FileLineColLoc("a", 1, 2), NameLoc("b"), UNKNOWN))),
    ('loc(fused<"meta">["a":1:2])', FusedLoc((FileLineColLoc("a", 1, 2),))),
    ('loc("f.py":3:4 to 5:6)', FileLineColLoc("f.py", 3, 4)),
    ('loc("f.py":3:4 to :6)', FileLineColLoc("f.py", 3, 4)),
])
def test_parse_location(loc_text, expected):
    assert parse_module(f'"test.op"() : () -> () {loc_text}').body.ops[0].location == expected


def test_location_aliases_as_mlir_opt_prints_them():
    text = """
module {
  func.func @f(%arg0: tensor<2xf32> loc(#loc1)) -> tensor<2xf32> {
    %0 = "lz.neg"(%arg0) : (tensor<2xf32>) -> tensor<2xf32> loc(#loc3)
    return %0 : tensor<2xf32> loc(#loc)
  } loc(#loc)
} loc(#loc)
#loc = loc("x.mlir":1:1)
#loc1 = loc("x.py":3:4)
#loc2 = loc("node")
#loc3 = loc(fused[#loc1, #loc2])
"""
    module = parse_module(text)
    f = module.functions[0]
    assert module.location == f.location == f.return_op.location == FileLineColLoc("x.mlir", 1, 1)
    assert f.arguments[0].location == FileLineColLoc("x.py", 3, 4)
    assert f.entry_block.ops[0].location == FusedLoc((FileLineColLoc("x.py", 3, 4), NameLoc("node")))
    before = parse_module('#l = loc("a":1:2)\n"test.op"() : () -> () loc(#l)')
    assert before.body.ops[0].location == FileLineColLoc("a", 1, 2)


def test_attribute_and_type_aliases():
    module = parse_module('#c = dense<1.0> : tensor<2xf32>\n!t = tensor<2xf32>\n%0 = "test.c"() {value = #c} : () -> !t')
    o = module.body.ops[0]
    assert o.attributes["value"] == DenseElementsAttr(tensor((2,)), 1.0) and o.result.type == tensor((2,))


def test_top_level_ops_are_wrapped_in_a_module():
    module = parse_module('func.func @a() {\n  return\n}\nfunc.func @b() {\n  func.return\n}')
    assert isinstance(module, ModuleOp) and [f.sym_name for f in module.functions] == ["a", "b"]
    assert parse_module("").body.ops == []
    assert parse_module("// only a comment\n").body.ops == []
    explicit = parse_module("builtin.module @m {\n}")
    assert explicit.sym_name == "m" and explicit.parent is None and explicit.body.ops == []
    two = parse_module("module {\n}\nmodule {\n}")
    assert len(two.body.ops) == 2 and all(isinstance(m, ModuleOp) for m in two.body.ops)


def test_generic_structural_ops_build_module_and_func():
    module = parse_module(print_module(SAMPLES["mlp"](), generic=True))
    assert isinstance(module, ModuleOp)
    f = module.functions[0]
    assert isinstance(f, FuncOp) and f.sym_name == "mlp" and len(f.arguments) == 3


def test_multiple_result_groups():
    text = ('%a, %b:2 = "test.three"() : () -> (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>)\n'
            '"test.use"(%a, %b#0, %b#1) : (tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> ()\n'
            '"test.use"(%b) : (tensor<2xf32>) -> ()')
    three, use, use0 = parse_module(text).body.ops
    assert use.operands == tuple(three.results)
    assert use0.operands == (three.results[1],)  # %b means %b#0


def test_results_need_not_be_named():
    o = parse_module('"test.op"() : () -> (tensor<2xf32>, tensor<2xf32>)').body.ops[0]
    assert len(o.results) == 2


def test_names_are_scoped_to_regions_and_functions():
    text = """
func.func @f(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = "test.r"() ({
    %in = "test.in"(%x) : (tensor<2xf32>) -> tensor<2xf32>
  }) : () -> tensor<2xf32>
  %in = "test.in"(%0) : (tensor<2xf32>) -> tensor<2xf32>
  return %in : tensor<2xf32>
}
func.func @g(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = "test.same_names_in_another_function"(%x) : (tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}"""
    module = parse_module(text)
    assert len(module.functions) == 2


def test_ops_with_the_isolated_from_above_trait_start_a_new_name_scope():
    from lezero.ir.opdef import _REGISTRY, ISOLATED_FROM_ABOVE, OpDef

    class Isolated(OpDef):
        name = "test.isolated"
        traits = frozenset({ISOLATED_FROM_ABOVE})

    text = """
func.func @f(%a: tensor<2xf32>) -> tensor<2xf32> {
  %0 = "t.neg"(%a) : (tensor<2xf32>) -> tensor<2xf32>
  %1 = "test.isolated"(%0) ({
  ^bb0(%x: tensor<2xf32>):
    %0 = "t.neg"(%x) : (tensor<2xf32>) -> tensor<2xf32>
    "t.yield"(%0) : (tensor<2xf32>) -> ()
  }) : (tensor<2xf32>) -> tensor<2xf32>
  return %1 : tensor<2xf32>
}"""
    outside = text.replace('"t.neg"(%x)', '"t.neg"(%a)')
    with pytest.raises(ParseError, match="redefinition of SSA value '%0'"):
        parse_module(text)
    _REGISTRY["test.isolated"] = Isolated()
    try:
        inner = parse_module(text).functions[0].entry_block.ops[1].regions[0].blocks[0]
        assert inner.ops[1].operands == (inner.ops[0].result,)
        with pytest.raises(ParseError, match="use of undeclared SSA value name '%a'"):
            parse_module(outside)
    finally:
        del _REGISTRY["test.isolated"]


def test_split_input_file():
    text = "a\n// -----\nb\nc\n  // -----  \nd"
    assert split_input_file(text) == [("a", 1), ("b\nc", 3), ("d", 6)]
    assert split_input_file("x\ny") == [("x\ny", 1)]
    chunks = split_input_file('"test.a"() : () -> ()\n// -----\n\n"test.b"() : () -> ()\n')
    module = parse_module(chunks[1][0], filename="s.mlir", first_line=chunks[1][1])
    assert module.body.ops[0].location == FileLineColLoc("s.mlir", 4, 1)


def test_function_type_and_block_arguments_agree():
    f = parse_module('"func.func"() <{function_type = (tensor<2xf32>) -> (), sym_name = "f"}> ({\n'
                     "^bb0(%a: tensor<2xf32>):\n  \"func.return\"() : () -> ()\n}) : () -> ()").functions[0]
    assert f.function_type.inputs == (f.arguments[0].type,)


def test_debuginfo_shows_unknown_locations():
    # module, function, three arguments, four ops: every one gets its loc(...)
    assert print_module(SAMPLES["mlp"](), debuginfo=True).count("loc(unknown)") == 9


def test_5000_op_module_parses():
    t = tensor((64, 256))
    f = FuncOp("big", FunctionType([t, t], [t]))
    values = list(f.arguments)
    for i in range(5000):
        o = op(f.entry_block, "lz.add", [values[-1], values[-2]], [t], {"alpha": FloatAttr(0.5, ELEMENT_TYPES["f32"])},
               location=FileLineColLoc("model.py", i + 1, 3))
        values.append(o.result)
    op(f.entry_block, "func.return", [values[-1]])
    text = print_module(ModuleOp([f]), debuginfo=True)
    # how fast it parses is benchmarks/compile_time.py's to say (no timing assertion in the tests)
    module = parse_module(text)
    ops = module.functions[0].entry_block.ops
    assert len(ops) == 5001
    assert print_module(module, debuginfo=True) == text
