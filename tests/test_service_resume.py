"""A requeued service run goes on from its last checkpoint, and a stop never turns a requeue into a cancel.

Real processes on CPU: ``advise serve --cpu``, ``advise submit``, SIGKILL and SIGTERM of the service, the
real run store. The training script (tests/scripts/slow_steps.py) records where each execution started
(``starts.txt``) and every step it trained (``steps.txt``), so "resumed" and "lost nothing" are read off
files the ranks wrote, not off the service's own account.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.checkpoints import latest, read_meta
from launcher.service import service_pid
from launcher.store import RunStore
from waiting import reaped, stop_and_collect, wait_for

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).with_name("scripts")
TINY = ["--cpu", "--processes", "1", "--model", "mini-transformer", "--seq-len", "16", "--micro-batch", "2"]


def advise(home: Path, command: str, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", command, "--home", str(home), *argv],
                          capture_output=True, text=True, timeout=timeout)


def start_service(home: Path, slots: int = 1, grace: int = 5) -> subprocess.Popen:
    log = open(home.parent / f"serve-{time.monotonic_ns()}.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--home", str(home), "--poll", "0.2",
                             "--grace", str(grace), "--cpu", "--slots", str(slots)], stdout=log, stderr=subprocess.STDOUT)
    proc.log_path = Path(log.name)
    wait_for(lambda: service_pid(home) == proc.pid or proc.poll() is not None, 120, "the service to start")
    assert proc.poll() is None, proc.log_path.read_text()
    return proc


def starts(run_dir: Path, rank: int = 0) -> list[int]:
    path = run_dir / f"starts{f'-rank{rank}' if rank else ''}.txt"
    return [int(line.split()[1]) for line in path.read_text().splitlines()] if path.exists() else []


def steps(run_dir: Path, rank: int = 0) -> list[int]:
    path = run_dir / f"steps{f'-rank{rank}' if rank else ''}.txt"
    return [int(s) for s in path.read_text().split()] if path.exists() else []


def checkpointed(run_dir: Path, at_least: int) -> int | None:
    ckpt = latest(run_dir)
    step = read_meta(ckpt)["step"] if ckpt is not None else 0
    return step if step >= at_least else None


def test_a_requeued_run_goes_on_from_its_last_checkpoint(tmp_path):
    """SIGKILL of the service: the run goes on from its last periodic checkpoint (steps since it run again)."""
    home = tmp_path / "home"
    svc = start_service(home)
    try:
        res = advise(home, "submit", *TINY, "--max-steps", "24", "--checkpoint-every", "4", "--no-final-weights",
                     "--json", "--", str(SCRIPTS / "slow_steps.py"), "--step-s", "0.25")
        assert res.returncode == 0, res.stderr
        rid = json.loads(res.stdout)["id"]
        store = RunStore.open(home)
        run_dir = Path(store.get(rid).run_dir)
        saved = wait_for(lambda: checkpointed(run_dir, 8), 300, "a checkpoint at step 8 or later")
        svc.send_signal(signal.SIGKILL)
        assert svc.wait(60) == -signal.SIGKILL
        kept = checkpointed(run_dir, saved)
        assert kept is not None  # the stop took nothing away
        svc = start_service(home)
        rec = wait_for(lambda: (r := store.get(rid)).terminal and r, 300, "the requeued run to end")
        assert rec.status == "succeeded", (rec.error, svc.log_path.read_text())
        first, second = starts(run_dir)
        assert first == 0 and second >= kept, (first, second, kept)  # from its checkpoint, not step 0
        ran = steps(run_dir)
        assert ran[-1] == 24 and sorted(set(ran)) == list(range(1, 25))  # every step trained
        assert ran.count(1) == 1  # and the first ones only once
        assert latest(run_dir) is not None and read_meta(latest(run_dir))["step"] == 24
        assert "resumes from" in svc.log_path.read_text()
        # issue 40: the record, `runs` and `show` describe both starts, each attempt's steps and time
        starts_of = {(a.start, a.n): a for a in rec.attempts}
        assert set(starts_of) == {(1, 1), (2, 1)}, rec.attempts
        before, after = starts_of[1, 1], starts_of[2, 1]
        assert before.status == "failed" and before.last_step and before.last_step >= 2 and before.ended
        assert Path(before.log_dir).parent.name.startswith("interrupted-") and Path(before.log_dir).is_dir()
        # (a loaded machine may have trained every step before the kill: the second start then logs none)
        assert after.status == "succeeded" and (after.last_step == 24 or second == 24), (after, second)
        shown = advise(home, "show", rid)
        assert "start 1, attempt 1" in shown.stdout and "start 2, attempt 1" in shown.stdout, shown.stdout
        assert f"to step {before.last_step}" in shown.stdout
        assert "to step 24" in shown.stdout or second == 24
    finally:
        if svc.poll() is None:
            svc.terminate()
            svc.wait(120)


def test_sigterm_of_the_service_hands_a_run_back_without_losing_a_step(tmp_path):
    """SIGTERM of the service (a graceful stop, launcher.graceful_stop): both ranks of a 2-process gloo run
    stop after the same step, save it although the run saves no periodic checkpoint, and the requeued
    run goes on from exactly that step: no step runs twice, none is skipped, on either rank."""
    home = tmp_path / "home"
    two = [*TINY[:2], "2", *TINY[3:]]  # --processes 2
    svc = start_service(home, slots=2, grace=60)  # a bound on a loaded machine; the stop takes a few seconds
    try:
        res = advise(home, "submit", *two, "--max-steps", "24", "--no-final-weights",
                     "--json", "--", str(SCRIPTS / "slow_steps.py"), "--step-s", "0.25")
        assert res.returncode == 0, res.stderr
        rid = json.loads(res.stdout)["id"]
        store = RunStore.open(home)
        run_dir = Path(store.get(rid).run_dir)
        wait_for(lambda: len(steps(run_dir)) >= 8, 300, "step 8")
        svc.send_signal(signal.SIGTERM)
        assert svc.wait(120) == 0
        log = svc.log_path.read_text()
        assert store.get(rid).status == "queued" and "requeued, stopped after step" in log, log
        stop = read_meta(latest(run_dir))["step"]
        assert read_meta(latest(run_dir))["stop"] is True
        assert steps(run_dir) == steps(run_dir, rank=1) == list(range(1, stop + 1))  # both ranks, that step

        svc = start_service(home, slots=2)
        rec = wait_for(lambda: (r := store.get(rid)).terminal and r, 300, "the requeued run to end")
        assert rec.status == "succeeded", (rec.error, svc.log_path.read_text())
        for rank in (0, 1):
            assert starts(run_dir, rank=rank) == [0, stop]
            assert steps(run_dir, rank=rank) == list(range(1, 25))  # every step once: nothing lost, nothing twice
        assert latest(run_dir) is None  # the stop's checkpoint was for the stop only (no --checkpoint-every)
    finally:
        if svc.poll() is None:
            svc.terminate()
            svc.wait(120)


def test_ctrl_c_of_advise_launch_stops_at_a_step_with_its_checkpoint(tmp_path):
    """The foreground launch shares the graceful stop: Ctrl-C saves the step the rank stopped after, and says
    how to go on."""
    home = tmp_path / "home"
    p = subprocess.Popen([sys.executable, "-m", "cli.main", "launch", "--home", str(home), *TINY, "--max-steps", "40",
                          "--no-final-weights", "--json", "--", str(SCRIPTS / "slow_steps.py"), "--step-s", "0.25"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with reaped(p):
        wait_for(lambda: list(home.glob("runs/*/steps.txt")) or p.poll() is not None, 300, "the first step")
        run_dir = next(home.glob("runs/*/steps.txt")).parent
        wait_for(lambda: len(steps(run_dir)) >= 2, 300, "step 2")
        out, err = stop_and_collect(p, signal.SIGINT)
    rec = json.loads(out)
    assert p.returncode == 130 and rec["status"] == "cancelled", err
    stop = steps(run_dir)[-1]
    assert read_meta(latest(run_dir))["step"] == stop and stop < 40
    assert f"stopped after step {stop} with a checkpoint" in err and f"advise launch --resume {rec['id']}" in err


def test_a_stop_right_after_a_run_was_claimed_requeues_it_for_good(tmp_path, capsys):
    """SIGTERM of the service in the first moments of a run (claimed ``running``, the launcher not started
    yet) must leave it ``queued``, as the log says, never ``cancelled``: several stops at 0-1.5 s.
    Submit and cancel run in this process (cli.main.main): six rounds of two Python starts cost more
    CPU than the service's own work here."""
    from cli.main import main

    home = tmp_path / "home"
    outcomes = []
    for delay in (0.0, 0.05, 0.2, 0.5, 1.0, 1.5):
        svc = start_service(home)
        assert main(["submit", "--home", str(home), *TINY, "--max-steps", "2", "--no-final-weights", "--json",
                     "--", str(SCRIPTS / "slow_steps.py"), "--step-s", "5"]) == 0
        rid = json.loads(capsys.readouterr().out)["id"]
        store = RunStore.open(home)
        wait_for(lambda: store.get(rid).status != "queued", 300, "the service to claim the run")
        time.sleep(delay)
        svc.send_signal(signal.SIGTERM)
        assert svc.wait(120) == 0
        rec = store.get(rid)
        outcomes.append((delay, rec.status, rec.error))
        assert "requeued" in svc.log_path.read_text()
        main(["cancel", rid, "--home", str(home)])  # not the next round's business
        capsys.readouterr()
    assert all(status == "queued" for _, status, _ in outcomes), outcomes


def test_resume_passes_over_a_damaged_newest_checkpoint(tmp_path):
    """``advise launch --resume`` checks the checkpoint before anything starts: a damaged newest one (cut
    short, or changed at the same size) is passed over, with a note, for the one kept before it."""
    home = tmp_path / "home"
    res = advise(home, "launch", *TINY, "--max-steps", "8", "--checkpoint-every", "2", "--no-final-weights", "--json",
                 "--", str(SCRIPTS / "slow_steps.py"), "--step-s", "0", "--die-after", "4")
    old = json.loads(res.stdout)
    assert old["status"] == "failed", res.stderr
    run_dir = Path(old["run_dir"])
    newest = latest(run_dir)
    assert read_meta(newest)["step"] == 4
    weights = next(p for p in newest.iterdir() if p.name.startswith("model"))
    data = weights.read_bytes()
    weights.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))  # same size, one byte changed

    res = advise(home, "launch", "--resume", old["id"], "--json")
    assert res.returncode == 0, res.stderr
    new = json.loads(res.stdout)
    assert new["status"] == "succeeded", new
    assert "step-00000004 is damaged" in res.stderr and "resuming from step-00000002" in res.stderr
    assert starts(Path(new["run_dir"])) == [2]
    assert steps(Path(new["run_dir"])) == list(range(3, 9))

    # both damaged: refused before anything runs, one line, exit 2
    for ckpt in (run_dir / "checkpoints").glob("step-*"):
        for f in ckpt.iterdir():
            if f.name.startswith("model"):
                f.write_bytes(f.read_bytes()[: f.stat().st_size // 2])
    n_runs = len(RunStore.open(home).list())
    res = advise(home, "launch", "--resume", old["id"])
    assert res.returncode == 2 and "checkpoints are all damaged" in res.stderr and "Traceback" not in res.stderr
    assert len(RunStore.open(home).list()) == n_runs
