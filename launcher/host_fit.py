"""Does a CPU launch fit this machine? Host RAM and cores, checked before any rank starts.

A CPU rank keeps in host RAM what a GPU rank keeps on its GPU: weights, gradients, optimizer
states and the activations of one micro-batch. The estimator's memory breakdown
(``advisor.memory.estimate_memory``, the same arithmetic as on GPUs, for the plan's precision,
optimizer and strategy) gives that training state; each rank adds its own interpreter. Without
this check ``advise launch --cpu --model llama3-8b`` builds ~120 GiB per rank and dies in the
allocator (or wakes the OOM killer) minutes later; with it, the launch is refused up front with
the number of processes that would fit.

``advise launch`` and ``advise submit`` (runs on this machine), and the wizard's Launch screen
check it through ``launcher.preflight``; ``--dry-run`` and ``--emit slurm`` do not (they run nothing here).
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict, Field

from advisor.errors import UserError
from advisor.plan import Plan

# One rank's interpreter with torch and accelerate imported measures ~0.22 GiB RSS (CPython 3.11,
# torch 2.x CPU); the gloo process group, the DataLoader and autograd's bookkeeping roughly double it.
PROCESS_GIB = 0.5
# Of the RAM the kernel reports available, leave a tenth to the page cache (the data file, the
# logs), the launcher itself and whatever else grows on the machine meanwhile.
RAM_FRACTION = 0.9
# Ranks per logical core. Oversubscription works (the test suite runs two ranks on one core), but
# past a few ranks per core every step waits on the scheduler, gloo's collectives stall behind
# descheduled peers and starting N interpreters dominates the run: never a useful CPU run. The
# wizard's process field uses the same cap.
MAX_PROCESSES_PER_CORE = 4


class HostNeed(BaseModel):
    """What a CPU plan asks of this machine, per node."""

    model_config = ConfigDict(extra="forbid")

    model: str
    ranks: int = Field(description="CPU processes on this node")
    per_rank_gib: float = Field(description="training state of one rank + its interpreter")
    available_gib: float = Field(description="RAM the kernel reports available now")
    cores: int

    @property
    def usable_gib(self) -> float:
        return self.available_gib * RAM_FRACTION

    @property
    def total_gib(self) -> float:
        return self.per_rank_gib * self.ranks

    @property
    def ranks_that_fit(self) -> int:
        return int(self.usable_gib // self.per_rank_gib)


def max_processes(cores: int | None = None) -> int:
    """The most CPU processes per node this machine takes (``MAX_PROCESSES_PER_CORE`` per core)."""
    return max(1, cores or os.cpu_count() or 1) * MAX_PROCESSES_PER_CORE


def rank_state_gib(plan: Plan) -> float:
    """Host RAM one CPU rank of ``plan`` holds for training (GiB), from the estimator's breakdown."""
    from advisor.calibration import default_calibration
    from advisor.gpus import get_gpu
    from advisor.hardware import HardwareSpec
    from advisor.memory import estimate_memory
    from advisor.sources import resolve_model

    spec = resolve_model(plan.model)  # a catalog or config.json model costs no torch import
    # A stand-in device: estimate_memory reads only the rank count (FSDP shards by it) and the
    # device size (for its own `fits`, unused here); nothing GPU-specific enters the bytes.
    hw = HardwareSpec(gpu=get_gpu("h100"), gpus_per_node=plan.processes_per_node, nodes=plan.nodes)
    mem = estimate_memory(spec, plan.config, hw, default_calibration())
    return mem.peak_gib


def host_need(plan: Plan, *, available_gib: float | None = None, cores: int | None = None) -> HostNeed:
    """The RAM and cores ``plan`` needs on this node (``available_gib``/``cores``: measured when None)."""
    if available_gib is None:
        import psutil

        available_gib = psutil.virtual_memory().available / 2**30
    return HostNeed(model=plan.model.label(), ranks=plan.processes_per_node,
                    per_rank_gib=rank_state_gib(plan) + PROCESS_GIB, available_gib=available_gib,
                    cores=max(1, cores or os.cpu_count() or 1))


def check_host_fit(plan: Plan, *, available_gib: float | None = None, cores: int | None = None) -> HostNeed:
    """Refuse (UserError) a CPU plan this machine cannot hold; return what it needs when it fits."""
    if not plan.cpu:
        raise ValueError("check_host_fit is for CPU plans")  # a caller's bug, not a user's mistake
    n_cores = max(1, cores or os.cpu_count() or 1)
    limit = max_processes(n_cores)
    if plan.processes_per_node > limit:
        raise UserError(f"{plan.processes_per_node} CPU processes on {n_cores} core(s): more than "
                        f"{MAX_PROCESSES_PER_CORE} per core only wait on each other",
                        fix=f"use --processes {min(limit, n_cores)} (at most {limit} here), or plan for GPUs")
    need = host_need(plan, available_gib=available_gib, cores=n_cores)
    if need.total_gib <= need.usable_gib:
        return need
    what = (f"{need.model} needs ~{need.per_rank_gib:.1f} GiB of host RAM per CPU process "
            f"({plan.config.precision.value} weights, gradients, {plan.config.optimizer.value} states, activations of "
            f"micro-batch {plan.config.micro_batch}); {need.ranks} process(es) need ~{need.total_gib:.1f} GiB, "
            f"this machine has {need.available_gib:.1f} GiB available")
    if need.ranks_that_fit >= 1:
        fix = f"use --processes {need.ranks_that_fit} (what fits), a smaller model or --micro-batch, or plan for GPUs"
    else:
        fix = ("no number of CPU processes fits: train a smaller model on CPU (e.g. --model mini-transformer), "
               "or plan for GPUs (drop --cpu; --gpu NAME --dry-run shows the plan)")
    raise UserError(what, fix=fix)
