"""Peak memory per GPU of a steady-state training step, with its breakdown.

``peak_gib`` predicts ``torch.cuda.max_memory_allocated()`` over a step after the first optimizer
step (states exist, gradients are freed by ``zero_grad(set_to_none=True)`` between steps). The
peak is the larger of two moments:

* start of backward: weights + optimizer states + autocast weight copies + saved activations +
  loss temporaries (+ the gradients already accumulated when ``grad_accum > 1``: the fp32
  gradients of the previous micro-batches are alive while this micro-batch's autocast copies
  fill, + DDP's bucket copies);
* optimizer step: weights + gradients + optimizer states (+ buckets). The runtime uses fused
  AdamW, which needs no full-size temporaries.

``peak_parts`` lists the parts of the peak moment (their sum is ``peak_gib``), the autocast weight
copies as their own part; ``other_moment`` says what the other moment holds when a part (say the
gradients) is larger there.

One vocabulary (``PART_KEYS``, ``part_label``): every part is named after its JSON key, so the text
report, ``peak_parts``, the wizard and ``advise estimate`` say "optimizer 59.8" where the JSON says
``memory.optimizer_gib``, "loss temporaries" where it says ``memory.detail.loss_temporaries_gib``.
A peak part carries its ``key`` and always has that key's value (the activations without the autocast
copies, when there are copies, are their own key: ``activations_gib`` counts the copies too).

Bytes per parameter follow Rajbhandari et al. 2020 (ZeRO, sec. 3.1): mixed precision AdamW keeps
fp32 weights (4), fp32 gradients (4, Accelerate/autocast keeps grads in the weight dtype) and two
fp32 moments (8); autocast adds a bf16 copy of every matmul weight for the step (2). The memory
compromises (``advisor.compromise_memory``) change these terms: pure-bf16 with Kahan-compensated
AdamW, bitsandbytes 8-bit AdamW, the optimizer step in backward, FSDP CPU offload, LoRA.
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from advisor.activations import backward_bytes, shared_activation_profile
from advisor.allocator import fit_margin
from advisor.calibration import Calibration
from advisor.compromise_memory import (NF4_BYTES, largest_tensor_params, lora_params, lora_shapes, quantized_base_params,
                                       state_bytes)
from advisor.config import Optimizer, Precision, Strategy, TrainConfig
from advisor.hardware import HardwareSpec
from advisor.models import ModelSpec

GIB = float(2**30)
# cuBLAS workspaces (one per stream/handle: 32 MiB on Hopper, cuBLAS docs "cublasSetWorkspace")
# plus small kernels' scratch; a fixed, small term.
WORKSPACE_GIB = 0.0625


# The memory parts, by JSON key: a key of MemoryEstimate, or ``detail.<key>``. Their labels are the key's
# words (``part_label``), so a line of any report names the JSON key it comes from.
PART_KEYS: tuple[str, ...] = (
    "weights_gib", "gradients_gib", "optimizer_gib", "activations_gib", "other_gib", "autocast_copies_gib",
    "detail.live_gradients_gib", "detail.activations_without_copies_gib", "detail.loss_temporaries_gib",
    "detail.gradients_so_far_gib", "detail.ddp_buckets_gib", "detail.fsdp_gathered_gib", "detail.fsdp_kept_weights_gib",
    "detail.dequantized_base_gib", "detail.workspace_gib",
)
_ACRONYMS = {"ddp": "DDP", "fsdp": "FSDP"}


def _label(key: str) -> str:
    stem = key.removeprefix("detail.").removesuffix("_gib")
    return " ".join(_ACRONYMS.get(w, w) for w in stem.split("_"))


_LABELS = {key: _label(key) for key in PART_KEYS}  # every estimate names its parts: looked up, not rebuilt


def part_label(key: str) -> str:
    """The label of the part at JSON key ``key``: its words ("detail.ddp_buckets_gib" -> "DDP buckets")."""
    label = _LABELS.get(key)
    if label is None:
        raise KeyError(f"{key} is not a memory part (advisor.memory.PART_KEYS)")
    return label


def part_key(label: str) -> str:
    """The JSON key a label names (``part_label``'s inverse)."""
    stem = label.lower().replace(" ", "_") + "_gib"
    for key in (stem, "detail." + stem):
        if key in PART_KEYS:
            return key
    raise KeyError(f"{label!r} is not a memory part's label (advisor.memory.PART_KEYS)")


class MemoryPart(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="the label: the JSON key's words (advisor.memory.part_label)")
    key: str = Field("", description="the JSON key in `memory` with this value (`detail.<key>` for a finer term)")
    gib: float

    @classmethod
    def of(cls, key: str, gib: float) -> "MemoryPart":
        return cls(name=part_label(key), key=key, gib=gib)


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
    tight: bool = Field(False, description="fits, but leaves less room than the allocator's measured reserve "
                        "(advisor.allocator): it may run out of memory; `advise launch` retries with half the micro-batch")
    fit_margin_gib: float = Field(0.0, description="the GPU's memory less the CUDA context, the allocated peak and "
                                  "the measured reserve (negative: tight or does not fit)")
    reserve_gib: float = Field(0.0, description="the caching allocator's measured reserve over the allocated peak")
    peak_at: Literal["backward", "optimizer-step"]
    trainable_params: int
    autocast_copies_gib: float = Field(0.0, description="bf16 copies of the matmul weights autocast keeps for the step "
                                       "(part of activations_gib)")
    peak_parts: list[MemoryPart] = Field(default_factory=list, description="the parts of the peak moment; they sum to peak_gib")
    other_moment: str = Field("", description="the other moment's total and any part that is larger there")
    host_gib: float = Field(0.0, description="host RAM the run keeps per GPU rank (CPU offload: weights, gradients, "
                            "optimizer states)")
    host_node_gib: float = Field(0.0, description="host RAM one node needs: host_gib x the ranks on a node")
    detail: dict[str, float] = Field(default_factory=dict, description="finer terms, GiB")
    notes: list[str] = Field(default_factory=list)


def trainable_params(model: ModelSpec, config: TrainConfig) -> int:
    """All parameters, or LoRA adapters (``advisor.compromise_memory.lora_params``)."""
    return model.params if config.lora_rank is None else lora_params(model, config.lora_rank)


def estimate_memory(model: ModelSpec, config: TrainConfig, hw: HardwareSpec, cal: Calibration) -> MemoryEstimate:
    p = config.precision
    world = hw.total_gpus if config.strategy in (Strategy.ddp, Strategy.fsdp, Strategy.hsdp, Strategy.dp, Strategy.fsdp_keep) else 1
    n = model.params
    nt = trainable_params(model, config)
    lora = config.lora_rank is not None
    offload = config.cpu_offload
    notes: list[str] = []
    # FSDP shards over every GPU; HSDP over the GPUs of one node (replicated across nodes).
    shard = world if config.strategy.full_shard else min(world, hw.gpus_per_node) if config.strategy is Strategy.hsdp else 1
    gb = 2 if p is Precision.pure_bf16 else 4  # gradients in the weight dtype
    states = state_bytes(model, config, nt)  # optimizer states (+ Kahan buffer), all trainable params, bytes

    dequantized = 0.0
    if lora:
        # peft users load the frozen base in bf16; adapters (and their gradients, states) stay fp32.
        base_b = 2 if p is not Precision.fp32 and p is not Precision.tf32 else 4
        q = quantized_base_params(model) if config.quantize_base else 0
        weights = ((n - nt - q) * base_b + q * NF4_BYTES + nt * 4) / shard
        gb = 4
        if q:
            # bitsandbytes' 4-bit matmul for training dequantizes the projection's weight to bf16, then
            # runs the GEMM (MatMul4Bit): one projection's bf16 copy at a time.
            dequantized = max(i * o for i, o in lora_shapes(model)) * 2.0
    else:
        weights = n * p.weight_bytes / shard
    grads = nt * gb / shard
    states /= shard
    paged = 0.0
    if config.optimizer is Optimizer.paged_adamw_8bit and not offload:
        # Unified memory (compromise_memory): not in torch's peak; resident as far as the GPU has room.
        paged, states = states, 0.0

    prof = shared_activation_profile(model, config, cal.compile_activation_factor, cal.compile_gelu_kept,
                                     cal.compile_loss_bytes)
    if lora and p.autocast and model.arch is not None:
        # autocast copies only fp32 weights: the bf16 base passes through, the fp32 adapters are cast
        prof = prof.model_copy(update={"fixed_bytes": 2.0 * nt})
    gathered = 0.0
    if config.strategy.sharded or offload:
        # FSDP with mixed precision gathers bf16 parameters (no autocast weight copies; the activations
        # are bf16 too: activations.activation_precision) and keeps the current and the prefetched unit
        # unsharded (Zhao et al. 2023, PyTorch FSDP, sec. 4).
        gathered = 2 * _largest_unit(model) * (2 if p.autocast else p.weight_bytes)
        if offload:
            # At the peak, the start of the loss's backward: the root unit (embeddings, head, final norm:
            # everything outside the wrapped layers) is gathered for the head's backward and
            # FSDPParamGroup.pre_backward has prefetched the last layer's unit (torch 2.13 _fully_shard).
            gathered = (_root_unit(model) + _layer_unit(model)) * (2 if p.autocast else p.weight_bytes)
        prof = prof.model_copy(update={"fixed_bytes": 0.0})
    kept = keep_gathered_bytes(model, config, nt) if config.strategy is Strategy.fsdp_keep else None
    if kept is not None:
        gathered = kept["weights"]  # every unit, the current and the prefetched ones included
    acts, temps = backward_bytes(prof, config.micro_batch, config.grad_ckpt, cal.ckpt_fraction)
    # Later in backward the gradients accumulated so far can put more above the saved bytes still
    # alive than the loss's temporaries did at its start (the tracer's grad moment: a classifier's
    # wide Linear or an untied LM head has its gradient while nearly every activation is still
    # saved). Only where every gradient stays to a plain optimizer step on one whole model, in eager
    # mode: a compiled backward is one graph whose buffers inductor plans itself, not in the eager
    # trace's order (compiled VGG-11-BN on the H200, rows u3-vgg-bf16-compile-64 and
    # u5-vgg-bf16-compile-32-i160 of `python -m benchmarks.calibration.fit`: +4.0% and +1.5% without
    # the moment, +14.7% and +19.4% with it).
    grad_moment = 0.0
    if not (config.grad_ckpt or config.grad_accum > 1 or config.optimizer_in_backward or lora or offload or shard > 1
            or config.compile):
        grad_moment = max(0.0, prof.grad_moment_fixed + prof.grad_moment_per_sample * config.micro_batch)
    copies = prof.fixed_bytes
    if config.compile:
        notes.append("torch.compile: inductor recomputes pointwise ops, so fewer activations are kept")
    # DDP copies gradients into flat buckets (Accelerate's default gradient_as_bucket_view=False).
    buckets = nt * gb if config.strategy is Strategy.ddp and world > 1 else 0.0
    accum_grads = grads if config.grad_accum > 1 else 0.0
    if kept is not None:
        accum_grads = kept["gradients"]
        notes.append(f"fsdp-keep: the {config.grad_accum} micro-batches keep the weights gathered "
                     f"({kept['weights'] / GIB:.1f} GiB unsharded) and accumulate unsharded gradients "
                     f"({kept['gradients'] / GIB:.1f} GiB) until the last one's reduce-scatter")
    host = 0.0
    live_grads = grads
    if config.optimizer_in_backward:
        # Each parameter steps in its post-accumulate-grad hook and its gradient is freed at once
        # (PyTorch tutorial "How to save memory by fusing the optimizer step into the backward
        # pass"): about one parameter's gradient is alive, never a full buffer.
        live_grads = grads = largest_tensor_params(model, config.lora_rank) * gb / shard
        accum_grads = live_grads
        notes.append("optimizer step in backward: each gradient is freed right after its parameter's step")
    if offload:
        # FSDP CPUOffload(offload_params=True): sharded parameters, gradients and optimizer states
        # live in host memory and the optimizer steps on the CPU; the GPU holds the gathered units
        # (counted above) and one unit's gradient before it is copied out.
        # No gradient is on the GPU at the start of backward, and later only the unit's being reduced:
        # each unit's sharded fp32 gradient is copied to pinned host memory right after its reduce-scatter
        # (torch _fsdp_collectives.foreach_reduce), and with accumulation it is added to the host's.
        host = weights + grads + states
        live_grads = _largest_unit(model) * 4
        accum_grads = 0.0
        weights = grads = states = 0.0
        notes.append(f"CPU offload: ~{host / GIB:.0f} GiB of host RAM per GPU for weights, gradients and optimizer states")

    # The two moments' parts, by JSON key (PART_KEYS): each part has its key's value.
    saved_key = "detail.activations_without_copies_gib" if copies else "activations_gib"
    step_grads_key = "gradients_gib" if live_grads == grads else "detail.live_gradients_gib"
    backward_parts = [("weights_gib", weights), ("optimizer_gib", states), ("gradients_gib", accum_grads),
                      ("autocast_copies_gib", copies), (saved_key, acts - copies),
                      ("detail.loss_temporaries_gib", temps if temps >= grad_moment else 0.0),
                      ("detail.gradients_so_far_gib", grad_moment if grad_moment > temps else 0.0),
                      ("detail.ddp_buckets_gib", buckets),
                      ("detail.fsdp_kept_weights_gib" if kept is not None else "detail.fsdp_gathered_gib", gathered),
                      ("detail.dequantized_base_gib", dequantized)]
    step_parts = [("weights_gib", weights), (step_grads_key, live_grads), ("optimizer_gib", states),
                  ("detail.ddp_buckets_gib", buckets)]
    backward_peak = sum(v for _, v in backward_parts)
    step_peak = sum(v for _, v in step_parts)
    peak_at = "backward" if backward_peak >= step_peak else "optimizer-step"
    peak = max(backward_peak, step_peak) / GIB + WORKSPACE_GIB
    at, other = (backward_parts, step_parts) if peak_at == "backward" else (step_parts, backward_parts)
    parts = [MemoryPart.of(k, v / GIB) for k, v in at if v > 0] + [MemoryPart.of("detail.workspace_gib", WORKSPACE_GIB)]
    mine = dict(at)
    larger = [f"{part_label(k)} {v / GIB:.1f} GiB" for k, v in other if v > mine.get(k, 0.0) + 0.05 * GIB]
    other_name = "optimizer step" if peak_at == "backward" else "start of backward"
    other_moment = (f"the {other_name} holds {sum(v for _, v in other) / GIB + WORKSPACE_GIB:.1f} GiB"
                    + (f"; larger there than at the peak: {', '.join(larger)}" if larger else ""))
    device = peak * cal.allocator_reserve + cal.cuda_context_gib
    usable = hw.gpu.memory_gib * cal.fit_fraction
    fits = device <= usable
    paged_out = 0.0
    if paged:
        # Paged states fill the room left; the rest is paged out to host RAM while backward needs the GPU and
        # in again for the step (bitsandbytes prefetches each tensor's state before its update).
        resident = min(paged, max(0.0, usable - device) * GIB)
        paged_out = paged - resident
        device += resident / GIB
        host += paged_out
        notes.append(f"paged 8-bit AdamW: {paged / GIB:.1f} GiB of optimizer states in CUDA unified memory (not in "
                     f"torch's max_memory_allocated)" + (f"; ~{paged_out / GIB:.1f} GiB of them paged to host RAM and "
                                                         "back every step" if paged_out > 0 else ", all resident"))
    if dequantized:
        notes.append(f"QLoRA: {quantized_base_params(model):,} base weights in 4-bit NF4 with double quantization "
                     f"({NF4_BYTES:.3f} bytes each); each projection is dequantized to bf16 for its GEMMs")
    if lora:
        notes.append(f"LoRA rank {config.lora_rank}: {nt:,} trainable of {n:,} parameters; frozen base in bf16, adapters fp32")
    if p is Precision.pure_bf16:
        notes.append("pure-bf16: weights, gradients and optimizer states in bf16, updates compensated (Kahan summation)"
                     if config.kahan else
                     f"pure-bf16 with bitsandbytes' {config.optimizer.value}: bf16 weights and gradients, 8-bit states, "
                     "no compensation (updates below bf16's resolution round away)" if config.optimizer.eight_bit else
                     "pure-bf16 with SGD: weights, gradients and momentum in bf16, no compensation"
                     if config.optimizer is Optimizer.sgd else
                     "pure-bf16 with plain torch AdamW (--pure-bf16-update plain): weights, gradients and optimizer "
                     "states in bf16, no compensation buffer (updates below bf16's resolution round away)")
    return MemoryEstimate(
        weights_gib=weights / GIB, gradients_gib=grads / GIB, optimizer_gib=states / GIB,
        activations_gib=acts / GIB, other_gib=(temps + buckets + gathered + dequantized) / GIB + WORKSPACE_GIB,
        peak_gib=peak, device_gib=device, gpu_memory_gib=hw.gpu.memory_gib, fits=fits, peak_at=peak_at,
        **fit_margin(peak, hw.gpu.memory_gib, cal.cuda_context_gib, fits).as_memory_fields(),
        trainable_params=nt, autocast_copies_gib=copies / GIB, peak_parts=parts, other_moment=other_moment,
        host_gib=host / GIB, host_node_gib=host / GIB * (min(world, hw.gpus_per_node) if world > 1 else 1),
        detail={"loss_temporaries_gib": temps / GIB, "ddp_buckets_gib": buckets / GIB,
                "fsdp_gathered_gib": gathered / GIB, "autocast_weight_copies_gib": copies / GIB,
                "workspace_gib": WORKSPACE_GIB, "live_gradients_gib": live_grads / GIB,
                "activations_without_copies_gib": (acts - copies) / GIB, "gradients_so_far_gib": grad_moment / GIB,
                "dequantized_base_gib": dequantized / GIB,
                "paged_states_gib": paged / GIB, "paged_out_gib": paged_out / GIB,
                **({"fsdp_kept_weights_gib": kept["weights"] / GIB, "unsharded_gradients_gib": kept["gradients"] / GIB}
                   if kept is not None else {})},
        notes=notes,
    )


def keep_gathered_bytes(model: ModelSpec, config: TrainConfig, trainable: int) -> dict[str, float] | None:
    """What FSDP with the weights kept gathered across accumulation (``Strategy.fsdp_keep``) holds on
    every GPU besides plain FSDP's shards, in bytes: the whole model's unsharded weights in FSDP2's
    ``param_dtype`` (bf16 under autocast: Accelerate's MixedPrecisionPolicy, see
    ``advisor.activations.activation_precision``) from the first micro-batch's forward to the last
    one's backward, and the unsharded gradients of every trainable parameter in ``reduce_dtype`` (the
    same dtype in Accelerate 1.16's policy), accumulated across the micro-batches that skip the
    reduce-scatter (Accelerate's ``accumulate`` calls ``set_requires_gradient_sync(False)``; torch 2.13
    ``FSDPParamGroup.post_backward`` keeps ``unsharded_param.grad``). None without accumulation: there
    is nothing to keep across, and the step is plain FSDP's."""
    if config.grad_accum < 2:
        return None
    per = 2 if config.precision.autocast or config.precision is Precision.pure_bf16 else 4
    return {"weights": model.params * per, "gradients": trainable * per}


def _layer_unit(model: ModelSpec) -> float:
    """Parameters of one wrapped layer (FSDP's per-layer unit); the largest unit without an architecture."""
    return model.arch.layer_params() if model.arch is not None else _largest_unit(model)


def _root_unit(model: ModelSpec) -> float:
    """Parameters FSDP's root unit holds: all outside the wrapped layers (embeddings, head, final norm)."""
    if model.arch is not None:
        return max(0.0, model.params - model.arch.n_layers * model.arch.layer_params())
    return _largest_unit(model)


def _largest_unit(model: ModelSpec) -> float:
    if model.arch is not None:
        a = model.arch
        return max(a.layer_params(), a.embedding_params(), a.head_params())
    if model.trace is not None and model.trace.largest_unit_params:
        return model.trace.largest_unit_params
    return model.params
