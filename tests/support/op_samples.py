"""Sample calls of every lz op, for tests that must cover every op on a compiled path (the CPU
runtime now, the GPU path later). ``SAMPLES[op_name]`` is a list of ``Sample``s; ``arrays(rng)``
makes its inputs. ``test_every_op_has_a_sample`` keeps this table complete as ops are added."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from lezero.ir import Builder, FuncOp, FunctionType, ModuleOp
from lezero.ir.types import tensor_type_of

# Ops that never appear in user functions (structure), with the reason.
NOT_SAMPLED = {"lz.kernel": "made by the fuse pass; covered by every compiled sample",
               "lz.yield": "the terminator of lz.kernel, lz.for, lz.while and lz.if",
               "lz.for": "loops: tests/ir/test_control_flow.py, tests/runtime (the compiled loops)",
               "lz.while": "loops: tests/ir/test_control_flow.py, tests/runtime (the compiled loops)",
               "lz.if": "a condition: tests/ir/test_control_flow.py, tests/runtime (the compiled branches)",
               "lz.constant": "covered by samples whose functions fold or embed constants"}
# issue 14: collectives need a process group (identity without one) and run on the CPU as host steps
NOT_SAMPLED.update({op: "a collective: tests/passes/test_bucket_all_reduce.py (a stand-in communicator), "
                        "tests/distributed (2 and 4 ranks)"
                    for op in ("lz.all_reduce", "lz.all_reduce_start", "lz.all_reduce_wait")})


@dataclass
class Arg:
    shape: tuple
    dtype: str = "float32"
    kind: str = "normal"  # normal, positive, bool, bits, small-int, index:<bound>, shift, unit, small-float, above-one, halves

    def make(self, rng) -> np.ndarray:
        if self.kind == "bool":
            return rng.random(self.shape) < 0.5
        if self.kind == "bits":  # any value of the type (a random generator's state)
            info = np.iinfo(self.dtype)
            return rng.integers(info.min, info.max, self.shape, dtype=self.dtype, endpoint=True)
        if self.kind.startswith("index:"):
            bound = int(self.kind.split(":")[1])
            return rng.integers(-bound, bound, self.shape).astype(self.dtype)
        if self.kind == "small-int":
            return rng.integers(-5, 6, self.shape).astype(self.dtype)
        if self.kind == "shift":  # shift amounts, some past the bit width
            return rng.integers(0, 8 * np.dtype(self.dtype).itemsize + 3, self.shape).astype(self.dtype)
        if self.kind == "unit":
            return rng.uniform(-0.95, 0.95, self.shape).astype(self.dtype)
        if self.kind == "small-float":
            return rng.uniform(-1.2, 1.2, self.shape).astype(self.dtype)
        if self.kind == "above-one":
            return (1 + np.abs(rng.standard_normal(self.shape)) * 3).astype(self.dtype)
        if self.kind == "halves":  # ties of round-half-to-even among ordinary values
            return (rng.integers(-8, 8, self.shape) / 2 + (rng.random(self.shape) < 0.5) * 0.3).astype(self.dtype)
        a = rng.standard_normal(self.shape)
        if self.kind == "positive":
            a = np.abs(a) + 0.5
        return a.astype(self.dtype)


@dataclass
class Sample:
    op: str
    args: list
    attrs: dict = field(default_factory=dict)

    def arrays(self, rng) -> list[np.ndarray]:
        return [a.make(rng) for a in self.args]

    def module(self, arrays) -> ModuleOp:
        func = FuncOp("f", FunctionType([tensor_type_of(a) for a in arrays], []))
        b = Builder.at_end(func.entry_block)
        op = b.create(self.op, func.arguments, self.attrs)
        b.create("func.return", op.results, result_types=[])
        func.update_function_type()
        return ModuleOp([func])

    @property
    def id(self) -> str:
        shapes = ",".join("x".join(map(str, a.shape)) or "scalar" for a in self.args)
        dtypes = ",".join(sorted({a.dtype for a in self.args}))
        attrs = ",".join(f"{k}={v}" for k, v in self.attrs.items())
        return f"{self.op}[{shapes}:{dtypes}{':' + attrs if attrs else ''}]"


def _unary(op, kinds=("float32", "float64"), positive=False, ints=False):
    kind = "positive" if positive else "normal"
    out = [Sample(op, [Arg((3, 5), dt, kind)]) for dt in kinds]
    out.append(Sample(op, [Arg((2, 1, 7), "float32", kind)]))
    if ints:
        out += [Sample(op, [Arg((4, 3), dt, "small-int")]) for dt in ("int32", "int64")]
    return out


def _binary(op, ints=True, positive=False):
    kind = "positive" if positive else "normal"
    out = [Sample(op, [Arg((3, 4), "float32", kind), Arg((4,), "float32", kind)]),
           Sample(op, [Arg((2, 1, 5), "float64", kind), Arg((3, 1), "float64", kind)]),
           Sample(op, [Arg((), "float32", kind), Arg((6,), "float32", kind)])]
    if ints:
        out += [Sample(op, [Arg((3, 4), "int32", "small-int"), Arg((3, 1), "int32", "small-int")]),
                Sample(op, [Arg((5,), "int64", "small-int"), Arg((5,), "int64", "small-int")])]
    return out


SAMPLES: dict[str, list[Sample]] = {}
for _op, _kw in {"neg": dict(ints=True), "abs": dict(ints=True), "exp": {}, "log": dict(positive=True),
                 "sqrt": dict(positive=True), "rsqrt": dict(positive=True), "tanh": {}, "sigmoid": {},
                 "relu": dict(ints=True), "erf": {}, "sin": {}, "cos": {}, "floor": {}, "ceil": {},
                 "sign": dict(ints=True), "reciprocal": dict(positive=True)}.items():
    SAMPLES["lz." + _op] = _unary("lz." + _op, **_kw)
# issue 5 (ONNX): inverse and hyperbolic trigonometry, rounding; arguments inside each domain
SAMPLES["lz.tan"] = [Sample("lz.tan", [Arg((3, 5), dt, "small-float")]) for dt in ("float32", "float64")]
for _op, _kind in (("atan", "normal"), ("asin", "unit"), ("acos", "unit"), ("sinh", "normal"), ("cosh", "normal"),
                   ("asinh", "normal"), ("acosh", "above-one"), ("atanh", "unit"), ("round", "halves")):
    SAMPLES["lz." + _op] = [Sample("lz." + _op, [Arg((3, 5), dt, _kind)]) for dt in ("float32", "float64")] + \
        [Sample("lz." + _op, [Arg((2, 1, 7), "float16", _kind)])]
SAMPLES["lz.not"] = [Sample("lz.not", [Arg((3, 4), "bool", "bool")]), Sample("lz.not", [Arg((5,), "int32", "small-int")])]
SAMPLES["lz.cast"] = [Sample("lz.cast", [Arg((3, 4), "float32")], {"to": to}) for to in ("f16", "f64", "i32", "i1", "bf16")] + \
    [Sample("lz.cast", [Arg((6,), "int64", "small-int")], {"to": "f32"}),
     Sample("lz.cast", [Arg((6,), "bool", "bool")], {"to": "f32"})]
SAMPLES["lz.gelu"] = [Sample("lz.gelu", [Arg((4, 9))]), Sample("lz.gelu", [Arg((4, 9))], {"approximate": "tanh"}),
                      Sample("lz.gelu", [Arg((3,), "float64")])]
for _op in ("add", "sub", "mul", "max", "min"):
    SAMPLES["lz." + _op] = _binary("lz." + _op)
SAMPLES["lz.div"] = _binary("lz.div", positive=True)
SAMPLES["lz.pow"] = _binary("lz.pow", ints=False, positive=True)
for _op in ("and", "or"):
    SAMPLES["lz." + _op] = [Sample("lz." + _op, [Arg((3, 4), "bool", "bool"), Arg((4,), "bool", "bool")]),
                            Sample("lz." + _op, [Arg((5,), "int32", "small-int"), Arg((5,), "int32", "small-int")])]
SAMPLES["lz.rem"] = _binary("lz.rem", positive=True) + \
    [Sample("lz.rem", [Arg((6,), "int32", "small-int"), Arg((6,), "int32", "small-int")]),
     Sample("lz.rem", [Arg((6,), "uint8", "small-int"), Arg((6,), "uint8", "small-int")])]
SAMPLES["lz.xor"] = [Sample("lz.xor", [Arg((3, 4), "bool", "bool"), Arg((4,), "bool", "bool")]),
                     Sample("lz.xor", [Arg((5,), "int32", "small-int"), Arg((5,), "int32", "small-int")]),
                     Sample("lz.xor", [Arg((5,), "uint16", "small-int"), Arg((1,), "uint16", "small-int")])]
for _op in ("shift_left", "shift_right"):
    SAMPLES["lz." + _op] = [Sample("lz." + _op, [Arg((3, 4), dt, "small-int"), Arg((4,), dt, "shift")])
                            for dt in ("uint8", "int32", "uint32", "int64", "uint64")]
SAMPLES["lz.bitcast"] = [Sample("lz.bitcast", [Arg((3, 4))], {"to": "i32"}),
                         Sample("lz.bitcast", [Arg((5,), "int64", "small-int")], {"to": "f64"}),
                         Sample("lz.bitcast", [Arg((4,), "float16")], {"to": "i16"}),
                         Sample("lz.bitcast", [Arg((6,), "bool", "bool")], {"to": "ui8"}),
                         Sample("lz.bitcast", [Arg((6,), "int8", "small-int")], {"to": "ui8"})]
SAMPLES["lz.cmp"] = [Sample("lz.cmp", [Arg((3, 4)), Arg((4,))], {"predicate": p}) for p in ("eq", "ne", "lt", "le", "gt", "ge")] + \
    [Sample("lz.cmp", [Arg((5,), "int64", "small-int"), Arg((5,), "int64", "small-int")], {"predicate": "le"})]
SAMPLES["lz.select"] = [Sample("lz.select", [Arg((3, 4), "bool", "bool"), Arg((3, 4)), Arg((4,))]),
                        Sample("lz.select", [Arg((2, 1), "bool", "bool"), Arg((1, 3), "int32", "small-int"),
                                             Arg((2, 3), "int32", "small-int")])]
SAMPLES["lz.attention"] = [Sample("lz.attention", [Arg((2, 5, 8)), Arg((2, 7, 8)), Arg((2, 7, 3))], {"scale": 0.35}),
                           Sample("lz.attention", [Arg((2, 3, 4, 16)), Arg((2, 3, 9, 16)), Arg((2, 3, 9, 16)),
                                                   Arg((2, 1, 1, 9))], {"scale": 0.25})]
SAMPLES["lz.matmul"] = [Sample("lz.matmul", [Arg((5, 7)), Arg((7, 3))]),
                        Sample("lz.matmul", [Arg((2, 1, 4, 6)), Arg((3, 6, 5))]),
                        Sample("lz.matmul", [Arg((6,)), Arg((6, 4))]),
                        Sample("lz.matmul", [Arg((4, 6), "float64"), Arg((6,), "float64")]),
                        Sample("lz.matmul", [Arg((33, 65)), Arg((65, 17))]),
                        Sample("lz.matmul", [Arg((3, 4), "int32", "small-int"), Arg((4, 2), "int32", "small-int")])]
SAMPLES["lz.conv2d"] = [Sample("lz.conv2d", [Arg((2, 3, 9, 9)), Arg((4, 3, 3, 3))]),
                        Sample("lz.conv2d", [Arg((1, 4, 10, 8)), Arg((6, 2, 3, 2))],
                               {"strides": [2, 1], "pads": [1, 0, 2, 1], "dilations": [1, 2], "groups": 2}),
                        Sample("lz.conv2d", [Arg((1, 3, 5, 5), "float64"), Arg((3, 1, 1, 1), "float64")], {"groups": 3})]
# issue 11: blocked activations [N, C/8, H, W, 8] (10 of 16 input channels, 12 of 16 output channels)
SAMPLES["lz.conv2d_blocked"] = [
    Sample("lz.conv2d_blocked", [Arg((1, 2, 6, 7, 8)), Arg((12, 10, 3, 3)), Arg((16,))], {"pads": [1, 1, 1, 1], "relu": True}),
    Sample("lz.conv2d_blocked", [Arg((2, 2, 6, 7, 8)), Arg((12, 10, 2, 2)), Arg((16,)), Arg((2, 2, 3, 4, 8))],
           {"strides": [2, 2], "pads": [1, 0, 0, 1]})]
SAMPLES["lz.max_pool2d_blocked"] = [
    Sample("lz.max_pool2d_blocked", [Arg((1, 2, 7, 9, 8))], {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}),
    Sample("lz.max_pool2d_blocked", [Arg((2, 1, 6, 6, 8))], {"kernel": [2, 2], "strides": [2, 2]})]
SAMPLES["lz.max_pool2d"] = [Sample("lz.max_pool2d", [Arg((2, 3, 8, 7))], {"kernel": [2, 2], "strides": [2, 2]}),
                            Sample("lz.max_pool2d", [Arg((1, 2, 7, 7))],
                                   {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": True})]
SAMPLES["lz.max_pool2d_grad"] = [
    Sample("lz.max_pool2d_grad", [Arg((2, 3, 8, 7)), Arg((2, 3, 4, 3))], {"kernel": [2, 2], "strides": [2, 2]}),
    Sample("lz.max_pool2d_grad", [Arg((1, 2, 7, 7)), Arg((1, 2, 4, 4))],
           {"kernel": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1], "ceil_mode": True}),
    Sample("lz.max_pool2d_grad", [Arg((1, 2, 9, 8), "float64"), Arg((1, 2, 7, 7), "float64")],
           {"kernel": [2, 2], "dilations": [2, 1]})]
SAMPLES["lz.avg_pool2d"] = [Sample("lz.avg_pool2d", [Arg((2, 3, 8, 8))], {"kernel": [2, 2], "strides": [2, 2]}),
                            Sample("lz.avg_pool2d", [Arg((1, 2, 7, 6))],
                                   {"kernel": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": True})]
for _op in ("reduce_sum", "reduce_max", "reduce_min", "reduce_mean", "reduce_prod"):
    SAMPLES["lz." + _op] = [Sample("lz." + _op, [Arg((3, 4, 5))], {"axes": [1]}),
                            Sample("lz." + _op, [Arg((3, 4, 5))], {"axes": [0, 2], "keepdims": True}),
                            Sample("lz." + _op, [Arg((6, 7), "float64")]),
                            Sample("lz." + _op, [Arg((2, 9))], {"axes": [-1]})]
    if _op != "reduce_mean":
        SAMPLES["lz." + _op].append(Sample("lz." + _op, [Arg((4, 3), "int32", "small-int")], {"axes": [0]}))
SAMPLES["lz.argmax"] = [Sample("lz.argmax", [Arg((3, 5, 4))], {"axis": 1}),
                        Sample("lz.argmax", [Arg((6, 5), "int32", "small-int")], {"axis": -1, "keepdims": True})]
SAMPLES["lz.cumulative"] = [
    Sample("lz.cumulative", [Arg((3, 5, 4))], {"combine": "add", "axis": 1}),
    Sample("lz.cumulative", [Arg((3, 5, 4))], {"combine": "add", "axis": -1, "exclusive": True, "reverse": True}),
    Sample("lz.cumulative", [Arg((6, 3), "float64")], {"combine": "mul", "axis": 0, "reverse": True}),
    Sample("lz.cumulative", [Arg((4, 7), "int32", "small-int")], {"combine": "max", "axis": 1, "exclusive": True}),
    Sample("lz.cumulative", [Arg((4, 7), "float16")], {"combine": "min", "axis": 1})]
SAMPLES["lz.topk"] = [Sample("lz.topk", [Arg((3, 9))], {"k": 4}),
                      Sample("lz.topk", [Arg((5, 6, 2), "int64", "small-int")], {"k": 3, "axis": 1, "largest": False}),
                      Sample("lz.topk", [Arg((7,), "float64")], {"k": 7, "largest": False})]
SAMPLES["lz.scatter_nd"] = [
    Sample("lz.scatter_nd", [Arg((5, 3)), Arg((4, 1), "int64", "index:5"), Arg((4, 3))], {"reduction": "add"}),
    Sample("lz.scatter_nd", [Arg((4, 6)), Arg((3, 2), "int32", "index:4"), Arg((3,))]),
    Sample("lz.scatter_nd", [Arg((2, 3, 4), "int32", "small-int"), Arg((2, 2), "int64", "index:2"),
                             Arg((2, 4), "int32", "small-int")], {"reduction": "max"})]
SAMPLES["lz.reshape"] = [Sample("lz.reshape", [Arg((2, 3, 4))], {"shape": [4, -1]}),
                         Sample("lz.reshape", [Arg((6,), "int64", "small-int")], {"shape": [3, 1, 2]})]
SAMPLES["lz.transpose"] = [Sample("lz.transpose", [Arg((2, 3, 4))], {"perm": [2, 0, 1]}),
                           Sample("lz.transpose", [Arg((5, 3), "float64")])]
SAMPLES["lz.broadcast_to"] = [Sample("lz.broadcast_to", [Arg((3, 1))], {"shape": [2, 3, 4]}),
                              Sample("lz.broadcast_to", [Arg((), "int32", "small-int")], {"shape": [5]})]
SAMPLES["lz.slice"] = [Sample("lz.slice", [Arg((5, 6))], {"starts": [1, 0], "ends": [4, 6], "steps": [1, 2]}),
                       Sample("lz.slice", [Arg((7,))], {"starts": [-1], "ends": [-8], "steps": [-2]})]
SAMPLES["lz.concat"] = [Sample("lz.concat", [Arg((2, 3)), Arg((2, 5)), Arg((2, 1))], {"axis": 1}),
                        Sample("lz.concat", [Arg((1, 4), "int32", "small-int"), Arg((3, 4), "int32", "small-int")], {"axis": 0})]
SAMPLES["lz.pad"] = [Sample("lz.pad", [Arg((3, 4))], {"pads": [1, 0, 2, 3], "value": -1.5}),
                     Sample("lz.pad", [Arg((5, 6))], {"pads": [-1, 1, 0, -2]})]
SAMPLES["lz.gather"] = [Sample("lz.gather", [Arg((5, 3)), Arg((4,), "int64", "index:5")]),
                        Sample("lz.gather", [Arg((2, 6)), Arg((2, 3), "int32", "index:6")], {"axis": 1})]
SAMPLES["lz.softmax"] = [Sample("lz.softmax", [Arg((4, 10))]), Sample("lz.softmax", [Arg((3, 5, 2))], {"axis": 1})]
SAMPLES["lz.log_softmax"] = [Sample("lz.log_softmax", [Arg((4, 10))]),
                             Sample("lz.log_softmax", [Arg((3, 6), "float64")], {"axis": 0})]
SAMPLES["lz.layer_norm"] = [Sample("lz.layer_norm", [Arg((4, 8)), Arg((8,)), Arg((8,))]),
                            Sample("lz.layer_norm", [Arg((2, 3, 4)), Arg((3, 4)), Arg((4,))], {"axis": 1})]
SAMPLES["lz.batch_norm"] = [Sample("lz.batch_norm", [Arg((2, 3, 4, 4)), Arg((3,)), Arg((3,)), Arg((3,)),
                                                     Arg((3,), kind="positive")], {"epsilon": 1e-3})]
SAMPLES["lz.random_uniform"] = [
    Sample("lz.random_uniform", [Arg((2,), "int64", "bits"), Arg((3, 7))]),
    Sample("lz.random_uniform", [Arg((2,), "int64", "bits"), Arg((9,), "int32", "small-int")], {"dtype": "ui32"}),
    Sample("lz.random_uniform", [Arg((2,), "int64", "bits"), Arg((2, 1, 5), "float64")], {"dtype": "f64"})]
SAMPLES["lz.transfer"] = [Sample("lz.transfer", [Arg((3, 4))], {"device": "cuda"}),
                         Sample("lz.transfer", [Arg((5,), "int32", "small-int")], {"device": "cpu"}),
                         Sample("lz.transfer", [Arg((2, 3), "bool", "bool")], {"device": "cuda"})]
# strided views (the eager engine reads non-contiguous views through it): a transpose's strides,
# a diagonal with an offset, overlapping windows (unfold) and a stride-0 dim (expand)
SAMPLES["lz.as_strided"] = [
    Sample("lz.as_strided", [Arg((3, 4))], {"shape": [4, 3], "strides": [1, 4]}),
    Sample("lz.as_strided", [Arg((4, 5), "float64")], {"shape": [3], "strides": [6], "offset": 1}),
    Sample("lz.as_strided", [Arg((10,))], {"shape": [4, 3], "strides": [2, 1], "offset": 1}),
    Sample("lz.as_strided", [Arg((2, 3), "int32", "small-int")], {"shape": [2, 4, 3], "strides": [3, 0, 1]})]
# issue 19's tensor functions: cumprod's gradient rule (exclusive and reverse too), and a gather past
# ONE_HOT_LIMIT, whose gradient is a scatter_nd adding rows
SAMPLES["lz.cumulative"] += [
    Sample("lz.cumulative", [Arg((3, 5), "float64")], {"combine": "mul", "axis": 1}),
    Sample("lz.cumulative", [Arg((4, 2, 3), "float64")], {"combine": "mul", "axis": 0, "exclusive": True})]
SAMPLES["lz.gather"] += [Sample("lz.gather", [Arg((2, 2048)), Arg((600,), "int64", "index:2048")], {"axis": 1})]

# issue 12's quantization ops: per tensor and per channel, i8 and ui8 (zero points of any value)
SAMPLES["lz.quantize"] = [
    Sample("lz.quantize", [Arg((3, 4)), Arg((), kind="positive"), Arg((), "int8", "bits")]),
    Sample("lz.quantize", [Arg((2, 3, 4)), Arg((3,), kind="positive"), Arg((3,), "uint8", "bits")], {"axis": 1})]
SAMPLES["lz.dequantize"] = [
    Sample("lz.dequantize", [Arg((3, 4), "uint8", "bits"), Arg((), kind="positive"), Arg((), "uint8", "bits")]),
    Sample("lz.dequantize", [Arg((4, 5), "int8", "bits"), Arg((5,), kind="positive"), Arg((5,), "int8", "bits")],
           {"axis": -1})]
SAMPLES["lz.dynamic_quantize"] = [Sample("lz.dynamic_quantize", [Arg((5, 6))])]
SAMPLES["lz.matmul_integer"] = [
    Sample("lz.matmul_integer", [Arg((3, 7), "uint8", "bits"), Arg((7, 5), "int8", "bits"), Arg((), "uint8", "bits"),
                                 Arg((5,), "int8", "bits")]),
    Sample("lz.matmul_integer", [Arg((2, 3, 4), "int8", "bits"), Arg((4, 2), "uint8", "bits"),
                                 Arg((), "int8", "bits"), Arg((), "uint8", "bits")])]
# issue 12: padded, strided; grouped, dilated (ONNX Runtime's ConvInteger takes per-tensor zero points only:
# per-channel ones are in tests/ir/test_dialect_quantization.py)
SAMPLES["lz.conv_integer"] = [
    Sample("lz.conv_integer", [Arg((2, 3, 6, 5), "uint8", "bits"), Arg((4, 3, 3, 3), "int8", "bits"),
                               Arg((), "uint8", "bits"), Arg((), "int8", "bits")], {"strides": [2, 1], "pads": [1, 0, 1, 2]}),
    Sample("lz.conv_integer", [Arg((1, 4, 5, 5), "uint8", "bits"), Arg((6, 2, 2, 2), "uint8", "bits"),
                               Arg((), "uint8", "bits"), Arg((), "uint8", "bits")], {"groups": 2, "dilations": [2, 1]})]

ALL_SAMPLES = [s for samples in SAMPLES.values() for s in samples]
