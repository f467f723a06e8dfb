"""Predicted vs measured samples/s and peak memory for every H200 row: the users' models and the
catalog reference rows, by split, with the estimator before the roofline (issue 16's throughput).

Rows are ``benchmarks.calibration.rows.all_rows()``: ``h200-reference.jsonl``, ``h200-hostbound.jsonl``,
``advise bench``'s ``h200-1gpu.csv`` fit rows and the users' ``h200-users.jsonl`` (each users' row through
``advise estimate``'s own path, ``benchmarks/calibration/users.py``). Splits are the ones the measuring scripts
declared before measuring; the packaged calibration (``advisor/data/calibration.json``) was fit on
the *fit* rows only (``benchmarks/calibration/fit.py``). *before*: the estimator at commit fc248ce,
its predictions stored in ``results/h200-estimator-before-roofline.json`` (``--snapshot FILE`` writes
such a file from the checkout it runs in).

    python -m benchmarks.calibration.predict_users                 # markdown table + summary on stdout
    python -m benchmarks.calibration.predict_users --snapshot F    # this checkout's predictions, as JSON
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from advisor.calibration import default_calibration
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec

BEFORE = ROOT / "benchmarks" / "calibration" / "results" / "h200-estimator-before-roofline.json"


def predictions() -> tuple[list[dict], dict]:
    import benchmarks.calibration.rows as fc

    _, rows = fc.all_rows()
    hw = HardwareSpec(gpu=get_gpu("H200"))
    cal = default_calibration()
    out = {}
    for r in rows:
        e = fc.predict(r, cal, hw)
        out[r["id"]] = {"samples_per_s": round(e.throughput.samples_per_s, 3), "peak_gib": round(e.memory.peak_gib, 4),
                        "host_ms": e.throughput.host_s * 1e3, "gpu_ms": e.throughput.gpu_s * 1e3}
    return rows, out


def report(rows: list[dict], pred: dict, before: dict) -> str:
    import benchmarks.calibration.rows as fc
    from benchmarks.calibration.report import _stats

    lines = ["| id | source | split | samples/s meas | pred | err | before err | peak GiB meas | pred | err | before err |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    groups: dict[tuple[str, str], list[tuple[float, float | None, float, float | None]]] = {}
    for r in rows:
        p, b = pred[r["id"]], before.get(r["id"])
        te = p["samples_per_s"] / r["samples_per_s"] - 1
        me = p["peak_gib"] / r["peak_gib"] - 1
        bte = b["samples_per_s"] / r["samples_per_s"] - 1 if b else None
        bme = b["peak_gib"] / r["peak_gib"] - 1 if b else None
        src = fc.model_source(r)
        for key in ((src, r["split"]), ("all", r["split"])):
            groups.setdefault(key, []).append((te, bte, me, bme))
        fmt = (lambda x: "" if x is None else f"{x:+.1%}")
        lines.append(f"| {r['id']} | {src} | {r['split']} | {r['samples_per_s']:,.1f} | {p['samples_per_s']:,.1f} | "
                     f"{te:+.1%} | {fmt(bte)} | {r['peak_gib']:.2f} | {p['peak_gib']:.2f} | {me:+.1%} | {fmt(bme)} |")
    lines += ["", "Absolute errors, median | worst (before: commit fc248ce; after: this checkout):", "",
              "| source | split | n | samples/s before: median | worst | after: median | worst "
              "| peak before: median | worst | after: median | worst |",
              "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for (src, split), v in sorted(groups.items(), key=lambda kv: (kv[0][0] == "all", kv[0])):
        if split == "excluded":
            continue
        lines.append(f"| {src} | {split} | {len(v)} | {_stats([abs(x[1]) for x in v if x[1] is not None])} | "
                     f"{_stats([abs(x[0]) for x in v])} | {_stats([abs(x[3]) for x in v if x[3] is not None])} | "
                     f"{_stats([abs(x[2]) for x in v])} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--snapshot", type=Path, metavar="FILE", help="also write every row's prediction to FILE")
    args = ap.parse_args()
    rows, pred = predictions()
    if args.snapshot:
        path = args.snapshot
        path.write_text(json.dumps({k: {"samples_per_s": v["samples_per_s"], "peak_gib": v["peak_gib"]}
                                    for k, v in pred.items()}, indent=0, sort_keys=True) + "\n")
        return
    before = json.loads(BEFORE.read_text()) if BEFORE.exists() else {}
    print(report(rows, pred, before), end="")


if __name__ == "__main__":
    main()
