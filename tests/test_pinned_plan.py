"""Pinned config flags restrict the planner's candidates; a pin is kept, or refused before anything
runs with one line and the fix (exit 2). Issue 31: "A pinned --grad-accum is replaced when the plan
ends on one GPU (--grad-accum 4 -> 2, and the printed command says 2); --grad-accum 3 --batch-size
128 is accepted though it does not divide"."""

from __future__ import annotations

import json
import shlex

import pytest

from cli.main import main


def _advise(capsys, line: str) -> tuple[int, dict | None, str]:
    rc = main([*shlex.split(line), "--json"])
    out = capsys.readouterr()
    return rc, (json.loads(out.out) if rc == 0 else None), out.err


@pytest.mark.parametrize("line", [
    "--model gpt2 --gpu A100-80GB --gpus 1 --batch-size 32 --grad-accum 4",
    "--model gpt2 --gpu A100-80GB --gpus 8 --batch-size 64 --grad-accum 4",
    "--model llama3-8b --gpu A100-80GB --gpus 8 --grad-accum 4",
])
def test_a_pinned_grad_accum_is_kept_and_the_command_says_so(capsys, line):
    rc, d, err = _advise(capsys, line)
    assert rc == 0, err
    r = d["recommendation"]
    assert r["grad_accum"] == 4
    assert r["micro_batch"] * 4 * r["gpus"] == r["global_batch"]
    argv = shlex.split(r["command"])
    assert argv[argv.index("--grad-accum") + 1] == "4"


@pytest.mark.parametrize("line,message", [
    ("--model gpt2 --gpu A100-80GB --grad-accum 3 --batch-size 128", "--batch-size 128 is not a multiple of --grad-accum 3"),
    ("--model gpt2 --gpu A100-80GB --micro-batch 3", "--micro-batch 3 does not divide the recipe's global batch 128"),
    ("--model gpt2 --gpu A100-80GB --gpus 3 --strategy ddp --batch-size 128", "does not split evenly over 3 GPUs"),
    ("--model gpt2 --gpu A100-80GB --gpus 8 --strategy ddp --micro-batch 32 --grad-accum 4 --batch-size 128",
     "--batch-size 128 does not split evenly over 2, 4 or 8 GPUs x --micro-batch 32 x --grad-accum 4"),
    ("--model llama3-8b --gpu H100 --gpus 8 --strategy hsdp", "--strategy hsdp with one node"),
])
def test_an_impossible_pin_is_refused_before_anything_runs(capsys, line, message):
    rc, _, err = _advise(capsys, line)
    assert rc == 2
    assert message in err and "fix:" in err and "Traceback" not in err


def test_pinned_micro_batch_and_accumulation_choose_the_count_they_imply(capsys):
    rc, d, err = _advise(capsys, "--model gpt2 --gpu A100-80GB --gpus 8 --micro-batch 16 --grad-accum 2 --batch-size 128 "
                                 "--dataset-size 2000000 --epochs 1")
    assert rc == 0, err
    r = d["recommendation"]
    assert (r["gpus"], r["micro_batch"], r["grad_accum"]) == (4, 16, 2)
    # the other counts are not candidates: their rows say why
    notes = {row["gpus"]: row["note"] for row in d["scaling"] if not row["fits"]}
    assert "--micro-batch 16 x --grad-accum 2" in notes[8]


@pytest.mark.parametrize("flag,field,value", [
    ("--grad-ckpt", "grad_ckpt", True), ("--no-grad-ckpt", "grad_ckpt", False), ("--compile", "compile", True),
    ("--precision fp32", "precision", "fp32"), ("--strategy fsdp", "strategy", "fsdp"), ("--micro-batch 4", "micro_batch", 4),
    ("--strategy fsdp-keep", "strategy", "fsdp-keep"),
])
def test_every_candidate_scored_keeps_a_pin(flag, field, value):
    from advisor.hardware import Machine
    from cli.flags import request_from_namespace
    from cli.main import build_parser
    from rules.api import recommend

    argv = ["--model", "llama3.2-1b", "--gpu", "A100-80GB", "--gpus", "8", "--dataset-size", "100000", "--epochs", "1",
            *shlex.split(flag)]
    rec = recommend(request_from_namespace(build_parser("recommend").parse_args(argv)), machine=Machine(cpu_cores=64))
    scored = [c for c in rec.candidates if c.standard]
    assert scored
    for c in scored:
        got = getattr(c.config, field)
        got = got.value if hasattr(got, "value") else got
        if field == "strategy" and c.gpus == 1:
            continue  # one GPU runs single (FSDP over one GPU only for CPU offload)
        assert got == value, (c.as_dict(), field)
    got = getattr(rec.recommendation, field)
    assert got == value
