"""Check, byte for byte, that the packaged calibration and traces are what their scripts write now.

    python -m benchmarks.calibration.check [--only fit|traces]

The whole reproduction, for a maintainer (~150 s of CPU for the fit, ~50 s for the traces): the
calibration fit from every measured row (``benchmarks.calibration.fit``: ``advisor/data/calibration.json``
and ``benchmarks/calibration/results/h200-estimator.md``) and every trace of the catalog
(``benchmarks.calibration.trace_catalog``: ``advisor/data/traced.json``). The suite
(tests/test_calibration_reproduces.py) checks a part of each that fails on any changed byte it covers:
every row predicted with the packaged calibration (the whole estimator table) and the memory stage of the
fit, and a subset of the traces, one per kind of model. Prints one line per file; exit 1 on a difference.
"""

from __future__ import annotations

import argparse
import sys
import time

from advisor.calibration import PACKAGED


def _compare(name: str, written: str, packaged_text: str, command: str) -> bool:
    same = written == packaged_text
    print(f"{'same' if same else 'DIFFERENT'}: {name}" + ("" if same else f" is not what `{command}` writes: run it"))
    return same


def check_fit() -> bool:
    from benchmarks.calibration.fit import fitted
    from benchmarks.calibration.report import REPORT

    start = time.process_time()
    calibration, table = fitted()
    print(f"fit: {time.process_time() - start:.0f} s of CPU")
    command = "python -m benchmarks.calibration.fit"
    return all([_compare("advisor/data/calibration.json", calibration, PACKAGED.read_text(), command),
                _compare(str(REPORT.relative_to(REPORT.parents[3])), table, REPORT.read_text(), command)])


def check_traces() -> bool:
    from advisor.catalog import TRACED_JSON
    from benchmarks.calibration.trace_catalog import text, traces

    start = time.process_time()
    written = text(traces())
    print(f"traces: {time.process_time() - start:.0f} s of CPU")
    return _compare("advisor/data/traced.json", written, TRACED_JSON.read_text(), "python -m benchmarks.calibration.trace_catalog")


def main() -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.calibration.check", description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=("fit", "traces"), help="check one of the two (default: both)")
    args = ap.parse_args()
    ok = True
    if args.only in (None, "fit"):
        ok = check_fit() and ok
    if args.only in (None, "traces"):
        ok = check_traces() and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
