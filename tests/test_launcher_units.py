"""Launcher pieces without processes: config, argv, placeholders, store, OOM policy, CPU plans,
Slurm script, and the CLI's dry-run and error paths. Each test is milliseconds."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from advisor.config import Strategy, TrainConfig
from advisor.errors import UserError
from advisor.plan import ModelRef, Plan
from launcher.accelerate_config import accelerate_config, to_yaml, write_accelerate_config
from cli.main import main
from launcher.command import Target, build_launch_spec, fill_placeholders
from launcher.oom import retry_decision, retry_note, shrink, smaller_micro_batch, text_has_oom
from launcher.run_logs import failing_rank
from advisor.schedule import lr_factor
from launcher.store import Attempt, MetricsSummary, RunStore

SCRIPTS = Path(__file__).with_name("scripts")


def make_plan(**kw) -> Plan:
    cfg = dict(micro_batch=4, grad_accum=2, seq_len=32, strategy="ddp")
    cfg.update(kw.pop("config", {}))
    base = dict(model=ModelRef(name="gpt2"), config=TrainConfig(**cfg), processes_per_node=2, nodes=1, cpu=False,
                global_batch=16, lr=6e-4, base_lr=3e-4, base_batch=8, warmup_steps=10)
    base.update(kw)
    return Plan(**base)


def load_with_accelerate(path: Path):
    from accelerate.commands.config.config_args import load_config_from_file

    return load_config_from_file(str(path))


# ------------------------------------------------------------------ Accelerate config
def test_config_single_node_ddp_is_valid_for_accelerate(tmp_path):
    plan = make_plan(config={"compile": True})
    cfg = load_with_accelerate(write_accelerate_config(plan, tmp_path / "c.yaml"))
    assert cfg.distributed_type.value == "MULTI_GPU" and cfg.num_processes == 2 and cfg.num_machines == 1
    assert cfg.dynamo_config["dynamo_backend"] == "INDUCTOR"
    assert yaml.safe_load((tmp_path / "c.yaml").read_text())["mixed_precision"] == "bf16"


def test_config_fsdp_multinode(tmp_path):
    plan = make_plan(config={"strategy": "fsdp", "grad_ckpt": True}, nodes=2, global_batch=32)
    path = write_accelerate_config(plan, tmp_path / "c.yaml", machine_rank=1, main_address="10.0.0.1", main_port=29501)
    cfg = load_with_accelerate(path)
    assert cfg.distributed_type.value == "FSDP"
    assert (cfg.num_processes, cfg.num_machines, cfg.machine_rank) == (4, 2, 1)
    assert (cfg.main_process_ip, cfg.main_process_port) == ("10.0.0.1", 29501)
    f = cfg.fsdp_config
    assert f["fsdp_version"] == 2 and f["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert f["fsdp_transformer_layer_cls_to_wrap"] == "Block" and f["fsdp_activation_checkpointing"] is True


def test_config_cpu_and_errors():
    one = accelerate_config(make_plan(cpu=True, processes_per_node=1, global_batch=8, config={"strategy": "single"}))
    assert one["distributed_type"] == "NO" and one["use_cpu"] is True
    two = make_plan(cpu=True, config={"precision": "fp32"})
    assert accelerate_config(two)["distributed_type"] == "MULTI_GPU"
    assert "CUDA_VISIBLE_DEVICES= ACCELERATE_USE_CPU=true" in to_yaml(accelerate_config(two), two)
    with pytest.raises(UserError, match="cannot launch FSDP on CPU"):
        accelerate_config(make_plan(cpu=True, config={"strategy": "fsdp"}))
    with pytest.raises(UserError, match="--main-address"):
        accelerate_config(make_plan(nodes=2, global_batch=32))
    with pytest.raises(UserError, match="strategy single"):
        accelerate_config(make_plan(config={"strategy": "single"}))


# ------------------------------------------------------------------ argv and placeholders
def test_placeholders_filled_and_escaped():
    plan = make_plan()
    args = ["--lr", "{lr}", "--bs={micro_batch}", "{grad_accum}", "{global_batch}", "{precision}", "{warmup_steps}",
            "{{lr}}", '{"json": {lr}}', "{unknown}"]
    assert fill_placeholders(args, plan) == ["--lr", "0.0006", "--bs=4", "2", "16", "bf16", "10",
                                             "{lr}", '{"json": 0.0006}', "{unknown}"]


def test_launch_spec_is_argv(tmp_path):
    plan = make_plan()
    target = Target.from_cli(None, [str(SCRIPTS / "crash.py"), "--name", "a b; rm -rf /", "--lr", "{lr}"])
    spec = build_launch_spec(plan, target, config_path=tmp_path / "c.yaml", plan_path=tmp_path / "p.json",
                             run_dir=tmp_path, log_dir=tmp_path / "ranks", main_port=12345)
    cmd = spec.cmd
    assert cmd[1:4] == ["-m", "accelerate.commands.launch", "--config_file"]
    assert cmd[cmd.index("--main_process_port") + 1] == "12345"
    assert cmd[cmd.index("--tee") + 1] == "3" and "--log_dir" in cmd
    assert cmd[-4:] == ["--name", "a b; rm -rf /", "--lr", "0.0006"]
    assert spec.env["CARDWISE_PLAN"] == str(tmp_path / "p.json")
    recipe = build_launch_spec(plan, Target.from_cli("synthetic", []), config_path=tmp_path / "c.yaml",
                               plan_path=tmp_path / "p.json", run_dir=tmp_path)
    assert recipe.cmd[-2:] == ["-m", "launcher.recipes.synthetic"]


def test_target_errors(tmp_path):
    with pytest.raises(UserError, match="not found"):
        Target.from_cli(None, [str(tmp_path / "missing.py")])
    with pytest.raises(UserError, match="unknown recipe"):
        Target.from_cli("synthetc", [])
    with pytest.raises(UserError, match="nothing to launch"):
        Target.from_cli(None, [])
    assert Target.from_cli("synthetic", ["--pool", "8"]).args == ["--pool", "8"]  # recipe args after --
    assert Target.from_cli(None, ["-m", "pkg.train", "--x"]).model_dump() == {"kind": "module", "name": "pkg.train", "args": ["--x"]}


# ------------------------------------------------------------------ run store
def test_store_files_private_and_api(tmp_path):
    home = tmp_path / "home"
    store = RunStore.open(home)
    assert stat.S_IMODE(os.stat(home).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(home / "runs.sqlite").st_mode) == 0o600
    rec = store.create(label="x", plan=make_plan())
    assert rec.status == "queued" and rec.plan_model().global_batch == 16
    assert store.get(rec.id[:5]).id == rec.id
    assert store.transition(rec.id, "succeeded") is None  # queued cannot jump to succeeded
    run = store.transition(rec.id, "running", expect=["queued"], pid=123, pgid=123, gpus=[0, 1])
    assert run.status == "running" and run.started and run.gpus == [0, 1]
    assert store.transition(rec.id, "running", expect=["queued"]) is None  # claimed once only
    store.record_attempt(rec.id, Attempt(n=1, micro_batch=4, grad_accum=2))
    store.record_attempt(rec.id, Attempt(n=1, micro_batch=4, grad_accum=2, status="oom", exit_code=1))
    store.record_attempt(rec.id, Attempt(n=2, micro_batch=2, grad_accum=4))
    done = store.transition(rec.id, "failed", exit_code=3, error="rank 1 exited with exit code 3",
                            metrics=MetricsSummary(steps=2))
    assert done.ended and done.pid is None and [a.status for a in done.attempts] == ["oom", "running"]
    assert done.metrics.steps == 2 and store.transition(rec.id, "running") is None  # terminal is final
    assert [r.id for r in store.list(status="failed")] == [rec.id]
    with pytest.raises(UserError, match="no run 'zzz'"):
        store.get("zzz")


def test_store_claims_are_atomic(tmp_path):
    store = RunStore(tmp_path / "s.sqlite")
    ids = {store.create(label=str(i)).id for i in range(12)}
    claimed: list[str] = []
    lock = threading.Lock()

    def worker():
        s = RunStore(tmp_path / "s.sqlite")  # own store object per thread, as separate processes would have
        while (rec := s.claim_next()) is not None:
            with lock:
                claimed.append(rec.id)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(claimed) == sorted(ids)  # each exactly once


def test_metrics_summary(tmp_path):
    path = tmp_path / "m.jsonl"
    rows = [{"step": s, "loss": 1.0 / s, "samples_per_s": v, "rank": r, "time": s, "attempt": 2}
            for r in (0, 1) for s, v in ((1, 1.0), (2, 10.0), (3, 12.0), (4, 11.0))]
    rows.append({"step": 9, "loss": 9.0, "rank": 0, "attempt": 1})
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n{broken")
    m = MetricsSummary.from_jsonl(path, attempt=2)
    assert (m.steps, m.first_loss, m.last_loss, m.ranks) == (4, 1.0, 0.25, 2)
    assert m.samples_per_s == pytest.approx(22.0)  # median of steady rows per rank, summed over ranks


# ------------------------------------------------------------------ OOM policy, logs, LR schedule
def test_oom_policy():
    assert [smaller_micro_batch(m) for m in (8, 6, 3, 5, 1)] == [4, 3, 1, 1, None]
    plan = make_plan(config={"micro_batch": 6, "grad_accum": 1}, global_batch=12)
    small = shrink(plan)
    assert (small.config.micro_batch, small.config.grad_accum, small.global_batch, small.lr) == (3, 2, 12, plan.lr)
    assert shrink(make_plan(config={"micro_batch": 1, "grad_accum": 1}, global_batch=2)) is None


def test_oom_retry_decision_says_what_would_help():
    plan = make_plan(config={"micro_batch": 4, "grad_accum": 1}, global_batch=8)
    assert retry_decision(False, plan, 1, 3) == (None, None)
    assert retry_decision(True, plan, 3, 3)[0].config.micro_batch == 2
    assert retry_decision(True, plan, 4, 3) == (None, "out of GPU memory; gave up after 3 smaller retries")
    assert retry_decision(True, plan, 1, 0) == (None, "out of GPU memory; not retried (--max-oom-retries 0)")
    one = make_plan(config={"micro_batch": 1, "grad_accum": 8}, global_batch=16)
    assert "at micro-batch 1: needs a sharded strategy" in retry_decision(True, one, 4, 3)[1]  # not "gave up"


def test_oom_retry_keeps_the_no_accumulation_compromise():
    """Node H's no-accumulation plan fits only with accumulation 1: the retry lowers the global batch,
    rescales the LR from the base and recounts the schedule instead of re-creating what did not fit."""
    plan = make_plan(config={"micro_batch": 4, "grad_accum": 1}, global_batch=8, lr=3e-4, base_lr=3e-4, base_batch=8,
                     warmup_steps=10, dataset_size=800, epochs=2, total_steps=200, no_accumulation=True)
    small = shrink(plan)
    assert (small.config.micro_batch, small.config.grad_accum, small.global_batch) == (2, 1, 4)
    assert small.lr == pytest.approx(1.5e-4) and small.no_accumulation  # linear: 3e-4 x 4/8
    assert (small.total_steps, small.warmup_steps) == (400, 20)  # 800/4 x 2 epochs; warmup keeps its samples
    note = retry_note(plan, small)
    assert "no-accumulation" in note and "from 8 to 4" in note and "no accumulation" in note
    assert shrink(small.model_copy(update={"config": small.config.model_copy(update={"micro_batch": 1}),
                                           "global_batch": 2})) is None
    # a combined compromise and sqrt scaling; a plan without it keeps the global batch
    sq = shrink(make_plan(config={"micro_batch": 6, "grad_accum": 1}, global_batch=12, base_batch=12, base_lr=1e-3,
                          lr=1e-3, lr_scaling="sqrt", no_accumulation=True))
    assert (sq.config.micro_batch, sq.config.grad_accum, sq.global_batch) == (3, 1, 6)
    assert sq.lr == pytest.approx(1e-3 * (6 / 12) ** 0.5)
    plain = shrink(make_plan(config={"micro_batch": 4, "grad_accum": 1}, global_batch=8, no_accumulation=False))
    assert (plain.config.grad_accum, plain.global_batch) == (2, 8)
    assert retry_note(plan.model_copy(update={"no_accumulation": False}), plain).endswith("(same global batch)")


def test_oom_retry_of_the_step_in_backward_never_accumulates():
    plan = make_plan(config={"micro_batch": 4, "grad_accum": 1, "strategy": "single", "optimizer_in_backward": True},
                     processes_per_node=1, global_batch=4, base_batch=4, lr=3e-4, base_lr=3e-4)
    small = shrink(plan)  # accumulation 2 would be refused by TrainConfig
    assert (small.config.micro_batch, small.config.grad_accum, small.global_batch) == (2, 1, 2)
    assert text_has_oom("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
    assert not text_has_oom("RuntimeError: shapes do not match")


def test_failing_rank_parsing():
    torchrun = "Root Cause (first observed failure):\n[0]:\n  rank      : 1 (local_rank: 1)\n  exitcode  : 3 (pid: 9)"
    assert failing_rank(torchrun) == (1, 3)
    assert failing_rank("CalledProcessError: Command '[...]' returned non-zero exit status 7.") == (0, 7)
    assert failing_rank("nothing") == (None, None)


def test_lr_schedule():
    assert lr_factor(0, 4, 20) == pytest.approx(0.25) and lr_factor(3, 4, 20) == pytest.approx(1.0)
    assert lr_factor(4, 4, 20) == pytest.approx(1.0) and lr_factor(20, 4, 20) == pytest.approx(0.1)
    assert lr_factor(100, 0, None) == 1.0  # steps unknown: constant after warmup


# ------------------------------------------------------------------ CLI: dry-run, plans, slurm, errors
CPU2 = ["launch", "--cpu", "--processes", "2", "--model", "mini-transformer", "--seq-len", "32", "--micro-batch", "2"]


def test_dry_run_prints_config_and_argv(tmp_path, capsys):
    assert main([*CPU2, "--batch-size", "8", "--home", str(tmp_path), "--dry-run", "--recipe", "synthetic"]) == 0
    out = capsys.readouterr().out
    assert "distributed_type: MULTI_GPU" in out and "num_processes: 2" in out
    assert "-m accelerate.commands.launch --config_file" in out and "-m launcher.recipes.synthetic" in out
    assert not (tmp_path / "runs").exists()  # a dry run creates nothing
    assert main([*CPU2, "--home", str(tmp_path), "--dry-run", "--json", "--", str(SCRIPTS / "oom_train.py"),
                 "--micro-batch", "{micro_batch}", "--lr", "{lr}"]) == 0
    data = json.loads(capsys.readouterr().out)
    # mini-transformer's recipe (5e-4 at 64, rules/data/defaults.toml), sqrt-scaled for AdamW to 2 x 2 = 4
    assert data["command"]["cmd"][-4:] == ["--micro-batch", "2", "--lr", "0.000125"]
    assert data["accelerate_config"]["num_processes"] == 2 and data["plan"]["global_batch"] == 4


def test_plan_round_trip(tmp_path, capsys):
    saved = tmp_path / "plan.json"
    assert main([*CPU2, "--batch-size", "8", "--base-lr", "1e-3", "--base-batch", "4", "--max-steps", "20",
                 "--recipe", "synthetic", "--dry-run", "--json", "--save-plan", str(saved)]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["plan"]["config"]["grad_accum"] == 2 and first["plan"]["lr"] == pytest.approx(1e-3 * 2 ** 0.5)  # sqrt for AdamW
    assert main(["launch", "--plan", str(saved), "--recipe", "synthetic", "--dry-run", "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["plan"] == first["plan"] == json.loads(saved.read_text())


def test_emit_slurm_is_valid_bash(tmp_path, capsys):
    assert main(["launch", "--cpu", "--processes", "2", "--nodes", "2",
                 "--model", "mini-transformer", "--recipe", "synthetic", "--emit", "slurm"]) == 0
    script = capsys.readouterr().out
    (tmp_path / "job.sbatch").write_text(script)
    subprocess.run(["bash", "-n", str(tmp_path / "job.sbatch")], check=True)
    assert "#SBATCH --nodes=2" in script and "srun --kill-on-bad-exit=1" in script
    assert '--machine_rank "$SLURM_NODEID"' in script and "--rdzv_backend c10d" in script
    assert "main_process_ip: ${MAIN_ADDR}" in script and "CARDWISE_PLAN_EOF" in script
    assert "CARDWISE_CHECKPOINT_EVERY" not in script and "CARDWISE_FINAL_WEIGHTS" not in script


def test_emit_slurm_keeps_checkpoints_and_no_final_weights(capsys):
    """--checkpoint-every and --no-final-weights reach the ranks of a Slurm job as they reach local ones."""
    assert main(["launch", "--cpu", "--model", "mini-transformer", "--recipe", "synthetic", "--emit", "slurm",
                 "--checkpoint-every", "7", "--no-final-weights"]) == 0
    script = capsys.readouterr().out
    assert "export CARDWISE_CHECKPOINT_EVERY=7\n" in script and "export CARDWISE_FINAL_WEIGHTS=0\n" in script


@pytest.mark.parametrize("argv, needle", [
    (["launch", "--cpu", "--recipe", "synthetic"], "no model given"),
    (["launch", "--cpu", "--model", "mini-transformer", "--recipe", "nope"], "unknown recipe"),
    (["launch", "--cpu", "--model", "gpt3", "--recipe", "synthetic"], "unknown model"),
    (["launch", "--plan", "/nonexistent/plan.json", "--recipe", "synthetic"], "cannot read plan file"),
    (["launch", "--cpu", "--processes", "2", "--strategy", "single", "--model", "gpt2", "--recipe", "synthetic"], "strategy single"),
    (["launch", "--cpu", "--processes", "2", "--micro-batch", "2", "--batch-size", "7", "--model", "gpt2", "--recipe", "synthetic"], "not a multiple"),
    (["launch", "--cpu", "--model", "gpt2", "--", "/nonexistent/train.py"], "training script not found"),
    (["launch", "--cpu", "--model", "gpt2", "--nodes", "2", "--recipe", "synthetic"], "--node-rank"),
    (["launch", "--cpu", "--precision", "fp16", "--model", "gpt2", "--recipe", "synthetic"], "fp16"),
    (["launch", "--cpu", "--model", "gpt2", "--recipe", "text-classification"], "mini-transformer"),
    (["show", "nope"], "no run"),
])
def test_bad_inputs_exit_2_with_one_message(tmp_path, capsys, argv, needle):
    assert main([*argv, "--home", str(tmp_path)] if argv[0] == "show" else [*argv, "--home", str(tmp_path), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert err.count("advise: error:") == 1 and needle in err and "Traceback" not in err


def test_runs_empty_home(tmp_path, capsys):
    assert main(["runs", "--home", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_recipes_refuse_lora_without_projections_before_any_rank_starts(tmp_path, capsys):
    # Recipes train LoRA adapters (launcher.compromises, tests/test_compromises.py); a model with no
    # attention/MLP projection to put them on is refused up front.
    from cli.main import main

    rc = main(["launch", "--cpu", "--processes", "1", "--model", "resnet18", "--lora-rank", "8",
               "--recipe", "synthetic", "--max-steps", "2", "--home", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "--lora-rank" in err and "resnet18 has none" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_gpu_launch_without_gpus_says_how_to_launch_instead(tmp_path, capsys, monkeypatch):
    from advisor import hardware
    from cli.main import main

    monkeypatch.setattr(hardware, "detect_machine", lambda: hardware.Machine(nvml_error="test: no NVML"))
    for argv in (["launch", "--model", "gpt2", "--recipe", "synthetic"],
                 ["launch", "--model", "gpt2", "--gpu", "H100", "--recipe", "synthetic"]):
        rc = main([*argv, "--max-steps", "2", "--home", str(tmp_path)])
        err = capsys.readouterr().err
        assert rc == 2 and "--cpu --processes N" in err and "Traceback" not in err, err
    assert main(["launch", "--model", "gpt2", "--gpu", "H100", "--recipe", "synthetic", "--dry-run",
                 "--home", str(tmp_path)]) == 0


def test_runs_and_show_describe_every_start_of_a_requeued_run():
    """Issue 40: after a resumed service run, `runs` timed and `show` listed only the last execution."""
    from cli.runs_cmd import _detail, _duration
    from launcher.records import Attempt, RunRecord

    t0 = 1_000_000.0
    rec = RunRecord(id="abcd1234", status="succeeded", created=t0, started=t0 + 500, ended=t0 + 550,
                    service_attempts=2, attempts=[
                        Attempt(n=1, start=1, micro_batch=2, grad_accum=1, status="failed", started=t0, ended=t0 + 100,
                                last_step=12, error="interrupted: the service stopped while it ran"),
                        Attempt(n=1, start=2, micro_batch=2, grad_accum=1, status="succeeded", started=t0 + 500,
                                ended=t0 + 550, last_step=24)])
    assert _duration(rec) == "2m"  # 150 s: both starts' time, not the last start's 50 s
    shown = _detail(rec)
    assert "start 1, attempt 1" in shown and "to step 12, 100.0s" in shown and "interrupted" in shown
    assert "start 2, attempt 1" in shown and "to step 24, 50.0s" in shown
    assert rec.current_attempt.start == 2
