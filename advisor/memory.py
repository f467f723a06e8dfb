"""Peak memory per GPU of a steady-state training step, with its breakdown.

``peak_gib`` predicts ``torch.cuda.max_memory_allocated()`` over a step after the first optimizer
step (states exist, gradients are freed by ``zero_grad(set_to_none=True)`` between steps). The
peak is the larger of two moments:

* start of backward: weights + optimizer states + saved activations + loss temporaries (+ the
  gradients already accumulated when ``grad_accum > 1``, + DDP's bucket copies);
* optimizer step: weights + gradients + optimizer states (+ buckets). The runtime uses fused
  AdamW, which needs no full-size temporaries.

Bytes per parameter follow Rajbhandari et al. 2020 (ZeRO, sec. 3.1): mixed precision AdamW keeps
fp32 weights (4), fp32 gradients (4, Accelerate/autocast keeps grads in the weight dtype) and two
fp32 moments (8); autocast adds a bf16 copy of every matmul weight for the step (2).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from advisor.activations import activation_profile, backward_bytes
from advisor.calibration import Calibration
from advisor.config import Optimizer, Precision, Strategy, TrainConfig
from advisor.errors import UserError
from advisor.hardware import HardwareSpec
from advisor.models import ModelSpec

GIB = float(2**30)
# cuBLAS workspaces (one per stream/handle: 32 MiB on Hopper, cuBLAS docs "cublasSetWorkspace")
# plus small kernels' scratch; a fixed, small term.
WORKSPACE_GIB = 0.0625
# Optimizer state bytes per trainable parameter: AdamW two moments, SGD one momentum buffer,
# 8-bit AdamW two 1-byte moments + blockwise fp32 scales every 2048 values (Dettmers et al. 2022).
_STATE_BYTES = {Optimizer.adamw: 8.0, Optimizer.sgd: 4.0, Optimizer.adamw_8bit: 2.0 + 8.0 / 2048}


class MemoryEstimate(BaseModel):
    model_config = ConfigDict(extra="forbid")

    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    activations_gib: float = Field(description="saved for backward by one micro-batch (incl. autocast weight copies)")
    other_gib: float = Field(description="loss temporaries, DDP buckets, FSDP gathered units, workspaces")
    peak_gib: float = Field(description="predicted torch.cuda.max_memory_allocated() per GPU")
    device_gib: float = Field(description="what nvidia-smi would show: allocator reserve + CUDA context")
    gpu_memory_gib: float
    fits: bool
    peak_at: Literal["backward", "optimizer-step"]
    trainable_params: int
    detail: dict[str, float] = Field(default_factory=dict, description="finer terms, GiB")
    notes: list[str] = Field(default_factory=list)


def trainable_params(model: ModelSpec, config: TrainConfig) -> int:
    """All parameters, or LoRA adapters (rank r on q, k, v, o and the MLP projections: Hu et al. 2021)."""
    if config.lora_rank is None:
        return model.params
    a = model.arch
    if a is None:
        raise UserError("LoRA estimates need a transformer (catalog LLM/encoder/ViT or --hf-config)",
                        fix="drop --lora-rank for this model")
    kv = a.kv_heads * a.head_dim
    h, f = a.d_model, a.d_ff
    shapes = [(h, h), (h, kv), (h, kv), (h, h)] + [(h, f)] * (3 if a.mlp == "swiglu" else 2)
    return a.n_layers * config.lora_rank * sum(i + o for i, o in shapes)


def estimate_memory(model: ModelSpec, config: TrainConfig, hw: HardwareSpec, cal: Calibration) -> MemoryEstimate:
    p = config.precision
    world = hw.total_gpus if config.strategy in (Strategy.ddp, Strategy.fsdp, Strategy.dp) else 1
    n = model.params
    nt = trainable_params(model, config)
    lora = config.lora_rank is not None
    wb = p.weight_bytes
    gb = 2 if p is Precision.pure_bf16 else 4
    state = _STATE_BYTES[config.optimizer]
    if p is Precision.pure_bf16 and config.optimizer is not Optimizer.adamw_8bit:
        state /= 2  # moments kept in bf16 too
    notes: list[str] = []
    shard = world if config.strategy is Strategy.fsdp else 1

    weights = n * wb / shard
    grads = nt * gb / shard
    states = nt * state / shard

    prof = activation_profile(model, config, cal.compile_activation_factor, cal.compile_gelu_kept)
    if config.strategy is Strategy.fsdp:
        # FSDP with mixed precision gathers bf16 parameters (no autocast weight copies) and keeps
        # the current and the prefetched unit unsharded (Zhao et al. 2023, PyTorch FSDP, sec. 4).
        unit = _largest_unit(model)
        gathered = 2 * unit * (2 if p.autocast else wb)
        prof = prof.model_copy(update={"fixed_bytes": 0.0})
    else:
        gathered = 0.0
    acts, temps = backward_bytes(prof, config.micro_batch, config.grad_ckpt, cal.ckpt_fraction)
    if config.compile:
        notes.append("torch.compile: inductor recomputes pointwise ops, so fewer activations are kept")
    # DDP copies gradients into flat buckets (Accelerate's default gradient_as_bucket_view=False).
    buckets = nt * gb if config.strategy is Strategy.ddp and world > 1 else 0.0
    accum_grads = grads if config.grad_accum > 1 else 0.0

    backward_peak = weights + states + buckets + gathered + accum_grads + acts + temps
    step_peak = weights + grads + states + buckets
    peak = max(backward_peak, step_peak) / GIB + WORKSPACE_GIB
    peak_at = "backward" if backward_peak >= step_peak else "optimizer-step"
    device = peak * cal.allocator_reserve + cal.cuda_context_gib
    fits = device <= hw.gpu.memory_gib * cal.fit_fraction
    if lora:
        notes.append(f"LoRA rank {config.lora_rank}: {nt:,} trainable of {n:,} parameters")
    if p is Precision.pure_bf16:
        notes.append("pure-bf16: weights and optimizer states in bf16 (no fp32 master copy; small updates can round away)")
    return MemoryEstimate(
        weights_gib=weights / GIB, gradients_gib=grads / GIB, optimizer_gib=states / GIB,
        activations_gib=acts / GIB, other_gib=(temps + buckets + gathered) / GIB + WORKSPACE_GIB,
        peak_gib=peak, device_gib=device, gpu_memory_gib=hw.gpu.memory_gib, fits=fits, peak_at=peak_at,
        trainable_params=nt,
        detail={"loss_temporaries_gib": temps / GIB, "ddp_buckets_gib": buckets / GIB,
                "fsdp_gathered_gib": gathered / GIB, "autocast_weight_copies_gib": prof.fixed_bytes / GIB,
                "workspace_gib": WORKSPACE_GIB},
        notes=notes,
    )


def _largest_unit(model: ModelSpec) -> float:
    if model.arch is not None:
        a = model.arch
        return max(a.layer_params(), a.embedding_params(), a.head_params())
    if model.trace is not None and model.trace.largest_unit_params:
        return model.trace.largest_unit_params
    return model.params
