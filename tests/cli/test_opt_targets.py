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
