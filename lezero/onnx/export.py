"""Export: lz IR (or a ``lz.jit.trace`` result) to an ONNX model that ``onnx.checker`` accepts and
ONNX Runtime runs with the same outputs.

One exporter per lz op (opset 18, the default domain; integer and/or/not/xor become the Bitwise
ops). Composite ops map onto their ONNX counterparts (``Softmax``, ``LayerNormalization``,
``BatchNormalization``); ``lz.attention``, which opset 18 lacks, becomes the MatMul/Softmax chain
it is fused from, and ``fuse-attention``'s ``attention`` kernel its body (lz ops only).  An op
with no ONNX form (any other ``lz.kernel``, gradient-only ops, ``lz.bitcast``, ``lz.cumulative``
other than a sum, shifts of signed ints) is an error naming it: export before ``partition``/``fuse``.
A traced module's weights become initializers under their state-dict names; dynamic dims become
symbolic (``batch`` for a leading one, ``d<i>`` elsewhere). The file is written atomically.

Control flow: an ``lz.for`` whose body does not read its index and that scans something is a
``Scan`` (``reverse`` as every input's and output's direction), any other a ``Loop`` with the trip
count as ``M`` whose body gathers ``xs[i]`` (its stacked outputs flipped back after a reverse
loop); ``lz.while`` is a ``Loop`` without ``M`` whose condition is exported once before it and once
at the end of its body; ``lz.if`` is an ``If``.  A region's invariant arguments are the outer
values by name (ONNX's subgraphs read the enclosing scope), and a region's names are unique in the
whole model (one counter).
"""
from __future__ import annotations

import itertools
import math
import os
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from lezero.ir.core import FuncOp, ModuleOp, Operation
from lezero.ir.diagnostics import IRError
from lezero.ir.dialect.data_movement import strided_positions
from lezero.ir.types import I1, TensorType

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

    def __init__(self, counter=None):
        self.names: dict[int, str] = {}
        self.nodes: list = []
        self.initializers: list = []
        self._counter = counter if counter is not None else itertools.count(1)

    def fresh(self, hint: str) -> str:
        return f"{hint}_{next(self._counter)}"

    def subgraph(self) -> "_Graph":
        """A graph for a region (a Loop's, Scan's or If's body): its names are unique in the model."""
        return _Graph(self._counter)

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


def _attention(g: _Graph, op: Operation, ins: list[str], scale: float) -> list[str]:
    """``lz.attention`` as the chain it was fused from (opset 18 has no Attention op): ``k``'s last
    two dims transposed, ``MatMul``, ``Mul`` by the scale, ``Add`` of the mask when there is one,
    ``Softmax`` over the keys, ``MatMul`` with ``v``."""
    rank = op.operands[0].type.rank
    k_t = g.node("Transpose", [ins[1]], "k_t", perm=list(range(rank - 2)) + [rank - 1, rank - 2])
    dtype = op.operands[0].type.element_type.numpy_dtype
    scores = g.node("Mul", [g.node("MatMul", [ins[0], k_t], "qk"), g.constant(np.array(scale, dtype), "scale")],
                    "scores")
    if len(ins) == 4:
        scores = g.node("Add", [scores, ins[3]], "masked")
    return [g.node("MatMul", [g.node("Softmax", [scores], "weights", axis=-1), ins[2]], "attention")]


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
    if short == "attention":
        return _attention(g, op, ins, attrs.scale)
    if short == "log_softmax":
        return [g.node("LogSoftmax", ins, "log_softmax", axis=attrs.axis)]
    if short == "layer_norm":
        return [g.node("LayerNormalization", ins, "layer_norm", axis=attrs.axis, epsilon=float(attrs.epsilon))]
    if short == "batch_norm":
        return [g.node("BatchNormalization", ins, "batch_norm", epsilon=float(attrs.epsilon))]
    if short in ("for", "while", "if"):
        return _CONTROL_FLOW[short](g, op, ins, attrs)
    # issue 12: the quantization ops are ONNX's (QDQ pairs, DynamicQuantizeLinear, MatMulInteger)
    if short in ("quantize", "dequantize"):
        return [g.node("QuantizeLinear" if short == "quantize" else "DequantizeLinear", ins, short, axis=attrs.axis)]
    if short == "dynamic_quantize":
        return g.multi_node("DynamicQuantizeLinear", ins, short, 3)
    if short == "matmul_integer":
        return [g.node("MatMulInteger", ins, short)]
    if short == "conv_integer":
        return [g.node("ConvInteger", ins, short, strides=list(attrs.strides), pads=list(attrs.pads),
                       dilations=list(attrs.dilations), group=attrs.groups,
                       kernel_shape=list(op.operands[1].type.shape[2:]))]
    if short == "kernel" and op.attributes["kind"].value == "attention":
        # fuse-attention's kernel holds lz ops only (q, k, v's views, lz.attention, the output's view)
        return _export_block(g, op.regions[0].blocks[0], ins)
    raise ExportError(f"'{op.name}' op has no ONNX form (export the model before partition/fuse, and without "
                      "gradient-only ops)", op.location)


def _export_block(g: _Graph, block, arg_names=()) -> list[str]:
    """Export ``block``'s ops into ``g`` (its arguments named ``arg_names``); the names of what its
    terminator (``func.return``, ``lz.yield``) returns."""
    for arg, name in zip(block.args, arg_names):
        g.names[id(arg)] = name
    for op in block.ops:
        if op.name in ("func.return", "lz.yield"):
            return [g.name(v) for v in op.operands]
        if op.name == "lz.constant":
            g.names[id(op.result)] = g.constant(op.attributes["value"].array, "constant")
        else:
            for result, name in zip(op.results, _export_op(g, op)):
                g.names[id(result)] = name
    raise ExportError("a block without a terminator", block.parent_op.location if block.parent_op else None)


# --- control flow: lz.for as Scan or Loop, lz.while as Loop, lz.if as If ----------------------------------
#
# A region's arguments that stand for the op's operands are named by the outer values (ONNX's
# subgraphs read the enclosing graph's values by name); the others are the subgraph's inputs.

def _region_graph(g: _Graph, block, arg_names: list, inputs: list, hint: str, prologue=None,
                  epilogue=None) -> onnx.GraphProto:
    """``block`` as an ONNX graph with graph inputs ``inputs`` (value infos); ``prologue(sub)``
    names more arguments first (a Loop's scanned slices), ``epilogue(sub, outs)`` maps the yielded
    names to the graph's outputs (with their types)."""
    sub = g.subgraph()
    if prologue is not None:
        arg_names = arg_names + prologue(sub)
    yielded = _export_block(sub, block, arg_names)
    pairs = list(zip(yielded, block.terminator.operand_types))
    if epilogue is not None:
        pairs = epilogue(sub, pairs)
    outputs = []
    for name, t in pairs:
        out = sub.node("Identity", [name], f"{hint}_out")
        outputs.append(_value_info(out, t, False))
    return helper.make_graph(sub.nodes, g.fresh(hint), inputs, outputs, sub.initializers)


def _input_infos(g: _Graph, hint: str, types) -> tuple[list, list]:
    names = [g.fresh(hint) for _ in types]
    return names, [_value_info(n, t, False) for n, t in zip(names, types)]


def _flip_leading(g: _Graph, name: str) -> str:
    return g.node("Slice", [name, g.constant(_i64s([-1]), "starts"), g.constant(_i64s([-(1 << 62)]), "ends"),
                            g.constant(_i64s([0]), "axes"), g.constant(_i64s([-1]), "steps")], "flip")


def _export_for(g: _Graph, op: Operation, ins: list[str], attrs) -> list[str]:
    """A Scan when the body does not read its index and scans something (directions carry
    ``reverse``); otherwise a Loop whose body gathers ``xs[i]`` and whose stacked outputs are
    flipped back when it ran in reverse."""
    n, ni, nc, ns = op.definition.counts(op, attrs)
    block = op.regions[0].blocks[0]
    index, slices = block.args[0], block.args[1 + ni + nc:]
    ny = len(op.results) - nc
    carried_names, carried_infos = _input_infos(g, "carried", [a.type for a in block.args[1 + ni:1 + ni + nc]])
    if ns and not index.has_uses:
        slice_names, slice_infos = _input_infos(g, "slice", [a.type for a in slices])
        body = _region_graph(g, block, [""] + ins[:ni] + carried_names + slice_names,
                             carried_infos + slice_infos, "scan_body")
        direction = int(attrs.reverse)
        return g.multi_node("Scan", ins[ni:], "scan", nc + ny, body=body, num_scan_inputs=ns,
                            scan_input_directions=[direction] * ns, scan_output_directions=[direction] * ny)
    iteration, cond_in = g.fresh("iteration"), g.fresh("cond")
    infos = [helper.make_tensor_value_info(iteration, TensorProto.INT64, []),
             helper.make_tensor_value_info(cond_in, TensorProto.BOOL, [])] + carried_infos

    def gather_slices(sub):
        position = iteration
        if attrs.reverse:
            position = sub.node("Sub", [sub.constant(np.array(n - 1, np.int64), "last"), iteration], "position")
        return [sub.node("Gather", [x, position], "slice", axis=0) for x in ins[ni + nc:]]

    def with_condition(sub, pairs):
        return [(sub.node("Identity", [cond_in], "cond"), TensorType((), I1))] + pairs

    body = _region_graph(g, block, [iteration] + ins[:ni] + carried_names, infos, "loop_body",
                         gather_slices, with_condition)
    trip = g.constant(np.array(n, np.int64), "trip_count")
    outs = g.multi_node("Loop", [trip, ""] + ins[ni:ni + nc], "loop", nc + ny, body=body)
    return outs[:nc] + [_flip_leading(g, y) if attrs.reverse else y for y in outs[nc:]]


def _export_while(g: _Graph, op: Operation, ins: list[str], attrs) -> list[str]:
    """A Loop with no trip count: its first condition computed before it from the inputs, the
    next ones at the end of its body from the next carried values."""
    ni = attrs.num_invariant
    condition, body_block = (r.blocks[0] for r in op.regions)
    (first,) = _export_block(g, condition, ins)
    carried_names, carried_infos = _input_infos(g, "carried", [a.type for a in body_block.args[ni:]])
    iteration, cond_in = g.fresh("iteration"), g.fresh("cond")
    infos = [helper.make_tensor_value_info(iteration, TensorProto.INT64, []),
             helper.make_tensor_value_info(cond_in, TensorProto.BOOL, [])] + carried_infos

    def with_condition(sub, pairs):
        (go,) = _export_block(sub, condition, ins[:ni] + [name for name, _ in pairs])
        return [(go, TensorType((), I1))] + pairs

    body = _region_graph(g, body_block, ins[:ni] + carried_names, infos, "while_body", epilogue=with_condition)
    return g.multi_node("Loop", ["", first] + ins[ni:], "while", len(op.results), body=body)


def _export_if(g: _Graph, op: Operation, ins: list[str], attrs) -> list[str]:
    then_block, else_block = (r.blocks[0] for r in op.regions)
    branches = {key: _region_graph(g, block, ins[1:], [], key)
                for key, block in (("then_branch", then_block), ("else_branch", else_block))}
    return g.multi_node("If", ins[:1], "if", len(op.results), **branches)


_CONTROL_FLOW = {"for": _export_for, "while": _export_while, "if": _export_if}


def _value_info(name: str, t, leading_batch: bool):
    dims = []
    for i, d in enumerate(t.shape):
        dims.append(("batch" if i == 0 and leading_batch else f"d{i}") if d is None else d)
    return helper.make_tensor_value_info(name, _ONNX_TYPES[t.element_type.name], dims)


def to_onnx(model, *, input_names=None, output_names=None, entry: str | None = None) -> onnx.ModelProto:
    """The ONNX model of a ``lz.jit.trace`` result or of one function of an IR module."""
    func, n_inputs, weights = exported_function(model, entry)
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
    returned = _export_block(g, func.entry_block)
    values = func.entry_block.terminator.operands
    out_names = list(output_names or [f"output{i}" if len(values) > 1 else "output" for i in range(len(values))])
    for value, source, name in zip(values, returned, out_names):
        g.nodes.append(helper.make_node("Identity", [source], [name], name=f"{name}_identity"))
        outputs.append(_value_info(name, value.type, True))
    graph = helper.make_graph(g.nodes, func.sym_name, inputs, outputs, g.initializers)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="lezero")
    onnx.checker.check_model(proto)
    return proto


def exported_function(model, entry: str | None = None) -> tuple[FuncOp, int, list[tuple[str, np.ndarray]]]:
    """What an exporter writes (ONNX here, TFLite in ``lezero.tflite``): the function, how many of
    its leading arguments are data inputs, and the weights (state-dict name, array) bound to the
    rest (none for an IR module, whose arguments are all inputs)."""
    if isinstance(model, ModuleOp):
        func = model.lookup(entry) if entry else _single_function(model)
        return func, len(func.arguments), []
    if hasattr(model, "named_tensors") and hasattr(model, "func"):  # a lz.jit TracedModule
        return model.func, model.n_inputs, [(name, t.detach().numpy()) for name, t in model.named_tensors]
    raise TypeError(f"export takes a lz.jit.trace result or an IR module, got {type(model).__name__}")


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
