"""Export: a ``lz.jit.trace`` result (or one function of an IR module) to a TFLite flatbuffer that
the TFLite interpreter (``ai_edge_litert``) runs with lezero's outputs.

The function comes from ``lezero.onnx.export.exported_function`` (the ONNX exporter's reading of
a traced module).  Values are emitted on demand from the function's results backwards, so what
the results do not need is never written: a weight-only computation (a transposed weight, a
reshaped bias) is folded into a constant by the IR interpreter, and patterns lezero spells as
several ops become one TFLite op (``select(x < c, c, x)`` is MAXIMUM, ``max(x, 0)`` RELU,
``min(relu(x), 6)`` RELU6, ``matmul(x, constant) + bias`` FULLY_CONNECTED with its bias).

Layout: lezero is NCHW, TFLite's convolutions and pools NHWC.  Every value keeps lezero's layout
(so the model's inputs and outputs are lezero's); a convolution or pool reads an NHWC copy of its
input (one TRANSPOSE, made once per value) and its result has an NHWC form from which an NCHW
copy is made only when something needs it.  Elementwise ops, batch norm and per-channel
constants follow the layout their input has, so a conv -> bias -> batch norm -> relu -> pool chain
transposes once at each end.  Weights are converted at export: CONV_2D's filter OIHW -> OHWI,
DEPTHWISE_CONV_2D's (C, 1, H, W) -> (1, H, W, C).  A convolution's padding is SAME where it is
TFLite's SAME (as the converter writes a padded conv), else a PAD op before a VALID one.

int8, dynamic: ``lz.quantization.quantize_dynamic``'s pattern (``dynamic_quantize`` ->
``matmul_integer`` with int8 weights, symmetric per-channel -> ``cast`` -> a product with the
scales) becomes TFLite's dynamic-range ("hybrid") FULLY_CONNECTED: float input, int8 weight with
per-output-channel scales in the tensor's quantization parameters, float output (TFLite quantizes
the input per row itself, asymmetrically, as lezero does per tensor).

int8, static (full integer, as TFLite's converter writes it): a quantized layer
(``QuantizedConv2d``/``QuantizedLinear``: ``[relu](cast(conv_integer | matmul_integer of
lz.quantize(x, s, z)) * (s * sw) [+ bias])``) whose float result reaches the next layer's
``lz.quantize(., s2, z2)`` through max pools and reshapes (which commute with a quantization) is
CONV_2D / DEPTHWISE_CONV_2D / FULLY_CONNECTED with int8 input, per-channel int8 filter (zero
points 0; quantized dimension 0 of OHWI, 3 of the depthwise 1HWO), int32 bias
``round(bias / (s * sw))`` of scale ``s * sw``, the relu fused, and int8 output of scale ``s2``
and zero point ``z2``; the pools, reshapes, PADs (which pad with the zero point) and transposes
between run on int8 with the same parameters.  uint8 activations are the same values in int8
with the zero point minus 128 (TFLite's int8 kernels take int8 activations).  A float input is
QUANTIZEd; a quantized layer whose result lezero gives in float (the classifier: no output scale
exists) DEQUANTIZEs its int8 input and weight and computes in float32, so its weights stay 8-bit
in the file.  TFLite requantizes in fixed point and lezero in float32, so an int8 activation may
differ by one step.

An op with no TFLite form here is an ``ExportError`` naming it and the user's source line (its
IR location).  Dynamic dims (``?``) are 1 in the tensor's shape and -1 in its ``shape_signature``:
the interpreter's ``resize_tensor_input`` sets the batch.

Why this file is long: one TFLite writer is one module: the demand-driven emitter, the float and the
int8 (dynamic-range and full-integer) op patterns and the layout bookkeeping share its state;
splitting them would pass that state across modules.
"""
from __future__ import annotations

import importlib

import flatbuffers
import numpy as np

from lezero.eager.serialization import atomic_write
from lezero.ir.core import Operation
from lezero.ir.diagnostics import IRError
from lezero.ir.interpreter import evaluate_op
from lezero.onnx.export import exported_function


def _schema(name: str):
    """A module of the ``tflite`` package's generated schema, with its builder functions (``Start``,
    ``Add<Field>``, ``End``): the package's ``__init__`` rebinds each module's name to its class."""
    return importlib.import_module(f"tflite.{name}")


(ActivationFunctionType, Buffer, BuiltinOperator, BuiltinOptions, Model, Operator, OperatorCode, Padding,
 QuantizationParameters, SubGraph, Tensor, TensorType) = map(_schema, (
    "ActivationFunctionType", "Buffer", "BuiltinOperator", "BuiltinOptions", "Model", "Operator", "OperatorCode",
    "Padding", "QuantizationParameters", "SubGraph", "Tensor", "TensorType"))

SCHEMA_VERSION = 3
NCHW, NHWC = "nchw", "nhwc"
TO_NHWC, TO_NCHW = (0, 2, 3, 1), (0, 3, 1, 2)

_TYPES = {np.dtype(np.float32): TensorType.TensorType.FLOAT32, np.dtype(np.int32): TensorType.TensorType.INT32,
          np.dtype(np.int64): TensorType.TensorType.INT64, np.dtype(np.int8): TensorType.TensorType.INT8,
          np.dtype(np.uint8): TensorType.TensorType.UINT8, np.dtype(np.bool_): TensorType.TensorType.BOOL}
_OPS = BuiltinOperator.BuiltinOperator
_OPTIONS = BuiltinOptions.BuiltinOptions
_VALID, _SAME = Padding.Padding.VALID, Padding.Padding.SAME  # other padding is a PAD op before the convolution
_RELU = ActivationFunctionType.ActivationFunctionType.RELU
_NO_ACTIVATION = ActivationFunctionType.ActivationFunctionType.NONE
_BINARY = {"add": _OPS.ADD, "sub": _OPS.SUB, "mul": _OPS.MUL, "div": _OPS.DIV, "max": _OPS.MAXIMUM,
           "min": _OPS.MINIMUM}
_UNARY = {"relu": _OPS.RELU, "tanh": _OPS.TANH, "sigmoid": _OPS.LOGISTIC, "exp": _OPS.EXP, "neg": _OPS.NEG,
          "abs": _OPS.ABS, "sqrt": _OPS.SQRT, "rsqrt": _OPS.RSQRT, "log": _OPS.LOG}
_ELEMENTWISE = set(_BINARY) | set(_UNARY) | {"select"}


class ExportError(IRError):
    """An op (or a form of one) with no TFLite equivalent in this exporter; located at the op."""


class _Tensor:
    """A tensor of the TFLite subgraph being built (serialized at the end)."""

    def __init__(self, name, shape, dtype, data=None, quantization=None, signature=None):
        self.name, self.shape, self.dtype = name, tuple(shape), np.dtype(dtype)
        self.data, self.quantization = data, quantization
        self.signature = signature  # the shape with -1 for dynamic dims (inputs only)


class _Subgraph:
    """Tensors, operators and the lezero value -> tensor (per layout) map, emitted on demand."""

    def __init__(self, constants: dict[int, np.ndarray]):
        self.tensors: list[_Tensor] = []
        self.operators: list[tuple[int, list[int], list[int], int, object]] = []
        self.constants = constants  # id(value) -> array: weights, lz.constant, folded weight-only results
        self.emitted: dict[int, dict[str, int]] = {}  # id(value) -> {layout: tensor index}

    def tensor(self, name, shape, dtype, data=None, quantization=None, signature=None) -> int:
        self.tensors.append(_Tensor(f"{name}_{len(self.tensors)}", shape, dtype, data, quantization, signature))
        return len(self.tensors) - 1

    def constant(self, array, name="constant", quantization=None) -> int:
        array = np.ascontiguousarray(array)
        return self.tensor(name, array.shape, array.dtype, array, quantization)

    def op(self, code: int, inputs: list[int], shape, dtype=np.float32, options=None, name="t",
           quantization=None) -> int:
        out = self.tensor(name, shape, dtype, quantization=quantization)
        self.operators.append((code, inputs, [out], *(options or (0, None))))
        return out


def _defining_op(value) -> Operation | None:
    """The op whose result ``value`` is; None for a block argument (an input or a weight)."""
    return value.owner if isinstance(value.owner, Operation) else None


def _is_same_padding(spatial, kernel, attrs) -> bool:
    """Whether a convolution's explicit pads are TFLite's SAME padding (output ``ceil(n / stride)``,
    the padding split with the odd one after), as TFLite's converter writes padded convs."""
    if not any(attrs.pads) or None in spatial:
        return False
    top, left, bottom, right = attrs.pads
    for n, k, stride, dilation, before, after in zip(spatial, kernel, attrs.strides, attrs.dilations, (top, left),
                                                     (bottom, right)):
        total = (-(-n // stride) - 1) * stride + (k - 1) * dilation + 1 - n
        if total < 0 or (before, after) != (total // 2, total - total // 2):
            return False
    return True


def _static_shape(t) -> tuple:
    return tuple(1 if d is None else d for d in t.shape)


def _in_layout(shape, layout):
    return tuple(shape[i] for i in TO_NHWC) if layout == NHWC else tuple(shape)


class _Exporter:
    def __init__(self, func, n_inputs: int, weights):
        self.func = func
        constants = {id(arg): np.asarray(array) for arg, (_, array) in zip(func.arguments[n_inputs:], weights)}
        self.g = _Subgraph(constants)
        self.quantized_forms: dict[tuple, dict[str, int]] = {}  # (id(value), scale, zero) -> {layout: int8 tensor}
        self.users: dict[int, int] = {}
        for op in func.entry_block.ops:
            for v in op.operands:
                self.users[id(v)] = self.users.get(id(v), 0) + 1
        self.inputs = []
        for i, arg in enumerate(func.arguments[:n_inputs]):
            index = self.g.tensor(f"input{i}" if n_inputs > 1 else "input", _static_shape(arg.type),
                                  arg.type.element_type.numpy_dtype,
                                  signature=tuple(-1 if d is None else d for d in arg.type.shape))
            self.g.emitted[id(arg)] = {NCHW: index}
            self.inputs.append(index)
        for op in func.entry_block.ops:  # fold what depends on weights and constants only
            if op.name == "lz.constant":
                constants[id(op.result)] = np.asarray(op.attributes["value"].array)
            elif op.results and not op.regions and all(id(v) in constants for v in op.operands) \
                    and not op.name.startswith("lz.random"):  # (the terminator has no results)
                for result, array in zip(op.results, evaluate_op(op, [constants[id(v)] for v in op.operands])):
                    constants[id(result)] = np.asarray(array)

    # --- values ---------------------------------------------------------------------------------
    def constant_of(self, value):
        return self.g.constants.get(id(value))

    def available(self, value) -> dict[str, int]:
        if id(value) not in self.g.emitted:
            if id(value) in self.g.constants:
                self.g.emitted[id(value)] = {NCHW: self.g.constant(self.g.constants[id(value)])}
            else:
                self.g.emitted[id(value)] = self.emit(_defining_op(value))
        return self.g.emitted[id(value)]

    def get(self, value, layout=NCHW) -> int:
        forms = self.available(value)
        if layout not in forms:
            if id(value) in self.g.constants:
                forms[layout] = self.g.constant(np.transpose(self.g.constants[id(value)], TO_NHWC))
            else:
                other = NHWC if layout == NCHW else NCHW
                perm = TO_NHWC if layout == NHWC else TO_NCHW
                shape = _in_layout(_static_shape(value.type), layout)
                forms[layout] = self.g.op(_OPS.TRANSPOSE, [forms[other], self.g.constant(np.array(perm, np.int32))],
                                          shape, value.type.element_type.numpy_dtype, name="transpose")
        return forms[layout]

    def preferred_layout(self, value) -> str:
        """NHWC when the value already has that form (a conv's or pool's result), else NCHW."""
        if id(value) in self.g.constants:
            return NCHW
        return NHWC if NHWC in self.available(value) else NCHW

    # --- int8 activations (static quantization) -------------------------------------------------
    def activation_params(self, scale_value, zero_value, op) -> tuple[float, int]:
        """(scale, int8 zero point) of a per-tensor activation quantization with constant
        parameters; a uint8 one is the same values shifted by -128 (TFLite's int8 kernels take
        int8 activations with per-channel int8 weights)."""
        scale, zero = self.constant_of(scale_value), self.constant_of(zero_value)
        if scale is None or zero is None or scale.size != 1 or zero.size != 1:
            raise ExportError(f"'{op.name}' op with computed or per-channel activation quantization parameters has "
                              "no TFLite form (TFLite's int8 activations have one constant scale and zero point)",
                              op.location)
        return float(scale.reshape(())), int(zero.reshape(())) - (128 if zero.dtype == np.uint8 else 0)

    def quantized(self, value, scale: float, zero: int, layout=NCHW) -> int:
        """The int8 tensor of ``quantize(value, scale, zero)`` (``zero`` already int8) in ``layout``:
        the integer form of the layers that computed ``value`` when they are quantized layers
        (``_integer_parts``: a CONV_2D/DEPTHWISE_CONV_2D/FULLY_CONNECTED with int8 output of this
        scale), through max pools and reshapes (which commute with quantization), else a QUANTIZE
        of the float value."""
        params = (np.array([scale], np.float32), np.array([zero], np.int64), 0)
        forms = self.quantized_forms.setdefault((id(value), scale, zero), {})
        if not forms:
            op, shape = _defining_op(value), _static_shape(value.type)
            parts = self._integer_parts(value)
            if op is not None and op.name == "lz.max_pool2d":
                inner = self.quantized(op.operands[0], scale, zero, NHWC)
                forms[NHWC] = self._pool(op, op.definition.attrs(op), _in_layout(shape, NHWC), _OPS.MAX_POOL_2D,
                                         inner, params)
            elif op is not None and op.name == "lz.reshape":
                inner = self.quantized(op.operands[0], scale, zero, NCHW)
                new_shape = np.array([-1 if d is None else d for d in value.type.shape], np.int32)
                forms[NCHW] = self.g.op(_OPS.RESHAPE, [inner, self.g.constant(new_shape)], shape, np.int8,
                                        _options("ReshapeOptions", NewShape=new_shape), "reshape", params)
            elif parts is not None and parts[0].name == "lz.conv_integer":
                forms[NHWC] = self._conv2d(parts[0], parts[0].definition.attrs(parts[0]), _in_layout(shape, NHWC),
                                           parts[2], integer=(parts[1], parts[3], params))
            elif parts is not None:
                forms[NCHW] = self._integer_fully_connected(parts, shape, params)
            else:
                layout_now = self.preferred_layout(value) if len(shape) == 4 else NCHW
                forms[layout_now] = self.g.op(_OPS.QUANTIZE, [self.get(value, layout_now)],
                                              _in_layout(shape, layout_now) if len(shape) == 4 else shape, np.int8,
                                              name="quantize", quantization=params)
        if layout not in forms:
            (other, index), = forms.items()
            perm = TO_NHWC if layout == NHWC else TO_NCHW
            forms[layout] = self.g.op(_OPS.TRANSPOSE, [index, self.g.constant(np.array(perm, np.int32))],
                                      _in_layout(_static_shape(value.type), layout), np.int8, name="transpose",
                                      quantization=params)
        return forms[layout]

    def _integer_parts(self, value):
        """(integer op, its combined scale per output channel (sx * sw), bias or None, relu) when
        ``value`` is a quantized layer's float result: ``[relu](cast(conv_integer | matmul_integer
        of lz.quantize(x)) * scale [+ bias])`` (``QuantizedConv2d``, ``QuantizedLinear``), else None."""
        op, relu, bias = _defining_op(value), False, None
        if op is not None and (op.name == "lz.relu" or (op.name == "lz.select" and self._is_relu(op)) or (
                op.name == "lz.max" and any(self._is_scalar(v, 0.0) for v in op.operands))):
            relu = True
            value = op.operands[2] if op.name == "lz.select" else next(
                v for v in op.operands if not (op.name == "lz.max" and self._is_scalar(v, 0.0)))
            op = _defining_op(value)
        if op is not None and op.name == "lz.add":
            for product, b in (op.operands, op.operands[::-1]):
                constant = self.constant_of(b)
                if constant is not None and self.constant_of(product) is None:
                    bias, value, op = constant, product, _defining_op(product)
                    break
        if op is None or op.name != "lz.mul":
            return None
        for product, s in (op.operands, op.operands[::-1]):
            cast, scale = _defining_op(product), self.constant_of(s)
            integer = _defining_op(cast.operands[0]) if cast is not None and cast.name == "lz.cast" else None
            if scale is None or integer is None or integer.name not in ("lz.conv_integer", "lz.matmul_integer"):
                continue
            quantize = _defining_op(integer.operands[0])
            if quantize is None or quantize.name != "lz.quantize":
                return None
            channels = integer.results[0].type.shape[1 if integer.name == "lz.conv_integer" else -1]
            if scale.size not in (1, channels) or (bias is not None and bias.size != channels):
                return None
            scale = np.broadcast_to(scale.reshape(-1), (channels,)).astype(np.float32)
            return integer, scale, None if bias is None else bias.reshape(-1).astype(np.float32), relu
        return None

    def _is_scalar(self, value, number: float) -> bool:
        array = self.constant_of(value)
        return array is not None and array.size == 1 and float(array.reshape(())) == number

    def _integer_operands(self, integer):
        """(int8 input tensor in the layout the op reads, its scale and int8 zero point, the int8
        weight) of a conv_integer/matmul_integer whose input is ``lz.quantize``, with TFLite's int8
        rules checked: constant int8 symmetric weights, the quantize's zero point."""
        quantized_input, weight_value, input_zero, weight_zero = integer.operands
        quantize = _defining_op(quantized_input)
        scale, zero = self.activation_params(quantize.operands[1], quantize.operands[2], quantize)
        if self.activation_params(quantize.operands[1], input_zero, integer)[1] != zero:
            raise ExportError(f"'{integer.name}' op whose input zero point is not its lz.quantize's has no TFLite "
                              "form", integer.location)
        weight, weight_zeros = self.constant_of(weight_value), self.constant_of(weight_zero)
        if weight is None or weight.dtype != np.int8 or weight_zeros is None or np.any(weight_zeros != 0):
            raise ExportError(f"'{integer.name}' op without constant symmetric int8 weights (zero point 0) has no "
                              "TFLite form: TFLite's int8 weights are symmetric (quantize with scheme='symmetric')",
                              integer.location)
        layout = NHWC if integer.name == "lz.conv_integer" else NCHW
        return self.quantized(quantize.operands[0], scale, zero, layout), scale, zero, weight

    def _integer_fully_connected(self, parts, shape, params) -> int:
        """FULLY_CONNECTED with int8 input, per-channel int8 weight (N, K), int32 bias of scale
        sx * sw and int8 output of ``params`` (TFLite's full-integer form, as its converter writes
        it); without ``params`` (a layer whose result lezero gives as float: the classifier) the
        int8 input and weight are DEQUANTIZEd and the layer computes in float32."""
        integer, combined, bias, relu = parts
        x, input_scale, _, weight = self._integer_operands(integer)
        w = self._int8_weight(np.ascontiguousarray(weight.T), combined / np.float32(input_scale), 0)
        options = _options("FullyConnectedOptions", FusedActivationFunction=_RELU if relu else _NO_ACTIVATION)
        if params is None:
            ins = [self._dequantized(x), self._dequantized(w),
                   -1 if bias is None else self.g.constant(bias, "bias")]
            return self.g.op(_OPS.FULLY_CONNECTED, ins, shape, np.float32, options, "fc")
        return self.g.op(_OPS.FULLY_CONNECTED, [x, w, self._int32_bias(bias, combined)], shape, np.int8, options,
                         "fc", params)

    def _dequantized(self, index: int) -> int:
        """A float32 DEQUANTIZE of the int8 tensor ``index``."""
        return self.g.op(_OPS.DEQUANTIZE, [index], self.g.tensors[index].shape, np.float32, name="dequantize")

    def _int8_weight(self, weight, scale, dimension: int) -> int:
        """An int8 weight constant quantized per channel along ``dimension``, zero points 0."""
        return self.g.constant(weight, "weight_int8", (np.asarray(scale, np.float32),
                                                       np.zeros(len(scale), np.int64), dimension))

    def _int32_bias(self, bias, combined) -> int:
        """The int32 bias of an int8 kernel: ``round(bias / (sx * sw))`` with that scale per channel."""
        values = np.zeros(len(combined), np.int32) if bias is None else np.round(
            bias.astype(np.float64) / combined.astype(np.float64)).astype(np.int32)
        return self.g.constant(values, "bias_int32", (combined, np.zeros(len(combined), np.int64), 0))

    # --- ops ------------------------------------------------------------------------------------
    def emit(self, op) -> dict[str, int]:
        """The TFLite form of ``op``'s result, in the layout(s) it is made in."""
        short = op.name.removeprefix("lz.")
        result = op.results[0]
        shape, dtype = _static_shape(result.type), result.type.element_type.numpy_dtype
        if dtype not in _TYPES:
            raise ExportError(f"'{op.name}' op gives {result.type.element_type}, which this TFLite exporter does not "
                              "write", op.location)
        if short in ("conv2d", "max_pool2d", "avg_pool2d"):
            return {NHWC: getattr(self, "_" + short)(op, op.definition.attrs(op), _in_layout(shape, NHWC))}
        integer = self._integer_parts(result) if short in ("add", "mul", "relu", "max", "select") else None
        if integer is not None and integer[0].name == "lz.conv_integer":
            return {NHWC: self._conv2d(integer[0], integer[0].definition.attrs(integer[0]), _in_layout(shape, NHWC),
                                       integer[2], integer=(integer[1], integer[3], None))}
        if integer is not None:
            return {NCHW: self._integer_fully_connected(integer, shape, None)}
        if short == "add" and self._biased_conv_parts(op):
            conv, bias = self._biased_conv_parts(op)
            return {NHWC: self._conv2d(conv, conv.definition.attrs(conv), _in_layout(shape, NHWC), bias)}
        linear = self._fully_connected_parts(op) if short in ("matmul", "add", "mul") else None
        if linear:
            return {NCHW: self._fully_connected(op, shape, linear)}
        if short == "matmul":
            raise ExportError(f"'{op.name}' op of two computed tensors (or not 2-D by 2-D) has no TFLite form in "
                              "lezero's TFLite exporter (FULLY_CONNECTED takes a constant weight)", op.location)
        if short == "batch_norm":
            return self._batch_norm(op, shape)
        if short in _ELEMENTWISE:
            return self._elementwise(op, short, shape, dtype)
        attrs = op.definition.attrs(op) if op.definition else None
        if short == "reshape":
            new_shape = np.array([-1 if d is None else d for d in result.type.shape], np.int32)
            options = _options("ReshapeOptions", NewShape=new_shape)
            return {NCHW: self.g.op(_OPS.RESHAPE, [self.get(op.operands[0]), self.g.constant(new_shape)], shape,
                                    dtype, options, "reshape")}
        if short == "transpose":
            perm = np.array(attrs.perm, np.int32)
            return {NCHW: self.g.op(_OPS.TRANSPOSE, [self.get(op.operands[0]), self.g.constant(perm)], shape, dtype,
                                    name="transpose")}
        if short in ("softmax", "log_softmax"):
            rank = op.operands[0].type.rank
            if attrs.axis % rank != rank - 1:
                raise ExportError(f"'{op.name}' op over axis {attrs.axis} of a rank-{rank} tensor: TFLite's "
                                  f"{short.upper()} takes the last axis only", op.location)
            code, options = ((_OPS.SOFTMAX, _options("SoftmaxOptions", Beta=1.0)) if short == "softmax"
                             else (_OPS.LOG_SOFTMAX, None))
            return {NCHW: self.g.op(code, [self.get(op.operands[0])], shape, dtype, options, short)}
        if short == "gelu":
            layout = self.preferred_layout(op.operands[0])
            options = _options("GeluOptions", Approximate=attrs.approximate == "tanh")
            return {layout: self.g.op(_OPS.GELU, [self.get(op.operands[0], layout)], _in_layout(shape, layout)
                                      if len(shape) == 4 else shape, dtype, options, "gelu")}
        if short == "reduce_mean":
            return {NCHW: self._mean(op, attrs, shape, dtype)}
        if short == "concat":
            ins = [self.get(v) for v in op.operands]
            axis = attrs.axis % result.type.rank
            return {NCHW: self.g.op(_OPS.CONCATENATION, ins, shape, dtype,
                                    _options("ConcatenationOptions", Axis=axis), "concat")}
        raise ExportError(f"'{op.name}' op has no TFLite form in lezero's TFLite exporter (it writes "
                          f"{', '.join(SUPPORTED)})", op.location)

    def _mean(self, op, attrs, shape, dtype) -> int:
        """MEAN; of an NHWC image reduced over its spatial axes (global average pooling) on the NHWC
        form, whose remaining axes are in NCHW's order, so no transpose back is needed."""
        x = op.operands[0]
        rank = x.type.rank
        axes = sorted(a % rank for a in (attrs.axes if attrs.axes else range(rank)))
        options = _options("ReducerOptions", KeepDims=bool(attrs.keepdims))
        kept_in_nhwc = [a for a in TO_NHWC if a not in axes] if rank == 4 else None
        if rank == 4 and not attrs.keepdims and self.preferred_layout(x) == NHWC and kept_in_nhwc == sorted(
                kept_in_nhwc):
            nhwc_axes = np.array(sorted(TO_NHWC.index(a) for a in axes), np.int32)
            return self.g.op(_OPS.MEAN, [self.get(x, NHWC), self.g.constant(nhwc_axes)], shape, dtype, options,
                             "mean")
        return self.g.op(_OPS.MEAN, [self.get(x), self.g.constant(np.array(axes, np.int32))], shape, dtype, options,
                         "mean")

    def _elementwise(self, op, short, shape, dtype) -> dict[str, int]:
        if short == "select":
            return self._select(op, shape, dtype)
        layout = self._elementwise_layout(op.operands, len(shape))
        ins = [self._operand_in(v, layout, len(shape)) for v in op.operands]
        code = _UNARY.get(short) if len(ins) == 1 else _BINARY.get(short)
        if code is None:
            raise ExportError(f"'{op.name}' op with {len(ins)} operands has no TFLite form", op.location)
        return {layout: self.g.op(code, ins, _in_layout(shape, layout) if len(shape) == 4 else shape, dtype,
                                  name=short)}

    def _elementwise_layout(self, operands, rank: int) -> str:
        """NHWC when an operand has that form and the op can follow it: a rank-4 result whose
        computed operands are all rank 4 (a constant of lower rank is padded and transposed; a
        computed one of lower rank would broadcast along other axes in NHWC)."""
        computed = [v for v in operands if self.constant_of(v) is None]
        if rank == 4 and all(v.type.rank == 4 for v in computed) \
                and any(self.preferred_layout(v) == NHWC for v in computed):
            return NHWC
        return NCHW

    def _operand_in(self, value, layout, rank) -> int:
        """``value`` as an operand of an elementwise op computing in ``layout``: a constant that
        broadcasts against the rank-4 result is transposed to NHWC (padded to rank 4 first)."""
        if layout == NCHW:
            return self.get(value)
        array = self.constant_of(value)
        if array is not None:
            if array.ndim == 0:
                return self.get(value)
            padded = array.reshape((1,) * (rank - array.ndim) + array.shape)
            return self.g.constant(np.transpose(padded, TO_NHWC))
        return self.get(value, NHWC)

    def _select(self, op, shape, dtype) -> dict[str, int]:
        """``select(cmp(x, c, lt|le), c, x)`` is max(x, c) and with gt|ge min(x, c) (how lezero writes
        clamp, relu6, hardtanh); max(x, 0) is RELU, min(max(x, 0), 6) RELU6."""
        condition, when_true, when_false = op.operands
        cmp = _defining_op(condition)
        if not (cmp is not None and cmp.name == "lz.cmp" and cmp.operands[0] is when_false
                and cmp.operands[1] is when_true):
            raise ExportError(f"'{op.name}' op that is not a clamp (select(x < c, c, x)) has no TFLite form in "
                              "lezero's TFLite exporter", op.location)
        predicate = cmp.definition.attrs(cmp).predicate
        if predicate not in ("lt", "le", "gt", "ge"):
            raise ExportError(f"'{op.name}' op on a '{predicate}' comparison has no TFLite form", op.location)
        bound = self.constant_of(when_true)
        x = when_false
        inner = _defining_op(x)
        lower = predicate in ("lt", "le")
        if bound is not None and bound.ndim == 0:
            if lower and float(bound) == 0.0:
                layout = self.preferred_layout(x)
                return {layout: self.g.op(_OPS.RELU, [self.get(x, layout)], _in_layout(shape, layout), dtype,
                                          name="relu")}
            if not lower and float(bound) == 6.0 and inner is not None and inner.name == "lz.select" \
                    and self._is_relu(inner):
                source = inner.operands[2]
                layout = self.preferred_layout(source)
                return {layout: self.g.op(_OPS.RELU6, [self.get(source, layout)], _in_layout(shape, layout), dtype,
                                          name="relu6")}
        layout = self._elementwise_layout((x, when_true), len(shape))
        ins = [self._operand_in(x, layout, len(shape)), self._operand_in(when_true, layout, len(shape))]
        return {layout: self.g.op(_OPS.MAXIMUM if lower else _OPS.MINIMUM, ins,
                                  _in_layout(shape, layout) if len(shape) == 4 else shape, dtype, name="clamp")}

    def _is_relu(self, select) -> bool:
        cmp = _defining_op(select.operands[0])
        bound = self.constant_of(select.operands[1])
        return (cmp is not None and cmp.name == "lz.cmp" and cmp.definition.attrs(cmp).predicate in ("lt", "le")
                and cmp.operands[0] is select.operands[2] and cmp.operands[1] is select.operands[1]
                and bound is not None and bound.ndim == 0 and float(bound) == 0.0)

    def _batch_norm(self, op, shape) -> dict[str, int]:
        """Inference batch norm as a MUL and an ADD by per-channel constants (folded at export)."""
        x, weight, bias, mean, var = op.operands
        arrays = [self.constant_of(v) for v in (weight, bias, mean, var)]
        if any(a is None for a in arrays) or op.operands[0].type.rank != 4:
            raise ExportError(f"'{op.name}' op with computed statistics or not on NCHW images has no TFLite form",
                              op.location)
        w, b, m, v = arrays
        scale = (w / np.sqrt(v + op.definition.attrs(op).epsilon)).astype(np.float32)
        shift = (b - m * scale).astype(np.float32)
        layout = self.preferred_layout(x)
        per_channel = (lambda a: a.reshape(-1)) if layout == NHWC else (lambda a: a.reshape(1, -1, 1, 1))
        scaled = self.g.op(_OPS.MUL, [self.get(x, layout), self.g.constant(per_channel(scale))],
                           _in_layout(shape, layout), name="bn_scale")
        return {layout: self.g.op(_OPS.ADD, [scaled, self.g.constant(per_channel(shift))], _in_layout(shape, layout),
                                  name="bn_shift")}

    def _padded_nhwc(self, x: int, value, pads) -> int:
        """The NHWC tensor ``x`` (of the image ``value``) padded with zeros: PAD (which pads an int8
        tensor with its zero point, the quantized 0)."""
        top, left, bottom, right = pads
        if not any(pads):
            return x
        n, h, w, c = _in_layout(_static_shape(value.type), NHWC)
        paddings = np.array([[0, 0], [top, bottom], [left, right], [0, 0]], np.int32)
        t = self.g.tensors[x]
        return self.g.op(_OPS.PAD, [x, self.g.constant(paddings)], (n, h + top + bottom, w + left + right, c),
                         t.dtype, name="pad", quantization=t.quantization)

    def _biased_conv_parts(self, op):
        """(conv op, bias (C,)) of ``conv2d(x, w) + constant (1, C, 1, 1)`` when nothing else reads the
        convolution (lz.nn.Conv2d's bias), else None: the bias becomes the TFLite op's."""
        for product, b in (op.operands, op.operands[::-1]):
            conv, bias = _defining_op(product), self.constant_of(b)
            if conv is not None and conv.name == "lz.conv2d" and self.users.get(id(product)) == 1 \
                    and bias is not None and bias.shape == (1, product.type.shape[1], 1, 1):
                return conv, bias.reshape(-1).astype(np.float32)
        return None

    def _conv2d(self, op, attrs, shape, bias=None, integer=None) -> int:
        """CONV_2D or DEPTHWISE_CONV_2D of an ``lz.conv2d`` (float), or of an ``lz.conv_integer``
        with ``integer`` = (combined scale sx * sw per output channel, relu, int8 output params):
        int8 input, per-channel int8 filter (quantized dimension 0 for CONV_2D's OHWI, 3 for
        DEPTHWISE's 1HWO), int32 bias of scale sx * sw, fused relu, int8 output (TFLite's
        full-integer conv, as its converter writes it); with no output params (lezero's result is
        float) the int8 input and filter are DEQUANTIZEd and the conv computes in float32."""
        weight = self.constant_of(op.operands[1])
        if weight is None:
            raise ExportError(f"'{op.name}' op with a computed (not constant) filter has no TFLite form",
                              op.location)
        out_channels, in_per_group = weight.shape[:2]
        in_channels = op.operands[0].type.shape[1]
        (sh, sw), (dh, dw) = attrs.strides, attrs.dilations
        dtype, params, activation = np.float32, None, _NO_ACTIVATION
        padding = _SAME if _is_same_padding(op.operands[0].type.shape[2:], weight.shape[2:], attrs) else _VALID
        pads = (0, 0, 0, 0) if padding == _SAME else attrs.pads
        if integer is None:
            x = self._padded_nhwc(self.get(op.operands[0], NHWC), op.operands[0], pads)
            bias = self.g.constant(np.zeros(out_channels, np.float32) if bias is None else bias, "bias")

            def filter_of(array, dimension):
                return self.g.constant(array, "filter")
        else:
            combined, relu, params = integer
            x, input_scale, _, weight = self._integer_operands(op)
            x = self._padded_nhwc(x, op.operands[0], pads)
            activation = _RELU if relu else _NO_ACTIVATION
            if params is None:  # a float result: DEQUANTIZE in, float conv
                x = self._dequantized(x)
                bias = self.g.constant(np.zeros(out_channels, np.float32) if bias is None else bias, "bias")
            else:
                dtype, bias = np.int8, self._int32_bias(bias, combined)

            def filter_of(array, dimension):
                filt = self._int8_weight(array, combined / np.float32(input_scale), dimension)
                return filt if params is not None else self._dequantized(filt)
        if attrs.groups == 1:
            filt = filter_of(np.transpose(weight, (0, 2, 3, 1)), 0)  # OIHW -> OHWI
            options = _options("Conv2DOptions", Padding=padding, StrideH=sh, StrideW=sw, DilationHFactor=dh,
                               DilationWFactor=dw, FusedActivationFunction=activation)
            return self.g.op(_OPS.CONV_2D, [x, filt, bias], shape, dtype, options, "conv", params)
        if attrs.groups == in_channels and in_per_group == 1:
            filt = filter_of(np.transpose(weight, (1, 2, 3, 0)), 3)  # (C*M, 1, H, W) -> (1, H, W, C*M)
            options = _options("DepthwiseConv2DOptions", Padding=padding, StrideH=sh, StrideW=sw, DilationHFactor=dh,
                               DilationWFactor=dw, DepthMultiplier=out_channels // in_channels,
                               FusedActivationFunction=activation)
            return self.g.op(_OPS.DEPTHWISE_CONV_2D, [x, filt, bias], shape, dtype, options, "depthwise", params)
        raise ExportError(f"'{op.name}' op with {attrs.groups} groups of {in_per_group} channels (neither 1 group nor "
                          "depthwise) has no TFLite form", op.location)

    def _pool(self, op, attrs, shape, code, x=None, quantization=None) -> int:
        """MAX_POOL_2D / AVERAGE_POOL_2D of the NHWC input (``x``: an int8 one, of ``quantization``,
        which the output keeps)."""
        if attrs.ceil_mode or any(attrs.pads) or tuple(getattr(attrs, "dilations", (1, 1))) != (1, 1):
            raise ExportError(f"'{op.name}' op with padding, ceil_mode or dilation has no TFLite form (TFLite pools "
                              "have VALID or SAME padding only)", op.location)
        (kh, kw), (sh, sw) = attrs.kernel, attrs.strides
        x = self.get(op.operands[0], NHWC) if x is None else x
        return self.g.op(code, [x], shape, np.float32 if quantization is None else np.int8,
                         _options("Pool2DOptions", Padding=_VALID, StrideH=sh, StrideW=sw, FilterHeight=kh,
                                  FilterWidth=kw), "pool", quantization)

    def _max_pool2d(self, op, attrs, shape) -> int:
        return self._pool(op, attrs, shape, _OPS.MAX_POOL_2D)

    def _avg_pool2d(self, op, attrs, shape) -> int:
        return self._pool(op, attrs, shape, _OPS.AVERAGE_POOL_2D)

    def _fully_connected_parts(self, op):
        """(x, weight (K, N), per-channel int8 scale or None, bias or None) of ``matmul(x, constant)``
        or of quantize_dynamic's pattern (``_hybrid_parts``), with a constant (N,) bias added to it
        (when nothing else reads the product); None for anything else."""
        if op.name == "lz.add":
            for product, b in (op.operands, op.operands[::-1]):
                bias, inner = self.constant_of(b), _defining_op(product)
                if inner is not None and inner.name in ("lz.matmul", "lz.mul") and self.users.get(id(product)) == 1 \
                        and bias is not None and bias.ndim == 1:
                    parts = self._fully_connected_parts(inner)
                    if parts and parts[1].shape[1] == bias.shape[0]:
                        return parts[:3] + (bias,)
            return None
        if op.name == "lz.mul":
            return self._hybrid_parts(op)
        x, w = op.operands
        weight = self.constant_of(w)
        if weight is None or weight.ndim != 2 or x.type.rank != 2 or weight.dtype != np.float32:
            return None
        return x, weight, None, None

    def _fully_connected(self, op, shape, parts) -> int:
        """FULLY_CONNECTED: weight (N, K); an int8 one (TFLite's dynamic-range kernel) carries its
        per-output-channel scales (quantized dimension 0) and has the float input quantized per
        row, asymmetrically, by the kernel."""
        x, weight, scale, bias = parts
        if scale is None:
            w = self.g.constant(np.ascontiguousarray(weight.T), "weight")
        else:
            quantization = (np.asarray(scale, np.float32), np.zeros(weight.shape[1], np.int64), 0)
            w = self.g.constant(np.ascontiguousarray(weight.T), "weight_int8", quantization)
        ins = [self.get(x), w, self.g.constant(bias.astype(np.float32), "bias") if bias is not None else -1]
        options = _options("FullyConnectedOptions", AsymmetricQuantizeInputs=scale is not None)
        return self.g.op(_OPS.FULLY_CONNECTED, ins, shape, options=options, name="fc")

    def _hybrid_parts(self, op):
        """(float input, int8 weight (K, N), per-channel scale, None) of quantize_dynamic's
        ``cast(matmul_integer(dynamic_quantize(x)#0, w, dq#2, zero)) * (dq#1 * scale)``, else None."""
        for product, scales in (op.operands, op.operands[::-1]):
            cast, scale_mul = _defining_op(product), _defining_op(scales)
            if cast is None or cast.name != "lz.cast" or scale_mul is None or scale_mul.name != "lz.mul":
                continue
            mm = _defining_op(cast.operands[0])
            if mm is None or mm.name != "lz.matmul_integer":
                continue
            quantized, weight, _, weight_zero = mm.operands
            dq = _defining_op(quantized)
            if dq is None or dq.name != "lz.dynamic_quantize" or quantized is not dq.results[0]:
                continue
            w, zero = self.constant_of(weight), self.constant_of(weight_zero)
            for s, scale in (scale_mul.operands, scale_mul.operands[::-1]):
                channel_scale = self.constant_of(scale)
                if s is dq.results[1] and channel_scale is not None and w is not None and w.dtype == np.int8:
                    if zero is not None and np.any(zero != 0):
                        raise ExportError(f"'{mm.name}' op with nonzero weight zero points: TFLite's int8 weights "
                                          "are symmetric (quantize with scheme='symmetric')", mm.location)
                    return dq.operands[0], w, np.broadcast_to(channel_scale, (w.shape[1],)), None
        return None

    def outputs(self) -> list[int]:
        return [self.get(v) for v in self.func.entry_block.terminator.operands]


SUPPORTED = ("FULLY_CONNECTED (matmul by a constant, + bias; int8 dynamic-range from quantize_dynamic)",
             "int8 CONV_2D, DEPTHWISE_CONV_2D, FULLY_CONNECTED (static quantization), QUANTIZE, DEQUANTIZE",
             "ADD", "SUB", "MUL", "DIV", "MAXIMUM/MINIMUM (clamps)", "RELU", "RELU6", "TANH", "LOGISTIC", "EXP",
             "RESHAPE", "TRANSPOSE", "SOFTMAX, LOG_SOFTMAX (last axis)", "GELU", "CONV_2D", "DEPTHWISE_CONV_2D",
             "MAX_POOL_2D", "AVERAGE_POOL_2D", "MEAN", "CONCATENATION", "batch norm (as MUL, ADD)")


# --- builtin options ----------------------------------------------------------------------------
def _options(table: str, **fields):
    """(BuiltinOptions type, writer) of the options table ``table`` with ``fields`` (the schema's
    field names in the generated code's CamelCase: ``StrideH=2``)."""
    return getattr(_OPTIONS, table), lambda b: _table(b, _schema(table), **fields)


# --- serialization ------------------------------------------------------------------------------
def _table(b, module, **fields) -> int:
    """Write one table of the schema module ``module``: each field through its generated
    ``Add<Field>``; a list or array of ints becomes an int32 vector first (``Start<Field>Vector``),
    an ``_Offsets`` a vector of tables; None leaves the field at its default."""
    values = {}
    for key, v in fields.items():
        if isinstance(v, _Offsets):
            getattr(module, f"Start{key}Vector")(b, len(v))
            for offset in reversed(v):
                b.PrependUOffsetTRelative(offset)
            v = b.EndVector()
        elif isinstance(v, (list, tuple, np.ndarray)):
            getattr(module, f"Start{key}Vector")(b, len(v))
            for item in reversed(v):
                b.PrependInt32(int(item))
            v = b.EndVector()
        values[key] = v
    module.Start(b)
    for key, v in values.items():
        if v is not None:
            getattr(module, "Add" + key)(b, v)
    return module.End(b)


class _Offsets(list):
    """Offsets of tables already written, for a vector-of-tables field."""


def _serialize(g: _Subgraph, inputs: list[int], outputs: list[int], name: str) -> bytes:
    b = flatbuffers.Builder(1024)
    codes = sorted({code for code, *_ in g.operators})
    code_index = {code: i for i, code in enumerate(codes)}
    buffers = [None]  # buffer 0 is the empty one by convention
    tensors = _Offsets()
    for t in g.tensors:
        buffer_index = 0
        if t.data is not None:
            buffers.append(b.CreateNumpyVector(np.frombuffer(t.data.tobytes(), np.uint8)))
            buffer_index = len(buffers) - 1
        quantization = None
        if t.quantization is not None:
            scale, zero, dim = t.quantization
            quantization = _table(b, QuantizationParameters, Scale=b.CreateNumpyVector(scale.astype(np.float32)),
                                  ZeroPoint=b.CreateNumpyVector(zero.astype(np.int64)), QuantizedDimension=dim)
        tensors.append(_table(b, Tensor, Shape=t.shape, ShapeSignature=t.signature, Type=_TYPES[t.dtype],
                              Buffer=buffer_index, Name=b.CreateString(t.name), Quantization=quantization))
    operators = _Offsets()
    for code, ins, outs, options_type, write_options in g.operators:
        options = write_options(b) if write_options is not None else None
        operators.append(_table(b, Operator, OpcodeIndex=code_index[code], Inputs=ins, Outputs=outs,
                                BuiltinOptionsType=options_type if options is not None else None,
                                BuiltinOptions=options))
    subgraph = _table(b, SubGraph, Tensors=tensors, Inputs=inputs, Outputs=outputs, Operators=operators,
                      Name=b.CreateString(name))
    # DeprecatedBuiltinCode is an int8 field: 127 there means "read BuiltinCode"
    opcodes = _Offsets(_table(b, OperatorCode, DeprecatedBuiltinCode=min(code, 127), BuiltinCode=code, Version=1)
                       for code in codes)
    buffer_tables = _Offsets(_table(b, Buffer, Data=data) for data in buffers)
    model = _table(b, Model, Version=SCHEMA_VERSION, OperatorCodes=opcodes, Subgraphs=_Offsets([subgraph]),
                   Description=b.CreateString("lezero"), Buffers=buffer_tables)
    b.Finish(model, file_identifier=b"TFL3")
    return bytes(b.Output())


def to_tflite(model, *, entry: str | None = None) -> bytes:
    """The TFLite flatbuffer of a ``lz.jit.trace`` result or of one function of an IR module."""
    func, n_inputs, weights = exported_function(model, entry)
    exporter = _Exporter(func, n_inputs, weights)
    outputs = exporter.outputs()
    return _serialize(exporter.g, exporter.inputs, outputs, func.sym_name)


def export(model, path, **options) -> bytes:
    """Write ``to_tflite(model)`` to ``path`` atomically; returns the flatbuffer."""
    data = to_tflite(model, **options)
    atomic_write(path, lambda f: f.write(data))
    return data
