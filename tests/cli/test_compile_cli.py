"""lezero-compile: the command line, its errors and its --check report."""
from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import pytest

from lezero.cli.compile import run

from support.native_testing import convnet_onnx, elementwise_onnx, onnxruntime_outputs, run_executable, unsupported_onnx

pytestmark = pytest.mark.skipif(shutil.which(os.environ.get("CC", "cc")) is None, reason="needs a C compiler")


def compile_cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    code = run([str(a) for a in argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_console_script_builds_an_executable(tmp_path):
    """The installed script, end to end: ONNX file -> executable -> .npy outputs."""
    onnx.save(elementwise_onnx(), tmp_path / "elementwise.onnx")
    script = shutil.which("lezero-compile", path=os.path.dirname(sys.executable)) or "lezero-compile"
    done = subprocess.run([script, "elementwise.onnx", "-o", "build/", "-v"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == os.path.join("build", "elementwise")
    assert "kernels" in done.stderr and "total:" in done.stderr
    assert os.listdir(tmp_path / "build") == ["elementwise"]  # the build directory is gone

    a = np.arange(20, dtype=np.float32).reshape(4, 5) / 10
    b = np.linspace(-1, 1, 5, dtype=np.float32)
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    done = run_executable(tmp_path / "build" / "elementwise", "--input", "a=a.npy", "--input", "b=b.npy",
                          "--output-dir", "results", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    want = onnxruntime_outputs(elementwise_onnx(), {"a": a, "b": b})
    for name, w in want.items():
        np.testing.assert_allclose(np.load(tmp_path / "results" / f"{name}.npy"), w, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_shared_library_of_an_onnx_model(tmp_path):
    onnx.save(convnet_onnx(), tmp_path / "convnet.onnx")
    code, out, err = compile_cli("--shared", tmp_path / "convnet.onnx", "-o", tmp_path / "lib",
                                 "--shape", "image=1x3x16x16")
    assert code == 0, err
    assert sorted(os.listdir(tmp_path / "lib")) == ["convnet.h", "libconvnet.so"]
    header = (tmp_path / "lib" / "convnet.h").read_text()
    assert "'image': float32 1x3x16x16" in header and "'probabilities': float32 1x10" in header


@pytest.mark.parametrize("argv, message", [
    (["missing.onnx"], "lezero-compile: error: cannot read 'missing.onnx': No such file or directory"),
    (["{tmp}/garbage.onnx"], "garbage.onnx': not a valid ONNX model (truncated or not protobuf)"),
    (["{tmp}/convnet.onnx"], "convnet.onnx: input 'image' has dynamic dims: ?x3x16x16, dim 0 ('N') unbound; "
                             "bind them with --shape image=1x3x16x16"),
    (["{tmp}/convnet.onnx", "--shape", "imag=1x3x16x16"], "--shape names 'imag', which is not an input"),
    (["{tmp}/convnet.onnx", "--shape", "image=1x3x16"], "--shape image=1x3x16 does not fit input 'image'"),
    (["{tmp}/convnet.onnx", "--shape", "image=1xthree"], "dims must be non-negative integers"),
    (["{tmp}/unsupported.onnx", "--shape", "x=2x4"], "node 'relu_with_extra' (Relu): attribute 'frobnicate' "
                                                     "is not supported"),
])
def test_errors_name_the_file_node_or_input(tmp_path, argv, message):
    onnx.save(convnet_onnx(), tmp_path / "convnet.onnx")
    onnx.save(unsupported_onnx(), tmp_path / "unsupported.onnx")
    (tmp_path / "garbage.onnx").write_bytes(b"\x00\x01 not protobuf \xff" * 3)
    code, out, err = compile_cli(*[a.format(tmp=tmp_path) for a in argv], "-o", tmp_path / "out" / "model")
    assert code == 1
    assert message.format(tmp=tmp_path) in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []


def test_check_lists_every_problem_with_its_node(tmp_path):
    onnx.save(unsupported_onnx(), tmp_path / "unsupported.onnx")
    code, out, err = compile_cli("--check", tmp_path / "unsupported.onnx")
    assert code == 1, err
    lines = out.splitlines()
    assert any("input 'x': dim 0 ('batch') of ?x4 is dynamic" in line for line in lines), out
    assert "what to do: bind it at compile time: --shape x=1x4 (your sizes)" in out
    assert any("node 'relu_with_extra' (Relu): attribute 'frobnicate' is not supported" in line for line in lines)
    assert any("node 'mystery' (Frobnicate): ONNX operator com.example::Frobnicate is not supported" in line
               for line in lines), out
    assert "node 'after'" not in out  # it only reads what the nodes before failed to compute
    assert lines[-1].endswith("3 problem(s) stop the model from compiling")


def test_check_passes_a_supported_model(tmp_path):
    onnx.save(convnet_onnx(), tmp_path / "convnet.onnx")
    code, out, _ = compile_cli("--check", tmp_path / "convnet.onnx")
    assert code == 1 and "dim 0 ('N') of ?x3x16x16 is dynamic" in out
    code, out, err = compile_cli("--check", tmp_path / "convnet.onnx", "--shape", "image=4x3x16x16")
    assert code == 0, out + err
    assert "every op is supported and every dim is bound" in out
