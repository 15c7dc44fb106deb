# lit configuration for lezero's FileCheck tests: `lit tests/filecheck` (from the venv) runs them all.
import os
import sys

import lit.formats

config.name = "lezero"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir"]
config.excludes = ["Output"]
config.test_source_root = os.path.dirname(__file__)
# lezero-opt and filecheck live next to the Python that runs lit (the project's venv).
config.environment["PATH"] = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
for var in ("HOME", "LEZERO_CACHE_DIR", "TRITON_INTERPRET"):
    if var in os.environ:
        config.environment[var] = os.environ[var]
