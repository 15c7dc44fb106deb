"""autodiff: every op's gradient rule against central finite differences (float64) and against
torch autograd; second derivatives; whole models (an MLP, a small CNN); the pass, its options and
its errors; gradient functions compiled for the CPU (elementwise, an MLP, a CNN)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import lezero
from lezero.ir import Builder, FuncOp, FunctionType, IRError, ModuleOp, Operation, interpret, registered_ops
from lezero.ir.gradient import no_gradient
from lezero.ir.opdef import COMPOSITE
from lezero.ir.printer import print_module
from lezero.ir.types import tensor
from lezero.ir.verifier import verify
from lezero.passes import run_pipeline
from lezero.passes.autodiff import differentiate

from support.op_samples import SAMPLES, Sample
from pass_testing import build, op_names

# Ops through which no gradient flows (their rule is ``no_gradient``): rounding, logic,
# comparisons, indices, constants.
NOT_DIFFERENTIABLE = {"lz.floor", "lz.ceil", "lz.sign", "lz.not", "lz.and", "lz.or", "lz.cmp", "lz.argmax",
                      "lz.constant", "lz.round", "lz.xor", "lz.shift_left", "lz.shift_right", "lz.bitcast",
                      "lz.random_uniform"}
# Ops with no rule at all, and why.
NO_RULE = {"lz.kernel": "made after autodiff, by the fuse pass",
           "lz.yield": "the terminator of regions (lz.kernel, lz.for, lz.while, lz.if)",
           "lz.max_pool2d_grad": "second derivatives through max pooling are not supported yet",
           "lz.topk": "two results: the autodiff pass differentiates one-result ops"}
# issue 14: bucket-all-reduce makes the split form after autodiff (the gradient passes lz.all_reduce)
NO_RULE.update({"lz.all_reduce_start": "made after autodiff by bucket-all-reduce",
                "lz.all_reduce_wait": "made after autodiff by bucket-all-reduce"})


def test_every_op_has_a_rule_or_is_listed():
    for name, definition in sorted(registered_ops().items()):
        if definition.has_trait(COMPOSITE):
            assert definition.grad is None, f"{name} is decomposed before autodiff and needs no rule"
        elif name in NO_RULE:
            assert definition.grad is None, name
        elif name in NOT_DIFFERENTIABLE:
            assert definition.grad is no_gradient, name
        else:
            assert callable(definition.grad) and definition.grad is not no_gradient, \
                f"{name} has no gradient rule: add one to its definition, or list it here"


# --- the oracle: PyTorch's version of each op ------------------------------------------------------

def _torch_slice(x, attrs):
    from lezero.ir.dialect.data_movement import SliceOp
    from lezero.ir.opdef import lookup

    for axis, s in enumerate(SliceOp.slices(lookup("lz.slice").attrs(_attributes("lz.slice", attrs)), x.dim())):
        x = torch.index_select(x, axis, torch.tensor(list(range(*s.indices(x.shape[axis]))), dtype=torch.long))
    return x


def _torch_cumulative(x, attrs):
    axis = attrs["axis"]
    if attrs.get("reverse"):
        x = x.flip(axis)
    if attrs["combine"] == "mul":  # exclusive: the running product shifted one along, from 1
        y = torch.cumprod(x, axis)
        if attrs.get("exclusive"):
            y = torch.cat([torch.ones_like(y.narrow(axis, 0, 1)), y.narrow(axis, 0, y.shape[axis] - 1)], axis)
    else:
        y = torch.cumsum(x, axis)
        if attrs.get("exclusive"):
            y = y - x
    return y.flip(axis) if attrs.get("reverse") else y


def _torch_scatter_nd(data, indices, updates, attrs):
    out = data.clone()
    k = indices.shape[-1]
    for position in np.ndindex(*indices.shape[:-1]):
        where = tuple(int(j) for j in indices[position])
        where = tuple(j % n for j, n in zip(where, data.shape[:k]))
        if attrs.get("reduction", "none") == "add":
            out[where] = out[where] + updates[position]
        else:
            out[where] = updates[position]
    return out


def _torch_pad(x, attrs):
    pads, r = attrs["pads"], x.dim()
    widths = [w for axis in reversed(range(r)) for w in (pads[axis], pads[r + axis])]
    return F.pad(x, widths, value=attrs.get("value", 0.0))


def _torch_gather(x, indices, attrs):
    axis = attrs.get("axis", 0) % x.dim()
    idx = torch.where(indices < 0, indices + x.shape[axis], indices).long()
    picked = torch.index_select(x, axis, idx.reshape(-1))
    return picked.reshape(x.shape[:axis] + idx.shape + x.shape[axis + 1:])


def _symmetric(pads):
    t, l, b, r = pads
    assert (t, l) == (b, r), "torch pads symmetrically"
    return (t, l)


def _torch_conv(x, w, attrs):
    t, l, b, r = attrs.get("pads", (0, 0, 0, 0))
    return F.conv2d(F.pad(x, (l, r, t, b)), w, stride=attrs.get("strides", 1), dilation=attrs.get("dilations", 1),
                    groups=attrs.get("groups", 1))


def _torch_conv_blocked(attrs, x, w, bias, *residual):
    """lz.conv2d_blocked in torch: the blocked input as NCHW, conv, bias, blocked again, residual, relu."""
    n, cb, h, wd, c = x.shape
    plain = x.permute(0, 1, 4, 2, 3).reshape(n, cb * c, h, wd)[:, :w.shape[1]]
    y = _torch_conv(plain, w, attrs)
    y = F.pad(y, (0, 0, 0, 0, 0, bias.shape[0] - w.shape[0])) + bias.reshape(1, -1, 1, 1)
    y = y.reshape(n, -1, c, *y.shape[2:]).permute(0, 1, 3, 4, 2)
    y = y + residual[0] if residual else y
    return torch.relu(y) if attrs.get("relu") else y


def _reduce(fn):
    def run(attrs, x):
        axes = attrs.get("axes") or list(range(x.dim()))
        return fn(x, [a % x.dim() for a in axes], attrs.get("keepdims", False))
    return run


def _prod(x, axes, keepdim):
    for a in sorted(axes, reverse=True):
        x = torch.prod(x, a, keepdim=keepdim)
    return x


_TORCH_DTYPES = {"f16": torch.float16, "f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16}

TORCH = {
    "lz.neg": lambda a, x: -x, "lz.abs": lambda a, x: x.abs(), "lz.exp": lambda a, x: x.exp(),
    "lz.log": lambda a, x: x.log(), "lz.sqrt": lambda a, x: x.sqrt(), "lz.rsqrt": lambda a, x: x.rsqrt(),
    "lz.tanh": lambda a, x: x.tanh(), "lz.sigmoid": lambda a, x: x.sigmoid(), "lz.relu": lambda a, x: x.relu(),
    "lz.erf": lambda a, x: torch.erf(x), "lz.sin": lambda a, x: x.sin(), "lz.cos": lambda a, x: x.cos(),
    "lz.floor": lambda a, x: x.floor(), "lz.ceil": lambda a, x: x.ceil(), "lz.sign": lambda a, x: x.sign(),
    "lz.reciprocal": lambda a, x: x.reciprocal(),
    "lz.tan": lambda a, x: x.tan(), "lz.asin": lambda a, x: x.asin(), "lz.acos": lambda a, x: x.acos(),
    "lz.atan": lambda a, x: x.atan(), "lz.sinh": lambda a, x: x.sinh(), "lz.cosh": lambda a, x: x.cosh(),
    "lz.asinh": lambda a, x: x.asinh(), "lz.acosh": lambda a, x: x.acosh(), "lz.atanh": lambda a, x: x.atanh(),
    "lz.round": lambda a, x: x.round(),
    "lz.rem": lambda a, x, y: torch.fmod(x, y),
    "lz.cumulative": lambda a, x: _torch_cumulative(x, a),
    "lz.scatter_nd": lambda a, d, i, u: _torch_scatter_nd(d, i, u, a),
    "lz.gelu": lambda a, x: F.gelu(x, approximate=a.get("approximate", "none")),
    "lz.cast": lambda a, x: x.to(_TORCH_DTYPES[a["to"]]),
    "lz.add": lambda a, x, y: x + y, "lz.sub": lambda a, x, y: x - y, "lz.mul": lambda a, x, y: x * y,
    "lz.div": lambda a, x, y: x / y, "lz.pow": lambda a, x, y: torch.pow(x, y),
    "lz.max": lambda a, x, y: torch.maximum(x, y), "lz.min": lambda a, x, y: torch.minimum(x, y),
    "lz.select": lambda a, c, x, y: torch.where(c, x, y),
    "lz.matmul": lambda a, x, y: torch.matmul(x, y),
    "lz.attention": lambda a, q, k, v, *mask: torch.nn.functional.scaled_dot_product_attention(
        q, k, v, attn_mask=mask[0] if mask else None, scale=a["scale"]),
    "lz.conv2d": lambda a, x, w: _torch_conv(x, w, a),
    "lz.conv2d_blocked": _torch_conv_blocked,
    "lz.max_pool2d_blocked": lambda a, x: F.max_pool2d(x.permute(0, 1, 4, 2, 3).flatten(1, 2), a["kernel"],
                                                       a.get("strides", 1), _symmetric(a.get("pads", (0,) * 4)))
    .unflatten(1, (x.shape[1], x.shape[4])).permute(0, 1, 3, 4, 2),
    "lz.max_pool2d": lambda a, x: F.max_pool2d(x, a["kernel"], a.get("strides", 1), _symmetric(a.get("pads", (0,) * 4)),
                                               a.get("dilations", 1), ceil_mode=a.get("ceil_mode", False)),
    "lz.avg_pool2d": lambda a, x: F.avg_pool2d(x, a["kernel"], a.get("strides", 1), _symmetric(a.get("pads", (0,) * 4)),
                                               ceil_mode=a.get("ceil_mode", False),
                                               count_include_pad=a.get("count_include_pad", False)),
    "lz.reduce_sum": _reduce(lambda x, axes, k: torch.sum(x, axes, keepdim=k)),
    "lz.reduce_mean": _reduce(lambda x, axes, k: torch.mean(x, axes, keepdim=k)),
    "lz.reduce_max": _reduce(lambda x, axes, k: torch.amax(x, axes, keepdim=k)),
    "lz.reduce_min": _reduce(lambda x, axes, k: torch.amin(x, axes, keepdim=k)),
    "lz.reduce_prod": _reduce(_prod),
    "lz.reshape": lambda a, x: x.reshape(a["shape"]),
    "lz.transpose": lambda a, x: x.permute(a["perm"]) if a.get("perm") else x.permute(*reversed(range(x.dim()))),
    "lz.broadcast_to": lambda a, x: torch.broadcast_to(x, a["shape"]),
    "lz.slice": lambda a, x: _torch_slice(x, a),
    "lz.as_strided": lambda a, x: torch.as_strided(x.contiguous().reshape(-1), a["shape"], a["strides"],
                                                   a.get("offset", 0)),
    "lz.concat": lambda a, *xs: torch.cat(xs, a["axis"]),
    "lz.pad": lambda a, x: _torch_pad(x, a),
    "lz.gather": lambda a, x, i: _torch_gather(x, i, a),
    "lz.softmax": lambda a, x: torch.softmax(x, a.get("axis", -1)),
    "lz.log_softmax": lambda a, x: torch.log_softmax(x, a.get("axis", -1)),
    "lz.layer_norm": None, "lz.batch_norm": None,  # below, by hand
}


def _attributes(name, attrs):
    from lezero.ir.opdef import lookup

    return lookup(name).make_attributes(attrs)


def _torch_layer_norm(a, x, scale, bias):
    axis = a.get("axis", -1) % x.dim()
    dims = list(range(axis, x.dim()))
    mean = x.mean(dims, keepdim=True)
    var = ((x - mean) ** 2).mean(dims, keepdim=True)
    return (x - mean) / torch.sqrt(var + a.get("epsilon", 1e-5)) * scale + bias


def _torch_batch_norm(a, x, scale, bias, mean, var):
    # by hand: torch's batch_norm does not differentiate its running statistics
    column = (-1,) + (1,) * (x.dim() - 2)
    scale, bias, mean, var = (p.reshape(column) for p in (scale, bias, mean, var))
    return (x - mean) / torch.sqrt(var + a.get("epsilon", 1e-5)) * scale + bias


TORCH["lz.layer_norm"] = _torch_layer_norm
TORCH["lz.batch_norm"] = _torch_batch_norm
TORCH["lz.transfer"] = lambda a, x: x.clone()  # a copy to another device: the identity


# --- checking one function's gradient -----------------------------------------------------------------

def _is_float(a: np.ndarray) -> bool:
    return a.dtype.kind == "f"


def _as_f64(arrays):
    return [a.astype(np.float64) if _is_float(a) else a for a in arrays]


def _cotangents(module, name, rng):
    func = module.lookup(name)
    return [rng.standard_normal(t.shape).astype(t.element_type.numpy_dtype) if t.element_type.is_float
            else np.zeros(t.shape, t.element_type.numpy_dtype) for t in func.function_type.results]


def _outputs(module, name, arrays):
    out = interpret(module, name, *arrays)
    return list(out) if isinstance(out, tuple) else [out]


def gradients(module, name, arrays, cotangents, wrt):
    """``@name_grad`` built (if needed) and run: the gradients of ``sum(cotangent * result)``."""
    if name + "_grad" not in module:
        grad = differentiate(module, name, wrt)
        verify(module)
        assert len(grad.function_type.results) == len(cotangents) + len(wrt)
    out = _outputs(module, name + "_grad", list(arrays) + list(cotangents))
    forward = _outputs(module, name, arrays)
    for got, want in zip(out, forward):  # the forward results come first (composites decomposed)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    return out[len(cotangents):]


def finite_difference_check(module, name, arrays, cotangents, wrt, grads, rng, eps=1e-6, directions=3):
    """Central differences of ``L = sum(cotangent * f(args))`` along random directions, against
    the directional derivative ``<grad, direction>``."""
    def loss(args):
        return sum(float(np.sum(c.astype(np.float64) * o.astype(np.float64)))
                   for c, o in zip(cotangents, _outputs(module, name, args)))

    for i, g in zip(wrt, grads):
        for _ in range(directions):
            v = rng.standard_normal(arrays[i].shape)
            plus, minus = list(arrays), list(arrays)
            plus[i] = arrays[i] + eps * v
            minus[i] = arrays[i] - eps * v
            numeric = (loss(plus) - loss(minus)) / (2 * eps)
            analytic = float(np.sum(g * v))
            assert abs(numeric - analytic) <= 1e-6 * (1 + abs(analytic)), (i, numeric, analytic)


def torch_gradients(fn, arrays, cotangents, wrt):
    tensors = [torch.tensor(a, requires_grad=(i in wrt)) for i, a in enumerate(arrays)]
    outs = fn(*tensors)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    grads = torch.autograd.grad(outs, [tensors[i] for i in wrt], [torch.from_numpy(c) for c in cotangents],
                                allow_unused=True)
    return [np.zeros(arrays[i].shape) if g is None else g.numpy() for i, g in zip(wrt, grads)]


def _assert_close(got, want, rtol=1e-9, atol=1e-10):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape, (g.shape, w.shape)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


# --- every op, on the op samples ---------------------------------------------------------------------

def _differentiable(sample: Sample) -> bool:
    """Float64-able samples: those whose data operands are floats (indices, conditions stay)."""
    if sample.op == "lz.cast":
        return False  # tested below: a cast to f16 is not something to take finite differences of
    if sample.op in ("lz.quantize", "lz.dequantize", "lz.dynamic_quantize", "lz.matmul_integer"):
        return False  # issue 12: integers carry no gradient (fake quantization's is tests/quantization's)
    dtypes = [a.dtype for a in sample.args]
    return any(d.startswith("float") for d in dtypes) and not any(
        d.startswith("int") and a.kind == "small-int" for d, a in zip(dtypes, sample.args))


def _has_rule(sample: Sample) -> bool:
    """Gradient rules that exist only for some attributes: cumulative sums and products (not
    extrema), replacing and adding scatters."""
    if sample.op == "lz.cumulative":
        return sample.attrs["combine"] in ("add", "mul")
    if sample.op == "lz.scatter_nd":
        return sample.attrs.get("reduction", "none") in ("none", "add")
    return True


GRADIENT_SAMPLES = [s for name, samples in SAMPLES.items() for s in samples
                    if _differentiable(s) and _has_rule(s) and name not in NO_RULE
                    and name not in NOT_DIFFERENTIABLE - {"lz.floor", "lz.ceil", "lz.sign"}]


def test_every_differentiable_op_is_sampled():
    # the control-flow ops' gradients are tested on loops and branches: tests/ir/test_control_flow.py
    sampled = {s.op for s in GRADIENT_SAMPLES} | {"lz.cast", "lz.for", "lz.while", "lz.if"}
    sampled |= {"lz.all_reduce"}  # issue 14: tests/passes/test_bucket_all_reduce.py (it needs a process group)
    for name, definition in registered_ops().items():
        if definition.grad is not None and definition.grad is not no_gradient:
            assert name in sampled, f"no gradient test runs {name}"


@pytest.mark.parametrize("sample", GRADIENT_SAMPLES, ids=[s.id for s in GRADIENT_SAMPLES])
def test_op_gradient(sample):
    rng = np.random.default_rng(0)
    arrays = _as_f64(sample.arrays(rng))
    module = sample.module(arrays)
    wrt = [i for i, a in enumerate(arrays) if _is_float(a)]
    cotangents = _cotangents(module, "f", rng)
    grads = gradients(module, "f", arrays, cotangents, wrt)
    finite_difference_check(module, "f", arrays, cotangents, wrt, grads, rng)
    want = torch_gradients(lambda *ts: TORCH[sample.op](sample.attrs, *ts), arrays, cotangents, wrt)
    _assert_close(grads, want)


@pytest.mark.parametrize("to", ["f64", "f32", "f16", "bf16"])
def test_cast_gradient_is_the_cotangent_cast_back(to):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4))
    module = build([tensor((3, 4), "f64")], lambda b, x: b.op("lz.cast", x, to=to))
    cot = _cotangents(module, "f", rng)
    (got,) = gradients(module, "f", [x], cot, [0])
    (want,) = torch_gradients(lambda t: t.to(_TORCH_DTYPES[to]), [x], [c.astype(np.float64) for c in cot], [0])
    if to == "bf16":  # numpy holds bf16 in float32
        want = torch.tensor(cot[0]).to(torch.bfloat16).to(torch.float64).numpy()
    np.testing.assert_array_equal(got, want)


def test_nothing_flows_through_integers_comparisons_and_argmax():
    """f(x) = x * cast(x > 0) + cast(argmax(x)) * x: the comparison and argmax paths carry none."""
    def body(b, x):
        positive = b.op("lz.cast", b.op("lz.cmp", x, b.constant(np.zeros((), np.float64)), predicate="gt"), to="f64")
        index = b.op("lz.cast", b.op("lz.argmax", x, axis=1, keepdims=True), to="f64")
        truncated = b.op("lz.cast", b.op("lz.cast", x, to="i32"), to="f64")
        return b.op("lz.add", b.op("lz.mul", b.op("lz.add", positive, index), x), truncated)

    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 4))
    module = build([tensor((3, 4), "f64")], body)
    cot = _cotangents(module, "f", rng)
    (got,) = gradients(module, "f", [x], cot, [0])
    np.testing.assert_allclose(got, cot[0] * ((x > 0) + np.argmax(x, 1)[:, None]))


# --- more windows, slices, and the points where PyTorch picks a subgradient ---------------------

CONV_CASES = [
    # N, C, H, W, O, KH, KW, strides, pads [t, l, b, r], dilations, groups
    (1, 1, 5, 5, 1, 3, 3, (1, 1), (0, 0, 0, 0), (1, 1), 1),
    (2, 3, 7, 6, 4, 3, 2, (2, 1), (1, 0, 2, 1), (1, 1), 1),
    (1, 4, 9, 9, 6, 3, 3, (1, 2), (2, 2, 2, 2), (2, 3), 2),
    (2, 6, 5, 4, 6, 1, 1, (1, 1), (0, 0, 0, 0), (1, 1), 6),
    (1, 2, 4, 4, 2, 4, 4, (3, 3), (0, 1, 1, 0), (1, 1), 1),
    (1, 2, 8, 7, 3, 2, 3, (3, 2), (4, 0, 0, 3), (2, 1), 1),  # pads wider than the window, rows left over
]


@pytest.mark.parametrize("case", CONV_CASES)
def test_conv2d_gradient_windows(case):
    n, c, h, w, o, kh, kw, strides, pads, dilations, groups = case
    attrs = dict(strides=list(strides), pads=list(pads), dilations=list(dilations), groups=groups)
    rng = np.random.default_rng(12)
    arrays = [rng.standard_normal((n, c, h, w)), rng.standard_normal((o, c // groups, kh, kw))]
    module = build([tensor(a.shape, "f64") for a in arrays], lambda b, x, k: b.op("lz.conv2d", x, k, **attrs))
    cot = _cotangents(module, "f", rng)
    grads = gradients(module, "f", arrays, cot, [0, 1])
    _assert_close(grads, torch_gradients(lambda x, k: _torch_conv(x, k, attrs), arrays, cot, [0, 1]))


POOL_CASES = [
    # H, W, kernel, strides, pads [t, l, b, r], ceil_mode
    (5, 5, (2, 2), (2, 2), (0, 0, 0, 0), False),
    (5, 5, (2, 2), (2, 2), (0, 0, 0, 0), True),
    (7, 6, (3, 3), (2, 2), (1, 1, 1, 1), True),
    (6, 7, (3, 2), (1, 2), (1, 0, 1, 0), False),
    (8, 8, (3, 3), (3, 3), (1, 1, 1, 1), True),
    (4, 9, (1, 3), (1, 3), (0, 1, 0, 1), False),
]


@pytest.mark.parametrize("case", POOL_CASES)
@pytest.mark.parametrize("op", ["lz.max_pool2d", "lz.avg_pool2d", "lz.avg_pool2d/include_pad", "lz.max_pool2d/dil"])
def test_pool_gradient_windows(case, op):
    h, w, kernel, strides, pads, ceil_mode = case
    name, _, variant = op.partition("/")
    attrs = dict(kernel=list(kernel), strides=list(strides), pads=list(pads), ceil_mode=ceil_mode)
    if variant == "include_pad":
        attrs["count_include_pad"] = True
    if variant == "dil":
        attrs["dilations"] = [2, 1]
        if h + pads[0] + pads[2] < 2 * (kernel[0] - 1) + 1:
            pytest.skip("window larger than input")
    rng = np.random.default_rng(13)
    arrays = [rng.standard_normal((2, 3, h, w))]
    module = build([tensor(arrays[0].shape, "f64")], lambda b, x: b.op(name, x, **attrs))
    cot = _cotangents(module, "f", rng)
    grads = gradients(module, "f", arrays, cot, [0])
    _assert_close(grads, torch_gradients(lambda x: TORCH[name](attrs, x), arrays, cot, [0]))


@pytest.mark.parametrize("starts, ends, steps", [
    ([0, 1], [5, 7], [3, 2]), ([4, -1], [None, None], [-1, -3]), ([-2, 0], [-6, 7], [-2, 5]),
    ([1, 2], [1, 5], [1, 1]), ([0, 6], [5, 0], [4, -4]),
])
def test_slice_gradient_steps(starts, ends, steps):
    ends = [e if e is not None else (-2 ** 62 if st < 0 else 2 ** 62) for e, st in zip(ends, steps)]
    attrs = dict(starts=starts, ends=ends, steps=steps)
    rng = np.random.default_rng(14)
    arrays = [rng.standard_normal((5, 7))]
    module = build([tensor((5, 7), "f64")], lambda b, x: b.op("lz.slice", x, **attrs))
    cot = _cotangents(module, "f", rng)
    grads = gradients(module, "f", arrays, cot, [0])
    _assert_close(grads, torch_gradients(lambda x: _torch_slice(x, attrs), arrays, cot, [0]))


KINKS = {  # op, inputs: values where the derivative is one-sided or undefined
    "lz.relu": [np.array([-1.0, 0.0, 2.0])],
    "lz.abs": [np.array([-1.0, 0.0, 2.0])],
    "lz.max": [np.array([1.0, 2.0, 3.0, np.nan]), np.array([1.0, 3.0, 2.0, 1.0])],
    "lz.min": [np.array([1.0, 2.0, 3.0, np.nan]), np.array([1.0, 3.0, 2.0, 1.0])],
    "lz.pow": [np.array([0.0, 0.0, 2.0, 0.0]), np.array([0.0, 2.0, 0.0, 0.5])],
    "lz.sqrt": [np.array([0.0, 4.0])],
}


@pytest.mark.parametrize("name", sorted(KINKS))
def test_kinks_and_ties_as_torch(name):
    arrays = KINKS[name]
    module = build([tensor(a.shape, "f64") for a in arrays], lambda b, *xs: b.op(name, *xs))
    cot = [np.array([1.0, 2.0, 3.0, 4.0])[:arrays[0].size]]
    wrt = list(range(len(arrays)))
    got = gradients(module, "f", arrays, cot, wrt)
    want = torch_gradients(lambda *ts: TORCH[name]({}, *ts), arrays, cot, wrt)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("name", ["lz.reduce_max", "lz.reduce_min", "lz.reduce_prod"])
@pytest.mark.parametrize("axes", [[1], [0, 1], []])
def test_reduction_ties_and_zeros_as_torch(name, axes):
    x = np.array([[3.0, 1.0, 3.0, 0.0], [2.0, 2.0, -1.0, 2.0], [0.0, 5.0, 0.0, 1.0]])  # ties, one and two zeros
    module = build([tensor(x.shape, "f64")], lambda b, v: b.op(name, v, axes=axes, keepdims=True))
    rng = np.random.default_rng(15)
    cot = _cotangents(module, "f", rng)
    got = gradients(module, "f", [x], cot, [0])
    want = torch_gradients(lambda t: TORCH[name]({"axes": axes, "keepdims": True}, t), [x], cot, [0])
    _assert_close(got, want, rtol=1e-14, atol=0)


# --- second derivatives -----------------------------------------------------------------------------

def second_order_check(module, torch_fn, arrays, rng, wrt=None):
    """``@f_grad_grad`` (autodiff of ``@f_grad``) against torch's double backward."""
    wrt = list(range(len(arrays))) if wrt is None else wrt
    cot = _cotangents(module, "f", rng)
    differentiate(module, "f", wrt)
    grad_args = list(arrays) + cot
    cot2 = _cotangents(module, "f_grad", rng)
    floats = [i for i, a in enumerate(grad_args) if _is_float(a)]
    differentiate(module, "f_grad")  # every float argument: the primals and the cotangents
    verify(module)
    got = gradients(module, "f_grad", grad_args, cot2, floats)

    tensors = [torch.tensor(a, requires_grad=i in floats) for i, a in enumerate(grad_args)]
    primals, cots = tensors[:len(arrays)], tensors[len(arrays):]
    outs = torch_fn(*primals)
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    firsts = torch.autograd.grad(outs, [primals[i] for i in wrt], cots, create_graph=True)
    all_outs = outs + list(firsts)
    want = torch.autograd.grad(all_outs, [tensors[i] for i in floats], [torch.from_numpy(c) for c in cot2],
                               allow_unused=True)
    want = [np.zeros(tensors[i].shape) if g is None else g.numpy() for i, g in zip(floats, want)]
    _assert_close(got, want, rtol=1e-8, atol=1e-10)


SECOND_ORDER_OPS = ["lz.neg", "lz.abs", "lz.exp", "lz.log", "lz.sqrt", "lz.rsqrt", "lz.tanh", "lz.sigmoid",
                    "lz.relu", "lz.erf", "lz.sin", "lz.cos", "lz.reciprocal", "lz.gelu", "lz.add", "lz.sub",
                    "lz.mul", "lz.div", "lz.pow", "lz.max", "lz.min", "lz.select", "lz.matmul", "lz.conv2d",
                    "lz.avg_pool2d", "lz.reduce_sum", "lz.reduce_mean", "lz.reduce_max", "lz.reduce_min",
                    "lz.reduce_prod", "lz.reshape", "lz.transpose", "lz.broadcast_to", "lz.slice", "lz.concat",
                    "lz.pad", "lz.gather", "lz.softmax", "lz.log_softmax", "lz.layer_norm", "lz.batch_norm"]
SECOND_ORDER_SAMPLES = [s for s in GRADIENT_SAMPLES if s.op in SECOND_ORDER_OPS]


@pytest.mark.parametrize("sample", SECOND_ORDER_SAMPLES, ids=[s.id for s in SECOND_ORDER_SAMPLES])
def test_op_second_derivative(sample):
    rng = np.random.default_rng(3)
    arrays = _as_f64(sample.arrays(rng))
    module = sample.module(arrays)
    wrt = [i for i, a in enumerate(arrays) if _is_float(a)]
    second_order_check(module, lambda *ts: TORCH[sample.op](sample.attrs, *ts), arrays, rng, wrt)


def test_second_derivative_of_an_elementwise_chain():
    def f(b, x, w):
        h = b.op("lz.tanh", b.op("lz.mul", x, w))
        g = b.op("lz.div", b.op("lz.exp", b.op("lz.sin", x)), b.op("lz.add", b.op("lz.sigmoid", w),
                                                                    b.constant(np.ones((), np.float64))))
        return b.op("lz.mul", b.op("lz.add", h, g), b.op("lz.sqrt", b.op("lz.mul", x, x)))

    def torch_f(x, w):
        return (torch.tanh(x * w) + torch.exp(torch.sin(x)) / (torch.sigmoid(w) + 1)) * torch.sqrt(x * x)

    rng = np.random.default_rng(4)
    arrays = [rng.standard_normal((3, 4)), rng.standard_normal((4,))]
    module = build([tensor((3, 4), "f64"), tensor((4,), "f64")], f)
    second_order_check(module, torch_f, arrays, rng)


def test_second_derivative_of_a_matmul_chain():
    def f(b, x, w, v):
        return b.op("lz.matmul", b.op("lz.tanh", b.op("lz.matmul", x, w)), v)

    rng = np.random.default_rng(5)
    arrays = [rng.standard_normal((2, 3, 4)), rng.standard_normal((4, 5)), rng.standard_normal((5,))]
    module = build([tensor(a.shape, "f64") for a in arrays], f)
    second_order_check(module, lambda x, w, v: torch.tanh(x @ w) @ v, arrays, rng)


def test_third_derivative_of_tanh():
    rng = np.random.default_rng(6)
    x = rng.standard_normal(5)
    module = build([tensor((5,), "f64")], lambda b, x: b.op("lz.tanh", x))
    f = module.lookup("f")
    for _ in range(3):
        f = differentiate(module, f.sym_name, [0])
    verify(module)
    one, zero = np.ones(5), np.zeros(5)
    # @f_grad_grad_grad(x, c, c_y, c_dx, c_y2, c_dx2, c_d2): weighting only the derivative path,
    # its last result is tanh'''(x)
    out = interpret(module, "f_grad_grad_grad", x, one, zero, one, zero, zero, one)
    t = np.tanh(x)
    np.testing.assert_allclose(out[-1], -2 + 8 * t ** 2 - 6 * t ** 4, rtol=1e-12)


def test_max_pool2d_has_no_second_derivative():
    module = build([tensor((1, 1, 4, 4), "f64")], lambda b, x: b.op("lz.max_pool2d", x, kernel=[2, 2], strides=[2, 2]))
    differentiate(module, "f")
    with pytest.raises(IRError, match="no gradient rule for lz.max_pool2d_grad"):
        differentiate(module, "f_grad")


# --- whole models -----------------------------------------------------------------------------------

def _scalar_constant(b, value):
    return b.constant(np.asarray(value, np.float64))


def _nll(b, logits, one_hot, batch):
    """``-mean(sum(one_hot * log_softmax(logits), 1))``."""
    picked = b.op("lz.reduce_sum", b.op("lz.mul", b.op("lz.log_softmax", logits, axis=-1), one_hot), axes=[1])
    return b.op("lz.mul", b.op("lz.reduce_sum", picked), _scalar_constant(b, -1.0 / batch))


def test_mlp_gradients_match_torch():
    batch, d_in, hidden, classes = 8, 6, 5, 3

    def mlp(b, x, w1, b1, w2, b2, one_hot):
        h = b.op("lz.relu", b.op("lz.add", b.op("lz.matmul", x, w1), b1))
        return _nll(b, b.op("lz.add", b.op("lz.matmul", h, w2), b2), one_hot, batch)

    def torch_mlp(x, w1, b1, w2, b2, one_hot):
        logits = torch.relu(x @ w1 + b1) @ w2 + b2
        return -(torch.log_softmax(logits, -1) * one_hot).sum(1).mean()

    rng = np.random.default_rng(7)
    labels = rng.integers(0, classes, batch)
    arrays = [rng.standard_normal((batch, d_in)), rng.standard_normal((d_in, hidden)), rng.standard_normal(hidden),
              rng.standard_normal((hidden, classes)), rng.standard_normal(classes), np.eye(classes)[labels]]
    module = build([tensor(a.shape, "f64") for a in arrays], mlp)
    wrt = [0, 1, 2, 3, 4]  # not the labels
    cot = [np.ones(())]
    grads = gradients(module, "f", arrays, cot, wrt)
    _assert_close(grads, torch_gradients(torch_mlp, arrays, cot, wrt))
    finite_difference_check(module, "f", arrays, cot, wrt, grads, rng)
    run_pipeline(module, "canonicalize,cse,dce")  # the tidy form computes the same
    _assert_close(gradients(module, "f", arrays, cot, wrt), grads, rtol=1e-12, atol=0)


def test_cnn_gradients_match_torch():
    batch, classes = 2, 5

    def cnn(b, x, w, bias, fc, one_hot):
        h = b.op("lz.conv2d", x, w, pads=[1, 1, 1, 1])
        h = b.op("lz.relu", b.op("lz.add", h, b.op("lz.reshape", bias, shape=[4, 1, 1])))
        h = b.op("lz.max_pool2d", h, kernel=[2, 2], strides=[2, 2])
        logits = b.op("lz.matmul", b.op("lz.reshape", h, shape=[batch, 64]), fc)
        return _nll(b, logits, one_hot, batch)

    def torch_cnn(x, w, bias, fc, one_hot):
        h = F.max_pool2d(torch.relu(F.conv2d(x, w, bias, padding=1)), 2, 2)
        return -(torch.log_softmax(h.reshape(batch, 64) @ fc, -1) * one_hot).sum(1).mean()

    rng = np.random.default_rng(8)
    arrays = [rng.standard_normal((batch, 3, 8, 8)), rng.standard_normal((4, 3, 3, 3)), rng.standard_normal(4),
              rng.standard_normal((64, classes)) * 0.3, np.eye(classes)[rng.integers(0, classes, batch)]]
    module = build([tensor(a.shape, "f64") for a in arrays], cnn)
    wrt = [0, 1, 2, 3]
    cot = [np.ones(())]
    grads = gradients(module, "f", arrays, cot, wrt)
    _assert_close(grads, torch_gradients(torch_cnn, arrays, cot, wrt))
    finite_difference_check(module, "f", arrays, cot, wrt, grads, rng)


# --- the walk: accumulation, wrt, results, composites ----------------------------------------------

def test_uses_are_summed_and_unreached_arguments_get_zeros():
    # f(x, y, z) = (x * x + x, x); z is not used, y only through an integer path
    def f(b, x, y, z):
        n = b.op("lz.cast", b.op("lz.cast", y, to="i32"), to="f32")
        return [b.op("lz.add", b.op("lz.add", b.op("lz.mul", x, x), x), n), x]

    module = build([tensor((4,)), tensor((4,)), tensor((2, 2))], f)
    rng = np.random.default_rng(9)
    x, y, z = (rng.standard_normal(s).astype(np.float32) for s in [(4,), (4,), (2, 2)])
    c0, c1 = rng.standard_normal(4).astype(np.float32), rng.standard_normal(4).astype(np.float32)
    gx, gy, gz = gradients(module, "f", [x, y, z], [c0, c1], [0, 1, 2])
    np.testing.assert_allclose(gx, c0 * (2 * x + 1) + c1, rtol=1e-6)
    np.testing.assert_array_equal(gy, np.zeros(4, np.float32))
    np.testing.assert_array_equal(gz, np.zeros((2, 2), np.float32))


def test_wrt_selects_and_orders_nothing_else():
    module = build([tensor((3,)), tensor((3,))], lambda b, x, y: b.op("lz.mul", x, y))
    grad = differentiate(module, "f", [1])
    assert [str(t) for t in grad.function_type.inputs] == ["tensor<3xf32>"] * 3
    assert [str(t) for t in grad.function_type.results] == ["tensor<3xf32>"] * 2
    x, y, c = (np.arange(3, dtype=np.float32) + k for k in range(3))
    np.testing.assert_array_equal(interpret(module, "f_grad", x, y, c)[1], c * x)


def test_default_wrt_is_every_float_argument():
    module = build([tensor((3,)), tensor((3,), "i32"), tensor((3,), "f16")],
                   lambda b, x, i, h: b.op("lz.add", b.op("lz.add", x, b.op("lz.cast", i, to="f32")),
                                           b.op("lz.cast", h, to="f32")))
    grad = differentiate(module, "f")
    assert [str(t) for t in grad.function_type.results] == ["tensor<3xf32>", "tensor<3xf32>", "tensor<3xf16>"]


def test_composites_are_decomposed_first_and_the_original_is_kept():
    module = build([tensor((2, 5), "f64")], lambda b, x: b.op("lz.softmax", x, axis=1))
    before = print_module(module)
    grad = differentiate(module, "f")
    assert print_module(ModuleOp([module.lookup("f").clone()])) == before
    assert "lz.softmax" not in {op.name for op in grad.entry_block.ops}
    assert [f.sym_name for f in module.functions] == ["f", "f_grad"]


def test_an_argument_returned_as_is():
    module = build([tensor((3,))], lambda b, x: [x, b.op("lz.neg", x)])
    c0, c1 = np.ones(3, np.float32), np.full(3, 2, np.float32)
    out = interpret(module, "f", np.zeros(3, np.float32))
    differentiate(module, "f")
    assert len(out) == 2
    np.testing.assert_array_equal(interpret(module, "f_grad", np.zeros(3, np.float32), c0, c1)[2], c0 - c1)


def test_gradients_of_a_dynamic_batch():
    module = build([tensor((None, 4)), tensor((4,))],
                   lambda b, x, w: b.op("lz.tanh", b.op("lz.mul", x, w)))
    differentiate(module, "f")
    verify(module)
    rng = np.random.default_rng(10)
    for batch in (1, 3):
        x, w = rng.standard_normal((batch, 4)).astype(np.float32), rng.standard_normal(4).astype(np.float32)
        c = rng.standard_normal((batch, 4)).astype(np.float32)
        _, gx, gw = interpret(module, "f_grad", x, w, c)
        t = np.tanh(x * w)
        np.testing.assert_allclose(gx, c * (1 - t * t) * w, rtol=1e-5)
        np.testing.assert_allclose(gw, (c * (1 - t * t) * x).sum(0), rtol=1e-5, atol=1e-6)


def test_clean_after_canonicalize_cse_dce():
    module = build([tensor((3, 4)), tensor((3, 4))], lambda b, x, y: b.op("lz.add", x, y))
    run_pipeline(module, "autodiff,canonicalize,cse,dce")
    assert op_names(module, "f_grad") == ["lz.add", "func.return"]
    ret = module.lookup("f_grad").return_op
    cot = module.lookup("f_grad").arguments[2]
    assert ret.operands[1] is cot and ret.operands[2] is cot


# --- errors and the pass ------------------------------------------------------------------------------

def test_missing_rule_is_a_hard_error_naming_the_op():
    func = FuncOp("f", FunctionType([tensor((3,))], []))
    b = Builder.at_end(func.entry_block)
    opaque = b.insert(Operation("test.opaque", [func.arguments[0]], [tensor((3,))]))
    b.create("func.return", [b.op("lz.exp", opaque.result)], result_types=[])
    func.update_function_type()
    module = ModuleOp([func])
    with pytest.raises(IRError, match="no gradient rule for test.opaque"):
        differentiate(module, "f")


def test_bad_wrt_and_existing_names_are_errors():
    module = build([tensor((3,)), tensor((3,), "i32")], lambda b, x, i: b.op("lz.neg", x))
    with pytest.raises(IRError, match="argument #2: it has 2 arguments"):
        differentiate(module, "f", [2])
    with pytest.raises(IRError, match="argument #1 of type tensor<3xi32>: only float arguments have gradients"):
        differentiate(module, "f", [1])
    differentiate(module, "f")
    with pytest.raises(IRError, match="@f_grad exists already"):
        differentiate(module, "f")
    with pytest.raises(IRError, match="no function @g"):
        differentiate(module, "g")


def test_the_pass_and_its_options():
    module = build([tensor((3,)), tensor((3,))], lambda b, x, y: b.op("lz.mul", x, y))
    other = build([tensor((2,))], lambda b, x: b.op("lz.exp", x), name="g").lookup("g")
    other.parent.remove(other)
    module.body.append(other)
    run_pipeline(module, "autodiff{wrt=0}")
    assert [f.sym_name for f in module.functions] == ["f", "f_grad", "g", "g_grad"]
    assert len(module.lookup("f_grad").function_type.results) == 2
    run_pipeline(module, "autodiff{func=g_grad}")
    assert "g_grad_grad" in module and "f_grad_grad" not in module


def test_differentiate_a_function_outside_a_module():
    module = build([tensor((3,))], lambda b, x: b.op("lz.sin", x))
    func = module.lookup("f")
    module.body.remove(func)
    grad = differentiate(func)
    assert grad.sym_name == "f_grad" and grad.parent is None


# --- compiled ---------------------------------------------------------------------------------------

def test_compiled_gradient_matches_the_interpreter():
    """An elementwise function with broadcasting and a softmax: its gradient function compiled
    for the CPU (reductions come from the broadcasting and the softmax)."""
    def f(b, x, w, s):
        h = b.op("lz.mul", b.op("lz.tanh", b.op("lz.add", x, w)), b.op("lz.sigmoid", s))
        return b.op("lz.softmax", b.op("lz.mul", h, b.op("lz.exp", x)), axis=1)

    module = build([tensor((8, 16)), tensor((16,)), tensor((8, 1))], f)
    run_pipeline(module, "autodiff,canonicalize,cse,dce")
    rng = np.random.default_rng(11)
    args = [rng.standard_normal(s).astype(np.float32) for s in [(8, 16), (16,), (8, 1), (8, 16)]]
    compiled = lezero.compile(module, "f_grad")
    got, want = compiled(*args), interpret(module, "f_grad", *args)
    assert len(got) == len(want) == 4
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)


def test_compiled_mlp_training_gradients_match_the_interpreter():
    """The gradients of an MLP's loss to its weights (matmul, bias, relu, log_softmax, NLL),
    compiled for the CPU. (The loss is kept 1x1: rank-0 inputs do not reach compiled functions yet.)"""
    def mlp(b, x, w1, b1, w2, b2, one_hot):
        h = b.op("lz.relu", b.op("lz.add", b.op("lz.matmul", x, w1), b1))
        log_p = b.op("lz.log_softmax", b.op("lz.add", b.op("lz.matmul", h, w2), b2), axis=-1)
        return b.op("lz.neg", b.op("lz.reduce_mean", b.op("lz.mul", log_p, one_hot), axes=[0, 1], keepdims=True))

    shapes = [(16, 32), (32, 24), (24,), (24, 10), (10,)]
    module = build([tensor(s) for s in shapes + [(16, 10)]], mlp)
    run_pipeline(module, "autodiff{wrt=1,2,3,4},canonicalize,cse,dce")
    rng = np.random.default_rng(12)
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    args += [np.eye(10, dtype=np.float32)[rng.integers(0, 10, 16)], np.ones((1, 1), np.float32)]
    got, want = lezero.compile(module, "f_grad")(*args), interpret(module, "f_grad", *args)
    assert len(got) == len(want) == 5
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-6)


def test_compiled_cnn_gradients_match_the_interpreter():
    """conv2d, relu, max_pool2d, avg_pool2d, matmul, log_softmax: the gradient function compiled
    (transposed convolutions, lz.max_pool2d_grad as a single kernel)."""
    def cnn(b, x, w, fc):
        h = b.op("lz.relu", b.op("lz.conv2d", x, w, pads=[1, 1, 1, 1], strides=[1, 1]))
        h = b.op("lz.avg_pool2d", b.op("lz.max_pool2d", h, kernel=[2, 2], strides=[2, 2]), kernel=[2, 2])
        return b.op("lz.log_softmax", b.op("lz.matmul", b.op("lz.reshape", h, shape=[2, 36]), fc), axis=-1)

    shapes = [(2, 3, 8, 8), (4, 3, 3, 3), (36, 5), (2, 5)]
    module = build([tensor(s) for s in shapes[:3]], cnn)
    run_pipeline(module, "autodiff,canonicalize,cse,dce")
    rng = np.random.default_rng(13)
    args = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    got, want = lezero.compile(module, "f_grad")(*args), interpret(module, "f_grad", *args)
    assert len(got) == len(want) == 4
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
