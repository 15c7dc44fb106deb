"""Conv1d/2d/3d, ConvTranspose1d/2d and the 1-D pools against torch in float64 (outputs, input
and weight gradients, every padding mode), their functional forms, arguments and errors, and
their traces and ONNX exports."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lezero as lz

from support.eager_testing import assert_same, compare
from support.layer_testing import assert_traces_and_exports, compare_modules, twins

RNG = np.random.default_rng(0)


def randn(*shape):
    return RNG.standard_normal(shape)


@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=3),
    dict(kernel_size=3, stride=2, padding=1, dilation=2, bias=False),
    dict(kernel_size=2, groups=2, padding="same"),
    dict(kernel_size=3, padding=2, padding_mode="reflect"),
    dict(kernel_size=3, padding=1, padding_mode="circular", stride=2),
    dict(kernel_size=4, padding=3, padding_mode="replicate"),
])
def test_conv1d(kwargs):
    torch_conv, lz_conv = twins(lambda nn: nn.Conv1d(4, 6, **kwargs))
    assert repr(lz_conv) == repr(torch_conv)
    compare_modules(torch_conv, lz_conv, randn(2, 4, 9))
    compare_modules(torch_conv, lz_conv, randn(4, 9))  # unbatched


@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=3),
    dict(kernel_size=(2, 3, 1), stride=(2, 1, 1), padding=(1, 0, 1), dilation=(2, 1, 1)),
    dict(kernel_size=2, groups=2, bias=False, padding="same"),
    dict(kernel_size=3, padding=1, padding_mode="reflect"),
])
def test_conv3d(kwargs):
    torch_conv, lz_conv = twins(lambda nn: nn.Conv3d(4, 6, **kwargs))
    assert repr(lz_conv) == repr(torch_conv)
    compare_modules(torch_conv, lz_conv, randn(2, 4, 5, 6, 4))


def test_conv2d_padding_modes():
    torch_conv, lz_conv = twins(lambda nn: nn.Conv2d(3, 4, 3, padding=(1, 2), padding_mode="circular"))
    compare_modules(torch_conv, lz_conv, randn(2, 3, 5, 6))


@pytest.mark.parametrize("kwargs", [
    dict(kernel_size=3),
    dict(kernel_size=3, stride=2, padding=1, output_padding=1),
    dict(kernel_size=2, stride=3, dilation=2, groups=2, bias=False, output_padding=2),
])
def test_conv_transpose2d(kwargs):
    torch_conv, lz_conv = twins(lambda nn: nn.ConvTranspose2d(4, 6, **kwargs))
    assert repr(lz_conv) == repr(torch_conv)
    assert lz_conv.weight.shape == (4, 3 if kwargs.get("groups") else 6) + lz_conv.kernel_size
    compare_modules(torch_conv, lz_conv, randn(2, 4, 5, 4))
    compare_modules(torch_conv, lz_conv, randn(4, 3, 3))  # unbatched


def test_conv_transpose1d_and_output_size():
    torch_conv, lz_conv = twins(lambda nn: nn.ConvTranspose1d(3, 2, 3, stride=2, padding=1))
    compare_modules(torch_conv, lz_conv, randn(2, 3, 5))
    x = randn(2, 3, 5)
    assert_same(lz_conv(lz.tensor(x), output_size=[10]), torch_conv(torch.tensor(x), output_size=[10]))
    with pytest.raises(ValueError, match="valid sizes range from 9 to 10"):
        lz_conv(lz.tensor(x), output_size=[12])


def test_functional_forms_match_torch():
    compare(lambda x, w, b: lz.nn.functional.conv1d(x, w, b, stride=2, padding=1),
            lambda x, w, b: torch.nn.functional.conv1d(x, w, b, stride=2, padding=1),
            randn(2, 3, 8), randn(5, 3, 3), randn(5))
    compare(lambda x, w: lz.nn.functional.conv3d(x, w, stride=2, dilation=(1, 2, 1)),
            lambda x, w: torch.nn.functional.conv3d(x, w, stride=2, dilation=(1, 2, 1)),
            randn(1, 2, 5, 7, 4), randn(3, 2, 2, 2, 2))
    compare(lambda x, w, b: lz.nn.functional.conv_transpose2d(x, w, b, stride=(2, 1), padding=(0, 1)),
            lambda x, w, b: torch.nn.functional.conv_transpose2d(x, w, b, stride=(2, 1), padding=(0, 1)),
            randn(2, 3, 4, 5), randn(3, 2, 3, 3), randn(2))
    compare(lambda x, w: lz.nn.functional.conv_transpose1d(x, w, stride=3, output_padding=1),
            lambda x, w: torch.nn.functional.conv_transpose1d(x, w, stride=3, output_padding=1),
            randn(2, 3, 4), randn(3, 2, 2))


def test_defaults_and_errors():
    conv = lz.nn.Conv3d(2, 4, 3)
    theirs = torch.nn.Conv3d(2, 4, 3)
    assert [(k, tuple(v.shape)) for k, v in conv.state_dict().items()] == \
        [(k, tuple(v.shape)) for k, v in theirs.state_dict().items()]
    bound = 1 / np.sqrt(2 * 27)  # Kaiming-uniform(a=sqrt(5)) and the bias: both within 1/sqrt(fan_in)
    assert np.abs(conv.weight.detach().numpy()).max() <= bound and np.abs(conv.bias.detach().numpy()).max() <= bound
    with pytest.raises(ValueError, match="padding_mode must be one of"):
        lz.nn.Conv1d(2, 2, 3, padding_mode="mirror")
    with pytest.raises(ValueError, match="Only \"zeros\" padding mode"):
        lz.nn.ConvTranspose2d(2, 2, 3, padding_mode="reflect")
    with pytest.raises(ValueError, match="output padding must be smaller"):
        lz.nn.functional.conv_transpose2d(lz.randn(1, 2, 3, 3), lz.randn(2, 2, 3, 3), output_padding=1)
    with pytest.raises(RuntimeError, match="expected a 3-D .* or 4-D .* input, got a 2-D"):
        lz.nn.functional.conv2d(lz.randn(3, 3), lz.randn(2, 1, 1, 1))
    with pytest.raises(RuntimeError, match="the input has 3 channels"):
        lz.nn.functional.conv3d(lz.randn(1, 3, 4, 4, 4), lz.randn(2, 2, 1, 1, 1))


@pytest.mark.parametrize("make, shape", [
    (lambda: lz.nn.Conv1d(3, 4, 3, padding=1, padding_mode="reflect"), (2, 3, 8)),
    (lambda: lz.nn.Conv3d(2, 3, 2, stride=(1, 2, 2), padding=1), (2, 2, 4, 5, 5)),
    (lambda: lz.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1), (2, 3, 4, 4)),
    (lambda: lz.nn.ConvTranspose1d(3, 2, 4, stride=2), (2, 3, 5)),
    (lambda: lz.nn.Sequential(lz.nn.Conv1d(3, 4, 3), lz.nn.MaxPool1d(2), lz.nn.AvgPool1d(2), lz.nn.AdaptiveAvgPool1d(1)),
     (2, 3, 12)),
])
def test_traces_and_exports(make, shape):
    lz.manual_seed(0)
    assert_traces_and_exports(make(), RNG.standard_normal(shape).astype(np.float32))


@pytest.mark.parametrize("make, shape", [
    (lambda nn: nn.MaxPool1d(3, 2, 1), (2, 3, 9)),
    (lambda nn: nn.MaxPool1d(2, dilation=2, ceil_mode=True), (3, 8)),
    (lambda nn: nn.AvgPool1d(3, padding=1, count_include_pad=False), (2, 3, 7)),
    (lambda nn: nn.AdaptiveAvgPool1d(3), (2, 3, 7)),
])
def test_pools_1d(make, shape):
    torch_pool, lz_pool = twins(make)
    assert repr(lz_pool) == repr(torch_pool)
    compare_modules(torch_pool, lz_pool, randn(*shape))
