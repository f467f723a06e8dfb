"""Alternatives: other ways to run the same training, each with its estimate and its cost.

Offered when the standard setup cannot run on the GPUs at hand (node H's ladder of memory
compromises, the one recommended left out; more GPUs), when the deadline is missed (node H's
measures), or when asked for (``--alternatives``).
"""

from __future__ import annotations

from typing import Callable

from advisor.setup import COMPROMISES, NO_ACCUMULATION, offloads
from advisor.units import format_hours
from rules.compromise import find, gives_up, name_of, risk_text
from rules.host_ram import host_short, host_text
from rules.recommend import Alternative, Cost
from rules.planner import Choice, Infeasible
from rules.tree import TreeContext

CommandFn = Callable[..., str]
# The compromise that keeps the training state in host RAM (the node's RAM may not hold it).
_OFFLOAD = next(s for s in COMPROMISES if s.host_offload)


def _speed(ch: Choice) -> str:
    t = ch.time_h
    s = f"{ch.estimate.throughput.samples_per_s:,.2f} samples/s"
    return s + (f", {format_hours(t)} to train" if t is not None else "")


def compromises(ctx: TreeContext, cmd: CommandFn) -> list[Alternative]:
    """Node H's ladder (rules.compromise), every level but the one recommended, with its numbers."""
    p = ctx.planner
    out_ = ctx.compromise or find(p, 1)
    std = ctx.one
    std_dev = (std.estimate.memory.device_gib if isinstance(std, Choice)
               else std.closest.memory.device_gib if isinstance(std, Infeasible) and std.closest else None)
    out: list[Alternative] = []
    for t in out_.tried:
        lv, r = t.level, t.result
        if t is out_.chosen or r is None:
            continue
        kind = "offload" if lv.host_offload else "compromise"
        if isinstance(r, Choice):
            e = r.estimate
            label = name_of(lv, r, p) + (" + checkpointing" if r.config.grad_ckpt else "")
            mem = f"~{e.memory.device_gib:.1f} GiB per GPU" + (f" (standard: ~{std_dev:.1f} GiB)" if std_dev else "")
            if e.memory.host_gib:
                mem += f", ~{e.memory.host_gib:.0f} GiB host RAM"
            out.append(Alternative(
                name=label, kind=kind, summary=f"gives up {gives_up(lv, r, p)}; fits on {r.gpus}x {p.hw.gpu.name}: {mem}, {_speed(r)}",
                fits=True, gpus=r.gpus, strategy=r.strategy.value, peak_gib=e.memory.peak_gib, device_gib=e.memory.device_gib,
                samples_per_s=e.throughput.samples_per_s, time_to_train_h=r.time_h, meets_deadline=_meets(ctx, r.time_h),
                cost=Cost(memory=mem, speed=_speed(r), accuracy_risk=risk_text(lv, r, p)), source=lv.source, command=cmd(r, no_accumulation=NO_ACCUMULATION in name_of(lv, r, p).split("+"))))
        else:
            dev = r.closest.memory.device_gib if r.closest else None
            host = r.closest is not None and r.reason == host_short(r.closest, p)  # the GPUs hold it, the node's RAM not
            out.append(Alternative(
                name=t.name, kind=kind, summary=f"gives up {lv.gives_up}; " + (
                    f"on {r.gpus}x {p.hw.gpu.name} it {host_short(r.closest, p)}" if host else
                    f"still does not fit on {r.gpus}x {p.hw.gpu.name}" + (f" (~{dev:.1f} GiB)" if dev else "")),
                fits=False, gpus=r.gpus, device_gib=dev,
                cost=Cost(memory=(host_text(r.closest) if host else f"~{dev:.1f} GiB per GPU" if dev else ""),
                          accuracy_risk=lv.risk), source=lv.source))
    return out


# Optimizer-only offload as DeepSpeed runs it (ZeRO-Offload, `offload_optimizer`): the CPU holds the fp32
# master weights and both AdamW moments (12 bytes a parameter) and the fp16/bf16 gradients it steps on
# (2): Ren et al. 2021 (ZeRO-Offload), sec. 4.1. FSDP2's CPUOffloadPolicy (what cardwise launches) moves
# parameters, gradients and optimizer states together, 16 bytes a parameter (advisor.memory).
OPTIMIZER_ONLY_HOST_BYTES = 14


def host_ram_short(ctx: TreeContext, cmd: CommandFn) -> list[Alternative]:
    """When the node's RAM cannot hold CPU offload (the ladder's cpu-offload, or a pinned --cpu-offload): the
    offload over more nodes (each node holds its ranks' shards, so the per-node need falls with the count),
    and optimizer-only offload with its own per-node need, which cardwise cannot launch."""
    from advisor.config import Strategy
    from rules.nodes import HYPOTHETICAL_MAX_GPUS

    p = ctx.planner
    e = None
    tried = ctx.compromise.tried if ctx.compromise else []
    short = next((t for t in tried if t.level.host_offload and not t.label and isinstance(t.result, Infeasible)
                  and t.result.closest is not None and host_short(t.result.closest, p)), None)
    if short is not None:
        e = short.result.closest
    elif isinstance(ctx.choice, Choice) and offloads(ctx.choice.config) and host_short(ctx.choice.estimate, p):
        e = ctx.choice.estimate
    if e is None:
        return []
    out: list[Alternative] = []
    base = p.base.model_copy(update=_OFFLOAD.setting())
    for n in p.counts(hypothetical_max=HYPOTHETICAL_MAX_GPUS):
        if n <= e.hardware.count:
            continue
        ch = p.search(n, Strategy.fsdp, base=base, hypothetical=True)
        if isinstance(ch, Choice) and not host_short(ch.estimate, p):
            nodes = ch.estimate.hardware.nodes
            out.append(Alternative(
                name=f"{nodes} nodes with {_OFFLOAD.name}", kind="scale-out",
                summary=(f"the same offload over {n}x {p.hw.gpu.name} ({nodes} nodes): {host_text(ch.estimate)}, within "
                         f"the {p.host_ram_gib:.0f} GiB of each node; {_speed(ch)}" +
                         (f" (needs {n} GPUs; {p.available} at hand)" if n > p.available else "")),
                fits=True, gpus=n, strategy=ch.strategy.value, peak_gib=ch.estimate.memory.peak_gib,
                device_gib=ch.estimate.memory.device_gib, samples_per_s=ch.estimate.throughput.samples_per_s,
                time_to_train_h=ch.time_h, meets_deadline=_meets(ctx, ch.time_h),
                cost=Cost(memory=host_text(ch.estimate), speed=_speed(ch), accuracy_risk="none"),
                source=_OFFLOAD.source, command=cmd(ch, hypothetical=n > p.available)))
            break
    ranks = round(e.memory.host_node_gib / e.memory.host_gib) if e.memory.host_gib else 1
    need = OPTIMIZER_ONLY_HOST_BYTES * p.model.params / e.hardware.count * ranks / 2**30
    out.append(Alternative(
        name="optimizer-only offload", kind="offload",
        summary=(f"only the optimizer on the CPU (DeepSpeed ZeRO-Offload's offload_optimizer: fp32 master weights, "
                 f"AdamW moments and the gradients, {OPTIMIZER_ONLY_HOST_BYTES} bytes a parameter): ~{need:.0f} GiB of "
                 f"host RAM per node against {e.memory.host_node_gib:.0f} for FSDP's offload of parameters too; cardwise "
                 "cannot launch it: FSDP2's CPUOffloadPolicy offloads parameters, gradients and optimizer states together"),
        fits=None, gpus=e.hardware.count, strategy="fsdp",
        cost=Cost(memory=f"~{need:.0f} GiB of host RAM per node", accuracy_risk="none"),
        source="Ren et al. 2021 (ZeRO-Offload, sec. 4.1); DeepSpeed offload_optimizer; PyTorch FSDP2 CPUOffloadPolicy"))
    return out


def scale_out(ctx: TreeContext, cmd: CommandFn) -> Alternative | None:
    """The standard recipe on the fewest GPUs that hold it (node C's count), possibly more than at hand."""
    ch = ctx.min_fit
    p = ctx.planner
    if ch is None:
        return None
    at_hand = ch.gpus <= p.available
    return Alternative(
        name=f"{ch.strategy.value.upper()} on {ch.gpus} GPUs", kind="scale-out",
        summary=(f"the standard recipe ({ch.strategy.value.upper()}) over {ch.gpus}x {p.hw.gpu.name}: ~{ch.estimate.memory.device_gib:.1f} GiB per GPU, "
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
