"""fp8 (torchao float8 Linears) and selective activation checkpointing (every k-th block): their estimate terms
(advisor.setup.precision.Fp8, advisor.setup.checkpointing.SelectiveCkpt), their refusals, the runtime's model
changes (launcher.model_setups) and a real selective-checkpointing launch on two CPU processes. The GPU
measurement is benchmarks/gpu_checks/fp8_selective.py (not yet run on a GPU); its fit writes the table
benchmarks/calibration/results/fp8-selective.md."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
import torch

from advisor.calibration import default_calibration
from advisor.catalog import catalog_model
from advisor.config import Precision, TrainConfig
from advisor.errors import UserError
from advisor.estimate import estimate
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec
from advisor.plan import ModelRef, Plan
from advisor.setup.checkpointing import recomputed_share
from advisor.setup.precision import fp8_linears, fp8_step_change
from advisor.sources import resolve_model
from cli.main import main
from launcher import model_setups
from launcher.compromises.checks import check_compromises
from tests.refusals import check_refusal, run_cli

H100 = HardwareSpec(gpu=get_gpu("h100"), gpus_per_node=1, nodes=1)
LLAMA = catalog_model("llama3.2-1b")


def _est(model=LLAMA, **config):
    return estimate(model, TrainConfig(micro_batch=4, seq_len=1024, **config), H100, calibration=default_calibration())


# ---------------------------------------------------------------- selective checkpointing: memory and recompute
def test_selective_checkpointing_keeps_the_unchecked_blocks_and_the_inputs_of_the_others():
    none, every2, full = _est(), _est(grad_ckpt_every=2), _est(grad_ckpt=True)
    assert full.memory.peak_gib < every2.memory.peak_gib < none.memory.peak_gib
    from advisor.activations import activation_profile

    p = activation_profile(LLAMA, TrainConfig(micro_batch=4, seq_len=1024))
    outside = p.per_sample_bytes - p.layers * p.layer_bytes
    # 16 blocks, every 2nd checkpointed: 8 keep everything, 8 keep their input (the residual stream)
    kept = 4 * (8 * p.layer_bytes + 8 * p.boundary_bytes + outside) + p.fixed_bytes
    assert every2.memory.detail["saved_activations_gib"] == pytest.approx(kept / 2**30)
    assert "8 of 16" in " ".join(every2.memory.notes)


def test_selective_recompute_is_the_checkpointed_share_of_the_forward():
    assert recomputed_share(LLAMA, TrainConfig(grad_ckpt_every=2)) == 0.5
    assert recomputed_share(LLAMA, TrainConfig(grad_ckpt_every=3)) == 5 / 16  # blocks 2, 5, 8, 11, 14
    assert recomputed_share(LLAMA, TrainConfig(grad_ckpt=True)) == 1.0
    none, every2, full = (_est(**c).throughput.samples_per_s for c in ({}, {"grad_ckpt_every": 2}, {"grad_ckpt": True}))
    assert full < every2 < none


def test_torchtitans_block_choice():
    assert model_setups.checkpointed_indices(16, 2) == [1, 3, 5, 7, 9, 11, 13, 15]
    assert model_setups.checkpointed_indices(7, 3) == [2, 5]


# ---------------------------------------------------------------- fp8: memory and step terms
def test_fp8_converts_the_blocks_linears_and_keeps_the_heads_bf16_copy():
    a = LLAMA.arch
    assert len(fp8_linears(LLAMA)) == 7 * a.n_layers  # q k v o gate up down
    bf16, fp8 = _est(precision=Precision.bf16), _est(precision=Precision.fp8)
    # torchao saves a view of the fp32 weight, not a bf16 copy: only the (tied) LM head's copy is left
    assert fp8.memory.autocast_copies_gib == pytest.approx(2 * a.vocab * a.d_model / 2**30)
    assert fp8.memory.activations_gib == pytest.approx(bf16.memory.activations_gib)
    assert fp8.memory.peak_gib < bf16.memory.peak_gib


def test_fp8_gemms_run_at_the_float8_peak_and_eager_casts_cost_their_bytes(monkeypatch):
    """The mechanics, on the prior rates (float8 GEMMs at bf16's fraction of twice the peak): compiled casts are
    fused and the GEMMs win; eager casts cost their bytes and launches."""
    import advisor.setup.precision as precision

    monkeypatch.setattr(precision, "fp8_rates", lambda: {"fp8_gemm_efficiency": 1.0, "fp8_eager_cast_factor": 1.0,
                                                         "source": "prior, before any measurement"})
    cal, gpu = default_calibration(), get_gpu("h100")
    eager = fp8_step_change(LLAMA, TrainConfig(micro_batch=4, seq_len=1024, precision=Precision.fp8), gpu, cal)
    compiled = fp8_step_change(LLAMA, TrainConfig(micro_batch=4, seq_len=1024, precision=Precision.fp8, compile=True),
                               gpu, cal)
    assert compiled.gpu_s < 0 < eager.gpu_s  # compiled casts are fused: the float8 GEMMs win
    casts = [[n for n in step.notes if "cast kernels" in n] for step in (eager, compiled)]
    assert compiled.host_s == 0 < eager.host_s and casts[0] and not casts[1]
    assert _est(precision=Precision.fp8, compile=True).throughput.samples_per_s > \
        _est(precision=Precision.bf16, compile=True).throughput.samples_per_s


def test_the_measured_fp8_rates_make_eager_fp8_slower_than_bf16_on_a_1b_model():
    """benchmarks/calibration/results/fp8-selective.md (H100, torchao 0.18): eager float8 Linears ran at 0.24-0.34x
    bf16's samples/s on llama3.2-1b, compiled block by block 0.98x; the fit rates carry that to the estimate."""
    eager = {p: _est(precision=p).throughput.samples_per_s for p in (Precision.bf16, Precision.fp8)}
    compiled = {p: _est(precision=p, compile=True).throughput.samples_per_s for p in (Precision.bf16, Precision.fp8)}
    assert eager[Precision.fp8] < 0.5 * eager[Precision.bf16]
    assert eager[Precision.fp8] < compiled[Precision.fp8]


def test_an_unmeasured_fp8_rate_is_said_in_the_notes_and_the_reports_header(monkeypatch, capsys):
    """While fp8_rates.json holds the prior (no GPU row fit yet), the estimate says the fp8 speed is assumed,
    and the recommendation's header lists it beside the calibration; a fit rate says nothing of the kind."""
    import advisor.setup.precision as precision

    cfg = TrainConfig(micro_batch=4, seq_len=1024, precision=Precision.fp8)
    prior = {"fp8_gemm_efficiency": 1.0, "fp8_eager_cast_factor": 1.0, "source": "prior, before any measurement"}
    monkeypatch.setattr(precision, "fp8_rates", lambda: prior)
    assert any("fp8 speed assumed, not measured" in n
               for n in fp8_step_change(LLAMA, cfg, H100.gpu, default_calibration()).notes)
    assert main(["--model", "llama3.2-1b", "--gpu", "H100", "--gpus", "1", "--precision", "fp8"]) == 0
    header = capsys.readouterr().out.split("recommendation")[0]
    assert "fp8 speed assumed, not measured" in header
    from types import SimpleNamespace

    from cli.report import calibration_words

    note = "fp8 speed assumed, not measured: the prior"  # said beside a measured calibration too
    measured = SimpleNamespace(summary=lambda: "H100 fit (3 runs)")
    assert calibration_words(SimpleNamespace(calibration=[measured], notes=[note])) == \
        "H100 fit (3 runs); fp8 speed assumed, not measured"
    monkeypatch.setattr(precision, "fp8_rates", lambda: {**prior, "source": "fit by benchmarks/calibration/..."})
    assert not any("assumed" in n for n in fp8_step_change(LLAMA, cfg, H100.gpu, default_calibration()).notes)


# ---------------------------------------------------------------- refusals
@pytest.mark.parametrize("argv, words", [
    (["estimate", "--model", "llama3.2-1b", "--gpu", "a100", "--precision", "fp8"], "compute capability 8.0"),
    (["estimate", "--model", "resnet50", "--gpu", "h100", "--precision", "fp8"], "needs a transformer"),
    (["estimate", "--model", "llama3.2-1b", "--gpu", "h100", "--precision", "fp8", "--lora-rank", "8"], "--lora-rank"),
    (["estimate", "--model", "gpt2", "--implementation", "transformers", "--gpu", "h100", "--precision", "fp8"],
     "whose blocks hold no nn.Linear"),
    (["--model", "gpt2", "--implementation", "transformers", "--gpu", "h100", "--precision", "fp8"],
     "whose blocks hold no nn.Linear"),
    (["--model", "llama3.2-1b", "--gpu", "h100", "--grad-ckpt", "--grad-ckpt-every", "2"], "--grad-ckpt-every 2 with"),
    (["estimate", "--model", "llama3.2-1b", "--gpu", "h100", "--grad-ckpt-every", "1"], "must be at least 2"),
    (["launch", "--cpu", "--model", "mini-transformer", "--precision", "fp8", "--recipe", "synthetic", "--dry-run"],
     "--precision fp8 with --cpu"),
])
def test_refused_in_one_line_with_exit_2(argv, words, capsys):
    rc, _, err = run_cli(argv, capsys)  # argparse's range check, or run_guarded's exit 2
    check_refusal(rc, err, words)


def test_fp8_launch_without_torchao_says_how_to_install_it(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torchao" else real(name, *a))
    plan = Plan(model=ModelRef(name="llama3.2-1b"), config=TrainConfig(micro_batch=1, precision=Precision.fp8),
                gpu="H100-SXM", processes_per_node=1, global_batch=1, lr=1e-5, base_lr=1e-5, base_batch=1)
    with pytest.raises(UserError) as err:
        check_compromises(plan)
    assert "torchao" in err.value.what and "pip install" in err.value.fix
    assert Plan.model_validate_json(plan.model_dump_json()).mixed_precision == "bf16"  # autocast around float8


def test_fp8_on_conv1d_blocks_is_refused_when_the_launch_plans():
    """transformers' GPT-2 (Conv1D projections) under fp8 is refused before any process starts, not in every rank
    (launcher.model_setups.float8_linears stays the safety net); cardwise's own GPT-2 is built of nn.Linear."""
    def plan(implementation):
        return Plan(model=ModelRef(name="gpt2", implementation=implementation),
                    config=TrainConfig(micro_batch=1, precision=Precision.fp8), gpu="H100-SXM", processes_per_node=1,
                    global_batch=1, lr=1e-5, base_lr=1e-5, base_batch=1)

    with pytest.raises(UserError) as err:
        check_compromises(plan("transformers"))
    assert "no nn.Linear" in err.value.what and "--implementation cardwise" in err.value.fix
    assert resolve_model(ModelRef(name="gpt2", implementation="transformers")).linear_blocks is False
    assert catalog_model("gpt2").linear_blocks is True  # the zoo's GPT-2: nn.Linear projections
    assert resolve_model(ModelRef(name="llama3.2-1b", implementation="transformers")).linear_blocks is True


def test_a_plan_without_selective_checkpointing_keeps_its_old_json():
    dumped = TrainConfig().model_dump(mode="json")
    assert "grad_ckpt_every" not in dumped and TrainConfig(grad_ckpt_every=2).model_dump()["grad_ckpt_every"] == 2


# ---------------------------------------------------------------- the runtime's model changes
def test_checkpoint_every_wraps_every_kth_block_and_keeps_the_state_dict_names():
    from advisor.zoo import build_trainable

    spec = catalog_model("mini-transformer")
    torch.manual_seed(0)
    ref = build_trainable(spec)
    torch.manual_seed(0)
    net = build_trainable(spec)
    assert model_setups.checkpoint_every(net, 2) == [1, 3, 5]
    assert model_setups.describe(net)["checkpointed_blocks"] == [1, 3, 5]
    assert list(net.state_dict()) == list(ref.state_dict())
    x, y = torch.randint(0, spec.arch.vocab, (2, 8)), torch.randint(0, 2, (2,))
    ref.eval(), net.eval()  # no dropout: the same numbers through the wrappers
    ref(x, y).backward()
    net(x, y).backward()
    for (name, a), b in zip(ref.named_parameters(), net.parameters()):
        assert torch.allclose(a.grad, b.grad, atol=1e-6), name


@pytest.mark.skipif(importlib.util.find_spec("torchao") is None, reason="torchao is not installed here")
def test_float8_linears_converts_only_the_blocks_aligned_linears():
    from advisor.zoo import build_trainable

    net = build_trainable(catalog_model("mini-transformer"))
    assert model_setups.float8_linears(net) == 6 * 6  # 6 blocks x q k v o up down, all multiples of 16
    assert model_setups.describe(net)["float8_linears"] == 36


# ---------------------------------------------------------------- a real launch
@pytest.mark.slow
def test_selective_checkpointing_runs_on_two_cpu_processes(tmp_path, capsys):
    rc = main(["launch", "--cpu", "--processes", "2", "--model", "mini-transformer", "--seq-len", "8", "--micro-batch",
               "2", "--grad-ckpt-every", "2", "--recipe", "synthetic", "--max-steps", "4", "--base-lr", "0.001",
               "--home", str(tmp_path), "--json", "--", "--pool", "1", "--log-every", "1"])
    rec = json.loads(capsys.readouterr().out)
    assert rc == 0 and rec["status"] == "succeeded"
    assert rec["metrics"]["last_loss"] < rec["metrics"]["first_loss"]
    what = json.loads((Path(rec["run_dir"]) / "compromise.json").read_text())
    assert what["checkpointed_blocks"] == [1, 3, 5] and what["float8_linears"] == 0


def test_the_packaged_fp8_rates_are_what_the_fit_writes(tmp_path, capsys):
    from advisor.setup.precision import FP8_RATES
    from benchmarks.calibration import fit_fp8_selective as fit

    out = tmp_path / "fp8_rates.json"
    assert fit.main(["--rates", str(out), "--no-table"]) == 0
    assert out.read_text() == FP8_RATES.read_text(), "run: python -m benchmarks.calibration.fit_fp8_selective"


def test_float8_linears_refuses_blocks_without_a_linear_instead_of_running_bf16():
    """transformers' GPT-2 builds its projections as Conv1D, which torchao does not convert: converting none
    and training on in bf16 under an fp8 label is what the launch must not do."""
    transformers = pytest.importorskip("transformers")

    net = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=128))
    with pytest.raises(ValueError, match="no nn.Linear .* Conv1D"):
        model_setups.float8_linears(net)
