"""A compiled step's fused cross-entropy (advisor.compiled, issue 39): cardwise's own models hold the fitted bytes
per logit, a causal LM one more gradient of its shifted logits, transformers' models their measured 6."""

from __future__ import annotations

from advisor.calibration import default_calibration
from advisor.catalog import catalog_model
from advisor.compiled import TRANSFORMERS_LOSS_BYTES, compiled_loss_temp_bytes
from advisor.config import TrainConfig
from advisor.gpus import get_gpu
from advisor.hardware import HardwareSpec
from advisor.memory import estimate_memory


def test_the_causal_lm_holds_the_gradient_of_its_shifted_logits_too():
    assert compiled_loss_temp_bytes("lm", 2, False, 1.0) == 3.0
    assert compiled_loss_temp_bytes("mlm", 2, False, 1.0) == 1.0
    assert compiled_loss_temp_bytes("lm", 2, True, 1.0) == TRANSFORMERS_LOSS_BYTES


def test_compiled_zoo_gpt2_loss_temporaries_follow_the_fitted_bytes():
    cal = default_calibration()
    hw = HardwareSpec(gpu=get_gpu("H100-SXM"), gpus_per_node=1)
    spec = catalog_model("gpt2")
    cfg = TrainConfig(micro_batch=32, seq_len=1024, precision="bf16", compile=True)
    temps = estimate_memory(spec, cfg, hw, cal).detail["loss_temporaries_gib"]
    logits = 32 * 1024 * spec.arch.vocab
    assert abs(temps * 2**30 - (cal.compile_loss_bytes + 2) * logits) < 1e-3 * logits
    more = cal.model_copy(update={"compile_loss_bytes": cal.compile_loss_bytes + 1})
    assert estimate_memory(spec, cfg, hw, more).peak_gib > estimate_memory(spec, cfg, hw, cal).peak_gib
