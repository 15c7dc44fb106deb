"""Hand-built modules that exercise every part of the text format (shared by the printer/parser
tests and the xDSL compatibility test).  Unregistered op names keep them independent of the lz
dialect."""
from __future__ import annotations

import math

import numpy as np

from lezero.ir.attributes import (ArrayAttr, BoolAttr, DenseArrayAttr, DenseElementsAttr, DictionaryAttr,
                                  FloatAttr, IntegerAttr, StringAttr, SymbolRefAttr, TypeAttr, UnitAttr,
                                  DENSE_HEX_THRESHOLD)
from lezero.ir.builder import Builder
from lezero.ir.core import Block, FuncOp, ModuleOp, Operation, Region
from lezero.ir.location import UNKNOWN, FileLineColLoc, FusedLoc, NameLoc
from lezero.ir.types import ELEMENT_TYPES, FunctionType, tensor

F16, BF16, F32, F64 = (ELEMENT_TYPES[n] for n in ("f16", "bf16", "f32", "f64"))
I1, I8, I32, I64, UI8 = (ELEMENT_TYPES[n] for n in ("i1", "i8", "i32", "i64", "ui8"))
T2 = tensor((2,), "f32")


def op(block: Block, name, operands=(), result_types=(), attributes=None, regions=(), location=UNKNOWN):
    return block.append(Operation(name, operands, result_types, attributes, regions, location))


def function(name, arg_types, body, location=UNKNOWN, attributes=None) -> FuncOp:
    """A function whose results are what ``body(block, *args)`` returns."""
    f = FuncOp(name, FunctionType(arg_types, []), location=location, attributes=attributes)
    results = body(f.entry_block, *f.arguments)
    op(f.entry_block, "func.return", list(results))
    f.update_function_type()
    return f


def mlp() -> ModuleOp:
    x_t, w_t, b_t, y_t = tensor((64, 784)), tensor((784, 256)), tensor((256,)), tensor((64, 256))

    def body(block, x, w, b):
        builder = Builder.at_end(block)
        h = builder.create("lz.matmul", [x, w], result_types=[y_t]).result
        h = builder.create("lz.add", [h, b], result_types=[y_t]).result
        return [builder.create("lz.relu", [h], result_types=[y_t]).result]

    return ModuleOp([function("mlp", [x_t, w_t, b_t], body)])


def every_attribute() -> ModuleOp:
    attrs = {
        "int": IntegerAttr(7, I64), "int_neg": IntegerAttr(-3, I32), "int_i8": IntegerAttr(-128, I8),
        "int_ui8": IntegerAttr(255, UI8), "int_i1": IntegerAttr(1, I1), "int_big": IntegerAttr(2**63 - 1, I64),
        "f32": FloatAttr(1e-05, F32), "f64": FloatAttr(2.5, F64), "f16": FloatAttr(0.5, F16),
        "bf16": FloatAttr(-1.5, BF16), "big": FloatAttr(1e300, F64),
        "str": StringAttr("hello"), "str_escapes": StringAttr('quote " backslash \\ nl \n tab \t ctl \x01 del \x7f'),
        "str_unicode": StringAttr("héllo ∑ 😀"), "str_empty": StringAttr(""),
        "true": BoolAttr(True), "false": BoolAttr(False), "unit": UnitAttr(),
        "array": ArrayAttr([IntegerAttr(1, I64), StringAttr("a"), ArrayAttr([]), UnitAttr(), BoolAttr(False)]),
        "array_empty": ArrayAttr([]),
        "dense_array": DenseArrayAttr(I64, (1, -2, 3)), "dense_array_empty": DenseArrayAttr(I64, ()),
        "dense_array_f32": DenseArrayAttr(F32, (0.5, -1.25)), "dense_array_i1": DenseArrayAttr(I1, (True, False)),
        "dense_array_i8": DenseArrayAttr(I8, (-128, 127)),
        "type_f16": TypeAttr(F16), "type_tensor": TypeAttr(tensor((None, 3), "bf16")),
        "type_fn": TypeAttr(FunctionType([T2], [T2, tensor((), "i1")])),
        "type_fn_nested": TypeAttr(FunctionType([FunctionType([], [])], [FunctionType([T2], [T2])])),
        "dense_splat": DenseElementsAttr(tensor((2, 3), "f32"), 1.0),
        "dense_list": DenseElementsAttr(tensor((2, 2), "i32"), [[1, -2], [3, 4]]),
        "dense_bool": DenseElementsAttr(tensor((3,), "i1"), [True, False, True]),
        "dense_rank0": DenseElementsAttr(tensor((), "f64"), 3.25),
        "dense_one": DenseElementsAttr(tensor((1,), "f32"), [4.0]),
        "dense_empty": DenseElementsAttr(tensor((0, 3), "f32"), np.zeros((0, 3), np.float32)),
        "dense_bf16": DenseElementsAttr(tensor((2,), "bf16"), [1.5, -2.0]),
        "sym": SymbolRefAttr("callee"), "sym_quoted": SymbolRefAttr("has space"),
        "dict": DictionaryAttr({"b": IntegerAttr(1, I64), "a": UnitAttr()}),
        "dict_empty": DictionaryAttr({}),
        "needs quotes": IntegerAttr(1, I64), "dotted.name": StringAttr("x"),
    }

    def body(block, x):
        return [op(block, "test.all_attributes", [x], [T2], attrs).result]

    return ModuleOp([function("attrs", [T2], body)])


def edge_floats(nonfinite_in_arrays: bool = True) -> ModuleOp:
    """inf, nan, -0.0, denormals, extremes in every float type and attribute kind.

    xDSL rejects ``array<f32: 0x7F800000>`` (a non-finite element of a dense array, printed as its
    bit pattern as MLIR prints it) and crashes on an element its type cannot hold
    (``array<f16: 1.0e+300>``); ``nonfinite_in_arrays=False`` keeps only the finite values each
    array's type holds exactly."""
    specials = [math.inf, -math.inf, math.nan, -0.0, 0.0, 1e-45, 5e-324, 1.7976931348623157e308,
                65504.0, 1.401298464324817e-45, 3.4028234663852886e38, 0.1, -1.0e-07]
    attrs = {}
    for t in (F16, BF16, F32, F64):
        for i, v in enumerate(specials):
            attrs[f"{t.name}_{i}"] = FloatAttr(v, t)
        held = [v for v in specials if math.isfinite(v) and _holds(t, v)]
        attrs[f"{t.name}_array"] = DenseArrayAttr(t, tuple(specials if nonfinite_in_arrays else held))
        tt = tensor((len(specials),), t.name)
        with np.errstate(over="ignore"):
            attrs[f"{t.name}_dense"] = DenseElementsAttr(tt, np.array(specials, np.float64).astype(tt.element_type.numpy_dtype))
        attrs[f"{t.name}_splat_nan"] = DenseElementsAttr(tensor((2, 2), t.name), math.nan)
        attrs[f"{t.name}_splat_neg0"] = DenseElementsAttr(tensor((3,), t.name), -0.0)

    def body(block, x):
        return [op(block, "test.floats", [x], [T2], attrs).result]

    return ModuleOp([function("floats", [T2], body)])


def _holds(t, v: float) -> bool:
    """Whether float type ``t`` holds ``v`` exactly (bf16: its top 16 bits as an f32)."""
    with np.errstate(over="ignore"):
        x = np.array(v, np.float16 if t.name == "f16" else np.float64 if t.name == "f64" else np.float32)
    if t.name == "bf16" and x.view(np.uint32) & 0xFFFF:
        return False
    return float(x) == v


def large_dense_values(name: str, n: int = DENSE_HEX_THRESHOLD + 44) -> DenseElementsAttr:
    rng = np.random.default_rng(sum(map(ord, name)))
    t = tensor((n // 4, 4), name)
    if name == "i1":
        data = rng.random(n) < 0.5
    elif name == "bf16":  # values a bf16 holds exactly (the hex form keeps the top 16 bits)
        data = ((rng.standard_normal(n).astype(np.float32).view(np.uint32) >> 16) << 16).view(np.float32)
        data[:4] = [np.inf, -0.0, np.nan, 1.0]
    elif ELEMENT_TYPES[name].is_float:
        data = rng.standard_normal(n).astype(ELEMENT_TYPES[name].numpy_dtype)
        data[:4] = [np.inf, -0.0, np.nan, 1e-45 if name != "f16" else 6e-08]
    else:
        info = np.iinfo(ELEMENT_TYPES[name].numpy_dtype)
        data = rng.integers(info.min, info.max, size=n, dtype=ELEMENT_TYPES[name].numpy_dtype, endpoint=True)
    return DenseElementsAttr(t, data.reshape(t.shape))


def large_dense() -> ModuleOp:
    def body(block, x):
        outs = []
        for name in ("f32", "f16", "bf16", "f64", "i1", "i8", "i32", "i64", "ui8"):
            attr = large_dense_values(name)
            outs.append(op(block, "test.constant", [], [attr.type], {"value": attr}).result)
        return outs

    return ModuleOp([function("constants", [T2], body)])


def regions() -> ModuleOp:
    """Nested regions, region arguments, several blocks, multi-result ops, sibling regions."""

    def body(block, x, y):
        pair = op(block, "test.pair", [x, y], [T2, T2])
        inner_region = Region([Block([T2, tensor((), "i64")])])
        inner = inner_region.blocks[0]
        a = op(inner, "test.use", [inner.args[0], pair.results[1], x], [T2]).result
        deeper = Region([Block([T2])])
        d = deeper.blocks[0]
        op(d, "test.yield", [op(d, "test.neg", [d.args[0]], [T2]).result, a])
        nested = op(inner, "test.nest", [a], [T2], regions=[deeper]).result
        op(inner, "test.yield", [nested])
        second = Block([T2, T2])
        inner_region.add_block(second)
        op(second, "test.yield", [second.args[1]])
        third = Block()
        inner_region.add_block(third)
        op(third, "test.yield", [x])
        empty_block_region = Region([Block()])
        empty_region = Region()
        no_args_region = Region([Block()])
        op(no_args_region.blocks[0], "test.yield", [y])
        wrapper = op(block, "test.wrap", [pair.results[0]], [T2, T2, tensor((), "i1")], {"kind": StringAttr("w")},
                     regions=[inner_region, empty_block_region, empty_region, no_args_region])
        after = op(block, "test.after", [wrapper.results[2], wrapper.results[0]], [T2]).result
        sibling = Region([Block([T2])])
        op(sibling.blocks[0], "test.yield", [op(sibling.blocks[0], "test.neg", [after], [T2]).result])
        last = op(block, "test.sibling", [], [T2], regions=[sibling]).result
        op(block, "test.no_results", [last])
        return [wrapper.results[1], last]

    return ModuleOp([function("regions", [T2, T2], body)])


def structure() -> ModuleOp:
    """Module name and attributes, several functions, declarations, argument attributes."""
    t = tensor((None, 3), "f16")
    f0 = function("no_results", [], lambda block: [])
    f1 = function("two_results", [t, tensor((), "i64")],
                  lambda block, a, b: [op(block, "test.id", [a], [t]).result, b],
                  attributes={"lz.note": StringAttr("x"), "flag": UnitAttr()})
    decl = FuncOp("decl", FunctionType([T2, t], [T2]), attributes={"sym_visibility": StringAttr("private")},
                  body=Region())
    f2 = function("with_arg_attrs", [T2, T2], lambda block, a, b: [a],
                  attributes={"arg_attrs": ArrayAttr([DictionaryAttr({"lz.name": StringAttr("x")}), DictionaryAttr({})]),
                              "res_attrs": ArrayAttr([DictionaryAttr({"lz.out": UnitAttr()})])})
    f3 = function("returns_function_type", [], lambda block: [op(block, "test.fn", [], [T2]).result])
    f3.function_type = FunctionType([], [T2])
    inner = ModuleOp([function("inner", [T2], lambda block, a: [a])], attributes={"sym_name": StringAttr("inner_mod")})
    return ModuleOp([f0, f1, decl, f2, f3, inner],
                    attributes={"sym_name": StringAttr("top"), "lz.version": IntegerAttr(1, I64)})


def locations() -> ModuleOp:
    def loc(i):
        return FileLineColLoc("model.py", 10 + i, 3 + i)

    kinds = [loc(0), NameLoc("node_1"), NameLoc("node \"2\"", loc(1)), UNKNOWN,
             FusedLoc((loc(2), NameLoc("fused"), UNKNOWN)), NameLoc("outer", NameLoc("inner", loc(3))),
             FileLineColLoc("path with spaces/and \"quotes\".py", 1, 1), FusedLoc((NameLoc("a", FusedLoc((loc(4),))),))]
    f = FuncOp("located", FunctionType([T2, T2], [T2]), location=loc(5))
    f.arguments[0].location = NameLoc("input_x", loc(6))
    f.arguments[1].location = UNKNOWN
    block = f.entry_block
    v = f.arguments[0]
    for i, l in enumerate(kinds):
        region = Region([Block([T2])])
        region.blocks[0].args[0].location = kinds[(i + 1) % len(kinds)]
        op(region.blocks[0], "test.yield", [region.blocks[0].args[0]], location=kinds[(i + 2) % len(kinds)])
        v = op(block, "test.step", [v, f.arguments[1]], [T2], regions=[region] if i % 2 else [], location=l).result
    op(block, "func.return", [v], location=loc(7))
    return ModuleOp([f], location=FileLineColLoc("model.py", 1, 1))


def shapes() -> ModuleOp:
    ts = [tensor((2, None, 3), "f32"), tensor((), "f32"), tensor((0, 3), "i8"), tensor((None,), "ui8"),
          tensor((1, 1, 1, 1), "bf16"), tensor((10**12,), "i1")]

    def body(block, *args):
        return [op(block, "test.cast", [a], [a.type]).result for a in args]

    return ModuleOp([function("shapes", ts, body)])


SAMPLES = {
    "mlp": mlp, "every_attribute": every_attribute, "edge_floats": edge_floats, "large_dense": large_dense,
    "regions": regions, "structure": structure, "locations": locations, "shapes": shapes,
}
