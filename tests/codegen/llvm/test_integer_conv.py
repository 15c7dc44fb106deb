"""The CPU's ``lz.conv_integer`` kernel (lezero/codegen/llvm/integer_conv.py: the int8 GEMM over
an implicit im2col) against an exact integer reference on every CPU of the cross-target matrix:
several K blocks, several panels and a partial one, work items that slice one image, a row tail,
stride-2 rows copied a vector at a time, groups, per-channel weight zero points, every pairing of
i8 and ui8 at the ends of their ranges; its fused requantize epilogue equal to the reference's
unfused chain (ties to even, saturation at both ends); and the kernels a QLinearConv chain makes:
one conv kernel per layer, no gather, reshape or i32 tensor between them.  (The small cases of
tests/ir/test_dialect_quantization.py run on this kernel too.)"""
from __future__ import annotations

import numpy as np
import pytest
from support.ir_building import build
from support.quantization_testing import assert_requantized_exactly

import lezero
from lezero.codegen.llvm.backend import lower_kernel
from lezero.codegen.llvm.jit import emit_assembly
from lezero.codegen.schedule import schedule
from lezero.ir import interpret
from lezero.ir.types import ELEMENT_TYPES, F32, tensor

NP = {"i8": np.int8, "ui8": np.uint8, "i32": np.int32, "i64": np.int64}


def _extremes(rng, shape, dt):
    info = np.iinfo(NP[dt])
    v = rng.integers(info.min, info.max, shape, endpoint=True)
    return np.where(rng.random(shape) < 0.5, rng.choice([info.min, info.max], shape), v).astype(NP[dt])


def _reference(x, w, x_zero, w_zero, strides=(1, 1), pads=(0, 0, 0, 0), groups=1):
    """The convolution as loops over the taps in int64, the padding holding the zero point."""
    x = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])),
               constant_values=int(x_zero)) - int(x_zero)
    w = w.astype(np.int64) - (w_zero.astype(np.int64).reshape(-1, 1, 1, 1) if w_zero.ndim else int(w_zero))
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h - kh) // strides[0] + 1, (wd - kw) // strides[1] + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    for oc in range(o):
        g = oc // (o // groups)
        for i in range(kh):
            for j in range(kw):
                window = x[:, g * cg:(g + 1) * cg, i:i + strides[0] * (oh - 1) + 1:strides[0],
                           j:j + strides[1] * (ow - 1) + 1:strides[1]]
                out[:, oc] += np.einsum("nchw,c->nhw", window, w[oc, :, i, j])
    return out


# (x shape, w shape, x type, w type, x zero, w zero (None: per channel), window)
CASES = {
    # K = 576: three K blocks; q-space 178 columns: 3 panels, the last partial; one image: 3 work
    # items slice it; 20 output channels: 3 row tiles and a tail
    "u8s8-k-blocks-panels-slices": ((1, 64, 12, 13), (20, 64, 3, 3), "ui8", "i8", 255, -128,
                                    {"pads": [1, 1, 1, 1]}),
    # stride 2 over rows of 40 bytes: the slab's even/odd phases copied 16 and 8 bytes a step
    "s8u8-stride2-wide-rows-per-channel": ((2, 5, 9, 40), (7, 5, 3, 3), "i8", "ui8", -128, None,
                                           {"strides": [2, 2], "pads": [1, 0, 1, 1]}),
    "u8u8-groups-per-channel": ((3, 8, 10, 11), (12, 4, 3, 1), "ui8", "ui8", 0, None,
                                {"groups": 2, "pads": [0, 2, 1, 0]}),
    "s8s8-pointwise": ((2, 33, 9, 8), (70, 33, 1, 1), "i8", "i8", 127, 127, {}),
    # K = 4140: two AMX K blocks (partial sums), the last 44 deep (a K tail only)
    "u8s8-amx-k-blocks": ((1, 460, 5, 6), (8, 460, 3, 3), "ui8", "i8", 3, None, {"pads": [1, 1, 1, 1]}),
}


def _arrays(case, rng):
    x_shape, w_shape, x_dt, w_dt, x_zero, w_zero, _ = case
    w_zeros = _extremes(rng, (w_shape[0],), w_dt) if w_zero is None else np.asarray(w_zero, NP[w_dt])
    return [_extremes(rng, x_shape, x_dt), _extremes(rng, w_shape, w_dt), np.asarray(x_zero, NP[x_dt]), w_zeros]


def _conv_module(case):
    x_shape, w_shape, x_dt, w_dt, _, w_zero, window = case
    zw = tensor(() if w_zero is not None else (w_shape[0],), w_dt)
    return build([tensor(x_shape, x_dt), tensor(w_shape, w_dt), tensor((), x_dt), zw],
                 lambda b, *v: b.op("lz.conv_integer", *v, **window))


@pytest.mark.cross_target(cases=CASES, group=lambda case: "integer-conv")
def test_integer_conv_is_exact_on_every_cpu(cpu, case):
    rng = np.random.default_rng(sum(case[0]) * 3 + sum(case[1]))
    arrays = _arrays(case, rng)
    window = case[-1]
    want = _reference(*arrays, strides=window.get("strides", (1, 1)), pads=window.get("pads", (0, 0, 0, 0)),
                      groups=window.get("groups", 1))
    assert np.abs(want).max() < 2 ** 31
    got = lezero.compile(_conv_module(case), "f", cpu=cpu)(*arrays)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want, err_msg=f"lz.conv_integer {case} compiled for {cpu}")


def test_amx_cpus_convolve_in_tiles():
    """sapphirerapids (amx-int8): the conv's products are tile dots, as the int8 GEMM's (the same panels)."""
    kernel = next(op for op in schedule(_conv_module(CASES["u8s8-k-blocks-panels-slices"])).functions[0]
                  .entry_block.ops if op.name == "lz.kernel")
    assembly = emit_assembly(lower_kernel(kernel, cpu="sapphirerapids").llvm_ir, "sapphirerapids")
    assert "tdpbssd" in assembly and "ldtilecfg" in assembly and "tilerelease" in assembly


def _requantize_module(x_shape, w_shape, out_dt, ties, window):
    """QLinearConv's chain: ``conv_integer + bias`` (i32, per channel), ``cast * scale`` (per
    channel), ``round``, ``+ zero``, clamp, cast to ``out_dt``; and the dequantized float result
    through relu.  ``ties``: scale 0.5 (every odd sum a tie); else a small scale (both ends
    saturate)."""
    o = w_shape[0]
    lo, hi = np.iinfo(NP[out_dt]).min, np.iinfo(NP[out_dt]).max

    def body(b, x, w, zx, zw, bias, scale):
        y = b.op("lz.cast", b.op("lz.add", b.op("lz.conv_integer", x, w, zx, zw, **window), bias), to=F32)
        y = b.op("lz.mul", y, scale)
        q = b.op("lz.add", b.op("lz.round", y), b.constant(np.asarray(3 if out_dt == "ui8" else -5, np.float32)))
        q = b.op("lz.min", b.op("lz.max", q, b.constant(np.asarray(lo, np.float32))),
                 b.constant(np.asarray(hi, np.float32)))
        relu = b.op("lz.max", y, b.constant(np.asarray(0, np.float32)))
        return [b.op("lz.cast", q, to=ELEMENT_TYPES[out_dt]), relu]
    return build([tensor(x_shape, "ui8"), tensor(w_shape, "i8"), tensor((), "ui8"), tensor((), "i8"),
                  tensor((o, 1, 1), "i32"), tensor((o, 1, 1), "f32")], body)


REQUANTIZE_CASES = {
    "to-ui8-ties": ((2, 16, 9, 9), (24, 16, 3, 3), "ui8", True, {"pads": [1, 1, 1, 1]}),
    "to-i8-saturating-stride2": ((1, 32, 14, 15), (16, 32, 3, 3), "i8", False, {"strides": [2, 2], "pads": [1, 1, 1, 1]}),
}


@pytest.mark.cross_target(cases=REQUANTIZE_CASES, group=lambda case: "integer-conv-requantize")
def test_fused_requantize_equals_the_unfused_chain_on_every_cpu(cpu, case):
    x_shape, w_shape, out_dt, ties, window = case
    module = _requantize_module(x_shape, w_shape, out_dt, ties, window)
    rng = np.random.default_rng(sum(x_shape))
    o = w_shape[0]
    x, w = _extremes(rng, x_shape, "ui8"), _extremes(rng, w_shape, "i8")
    bias = rng.integers(-5000, 5000, (o, 1, 1)).astype(np.int32)
    scale = np.full((o, 1, 1), 0.5, np.float32) if ties else (rng.random((o, 1, 1)) * 1e-3).astype(np.float32)
    arrays = (x, w, np.asarray(131, np.uint8), np.asarray(0, np.int8), bias, scale)
    assert_requantized_exactly(module, arrays, cpu, NP[out_dt], saturates=not ties, what=str(case))


def test_a_quantized_conv_chain_is_one_conv_kernel_per_layer():
    """Two requantized convs: two ``conv`` kernels of ``lz.conv_integer`` with their epilogues, the
    first's 8-bit NCHW output read by the second directly (no gather, reshape or transpose
    kernel, no i32 tensor)."""
    def body(b, x, w1, w2, zx, zw):
        def layer(v, w):
            y = b.op("lz.mul", b.op("lz.cast", b.op("lz.conv_integer", v, w, zx, zw, pads=[1, 1, 1, 1]), to=F32),
                     b.constant(np.asarray(0.01, np.float32)))
            q = b.op("lz.min", b.op("lz.max", b.op("lz.round", y), b.constant(np.asarray(0, np.float32))),
                     b.constant(np.asarray(255, np.float32)))
            return b.op("lz.cast", q, to=ELEMENT_TYPES["ui8"])
        return [layer(layer(x, w1), w2)]
    module = build([tensor((2, 8, 10, 10), "ui8"), tensor((16, 8, 3, 3), "i8"), tensor((16, 16, 3, 3), "i8"),
                    tensor((), "ui8"), tensor((), "i8")], body)
    kernels = [op for op in schedule(module).functions[0].entry_block.ops if op.name == "lz.kernel"]
    assert [k.attributes["kind"].value for k in kernels] == ["conv", "conv"]
    for k in kernels:
        names = [op.name for op in k.regions[0].blocks[0].ops]
        assert names[0] == "lz.conv_integer" and not {"lz.gather", "lz.reshape", "lz.transpose"} & set(names)
        assert [r.type.element_type.name for r in k.results] == ["ui8"]
    rng = np.random.default_rng(5)
    arrays = (_extremes(rng, (2, 8, 10, 10), "ui8"), _extremes(rng, (16, 8, 3, 3), "i8"),
              _extremes(rng, (16, 16, 3, 3), "i8"), np.asarray(100, np.uint8), np.asarray(0, np.int8))
    np.testing.assert_array_equal(lezero.compile(module, "f")(*arrays), interpret(module, "f", *arrays))


SATURATING = {"f32-to-i32": ("f32", "i32"), "f32-to-i8": ("f32", "i8"), "f64-to-i64": ("f64", "i64")}


@pytest.mark.cross_target(cases=SATURATING, group=lambda case: "float-to-int-saturates")
def test_float_to_int_casts_saturate_on_every_cpu(cpu, case):
    """A requantize ends in a float -> int cast, lowered as compares, selects and a plain convert
    (scalar_builder's ``_float_to_int_saturating``: LLVM scalarizes a vector ``fptosi.sat``): the
    values ``llvm.fptosi.sat`` gives, truncation in range, the limits outside, nan 0 (64 lanes, so
    the vector loop runs)."""
    src, dst = case
    src_np = {"f32": np.float32, "f64": np.float64}[src]
    wide = np.int64 if dst == "i64" else np.int32
    top = float(2 ** (np.iinfo(wide).bits - 1))
    below_top = np.nextafter(src_np(top), src_np(0))
    special = np.array([np.nan, np.inf, -np.inf, top, -top, below_top, -below_top, 3.7, -3.7, 0.5, -0.99,
                        top * 8, -top * 8, 255.5, 127.9, -128.9, 1e30, -1e30], dtype=src_np)
    x = np.resize(special, 64)
    info = np.iinfo(wide)
    sat = np.where(np.isnan(x), 0, np.clip(np.trunc(np.nan_to_num(x, posinf=top * 4, neginf=-top * 4)),
                                           info.min, info.max))
    want = np.array([info.max if v >= top else info.min if v < -top else int(s) for v, s in zip(x, sat)],
                    dtype=wide).astype(NP.get(dst, np.int64))
    module = build([tensor((64,), src)], lambda b, v: b.op("lz.cast", v, to=ELEMENT_TYPES[dst]))
    got = lezero.compile(module, "f", cpu=cpu)(x)
    np.testing.assert_array_equal(got, want, err_msg=f"cast {src} -> {dst} compiled for {cpu}")


def test_a_flattened_conv_output_feeds_the_integer_gemm_without_a_copy():
    """ONNX's Flatten between the last quantized conv and its quantized Gemm: the int8 GEMM reads
    the conv's 8-bit output through the reshape (the same bytes), so no copy kernel runs between."""
    def body(b, x, w, fc, zx, zw):
        y = b.op("lz.mul", b.op("lz.cast", b.op("lz.conv_integer", x, w, zx, zw, pads=[1, 1, 1, 1]), to=F32),
                 b.constant(np.asarray(0.01, np.float32)))
        q = b.op("lz.cast", b.op("lz.min", b.op("lz.max", b.op("lz.round", y), b.constant(np.asarray(0, np.float32))),
                                 b.constant(np.asarray(255, np.float32))), to=ELEMENT_TYPES["ui8"])
        return [b.op("lz.matmul_integer", b.op("lz.reshape", q, shape=[3, 16 * 6 * 5]), fc, zx, zw)]
    module = build([tensor((3, 4, 6, 5), "ui8"), tensor((16, 4, 3, 3), "i8"), tensor((16 * 6 * 5, 10), "i8"),
                    tensor((), "ui8"), tensor((), "i8")], body)
    kernels = [op for op in schedule(module).functions[0].entry_block.ops if op.name == "lz.kernel"]
    assert [k.attributes["kind"].value for k in kernels] == ["conv", "matmul"]
    rng = np.random.default_rng(9)
    arrays = (_extremes(rng, (3, 4, 6, 5), "ui8"), _extremes(rng, (16, 4, 3, 3), "i8"),
              _extremes(rng, (16 * 6 * 5, 10), "i8"), np.asarray(120, np.uint8), np.asarray(-3, np.int8))
    np.testing.assert_array_equal(lezero.compile(module, "f")(*arrays), interpret(module, "f", *arrays))


def test_zero_points_reshaped_from_one_element_stay_per_tensor():
    """ONNX's MatMulInteger imports its ``[1]`` zero points as reshapes to ``[]``: the int8 GEMM reads
    only its two matrices through a reshape, so a zero point keeps the shape that says it is per tensor
    (read through the reshape, a ``[1]`` zero point of b was taken per column: ONNX's node case
    test_matmulinteger got 3157 for -83)."""
    def body(b, x, w, zx, zw):
        return [b.op("lz.matmul_integer", x, w, b.op("lz.reshape", zx, shape=[]), b.op("lz.reshape", zw, shape=[]))]
    module = build([tensor((4, 3), "ui8"), tensor((3, 2), "ui8"), tensor((1,), "ui8"), tensor((1,), "ui8")], body)
    rng = np.random.default_rng(3)
    arrays = (_extremes(rng, (4, 3), "ui8"), _extremes(rng, (3, 2), "ui8"), np.asarray([12], np.uint8),
              np.asarray([200], np.uint8))
    np.testing.assert_array_equal(lezero.compile(module, "f")(*arrays), interpret(module, "f", *arrays))
