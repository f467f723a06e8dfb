"""The estimator table: every measured row predicted with a calibration, the quality bars of DESIGN.md
on the holdout rows, per family and model source, before and after issue 16's host model, the run-to-run
spread, the unseen sets (predicted before measuring, and now) and the slowed host.

Written by ``python -m benchmarks.calibration.fit`` to ``benchmarks/calibration/results/h200-estimator.md``
("before" is ``h200-estimator-before-roofline.json``, the estimator at commit fc248ce on the same rows).
"""

from __future__ import annotations

import json
import statistics

from advisor.calibration import Calibration
from advisor.hardware import HardwareSpec
from benchmarks.calibration.rows import (CONTENDED, HOSTBOUND, RESULTS, UNSEEN_SETS, family_of, load, model_source,
                                         predict, row_calibration, spec_of)

# Every row predicted by the estimator before the per-kind roofline (commit fc248ce, its packaged
# calibration): `python -m benchmarks.calibration.predict_users --snapshot FILE` run in that checkout wrote it.
BEFORE = RESULTS / "h200-estimator-before-roofline.json"
REPORT = RESULTS / "h200-estimator.md"

def _stats(errs: list[float]) -> str:
    return f"{statistics.median(errs):.1%} | {max(errs):.1%}" if errs else "- | -"


def _before_after(title: str, column: str, groups: dict) -> list[str]:
    """A markdown table of errors before/after per group ({name: (before, after)}), and a row for all."""
    lines = ["", title, "", f"| {column} | n | before median | before worst | after median | after worst |",
             "|---|---:|---:|---:|---:|---:|"]
    allb, alla = [], []
    for name, (b, a) in sorted(groups.items()):
        allb += b
        alla += a
        lines.append(f"| {name} | {len(a)} | {_stats(b)} | {_stats(a)} |")
    lines.append(f"| all | {len(alla)} | {_stats(allb)} | {_stats(alla)} |")
    return lines


REPEATS = (RESULTS / "h200-hostbound.jsonl", RESULTS / "h200-hostbound-repeat.jsonl",
           RESULTS / "h200-hostbound-repeat2.jsonl", RESULTS / "h200-reference-eager.jsonl")


def _repeats(rows: list[dict]) -> list[str]:
    """Run-to-run spread: the same configurations measured again in another call (another machine)."""
    first = {r["id"]: r for r in rows}
    ratios = []
    for path in REPEATS:
        if path.exists():
            for r in load(path)[1]:
                same = first.get(r["id"])  # cuDNN TF32 changes only fp32 CNN rows
                if same and (same["cudnn_tf32"] == r["cudnn_tf32"] or spec_of(r).family != "cnn" or r["precision"] != "fp32"):
                    ratios.append((r["id"], same["step_s"], r["step_s"]))
    if not ratios:
        return []

    def spread(group: list[tuple[str, float, float]]) -> str:
        rel = [max(b / a, a / b) - 1 for _, a, b in group]
        i = max(range(len(group)), key=rel.__getitem__)
        name, a, b = group[i]
        return (f"{len(group)} measurements, {statistics.median(rel):.1%} median apart, worst {rel[i] + 1:.2f}x "
                f"({name}: {a * 1e3:.1f} vs {b * 1e3:.1f} ms)")

    small = [x for x in ratios if x[0].startswith("h-")]  # the host-bound set: small batches
    large = [x for x in ratios if not x[0].startswith("h-")]
    return ["", f"Run to run: the same configurations measured again in other calls, on other machines "
            f"({', '.join(f'`{p.name}`' for p in REPEATS)}), step time: small-batch (host-bound) set "
            f"{spread(small)}; large-batch rows {spread(large) if large else 'none'}. Host-bound rows move most: each "
            "call gets a machine whose CPU dispatches at its own speed, which no one launch_us can predict (the "
            "large-batch rows that moved are those whose host time is close to their GPU time); files whose header "
            "has the host's dispatch speed (launcher.host_dispatch) are predicted with it, earlier ones are assumed "
            "to be the reference host."]


def _unseen(rows: list[dict], predicted: dict) -> list[str]:
    """Issue 16's bar on configurations never measured before: what was predicted before they ran, and now."""
    table = []
    for prefix, name, predicted_file, *_ in UNSEEN_SETS:
        # "now" on the set's holdout rows only: the half of a REFIT_SETS set that joined the fit is not judged
        unseen = [r for r in rows if r["id"].startswith(prefix) and r["split"] == "holdout"]
        measured = [r for r in rows if r["id"].startswith(prefix)]
        if not measured:
            continue
        before_path = RESULTS / predicted_file
        before = json.loads(before_path.read_text()) if before_path.exists() else {}
        now_m, now_t, was_m, was_t = [], [], [], []
        for r in unseen:
            e = predicted[r["id"]]  # report()'s estimate of the row
            now_m.append(abs(e.memory.peak_gib / r["peak_gib"] - 1))
            now_t.append(abs(e.throughput.samples_per_s / r["samples_per_s"] - 1))
        for r in measured:
            if r["id"] in before:
                was_m.append(abs(before[r["id"]]["peak_gib"] / r["peak_gib"] - 1))
                was_t.append(abs(before[r["id"]]["samples_per_s"] / r["samples_per_s"] - 1))
        if was_m:
            table.append(f"| {name} set ({prefix}*), predicted before measuring (`{before_path.name}`) | {len(was_m)} | "
                         f"{_stats(was_m)} | {_stats(was_t)} |")
        if now_m:
            table.append(f"| {name} set ({prefix}*), now, its holdout rows | {len(now_m)} | {_stats(now_m)} | {_stats(now_t)} |")
    if not table:
        return []
    return ["", "The unseen users' configurations (`benchmarks/calibration/measure/unseen.py`: new batch sizes, lengths, image "
            "sizes, precisions and compile choices of the users' models, and in the second and third sets models "
            "never measured before), abs error median | worst. *predicted before measuring*: written by "
            "the estimator of the day before any of the set ran, for the reference host; *now*: this calibration, "
            "each row for the host that measured it (the dispatch speed in its file's header, measured at the "
            "call's start, which is what `advise probe` gives a user's machine; from the thirteenth set, the "
            "median of the probes between the row's timed rounds: `python -m benchmarks.notebook.2026-12-04-unseen-row-host.unseen_row_host` "
            "gives each set with either). A set measured before a change to the "
            "model that its errors prompted is no longer unseen by that change: the *before* line is the honest one. "
            "Half of each set whose before line is recorded (REFIT_SETS: by a hash of the row id) has since joined "
            "the fit; *now* judges the other half.",
            "", "| | n | memory median | memory worst | throughput median | throughput worst |",
            "|---|---:|---:|---:|---:|---:|", *table]


def _contended(cal: Calibration, hw: HardwareSpec) -> list[str]:
    """Host-bound rows on a host slowed on purpose: does the header's host factor carry?"""
    if not CONTENDED.exists():
        return []
    rows = load(CONTENDED)[1]
    if not rows:
        return []
    f = rows[0]["host_factor"]
    lines = ["", f"A slower host, made on purpose (`{CONTENDED.name}`: the process pinned to one core that a busy "
             f"loop shares): its reference step took {f:.2f}x the reference host's. The same configurations, "
             "predicted for that host (with the factor) and for the reference host (without):", "",
             "| id | measured samples/s | predicted with factor | err | without | err |", "|---|---:|---:|---:|---:|---:|"]
    with_e, without_e = [], []
    for r in rows:
        a = predict(r, cal, hw).throughput.samples_per_s
        b = predict(dict(r, host_factor=1.0), cal, hw).throughput.samples_per_s
        m = r["samples_per_s"]
        with_e.append(abs(a / m - 1))
        without_e.append(abs(b / m - 1))
        lines.append(f"| {r['id']} | {m:,.1f} | {a:,.1f} | {a / m - 1:+.1%} | {b:,.1f} | {b / m - 1:+.1%} |")
    lines.append(f"| median / worst | | | {_stats(with_e)} | | {_stats(without_e)} |")
    return lines


def report(header: dict, rows: list[dict], cal: Calibration, hw: HardwareSpec) -> str:
    before = {k: v["samples_per_s"] for k, v in json.loads(BEFORE.read_text()).items()} if BEFORE.exists() else {}
    refit0 = before
    lines = [
        "# Estimator vs measurement on one H200",
        "",
        f"GPU: {header.get('device')}, torch {header.get('torch')}, measured {header.get('date')} with "
        "`benchmarks/calibration/measure/reference.py` (raw rows: `h200-reference.jsonl`; small batches, compiled small "
        f"batches and fp32 CNNs with cuDNN TF32: `{HOSTBOUND.name}`, `--set hostbound`). Ceilings measured "
        f"in the same run: bf16 matmul {header.get('bf16_matmul_tflops', 0):.0f} TFLOP/s, copy "
        f"{header.get('copy_gbps', 0):.0f} GB/s.",
        "",
        "Regenerate: `python -m benchmarks.calibration.fit` (fits `advisor/data/calibration.json` on the rows "
        "marked *fit* only, then predicts every row). The quality bars are judged on the *holdout* rows, which "
        "no constant saw. *before*: the estimator before the per-kind roofline (commit fc248ce, "
        f"`{BEFORE.name}`). *excluded*: true-fp32 CNN rows (cuDNN TF32 off), a precision cardwise "
        "no longer names. host/gpu ms: the model's two terms per step; the larger sets the pace. host x: the "
        "row's host dispatch time over the reference host's (its file header; 1 when not recorded).",
        "",
        "| id | split | peak GiB pred | meas | err | samples/s pred | meas | err | before err | host ms | gpu ms | host x |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    errs: dict[str, tuple[list, list]] = {"fit": ([], []), "holdout": ([], [])}
    fam: dict[str, tuple[list, list]] = {}
    src: dict[str, tuple[list, list]] = {}
    predicted = {}
    for r in rows:
        e = predicted[r["id"]] = predict(r, cal, hw)
        if "request" in r and r["split"] == "holdout":  # users' rows: the fast path is advise estimate's
            from benchmarks.calibration.users import predict_request

            cli = predict_request(r["request"], row_calibration(r, cal))
            # The rows ran on synthetic data already on the GPU: compare the GPUs' rate, which advise
            # estimate keeps beside the loader-capped samples/s (gpu_samples_per_s, issue 28).
            on_gpu = cli.throughput.gpu_samples_per_s or cli.throughput.samples_per_s
            assert abs(on_gpu / e.throughput.samples_per_s - 1) < 1e-9, r["id"]
            assert abs(cli.memory.peak_gib / e.memory.peak_gib - 1) < 1e-9, r["id"]
        t = e.throughput
        me = e.memory.peak_gib / r["peak_gib"] - 1
        te = t.samples_per_s / r["samples_per_s"] - 1
        be = before[r["id"]] / r["samples_per_s"] - 1 if r["id"] in before else None
        if r["split"] in errs:
            errs[r["split"]][0].append(abs(me))
            errs[r["split"]][1].append(abs(te))
        if r["split"] == "holdout":
            g = src.setdefault(model_source(r), ([], []))
            g[1].append(abs(te))
            if r["id"] in refit0:
                g[0].append(abs(refit0[r["id"]] / r["samples_per_s"] - 1))
            f = fam.setdefault(family_of(r), ([], []))
            f[1].append(abs(te))
            if be is not None:
                f[0].append(abs(be))
        lines.append(f"| {r['id']} | {r['split']} | {e.memory.peak_gib:.2f} | {r['peak_gib']:.2f} | {me:+.1%} | "
                     f"{t.samples_per_s:,.1f} | {r['samples_per_s']:,.1f} | {te:+.1%} | "
                     f"{'' if be is None else f'{be:+.1%}'} | {t.host_s * 1e3:.1f} | {t.gpu_s * 1e3:.1f} | {r.get('host_factor', 1.0):.2f} |")
    lines += ["", "| rows | n | memory median | memory worst | throughput median | throughput worst |",
              "|---|---:|---:|---:|---:|---:|"]
    for split, (m, t) in errs.items():
        if m:
            lines.append(f"| {split} | {len(m)} | {_stats(m)} | {_stats(t)} |")
    lines += _before_after("Throughput on the holdout rows per model source, before (commit fc248ce, "
                           f"`{BEFORE.name}`) and after (abs error, median | worst):", "source", src)
    lines += _before_after("Throughput on the holdout rows per family, before and after (abs error, median | worst):",
                           "family", fam)
    lines += _repeats(rows)
    lines += _unseen(rows, predicted)
    lines += _contended(cal, hw)
    lines += ["", "Bars (DESIGN.md): throughput on the same GPU kind within 10% median, 25% worst; memory 5% / 15% "
              "(the memory side is issue 16's other half).", "", "Fitted constants:", "", "```",
              json.dumps({k: v for k, v in cal.model_dump().items()
                          if k in ("rate_efficiency", "gpu_kernel_us", "traffic_per_saved_byte", "launch_us",
                                   "compile_step_us", "compile_call_us", "compile_kernel_us", "host_combine_p",
                                   "compile_traffic_factor", "compile_traffic", "compile_gelu_kept",
                                   "compile_activation_factor", "ckpt_fraction", "host_dispatch_ref_us",
                                   "launch_us_by_kind")},
                         indent=1), "```", ""]
    return "\n".join(lines)
