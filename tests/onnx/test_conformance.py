"""ONNX's backend test cases against lezero's compiled path (``lezero.onnx.conformance``): every
node case (~1,900) and the simple / pytorch-converted / pytorch-operator model suites, each case
imported, compiled for the CPU and compared with its expected outputs.  The minimum pass counts
are what lezero reaches now, so a regression fails; ``tools/onnx_conformance.py`` prints the same
report with every failure."""
from __future__ import annotations

import pytest

from lezero.onnx.conformance import node_cases, report, run_cases, run_suite, summarize

# Passing cases per suite (the total includes skipped, out-of-scope cases).
MINIMUM_PASSED = {"node": 1582, "simple": 7, "pytorch-converted": 82, "pytorch-operator": 35}
# ONNX Runtime passes 78.8% of the node cases run the same way.
MINIMUM_NODE_PERCENT = 75.0


def _check(suite, results):
    print()
    print(report(results, f"== {suite} =="))
    s = summarize(results)
    assert s.passed >= MINIMUM_PASSED[suite], \
        f"{suite}: {s.passed} cases pass, {MINIMUM_PASSED[suite]} did before (see the report above)"
    return s


def test_node_cases():
    s = _check("node", run_cases(node_cases(), workers=2))
    assert s.percent >= MINIMUM_NODE_PERCENT
    assert s.total > 1800  # every case ran (or was counted as skipped)


@pytest.mark.parametrize("suite", ["simple", "pytorch-converted", "pytorch-operator"])
def test_model_suites(suite):
    _check(suite, run_suite(suite, workers=2))
