"""``lz.autocast`` on eager code: every op of autocast's lists gives the dtype ``torch.autocast("cpu")``
gives, with values within the low type's tolerance of torch's; gradients of f32 leaves come back
f32; regions nest, turn off, decorate, and leave other devices' tensors alone."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import lezero as lz


def _cases(lib, arrays):
    F = lib.nn.functional
    a = {k: lib.tensor(v) for k, v in arrays.items()}
    x, w, b, t = a["x"], a["w"], a["b"], a["t"]
    return {
        "matmul": lambda: x @ w, "mm": lambda: lib.mm(x, w), "bmm": lambda: lib.bmm(a["b1"], a["b2"]),
        "linear": lambda: F.linear(x, w, b), "conv2d": lambda: F.conv2d(a["image"], a["kernel"], a["c"]),
        "addmm": lambda: lib.addmm(b, x, w), "baddbmm": lambda: lib.baddbmm(a["b3"], a["b1"], a["b2"]),
        "scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(a["q"], a["q"], a["q"]),
        "softmax": lambda: F.softmax(x @ w, -1), "log_softmax": lambda: F.log_softmax(x @ w, -1),
        "layer_norm": lambda: F.layer_norm(x @ w, (8,), a["g"], b),
        "batch_norm": lambda: F.batch_norm(x @ w, None, None, a["g"], b, training=True),
        "group_norm": lambda: F.group_norm((x @ w).reshape(4, 8, 1), 2, a["g"], b),
        "sum": lambda: (x @ w).sum(), "mean": lambda: (x @ w).mean(), "exp": lambda: (x @ w).exp(),
        "log": lambda: (x @ w).abs().log(), "pow": lambda: (x @ w) ** 2, "cumsum": lambda: (x @ w).cumsum(0),
        "prod": lambda: (x @ w).prod(1), "relu": lambda: F.relu(x @ w), "add": lambda: x @ w + x,
        "mse_loss": lambda: F.mse_loss(x @ w, x), "l1_loss": lambda: F.l1_loss(x @ w, x),
        "smooth_l1_loss": lambda: F.smooth_l1_loss(x @ w, x), "cross_entropy": lambda: F.cross_entropy(x @ w, t),
        "nll_loss": lambda: F.nll_loss(F.log_softmax(x @ w, 1), t),
        "binary_cross_entropy_with_logits": lambda: F.binary_cross_entropy_with_logits(x @ w, a["targets"]),
    }


def _arrays():
    rng = np.random.default_rng(0)
    shapes = {"x": (4, 8), "w": (8, 8), "b": (8,), "g": (8,), "b1": (2, 3, 4), "b2": (2, 4, 5), "b3": (2, 3, 5),
              "image": (1, 2, 5, 5), "kernel": (3, 2, 3, 3), "c": (3,), "q": (1, 2, 4, 8)}
    arrays = {k: (rng.standard_normal(s) * 0.5).astype(np.float32) for k, s in shapes.items()}
    arrays["t"] = np.array([0, 1, 2, 3])
    arrays["targets"] = (rng.random((4, 8)) > 0.5).astype(np.float32)
    return arrays


CASES = list(_cases(lz, _arrays()))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("name", CASES)
def test_each_op_gives_torch_autocasts_dtype_and_values(name, dtype):
    arrays = _arrays()
    with lz.autocast("cpu", dtype=getattr(lz, dtype)):
        ours = _cases(lz, arrays)[name]()
    with torch.autocast("cpu", dtype=getattr(torch, dtype)):
        theirs = _cases(torch, arrays)[name]()
    assert ours.dtype.name == str(theirs.dtype).removeprefix("torch."), name
    low_result = ours.dtype.name == dtype
    tolerance = (2e-2 if dtype == "bfloat16" else 4e-3) * (4 if low_result else 1)
    expected = theirs.detach().float().numpy()
    np.testing.assert_allclose(ours.detach().float().numpy(), expected, rtol=tolerance,
                               atol=tolerance * max(1.0, float(np.abs(expected).max())))


def test_gradients_of_f32_leaves_are_f32_and_near_torchs():
    arrays = _arrays()
    grads = []
    for lib, region in ((lz, lz.autocast("cpu")), (torch, torch.autocast("cpu", dtype=torch.bfloat16))):
        x, w = lib.tensor(arrays["x"]), lib.tensor(arrays["w"], requires_grad=True)
        with region:
            loss = lib.nn.functional.cross_entropy(lib.nn.functional.linear(x, w) .relu(), lib.tensor(arrays["t"]))
        loss.backward()
        grads.append(w.grad)
    assert grads[0].dtype == lz.float32
    np.testing.assert_allclose(grads[0].numpy(), grads[1].numpy(), atol=2e-2 * float(grads[1].abs().max()))


def test_regions_nest_turn_off_decorate_and_skip_other_devices():
    x = lz.randn(4, 4)
    with lz.autocast("cpu"):
        assert (x @ x).dtype == lz.bfloat16 and lz.is_autocast_enabled("cpu")
        with lz.autocast("cpu", enabled=False):
            assert (x @ x).dtype == lz.float32 and not lz.is_autocast_enabled()
        with lz.autocast("cpu", dtype=lz.float16):
            assert (x @ x).dtype == lz.float16
        assert (x @ x).dtype == lz.bfloat16
    assert (x @ x).dtype == lz.float32
    with lz.amp.autocast("cuda"):  # a cuda region leaves host tensors alone, as torch's does
        assert (x @ x).dtype == lz.float32 and lz.get_autocast_dtype("cuda") == lz.float16

    @lz.autocast("cpu")
    def low(a):
        return a @ a
    assert low(x).dtype == lz.bfloat16 and (x @ x).dtype == lz.float32


def test_bad_arguments_name_what_is_allowed():
    with pytest.raises(ValueError, match="device_type must be one of 'cpu', 'cuda'"):
        lz.autocast("tpu")
    with pytest.raises(ValueError, match="dtype must be lz.bfloat16 or lz.float16"):
        lz.autocast("cpu", dtype=lz.float64)


def test_a_model_traced_inside_a_region_keeps_its_types_and_equals_eager():
    """``jit.trace`` inside ``lz.autocast`` runs the autocast pass on the recorded graph: the same
    types and values as the eager region (a bf16 tensor made inside the forward is a bf16 constant)."""
    class Model(lz.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = lz.nn.Linear(8, 8)

        def forward(self, x):
            h = self.fc(x)
            return lz.nn.functional.softmax(h * lz.full((8,), 0.5, dtype=h.dtype), -1)

    lz.manual_seed(0)
    model, x = Model(), lz.randn(4, 8)
    with lz.autocast("cpu"):
        traced = lz.jit.trace(model, example_inputs=x)
        eager = model(x)
    assert "tensor<?x8xbf16>" in traced.graph and eager.dtype == lz.bfloat16
    out = traced(x)
    assert out.dtype == lz.bfloat16
    np.testing.assert_array_equal(out.float().numpy(), eager.detach().float().numpy())
