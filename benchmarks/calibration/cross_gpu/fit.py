"""Fit each architecture's achievable fractions on the published rows marked "fit" (issues 14 and 39).

    python -m benchmarks.calibration.cross_gpu.fit          # writes advisor/data/gpu_perf.json and harness.json
    python -m benchmarks.calibration.cross_gpu.fit --loo    # also: leave-one-out errors over the fit rows

The split is by source (``source_facts.py``): the fit rows are Lambda's one-GPU rows, every GPU kind it publishes;
NVIDIA's DeepLearningExamples tables are held out whole. Each row is estimated as its source ran it (``predict.py``,
``source_spec``). First the source harness (``fit_harness``): DLE's run_squad.py, which Lambda's BERT rows run, reaches
a share of every GPU rate the stack the H200 fit measured does not; it is fit per precision class on the Hopper fit
rows, where the fractions are the H200's. Then, for every other architecture (GA100 and GA10x apart: advisor.gpu_perf
ARCHES), the fractions of datasheet peak its GPUs reach (matmul, matmul_tf32, conv, simt, conv_simt, bandwidth;
advisor/gpu_perf.py) are chosen to minimise the squared log error of the predicted samples/s over its fit rows, plus
a ridge pulling each toward Hopper's fraction (RIDGE: a kind no row exercises stays at Hopper's value instead of
drifting, and is not searched: ``exercised``). Coordinate descent over a log grid, GRID_STEPS per doubling, up to
SWEEPS passes (fewer when one moves nothing). The bandwidth fraction is bounded by the datasheet: the elementwise rate
it gives is at most 100% of the GPU's GB/s (``bandwidth_cap``). Hopper is not fit: its fractions are the H200's
measured ceilings, which every calibration constant was fit against. Held-out rows never influence a fraction.

What a GPU kind never measured should expect (gpu_perf.json "unmeasured", ``throughput.unmeasured_gpu``) is measured
by ``leave_kind_out``: each fit kind's rows predicted with its architecture refit on the other kinds only.

The estimator these fractions scale is advisor.throughput's roofline (gpu_seconds): matmul and
attention FLOPs (matmul, matmul_tf32 or simt), convolution FLOPs (conv or conv_simt), and every
byte moved, the convolutions' layout traffic included (bandwidth). ``--loo`` refits each
architecture without each of its fit rows in turn and predicts that row.
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


# Hopper's entry as packaged: 1.0 (the H200 every efficiency was fit on) but TF32 matmuls, which no H200 fit row
# runs: 0.77 of the bf16 fraction, the TF32-to-half ratio the Ampere and Ada fit rows showed at 9e9e7a3, checked on
# an H100 SXM (H100_CHECK: transformers' BertForQuestionAnswering in TF32 at Lambda's batch, 187.0 samples/s
# measured, 182.8 estimated). Kept, not refit: the source harness is fit on Hopper rows against it (fit_harness).
HOPPER = gpu_perf.arch_perf(gpu_perf.REFERENCE_ARCH)


def _set(fracs: dict[str, dict[str, float]]) -> None:
    """Make gpu_perf read these fractions (relative to Hopper's) instead of the packaged file; Hopper's as packaged."""
    table = {a: gpu_perf.ArchPerf(arch=a, **{k: gpu_perf.Fraction(vs_h200=v, source="fitting") for k, v in rel.items()})
             for a, rel in fracs.items()}
    table[gpu_perf.REFERENCE_ARCH] = HOPPER
    gpu_perf._fitted = lambda: table  # noqa: SLF001 - the fit's own injection point


def loss(rows: list[dict], rel: dict[str, float]) -> float:
    err = sum(math.log(P.predict(r) / r["published"]) ** 2 for r in rows)
    return err + RIDGE * sum(math.log(v) ** 2 for v in rel.values())


def bandwidth_cap() -> float:
    """The largest bandwidth fraction (relative to Hopper's) a fit may choose: memory-bound work at
    the H200 fit's elementwise rate times it stays within the GPU's datasheet bandwidth (rate 1.0)."""
    from advisor.calibration import default_calibration  # noqa: PLC0415

    return 1.0 / default_calibration().rate_efficiency["bytes"]


def exercised(rows: list[dict]) -> list[str]:
    """The work kinds some row runs (its precision's matmuls and convolutions on its GPU, and bytes): a kind no row
    runs has only the ridge in its loss, whose minimum is Hopper's fraction, so it is left there unsearched."""
    kinds = {"bandwidth"}
    for r in rows:
        g = get_gpu(r["gpu"])
        kinds |= {gpu_perf.work_kind(g, r["precision"], conv=False), gpu_perf.work_kind(g, r["precision"], conv=True)}
    return [k for k in gpu_perf.WORK_KINDS if k in kinds]


def fit_arch(arch: str, rows: list[dict], fracs: dict) -> dict[str, float]:
    rel = {k: 1.0 for k in gpu_perf.WORK_KINDS}
    cap = bandwidth_cap()
    for _ in range(SWEEPS):
        before = dict(rel)
        for k in exercised(rows):
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
        if rel == before:  # a sweep that moves nothing: the later ones would not either
            break
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


def fit_harness(rows: list[dict]) -> dict:
    """Each source harness's efficiency per precision class (``precision_class``: half, full), on the fit rows of
    Hopper GPUs that name it: the median of published over predicted samples/s, three fixed-point passes. Hopper's
    fractions are the H200's (and its TF32 share is checked on an H100: H100_CHECK), so on Hopper what is left
    between the estimate and a source is the source's harness; fitting it there keeps it apart from the other
    architectures' fractions, which are fit after it with it in place. Held-out rows play no part.

    Why (multi_gpu/NOTES.md, "DLE's SQuAD harness"): DLE's run_squad.py, in NGC 21.x-era containers with unfused
    attention, reaches less of a GPU than the stack the H200 fit measured: on one H100, transformers'
    BertForQuestionAnswering under torch 2.11 ran within -4..+11% of the estimate where Lambda's published H100 rows
    are 0.63-0.77 of it."""
    groups: dict = {}
    for r in rows:
        if r.get("harness") and get_gpu(r["gpu"]).arch == gpu_perf.REFERENCE_ARCH:
            groups.setdefault(r["harness"], {}).setdefault(P.precision_class(r), []).append(r)
    out: dict = {}
    for name, by_class in sorted(groups.items()):
        for c, sel in sorted(by_class.items()):
            eff = 1.0
            for _ in range(3):
                eff *= statistics.median(x["published"] / P.predict(x, harness={name: {c: eff}}) for x in sel)
            out.setdefault(name, {})[c] = round(eff, 4)
            print(f"harness {name} {c}: {eff:.4f} on {', '.join(x['id'] for x in sel)}")
    return out


# GPU kinds measured by this project's own calls (the H200 calibration; the H100 SXM of issues 28 and 39:
# benchmarks/calibration/results/h100-check.md, h100-i39.md), besides the kinds of the published rows.
MEASURED_HERE = ("H200", "H100-SXM")


def leave_kind_out(by_arch: dict[str, list[dict]], fracs: dict) -> list[tuple[dict, float]]:
    """(row, signed error) of every fit row of a non-Hopper GPU kind, predicted with its architecture refit on the
    other kinds' rows only (Hopper's fractions where no other kind has rows): what a GPU kind no row has measured
    gets, measured on kinds that were measured."""
    out = []
    for arch, arch_rows in sorted(by_arch.items()):
        for kind in sorted({r["gpu"] for r in arch_rows}):
            rest = [r for r in arch_rows if r["gpu"] != kind]
            table = {a: v for a, v in fracs.items() if a != arch}
            if rest:
                table[arch] = fit_arch(arch, rest, table)
            _set(table)
            for r in arch_rows:
                if r["gpu"] == kind:
                    out.append((r, P.predict(r) / r["published"] - 1))
                    print(f"  {kind} left out: {r['id']} {out[-1][1] * 100:+.1f}%")
    _set(fracs)
    return out


def unmeasured_error(held: list[tuple[dict, float]]) -> dict:
    """What to expect on a GPU kind no row has measured: the errors of the fit source's rows of each kind predicted
    with that kind left out of the fit (``leave_kind_out``), and the kinds some row has measured (published,
    fit or held out, or this project's calls)."""
    every = P.load_rows()
    signed = [e for _, e in held]
    errs = sorted(abs(e) for e in signed)
    return {"median": round(statistics.median(errs), 4), "p90": round(errs[round(0.9 * (len(errs) - 1))], 4),
            "worst": round(errs[-1], 4), "rows": len(errs), "signed_median": round(statistics.median(signed), 4),
            "measured_kinds": sorted({r["gpu"] for r in every} | set(MEASURED_HERE)),
            "source": "the fit source's 1-GPU rows, each GPU kind predicted with its rows left out of the fit "
                      "(benchmarks/calibration/cross_gpu/fit.py, leave_kind_out)"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loo", action="store_true", help="also: leave-one-out errors over the fit rows")
    ap.add_argument("--out", type=Path, default=gpu_perf.FITTED, help="the file written (default: the packaged one)")
    ap.add_argument("--harness-out", type=Path, default=None,
                    help="the harness file written (default: the packaged one, or harness.json beside --out)")
    ap.add_argument("--no-harness", action="store_true", help="fit no source harness (every row at 1.0)")
    args = ap.parse_args()
    if args.harness_out is None:
        args.harness_out = P.HARNESS if args.out == gpu_perf.FITTED else args.out.with_name("harness.json")
    rows = [r for r in P.load_rows() if r["split"] == "fit"]
    by_arch: dict[str, list[dict]] = {}
    for r in rows:
        by_arch.setdefault(get_gpu(r["gpu"]).arch, []).append(r)
    by_arch.pop(gpu_perf.REFERENCE_ARCH, None)
    P.HARNESS_FIT.clear()
    if not args.no_harness:
        P.HARNESS_FIT.update(fit_harness(rows))
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
    out["arches"][gpu_perf.REFERENCE_ARCH] = HOPPER.model_dump(exclude={"arch"})
    out["unmeasured"] = unmeasured_error(leave_kind_out(by_arch, fracs))
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    args.harness_out.write_text(json.dumps({"source": "benchmarks/calibration/cross_gpu/fit.py (fit_harness): median published / "
                                     "estimated samples/s of the fit rows of Hopper GPUs that name the harness, per "
                                     "precision class", "harnesses": P.HARNESS_FIT}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
