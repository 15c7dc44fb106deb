"""The reference interpreter: argument checks, result conversion, calls, errors with locations."""
import numpy as np
import pytest
import torch

from lezero.ir import (Builder, FileLineColLoc, FuncOp, FunctionType, IRError, ModuleOp, NameLoc, Operation,
                       interpret)
from lezero.ir.attributes import SymbolRefAttr
from lezero.ir.diagnostics import InputError, InterpretError
from lezero.ir.dialect.numerics import round_to_bf16
from lezero.ir.types import tensor


def mlp(harness):
    """The design doc's example: matmul, add, relu."""
    def body(b, x, w, bias):
        return b.op("lz.relu", b.op("lz.add", b.op("lz.matmul", x, w), bias))
    return harness.build_function("mlp", [tensor((None, 4)), tensor((4, 3)), tensor((3,))], body)


def test_runs_a_function(harness):
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in [(5, 4), (4, 3), (3,)])
    np.testing.assert_allclose(interpret(mlp(harness), "f", x, w, b), np.maximum(x @ w + b, 0), rtol=1e-6)


def test_argument_count_error(harness):
    with pytest.raises(InputError, match="@f takes 3 arguments, got 2"):
        interpret(mlp(harness), "f", np.zeros((1, 4), np.float32), np.zeros((4, 3), np.float32))


def test_argument_shape_error_names_the_argument(harness):
    module = mlp(harness)
    module.lookup("f").arguments[1].name_hint = "w"
    with pytest.raises(InputError, match=r"argument #1 \(%w\) of @f expects tensor<4x3xf32>, got an array of "
                                         r"shape 3x3"):
        interpret(module, "f", np.zeros((2, 4), np.float32), np.zeros((3, 3), np.float32), np.zeros(3, np.float32))
    with pytest.raises(InputError, match="argument #2 of @f expects tensor<3xf32>, got an array of shape scalar"):
        interpret(module, "f", np.zeros((2, 4), np.float32), np.zeros((4, 3), np.float32), np.float32(0))


def test_argument_dtype_error(harness):
    with pytest.raises(InputError, match=r"argument #0 of @f expects tensor<\?x4xf32> \(numpy dtype float32\), "
                                         r"got an array of dtype float64"):
        interpret(mlp(harness), "f", np.zeros((2, 4)), np.zeros((4, 3), np.float32), np.zeros(3, np.float32))


def test_python_values_are_converted(harness):
    module = harness.build_function("add", [tensor((2,), "i32"), tensor((), "i32")],
                                    lambda b, x, y: b.op("lz.add", x, y))
    got = interpret(module, "f", [1, 2], 5)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, [6, 7])


def test_input_error_is_an_ir_error_with_the_function_location(harness):
    module = mlp(harness)
    module.lookup("f").location = FileLineColLoc("model.mlir", 2, 3)
    with pytest.raises(IRError) as info:
        interpret(module, "f")
    assert str(info.value) == "model.mlir:2:3: error: @f takes 3 arguments, got 0"


def test_unknown_function(harness):
    with pytest.raises(InputError, match=r"no function @g in the module \(functions: @f\)"):
        interpret(mlp(harness), "g")


def test_several_results_are_a_tuple(harness):
    module = harness.build_function("two", [tensor((2,))], lambda b, x: [b.op("lz.neg", x), b.op("lz.exp", x)])
    neg, exp = interpret(module, "f", np.array([0.0, 1.0], np.float32))
    np.testing.assert_array_equal(neg, [-0.0, -1.0])
    np.testing.assert_allclose(exp, [1.0, np.e], rtol=1e-6)


def test_returned_arguments_are_copies(harness):
    module = harness.build_function("id", [tensor((2,))], lambda b, x: x)
    x = np.ones(2, np.float32)
    out = interpret(module, "f", x)
    out[0] = 5
    assert x[0] == 1


def test_bf16_arguments_and_results_are_rounded(harness):
    module = harness.build_function("bf16", [tensor((4,), "bf16")] * 2, lambda b, x, y: b.op("lz.mul", x, y))
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((2, 4)).astype(np.float32)
    got = interpret(module, "f", x, y)
    expected = (torch.from_numpy(x).bfloat16() * torch.from_numpy(y).bfloat16()).float().numpy()
    np.testing.assert_array_equal(got, expected)


def test_round_to_bf16_ties_to_even():
    one_ulp = 2.0 ** -7  # bf16 spacing at 1.0
    x = np.array([1 + one_ulp / 2, 1 + 3 * one_ulp / 2, -(1 + one_ulp / 2), 1 + one_ulp / 2 + 2**-20,
                  np.finfo(np.float32).max, np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-40], np.float32)
    got = round_to_bf16(x)
    expected = torch.from_numpy(x).bfloat16().float().numpy()
    np.testing.assert_array_equal(got, expected)
    assert got.dtype == np.float32 and np.signbit(got[-2])


def test_results_are_cast_to_the_result_type(harness):
    # an op whose result type says f16 although its reference computes in f32
    module = harness.build_function("cast", [tensor((2,))], lambda b, x: b.create(
        "lz.neg", [x], result_types=[tensor((2,), "f16")]).result)
    assert interpret(module, "f", np.ones(2, np.float32)).dtype == np.float16


def test_result_shape_mismatch_names_the_op_location(harness):
    def body(b, x):
        return b.create("lz.neg", [x], result_types=[tensor((3,))], location=NameLoc("node7")).result
    module = harness.build_function("bad", [tensor((2,))], body)
    with pytest.raises(InterpretError) as info:
        interpret(module, "f", np.ones(2, np.float32))
    assert str(info.value) == ("node7: error: 'lz.neg' op computed a value of shape 2 for its result of type "
                               "tensor<3xf32>")


def test_dynamic_result_dims_accept_any_size(harness):
    module = harness.build_function("dyn", [tensor((None,))], lambda b, x: b.op("lz.exp", x))
    assert interpret(module, "f", np.zeros(7, np.float32)).shape == (7,)


def test_runtime_op_error_has_the_op_location(harness):
    def body(b, x, i):
        return b.create("lz.gather", [x, i], {}, location=FileLineColLoc("a.mlir", 4, 5)).result
    module = harness.build_function("g", [tensor((3,)), tensor((1,), "i64")], body)
    with pytest.raises(InterpretError, match="a.mlir:4:5: error: 'lz.gather' op index -4 is out of range"):
        interpret(module, "f", np.zeros(3, np.float32), np.array([-4]))


def test_unregistered_op(harness):
    def body(b, x):
        return b.create("foo.bar", [x], result_types=[tensor((2,))]).result
    module = harness.build_function("u", [tensor((2,))], body)
    with pytest.raises(InterpretError, match="'foo.bar' op is not registered"):
        interpret(module, "f", np.zeros(2, np.float32))


def test_missing_return(harness):
    func = FuncOp("f", FunctionType([tensor((2,))], []))
    with pytest.raises(InterpretError, match="@f has no func.return"):
        interpret(ModuleOp([func]), "f", np.zeros(2, np.float32))


def test_func_call(harness):
    square = FuncOp("square", FunctionType([tensor((None,))], [tensor((None,))]))
    b = Builder.at_end(square.entry_block)
    b.create("func.return", [b.op("lz.mul", square.arguments[0], square.arguments[0])], result_types=[])
    main = FuncOp("main", FunctionType([tensor((3,))], [tensor((3,))]))
    b = Builder.at_end(main.entry_block)
    call = b.insert(Operation("func.call", [main.arguments[0]], [tensor((3,))],
                              {"callee": SymbolRefAttr("square")}))
    b.create("func.return", [b.op("lz.add", call.result, main.arguments[0])], result_types=[])
    module = ModuleOp([square, main])
    np.testing.assert_array_equal(interpret(module, "main", np.array([1, 2, 3], np.float32)), [2, 6, 12])

    call.attributes["callee"] = SymbolRefAttr("cube")
    with pytest.raises(InterpretError, match="'func.call' op calls @cube, which the module does not define"):
        interpret(module, "main", np.array([1, 2, 3], np.float32))


def test_ieee_edge_cases_do_not_warn(harness):
    module = harness.build_function("log", [tensor((3,))], lambda b, x: b.op("lz.log", x))
    with np.errstate(all="raise"):
        got = interpret(module, "f", np.array([-1.0, 0.0, 1.0], np.float32))
    np.testing.assert_array_equal(got, [np.nan, -np.inf, 0.0])


def test_evaluate_op_converts_to_the_result_type(harness):
    from lezero.ir.interpreter import evaluate_op
    _, op = harness.build("lz.add", [tensor((2,), "bf16")] * 2)
    (out,) = evaluate_op(op, [np.array([1.0, 2.0], np.float32), np.array([2**-9, 2**-7], np.float32)])
    np.testing.assert_array_equal(out, [1.0, 2.0])  # 1 + 2^-9 rounds back to 1 in bf16
