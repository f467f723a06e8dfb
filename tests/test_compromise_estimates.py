"""Issue 12: each memory compromise as the estimator models it (the runtime's semantics), node H's
recommendation on one H200 / A100-80GB / RTX 4090, and the peak moment's parts."""

from __future__ import annotations

import shlex

import pytest

from advisor.catalog import catalog_model
from advisor.setup.adapters import lora_params
from advisor.setup.optimizers import BNB_BLOCK, largest_tensor_params, small_tensor_params
from advisor.config import Optimizer, Precision, Strategy, TrainConfig
from advisor.errors import UserError
from advisor.estimate import estimate
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec, Machine

GIB = float(2**30)
N8B = 8_030_261_248


def _est(model="llama3-8b", gpu="H200", **cfg):
    cfg.setdefault("micro_batch", 1)
    cfg.setdefault("seq_len", 2048)
    return estimate(catalog_model(model), TrainConfig(**cfg), HardwareSpec(gpu=get_gpu(gpu)))


def test_pure_bf16_keeps_a_kahan_buffer_per_parameter():
    m = _est(precision=Precision.pure_bf16).memory
    assert m.weights_gib == pytest.approx(2 * N8B / GIB)
    assert m.detail["gradient_buffer_gib"] == pytest.approx(2 * N8B / GIB)
    assert m.optimizer_gib == pytest.approx((4 + 2) * N8B / GIB)  # bf16 m, v + bf16 compensation


def test_adamw_8bit_is_bitsandbytes_blockwise_with_fp32_small_tensors():
    spec = catalog_model("gpt2")  # d_model 768: every norm and bias is under min_8bit_size
    m = estimate(spec, TrainConfig(micro_batch=1, seq_len=1024, optimizer=Optimizer.adamw_8bit),
                 HardwareSpec(gpu=get_gpu("H200"))).memory
    a = spec.arch
    h, f = a.d_model, a.d_ff
    small = a.n_layers * (4 * h + (3 * h) + h + f + h) + 2 * h  # norms, qkv bias, o bias, fc/proj biases, final norm
    assert small_tensor_params(spec, TrainConfig()) == small
    big = spec.params - small
    assert m.optimizer_gib == pytest.approx((big * (2 + 8 / BNB_BLOCK) + small * 8) / GIB)
    # Llama 3 8B's norms have 4,096 elements: not under the threshold, all 8-bit
    assert small_tensor_params(catalog_model("llama3-8b"), TrainConfig()) == 0


def test_optimizer_in_backward_keeps_one_gradient_alive():
    std = _est(grad_ckpt=True).memory
    oib = _est(grad_ckpt=True, optimizer_in_backward=True).memory
    one = largest_tensor_params(catalog_model("llama3-8b"))
    assert one == 128256 * 4096  # the embedding (and the untied LM head)
    assert oib.detail["gradient_buffer_gib"] == pytest.approx(4 * one / GIB)
    assert oib.peak_gib < std.peak_gib - 5 and oib.peak_at == "backward"  # the optimizer-step moment is gone
    from advisor.setup.constraints import Combo, check

    with pytest.raises(UserError, match="no gradient to accumulate"):  # the table of what combines
        check(Combo.of_config(TrainConfig(optimizer_in_backward=True, grad_accum=2), ranks=1))
    with pytest.raises(UserError, match="one process only"):
        check(Combo.of_config(TrainConfig(optimizer_in_backward=True, strategy=Strategy.ddp), ranks=2))


def test_cpu_offload_keeps_states_in_host_ram():
    m = _est(gpu="RTX-4090", cpu_offload=True, strategy=Strategy.fsdp, grad_ckpt=True).memory
    assert m.weights_gib == m.optimizer_gib == 0
    assert m.host_gib == pytest.approx(16 * N8B / GIB)  # fp32 weights, grads, two moments
    assert m.detail["fsdp_gathered_gib"] > 0 and m.fits


def test_cpu_offload_peak_is_the_loss_backward_with_bf16_activations_and_no_gradient():
    """FSDP2 offload (llama3.2-3b, tied embeddings): bf16 residual stream (activations as pure-bf16 keeps
    them), the root unit plus one prefetched layer gathered in bf16, no gradient on the GPU at the start
    of backward. Measured on one H200: 7.42 GiB (benchmarks/calibration/results/h200-compromises/cpu-offload.json)."""
    from advisor.activations import activation_precision
    cfg = dict(micro_batch=2, cpu_offload=True, strategy=Strategy.fsdp, grad_ckpt=True)
    m = _est("llama3.2-3b", **cfg).memory
    a = catalog_model("llama3.2-3b").arch
    root = catalog_model("llama3.2-3b").params - a.n_layers * a.layer_params()
    assert m.peak_at == "backward" and "gradients" not in {p.name for p in m.peak_parts}
    assert m.detail["fsdp_gathered_gib"] == pytest.approx((root + a.layer_params()) * 2 / GIB)
    assert activation_precision(TrainConfig(**cfg)) is Precision.pure_bf16
    assert activation_precision(TrainConfig(micro_batch=2)) is Precision.bf16  # autocast over fp32 weights
    assert m.peak_gib == pytest.approx(7.42, rel=0.05)


def test_lora_activations_are_bf16_since_the_base_is_cast_to_bf16():
    """The runtime casts the frozen base to bf16 before peft wraps it: a bf16 residual stream.
    Measured on one H200: 29.4 GiB (benchmarks/calibration/results/h200-compromises/lora-r16.json)."""
    from advisor.activations import activation_precision
    assert activation_precision(TrainConfig(micro_batch=4, lora_rank=16)) is Precision.pure_bf16
    m = _est(micro_batch=4, lora_rank=16, grad_ckpt=True).memory
    assert m.peak_gib == pytest.approx(29.4, rel=0.05)


def test_lora_loads_the_base_in_bf16_and_autocast_copies_only_the_adapters():
    spec = catalog_model("llama3-8b")
    nt = lora_params(spec, 16)
    lora = _est(lora_rank=16).memory
    assert lora.weights_gib == pytest.approx(((N8B - nt) * 2 + nt * 4) / GIB)
    assert lora.autocast_copies_gib == pytest.approx(2 * nt / GIB)
    assert lora.optimizer_gib == pytest.approx(8 * nt / GIB)
    full = _est().memory
    assert lora.peak_gib < 0.6 * full.peak_gib  # measured: about half of the old estimate (issue 12)


def test_accumulation_keeps_fp32_gradients_beside_the_next_autocast_copies():
    acc = _est(grad_ckpt=True, grad_accum=8).memory
    one = _est(grad_ckpt=True).memory
    parts = {p.name: p.gib for p in acc.peak_parts}
    assert acc.peak_at == "backward" and parts["gradients"] == pytest.approx(4 * N8B / GIB)
    assert parts["autocast copies"] > 10
    assert one.peak_gib < acc.peak_gib


@pytest.mark.parametrize("cfg", [dict(), dict(grad_accum=4), dict(precision=Precision.pure_bf16),
                                 dict(optimizer=Optimizer.adamw_8bit), dict(optimizer_in_backward=True),
                                 dict(cpu_offload=True, strategy=Strategy.fsdp), dict(lora_rank=8),
                                 dict(grad_ckpt=True, micro_batch=4)])
def test_the_peak_moments_parts_sum_to_the_peak(cfg):
    m = _est(**cfg).memory
    assert sum(p.gib for p in m.peak_parts) == pytest.approx(m.peak_gib)
    assert "activations without copies" not in {p.name for p in m.peak_parts} or \
        "autocast copies" in {p.name for p in m.peak_parts}


def _recommend(argv):
    from cli.flags import request_from_namespace
    from cli.main import build_parser
    from rules.api import recommend

    return recommend(request_from_namespace(build_parser("recommend").parse_args(argv)), machine=Machine(cpu_cores=16))


@pytest.mark.parametrize("gpu", ["H200", "A100-80GB", "RTX-4090"])
def test_llama3_8b_on_one_gpu_recommends_a_compromise_that_fits_and_launches(gpu):
    from cli.flags import request_from_namespace
    from cli.main import build_parser
    from rules.api import plan

    rec = _recommend(["--model", "llama3-8b", "--gpu", gpu, "--gpus", "1"])
    r = rec.recommendation
    data = rec.model_dump(mode="json")["recommendation"]
    assert r.fits and rec.estimate.memory.fits and data["fits"] is True
    assert set(data["compromise"].split("+")) <= {"no-accumulation", "pure-bf16", "adamw-8bit", "optimizer-in-backward",
                                                  "cpu-offload", "lora", "qlora", "paged-adamw-8bit"}
    assert r.global_batch == 128 and r.compromise_rule  # never global batch 1; the policy says which part applied
    assert r.gives_up and r.standard_verdict and rec.decision_path[-1].node == "H"
    # the command is `advise launch`'s, and the plan it gives back carries the compromise
    argv = shlex.split(r.command)
    assert argv[:2] == ["advise", "launch"]
    again = plan(request_from_namespace(build_parser("launch").parse_args(argv[2:] + ["--recipe", "synthetic"])))
    assert again == rec.plan
    if r.compromise == "cpu-offload":
        assert again.config.cpu_offload and again.config.strategy is Strategy.fsdp
    # a plan that fits only without accumulation says so, and its command pins it (the OOM retry keeps it)
    no_acc = "no-accumulation" in r.compromise.split("+")
    assert rec.plan.no_accumulation is no_acc and ("--grad-accum" in argv) is no_acc


def test_exact_before_lossy_unless_more_than_twice_slower():
    """Issue 27's policy: CPU offload (exact) is taken while within 2x of the fastest close-arithmetic
    compromise; a global batch changed by more than 2x (no accumulation down to 1) ranks last."""
    from rules.compromise import EXACT_SLOWDOWN_LIMIT

    rec = _recommend(["--model", "llama3-8b", "--gpu", "H200", "--gpus", "1"])
    r = rec.recommendation
    fitting = {a.name.split(" ")[0]: a for a in rec.alternatives if a.kind in ("compromise", "offload") and a.fits}
    assert r.compromise == "cpu-offload" and r.global_batch == 128 and "exact before lossy" in r.compromise_rule
    close = max(fitting[n].samples_per_s for n in ("pure-bf16", "pure-bf16+adamw-8bit"))
    assert close / rec.estimate.throughput.samples_per_s <= EXACT_SLOWDOWN_LIMIT
    assert "lora" in fitting and fitting["lora"].samples_per_s > rec.estimate.throughput.samples_per_s  # faster, lower tier
    assert fitting["no-accumulation"].samples_per_s > 0  # listed, never chosen


def test_any_level_that_changes_the_global_batch_by_more_than_2x_ranks_last():
    """The optimizer step in backward runs without accumulation, like no-accumulation: at global batch 2
    instead of 128 it is a different training (tier "batch"), not close arithmetic; within 2x it is close
    at best. (tests/test_policy_regret.py's re-derivation reads tiers from the batch trained.)"""
    from types import SimpleNamespace

    from rules.compromise import LEVELS, Tried, tier
    from rules.planner import Choice

    p = SimpleNamespace(target_batch=128)
    level = {lv.name: lv for lv in LEVELS}

    def ranked(name: str, batch: int) -> str:
        return tier(Tried(level[name], Choice(1, Strategy.single, None, None, global_batch=batch, lr=None)), p)

    assert ranked("optimizer-in-backward", 2) == "batch" and ranked("no-accumulation", 1) == "batch"
    assert ranked("optimizer-in-backward", 64) == "close" and ranked("cpu-offload", 64) == "close"
    assert ranked("cpu-offload", 128) == "exact" and ranked("lora", 128) == "different"


def test_a_level_may_combine_with_lower_risk_levels_and_says_what_runs():
    rec = _recommend(["--model", "llama3-8b", "--gpu", "A100-80GB", "--gpus", "1", "--no-cpu-offload"])
    r = rec.recommendation
    # pure-bf16 alone (with its Kahan buffer) does not fit 80 GB, 8-bit AdamW alone neither; together they
    # do, in the close-arithmetic tier; the text says what launcher.compromises builds: bitsandbytes'
    # AdamW8bit on bf16 weights, not the Kahan-compensated update
    assert r.compromise == "pure-bf16+adamw-8bit" and r.precision == "pure-bf16" and r.optimizer == "adamw-8bit"
    assert "fp32 master weights" in r.gives_up and "8 bits" in r.gives_up
    assert "Kahan" not in r.gives_up and "without compensation" in r.gives_up


def test_the_wizard_shows_the_verdict_the_compromise_and_the_peak_parts():
    from tui.screens.recommendation import config_text

    text = config_text(_recommend(["--model", "llama3-8b", "--gpu", "H200", "--gpus", "1"]))
    assert "compromise: cpu-offload" in text and "gives up" in text and "fp32 gradients" in text
    assert "autocast copies" in text or "peak at the" in text


PINS = [[], ["--optimizer-in-backward"], ["--optimizer-in-backward", "--strategy", "single"], ["--cpu-offload"],
        ["--precision", "pure-bf16", "--optimizer", "adamw-8bit"], ["--lora-rank", "8"], ["--grad-accum", "4"],
        ["--optimizer-in-backward", "--strategy", "single", "--lora-rank", "16"], ["--task", "pretrain"],
        ["--lora-rank", "16", "--quantize-base", "4bit"], ["--optimizer", "paged-adamw-8bit"],
        ["--optimizer", "adamw-8bit", "--strategy", "fsdp"]]


@pytest.mark.parametrize("gpus", ["1", "4"])
@pytest.mark.parametrize("pins", PINS, ids=[" ".join(p) or "none" for p in PINS])
def test_pins_and_compromises_never_crash_and_the_command_gives_the_plan_back(pins, gpus):
    argv = ["--model", "llama3-8b", "--gpu", "RTX-4090", "--gpus", gpus, "--seq-len", "2048", "--alternatives"] + pins
    try:
        rec = _recommend(argv)
    except UserError as exc:  # a refusal must say what and how to fix it
        assert exc.fix
        return
    r = rec.recommendation
    if r.fits:
        again = _recommend(shlex.split(r.command)[2:])
        assert again.plan == rec.plan, r.command
        c = rec.plan.config
        assert not (c.optimizer_in_backward and (c.grad_accum > 1 or rec.plan.world_size > 1))
        assert not (c.cpu_offload and c.strategy is not Strategy.fsdp)
        assert not (c.optimizer.eight_bit and c.strategy is Strategy.fsdp)  # bitsandbytes#1633
    else:
        assert r.compromise is None and rec.alternatives


def test_qlora_alternative_launches_what_it_estimates():
    """The QLoRA alternative's command gives back a plan with the 4-bit base (not plain LoRA's), and
    its estimate holds the 4-bit weights: 0.516 bytes per projection weight (advisor.setup.adapters)."""
    from cli.flags import request_from_namespace
    from cli.main import build_parser
    from rules.api import plan

    rec = _recommend(["--model", "llama3-8b", "--gpu", "RTX-4090", "--gpus", "1", "--no-cpu-offload"])
    alts = {a.name.split(" ")[0]: a for a in rec.alternatives if a.fits}
    q = alts.get("qlora") or alts.get("lora")
    assert "qlora" in alts or rec.recommendation.compromise == "qlora"
    cmd = alts["qlora"].command if "qlora" in alts else rec.recommendation.command
    again = plan(request_from_namespace(build_parser("launch").parse_args(shlex.split(cmd)[2:] + ["--recipe", "synthetic"])))
    assert again.config.quantize_base == "4bit" and again.config.lora_rank == 16
    assert q.device_gib < 24
    lora = _est(lora_rank=16, grad_ckpt=True).memory
    qlora = _est(lora_rank=16, quantize_base="4bit", grad_ckpt=True).memory
    assert lora.weights_gib - qlora.weights_gib == pytest.approx(6.98e9 * (2 - 0.516) / GIB, rel=0.02)


def test_paged_8bit_states_are_outside_torchs_peak_and_page_out_beyond_the_gpu():
    """PagedAdamW8bit's states live in CUDA unified memory: not in peak_gib (max_memory_allocated), resident
    in the GPU's room, the rest paged to host RAM at a PCIe cost per step."""
    plain = _est(precision=Precision.pure_bf16, optimizer=Optimizer.adamw_8bit, grad_ckpt=True)
    paged = _est(precision=Precision.pure_bf16, optimizer=Optimizer.paged_adamw_8bit, grad_ckpt=True)
    assert paged.memory.peak_gib == pytest.approx(plain.memory.peak_gib - plain.memory.optimizer_gib, abs=0.01)
    assert paged.memory.detail["paged_states_gib"] == pytest.approx(plain.memory.optimizer_gib)
    assert paged.memory.detail["paged_out_gib"] == 0  # an H200 has the room: all resident, no paging cost
    assert paged.throughput.samples_per_s == pytest.approx(plain.throughput.samples_per_s)
    small = _est(gpu="RTX-4090", precision=Precision.pure_bf16, optimizer=Optimizer.paged_adamw_8bit, grad_ckpt=True,
                 model="llama3.2-3b", micro_batch=4)
    ref = _est(gpu="RTX-4090", precision=Precision.pure_bf16, optimizer=Optimizer.adamw_8bit, grad_ckpt=True,
               model="llama3.2-3b", micro_batch=4)
    assert not ref.memory.fits and small.memory.fits  # micro-batch 4 fits a 24 GB card only with paged states
    assert small.memory.detail["paged_out_gib"] > 0 and small.memory.host_gib > 0
    assert small.throughput.samples_per_s < ref.throughput.samples_per_s


def _risk_rows(*rows):
    """Tried rows of one tier (fastest first) from (level name, config update, samples/s, hours)."""
    from types import SimpleNamespace

    from rules.compromise import LEVELS, Tried
    from rules.planner import Choice

    level = {lv.name: lv for lv in LEVELS}
    out = []
    for name, update, sps, hours in rows:
        cfg = TrainConfig(micro_batch=1, **update)
        est = SimpleNamespace(throughput=SimpleNamespace(samples_per_s=sps, conservative_samples_per_s=sps),
                              time_to_train_h=hours)
        out.append(Tried(level[name], Choice(1, Strategy.single, cfg, est, global_batch=128, lr=None), label=name))
    return sorted(out, key=lambda t: -t.result.estimate.throughput.samples_per_s)


def _req(deadline=None):
    from types import SimpleNamespace

    return SimpleNamespace(req=SimpleNamespace(deadline_h=deadline, margin=0.15))


UNCOMPENSATED = {"precision": Precision.pure_bf16, "optimizer": Optimizer.adamw_8bit}
KAHAN = {"precision": Precision.pure_bf16}
EIGHT_BIT = {"optimizer": Optimizer.adamw_8bit}


def test_within_a_tier_less_numerical_risk_wins_unless_more_than_10_percent_slower():
    """Issue 38 / DESIGN.md node H: fp32 master + 8-bit states, then compensated pure-bf16, then
    uncompensated; a lower risk is passed over only when it is more than ~10% slower."""
    from rules.compromise import risk_of
    from rules.risk import least_risk

    assert [risk_of(TrainConfig(micro_batch=1, **u)).id for u in (EIGHT_BIT, KAHAN, UNCOMPENSATED)] == \
        ["quantized-states", "compensated-bf16", "uncompensated-bf16"]
    rows = _risk_rows(("pure-bf16", UNCOMPENSATED, 10.0, 8.16), ("pure-bf16", KAHAN, 9.9, 8.25),
                      ("adamw-8bit", EIGHT_BIT, 9.4, 8.68))
    pick, rule = least_risk(rows, _req())
    assert pick.result.config.optimizer is Optimizer.adamw_8bit and pick.result.config.precision is Precision.bf16
    assert "less numerical risk before speed" in rule and "6.0% slower" in rule
    # the fp32-master variant 15% slower: the compensated one, the least risk within 10%
    rows = _risk_rows(("pure-bf16", UNCOMPENSATED, 10.0, 8.16), ("pure-bf16", KAHAN, 9.9, 8.25),
                      ("adamw-8bit", EIGHT_BIT, 8.5, 9.6))
    pick, rule = least_risk(rows, _req())
    assert pick.result.config.precision is Precision.pure_bf16 and not pick.result.config.optimizer.eight_bit
    assert rule.startswith("speed before risk") and "15.0% slower" in rule
    # both lower risks more than 10% slower: the fastest
    rows = _risk_rows(("pure-bf16", UNCOMPENSATED, 10.0, 8.16), ("pure-bf16", KAHAN, 8.8, 9.3))
    pick, rule = least_risk(rows, _req())
    assert pick.result.config.optimizer.eight_bit and rule.startswith("speed before risk")


def test_the_deadline_needs_the_faster_one():
    from rules.risk import least_risk

    rows = _risk_rows(("pure-bf16", UNCOMPENSATED, 10.0, 8.16), ("pure-bf16", KAHAN, 9.9, 8.25),
                      ("adamw-8bit", EIGHT_BIT, 9.4, 8.68))
    pick, rule = least_risk(rows, _req(deadline=10.0))  # 8.5 h less the margin: the 8-bit variant misses it
    assert pick.result.config.precision is Precision.pure_bf16 and not pick.result.config.optimizer.eight_bit
    assert rule.startswith("the deadline needs the faster one") and "8.68 h" in rule and "8.50 h" in rule
    pick, _ = least_risk(rows, _req(deadline=11.0))  # 9.35 h: every variant meets it, the least risk wins
    assert pick.result.config.optimizer is Optimizer.adamw_8bit
    pick, rule = least_risk(rows, _req(deadline=9.0))  # 7.65 h: none meets it, the risk rule alone
    assert pick.result.config.optimizer is Optimizer.adamw_8bit and "less numerical risk" in rule


def test_advise_rules_lists_the_numerical_risk_classes(capsys):
    """The risk classes are data with a why and a source, shown by `advise rules fit.compromise`."""
    import json

    from cli.main import main

    assert main(["rules", "fit.compromise", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)["defaults"]
    assert [c["id"] for c in table["classes"]] == ["none", "quantized-states", "compensated-bf16", "no-global-clip",
                                                   "uncompensated-bf16"]
    assert all(c["why"] and c["source"] for c in table["classes"]) and table["risk_slack"] == 0.10
    assert "adamw-8bit" in table["classes"][1]["compromises"]
