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
PASSED = ("HOME", "LEZERO_CACHE_DIR", "TRITON_INTERPRET")  # test_filecheck.py starts its server with these (and PATH)
for var in PASSED:
    if var in os.environ:
        config.environment[var] = os.environ[var]
# test_filecheck.py runs lezero-opt through one server that has lezero imported (tests/support/opt_server.py):
# its client, in the bin folder beside the socket, comes first on the PATH.
if "LEZERO_OPT_SERVER" in os.environ:
    config.environment["LEZERO_OPT_SERVER"] = os.environ["LEZERO_OPT_SERVER"]
    config.environment["PATH"] = (os.path.join(os.path.dirname(os.environ["LEZERO_OPT_SERVER"]), "bin") + os.pathsep
                                  + config.environment["PATH"])
