"""Fit each architecture's achievable fractions on the published rows marked "fit" (issue 14).

    python -m benchmarks.calibration.cross_gpu.fit          # writes advisor/data/gpu_perf.json, then run predict.py
    python -m benchmarks.calibration.cross_gpu.fit --loo    # also: leave-one-out errors over the fit rows

For every architecture with fit rows (one GPU kind each, declared in published.jsonl before this
ran), the fractions of datasheet peak its GPUs reach (matmul, matmul_tf32, conv, simt, conv_simt,
bandwidth; advisor/gpu_perf.py) are chosen to minimise the squared log error of the predicted samples/s
over its fit rows, plus a ridge pulling each toward Hopper's fraction (RIDGE: with four rows per
architecture and up to six fractions, a kind no row exercises stays at Hopper's value instead of
drifting). Coordinate descent over a log grid, GRID_STEPS per doubling, SWEEPS passes. The bandwidth
fraction is bounded by the datasheet: the elementwise rate it gives is at most 100% of the GPU's GB/s
(``bandwidth_cap``).
Hopper is not fit: its fractions are the H200's measured ceilings, which every calibration
constant was fit against. Held-out rows never influence a fraction.

The estimator these fractions scale is advisor.throughput's roofline (gpu_seconds): matmul and
attention FLOPs (matmul, matmul_tf32 or simt), convolution FLOPs (conv or conv_simt), and every
byte moved, the convolutions' layout traffic included (bandwidth). ``--loo`` refits each
architecture without each of its fit rows in turn and predicts that row: the fit rows' own check
of how well a set of kinds extrapolates, which chose the kinds (NCHW traffic at the bandwidth
fraction instead of a kind of its own, TF32 matmuls apart from half-precision ones; the numbers
are in notes.md). Held-out rows play no part in it.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent

import benchmarks.calibration.cross_gpu.predict as P

from advisor import gpu_perf
from advisor.gpus import get_gpu

RIDGE = 0.02
# Hopper's fractions against one H100 SXM under the H200 fit's stack (TF32 BertForQuestionAnswering included):
# the table `python -m benchmarks.calibration.h100_check` writes; nothing is fit on it.
H100_CHECK = "benchmarks/calibration/results/h100-check.md"
GRID = [2 ** (i / 8) for i in range(-24, 25)]  # 1/8x .. 8x Hopper's fraction, 8 steps per doubling
SWEEPS = 4


def _set(fracs: dict[str, dict[str, float]]) -> None:
    """Make gpu_perf read these fractions (relative to Hopper's) instead of the packaged file."""
    table = {a: gpu_perf.ArchPerf(arch=a, **{k: gpu_perf.Fraction(vs_h200=v, source="fitting") for k, v in rel.items()})
             for a, rel in fracs.items()}
    gpu_perf._fitted = lambda: table  # noqa: SLF001 - the fit's own injection point


def loss(rows: list[dict], rel: dict[str, float]) -> float:
    err = sum(math.log(P.predict(r) / r["published"]) ** 2 for r in rows)
    return err + RIDGE * sum(math.log(v) ** 2 for v in rel.values())


def bandwidth_cap() -> float:
    """The largest bandwidth fraction (relative to Hopper's) a fit may choose: memory-bound work at
    the H200 fit's elementwise rate times it stays within the GPU's datasheet bandwidth (rate 1.0)."""
    from advisor.calibration import default_calibration  # noqa: PLC0415

    return 1.0 / default_calibration().rate_efficiency["bytes"]


def fit_arch(arch: str, rows: list[dict], fracs: dict) -> dict[str, float]:
    rel = {k: 1.0 for k in gpu_perf.WORK_KINDS}
    cap = bandwidth_cap()
    for _ in range(SWEEPS):
        for k in gpu_perf.WORK_KINDS:
            best = None
            for g in GRID:
                if k == "bandwidth" and g > cap:
                    continue  # above the datasheet bandwidth
                trial = {**rel, k: g}
                _set({**fracs, arch: trial})
                v = loss(rows, trial)
                if best is None or v < best[0]:
                    best = (v, g)
            rel[k] = best[1]
    return rel


def leave_one_out(by_arch: dict[str, list[dict]], fracs: dict) -> list[float]:
    """|error| of each fit row predicted by its architecture refit without it."""
    out = []
    for arch, arch_rows in sorted(by_arch.items()):
        for i, r in enumerate(arch_rows):
            rel = fit_arch(arch, arch_rows[:i] + arch_rows[i + 1:], fracs)
            _set({**fracs, arch: rel})
            out.append(abs(P.predict(r) / r["published"] - 1))
            print(f"  leave out {r['id']}: {out[-1] * 100:.1f}%")
    _set(fracs)
    return out


def hopper_entry(fracs: dict[str, dict[str, float]], by_arch: dict[str, list[dict]]) -> dict:
    """Hopper's fractions: 1.0 (the H200 every efficiency was fit on), but TF32 matmuls, which no
    H200 fit row runs: the geometric mean of the TF32-to-half matmul ratio of the fitted
    architectures with TF32 tensor cores (Ampere on), whose rows show it."""
    tf32 = [a for a in fracs if get_gpu(by_arch[a][0]["gpu"]).tensor_tf32]
    ratio = math.exp(sum(math.log(fracs[a]["matmul_tf32"] / fracs[a]["matmul"]) for a in tf32) / len(tf32))
    ids = [r["id"] for a in tf32 for r in by_arch[a] if r["precision"] in ("tf32", "fp16", "bf16") and "bert" in r["model"]]
    checked = f"; checked on an H100 SXM, nothing fit there ({H100_CHECK})"
    ref = {k: {"vs_h200": 1.0, "source": "the reference: every efficiency was fit on the H200" + checked}
           for k in gpu_perf.WORK_KINDS}
    ref["matmul_tf32"] = {"vs_h200": round(ratio, 4), "source": (
        f"{ratio:.2f}x the H200's bf16 matmul fraction: no H200 fit row runs TF32 matmuls; {', '.join(tf32)} reach "
        f"{ratio:.2f}x their half-precision matmul fraction in TF32 (geometric mean; fit on {', '.join(ids)})" + checked)}
    print("Hopper matmul_tf32", round(ratio, 3))
    return ref


# GPU kinds measured by this project's own calls (the H200 calibration; the H100 SXM of issues 28 and 39:
# benchmarks/calibration/results/h100-check.md, h100-i39.md), besides the kinds of the published rows.
MEASURED_HERE = ("H200", "H100-SXM")


def unmeasured_error(fit_rows: list[dict]) -> dict:
    """What to expect on a GPU kind no row has measured: the errors of the held-out 1-GPU published rows of
    the kinds no fit row is on (their fractions come from another kind of their architecture, or from
    Hopper's), and the kinds some row has measured (published, fit or held out, or this project's calls)."""
    every = P.load_rows()
    fitted = {r["gpu"] for r in fit_rows}
    signed = [e for _, _, e in P.errors([r for r in every if r["split"] != "fit" and r["gpu"] not in fitted
                                          and r["gpus"] == 1])]
    errs = sorted(abs(e) for e in signed)
    return {"median": round(statistics.median(errs), 4), "p90": round(errs[round(0.9 * (len(errs) - 1))], 4),
            "worst": round(errs[-1], 4), "rows": len(errs), "signed_median": round(statistics.median(signed), 4),
            "measured_kinds": sorted({r["gpu"] for r in every} | set(MEASURED_HERE)),
            "source": "held-out 1-GPU published rows of the GPU kinds no fit row is on (benchmarks/calibration/cross_gpu/fit.py)"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loo", action="store_true", help="also: leave-one-out errors over the fit rows")
    ap.add_argument("--out", type=Path, default=gpu_perf.FITTED, help="the file written (default: the packaged one)")
    args = ap.parse_args()
    rows = [r for r in P.load_rows() if r["split"] == "fit"]
    by_arch: dict[str, list[dict]] = {}
    for r in rows:
        by_arch.setdefault(get_gpu(r["gpu"]).arch, []).append(r)
    by_arch.pop(gpu_perf.REFERENCE_ARCH, None)
    fracs: dict[str, dict[str, float]] = {}
    for arch, arch_rows in sorted(by_arch.items()):
        fracs[arch] = fit_arch(arch, arch_rows, fracs)
    _set(fracs)
    if args.loo:
        loo = leave_one_out(by_arch, fracs)
        print(f"leave-one-out over the fit rows: {P.stats(loo)}, mean {sum(loo) / len(loo) * 100:.1f}%")
    out = {"source": "fit by benchmarks/calibration/cross_gpu/fit.py on the rows marked fit in benchmarks/calibration/cross_gpu/published.jsonl",
           "arches": {}}
    for arch, rel in fracs.items():
        ids = [r["id"] for r in by_arch[arch]]
        errs = [P.predict(r) / r["published"] - 1 for r in by_arch[arch]]
        note = (f"fit on {', '.join(ids)} (published training throughput; fit errors "
                f"{', '.join(f'{e * 100:+.0f}%' for e in errs)})")
        out["arches"][arch] = {k: {"vs_h200": round(v, 4),
                                   "source": (f"{v:.2f}x Hopper's, " + note) if v != 1.0 else
                                   f"Hopper's (no {arch} fit row exercises it; ridge keeps it), " + note}
                               for k, v in rel.items()}
        print(arch, {k: round(v, 3) for k, v in rel.items()}, [f"{e * 100:+.0f}%" for e in errs])
    out["arches"][gpu_perf.REFERENCE_ARCH] = hopper_entry(fracs, by_arch)
    out["unmeasured"] = unmeasured_error(rows)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
