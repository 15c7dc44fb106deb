"""Runs every FileCheck test (*.mlir under tests/filecheck) through lit, one pytest case per file,
``lezero-opt`` served by one process per test module that has lezero imported
(tests/support/opt_server.py: each RUN line still runs in a process of its own)."""
import os
import pathlib
import subprocess
import sys

import pytest
from support.opt_server import OptServer

HERE = pathlib.Path(__file__).parent
LIT = os.path.join(os.path.dirname(sys.executable), "lit")
FILES = sorted(p for p in HERE.rglob("*.mlir") if "Output" not in p.parts)
LIT_PASSES = ("PATH", "HOME", "LEZERO_CACHE_DIR", "TRITON_INTERPRET")  # the environment lit.cfg.py gives a RUN line


@pytest.fixture(scope="module")
def lit_environment(tmp_path_factory):
    """The environment for lit: $LEZERO_OPT_SERVER names the socket of a running server."""
    server = OptServer(tmp_path_factory.mktemp("opt-server"),
                       {k: os.environ[k] for k in LIT_PASSES if k in os.environ})
    yield dict(os.environ, LEZERO_OPT_SERVER=server.socket)
    server.close()


def test_there_are_filecheck_files():
    assert len(FILES) >= 10, f"expected the FileCheck suite under {HERE}, found {len(FILES)} files"


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(HERE)) for p in FILES])
def test_filecheck(path, lit_environment):
    proc = subprocess.run([LIT, "-v", str(path)], env=lit_environment,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS:" in proc.stdout, proc.stdout
