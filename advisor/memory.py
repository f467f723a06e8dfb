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

The parts live in a ledger (``advisor.setup.ledger.MemoryLedger``): the standard terms fill it, then
each active way of training (``advisor.setup``: strategies, precision, optimizers, offload, adapters)
changes its parts through its hooks, phase by phase.

``peak_parts`` lists the parts of the peak moment (their sum is ``peak_gib``), the autocast weight
copies as their own part; ``other_moment`` says what the other moment holds when a part (say the
gradients) is larger there.

One vocabulary (``PART_KEYS``, ``part_label``): every part is named after its JSON key, so the text
report, ``peak_parts``, the wizard and ``advise estimate`` say "optimizer 59.8" where the JSON says
``memory.optimizer_gib``, "loss temporaries" where it says ``memory.detail.loss_temporaries_gib``.
A peak part carries its ``key`` and always has that key's value. The top-level keys are the peak moment's
parts and sum to ``peak_gib``: ``activations_gib`` without the autocast copies (``autocast_copies_gib``),
``gradients_gib`` what is alive then; ``detail`` has the whole gradient buffer and saved bytes.

Bytes per parameter follow Rajbhandari et al. 2020 (ZeRO, sec. 3.1): mixed precision AdamW keeps
fp32 weights (4), fp32 gradients (4, Accelerate/autocast keeps grads in the weight dtype) and two
fp32 moments (8); autocast adds a bf16 copy of every matmul weight for the step (2). The setups
change these terms: pure-bf16 with Kahan-compensated AdamW, bitsandbytes 8-bit AdamW, the optimizer
step in backward, FSDP CPU offload, LoRA (advisor.setup).
"""

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from advisor.activations import backward_bytes, shared_activation_profile
from advisor.allocator import fit_margin
from advisor.calibration import Calibration
from advisor import setup
from advisor.config import TrainConfig
from advisor.hardware import HardwareSpec
from advisor.models import ModelSpec
from advisor.setup.ledger import MemoryLedger
from advisor.setup.optimizers import state_bytes

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

    # weights, gradients, optimizer, autocast copies, activations and other are the peak moment's (``peak_at``)
    # parts: they sum to peak_gib (tests/test_memory_vocabulary.py). The sizes at the other moment are in
    # ``detail`` (gradient_buffer_gib, saved_activations_gib) and ``other_moment``.
    weights_gib: float
    gradients_gib: float = Field(description="gradients alive at the peak (0 at a backward peak with no accumulation; "
                                 "the whole buffer: detail.gradient_buffer_gib)")
    optimizer_gib: float
    activations_gib: float = Field(description="saved for backward by one micro-batch at the peak, without the "
                                   "autocast weight copies (autocast_copies_gib); 0 at an optimizer-step peak")
    other_gib: float = Field(description="the rest of the peak: loss temporaries, DDP buckets, FSDP gathered units, "
                             "dequantized weights, workspaces")
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
    autocast_copies_gib: float = Field(0.0, description="bf16 copies of the matmul weights autocast keeps for the step, "
                                       "at the peak (all of them: detail.autocast_weight_copies_gib)")
    peak_parts: list[MemoryPart] = Field(default_factory=list, description="the parts of the peak moment; they sum to peak_gib")
    other_moment: str = Field("", description="the other moment's total and any part that is larger there")
    host_gib: float = Field(0.0, description="host RAM the run keeps per GPU rank (CPU offload: weights, gradients, "
                            "optimizer states)")
    host_node_gib: float = Field(0.0, description="host RAM one node needs: host_gib x the ranks on a node")
    detail: dict[str, float] = Field(default_factory=dict, description="finer terms, GiB")
    notes: list[str] = Field(default_factory=list)


def trainable_params(model: ModelSpec, config: TrainConfig, setups: list | None = None) -> int:
    """All parameters, or what an active setup trains instead (the adapters: ``Setup.trainable_params``).
    ``setups``: the config's active setups when the caller holds them (the estimators' ledgers)."""
    for s in (setup.active(config) if setups is None else setups):
        n = s.trainable_params(model, config)
        if n is not None:
            return n
    return model.params


def estimate_memory(model: ModelSpec, config: TrainConfig, hw: HardwareSpec, cal: Calibration) -> MemoryEstimate:
    """The standard terms of each phase, then the active setups' (advisor.setup.base's hooks, in order)."""
    strategy = setup.strategy_of(config)
    active = setup.active(config)
    led = MemoryLedger(model, config, hw, cal, active, n=model.params, nt=trainable_params(model, config, active))
    led.world = strategy.world(hw)
    led.shard = strategy.shard(led.world, hw)  # FSDP: every GPU; HSDP: the GPUs of one node
    led.states = state_bytes(model, config, led.nt)  # optimizer states (+ Kahan buffer), all trainable params
    led.weights = led.n * config.precision.weight_bytes / led.shard
    led.each("bytes_terms")
    led.grads = led.nt * led.gb / led.shard
    led.states /= led.shard
    led.each("resident_terms")
    led.prof = shared_activation_profile(model, config, cal.compile_activation_factor, cal.compile_gelu_kept,
                                         cal.compile_loss_bytes)
    led.each("activation_terms")
    if led.params_gathered or led.copies is not None:
        led.prof = led.prof.model_copy(update={"fixed_bytes": 0.0 if led.params_gathered else led.copies})
    led.acts, led.temps = backward_bytes(led.prof, config.micro_batch, config.grad_ckpt, cal.ckpt_fraction)
    led.each("saved_terms")
    # Later in backward the gradients accumulated so far can put more above the saved bytes still
    # alive than the loss's temporaries did at its start (the tracer's grad moment: a classifier's
    # wide Linear or an untied LM head has its gradient while nearly every activation is still
    # saved). Only where every gradient stays to a plain optimizer step on one whole model, in eager
    # mode: a compiled backward is one graph whose buffers inductor plans itself, not in the eager
    # trace's order (compiled VGG-11-BN on the H200, rows u3-vgg-bf16-compile-64 and
    # u5-vgg-bf16-compile-32-i160 of `python -m benchmarks.calibration.fit`: +4.0% and +1.5% without
    # the moment, +14.7% and +19.4% with it).
    if not (config.grad_ckpt or config.grad_accum > 1 or config.compile or any(s.ends_grad_moment(led) for s in led.setups)):
        led.grad_moment = max(0.0, led.prof.grad_moment_fixed + led.prof.grad_moment_per_sample * config.micro_batch)
    if config.compile:
        led.notes.append("torch.compile: inductor recomputes pointwise ops, so fewer activations are kept")
    led.accum_grads = led.grads if config.grad_accum > 1 else 0.0
    led.live_grads = led.grads
    led.each("gradient_terms")
    out = _moments(led)
    led.each("after_fit")
    led.each("describe", reverse=True)
    per_node = min(led.world, hw.gpus_per_node) if led.world > 1 else 1  # host RAM: every rank of a node keeps its own
    return MemoryEstimate(**out, device_gib=led.device_gib, host_gib=led.host / GIB, host_node_gib=led.host / GIB * per_node,
                          detail=_detail(led), notes=led.notes)


def _moments(led: MemoryLedger) -> dict:
    """The two moments' parts by JSON key (PART_KEYS: each part has its key's value), the peak, the fit."""
    copies, acts, temps, moment = led.prof.fixed_bytes, led.acts, led.temps, led.grad_moment
    # The top-level keys hold the peak moment's parts, so they sum to peak_gib (issue 40: activations_gib
    # counted the autocast copies autocast_copies_gib also counted, and gradients_gib the whole buffer at a
    # moment that had none).
    backward_parts = [("weights_gib", led.weights), ("optimizer_gib", led.states), ("gradients_gib", led.accum_grads),
                      ("autocast_copies_gib", copies), ("activations_gib", acts - copies),
                      ("detail.loss_temporaries_gib", temps if temps >= moment else 0.0),
                      ("detail.gradients_so_far_gib", moment if moment > temps else 0.0),
                      ("detail.ddp_buckets_gib", led.buckets), (led.gathered_key, led.gathered),
                      ("detail.dequantized_base_gib", led.dequantized)]
    step_parts = [("weights_gib", led.weights), ("gradients_gib", led.live_grads), ("optimizer_gib", led.states),
                  ("detail.ddp_buckets_gib", led.buckets)]
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
    led.device_gib = peak * led.cal.allocator_reserve + led.cal.cuda_context_gib
    led.usable_gib = led.hw.gpu.memory_gib * led.cal.fit_fraction
    fits = led.device_gib <= led.usable_gib
    at_peak = {k: v / GIB for k, v in at}
    top = {k: at_peak.get(k, 0.0) for k in ("weights_gib", "gradients_gib", "optimizer_gib", "autocast_copies_gib",
                                         "activations_gib")}
    return dict(
        **top, other_gib=peak - sum(top.values()),  # the rest of the peak moment: temporaries, buckets, units, workspace
        peak_gib=peak, gpu_memory_gib=led.hw.gpu.memory_gib, fits=fits, peak_at=peak_at,
        **fit_margin(peak, led.hw.gpu.memory_gib, led.cal.cuda_context_gib, fits).as_memory_fields(),
        trainable_params=led.nt, peak_parts=parts, other_moment=other_moment)


def _detail(led: MemoryLedger) -> dict[str, float]:
    copies = led.prof.fixed_bytes
    return {"loss_temporaries_gib": led.temps / GIB, "ddp_buckets_gib": led.buckets / GIB,
            "fsdp_gathered_gib": led.gathered / GIB, "autocast_weight_copies_gib": copies / GIB,
            "workspace_gib": WORKSPACE_GIB, "live_gradients_gib": led.live_grads / GIB,
            "gradient_buffer_gib": led.grads / GIB, "saved_activations_gib": led.acts / GIB,
            "activations_without_copies_gib": (led.acts - copies) / GIB,
            "gradients_so_far_gib": led.grad_moment / GIB, "dequantized_base_gib": led.dequantized / GIB,
            "paged_states_gib": led.paged / GIB, "paged_out_gib": led.paged_out / GIB, **led.detail}
