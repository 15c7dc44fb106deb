"""F.pad in its four modes, the Pad modules, F.interpolate (nearest, nearest-exact, linear,
bilinear, trilinear, align_corners, scale factors), Upsample and PixelShuffle against torch in
float64 (outputs and input gradients), their errors, traces and ONNX exports."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lezero as lz

from support.eager_testing import compare
from support.layer_testing import assert_traces_and_exports, compare_modules, twins

RNG = np.random.default_rng(0)


def randn(*shape):
    return RNG.standard_normal(shape)


@pytest.mark.parametrize("mode, shape, pad", [
    ("constant", (2, 3, 4), (1, 2, -1, 1)),
    ("reflect", (2, 3, 5), (2, 4)),
    ("reflect", (2, 3, 4, 5), (1, 2, 3, 0)),
    ("replicate", (3, 4, 5), (2, 7, 1, 1)),
    ("replicate", (1, 2, 3, 3, 4), (1, 0, 2, 1, 3, 1)),
    ("circular", (2, 3, 4), (4, 1)),
    ("circular", (1, 2, 3, 4), (2, 3, 3, 1)),
])
def test_pad_modes_match_torch(mode, shape, pad):
    compare(lambda x: lz.nn.functional.pad(x, pad, mode=mode), lambda x: torch.nn.functional.pad(x, pad, mode=mode),
            randn(*shape))


def test_pad_errors():
    with pytest.raises(RuntimeError, match="the padding must be at most 2 at dimension 2"):
        lz.nn.functional.pad(lz.ones(1, 2, 3), (3, 0), mode="reflect")
    with pytest.raises(NotImplementedError, match="mode must be one of"):
        lz.nn.functional.pad(lz.ones(1, 2, 3), (1, 1), mode="symmetric")
    with pytest.raises(NotImplementedError, match="pads the last 1, 2 or 3 dims"):
        lz.nn.functional.pad(lz.ones(3), (1, 1), mode="replicate")
    with pytest.raises(ValueError, match="doesn't take in value argument"):
        lz.nn.functional.pad(lz.ones(1, 2, 3), (1, 1), mode="reflect", value=2.0)


@pytest.mark.parametrize("make, shape", [
    (lambda nn: nn.ReflectionPad1d((1, 2)), (2, 3, 4)),
    (lambda nn: nn.ReflectionPad2d(1), (2, 3, 4)),
    (lambda nn: nn.ReplicationPad2d((1, 0, 2, 3)), (1, 2, 3, 4)),
    (lambda nn: nn.ReplicationPad3d(1), (1, 2, 2, 3, 2)),
    (lambda nn: nn.CircularPad2d(2), (1, 1, 3, 3)),
    (lambda nn: nn.ZeroPad2d((1, 1, 2, 0)), (1, 2, 3)),
    (lambda nn: nn.ConstantPad1d(2, 3.5), (2, 4)),
    (lambda nn: nn.ConstantPad3d((1, 0, 0, 1, 1, 1), -1.0), (1, 2, 2, 2)),
])
def test_pad_modules(make, shape):
    torch_module, lz_module = twins(make)
    assert repr(lz_module) == repr(torch_module)
    compare_modules(torch_module, lz_module, randn(*shape))


@pytest.mark.parametrize("shape, kwargs", [
    ((2, 3, 5), dict(scale_factor=2)),
    ((2, 3, 5), dict(size=7)),
    ((2, 3, 7), dict(size=3, mode="nearest-exact")),
    ((1, 2, 4, 5), dict(scale_factor=(1.5, 0.7))),
    ((1, 2, 4, 5), dict(size=(7, 3), mode="nearest-exact")),
    ((2, 3, 5), dict(size=8, mode="linear")),
    ((2, 3, 5), dict(scale_factor=1.7, mode="linear", align_corners=True)),
    ((1, 2, 4, 5), dict(size=(7, 3), mode="bilinear")),
    ((1, 2, 4, 5), dict(scale_factor=2.5, mode="bilinear", align_corners=True)),
    ((1, 2, 4, 5), dict(scale_factor=(1.3, 2), mode="bilinear", recompute_scale_factor=True)),
    ((1, 2, 3, 4, 2), dict(size=(5, 2, 3), mode="trilinear")),
    ((1, 2, 3, 4, 2), dict(scale_factor=2, mode="nearest")),
    ((1, 1, 4, 4), dict(size=1, mode="bilinear", align_corners=True)),
])
def test_interpolate_matches_torch(shape, kwargs):
    compare(lambda x: lz.nn.functional.interpolate(x, **kwargs),
            lambda x: torch.nn.functional.interpolate(x, **kwargs), randn(*shape))


def test_interpolate_errors():
    x = lz.ones(1, 2, 4, 4)
    with pytest.raises(ValueError, match="only one of size or scale_factor"):
        lz.nn.functional.interpolate(x, size=2, scale_factor=2)
    with pytest.raises(ValueError, match="align_corners option can only be set with the interpolating modes"):
        lz.nn.functional.interpolate(x, size=2, align_corners=True)
    with pytest.raises(NotImplementedError, match="Got 4D input, but linear mode needs 3D input"):
        lz.nn.functional.interpolate(x, size=2, mode="linear")
    with pytest.raises(NotImplementedError, match="mode 'bicubic' is not supported"):
        lz.nn.functional.interpolate(x, size=2, mode="bicubic")


@pytest.mark.parametrize("make, shape", [
    (lambda nn: nn.Upsample(scale_factor=2), (1, 2, 3, 3)),
    (lambda nn: nn.Upsample(size=(5, 4), mode="bilinear", align_corners=False), (1, 2, 3, 3)),
    (lambda nn: nn.UpsamplingBilinear2d(scale_factor=2), (1, 2, 3, 3)),
    (lambda nn: nn.UpsamplingNearest2d(size=5), (1, 2, 3, 3)),
    (lambda nn: nn.PixelShuffle(2), (2, 8, 3, 2)),
    (lambda nn: nn.PixelUnshuffle(3), (2, 1, 6, 3)),
])
def test_resampling_modules(make, shape):
    torch_module, lz_module = twins(make)
    assert repr(lz_module) == repr(torch_module)
    compare_modules(torch_module, lz_module, randn(*shape))


@pytest.mark.parametrize("make, shape", [
    (lambda: lz.nn.Sequential(lz.nn.ReflectionPad2d((1, 2, 0, 1)), lz.nn.ReplicationPad2d(1)), (2, 3, 4, 5)),
    (lambda: lz.nn.CircularPad1d(2), (2, 3, 4)),
    (lambda: lz.nn.Upsample(scale_factor=2, mode="bilinear"), (2, 3, 4, 5)),
    (lambda: lz.nn.Upsample(size=(3, 7), mode="nearest"), (2, 3, 4, 5)),
    (lambda: lz.nn.Sequential(lz.nn.PixelShuffle(2), lz.nn.PixelUnshuffle(2)), (2, 8, 3, 3)),
])
def test_traces_and_exports(make, shape):
    assert_traces_and_exports(make(), RNG.standard_normal(shape).astype(np.float32))
