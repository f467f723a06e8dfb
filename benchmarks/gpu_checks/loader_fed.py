"""Loader-bound plans on a probed host against loader-fed runs there (issue 39, point 5).

On the GPU machine, in one command:

    python -m benchmarks.gpu_checks.loader_fed OUT [--files 1024] [--cores 3,5] [--steps 40]

1. this host's row of the packaged loader rates (``benchmarks.calibration.loader_rate``, printed to
   OUT/loader-fed-host-row.json: append it to results/loader-rate-hosts.jsonl with a note, then ``--fit``);
2. a folder of ImageNet-like JPEGs (``loader_rate.make_jpegs``: 500x375, quality 90, ~110 KB), 2 classes;
3. ``advise probe --data DIR``: one core's rate on those files, stored in a fresh home;
4. per cores-per-GPU C: the plan ``advise`` makes for ResNet-50 on the detected GPU with ``--cpus-per-gpu C``
   (C - 1 DataLoader workers), with the probe's home and without (the packaged default), then the same plan
   launched by ``advise launch --recipe image-classification --data DIR`` (the recipe's DataLoader: the plan's
   workers, decode + RandomResizedCrop + flip + normalise), its steady samples/s from the run's metrics.
Figures to OUT/loader-fed.json and the table to OUT/loader-fed.md (copy both to benchmarks/gpu_checks/results/).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

from benchmarks.calibration.loader_rate import make_jpegs  # noqa: E402

# A ResNet-50 plan pinned so that the plan and the run are the same configuration, and the GPU is faster than
# the loaders measured (bf16, channels_last, micro-batch 128: ~2,500+ images/s on an H100, more than 4 workers).
PLAN = ["--model", "resnet50", "--gpus", "1", "--micro-batch", "128", "--batch-size", "128", "--precision", "bf16",
        "--channels-last", "--no-compile", "--image-size", "224"]


def run(cmd: list[str], log) -> subprocess.CompletedProcess:
    log.write("$ " + " ".join(cmd) + "\n")
    log.flush()
    p = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log.write(p.stderr[-4000:] + "\n")
    return p


def advise(args: list[str], log) -> dict:
    p = run([sys.executable, "-m", "cli.main", *args, "--json"], log)
    try:
        return json.loads(p.stdout)
    except ValueError:
        log.write(p.stdout[-2000:] + "\n")
        return {"error": p.stderr.strip().splitlines()[-2:] if p.stderr.strip() else p.stdout[-300:]}


def write_folder(root: Path, files: int) -> Path:
    distinct = make_jpegs(64)
    for i in range(files):
        d = root / f"class_{i % 2}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{i:05d}.jpg").write_bytes(distinct[i % len(distinct)])
    return root


def planned(rec: dict) -> dict:
    e = rec.get("estimate") or {}
    t = e.get("throughput") or {}
    ld = t.get("loader") or {}
    return {"samples_per_s": t.get("samples_per_s"), "gpu_samples_per_s": t.get("gpu_samples_per_s"),
            "loader_per_gpu": ld.get("samples_per_s_per_gpu"), "per_core": ld.get("per_core_samples_per_s"),
            "rate_basis": ld.get("rate_basis"), "workers": (rec.get("recommendation") or {}).get("num_workers"),
            "loader_bound": t.get("loader_bound")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out", type=Path)
    ap.add_argument("--files", type=int, default=1024)
    ap.add_argument("--cores", default="3,5")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--row-seconds", type=float, default=1.0, help="seconds per figure of the host's row")
    a = ap.parse_args()
    out = a.out
    out.mkdir(parents=True, exist_ok=True)
    work = Path("/tmp") / f"loader-fed-{int(time.time())}"
    log = (out / "loader-fed.log").open("w")
    t0 = time.time()
    row = run([sys.executable, "-m", "benchmarks.calibration.loader_rate", "--seconds", str(a.row_seconds)], log)
    (out / "loader-fed-host-row.json").write_text(row.stdout)
    data = write_folder(work / "train", a.files)
    home, empty = work / "home", work / "empty-home"
    probe = advise(["probe", "--data", str(data), "--home", str(home)], log)
    rows = []
    for cores in [int(c) for c in a.cores.split(",")]:
        where = [*PLAN, "--cpus-per-gpu", str(cores)]
        probed = planned(advise([*where, "--home", str(home)], log))
        default = planned(advise([*where, "--home", str(empty)], log))
        rec = advise(["launch", *where, "--recipe", "image-classification", "--data", str(data), "--max-steps",
                      str(a.steps), "--no-final-weights", "--home", str(home)], log)
        m = rec.get("metrics") or {}
        measured = m.get("samples_per_s")
        bound = m.get("data_bound") or {}
        row_ = {"cores_per_gpu": cores, "workers": (rec.get("plan") or {}).get("num_workers"), "probed": probed,
                "default": default, "measured_samples_per_s": measured, "status": rec.get("status"),
                "steps": m.get("steps"), "data_wait_share": bound.get("data_wait_share"),
                "gpu_util_pct": bound.get("gpu_util_pct"), "error": rec.get("error")}
        for key in ("probed", "default"):
            est = row_[key]["samples_per_s"]
            row_[f"{key}_error"] = (est / measured - 1) if est and measured else None
        rows.append(row_)
        log.write(json.dumps(row_) + "\n")
        (out / "loader-fed.json").write_text(json.dumps({"probe": probe, "rows": rows}, indent=1) + "\n")  # so far
    log.write(f"done in {time.time() - t0:.1f} s\n")
    result = {"probe": probe, "rows": rows, "host": json.loads(row.stdout) if row.stdout.strip().startswith("{") else None,
              "files": a.files, "steps": a.steps, "seconds": round(time.time() - t0, 1)}
    (out / "loader-fed.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "loader-fed.md").write_text(table(result))
    print((out / "loader-fed.md").read_text())
    return 0


def table(result: dict) -> str:
    def f(v, fmt):
        return "-" if v is None else format(v, fmt)

    p = result.get("probe") or {}
    lines = [f"probe: {f(p.get('per_core'), ',.0f')} images/s per core on {p.get('cpu')} ({p.get('files')} files)", "",
             "| cores/GPU | workers | planned (probed) | planned (default) | measured | probed vs measured | "
             "default vs measured | data wait | GPU util |", "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in result["rows"]:
        lines.append(f"| {r['cores_per_gpu']} | {f(r['workers'], 'd')} | {f(r['probed']['samples_per_s'], ',.0f')} | "
                     f"{f(r['default']['samples_per_s'], ',.0f')} | {f(r['measured_samples_per_s'], ',.0f')} | "
                     f"{f(r['probed_error'], '+.1%')} | {f(r['default_error'], '+.1%')} | "
                     f"{f(r['data_wait_share'], '.0%')} | {f(r['gpu_util_pct'], '.0f')} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
