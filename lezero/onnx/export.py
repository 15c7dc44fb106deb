"""Export: lz IR (or a ``lz.jit.trace`` result) to an ONNX model that ``onnx.checker`` accepts and
ONNX Runtime runs with the same outputs.

One exporter per lz op (opset 18, the default domain; integer and/or/not/xor become the Bitwise
ops). Composite ops map onto their ONNX counterparts (``Softmax``, ``LayerNormalization``,
``BatchNormalization``); an op with no ONNX form (``lz.kernel`` after fusion, gradient-only ops,
``lz.bitcast``, ``lz.cumulative`` other than a sum, shifts of signed ints) is an error naming it:
export before ``partition``/``fuse``. A traced module's weights become initializers under their
state-dict names; dynamic dims become symbolic (``batch`` for a leading one, ``d<i>`` elsewhere).
The file is written atomically.
"""
from __future__ import annotations

import math
import os
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lezero.ir.core import FuncOp, ModuleOp, Operation
from lezero.ir.diagnostics import IRError
from lezero.ir.dialect.data_movement import strided_positions

OPSET = 18

_ONNX_TYPES = {"f16": TensorProto.FLOAT16, "bf16": TensorProto.BFLOAT16, "f32": TensorProto.FLOAT,
               "f64": TensorProto.DOUBLE, "i1": TensorProto.BOOL, "i8": TensorProto.INT8, "i16": TensorProto.INT16,
               "i32": TensorProto.INT32, "i64": TensorProto.INT64, "ui8": TensorProto.UINT8,
               "ui16": TensorProto.UINT16, "ui32": TensorProto.UINT32, "ui64": TensorProto.UINT64}

_SAME_NAME = {"neg": "Neg", "abs": "Abs", "exp": "Exp", "log": "Log", "sqrt": "Sqrt", "tanh": "Tanh",
              "sigmoid": "Sigmoid", "relu": "Relu", "erf": "Erf", "sin": "Sin", "cos": "Cos", "floor": "Floor",
              "ceil": "Ceil", "sign": "Sign", "reciprocal": "Reciprocal", "not": "Not", "add": "Add", "sub": "Sub",
              "mul": "Mul", "div": "Div", "pow": "Pow", "max": "Max", "min": "Min", "and": "And", "or": "Or",
              "matmul": "MatMul", "select": "Where", "acos": "Acos", "acosh": "Acosh", "asin": "Asin",
              "asinh": "Asinh", "atan": "Atan", "atanh": "Atanh", "cosh": "Cosh", "sinh": "Sinh", "tan": "Tan",
              "round": "Round", "xor": "Xor"}
_BITWISE = {"and": "BitwiseAnd", "or": "BitwiseOr", "not": "BitwiseNot", "xor": "BitwiseXor"}
_COMPARISONS = {"eq": "Equal", "lt": "Less", "le": "LessOrEqual", "gt": "Greater", "ge": "GreaterOrEqual"}


class ExportError(IRError):
    """An op with no ONNX form, or a model that cannot be written."""


class _Graph:
    """The ONNX graph being built: value names, nodes, initializers."""

    def __init__(self):
        self.names: dict[int, str] = {}
        self.nodes: list = []
        self.initializers: list = []
        self._counter = 0

    def fresh(self, hint: str) -> str:
        self._counter += 1
        return f"{hint}_{self._counter}"

    def name(self, value) -> str:
        return self.names[id(value)]

    def constant(self, array: np.ndarray, hint: str) -> str:
        name = self.fresh(hint)
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op_type: str, inputs: list[str], hint: str, **attributes) -> str:
        return self.multi_node(op_type, inputs, hint, 1, **attributes)[0]

    def multi_node(self, op_type: str, inputs: list[str], hint: str, n_outputs: int, **attributes) -> list[str]:
        outs = [self.fresh(hint) for _ in range(n_outputs)]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=outs[0], **attributes))
        return outs


def _i64s(values) -> np.ndarray:
    return np.asarray(list(values), np.int64)


def _zero_where(g: _Graph, value: str, keep: str, et, hint: str) -> str:
    """``value`` (of element type ``et``) where the bool ``keep`` holds, else 0: a product with
    ``keep`` cast to 0/1 (ONNX Runtime has Mul for every integer type, Where for only some)."""
    return g.node("Mul", [value, g.node("Cast", [keep], "keep", to=_ONNX_TYPES[et.name])], hint)


def _rem(g: _Graph, op: Operation, ins: list[str]) -> list[str]:
    """``lz.rem`` as ``Mod`` with ``fmod=1`` (C's remainder: the sign of x).  An integer remainder
    by 0 is 0 in lezero but undefined in ONNX, so for integers the divisor's zeros become 1 and
    their results 0."""
    if op.operands[0].type.element_type.is_float:
        return [g.node("Mod", ins, "rem", fmod=1)]
    x, y = ins
    et = op.operands[1].type.element_type
    zero = g.node("Equal", [y, g.constant(np.zeros((), et.numpy_dtype), "zero")], "is_zero")
    safe = g.node("Add", [y, g.node("Cast", [zero], "one_if_zero", to=_ONNX_TYPES[et.name])], "divisor")
    r = g.node("Mod", [x, safe], "rem", fmod=1)
    return [_zero_where(g, r, g.node("Not", [zero], "nonzero"), et, "rem")]


def _shift(g: _Graph, op: Operation, ins: list[str], direction: str) -> list[str]:
    """``lz.shift_left``/``shift_right`` of unsigned ints as ``BitShift`` (ONNX has it for unsigned
    ints only; signed ones raise: an arithmetic right shift and a wrapping left shift have no exact
    ONNX form).  A shift of at least the bit width is 0 in lezero but undefined in ONNX, so those
    results are made 0."""
    et = op.operands[0].type.element_type
    if not et.name.startswith("ui"):
        raise ExportError(f"'{op.name}' op on {et.name} has no ONNX form: ONNX's BitShift takes unsigned "
                          "integers only", op.location)
    shifted = g.node("BitShift", ins, op.name[3:], direction=direction)
    near = g.node("Less", [ins[1], g.constant(np.array(et.bitwidth, et.numpy_dtype), "bits")], "near")
    return [_zero_where(g, shifted, near, et, op.name[3:])]


def _export_op(g: _Graph, op: Operation) -> list[str]:
    short = op.name[3:]
    ins = [g.name(v) for v in op.operands]
    attrs = op.definition.attrs(op)
    if short in _BITWISE and not op.operands[0].type.element_type.is_bool:
        return [g.node(_BITWISE[short], ins, short)]
    if short in _SAME_NAME:
        return [g.node(_SAME_NAME[short], ins, short)]
    if short == "rem":
        return _rem(g, op, ins)
    if short in ("shift_left", "shift_right"):
        return _shift(g, op, ins, "LEFT" if short == "shift_left" else "RIGHT")
    if short == "rsqrt":
        return [g.node("Reciprocal", [g.node("Sqrt", ins, "sqrt")], "rsqrt")]
    if short == "cast":
        return [g.node("Cast", ins, "cast", to=_ONNX_TYPES[attrs.to.name])]
    if short == "cmp":
        if attrs.predicate == "ne":
            return [g.node("Not", [g.node("Equal", ins, "eq")], "ne")]
        return [g.node(_COMPARISONS[attrs.predicate], ins, attrs.predicate)]
    if short == "gelu":
        x = ins[0]
        dtype = op.operands[0].type.element_type.numpy_dtype
        half = g.constant(np.array(0.5, dtype), "half")
        one = g.constant(np.array(1.0, dtype), "one")
        if attrs.approximate == "tanh":
            cube = g.node("Mul", [g.node("Mul", [x, x], "sq"), x], "cube")
            inner = g.node("Add", [x, g.node("Mul", [cube, g.constant(np.array(0.044715, dtype), "c")], "t")], "t")
            scaled = g.node("Mul", [inner, g.constant(np.array(math.sqrt(2 / math.pi), dtype), "k")], "t")
            phi = g.node("Add", [one, g.node("Tanh", [scaled], "tanh")], "t")
        else:
            phi = g.node("Add", [one, g.node("Erf", [g.node("Div", [x, g.constant(np.array(math.sqrt(2), dtype),
                                                                                     "sqrt2")], "t")], "erf")], "t")
        return [g.node("Mul", [g.node("Mul", [x, half], "t"), phi], "gelu")]
    if short == "conv2d":
        w = op.operands[1].type.shape
        return [g.node("Conv", ins, "conv", kernel_shape=list(w[2:]), strides=list(attrs.strides),
                       pads=list(attrs.pads), dilations=list(attrs.dilations), group=attrs.groups)]
    if short in ("max_pool2d", "avg_pool2d"):
        common = dict(kernel_shape=list(attrs.kernel), strides=list(attrs.strides), pads=list(attrs.pads),
                      ceil_mode=int(attrs.ceil_mode))
        if short == "max_pool2d":
            return [g.node("MaxPool", ins, "maxpool", dilations=list(attrs.dilations), **common)]
        return [g.node("AveragePool", ins, "avgpool", count_include_pad=int(attrs.count_include_pad), **common)]
    if short.startswith("reduce_"):
        rank = op.operands[0].type.rank
        axes = list(attrs.axes) if attrs.axes else list(range(rank))
        onnx_op = {"sum": "ReduceSum", "max": "ReduceMax", "min": "ReduceMin", "mean": "ReduceMean",
                   "prod": "ReduceProd"}[short[7:]]
        return [g.node(onnx_op, ins + [g.constant(_i64s(axes), "axes")], short, keepdims=int(attrs.keepdims))]
    if short == "argmax":
        return [g.node("ArgMax", ins, "argmax", axis=attrs.axis, keepdims=int(attrs.keepdims))]
    if short == "cumulative":
        if attrs.combine != "add":  # ONNX 18 has CumSum only (CumProd came in opset 26)
            raise ExportError(f"'{op.name}' op with combine = {attrs.combine} has no ONNX form (ONNX has CumSum "
                              "only)", op.location)
        return [g.node("CumSum", ins + [g.constant(np.array(attrs.axis, np.int64), "axis")], "cumsum",
                       exclusive=int(attrs.exclusive), reverse=int(attrs.reverse))]
    if short == "topk":  # both sort ties by index, lower first, and return i64 indices
        return g.multi_node("TopK", ins + [g.constant(_i64s([attrs.k]), "k")], "topk", 2, axis=attrs.axis,
                            largest=int(attrs.largest), sorted=1)
    if short == "scatter_nd":
        # ONNX's ScatterND takes i64 indices; with reduction = none and repeated index tuples ONNX
        # leaves the result undefined where lezero's later update wins (ONNX Runtime applies them in order)
        data, indices, updates = ins
        if op.operands[1].type.element_type.name != "i64":
            indices = g.node("Cast", [indices], "indices", to=TensorProto.INT64)
        return [g.node("ScatterND", [data, indices, updates], "scatter_nd", reduction=attrs.reduction)]
    if short == "reshape":
        return [g.node("Reshape", ins + [g.constant(_i64s(attrs.shape), "shape")], "reshape")]
    if short == "transpose":
        perm = attrs.perm if attrs.perm is not None else tuple(reversed(range(op.operands[0].type.rank)))
        return [g.node("Transpose", ins, "transpose", perm=list(perm))]
    if short == "broadcast_to":
        return [g.node("Expand", ins + [g.constant(_i64s(attrs.shape), "shape")], "expand")]
    if short == "slice":
        axes = attrs.axes if attrs.axes is not None else range(len(attrs.starts))
        steps = attrs.steps if attrs.steps is not None else [1] * len(attrs.starts)
        return [g.node("Slice", ins + [g.constant(_i64s(attrs.starts), "starts"), g.constant(_i64s(attrs.ends), "ends"),
                                       g.constant(_i64s(axes), "axes"), g.constant(_i64s(steps), "steps")], "slice")]
    if short == "as_strided":  # the view's storage positions, gathered from the flattened input
        flat = g.node("Reshape", ins + [g.constant(_i64s([-1]), "flat")], "flat")
        positions = strided_positions(attrs.shape, attrs.strides, attrs.offset)
        return [g.node("Gather", [flat, g.constant(positions, "positions")], "as_strided", axis=0)]
    if short == "concat":
        return [g.node("Concat", ins, "concat", axis=attrs.axis)]
    if short == "pad":
        value = np.array(attrs.value, op.operands[0].type.element_type.numpy_dtype)
        return [g.node("Pad", ins + [g.constant(_i64s(attrs.pads), "pads"), g.constant(value, "value")], "pad")]
    if short == "gather":
        return [g.node("Gather", ins, "gather", axis=attrs.axis)]
    if short == "transfer":  # a copy to another device's memory: ONNX has one memory
        return [g.node("Identity", ins, "transfer")]
    if short == "softmax":
        return [g.node("Softmax", ins, "softmax", axis=attrs.axis)]
    if short == "log_softmax":
        return [g.node("LogSoftmax", ins, "log_softmax", axis=attrs.axis)]
    if short == "layer_norm":
        return [g.node("LayerNormalization", ins, "layer_norm", axis=attrs.axis, epsilon=float(attrs.epsilon))]
    if short == "batch_norm":
        return [g.node("BatchNormalization", ins, "batch_norm", epsilon=float(attrs.epsilon))]
    raise ExportError(f"'{op.name}' op has no ONNX form (export the model before partition/fuse, and without "
                      "gradient-only ops)", op.location)


def _value_info(name: str, t, leading_batch: bool):
    dims = []
    for i, d in enumerate(t.shape):
        dims.append(("batch" if i == 0 and leading_batch else f"d{i}") if d is None else d)
    return helper.make_tensor_value_info(name, _ONNX_TYPES[t.element_type.name], dims)


def to_onnx(model, *, input_names=None, output_names=None, entry: str | None = None) -> onnx.ModelProto:
    """The ONNX model of a ``lz.jit.trace`` result or of one function of an IR module."""
    weights: list[tuple[str, np.ndarray]] = []
    if isinstance(model, ModuleOp):
        func = model.lookup(entry) if entry else _single_function(model)
        n_inputs = len(func.arguments)
    elif hasattr(model, "named_tensors") and hasattr(model, "func"):  # a lz.jit TracedModule
        func, n_inputs = model.func, model.n_inputs
        weights = [(name, t.detach().numpy()) for name, t in model.named_tensors]
    else:
        raise TypeError(f"export takes a lz.jit.trace result or an IR module, got {type(model).__name__}")

    g = _Graph()
    inputs = []
    names = list(input_names or [f"input{i}" if n_inputs > 1 else "input" for i in range(n_inputs)])
    if len(names) != n_inputs:
        raise ValueError(f"{len(names)} input names for {n_inputs} inputs")
    for arg, name in zip(func.arguments[:n_inputs], names):
        g.names[id(arg)] = name
        inputs.append(_value_info(name, arg.type, True))
    for arg, (name, array) in zip(func.arguments[n_inputs:], weights):
        g.names[id(arg)] = name
        g.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))

    outputs = []
    for op in func.entry_block.ops:
        if op.name == "func.return":
            out_names = list(output_names or [f"output{i}" if len(op.operands) > 1 else "output"
                                              for i in range(len(op.operands))])
            for value, name in zip(op.operands, out_names):
                g.nodes.append(helper.make_node("Identity", [g.name(value)], [name], name=f"{name}_identity"))
                outputs.append(_value_info(name, value.type, True))
        elif op.name == "lz.constant":
            g.names[id(op.result)] = g.constant(op.attributes["value"].array, "constant")
        else:
            for result, name in zip(op.results, _export_op(g, op)):
                g.names[id(result)] = name
    graph = helper.make_graph(g.nodes, func.sym_name, inputs, outputs, g.initializers)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="lezero")
    onnx.checker.check_model(proto)
    return proto


def export(model, path, **options) -> onnx.ModelProto:
    """Write ``to_onnx(model)`` to ``path`` atomically; returns the model."""
    proto = to_onnx(model, **options)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".lezero-export-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(proto.SerializeToString())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return proto


def _single_function(module: ModuleOp) -> FuncOp:
    functions = module.functions
    if len(functions) != 1:
        raise ValueError(f"the module has {len(functions)} functions: pass entry=")
    return functions[0]
