"""GroupNorm, InstanceNorm1d/2d/3d and RMSNorm against torch in float64: outputs, input and
parameter gradients, running statistics in train and eval mode; functional forms; traces and
ONNX exports."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lezero as lz

from support.eager_testing import assert_same, compare
from support.layer_testing import assert_traces_and_exports, compare_modules, twins

RNG = np.random.default_rng(0)


def randn(*shape):
    return RNG.standard_normal(shape) * 2 + 0.5


@pytest.mark.parametrize("make, shape", [
    (lambda nn: nn.GroupNorm(2, 6), (3, 6, 5)),
    (lambda nn: nn.GroupNorm(3, 6, eps=1e-3, affine=False), (2, 6, 3, 4)),
    (lambda nn: nn.GroupNorm(1, 4), (2, 4)),
    (lambda nn: nn.RMSNorm(5), (3, 4, 5)),
    (lambda nn: nn.RMSNorm((4, 5), eps=1e-4), (3, 4, 5)),
    (lambda nn: nn.RMSNorm(5, elementwise_affine=False), (2, 5)),
    (lambda nn: nn.InstanceNorm1d(3, affine=True), (2, 3, 6)),
    (lambda nn: nn.InstanceNorm2d(3), (2, 3, 4, 5)),
    (lambda nn: nn.InstanceNorm3d(2, affine=True), (2, 2, 3, 4, 3)),
    (lambda nn: nn.InstanceNorm1d(3), (3, 6)),  # unbatched
])
def test_modules_match_torch(make, shape):
    torch_module, lz_module = twins(make)
    torch_module.weight.data.uniform_() if getattr(torch_module, "weight", None) is not None else None
    if getattr(torch_module, "bias", None) is not None:
        torch_module.bias.data.uniform_()
    lz_module.load_state_dict({k: v.detach().numpy() for k, v in torch_module.state_dict().items()})
    assert repr(lz_module) == repr(torch_module)
    compare_modules(torch_module, lz_module, randn(*shape))


@pytest.mark.parametrize("momentum", [0.1, None])
def test_instance_norm_running_statistics(momentum):
    torch_module, lz_module = twins(lambda nn: nn.InstanceNorm2d(3, momentum=momentum, affine=True,
                                                                 track_running_stats=True))
    assert list(lz_module.state_dict()) == ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]
    for _ in range(2):
        compare_modules(torch_module, lz_module, randn(2, 3, 4, 4))
    assert_same(lz_module.running_mean, torch_module.running_mean, what="running_mean")
    assert_same(lz_module.running_var, torch_module.running_var, what="running_var")
    torch_module.eval(), lz_module.eval()
    compare_modules(torch_module, lz_module, randn(2, 3, 4, 4))  # normalized by the running statistics


def test_functional_forms_match_torch():
    compare(lambda x, w, b: lz.nn.functional.group_norm(x, 2, w, b, eps=1e-3),
            lambda x, w, b: torch.nn.functional.group_norm(x, 2, w, b, eps=1e-3),
            randn(2, 4, 3, 3), randn(4), randn(4))
    compare(lambda x, w: lz.nn.functional.rms_norm(x, (3,), w), lambda x, w: torch.nn.functional.rms_norm(x, (3,), w),
            randn(4, 3), randn(3))
    compare(lambda x: lz.nn.functional.instance_norm(x), lambda x: torch.nn.functional.instance_norm(x),
            randn(2, 3, 5))


def test_errors():
    with pytest.raises(ValueError, match="num_channels must be divisible by num_groups"):
        lz.nn.GroupNorm(4, 6)
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        lz.nn.functional.group_norm(lz.ones(2, 6, 3), 4)
    with pytest.raises(RuntimeError, match=r"Given normalized_shape=\[4\]"):
        lz.nn.RMSNorm(4)(lz.ones(2, 3))
    with pytest.raises(ValueError, match=r"expected 3D or 4D input \(got 2D input\)"):
        lz.nn.InstanceNorm2d(3)(lz.ones(2, 3))


@pytest.mark.parametrize("make, shape", [
    (lambda: lz.nn.GroupNorm(2, 4), (2, 4, 3, 3)),
    (lambda: lz.nn.RMSNorm(6), (2, 5, 6)),
    (lambda: lz.nn.InstanceNorm1d(3, affine=True), (2, 3, 7)),
])
def test_traces_and_exports(make, shape):
    assert_traces_and_exports(make(), RNG.standard_normal(shape).astype(np.float32))
