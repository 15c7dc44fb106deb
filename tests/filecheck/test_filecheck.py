"""Runs every FileCheck test (*.mlir under tests/filecheck) through lit, one pytest case per file."""
import os
import pathlib
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).parent
LIT = os.path.join(os.path.dirname(sys.executable), "lit")
FILES = sorted(p for p in HERE.rglob("*.mlir") if "Output" not in p.parts)


def test_there_are_filecheck_files():
    assert len(FILES) >= 10, f"expected the FileCheck suite under {HERE}, found {len(FILES)} files"


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(HERE)) for p in FILES])
def test_filecheck(path):
    proc = subprocess.run([LIT, "-v", str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS:" in proc.stdout, proc.stdout
