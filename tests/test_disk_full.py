"""A full disk, for real: the home on a small tmpfs (``mount -t tmpfs -o size=...``, so root only; the
tests skip elsewhere), filled with a file until ENOSPC. A full disk is transient: every command says so
and exits 75 (EX_TEMPFAIL), never 2, which the shipped systemd unit treats as "do not restart"
(docs/cardwise.service); and a disk that fills under a running service leaves no ``running`` ghost."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from launcher.service import service_pid
from launcher.store import RunStore
from waiting import wait_for

pytestmark = pytest.mark.slow

SCRIPTS = Path(__file__).with_name("scripts")
TINY = ["--cpu", "--processes", "1", "--model", "mini-transformer", "--seq-len", "16", "--micro-batch", "2"]


@pytest.fixture
def small_disk(tmp_path):
    mnt = tmp_path / "disk"
    mnt.mkdir()
    res = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs", str(mnt)],
                         capture_output=True, text=True)
    if res.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (root only): {res.stderr.strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def fill(disk: Path) -> Path:
    """Write to a filler file until the disk is full; the file, to delete to free the space."""
    filler = disk / "filler"
    with open(filler, "ab", buffering=0) as f:
        block = b"\0" * 65536
        with contextlib.suppress(OSError):
            while True:
                f.write(block)
        with contextlib.suppress(OSError):
            while True:  # the last few bytes
                f.write(b"\0")
    with pytest.raises(OSError) as exc:
        (disk / "probe").write_bytes(b"x" * 4096)
    assert exc.value.errno == errno.ENOSPC
    return filler


def advise(home: Path, command: str, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", command, "--home", str(home), *argv],
                          capture_output=True, text=True, timeout=timeout)


def test_a_full_disk_is_transient_for_submit_launch_and_serve(small_disk):
    home = small_disk / "home"
    RunStore.open(home)  # the store exists; then the disk fills
    filler = fill(small_disk)
    for command, argv in (("submit", [*TINY, "--recipe", "synthetic", "--max-steps", "2"]),
                          ("launch", [*TINY, "--recipe", "synthetic", "--max-steps", "2"]),
                          ("serve", ["--cpu"])):
        res = advise(home, command, *argv, timeout=120)
        assert res.returncode == 75, (command, res.returncode, res.stderr)
        assert "transient" in res.stderr and "free space" in res.stderr, (command, res.stderr)
        assert "is yours" not in res.stderr and "Traceback" not in res.stderr, (command, res.stderr)
    filler.unlink()  # space again: the same commands work
    res = advise(home, "submit", *TINY, "--recipe", "synthetic", "--max-steps", "2", "--json")
    assert res.returncode == 0, res.stderr


def test_a_disk_that_fills_under_the_service_leaves_no_running_ghost(small_disk):
    """The disk fills while a run trains: its end cannot be written (store and run directory alike).
    Once space is freed the run is recorded as it ended, never left ``running``, and the queue goes on."""
    home = small_disk / "home"
    log = open(small_disk.parent / "serve.log", "w")
    svc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--home", str(home), "--poll", "0.2",
                            "--grace", "3", "--cpu"], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: service_pid(home) == svc.pid or svc.poll() is not None, 120, "the service to start")
        res = advise(home, "submit", *TINY, "--max-steps", "12", "--no-final-weights", "--json",
                     "--", str(SCRIPTS / "slow_steps.py"), "--step-s", "0.3")
        rid = json.loads(res.stdout)["id"]
        store = RunStore.open(home)
        run_dir = Path(store.get(rid).run_dir)
        wait_for(lambda: (run_dir / "steps.txt").exists(), 300, "the run to train")
        filler = fill(small_disk)
        # the run ends (its script cannot write either); the store cannot take the end
        wait_for(lambda: not [p for p in os.listdir("/proc") if p.isdigit() and _tagged(int(p), str(run_dir))],
                 300, "the run's processes to end")
        time.sleep(2)  # a few service passes on a full disk
        assert svc.poll() is None, Path(log.name).read_text()  # a full disk does not end the service
        filler.unlink()
        rec = wait_for(lambda: (r := store.get(rid)).terminal and r, 60, "the run to be recorded once space is back")
        assert rec.status in ("failed", "succeeded") and rec.pid is None
        res = advise(home, "submit", *TINY, "--max-steps", "2", "--no-final-weights", "--json",
                     "--", str(SCRIPTS / "slow_steps.py"), "--step-s", "0")
        nxt = json.loads(res.stdout)["id"]
        rec = wait_for(lambda: (r := store.get(nxt)).terminal and r, 300, "the next run to end")
        assert rec.status == "succeeded", (rec.error, Path(log.name).read_text())
    finally:
        if svc.poll() is None:
            svc.send_signal(signal.SIGTERM)
            svc.wait(120)
        log.close()


def _tagged(pid: int, run_dir: str) -> bool:
    try:
        return f"CARDWISE_RUN_DIR={run_dir}".encode() in open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    except OSError:
        return False


def test_a_run_whose_start_meets_a_full_disk_goes_back_to_the_queue_and_runs_later(tmp_path, monkeypatch):
    """The disk fills between recording a service run's attempt and launching it (the store write of its
    command fails, SQLite's "database or disk is full"): nothing of the run ran, so it is not failed for
    good with its attempt left ``running``; it goes back to the queue, its attempt failed, the start not
    counted, and runs once space is back. The fault is injected at that write (a real disk that fills at
    exactly that moment is a race); the real full disk is the tests above."""
    import sqlite3

    from launcher import placement
    from launcher.service import Service, submit
    from launcher.store import RunStore as Store
    from cli.launch_plan import options_from_flags, plan_from_flags, target_from_flags
    from cli.main import build_parser

    home = tmp_path / "home"
    args = build_parser("submit").parse_args([*TINY, "--max-steps", "2", "--no-final-weights",
                                               "--", str(SCRIPTS / "slow_steps.py"), "--step-s", "0"])
    plan, _ = plan_from_flags(args)
    rec, _ = submit(home, plan, target_from_flags(args, plan), options_from_flags(args, plan))
    real_update = Store.update
    full = {"on": True}

    def update(self, run_id, **fields):
        if full["on"] and "command" in fields:
            db = sqlite3.connect(":memory:")  # SQLite's own SQLITE_FULL, as a full disk gives it
            db.execute("PRAGMA max_page_count = 2")
            db.execute("CREATE TABLE t (x)")
            db.execute("INSERT INTO t VALUES (zeroblob(1 << 20))")
        return real_update(self, run_id, **fields)

    monkeypatch.setattr(Store, "update", update)
    svc = Service(home, cpu=True, poll_s=0.05, inventory=lambda: placement.cpu_slots(1))
    try:
        _start_meets_a_full_disk(svc, rec, full)
    finally:
        svc.shutdown()  # requeues and stops whatever still runs; closes its store watch


def _start_meets_a_full_disk(svc, rec, full) -> None:
    from launcher.service.loop import SPACE_RECHECK_S
    from launcher.store import RunStore as Store

    home = svc.home
    svc.step()
    wait_for(lambda: not svc.active[rec.id].thread.is_alive(), 120, "the start to give up")
    got = Store.open(home).get(rec.id)
    assert got.status == "queued" and got.service_attempts == 0, got
    assert [a.status for a in got.attempts] == ["failed"] and "disk is full" in got.attempts[0].error
    svc.step()
    assert rec.id not in svc.active  # held while the disk is as full as it was
    full["on"] = False
    svc._space_hold = (svc._space_hold[0], time.monotonic() - SPACE_RECHECK_S - 1)  # as if a minute passed
    svc.step()
    wait_for(lambda: not svc.active[rec.id].thread.is_alive(), 300, "the run to end")
    svc.step()
    done = Store.open(home).get(rec.id)
    assert done.status == "succeeded" and done.service_attempts == 1, done
    assert [a.status for a in done.attempts] == ["succeeded"]


def test_a_foreground_run_whose_start_meets_a_full_disk_ends_with_no_attempt_running(tmp_path, monkeypatch):
    """`advise launch`: the same fault ends the run failed (its launcher is the one that would retry), saying
    nothing ran, with its attempt failed too, never ``running`` under a failed run."""
    from launcher.home import make_run_dir
    from launcher.runner import START_NO_SPACE, execute
    from launcher.store import RunStore as Store
    from cli.launch_plan import options_from_flags, plan_from_flags, target_from_flags
    from cli.main import build_parser

    home = tmp_path / "home"
    args = build_parser("launch").parse_args([*TINY, "--max-steps", "2", "--recipe", "synthetic"])
    plan, _ = plan_from_flags(args)
    store = Store.open(home)
    rec = store.create(label="x", plan=plan)
    real_update = Store.update

    def update(self, run_id, **fields):
        if "command" in fields:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_update(self, run_id, **fields)

    monkeypatch.setattr(Store, "update", update)
    with pytest.raises(OSError):
        execute(store, rec.id, plan, target_from_flags(args, plan), make_run_dir(home, rec.id),
                options_from_flags(args, plan))
    got = store.get(rec.id)
    assert got.status == "failed" and got.error.startswith(START_NO_SPACE) and "nothing ran" in got.error
    assert [a.status for a in got.attempts] == ["failed"]
