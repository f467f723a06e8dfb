"""Alternatives: other ways to run the same training, each with its estimate and its cost.

Offered when the standard setup cannot run on the GPUs at hand (memory compromises on one GPU,
more GPUs, CPU offload), when the deadline is missed (node H's measures), or when asked for
(``--alternatives``). Compromises are never chosen for the user: DESIGN.md node B.
"""

from __future__ import annotations

from typing import Callable

from advisor.config import Optimizer, Precision, Strategy
from advisor.units import format_hours
from rules.recommend import Alternative, Cost
from rules.planner import Choice, Infeasible
from rules.tree import TreeContext

GIB = float(2**30)
# Host memory bandwidth assumed for a CPU optimizer step (a two-socket server streams 100-200 GB/s;
# one process's Adam reaches much less). Labelled rough wherever it is used.
CPU_ADAM_GBPS = 50.0

CommandFn = Callable[..., str]

_COMPROMISES: list[tuple[str, dict, str, str, str]] = [
    ("pure-bf16", {"precision": Precision.pure_bf16},
     "weights, gradients and AdamW states in bf16: no fp32 master copy",
     "medium: updates below bf16's resolution (~1/256 of a weight) round away; use stochastic rounding or Kahan summation",
     "Zamirai et al. 2020 (Revisiting BFloat16 Training)"),
    ("adamw-8bit", {"optimizer": Optimizer.adamw_8bit},
     "AdamW moments quantized block-wise to 8 bits (bitsandbytes)",
     "low: reported at parity with 32-bit Adam (Dettmers et al. 2022); needs bitsandbytes",
     "Dettmers et al. 2022 (8-bit Optimizers via Block-wise Quantization)"),
    ("pure-bf16 + adamw-8bit", {"precision": Precision.pure_bf16, "optimizer": Optimizer.adamw_8bit},
     "both of the above",
     "medium: both risks above",
     "Zamirai et al. 2020; Dettmers et al. 2022"),
    ("LoRA r16", {"lora_rank": 16},
     "rank-16 adapters on the attention and MLP projections; base weights frozen",
     "a different training: adapters only, quality can trail a full fine-tune on hard tasks",
     "Hu et al. 2021 (LoRA); Biderman et al. 2024 (LoRA Learns Less and Forgets Less)"),
]


def _speed(ch: Choice) -> str:
    t = ch.time_h
    s = f"{ch.estimate.throughput.samples_per_s:,.2f} samples/s"
    return s + (f", {format_hours(t)} to train" if t is not None else "")


def compromises(ctx: TreeContext, cmd: CommandFn) -> list[Alternative]:
    p, req = ctx.planner, ctx.req
    std = ctx.one
    std_dev = (std.estimate.memory.device_gib if isinstance(std, Choice)
               else std.closest.memory.device_gib if isinstance(std, Infeasible) and std.closest else None)
    out: list[Alternative] = []
    for name, update, what, risk, source in _COMPROMISES:
        if "precision" in update and (req.precision is not None or not p.hw.gpu.supports_bf16):
            continue
        if "optimizer" in update and (req.optimizer is not None or p.base.optimizer is not Optimizer.adamw):
            continue
        if "lora_rank" in update and (req.lora_rank is not None or p.model.arch is None):
            continue
        base = p.base.model_copy(update=update)
        ch = p.search(1, Strategy.single, base=base, relax_accum=True)
        if isinstance(ch, Choice):
            label = name + (" + checkpointing" if ch.config.grad_ckpt else "")
            mem = f"~{ch.estimate.memory.device_gib:.1f} GiB per GPU" + (f" (standard: ~{std_dev:.1f} GiB)" if std_dev else "")
            out.append(Alternative(
                name=label, kind="compromise", summary=f"{what}; fits on 1x {p.hw.gpu.name}: {mem}, {_speed(ch)}",
                fits=True, gpus=1, peak_gib=ch.estimate.memory.peak_gib, device_gib=ch.estimate.memory.device_gib,
                samples_per_s=ch.estimate.throughput.samples_per_s, time_to_train_h=ch.time_h,
                meets_deadline=_meets(ctx, ch.time_h), cost=Cost(memory=mem, speed=_speed(ch), accuracy_risk=risk),
                source=source, command=cmd(ch)))
        else:
            dev = ch.closest.memory.device_gib if ch.closest else None
            out.append(Alternative(
                name=name, kind="compromise", summary=f"{what}; still does not fit on 1x {p.hw.gpu.name}"
                + (f" (~{dev:.1f} GiB)" if dev else ""), fits=False, device_gib=dev,
                cost=Cost(memory=f"~{dev:.1f} GiB per GPU" if dev else "", accuracy_risk=risk), source=source))
    off = offload(ctx)
    if off:
        out.append(off)
    return out


def offload(ctx: TreeContext) -> Alternative | None:
    """CPU offload of master weights and optimizer states (ZeRO-Offload / FSDP cpu_offload): rough."""
    p = ctx.planner
    std = ctx.one
    closest = std.estimate if isinstance(std, Choice) else std.closest if isinstance(std, Infeasible) else None
    if closest is None or p.model.params < 1e8:
        return None
    m = closest.memory
    n = p.model.params
    gpu_bytes = 2 * n + 2 * n  # bf16 weights for compute + bf16 gradients before they are copied out
    device = (gpu_bytes / GIB + m.activations_gib + m.other_gib) * p.cal.allocator_reserve + p.cal.cuda_context_gib
    host_gib = 16 * n / GIB  # fp32 master weights, fp32 gradients, two fp32 moments
    link = p.hw.gpu.pcie_gbps / 2 * 0.7
    extra_s = 2 * 2 * n / (link * 1e9) + 28 * n / (CPU_ADAM_GBPS * 1e9)
    fits = device <= p.hw.gpu.memory_gib * p.cal.fit_fraction
    return Alternative(
        name="CPU offload", kind="offload",
        summary=(f"master weights and AdamW states in host RAM (~{host_gib:.0f} GiB), ~{device:.1f} GiB per GPU; "
                 f"rough: +{extra_s:.1f} s per optimizer step for PCIe copies and a CPU Adam step"),
        fits=fits, gpus=1, device_gib=device,
        cost=Cost(memory=f"~{device:.1f} GiB per GPU, ~{host_gib:.0f} GiB host RAM",
                  speed=f"rough, not calibrated: +{extra_s:.1f} s per optimizer step (PCIe at {link:.0f} GB/s, CPU Adam at {CPU_ADAM_GBPS:.0f} GB/s)",
                  accuracy_risk="none (same arithmetic)"),
        source="Ren et al. 2021 (ZeRO-Offload); PyTorch FSDP CPUOffload", command=None)


def scale_out(ctx: TreeContext, cmd: CommandFn) -> Alternative | None:
    """The standard recipe on the fewest GPUs that hold it (node C's count), possibly more than at hand."""
    ch = ctx.min_fit
    p = ctx.planner
    if ch is None:
        return None
    at_hand = ch.gpus <= p.available
    return Alternative(
        name=f"FSDP on {ch.gpus} GPUs", kind="scale-out",
        summary=(f"the standard recipe sharded over {ch.gpus}x {p.hw.gpu.name}: ~{ch.estimate.memory.device_gib:.1f} GiB per GPU, "
                 f"{_speed(ch)}" + ("" if at_hand else f" (needs {ch.gpus} GPUs; {p.available} at hand)")),
        fits=True, gpus=ch.gpus, strategy=ch.strategy.value, peak_gib=ch.estimate.memory.peak_gib,
        device_gib=ch.estimate.memory.device_gib, samples_per_s=ch.estimate.throughput.samples_per_s,
        time_to_train_h=ch.time_h, meets_deadline=_meets(ctx, ch.time_h),
        cost=Cost(memory=f"~{ch.estimate.memory.device_gib:.1f} GiB per GPU", speed=_speed(ch), accuracy_risk="none"),
        source="Zhao et al. 2023 (PyTorch FSDP)", command=cmd(ch, hypothetical=not at_hand))


def from_measures(ctx: TreeContext, cmd: CommandFn) -> list[Alternative]:
    out = []
    for m in ctx.measures:
        kind = ("smaller-model" if m.model else "scale-out" if m.name.endswith("GPUs") else
                "workload" if m.epochs else "speed")
        command = cmd(m.choice, model=m.model, epochs=m.epochs, hypothetical=m.hypothetical) if m.choice else None
        out.append(Alternative(
            name=m.name, kind=kind, summary=m.summary, fits=m.fits, gpus=m.gpus, strategy=m.strategy,
            peak_gib=m.peak_gib, device_gib=m.device_gib, samples_per_s=m.samples_per_s, time_to_train_h=m.time_h,
            meets_deadline=m.meets, cost=Cost(speed=f"{format_hours(m.time_h)} to train" if m.time_h else ""),
            source=m.source, command=command))
    return out


def _meets(ctx: TreeContext, t: float | None) -> bool | None:
    if ctx.deadline is None or t is None:
        return None
    return t <= ctx.deadline
