"""Alternatives: other ways to run the same training, each with its estimate and its cost.

Offered when the standard setup cannot run on the GPUs at hand (node H's ladder of memory
compromises, the one recommended left out; more GPUs), when the deadline is missed (node H's
measures), or when asked for (``--alternatives``).
"""

from __future__ import annotations

from typing import Callable

from advisor.setup import NO_ACCUMULATION
from advisor.units import format_hours
from rules.compromise import find, gives_up, name_of
from rules.recommend import Alternative, Cost
from rules.planner import Choice, Infeasible
from rules.tree import TreeContext

CommandFn = Callable[..., str]


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
    chosen = out_.chosen.level.name if out_.chosen else None
    out: list[Alternative] = []
    for t in out_.tried:
        lv, r = t.level, t.result
        if lv.name == chosen or r is None:
            continue
        kind = "offload" if lv.update.get("cpu_offload") else "compromise"
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
                cost=Cost(memory=mem, speed=_speed(r), accuracy_risk=lv.risk), source=lv.source, command=cmd(r, no_accumulation=NO_ACCUMULATION in name_of(lv, r, p).split("+"))))
        else:
            dev = r.closest.memory.device_gib if r.closest else None
            out.append(Alternative(
                name=lv.name, kind=kind, summary=f"gives up {lv.gives_up}; still does not fit on {r.gpus}x {p.hw.gpu.name}"
                + (f" (~{dev:.1f} GiB)" if dev else ""), fits=False, gpus=r.gpus, device_gib=dev,
                cost=Cost(memory=f"~{dev:.1f} GiB per GPU" if dev else "", accuracy_risk=lv.risk), source=lv.source))
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
