"""Elementwise kernels lowered to LLVM IR against the reference interpreter: every unary, binary,
compare, select and cast op on every element type it accepts, data movement with random shapes
(size-1 and odd dims, broadcasting), transposes copied through registers and strided reads in
tiles, the kernel ABI's work-item ranges, vectorization, in-place
buffers and the errors for what cannot be lowered."""
from __future__ import annotations

import ctypes
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from codegen.kernel_testing import (assert_matches, check_kernel, compile_lowered, make_kernel, random_array, reference,
                            run_kernel)
from lezero.codegen.errors import LoweringError
from lezero.codegen.llvm.target import cpu_target
from lezero.codegen.llvm import elementwise, jit
from lezero.codegen.llvm.backend import lower_kernel
from lezero.ir.dialect.elementwise import BINARY_OPS, UNARY_OPS
from lezero.ir.dialect.numerics import to_storage
from lezero.ir.types import ELEMENT_TYPES, TensorType

ALL_DTYPES = ["f32", "f64", "f16", "bf16", "i8", "i32", "i64", "ui8", "i1"]
TOL = {"f32": (1e-5, 1e-6), "f64": (1e-12, 1e-14), "f16": (2e-3, 2e-3), "bf16": (1e-2, 1e-2)}
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, 1e30, -1e30, 0.5, -2.5, 3.0, 100.0]


def data(rng, shape, dtype: str, special: bool = True) -> np.ndarray:
    et = ELEMENT_TYPES[dtype]
    if et.is_float:
        x = rng.standard_normal(shape) * 3
        if special and x.size >= len(SPECIAL):
            x.reshape(-1)[:len(SPECIAL)] = SPECIAL
        return to_storage(x, et)
    return random_array(rng, shape, et.numpy_dtype)


def compare(dtype: str, got, want, what: str) -> None:
    rtol, atol = TOL.get(dtype, (None, None))
    try:
        assert_matches(got, want, rtol, atol)
    except AssertionError as e:
        raise AssertionError(f"{what} with {dtype}: {e}") from None


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_every_unary_op(dtype):
    et = ELEMENT_TYPES[dtype]
    names = [name for name, cls in sorted(UNARY_OPS.items()) if et in cls.domain]
    extra = []
    if et.is_float:
        extra = [("lz.gelu", {}), ("lz.gelu", {"approximate": "tanh"})]
    module, kernel = make_kernel([((3, 37), dtype)], lambda b, x: [b.op(n, x) for n in names]
                                 + [b.op(n, x, **a) for n, a in extra])
    x = data(np.random.default_rng(0), (3, 37), dtype)
    lowered = lower_kernel(kernel)
    for name, g, w in zip(names + [n for n, _ in extra], run_kernel(kernel, [x], 3, lowered), reference(module, [x])):
        compare(dtype, g, w, name)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_every_binary_op_broadcasting(dtype):
    et = ELEMENT_TYPES[dtype]
    names = [name for name, cls in sorted(BINARY_OPS.items()) if et in cls.domain]
    module, kernel = make_kernel([((3, 1, 37), dtype), ((5, 1), dtype)],
                                 lambda b, x, y: [b.op(n, x, y) for n in names])
    rng = np.random.default_rng(1)
    x, y = data(rng, (3, 1, 37), dtype), data(rng, (5, 1), dtype)
    if et.is_int:
        y.reshape(-1)[0] = 0  # division by zero is 0
    for name, g, w in zip(names, run_kernel(kernel, [x, y], 2), reference(module, [x, y])):
        compare(dtype, g, w, name)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_compare_and_select(dtype):
    predicates = ["eq", "ne", "lt", "le", "gt", "ge"]

    def body(b, x, y, c):
        cmps = [b.op("lz.cmp", x, y, predicate=p) for p in predicates]
        return cmps + [b.op("lz.select", c, x, y), b.op("lz.select", cmps[2], y, x)]

    module, kernel = make_kernel([((4, 9), dtype), ((9,), dtype), ((4, 1), "i1")], body)
    rng = np.random.default_rng(2)
    x, y = data(rng, (4, 9), dtype), data(rng, (9,), dtype)
    x[1, :] = y  # some equal pairs
    c = rng.random((4, 1)) < 0.5
    for name, g, w in zip(predicates + ["select", "select"], run_kernel(kernel, [x, y, c]),
                          reference(module, [x, y, c])):
        compare(dtype, g, w, name)


@pytest.mark.parametrize("source", ALL_DTYPES)
def test_casts(source):
    """Every cast from ``source``: on values every target holds (truncation, rounding, != 0), and
    on inf, nan and huge values for the float and i1 targets (other targets leave them
    unspecified)."""
    rng = np.random.default_rng(3)
    et = ELEMENT_TYPES[source]
    if et.is_float:
        x = to_storage(np.concatenate([rng.uniform(0, 120, 40), rng.uniform(-120, 0, 20)]), et)
    else:
        x = random_array(rng, (60,), et.numpy_dtype)
    targets = ALL_DTYPES
    module, kernel = make_kernel([((60,), source)], lambda b, v: [b.op("lz.cast", v, to=t) for t in targets])
    for target, g, w in zip(targets, run_kernel(kernel, [x]), reference(module, [x])):
        if target == "ui8" and et.kind != "bool":
            keep = np.asarray(x, np.float64) >= 0  # negative -> unsigned is unspecified
            g, w = g[keep], w[keep]
        compare(target, g, w, f"cast {source} -> {target}")
    if et.is_float:
        special = to_storage(np.array(SPECIAL * 5), et)
        floats = ["f32", "f64", "f16", "bf16", "i1"]
        module, kernel = make_kernel([((60,), source)], lambda b, v: [b.op("lz.cast", v, to=t) for t in floats])
        for target, g, w in zip(floats, run_kernel(kernel, [special]), reference(module, [special])):
            compare(target, g, w, f"cast {source} -> {target} (special values)")


# --- data movement --------------------------------------------------------------------------------

dims = st.sampled_from([1, 2, 3, 5, 7, 16])
shapes = st.lists(dims, min_size=1, max_size=4).map(tuple)
movement_dtypes = st.sampled_from(["f32", "i64", "f16", "i1", "ui8"])


def _check(arg_shapes, dtype, body, splits=2, extra_inputs=()):
    module, kernel = make_kernel([(s, dtype) for s in arg_shapes] + [t for t, _ in extra_inputs], body)
    rng = np.random.default_rng(0)
    inputs = [data(rng, s, dtype, special=False) for s in arg_shapes] + [a for _, a in extra_inputs]
    return check_kernel(module, kernel, inputs, splits)


@settings(max_examples=20)
@given(shapes, movement_dtypes, st.randoms(use_true_random=False))
def test_transpose_and_reshape(shape, dtype, rnd):
    perm = list(range(len(shape)))
    rnd.shuffle(perm)
    size = int(np.prod(shape))
    factors = [d for d in (2, 3, 5, 7) if size % d == 0]
    new_shape = [size] if not factors else [factors[0], -1, 1]
    _check([shape], dtype, lambda b, x: b.op("lz.transpose", x, perm=perm))
    _check([shape], dtype, lambda b, x: b.op("lz.reshape", x, shape=new_shape))
    _check([shape], dtype, lambda b, x: b.op("lz.reshape", b.op("lz.transpose", x, perm=perm), shape=[-1]))


@settings(max_examples=30)
@given(st.lists(st.sampled_from([1, 3, 16, 17, 40]), min_size=2, max_size=4).map(tuple),
       st.sampled_from(["f32", "f64", "f16", "ui8", "i1", "bf16"]), st.randoms(use_true_random=False),
       st.integers(1, 3))
def test_transposes_copy_blocks_through_registers(shape, dtype, rnd, splits):
    """A kernel that is one transpose moving the contiguous dim copies W x W blocks through
    registers (full blocks, ragged edges, bands of fewer rows, batch dims, every element size)."""
    perm = list(range(len(shape)))
    rnd.shuffle(perm)
    _check([shape], dtype, lambda b, x: b.op("lz.transpose", x, perm=perm), splits)


def test_transposed_copy_is_taken_for_a_transpose_only():
    """The register path: 16 x 16 blocks of the 2-D transpose (two-input shuffles), a band of
    rows per work item; a transpose that keeps the contiguous dim innermost is a plain copy."""
    module, kernel = make_kernel([((48, 40), "f32")], lambda b, x: b.op("lz.transpose", x, perm=[1, 0]))
    lowered = check_kernel(module, kernel, [np.arange(48 * 40, dtype=np.float32).reshape(48, 40)], splits=3)
    assert "shufflevector" in lowered.llvm_ir
    w = min(16, cpu_target().vector_bytes // 4)
    assert lowered.work_items == -(-40 // w)  # bands of w of the result's 40 rows
    _, kernel = make_kernel([((4, 5, 6), "f32")], lambda b, x: b.op("lz.transpose", x, perm=[1, 0, 2]))
    assert "shufflevector" not in lower_kernel(kernel).llvm_ir


@pytest.mark.parametrize("shape, new_shape, perm", [((8, 5, 40), (40, 40), (1, 0)), ((6, 3, 17), (18, 17), (1, 0)),
                                                    ((32, 48), (32, 3, 16), (2, 1, 0)), ((2, 40, 3), (80, 3), (1, 0))])
def test_transpose_of_a_reshaped_operand_copies_blocks(shape, new_shape, perm):
    """A transpose of a reshaped operand (an RNN weight gradient's [T, N, 4H] stack flattened to
    [T N, 4H], transposed) is a transpose of the operand's buffer: the register path too."""
    module, kernel = make_kernel([(shape, "f32")], lambda b, x: b.op("lz.transpose", b.op("lz.reshape", x, shape=list(new_shape)),
                                                                    perm=list(perm)))
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    lowered = check_kernel(module, kernel, [x], splits=3)
    assert "shufflevector" in lowered.llvm_ir


@pytest.mark.parametrize("shape", [(40, 70), (33, 17), (16, 100)])
def test_strided_reads_are_tiled(shape):
    """transpose(x) + y reads x with a stride along the innermost loop: the loops run in tiles
    (a band of TILE[0] rows per work item), ragged at both edges."""
    rows, cols = shape
    module, kernel = make_kernel([((cols, rows), "f32"), ((rows, cols), "f32")],
                                 lambda b, x, y: b.op("lz.add", b.op("lz.transpose", x), y))
    rng = np.random.default_rng(rows)
    lowered = check_kernel(module, kernel, [data(rng, (cols, rows), "f32"), data(rng, (rows, cols), "f32")], splits=2)
    assert lowered.work_items == -(-rows // elementwise.TILE[0])


@settings(max_examples=20)
@given(shapes, movement_dtypes, st.randoms(use_true_random=False))
def test_slice_pad_broadcast(shape, dtype, rnd):
    rank = len(shape)
    starts = [rnd.randint(-d, d) for d in shape]
    ends = [rnd.randint(-d - 1, d + 1) for d in shape]
    steps = [rnd.choice([1, 2, -1, -2]) for _ in shape]
    pads = [rnd.randint(-(d // 2), 2) for d in shape] + [rnd.randint(-(d // 2), 2) for d in shape]
    source = tuple(d if rnd.random() < 0.5 else 1 for d in shape)[rnd.randint(0, rank):]
    _check([shape], dtype, lambda b, x: b.op("lz.slice", x, starts=starts, ends=ends, steps=steps))
    _check([shape], dtype, lambda b, x: b.op("lz.pad", x, pads=pads, value=1.5))
    _check([source], dtype, lambda b, x: b.op("lz.broadcast_to", x, shape=[3] + list(shape)))


@settings(max_examples=10)
@given(shapes, movement_dtypes, st.integers(0, 3), st.integers(1, 3))
def test_concat(shape, dtype, axis, pieces):
    axis = axis % len(shape)
    sizes = [(k * 2 + 1) % 4 for k in range(pieces)]  # 1, 3, 1: and a 0-size piece sometimes
    arg_shapes = [shape[:axis] + (s,) + shape[axis + 1:] for s in sizes]
    if sum(sizes) == 0:
        return
    _check(arg_shapes, dtype, lambda b, *xs: b.op("lz.concat", *xs, axis=axis))


@settings(max_examples=10)
@given(shapes, st.sampled_from(["i32", "i64", "ui8"]), st.integers(0, 3), st.sampled_from([(), (4,), (2, 3)]))
def test_gather(shape, index_dtype, axis, index_shape):
    axis = axis % len(shape)
    size = shape[axis]
    rng = np.random.default_rng(4)
    lo = 0 if index_dtype == "ui8" else -size
    indices = rng.integers(lo, size, index_shape).astype(ELEMENT_TYPES[index_dtype].numpy_dtype)
    it = TensorType(index_shape, ELEMENT_TYPES[index_dtype])
    _check([shape], "f32", lambda b, x, i: [b.op("lz.gather", x, i, axis=axis),
                                            b.op("lz.mul", b.op("lz.gather", x, i, axis=axis),
                                                 b.op("lz.gather", x, i, axis=axis))],
           extra_inputs=[(it, indices)])


@settings(max_examples=25)
@given(st.lists(dims, min_size=0, max_size=4).map(tuple), st.data())
def test_broadcasting_expression(shape, draw):
    """``relu(x * y + z) - y`` with y and z broadcast from random sub-shapes, in several types."""
    dtype = draw.draw(st.sampled_from(["f32", "f64", "i32", "f16", "bf16"]))

    def sub(shape):
        keep = draw.draw(st.integers(0, len(shape)))
        return tuple(d if draw.draw(st.booleans()) else 1 for d in shape[len(shape) - keep:])

    y_shape, z_shape = sub(shape), sub(shape)

    def body(b, x, y, z):
        return b.op("lz.sub", b.op("lz.relu", b.op("lz.add", b.op("lz.mul", x, y), z)), y)

    module, kernel = make_kernel([(shape, dtype), (y_shape, dtype), (z_shape, dtype)], body)
    rng = np.random.default_rng(5)
    inputs = [data(rng, s, dtype, special=False) for s in (shape, y_shape, z_shape)]
    got = run_kernel(kernel, inputs, splits=3)
    compare(dtype, got[0], reference(module, inputs)[0], "relu(x * y + z) - y")


def test_constants_inside_the_kernel():
    def body(b, x):
        table = b.constant(np.arange(12, dtype=np.float32).reshape(3, 4))
        scale = b.constant(np.float32(0.5))
        flags = b.constant(np.array([True, False, True, True]))
        y = b.op("lz.add", b.op("lz.mul", x, scale), table)
        return [y, b.op("lz.select", flags, y, x)]

    module, kernel = make_kernel([((3, 4), "f32")], body)
    check_kernel(module, kernel, [np.random.default_rng(6).standard_normal((3, 4)).astype(np.float32)])


# --- the ABI, the loops and the machine code --------------------------------------------------------

def _gelu_affine(b, x, a, c):
    return b.op("lz.gelu", b.op("lz.add", b.op("lz.mul", x, a), c))


def test_work_items_and_ranges_compose():
    """A flat 100000-element kernel splits into blocks; any split of [0, work_items) gives the
    whole answer, including one range per item."""
    module, kernel = make_kernel([((100000,), "f32"), ((), "f32"), ((), "f32")], _gelu_affine)
    lowered = lower_kernel(kernel)
    assert lowered.work_items > 1
    assert lowered.kind == "elementwise" and lowered.bytes_accessed == 800008
    assert lowered.flops == 300000 and lowered.external_symbols == ()
    rng = np.random.default_rng(7)
    inputs = [rng.standard_normal(100000).astype(np.float32), np.float32(1.5), np.float32(-0.25)]
    want = reference(module, inputs)[0]
    for splits in (1, 3, lowered.work_items):
        assert_matches(run_kernel(kernel, inputs, splits, lowered)[0], want, 1e-5, 1e-6)


def test_a_short_row_is_one_work_item():
    """Short rows (a transposed read blocks merging the loops): a work item per row, so the loop
    over them needs no row count (``lezero/codegen/row_generic.py``); any split gives the same answer."""
    module, kernel = make_kernel([((300, 7), "f32"), ((7, 300), "f32")],
                                 lambda b, x, y: b.op("lz.add", x, b.op("lz.transpose", y)))
    inputs = [np.ones((300, 7), np.float32), np.arange(2100, dtype=np.float32).reshape(7, 300)]
    for splits in (1, 7):
        lowered = check_kernel(module, kernel, inputs, splits=splits)
    assert lowered.work_items == 300


def test_inner_loop_is_vectorized():
    """The fused gelu(x * a + b) has no calls and uses vector FMA on the host's widest vectors."""
    _, kernel = make_kernel([((4096,), "f32"), ((), "f32"), ((), "f32")], _gelu_affine)
    asm = jit.emit_assembly(lower_kernel(kernel).llvm_ir)
    assert "call" not in asm
    assert re.search(r"vfmadd\w*ps\s+%[yz]mm", asm), "no vector FMA in the kernel"
    # bias add over rows: the row loop merges into one loop of vector adds
    _, kernel = make_kernel([((64, 256), "f32"), ((256,), "f32")], lambda b, x, y: b.op("lz.add", x, y))
    assert re.search(r"vaddps\s+.*%[yz]mm", jit.emit_assembly(lower_kernel(kernel).llvm_ir))


def test_in_place_result():
    """A result may share an operand's buffer (memory-plan's in-place rule: read at the index
    written only), also when another result reads that operand after it."""
    module, kernel = make_kernel([((1000,), "f32"), ((1000,), "f32")], lambda b, x, y: [
        b.op("lz.mul", b.op("lz.relu", x), y), b.op("lz.sub", x, y), b.op("lz.add", y, y)])
    lowered = lower_kernel(kernel)
    fn = compile_lowered(lowered)
    rng = np.random.default_rng(8)
    x, y = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
    want = reference(module, [x, y])
    out = np.empty_like(x)
    pointers = (ctypes.c_void_p * 5)(x.ctypes.data, y.ctypes.data, y.ctypes.data, x.ctypes.data, out.ctypes.data)
    fn(pointers, 0, lowered.work_items)  # result 0 over y, result 1 over x
    assert_matches(y, want[0])
    assert_matches(x, want[1])
    assert_matches(out, want[2])


def test_scalar_and_empty_kernels():
    module, kernel = make_kernel([((), "f32"), ((), "f32")], lambda b, x, y: b.op("lz.add", x, y))
    check_kernel(module, kernel, [np.float32(2.0), np.float32(0.5)])
    module, kernel = make_kernel([((3, 0), "f32")], lambda b, x: b.op("lz.exp", x))
    lowered = lower_kernel(kernel)
    assert lowered.work_items == 1
    assert run_kernel(kernel, [np.zeros((3, 0), np.float32)], lowered=lowered)[0].shape == (3, 0)


def test_errors_name_the_op_the_type_and_the_target():
    _, kernel = make_kernel([((2, 3), "f32"), ((3, 4), "f32")], lambda b, x, y: b.op("lz.matmul", x, y))
    with pytest.raises(LoweringError, match=r"failed to lower lz.matmul with f32 for cpu: not an elementwise"):
        lower_kernel(kernel)
    _, kernel = make_kernel([((2, 3), "f32"), ((2, 3), "f32")], lambda b, x, y: b.op("lz.add", x, y), kind="matmul")
    with pytest.raises(LoweringError, match=r"failed to lower matmul kernel .* for cpu: it holds 0 contractions"):
        lower_kernel(kernel)
    _, kernel = make_kernel([((2, 3), "f32")], lambda b, x: b.op("lz.softmax", x), kind="single")
    with pytest.raises(LoweringError, match=r"failed to lower lz.softmax with f32 for cpu: composite ops"):
        lower_kernel(kernel)
    _, kernel = make_kernel([((None, 3), "f32")], lambda b, x: b.op("lz.exp", x))
    with pytest.raises(LoweringError, match=r"not a static tensor type"):
        lower_kernel(kernel)


# Concat kernels: a loop nest per piece (odd sizes, a size-1 and a size-0 piece, pieces along a
# middle and the last axis, a piece long enough to be cut into CHUNK blocks, reshapes inside).
CONCAT_CASES = {
    "flat_bucket": (((3,), (1,), (0,), (2 * elementwise.CHUNK + 7,), (37,)), 0, "f32", False),
    "reshaped_bucket": (((5, 7), (13,), (3, 1, 11)), 0, "f32", True),
    "middle_axis": (((4, 3, 5), (4, 1, 5), (4, 0, 5), (4, 6, 5)), 1, "f16", False),
    "last_axis": (((6, 17), (6, 1), (6, 33)), -1, "i1", False),
    "outer_axis_ints": (((2, 9), (5, 9)), 0, "i64", False),
}


@pytest.mark.cross_target(cases=CONCAT_CASES, group=lambda case: 0)
def test_concat_copies_each_piece_in_its_own_loops(cpu, case):
    """Each piece of a kernel yielding a concat is copied by its own loops (the index range picks
    it, no compare or select per element): the pieces' work items follow one another, and ranges
    that cut through pieces (splits) give the reference's result."""
    arg_shapes, axis, dtype, reshape = case

    def body(b, *xs):
        if reshape:
            xs = [b.op("lz.reshape", x, shape=[-1]) for x in xs]
        return b.op("lz.concat", *xs, axis=axis)

    module, kernel = make_kernel([(s, dtype) for s in arg_shapes], body)
    rng = np.random.default_rng(len(arg_shapes))
    inputs = [data(rng, s, dtype, special=False) for s in arg_shapes]
    lowered = lower_kernel(kernel, cpu=cpu)
    (want,) = reference(module, inputs)
    for splits in (1, 5):
        (got,) = run_kernel(kernel, inputs, splits, lowered, cpu=cpu)
        np.testing.assert_array_equal(got, want)
    assert lowered.work_items >= len([s for s in arg_shapes if 0 not in s])  # each piece its own items
    assert "select" not in lowered.llvm_ir.split("t.body:", 1)[1].split("t.exit", 1)[0], "a select in the copy loop"


def test_flat_concat_copies_with_vectors():
    """The DDP bucket's concat (1-d pieces) is vector loads and stores on the host's widest vectors."""
    _, kernel = make_kernel([((1000,), "f32"), ((77,), "f32")], lambda b, x, y: b.op("lz.concat", x, y, axis=0))
    assert re.search(r"vmovups\s+.*%[yz]mm", jit.emit_assembly(lower_kernel(kernel).llvm_ir))


def _lstm_gates(hidden: int):
    """An LSTM step's gates over its [N, 4H] pre-activations (slices: the rows do not coalesce)."""
    def body(b, gates, c):
        i, f, g, o = (b.op("lz.slice", gates, starts=[k * hidden], ends=[(k + 1) * hidden], axes=[1]) for k in range(4))
        c_next = b.op("lz.add", b.op("lz.mul", b.op("lz.sigmoid", f), c),
                      b.op("lz.mul", b.op("lz.sigmoid", i), b.op("lz.tanh", g)))
        return [b.op("lz.mul", b.op("lz.sigmoid", o), b.op("lz.tanh", c_next)), c_next]
    return body


@pytest.mark.cross_target(cases={"h256": 256, "h320": 320, "h300": 300, "h64": 64})
def test_inner_loops_of_whole_interleaved_iterations(cpu, case):
    """Inner loops of a multiple of 64 elements from 256 up are interleaved (LLVM's loop hint), other
    lengths below 512 keep LLVM's choice; both match the reference on every target, split or not."""
    hidden = case
    assert bool(elementwise.interleave_hints(hidden)) == (hidden in (256, 320))
    module, kernel = make_kernel([((5, 4 * hidden), "f32"), ((5, hidden), "f32")], _lstm_gates(hidden))
    rng = np.random.default_rng(hidden)
    inputs = [(rng.standard_normal((5, 4 * hidden)) * 4).astype(np.float32),
              rng.standard_normal((5, hidden)).astype(np.float32)]
    lowered = lower_kernel(kernel, cpu=cpu)
    assert ("llvm.loop.interleave.count" in lowered.llvm_ir) == (hidden in (256, 320))
    want = reference(module, inputs)
    for splits in (1, 3):
        for got, w in zip(run_kernel(kernel, inputs, splits, lowered, cpu=cpu), want):
            assert_matches(got, w, 1e-5, 1e-6)
