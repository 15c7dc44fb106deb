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
                 batch_norm: int = 0) -> ModuleOp:
    """``@f(x: [1, c0, size, size])``: [a stem conv of ``stem`` -> c0 channels], a downsampling
    residual block (conv 3x3 s2 + bias + relu, conv 3x3 + the 1x1 s2 shortcut + relu, the shortcut
    after the conv that reads it, as the exports order them), an identity block (conv + relu, conv
    + the block's input + relu), a max pool (unless not ``pool``: then the block's output is not
    returned) and a global mean.  ``batch_norm``: each conv of the identity block is followed by that
    many unfolded batch norms (``* scale + shift``, constants of [O, 1, 1], as the light ONNX models')."""
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
        for _ in range(int(batch_norm)):
            scale, shift = (b.constant(rng.standard_normal((c1, 1, 1)).astype(np.float32)) for _ in range(2))
            v = b.op("lz.add", b.op("lz.mul", v, scale), shift)
        return v

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
    # one conversion in (x), one out (the returned y), the pool blocked, its mean's C values converted
    assert len(ops_of(module, "lz.transpose", perm=(0, 1, 3, 4, 2))) == 1
    backs = ops_of(module, "lz.transpose", perm=(0, 1, 4, 2, 3))
    assert sorted(back.result.type.shape for back in backs) == [(1, 4, 16, 1, 1), (1, 4, 16, 6, 6)]
    (pool,) = ops_of(module, "lz.kernel", kind="single")
    assert pool.regions[0].blocks[0].ops[0].name == "lz.max_pool2d_blocked" and not ops_of(module, "lz.max_pool2d")
    for got, expected in zip(interpret(module, "f", *arrays), want):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.cross_target(cases={"16->32": (16, 32, 9, 1), "16->32, a scale layer after": (16, 32, 9, 2)})
def test_an_unfolded_batch_norm_is_folded_into_the_blocked_kernel(cpu, case):
    """conv * scale + shift (per output channel): the scale folded into the weights, the shift into
    the bias, so the region stays one (the light ONNX models' resnet50; inception_v2 has a second
    * scale + shift after each, a Caffe scale layer)."""
    *shape, norms = case
    module = blocked(residual_net(*shape, batch_norm=norms))
    assert len(ops_of(module, "lz.kernel", kind="conv_blocked")) == 5
    assert not ops_of(module, "lz.mul") and not ops_of(module, "lz.add")
    arrays = inputs(module)
    want = interpret(residual_net(*shape, batch_norm=norms), "f", *arrays)
    for got, expected in zip(interpret(module, "f", *arrays), want):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    got = lezero.compile(residual_net(*shape, batch_norm=norms), "f", cpu=cpu)(*arrays)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * float(np.abs(w).max()), err_msg=f"cpu {cpu}")


def branches_net(size: int, squeeze: int, branch: tuple, *, pool: tuple = (3, 2, 0), avg: bool = False,
                 ceil_mode: bool = False) -> ModuleOp:
    """``@f(x: [1, 32, size, size])``: squeezenet's and inception's blocks: a 1x1 squeeze conv of
    ``squeeze`` channels + relu, two branches (a 1x1 and a 3x3 conv of ``branch`` channels + bias +
    relu) joined by a channel concat, a third 1x1 conv after a 3x3 stride-1 max pool of the squeeze
    (an average pool: NCHW) joined too, a max pool (``pool``: kernel, stride, pad), a 3x3 conv, a global
    mean; the concat is returned too."""
    rng = np.random.default_rng(size + squeeze)
    func = FuncOp("f", FunctionType([TensorType((1, 32, size, size), F32)], []))
    b = Builder.at_end(func.entry_block)

    def conv(x, o, k):
        c = x.type.shape[1] if x.type is not None else None
        w = b.constant((rng.standard_normal((o, c, k, k)) * (2 / (c * k * k)) ** 0.5).astype(np.float32))
        y = b.op("lz.conv2d", x, w, pads=[k // 2] * 4)
        return b.op("lz.relu", b.op("lz.add", y, b.constant(rng.standard_normal((1, o, 1, 1)).astype(np.float32))))

    s = conv(func.arguments[0], squeeze, 1)
    side = b.op("lz.avg_pool2d" if avg else "lz.max_pool2d", s, kernel=[3, 3], pads=[1, 1, 1, 1])
    joined = b.op("lz.concat", conv(s, branch[0], 1), conv(s, branch[1], 3), conv(side, 16, 1), axis=1)
    k, stride, pad = pool
    pooled = b.op("lz.max_pool2d", joined, kernel=[k, k], strides=[stride, stride], pads=[pad] * 4,
                  ceil_mode=ceil_mode)
    mean = b.op("lz.reduce_mean", conv(pooled, 32, 3), axes=[2, 3], keepdims=False)
    b.create("func.return", [mean, joined], result_types=[])
    func.update_function_type()
    return ModuleOp([func])


BRANCH_CASES = {"3x3 s2": dict(), "2x2 s2 pads": dict(pool=(2, 2, 1)), "3x3 s2 ceil": dict(size=12, ceil_mode=True)}


@pytest.mark.cross_target(cases=BRANCH_CASES, group=lambda case: tuple(sorted(case.items())))
def test_concats_and_max_pools_of_whole_blocks_join_the_region(cpu, case):
    """The branches' concat (16 + 32 + 16 channels: whole blocks) is an lz.concat of the blocked
    branches, the max pools are blocked kernels: the net converts its input and the returned
    concat only (and the means' C values).  A ceil-mode pool that adds a window stays NCHW, and
    the conv after it, alone between NCHW ops, too."""
    case = dict(case)
    size = case.pop("size", 11)
    module = blocked(branches_net(size, 16, (16, 32), **case))
    (joined,) = ops_of(module, "lz.concat")
    assert joined.result.type.shape == (1, 4, size, size, 16)
    ceil = case.get("ceil_mode", False)
    assert len(ops_of(module, "lz.kernel", kind="conv_blocked")) == (4 if ceil else 5)
    assert len(ops_of(module, "lz.conv2d")) == (1 if ceil else 0)
    pools = [k for k in ops_of(module, "lz.kernel", kind="single")
             if k.regions[0].blocks[0].ops[0].name == "lz.max_pool2d_blocked"]
    assert len(pools) == (1 if ceil else 2) and len(ops_of(module, "lz.max_pool2d")) == (1 if ceil else 0)
    assert len(ops_of(module, "lz.transpose", perm=(0, 1, 3, 4, 2))) == 1
    # the concat (for the return and, with ceil mode, the NCHW pool) and the means
    assert len(ops_of(module, "lz.transpose", perm=(0, 1, 4, 2, 3))) == (1 if ceil else 2)
    arrays = inputs(module)
    want = interpret(branches_net(size, 16, (16, 32), **case), "f", *arrays)
    for got, expected in zip(interpret(module, "f", *arrays), want):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    got = lezero.compile(branches_net(size, 16, (16, 32), **case), "f", cpu=cpu)(*arrays)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * float(np.abs(w).max()), err_msg=f"cpu {cpu}")


def test_a_region_whose_average_pool_costs_two_conversions_stays_nchw(caplog):
    """The side branch's NCHW average pool: the squeeze converted out, the side conv's input in: 4
    conversions for 5 convs, more than MAX_CONVERSIONS_PER_CONV allows."""
    caplog.set_level(logging.DEBUG, logger="lezero.layout")
    module = blocked(branches_net(11, 16, (16, 32), avg=True))
    assert "NCHW region of 5 convs and 2 pools or concats" in caplog.text and "4 conversions" in caplog.text
    assert len(ops_of(module, "lz.conv2d")) == 5 and not ops_of(module, "lz.kernel")


def test_a_concat_of_partial_blocks_stays_nchw(caplog):
    """20 + 32 + 16 channels: the first input's blocks would hold padding inside the concat."""
    caplog.set_level(logging.DEBUG, logger="lezero.layout")
    module = blocked(branches_net(9, 16, (20, 32)))
    assert "NCHW lz.concat" in caplog.text and "input 0 has 20 channels, not whole blocks of 16" in caplog.text
    caplog.clear()
    blocked(branches_net(12, 16, (16, 32), ceil_mode=True))
    assert "NCHW lz.max_pool2d" in caplog.text and "ceil mode adds a window" in caplog.text
    (joined,) = ops_of(module, "lz.concat")
    assert joined.result.type.shape == (1, 68, 9, 9)
    arrays = inputs(module)
    for got, expected in zip(interpret(module, "f", *arrays), interpret(branches_net(9, 16, (20, 32)), "f", *arrays)):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


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
