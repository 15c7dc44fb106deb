"""A user's mistake in an eager op is an OperatorError naming the op, the shapes and the user's own
line (with a caret), never a traceback into lezero; dispatch compiles each (op, attributes, input
types) once."""
from __future__ import annotations

import numpy as np
import pytest

import lezero as lz
from lezero.eager import dispatch


def _line_of(marker: str) -> int:
    with open(__file__) as f:
        return next(i for i, line in enumerate(f, 1) if marker in line and "_line_of" not in line)


def test_shape_mismatch_names_the_op_the_shapes_and_the_users_line():
    a, b = lz.ones(2, 3), lz.ones(4, 3)
    with pytest.raises(lz.OperatorError) as info:
        a + b  # the bad add
    message = str(info.value)
    assert f"{__file__}:{_line_of('# the bad add')}:9: error: add: 'lz.add' op operand shapes 2x3 and 4x3 are not " \
           "broadcast-compatible" in message
    assert message.endswith("a + b  # the bad add\n        ^")
    assert isinstance(info.value, RuntimeError)


def test_matmul_and_module_errors_point_at_the_callers_line():
    layer = lz.nn.Linear(5, 2)
    with pytest.raises(lz.OperatorError) as info:
        layer(lz.ones(3, 4))  # a Linear(5, 2) fed 4 features
    message = str(info.value)
    assert f":{_line_of('# a Linear(5, 2) fed 4 features')}:" in message and __file__ in message
    assert "linear: 'lz.matmul' op contracting dimensions differ: 3x4 has 4 columns, 5x2 has 5 rows" in message
    with pytest.raises(lz.OperatorError, match="reshape: cannot reshape a tensor of shape 2x3 .6 elements. to 4x2"):
        lz.ones(2, 3).reshape(4, 2)
    with pytest.raises(lz.OperatorError, match=r"cat: 'lz.concat' op operand shapes"):
        lz.cat([lz.ones(2, 3), lz.ones(3, 2)], 0)


def test_errors_cost_nothing_on_the_hot_path():
    """The user's frame is looked up only when an error is raised: a recorded op stores none."""
    x = lz.ones(3, requires_grad=True)
    assert (x * 2)._node.location is None


def test_dispatch_compiles_each_signature_once():
    dispatch.clear_cache()  # an earlier test in this process may have compiled the same cast or add
    x, y = lz.randn(3, 5), lz.randn(3, 5)
    x + y
    size = dispatch.cache_size()
    for _ in range(3):
        x + y
        x + 1.0 + 2.0  # numbers are rank-0 inputs, not constants: no recompiles for new values
    assert dispatch.cache_size() == size + 1
    x.double() + y.double()
    assert dispatch.cache_size() == size + 3  # a cast (both share its signature) and an f64 add


def test_lean_runner_writes_into_given_outputs():
    from lezero.ir import Builder, FuncOp, FunctionType, ModuleOp, tensor
    from lezero.runtime.cpu import CompiledFunction

    func = FuncOp("f", FunctionType([tensor((4, 3)), tensor((3,))], []))
    b = Builder.at_end(func.entry_block)
    b.create("func.return", [b.op("lz.mul", *func.arguments)], result_types=[])
    func.update_function_type()
    run = CompiledFunction(ModuleOp([func]), "f").runner([(4, 3), (3,)])
    x, s = np.arange(12, dtype=np.float32).reshape(4, 3), np.array([1, 2, 3], np.float32)
    np.testing.assert_array_equal(run([x, s])[0], x * s)
    expected = x * s
    assert run([x, s], [x])[0] is x and run.kernel_count == 1  # in place, as optimizers use it
    np.testing.assert_array_equal(x, expected)
