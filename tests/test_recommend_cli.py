"""`advise` (recommend), `advise estimate`, `advise rules`, the Python API and the rule engine:
JSON contracts, exit codes, speed and import hygiene."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from advisor import hardware
from advisor.errors import UserError
from advisor.plan import Plan
from cli.main import main

ROOT = Path(__file__).resolve().parents[1]

REC_KEYS = {"strategy", "gpus", "nodes", "micro_batch", "grad_accum", "global_batch", "precision", "compile",
            "grad_ckpt", "lr", "lr_scaling", "warmup_steps", "num_workers", "fits", "command"}
MEM_KEYS = {"weights_gib", "gradients_gib", "optimizer_gib", "activations_gib", "other_gib", "peak_gib", "device_gib", "fits"}
THR_KEYS = {"samples_per_s", "step_s", "tokens_per_s", "mfu"}


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    rc = main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def _no_gpu() -> hardware.Machine:
    return hardware.Machine(cpu_cores=4, nvml_error="NVML unavailable: NVML Shared Library Not Found")


def _two_a100_pcie() -> hardware.Machine:
    gpus = [hardware.DetectedGpu(index=i, name="NVIDIA A100 80GB PCIe", memory_total_gib=80.0, memory_free_gib=79.5,
                                 compute_capability=(8, 0), spec="A100-PCIE-80GB") for i in range(2)]
    return hardware.Machine(gpus=gpus, links=[hardware.GpuLink(a=0, b=1, kind="pcie")], cpu_cores=32)


def _check_estimate_keys(e: dict) -> None:
    assert {"name", "params"} <= set(e["model"])
    assert {"gpu", "count", "memory_gib"} <= set(e["hardware"])
    assert MEM_KEYS <= set(e["memory"])
    assert THR_KEYS <= set(e["throughput"])


# ------------------------------------------------------------------ advise (recommend)
def test_json_contract(capsys):
    rc, out, _ = run_cli(capsys, "--model", "llama3-8b", "--gpu", "A100-80GB", "--gpus", "8", "--seq-len", "2048", "--json")
    assert rc == 0
    d = json.loads(out)
    assert {"recommendation", "estimate", "decision_path", "rules_fired", "alternatives", "warnings"} <= set(d)
    assert REC_KEYS <= set(d["recommendation"])
    _check_estimate_keys(d["estimate"])
    assert "time_to_train_h" in d["estimate"]
    assert [s["node"] for s in d["decision_path"]] == ["A", "B", "C", "I", "J"]
    assert all({"node", "question", "answer", "why"} <= set(s) for s in d["decision_path"])
    assert all({"id", "why"} <= set(r) for r in d["rules_fired"])
    # issue 12's additions: the compromise (None for the standard plan), the peak moment's parts
    assert d["recommendation"]["compromise"] is None and d["recommendation"]["fits"] is True
    mem = d["estimate"]["memory"]
    assert sum(p["gib"] for p in mem["peak_parts"]) == pytest.approx(mem["peak_gib"])
    assert {"autocast_copies_gib", "other_moment", "host_gib"} <= set(mem)
    # efficiency against the best plan on the smallest count that fits (2 GPUs for llama3-8b), at most 100%
    base = [r for r in d["scaling"] if r["baseline"]]
    assert [r["gpus"] for r in base] == [2] and base[0]["scaling_efficiency"] == 1.0
    assert all(r["scaling_efficiency"] is None or r["scaling_efficiency"] > 0 for r in d["scaling"])
    assert d["policy"]["kind"] == "efficiency" and d["policy"]["baseline_gpus"] == 2
    assert d["policy"]["candidates_scored"] > len(d["scaling"])
    assert all("changed" in r for r in d["scaling"])
    assert d["recommendation"]["command"].startswith("advise launch --model llama3-8b ")
    Plan.model_validate(d["plan"])


def test_no_gpu_and_no_gpu_flag_plans_for_a_stated_default(monkeypatch, capsys):
    monkeypatch.setattr(hardware, "detect_machine", _no_gpu)
    rc, out, err = run_cli(capsys, "--model", "gpt2", "--json")
    assert rc == 0, err
    d = json.loads(out)
    assert d["estimate"]["hardware"]["assumed"] is True and d["estimate"]["hardware"]["detected"] is False
    assert d["warnings"][0].startswith("no GPU detected") and "--gpu NAME" in d["warnings"][0]
    rc, out, err = run_cli(capsys, "--model", "gpt2")
    assert rc == 0 and "no GPU detected" in out and "stated default" in out


def test_no_gpu_estimate_and_launch_still_ask_for_a_gpu(monkeypatch, capsys):
    monkeypatch.setattr(hardware, "detect_machine", _no_gpu)
    rc, out, err = run_cli(capsys, "estimate", "--model", "gpt2")
    assert rc == 2 and not out
    assert "no GPU detected" in err and "--gpu A100-80GB" in err and "Traceback" not in err


def test_no_gpu_in_a_subprocess_is_never_a_pretend_plan():
    if hardware.detect_machine().has_gpu:
        pytest.skip("this machine has a GPU")
    p = subprocess.run([sys.executable, "-m", "cli.main", "--model", "gpt2", "--json"], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["estimate"]["hardware"]["assumed"] is True


def test_detected_machine_is_planned_for(monkeypatch, capsys):
    monkeypatch.setattr(hardware, "detect_machine", _two_a100_pcie)
    rc, out, _ = run_cli(capsys, "--model", "llama3-8b", "--seq-len", "2048", "--json")
    assert rc == 0
    d = json.loads(out)
    assert d["estimate"]["hardware"]["detected"] is True and d["estimate"]["hardware"]["gpu"] == "A100-PCIE-80GB"
    assert "interconnect.pcie" in [r["id"] for r in d["rules_fired"]]
    assert "--gpu " not in d["recommendation"]["command"]  # re-plans for the detected GPUs


@pytest.mark.parametrize("argv,needle", [
    (["--model", "gpt2", "--gpu", "A100-80GB", "--gpus", "0"], "must be at least 1"),
    (["--model", "gpt2", "--gpu", "A100-80GB", "--dataset-size", "9", "--epochs", "1", "--deadline", "tomorrow"],
     "cannot read the deadline"),
    (["--model", "gpt2", "--gpu", "A100-80GB", "--batch-size", "100", "--micro-batch", "16"], "not a multiple"),
    (["--model", "gpt2", "--gpu", "A100-80GB", "--deadline", "6h"], "a deadline needs"),
])
def test_bad_inputs_exit_2(capsys, argv, needle):
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse
        rc = exc.code
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err


def test_readable_report(capsys):
    rc, out, _ = run_cli(capsys, "--model", "llama3-8b", "--gpu", "A100-80GB", "--gpus", "8", "--seq-len", "2048")
    assert rc == 0
    for text in ("decision path", "memory per GPU", "throughput by GPU count", "recommendation",
                 "rules fired", "strategy.fsdp", "advise launch --model llama3-8b"):
        assert text in out, text
    rc, out, _ = run_cli(capsys, "--model", "llama3-8b", "--gpu", "A100-80GB", "--gpus", "8", "--full")
    for text in ("decision tree", "the usual optimizer for decoder models"):
        assert text in out, text


def test_report_of_a_model_that_does_not_fit_recommends_a_compromise(capsys):
    rc, out, _ = run_cli(capsys, "--model", "llama3-8b", "--gpu", "A100-80GB", "--seq-len", "2048")
    assert rc == 0
    for text in ("standard setup", "fp32 gradients", "autocast copies", "compromise", "gives up",
                 "alternatives", "pure-bf16", "lora", "--cpu-offload"):
        assert text in out, text
    rc, out, _ = run_cli(capsys, "--model", "llama3-70b", "--gpu", "RTX-4090", "--strategy", "single", "--seq-len", "2048")
    assert rc == 0 and "DOES NOT FIT" in out and "alternatives" in out


def test_save_plan(tmp_path, capsys):
    path = tmp_path / "plan.json"
    rc, out, _ = run_cli(capsys, "--model", "gpt2", "--gpu", "H100", "--gpus", "2", "--json", "--save-plan", str(path))
    assert rc == 0
    assert Plan.load(path) == Plan.model_validate(json.loads(out)["plan"])
    rc, _, err = run_cli(capsys, "--model", "llama3-70b", "--gpu", "RTX-4090", "--strategy", "single", "--json",
                         "--save-plan", str(tmp_path / "x.json"))
    assert rc == 2 and "nothing fits" in err and not (tmp_path / "x.json").exists()


def test_plan_refuses_a_plan_that_does_not_fit():
    from cli.flags import request_from_namespace
    from cli.main import build_parser
    from rules.api import plan

    def req(*argv):
        return request_from_namespace(build_parser("recommend").parse_args(list(argv)))

    ok = plan(req("--model", "gpt2", "--gpu", "A100-80GB", "--batch-size", "32", "--micro-batch", "16"))
    assert ok.config.micro_batch == 16 and ok.global_batch == 32 and ok.config.grad_accum == 2
    with pytest.raises(UserError) as info:
        plan(req("--model", "llama3-70b", "--gpu", "RTX-4090", "--strategy", "single"))
    assert "does not fit" in info.value.what and "advise" in info.value.fix


# ------------------------------------------------------------------ Python API
def test_python_api_and_repr():
    from rules import Recommendation, advise

    rec = advise("llama3-8b", gpu="A100-80GB", gpus=8, seq_len=2048)
    assert isinstance(rec, Recommendation)
    assert rec.recommendation.strategy == "fsdp" and rec.path == ["A", "B", "C", "I", "J"]
    assert repr(rec).startswith("Recommendation(fsdp on 8x A100-SXM-80GB")
    text = str(rec)
    assert "decision path:" in text and "launch: advise launch" in text and "rules fired:" in text

    class Printer:
        def __init__(self):
            self.out = ""

        def text(self, s):
            self.out += s

    p = Printer()
    rec._repr_pretty_(p, False)
    assert p.out == text
    assert rec.trace and all(t.leaves for t in rec.trace)  # every rule evaluated, with its facts
    same = advise("llama3-8b", gpu="A100-80GB", gpus=8, seq_len=2048, deadline=None)
    assert same.plan == rec.plan
    with pytest.raises(UserError, match="unknown keyword"):
        advise("gpt2", gpu="H100", batchsize=3)
    d = advise("resnet50", gpu="V100", deadline="6h", dataset_size=1281167, epochs=90)
    assert d.recommendation.precision == "fp16"


# ------------------------------------------------------------------ advise estimate
def test_estimate_json_contract_and_defaults(capsys):
    rc, out, _ = run_cli(capsys, "estimate", "--model", "llama3-8b", "--gpu", "A100-80GB", "--json")
    assert rc == 0
    d = json.loads(out)
    _check_estimate_keys(d)
    assert d["model"]["params"] == 8_030_261_248
    assert d["config"]["micro_batch"] == 1 and d["config"]["precision"] == "bf16" and d["config"]["strategy"] == "single"
    assert d["defaults_applied"]
    rc, out, _ = run_cli(capsys, "estimate", "--model", "gpt2", "--gpu", "V100", "--gpus", "2", "--json",
                         "--dataset-size", "1000", "--epochs", "2")
    d = json.loads(out)
    assert d["config"]["micro_batch"] == 8 and d["config"]["precision"] == "fp16" and d["config"]["strategy"] == "ddp"
    assert d["hardware"]["count"] == 2 and d["time_to_train_h"] > 0


def test_estimate_readable_and_errors(monkeypatch, capsys):
    rc, out, _ = run_cli(capsys, "estimate", "--model", "gpt2", "--gpu", "H100", "--micro-batch", "4")
    assert rc == 0 and "memory per GPU" in out and "samples/s" in out and "GiB" in out
    monkeypatch.setattr(hardware, "detect_machine", _no_gpu)
    rc, _, err = run_cli(capsys, "estimate", "--model", "gpt2")
    assert rc == 2 and "no GPU detected" in err
    rc, _, err = run_cli(capsys, "estimate", "--model", "gpt2", "--gpu", "H100", "--epochs", "3")
    assert rc == 2 and "--dataset-size" in err


# ------------------------------------------------------------------ advise rules
def test_rules_list_and_explain(capsys):
    from rules.engine import load_rules

    rc, out, _ = run_cli(capsys, "rules", "--json")
    assert rc == 0
    d = json.loads(out)
    assert {r["id"] for r in d["rules"]} == {r.id for r in load_rules()}
    assert [n["node"] for n in d["tree"]] == list("ABCDEFGHIJ")
    rc, out, _ = run_cli(capsys, "rules", "precision.bf16", "--json")
    r = json.loads(out)
    assert {"summary", "why", "example", "source", "condition"} <= set(r) and "gpu.supports_bf16" in r["condition"]
    rc, out, _ = run_cli(capsys, "rules", "dataparallel.never")
    assert rc == 0 and "GIL" in out and "example" in out and "source" in out
    rc, out, _ = run_cli(capsys, "rules")
    assert rc == 0 and "compile.repays" in out and "decision tree" in out
    rc, out, _ = run_cli(capsys, "rules", "G")
    assert rc == 0 and "deadline" in out
    rc, _, err = run_cli(capsys, "rules", "precision.bf17")
    assert rc == 2 and "precision.bf16" in err


# ------------------------------------------------------------------ the engine
def test_engine_conditions_and_schema(tmp_path):
    from rules.engine import Engine, RuleError, load_rules_from
    from rules.facts import Facts

    good = tmp_path / "good.toml"
    good.write_text('''
[[rule]]
id = "t.one"
name = "t"
phase = "setup"
summary = "s"
why = "w"
source = "s"
example = "advise --model gpt2 --gpu H100"
say = "{gpu.name} cc {gpu.cc:.1f} {hw.gpus} {workload.deadline_h:h}"
[rule.when]
all = [
  {fact = "gpu.cc", op = ">=", value = 8.0},
  {any = [{fact = "hw.gpus", op = ">", value = 4}, {not = {fact = "model.is_cnn"}}]},
  {fact = "workload.deadline_h", op = "missing"},
]
[rule.set]
precision = "bf16"
''')
    rules = load_rules_from([good])
    facts = Facts.model_validate(_facts_for("gpt2"))
    trace = Engine(rules).run("setup", facts)
    assert trace[0].fired and trace[0].set == {"precision": "bf16"} and trace[0].why.startswith("H100-SXM cc 9.0")
    assert [l.fact for l in trace[0].leaves] == ["gpu.cc", "hw.gpus", "model.is_cnn", "workload.deadline_h"]
    blocked = Engine(rules).run("setup", facts, pinned={"precision"})
    assert not blocked[0].fired and blocked[0].blocked_by_pin == ["precision"]

    bad = tmp_path / "bad.toml"
    bad.write_text(good.read_text().replace('fact = "gpu.cc"', 'fact = "gpu.compute_cap"'))
    with pytest.raises(RuleError, match="unknown fact 'gpu.compute_cap'"):
        load_rules_from([bad])
    early = tmp_path / "early.toml"
    early.write_text(good.read_text().replace('fact = "hw.gpus"', 'fact = "plan.gpus"'))
    with pytest.raises(RuleError, match="setup rules run before the tree"):
        load_rules_from([early])


def _facts_for(model: str) -> dict:
    """Setup-phase facts for a model on one H100 (as the recommendation builds them)."""
    from advisor.calibration import default_calibration
    from advisor.catalog import catalog_model
    from advisor.config import TrainConfig
    from advisor.gpus import get_gpu
    from advisor.hardware import HardwareSpec
    from advisor.plan import ModelRef
    from rules.practice import base_facts
    from advisor.request import Request
    from rules.defaults import load_defaults
    from rules.tree import Planner

    req = Request(model=ModelRef(name=model))
    p = Planner(req, catalog_model(model), HardwareSpec(gpu=get_gpu("H100")), default_calibration(), load_defaults(),
                TrainConfig(), 1e-4, 32)
    return base_facts(p, TrainConfig(), lr_defaulted=True, defaults_source="test").model_dump()
