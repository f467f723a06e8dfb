"""kill -9 of a foreground ``advise launch`` at every stage of its start-up: does anything survive?

    python -m benchmarks.faults.kill9 [--trials 20] [--parallel 4]

Each trial launches two CPU ranks of ``tests/scripts/sleeper.py`` (each rank starts a grandchild and
sleeps) in a home of its own, SIGKILLs the ``advise launch`` process at a stage set by the trial's number
(even trials 0.5 s + 0.25 s x trial into the start-up: Python starting, the CLI planning, torch
importing in the launcher; odd trials once both ranks are up), then waits for the launch shim's grace
(launcher.pdeathsig, 10 s) and sweep to leave no process of its tree (found by an environment tag that
the whole tree inherits, ``launcher.procs.tagged_processes``), and checks that the run's record is not
left ``running``. Prints one line per trial and the survivors; exit 1 if any trial left a process.

The campaign of 20 trials was the suite's test; tests/test_faults.py runs four of them (one per stage)
on every change, through ``kill_9_trial`` below.
"""

from __future__ import annotations

import argparse
import glob
import os
import secrets
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SLEEPER = ROOT / "tests" / "scripts" / "sleeper.py"
TINY = ["--model", "mini-transformer", "--seq-len", "16", "--micro-batch", "2"]
TAG = "CARDWISE_TEST_TRIAL"  # every process of a trial's tree inherits it


def start_launch(home: Path, token: str, *argv: str, json_out: bool = True) -> subprocess.Popen:
    """``advise launch --cpu`` of the tiny model in ``home``, its tree tagged with ``token``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), TAG: token}
    return subprocess.Popen([sys.executable, "-m", "cli.main", "launch", "--cpu", *TINY, "--home", str(home),
                             *(["--json"] if json_out else []), *argv],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def ranks_up(home: Path, n: int) -> bool:
    """The sleeper's ranks have written their pids (``pids-RANK`` in the run directory)."""
    return len(glob.glob(str(home / "runs" / "*" / "pids-*"))) >= n


def _wait_for(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def stage(trial: int) -> str:
    return "ranks up" if trial % 2 else f"{0.5 + 0.25 * trial:.2f} s into the start-up"


def kill_9_trial(home: Path, trial: int) -> list | None:
    """One launch, SIGKILLed at ``stage(trial)``; the processes its tree left behind, if any (None: none).
    Raises AssertionError if the run's record stays ``running``."""
    from launcher import procs
    from launcher.settle import settle
    from launcher.store import RunStore

    token = secrets.token_hex(6)
    p = start_launch(home, token, "--processes", "2", "--", str(SLEEPER))
    try:
        if trial % 2:  # odd trials: ranks up and sleeping
            _wait_for(lambda: ranks_up(home, 2) or p.poll() is not None, 300, "the ranks")
        else:  # even trials: somewhere in the start-up (0.5 s to 5 s in)
            time.sleep(0.5 + 0.25 * trial)
        os.kill(p.pid, signal.SIGKILL)
    finally:
        p.kill()
        p.communicate()
    survivors = None
    try:  # the shim's grace (10 s) and sweep; the guard is generous for a loaded machine
        _wait_for(lambda: not procs.tagged_processes(**{TAG: token}), 300, f"trial {trial}'s processes to go")
    except AssertionError:
        left = procs.tagged_processes(**{TAG: token})
        survivors = [(q.pid, " ".join(q.cmdline()[:4])) for q in left if procs.alive(q)]
        procs.stop_processes(left, 1)
    if (home / "runs.sqlite").exists():  # and the record does not stay `running` forever
        recs = RunStore.open(home).list()
        assert all(r.status != "running" for r in settle(RunStore.open(home), recs)), recs
    return survivors


def campaign(base: Path, trials: list[int], parallel: int) -> dict[int, list]:
    """The trials, ``parallel`` at a time (each has its own home, tag and port); survivors by trial."""
    with ThreadPoolExecutor(max_workers=parallel) as pool:
        results = list(pool.map(lambda t: kill_9_trial(base / f"t{t}", t), trials))
    return {t: left for t, left in zip(trials, results) if left}


def main() -> int:
    import tempfile

    ap = argparse.ArgumentParser(prog="python -m benchmarks.faults.kill9", description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=20, help="trials 0..N-1 (default: %(default)s)")
    ap.add_argument("--parallel", type=int, default=4, help="trials at a time (default: %(default)s)")
    args = ap.parse_args()
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cardwise-kill9-") as base:
        survivors = campaign(Path(base), list(range(args.trials)), args.parallel)
    for t in range(args.trials):
        print(f"trial {t:2d} ({stage(t)}): {'SURVIVORS ' + repr(survivors[t]) if t in survivors else 'nothing left'}")
    print(f"{args.trials} trials, {len(survivors)} with survivors, {time.monotonic() - start:.0f} s wall")
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
