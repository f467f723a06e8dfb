"""The memory compromises of decision node H, as they run (launcher.compromises) and as they are refused.

Unit tests check each mechanism against its reference (KahanAdamW against fp32 AdamW, the step in
backward against a normal AdamW step, LoRA targets per family); a few small real launches
(``slow``) check that the plan, the runtime and the synthetic recipe really run each one.
"""

from __future__ import annotations

import copy
import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from advisor.config import Optimizer, Precision, Strategy, TrainConfig
from advisor.errors import UserError
from advisor.plan import ModelRef, Plan
from cli.main import main
from launcher.compromises.checks import check_compromises
from launcher.compromises.in_backward import InBackwardOptimizer
from launcher.compromises.kahan import KahanAdamW
from launcher.compromises.lora import apply_lora, target_modules

SCRIPTS = Path(__file__).with_name("scripts")
TINY = ["--model", "mini-transformer", "--seq-len", "8", "--micro-batch", "2"]


def make_plan(model="mini-transformer", *, cpu=False, ranks=1, **config) -> Plan:
    c = TrainConfig(micro_batch=2, **config)
    return Plan(model=ModelRef(name=model), config=c, gpu=None if cpu else "H100-SXM", processes_per_node=ranks,
                cpu=cpu, global_batch=2 * c.grad_accum * ranks, lr=1e-3, base_lr=1e-3, base_batch=2)


# ---------------------------------------------------------------- KahanAdamW
def _train(opt_cls, dtype, steps=300, lr=1e-3):
    """Least squares from weights near 1 (where a bf16 ulp is 2**-7): updates of ~lr are below half an ulp."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 16, generator=g)
    w_true = 1.0 + 0.5 * torch.rand(16, 1, generator=g)
    w = torch.nn.Parameter((1.0 + 0.5 * torch.rand(16, 1, generator=g)).to(dtype))
    opt = opt_cls([w], lr=lr, weight_decay=0.01)
    for _ in range(steps):
        loss = ((x.to(dtype) @ w - (x @ w_true).to(dtype)) ** 2).float().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
    return w.detach().float()


def test_kahan_adamw_in_bf16_tracks_fp32_adamw():
    ref = _train(torch.optim.AdamW, torch.float32)
    plain = _train(torch.optim.AdamW, torch.bfloat16)
    kahan = _train(KahanAdamW, torch.bfloat16)
    err_plain, err_kahan = (plain - ref).norm().item(), (kahan - ref).norm().item()
    assert err_kahan < 0.2 * err_plain, (err_kahan, err_plain)
    assert torch.allclose(_train(KahanAdamW, torch.float32), ref, atol=1e-5)  # in fp32 it is AdamW


# ---------------------------------------------------------------- optimizer step in backward
def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))


def test_step_in_backward_equals_a_normal_adamw_step():
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    ref, fused = _net(), _net()
    opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.01)
    inb = InBackwardOptimizer(fused.parameters(), lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.01))
    for _ in range(2):
        torch.nn.functional.mse_loss(ref(x), y).backward()
        opt.step()
        opt.zero_grad()
        torch.nn.functional.mse_loss(fused(x), y).backward()  # the hooks step each parameter here
        assert all(p.grad is None for p in fused.parameters())  # freed right after each step
    assert inb.hook_steps == 2 * len(list(fused.parameters()))
    for a, b in zip(ref.parameters(), fused.parameters()):
        assert torch.allclose(a, b, atol=1e-7)


def test_lr_schedule_reaches_every_per_parameter_optimizer():
    inb = InBackwardOptimizer(_net().parameters(), lambda ps: torch.optim.AdamW(ps, lr=1e-2))
    sched = torch.optim.lr_scheduler.LambdaLR(inb, lambda s: 0.5 ** s)
    inb.step()  # a no-op (the hooks step), called as a training loop does
    sched.step()
    assert {g["lr"] for opt in inb.optimizers for g in opt.param_groups} == {5e-3}


# ---------------------------------------------------------------- LoRA targets per family
def test_lora_targets_of_cardwise_and_transformers_models():
    transformers = pytest.importorskip("transformers")
    from advisor.catalog import catalog_model
    from advisor.zoo import build_trainable

    assert target_modules(build_trainable(catalog_model("mini-transformer")))[0] == ["q", "k", "v", "o", "up", "down"]
    small = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=64)
    llama = transformers.LlamaForCausalLM(transformers.LlamaConfig(num_key_value_heads=2, **small))
    assert target_modules(llama) == (["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"], False)
    bert = transformers.BertForMaskedLM(transformers.BertConfig(**small))
    assert target_modules(bert)[0] == ["query", "key", "value", "dense"]
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=64))
    assert target_modules(gpt2) == (["c_attn", "c_proj", "c_fc"], True)  # Conv1D: fan_in_fan_out
    peft_model = apply_lora(gpt2, 4)
    trainable = {p.dtype for p in peft_model.parameters() if p.requires_grad}
    frozen = {p.dtype for p in peft_model.parameters() if not p.requires_grad}
    assert trainable == {torch.float32} and frozen == {torch.bfloat16}
    assert peft_model.peft_config["default"].fan_in_fan_out and peft_model.peft_config["default"].lora_alpha == 8
    with pytest.raises(ValueError, match="no attention or MLP projection"):
        target_modules(torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3)))


# ---------------------------------------------------------------- plan-time refusals
def _missing(monkeypatch, name):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == name else real(n, *a))


@pytest.mark.parametrize("package, config, extra", [("bitsandbytes", {"optimizer": Optimizer.adamw_8bit}, "8bit"),
                                                     ("peft", {"lora_rank": 8}, "lora")])
def test_a_missing_extra_is_refused_with_the_pip_fix(monkeypatch, package, config, extra):
    _missing(monkeypatch, package)
    with pytest.raises(UserError) as err:
        check_compromises(make_plan(**config))
    assert f"pip install 'cardwise[{extra}]'" in err.value.fix


@pytest.mark.parametrize("plan, words", [
    (lambda: make_plan(optimizer_in_backward=True, grad_accum=2), "with --grad-accum 2: .*no gradient to accumulate"),
    (lambda: make_plan(optimizer_in_backward=True, ranks=2, strategy=Strategy.ddp), "with --strategy ddp: .*all-reduce"),
    (lambda: make_plan(cpu=True, cpu_offload=True), "a --cpu run has it there already"),
    (lambda: make_plan(cpu_offload=True, strategy=Strategy.ddp), "FSDP's"),
    (lambda: make_plan("resnet18", lora_rank=4), "resnet18 has none"),
    (lambda: make_plan(lora_rank=4, precision=Precision.fp32), "does not apply"),
])
def test_compromises_that_cannot_run_are_refused(plan, words):
    with pytest.raises(UserError, match=words):
        check_compromises(plan())


def test_cpu_offload_checks_host_ram():
    plan = make_plan("llama3-8b", cpu_offload=True, strategy=Strategy.fsdp)
    with pytest.raises(UserError, match=r"~119\.\d GiB .* host memory"):  # 8.03e9 params x 16 bytes
        check_compromises(plan, available_gib=64.0)
    check_compromises(plan, available_gib=256.0)
    check_compromises(plan.model_copy(update={"config": plan.config.model_copy(
        update={"precision": Precision.pure_bf16})}), available_gib=100.0)  # 10 bytes per parameter: ~75 GiB
    # issue 38: FSDP shards over every node, so each node holds its share: 2 nodes, ~60 GiB each
    check_compromises(plan.model_copy(update={"nodes": 2}), available_gib=80.0)


def test_cli_refuses_before_any_process_starts(monkeypatch, tmp_path, capsys):
    _missing(monkeypatch, "bitsandbytes")
    rc = main(["launch", "--cpu", *TINY, "--optimizer", "adamw-8bit", "--recipe", "synthetic", "--home", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "pip install 'cardwise[8bit]'" in err and len(err.strip().splitlines()) == 2  # what + fix
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_cpu_offload_plan_is_fsdp_with_offload_even_on_one_process():
    from launcher.accelerate_config import accelerate_config
    from launcher.command import Target, build_launch_spec

    plan = make_plan("llama3-8b", cpu_offload=True)  # strategy single: FSDP over world size 1
    cfg = accelerate_config(plan)
    assert cfg["distributed_type"] == "FSDP" and cfg["num_processes"] == 1
    assert cfg["fsdp_config"]["fsdp_offload_params"] is True and cfg["fsdp_config"]["fsdp_version"] == 2
    assert accelerate_config(make_plan("llama3-8b"))["distributed_type"] == "NO"
    spec = build_launch_spec(plan, Target(kind="recipe", name="synthetic"), config_path=Path("c.yaml"),
                             plan_path=Path("p.json"), run_dir=Path("."), main_port=29999)
    assert "--main_process_port" in spec.cmd  # FSDP needs a process group, even of one


def test_cpu_offload_ranks_get_the_hosts_cores(monkeypatch):
    """`accelerate launch` would give a GPU rank one thread, and the offloaded AdamW step runs on it."""
    import os

    from advisor.hardware import threads_per_rank as offload_threads
    from launcher.command import Target, build_launch_spec

    def env_of(plan):
        return build_launch_spec(plan, Target(kind="recipe", name="synthetic"), config_path=Path("c.yaml"),
                                 plan_path=Path("p.json"), run_dir=Path("."), main_port=29999).env

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert env_of(make_plan("llama3-8b", cpu_offload=True))["OMP_NUM_THREADS"] == str(offload_threads(1))
    assert offload_threads(1) == (os.cpu_count() or 1) and offload_threads(8, cores=64) == 8
    assert offload_threads(8, cores=4) == 1
    assert "OMP_NUM_THREADS" not in env_of(make_plan("llama3-8b"))  # no host step: accelerate's default
    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the user's own choice is left alone
    assert "OMP_NUM_THREADS" not in env_of(make_plan("llama3-8b", cpu_offload=True))


def test_force_on_gpu_plans_shows_why_in_the_dry_run(capsys, tmp_path):
    # 70B parameters on one 24 GB card without CPU offload: no compromise fits (not even LoRA: the bf16 base alone is 131 GiB)
    args = ["launch", "--gpu", "rtx4090", "--gpus", "1", "--model", "llama3-70b", "--micro-batch", "1", "--no-cpu-offload", "--recipe", "synthetic",
            "--dry-run", "--json", "--home", str(tmp_path)]
    assert main(args) == 2 and "does not fit" in capsys.readouterr().err
    assert main([*args, "--force"]) == 0
    out, err = capsys.readouterr()
    plan = json.loads(out)["plan"]
    assert "forced (--force)" in err and "GiB per GPU" in err and plan["forced"].startswith("the estimate says")
    assert "launching anyway" not in err and "--dry-run/--emit run nothing here" in err  # a dry run launches nothing


# ---------------------------------------------------------------- real launches (CPU, gloo)
def _launch(capsys, tmp_path, *argv):
    rc = main(["launch", "--cpu", *TINY, "--recipe", "synthetic", "--home", str(tmp_path), "--json", *argv,
               "--", "--pool", "1", "--log-every", "1"])
    rec = json.loads(capsys.readouterr().out)
    run = Path(rec["run_dir"])
    return rc, rec, json.loads((run / "compromise.json").read_text()), run


@pytest.mark.slow
def test_pure_bf16_with_the_step_in_backward_runs_kahan_per_parameter(tmp_path, capsys):
    rc, rec, what, _ = _launch(capsys, tmp_path, "--precision", "pure-bf16", "--optimizer-in-backward",
                               "--base-lr", "0.001", "--max-steps", "4")
    assert rc == 0 and rec["status"] == "succeeded", rec.get("error")
    assert rec["metrics"]["last_loss"] < rec["metrics"]["first_loss"]
    assert what["optimizer"] == "InBackwardOptimizer" and what["inner_optimizer"] == "KahanAdamW"
    assert what["param_dtypes"] == ["bfloat16"] and what["compromises"] == ["pure-bf16", "optimizer-in-backward"]
    assert what["host_threads"] >= 1  # recorded for CPU offload's host step (advisor.compromise_cost)


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None, reason="bitsandbytes not installed")
def test_lora_with_adamw_8bit_on_two_processes_trains_adapters_and_saves_them(tmp_path, capsys):
    """One 2-rank run of two compatible compromises (the pair QLoRA's recipe uses too), each checked as its own
    run would be: LoRA's adapters (trainable fp32 over a bf16 base, saved) and bitsandbytes' 8-bit AdamW."""
    rc, rec, what, run = _launch(capsys, tmp_path, "--processes", "2", "--lora-rank", "4", "--optimizer", "adamw-8bit",
                                 "--base-lr", "0.005", "--max-steps", "4")
    assert rc == 0 and rec["status"] == "succeeded", rec.get("error")
    assert rec["metrics"]["ranks"] == 2 and rec["metrics"]["last_loss"] < rec["metrics"]["first_loss"]
    assert sorted(what["compromises"]) == ["adamw-8bit", "lora-r4"]
    # LoRA
    assert what["trainable_dtypes"] == ["float32"] and "bfloat16" in what["param_dtypes"]
    assert what["mixed_precision"] == "bf16" and set(what["lora_targets"]) == {"q", "k", "v", "o", "up", "down"}
    assert what["trainable_params"] < what["total_params"] / 20
    saved = json.loads((run / "adapters" / "adapter_config.json").read_text())
    assert saved["r"] == 4 and (run / "adapters" / "adapter_model.safetensors").stat().st_size > 0
    # 8-bit AdamW
    assert what["optimizer"] == "AdamW8bit" and what["optimizer_module"].startswith("bitsandbytes")


def test_the_shared_lora_run_gives_8bit_adamw_tensors_it_keeps_in_8_bits():
    """bitsandbytes keeps a tensor's AdamW state in 32 bits below min_8bit_size elements: the shared run above
    proves the 8-bit state only if some of mini-transformer's rank-4 adapters are at least that large."""
    pytest.importorskip("peft")
    bnb = pytest.importorskip("bitsandbytes")
    from advisor.catalog import catalog_model
    from advisor.zoo import build_trainable

    adapters = apply_lora(build_trainable(catalog_model("mini-transformer")), 4)
    trainable = [p for p in adapters.parameters() if p.requires_grad]
    min_8bit = bnb.optim.AdamW8bit(trainable, lr=1e-3).args.min_8bit_size
    assert max(p.numel() for p in trainable) >= min_8bit, min_8bit


@pytest.mark.slow
def test_force_launches_what_the_estimate_refuses_and_the_oom_retry_still_guards_it(tmp_path, capsys, monkeypatch):
    import psutil

    monkeypatch.setattr(psutil, "virtual_memory", lambda: SimpleNamespace(available=2**20))  # 1 MiB "free"
    argv = ["launch", "--cpu", *TINY[:4], "--micro-batch", "4", "--max-steps", "2", "--home", str(tmp_path), "--json",
            "--", str(SCRIPTS / "oom_train.py"), "--micro-batch", "{micro_batch}", "--grad-accum", "{grad_accum}"]
    assert main(argv) == 2 and "host RAM" in capsys.readouterr().err  # refused without --force
    assert main([argv[0], "--force", *argv[1:]]) == 0
    out, err = capsys.readouterr()
    rec = json.loads(out)
    assert "forced (--force): the estimate says mini-transformer needs" in err
    assert rec["status"] == "succeeded" and rec["plan"]["forced"].startswith("the estimate says")
    assert [(a["micro_batch"], a["status"]) for a in rec["attempts"]] == [(4, "oom"), (2, "succeeded")]


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None, reason="bitsandbytes not installed")
def test_qlora_runs_adapters_on_a_4bit_nf4_base(tmp_path, capsys):
    """--lora-rank R --quantize-base 4bit: bitsandbytes Linear4bit (NF4, double quantization) under peft's
    adapters; bitsandbytes runs NF4 on CPU too, so the whole path is tested here."""
    rc, rec, what, run = _launch(capsys, tmp_path, "--lora-rank", "4", "--quantize-base", "4bit", "--base-lr", "0.005",
                                 "--max-steps", "4")
    assert rc == 0 and rec["status"] == "succeeded"
    assert rec["metrics"]["last_loss"] < rec["metrics"]["first_loss"]
    assert what["compromises"] == ["qlora"] and what["quant_type"] == ["nf4"] and what["base_weight_dtypes"] == ["uint8"]
    assert what["linear4bit_layers"] > 0 and what["trainable_dtypes"] == ["float32"]
    assert (run / "adapters" / "adapter_model.safetensors").stat().st_size > 0


@pytest.mark.parametrize("argv, message", [
    (["--cpu", "--optimizer", "paged-adamw-8bit"], "a --cpu run has no GPU to page from"),
    (["--gpu", "H100", "--gpus", "2", "--strategy", "fsdp", "--optimizer", "adamw-8bit"], "bitsandbytes#1633"),
    (["--cpu", "--quantize-base", "4bit"], "add --lora-rank"),
])
def test_compromises_that_cannot_run_are_refused_before_anything_starts(argv, message, tmp_path, capsys):
    rc = main(["launch", *TINY[:2], *argv, "--recipe", "synthetic", "--max-steps", "1", "--home", str(tmp_path)])
    assert rc == 2 and message in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()  # refused before a record or a process


@pytest.mark.skipif(importlib.util.find_spec("bitsandbytes") is None, reason="bitsandbytes not installed")
def test_qlora_and_paged_8bit_plan_for_a_24gb_card(tmp_path, capsys):
    """The standard answers for an 8B model on one RTX 4090 are estimated and launchable (dry run)."""
    for extra in (["--lora-rank", "16", "--quantize-base", "4bit"], ["--model", "llama3.2-1b", "--optimizer", "paged-adamw-8bit"]):
        model = [] if "--model" in extra else ["--model", "llama3-8b"]
        assert main(["launch", *model, *extra, "--gpu", "RTX-4090", "--gpus", "1", "--seq-len", "2048", "--recipe",
                     "synthetic", "--dry-run", "--json", "--home", str(tmp_path)]) == 0
        plan = json.loads(capsys.readouterr().out)["plan"]
        assert plan["config"]["quantize_base"] == ("4bit" if "--quantize-base" in extra else None)
        assert plan["config"]["optimizer"] == ("paged-adamw-8bit" if "--optimizer" in extra else "adamw")
