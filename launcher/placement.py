"""Placement for the queue service: which queued runs start now, and on which devices.

Pure functions over data: the devices (GPUs as NVML describes them in an ``advisor.hardware.Machine``,
or CPU slots), the devices the service's running runs hold, and the queue oldest first. Nothing
here reads NVML, the store or the clock, so tests give fake inventories as plain values.

The rules, in order:

1. **Enough, and nobody else's.** A run needing k devices (one per rank: ``processes_per_node``)
   gets k devices that no running run of the service holds, each with at least the memory its
   plan needs free *now* (NVML free memory >= the estimate's ``device_gib`` per GPU). A GPU busy
   with someone else's process shows little free memory and is passed over. When there is no
   estimate (a user script, an unknown model), a GPU must look idle: free >= 90% of its total.
   CPU slots have no memory to check.
2. **Best fit.** Of the devices that qualify, those with the least free memory (whole GiB) are
   used, lowest index first on ties: the big free GPUs stay for the big runs.
3. **FIFO with backfill and bounded bypass (no starvation).** Runs are considered oldest first.
   The first one that does not fit now is the *head*. Later runs that fit on what is left start
   anyway (backfill); each such start counts one bypass of the head. Once the head has been
   bypassed ``max_bypass`` times, it *reserves* the free devices it could use (up to k) and no
   other run may take them; devices freed by ending runs join the reservation until the head
   fits. So the head waits at most for the runs already running plus ``max_bypass`` backfilled
   ones. Only the head is protected; the next run in line becomes head when it starts.
4. **Never fits is an answer, not a wait.** A run that cannot fit on this inventory even when it
   is idle (more ranks than devices, more memory than any GPU has, a GPU plan on CPU slots) is
   refused with the reason, instead of blocking the queue forever.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from advisor.hardware import Machine

IDLE_FRACTION = 0.9  # a GPU with no estimate to compare against must have this share of its memory free
DEFAULT_MAX_BYPASS = 3

Kind = Literal["gpu", "cpu"]


class Device(BaseModel):
    """One GPU, or one CPU slot (a rank's share of the CPU)."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(description="NVML index (== CUDA index with CUDA_DEVICE_ORDER=PCI_BUS_ID), or slot number")
    kind: Kind = "gpu"
    name: str = ""
    total_gib: float | None = Field(None, description="None for CPU slots: no memory to check")
    free_gib: float | None = Field(None, description="NVML free memory now (all processes counted)")


class Request(BaseModel):
    """What one queued run needs."""

    model_config = ConfigDict(extra="forbid")

    id: str
    devices: int = Field(ge=1, description="GPUs (or CPU slots): one per rank")
    kind: Kind = "gpu"
    need_gib: float | None = Field(None, description="memory per GPU the plan needs (estimate's device_gib); None = unknown")


class Placement(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    devices: list[int]
    backfill: bool = Field(False, description="started ahead of an older run that does not fit yet")


class Refusal(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    reason: str


class Decision(BaseModel):
    """One scheduling pass: what starts, what can never start, and who waits why."""

    model_config = ConfigDict(extra="forbid")

    start: list[Placement] = Field(default_factory=list)
    refuse: list[Refusal] = Field(default_factory=list)
    head: str | None = Field(None, description="oldest queued run that does not fit now")
    bypassed: dict[str, int] = Field(default_factory=dict, description="bypass count of the head (carry to the next pass)")
    reserved: list[int] = Field(default_factory=list, description="free devices kept for the head")
    waiting: dict[str, str] = Field(default_factory=dict, description="run id -> why it waits")


# ---------------------------------------------------------------- inventories
def gpu_devices(machine: Machine, only: Iterable[int] | None = None) -> list[Device]:
    """The machine's GPUs as devices, optionally only the indices in ``only``."""
    keep = None if only is None else set(only)
    return [Device(index=g.index, kind="gpu", name=g.name, total_gib=g.memory_total_gib, free_gib=g.memory_free_gib)
            for g in machine.gpus if keep is None or g.index in keep]


def cpu_slots(n: int) -> list[Device]:
    return [Device(index=i, kind="cpu", name=f"cpu slot {i}") for i in range(n)]


# ---------------------------------------------------------------- one run
def adequate(req: Request, dev: Device) -> bool:
    """Could ``req`` use ``dev`` now (right kind, enough free memory)? Holding is checked elsewhere."""
    if dev.kind != req.kind:
        return False
    if dev.kind == "cpu" or dev.free_gib is None:
        return True
    if req.need_gib is None:
        return dev.total_gib is None or dev.free_gib >= IDLE_FRACTION * dev.total_gib
    return dev.free_gib >= req.need_gib


def never_fits(req: Request, devices: Sequence[Device]) -> str | None:
    """Why ``req`` could not start here even on an idle machine, or None when it could."""
    unit = "GPU" if req.kind == "gpu" else "CPU slot"
    same = [d for d in devices if d.kind == req.kind]
    if not same:
        if req.kind == "gpu":
            return "the plan is for GPUs but the service runs CPU slots (--cpu); serve without --cpu, or resubmit with --cpu"
        return "the plan is for CPU processes but the service places GPUs; serve with --cpu, or resubmit without --cpu"
    if req.devices > len(same):
        fix = "--slots" if req.kind == "cpu" else "--gpu-ids"
        return (f"needs {req.devices} {unit}s (one per rank) but the service has {len(same)} "
                f"({_indices(same)}); resubmit with fewer ranks, or serve with more ({fix})")
    if req.kind == "gpu" and req.need_gib is not None:
        big = [d for d in same if d.total_gib is None or d.total_gib >= req.need_gib]
        if len(big) < req.devices:
            largest = max((d.total_gib or 0.0) for d in same)
            return (f"needs {req.need_gib:.1f} GiB per GPU on {req.devices} GPU(s); {len(big)} GPU(s) here have that much "
                    f"(largest {largest:.1f} GiB); plan for more GPUs or less memory (micro-batch, checkpointing, FSDP)")
    return None


def _fit_key(dev: Device) -> tuple[float, int]:
    return (math.inf if dev.free_gib is None else math.floor(dev.free_gib), dev.index)


def choose(req: Request, free: Iterable[Device]) -> list[int] | None:
    """The k devices ``req`` gets out of ``free`` (best fit, see the module docstring), or None."""
    ok = sorted((d for d in free if adequate(req, d)), key=_fit_key)
    if len(ok) < req.devices:
        return None
    return sorted(d.index for d in ok[: req.devices])


def _why_waiting(req: Request, free: Sequence[Device], reserved: set[int]) -> str:
    unit = "GPU" if req.kind == "gpu" else "CPU slot"
    usable = [d for d in free if adequate(req, d) and d.index not in reserved]
    need = ""
    if req.kind == "gpu":
        need = f" with {req.need_gib:.1f} GiB free" if req.need_gib is not None else " that look idle"
    return f"needs {req.devices} {unit}(s){need}; {len(usable)} free now"


def _indices(devs: Iterable[Device]) -> str:
    return ",".join(str(d.index) for d in devs) or "none"


# ---------------------------------------------------------------- the queue
def schedule(queue: Sequence[Request], devices: Sequence[Device], held: Iterable[int] = (), *,
             bypassed: Mapping[str, int] | None = None, max_bypass: int = DEFAULT_MAX_BYPASS,
             max_runs: int | None = None, running: int = 0) -> Decision:
    """Decide one pass: ``queue`` oldest first, ``held`` = devices of running runs.

    ``bypassed`` is the previous pass's ``Decision.bypassed`` (how often the current head was
    passed over); ``max_runs`` caps concurrent runs (``running`` of them run now).
    """
    bypassed = dict(bypassed or {})
    held_set = set(held)
    free = [d for d in devices if d.index not in held_set]
    dec = Decision()
    room = math.inf if max_runs is None else max(0, max_runs - running)
    head: Request | None = None
    reserved: set[int] = set()

    def reserve_for_head() -> None:
        pick = sorted((d for d in free if adequate(head, d)), key=_fit_key)[: head.devices]
        reserved.update(d.index for d in pick)

    for req in queue:
        why_not = never_fits(req, devices)
        if why_not is not None:
            dec.refuse.append(Refusal(id=req.id, reason=why_not))
            continue
        if room <= 0:
            dec.waiting[req.id] = f"the service runs at most {max_runs} run(s) at once (--slots)"
            continue
        available = [d for d in free if d.index not in reserved]
        pick = choose(req, available)
        if pick is None:
            dec.waiting[req.id] = _why_waiting(req, free, reserved)
            if head is None:
                head = req
                dec.head = req.id
                if bypassed.get(req.id, 0) >= max_bypass:
                    reserve_for_head()
            continue
        dec.start.append(Placement(id=req.id, devices=pick, backfill=head is not None))
        free = [d for d in free if d.index not in pick]
        room -= 1
        if head is not None:
            bypassed[head.id] = bypassed.get(head.id, 0) + 1
            if bypassed[head.id] >= max_bypass and not reserved:
                reserve_for_head()
    if head is not None:
        dec.bypassed = {head.id: bypassed.get(head.id, 0)}
        dec.reserved = sorted(reserved)
        if reserved:
            dec.waiting[head.id] += f" (bypassed {dec.bypassed[head.id]} times: devices {_indices(d for d in devices if d.index in reserved)} reserved for it)"
    return dec
