"""MFU counts the work the training needs (PaLM, Chowdhery et al. 2022, Appendix B): LoRA's step has
no base-weight gradients, and checkpointing's recomputed forward is never counted (issue 27: LoRA's
MFU was shown as 80% on an A100)."""

from __future__ import annotations

import pytest

from advisor.calibration import default_calibration
from advisor.catalog import catalog_model
from advisor.config import Precision, Strategy, TrainConfig
from advisor.estimate import estimate
from advisor.hardware import Machine, resolve_hardware
from advisor.memory import trainable_params
from advisor.throughput import forward_flops, model_flops_per_sample, peak_flops


def _est(**kw):
    m = catalog_model("llama3-8b")
    cfg = TrainConfig(micro_batch=1, grad_accum=1, seq_len=2048, precision=Precision.bf16, strategy=Strategy.single, **kw)
    hw = resolve_hardware(Machine(cpu_cores=8), gpu="A100-80GB", gpus=1)
    return m, cfg, hw, estimate(m, cfg, hw, calibration=default_calibration())


def test_lora_counts_forward_and_input_gradients_only():
    m, cfg, hw, e = _est(lora_rank=16)
    dense, attn = forward_flops(m, cfg)
    tokens = 2048
    need = 2 * dense + 3 * attn + 6 * trainable_params(m, cfg) * tokens
    assert model_flops_per_sample(m, cfg) == pytest.approx(need)
    t = e.throughput
    assert t.mfu == pytest.approx(need * t.samples_per_s / peak_flops(m, cfg, hw))
    full = model_flops_per_sample(m, cfg.model_copy(update={"lora_rank": None}))
    assert model_flops_per_sample(m, cfg) / full == pytest.approx(2 / 3, abs=0.02)  # no weight gradients: a third less


def test_checkpoint_recompute_is_not_model_flops():
    m, cfg, hw, plain = _est(grad_ckpt=False, lora_rank=16)
    _, cfg2, _, ckpt = _est(grad_ckpt=True, lora_rank=16)
    assert model_flops_per_sample(m, cfg) == model_flops_per_sample(m, cfg2)
    # the same work per sample: MFU falls exactly as samples/s does
    assert ckpt.throughput.mfu / plain.throughput.mfu == pytest.approx(
        ckpt.throughput.samples_per_s / plain.throughput.samples_per_s)
