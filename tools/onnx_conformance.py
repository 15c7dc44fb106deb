"""Run ONNX's backend test cases against lezero and print the per-operator table and the total.

    .venv/bin/python tools/onnx_conformance.py                 # every suite
    .venv/bin/python tools/onnx_conformance.py node -k resize  # one suite, cases whose name has 'resize'
    .venv/bin/python tools/onnx_conformance.py --workers 1 --no-failures simple

Kernels are cached in $LEZERO_CACHE_DIR (default ~/.cache/lezero), so a second run is faster.
"""
from __future__ import annotations

import argparse
import sys
import time

from lezero.onnx.conformance import SUITES, report, run_suite, summarize


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("suites", nargs="*", default=list(SUITES), help=f"suites to run ({', '.join(SUITES)})")
    parser.add_argument("-k", dest="keyword", default=None, help="only cases whose name contains this")
    parser.add_argument("--workers", type=int, default=2, help="processes running cases (default 2)")
    parser.add_argument("--no-failures", action="store_true", help="do not list the failing cases")
    args = parser.parse_args(argv)
    totals = []
    for suite in args.suites:
        start = time.perf_counter()
        select = (lambda c: args.keyword in c.name) if args.keyword else None
        results = run_suite(suite, args.workers, select)
        elapsed = time.perf_counter() - start
        print(report(results, f"== {suite} ({len(results)} cases, {elapsed:.0f} s) ==", not args.no_failures))
        print()
        totals.append((suite, summarize(results)))
    for suite, s in totals:
        print(f"{suite:18s} {s.passed:5d}/{s.total:<5d} {s.percent:5.1f}%  (failed {s.failed}, skipped {s.skipped})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
