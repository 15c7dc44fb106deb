"""lz.jit.trace: the traced graph equals eager execution at the example's and other batch sizes,
its text is MLIR that parses back, it follows the module's weights, and what cannot be traced
fails clearly at the user's line."""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import numpy as np
import pytest

import lezero as lz
from lezero import nn
from lezero.codegen.schedule import WEIGHT_ARGUMENTS_ATTR
from lezero.ir import parse_module, print_module
from lezero.ir.interpreter import interpret
from lezero.jit import TraceError, TracedModule


class SimpleMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 256)
        self.fc2 = nn.Linear(256, 10)

    def forward(self, x):
        x = nn.functional.relu(self.fc1(x))
        return self.fc2(x)


class SmallCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(4 * 4 * 4, 3)

    def forward(self, x):
        return self.fc(self.pool(self.bn(self.conv(x)).relu()).flatten(1))


def eager(model, x):
    with lz.no_grad():
        return model(x).numpy()


@pytest.fixture(scope="module")
def mlp():
    lz.manual_seed(0)
    model = SimpleMLP()
    return model, lz.jit.trace(model, example_inputs=lz.randn(1, 784))


@pytest.mark.parametrize("batch", [1, 64, 7])
def test_traced_equals_eager_at_any_batch(mlp, batch):
    model, traced = mlp
    x = lz.randn(batch, 784)
    got = traced(x)
    assert isinstance(got, lz.Tensor) and got.shape == (batch, 10)
    np.testing.assert_allclose(got.numpy(), eager(model, x), rtol=1e-6, atol=1e-6)


def test_graph_is_mlir_with_a_dynamic_batch_and_named_weights(mlp):
    _, traced = mlp
    text = traced.graph
    assert "func.func @forward(%arg0: tensor<?x784xf32> {lz.name = \"input\"}" in text
    assert '{lz.name = "fc1.weight"}' in text and '{lz.name = "fc2.bias"}' in text
    assert "-> tensor<?x10xf32>" in text
    assert "lz.constant" not in text  # weights are arguments, not hex blobs
    assert print_module(parse_module(text)) == text


def test_xdsl_reads_the_graph_and_its_locations(mlp):
    xdsl_opt = pathlib.Path(sys.executable).parent / "xdsl-opt"
    xdsl_opt = str(xdsl_opt) if xdsl_opt.exists() else shutil.which("xdsl-opt")
    if xdsl_opt is None:
        pytest.skip("xdsl-opt is not installed")
    _, traced = mlp
    text = print_module(traced.module, debuginfo=True)  # what jit.save stores
    assert 'loc("' in text and "test_jit_trace.py" in text  # ops point at the model's source lines
    result = subprocess.run([xdsl_opt, "--allow-unregistered-dialect"], input=text, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def test_numpy_in_numpy_out(mlp):
    model, traced = mlp
    x = np.random.default_rng(0).standard_normal((3, 784)).astype(np.float32)
    got = traced(x)
    assert isinstance(got, np.ndarray)
    np.testing.assert_allclose(got, eager(model, lz.from_numpy(x)), rtol=1e-6, atol=1e-6)


def test_follows_the_modules_current_weights():
    lz.manual_seed(1)
    model = SimpleMLP()
    traced = lz.jit.trace(model, example_inputs=lz.randn(2, 784))
    with lz.no_grad():
        model.fc2.bias.add_(1.0)
    x = lz.randn(2, 784)
    np.testing.assert_allclose(traced(x).numpy(), eager(model, x), rtol=1e-6, atol=1e-6)


class CountingPacks:
    """A pack kernel (``PackedInput.function``, the kernel ABI) that counts its calls."""

    def __init__(self, function):
        self.function, self.packs = function, 0

    def __call__(self, pointers, begin, end):
        self.packs += 1
        self.function(pointers, begin, end)


def test_follows_every_write_to_its_weights():
    """The CPU plan keeps a traced module's matmul weights pre-packed (W_ih by the plan, W_hh by its
    loop) while their version and exposures stay the same and no other object holds their arrays
    (``TracedModule._weight_keys``): each way of writing a weight in place shows in the next call, a
    numpy array taken before the first call included, and an unchanged weight is not packed again."""
    lz.manual_seed(3)
    model = nn.LSTM(32, 32, num_layers=2)
    model.eval()
    x = lz.randn(5, 8, 32)
    traced = lz.jit.trace(model, example_inputs=x, dynamic_batch=False)
    held = model.weight_ih_l0.detach().numpy()  # taken before the first call
    optimizer = lz.optim.SGD(model.parameters(), lr=0.5)

    def check():
        with lz.no_grad():
            y, (h, c) = model(x)
        got_y, (got_h, got_c) = traced(x)
        for got, expected in ((got_y, y), (got_h, h), (got_c, c)):
            np.testing.assert_allclose(got.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)

    check()
    plan = next(iter(traced.compiled._plans.values()))
    loops = [launch.regions[0].plan.packed_inputs for launch in plan.launches if hasattr(launch, "regions")]
    assert {p.where for p in plan.packed_inputs} == {3, 7} and [len(p) for p in loops] == [1, 1]  # W_ih, W_hh
    for packed in plan.packed_inputs + loops[0] + loops[1]:
        assert packed.function is not None  # packed by the GEMM's packing routine, a kernel
        packed.function = CountingPacks(packed.function)
    before = traced(x)[0].numpy()
    held[0] += 0.25  # through the array taken before the first call
    check()
    del held
    traced(x)
    packs = [p.function.packs for p in plan.packed_inputs + loops[0] + loops[1]]
    traced(x)
    assert [p.function.packs for p in plan.packed_inputs + loops[0] + loops[1]] == packs  # nothing packed again
    model(x)[0].square().sum().backward()
    optimizer.step()  # an optimizer step
    check()
    model.weight_ih_l0.detach().numpy()[:4] *= -1.0  # a write through .numpy()
    check()
    model.weight_hh_l1.detach().numpy()[2] = 0.5  # ... of a weight a loop reads pre-packed
    check()
    with lz.no_grad():
        model.weight_ih_l1.copy_(lz.randn(128, 32))  # copy_
    check()
    model.weight_ih_l0.data.mul_(0.5)  # .data, which has a version counter of its own
    check()
    np.asarray(model.weight_ih_l1.detach())[1] = 2.0  # np.asarray: the same memory
    check()
    state = {k: v.detach().numpy() * 0.5 for k, v in model.state_dict().items()}
    model.load_state_dict({k: lz.from_numpy(v) for k, v in state.items()})  # load_state_dict
    check()
    assert not np.allclose(traced(x)[0].numpy(), before)


def test_a_traced_graph_called_without_keys_packs_its_weights_each_call():
    """Called without keys, ``traced.compiled`` packs every weight before each call (the pack
    kernels) and ``lz.compile(traced.module)`` reads them as plain inputs (each GEMM packs as it
    reads): both follow weights that change between calls, as the traced module does."""
    lz.manual_seed(4)
    model = nn.LSTM(24, 24, num_layers=2)
    model.eval()
    x = lz.randn(4, 8, 24)
    traced = lz.jit.trace(model, example_inputs=x, dynamic_batch=False)
    plain = lz.compile(traced.module)
    weights = [t.detach().numpy().copy() for _, t in traced.named_tensors]
    for scale in (1.0, -0.5):
        arguments = [x.numpy()] + [w * scale for w in weights]
        expected = interpret(traced.module, traced.entry, *arguments)
        for run in (traced.compiled, plain):
            for got, want in zip(run(*arguments), expected):
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    (kept,), (read,) = traced.compiled._plans.values(), plain._plans.values()
    assert {p.where for p in kept.packed_inputs} == {3, 7} and not read.packed_inputs  # W_ih
    assert WEIGHT_ARGUMENTS_ATTR in traced.func.attributes and WEIGHT_ARGUMENTS_ATTR not in plain.func.attributes


def test_cnn_with_flatten_and_batchnorm_in_eval_mode():
    lz.manual_seed(2)
    model = SmallCNN()
    with lz.no_grad():
        model.bn.running_mean.copy_(lz.randn(4) * 0.1)
        model.bn.running_var.copy_(lz.rand(4) + 0.5)
    model.eval()
    traced = lz.jit.trace(model, lz.randn(2, 1, 8, 8))
    assert "tensor<?x1x8x8xf32>" in traced.graph
    for batch in (2, 5):
        x = lz.randn(batch, 1, 8, 8)
        np.testing.assert_allclose(traced(x).numpy(), eager(model, x), rtol=1e-5, atol=1e-5)


def test_functions_tuples_and_dicts_and_constants():
    w = lz.randn(4, 3)

    def f(x, y):
        return {"sum": x @ w + 2.0, "pair": (y.exp(), x.sum(dim=1))}

    traced = lz.jit.trace(f, (lz.randn(5, 4), lz.randn(5)))
    x, y = lz.randn(6, 4), lz.randn(6)
    got, want = traced(x, y), f(x, y)
    assert set(got) == {"sum", "pair"} and isinstance(got["pair"], tuple)
    np.testing.assert_allclose(got["sum"].numpy(), want["sum"].numpy(), rtol=1e-6)
    np.testing.assert_allclose(got["pair"][0].numpy(), want["pair"][0].numpy(), rtol=1e-6)
    np.testing.assert_allclose(got["pair"][1].numpy(), want["pair"][1].numpy(), rtol=1e-6)
    assert "lz.constant" in traced.graph  # a plain function's captured tensor is baked in


def test_data_dependent_control_flow_is_a_clear_error():
    class Branchy(nn.Module):
        def forward(self, x):
            if x.sum() > 0:  # depends on the data: a trace would bake one branch in
                return x * 2
            return x

    with pytest.raises(TraceError) as info:
        lz.jit.trace(Branchy(), lz.randn(2, 3))
    text = str(info.value)
    assert "data-dependent Python control flow" in text and "bool()" in text
    assert "test_jit_trace.py" in text and "if x.sum() > 0" in text  # the user's line, with a caret
    assert bool(lz.tensor(1.0) > 0)  # outside a trace tensors convert as usual

    with pytest.raises(TraceError, match=r"\.item\(\)"):
        lz.jit.trace(lambda x: x * x.max().item(), lz.randn(3))


def test_baking_the_batch_size_in_fails_at_trace_time():
    def f(x):
        return x + lz.ones(x.shape[0], 10)  # a constant of the example's batch size

    with pytest.raises(TraceError, match="bakes the batch size 3 in"):
        lz.jit.trace(f, lz.randn(3, 10))
    traced = lz.jit.trace(f, lz.randn(3, 10), dynamic_batch=False)
    assert "tensor<3x10xf32>" in traced.graph


def test_a_batch_size_baked_into_a_result_fails_at_trace_time():
    # the baked size never meets a dynamic dim, so only the result's type shows it; before, the
    # traced function returned 2 rows at every batch size
    def f(x):
        return lz.zeros_like(x[:, 0, :1]).expand(x.shape[0], 4) + 1.0

    with pytest.raises(TraceError, match="bakes the batch size 2 in: result 0") as info:
        lz.jit.trace(f, lz.randn(2, 3, 5))
    assert "test_jit_trace.py" in str(info.value) and "expand(x.shape[0], 4)" in str(info.value)
    traced = lz.jit.trace(f, lz.randn(2, 3, 5), dynamic_batch=False)
    assert traced(lz.randn(2, 3, 5)).shape == (2, 4)


def test_batchnorm_in_training_mode_updates_its_statistics_at_every_call():
    lz.manual_seed(3)
    model, twin = SmallCNN(), SmallCNN()
    twin.load_state_dict(model.state_dict())
    before = model.bn.running_mean.numpy().copy()
    x = lz.randn(2, 1, 8, 8)
    traced = lz.jit.trace(model, x)
    np.testing.assert_array_equal(model.bn.running_mean.numpy(), before)  # tracing changed nothing
    assert int(model.bn.num_batches_tracked.item()) == 0
    assert '{lz.name = "bn.running_var"}' in traced.graph
    for batch in (x, lz.randn(5, 1, 8, 8)):  # also at another batch size
        with lz.no_grad():
            np.testing.assert_allclose(traced(batch).numpy(), twin(batch).numpy(), rtol=1e-5, atol=1e-5)
    for name in ("running_mean", "running_var"):
        np.testing.assert_allclose(getattr(model.bn, name).numpy(), getattr(twin.bn, name).numpy(), rtol=1e-6)
    assert int(model.bn.num_batches_tracked.item()) == 2


def test_batchnorm_cumulative_average_follows_eager_and_torch():
    import torch

    eager, traced_bn, peer = nn.BatchNorm2d(3, momentum=None), nn.BatchNorm2d(3, momentum=None), \
        torch.nn.BatchNorm2d(3, momentum=None)
    xs = [np.random.default_rng(i).standard_normal((4, 3, 5, 5)).astype(np.float32) for i in range(3)]
    traced = lz.jit.trace(traced_bn, lz.tensor(xs[0]))
    for x in xs:
        eager(lz.tensor(x)), traced(lz.tensor(x)), peer(torch.tensor(x))
    np.testing.assert_array_equal(traced_bn.running_var.numpy(), eager.running_var.numpy())
    np.testing.assert_allclose(eager.running_var.numpy(), peer.running_var.numpy(), rtol=1e-6)
    assert int(traced_bn.num_batches_tracked.item()) == 3


def test_in_place_ops_on_traced_values_continue_the_graph():
    lz.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=True), nn.Linear(8, 2))
    x = lz.randn(3, 4)
    with lz.no_grad():  # no grad: relu_ writes in place, also while traced
        want = model(x).numpy()
        traced = lz.jit.trace(model, x)
    assert "lz.relu" in traced.graph
    np.testing.assert_allclose(traced(x).numpy(), want, rtol=1e-6)

    def scaled(a):
        h = a * 2
        h.add_(10).mul_(3)
        return h

    np.testing.assert_allclose(lz.jit.trace(scaled, x)(x).numpy(), (x.numpy() * 2 + 10) * 3, rtol=1e-6)
    with pytest.raises(TraceError, match="neither a parameter nor a buffer"):
        lz.jit.trace(lambda a: a.add_(1), lz.randn(3))


def test_reading_a_buffer_after_its_update_is_a_clear_error():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("seen", lz.zeros(3))

        def forward(self, x):
            with lz.no_grad():
                self.seen.add_(1)
            return x * self.seen

    with pytest.raises(TraceError, match="reads seen after an in-place update"):
        lz.jit.trace(Counter(), lz.randn(2, 3))


def test_dropout_draws_new_masks_every_call_as_the_eager_loop_does():
    lz.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Dropout(0.5), nn.Linear(64, 4))
    batches = [lz.randn(6, 8)] * 3 + [lz.randn(9, 8)]  # the last at another batch size
    lz.manual_seed(11)
    with lz.no_grad():
        want = [model(x).numpy() for x in batches]
    lz.manual_seed(11)
    traced = lz.jit.trace(model, batches[0])
    assert 'tensor<2xi64> {lz.name = "rng"}' in traced.graph and "lz.random_uniform" in traced.graph
    got = [traced(x).numpy() for x in batches]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    assert not np.allclose(got[0], got[1])  # a new mask at every call
    with pytest.raises(TypeError, match="random numbers or updates buffers"):
        lz.jit.save(traced, "unused.lzt")


def test_repr_and_wrong_inputs(mlp):
    _, traced = mlp
    assert isinstance(traced, TracedModule) and "@forward" in repr(traced)
    with pytest.raises(TypeError, match="takes 1 input"):
        traced(lz.randn(2, 784), lz.randn(2, 784))
    with pytest.raises(Exception, match="784"):
        traced(lz.randn(2, 783))


def test_numpy_drawn_random_numbers_in_a_trace_are_an_error_not_a_frozen_draw():
    """``lz.rand`` draws data with numpy: traced, one draw would repeat at every call. Dropout's
    random op is new at every call; these say so, naming the line."""
    def noisy(x):
        return x + lz.rand(x.shape)

    with pytest.raises(lz.OperatorError, match="frozen into the graph") as e:
        lz.jit.trace(noisy, lz.randn(3, 4))
    assert "test_jit_trace.py" in str(e.value.location.describe())
    assert noisy(lz.randn(3, 4)).shape == (3, 4)  # eager: a new draw per call, as ever
