"""What each test file costs: wall and CPU seconds (children included), one pytest process per file.

The suite's wall time on CI (a 2-core box) is bounded below by its CPU seconds over two cores, so the
CPU column is the one to cut; wall time on a shared machine also counts waiting for a core. Each file
runs alone (``-p no:xdist -p no:cacheprovider``), so a file's cost includes pytest's own start
(~2 s of imports) and any module-scoped setup it pays for.

    python -m benchmarks.speed.suite_cost                       # every tests/test_*.py -> results/suite-cost.{json,md}
    python -m benchmarks.speed.suite_cost tests/test_bench.py   # re-measure some files, keep the other rows
    python -m benchmarks.speed.suite_cost --label after --note "quiet box"
    python -m benchmarks.speed.suite_cost --whole --label xdist   # the README's command once, as CI runs it
    python -m benchmarks.speed.suite_cost --costs                # tests/file_costs.json from the newest rows (no runs)

The JSON keeps one row per (label, file); the markdown table shows every label side by side.

CPU counted: pytest and every process descended from it, orphans included (this process is their
subreaper and reaps them). Not counted: Slurm jobs (slurmd's children, tests/test_slurm.py).
"""

from __future__ import annotations

import argparse
import ctypes
import datetime as dt
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "speed" / "results"
RAW = RESULTS / "suite-cost.json"
REPORT = RESULTS / "suite-cost.md"
COSTS = ROOT / "tests" / "file_costs.json"  # tests/conftest.py starts the costliest files first on xdist workers
SUMMARY = re.compile(r"=+ (.*?) in [\d.]+s")
WHOLE = "(whole suite, README command)"
LOG_DIR: Path | None = None  # --log DIR: a failing run's output goes there
DURATION = re.compile(r"^([\d.]+)s (setup|call|teardown)\s+(\S+)", re.M)


PR_SET_CHILD_SUBREAPER = 36  # linux/prctl.h


def become_subreaper() -> bool:
    """Orphans of the tests (a SIGKILLed launch's ranks, a daemon's children) are re-parented to this
    process instead of init, so reaping them here counts their CPU; otherwise it would be lost."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap_orphans(settle_s: float = 2.0) -> int:
    """Reap every orphan that has exited (waiting up to ``settle_s`` for the last ones); count them."""
    reaped, deadline = 0, time.monotonic() + settle_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid:
            reaped += 1
        elif time.monotonic() > deadline:
            return reaped
        else:
            time.sleep(0.05)


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(path: str | None, python: str) -> dict:
    """One file's run (serial), or with ``path`` None the whole suite as the README runs it (its
    addopts: xdist workers): wall, CPU of pytest and everything it started, outcome, slowest phases."""
    argv = ["-p", "no:xdist", "--durations=3", path] if path else ["--durations=15"]
    cpu0, t0 = children_cpu(), time.perf_counter()
    proc = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *argv],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - t0
    orphans = reap_orphans()
    cpu = children_cpu() - cpu0
    found = SUMMARY.findall(proc.stdout)
    failed = [line[:300] for line in proc.stdout.splitlines() if line.startswith(("FAILED ", "ERROR "))]
    if failed and LOG_DIR is not None:  # the whole output, for the failures' tracebacks
        LOG_DIR.mkdir(parents=True, exist_ok=True)
        (LOG_DIR / f"{(path or 'whole').replace('/', '_')}.log").write_text(proc.stdout + proc.stderr)
    slowest = [f"{float(s):.0f}s {phase} {node.split('::', 1)[-1]}" for s, phase, node in DURATION.findall(proc.stdout)]
    return {"file": path or WHOLE, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1), "rc": proc.returncode,
            "outcome": found[-1] if found else proc.stdout.strip().splitlines()[-1:], "slowest": slowest,
            "orphans_reaped": orphans, "failed": failed}


def load1() -> float:
    return os.getloadavg()[0]


def write_report(rows: list[dict], notes: list[str]) -> None:
    whole = [r for r in rows if r["file"] == WHOLE]
    rows = [r for r in rows if r["file"] != WHOLE]
    labels = list(dict.fromkeys(r["label"] for r in rows))
    files = sorted({r["file"] for r in rows}, key=lambda f: -max(r["cpu_s"] for r in rows if r["file"] == f))
    by = {(r["label"], r["file"]): r for r in rows}
    head = "| file | " + " | ".join(f"{lab} CPU s | {lab} wall s" for lab in labels) + " | slowest phases (last label) |"
    lines = ["# What each test file costs (one pytest process per file, children included)", "",
             "Written by `python -m benchmarks.speed.suite_cost`. CPU s = user + sys of pytest and every process it",
             "started; wall s counts waiting for a core too (the machine is shared), so compare CPU.", "",
             head, "|" + "---|" * (2 + 2 * len(labels))]
    for f in files:
        cells, last = [], None
        for lab in labels:
            r = by.get((lab, f))
            cells += [f"{r['cpu_s']:.1f}", f"{r['wall_s']:.1f}"] if r else ["", ""]
            last = r or last
        lines.append(f"| {f} | " + " | ".join(cells) + " | " + "; ".join(last["slowest"]) + " |")
    totals = []
    for lab in labels:
        sel = [r for r in rows if r["label"] == lab]
        totals += [f"{sum(r['cpu_s'] for r in sel):.0f}", f"{sum(r['wall_s'] for r in sel):.0f}"]
    lines += ["| **total** | " + " | ".join(totals) + " | |", ""]
    if whole:
        lines += ["## The whole suite as the README runs it (`--whole`: pyproject's addopts, xdist workers)", "",
                  "| label | commit | at (UTC) | load before | CPU s | wall s | outcome | slowest |", "|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['label']} | {r['commit']} | {r['at']} | {r['load1_before']} | {r['cpu_s']:.0f} | {r['wall_s']:.0f} | "
                  f"{r['outcome']} | {'; '.join(r['slowest'][:5])} |" for r in whole]
        lines.append("")
    lines += ["## Notes", ""] + [f"- {n}" for n in notes]
    REPORT.write_text("\n".join(lines) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="test files (default: every tests/test_*.py)")
    parser.add_argument("--label", default="now", help="column label for these rows (e.g. before, after)")
    parser.add_argument("--note", help="a line for the report's notes (what else ran, which commit)")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--log", type=Path, metavar="DIR", help="write a failing run's whole output to DIR")
    parser.add_argument("--whole", action="store_true", help="run the whole suite once as the README does (xdist), not file by file")
    parser.add_argument("--costs", action="store_true",
                        help="write tests/file_costs.json (each file's wall s, its newest row) and exit")
    args = parser.parse_args(argv)
    if args.costs:
        newest: dict[str, dict] = {}
        for r in (json.loads(RAW.read_text())["rows"] if RAW.exists() else []):
            if r["file"] == WHOLE:
                continue
            if r["file"] not in newest or r["at"] >= newest[r["file"]]["at"]:
                newest[r["file"]] = r
        if not newest:
            parser.error(f"no rows in {RAW.relative_to(ROOT)}: measure first")
        costs = {f: round(r["wall_s"]) for f, r in sorted(newest.items(), key=lambda kv: -kv[1]["wall_s"])}
        COSTS.write_text(json.dumps(costs, indent=1) + "\n")
        print(f"{COSTS.relative_to(ROOT)}: {len(costs)} files")
        return 0
    global LOG_DIR
    LOG_DIR = args.log
    files = [None] if args.whole else args.files or sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_*.py"))
    if not become_subreaper():
        print("not a subreaper here: orphaned test processes' CPU is not counted", file=sys.stderr)
    data = json.loads(RAW.read_text()) if RAW.exists() else {"rows": [], "notes": []}
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                            text=True, check=False).stdout.strip()
    for path in files:
        before = load1()
        row = measure(path, args.python)
        row.update(label=args.label, commit=commit, load1_before=round(before, 2),
                   at=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"))
        data["rows"] = [r for r in data["rows"] if (r["label"], r["file"]) != (args.label, row["file"])] + [row]
        for line in row["failed"]:
            print("   ", line, flush=True)
        print(f"{row['cpu_s']:7.1f} CPU s {row['wall_s']:7.1f} wall s  load {before:4.1f}  {row['file']}  {row['outcome']}",
              flush=True)
        RESULTS.mkdir(parents=True, exist_ok=True)
        RAW.write_text(json.dumps(data, indent=1) + "\n")
    if args.note:
        data["notes"].append(f"{args.label} ({commit}): {args.note}")
        RAW.write_text(json.dumps(data, indent=1) + "\n")
    write_report(data["rows"], data["notes"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
