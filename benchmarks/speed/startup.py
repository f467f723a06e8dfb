"""Startup time of the one-shot commands and the wizard (DESIGN.md quality bar "Speed of the tool").

Each case runs in N fresh subprocesses after one unmeasured warm-up run, and reports the median
wall time and the median CPU time (user + sys of the child, from ``getrusage``). The CPU time is
the steadier figure on a shared machine: wall time there includes waiting for a core.

``--baseline REV`` also measures that revision (``git archive`` into a temporary directory),
alternating its runs with the checkout's, so both see the same load: on a shared machine whose
load drifts by the minute, numbers taken minutes apart do not compare.

The children run with bytecode caching on (a private ``PYTHONPYCACHEPREFIX``, so the checkout gets
no ``__pycache__``), as an installed ``advise`` would: a session with ``PYTHONDONTWRITEBYTECODE``
would otherwise compile every module on every run and measure the compiler.

Timings are never asserted in tests (tests run on loaded machines); this script is where they live.

    python -m benchmarks.speed.startup --baseline f5e1b81 --note "shared machine, loaded"
    python -m benchmarks.speed.startup --only "llama3-8b --json" --runs 15     # print only
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "speed" / "results"
RAW = RESULTS / "startup.json"
REPORT = RESULTS / "startup.md"
NOTES = "## Notes"

# The wizard's first screen, as tests/test_tui_units.py FIRST_SCREEN drives it (headless, 80x24).
FIRST_SCREEN = """
import sys, tempfile
from pathlib import Path
from advisor.hardware import detect_machine
from launcher.store import RunStore
from tui.app import make_app
app = make_app(detect_machine(), RunStore.open(Path(tempfile.mkdtemp())))
async def auto(pilot):
    await pilot.pause()
    assert type(pilot.app.screen).__name__ == "HardwareScreen"
    pilot.app.exit(0)
app.run(headless=True, auto_pilot=auto, size=(80, 24))
"""

# name -> (argv after the interpreter, DESIGN.md's bar in seconds)
CASES: dict[str, tuple[list[str], float]] = {
    "advise --model llama3-8b --json": (["-m", "cli.main", "--model", "llama3-8b", "--json"], 0.3),
    "advise --model llama3-8b --gpu H100 --gpus 8 --json":
        (["-m", "cli.main", "--model", "llama3-8b", "--gpu", "H100", "--gpus", "8", "--json"], 1.0),
    "advise --model llama3-8b --gpu H100 --gpus 1024 --json":
        (["-m", "cli.main", "--model", "llama3-8b", "--gpu", "H100", "--gpus", "1024", "--json"], 1.0),
    "wizard first screen": (["-c", FIRST_SCREEN], 1.0),
}


def run_once(argv: list[str], env: dict[str, str], root: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one fresh interpreter running ``argv`` in the source tree ``root``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, *argv], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({out.returncode}):\n{out.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure(roots: dict[str, Path], runs: int, only: str | None = None) -> dict[str, dict[str, dict]]:
    """{label: {case: stats}}: every case, run alternately in each source tree."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = tempfile.mkdtemp(prefix="cardwise-startup-pyc-")
    out: dict[str, dict[str, dict]] = {label: {} for label in roots}
    for name, (argv, bar) in CASES.items():
        if only and only not in name:
            continue
        envs = {label: {**env, "PYTHONPATH": str(root)} for label, root in roots.items()}
        for label, root in roots.items():
            run_once(argv, envs[label], root)  # warm-up: writes the bytecode cache, warms the page cache
        samples: dict[str, list[tuple[float, float]]] = {label: [] for label in roots}
        for _ in range(runs):
            for label, root in roots.items():
                samples[label].append(run_once(argv, envs[label], root))
        for label in roots:
            walls = [w for w, _ in samples[label]]
            cpus = [c for _, c in samples[label]]
            out[label][name] = {"wall_median_s": statistics.median(walls), "wall_min_s": min(walls),
                                "cpu_median_s": statistics.median(cpus), "runs": runs, "bar_s": bar}
            print(f"{label:>24s}  {name:56s} wall {statistics.median(walls):.3f} s (min {min(walls):.3f})  "
                  f"cpu {statistics.median(cpus):.3f} s", flush=True)
    return out


def checkout(rev: str) -> Path:
    """``rev``'s files in a temporary directory (no git metadata: nothing there can be committed)."""
    dest = Path(tempfile.mkdtemp(prefix=f"cardwise-{rev}-"))
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, capture_output=True, check=True, timeout=60).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True, timeout=60)
    return dest


def machine() -> dict:
    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version(), "host": platform.node(),
            "load_avg_1m": os.getloadavg()[0]}


def git_rev(rev: str = "HEAD") -> str:
    try:
        short = subprocess.run(["git", "rev-parse", "--short", rev], cwd=ROOT, capture_output=True, text=True,
                               timeout=10).stdout.strip()
    except OSError:
        return "?"
    return short + (" + uncommitted changes" if rev == "HEAD" and _dirty() else "")


def _dirty() -> bool:
    out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                         text=True, timeout=10)
    return bool(out.stdout.strip())


def render(raw: dict) -> str:
    labels = list(raw)
    lines = ["# Startup time (benchmarks/speed/startup.py)", "",
             "Median of N fresh subprocesses per case, after one warm-up run, bytecode cached. `cpu` is the",
             "child's user + sys time: on a shared, loaded machine it is the steadier figure; `wall` includes",
             "waiting for a core. Bars from DESIGN.md (wall time, on an unloaded machine).", ""]
    for label in labels:
        r = raw[label]
        m = r["machine"]
        lines.append(f"- **{label}**: {r['date']}, commit {r['rev']}, {m['cores']} cores ({m['cpu']}), Python "
                     f"{m['python']}, load average {r['load_before']:.1f} before / {m['load_avg_1m']:.1f} after"
                     + (f"; {r['note']}" if r.get("note") else ""))
    pair = len(labels) == 2  # baseline and checkout: say the change in CPU time too
    lines += ["", "| case | bar | " + " | ".join(f"{l} wall | {l} cpu" for l in labels)
              + (" | cpu change |" if pair else " |"),
              "|---|---|" + "---|---|" * len(labels) + ("---|" if pair else "")]
    for name in CASES:
        cells = []
        for label in labels:
            c = raw[label]["cases"].get(name)
            cells += [f"{c['wall_median_s']:.2f} s" if c else "", f"{c['cpu_median_s']:.2f} s" if c else ""]
        if pair:
            a, b = (raw[l]["cases"].get(name) for l in labels)
            cells.append(f"{b['cpu_median_s'] / a['cpu_median_s'] - 1:+.0%}" if a and b else "")
        lines.append(f"| `{name}` | {CASES[name][1]:g} s | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=9, help="fresh subprocesses per case and tree (median)")
    ap.add_argument("--baseline", metavar="REV", help="also measure this git revision, alternating with the checkout")
    ap.add_argument("--label", default="current", help="name of the checkout's numbers in results/startup.json")
    ap.add_argument("--note", default="", help="one line about the conditions (e.g. 'machine shared, loaded')")
    ap.add_argument("--only", metavar="TEXT", help="run only the cases whose name contains TEXT (implies --no-save)")
    ap.add_argument("--no-save", action="store_true", help="print only")
    a = ap.parse_args()
    roots = {a.label: ROOT}
    revs = {a.label: git_rev()}
    if a.baseline:
        base = f"baseline {git_rev(a.baseline)}"
        roots = {base: checkout(a.baseline), **roots}
        revs[base] = git_rev(a.baseline)
    load_before = os.getloadavg()[0]
    results = measure(roots, a.runs, a.only)
    if a.no_save or a.only:
        return 0
    raw = {}  # one session's numbers: labels measured together compare, older ones do not
    when = dt.datetime.now().isoformat(timespec="minutes")
    for label, cases in results.items():
        raw[label] = {"date": when, "rev": revs[label], "machine": machine(), "load_before": load_before,
                      "note": a.note, "cases": cases}
    RESULTS.mkdir(parents=True, exist_ok=True)
    RAW.write_text(json.dumps(raw, indent=1) + "\n")
    # The analysis under NOTES is written by hand and survives a new measurement.
    old = REPORT.read_text() if REPORT.exists() else ""
    notes = old[old.index(NOTES):] if NOTES in old else ""
    REPORT.write_text(render(raw) + ("\n" + notes if notes else ""))
    print(f"wrote {REPORT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
