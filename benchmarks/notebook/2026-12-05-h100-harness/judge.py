"""The three judgements of issue 28's model changes in one print, with the packaged data files as they are:
multi-GPU held-out 8-GPU rows (samples/s, speedup points), cross-GPU held-out rows declared up front, and
the H200 calibration (fit / holdout samples/s).

    python -m benchmarks.notebook.2026-12-05-h100-harness.judge      # from the checkout root
"""
import statistics

import benchmarks.calibration.cross_gpu.predict as P
import benchmarks.calibration.multi_gpu.fit as M
from advisor.comm import comm_constants


def _s(errs, pct=True):
    a = [abs(e) for e in errs]
    m = 100 if pct else 1
    return f"{statistics.median(a) * m:.1f}/{max(a) * m:.1f}" if a else "-"


res = M.evaluate(M.pairs(M.load_rows()), comm_constants())
held8 = [x for x in res if x["row"]["split"] == "holdout" and x["row"]["gpus"] == 8]
print(f"multi-GPU held-out 8 GPUs: samples/s {_s([x['sps_err'] for x in held8])} %, "
      f"speedup {_s([x['points'] for x in held8], False)} pts (median/worst)")
for x in sorted(held8, key=lambda x: -abs(x["sps_err"]))[:4]:
    print(f"   {x['row']['id']}: {x['sps_err'] * 100:+.1f}%")
rows = P.load_rows()
cross = [(r, P.predict(r)) for r in rows if r["split"] == "holdout" and "added" not in r]
errs = [p / r["published"] - 1 for r, p in cross]
print(f"cross-GPU held-out declared up front: {_s(errs)} % (n={len(errs)})")
for (r, p), e in sorted(zip(cross, errs), key=lambda t: -abs(t[1]))[:4]:
    print(f"   {r['id']}: {e * 100:+.1f}%")
allh = [P.predict(r) / r["published"] - 1 for r in rows if r["split"] == "holdout"]
print(f"cross-GPU held-out all rows: {_s(allh)} % (n={len(allh)})")
P.h200_rows()
