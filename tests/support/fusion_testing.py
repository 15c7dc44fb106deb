"""Helpers for the partition / fuse / memory-plan tests: random
graphs of elementwise ops, reductions, matmuls and data movement over small shapes (with size-1
dims and broadcasting), and independent checks of what the passes promise."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from lezero.ir import Builder, FuncOp, FunctionType, ModuleOp, interpret, parse_module, print_module
from lezero.ir.dialect.broadcasting import broadcast_shapes
from lezero.ir.opdef import OpError
from lezero.ir.types import F32, I64, TensorType, element_type_of
from lezero.passes.partition import classify

from support.ir_building import build

UNARY = ["lz.neg", "lz.abs", "lz.relu", "lz.tanh", "lz.sigmoid", "lz.exp", "lz.sin"]
BINARY = ["lz.add", "lz.sub", "lz.mul", "lz.max"]
REDUCE = ["lz.reduce_sum", "lz.reduce_max", "lz.reduce_mean"]
STEPS = ["unary", "unary", "binary", "binary", "binary", "splat", "reduce", "reduce", "matmul", "transpose",
         "reshape", "broadcast_to", "slice", "pad", "concat", "gather", "argmax", "linear"]


@st.composite
def random_graphs(draw, max_ops: int = 14) -> ModuleOp:
    """A module with ``@f``: a random DAG of lz ops over f32 tensors, returning its unused values
    (and sometimes one more)."""
    rank = draw(st.integers(1, 3))
    base = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 4]), min_size=rank, max_size=rank)))
    func = FuncOp("f", FunctionType([], []))
    block = func.entry_block
    b = Builder.at_end(block)

    def new_arg(shape):
        return block.add_argument(TensorType(tuple(shape), F32))

    values = [new_arg(base)]
    for _ in range(draw(st.integers(0, 2))):  # more inputs, broadcast-compatible with the first
        shape = [d if draw(st.booleans()) else 1 for d in base][draw(st.integers(0, rank - 1)):]
        values.append(new_arg(shape))

    def pick(pred=lambda v: True):
        candidates = [v for v in values if pred(v)]
        return draw(st.sampled_from(candidates)) if candidates else None

    for _ in range(draw(st.integers(1, max_ops))):
        step = draw(st.sampled_from(STEPS))
        v = pick()
        shape = v.type.shape
        r = None
        if step == "unary":
            r = b.op(draw(st.sampled_from(UNARY)), v)
        elif step == "binary":
            w = pick(lambda u: _broadcasts(u.type.shape, shape))
            lhs, rhs = (v, w) if draw(st.booleans()) else (w, v)
            r = b.op(draw(st.sampled_from(BINARY)), lhs, rhs)
        elif step == "splat":
            c = b.constant(np.asarray(draw(st.sampled_from([0.5, 2.0, -1.0])), np.float32), TensorType((), F32))
            r = b.op(draw(st.sampled_from(BINARY)), v, c)
        elif step in ("reduce", "argmax") and shape:
            axes = sorted(draw(st.sets(st.integers(0, len(shape) - 1), min_size=1)))
            keepdims = draw(st.booleans())
            if step == "argmax":
                r = b.op("lz.cast", b.op("lz.argmax", v, axis=axes[0], keepdims=keepdims), to=F32)
            else:
                r = b.op(draw(st.sampled_from(REDUCE)), v, axes=axes, keepdims=keepdims)
        elif step == "matmul" and shape:
            k = shape[-1]
            n = draw(st.sampled_from([1, 3]))
            r = b.op("lz.matmul", v, new_arg((k, n)) if len(shape) > 1 or draw(st.booleans()) else new_arg((k,)))
        elif step == "linear" and len(shape) > 1:  # matmul, bias, activation, maybe a residual
            n = shape[-1]
            r = b.op("lz.add", b.op("lz.matmul", v, new_arg((n, n))), new_arg((n,)))
            r = b.op(draw(st.sampled_from(UNARY)), r)
            if draw(st.booleans()):
                r = b.op("lz.add", r, v)
        elif step == "transpose" and len(shape) > 1:
            perm = draw(st.permutations(range(len(shape))))
            r = b.op("lz.transpose", v, perm=list(perm))
        elif step == "reshape":
            r = b.op("lz.reshape", v, shape=[-1] if len(shape) != 1 else [1, -1])
        elif step == "broadcast_to":
            r = b.op("lz.broadcast_to", v, shape=[2, *[d if d != 1 else 3 for d in shape]])
        elif step == "slice" and shape and shape[0] > 1:
            r = b.op("lz.slice", v, starts=[1], ends=[shape[0]], axes=[0])
        elif step == "pad" and shape:
            r = b.op("lz.pad", v, pads=[1] + [0] * (2 * len(shape) - 1), value=0.5)
        elif step == "concat" and shape:
            w = pick(lambda u: u.type.shape == shape)
            r = b.op("lz.concat", v, w, axis=0)
        elif step == "gather" and shape:
            indices = b.constant(np.asarray([shape[0] - 1, 0], np.int64), TensorType((2,), I64))
            r = b.op("lz.gather", v, indices, axis=0)
        if r is not None:
            values.append(r)
    results = [v for v in values[1:] if not v.uses and v.owner is not block] or [values[-1]]
    extra = pick(lambda u: u.owner is not block and u not in results)
    if extra is not None and draw(st.booleans()):
        results.append(extra)
    b.create("func.return", results, result_types=[])
    func.update_function_type()
    return ModuleOp([func])


# Random elementwise graphs over every dtype the issue names: the ops each dtype allows, with
# broadcasting between operands of different (size-1 padded) shapes.
_OPS_BY_KIND = {
    "float": (["lz.neg", "lz.abs", "lz.exp", "lz.tanh", "lz.sigmoid", "lz.relu", "lz.sin"],
              ["lz.add", "lz.sub", "lz.mul", "lz.max", "lz.min"]),
    "int": (["lz.neg", "lz.abs", "lz.relu", "lz.sign"], ["lz.add", "lz.sub", "lz.mul", "lz.max", "lz.min"]),
    "bool": (["lz.not"], ["lz.and", "lz.or"]),
}


@st.composite
def random_elementwise_graphs(draw):
    """(module with ``@f``, its argument shapes, dtype): a random chain of elementwise ops over one
    dtype, sometimes ending in a compare and select."""
    dtype = draw(st.sampled_from(["float32", "float64", "int32", "int64", "bool"]))
    kind = {"f": "float", "i": "int", "b": "bool"}[np.dtype(dtype).kind]
    unary, binary = _OPS_BY_KIND[kind]
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.sampled_from([1, 2, 3, 5, 7]), min_size=rank, max_size=rank)))
    shapes = [shape] + [tuple(d if draw(st.booleans()) else 1 for d in shape)[draw(st.integers(0, rank - 1)):]
                        for _ in range(draw(st.integers(0, 2)))]
    steps = draw(st.lists(st.tuples(st.booleans(), st.sampled_from(unary), st.sampled_from(binary),
                                    st.integers(0, 100), st.integers(0, 100)), min_size=1, max_size=8))
    with_cmp = kind != "bool" and draw(st.booleans())

    def body(b, *args):
        values = list(args)
        for is_unary, u, bop, i, j in steps:
            x = values[i % len(values)]
            values.append(b.op(u, x) if is_unary else b.op(bop, x, values[j % len(values)]))
        if with_cmp:
            cond = b.op("lz.cmp", values[-1], values[0], predicate="gt")
            values.append(b.op("lz.select", cond, values[-1], values[0]))
        return values[len(args):]

    types = [TensorType(s, element_type_of(np.dtype(dtype))) for s in shapes]
    return build(types, body), shapes, dtype


def _broadcasts(a, b) -> bool:
    try:
        broadcast_shapes(a, b)
        return True
    except OpError:
        return False


def inputs_for(func: FuncOp, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(a.type.shape).astype(np.float32) for a in func.arguments]


def outputs(module: ModuleOp, inputs, func: str = "f") -> tuple:
    out = interpret(module, func, *inputs)
    return out if isinstance(out, tuple) else (out,)


def assert_same_outputs(before: tuple, after: tuple) -> None:
    assert len(before) == len(after)
    for x, y in zip(before, after):
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)  # the same numpy ops on the same arrays: bit for bit


def assert_fused_form(module: ModuleOp) -> None:
    """Only constants, kernels and the return at the top; each kernel a valid one of its kind;
    print -> parse -> print is the identity."""
    for func in module.functions:
        for op in func.entry_block.ops:
            assert op.name in ("lz.constant", "lz.kernel", "func.return"), op.name
            if op.name != "lz.kernel":
                continue
            body = op.regions[0].blocks[0]
            inner = [o for o in body.ops if o.name not in ("lz.constant", "lz.yield")]
            assert inner, "a kernel computes something"
            assert classify(inner) == op.attributes["kind"].value
            assert not any(k.startswith("lz.group") for o in inner for k in o.attributes)
            assert op.attributes["name"].value.startswith("lz_fused_")
            for c in body.ops:
                if c.name == "lz.constant":
                    assert c.attributes["value"].splat_value() is not None
            if op.attributes["kind"].value == "elementwise":
                assert len({r.type.shape for r in op.results}) == 1
    text = print_module(module)
    assert print_module(parse_module(text)) == text


def kernel_schedule(func: FuncOp) -> list:
    return [op for op in func.entry_block.ops if op.name == "lz.kernel"]


def check_memory_plan(func: FuncOp, by_stage: bool = False) -> None:
    """Independent check of lz.offsets: aligned, inside the arena, -1 exactly for returned
    values, and no two buffers live at the same time share bytes, except a result written in
    place of an operand its elementwise kernel reads last.  Time is the kernel's position in
    the schedule, or with ``by_stage`` its lz.stage (the kernels of a stage run at once)."""
    kernels = kernel_schedule(func)
    if by_stage:
        step = {id(k): k.attributes["lz.stage"].value for k in kernels}
    else:
        step = {id(k): i for i, k in enumerate(kernels)}
    returned = {id(v) for v in func.return_op.operands}
    size = func.attributes["lz.arena_size"].value
    peak = func.attributes["lz.arena_peak"].value
    assert size >= peak >= 0
    buffers = []
    for k in kernels:
        offsets = k.attributes["lz.offsets"].values
        assert len(offsets) == len(k.results)
        for r, offset in zip(k.results, offsets):
            if id(r) in returned:
                assert offset == -1
                continue
            assert offset >= 0 and offset % 64 == 0
            assert offset + r.type.nbytes <= size
            end = max([step[id(u.op)] for u in r.uses], default=step[id(k)])
            buffers.append((r, offset, step[id(k)], end))
    for i, (a, oa, sa, ea) in enumerate(buffers):
        for b_, ob, sb, eb in buffers[i + 1:]:
            live_together = sa <= eb and sb <= ea
            share_bytes = oa < ob + b_.type.nbytes and ob < oa + a.type.nbytes
            if not (live_together and share_bytes):
                continue
            first, second = (a, b_) if sa <= sb else (b_, a)
            kernel = second.op
            in_place = (kernel.attributes["kind"].value == "elementwise" and first in kernel.operands
                        and max(step[id(u.op)] for u in first.uses) == step[id(kernel)]
                        and all(u.op is kernel or step[id(u.op)] < step[id(kernel)] for u in first.uses)
                        and oa == ob and first.type.shape == second.type.shape
                        and first.type.nbytes == second.type.nbytes)
            assert in_place, f"{first} and {second} overlap while both live"
