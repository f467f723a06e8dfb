"""llama3-8b on one H200 with each launchable compromise: measured peak and samples/s beside the
estimate (issue 12, point 6). Run on the H200 machine:

    PYTHONPATH=. python3 benchmarks/compromises_h200.py --out "$OUT" [--steps 6] [--only no-accumulation,lora]

What it does: `advise --model llama3-8b --gpu H200 --gpus 1 --seq-len 2048 --alternatives --json`
gives node H's recommendation and every other compromise that fits, each with its `advise launch`
command (every choice pinned) and its estimate. Each command is launched with `--recipe synthetic
--max-steps STEPS` (cardwise's own llama3-8b on synthetic tokens already on the GPU: the code
`advise` estimates), and the run's metrics.jsonl gives the measured peak
(torch.cuda.max_memory_allocated, GiB) and the median samples/s of the steps after the first two.
CPU offload steps take seconds each: it runs last, with at most 4 steps. A run that fails (OOM, a
compromise the runtime cannot run yet) is recorded with its exit status and the tail of its log.

Writes OUT/compromises-h200.jsonl (one row per compromise) and OUT/compromises-h200.md (a table).
Budget: about 45-70 s per compromise (model build + steps), 6 compromises: each run is killed after
--timeout seconds (default 70) and no run starts after --budget seconds (default 440): under 8
minutes in all.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ADVISE = [sys.executable, "-m", "cli.main"]


def _advise_json(argv: list[str]) -> dict:
    out = subprocess.run(ADVISE + argv + ["--json"], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def candidates() -> list[dict]:
    """The recommendation and every fitting compromise alternative: name, command, estimate."""
    d = _advise_json(["--model", "llama3-8b", "--gpu", "H200", "--gpus", "1", "--seq-len", "2048", "--alternatives"])
    r = d["recommendation"]
    rows = [{"name": r["compromise"] or "standard", "recommended": True, "command": r["command"],
             "est_peak_gib": d["estimate"]["memory"]["peak_gib"], "est_device_gib": d["estimate"]["memory"]["device_gib"],
             "est_samples_per_s": d["estimate"]["throughput"]["samples_per_s"]}]
    for a in d["alternatives"]:
        if a["kind"] in ("compromise", "offload") and a["fits"] and a["command"]:
            rows.append({"name": a["name"].split(" ")[0], "recommended": False, "command": a["command"],
                         "est_peak_gib": a["peak_gib"], "est_device_gib": a["device_gib"],
                         "est_samples_per_s": a["samples_per_s"]})
    rows.sort(key=lambda x: x["name"] == "cpu-offload")  # the slow one last
    return rows


def measure(row: dict, home: Path, steps: int, timeout: float) -> dict:
    argv = shlex.split(row["command"])[1:]  # drop "advise"
    n = min(steps, 4) if row["name"] == "cpu-offload" else steps
    argv += ["--recipe", "synthetic", "--max-steps", str(n), "--home", str(home), "--max-oom-retries", "0", "--json"]
    t = time.time()
    try:
        p = subprocess.run(ADVISE + argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        rc, out, err = p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as exc:
        rc, out, err = 124, exc.stdout or "", exc.stderr or ""
        out = out.decode() if isinstance(out, bytes) else out
        err = err.decode() if isinstance(err, bytes) else err
    runs = sorted((home / "runs").glob("*"), key=lambda p: p.stat().st_mtime) if (home / "runs").exists() else []
    metrics = []
    if runs:
        f = runs[-1] / "metrics.jsonl"
        if f.exists():
            metrics = [json.loads(x) for x in f.read_text().splitlines() if x.strip()]
    timed = [m for m in metrics if m.get("step", 0) > 2] or metrics
    res = dict(row, steps=n, rc=rc, wall_s=round(time.time() - t, 1), run_dir=str(runs[-1]) if runs else None,
               peak_gib=max((m["peak_gib"] for m in metrics if m.get("peak_gib") is not None), default=None),
               samples_per_s=statistics.median(m["samples_per_s"] for m in timed) if timed else None)
    if rc != 0:
        res["log_tail"] = (err or out)[-1500:]
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "out")))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--timeout", type=float, default=70.0)
    ap.add_argument("--budget", type=float, default=440.0, help="start no new run after this many seconds")
    ap.add_argument("--only", default="", help="comma-separated compromise names")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    home = args.out / "home"
    rows = candidates()
    if args.only:
        keep = set(args.only.split(","))
        rows = [r for r in rows if r["name"] in keep]
    results = []
    t0 = time.time()
    with open(args.out / "compromises-h200.jsonl", "w") as f:
        for row in rows:
            left = args.budget - (time.time() - t0)
            if left < 20:
                print(f"{row['name']}: skipped, the time budget is spent", flush=True)
                continue
            res = measure(row, home, args.steps, min(args.timeout, left))
            results.append(res)
            f.write(json.dumps(res) + "\n")
            f.flush()
            print(f"{res['name']:24s} rc {res['rc']:3d}  peak {res['peak_gib']} GiB (est {res['est_peak_gib']:.1f})  "
                  f"{res['samples_per_s']} samples/s (est {res['est_samples_per_s']:.2f})  {res['wall_s']} s", flush=True)
    lines = ["| compromise | recommended | peak GiB measured | estimated | samples/s measured | estimated | exit |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        pk = f"{r['peak_gib']:.1f}" if r["peak_gib"] is not None else "-"
        sp = f"{r['samples_per_s']:.2f}" if r["samples_per_s"] is not None else "-"
        lines.append(f"| {r['name']} | {'yes' if r['recommended'] else ''} | {pk} | {r['est_peak_gib']:.1f} | {sp} | "
                     f"{r['est_samples_per_s']:.2f} | {r['rc']} |")
    (args.out / "compromises-h200.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
