"""Real launches on CPU: accelerate launch -> torchrun -> gloo ranks, as users run them.

Tiny on purpose (2 cores): mini-transformer at sequence length 16-32, micro-batches of 2-4,
a handful of steps. Each test checks the run record, the run directory and the processes.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

from cli.main import main
from ports import free_port
from waiting import reaped, stop_and_collect, wait_for

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = Path(__file__).with_name("scripts")
TINY = ["--model", "mini-transformer", "--seq-len", "16"]


def launch_json(capsys, *argv: str) -> tuple[int, dict]:
    rc = main(["launch", "--json", *argv])
    return rc, json.loads(capsys.readouterr().out)


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
    """One 2-process synthetic run shared by the tests that inspect it."""
    home = tmp_path_factory.mktemp("home")
    rc = main(["launch", "--cpu", "--processes", "2", *TINY, "--micro-batch", "2",
               "--recipe", "synthetic", "--max-steps", "10", "--home", str(home), "--json"])
    return rc, home


def test_two_process_gloo_run(ddp_run):
    from launcher.store import RunStore

    rc, home = ddp_run

    (rec,) = RunStore.open(home).list()
    assert rc == 0 and rec.status == "succeeded" and rec.exit_code == 0
    run = Path(rec.run_dir)
    finals = [json.loads((run / f"final-rank{r}.json").read_text()) for r in (0, 1)]
    assert [f["world_size"] for f in finals] == [2, 2] and [f["steps"] for f in finals] == [10, 10]
    assert finals[0]["param_sha256"] == finals[1]["param_sha256"]  # DDP kept the replicas identical
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert {r["rank"] for r in rows} == {0, 1}
    assert set(rows[0]) >= {"step", "loss", "samples_per_s", "tokens_per_s", "peak_gib", "rank", "time"}
    m = rec.metrics
    assert m.ranks == 2 and m.steps == 10 and m.last_loss < m.first_loss and m.samples_per_s > 0
    assert [(a.micro_batch, a.grad_accum, a.status) for a in rec.attempts] == [(2, 1, "succeeded")]
    for name in ("plan.json", "accelerate_config.yaml", "command.json"):
        assert (run / name).is_file()
    logs = sorted(glob.glob(str(run / "attempt-1" / "ranks" / "*" / "attempt_0" / "*" / "stdout.log")))
    assert len(logs) == 2  # per-rank logs from torchrun's --tee/--log_dir


def test_runs_and_show(ddp_run, capsys):
    _, home = ddp_run
    assert main(["runs", "--home", str(home), "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["status"] == "succeeded"
    assert main(["show", listed["id"][:4], "--home", str(home), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["id"] == listed["id"] and shown["attempts"][0]["micro_batch"] == 2
    assert main(["runs", "--home", str(home)]) == 0 and listed["id"] in capsys.readouterr().out


def test_oom_retry_halves_the_micro_batch_and_goes_on_from_the_last_checkpoint(tmp_path, capsys):
    """The OOM comes after step 3's checkpoint: the retry halves the micro-batch and doubles the accumulation
    (the same global batch and LR), fills the script's placeholders with them, and goes on from that checkpoint."""
    rc, rec = launch_json(capsys, "--cpu", *TINY, "--micro-batch", "4", "--max-steps", "5", "--checkpoint-every", "1",
                          "--no-final-weights", "--home", str(tmp_path),
                          "--", str(SCRIPTS / "oom_after_checkpoint.py"), "--limit", "2", "--oom-at", "3",
                          "--micro-batch", "{micro_batch}", "--grad-accum", "{grad_accum}", "--lr", "{lr}")
    assert rc == 0 and rec["status"] == "succeeded", rec
    assert [(a["micro_batch"], a["grad_accum"], a["status"]) for a in rec["attempts"]] == [(4, 1, "oom"), (2, 2, "succeeded")]
    # mini-transformer's recipe, 5e-4 at 64, sqrt-scaled for AdamW to batch 4 (rules/data/defaults.toml)
    assert rec["plan"]["global_batch"] == 4 and rec["plan"]["lr"] == pytest.approx(1.25e-4)
    run = Path(rec["run_dir"])
    argv2 = json.loads((run / "argv-attempt2-rank0.json").read_text())
    assert argv2 == ["--limit", "2", "--oom-at", "3", "--micro-batch", "2", "--grad-accum", "2", "--lr", "0.000125"]
    assert json.loads((run / "start-attempt2.json").read_text()) == 3  # not step 0: steps 1-3 are the same samples
    # Accelerate's micro-batch counter came back from the checkpoint as 3 (3 steps x 1): every resumed
    # step must still end on its own last micro-batch, not one micro-batch early
    assert json.loads((run / "synced-attempt2.json").read_text()) == [True, True]
    assert rec["metrics"]["steps"] == 5


def test_oom_retry_of_a_no_accumulation_plan_lowers_the_batch_and_starts_apart(tmp_path, capsys):
    """A plan carrying node H's no-accumulation compromise: the retry halves the micro-batch with
    accumulation 1 and a smaller global batch (and says so) instead of re-creating the accumulation; its
    steps are of another batch, so it starts again from step 0, the first attempt's checkpoints kept apart."""
    from advisor.config import TrainConfig
    from advisor.plan import ModelRef, Plan
    from launcher.checkpoints import latest, read_meta
    from launcher.store import RunStore

    plan = Plan(model=ModelRef(name="mini-transformer"), config=TrainConfig(micro_batch=4, seq_len=16, precision="fp32"),
                cpu=True, global_batch=4, lr=4e-4, base_lr=4e-4, base_batch=4, no_accumulation=True)
    plan.save(tmp_path / "plan.json")
    rc = main(["launch", "--plan", str(tmp_path / "plan.json"), "--max-steps", "3", "--checkpoint-every", "1",
               "--no-final-weights", "--home", str(tmp_path), "--", str(SCRIPTS / "oom_after_checkpoint.py"), "--limit", "2",
               "--micro-batch", "{micro_batch}", "--grad-accum", "{grad_accum}", "--lr", "{lr}"])
    out = capsys.readouterr().out
    assert "retrying with micro-batch 2 and no accumulation" in out  # as it happens
    assert "attempt 2: retrying with micro-batch 2" in out  # and in the summary
    (stored,) = RunStore.open(tmp_path).list()
    rec = stored.model_dump(mode="json")
    assert rc == 0 and rec["status"] == "succeeded"
    got = [(a["micro_batch"], a["grad_accum"], a["global_batch"], a["status"]) for a in rec["attempts"]]
    assert got == [(4, 1, 4, "oom"), (2, 1, 2, "succeeded")]
    assert "no-accumulation" in rec["attempts"][1]["note"] and "from 4 to 2" in rec["attempts"][1]["note"]
    assert rec["plan"]["global_batch"] == 2 and rec["plan"]["lr"] == pytest.approx(2e-4)
    run = Path(rec["run_dir"])
    argv2 = json.loads((run / "argv-attempt2-rank0.json").read_text())
    assert argv2 == ["--limit", "2", "--micro-batch", "2", "--grad-accum", "1", "--lr", "0.0002"]
    assert json.loads((run / "start-attempt2.json").read_text()) == 0  # step 2 of batch 4 is not step 2 of batch 2
    assert read_meta(run / "attempt-1" / "checkpoints" / "step-00000002")["micro_batch"] == 4  # kept, apart
    assert read_meta(latest(run))["micro_batch"] == 2 and read_meta(latest(run))["step"] == 3  # the run's own


def test_oom_gives_up_at_the_limit(tmp_path, capsys):
    rc, rec = launch_json(capsys, "--cpu", *TINY, "--micro-batch", "4", "--max-oom-retries", "0", "--home", str(tmp_path),
                          "--", str(SCRIPTS / "oom_train.py"), "--micro-batch", "{micro_batch}", "--grad-accum", "1")
    assert rc == 1 and rec["status"] == "failed" and "out of GPU memory" in rec["error"]
    assert [a["status"] for a in rec["attempts"]] == ["oom"]


def test_crashing_rank_fails_the_run(tmp_path, capsys):
    rc, rec = launch_json(capsys, "--cpu", "--processes", "2", *TINY, "--home", str(tmp_path), "--", str(SCRIPTS / "crash.py"))
    assert not glob.glob(os.path.join(rec["run_dir"], "survived-*"))  # rank 0 sleeps 10 min: torchrun ended it
    assert rc == 1 and rec["status"] == "failed" and rec["exit_code"] == 3
    assert "rank 1" in rec["error"]
    pids = [int(Path(p).read_text()) for p in glob.glob(os.path.join(rec["run_dir"], "pid-*"))]
    assert len(pids) == 2 and not any(alive(p) for p in pids)


# Ctrl-C (SIGINT) of a 2-rank launch, with the same checks: test_faults' Ctrl-C test, which launches it anyway
@pytest.mark.parametrize("sig, procs", [(signal.SIGTERM, "1")])
def test_cancel_stops_every_process(tmp_path, sig, procs):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, "-m", "cli.main", "launch", "--cpu", "--processes", procs, *TINY,
                          "--home", str(tmp_path), "--json", "--", str(SCRIPTS / "sleeper.py")],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    with reaped(p):
        wait_for(lambda: len(glob.glob(str(tmp_path / "runs" / "*" / "pids-*"))) >= int(procs) or p.poll() is not None,
                 300, "every rank's pids file")
        assert p.poll() is None, p.stderr.read()
        tree = psutil.Process(p.pid).children(recursive=True)
        pids = [int(x) for f in glob.glob(str(tmp_path / "runs" / "*" / "pids-*")) for x in Path(f).read_text().split()]
        out, err = stop_and_collect(p, sig, timeout=600)
    rec = json.loads(out)
    assert p.returncode == 130 and rec["status"] == "cancelled", err
    assert len(pids) == 2 * int(procs)  # each rank and its own child
    assert not [q.pid for q in tree if alive(q.pid)] and not any(alive(x) for x in pids)


def test_ctrl_c_between_recording_and_starting_cancels_the_record(tmp_path, capsys, monkeypatch):
    """A SIGINT right after the run is recorded: the record ends cancelled, nothing is left queued for
    a service to claim, and no rank starts."""
    import launcher.home

    recorded = launcher.home.new_run

    def new_run_then_ctrl_c(*a, **kw):
        out = recorded(*a, **kw)
        os.kill(os.getpid(), signal.SIGINT)
        return out

    monkeypatch.setattr(launcher.home, "new_run", new_run_then_ctrl_c)
    rc, rec = launch_json(capsys, "--cpu", *TINY, "--home", str(tmp_path), "--", str(SCRIPTS / "sleeper.py"))
    assert rc == 130 and rec["status"] == "cancelled"
    from launcher.store import RunStore

    assert [r.status for r in RunStore.open(tmp_path).list()] == ["cancelled"]
    assert not glob.glob(os.path.join(rec["run_dir"], "pids-*"))


def test_two_nodes_on_localhost(tmp_path):
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    nodes = [subprocess.Popen([sys.executable, "-m", "cli.main", "launch", "--cpu", "--processes", "1",
                               "--nodes", "2", "--node-rank", str(r), "--main-address", "127.0.0.1", "--main-port", str(port),
                               *TINY, "--micro-batch", "2", "--max-steps", "3", "--home", str(tmp_path / f"node{r}"),
                               "--json", "--", str(SCRIPTS / "slow_steps.py"), "--step-s", "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for r in (0, 1)]
    outs = [n.communicate(timeout=600) for n in nodes]  # a hang guard
    recs = [json.loads(o) for o, _ in outs]
    assert [r["status"] for r in recs] == ["succeeded", "succeeded"], [e[-2000:] for _, e in outs]
    finals = [json.loads((Path(r["run_dir"]) / f"final-rank{i}.json").read_text()) for i, r in enumerate(recs)]
    assert [f["world_size"] for f in finals] == [2, 2] and [f["rank"] for f in finals] == [0, 1]
    assert finals[0]["param_sha256"] == finals[1]["param_sha256"]
    cfg = (Path(recs[1]["run_dir"]) / "accelerate_config.yaml").read_text()
    assert "machine_rank: 1" in cfg and "num_machines: 2" in cfg and f"main_process_port: {port}" in cfg


def test_text_classification_recipes_shipped_sample_trains_both_labels():
    """The recipe's default --data, read as each rank reads it (no process: the recipe's real 2-rank run on a
    CSV, with the labels in its final record and the held-out accuracy, is test_recipes_data's)."""
    from launcher.recipes import text_rows
    from launcher.recipes.text_classification import RowStream

    n_rows, names = text_rows.scan(text_rows.SAMPLE, 2)
    assert names == ["negative", "positive"]
    text_rows.check_enough(n_rows, text_rows.SAMPLE, micro_batch=4, world=1)
    labels = {n: i for i, n in enumerate(names)}
    every = text_rows.held_out_every()
    train = list(RowStream(text_rows.SAMPLE, labels, 48, 0, 1, held_out=False, every=every))
    held = list(RowStream(text_rows.SAMPLE, labels, 48, 0, 1, held_out=True, every=every, shuffle=False))
    assert len(train) + len(held) == n_rows and len(held) == text_rows.held_out(n_rows)
    assert {int(y) for _, y in train} == {0, 1} and all(x.shape == (48,) for x, _ in train + held)


# SIGKILL of `advise launch` itself with both ranks up (no handler runs: the launcher and its ranks must go,
# PR_SET_PDEATHSIG): test_faults' kill -9 trial 1 ("ranks up"), the same 2-rank sleeper launch, which
# checks more (every process of the tree gone, the ranks' own children included, and the record settled).
