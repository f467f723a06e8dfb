"""The README's main command on a real GPU: `advise --model M --json` on the detected hardware, then
the `advise launch` command it prints, run as printed (recipe synthetic), beside its estimate.

Issue 27 found the one-shot's answer on one H200 was global batch 1 at lr 1.56e-7 while better plans
stood in its own list. This check is the practitioner's: take what the tool says, launch it, and
compare what runs (global batch, lr, samples/s, peak memory) with what it promised.

    OUT=/tmp/out python -m benchmarks.gpu_checks.recommendation_as_printed [--model llama3-8b] [--steps 2+3]

Writes $OUT/recommendation_as_printed.json (the recommendation, the command, the measured row, the
GPU, torch version and date) and prints one table line. Copy it into benchmarks/gpu_checks/results/
with the date in its name.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.gpu_checks.h200_compromises import measured_of

ROOT = Path(__file__).resolve().parents[2]


def _advise(args: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "cli.main", *args], capture_output=True, text=True, cwd=ROOT,
                          env=env, timeout=3600)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama3-8b", help="catalog model (default: the README's, llama3-8b)")
    ap.add_argument("--warmup", type=int, default=2, help="steps not timed (default 2)")
    ap.add_argument("--timed", type=int, default=3, help="steps timed (default 3)")
    a = ap.parse_args()
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp())
    row: dict = {"date": datetime.date.today().isoformat(), "model": a.model}
    try:
        import torch

        row["torch"] = torch.__version__
        row["gpu"] = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except ImportError:
        row["torch"] = row["gpu"] = None
    adv = _advise(["--model", a.model, "--json"])
    if adv.returncode != 0:
        print(adv.stderr, file=sys.stderr)
        return 1
    rec = json.loads(adv.stdout)
    r = rec["recommendation"]
    row["recommendation"] = {k: r.get(k) for k in ("strategy", "gpus", "micro_batch", "grad_accum", "global_batch",
                                                   "precision", "optimizer", "grad_ckpt", "compile", "lr", "task",
                                                   "compromise", "compromise_rule", "command")}
    row["estimate"] = {"samples_per_s": rec["estimate"]["throughput"]["samples_per_s"],
                       "peak_gib": rec["estimate"]["memory"]["peak_gib"],
                       "device_gib": rec["estimate"]["memory"]["device_gib"]}
    argv = shlex.split(r["command"])  # the printed command, split as a shell would; never run by a shell
    assert argv[:2] == ["advise", "launch"], argv
    home = Path(tempfile.mkdtemp(prefix="cardwise-as-printed-"))
    launch = argv[1:] + ["--recipe", "synthetic", "--max-steps", str(a.warmup + a.timed), "--max-oom-retries", "0",
                         "--home", str(home), "--json", "--no-final-weights", "--", "--pool", "1", "--log-every", "1"]
    row["launched"] = launch
    res = _advise(launch)
    row["exit"] = res.returncode
    row["stderr_tail"] = res.stderr[-3000:]
    try:
        run = json.loads(res.stdout)
        row["status"] = run.get("status")
        row["measured"] = measured_of(Path(run["run_dir"]), a.warmup)
    except (json.JSONDecodeError, KeyError, FileNotFoundError) as exc:
        row["status"] = f"no result: {exc}"
    (out / "recommendation_as_printed.json").write_text(json.dumps(row, indent=1))
    m = row.get("measured") or {}
    e = row["estimate"]
    print(f"{row['gpu']}: {r['command']}\n  estimate {e['samples_per_s']:.2f} samples/s, peak {e['peak_gib']:.1f} GiB; "
          f"measured {m.get('samples_per_s')} samples/s, peak {m.get('peak_gib')} GiB; status {row['status']}")
    return 0 if row["status"] == "succeeded" else 1


if __name__ == "__main__":
    sys.exit(main())
