"""``advise submit --slurm`` against a real one-machine Slurm cluster (.ci/slurm-up.sh: munge,
slurmctld, slurmd; CPU-only, 2 CPUs, partition ``debug`` with MaxTime 1 h, no slurmdbd).

The jobs share the cluster's 2 CPUs, so the module orders them to overlap: the job killed by its
time limit (1 CPU, the slowest: Slurm's limits are whole minutes) is submitted first and checked
last; the failure, the pending job, the requeue and the cancel use the other CPU meanwhile; the
2-rank training run (2 CPUs) goes after it. Where Slurm cannot be installed or started, every test
here skips with the reason in one line; the refusals that need no cluster run everywhere.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from cli.main import main
from tests.waiting import wait_for

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "scripts"
CPU1 = ["--cpu", "--processes", "1", "--model", "mini-transformer"]
CPU2 = ["--cpu", "--processes", "2", "--model", "mini-transformer"]
HANG_GUARD_S = 600  # a hang guard, not a time limit (tests/waiting.py)


def _cluster_reason() -> str | None:
    """None when a Slurm cluster answers (starting the test cluster if this machine can), else why not."""
    def answers() -> bool:
        if shutil.which("sinfo") is None:
            return False
        res = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=30)
        return res.returncode == 0 and any(s in res.stdout for s in ("idle", "mix", "alloc"))

    if answers():
        return None
    res = subprocess.run(["bash", str(ROOT / ".ci" / "slurm-up.sh")], capture_output=True, text=True, timeout=900)
    if answers():
        return None
    said = [line for line in res.stderr.splitlines() if line.startswith("slurm-up:")]
    return (said[-1] if said else "slurm-up.sh: no cluster").removeprefix("slurm-up: ")


@pytest.fixture(scope="module")
def cluster():
    reason = _cluster_reason()
    if reason is not None:
        pytest.skip(f"no Slurm cluster: {reason}")
    return subprocess.run(["sinfo", "-V"], capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    return tmp_path_factory.mktemp("slurm-home")


def advise(home: Path, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "CARDWISE_HOME": str(home), "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "cli.main", *argv], capture_output=True, text=True, env=env,
                          cwd=cwd or ROOT, timeout=300)


def submit(home: Path, *argv: str) -> dict:
    res = advise(home, "submit", "--slurm", "--json", *argv)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def show(home: Path, rid: str) -> dict:
    res = advise(home, "show", rid, "--json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def until(home: Path, rid: str, pred, what: str) -> dict:
    def look():
        rec = show(home, rid)
        return rec if pred(rec) else None
    return wait_for(look, HANG_GUARD_S, f"run {rid}: {what}")


def ended(rec: dict) -> bool:
    return rec["status"] in ("succeeded", "failed", "cancelled")


@pytest.fixture(scope="module")
def timeout_run(cluster, home):
    """Submitted first (1 CPU): a sleeper with a 1-minute limit, which Slurm kills at about 60-70 s."""
    return submit(home, *CPU1, "--time", "1", "--", str(SCRIPTS / "sleeper.py"))


# ------------------------------------------------------------------ refusals: one line, exit 2, nothing recorded
def _nothing_recorded(home: Path) -> bool:
    return not (home / "runs").exists() or not any((home / "runs").iterdir())


def test_refused_without_sbatch_on_path(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PATH", str(tmp_path))  # python is sys.executable; nothing else is needed
    home = tmp_path / "home"
    rc = main(["submit", "--slurm", *CPU1, "--recipe", "synthetic", "--home", str(home)])
    err = capsys.readouterr().err
    assert rc == 2 and "no `sbatch` on PATH" in err and "fix:" in err and len(err.strip().splitlines()) == 2
    assert _nothing_recorded(home)


def test_slurm_flags_without_slurm_are_refused(capsys):
    assert main(["submit", *CPU1, "--recipe", "synthetic", "--partition", "debug"]) == 2
    assert "add --slurm" in capsys.readouterr().err
    assert main(["launch", *CPU1, "--recipe", "synthetic", "--time", "10", "--dry-run"]) == 2
    assert "add --emit slurm" in capsys.readouterr().err


@pytest.mark.parametrize("argv, needle", [
    (["--partition", "nosuch", *CPU1, "--recipe", "synthetic"], "partition 'nosuch' does not exist"),
    (["--gpu", "H100", "--gpus", "2", "--model", "gpt2", "--recipe", "synthetic"], "GPU(s) per node; partition debug's nodes have 0"),
    (["--time", "2:00:00", *CPU1, "--recipe", "synthetic"], "beyond partition debug's 60 min"),
    (["--nodes", "2", *CPU1, "--recipe", "synthetic"], "needs 2 nodes"),
    (["--cpu", "--processes", "2", "--num-workers", "2", "--model", "mini-transformer", "--recipe", "synthetic"],
     "needs 6 CPUs"),
])
def test_refused_before_submitting(cluster, tmp_path, capsys, argv, needle):
    home = tmp_path / "home"
    jobs_before = subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i"], capture_output=True, text=True).stdout
    rc = main(["submit", "--slurm", "--home", str(home), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "fix:" in err, err
    assert _nothing_recorded(home)
    assert subprocess.run(["squeue", "-h", "-t", "all", "-o", "%i"], capture_output=True, text=True).stdout == jobs_before


# ------------------------------------------------------------------ the jobs
def test_failed_job_is_recorded_as_slurm_reports_it(cluster, home, timeout_run):
    run = submit(home, *CPU1, "--", str(SCRIPTS / "crash.py"))
    rec = until(home, run["id"], ended, "the failing job to end")
    assert rec["status"] == "failed" and rec["slurm"]["state"] == "FAILED" and rec["exit_code"] == 3
    assert rec["error"].startswith("Slurm FAILED: rank 0 exited with exit code 3")
    logs = advise(home, "logs", run["id"])
    assert "crashing on purpose" in logs.stdout
    table = advise(home, "runs").stdout
    assert f"{run['id']}  failed (FAILED)" in table


def test_emit_prints_the_script_submit_submits(cluster, home, timeout_run, tmp_path):
    argv = [*CPU1, "--max-steps", "3", "--checkpoint-every", "2", "--", str(SCRIPTS / "crash.py"), "$HOME", "a b"]
    emitted = advise(home, "launch", "--emit", "slurm", *argv)
    assert emitted.returncode == 0, emitted.stderr
    run = submit(home, *argv)
    assert Path(run["script"]).read_text() == emitted.stdout
    rec = until(home, run["id"], ended, "the emitted job to end")
    assert rec["slurm"]["state"] == "FAILED"  # it ran: crash.py exits 3 under Slurm as it does here


def test_pending_job_shows_its_reason_and_cancels(cluster, home, timeout_run):
    """2 CPUs wanted while the time-limit job holds one: Slurm keeps it PENDING (Resources)."""
    assert show(home, timeout_run["id"])["status"] == "running" or until(
        home, timeout_run["id"], lambda r: r["status"] == "running", "the time-limit job to start")
    run = submit(home, *CPU2, "--recipe", "synthetic", "--max-steps", "5")
    rec = until(home, run["id"], lambda r: r["slurm"].get("reason") in ("Resources", "Priority"), "a pending reason")
    assert rec["status"] == "queued" and rec["slurm"]["state"] == "PENDING"
    assert f"queued (PENDING: {rec['slurm']['reason']})" in advise(home, "runs").stdout
    res = advise(home, "cancel", run["id"])
    assert res.returncode == 0 and "CANCELLED" in res.stdout, res.stderr
    rec = show(home, run["id"])
    assert rec["status"] == "cancelled" and rec["slurm"]["state"] == "CANCELLED"


def test_requeued_job_shows_as_such_then_cancel_stops_it(cluster, home, timeout_run):
    run = submit(home, *CPU1, "--", str(SCRIPTS / "sleeper.py"))
    rdir = Path(run["run_dir"])
    wait_for(lambda: (rdir / "pids-0").exists(), HANG_GUARD_S, "the sleeper to start under Slurm")
    job = run["slurm_job"]
    subprocess.run(["scontrol", "requeue", job], check=True)
    rec = until(home, run["id"], lambda r: r["slurm"]["restarts"] == 1 and r["status"] == "queued", "the requeue")
    assert rec["slurm"]["state"] == "PENDING" and "requeued 1x" in advise(home, "runs").stdout
    (rdir / "pids-0").unlink()
    subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], check=True)  # Slurm holds requeues 2 min
    wait_for(lambda: (rdir / "pids-0").exists(), HANG_GUARD_S, "the requeued sleeper to start again")
    rec = until(home, run["id"], lambda r: r["status"] == "running", "the second start")
    pids = [int(p) for p in (rdir / "pids-0").read_text().split()]
    res = advise(home, "cancel", run["id"], "--wait")
    assert res.returncode == 0, res.stderr
    rec = show(home, run["id"])
    assert rec["status"] == "cancelled" and rec["slurm"]["state"] == "CANCELLED" and rec["slurm"]["restarts"] == 1
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_time_limit_kill_is_recorded_as_timeout(cluster, home, timeout_run):
    rec = until(home, timeout_run["id"], ended, "Slurm's time limit")
    assert rec["status"] == "failed" and rec["slurm"]["state"] == "TIMEOUT"
    assert "time limit" in rec["error"] and "--time" in rec["error"]
    assert "failed (TIMEOUT)" in advise(home, "runs").stdout


def test_recommended_cpu_plan_trains_to_the_end_under_slurm(cluster, home, timeout_run):
    """The 2-rank gloo run: one Slurm task runs `accelerate launch`, rendezvous from Slurm's environment."""
    run = submit(home, *CPU2, "--recipe", "synthetic", "--max-steps", "12")
    rec = until(home, run["id"], ended, "the training job to end")
    assert rec["status"] == "succeeded" and rec["slurm"]["state"] == "COMPLETED" and rec["exit_code"] == 0
    m = rec["metrics"]
    assert m["steps"] == 12 and m["ranks"] == 2 and m["last_loss"] is not None
    script = Path(run["script"]).read_text()
    assert "--cpus-per-task=2" in script and '--machine_rank "$SLURM_NODEID"' in script
    assert "% 10000" in script  # the rendezvous port comes from the job id
    assert "12 steps, 2 rank(s)" in advise(home, "show", run["id"]).stdout
