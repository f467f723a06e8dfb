"""Predicted vs published training throughput on other GPU kinds (issues 14 and 39).

Each row of ``published.jsonl`` is a published measurement (source URL and what the row is:
framework, batch, precision, GPU count) with its split, by source, and what the source ran
(``source_facts.py``). This script runs ``advise estimate``'s own path (``starting_config`` and
``advisor.estimate.estimate`` for a ``Request`` with the closest catalog configuration: --model, --gpu,
--gpus, --micro-batch, --precision, --seq-len/--image-size, --channels-last, --interconnect) on the
model the source ran (``source_spec``), at its harness's efficiency (``harness.json``), for every row
and writes ``benchmarks/calibration/results/cross-gpu.md``: predicted vs published per row, median,
worst and sign per source and split.

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
from advisor.estimate import estimate
from advisor.hardware import Machine, resolve_hardware
from advisor.models import ModelSpec
from advisor.plan import ModelRef
from advisor.request import Request
from advisor.sources import as_script_runs_it, resolve_model
from advisor.starting_config import starting_config
from benchmarks.calibration.multi_gpu.fit import model_of as source_model_of, padded_seq_len, precision_class

DATA = Path(__file__).with_name("published.jsonl")
HARNESS = Path(__file__).with_name("harness.json")  # the source harnesses' efficiencies (fit.py, fit_harness)
HARNESS_FIT: dict = json.loads(HARNESS.read_text())["harnesses"] if HARNESS.exists() else {}
REPORT = ROOT / "benchmarks" / "calibration" / "results" / "cross-gpu.md"


def load_rows(path: Path = DATA) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def request_of(r: dict) -> Request:
    # the published runs ran the transformers class where there is one (what `advise estimate` defaulted to
    # when this fit was made; it now defaults to cardwise's own, as `advise` does: issue 40)
    model, _ = as_script_runs_it(ModelRef(name=r["model"]))
    return Request(model=model, gpu=r["gpu"], gpus=r["gpus"], micro_batch=r["micro_batch"],
                   grad_accum=r.get("grad_accum"),
                   precision=r["precision"], seq_len=padded_seq_len(r), image_size=r.get("image_size"),
                   channels_last=bool(r.get("channels_last")), interconnect=r.get("interconnect"),
                   strategy="single" if r["gpus"] == 1 else "ddp",
                   data_format="synthetic")  # the GPUs' own rate: the published runs fed them fast enough (issue 28)


def source_spec(r: dict) -> ModelSpec:
    """The model as the source ran it: a row that states more than a catalog name (``source_facts.py``: the SQuAD
    rows' BertForQuestionAnswering, NVIDIA pre-training's padded vocabulary and masked-only MLM head) is built as the
    multi-GPU rows are (``multi_gpu.fit.model_of``, closed form); any other as `advise estimate` resolves its flags."""
    if any(r.get(k) for k in ("architecture", "vocab", "masked_ratio")):
        return source_model_of(r)
    return resolve_model(request_of(r).model)


def harness_efficiency(r: dict, harness: dict | None = None) -> float:
    """The share of every GPU rate the source's harness reaches (``harness.json``, fit by fit.py on the fit source's
    Hopper rows); 1.0 for a row that names none, and for every row before the harness is fit."""
    h = HARNESS_FIT if harness is None else harness
    name = r.get("harness")
    if not name or name not in h:
        return 1.0
    return h[name].get(precision_class(r), 1.0)


def predict(r: dict, cal: Calibration | None = None, harness: dict | None = None) -> float:
    """samples/s of the row as its source ran it: ``advise estimate``'s path (starting_config, estimate) on the source's
    model (``source_spec``), at the source harness's efficiency (every H200-fit rate scaled, as multi_gpu.fit does)."""
    cal = cal or default_calibration()
    eff = harness_efficiency(r, harness)
    if eff != 1.0:
        cal = cal.model_copy(update={"rate_efficiency": {n: v * eff for n, v in cal.rate_efficiency.items()}})
    req = request_of(r)
    hw = resolve_hardware(Machine(cpu_cores=16), **req.hardware_args())
    spec = source_spec(r)
    cfg, _ = starting_config(req, spec, device="gpu", gpu=hw.gpu, ranks=hw.total_gpus)
    return estimate(spec, cfg, hw, calibration=cal).throughput.samples_per_s


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
    return bool(a) and statistics.median(a) <= 0.10 and max(a) <= 0.25


def signed(errs: list[float]) -> str:
    """The signed median and how many rows lie each side: a systematic sign shows as one side only."""
    if not errs:
        return ""
    return (f", signed median {statistics.median(errs) * 100:+.1f}% ({sum(e > 0 for e in errs)} over, "
            f"{sum(e < 0 for e in errs)} under)")


def signed_by_class(sel: list[tuple[dict, float, float]]) -> str:
    """The signed median per precision class (``precision_class``: half, full), for a source with both: a cause that
    slows one class only (a harness's fp16 path, a container's kernels) shows as one class's sign, not the other's."""
    by = {c: [e for r, _, e in sel if precision_class(r) == c] for c in ("half", "full")}
    if not all(by.values()):
        return ""
    return "; " + ", ".join(f"{c} {statistics.median(e) * 100:+.1f}% ({sum(v > 0 for v in e)} of {len(e)} over)"
                            for c, e in by.items())


def source_of(r: dict) -> str:
    u = r["source"]
    if "lambdal" in u:
        return "Lambda" + ("" if r["gpus"] == 1 else f" ({r['gpus']} GPUs)")
    return "NVIDIA DLE " + ("BERT" if "BERT" in u else "ResNet-50")


def unmeasured_line() -> str:
    from advisor.gpu_perf import _unmeasured  # noqa: PLC0415

    u = _unmeasured()
    if not u:
        return ""
    return (f"A GPU kind never measured (`throughput.unmeasured_gpu`): each kind of the fit source predicted with its own "
            f"rows left out of the fit (`fit.py`, `leave_kind_out`; its architecture refit on the other kinds, Hopper's "
            f"fractions where none is left): n={u['rows']}, median {u['median'] * 100:.1f}%, 9 in 10 within "
            f"{u['p90'] * 100:.1f}%, worst {u['worst'] * 100:.1f}%, signed median {u['signed_median'] * 100:+.1f}%.")


def report(res: list[tuple[dict, float, float]], before: dict[str, float] | None = None,
           last: dict[str, float] | None = None) -> str:
    lines = ["# Throughput on other GPU kinds: predicted vs published", "",
             "Regenerate: `python -m benchmarks.calibration.cross_gpu.source_facts` (each row's split, by source, and what "
             "the source ran), `python -m benchmarks.calibration.cross_gpu.fit` (fits `advisor/data/gpu_perf.json` and "
             "`cross_gpu/harness.json` on the rows marked *fit*), then `python -m benchmarks.calibration.cross_gpu.predict` "
             "(this page). Rows: `benchmarks/calibration/cross_gpu/published.jsonl`. The split is by source (issue 39): "
             "*fit* = Lambda's deeplearning-benchmark, one GPU, every kind it publishes; *holdout* = NVIDIA's "
             "DeepLearningExamples tables and Lambda's 2-GPU rows. Each row is predicted through `advise estimate`'s path "
             "(`starting_config`, `advisor.estimate.estimate`) on the model the source ran (`predict.source_spec`). "
             "*last published*: this page at b7e4569, before the source split (`last_published.json`); *before*: the "
             "estimator before issue 14 (`before.json`). The bar (issue 39's done-when): held-out rows within 10% median "
             "and 25% worst, no systematic sign.", ""]
    for split in ("fit", "holdout"):
        for src in sorted({source_of(r) for r, _, _ in res if r["split"] == split}):
            sel = [x for x in res if x[0]["split"] == split and source_of(x[0]) == src]
            errs = [e for _, _, e in sel]
            pub = [last[r["id"]] / r["published"] - 1 for r, _, _ in sel if last and r["id"] in last]
            lines.append(f"- {split}, {src}: {stats(errs)}{signed(errs)}{signed_by_class(sel)}"
                         + (f" (last published: {stats(pub)})" if pub else ""))
        errs = [e for r, _, e in res if r["split"] == split]
        lines.append(f"- **{split}, every source: {stats(errs)}{signed(errs)}**")
        lines.append("")
    lines += [unmeasured_line(), "", "Rows per GPU kind (*bar*: median <= 10% and worst <= 25%):", "",
              "| GPU | fit rows | median | worst | bar | held-out rows | median | worst | bar |",
              "|---|---:|---:|---:|---|---:|---:|---:|---|"]

    def cell(e: list[float]) -> str:
        a = [abs(v) for v in e]
        if not a:
            return "0 | | | "
        return f"{len(a)} | {statistics.median(a) * 100:.1f}% | {max(a) * 100:.1f}% | " + ("yes" if _bar(e) else "no")

    for k in sorted({r["gpu"] for r, _, _ in res}):
        fit = [x[2] for x in res if x[0]["gpu"] == k and x[0]["split"] == "fit"]
        held = [x[2] for x in res if x[0]["gpu"] == k and x[0]["split"] == "holdout"]
        lines.append(f"| {k} | {cell(fit)} | {cell(held)} |")
    lines += ["", "| id | split | source facts | flags | published | predicted | err | last published err | before err | source |",
              "|---|---|---|---|---:|---:|---:|---:|---:|---|"]
    for r, pred, e in res:
        b = f"{(before[r['id']] / r['published'] - 1) * 100:+.1f}%" if before and r["id"] in before else ""
        lp = f"{(last[r['id']] / r['published'] - 1) * 100:+.1f}%" if last and r["id"] in last else ""
        facts = ", ".join(f"{k} {r[k]}" for k in ("architecture", "harness", "vocab", "masked_ratio", "bin_speedup") if r.get(k))
        lines.append(f"| {r['id']} | {r['split']} | {facts} | `{flags(r)}` | {r['published']:,.1f} | {pred:,.1f} | {e * 100:+.1f}% "
                     f"| {lp} | {b} | [{r['row']}]({r['source']}) |")
    return "\n".join(lines) + "\n"


BEFORE = Path(__file__).with_name("before.json")
LAST = Path(__file__).with_name("last_published.json")  # this page's predictions at b7e4569 (before the source split)
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
