"""blocked-layout (``lezero/passes/layout.py``): convs and their epilogues become blocked kernels,
a region converts once in and once out, what the kernel does not serve stays NCHW with its
reason logged; compiled, the nets match the interpreter on the NCHW graph."""
from __future__ import annotations

import logging

import numpy as np
import pytest

import lezero
from lezero.ir.builder import Builder
from lezero.ir.core import FuncOp, ModuleOp
from lezero.ir.dialect.blocked import from_blocked, to_blocked
from lezero.ir.interpreter import interpret
from lezero.ir.types import F32, FunctionType, TensorType
from lezero.passes import run_pipeline
from lezero.passes.layout import round_trip_source


def residual_net(c0: int, c1: int, size: int, *, bias: bool = True, stem: int | None = None,
                 weights_as_argument: bool = False, pool: bool = True, keepdims: bool = False,
                 batch_norm: bool = False) -> ModuleOp:
    """``@f(x: [1, c0, size, size])``: [a stem conv of ``stem`` -> c0 channels], a downsampling
    residual block (conv 3x3 s2 + bias + relu, conv 3x3 + the 1x1 s2 shortcut + relu, the shortcut
    after the conv that reads it, as the exports order them), an identity block (conv + relu, conv
    + the block's input + relu), a max pool (unless not ``pool``: then the block's output is not
    returned) and a global mean.  ``batch_norm``: each conv of the identity block is followed by an
    unfolded batch norm (``* scale + shift``, constants of [O, 1, 1], as the light ONNX models')."""
    rng = np.random.default_rng(c0 * c1 + size)
    channels = stem or c0
    args = [TensorType((1, channels, size, size), F32)]
    if weights_as_argument:
        args.append(TensorType((c1, c0, 3, 3), F32))
    func = FuncOp("f", FunctionType(args, []))
    b = Builder.at_end(func.entry_block)

    def weight(o, c, k):
        return b.constant((rng.standard_normal((o, c, k, k)) * (2 / (c * k * k)) ** 0.5).astype(np.float32))

    def conv(x, w, stride, pad):
        return b.op("lz.conv2d", x, w, strides=[stride, stride], pads=[pad] * 4)

    x = func.arguments[0]
    if stem:
        x = b.op("lz.relu", conv(x, weight(c0, stem, 3), 1, 1))
    w1 = func.arguments[1] if weights_as_argument else weight(c1, c0, 3)
    y = conv(x, w1, 2, 1)
    if bias:
        y = b.op("lz.add", y, b.constant(rng.standard_normal((1, c1, 1, 1)).astype(np.float32)))
    y = b.op("lz.relu", y)
    y = conv(y, weight(c1, c1, 3), 1, 1)
    shortcut = conv(x, weight(c1, c0, 1), 2, 0)
    y = b.op("lz.relu", b.op("lz.add", y, shortcut))
    def norm(v):
        if not batch_norm:
            return v
        scale, shift = (b.constant(rng.standard_normal((c1, 1, 1)).astype(np.float32)) for _ in range(2))
        return b.op("lz.add", b.op("lz.mul", v, scale), shift)

    z = b.op("lz.relu", norm(conv(y, weight(c1, c1, 3), 1, 1)))
    y = b.op("lz.relu", b.op("lz.add", norm(conv(z, weight(c1, c1, 3), 1, 1)), y))
    pooled = b.op("lz.max_pool2d", y, kernel=[2, 2], strides=[2, 2]) if pool else y
    mean = b.op("lz.reduce_mean", pooled, axes=[2, 3], keepdims=keepdims)
    results = [mean, y] if pool else [mean]
    b.create("func.return", results, result_types=[])
    func.function_type = FunctionType(args, [r.type for r in results])
    return ModuleOp([func])


def blocked(module: ModuleOp, block: int = 16) -> ModuleOp:
    return run_pipeline(module, f"shape-infer,blocked-layout{{block={block}}},dce")


def ops_of(module: ModuleOp, name: str, **attrs) -> list:
    """The ops ``name`` of @f whose attributes ``attrs`` have those values (arrays as tuples)."""
    def value(op, key):
        v = op.attributes[key]
        return tuple(v.values) if hasattr(v, "values") else v.value

    return [op for op in module.lookup("f").entry_block.ops
            if op.name == name and all(key in op.attributes and value(op, key) == v for key, v in attrs.items())]


def inputs(module: ModuleOp) -> list:
    rng = np.random.default_rng(0)
    return [rng.standard_normal(a.type.shape).astype(np.float32) for a in module.lookup("f").arguments]


def test_a_residual_block_is_one_blocked_region():
    plain = residual_net(32, 64, 12)
    arrays = inputs(plain)
    want = interpret(plain, "f", *arrays)
    module = blocked(residual_net(32, 64, 12))
    kernels = ops_of(module, "lz.kernel", kind="conv_blocked")
    assert len(kernels) == 5 and not ops_of(module, "lz.conv2d")
    # the bias, the shortcut and the relus are in the kernels' epilogues
    epilogues = sorted((len(k.operands), k.regions[0].blocks[0].ops[0].definition.attrs(
        k.regions[0].blocks[0].ops[0]).relu) for k in kernels)
    assert epilogues == [(3, False), (3, True), (3, True), (4, True), (4, True)]
    assert not ops_of(module, "lz.add") and not ops_of(module, "lz.relu")
    # one conversion in (x), one out (the pool and the returned y read it)
    assert len(ops_of(module, "lz.transpose", perm=(0, 1, 3, 4, 2))) == 1
    assert len(ops_of(module, "lz.transpose", perm=(0, 1, 4, 2, 3))) == 1
    for got, expected in zip(interpret(module, "f", *arrays), want):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.cross_target(cases={"16->32": (16, 32, 9)})
def test_an_unfolded_batch_norm_is_folded_into_the_blocked_kernel(cpu, case):
    """conv * scale + shift (per output channel): the scale folded into the weights, the shift into
    the bias, so the region stays one (the light ONNX models' resnet50)."""
    module = blocked(residual_net(*case, batch_norm=True))
    assert len(ops_of(module, "lz.kernel", kind="conv_blocked")) == 5
    assert not ops_of(module, "lz.mul") and not ops_of(module, "lz.add")
    arrays = inputs(module)
    want = interpret(residual_net(*case, batch_norm=True), "f", *arrays)
    for got, expected in zip(interpret(module, "f", *arrays), want):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    got = lezero.compile(residual_net(*case, batch_norm=True), "f", cpu=cpu)(*arrays)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * float(np.abs(w).max()), err_msg=f"cpu {cpu}")


@pytest.mark.parametrize("keepdims", [False, True])
def test_a_global_mean_of_a_blocked_result_converts_its_means_only(keepdims):
    plain = residual_net(32, 40, 12, pool=False, keepdims=keepdims)
    arrays = inputs(plain)
    want = interpret(plain, "f", *arrays)
    module = blocked(residual_net(32, 40, 12, pool=False, keepdims=keepdims))
    (back,) = ops_of(module, "lz.transpose", perm=(0, 1, 4, 2, 3))
    assert back.result.type.shape == (1, 3, 16, 1, 1)  # 40 means in 3 blocks, not 40 x 6 x 6 values
    (mean,) = ops_of(module, "lz.reduce_mean")
    assert mean.operands[0].type.shape == (1, 3, 6, 6, 16)
    (got,) = interpret(module, "f", *arrays)
    np.testing.assert_allclose(got, want[0], rtol=1e-5, atol=1e-5)
    compiled = lezero.compile(residual_net(32, 40, 12, pool=False, keepdims=keepdims), "f")(*arrays)
    np.testing.assert_allclose(compiled[0], want[0], rtol=1e-4, atol=1e-4 * float(np.abs(want[0]).max()))


@pytest.mark.cross_target(cases={"30->40": (30, 40, 11), "64->128": (64, 128, 9), "16->16 odd": (16, 16, 7)})
def test_compiled_blocked_nets_match_the_interpreter(cpu, case):
    """Channels that are not whole blocks (30 of 32, 40 of 48 lanes) and odd images, end to end:
    the conversions as kernels, the packed weights, the blocked kernels."""
    module = residual_net(*case)
    arrays = inputs(module)
    want = interpret(module, "f", *arrays)
    got = lezero.compile(residual_net(*case), "f", cpu=cpu)(*arrays)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * float(np.abs(w).max()), err_msg=f"cpu {cpu}")


def test_what_stays_nchw_is_logged_with_its_reason(caplog):
    caplog.set_level(logging.DEBUG, logger="lezero.layout")
    module = blocked(residual_net(16, 20, 8, stem=3))
    assert "NCHW conv 3x3 3->16 at 8x8" in caplog.text and "3 input channels fill 3 of 16 lanes" in caplog.text
    assert "20 output channels fill 20 of 32 lanes" in caplog.text  # 1.6x the work: NCHW
    assert len(ops_of(module, "lz.conv2d")) == 6 and not ops_of(module, "lz.kernel")
    caplog.clear()
    blocked(residual_net(16, 32, 8, weights_as_argument=True))
    assert "weights not a constant" in caplog.text
    # the other 4 convs: the first one's input and output, and the block's output, to convert
    assert "NCHW region of 4 convs" in caplog.text and "3 conversions" in caplog.text
    caplog.clear()
    blocked(residual_net(16, 32, 8))
    assert "blocked region of 5 convs" in caplog.text and "blocked conv 3x3 32->32 at 4x4" in caplog.text
    assert "(epilogue lz.add lz.relu)" in caplog.text


def test_a_lone_conv_between_nchw_ops_stays_nchw(caplog):
    """Its two conversions would cost more than its kernel gains (the mobile nets' pointwise convs
    between depthwise ones)."""
    func = FuncOp("f", FunctionType([TensorType((1, 32, 8, 8), F32)], []))
    b = Builder.at_end(func.entry_block)
    w = b.constant(np.random.default_rng(0).standard_normal((32, 32, 1, 1)).astype(np.float32))
    y = b.op("lz.max_pool2d", b.op("lz.relu", b.op("lz.conv2d", func.arguments[0], w)), kernel=[2, 2], strides=[2, 2])
    b.create("func.return", [y], result_types=[])
    func.update_function_type()
    caplog.set_level(logging.DEBUG, logger="lezero.layout")
    module = blocked(ModuleOp([func]))
    assert "NCHW region of 1 convs" in caplog.text and "2 conversions" in caplog.text
    assert len(ops_of(module, "lz.conv2d")) == 1 and not ops_of(module, "lz.kernel")


def round_trip(channels: int, block: int = 16):
    func = FuncOp("f", FunctionType([TensorType((1, -(-channels // block), 4, 4, block), F32)], []))
    b = Builder.at_end(func.entry_block)
    back = to_blocked(b, from_blocked(b, func.arguments[0], channels), block)
    b.create("func.return", [back], result_types=[])
    return func, back


def test_a_round_trip_through_nchw_is_dropped_only_where_it_is_the_identity():
    func, back = round_trip(32)
    assert round_trip_source(back.op) is func.arguments[0]
    # 20 channels: the round trip zeros lanes 20..31, which an argument may hold; a blocked
    # kernel's result has zeros there (the pass only drops those)
    func, back = round_trip(20)
    assert round_trip_source(back.op) is None
    reversed_dims = FuncOp("g", FunctionType([TensorType((2, 3), F32)], []))
    b = Builder.at_end(reversed_dims.entry_block)
    assert round_trip_source(b.op("lz.transpose", reversed_dims.arguments[0]).op) is None  # no perm
