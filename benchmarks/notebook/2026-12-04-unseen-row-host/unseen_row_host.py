"""The unseen sets' throughput errors with three host corrections: the call's (the dispatch probe in the
file's header, measured at the call's start: what ``advise probe`` gives a user), each row's after its
teardown (``host_dispatch_us``), and from the thirteenth set each row's own, the median of the probes
between its timed rounds (``host_dispatch_in_row_us``, which benchmarks/calibration/fit.py uses where a row has it).
The gaps between them are the host's drift within one call.

    python -m benchmarks.notebook.2026-12-04-unseen-row-host.unseen_row_host            # u9 to the last set: median / worst, worst row
"""

import argparse
import statistics
from pathlib import Path

import benchmarks.calibration.rows as fc
from advisor.calibration import default_calibration
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    header, rows = fc.all_rows()  # every row, each with its file header's host factor
    cal = default_calibration()
    hw = HardwareSpec(gpu=get_gpu("H200"))
    sets = [prefix for prefix, *_ in fc.UNSEEN_SETS if prefix[1:-1].isdigit() and int(prefix[1:-1]) >= 9]
    for pre in sets:
        errs: dict[str, list[tuple[float, str]]] = {"header": [], "after-row": [], "in-row": []}
        for r in rows:
            if not r["id"].startswith(pre) or r["split"] != "holdout":
                continue
            m = r["samples_per_s"]
            readings = {"header": fc.dispatch_us(fc.RESULTS / r["source"]), "after-row": r.get("host_dispatch_us"),
                        "in-row": r.get("host_dispatch_in_row_us")}
            for name, us in readings.items():
                if us:
                    f = us / cal.host_dispatch_ref_us
                    pred = fc.predict(dict(r, host_factor=f), cal, hw).throughput.samples_per_s
                    errs[name].append((abs(pred / m - 1) * 100, r["id"]))
        print(pre, " | ".join(f"{name}: {statistics.median(e for e, _ in got):.1f} / {max(got)[0]:.1f} {max(got)[1]}"
                              for name, got in errs.items() if got))

if __name__ == "__main__":
    main()
