"""Attacks on a cardwise home and faults of its store, without launching anything (fast).

Tests run as root, so a "foreign" home is made by chown to another uid or by the mode bits
(g+w, o+w): the checks compare ``st_uid`` with ``os.geteuid()`` and refuse group/other write.
"""

from __future__ import annotations

import json
import os
import shlex
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from advisor.errors import UserError
from cli.main import main
from launcher.records import EXIT_NAME, OUTCOME_NAME, MetricsSummary, write_json_atomic
from launcher.service import SUBMISSION_NAME, ServiceLock, Submission, reconcile, submit
from launcher.settle import record_end, settle_one
from launcher.store import RunStore
from tests.refusals import assert_refused, home_with_a_run


def advise(*argv: str) -> tuple[int, str, str]:
    res = subprocess.run([sys.executable, "-m", "cli.main", *argv], capture_output=True, text=True, timeout=120)
    return res.returncode, res.stdout, res.stderr


def refused(argv: list[str], *words: str) -> str:
    return assert_refused(advise, argv, *words)


@pytest.fixture
def home(tmp_path) -> Path:
    return home_with_a_run(tmp_path)


# ------------------------------------------------------------------ owner and mode
@pytest.mark.parametrize("bits, who", [(stat.S_IWGRP, "group"), (stat.S_IWOTH, "others")])
def test_a_home_others_can_write_is_refused(home, bits, who):
    os.chmod(home, 0o700 | bits)
    err = refused(["runs", "--home", str(home)], who, "chmod go-w")
    assert str(home) in err
    with pytest.raises(UserError):
        RunStore.open(home)


def test_a_home_of_another_user_is_refused(home):
    os.chown(home, 12345, -1)
    refused(["runs", "--home", str(home)], "uid 12345", "chown")
    os.chown(home, os.geteuid(), -1)
    os.chmod(home / "runs.sqlite", 0o666)
    refused(["runs", "--home", str(home)], "runs.sqlite", "writable by")


def test_a_planted_lock_link_is_not_followed(home, tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (home / "service.lock").symlink_to(victim)
    with pytest.raises(UserError, match="symbolic link"):
        ServiceLock(home).acquire()
    refused(["serve", "--cpu", "--home", str(home)], "symbolic link", "rm ")
    assert victim.read_text() == "precious\n"


def test_a_symlinked_store_is_refused(tmp_path):
    real = tmp_path / "elsewhere.sqlite"
    RunStore(real)
    h = tmp_path / "h"
    h.mkdir(mode=0o700)
    (h / "runs.sqlite").symlink_to(real)
    refused(["runs", "--home", str(h)], "symbolic link")


def test_runs_on_a_file_is_refused(tmp_path):
    f = tmp_path / "passwd"
    f.write_text("root:x:0:0\n")
    refused(["runs", "--home", str(f)], "not a directory")


# ------------------------------------------------------------------ corruption
def test_a_corrupt_store_is_kept_and_refused_and_serve_exits_2(home):
    store = home / "runs.sqlite"
    store.write_bytes(b"this is not a database" * 200)
    err = refused(["runs", "--home", str(home)], "corrupt", "mv ")
    copies = list(home.glob("runs.sqlite.corrupt-*"))
    assert len(copies) == 1 and copies[0].read_bytes() == store.read_bytes()
    refused(["show", "abc", "--home", str(home)], "corrupt")
    refused(["logs", "abc", "--home", str(home)], "corrupt")
    refused(["serve", "--cpu", "--home", str(home)], "corrupt")  # 2: RestartPreventExitStatus=2 in the unit
    assert "a copy is kept" in err and len(list(home.glob("runs.sqlite.corrupt-*"))) == 1  # one copy per version


def test_a_damaged_page_fails_quick_check(tmp_path):
    s = RunStore(tmp_path / "runs.sqlite")
    for i in range(200):
        s.create(label="x" * 200, run_id=f"r{i:04d}")
    with sqlite3.connect(s.path) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    data = bytearray(s.path.read_bytes())
    data[4096 * 3: 4096 * 3 + 12] = b"\x0d\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff"  # a leaf page header: nonsense
    s.path.write_bytes(bytes(data))
    with pytest.raises(UserError, match="corrupt"):
        RunStore(s.path).list()


def test_a_zero_byte_store_is_refused_and_the_backup_named(home):
    from launcher.store_safety import backup

    backup(home / "runs.sqlite")
    (home / "runs.sqlite").write_bytes(b"")
    err = refused(["runs", "--home", str(home)], "0 bytes", "runs.sqlite.bak")
    assert "restore" in err
    os.replace(home / "runs.sqlite.bak", home / "runs.sqlite")  # the fix works: the records are back
    assert [r.label for r in RunStore.open(home).list()] == ["a run"]


def test_runs_and_show_read_while_a_writer_holds_the_store(home):
    rid = RunStore.open(home).list()[0].id
    db = sqlite3.connect(home / "runs.sqlite", isolation_level=None)
    db.execute("BEGIN IMMEDIATE")  # a writer stuck for longer than the busy timeout
    try:
        assert main(["runs", "--home", str(home), "--json"]) == 0
        assert main(["show", rid, "--home", str(home)]) == 0
    finally:
        db.execute("ROLLBACK")
        db.close()


# ------------------------------------------------------------------ ends recorded late
def dead_owner() -> dict:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    import psutil

    created = psutil.Process(p.pid).create_time()
    p.wait()
    return {"pid": p.pid, "created": created}


def running_record(store: RunStore, home: Path, owner: dict, files: dict[str, dict]):
    from launcher.home import make_run_dir
    from launcher.records import Attempt

    rec = store.create(label="killed launch")
    rdir = make_run_dir(home, rec.id)
    adir = rdir / "attempt-1"
    adir.mkdir()
    for name, data in files.items():
        write_json_atomic(adir / name, data)
    store.transition(rec.id, "running", run_dir=str(rdir), owner=owner)
    return store.record_attempt(rec.id, Attempt(n=1, micro_batch=2, grad_accum=1, started=time.time(), log_dir=str(adir)))


def test_a_killed_foreground_launch_is_settled_on_read(home, capsys):
    store = RunStore.open(home)
    killed = running_record(store, home, dead_owner(), {EXIT_NAME: {"returncode": -15, "stopped": True}})
    vanished = running_record(store, home, dead_owner(), {})
    live = running_record(store, home, {"pid": os.getpid(), "created": __import__("psutil").Process().create_time()}, {})
    assert main(["runs", "--home", str(home), "--json"]) == 0
    by_id = {r["id"]: r for r in json.loads(capsys.readouterr().out)}
    assert by_id[killed.id]["status"] == "cancelled" and "was killed" in by_id[killed.id]["error"]
    assert by_id[vanished.id]["status"] == "failed" and "died before recording" in by_id[vanished.id]["error"]
    assert by_id[live.id]["status"] == "running"  # a live owner is never overruled
    assert store.get(killed.id).status == "cancelled"  # written, not only shown


def test_a_store_locked_at_the_end_is_settled_later(home, capsys):
    store = RunStore.open(home)
    rec = running_record(store, home, {"pid": os.getpid(), "created": __import__("psutil").Process().create_time()}, {})
    adir = Path(rec.run_dir) / "attempt-1"
    (Path(rec.run_dir) / "metrics.jsonl").write_text('{"step": 1, "rank": 0, "loss": 1.0, "attempt": 1}\n')
    db = sqlite3.connect(store.path, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    try:
        done = record_end(store.settler(), rec.id, Path(rec.run_dir), adir, 1,
                          {"status": "succeeded", "exit_code": 0, "error": None})
    finally:
        db.execute("ROLLBACK")
        db.close()
    assert done.status == "succeeded" and "cannot be written now" in capsys.readouterr().err
    assert store.get(rec.id).status == "running" and (adir / OUTCOME_NAME).is_file()
    settled = settle_one(store, store.get(rec.id))  # the owner lives, but its verdict is on disk
    assert settled.status == "succeeded" and settled.metrics.steps == 1 and store.get(rec.id).status == "succeeded"


def _service_run(store, home, exit_data):
    from launcher.command import Target
    from launcher.runner import RunOptions

    rec = running_record(store, home, dead_owner(), {EXIT_NAME: exit_data} if exit_data else {})
    (Path(rec.run_dir) / SUBMISSION_NAME).write_text(Submission(
        target=Target(kind="recipe", name="synthetic"), options=RunOptions(), devices=1, kind="cpu",
        submitted=time.time()).model_dump_json())
    return rec


def test_a_run_that_finished_while_the_service_was_down_is_recorded_not_rerun(home):
    store = RunStore.open(home)
    finished = _service_run(store, home, {"returncode": 0, "stopped": False})
    stopped = _service_run(store, home, {"returncode": -15, "stopped": True})
    lost = _service_run(store, home, None)
    assert main(["runs", "--home", str(home)]) == 0  # a read records what ended on its own...
    assert store.get(finished.id).status == "succeeded" and store.get(finished.id).exit_code == 0
    assert store.get(stopped.id).status == "running" and store.get(lost.id).status == "running"  # ...not the rest
    also = _service_run(store, home, {"returncode": 0, "stopped": False})
    report = reconcile(store, home, grace_s=1)  # a restarting service records before it requeues
    assert report.finished == [also.id] and store.get(also.id).status == "succeeded"
    assert sorted(report.requeued) == sorted([stopped.id, lost.id])


# ------------------------------------------------------------------ metrics, submissions, polling
def test_malformed_metrics_rows_are_skipped_and_counted(tmp_path):
    path = tmp_path / "metrics.jsonl"
    rows = ['{"step": 1, "rank": 0, "loss": 2.0}', "[1, 2]", '{"step": "x"}', '{"step": 2, "loss": "nan"}',
            "{truncated", '"a string"', '{"step": 2, "rank": 0, "loss": 1.0, "samples_per_s": 5}', "",
            '{"step": 3, "rank": 0, "loss": Infinity}', '{"step": 3, "rank": null}']
    path.write_text("\n".join(rows) + "\n")
    m = MetricsSummary.from_jsonl(path)
    assert m.steps == 2 and m.last_loss == 1.0 and m.bad_rows == 7


def test_one_row_nested_thousands_deep_is_a_bad_row_not_a_lost_summary(tmp_path):
    """json.loads raises RecursionError (not ValueError) on it: the whole summary became null."""
    from launcher.data_wait import read_util
    from tui.monitor import read_metrics

    deep = '{"step": 3, "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    path = tmp_path / "metrics.jsonl"
    path.write_text("\n".join(['{"step": 1, "rank": 0, "loss": 2.0, "time": 1.0}', deep,
                               '{"step": 2, "rank": 0, "loss": 1.0, "time": 3.0}']) + "\n")
    m = MetricsSummary.from_jsonl(path)
    assert m.steps == 2 and m.last_loss == 1.0 and m.bad_rows == 1 and m.wall_s == 2.0
    assert [r["step"] for r in read_metrics(path)] == [1, 2]  # the wizard's monitor reads past it too
    assert len(read_util(path)) == 2  # and the data-bound check's utilisation file


def test_submit_records_cwd_and_named_environment(tmp_path, monkeypatch):
    from cli.launch_plan import options_from_flags, plan_from_flags, target_from_flags
    from cli.main import build_parser

    args = build_parser("submit").parse_args(["--cpu", "--processes", "1", "--model", "mini-transformer",
                                      "--seq-len", "16", "--recipe", "synthetic", "--max-steps", "2"])
    plan, _ = plan_from_flags(args)
    target, options = target_from_flags(args, plan), options_from_flags(args, plan)
    monkeypatch.setenv("MY_TOKEN", "s3cret value")
    monkeypatch.chdir(tmp_path)
    rec, _ = submit(tmp_path / "h", plan, target, options, env_names=["MY_TOKEN"])
    sub = Submission.model_validate_json((Path(rec.run_dir) / SUBMISSION_NAME).read_text())
    assert sub.options.cwd == str(tmp_path) and sub.options.extra_env["MY_TOKEN"] == "s3cret value"
    for bad in (["CUDA_VISIBLE_DEVICES"], ["NOT_SET_ANYWHERE"], ["A=B"], ["CARDWISE_HOME"]):
        with pytest.raises(UserError):
            submit(tmp_path / "h", plan, target, options, env_names=bad)


def test_the_service_rereads_the_queue_only_when_the_store_changed(tmp_path, monkeypatch):
    from launcher import placement
    from launcher.service import Service

    h = tmp_path / "h"
    store = RunStore.open(h)
    for _ in range(3):
        _service_run(store, h, None)
    for rec in store.list():
        store.transition(rec.id, "queued", expect=["running"])
    # one GPU that is busy: the runs wait (placement would start nothing)
    svc = Service(h, inventory=lambda: [placement.Device(index=0, total_gib=80, free_gib=1)])
    reads = []
    real = svc._queue
    monkeypatch.setattr(svc, "_queue", lambda: reads.append(1) or real())
    for rec in store.list():  # they need memory: rewrite their submissions
        sub = Submission.model_validate_json((Path(rec.run_dir) / SUBMISSION_NAME).read_text())
        (Path(rec.run_dir) / SUBMISSION_NAME).write_text(sub.model_copy(update={"kind": "gpu", "need_gib": 40}).model_dump_json())
    svc.step()
    svc.step()
    svc.step()
    assert len(reads) == 1
    store.create(label="new")  # any commit by anyone
    svc.step()
    assert len(reads) == 2


# ------------------------------------------------------------------ slurm, rendezvous
def _stub(bindir: Path, name: str, body: str) -> None:
    p = bindir / name
    p.write_text("#!/bin/bash\n" + body + "\n")
    p.chmod(0o755)


def test_slurm_script_passes_arguments_literally_and_refuses_control_characters(tmp_path):
    from cli.launch_plan import plan_from_flags
    from cli.main import build_parser
    from launcher.command import Target
    from launcher.slurm import sbatch_script

    args = build_parser("launch").parse_args(["--cpu", "--processes", "1", "--model", "mini-transformer"])
    plan, _ = plan_from_flags(args)
    script = tmp_path / "my train.py"
    script.write_text("")
    evil = ["$HOME", "$(touch PWNED)", "`touch PWNED2`", "a b", "it's", "{lr}", '"q"']
    text = sbatch_script(plan, Target(kind="script", name=str(script), args=evil), python="fakepython")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    _stub(bindir, "srun", 'while [[ "$1" == --* ]]; do shift; done; exec "$@"')
    _stub(bindir, "scontrol", "echo node0")
    _stub(bindir, "fakepython", f'{shlex.quote(sys.executable)} -c "import json,sys; print(json.dumps(sys.argv[1:]))"'
                                ' "$@" > "$RUN_DIR/argv.json"')
    (tmp_path / "job.sh").write_text(text)
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "SLURM_JOB_ID": "7", "SLURM_NODEID": "0",
           "SLURM_JOB_NODELIST": "node0", "CARDWISE_RUN_DIR": str(tmp_path / "run")}
    res = subprocess.run(["bash", str(tmp_path / "job.sh")], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    argv = json.loads((tmp_path / "run" / "argv.json").read_text())
    assert argv[argv.index(str(script)) + 1:] == [*evil[:5], f"{plan.lr:.8g}", '"q"']
    assert not list(tmp_path.glob("PWNED*"))
    for bad in (Target(kind="script", name=str(script), args=["ok\necho injected"]),
                Target(kind="script", name=str(tmp_path / "a\nb.py"))):
        with pytest.raises(UserError, match="control character"):
            sbatch_script(plan, bad)


def test_single_node_ranks_meet_on_the_loopback(tmp_path):
    from cli.launch_plan import plan_from_flags
    from cli.main import build_parser
    from launcher.command import Target, build_launch_spec

    args = build_parser("launch").parse_args(["--cpu", "--processes", "2", "--model", "mini-transformer"])
    plan, _ = plan_from_flags(args)
    spec = build_launch_spec(plan, Target(kind="recipe", name="synthetic"), config_path=tmp_path / "c.yaml",
                             plan_path=tmp_path / "p.json", run_dir=tmp_path)
    assert spec.cmd[spec.cmd.index("--main_process_ip") + 1] == "127.0.0.1"
    if "GLOO_SOCKET_IFNAME" not in os.environ:
        assert spec.env["GLOO_SOCKET_IFNAME"] == "lo"


# ------------------------------------------------------------------ run ids
def test_an_empty_or_short_id_names_no_run_even_when_one_is_queued(home):
    """`advise cancel ''` matched the one queued run (an empty prefix matches every id) and cancelled it."""
    rid = RunStore.open(home).list()[0].id
    for short in ("", rid[:1], rid[:3]):
        refused(["cancel", short, "--home", str(home)], "at least 4 of its characters")
        refused(["show", short, "--home", str(home)], "at least 4 of its characters")
    assert RunStore.open(home).get(rid).status == "queued"
    assert RunStore.open(home).get(rid[:4]).id == rid  # a prefix of 4 still names it


def test_an_id_beyond_sqlite_pattern_limits_is_refused_by_every_command(home):
    """An id over 50,000 characters crashed show, logs, cancel and --resume (SQLite: "LIKE or GLOB pattern
    too complex"); it is refused in one line that does not echo it."""
    huge = RunStore.open(home).list()[0].id + "a" * 60_000
    for argv in (["show", huge], ["logs", huge], ["cancel", huge], ["launch", "--resume", huge],
                 ["submit", "--slurm", "--resume", huge]):
        err = refused([*argv, "--home", str(home)], "60008 characters", "is not a run id")
        assert len(err) < 400


# ------------------------------------------------------------------ system directories
def test_a_system_directory_is_refused_as_a_home_before_anything_is_written(tmp_path):
    """As root nothing stopped `advise submit --home /etc` from writing runs.sqlite and runs/ into /etc.
    Whatever a command would have left in a system directory is removed again at the end, so a failure
    of this test leaves the machine as it was."""
    import secrets
    import shutil

    tag = f"cardwise-test-{secrets.token_hex(4)}"
    homes = ["/etc", "/", "/var/lib", f"/etc/{tag}", f"/usr/lib/{tag}", f"/proc/{tag}", f"/lib/{tag}"]
    made = ["runs.sqlite", "runs.sqlite-wal", "runs.sqlite-shm", "runs"]
    before = {h: {m for m in made if os.path.lexists(os.path.join(h, m))} for h in homes}
    link = tmp_path / "conf"
    link.symlink_to("/etc")  # the resolved path counts too
    try:
        submit = ["submit", "--cpu", "--processes", "1", "--model", "mini-transformer", "--recipe", "synthetic"]
        launch = ["launch", "--cpu", "--processes", "1", "--model", "mini-transformer", "--recipe", "synthetic",
                  "--seq-len", "16", "--micro-batch", "2", "--max-steps", "1"]
        cases = [(submit, h) for h in [*homes, str(link)]] + [(launch, "/etc"), (launch, homes[4]), (["serve", "--cpu"], "/")]
        for argv, home in cases:
            rc, _, err = advise(*argv, "--home", home)
            err = "\n".join(line for line in err.splitlines() if not line.startswith("advise: note:"))
            assert rc == 2 and len(err.splitlines()) == 2 and "--home /var/lib/cardwise" in err, (argv, home, err)
            assert ("inside /" if tag in home else "a system directory") in err, err
    finally:
        for h in homes:
            if os.path.isdir(h) and tag in h:
                shutil.rmtree(h, ignore_errors=True)
            for m in made:
                p = os.path.join(h, m)
                if m not in before.get(h, set()) and os.path.lexists(p):
                    shutil.rmtree(p) if os.path.isdir(p) else os.unlink(p)
    for h in homes:
        assert not os.path.lexists(h) or {m for m in made if os.path.lexists(os.path.join(h, m))} == before[h]
    # a folder of cardwise's own under /var/lib or /opt is its place (checked without writing there)
    from launcher.home import refuse_system_home

    refuse_system_home(Path("/var/lib/cardwise"))
    refuse_system_home(Path("/opt/cardwise/home"))


def test_a_store_that_turns_read_only_under_the_service_is_said_once_not_a_traceback_each_pass(tmp_path, caplog):
    """Each pass failing alike (the store made read-only, 0400, while serving) logged a traceback every poll."""
    import logging
    import threading

    from launcher import placement
    from launcher.service import Service

    svc = Service(tmp_path / "h", cpu=True, poll_s=0.01, inventory=lambda: placement.cpu_slots(1))
    passes = []

    def step():
        passes.append(1)
        if len(passes) >= 20:
            stop.set()
        raise UserError("the run store became read-only: attempt to write a readonly database")

    svc.step = step
    stop = threading.Event()
    with caplog.at_level(logging.INFO, logger="cardwise.service"):
        assert svc.serve(stop) == 0
    said = [r for r in caplog.records if "scheduling pass failed" in r.getMessage()]
    assert len(passes) >= 20 and len(said) == 1 and said[0].exc_info is None, [r.getMessage() for r in said]
    assert "became read-only" in said[0].getMessage()
