"""AMX tiles (codegen/llvm/amx.py): configuration, loads, stores and every dot instruction, exactly
against numpy where this machine has AMX; the instructions selected for sapphirerapids everywhere."""
import ctypes

import numpy as np
import pytest
from llvmlite import ir

from lezero.codegen.llvm import amx
from lezero.codegen.llvm.ir_types import PTR
from lezero.codegen.llvm.jit import compile_module, emit_assembly
from lezero.codegen.llvm.target import cpu_target, host_target

HOST_HAS_AMX = amx.has_amx(host_target(), "int8") and amx.has_amx(host_target(), "bf16")
needs_amx = pytest.mark.skipif(not HOST_HAS_AMX, reason="SKIPPED LOUDLY: this machine (or its OS) has no AMX "
                               "tiles; the instruction selection is still checked by test_amx_instructions_selected")


def _dot_module(operands, depth_bytes):
    """k(a, b, c): c[16x16] = a[16 x depth_bytes] . b (VNNI layout), one dot per 64 bytes of depth."""
    module = ir.Module("amx_test")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR]), "k")
    b = ir.IRBuilder(fn.append_basic_block())
    a, rhs, c = fn.args
    amx.configure(b, {0: (16, 64), 1: (16, 64), 2: (16, 64)})
    amx.zero(b, 0)
    for block in range(depth_bytes // 64):
        amx.load(b, 1, b.gep(a, [ir.Constant(ir.IntType(64), 64 * block)], source_etype=ir.IntType(8)), depth_bytes)
        amx.load(b, 2, b.gep(rhs, [ir.Constant(ir.IntType(64), 16 * 64 * block)], source_etype=ir.IntType(8)), 64)
        amx.dot(b, operands, 0, 1, 2)
    amx.store(b, 0, c, 64)
    amx.release(b)
    b.ret_void()
    return module


def _vnni(rhs: np.ndarray, group: int) -> np.ndarray:
    """[K, 16] -> rows of K/group, each 16 columns x group consecutive k."""
    k = rhs.shape[0]
    return np.ascontiguousarray(rhs.reshape(k // group, group, 16).transpose(0, 2, 1)).reshape(k // group, 16 * group)


@needs_amx
@pytest.mark.parametrize("operands", [("u8", "s8"), ("s8", "s8"), ("s8", "u8"), ("u8", "u8")])
def test_integer_tile_dots_are_exact(operands):
    rng = np.random.default_rng(0)
    dtype = {"u8": np.uint8, "s8": np.int8}
    depth = 128
    a = rng.integers(np.iinfo(dtype[operands[0]]).min, np.iinfo(dtype[operands[0]]).max + 1, (16, depth)).astype(dtype[operands[0]])
    w = rng.integers(np.iinfo(dtype[operands[1]]).min, np.iinfo(dtype[operands[1]]).max + 1, (depth, 16)).astype(dtype[operands[1]])
    a[0], w[:, 0] = np.iinfo(a.dtype).min, np.iinfo(w.dtype).min  # the extremes: no saturation in i32
    packed = np.concatenate([_vnni(w[64 * i:64 * (i + 1)], 4) for i in range(depth // 64)])
    c = np.zeros((16, 16), np.int32)
    kernel = compile_module(_dot_module(operands, depth)).ctypes_function("k", None, [ctypes.c_void_p] * 3)
    kernel(a.ctypes.data, packed.ctypes.data, c.ctypes.data)
    np.testing.assert_array_equal(c, a.astype(np.int64) @ w.astype(np.int64))


@needs_amx
def test_bf16_tile_dot_sums_in_float32():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((16, 64), np.float32)
    w = rng.standard_normal((64, 16), np.float32)
    bits = lambda x: (x.view(np.uint32) >> 16).astype(np.uint16)  # truncation: the inputs are then bf16 values
    a16, w16 = bits(a), bits(w)
    exact = lambda x16: (x16.astype(np.uint32) << 16).view(np.float32)
    packed = _vnni(w16, 2)  # 32 rows of 16 columns x 2 bf16 = 64 bytes
    c = np.zeros((16, 16), np.float32)
    kernel = compile_module(_dot_module(("bf16", "bf16"), 128)).ctypes_function("k", None, [ctypes.c_void_p] * 3)
    kernel(a16.ctypes.data, packed.ctypes.data, c.ctypes.data)
    reference = exact(a16).astype(np.float64) @ exact(w16).astype(np.float64)
    np.testing.assert_allclose(c, reference, rtol=1e-5, atol=1e-5)


def test_amx_instructions_selected():
    asm = emit_assembly(_dot_module(("u8", "s8"), 64), cpu_target("sapphirerapids"))
    for instruction in ("ldtilecfg", "tilezero", "tileloadd", "tdpbusd", "tilestored", "tilerelease"):
        assert instruction in asm, instruction
    assert "tdpbf16ps" in emit_assembly(_dot_module(("bf16", "bf16"), 64), cpu_target("sapphirerapids"))


def test_tile_shapes_are_checked():
    b = ir.IRBuilder(ir.Function(ir.Module(), ir.FunctionType(ir.VoidType(), []), "f").append_basic_block())
    with pytest.raises(ValueError, match="not a tile shape"):
        amx.configure(b, {0: (17, 64)})
    with pytest.raises(ValueError, match="no AMX tile 8"):
        amx.zero(b, 8)


def test_host_keeps_amx_only_with_the_permission():
    if "amx-tile" in host_target().features:
        assert amx.tile_data_permitted()
    else:
        assert not amx.has_amx(host_target())
