"""The ledgers the estimates fill: the standard terms first, then each active setup's.

``MemoryLedger`` holds, in bytes per GPU, every part of the two moments ``advisor.memory`` compares
(start of backward, optimizer step) under the part's JSON key (``advisor.memory.PART_KEYS``), and
what the run keeps in host RAM. ``StepLedger`` holds the parts of one optimizer step's time. Both
carry the inputs (model, config, hardware, calibration) and what the strategy decided (world,
shard), so a setup's hook reads what it needs from one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from advisor.calibration import Calibration
from advisor.config import TrainConfig
from advisor.models import ModelSpec

GIB = float(2**30)


@dataclass
class MemoryLedger:
    model: ModelSpec
    config: TrainConfig
    hw: Any  # advisor.hardware.HardwareSpec, built by the caller (setups never import detection)
    cal: Calibration
    setups: list[Any]  # advisor.setup.base.Setup, active, in the registry's order
    world: int = 1  # ranks the strategy spreads over
    shard: int = 1  # ranks the weights, gradients and states are split over
    n: int = 0  # parameters
    nt: int = 0  # trainable parameters
    gb: int = 4  # bytes per gradient element
    weights: float = 0.0
    states: float = 0.0
    grads: float = 0.0  # the gradients at the optimizer step (gradients_gib)
    live_grads: float = 0.0  # the gradients alive at the step, when fewer than ``grads`` (the step in backward)
    accum_grads: float = 0.0  # gradients alive at the start of backward (accumulated so far)
    paged: float = 0.0  # optimizer states in CUDA unified memory (not in torch's peak)
    paged_out: float = 0.0
    dequantized: float = 0.0  # one projection's dequantized copy (QLoRA)
    prof: Any = None  # advisor.activations.ActivationProfile
    copies: float | None = None  # autocast weight copies, when a setup sets them (LoRA's adapters)
    params_gathered: bool = False  # FSDP gathers bf16 parameters: no autocast weight copies
    gathered: float = 0.0
    gathered_key: str = "detail.fsdp_gathered_gib"
    acts: float = 0.0
    temps: float = 0.0
    grad_moment: float = 0.0
    buckets: float = 0.0
    host: float = 0.0
    device_gib: float = 0.0
    usable_gib: float = 0.0
    detail: dict[str, float] = field(default_factory=dict)  # finer terms a setup adds (GiB)
    notes: list[str] = field(default_factory=list)

    def each(self, hook: str, reverse: bool = False) -> None:
        """Call hook ``hook`` of every active setup, in the registry's order (``reverse``: the opposite)."""
        for s in (reversed(self.setups) if reverse else self.setups):
            getattr(s, hook)(self)


@dataclass
class StepLedger:
    """One optimizer step's time, seconds: the standard parts, then the setups' changes."""

    model: ModelSpec
    config: TrainConfig
    hw: Any  # advisor.hardware.HardwareSpec, built by the caller (setups never import detection)
    cal: Calibration
    setups: list[Any]  # advisor.setup.base.Setup, active, in the registry's order
    world: int = 1
    shard: int = 1
    nt: int = 0
    micro_s: float = 0.0  # one micro-batch: GPU and host combined
    compute_s: float = 0.0  # all micro-batches
    gpu_s: float = 0.0  # one micro-batch's GPU time
    host_s: float = 0.0  # one micro-batch's host time
    crossing_s: float = 0.0  # one micro-batch's host forward then GPU backward (compromise_cost.overlap)
    bw: float = 0.0  # achieved memory bandwidth fraction x H200 ratio (advisor.throughput)
    opt_s: float = 0.0  # the optimizer's streaming pass
    grad_bytes: float = 0.0
    decoded: bool = False  # the input is decoded images (DALI/JPEG): the loader's collectives differ
    host_threads: int = 1  # host threads a rank gets (the caller's advisor.hardware.threads_per_rank)
    comm: float = 0.0
    exposed: float = 0.0
    sync: float = 0.0
    breakdown: Any = None  # advisor.comm.CommBreakdown
    extra_s: float = 0.0
    notes: list[str] = field(default_factory=list)

    def each(self, hook: str) -> None:
        for s in self.setups:
            getattr(s, hook)(self)
