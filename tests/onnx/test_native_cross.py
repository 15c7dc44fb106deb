"""lezero-compile for other CPUs than the host (issue 10): executables and shared libraries for
64-bit ARM Linux (kernels by LLVM's AArch64 backend, the C driver by aarch64-linux-gnu-gcc), run
under qemu-aarch64 and compared with ONNX Runtime on this machine; the NEON GEMM tile; ``--cpu``
for another x86-64 CPU; and the errors of a target that cannot be built."""
from __future__ import annotations

import io
import pathlib
import platform
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

import lezero as lz
import lezero.onnx
from lezero.cli.compile import run as compile_cli_run
from lezero.codegen.llvm.gemm import GemmConfig
from lezero.codegen.llvm.target import cpu_target
from lezero.ir import interpret
from lezero.onnx import to_onnx
from lezero.onnx.native import compile_onnx_native
from lezero.runtime.native import compile_module_native, native_target

from support.native_testing import (
    CROSS_CC,
    QEMU,
    TRIPLE,
    convnet_onnx,
    cross_tools,  # noqa: F401 (a fixture)
    elementwise_onnx,
    onnxruntime_outputs,
    run_outputs,
)
from test_light_models import RTOL, feeds_for, load, with_random_weights
from test_native import C_PROGRAM, convnet, elementwise_dtypes, gather_onnx
from test_quantized_cnn import _Batches, float_cnn  # noqa: F401 (float_cnn: a fixture)

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples"
EM_AARCH64, EM_X86_64 = 183, 62
ET_EXEC, ET_DYN = 2, 3  # a static executable, a shared object


def elf_header(path) -> tuple[int, int]:
    """``(e_type, e_machine)`` of a 64-bit little-endian ELF file."""
    header = pathlib.Path(path).read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and header[4] == 2 and header[5] == 1, header  # ELFCLASS64, little-endian
    return int.from_bytes(header[16:18], "little"), int.from_bytes(header[18:20], "little")


def assert_matches_onnxruntime(got: dict, model, feeds: dict, rtol: float, atol: float) -> None:
    want = onnxruntime_outputs(model, feeds)
    assert sorted(got) == sorted(want)
    for name, w in want.items():
        assert got[name].dtype == w.dtype and got[name].shape == w.shape
        np.testing.assert_allclose(got[name], w, rtol=rtol, atol=atol, err_msg=name)


# ------------------------------------------------------------------------------------------------
# AArch64 under qemu
# ------------------------------------------------------------------------------------------------


def test_aarch64_gemm_tile_fills_the_neon_registers():
    """8 rows x 3 vectors of 4 floats: 24 accumulators, 3 vectors of B and 2 of A in 32 registers."""
    config = GemmConfig.for_target(cpu_target("cortex-a72", TRIPLE))
    assert (config.vector_width, config.mr, config.nr_vectors) == (4, 8, 3)
    assert config.mr * config.nr_vectors + config.nr_vectors + config.mr // config.vector_width <= 32
    assert GemmConfig.for_target(cpu_target("generic", TRIPLE)) == config


def test_lezero_cpu_names_a_cpu_of_this_machine_not_of_another_triple(monkeypatch):
    monkeypatch.setenv("LEZERO_CPU", "x86-64-v3")
    assert native_target(triple=TRIPLE).cpu == "generic"
    monkeypatch.setenv("LEZERO_CPU", "cortex-a72")
    assert native_target(triple=TRIPLE).cpu == "cortex-a72"
    assert native_target("neoverse-n1", TRIPLE).cpu == "neoverse-n1"


def test_aarch64_executable_matches_onnxruntime(cross_tools, tmp_path):
    model = convnet_onnx(batch=3)
    result = compile_onnx_native(model, tmp_path / "convnet", triple=TRIPLE, cpu="cortex-a72")
    assert result.program.cpu.triple == "aarch64-unknown-linux-gnu" and result.program.cpu.cpu == "cortex-a72"
    assert elf_header(result.paths[0]) == (ET_EXEC, EM_AARCH64)
    feeds = {"image": np.random.default_rng(3).standard_normal((3, 3, 16, 16)).astype(np.float32)}
    got = run_outputs([QEMU], result, tmp_path, feeds)  # static: no sysroot needed
    assert_matches_onnxruntime(got, model, feeds, rtol=1e-4, atol=1e-6)


def test_aarch64_every_dtype_and_libm(cross_tools, tmp_path):
    """float64 exp through the static libm, int64/int32/bool/uint8 kernels and outputs no kernel
    writes, against the reference interpreter."""
    module = elementwise_dtypes()
    result = compile_module_native(module, tmp_path / "dtypes", triple=TRIPLE, cpu="cortex-a53")
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((3, 5)), rng.integers(-9, 9, 7), np.array(-12, np.int32),
              rng.random(4) < 0.5, rng.integers(0, 255, (2, 2)).astype(np.uint8)]
    got = run_outputs([QEMU], result, tmp_path, dict(zip(["a", "n", "m", "flags", "pixels"], arrays)))
    for t, w in zip(result.program.outputs, interpret(module, "main", *arrays)):
        assert got[t.name].dtype == w.dtype and got[t.name].shape == w.shape, t.name
        np.testing.assert_allclose(got[t.name], w, rtol=1e-12) if w.dtype.kind == "f" else \
            np.testing.assert_array_equal(got[t.name], w)


def test_aarch64_index_out_of_range_fails_the_executable(cross_tools, tmp_path):
    """The bounds checks' status (atomic or/max in the kernel) on AArch64: in range the rows match
    ONNX Runtime's; out of range the executable exits 1 naming the node, the index and the range."""
    model = gather_onnx()
    result = compile_onnx_native(model, tmp_path / "gather", triple=TRIPLE, cpu="cortex-a53")
    ids = {"ids": np.array([0, -1, 9])}
    assert_matches_onnxruntime(run_outputs([QEMU], result, tmp_path, ids), model, ids, rtol=0, atol=0)
    np.save(tmp_path / "bad.npy", np.array([0, 10, 2]))
    done = subprocess.run([QEMU, result.paths[0], "--input", f"ids={tmp_path / 'bad.npy'}", "--output-dir",
                           tmp_path / "bad"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip() == ("gather: error: embed: lz.gather: index 10 is out of range for axis 0 of size 10 "
                                   "(valid: -10 to 9)"), done.stderr


@pytest.mark.slow  # ~14 s to build, ~6 s under qemu
def test_aarch64_light_model_matches_onnxruntime(cross_tools, tmp_path):
    """SqueezeNet, the lightest of the light models, with random weights (as test_light_models)."""
    model = with_random_weights(load("squeezenet"))
    result = compile_onnx_native(model, tmp_path / "squeezenet", triple=TRIPLE)
    assert result.program.cpu.cpu == "generic"
    feeds = feeds_for(model)
    want = onnxruntime_outputs(model, feeds)
    got = run_outputs([QEMU], result, tmp_path, feeds)
    for name, w in want.items():
        np.testing.assert_allclose(got[name], w, rtol=RTOL, atol=1e-6 * float(np.abs(w).max()), err_msg=name)


def residual_conv_stack(channels: int = 16, size: int = 8, depth: int = 5) -> onnx.ModelProto:
    """``depth`` 3x3 convs + bias + ReLU, the second with a residual add: one region the x86 host's
    blocked-layout pass blocks (2 conversions for 5 convs)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    weights = [numpy_helper.from_array((rng.standard_normal((channels, channels, 3, 3)) / (3 * channels ** 0.5))
                                       .astype(np.float32), f"w{i}") for i in range(depth)]
    bias = numpy_helper.from_array(rng.standard_normal(channels).astype(np.float32), "b")
    nodes, last = [], "x"
    for i in range(depth):
        nodes.append(helper.make_node("Conv", [last, f"w{i}", "b"], [f"c{i}"], pads=[1, 1, 1, 1]))
        if i == 1:
            nodes.append(helper.make_node("Add", [f"c{i}", "x"], [f"s{i}"]))
        nodes.append(helper.make_node("Relu", [f"s{i}" if i == 1 else f"c{i}"], [f"r{i}" if i < depth - 1 else "y"]))
        last = f"r{i}"
    shape = [1, channels, size, size]
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], weights + [bias])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_aarch64_executable_of_host_blocked_convs_matches_onnxruntime(cross_tools, tmp_path):
    """The kernel pipeline picks the blocked layout from the host (16 channels on AVX-512, 8 on AVX2,
    none elsewhere), not from the triple: an AArch64 build of such a schedule must still be right."""
    model = residual_conv_stack()
    feeds = {"x": np.random.default_rng(1).standard_normal((1, 16, 8, 8)).astype(np.float32)}
    result = compile_onnx_native(model, tmp_path / "convs", triple=TRIPLE)
    got = run_outputs([QEMU], result, tmp_path, feeds)
    assert_matches_onnxruntime(got, model, feeds, rtol=1e-4, atol=1e-5)


def test_aarch64_demo_mlp_matches_onnxruntime(cross_tools, tmp_path):
    """The demo's SimpleMLP (784 -> 256 -> relu -> 10, random weights) traced, exported to ONNX and
    built for AArch64; 37 rows and K = 784 cross the GEMM's row, column and depth blocks."""
    sys.path.insert(0, str(EXAMPLES))
    from train_mlp import SimpleMLP

    lz.manual_seed(0)
    model = to_onnx(lz.jit.trace(SimpleMLP(), example_inputs=lz.randn(1, 784)))
    result = compile_onnx_native(model, tmp_path / "mlp", shapes={"input": (37, 784)}, triple=TRIPLE,
                                 cpu="neoverse-n1")
    feeds = {"input": np.random.default_rng(4).random((37, 784), dtype=np.float32)}
    got = run_outputs([QEMU], result, tmp_path, feeds)
    assert_matches_onnxruntime(got, model, feeds, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("cpu", ["neoverse-n1", "neoverse-v1"])
def test_aarch64_statically_quantized_cnn_matches_x86(cross_tools, tmp_path, float_cnn, cpu):
    """The CNN ONNX Runtime's quantize_static makes (QDQ, per-channel int8 weights: fold-qdq makes
    its convs and Gemm lz.conv_integer / lz.matmul_integer) built for AArch64: on sdot (neoverse-n1,
    the Gemm's u8 activations read signed) and on neoverse-v1 (the convs' s8 weights sdot, the Gemm's
    u8 activations usdot), under qemu with that CPU model,
    within one quantization step of lezero on this machine and of ONNX Runtime."""
    rng = np.random.default_rng(0)
    quantized = tmp_path / "cnn_qdq.onnx"
    quantize_static(str(float_cnn), str(quantized), _Batches([{"x": rng.standard_normal((5, 1, 8, 8), np.float32)}
                                                              for _ in range(3)]),
                    quant_format=QuantFormat.QDQ, per_channel=True, reduce_range=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    x = rng.standard_normal((5, 1, 8, 8)).astype(np.float32)
    here = lz.onnx.compile(str(quantized)).run({"x": x})["y"]
    result = compile_onnx_native(onnx.load(quantized), tmp_path / "cnn", triple=TRIPLE, cpu=cpu)
    got = run_outputs([QEMU, "-cpu", "max" if cpu == "neoverse-v1" else cpu], result, tmp_path, {"x": x})["y"]
    want = onnxruntime_outputs(onnx.load(quantized), {"x": x})["y"]
    step = (want.max() - want.min()) / 255
    assert np.abs(got - here).max() <= step and np.abs(got - want).max() <= step, \
        (np.abs(got - here).max(), np.abs(got - want).max(), step)


def test_aarch64_shared_library_from_c(cross_tools, tmp_path):
    """``--shared``: an AArch64 ELF shared object, called by a C program built by the cross
    compiler and run under qemu with the cross C library."""
    result = compile_module_native(convnet(), tmp_path / "lib", shared=True, name="convnet", triple=TRIPLE)
    assert elf_header(tmp_path / "lib" / "libconvnet.so") == (ET_DYN, EM_AARCH64)
    (tmp_path / "main.c").write_text(C_PROGRAM)
    built = subprocess.run([CROSS_CC, "-O1", "-o", "main", "main.c", "-I", "lib", "-L", "lib", "-lconvnet",
                            "-Wl,-rpath," + str(tmp_path / "lib")], cwd=tmp_path, capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    # The C library's loader: <sysroot>/lib/ld-linux-aarch64.so.1 (Debian: /usr/aarch64-linux-gnu).
    loader = subprocess.run([CROSS_CC, "-print-file-name=ld-linux-aarch64.so.1"], capture_output=True, text=True)
    sysroot = pathlib.Path(loader.stdout.strip()).resolve().parent.parent
    x = np.random.default_rng(2).standard_normal((2, 3, 8, 8)).astype(np.float32)
    x.tofile(tmp_path / "x.bin")
    done = subprocess.run([QEMU, "-L", str(sysroot), tmp_path / "main", tmp_path / "x.bin"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("error: unknown input 'imag' (the model's inputs: 'image')")
    got = np.array([float(v) for v in lines[2:]], np.float32).reshape(2, 10)
    np.testing.assert_allclose(got, interpret(convnet(), "main", x), rtol=1e-4, atol=1e-6)
    assert sorted(p.name for p in result.paths) == ["convnet.h", "libconvnet.so"]


# ------------------------------------------------------------------------------------------------
# Another x86-64 CPU
# ------------------------------------------------------------------------------------------------


@pytest.mark.skipif(platform.machine() != "x86_64", reason="x86-64 CPUs are this machine's architecture only there")
def test_x86_cpu_goes_into_the_object_file(tmp_path):
    """``--cpu x86-64-v3``: AVX2 kernels (ymm registers, never zmm, whatever the host has)."""
    if shutil.which("objdump") is None:
        pytest.skip("needs objdump (binutils) to read the kernels' object file")
    model = convnet_onnx(batch=2)
    result = compile_onnx_native(model, tmp_path / "convnet", cpu="x86-64-v3", keep_build_dir=True)
    disassembly = subprocess.run(["objdump", "-d", result.build_dir / "kernels_0.o"], capture_output=True,
                                 text=True).stdout
    assert "%ymm" in disassembly and "%zmm" not in disassembly
    assert elf_header(result.paths[0])[1] == EM_X86_64
    if cpu_target("x86-64-v3").missing_here():
        pytest.skip(f"this machine cannot run x86-64-v3 code ({cpu_target('x86-64-v3').missing_here()})")
    feeds = {"image": np.random.default_rng(5).standard_normal((2, 3, 16, 16)).astype(np.float32)}
    assert_matches_onnxruntime(run_outputs([], result, tmp_path, feeds), model, feeds, rtol=1e-4, atol=1e-6)


# ------------------------------------------------------------------------------------------------
# Errors: one line, exit code 1, nothing written
# ------------------------------------------------------------------------------------------------


def compile_cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = compile_cli_run([str(a) for a in argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("flags, message", [
    (["--triple", "riscv64-linux-gnu"], "unknown target triple 'riscv64-linux-gnu': lezero generates code for "
                                        "aarch64, x86_64 (e.g. aarch64-linux-gnu)"),
    (["--triple", TRIPLE, "--cpu", "cortex-z9"], "unknown cpu 'cortex-z9' for aarch64; known: host, generic, "),
    (["--cpu", "pentium9"], "unknown cpu 'pentium9' for "),
    (["--triple", "aarch64-apple-darwin"], "native executables and libraries are built for Linux, not "),
], ids=["triple", "aarch64 cpu", "cpu", "not linux"])
def test_unknown_target_is_one_line(tmp_path, flags, message):
    (tmp_path / "m.onnx").write_bytes(elementwise_onnx().SerializeToString())
    code, out, err = compile_cli(tmp_path / "m.onnx", "-o", tmp_path / "out" / "m", *flags)
    assert code == 1 and out == ""
    assert err.startswith(f"lezero-compile: error: {message}") and err.count("\n") == 1, err
    assert not (tmp_path / "out").exists()


def test_missing_cross_compiler_says_what_to_install(tmp_path, monkeypatch):
    (tmp_path / "m.onnx").write_bytes(elementwise_onnx().SerializeToString())
    (tmp_path / "bin").mkdir()
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))  # no aarch64-linux-gnu-gcc (and no host cc)
    code, out, err = compile_cli(tmp_path / "m.onnx", "-o", tmp_path / "out" / "m", "--triple", TRIPLE)
    assert code == 1 and out == ""
    assert err == ("lezero-compile: error: no C compiler for aarch64: 'aarch64-linux-gnu-gcc' is not on PATH (on "
                   "Debian or Ubuntu: apt-get install gcc-aarch64-linux-gnu libc6-dev-arm64-cross)\n")
    assert not (tmp_path / "out").exists()
