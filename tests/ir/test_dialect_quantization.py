"""lz.quantize, lz.dequantize, lz.dynamic_quantize, lz.matmul_integer and lz.conv_integer: shape
rules and verifier errors; references against ONNX's (onnx.reference) and an integer matmul or
convolution; compiled for
every CPU of the cross-target matrix and held to the reference EXACTLY (integer results, including
rounding ties and saturation at both ends)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper
from onnx.reference import ReferenceEvaluator
from support.ir_building import build

import lezero
from lezero.ir import interpret
from lezero.ir.opdef import OpError
from lezero.ir.types import TensorType, tensor

NP = {"i8": np.int8, "ui8": np.uint8, "i32": np.int32, "f32": np.float32}


def _module(op, arrays, **attrs):
    types = [tensor(a.shape, {np.dtype(v): k for k, v in NP.items()}[a.dtype]) for a in arrays]
    return build(types, lambda b, *args: b.create(op, list(args), attrs).results)


def _onnx(op_type, arrays, **attrs):
    names = [f"in{i}" for i in range(len(arrays))]
    node = helper.make_node(op_type, names, ["out0", "out1", "out2"][:3 if op_type == "DynamicQuantizeLinear" else 1],
                            **attrs)
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
              for n, a in zip(names, arrays)]
    outputs = [helper.make_tensor_value_info(o, onnx.TensorProto.UNDEFINED, None) for o in node.output]
    model = helper.make_model(helper.make_graph([node], "g", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", 21)])
    return ReferenceEvaluator(model).run(None, dict(zip(names, arrays)))


def _edges(rng, shape, scale):
    """Floats that hit rounding ties (k + 0.5 after dividing by the scale), saturate past both
    ends of every 8-bit range, and ordinary values."""
    ties = (rng.integers(-300, 300, shape) + 0.5) * scale
    far = rng.choice([-1e6, 1e6, -300.0, 300.0], shape) * scale
    ordinary = rng.standard_normal(shape) * 40 * scale
    pick = rng.integers(0, 3, shape)
    return np.choose(pick, [ties, far, ordinary]).astype(np.float32)


CASES = {}
for _dt, _zero in (("i8", -3), ("ui8", 128), ("i8", 0)):
    CASES[f"quantize-tensor-{_dt}-z{_zero}"] = ("tensor", _dt, _zero)
    CASES[f"quantize-channel-{_dt}-z{_zero}"] = ("channel", _dt, _zero)


def _quantize_inputs(kind, dt, zero, rng):
    if kind == "tensor":
        scale = np.asarray(0.05, np.float32)
        zeros = np.asarray(zero, NP[dt])
    else:
        scale = np.asarray([0.05, 0.5, 0.02, 1.0], np.float32)
        zeros = np.full(4, zero, NP[dt])
    x = _edges(rng, (3, 4, 5), 0.05) * (1 if kind == "tensor" else scale.reshape(1, 4, 1) / 0.05)
    return [x.astype(np.float32), scale, zeros]


@pytest.mark.cross_target(cases=CASES, group=lambda case: case[0])
def test_quantize_and_dequantize_are_exact_on_every_cpu(cpu, case):
    kind, dt, zero = case
    rng = np.random.default_rng(7)
    arrays = _quantize_inputs(kind, dt, zero, rng)
    want = _onnx("QuantizeLinear", arrays, axis=1)[0]
    module = _module("lz.quantize", arrays, axis=1)
    np.testing.assert_array_equal(interpret(module, "f", *arrays), want)
    got = lezero.compile(module, "f", cpu=cpu)(*arrays)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want, err_msg=f"lz.quantize compiled for {cpu}")
    info = np.iinfo(want.dtype)
    assert want.min() == info.min and want.max() == info.max  # the cases saturate at both ends
    back = [want, arrays[1], arrays[2]]
    want_back = _onnx("DequantizeLinear", back, axis=1)[0]
    module = _module("lz.dequantize", back, axis=1)
    np.testing.assert_array_equal(interpret(module, "f", *back), want_back)
    np.testing.assert_array_equal(lezero.compile(module, "f", cpu=cpu)(*back), want_back)


def test_quantize_saturates_at_both_ends_and_rounds_ties_to_even():
    x = np.asarray([-1e9, -129.5, -128.5, -0.5, 0.5, 1.5, 2.5, 126.5, 127.5, 1e9], np.float32)
    module = _module("lz.quantize", [x, np.asarray(1, np.float32), np.asarray(0, np.int8)])
    got = lezero.compile(module, "f")(x, np.asarray(1, np.float32), np.asarray(0, np.int8))
    np.testing.assert_array_equal(got, [-128, -128, -128, 0, 0, 2, 2, 126, 127, 127])
    got = lezero.compile(module, "f")(x, np.asarray(1, np.float32), np.asarray(0, np.int8))
    assert got.dtype == np.int8


@pytest.mark.cross_target
def test_dynamic_quantize_matches_onnx_on_every_cpu(cpu):
    rng = np.random.default_rng(3)
    for x in (rng.standard_normal((5, 7)).astype(np.float32) * 3, np.abs(rng.standard_normal(9)).astype(np.float32),
              -np.abs(rng.standard_normal((2, 3))).astype(np.float32), np.zeros((4,), np.float32)):
        want = _onnx("DynamicQuantizeLinear", [x])
        module = _module("lz.dynamic_quantize", [x])
        for got in (interpret(module, "f", x), lezero.compile(module, "f", cpu=cpu)(x)):
            for g, w in zip(got, want):
                assert np.asarray(g).dtype == w.dtype
                np.testing.assert_array_equal(g, w, err_msg=f"lz.dynamic_quantize of {x.shape} for {cpu}")


MATMUL_CASES = {
    "u8s8": ((6, 33), (33, 17), "ui8", "i8", 128, 0),
    "u8u8-zeros": ((5, 16), (16, 9), "ui8", "ui8", 255, 3),
    "s8s8-batched": ((2, 3, 20), (20, 7), "i8", "i8", -128, 127),
    "u8s8-per-column": ((4, 64), (64, 19), "ui8", "i8", 0, None),
    "s8u8-k1": ((7, 1), (1, 65), "i8", "ui8", 5, 200),
}


def _extremes(rng, shape, dt):
    """Mostly the ends of the range (the largest products), some random values."""
    info = np.iinfo(NP[dt])
    v = rng.integers(info.min, info.max, shape, endpoint=True)
    ends = rng.choice([info.min, info.max], shape)
    return np.where(rng.random(shape) < 0.5, ends, v).astype(NP[dt])


@pytest.mark.cross_target(cases=MATMUL_CASES, group=lambda case: "matmul_integer")
def test_matmul_integer_is_exact_on_every_cpu(cpu, case):
    a_shape, b_shape, a_dt, b_dt, a_zero, b_zero = case
    rng = np.random.default_rng(sum(a_shape) + sum(b_shape))
    a, w = _extremes(rng, a_shape, a_dt), _extremes(rng, b_shape, b_dt)
    b_zeros = _extremes(rng, (b_shape[-1],), b_dt) if b_zero is None else np.asarray(b_zero, NP[b_dt])
    arrays = [a, w, np.asarray(a_zero, NP[a_dt]), b_zeros]
    want = (a.astype(np.int64) - a_zero) @ (w.astype(np.int64) - b_zeros.astype(np.int64))
    assert np.abs(want).max() < 2 ** 31
    if len(a_shape) == 2:
        np.testing.assert_array_equal(_onnx("MatMulInteger", arrays)[0], want)
    module = _module("lz.matmul_integer", arrays)
    np.testing.assert_array_equal(interpret(module, "f", *arrays), want)
    got = lezero.compile(module, "f", cpu=cpu)(*arrays)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want, err_msg=f"lz.matmul_integer {case} compiled for {cpu}")


# N x C x H x W, O x C/groups x KH x KW, types, zero points (None: per output channel), window
CONV_CASES = {
    "u8s8-odd-pad-stride": ((2, 3, 7, 9), (5, 3, 3, 3), "ui8", "i8", 255, -128, {"strides": [2, 1], "pads": [1, 2, 0, 1]}),
    "s8s8-dilated-per-channel": ((1, 4, 8, 7), (6, 4, 3, 2), "i8", "i8", -128, None, {"dilations": [2, 3], "pads": [2, 1, 2, 1]}),
    "u8s8-groups-per-channel": ((2, 6, 5, 6), (8, 3, 3, 3), "ui8", "i8", 7, None, {"groups": 2, "pads": [1, 1, 1, 1]}),
    "u8u8-depthwise": ((1, 3, 6, 5), (3, 1, 3, 3), "ui8", "ui8", 128, 255, {"groups": 3, "strides": [2, 2]}),
    "s8s8-pointwise-wide": ((2, 70, 3, 4), (33, 70, 1, 1), "i8", "i8", 3, 0, {}),
}


def _conv_arrays(case, rng):
    x_shape, w_shape, x_dt, w_dt, x_zero, w_zero, _ = case
    w_zeros = _extremes(rng, (w_shape[0],), w_dt) if w_zero is None else np.asarray(w_zero, NP[w_dt])
    return [_extremes(rng, x_shape, x_dt), _extremes(rng, w_shape, w_dt), np.asarray(x_zero, NP[x_dt]), w_zeros]


def _integer_conv(x, w, x_zero, w_zero, strides=(1, 1), pads=(0, 0, 0, 0), dilations=(1, 1), groups=1):
    """The convolution as loops over the taps in int64, the padding holding the zero point."""
    x = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])),
               constant_values=int(x_zero)) - int(x_zero)
    w = w.astype(np.int64) - (w_zero.astype(np.int64).reshape(-1, 1, 1, 1) if w_zero.ndim else int(w_zero))
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h - dilations[0] * (kh - 1) - 1) // strides[0] + 1
    ow = (wd - dilations[1] * (kw - 1) - 1) // strides[1] + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    for oc in range(o):
        g = oc // (o // groups)
        for i in range(kh):
            for j in range(kw):
                window = x[:, g * cg:(g + 1) * cg, i * dilations[0]:, j * dilations[1]:]
                window = window[:, :, :strides[0] * (oh - 1) + 1:strides[0], :strides[1] * (ow - 1) + 1:strides[1]]
                out[:, oc] += np.einsum("nchw,c->nhw", window, w[oc, :, i, j])
    return out


@pytest.mark.cross_target(cases=CONV_CASES, group=lambda case: "conv_integer")
def test_conv_integer_is_exact_on_every_cpu(cpu, case):
    window = case[-1]
    rng = np.random.default_rng(sum(case[0]) + sum(case[1]))
    arrays = _conv_arrays(case, rng)
    want = _integer_conv(*arrays, **window)
    assert np.abs(want).max() < 2 ** 31
    if arrays[3].ndim == 0 and window.get("groups", 1) == 1:
        onnx_window = {k: v for k, v in window.items() if k != "groups"}
        np.testing.assert_array_equal(_onnx("ConvInteger", arrays, **onnx_window)[0], want)
    module = _module("lz.conv_integer", arrays, **window)
    np.testing.assert_array_equal(interpret(module, "f", *arrays), want)
    got = lezero.compile(module, "f", cpu=cpu)(*arrays)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want, err_msg=f"lz.conv_integer {case} compiled for {cpu}")


def test_conv_integer_runs_on_the_int8_gemm():
    """The CPU keeps lz.conv_integer whole: one conv kernel (the int8 GEMM over an implicit
    im2col, integer_conv.py), no gather im2col, no i32 conv or matmul."""
    from lezero.codegen.schedule import schedule

    arrays = _conv_arrays(CONV_CASES["u8s8-odd-pad-stride"], np.random.default_rng(0))
    ops = [op for op in schedule(_module("lz.conv_integer", arrays, pads=[1, 1, 1, 1])).walk()]
    kernels = [op for op in ops if op.name == "lz.kernel"]
    assert [k.attributes["kind"].value for k in kernels] == ["conv"]
    assert [op.name for op in kernels[0].regions[0].blocks[0].ops] == ["lz.conv_integer", "lz.yield"]
    assert not any(op.name in ("lz.conv2d", "lz.matmul", "lz.gather") for op in ops)


@pytest.mark.parametrize("op, types, attrs, message", [
    ("lz.quantize", [tensor((2, 3), "i32"), tensor((), "f32"), tensor((), "i8")], {},
     "input must have a float element type"),
    ("lz.quantize", [tensor((2, 3), "f32"), tensor((), "f64"), tensor((), "i8")], {},
     "scale must have the input's element type f32, got f64"),
    ("lz.quantize", [tensor((2, 3), "f32"), tensor((), "f32"), tensor((), "i32")], {},
     "zero_point must have element type i8 or ui8, got i32"),
    ("lz.quantize", [tensor((2, 3), "f32"), tensor((4,), "f32"), tensor((4,), "i8")], {},
     "per-channel scale has 4 entries but axis 1 of 2x3 has 3"),
    ("lz.quantize", [tensor((2, 3), "f32"), tensor((3,), "f32"), tensor((), "i8")], {},
     "scale 3 and zero_point scalar must have the same shape"),
    ("lz.dequantize", [tensor((2, 3), "i8"), tensor((), "f32"), tensor((), "ui8")], {},
     "zero_point must have the input's element type i8, got ui8"),
    ("lz.dequantize", [tensor((2, 3), "f32"), tensor((), "f32"), tensor((), "f32")], {},
     "input must have element type i8, ui8 or i32, got f32"),
    ("lz.dynamic_quantize", [tensor((2, 3), "f64")], {}, "input must have element type f32, got f64"),
    ("lz.matmul_integer", [tensor((2, 3), "ui8"), tensor((3, 4), "i8"), tensor((), "i8"), tensor((), "i8")], {},
     "lhs_zero_point must have the lhs's element type ui8, got i8"),
    ("lz.matmul_integer", [tensor((2, 3), "f32"), tensor((3, 4), "i8"), tensor((), "f32"), tensor((), "i8")], {},
     "lhs must have element type i8 or ui8, got f32"),
    ("lz.matmul_integer", [tensor((2, 3), "ui8"), tensor((4, 4), "i8"), tensor((), "ui8"), tensor((), "i8")], {},
     "contracting dimensions differ"),
    ("lz.matmul_integer", [tensor((2, 3), "ui8"), tensor((3, 4), "i8"), tensor((), "ui8"), tensor((5,), "i8")], {},
     "per-column rhs_zero_point has 5 entries but the rhs 3x4 has 4 columns"),
    ("lz.matmul_integer", [tensor((2, 3), "ui8"), tensor((3, 4), "i8"), tensor((2,), "ui8"), tensor((), "i8")], {},
     "lhs_zero_point must be rank 0"),
    ("lz.conv_integer", [tensor((1, 2, 5, 5), "ui8"), tensor((3, 2, 3, 3), "i8"), tensor((), "ui8"),
                         tensor((4,), "i8")], {}, "per-channel weight_zero_point has 4 entries but the weight 3x2x3x3 has 3"),
    ("lz.conv_integer", [tensor((1, 2, 5, 5), "ui8"), tensor((3, 2, 3, 3), "i8"), tensor((1,), "ui8"),
                         tensor((), "i8")], {}, "input_zero_point must be rank 0"),
    ("lz.conv_integer", [tensor((1, 2, 5, 5), "f32"), tensor((3, 2, 3, 3), "i8"), tensor((), "f32"),
                         tensor((), "i8")], {}, "input must have element type i8 or ui8, got f32"),
    ("lz.conv_integer", [tensor((1, 3, 5, 5), "ui8"), tensor((3, 2, 3, 3), "i8"), tensor((), "ui8"),
                         tensor((), "i8")], {}, "input has 3 channels but weights 3x2x3x3 with groups = 1 expect 2"),
    ("lz.conv_integer", [tensor((1, 2, 5, 5), "ui8"), tensor((3, 2, 3, 3), "i8"), tensor((), "ui8"),
                         tensor((), "ui8")], {}, "weight_zero_point must have the weight's element type i8, got ui8"),
])
def test_bad_operands_are_clear_errors(op, types, attrs, message):
    from lezero.ir.opdef import lookup

    definition = lookup(op)
    with pytest.raises(OpError, match=message.replace("(", r"\(")):
        definition.infer_op(types, definition.attrs(attrs))


def test_shape_rules():
    from lezero.ir.opdef import lookup

    def infer(op, *types):
        definition = lookup(op)
        return definition.infer_op(list(types), definition.attrs({}))

    assert infer("lz.quantize", tensor((2, 3), "f32"), tensor((3,), "f32"), tensor((3,), "ui8")) == \
        [tensor((2, 3), "ui8")]
    assert infer("lz.dequantize", tensor((5,), "i32"), tensor((), "f32"), tensor((), "i32")) == [tensor((5,), "f32")]
    assert infer("lz.dynamic_quantize", tensor((None, 8), "f32")) == \
        [tensor((None, 8), "ui8"), TensorType((), tensor((), "f32").element_type), tensor((), "ui8")]
    assert infer("lz.matmul_integer", tensor((4, None, 8), "ui8"), tensor((8, 6), "i8"), tensor((), "ui8"),
                 tensor((6,), "i8")) == [tensor((4, None, 6), "i32")]
    assert infer("lz.conv_integer", tensor((None, 3, 9, 8), "ui8"), tensor((5, 3, 3, 3), "i8"), tensor((), "ui8"),
                 tensor((5,), "i8")) == [tensor((None, 5, 7, 6), "i32")]
