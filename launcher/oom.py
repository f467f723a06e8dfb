"""Out-of-memory recovery: recognise a CUDA OOM death and shrink the micro-batch, not the batch.

A rank that runs out of GPU memory dies with ``torch.OutOfMemoryError`` (``torch.cuda.
OutOfMemoryError`` is the same class) or, from code that catches and re-raises, a
``RuntimeError: CUDA out of memory``. Either leaves its message in the rank's log. We retry with
half the micro-batch and twice the accumulation: samples per optimizer step (the global batch)
and therefore the learning rate and its schedule stay what was planned; only speed changes, and
the retry goes on from the run's last checkpoint, if it saved one (``launcher.checkpoints.for_retry``).

Except where accumulation is what did not fit, or is pinned off. A plan marked ``no_accumulation``
is node H's no-accumulation compromise, which fits only because no fp32 gradients wait beside the
next micro-batch's autocast copies (DESIGN.md, node H), or has --grad-accum 1 pinned (a pin is
never overridden); the optimizer step in backward steps on every backward (TrainConfig refuses
accumulation with it). Their retry keeps accumulation at 1 and lowers the global batch instead, the
learning rate rescaled from the plan's base by its own rule (node J) and the schedule recounted, from
step 0 (a checkpoint's steps were of the other batch); the runner says so in its output and in the
attempt's record (``retry_note``).

A fsdp-keep plan first retries as plain FSDP with the same micro-batch: the kept unsharded weights
and gradients (about 4 bytes per parameter per GPU) are the largest thing it adds, and dropping them
changes the communication, not the training.

Host-RAM exhaustion (the kernel's OOM killer, SIGKILL) is not retried: a smaller micro-batch
rarely fixes it and the cause is usually elsewhere (dataset in memory, too many workers).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from pathlib import Path

from advisor.setup import no_accumulation, strategy_of
from advisor.plan import Plan
from advisor.schedule import planned_steps, scaled_lr

DEFAULT_MAX_RETRIES = 3
OOM_ERROR = "out of GPU memory"  # how records, reports and the bench say it
OOM_RETRY_MARK = f"cardwise: {OOM_ERROR}"  # starts the line the runner echoes before a retry; the TUI watches for it

# Exception names and messages of device OOMs (CUDA; ROCm reports through the same class; XPU/MPS
# have their own words). Matched case-sensitively on log text.
_OOM_RE = re.compile(
    r"torch\.(?:cuda\.)?OutOfMemoryError"
    r"|CUDA out of memory"
    r"|CUDA error: out of memory"
    r"|CUBLAS_STATUS_ALLOC_FAILED"
    r"|XPU out of memory"
    r"|MPS backend out of memory"
)


def text_has_oom(text: str) -> bool:
    return bool(_OOM_RE.search(text))


def logs_have_oom(paths: Iterable[Path], tail_bytes: int = 256_000) -> bool:
    """Whether any log's tail shows a device OOM (tails only: logs can be large)."""
    for path in paths:
        try:
            with open(path, "rb") as f:
                f.seek(0, 2)
                f.seek(max(0, f.tell() - tail_bytes))
                if text_has_oom(f.read().decode(errors="replace")):
                    return True
        except OSError:
            continue
    return False


def smaller_micro_batch(micro_batch: int) -> int | None:
    """The largest divisor of ``micro_batch`` that is at most half of it (6 -> 3, 3 -> 1, 8 -> 4);
    None at 1. A divisor, so that micro-batch x accumulation stays exactly the same."""
    for d in range(micro_batch // 2, 0, -1):
        if micro_batch % d == 0:
            return d
    return None


def accumulation_stays_off(plan: Plan) -> str | None:
    """Why this plan's retries must keep accumulation at 1, or None."""
    if plan.no_accumulation:
        return "no-accumulation (node H's compromise, or --grad-accum 1 pinned)"
    held = no_accumulation(plan.config)
    if held is not None:
        return f"{held.name} ({held.accum1_why})"
    return None


def shrink(plan: Plan) -> Plan | None:
    """The plan with a smaller micro-batch and proportionally more accumulation, same global
    batch and LR; None when the micro-batch is already 1. For a plan whose accumulation must stay 1
    (``accumulation_stays_off``): half the micro-batch, no accumulation, a smaller global batch."""
    micro = plan.config.micro_batch
    fallback = strategy_of(plan.config).oom_fallback
    if fallback is not None:
        config = plan.config.model_copy(update={"strategy": fallback})
        return Plan.model_validate({**plan.model_dump(), "config": config.model_dump()})
    if accumulation_stays_off(plan):
        return _shrink_batch(plan) if micro > 1 else None
    new = smaller_micro_batch(micro)
    if new is None:
        return None
    config = plan.config.model_copy(update={"micro_batch": new, "grad_accum": plan.config.grad_accum * (micro // new)})
    # Re-validate through the model: Plan checks micro x accum x ranks == global batch.
    return Plan.model_validate({**plan.model_dump(), "config": config.model_dump()})


def _shrink_batch(plan: Plan) -> Plan:
    """Half the micro-batch with accumulation 1: the global batch follows, the LR is rescaled from
    the plan's base (its ``lr_scaling``), warmup keeps its samples and a run sized by dataset and
    epochs is recounted in steps; a run of fixed steps (``--max-steps``) keeps its count."""
    new = plan.config.micro_batch // 2
    gb = new * plan.world_size
    ratio = plan.global_batch / gb
    total = plan.total_steps
    if plan.dataset_size and plan.epochs:
        total = planned_steps(plan.dataset_size, plan.epochs, gb)
    warmup = math.ceil(plan.warmup_steps * ratio)
    if total:
        warmup = min(warmup, total)
    config = plan.config.model_copy(update={"micro_batch": new, "grad_accum": 1})
    return Plan.model_validate({**plan.model_dump(), "config": config.model_dump(), "global_batch": gb,
                                "lr": scaled_lr(plan.base_lr, plan.base_batch, gb, plan.lr_scaling),
                                "total_steps": total, "warmup_steps": warmup})


def retry_note(old: Plan, new: Plan) -> str:
    """What the retry changes, for the runner's output and the attempt's record."""
    c = new.config
    was = strategy_of(old.config)
    if was.oom_fallback is not None and c.strategy is was.oom_fallback:
        return (f"retrying as plain {c.strategy.value.upper()} ({c.micro_batch} x {c.grad_accum}, same global batch): "
                f"{was.oom_fallback_note}")
    if new.global_batch == old.global_batch:
        return f"retrying with {c.micro_batch} x {c.grad_accum} accumulation (same global batch)"
    return (f"retrying with micro-batch {c.micro_batch} and no accumulation: the plan keeps it at 1, "
            f"{accumulation_stays_off(old)}, so the global batch drops from "
            f"{old.global_batch} to {new.global_batch} and the learning rate from {old.lr:.3g} to {new.lr:.3g} "
            f"({new.lr_scaling} scaling)")


def retry_decision(oom: bool, plan: Plan, attempt: int, max_retries: int) -> tuple[Plan | None, str | None]:
    """(next plan, None) to retry, or (None, why not) when a failed attempt is final."""
    if not oom:
        return None, None
    nxt = shrink(plan)  # first: at micro-batch 1 no number of retries helps, and the error says what does
    if nxt is None:
        return None, f"{OOM_ERROR} at micro-batch 1: needs a sharded strategy (--strategy fsdp), --grad-ckpt or a shorter --seq-len"
    if attempt > max_retries:
        if max_retries == 0:
            return None, f"{OOM_ERROR}; not retried (--max-oom-retries 0)"
        return None, f"{OOM_ERROR}; gave up after {max_retries} smaller retr{'y' if max_retries == 1 else 'ies'}"
    return nxt, None
