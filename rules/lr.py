"""Node J's arithmetic: the learning rate for a global batch, and the warmup that goes with it.

One ``LrPlan`` per ``Choice`` (the planner computes it when it makes the choice), so the
recommendation, node J's answer, the plan rules' facts and the launch command all read the same
numbers. The scaling itself is ``advisor.plan.scaled_lr`` (linear by default, Goyal et al. 2017;
sqrt on request, Krizhevsky 2014), shared with the launcher's runtime.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from advisor.plan import scaled_lr
from advisor.request import Request
from rules.defaults import WarmupDefaults


@dataclass(frozen=True)
class LrPlan:
    lr: float
    base_lr: float
    base_batch: int
    global_batch: int
    lr_scaling: str
    ratio: float = 1.0
    text: str = ""  # how lr follows from the base (node J's answer)
    warmup_steps: int = 0
    warmup_rule: str = ""  # why that many warmup steps
    total_steps: int | None = None  # known when --dataset-size and --epochs are
    steps_per_epoch: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def lr_plan(req: Request, warmup: WarmupDefaults, base_lr: float, base_batch: int, global_batch: int) -> LrPlan:
    """Learning rate for ``global_batch`` (``--lr-scaling`` from ``base_lr`` at ``base_batch``) and warmup steps.

    Warmup: ``warmup_fraction`` of the run or ``warmup_epochs`` epochs, whichever is shorter, at
    least ``min_steps``; ``unknown_steps`` when the run length is not given (rules/data/defaults.toml).
    """
    w, gb, rule = warmup, global_batch, req.lr_scaling
    lr = scaled_lr(base_lr, base_batch, gb, rule)
    ratio = gb / base_batch
    if rule == "none" or ratio == 1:
        text = f"base lr kept (global batch {gb}" + (f" = base batch)" if ratio == 1 else f", --lr-scaling none)")
    else:
        text = f"{rule} scaling: {base_lr:g} x {'sqrt(' if rule == 'sqrt' else ''}{gb}/{base_batch}{')' if rule == 'sqrt' else ''}"
    steps_epoch = total = None
    if req.dataset_size and req.epochs:
        steps_epoch = max(1, math.ceil(req.dataset_size / gb))
        total = max(1, math.ceil(steps_epoch * req.epochs))
        by_frac = math.ceil(w.warmup_fraction * total)
        by_epochs = math.ceil(w.warmup_epochs * steps_epoch)
        warm = max(min(by_frac, by_epochs), min(w.min_steps, total))
        warm_rule = (f"{w.warmup_fraction:.0%} of {total:,} steps" if by_frac <= by_epochs
                     else f"{w.warmup_epochs:g} epochs of {steps_epoch:,} steps (Goyal et al. 2017)")
        if warm == min(w.min_steps, total) and warm > min(by_frac, by_epochs):
            warm_rule = f"at least {w.min_steps} steps"
    else:
        warm = w.unknown_steps
        warm_rule = f"{w.unknown_steps} steps by default: give --dataset-size and --epochs to size it as {w.warmup_fraction:.0%} of the run"
    return LrPlan(lr=lr, base_lr=base_lr, base_batch=base_batch, global_batch=gb, lr_scaling=rule, ratio=ratio,
                  text=text, warmup_steps=warm, warmup_rule=warm_rule, total_steps=total, steps_per_epoch=steps_epoch)
