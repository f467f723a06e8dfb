"""Predicted vs published training throughput on other GPU kinds (issue 14).

Each row of ``published.jsonl`` is a published measurement (source URL and what the row is:
framework, batch, precision, GPU count) with its split, declared before any fit. This script
runs ``advise estimate``'s own path (``advisor.exact.estimate_request`` on a ``Request`` with the
closest catalog model and configuration: --model, --gpu, --gpus, --micro-batch, --precision,
--seq-len/--image-size, --channels-last, --interconnect) for every row and writes
``benchmarks/calibration/results/cross-gpu.md``: predicted vs published per row, median/worst per split.

    python -m benchmarks.calibration.cross_gpu.predict            # writes the report
    python -m benchmarks.calibration.cross_gpu.predict --print    # prints it only
    python -m benchmarks.calibration.cross_gpu.predict --h200     # the H200 catalog reference rows (before/after checks)
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]

from advisor.calibration import Calibration, default_calibration
from advisor.exact import estimate_request
from advisor.hardware import Machine
from advisor.plan import ModelRef
from advisor.request import Request
from advisor.sources import as_script_runs_it

DATA = Path(__file__).with_name("published.jsonl")
REPORT = ROOT / "benchmarks" / "calibration" / "results" / "cross-gpu.md"


def load_rows(path: Path = DATA) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def request_of(r: dict) -> Request:
    # the published runs ran the transformers class where there is one (what `advise estimate` defaulted to
    # when this fit was made; it now defaults to cardwise's own, as `advise` does: issue 40)
    model, _ = as_script_runs_it(ModelRef(name=r["model"]))
    return Request(model=model, gpu=r["gpu"], gpus=r["gpus"], micro_batch=r["micro_batch"],
                   grad_accum=r.get("grad_accum"),
                   precision=r["precision"], seq_len=r.get("seq_len"), image_size=r.get("image_size"),
                   channels_last=bool(r.get("channels_last")), interconnect=r.get("interconnect"),
                   strategy="single" if r["gpus"] == 1 else "ddp",
                   data_format="synthetic")  # the GPUs' own rate: the published runs fed them fast enough (issue 28)


def predict(r: dict, cal: Calibration | None = None) -> float:
    est, _ = estimate_request(request_of(r), machine=Machine(cpu_cores=16), calibration=cal or default_calibration())
    return est.throughput.samples_per_s


def errors(rows: list[dict], cal: Calibration | None = None) -> list[tuple[dict, float, float]]:
    out = []
    for r in rows:
        pred = predict(r, cal)
        out.append((r, pred, pred / r["published"] - 1))
    return out


def stats(errs: list[float]) -> str:
    a = [abs(e) for e in errs]
    return f"n={len(a)}, median {statistics.median(a) * 100:.1f}%, worst {max(a) * 100:.1f}%" if a else "n=0"


def flags(r: dict) -> str:
    f = [f"--model {r['model']}", f"--gpu {r['gpu']}", f"--gpus {r['gpus']}", f"--micro-batch {r['micro_batch']}",
         f"--precision {r['precision']}"]
    if r.get("grad_accum"):
        f.append(f"--grad-accum {r['grad_accum']}")
    if r.get("seq_len"):
        f.append(f"--seq-len {r['seq_len']}")
    if r.get("channels_last"):
        f.append("--channels-last")
    if r.get("interconnect"):
        f.append(f"--interconnect {r['interconnect']}")
    return " ".join(f)


def _bar(errs: list[float]) -> bool:
    a = [abs(e) for e in errs]
    return bool(a) and statistics.median(a) <= 0.15 and max(a) <= 0.30


def report(res: list[tuple[dict, float, float]], before: dict[str, float] | None = None,
           last: dict[str, float] | None = None) -> str:
    lines = ["# Throughput on other GPU kinds: predicted vs published", "",
             "Regenerate: `python -m benchmarks.calibration.cross_gpu.fit` (fits `advisor/data/gpu_perf.json` on the rows marked *fit*), "
             "then `python -m benchmarks.calibration.cross_gpu.predict` (this page). Rows and their split: "
             "`benchmarks/calibration/cross_gpu/published.jsonl`; the first 62 rows were committed with their split (83593e1) before any "
             "fit, the 24 NVIDIA BERT rows marked *added* came after the first fit and are held out. Each row is predicted "
             "through `advise estimate`'s path (`advisor.exact.estimate_request`) with the flags shown (`advise estimate` "
             "estimates catalog transformers as their transformers class, here `BertForMaskedLM`). *before*: the estimator "
             "before issue 14 (`before.json`, written by `predict.py --snapshot-before` from a checkout of 83593e1; GPUs that "
             "commit lacked have none). *last published*: this page as last published, at 9e9e7a3 (main after merging r4-x14 "
             "and r4-x16, before fp16 NCHW convolutions were costed as channels_last kernels plus cuDNN's layout conversions; "
             "`last_published.json`, the `before.json` that `predict.py --snapshot-before` writes in a checkout of 9e9e7a3, "
             "reproduces that page's predictions). The bar "
             "(DESIGN.md): held-out rows within 15% median and 30% worst.", ""]
    up_front = [x for x in res if "added" not in x[0]]
    for title, sel_all in (("Rows declared before the fit", up_front), ("All rows", res)):
        lines.append(f"**{title}**")
        lines.append("")
        for split in ("fit", "holdout"):
            sel = [x for x in sel_all if x[0]["split"] == split]
            if not sel:
                continue
            prev = [before[r["id"]] / r["published"] - 1 for r, _, _ in sel if before and r["id"] in before]
            pub = [last[r["id"]] / r["published"] - 1 for r, _, _ in sel if last and r["id"] in last]
            lines.append(f"- {split}: {stats([e for _, _, e in sel])}" + (f" (last published: {stats(pub)})" if pub else "")
                         + (f" (before issue 14: {stats(prev)})" if prev else ""))
        lines.append("")
    lines += ["Held-out rows per GPU kind (*bar*: median <= 15% and worst <= 30%):", "",
              "| GPU | rows declared up front | median | worst | bar | last published: median | worst | bar "
              "| all rows | median | worst | bar |",
              "|---|---:|---:|---:|---|---:|---:|---|---:|---:|---:|---|"]

    def cell(e: list[float], n: bool = True) -> str:
        a = [abs(v) for v in e]
        if not a:
            return "0 | | | " if n else " | | "
        return (f"{len(a)} | " if n else "") + f"{statistics.median(a) * 100:.1f}% | {max(a) * 100:.1f}% | " \
            + ("yes" if _bar(e) else "no")

    for k in sorted({r["gpu"] for r, _, _ in res}):
        held = [x for x in up_front if x[0]["gpu"] == k and x[0]["split"] == "holdout"]
        pub = [last[r["id"]] / r["published"] - 1 for r, _, _ in held if last and r["id"] in last]
        every = [x[2] for x in res if x[0]["gpu"] == k and x[0]["split"] == "holdout"]
        lines.append(f"| {k} | {cell([x[2] for x in held])} | {cell(pub, n=False)} | {cell(every)} |")
    lines += ["", "| id | split | flags | published | predicted | err | last published err | before err | source |",
              "|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r, pred, e in res:
        b = f"{(before[r['id']] / r['published'] - 1) * 100:+.1f}%" if before and r["id"] in before else ""
        lp = f"{(last[r['id']] / r['published'] - 1) * 100:+.1f}%" if last and r["id"] in last else ""
        split = r["split"] + (" (added)" if "added" in r else "")
        lines.append(f"| {r['id']} | {split} | `{flags(r)}` | {r['published']:,.1f} | {pred:,.1f} | {e * 100:+.1f}% | {lp} "
                     f"| {b} | [{r['row']}]({r['source']}) |")
    return "\n".join(lines) + "\n"


BEFORE = Path(__file__).with_name("before.json")
LAST = Path(__file__).with_name("last_published.json")  # this page's predictions at 9e9e7a3
NOTES = Path(__file__).with_name("notes.md")  # the findings, written by hand, put above the generated tables


def h200_rows() -> None:
    """The catalog reference rows measured on the H200 (what benchmarks/calibration/fit.py judges), predicted now."""
    import benchmarks.calibration.rows as fc  # noqa: PLC0415

    from advisor.gpus import get_gpu  # noqa: PLC0415
    from advisor.hardware import HardwareSpec  # noqa: PLC0415

    _, rows = fc.all_rows()
    hw = HardwareSpec(gpu=get_gpu("H200"), gpus_per_node=1)
    cal = default_calibration()
    for split in ("fit", "holdout"):
        errs = [fc.predict(r, cal, hw).throughput.samples_per_s / r["samples_per_s"] - 1
                for r in rows if r["split"] == split and r.get("samples_per_s")]
        print(f"H200 {split}: samples/s error {stats(errs)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--h200", action="store_true", help="print the H200 catalog reference rows predicted now")
    ap.add_argument("--snapshot-before", action="store_true", help="write before.json (run from the older commit)")
    ap.add_argument("--print", action="store_true", help="print the report instead of writing it")
    args = ap.parse_args()
    if args.h200:
        h200_rows()
        return
    rows = load_rows()
    if args.snapshot_before:  # run from a checkout of the older commit; GPUs it lacks are skipped
        from advisor.errors import UserError  # noqa: PLC0415

        snap = {}
        for r in rows:
            try:
                snap[r["id"]] = predict(r)
            except UserError:
                continue
        BEFORE.write_text(json.dumps(snap, indent=1) + "\n")
        return
    res = errors(rows)
    before = json.loads(BEFORE.read_text()) if BEFORE.exists() else None
    last = json.loads(LAST.read_text()) if LAST.exists() else None
    text = report(res, before, last)
    if args.print:
        print(text)
        return
    REPORT.write_text(NOTES.read_text() + "\n" + text if NOTES.exists() else text)
    print(text.split("\n| id |")[0])


if __name__ == "__main__":
    main()
