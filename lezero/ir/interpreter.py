"""The numpy reference interpreter: runs a ``func.func`` on numpy arrays, op by op, through each
op definition's ``evaluate``.  It is the oracle every numerical test compares against.

Every op output is converted to its result's element type (bf16 values are float32 rounded to
bf16, ties to even) and checked against the result's static dims.  IEEE edge cases (overflow, 0/0,
log of a negative) give inf and nan silently.
"""
from __future__ import annotations

import numpy as np

import lezero.ir.dialect  # noqa: F401  (registers every op)
from lezero.ir.core import FuncOp, ModuleOp, Operation
from lezero.ir.diagnostics import InputError, InterpretError
from lezero.ir.dialect.numerics import to_storage
from lezero.ir.opdef import OpError
from lezero.ir.types import TensorType, format_shape


def interpret(module: ModuleOp, func_name: str, *arrays):
    """Run ``@func_name`` on ``arrays``: one numpy array for one result, a tuple for several.

    Arrays must have the argument's numpy dtype (float32 for f32 and bf16) and a shape matching
    its static dims; Python scalars and lists are converted.
    """
    try:
        func = module.lookup(func_name)
    except KeyError as e:
        raise InputError(e.args[0], module.location) from None
    results = run_function(module, func, check_arguments(func, arrays))
    results = [np.array(r) for r in results]  # the caller owns them: no views of constants or inputs
    return results[0] if len(results) == 1 else tuple(results)


def check_arguments(func: FuncOp, arrays) -> list[np.ndarray]:
    """``arrays`` as ``func``'s arguments: count, dtypes and static dims checked (``InputError``
    naming the argument otherwise), converted to their storage dtype."""
    return [check_argument(func, i, a) for i, a in _enumerate(func, arrays)]


def _enumerate(func: FuncOp, arrays):
    want = len(func.arguments)
    if len(arrays) != want:
        raise InputError(f"@{func.sym_name} takes {want} argument{'s' if want != 1 else ''}, "
                         f"got {len(arrays)}", func.location)
    return enumerate(arrays)


def check_argument(func: FuncOp, index: int, value) -> np.ndarray:
    arg = func.arguments[index]
    t = arg.type
    name = f"argument #{index}" + (f" (%{arg.name_hint})" if arg.name_hint else "") + f" of @{func.sym_name}"
    if not isinstance(t, TensorType):
        raise InputError(f"{name} has type {t}, which the interpreter cannot pass", func.location)
    dtype = t.element_type.numpy_dtype
    if isinstance(value, (np.ndarray, np.generic)):
        if value.dtype != dtype:
            raise InputError(f"{name} expects {t} (numpy dtype {dtype}), got an array of dtype {value.dtype}",
                             func.location)
        array = np.asarray(value)
    else:
        try:
            array = np.asarray(value, dtype=dtype)
        except (TypeError, ValueError) as e:
            raise InputError(f"{name} expects {t}, got {type(value).__name__}: {e}", func.location) from None
    if not _shape_matches(array.shape, t.shape):
        raise InputError(f"{name} expects {t}, got an array of shape {format_shape(array.shape)}", func.location)
    return to_storage(array, t.element_type)


def _shape_matches(shape, want) -> bool:
    return len(shape) == len(want) and all(w is None or w == d for d, w in zip(shape, want))


def run_function(module: ModuleOp | None, func: FuncOp, args: list[np.ndarray]) -> list[np.ndarray]:
    """Run ``func``'s body on already checked arguments; the values ``func.return`` returns."""
    return run_block(func.entry_block, args, module)


def run_block(block, args: list[np.ndarray], module: ModuleOp | None = None,
              env: dict | None = None) -> list[np.ndarray]:
    """Run a block on values for its arguments; the operands of its terminator (``func.return``
    or ``lz.yield``).  ``env`` holds values visible from enclosing regions."""
    env = dict(env or {})
    env.update(zip(block.args, args))
    with np.errstate(all="ignore"):
        for op in block.ops:
            inputs = [env[v] for v in op.operands]
            if op.name in _TERMINATORS:
                return inputs
            env.update(zip(op.results, evaluate_op(op, inputs, module)))
    owner = block.parent_op
    if isinstance(owner, FuncOp):
        raise InterpretError(f"@{owner.sym_name} has no func.return", owner.location)
    raise InterpretError(f"'{owner.name}' op region has no terminator", owner.location)


_TERMINATORS = ("func.return", "lz.yield")


def evaluate_op(op: Operation, inputs: list[np.ndarray], module: ModuleOp | None = None) -> list[np.ndarray]:
    """Run one op on concrete inputs; its outputs converted to its result types (bf16 rounded) and
    checked against their static dims.  ``InterpretError`` names the op's location."""
    outputs = _run_op(module, op, inputs)
    if len(outputs) != len(op.results):
        raise InterpretError(f"'{op.name}' op produced {len(outputs)} values for {len(op.results)} results",
                             op.location)
    return [_to_result(op, result.type, out) for result, out in zip(op.results, outputs)]


def _run_op(module, op: Operation, inputs: list) -> list:
    if op.name == "func.call":
        return _call(module, op, inputs)
    definition = op.definition
    if definition is None:
        raise InterpretError(f"'{op.name}' op is not registered, so the interpreter cannot run it",
                             op.location)
    try:
        return definition.evaluate(op, inputs)
    except OpError as e:
        raise InterpretError(f"'{op.name}' op {e}", op.location) from None
    except NotImplementedError as e:
        raise InterpretError(f"'{op.name}' op cannot be interpreted: {e}", op.location) from None


def _call(module, op: Operation, inputs: list) -> list:
    callee = op.attributes.get("callee")
    name = getattr(callee, "name", None) or getattr(callee, "value", None)
    if module is None or name is None:
        raise InterpretError("'func.call' op needs a callee (@name) in an enclosing module", op.location)
    if name not in module:
        raise InterpretError(f"'func.call' op calls @{name}, which the module does not define", op.location)
    callee_func = module.lookup(name)
    if len(inputs) != len(callee_func.arguments):
        raise InterpretError(f"'func.call' op passes {len(inputs)} arguments to @{name}, which takes "
                             f"{len(callee_func.arguments)}", op.location)
    for i, (value, arg) in enumerate(zip(inputs, callee_func.arguments)):
        if not _shape_matches(value.shape, arg.type.shape):
            raise InterpretError(f"'func.call' op passes shape {format_shape(value.shape)} as argument #{i} "
                                 f"of @{name}, which expects {arg.type}", op.location)
    return run_function(module, callee_func, inputs)


def _to_result(op: Operation, t, value) -> np.ndarray:
    """``value`` as result type ``t``'s storage; its shape must fit ``t``'s static dims."""
    array = np.asarray(value)
    if not isinstance(t, TensorType):
        return array
    if not _shape_matches(array.shape, t.shape):
        raise InterpretError(f"'{op.name}' op computed a value of shape {format_shape(array.shape)} "
                             f"for its result of type {t}", op.location)
    return to_storage(array, t.element_type)
