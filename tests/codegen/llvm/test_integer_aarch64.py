"""The int8 GEMM and conv (lezero/codegen/llvm/integer_gemm.py, integer_conv.py) on AArch64: NEON
``sdot`` where the CPU has dotprod (neoverse-n1; an unsigned lhs read signed, its zero point and
row sums moved by -128), ``usdot`` for an unsigned lhs where it has i8mm too (neoverse-v1: u8 x s8
as on x86; a signed lhs takes sdot there), widening multiplies elsewhere (generic).  One executable per CPU holds every case (matmul_integer with M, N and K tails,
K blocks, a batched broadcast rhs, every i8/ui8 pairing at the ends of their ranges, per-column zero
points, a fused requantize that saturates at both ends; conv_integer with K blocks, strides,
per-channel zero points and a requantize), built by lezero-compile's builder and run under
qemu-aarch64 with the CPU model of the target (neoverse-n1 has no i8mm, cortex-a53 no dotprod:
an instruction the target lacks would fault), compared with the reference interpreter bit for bit.
And the kernels' instructions, from the assembly."""
from __future__ import annotations

import numpy as np
import pytest
from support.ir_building import build
from support.native_testing import QEMU, TRIPLE, cross_tools, run_outputs  # noqa: F401 (cross_tools: a fixture)

from lezero.codegen.llvm.backend import lower_kernel
from lezero.codegen.llvm.jit import emit_assembly
from lezero.codegen.llvm.target import cpu_target
from lezero.codegen.schedule import schedule
from lezero.ir import interpret
from lezero.ir.types import ELEMENT_TYPES, F32, tensor
from lezero.runtime.native import compile_module_native

NP = {"i8": np.int8, "ui8": np.uint8, "i32": np.int32, "f32": np.float32}
# the lezero CPU, qemu's CPU model that runs it, the dot product instruction its kernels use for a ui8 / i8 lhs
CPUS = {"neoverse-n1": ("neoverse-n1", ("sdot", "sdot")), "neoverse-v1": ("max", ("usdot", "sdot")),
        "generic": ("cortex-a53", (None, None))}

# matmuls: (a shape, b shape, a type, b type, per-column rhs zero point); 6-row tiles leave row tails
MATMULS = [((13, 71), (71, 150), "ui8", "i8", True),  # M, N (2 panels + 22 columns), K (71 = 4 * 17 + 3) tails
           ((9, 263), (263, 70), "i8", "ui8", True),  # two K blocks (256 + 7)
           ((3, 1, 5, 9), (2, 9, 70), "i8", "i8", False),  # batched, the lhs broadcast
           ((7, 64), (64, 64), "ui8", "ui8", False)]
# convs: (x shape, w shape, x type, w type, per-channel weight zero point, window)
CONVS = [((1, 64, 12, 13), (20, 64, 3, 3), "ui8", "i8", False, {"pads": [1, 1, 1, 1]}),  # K 576: 3 K blocks
         ((2, 5, 9, 40), (7, 5, 3, 3), "i8", "ui8", True, {"strides": [2, 2], "pads": [1, 0, 1, 1]})]
REQUANTIZED_MATMUL = ((37, 100), (100, 70))  # ui8 x i8 -> * per-column scale -> quantize to ui8
REQUANTIZED_CONV = ((1, 32, 14, 15), (16, 32, 3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1]})  # -> i8


def _extremes(rng, shape, dt):
    info = np.iinfo(NP[dt])
    v = rng.integers(info.min, info.max, shape, endpoint=True)
    return np.where(rng.random(shape) < 0.5, rng.choice([info.min, info.max], shape), v).astype(NP[dt])


def _cases():
    """The module (``@f``: every case, one output each) and its arguments."""
    rng = np.random.default_rng(12)
    types, arrays, makers = [], [], []

    def arg(array, dt):
        types.append(tensor(array.shape, dt))
        arrays.append(array)
        return len(arrays) - 1

    for a_shape, b_shape, a_dt, b_dt, per_column in MATMULS:
        zb = _extremes(rng, (b_shape[-1],), b_dt) if per_column else np.asarray(np.iinfo(NP[b_dt]).min, NP[b_dt])
        at = [arg(_extremes(rng, a_shape, a_dt), a_dt), arg(_extremes(rng, b_shape, b_dt), b_dt),
              arg(np.asarray(np.iinfo(NP[a_dt]).max, NP[a_dt]), a_dt), arg(zb, b_dt)]
        makers.append(lambda b, x, at=at: b.op("lz.matmul_integer", *(x[i] for i in at)))
    for x_shape, w_shape, x_dt, w_dt, per_channel, window in CONVS:
        zw = _extremes(rng, (w_shape[0],), w_dt) if per_channel else np.asarray(np.iinfo(NP[w_dt]).min, NP[w_dt])
        at = [arg(_extremes(rng, x_shape, x_dt), x_dt), arg(_extremes(rng, w_shape, w_dt), w_dt),
              arg(np.asarray(np.iinfo(NP[x_dt]).max, NP[x_dt]), x_dt), arg(zw, w_dt)]
        makers.append(lambda b, x, at=at, window=window: b.op("lz.conv_integer", *(x[i] for i in at), **window))

    def requantize(b, y, scale, to):  # round(cast(y) * scale) + zero, clamped, cast: the quantize of a QLinear op
        lo, hi = np.iinfo(NP[to]).min, np.iinfo(NP[to]).max
        y = b.op("lz.mul", b.op("lz.cast", y, to=F32), scale)
        q = b.op("lz.add", b.op("lz.round", y), b.constant(np.asarray(3 if to == "ui8" else -5, np.float32)))
        q = b.op("lz.min", b.op("lz.max", q, b.constant(np.asarray(lo, np.float32))),
                 b.constant(np.asarray(hi, np.float32)))
        return b.op("lz.cast", q, to=ELEMENT_TYPES[to])

    a_shape, b_shape = REQUANTIZED_MATMUL
    at = [arg(_extremes(rng, a_shape, "ui8"), "ui8"), arg(_extremes(rng, b_shape, "i8"), "i8"),
          arg(np.asarray(7, np.uint8), "ui8"), arg(np.asarray(-2, np.int8), "i8"),
          arg((rng.random(b_shape[-1]) * 1e-3).astype(np.float32), "f32")]
    makers.append(lambda b, x, at=at: requantize(b, b.op("lz.matmul_integer", *(x[i] for i in at[:4])), x[at[4]],
                                                 "ui8"))
    x_shape, w_shape, window = REQUANTIZED_CONV
    o = w_shape[0]
    at = [arg(_extremes(rng, x_shape, "ui8"), "ui8"), arg(_extremes(rng, w_shape, "i8"), "i8"),
          arg(np.asarray(131, np.uint8), "ui8"), arg(np.asarray(0, np.int8), "i8"),
          arg(rng.integers(-5000, 5000, (o, 1, 1)).astype(np.int32), "i32"),
          arg((rng.random((o, 1, 1)) * 1e-3).astype(np.float32), "f32")]
    makers.append(lambda b, x, at=at, window=window: requantize(
        b, b.op("lz.add", b.op("lz.conv_integer", *(x[i] for i in at[:4]), **window), x[at[4]]), x[at[5]], "i8"))
    module = build(types, lambda b, *x: [make(b, x) for make in makers])
    return module, arrays


@pytest.mark.parametrize("cpu", list(CPUS))
def test_int8_gemm_and_conv_are_exact_on_aarch64(cross_tools, tmp_path, cpu):
    module, arrays = _cases()
    want = interpret(module, "f", *arrays)
    for out, to in zip(want[-2:], (np.uint8, np.int8)):  # the requantized cases reach both ends
        assert {np.iinfo(to).min, np.iinfo(to).max} <= set(np.unique(out))
    result = compile_module_native(module, tmp_path / "int8", triple=TRIPLE, cpu=cpu)
    got = run_outputs([QEMU, "-cpu", CPUS[cpu][0]], result, tmp_path,
                      {t.name: a for t, a in zip(result.program.inputs, arrays)})
    assert len(got) == len(want)
    for t, w in zip(result.program.outputs, want):
        assert got[t.name].dtype == w.dtype and got[t.name].shape == w.shape, t.name
        np.testing.assert_array_equal(got[t.name], w, err_msg=f"{t.name} compiled for {cpu}")


def _assembly(cpu, a_dt):
    module = build([tensor((64, 256), a_dt), tensor((256, 64), "i8"), tensor((), a_dt), tensor((), "i8")],
                   lambda b, *x: b.op("lz.matmul_integer", *x))
    kernel = next(op for op in schedule(module).functions[0].entry_block.ops if op.name == "lz.kernel")
    target = cpu_target(cpu, TRIPLE)
    return emit_assembly(lower_kernel(kernel, cpu=target).llvm_ir, target)


@pytest.mark.parametrize("cpu", list(CPUS))
def test_each_aarch64_cpu_gets_its_dot_product_instruction(cpu):
    """neoverse-n1 (dotprod) ``sdot``; neoverse-v1 (i8mm) ``usdot`` for a u8 lhs and ``sdot`` for an
    s8 one; a register tile's 24 per k step at least; generic neither (widening multiply-adds).
    (LLVM sums the lhs rows' bytes with ``udot``/``sdot`` by ones itself where the CPU has dotprod.)"""
    for a_dt, instruction in zip(("ui8", "i8"), CPUS[cpu][1]):
        words = [line.split()[0] for line in _assembly(cpu, a_dt).splitlines() if line.startswith("\t")]
        if instruction is None:
            assert not {"sdot", "udot", "usdot", "sudot"} & set(words) and "mla" in words, (cpu, a_dt)
            continue
        assert words.count(instruction) >= 24, (cpu, a_dt, words.count(instruction))
        if instruction == "sdot":  # no i8mm instruction on a CPU without it, none for a signed lhs
            assert not {"usdot", "sudot"} & set(words), (cpu, a_dt)
