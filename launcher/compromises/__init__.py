"""The memory compromises of decision node H, as the runtime applies them (issue #12).

``launcher.runtime.Runtime`` calls three hooks here, so that every recipe and every user script
that uses the runtime gets the same behaviour:

- ``apply_to_model``  (from ``setup_model``): LoRA adapters (``lora``) after the plan's other model choices;
- ``make_optimizer``  (from ``optimizer``): KahanAdamW for pure-bf16 (``kahan``; torch AdamW on the
  bf16 weights with ``--pure-bf16-update plain``), bitsandbytes AdamW8bit for adamw-8bit and
  PagedAdamW8bit for paged-adamw-8bit (no Kahan compensation: with pure-bf16 these step the bf16
  weights plainly), either wrapped per parameter for --optimizer-in-backward (``in_backward``);
  QLoRA's 4-bit base (``lora.quantize_4bit``) from ``apply_to_model``;
- ``describe``        (from ``prepare``): ``compromise.json`` in the run directory, what really ran
  (optimizer class, parameter dtypes, trainable counts, FSDP offload), for the run record and the tests.

FSDP CPU offload needs no runtime code: the Accelerate config says ``fsdp_offload_params``
(``launcher.accelerate_config``). ``checks.check_compromises`` refuses, at plan time, what cannot
run. ``advisor.memory`` models each compromise's bytes with the same semantics.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from advisor.setup import COMPROMISES, offloads
from advisor.config import Optimizer, Precision
from advisor.plan import Plan

if TYPE_CHECKING:  # torch is imported where a rank needs it: `advise launch` plans (checks.py) without it
    import torch

COMPROMISE_FILE = "compromise.json"


def names(plan: Plan) -> list[str]:
    """The compromises a plan asks for, in decision node H's order (empty: the standard setup)."""
    c = plan.config
    return [s.record_name(c) for s in COMPROMISES if s.on(c)]


def apply_to_model(plan: Plan, model: torch.nn.Module, device: torch.device | None = None) -> torch.nn.Module:
    """LoRA last (peft wraps the model as the plan's other choices left it); QLoRA quantizes its base
    projections on ``device`` first (bitsandbytes quantizes when the weights move there)."""
    if plan.config.lora_rank:
        import torch

        from launcher.compromises.lora import apply_lora

        base = torch.float16 if plan.config.precision is Precision.fp16 else torch.bfloat16
        model = apply_lora(model, plan.config.lora_rank, base_dtype=base, quantize_base=plan.config.quantize_base,
                           device=device)
    return model


def _one_optimizer(plan: Plan, params: list, lr: float, weight_decay: float, device: torch.device) -> torch.optim.Optimizer:
    import torch

    c = plan.config
    if c.optimizer is Optimizer.sgd:
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=weight_decay)
    if c.optimizer is Optimizer.adamw_8bit:
        import bitsandbytes as bnb  # presence checked at plan time (checks.check_compromises)

        return bnb.optim.AdamW8bit(params, lr=lr, weight_decay=weight_decay)
    if c.optimizer is Optimizer.paged_adamw_8bit:  # GPU only (checks.check_compromises refuses --cpu)
        import bitsandbytes as bnb

        return bnb.optim.PagedAdamW8bit(params, lr=lr, weight_decay=weight_decay)
    if c.kahan:
        from launcher.compromises.kahan import KahanAdamW

        return KahanAdamW(params, lr=lr, weight_decay=weight_decay)
    # Fused AdamW on CUDA: one kernel over all parameters instead of a loop of small ones. Not with
    # CPU offload, where the parameters and states the step touches live in host memory. pure-bf16
    # with --pure-bf16-update plain lands here too: fused AdamW steps bf16 weights and moments.
    fused = device.type == "cuda" and not offloads(c)
    return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=fused or None)


def make_optimizer(plan: Plan, params: Iterable, device: torch.device, weight_decay: float = 0.01) -> torch.optim.Optimizer:
    """The plan's optimizer at the plan's LR over the trainable ``params``."""
    params = [p for p in params if p.requires_grad]
    if plan.config.optimizer_in_backward:
        from launcher.compromises.in_backward import InBackwardOptimizer

        return InBackwardOptimizer(params, lambda ps: _one_optimizer(plan, ps, plan.lr, weight_decay, device))
    return _one_optimizer(plan, params, plan.lr, weight_decay, device)


def can_clip(optimizer) -> bool:
    """Gradient clipping needs every gradient at once: not with the step in backward."""
    from launcher.compromises.in_backward import InBackwardOptimizer

    inner = getattr(optimizer, "optimizer", optimizer)  # Accelerate's AcceleratedOptimizer wraps it
    return not isinstance(inner, InBackwardOptimizer)


def describe(plan: Plan, model: torch.nn.Module, optimizer, accelerator) -> dict:
    """What really runs: the optimizer class, parameter dtypes, trainable counts, FSDP offload, host threads."""
    import torch

    from launcher.compromises.in_backward import InBackwardOptimizer

    inner = getattr(optimizer, "optimizer", optimizer)
    params = list(model.parameters())
    trainable = [p for p in params if p.requires_grad]
    dtypes = sorted({str(p.dtype).replace("torch.", "") for p in params})
    info = {
        "compromises": names(plan),
        "optimizer": type(inner).__name__,
        "optimizer_module": type(inner).__module__,
        "in_backward": isinstance(inner, InBackwardOptimizer),
        "inner_optimizer": inner.inner_class if isinstance(inner, InBackwardOptimizer) else None,
        "param_dtypes": dtypes,
        "trainable_dtypes": sorted({str(p.dtype).replace("torch.", "") for p in trainable}),
        "trainable_params": sum(p.numel() for p in trainable),
        "total_params": sum(p.numel() for p in params),
        "mixed_precision": accelerator.mixed_precision,
        # the rank's intra-op threads: CPU offload's host AdamW runs on them (`accelerate launch` gives a GPU
        # rank OMP_NUM_THREADS=1 when the environment sets none; advisor.compromise_cost's fit assumes one)
        "host_threads": torch.get_num_threads(),
    }
    from launcher import model_setups

    info.update(model_setups.describe(model))  # what the setups changed in the model
    plugin = getattr(accelerator.state, "fsdp_plugin", None)
    if plugin is not None:
        from launcher.setup_launch import fsdp_ran

        info.update(fsdp_ran(plugin))
    if plan.config.lora_rank:
        cfg = getattr(accelerator.unwrap_model(model), "peft_config", {}).get("default")
        info["lora_targets"] = sorted(cfg.target_modules) if cfg is not None else None
        # QLoRA: the base layers that really run in 4 bits (bitsandbytes Linear4bit, quantized weights)
        four = [m for m in model.modules() if type(m).__name__ == "Linear4bit"]
        info["linear4bit_layers"] = len(four)
        info["quant_type"] = sorted({str(getattr(m.weight, "quant_type", "?")) for m in four}) if four else None
        info["base_weight_dtypes"] = sorted({str(m.weight.dtype).replace("torch.", "") for m in four}) if four else None
    return info


def write_description(run_dir: Path | None, info: dict) -> None:
    if run_dir is not None:
        (Path(run_dir) / COMPROMISE_FILE).write_text(json.dumps(info, indent=2) + "\n")

