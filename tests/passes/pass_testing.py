"""Helpers for the pass tests (imported as a plain module): build small functions, and check that a
pipeline keeps what they compute, in the reference interpreter."""
from __future__ import annotations

import io
import logging

import numpy as np

from lezero.ir import FuncOp, ModuleOp, interpret
from lezero.ir.types import TensorType
from lezero.passes import run_pipeline

from support.ir_building import build  # noqa: F401  (re-exported for the pass tests)


def random_inputs(func: FuncOp, rng: np.random.Generator) -> list[np.ndarray]:
    """Normal floats (with a few zeros and negatives), small integers, random booleans."""
    out = []
    for arg in func.arguments:
        t: TensorType = arg.type
        shape = tuple(3 if d is None else d for d in t.shape)
        dtype = t.element_type.numpy_dtype
        if dtype.kind == "f":
            a = rng.standard_normal(shape).astype(dtype)
            a[rng.random(shape) < 0.1] = 0
        elif dtype.kind == "b":
            a = rng.random(shape) < 0.5
        else:
            a = rng.integers(-5 if dtype.kind == "i" else 0, 6, size=shape).astype(dtype)
        out.append(a)
    return out


def check_use_lists(module: ModuleOp) -> None:
    """Every operand has exactly one use record pointing back at it, and no use is stale."""
    live = set()
    for op in module.walk():
        live.add(id(op))
        for i, v in enumerate(op.operands):
            assert sum(1 for u in v.uses if u.op is op and u.index == i) == 1, (op, i)
    for op in module.walk():
        values = list(op.results) + [a for r in op.regions for b in r.blocks for a in b.args]
        for v in values:
            for u in v.uses:
                assert id(u.op) in live and u.op.operands[u.index] is v, (v, u)


def run_and_compare(module: ModuleOp, pipeline: str, seed: int = 0, trials: int = 2, **options) -> ModuleOp:
    """Run ``pipeline`` on ``module``; assert every function computes the same as before."""
    rng = np.random.default_rng(seed)
    cases = []
    for func in module.functions:
        for _ in range(trials):
            inputs = random_inputs(func, rng)
            out = interpret(module, func.sym_name, *inputs)
            cases.append((func.sym_name, inputs, out))
    run_pipeline(module, pipeline, **options)
    check_use_lists(module)
    for name, inputs, expected in cases:
        actual = interpret(module, name, *inputs)
        expected = expected if isinstance(expected, tuple) else (expected,)
        actual = actual if isinstance(actual, tuple) else (actual,)
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected):
            assert a.dtype == e.dtype and a.shape == e.shape
            np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=1e-6, atol=1e-6)
    return module


def op_names(module: ModuleOp, func: str = "f") -> list[str]:
    return [op.name for op in module.lookup(func).entry_block.ops]


def assert_transforms(before: str, pipeline: str, expected: str, **options) -> ModuleOp:
    """Parse ``before``, run ``pipeline`` (checking results are kept), and compare the printed IR
    with ``expected`` as the printer writes it (so value names and spacing need not match)."""
    from lezero.ir.parser import parse_module
    from lezero.ir.printer import print_module

    module = run_and_compare(parse_module(before), pipeline, **options)
    assert print_module(module) == print_module(parse_module(expected))
    return module


def groups_of(module, func=None):
    """[(kind, [op names])] per partition group, in group order."""
    f = module.functions[0] if func is None else module.lookup(func)
    out: dict[int, tuple] = {}
    for op in f.entry_block.ops:
        g = op.attributes.get("lz.group")
        if g is not None:
            out.setdefault(g.value, (op.attributes["lz.group_kind"].value, []))[1].append(op.name[3:])
    return [out[k] for k in sorted(out)]


def fusion_logged(text: str, pipeline: str) -> tuple[ModuleOp, str]:
    """The module ``pipeline`` makes of ``text``, and what it logged on the fusion debug channel."""
    from lezero.ir.parser import parse_module
    from lezero.passes.placement import FUSION_LOG

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    FUSION_LOG.addHandler(handler)
    level = FUSION_LOG.level
    FUSION_LOG.setLevel(logging.DEBUG)
    try:
        module = run_pipeline(parse_module(text), pipeline)
    finally:
        FUSION_LOG.removeHandler(handler)
        FUSION_LOG.setLevel(level)
    return module, stream.getvalue()
