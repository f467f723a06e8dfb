"""The training schedule's arithmetic, in one place: optimizer steps, warmup, the learning rate
for a global batch and its multiplier at each step.

The recommendation (``rules.lr``), the CPU plan (``launcher.cpu_plan``), the OOM retry
(``launcher.oom``), ``advise launch --resume`` and each rank's runtime (``launcher.runtime``) all
count steps and warmup here, so that the step counts the report prints are the ones that run.

- Steps: a run sized by ``--dataset-size`` and ``--epochs`` takes ``ceil(dataset x epochs /
  global batch)`` optimizer steps (the samples it is asked to see, the last step partly filled);
  ``--max-steps`` caps it. The schedule follows the steps that will run: a 20-step run warms up
  over a share of 20 steps, not of the epochs it would have taken.
- Warmup: a fraction of the steps that run, capped (``WarmupPolicy``; the rules' values and their
  sources are in ``rules/data/defaults.toml [warmup]``).
- LR for a batch: linear (Goyal et al. 2017, SGD), square root (Malladi et al. 2022 for Adam-family
  optimizers; Krizhevsky 2014), or none.
- The multiplier at a step: linear warmup, then cosine to ``FINAL_LR_FRACTION`` of the peak
  when the number of steps is known (nanoGPT's ``min_lr = lr/10``), else constant.
"""

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

LrScaling = Literal["linear", "sqrt", "none"]
# nanoGPT (karpathy/nanoGPT train.py): min_lr ~= learning_rate/10 per Chinchilla (Hoffmann et al. 2022).
FINAL_LR_FRACTION = 0.1


class WarmupPolicy(BaseModel):
    """How many warmup steps a run of a given length gets (stored in the plan, so the runtime
    sizes the warmup for the steps it will actually run)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # The values and their sources: rules/data/defaults.toml [warmup].
    fraction: float = Field(gt=0, le=1, description="share of the steps that run")
    max_steps: int = Field(ge=1, description="cap, whatever the length of the run")
    max_epochs: float | None = Field(None, gt=0, description="cap in epochs when the epoch length is known")
    unknown_steps: int = Field(ge=0, description="when the length of the run is not known")


class Schedule(BaseModel):
    """Steps and warmup of one run, and how the warmup was sized (for the report)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    total_steps: int | None = Field(None, description="optimizer steps that run; None = not known (runs until stopped)")
    steps_per_epoch: int | None = None
    warmup_steps: int = 0
    warmup_rule: str = ""


def steps_per_epoch(dataset_size: int, global_batch: int) -> int:
    return max(1, math.ceil(dataset_size / global_batch))


def planned_steps(dataset_size: int | None, epochs: float | None, global_batch: int) -> int | None:
    """Optimizer steps for ``dataset_size x epochs`` samples (None when either is unknown)."""
    if not dataset_size:
        return None
    return max(1, math.ceil(dataset_size * (epochs or 1) / global_batch))


def steps_to_run(planned: int | None, max_steps: int | None) -> int | None:
    """The steps that will run: ``--max-steps`` caps the planned total."""
    caps = [s for s in (planned, max_steps) if s]
    return min(caps) if caps else None


def warmup_for(total: int | None, policy: WarmupPolicy, per_epoch: int | None = None) -> tuple[int, str]:
    """(warmup steps, why that many) for a run of ``total`` steps."""
    if not total:
        return policy.unknown_steps, (f"{policy.unknown_steps} steps by default: the length of the run is not known "
                                      f"(give --dataset-size and --epochs, or --max-steps, to size it as "
                                      f"{policy.fraction:.0%} of the run)")
    by_frac = max(1, math.ceil(policy.fraction * total))
    caps = [(policy.max_steps, f"at most {policy.max_steps:,} steps")]
    if per_epoch and policy.max_epochs:
        caps.append((max(1, math.ceil(policy.max_epochs * per_epoch)),
                     f"at most {policy.max_epochs:g} epochs of {per_epoch:,} steps (Goyal et al. 2017)"))
    cap, cap_rule = min(caps)
    if by_frac <= cap:
        return by_frac, f"{policy.fraction:.0%} of {total:,} steps"
    return cap, f"{policy.fraction:.0%} of {total:,} steps, {cap_rule}"


def schedule(dataset_size: int | None, epochs: float | None, global_batch: int, policy: WarmupPolicy, *,
             max_steps: int | None = None, warmup_steps: int | None = None) -> Schedule:
    """Steps and warmup for a global batch; ``warmup_steps`` given (the user's) is kept, within the run."""
    per_epoch = steps_per_epoch(dataset_size, global_batch) if dataset_size else None
    total = steps_to_run(planned_steps(dataset_size, epochs, global_batch), max_steps)
    if warmup_steps is not None:
        warm = min(warmup_steps, total) if total else warmup_steps
        rule = f"{warm} steps (given)"
    else:
        warm, rule = warmup_for(total, policy, per_epoch)
    return Schedule(total_steps=total, steps_per_epoch=per_epoch, warmup_steps=warm, warmup_rule=rule)


def scaled_lr(base_lr: float, base_batch: int, global_batch: int, rule: str) -> float:
    """Scale the LR with the batch: linear (Goyal et al. 2017), sqrt (Malladi et al. 2022; Krizhevsky 2014), or none."""
    ratio = global_batch / base_batch
    if rule == "linear":
        return base_lr * ratio
    if rule == "sqrt":
        return base_lr * math.sqrt(ratio)
    return base_lr


def scaling_for(optimizer: str) -> LrScaling:
    """The batch-scaling rule an optimizer follows: linear for SGD (Goyal et al. 2017), square root
    for Adam-family optimizers (Malladi et al. 2022, "On the SDEs and Scaling Rules for Adaptive
    Gradient Algorithms": Adam's noise scales with sqrt(batch), so its LR follows sqrt(batch))."""
    return "linear" if optimizer == "sgd" else "sqrt"


def lr_factor(step: int, warmup_steps: int, total_steps: int | None, final: float = FINAL_LR_FRACTION) -> float:
    """Multiplier of the planned LR at optimizer step ``step`` (0-based): the peak is reached at
    step ``warmup_steps - 1``."""
    if warmup_steps and step < warmup_steps:
        return (step + 1) / warmup_steps
    if not total_steps or total_steps <= warmup_steps:
        return 1.0
    progress = min(1.0, (step - warmup_steps) / (total_steps - warmup_steps))
    return final + (1.0 - final) * 0.5 * (1.0 + math.cos(math.pi * progress))


class LrRecipe(BaseModel):
    """The learning rate a run starts from, and the batch it was tuned at (chosen by ``rules.lr``
    from the published recipes of ``rules/data/defaults.toml``, or the user's --base-lr/--base-batch)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: Literal["pretrain", "finetune"]
    task_rule: str = Field("", description="why this task: --task, the workload (tokens or epochs), or the family's default")
    task_flag: str = Field("", description="the flag that overrides the task taken (--task pretrain|finetune)")
    optimizer: str = Field(description="the optimizer the recipe was tuned with")
    base_lr: float = Field(gt=0)
    base_batch: int = Field(ge=1)
    scaling: LrScaling = Field(description="how the LR follows the global batch")
    scaling_rule: str = ""
    source: str
    defaulted: bool = Field(True, description="from the table, not from --base-lr")
    warmup: WarmupPolicy

    def lr_for(self, global_batch: int) -> float:
        return scaled_lr(self.base_lr, self.base_batch, global_batch, self.scaling)
