"""``advise submit --slurm`` against a real one-machine Slurm cluster (.ci/slurm-up.sh: munge,
slurmctld, slurmd; CPU-only, 2 CPUs, partition ``debug`` with MaxTime 1 h, no slurmdbd).

The jobs share the cluster's 2 CPUs, so the module orders them to overlap: the job killed by its
time limit (1 CPU, the slowest: Slurm's limits are whole minutes) is submitted first and checked
last; the failure, the pending job, the requeue and the cancel use the other CPU meanwhile; the
2-rank training run (2 CPUs) goes after it. Where Slurm cannot be installed or started, every test
here skips with the reason in one line; the refusals that need no cluster run everywhere. They run only
when asked (``CARDWISE_SLURM_TESTS=1``, set by ``.ci/run`` around ``.ci/slurm-up.sh`` and
``.ci/slurm-down.sh``): a plain ``pytest`` installs, starts and writes nothing outside its temp folders.
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
# What a job that trains here runs: the CPU plan's own sequence of 128 at micro-batch 4 costs ~1 CPU-s a step
# a rank, taken from the other jobs on the cluster's 2 CPUs; the Slurm path is the same at any size.
SMALL = ["--seq-len", "16", "--micro-batch", "2"]
HANG_GUARD_S = 600  # a hang guard, not a time limit (tests/waiting.py)


ENV_SLURM_TESTS = "CARDWISE_SLURM_TESTS"


def _cluster_reason() -> str | None:
    """None when the real-Slurm tests are asked for (``CARDWISE_SLURM_TESTS=1``, which ``.ci/run`` sets after
    ``.ci/slurm-up.sh``) and a cluster answers; else why they skip. Never installs or starts anything: a
    plain test run leaves the machine as it found it (the cluster is .ci/slurm-up.sh's, stopped again by
    .ci/slurm-down.sh)."""
    if os.environ.get(ENV_SLURM_TESTS) != "1":
        return (f"the real-Slurm tests run when asked: {ENV_SLURM_TESTS}=1 with a cluster up "
                "(.ci/run does both: .ci/slurm-up.sh as root, then .ci/slurm-down.sh)")
    if shutil.which("sinfo") is None:
        return "no `sinfo` on PATH (start one with .ci/slurm-up.sh, as root)"
    res = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, timeout=30)
    if res.returncode != 0 or not any(s in res.stdout for s in ("idle", "mix", "alloc")):
        return f"`sinfo` shows no usable node ({(res.stderr or res.stdout).strip()[:120] or 'no output'})"
    return None


@pytest.fixture(scope="module")
def cluster():
    reason = _cluster_reason()
    if reason is not None:
        pytest.skip(f"no Slurm cluster: {reason}")
    return subprocess.run(["sinfo", "-V"], capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """The module's run store; every job recorded in it is cancelled at the end (a failed test leaves none running)."""
    path = tmp_path_factory.mktemp("slurm-home")
    yield path
    if (path / "runs.sqlite").exists() and shutil.which("scancel"):
        from launcher.store import RunStore

        jobs = [r.slurm["job_id"] for r in RunStore.open(path).list() if r.slurm]
        if jobs:
            subprocess.run(["scancel", *jobs], capture_output=True, timeout=60)


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
    """Poll ``advise show RUN --json`` until ``pred`` holds. In this process, through the CLI's own
    ``main``: the same code path as ``show`` without a Python start per poll (~0.4 s of CPU each, which a
    0.1 s poll took from the jobs on the cluster's 2 CPUs for minutes)."""
    import contextlib
    import io

    def look():
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc = main(["show", rid, "--json", "--home", str(home)])
        assert rc == 0, out.getvalue()
        rec = json.loads(out.getvalue())
        return rec if pred(rec) else None
    return wait_for(look, HANG_GUARD_S, f"run {rid}: {what}", every=0.5)


def ended(rec: dict) -> bool:
    return rec["status"] in ("succeeded", "failed", "cancelled")


@pytest.fixture(scope="module")
def timeout_run(cluster, home):
    """Submitted first (1 CPU): a training run far longer than its 1-minute limit, checkpointing every
    10 steps; Slurm kills it at about 60-70 s, and --resume continues it from its last checkpoint.
    The tiny classifier paced at 0.2 s a step (tests/scripts/slow_steps.py) holds its Slurm CPU for that
    minute without computing through it: the synthetic recipe at full speed took ~60 CPU-s from the
    other jobs and tests on the machine's 2 cores."""
    return submit(home, *CPU1, "--max-steps", "1000000", "--checkpoint-every", "10", "--no-final-weights",
                  "--time", "1", "--", str(SCRIPTS / "slow_steps.py"), "--step-s", "0.2")


def test_a_plain_test_run_starts_no_cluster(tmp_path, monkeypatch):
    """Without CARDWISE_SLURM_TESTS the module asks nothing of the machine: no slurm-up.sh (which, as root,
    installed munge and Slurm, wrote /etc/slurm/slurm.conf and left three daemons running), not even
    `sinfo`. Every program the check could start is a stub here that leaves a mark."""
    for name in ("bash", "sh", "sinfo", "apt-get", "slurmctld", "slurmd", "munged"):
        (tmp_path / name).write_text(f"#!/bin/sh\necho {name} >> {tmp_path}/ran\nexit 1\n")
        (tmp_path / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.delenv(ENV_SLURM_TESTS, raising=False)
    reason = _cluster_reason()
    assert reason is not None and f"{ENV_SLURM_TESTS}=1" in reason
    assert not (tmp_path / "ran").exists(), (tmp_path / "ran").read_text()


# ------------------------------------------------------------------ parsing Slurm's answers (no cluster needed)
def _stub(bindir: Path, name: str, out: str, rc: int = 0) -> None:
    (bindir / name).write_text(f"#!/bin/bash\ncat <<'EOF'\n{out}\nEOF\nexit {rc}\n")
    (bindir / name).chmod(0o755)


@pytest.mark.parametrize("text, minutes", [("1", 1), ("1:30", 2), ("2:00:00", 120), ("1-00", 1440),
                                           ("1-02:03", 1563), ("0-00:00:01", 1), ("UNLIMITED", None)])
def test_slurm_time_formats_in_minutes(text, minutes):
    from launcher.slurm_jobs import minutes as to_minutes

    assert to_minutes(text) == minutes


def test_partition_checks_read_sinfo(tmp_path, monkeypatch):
    """A stub cluster: a CPU partition and a GPU partition of two node kinds (sinfo prints one line each)."""
    from advisor.errors import UserError
    from cli.launch_plan import plan_from_flags
    from cli.main import build_parser
    from launcher.slurm_jobs import check_partition, partitions

    _stub(tmp_path, "sinfo", "cpu*|1:00:00|64|(null)|10\ngpu|2-00:00:00|32|gpu:a100:4(S:0-1)|4\n"
                             "gpu|2-00:00:00|48|gpu:h100:8|2")
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    by = {p.name: p for p in partitions()}
    assert by["cpu"].default and by["cpu"].max_time_min == 60 and by["cpu"].gpus_per_node == 0
    assert by["gpu"].gpus_per_node == 8 and by["gpu"].cpus_per_node == 48 and by["gpu"].nodes == 6
    plan, _ = plan_from_flags(build_parser("launch").parse_args(CPU1))
    assert check_partition(plan, partition=None, time_limit="30", gpus_per_node=0, cpus_per_task=1).name == "cpu"
    assert check_partition(plan, partition="gpu", time_limit="1-12", gpus_per_node=8, cpus_per_task=48).name == "gpu"
    for kw, needle in [({"partition": "gpu", "gpus_per_node": 16}, "needs 16 GPU(s) per node"),
                       ({"partition": "cpu", "gres": "gpu:a100:2"}, "needs 2 GPU(s) per node; partition cpu's nodes have 0"),
                       ({"partition": "cpu", "time_limit": "1:00:01"}, "beyond partition cpu's 60 min"),
                       ({"partition": "x"}, "use one of: cpu*, gpu")]:
        args = {"partition": None, "time_limit": None, "gpus_per_node": 0, "cpus_per_task": 1, **kw}
        with pytest.raises(UserError, match=needle.replace("(", r"\(").replace(")", r"\)").replace("*", r"\*")):
            check_partition(plan, **args)


@pytest.mark.parametrize("state, reason, exit_, status, code", [
    ("PENDING", "Priority", "0:0", "queued", None), ("RUNNING", "None", "0:0", "running", None),
    ("COMPLETED", "None", "0:0", "succeeded", 0), ("TIMEOUT", "TimeLimit", "0:15", "failed", -15),
    ("OUT_OF_MEMORY", "OutOfMemory", "0:125", "failed", -125), ("NODE_FAIL", "NodeDown", "0:0", "failed", 0),
    ("CANCELLED", "None", "0:15", "cancelled", -15), ("PREEMPTED", "None", "0:0", "failed", 0)])
def test_slurm_states_map_to_statuses(tmp_path, monkeypatch, state, reason, exit_, status, code):
    from launcher.slurm_jobs import SlurmJob, refresh_one
    from launcher.store import RunStore

    _stub(tmp_path, "scontrol", f"JobId=42 JobName=x JobState={state} Reason={reason} Dependency=(null) Requeue=1 "
                                f"Restarts=0 BatchFlag=1 ExitCode={exit_} TimeLimit=00:01:00 StartTime=2026-12-05T04:15:50 "
                                "EndTime=2026-12-05T04:16:50 Partition=debug")
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    store = RunStore.open(tmp_path / "home")
    rec = store.create(label="x")
    rec = store.update(rec.id, slurm=SlurmJob(job_id="42").model_dump())
    got = refresh_one(store, rec)
    assert got.status == status and got.slurm["state"] == state and store.get(rec.id).status == status
    assert got.exit_code == code
    if status in ("succeeded", "failed", "cancelled"):  # Slurm's clock, not when the record was read
        assert got.ended - got.started == 60
    if state in ("TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL", "PREEMPTED"):
        assert got.error.startswith(f"Slurm {state}: ")


def test_a_job_slurm_forgot_is_not_given_an_outcome(tmp_path, monkeypatch):
    from launcher.slurm_jobs import SlurmJob, refresh_one, status_text
    from launcher.store import RunStore

    _stub(tmp_path, "scontrol", "slurm_load_jobs error: Invalid job id specified", rc=1)
    _stub(tmp_path, "sacct", "Slurm accounting storage is disabled", rc=1)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    store = RunStore.open(tmp_path / "home")
    rec = store.transition(store.create(label="x").id, "running")
    rec = store.update(rec.id, slurm=SlurmJob(job_id="42", state="RUNNING").model_dump())
    got = refresh_one(store, rec)
    assert got.status == "running" and status_text(got) == "running (unknown to Slurm now)"
    assert "MinJobAge" in got.error


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
    """Byte for byte, and the user's arguments reach the ranks literally under Slurm (0 expansions)."""
    script = tmp_path / "argv then fail.py"
    script.write_text("import json, os, sys\n"
                      "open(os.path.join(os.environ['CARDWISE_RUN_DIR'], 'argv.json'), 'w').write(json.dumps(sys.argv[1:]))\n"
                      "sys.exit(3)\n")
    literal = ["$HOME", "a b", "$(touch PWNED)", "`touch PWNED2`", "it's"]
    argv = [*CPU1, "--max-steps", "3", "--checkpoint-every", "2", "--", str(script), *literal]
    emitted = advise(home, "launch", "--emit", "slurm", *argv, cwd=tmp_path)
    assert emitted.returncode == 0, emitted.stderr
    res = advise(home, "submit", "--slurm", "--json", *argv, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    run = json.loads(res.stdout)
    assert Path(run["script"]).read_text() == emitted.stdout
    rec = until(home, run["id"], ended, "the emitted job to end")
    assert rec["slurm"]["state"] == "FAILED" and rec["exit_code"] == 3  # it ran, and failed as the script does
    assert json.loads((Path(run["run_dir"]) / "argv.json").read_text()) == literal
    assert not list(tmp_path.glob("PWNED*")) and not list(Path(run["run_dir"]).glob("PWNED*"))


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


# ------------------------------------------------------------------ the wizard's launch screen: ctrl+s
def _wizard_submit(store, steps: str) -> tuple[str, object]:
    """Pick a model, 1 CPU process and ``steps`` on the launch screen, press ctrl+s; (status line, app)."""
    from advisor.plan import ModelRef
    from tests.tui_pilot import SIZE, cpu_app, run, text_of, type_into
    from tests.tui_pilot import wait_for as pilot_wait
    from tui import demo
    from tui.state import HardwareChoice, WizardState, Workload

    # seq 16 and micro-batch 2 (the CPU plan's own 128 x 4 costs ~1 CPU-s a step on the 2 shared cores)
    state = WizardState(hardware=HardwareChoice.initial(demo.cpu_machine()), model=ModelRef(name="mini-transformer"),
                        workload=Workload(seq_len=16))
    app = cpu_app(store, state=state)
    out = {}

    async def flow():
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f6")
            await type_into(pilot, app, "#micro", "2")
            await type_into(pilot, app, "#procs", "1")
            await type_into(pilot, app, "#steps", steps)
            await pilot.press("ctrl+s")
            await pilot_wait(pilot, lambda: "submitting" not in text_of(app, "#run-status"), timeout=120)
            out["status"] = text_of(app, "#run-status")
            assert not app.screen.running  # nothing runs here

    run(flow())
    return out["status"], app


def test_wizard_refuses_slurm_without_sbatch(tmp_path, monkeypatch):
    from launcher.store import RunStore

    monkeypatch.setenv("PATH", str(tmp_path))
    store = RunStore.open(tmp_path / "home")
    status, _ = _wizard_submit(store, "3")
    assert "no `sbatch` on PATH" in status
    assert store.list() == []


def test_wizard_submits_the_plan_to_slurm(cluster, home, timeout_run):
    from launcher.store import RunStore

    store = RunStore.open(home)
    before = {r.id for r in store.list()}
    status, _ = _wizard_submit(store, "4")
    new = [r for r in store.list() if r.id not in before]
    assert len(new) == 1 and f"submitted run {new[0].id} as Slurm job {new[0].slurm['job_id']}" in status
    rec = until(home, new[0].id, ended, "the wizard's job to end")
    assert rec["status"] == "succeeded" and rec["slurm"]["state"] == "COMPLETED" and rec["metrics"]["steps"] == 4

    from textual.widgets import DataTable

    from tests.tui_pilot import cpu_app, run, SIZE

    app = cpu_app(store)

    async def runs_screen():
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("f7")
            table = app.screen.query_one("#runs-table", DataTable)
            for _ in range(100):
                if table.row_count:
                    break
                await pilot.pause(0.1)
            assert str(table.get_row(new[0].id)[1]) == "succeeded (COMPLETED)"

    run(runs_screen())


def test_time_limit_kill_is_recorded_as_timeout(cluster, home, timeout_run):
    rec = until(home, timeout_run["id"], ended, "Slurm's time limit")
    assert rec["status"] == "failed" and rec["slurm"]["state"] == "TIMEOUT"
    assert "time limit" in rec["error"] and "--time" in rec["error"]
    assert "failed (TIMEOUT)" in advise(home, "runs").stdout


def test_recommended_cpu_plan_trains_to_the_end_under_slurm(cluster, home, timeout_run):
    """The 2-rank gloo run: one Slurm task runs `accelerate launch`, rendezvous from Slurm's environment."""
    run = submit(home, *CPU2, *SMALL, "--recipe", "synthetic", "--max-steps", "4")
    rec = until(home, run["id"], ended, "the training job to end")
    assert rec["status"] == "succeeded" and rec["slurm"]["state"] == "COMPLETED" and rec["exit_code"] == 0
    m = rec["metrics"]
    assert m["steps"] == 4 and m["ranks"] == 2 and m["last_loss"] is not None
    script = Path(run["script"]).read_text()
    assert "--cpus-per-task=2" in script and '--machine_rank "$SLURM_NODEID"' in script
    assert "% 10000" in script  # the rendezvous port comes from the job id
    assert "4 steps, 2 rank(s)" in advise(home, "show", run["id"]).stdout


def test_resume_resubmits_from_the_last_checkpoint(cluster, home, timeout_run):
    from launcher.checkpoints import latest, read_meta

    until(home, timeout_run["id"], ended, "Slurm's time limit")
    ckpt = latest(timeout_run["run_dir"])
    assert ckpt is not None, "the timed-out run saved no checkpoint in its minute"
    step = read_meta(ckpt)["step"]
    res = advise(home, "submit", "--slurm", "--resume", timeout_run["id"], "--time", "5", "--json")
    assert res.returncode == 0, res.stderr
    run = json.loads(res.stdout)
    assert f"export CARDWISE_RESUME={ckpt}" in Path(run["script"]).read_text()
    rec = until(home, run["id"], lambda r: (r["metrics"] or {}).get("steps", 0) > step, "steps past the checkpoint")
    assert rec["resumed_from"] == timeout_run["id"] and rec["slurm"]["time_limit"] == "00:05:00"
    # where the job's script started (tests/scripts/slow_steps.py writes "<pid> <step>"): at the checkpoint, not 0
    assert [int(line.split()[1]) for line in (Path(run["run_dir"]) / "starts.txt").read_text().splitlines()] == [step]
    assert advise(home, "cancel", run["id"], "--wait").returncode == 0
    assert show(home, run["id"])["status"] == "cancelled"
