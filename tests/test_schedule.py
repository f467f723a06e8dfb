"""One schedule (advisor.schedule): the estimate, the recommendation, the CPU plan and the launched
run count the same steps, and a run cut short by --max-steps warms up over the steps it runs
(issue 31: a 20-step run got 938 warmup steps and never reached 2% of its learning rate)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from advisor.calibration import default_calibration
from advisor.hardware import Machine
from advisor.plan import ModelRef
from advisor.request import Request
from advisor.schedule import WarmupPolicy, lr_factor, planned_steps, schedule, warmup_for
from plans import cpu_plan_for

POLICY = WarmupPolicy(fraction=0.05, max_steps=2000, max_epochs=5, unknown_steps=100)


def test_warmup_is_a_capped_fraction_of_the_steps_that_run():
    assert warmup_for(20, POLICY) == (1, "5% of 20 steps")
    assert warmup_for(10_000, POLICY)[0] == 500
    steps, why = warmup_for(2_000_000, POLICY)
    assert steps == 2000 and "at most 2,000 steps" in why  # not 100k steps of a long pretraining
    assert warmup_for(300 * 313, POLICY, per_epoch=313)[0] == 5 * 313  # Goyal et al.'s 5 epochs
    assert warmup_for(None, POLICY)[0] == 100
    # --max-steps caps the run, and the warmup follows it
    s = schedule(1_000_000, 3, 32, POLICY, max_steps=20)
    assert (s.total_steps, s.warmup_steps) == (20, 1)
    assert schedule(1_000_000, 3, 32, POLICY, max_steps=20, warmup_steps=50).warmup_steps == 20  # given: kept, within the run


def test_the_lr_reaches_its_peak_and_decays_over_the_run():
    peak = max(lr_factor(s, 1, 20) for s in range(20))
    assert peak == 1.0 and lr_factor(19, 1, 20) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 18 / 19)))


def test_estimate_recommendation_and_cpu_plan_count_the_same_steps():
    """6 against 5 steps for the same run, before: one ceil(dataset x epochs / batch) now."""
    from rules.api import recommend

    req = Request(model=ModelRef(name="mini-transformer"), gpu="A100-80GB", gpus=1, batch_size=64, micro_batch=64,
                  dataset_size=100, epochs=3.5, seq_len=64)
    rec = recommend(req, machine=Machine(cpu_cores=8), calibration=default_calibration())
    want = planned_steps(100, 3.5, 64)
    assert want == 6  # 350 samples in batches of 64
    assert rec.recommendation.total_steps == rec.plan.total_steps == want
    assert rec.plan.schedule().total_steps == want
    t = rec.estimate
    assert t.time_to_train_h * 3600 * t.throughput.samples_per_s == pytest.approx(100 * 3.5)  # the same samples
    cpu, _ = cpu_plan_for(req.model_copy(update={"gpu": None, "gpus": None}), processes=1)
    assert cpu.global_batch == 64 and cpu.total_steps == want
    assert cpu.schedule(max_steps=4).total_steps == 4


@pytest.mark.slow
def test_a_20_step_run_reaches_its_peak_lr(tmp_path, capsys):
    """A CPU run sized for 3 epochs of 100k samples but stopped at 20 steps: the plan's warmup would
    be thousands of steps; the run's schedule warms up over 5% of its 20 steps and logs the peak LR."""
    from cli.main import main

    rc = main(["launch", "--cpu", "--model", "mini-transformer", "--seq-len", "8", "--micro-batch", "2",
               "--dataset-size", "100000", "--epochs", "3", "--max-steps", "20", "--recipe", "synthetic",
               "--home", str(tmp_path), "--json"])
    rec = json.loads(capsys.readouterr().out)
    assert rc == 0 and rec["status"] == "succeeded"
    plan = rec["plan"]
    assert plan["total_steps"] == 150_000 and plan["warmup_steps"] == 2000  # the planned run's
    rows = [json.loads(x) for x in (Path(rec["run_dir"]) / "metrics.jsonl").read_text().splitlines()]
    lrs = [r["lr"] for r in rows if "lr" in r]
    assert max(r["step"] for r in rows) == 20
    assert max(lrs) == pytest.approx(plan["lr"], rel=0.02)  # the peak is reached
    assert lrs[-1] < 0.5 * plan["lr"]  # and the cosine decays over the 20 steps
