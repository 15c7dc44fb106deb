"""Random fused kernels against the reference interpreter: chains of elementwise ops over
broadcast operands (an elementwise kernel), and the same chains feeding reductions whose results
come back at the input shape, softmax-style (a reduction kernel)."""
from __future__ import annotations

import numpy as np
import pytest

from codegen.kernel_testing import check_kernel, make_kernel

UNARY = ["lz.neg", "lz.abs", "lz.tanh", "lz.sigmoid", "lz.relu", "lz.erf", "lz.sin", "lz.cos", "lz.gelu"]
BINARY = ["lz.add", "lz.sub", "lz.mul", "lz.max", "lz.min"]  # bounded inputs stay bounded


def random_shapes(rng):
    rank = int(rng.integers(1, 4))
    full = tuple(int(d) for d in rng.choice([1, 2, 3, 5, 8, 17, 40], rank))
    keep = int(rng.integers(0, rank + 1))
    partial = tuple(d if rng.random() < 0.6 else 1 for d in full[rank - keep:])
    return full, partial


def chain(rng, b, values, length: int):
    """``length`` random ops over ``values`` (broadcasting); ends at the full shape."""
    values = list(values)
    for _ in range(length):
        if rng.random() < 0.45:
            values.append(b.op(str(rng.choice(UNARY)), values[int(rng.integers(len(values)))]))
        else:
            lhs, rhs = (values[int(k)] for k in rng.integers(len(values), size=2))
            values.append(b.op(str(rng.choice(BINARY)), lhs, rhs))
    return b.op("lz.add", values[0], values[-1]), values


@pytest.mark.parametrize("seed", range(8))
def test_random_elementwise_kernel(seed):
    rng = np.random.default_rng(seed)
    full, partial = random_shapes(rng)
    dtype = "f64" if seed % 4 == 3 else "f32"

    def body(b, x, y, z):
        out, values = chain(rng, b, [x, y, z], int(rng.integers(3, 9)))
        extra = [v for v in values if v.type.shape == full][-1]
        return [out, extra]

    module, kernel = make_kernel([(full, dtype), (partial, dtype), ((), dtype)], body)
    npt = np.float64 if dtype == "f64" else np.float32
    inputs = [rng.standard_normal(full).astype(npt), rng.standard_normal(partial).astype(npt), npt(0.75)]
    check_kernel(module, kernel, inputs, splits=int(rng.integers(1, 4)), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("seed", range(8))
def test_random_reduction_kernel(seed):
    """chain -> max over some axes -> exp(v - max) -> sum -> divide, at the input shape, plus a mean at
    the reduced shape."""
    rng = np.random.default_rng(100 + seed)
    full, partial = random_shapes(rng)
    rank = len(full)
    axes = sorted(set(int(a) for a in rng.integers(0, rank, int(rng.integers(1, rank + 1)))))
    keepdims_mean = bool(rng.random() < 0.5)

    def body(b, x, y):
        v, _ = chain(rng, b, [x, y], int(rng.integers(2, 6)))
        m = b.op("lz.reduce_max", v, axes=axes, keepdims=True)
        e = b.op("lz.exp", b.op("lz.sub", v, m))
        s = b.op("lz.reduce_sum", e, axes=axes, keepdims=True)
        out = b.op("lz.div", e, s)
        mean = b.op("lz.reduce_mean", v, axes=axes, keepdims=keepdims_mean)
        return [out, b.op("lz.mul", mean, mean)]

    module, kernel = make_kernel([(full, "f32"), (partial, "f32")], body, kind="reduction")
    inputs = [rng.standard_normal(full).astype(np.float32), rng.standard_normal(partial).astype(np.float32)]
    check_kernel(module, kernel, inputs, splits=int(rng.integers(1, 4)), rtol=1e-4, atol=1e-5)
