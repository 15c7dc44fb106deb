"""Native executables and shared libraries (lezero/runtime/native/, lezero/onnx/native.py), run
without Python: ONNX models against ONNX Runtime; lz IR modules against the reference interpreter
for the executable's error messages, the C API from a C program, shape binding, kernel
deduplication, threads and every .npy dtype."""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from lezero.ir import Builder, FuncOp, FunctionType, ModuleOp, interpret
from lezero.ir.attributes import ArrayAttr, StringAttr
from lezero.ir.types import F32, F64, I1, I32, I64, UI8, tensor
from lezero.ir.core import INPUT_NAMES_ATTR, OUTPUT_NAMES_ATTR
from lezero.onnx.native import compile_onnx_native
from lezero.runtime.native import NativeCompileError, compile_module_native
from lezero.runtime.native.program import bind_shapes, plan_program
from lezero.runtime.plan import specialize

from support.native_testing import convnet_onnx, elementwise_onnx, onnxruntime_outputs

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="needs a C compiler")


def named_module(arg_types, body, input_names, output_names) -> ModuleOp:
    """``@main`` as the ONNX importer makes it: graph input and output names as attributes."""
    func = FuncOp("main", FunctionType(list(arg_types), []))
    b = Builder.at_end(func.entry_block)
    results = body(b, *func.arguments)
    results = list(results) if isinstance(results, (list, tuple)) else [results]
    b.create("func.return", results, result_types=[])
    func.update_function_type()
    func.attributes[INPUT_NAMES_ATTR] = ArrayAttr([StringAttr(n) for n in input_names])
    func.attributes[OUTPUT_NAMES_ATTR] = ArrayAttr([StringAttr(n) for n in output_names])
    return ModuleOp([func])


def convnet(batch=2) -> ModuleOp:
    """Conv + bias + Relu + MaxPool + Flatten + Gemm + Softmax, the ONNX test model's ops."""
    rng = np.random.default_rng(0)

    def body(b, x):
        w = b.constant(rng.standard_normal((4, 3, 3, 3)).astype(np.float32))
        bias = b.constant(rng.standard_normal((4, 1, 1)).astype(np.float32))
        y = b.op("lz.relu", b.op("lz.add", b.op("lz.conv2d", x, w, pads=[1, 1, 1, 1]), bias))
        y = b.op("lz.reshape", b.op("lz.max_pool2d", y, kernel=[2, 2], strides=[2, 2]), shape=[-1, 64])
        fc = b.op("lz.add", b.op("lz.matmul", y, b.constant(rng.standard_normal((64, 10)).astype(np.float32))),
                  b.constant(rng.standard_normal(10).astype(np.float32)))
        return b.op("lz.softmax", fc, axis=1)

    return named_module([tensor((batch, 3, 8, 8), F32)], body, ["image"], ["probabilities"])


def run_exe(exe, *args, **kw):
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=60, **kw)


def save(tmp_path, name, array, fortran=False):
    path = tmp_path / f"{name}.npy"
    np.save(path, np.asfortranarray(array) if fortran else array)
    return path


@pytest.fixture(scope="module")
def convnet_exe(tmp_path_factory):
    out = tmp_path_factory.mktemp("convnet")
    result = compile_module_native(convnet(), out / "convnet", name="convnet")
    return result.paths[0]


def test_executable_matches_the_interpreter(convnet_exe, tmp_path):
    x = np.random.default_rng(1).standard_normal((2, 3, 8, 8)).astype(np.float32)
    done = run_exe(convnet_exe, "--input", f"image={save(tmp_path, 'x', x)}", "--output-dir", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    got = np.load(tmp_path / "out" / "probabilities.npy")
    want = interpret(convnet(), "main", x)
    assert got.dtype == np.float32 and got.shape == (2, 10)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
    assert sorted(os.listdir(tmp_path / "out")) == ["probabilities.npy"]  # no temporary files left
    # A Fortran-ordered file holds the same array.
    done = run_exe(convnet_exe, f"--input=image={save(tmp_path, 'xf', x, fortran=True)}",
                   "--output-dir", tmp_path / "outf", "--threads", "2", "--repeat", "3")
    assert done.returncode == 0, done.stderr
    assert "3 runs" in done.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "outf" / "probabilities.npy"), got)


def test_executable_profile_times_every_kernel(convnet_exe, tmp_path):
    """``--profile`` (issue 16): a row per kernel of the plan, slowest first, with its share of the
    runs' wall time and its rates; the kernels' shares add up to at most the wall time, and the
    outputs are the unprofiled run's."""
    x = np.random.default_rng(2).standard_normal((2, 3, 8, 8)).astype(np.float32)
    plain = run_exe(convnet_exe, "--input", f"image={save(tmp_path, 'x', x)}", "--output-dir", tmp_path / "plain")
    done = run_exe(convnet_exe, "--input", f"image={tmp_path / 'x.npy'}", "--output-dir", tmp_path / "out",
                   "--repeat", "5", "--profile")
    assert plain.returncode == 0 and done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "probabilities.npy"),
                                  np.load(tmp_path / "plain" / "probabilities.npy"))
    lines = done.stderr.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:3] == ["kernel", "ms/run", "share"])
    summary = next(line for line in lines if "launches per run" in line)
    launches = int(summary.split()[0])
    rows = [line.split() for line in lines[header + 1:header + 1 + launches]]
    module = convnet()
    scheduled = specialize(module, "main", bind_shapes(module.lookup("main"), {}))
    program = plan_program(scheduled, scheduled.lookup("main"), "convnet", "test")
    assert launches == len(program.launches) and {r[0] for r in rows} == {lau.name for lau in program.launches}
    times = [float(r[1]) for r in rows]
    assert times == sorted(times, reverse=True)
    shares = [float(r[2].rstrip("%")) for r in rows]
    assert 0 < sum(shares) <= 100.5
    conv_rows = [r for r in rows if "conv" in r[0]]
    assert conv_rows and all(float(r[3]) > 0 for r in conv_rows)  # GFLOP/s from codegen's estimate


@pytest.mark.parametrize("model, shapes, feeds", [
    (convnet_onnx, {"image": (2, 3, 16, 16)}, {"image": (2, 3, 16, 16)}),
    (elementwise_onnx, {}, {"a": (4, 5), "b": (5,)}),
], ids=["convnet", "elementwise"])
def test_onnx_model_matches_onnxruntime(tmp_path, model, shapes, feeds):
    model = model()
    result = compile_onnx_native(model, tmp_path / "model", shapes=shapes)
    rng = np.random.default_rng(5)
    arrays = {name: rng.standard_normal(shape).astype(np.float32) for name, shape in feeds.items()}
    args = []
    for name, array in arrays.items():
        args += ["--input", f"{name}={save(tmp_path, name, array)}"]
    done = run_exe(result.paths[0], *args, "--output-dir", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    want = onnxruntime_outputs(model, arrays)
    assert sorted(os.listdir(tmp_path / "out")) == sorted(f"{name}.npy" for name in want)
    for name, w in want.items():
        got = np.load(tmp_path / "out" / f"{name}.npy")
        assert got.dtype == w.dtype and got.shape == w.shape
        np.testing.assert_allclose(got, w, rtol=1e-4, atol=1e-6)


def test_onnx_dynamic_dims_must_be_bound(tmp_path):
    with pytest.raises(NativeCompileError, match=r"input 'image' has dynamic dims: \?x3x16x16, dim 0 \('N'\) "
                                                 r"unbound; bind them with --shape image=1x3x16x16"):
        compile_onnx_native(convnet_onnx(), tmp_path / "model")
    assert not (tmp_path / "model").exists()


def test_executable_info(convnet_exe):
    done = run_exe(convnet_exe, "--info")
    assert done.returncode == 0
    assert "image: float32 2x3x8x8" in done.stdout and "probabilities: float32 2x10 -> probabilities.npy" in done.stdout


@pytest.mark.parametrize("case, expected", [
    ("missing file", "input 'image': cannot open '{tmp}/nope.npy': No such file or directory"),
    ("wrong shape", "input 'image': '{tmp}/bad.npy' has shape 2x3x8x9, the model takes 2x3x8x8"),
    ("wrong dtype", "input 'image': '{tmp}/bad.npy' holds float64, the model takes float32"),
    ("unknown input", "unknown input 'imag'"),
    ("missing input", "missing input 'image' (give it with --input image=FILE.npy)"),
    ("not npy", "input 'image': '{tmp}/bad.npy': not a .npy file"),
    ("truncated", "input 'image': '{tmp}/bad.npy' is truncated"),
    ("no output dir", "missing --output-dir"),
    ("bad option", "unknown argument '--frobnicate'"),
])
def test_executable_errors(convnet_exe, tmp_path, case, expected):
    bad = tmp_path / "bad.npy"
    good = save(tmp_path, "good", np.zeros((2, 3, 8, 8), np.float32))
    args = ["--input", f"image={bad}", "--output-dir", tmp_path / "out"]
    if case == "missing file":
        args[1] = f"image={tmp_path}/nope.npy"
    elif case == "wrong shape":
        np.save(bad, np.zeros((2, 3, 8, 9), np.float32))
    elif case == "wrong dtype":
        np.save(bad, np.zeros((2, 3, 8, 8), np.float64))
    elif case == "unknown input":
        args[1] = f"imag={good}"
    elif case == "missing input":
        args = args[2:]
    elif case == "not npy":
        bad.write_text("hello")
    elif case == "truncated":
        bad.write_bytes(good.read_bytes()[:-8])
    elif case == "no output dir":
        args = args[:2]
    elif case == "bad option":
        args.append("--frobnicate")
    done = run_exe(convnet_exe, *args)
    assert done.returncode == 1
    assert expected.format(tmp=tmp_path) in done.stderr, done.stderr
    assert not (tmp_path / "out").exists() or not os.listdir(tmp_path / "out")


C_PROGRAM = r"""
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "convnet.h"

int main(int argc, char **argv) {
    if (lz_model_num_inputs() != 1 || lz_model_num_outputs() != 1) return 10;
    const lz_tensor_desc *in = lz_model_input(0), *out = lz_model_output(0);
    if (strcmp(in->name, "image") || in->dtype != LZ_FLOAT32 || in->rank != 4 || in->shape[3] != 8) return 11;
    if (strcmp(out->name, "probabilities") || out->nbytes != 2 * 10 * sizeof(float)) return 12;
    if (lz_model_input_index("image") != 0 || lz_model_output_index("nope") != -1 || lz_model_input(1)) return 13;
    if (strcmp(lz_dtype_name(in->dtype), "float32") || lz_dtype_size(LZ_INT64) != 8) return 14;

    float *x = malloc(in->nbytes), *y = malloc(out->nbytes);
    FILE *f = fopen(argv[1], "rb");
    if (!f || fread(x, 1, in->nbytes, f) != in->nbytes) return 15;
    fclose(f);
    lz_model *m = lz_model_create(2);
    if (!m) { fprintf(stderr, "%s\n", lz_model_last_error(NULL)); return 16; }

    const char *in_names[] = {"image"}, *out_names[] = {"probabilities"};
    const void *inputs[] = {x};
    void *outputs[] = {y};
    if (lz_model_run(m, in_names, inputs, 1, out_names, outputs, 1) != 0) {
        fprintf(stderr, "%s\n", lz_model_last_error(m));
        return 17;
    }
    /* errors name the input */
    const char *wrong[] = {"imag"};
    if (lz_model_run(m, wrong, inputs, 1, out_names, outputs, 1) == 0) return 18;
    printf("error: %s\n", lz_model_last_error(m));
    if (lz_model_run(m, in_names, inputs, 0, out_names, outputs, 1) == 0) return 19;
    printf("error: %s\n", lz_model_last_error(m));
    /* positional inputs, outputs left to the model: runs, writes nothing */
    if (lz_model_run(m, NULL, inputs, 1, NULL, NULL, 0) != 0) return 20;
    for (int i = 0; i < 20; i++) printf("%.9g\n", y[i]);
    lz_model_destroy(m);
    free(x);
    free(y);
    return 0;
}
"""


def test_shared_library_from_c(tmp_path):
    result = compile_module_native(convnet(), tmp_path / "lib", shared=True, name="convnet")
    assert sorted(p.name for p in result.paths) == ["convnet.h", "libconvnet.so"]
    assert sorted(os.listdir(tmp_path / "lib")) == ["convnet.h", "libconvnet.so"]
    exported = subprocess.run(["nm", "-D", "--defined-only", tmp_path / "lib" / "libconvnet.so"],
                              capture_output=True, text=True).stdout
    assert "lz_model_run" in exported and "lz_fused" not in exported and "lz_weights" not in exported

    (tmp_path / "main.c").write_text(C_PROGRAM)
    compiled = subprocess.run([os.environ.get("CC", "cc"), "-O1", "-o", "main", "main.c", "-I", "lib", "-L", "lib",
                               "-lconvnet", "-Wl,-rpath," + str(tmp_path / "lib")], cwd=tmp_path,
                              capture_output=True, text=True)
    assert compiled.returncode == 0, compiled.stderr
    x = np.random.default_rng(2).standard_normal((2, 3, 8, 8)).astype(np.float32)
    x.tofile(tmp_path / "x.bin")
    done = subprocess.run([tmp_path / "main", tmp_path / "x.bin"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stderr)
    lines = done.stdout.splitlines()
    assert lines[0].startswith("error: unknown input 'imag' (the model's inputs: 'image')")
    assert lines[1] == "error: missing input 'image'"
    got = np.array([float(v) for v in lines[2:]], np.float32).reshape(2, 10)
    np.testing.assert_allclose(got, interpret(convnet(), "main", x), rtol=1e-4, atol=1e-6)


def elementwise_dtypes() -> ModuleOp:
    """One output per dtype, and outputs no kernel writes: an input, a constant, a value twice."""
    def body(b, a, n, m, flags, pixels):
        y = b.op("lz.exp", b.op("lz.mul", a, a))                      # f64 through libm
        k = b.op("lz.add", n, b.constant(np.array(3, np.int64)))       # i64
        j = b.op("lz.mul", m, m)                                       # i32
        f = b.op("lz.not", flags)                                      # bool
        p = b.op("lz.sub", b.constant(np.array(255, np.uint8)), pixels)
        c = b.constant(np.arange(6, dtype=np.float32).reshape(2, 3))
        return [y, k, j, f, p, n, c, k]

    return named_module([tensor((3, 5), F64), tensor((7,), I64), tensor((), I32), tensor((4,), I1),
                         tensor((2, 2), UI8)], body, ["a", "n", "m", "flags", "pixels"],
                        ["exp", "k", "square", "not/flags", "inverted", "n_copy", "table", "k_again"])


def test_every_npy_dtype_and_outputs_no_kernel_writes(tmp_path):
    module = elementwise_dtypes()
    exe = compile_module_native(module, tmp_path / "dtypes").paths[0]
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((3, 5)), rng.integers(-9, 9, 7), np.array(-12, np.int32),
              rng.random(4) < 0.5, rng.integers(0, 255, (2, 2)).astype(np.uint8)]
    names = ["a", "n", "m", "flags", "pixels"]
    args = []
    for name, a in zip(names, arrays):
        args += ["--input", f"{name}={save(tmp_path, name, a)}"]
    done = run_exe(exe, *args, "--output-dir", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    want = interpret(module, "main", *arrays)
    stems = ["exp", "k", "square", "not_flags", "inverted", "n_copy", "table", "k_again"]
    for stem, w in zip(stems, want):
        got = np.load(tmp_path / "out" / f"{stem}.npy")
        assert got.dtype == w.dtype and got.shape == w.shape, stem
        np.testing.assert_allclose(got, w, rtol=1e-12) if w.dtype.kind == "f" else np.testing.assert_array_equal(got, w)


def test_dynamic_dims_must_be_bound(tmp_path):
    def body(b, x):
        return b.op("lz.tanh", x)

    module = named_module([tensor((None, 4), F32)], body, ["x"], ["y"])
    func = module.lookup("main")
    with pytest.raises(NativeCompileError, match=r"input 'x' has dynamic dims: \?x4, dim 0 \('batch'\) unbound; "
                                                 r"bind them with --shape x=1x4"):
        bind_shapes(func, {}, {"x": ["batch", None]})
    with pytest.raises(NativeCompileError, match=r"--shape x=3x5 does not fit input 'x' of shape \?x4"):
        bind_shapes(func, {"x": (3, 5)})
    with pytest.raises(NativeCompileError, match=r"--shape names 'z', which is not an input \(inputs: 'x'\)"):
        bind_shapes(func, {"z": (3, 4), "x": (3, 4)})
    exe = compile_module_native(module, tmp_path / "tanh", shapes={"x": (3, 4)}).paths[0]
    x = np.linspace(-2, 2, 12, dtype=np.float32).reshape(3, 4)
    done = run_exe(exe, "--input", f"x={save(tmp_path, 'x', x)}", "--output-dir", tmp_path)
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), np.tanh(x), rtol=1e-5)


def test_identical_kernels_share_one_symbol():
    def body(b, x):
        for _ in range(3):  # three equal matmul kernels, each with its own name
            x = b.op("lz.relu", b.op("lz.matmul", x, b.constant(np.eye(16, dtype=np.float32))))
        return x

    module = named_module([tensor((8, 16), F32)], body, ["x"], ["y"])
    func = module.lookup("main")
    scheduled = specialize(module, "main", bind_shapes(func, {}))
    program = plan_program(scheduled, scheduled.lookup("main"), "m", "test")
    assert len(program.launches) == 3 and len(program.kernels) == 1
    assert len({launch.symbol for launch in program.launches}) == 1
    assert program.weights_size == 16 * 16 * 4  # the equal constants are stored once


@pytest.mark.slow
def test_parallel_kernels_give_the_same_answer_on_any_thread_count(tmp_path):
    def body(b, x, w):
        return b.op("lz.sigmoid", b.op("lz.matmul", x, w))

    module = named_module([tensor((256, 512), F32), tensor((512, 256), F32)], body, ["x", "w"], ["y"])
    result = compile_module_native(module, tmp_path / "mm")
    assert all(launch.parallel for launch in result.program.launches)
    rng = np.random.default_rng(4)
    x, w = rng.standard_normal((256, 512), np.float32), rng.standard_normal((512, 256), np.float32)
    paths = ["--input", f"x={save(tmp_path, 'x', x)}", "--input", f"w={save(tmp_path, 'w', w)}"]
    outputs = []
    for threads in (1, 2, 5):
        done = run_exe(result.paths[0], *paths, "--output-dir", tmp_path / str(threads), "--threads", threads)
        assert done.returncode == 0, done.stderr
        outputs.append(np.load(tmp_path / str(threads) / "y.npy"))
    np.testing.assert_allclose(outputs[0], 1 / (1 + np.exp(-(x.astype(np.float64) @ w))), rtol=1e-4, atol=1e-6)
    for other in outputs[1:]:
        np.testing.assert_array_equal(other, outputs[0])


def test_a_failed_build_leaves_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("CC", "false")
    target = tmp_path / "out" / "model"
    with pytest.raises(NativeCompileError, match="the C compiler failed"):
        compile_module_native(convnet(), target)
    assert os.listdir(tmp_path / "out") == []
    monkeypatch.setenv("CC", "no-such-compiler-here")
    with pytest.raises(NativeCompileError, match="no C compiler"):
        compile_module_native(convnet(), target)


def test_a_model_without_kernels(tmp_path):
    """Outputs that are an input and a constant: no kernel runs, the driver copies them."""
    def body(b, x):
        return [x, b.constant(np.array([1.5, -2.0], np.float32)), b.constant(np.array(0.25, np.float64))]

    result = compile_module_native(named_module([tensor((3,), I64)], body, ["x"], ["same", "c", "scalar"]),
                                   tmp_path / "m")
    assert result.program.launches == [] and result.program.kernels == {}
    x = np.array([7, -8, 9], np.int64)
    done = run_exe(result.paths[0], "--input", f"x={save(tmp_path, 'x', x)}", "--output-dir", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "same.npy"), x)
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "c.npy"), [1.5, -2.0])
    scalar = np.load(tmp_path / "out" / "scalar.npy")
    assert scalar.shape == () and scalar.dtype == np.float64 and scalar == 0.25


def test_kernels_compile_in_worker_processes(tmp_path, monkeypatch):
    import lezero.runtime.native.build as build

    monkeypatch.setattr(build, "PARALLEL_MIN_KERNELS", 2)
    result = compile_module_native(convnet(), tmp_path / "convnet", jobs=2, keep_build_dir=True)
    assert sorted(f for f in os.listdir(result.build_dir) if f.endswith(".o")) == ["kernels_0.o", "kernels_1.o"]
    x = np.random.default_rng(6).standard_normal((2, 3, 8, 8)).astype(np.float32)
    done = run_exe(result.paths[0], "--input", f"image={save(tmp_path, 'x', x)}", "--output-dir", tmp_path)
    assert done.returncode == 0, done.stderr
    np.testing.assert_allclose(np.load(tmp_path / "probabilities.npy"), interpret(convnet(), "main", x),
                               rtol=1e-4, atol=1e-6)


def test_kernels_of_constants_only_run_at_build_time(tmp_path):
    """A weight computed from constants, too large for constant-fold (the exp of a broadcast: only
    a broadcast that contractions alone read folds at any size), is computed once at build time
    and shipped as a weight."""
    columns = (1 << 20) + 3

    def body(b, x):
        w = b.op("lz.broadcast_to", b.constant(np.array([[0.5], [-1.0], [2.0], [0.25]], np.float32)),
                 shape=[4, columns])
        return b.op("lz.matmul", x, b.op("lz.exp", w))

    module = named_module([tensor((2, 4), F32)], body, ["x"], ["y"])
    result = compile_module_native(module, tmp_path / "m")
    assert result.program.folded_kernels == 1 and result.program.weights_size == 4 * columns * 4
    assert [launch.name for launch in result.program.launches] == ["lz_fused_matmul_1"]
    x = np.random.default_rng(7).standard_normal((2, 4)).astype(np.float32)
    done = run_exe(result.paths[0], "--input", f"x={save(tmp_path, 'x', x)}", "--output-dir", tmp_path)
    assert done.returncode == 0, done.stderr
    want = np.broadcast_to(x @ np.exp(np.array([[0.5], [-1.0], [2.0], [0.25]], np.float32)), (2, columns))
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, rtol=1e-5, atol=1e-6)


def gather_onnx():
    """Embedding rows by ids: an ONNX Gather (axis 0) of a 10 x 4 table, node ``embed``."""
    from support.native_testing import _model
    from onnx import TensorProto, helper, numpy_helper

    table = numpy_helper.from_array(np.arange(40, dtype=np.float32).reshape(10, 4), "table")
    nodes = [helper.make_node("Gather", ["table", "ids"], ["rows"], name="embed", axis=0)]
    return _model(nodes, [helper.make_tensor_value_info("ids", TensorProto.INT64, [3])],
                  [helper.make_tensor_value_info("rows", TensorProto.FLOAT, [3, 4])], [table], name="gather")


def test_an_index_out_of_range_fails_the_executable(tmp_path):
    """In range (negative indices too) the rows match ONNX Runtime's; out of range, the executable
    exits 1 naming the ONNX node, the index and the valid range (ONNX Runtime also rejects it)."""
    model = gather_onnx()
    exe = compile_onnx_native(model, tmp_path / "gather").paths[0]
    ids = np.array([0, -1, 9])
    done = run_exe(exe, "--input", f"ids={save(tmp_path, 'ids', ids)}", "--output-dir", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    want = onnxruntime_outputs(model, {"ids": ids})["rows"]
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "rows.npy"), want)
    for bad, index in (([0, 10, 2], 10), ([-11, 0, 1], -11)):
        done = run_exe(exe, "--input", f"ids={save(tmp_path, 'bad', np.array(bad))}", "--output-dir", tmp_path / "out")
        assert done.returncode == 1
        assert done.stderr.strip() == (f"gather: error: embed: lz.gather: index {index} is out of range for axis 0 of "
                                       "size 10 (valid: -10 to 9)"), done.stderr


def test_amx_and_int8_kernels_run_in_a_native_executable(tmp_path):
    """An int8 GEMM with constant weights (packed by the plan) and a bf16 matmul in one executable for
    the host: on an AMX host their kernels use tiles, which Linux allows a process only after it asks
    (runtime.c's constructor), so this runs the tiles without Python. Exact for int8; bf16 within
    one bf16 step of the reference (f32 sums, one rounding)."""
    from lezero.codegen.llvm import amx
    from lezero.codegen.llvm.target import host_target
    from lezero.ir.types import BF16, I8

    rng = np.random.default_rng(5)
    w8 = rng.integers(-128, 128, (96, 80)).astype(np.int8)
    w16 = rng.standard_normal((64, 48)).astype(np.float32)

    def body(b, x8, xf):
        product = b.op("lz.matmul_integer", x8, b.constant(w8), b.constant(np.array(3, np.uint8)),
                       b.constant(np.array(0, np.int8)))
        low = b.op("lz.matmul", b.op("lz.cast", xf, to=BF16), b.op("lz.cast", b.constant(w16), to=BF16))
        return product, b.op("lz.cast", low, to=F32)

    module = named_module([tensor((40, 96), UI8), tensor((36, 64), F32)], body, ["x8", "xf"], ["p", "q"])
    result = compile_module_native(module, tmp_path / "lowp")
    x8 = rng.integers(0, 256, (40, 96)).astype(np.uint8)
    xf = rng.standard_normal((36, 64)).astype(np.float32)
    done = run_exe(result.paths[0], "--input", f"x8={save(tmp_path, 'x8', x8)}", "--input",
                   f"xf={save(tmp_path, 'xf', xf)}", "--output-dir", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    want_p, want_q = interpret(module, "main", x8, xf)
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "p.npy"), want_p)
    np.testing.assert_allclose(np.load(tmp_path / "out" / "q.npy"), want_q, rtol=2 ** -7, atol=1e-6)
    if amx.has_amx(host_target(), "int8") and amx.has_amx(host_target(), "bf16"):
        code = subprocess.run(["objdump", "-d", str(result.paths[0])], capture_output=True, text=True).stdout
        assert "tdpbusd" in code and "tdpbf16ps" in code and "ldtilecfg" in code
