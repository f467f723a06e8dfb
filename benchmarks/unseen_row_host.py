"""The unseen sets' throughput errors with two host corrections: the call's (the dispatch probe in the
file's header, measured at the call's start: what ``advise probe`` gives a user, and what
fit_calibration.py reports) and each row's own (the probe measured right after that row,
``host_dispatch_us``). The gap between the two is the host's drift within one call.

    python benchmarks/unseen_row_host.py            # u9 to the last set: median / worst, worst row
"""

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import fit_calibration as fc  # noqa: E402
from advisor.calibration import default_calibration  # noqa: E402
from advisor.gpus import get_gpu  # noqa: E402
from advisor.hardware import HardwareSpec  # noqa: E402


def main() -> None:
    header, rows = fc.all_rows()  # every row, each with its file header's host factor
    cal = default_calibration()
    hw = HardwareSpec(gpu=get_gpu("H200"))
    sets = [prefix for prefix, *_ in fc.UNSEEN_SETS if prefix[1:-1].isdigit() and int(prefix[1:-1]) >= 9]
    for pre in sets:
        eh, er = [], []
        for r in rows:
            if not r["id"].startswith(pre) or r["split"]!="holdout": continue
            m = r["samples_per_s"]
            ph = fc.predict(r, cal, hw).throughput.samples_per_s
            f = r["host_dispatch_us"]/cal.host_dispatch_ref_us
            pr = fc.predict(dict(r, host_factor=f), cal, hw).throughput.samples_per_s
            eh.append((abs(ph/m-1)*100, r["id"])); er.append((abs(pr/m-1)*100, r["id"]))
        print(pre, "header factor: %.1f / %.1f %s" % (statistics.median([e for e,_ in eh]), max(eh)[0], max(eh)[1]),
              "| row factor: %.1f / %.1f %s" % (statistics.median([e for e,_ in er]), max(er)[0], max(er)[1]))


if __name__ == "__main__":
    main()
