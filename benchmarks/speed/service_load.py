"""Load test of the queue service: N runs from S concurrent submitters, each run exactly once.

Starts `advise serve --cpu` on a fresh home, has S threads each submit N/S runs of a tiny script
(`advise submit --plan plan.json -- marker.py LOG`, one subprocess per submission, as users do),
waits until every run is terminal, and checks what issue 13 asks of the service:

- lost: submitted ids that never reached `succeeded`;
- duplicated: runs whose script ran more than once (the script appends its run directory to LOG);
- orphans: processes still carrying a run directory of this home after the service stopped;
- latency of `advise submit` and of `advise runs --json` (median and worst), wall seconds.

    python -m benchmarks.speed.service_load [--runs 200] [--submitters 5] [--slots 2] [--out benchmarks/speed/results/service-load.json]

Timings depend on the machine's load; they are reported, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
MARKER = "import os, sys\nwith open(sys.argv[1], 'a') as f:\n    f.write(os.environ['CARDWISE_RUN_DIR'] + '\\n')\n"


def advise(home: Path, *argv: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.monotonic()
    # --home before the arguments: after `--` everything belongs to the script
    command, *rest = argv
    res = subprocess.run([sys.executable, "-m", "cli.main", command, "--home", str(home), *rest], capture_output=True,
                         text=True, timeout=timeout, env=ENV, cwd=ROOT)
    return res, time.monotonic() - t0


def orphans(home: Path) -> list[int]:
    found = []
    for p in psutil.process_iter(["pid"]):
        try:
            if str(home) in (p.environ().get("CARDWISE_RUN_DIR") or ""):
                found.append(p.pid)
        except (psutil.Error, OSError):
            continue
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--submitters", type=int, default=5)
    ap.add_argument("--slots", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "speed" / "results" / "service-load.json")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="cardwise-load-"))
    home, log, script, plan = work / "home", work / "executions.log", work / "marker.py", work / "plan.json"
    home.mkdir(mode=0o700)
    script.write_text(MARKER)
    res, _ = advise(home, "launch", "--cpu", "--processes", "1", "--model", "mini-transformer", "--seq-len", "16",
                    "--micro-batch", "2", "--dry-run", "--save-plan", str(plan), "--", str(script), str(log))
    assert res.returncode == 0, res.stderr
    serve_log = open(work / "serve.log", "w")
    service = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--home", str(home), "--cpu", "--slots",
                                str(args.slots), "--poll", "0.2"], stdout=serve_log, stderr=subprocess.STDOUT, env=ENV, cwd=ROOT)
    ids: list[str] = []
    submit_s: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()

    def submitter(n: int) -> None:
        for _ in range(n):
            r, dt = advise(home, "submit", "--plan", str(plan), "--json", "--", str(script), str(log))
            with lock:
                submit_s.append(dt)
                if r.returncode == 0:
                    ids.append(json.loads(r.stdout)["id"])
                else:
                    errors.append(r.stderr.strip()[-300:])

    t0 = time.monotonic()
    per = [args.runs // args.submitters + (i < args.runs % args.submitters) for i in range(args.submitters)]
    threads = [threading.Thread(target=submitter, args=(n,)) for n in per]
    for t in threads:
        t.start()
    runs_s: list[float] = []
    final: dict[str, str] = {}
    while True:
        time.sleep(2)
        r, dt = advise(home, "runs", "--json")
        runs_s.append(dt)
        if r.returncode == 0:
            final = {rec["id"]: rec["status"] for rec in json.loads(r.stdout)}
        done = all(t.is_alive() is False for t in threads)
        terminal = [i for i in ids if final.get(i) in ("succeeded", "failed", "cancelled")]
        print(f"{len(ids)} submitted, {len(terminal)} terminal, {time.monotonic() - t0:.0f} s", file=sys.stderr)
        if done and len(terminal) == len(ids):
            break
        if service.poll() is not None:
            errors.append(f"the service exited with {service.returncode}")
            break
    wall = time.monotonic() - t0
    service.send_signal(signal.SIGTERM)
    service.wait(120)
    serve_log.close()
    time.sleep(1)
    executed = [line for line in log.read_text().splitlines() if line] if log.exists() else []
    result = {
        "runs": args.runs, "submitters": args.submitters, "slots": args.slots, "submitted": len(ids),
        "submit_errors": errors[:5],
        "lost": sum(1 for i in ids if final.get(i) != "succeeded"),
        "duplicated": len(executed) - len(set(executed)),
        "executed": len(executed), "orphans": len(orphans(home)),
        "submit_s": {"median": statistics.median(submit_s), "max": max(submit_s)} if submit_s else None,
        "runs_json_s": {"median": statistics.median(runs_s), "max": max(runs_s)} if runs_s else None,
        "wall_s": wall, "cpu_count": os.cpu_count(), "load_avg": os.getloadavg(),
        "date": time.strftime("%Y-%m-%d"),
    }
    print("", file=sys.stderr)
    print(json.dumps(result, indent=2))
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["lost"] == result["duplicated"] == result["orphans"] == 0 and not errors else 1


if __name__ == "__main__":
    sys.exit(main())
