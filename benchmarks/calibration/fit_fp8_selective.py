"""fp8 (torchao float8 Linears) and selective checkpointing against the estimate: the table, and the float8
GEMM efficiency the estimate's fp8 step change reads (advisor.setup.precision.fp8_step_change).

    python -m benchmarks.calibration.fit_fp8_selective [RESULTS.json]            # table + fit, writes both
    python -m benchmarks.calibration.fit_fp8_selective --check [RESULTS.json]    # the table only, nothing written

RESULTS.json is what benchmarks/gpu_checks/fp8_selective.py wrote (default: the committed copy,
benchmarks/calibration/results/fp8-selective/fp8_selective.json). Every row is estimated again here with the
current code, the GPU the row ran on and that call's host dispatch speed (launcher.host_dispatch, as `advise probe`
stores it), so the errors are the same run's. Writes:

- ``advisor/data/fp8_rates.json``, both FIT so that each fp8 row's measured samples/s over its bf16 twin's (same
  micro-batch, checkpointing, compile) matches the estimate's ratio (least squares in log over a grid; the ratio
  takes the bf16 estimate's own error out):
  ``fp8_gemm_efficiency`` on the compiled rows (casts fused): the factor on the bf16 GEMM efficiency at which float8
  GEMMs reach the datasheet's dense fp8 peak; then ``fp8_eager_cast_factor`` on the eager rows: the factor on
  torchao's eager casts as counted op by op (advisor.setup.precision.FP8_CAST_BYTES, FP8_CAST_KERNELS). A factor
  without its rows keeps the prior, 1.0 (``--prior``, or no results committed: the datasheet's fp8 = 2x bf16).
- ``benchmarks/calibration/results/fp8-selective.md``: per row, measured vs estimated peak memory and samples/s
  and their errors, with the GPU, torch and torchao versions and the date of the call.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

from advisor.config import TrainConfig
from advisor.setup import precision as fp8_setup
from benchmarks.gpu_checks.fp8_selective import estimate_of

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "calibration" / "results" / "fp8-selective" / "fp8_selective.json"
TABLE = ROOT / "benchmarks" / "calibration" / "results" / "fp8-selective.md"
PRIOR = {"fp8_gemm_efficiency": 1.0, "fp8_eager_cast_factor": 1.0,
         "source": "prior, before any measurement: float8 GEMMs reach the same fraction of the datasheet's dense fp8 "
                   "peak as bf16 GEMMs of theirs (benchmarks/calibration/fit_fp8_selective.py --prior)"}
GRID = [round(0.25 + 0.01 * i, 2) for i in range(176)]  # 0.25 .. 2.00
CAST_GRID = [round(0.1 + 0.02 * i, 2) for i in range(196)]  # 0.10 .. 4.00


def measured_rows(data: dict) -> list[dict]:
    return [r for r in data["rows"] if r.get("status") == "ok" and r.get("measured")]


def estimates(data: dict, rows: list[dict]) -> dict[str, dict]:
    h = data["header"]
    host_us = (h.get("host_dispatch") or {}).get("us_per_step")
    return {r["name"]: estimate_of(r["model"], TrainConfig(**r["config"]), h["gpu"], host_us) for r in rows}


def _twin(rows: list[dict], r: dict) -> dict | None:
    want = {**r["config"], "precision": "bf16"}
    return next((t for t in rows if t["config"] == want), None)


def _pairs(rows: list[dict], compiled: bool) -> list[tuple[dict, dict]]:
    return [(r, t) for r in rows if r["config"]["precision"] == "fp8" and bool(r["config"].get("compile")) == compiled
            and (t := _twin(rows, r)) is not None]


def _fit(data: dict, pairs, key: str, grid: list[float], fixed: dict) -> tuple[float, dict[str, tuple[float, float]]]:
    """The grid value of rates[key] (the others ``fixed``) whose estimated fp8/bf16 ratios best match the measured
    ones (least squares in log); returns it and {row: (measured ratio, estimated ratio)}."""
    meas = {r["name"]: r["measured"]["samples_per_s"] / t["measured"]["samples_per_s"] for r, t in pairs}
    bf16 = estimates(data, [t for _, t in pairs])
    saved = fp8_setup.fp8_rates

    def ratios(value: float) -> dict[str, float]:
        fp8_setup.fp8_rates = lambda: {**fixed, key: value}
        try:
            est = estimates(data, [r for r, _ in pairs])
        finally:
            fp8_setup.fp8_rates = saved
        return {r["name"]: est[r["name"]]["samples_per_s"] / bf16[t["name"]]["samples_per_s"] for r, t in pairs}

    best = min(grid, key=lambda v: sum(math.log(g / meas[k]) ** 2 for k, g in ratios(v).items()))
    got = ratios(best)
    return best, {k: (meas[k], got[k]) for k in meas}


def fit_rates(data: dict, rows: list[dict]) -> tuple[dict, dict[str, tuple[float, float]], list[str]]:
    """Two stages: ``fp8_gemm_efficiency`` on the compiled fp8 rows over their bf16 twins (their casts are fused:
    the GEMMs carry the difference), then ``fp8_eager_cast_factor`` on the eager rows with that efficiency (their
    casts carry it). A stage without its rows keeps the prior (1.0). Returns (rates, ratios per row, what was fit)."""
    rates = {"fp8_gemm_efficiency": PRIOR["fp8_gemm_efficiency"], "fp8_eager_cast_factor": 1.0}
    ratios, fitted = {}, []
    compiled, eager = _pairs(rows, True), _pairs(rows, False)
    if compiled:
        rates["fp8_gemm_efficiency"], got = _fit(data, compiled, "fp8_gemm_efficiency", GRID, rates)
        ratios.update(got)
        fitted.append(f"fp8_gemm_efficiency on {len(compiled)} compiled row(s)")
    if eager:
        rates["fp8_eager_cast_factor"], got = _fit(data, eager, "fp8_eager_cast_factor", CAST_GRID, rates)
        ratios.update(got)
        fitted.append(f"fp8_eager_cast_factor on {len(eager)} eager row(s)")
    return rates, ratios, fitted


def _pct(est: float | None, meas: float | None) -> str:
    return "—" if not est or not meas else f"{est / meas - 1:+.1%}"


def table(data: dict, rows: list[dict], est: dict[str, dict], rates: dict, ratios: dict, fitted: list[str]) -> str:
    h = data["header"]
    host = h.get("host_dispatch") or {}
    lines = [f"# fp8 and selective checkpointing on one {h['device']} (issue 38)", "",
             f"{h['date'][:10]}, torch {h['torch']}, torchao {h.get('torchao')}, {h['model']} (cardwise zoo), seq "
             f"{h['seq_len']}, {h['warmup']} warm-up + {h['timed']} timed steps, bf16 autocast, fused AdamW; host "
             f"dispatch {host.get('us_per_step', '—')} us a reference step. Measured by "
             "`benchmarks/gpu_checks/fp8_selective.py` in one process (budget "
             f"{h['budget_s']:.0f} s, {h.get('elapsed_s', 0):.0f} s used); estimated by "
             "`python -m benchmarks.calibration.fit_fp8_selective` with the current code and "
             f"rates {', '.join(f'{k} {v}' for k, v in rates.items() if k != 'source')}"
             + (f" (fit: {'; '.join(fitted)})" if fitted else " (packaged)") + ".", "",
             "| row | peak GiB meas. | est. | error | samples/s meas. | est. | error |", "|---|---|---|---|---|---|---|"]
    mem_err, sps_err = [], []
    for r in rows:
        m, e = r["measured"], est[r["name"]]
        lines.append(f"| {r['name']} | {m.get('peak_gib', 0):.2f} | {e['peak_gib']:.2f} | {_pct(e['peak_gib'], m.get('peak_gib'))} "
                     f"| {m['samples_per_s']:.2f} | {e['samples_per_s']:.2f} | {_pct(e['samples_per_s'], m['samples_per_s'])} |")
        if m.get("peak_gib"):
            mem_err.append(abs(e["peak_gib"] / m["peak_gib"] - 1))
        sps_err.append(abs(e["samples_per_s"] / m["samples_per_s"] - 1))
    for r in data["rows"]:
        if r.get("status") != "ok":
            lines.append(f"| {r['name']} | {r.get('status')} | | | | | |")
    if mem_err:
        lines += ["", f"Memory: median |error| {statistics.median(mem_err):.1%}, worst {max(mem_err):.1%}; samples/s: "
                      f"median {statistics.median(sps_err):.1%}, worst {max(sps_err):.1%} ({len(rows)} rows)."]
    if ratios:
        lines += ["", "fp8 over its bf16 twin (samples/s), measured and estimated at the fit:", "",
                  "| row | measured | estimated |", "|---|---|---|"]
        lines += [f"| {k} | {m:.3f} | {g:.3f} |" for k, (m, g) in ratios.items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="?", type=Path, default=RESULTS, help="fp8_selective.json (default: committed)")
    ap.add_argument("--check", action="store_true", help="print the table, write nothing")
    ap.add_argument("--prior", action="store_true", help="write the prior rates (no measurement)")
    ap.add_argument("--rates", type=Path, default=fp8_setup.FP8_RATES, help="where the rates go")
    ap.add_argument("--no-table", action="store_true", help="write the rates, not the table (the tests' check)")
    args = ap.parse_args(argv)
    if args.prior or not args.results.is_file():
        if not args.check:
            args.rates.write_text(json.dumps(PRIOR, indent=1) + "\n")
        print(f"no results at {args.results}: the prior rates ({PRIOR['fp8_gemm_efficiency']})")
        return 0
    data = json.loads(args.results.read_text())
    rows = measured_rows(data)
    rates, ratios, fitted = fit_rates(data, rows)
    rates["source"] = (f"fit by benchmarks/calibration/fit_fp8_selective.py ({'; '.join(fitted) or 'no fp8 pair: prior'}) "
                       f"over their bf16 twins, {data['header']['device']}, torch {data['header']['torch']}, torchao "
                       f"{data['header'].get('torchao')}, {data['header']['date'][:10]} ({args.results.name})")
    if not args.check:
        args.rates.write_text(json.dumps(rates, indent=1) + "\n")
        fp8_setup.fp8_rates.cache_clear()
    est = estimates(data, rows)
    shown = fp8_setup.fp8_rates() if args.check else rates
    text = table(data, rows, est, shown, ratios, [] if args.check else fitted)
    if not args.check and not args.no_table:
        TABLE.write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
