"""The queue service with real processes on CPU: ``advise serve/submit/cancel/logs``.

Runs are tiny: one CPU rank through ``accelerate launch``, whose "training" script proves the service's
promises with ``flock``: it holds ``run-<id>.lock`` (a second live execution of the same run cannot get
it) and one of ``slot0..2.lock`` (taking the third means three runs at once). Locks die with their
process, SIGKILL included, so the checks are exact, not timing guesses. It then waits until the test
releases it (``release-<id>`` or ``release-all``), so which runs are still alive at the service's
death and restart is the test's choice, not a race. Then it logs 4 steps and writes their rows to the
run's metrics file, as the runtime does (the record's metrics are the service's summary of that file):
no torch in the rank, whose import was most of a run's CPU and none of what is checked here (the
runtime under the service: tests/test_service_resume.py).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

import psutil
import pytest

from launcher.service import ENV_SERVICE_HOME, SUBMISSION_NAME, Submission, reconcile, service_pid
from waiting import wait_for
from launcher.store import Attempt, RunStore

pytestmark = pytest.mark.slow

TINY = ["--cpu", "--processes", "1", "--model", "mini-transformer", "--seq-len", "16", "--micro-batch", "2",
        "--max-steps", "4"]

WRAPPER = r'''
import fcntl, json, os, sys, time
locks = sys.argv[1]
rid = os.path.basename(os.environ["CARDWISE_RUN_DIR"])
def mark(name):
    open(os.path.join(locks, name), "w").close()
me = open(os.path.join(locks, f"run-{rid}.lock"), "w")
try:
    fcntl.flock(me, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    mark(f"DOUBLE-{rid}")
    sys.exit(3)
slot = None
for i in range(3):
    f = open(os.path.join(locks, f"slot{i}.lock"), "w")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        slot = f
        break
    except BlockingIOError:
        f.close()
if slot is None or i == 2:
    mark(f"OVER-{rid}")
mark(f"started-{rid}-{os.getpid()}")
deadline = time.monotonic() + 600  # a hang guard: a failed test releases every run on its way out
while not any(os.path.exists(os.path.join(locks, f"release-{n}")) for n in (rid, "all")) and time.monotonic() < deadline:
    time.sleep(0.05)
with open(os.environ["CARDWISE_METRICS"], "a") as f:  # the runtime's rows (launcher.runtime)
    for step in range(1, 5):
        print(f"step {step}: loss {1 / step:.4f} (rank 0)", flush=True)
        f.write(json.dumps({"step": step, "rank": 0, "loss": 1 / step, "time": time.time(),
                            "attempt": int(os.environ["CARDWISE_ATTEMPT"])}) + "\n")
'''

SLEEPER = r'''
import os, sys, time
open(os.path.join(sys.argv[1], f"sleeper-{os.path.basename(os.environ['CARDWISE_RUN_DIR'])}-{os.getpid()}"), "w").close()
time.sleep(300)
'''


def advise(home: Path, command: str, *argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cli.main", command, "--home", str(home), *argv],
                          capture_output=True, text=True, timeout=timeout)


def advise_here(home: Path, command: str, *argv: str) -> subprocess.CompletedProcess:
    """``advise COMMAND`` run in this process (cli.main.main): the exit status and output ``python -m cli.main``
    gives, without a Python start each. For the short client commands (submit, cancel, logs, runs), whose
    other side (the service, the runs) is a process of its own anyway; ``serve`` and ``logs -f`` stay
    ``advise`` processes."""
    from cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            rc = main([command, "--home", str(home), *argv])
        except SystemExit as exc:  # argparse's own refusals
            rc = exc.code
    return subprocess.CompletedProcess([command, *argv], rc, out.getvalue(), err.getvalue())


def submit(home: Path, *argv: str) -> str:
    res = advise_here(home, "submit", *TINY, "--json", *argv)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)["id"]


@contextmanager
def serving(home: Path, *argv: str):
    log = open(home.parent / f"serve-{time.monotonic_ns()}.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--home", str(home), "--poll", "0.2",
                             "--grace", "3", *argv], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: service_pid(home) == proc.pid or proc.poll() is not None, 120, "the service to start")
        assert proc.poll() is None, Path(log.name).read_text()
        proc.log_path = Path(log.name)
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(60)
        log.close()



def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def markers(locks: Path, prefix: str) -> list[str]:
    return sorted(p.name for p in locks.iterdir() if p.name.startswith(prefix))


def pids_of(locks: Path, prefix: str, rid: str) -> list[int]:
    return [int(name.rsplit("-", 1)[1]) for name in markers(locks, f"{prefix}-{rid}-")]


def started_runs(locks: Path) -> list[str]:
    """The runs whose script started (``started-<id>-<pid>`` markers), each once."""
    return sorted({name.split("-")[1] for name in markers(locks, "started-")})


def release(locks: Path, name: str) -> None:
    """Let run ``name`` (or ``all``) go on past its start (the wrapper waits for this file)."""
    (locks / f"release-{name}").touch()


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    now = best = 0
    for _, d in events:
        now += d
        best = max(best, now)
    return best


@pytest.fixture
def home(tmp_path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def locks(tmp_path) -> Path:
    d = tmp_path / "locks"
    d.mkdir()
    return d


def test_five_runs_on_two_slots_survive_a_sigkill_of_the_service(home, locks, tmp_path):
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text(WRAPPER)
    ids = [submit(home, "--", str(wrapper), str(locks)) for _ in range(5)]
    store = RunStore.open(home)
    assert [r.status for r in store.list()] == ["queued"] * 5

    try:
        with serving(home, "--cpu", "--slots", "2") as svc:
            first = wait_for(lambda: len(started_runs(locks)) == 2 and started_runs(locks), 300, "the first two runs to start")
            for rid in first:
                release(locks, rid)

            def midway():
                # The first two done and the next two running, held: they cannot end on their own before the
                # service dies and comes back
                recs = store.list()
                running = [r.id for r in recs if r.status == "running"]
                done = sum(r.status == "succeeded" for r in recs)
                return running if done == 2 and len(running) == 2 and all(pids_of(locks, "started", i) for i in running) else None

            victims = wait_for(midway, 300, "two runs done and two running")
            os.kill(svc.pid, signal.SIGKILL)
            svc.wait(10)
        orphans = [pid for rid in victims for pid in pids_of(locks, "started", rid)]
        assert len(orphans) == 2 and all(alive(p) for p in orphans), "the runs outlive a SIGKILLed service until it restarts"

        with serving(home, "--cpu", "--slots", "2") as svc:
            wait_for(lambda: "reconcile: requeued" in svc.log_path.read_text(), 120, "the restarted service's reconcile")
            assert not any(alive(p) for p in orphans), "reconcile stops the orphans before running their runs again"
            release(locks, "all")
            # While it works: follow the newest run's logs to its end.
            follow = advise(home, "logs", ids[-1], "-f", timeout=600)
            assert follow.returncode == 0 and "step 4" in follow.stdout, follow.stderr
            wait_for(lambda: all(r.terminal for r in store.list()), 600, "all five runs to end")
            svc.send_signal(signal.SIGTERM)
            assert svc.wait(120) == 0
            log = svc.log_path.read_text()
    finally:
        release(locks, "all")

    recs = {r.id: r for r in store.list()}
    assert {r.status for r in recs.values()} == {"succeeded"}, {i: (r.status, r.error) for i, r in recs.items()}
    assert not markers(locks, "DOUBLE-"), "a run ran twice at once"
    assert not markers(locks, "OVER-"), "more than two runs ran at once"
    assert max_overlap([(r.started, r.ended) for r in recs.values()]) <= 2
    for rid, rec in recs.items():
        assert rec.metrics is not None and rec.metrics.steps == 4
        if rid in victims:
            assert rec.service_attempts == 2 and (Path(rec.run_dir) / "interrupted-1").is_dir()
        else:
            assert rec.service_attempts == 1
    assert "reconcile: requeued" in log and all(v in log for v in victims)

    out = advise_here(home, "logs", victims[0])
    assert out.returncode == 0 and "step 4" in out.stdout
    listed = json.loads(advise_here(home, "runs", "--json").stdout)
    assert sorted(r["id"] for r in listed) == sorted(ids) and {r["status"] for r in listed} == {"succeeded"}


def test_lock_cancel_and_graceful_stop(home, locks, tmp_path):
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text(SLEEPER)
    with serving(home, "--cpu", "--slots", "1") as svc:
        second = advise(home, "serve", "--cpu")
        assert second.returncode == 2 and "already running" in second.stderr and f"pid {svc.pid}" in second.stderr
        assert "Traceback" not in second.stderr
        assert (home / "service.lock").stat().st_mode & 0o777 == 0o600

        s1 = submit(home, "--", str(sleeper), str(locks))
        s2 = submit(home, "--", str(sleeper), str(locks))
        store = RunStore.open(home)
        wait_for(lambda: pids_of(locks, "sleeper", s1), 300, "the first run to start")
        assert store.get(s2).status == "queued"  # one slot

        res = advise_here(home, "cancel", s2)
        assert res.returncode == 0 and "it was queued" in res.stdout
        assert store.get(s2).status == "cancelled"

        pid1 = pids_of(locks, "sleeper", s1)[0]
        res = advise_here(home, "cancel", s1, "--wait", "--json")
        assert res.returncode == 0, res.stderr
        rec = json.loads(res.stdout)
        assert rec["status"] == "cancelled" and rec["pid"] is None
        assert not alive(pid1)

        s3 = submit(home, "--", str(sleeper), str(locks))
        wait_for(lambda: pids_of(locks, "sleeper", s3), 300, "the third run to start")
        pid3 = pids_of(locks, "sleeper", s3)[0]
        svc.send_signal(signal.SIGTERM)
        assert svc.wait(120) == 0
    rec = store.get(s3)
    assert rec.status == "queued" and "requeued" in rec.error and rec.pid is None
    assert not alive(pid3)
    assert [store.get(s).status for s in (s1, s2)] == ["cancelled", "cancelled"]
    # No service: cancelling a queued run is immediate.
    res = advise_here(home, "cancel", s3)
    assert res.returncode == 0 and store.get(s3).status == "cancelled"


def test_cancel_with_the_service_dead_stops_the_orphans(home, locks, tmp_path):
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text(SLEEPER)
    rid = submit(home, "--", str(sleeper), str(locks))
    with serving(home, "--cpu") as svc:
        wait_for(lambda: pids_of(locks, "sleeper", rid), 300, "the run to start")
        os.kill(svc.pid, signal.SIGKILL)
        svc.wait(10)
    pid = pids_of(locks, "sleeper", rid)[0]
    assert alive(pid)
    res = advise_here(home, "cancel", rid)
    assert res.returncode == 0 and "processes are stopped" in res.stdout, res.stderr
    assert not alive(pid)
    rec = RunStore.open(home).get(rid)
    assert rec.status == "cancelled" and rec.pid is None


def test_gpu_placement_reaches_the_run_through_cuda_visible_devices(home, tmp_path):
    """A GPU plan on a fake inventory (GPU 0 busy with a foreign process): the run gets GPU 1."""
    from advisor.config import TrainConfig
    from advisor.plan import ModelRef, Plan

    plan = Plan(model=ModelRef(name="mini-transformer"), config=TrainConfig(micro_batch=2, seq_len=16, precision="fp32"),
                gpu="A100-80GB", processes_per_node=1, global_batch=2, lr=1e-3, base_lr=1e-3, base_batch=2)
    plan.save(tmp_path / "plan.json")
    script = tmp_path / "env.py"
    script.write_text("import json, os, sys\njson.dump({k: os.environ.get(k) for k in "
                      "('CUDA_VISIBLE_DEVICES', 'CUDA_DEVICE_ORDER')}, open(sys.argv[1], 'w'))\n")
    res = advise_here(home, "submit", "--plan", str(tmp_path / "plan.json"), "--json", "--", str(script), str(tmp_path / "env.json"))
    assert res.returncode == 0, res.stderr
    rid = json.loads(res.stdout)["id"]
    sub = Submission.model_validate_json((home / "runs" / rid / SUBMISSION_NAME).read_text())
    assert sub.kind == "gpu" and sub.devices == 1 and sub.need_source == "estimate" and 0 < sub.need_gib < 5
    driver = tmp_path / "driver.py"
    driver.write_text(f'''
import threading, time
from pathlib import Path
from launcher.placement import Device
from launcher.service import Service
fake = [Device(index=0, total_gib=80, free_gib=0.5), Device(index=1, total_gib=80, free_gib=79)]
svc = Service(Path({str(home)!r}), poll_s=0.2, inventory=lambda: fake)
stop = threading.Event()
def watch():
    while not all(r.terminal for r in svc.store.list()):
        time.sleep(0.1)
    stop.set()
threading.Thread(target=watch, daemon=True).start()
raise SystemExit(svc.serve(stop))
''')
    subprocess.run([sys.executable, str(driver)], check=True, timeout=120, capture_output=True)
    rec = RunStore.open(home).get(rid)
    assert rec.status == "succeeded" and rec.gpus == [1]
    assert json.loads((tmp_path / "env.json").read_text()) == {"CUDA_VISIBLE_DEVICES": "1", "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


def _service_record(store: RunStore, home: Path, status: str, *, starts: int = 1, attempts_started: float | None = None,
                    pid: int | None = None):
    from launcher.command import Target
    from launcher.home import make_run_dir
    from launcher.runner import RunOptions
    from launcher.store import new_run_id

    rid = new_run_id()
    rdir = make_run_dir(home, rid)
    (rdir / SUBMISSION_NAME).write_text(Submission(target=Target(kind="recipe", name="synthetic"), options=RunOptions(),
                                                   devices=1, kind="cpu", submitted=time.time()).model_dump_json())
    rec = store.create(run_id=rid, run_dir=rdir, status="queued")
    if status == "running":
        store.transition(rid, "running", service_attempts=starts, pid=pid, pgid=pid)
        store.record_attempt(rid, Attempt(n=1, micro_batch=2, grad_accum=1, started=attempts_started or time.time()))
    return store.get(rec.id)


def test_reconcile_requeues_fails_after_the_limit_and_never_kills_a_stranger(home):
    store = RunStore.open(home)
    lost = _service_record(store, home, "running", starts=1)
    worn = _service_record(store, home, "running", starts=3)
    waiting = _service_record(store, home, "queued")
    # An orphan of `lost`, tagged as service processes are.
    env = {**os.environ, ENV_SERVICE_HOME: os.path.realpath(home), "CARDWISE_RUN_DIR": lost.run_dir}
    orphan = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env, start_new_session=True)
    # A stranger whose pid the store records as a run's group (pid reuse): untagged, must survive.
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    reused = _service_record(store, home, "running", starts=1, attempts_started=time.time() - 3600, pid=stranger.pid)
    foreground = store.create(label="advise launch", status="running")  # no submission: not the service's
    try:
        report = reconcile(store, home, max_starts=3, grace_s=2)
        orphan.wait(5)
        assert stranger.poll() is None
    finally:
        for p in (orphan, stranger):
            if p.poll() is None:
                p.kill()
            p.wait()
    assert sorted(report.requeued) == sorted([lost.id, reused.id]) and report.failed == [worn.id]
    assert report.stopped == 1
    assert store.get(lost.id).status == "queued" and "requeued" in store.get(lost.id).error
    assert store.get(lost.id).attempts[0].status == "failed"
    failed = store.get(worn.id)
    assert failed.status == "failed" and "--max-starts 3" in failed.error
    assert store.get(waiting.id).status == "queued"
    assert store.get(foreground.id).status == "running"


def test_submit_json_modes_and_user_errors(home, tmp_path, capsys):
    from cli.main import main

    res = advise(home, "submit", *TINY, "--recipe", "synthetic", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert set(out) >= {"id"} and len(out["id"]) == 8 and out["status"] == "queued"
    rdir = home / "runs" / out["id"]
    mode = lambda p: p.stat().st_mode & 0o777  # noqa: E731
    assert mode(home) == 0o700 and mode(rdir) == 0o700 and mode(home / "runs") == 0o700
    assert mode(home / "runs.sqlite") == 0o600 and mode(rdir / SUBMISSION_NAME) == 0o600 and mode(rdir / "plan.json") == 0o600
    store = RunStore.open(home)
    assert store.get(out["id"]).plan["processes_per_node"] == 1

    done = store.create(status="running")
    store.transition(done.id, "succeeded")
    bad = [
        ("submit", "--cpu", "--recipe", "synthetic"),  # no model
        ("submit", *TINY),  # nothing to launch
        ("submit", *TINY[:4], "nope", "--recipe", "synthetic"),  # unknown model
        ("submit", *TINY, "--recipe", "synthetic", "--dry-run"),
        ("submit", *TINY, "--recipe", "synthetic", "--node-rank", "1"),
        ("cancel", "ffffffff"),
        ("cancel", done.id),  # already ended
        ("logs", "ffffffff"),
        ("serve", "--cpu", "--slots", "0"),
        ("serve", "--cpu", "--gpu-ids", "0"),
    ]
    for command, *argv in bad:
        if command == "serve":  # a process of its own: serve sets this process's umask and logging first
            res = advise(home, command, *argv)
            rc, out, err = res.returncode, res.stdout, res.stderr
        else:  # in this process: the exit status `python -m cli.main` exits with, without a start each
            try:
                rc = main([command, "--home", str(home), *argv])
            except SystemExit as exc:  # argparse's own refusals
                rc = exc.code
            out, err = capsys.readouterr()
        assert rc == 2, (command, argv, out, err)
        assert "Traceback" not in err and "error" in err, (command, argv, err)
    assert [r.status for r in store.list()] == ["queued", "succeeded"]  # nothing else was queued
