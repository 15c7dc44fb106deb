"""lezero-opt's --target and --emit for the GPU: what each --emit implies, and the errors."""
from __future__ import annotations

import io
import sys

from lezero.cli.opt import run

EXP = """func.func @f(%x: tensor<8x16xf32>) -> tensor<8x16xf32> {
  %0 = "lz.exp"(%x) : (tensor<8x16xf32>) -> tensor<8x16xf32>
  func.return %0 : tensor<8x16xf32>
}
"""


def opt(tmp_path, *argv):
    path = tmp_path / "f.mlir"
    path.write_text(EXP)
    out, err = io.StringIO(), io.StringIO()
    code = run([str(path), *argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_emit_triton_implies_cuda(tmp_path):
    implied = opt(tmp_path, "--emit=triton")
    assert implied == opt(tmp_path, "--emit=triton", "--target=cuda")
    code, out, err = implied
    assert code == 0, err
    assert out.startswith("# ---- kernel lz_fused_exp_0: elementwise"), out
    assert "@triton.jit" in out and "tl.exp(" in out


def test_emit_llvm_implies_cpu(tmp_path):
    code, out, err = opt(tmp_path, "--emit=llvm")
    assert code == 0, err
    assert out == opt(tmp_path, "--emit=llvm", "--target=cpu")[1]
    assert out.startswith("; ---- kernel lz_fused_exp_0: elementwise") and "define void @\"lz_fused_exp_0\"(" in out


def test_ptx_without_triton_is_one_clear_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)  # `import triton` raises ImportError
    code, out, err = opt(tmp_path, "--emit=ptx")
    assert code == 1
    assert out == ""
    assert err == "lezero-opt: error: --emit=ptx: the cuda target needs triton: pip install -e '.[gpu]'\n"


def test_emit_asm_for_a_named_cpu(tmp_path):
    from lezero.codegen.llvm.target import host_target

    if host_target().arch != "x86_64":
        import pytest
        pytest.skip(f"x86-64 CPU names; this host is {host_target().arch}")
    code, out, err = opt(tmp_path, "--emit=asm", "--cpu=x86-64-v3")
    assert code == 0, err
    assert out.startswith("# ---- kernel lz_fused_exp_0: elementwise") and "cpu x86-64-v3" in out.splitlines()[0]
    assert "ymm" in out and "zmm" not in out


def test_cpu_errors_are_one_clear_line(tmp_path):
    code, out, err = opt(tmp_path, "--emit=llvm", "--cpu=pentium-9000")
    assert (code, out) == (1, "") and err.startswith("lezero-opt: error: unknown cpu 'pentium-9000' for ")
    assert err.count("\n") == 1
    code, out, err = opt(tmp_path, "--emit=asm", "--triple=sparc-linux-gnu")
    assert (code, out) == (1, "") and "unknown target triple 'sparc-linux-gnu'" in err
    code, out, err = opt(tmp_path, "--cpu=x86-64-v3")
    assert code == 1 and err == ("lezero-opt: error: --cpu/--triple choose the CPU code is generated for: use them "
                                 "with --emit=llvm or --emit=asm\n")
