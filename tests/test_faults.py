"""Faults with real processes on CPU: kill -9 of a foreground launch (at each stage of its start-up;
the 20-trial campaign is ``python -m benchmarks.faults.kill9``), Ctrl-C, a run that finishes while
the service is down, malformed metrics, and where the ranks listen.

Survivors are found by an environment tag each trial's whole process tree inherits
(``launcher.procs.tagged_processes``): re-parenting and new sessions do not hide them.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from benchmarks.faults.kill9 import TAG, campaign, ranks_up, start_launch
from launcher import procs
from waiting import reaped, stop_and_collect, wait_for
from launcher.store import RunStore

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SLEEPER = Path(__file__).with_name("scripts") / "sleeper.py"
TINY = ["--model", "mini-transformer", "--seq-len", "16", "--micro-batch", "2"]
# One trial per stage of benchmarks.faults.kill9 (the trial's number sets it): while Python starts (0.5 s
# in), while the CLI plans and the launcher imports torch (2.5 s, 5 s), with the ranks running (odd).
KILL_9_TRIALS = [0, 8, 18, 1]


def test_kill_9_of_a_foreground_launch_leaves_no_process_at_any_stage(tmp_path):
    """Killed at every stage: while Python starts, while torch imports, with ranks running.

    The trials are independent (own home, own tag, own port), so they run together: most of a trial is
    waiting (for the ranks, for the shim's grace). The campaign of 20 (every 0.5 s of the start-up):
    ``python -m benchmarks.faults.kill9``.
    """
    assert not campaign(tmp_path, KILL_9_TRIALS, parallel=len(KILL_9_TRIALS))


def test_ctrl_c_is_reported_plainly_and_ranks_listen_on_the_loopback(tmp_path):
    """Also Ctrl-C's half of test_launcher_runs' test_cancel_stops_every_process (SIGTERM there), on this
    launch: the record ends cancelled and every process goes, each rank's own child included."""
    token = secrets.token_hex(6)
    p = start_launch(tmp_path, token, "--processes", "2", "--", str(SLEEPER), json_out=False)
    with reaped(p):
        wait_for(lambda: ranks_up(tmp_path, 2) or p.poll() is not None, 300, "the ranks")
        assert p.poll() is None, p.stderr.read()
        tree = procs.tagged_processes(**{TAG: token})
        ranks = [q for q in tree if (procs.environ(q) or {}).get("RANK") is not None]
        listening = {(c.laddr.ip, c.laddr.port) for q in tree for c in _listeners(q)}
        port = int(json.loads(next((tmp_path / "runs").glob("*/command.json")).read_text())["cmd"][
            json.loads(next((tmp_path / "runs").glob("*/command.json")).read_text())["cmd"].index("--main_process_port") + 1])
        pids = [int(x) for f in (tmp_path / "runs").glob("*/pids-*") for x in f.read_text().split()]
        out, err = stop_and_collect(p, signal.SIGINT)
    assert p.returncode == 130
    assert "cancelled" in out and "error:" not in out, out
    assert [r.status for r in RunStore.open(tmp_path).list()] == ["cancelled"], err
    assert len(pids) == 4  # each rank and its own child
    assert set(pids) <= {q.pid for q in tree}  # each rank's own child carries the tag too
    assert not [q.pid for q in tree if procs.alive(q)]
    for chatter in ("torch.distributed.elastic", "SignalException", "Traceback", "closing signal"):
        assert chatter not in out and chatter not in err, (out, err)
    assert ranks and all(procs.environ(q) is None or procs.environ(q).get("MASTER_ADDR") == "127.0.0.1" for q in ranks)
    # Everything but torch's rendezvous store (TCPStore binds the wildcard address; no option) is on lo.
    public = {(ip, pt) for ip, pt in listening if pt != port and ip not in ("127.0.0.1", "::1", "::ffff:127.0.0.1")}
    assert not public, (listening, port)


def _listeners(q: psutil.Process):
    try:
        return [c for c in q.net_connections("inet") if c.status == psutil.CONN_LISTEN]
    except psutil.Error:
        return []


FINISHER = r'''
import json, os, sys, time
marks = sys.argv[1]
open(os.path.join(marks, f"started-{os.getpid()}"), "w").close()
time.sleep(4)
with open(os.environ["CARDWISE_METRICS"], "a") as f:
    f.write(json.dumps({"step": 1, "rank": 0, "loss": 1.5, "attempt": int(os.environ.get("CARDWISE_ATTEMPT", 1))}) + "\n")
    f.write("[not, a, row]\n")
    f.write('{"step": "two", "rank": 0}\n')
open(os.path.join(marks, f"done-{os.getpid()}"), "w").close()
'''


def test_a_run_finished_while_the_service_was_down_runs_once_and_succeeds(tmp_path):
    home, marks = tmp_path / "home", tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / "finisher.py"
    script.write_text(FINISHER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def advise(command, *argv):
        return subprocess.run([sys.executable, "-m", "cli.main", command, "--home", str(home), *argv],
                              capture_output=True, text=True, timeout=120, env=env)

    res = advise("submit", "--cpu", "--processes", "1", *TINY, "--json", "--", str(script), str(marks))
    assert res.returncode == 0, res.stderr
    rid = json.loads(res.stdout)["id"]
    serve = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--cpu", "--home", str(home), "--poll", "0.2"],
                             stdout=subprocess.DEVNULL, stderr=open(tmp_path / "serve1.log", "w"), env=env)
    try:
        wait_for(lambda: list(marks.glob("started-*")), 120, "the run to start")
    finally:
        serve.kill()  # the service dies; its run goes on and finishes alone
        serve.wait()
    wait_for(lambda: list(marks.glob("done-*")) and list((home / "runs" / rid).glob("attempt-*/exit.json")), 60,
             "the run to finish")
    serve = subprocess.Popen([sys.executable, "-m", "cli.main", "serve", "--cpu", "--home", str(home), "--poll", "0.2"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    try:
        rec = wait_for(lambda: (r := RunStore.open(home).get(rid)).terminal and r, 60, "the run to be recorded")
        time.sleep(1.0)  # a service that wrongly requeued it would have started it again by now
    finally:
        serve.terminate()
        serve.wait(60)
    assert rec.status == "succeeded" and rec.service_attempts == 1, rec
    assert len(list(marks.glob("started-*"))) == 1 and len(list(marks.glob("done-*"))) == 1
    assert rec.metrics.steps == 1 and rec.metrics.bad_rows == 2


def test_malformed_metrics_do_not_fail_a_foreground_run(tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / "finisher.py"
    script.write_text(FINISHER.replace("time.sleep(4)", "pass"))
    p = start_launch(tmp_path / "home", "x", "--processes", "1", "--", str(script), str(marks))
    out, err = p.communicate(timeout=300)
    rec = json.loads(out)
    assert p.returncode == 0 and rec["status"] == "succeeded", err[-2000:]
    assert rec["metrics"]["bad_rows"] == 2 and rec["metrics"]["steps"] == 1


def frames_in_cardwise(stderr: str) -> list[str]:
    """The traceback frames of ``stderr`` that run this checkout's own code. A virtual environment may live
    inside the checkout (CI's ``.venv``): its files, the editable install's finder that site imports among
    them, are the interpreter's start, not cardwise's code."""
    ours = []
    for frame, line in re.findall(r'File "([^"]+)", line (\d+)', stderr):
        path = Path(frame)
        if path == ROOT / "cli" / "main.py" and int(line) <= HANDLER_LINE:
            continue  # the lines that set the handler run before it is set: no program can do better
        if path.is_relative_to(ROOT) and not path.is_relative_to(sys.prefix) and "site-packages" not in path.parts:
            ours.append(frame)
    return ours


# The line of cli/main.py that sets its Ctrl-C handler (found, so an edit above it moves it).
HANDLER_LINE = next(n for n, text in enumerate((ROOT / "cli" / "main.py").read_text().splitlines(), 1)
                    if "_signal.signal(_signal.SIGINT" in text)


def test_frames_in_cardwise_tell_the_checkout_from_its_venv():
    venv_frame = f'File "{Path(sys.prefix) / "lib" / "site-packages" / "__editable___cardwise_finder.py"}", line 7'
    site_frame = f'File "{ROOT / ".venv" / "lib" / "python3.11" / "site-packages" / "finder.py"}", line 7'
    before = f'File "{ROOT / "cli" / "main.py"}", line {HANDLER_LINE}'
    ours = f'File "{ROOT / "cli" / "main.py"}", line {HANDLER_LINE + 1}'
    assert frames_in_cardwise(f"Traceback\n  {venv_frame}\n  {site_frame}\n  {before}\n") == []
    assert frames_in_cardwise(f"Traceback\n  {site_frame}\n  {ours}\n") == [str(ROOT / "cli" / "main.py")]


def test_ctrl_c_while_a_command_starts_is_one_line_never_a_traceback(tmp_path):
    """SIGINT to a real `advise submit` at 16 delays spread over the time one uninterrupted submit takes
    here (its start, imports and parsing, is ~0.3 s unloaded, a few times that on a busy machine): it
    ends with "advise: interrupted" (exit 130), or queued the run already (exit 0), never with a
    traceback through cardwise's code (8 of 12 tries before), and leaves no run folder without a record.
    A signal that lands while the interpreter itself starts (before its handler is set: killed by the
    signal; or in its site and runpy imports, before any file of this checkout runs: a traceback of
    those alone) is Python's to report; such tries are counted apart and not judged."""
    home = tmp_path / "home"
    argv = [sys.executable, "-m", "cli.main", "submit", "--home", str(home), "--cpu", "--processes", "1", *TINY,
            "--recipe", "synthetic"]
    t0 = time.monotonic()  # one uninterrupted submit: the delays spread over its start, whatever the load
    assert subprocess.run(argv, capture_output=True, cwd=ROOT, timeout=300).returncode == 0
    whole = time.monotonic() - t0
    outcomes = {"interrupted": 0, "queued": 0, "before cardwise": 0}
    for i in range(16):
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        time.sleep(whole * i / 16)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=300)
        lines = [line for line in err.splitlines() if not line.startswith("advise: note:")]
        assert not frames_in_cardwise(err), (i, err[-2000:])
        if "Traceback" in err or (proc.returncode == -signal.SIGINT and not err):  # Python's startup
            outcomes["before cardwise"] += 1
            continue
        if proc.returncode == 0:
            assert out.startswith("queued run "), (i, out, err)
            outcomes["queued"] += 1
        else:
            assert proc.returncode == 130 and lines == ["advise: interrupted"], (i, proc.returncode, err)
            outcomes["interrupted"] += 1
    assert outcomes["interrupted"] >= 3, outcomes  # the tries that matter did land inside cardwise's start
    queued = {r.id for r in RunStore.open(home).list()}
    assert sorted(os.listdir(home / "runs")) == sorted(queued)  # an interrupted submit left no folder behind


@pytest.mark.parametrize("committed", [False, True])
def test_a_ctrl_c_inside_the_queueing_keeps_folder_and_record_together(tmp_path, monkeypatch, capsys, committed):
    """The race CI met once in the test above: the Ctrl-C landed after the run's INSERT committed, before
    ``RunStore.create`` returned, and the folder of a run that stayed queued was removed. Injected here at
    either side of the commit: before it, neither the record nor the folder stays; after it, both do, and a
    note names the queued run."""
    from cli.launch_plan import options_from_flags, plan_from_flags, target_from_flags
    from cli.main import build_parser
    from launcher.service import submit

    args = build_parser("submit").parse_args(["--cpu", "--processes", "1", *TINY, "--recipe", "synthetic"])
    plan, _ = plan_from_flags(args)
    real_get = RunStore._get

    def interrupted(self, db, run_id):  # the first read after the INSERT: where create's return is
        monkeypatch.setattr(RunStore, "_get", real_get)
        if committed:
            db.commit()  # the insert is durable: the signal lands once it is
        raise KeyboardInterrupt

    monkeypatch.setattr(RunStore, "_get", interrupted)
    home = tmp_path / "home"
    with pytest.raises(KeyboardInterrupt):
        submit(home, plan, target_from_flags(args, plan), options_from_flags(args, plan))
    queued = [r.id for r in RunStore.open(home).list()]
    assert sorted(os.listdir(home / "runs")) == sorted(queued) and len(queued) == int(committed)
    assert (f"run {queued[0]} was queued before the interrupt" in capsys.readouterr().err) if committed else True
