"""SIMD vectors in LLVM IR, as the GEMM (``gemm.py``) and its epilogues build them: splats,
masked loads and stores, lane shuffles (``transpose_square``, which the elementwise transposes use
too), overloaded intrinsics declared once, and the small scalar pieces the generator's loops use
(a counted loop, a stack array as an opaque pointer, a struct field's address, a minimum).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Sequence

import llvmlite.ir as ir

from lezero.codegen.llvm.ir_types import FLOAT, HALF, I32, I64, PTR, VOID

FLOAT_BYTES = 4


def intrinsic(module: ir.Module, name: str, return_type: ir.Type, arg_types: Sequence[ir.Type]) -> ir.Function:
    """Declare (once) an overloaded intrinsic, its name mangled from the types, e.g. llvm.fma.v16f32."""
    def mangle(t: ir.Type) -> str:
        if isinstance(t, ir.VectorType):
            return f"v{t.count}{mangle(t.element)}"
        if isinstance(t, ir.PointerType):
            return "p0"
        if isinstance(t, ir.FloatType):
            return "f32"
        if isinstance(t, ir.HalfType):
            return "f16"
        if isinstance(t, ir.IntType):
            return f"i{t.width}"
        raise TypeError(t)

    overloads = {"llvm.fma": [return_type], "llvm.fmuladd": [return_type], "llvm.maxnum": [return_type],
                 "llvm.minnum": [return_type], "llvm.masked.load": [return_type, PTR], "llvm.masked.store": [arg_types[0], PTR]}
    mangled = ".".join([name] + [mangle(t) for t in overloads.get(name, [])])
    existing = module.globals.get(mangled)
    if existing is not None:
        return existing
    return ir.Function(module, ir.FunctionType(return_type, list(arg_types)), mangled)


def call_intrinsic(builder: ir.IRBuilder, name: str, *args: ir.Value) -> ir.Value:
    function = intrinsic(builder.module, name, args[0].type, [a.type for a in args])
    return builder.call(function, list(args))


def splat(builder: ir.IRBuilder, scalar: ir.Value, width: int) -> ir.Value:
    vector_type = ir.VectorType(scalar.type, width)
    one_lane = builder.insert_element(ir.Constant(vector_type, None), scalar, ir.Constant(I32, 0))
    return builder.shuffle_vector(one_lane, ir.Constant(vector_type, None), ir.Constant(ir.VectorType(I32, width), [0] * width))


def concatenate(builder: ir.IRBuilder, vectors: Sequence[ir.Value]) -> ir.Value:
    """One vector of all lanes of ``vectors`` (same element type), in order."""
    vectors = list(vectors)
    while len(vectors) > 1:
        joined = []
        for first, second in zip(vectors[::2], vectors[1::2]):
            n1, n2 = first.type.count, second.type.count
            if n2 < n1:  # shufflevector wants equal operand types: widen the second (lane 0 as filler)
                second = builder.shuffle_vector(second, second, ir.Constant(
                    ir.VectorType(I32, n1), list(range(n2)) + [0] * (n1 - n2)))
            mask = list(range(n1)) + [n1 + lane for lane in range(n2)]
            joined.append(builder.shuffle_vector(first, second, ir.Constant(ir.VectorType(I32, n1 + n2), mask)))
        if len(vectors) % 2:
            joined.append(vectors[-1])
        vectors = joined
    return vectors[0]


def interleave(builder: ir.IRBuilder, vectors: Sequence[ir.Value]) -> ir.Value:
    """result[k * len(vectors) + i] = vectors[i][k]: a transpose of the rows ``vectors``."""
    count, width = len(vectors), vectors[0].type.count
    everything = concatenate(builder, vectors)
    mask = [i * width + k for k in range(width) for i in range(count)]
    return builder.shuffle_vector(everything, everything, ir.Constant(ir.VectorType(I32, count * width), mask))


def transpose_square(builder: ir.IRBuilder, rows: Sequence[ir.Value]) -> list[ir.Value]:
    """The transpose of a W x W matrix held as W vectors of W lanes (W a power of two):
    result[l][i] = rows[i][l]. Round d (W/2, W/4, ..., 1) swaps bit d of the row number with
    bit d of the lane number, one two-input shuffle per vector (vpermt2ps on AVX-512)."""
    w = len(rows)
    rows = list(rows)
    d = w // 2
    while d:
        low = ir.Constant(ir.VectorType(I32, w), [l if not l & d else w + l - d for l in range(w)])
        high = ir.Constant(ir.VectorType(I32, w), [l + d if not l & d else w + l for l in range(w)])
        out = list(rows)
        for i in range(w):
            if not i & d:
                out[i] = builder.shuffle_vector(rows[i], rows[i + d], low)
                out[i + d] = builder.shuffle_vector(rows[i], rows[i + d], high)
        rows = out
        d //= 2
    return rows


def lane_mask(builder: ir.IRBuilder, first_lane: int, lanes_valid: ir.Value, width: int) -> ir.Value:
    """<width x i1>: lane l is on when first_lane + l < lanes_valid."""
    lanes = ir.Constant(ir.VectorType(I64, width), [first_lane + l for l in range(width)])
    return builder.icmp_signed("<", lanes, splat(builder, lanes_valid, width))


def load_vector(builder: ir.IRBuilder, address: ir.Value, width: int, mask: ir.Value | None,
                 align: int = FLOAT_BYTES, element: ir.Type = FLOAT) -> ir.Value:
    """Load W floats (or W ``element`` values) from an unaligned address; with a mask, off lanes
    read nothing and give 0."""
    vector_type = ir.VectorType(element, width)
    if mask is None:
        return builder.load(address, typ=vector_type, align=align)
    zeros = ir.Constant(vector_type, [0.0] * width)
    function = intrinsic(builder.module, "llvm.masked.load", vector_type, [PTR, I32, mask.type, vector_type])
    return builder.call(function, [address, ir.Constant(I32, align), mask, zeros])


def round_to_bf16(builder: ir.IRBuilder, value: ir.Value) -> ir.Value:
    """A float32 value or vector rounded to the nearest bf16 (ties to even), kept in float32; nan
    stays as it is (``numerics.round_to_bf16``): the scalar builder's bf16 rounding, and a bf16
    GEMM's operand cast from float32, rounded as it is packed (gemm.py's ``bf16_operands``)."""
    def like(constant: int) -> ir.Constant:
        if isinstance(value.type, ir.VectorType):
            return ir.Constant(ir.VectorType(I32, value.type.count), [constant] * value.type.count)
        return ir.Constant(I32, constant)

    bits = builder.bitcast(value, ir.VectorType(I32, value.type.count) if isinstance(value.type, ir.VectorType)
                           else I32)
    lsb = builder.and_(builder.lshr(bits, like(16)), like(1))
    rounded = builder.and_(builder.add(builder.add(bits, like(0x7FFF)), lsb), like(-0x10000))
    return builder.select(builder.fcmp_unordered("uno", value, value), value, builder.bitcast(rounded, value.type))


def round_to(builder: ir.IRBuilder, value: ir.Value, element: str) -> ir.Value:
    """A float32 value or vector rounded to ``element``, "bf16" (``round_to_bf16``) or "f16" (to half
    and back, ties to even; F16C's vcvtps2ph where the target has it), kept in float32: the scalar
    builder's rounding and casts, and a low-precision matmul's operand read through its cast from
    float32 (the same rounding, so fused and unfused agree bit for bit)."""
    if element == "bf16":
        return round_to_bf16(builder, value)
    if element != "f16":
        raise ValueError(f"round_to: no rounding of float32 to {element}")
    half = ir.VectorType(HALF, value.type.count) if isinstance(value.type, ir.VectorType) else HALF
    return builder.fpext(builder.fptrunc(value, half), value.type)


def store_vector(builder: ir.IRBuilder, value: ir.Value, address: ir.Value, mask: ir.Value | None,
                  align: int = FLOAT_BYTES) -> None:
    if mask is None:
        builder.store(value, address, align=align)
        return
    function = intrinsic(builder.module, "llvm.masked.store", VOID, [value.type, PTR, I32, mask.type])
    builder.call(function, [value, address, ir.Constant(I32, align), mask])


def field_address(builder: ir.IRBuilder, struct_pointer: ir.Value, struct_type: ir.Type, index: int) -> ir.Value:
    """&struct_pointer->field[index]."""
    return builder.gep(struct_pointer, [ir.Constant(I32, 0), ir.Constant(I32, index)], source_etype=struct_type)


def opaque_alloca(builder: ir.IRBuilder, element_type: ir.Type, count: ir.Value, name: str) -> ir.Value:
    """Stack space for ``count`` elements, as an opaque pointer.

    llvmlite types an alloca as a typed pointer, and a GEP keeps its base's pointer type; the
    opaque type keeps every address derived from it an opaque ``ptr`` (the text is the same).
    """
    slot = builder.alloca(element_type, size=count, name=name)
    slot.type = PTR
    return slot


def select_min(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    return builder.select(builder.icmp_signed("<", a, b), a, b)


@contextmanager
def counted_loop(builder: ir.IRBuilder, start: ir.Value, stop: ir.Value, step: int | ir.Value,
                  name: str) -> Iterator[ir.Value]:
    """``for i in range(start, stop, step)`` (step > 0); yields i, the body is emitted inside."""
    step = ir.Constant(I64, step) if isinstance(step, int) else step
    preheader = builder.block
    header = builder.append_basic_block(f"{name}.header")
    body = builder.append_basic_block(f"{name}.body")
    exit_block = builder.append_basic_block(f"{name}.exit")
    builder.branch(header)
    builder.position_at_end(header)
    index = builder.phi(I64, name=name)
    index.add_incoming(start, preheader)
    builder.cbranch(builder.icmp_signed("<", index, stop), body, exit_block)
    builder.position_at_end(body)
    yield index
    index.add_incoming(builder.add(index, step, name=f"{name}.next"), builder.block)
    builder.branch(header)
    builder.position_at_end(exit_block)
