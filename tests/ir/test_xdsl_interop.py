"""The printed text is MLIR: xDSL's parser (``xdsl-opt --allow-unregistered-dialect``) accepts it,
and lezero's parser reads what xDSL prints back.

xDSL deviates from MLIR in two places the samples avoid (see ``edge_floats``): it rejects a
non-finite element of a dense array written as its bit pattern (``array<f32: 0x7FC00000>``, which
MLIR prints and parses), and it crashes on an element its type cannot hold (``array<f16: 1.0e+300>``).
"""
from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest

from lezero.ir.parser import parse_module
from lezero.ir.printer import print_module

from support.ir_text_samples import SAMPLES, edge_floats

_BIN = pathlib.Path(sys.executable).parent / "xdsl-opt"
XDSL_OPT = str(_BIN) if _BIN.exists() else shutil.which("xdsl-opt")

pytestmark = pytest.mark.skipif(XDSL_OPT is None, reason="xdsl-opt is not installed")

_SAMPLES = dict(SAMPLES, edge_floats=lambda: edge_floats(nonfinite_in_arrays=False))


def _xdsl(text: str, *flags: str) -> subprocess.CompletedProcess:
    return subprocess.run([XDSL_OPT, "--allow-unregistered-dialect", *flags], input=text, capture_output=True,
                          text=True, timeout=300)


def test_xdsl_accepts_everything_we_print():
    """Every sample in every printing mode, in one xdsl-opt run (split into chunks)."""
    chunks = [print_module(build(), generic=g, debuginfo=d)
              for build in _SAMPLES.values() for g in (False, True) for d in (False, True)]
    text = "\n// -----\n".join(chunks)
    assert 'dense<"0x' in text and "array<i64: 1, -2, 3>" in text and "loc(fused[" in text
    result = _xdsl(text, "--split-input-file")
    assert result.returncode == 0, result.stderr[-3000:]


@pytest.mark.parametrize("sample", ["mlp", "regions", "structure", "locations", "large_dense"])
def test_we_read_what_xdsl_prints(sample):
    module = _SAMPLES[sample]()
    ours = print_module(module, debuginfo=True)
    for flags in ((), ("--print-op-generic", "--print-debuginfo")):
        result = _xdsl(ours, *flags)
        assert result.returncode == 0, result.stderr[-3000:]
        again = parse_module(result.stdout)
        assert print_module(again) == print_module(module)
        if flags:
            assert print_module(again, debuginfo=True) == ours
