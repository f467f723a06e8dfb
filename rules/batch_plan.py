"""What the report says about the global batch (issue 37): how it was decided, the batch every capacity
statement holds at, when a small per-GPU batch caps scaling (and the batch that lifts the cap, with its
learning rate), and the batch-held plan beside a planned one.

The batch itself is decided in ``rules.planner`` (``Planner.batch_span``, ``Planner._grow``): pinned by
``--batch-size``; a fine-tune's recipe batch, held; a pretraining run's planned per GPU count inside the
family's published range (``rules/data/defaults.toml [batch_range]``). Everything here reads the
planner's rows; nothing here chooses.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.units import format_efficiency, format_hours
from rules.planner import Choice, Planner
from rules.tree import TreeContext

# How far a held batch is tried larger when a small per-GPU batch caps scaling (the cap note): up to
# this many doublings, inside the family's range where it has one. Goyal et al. 2017 went from 256 to
# 8k (5 doublings); 3 keep the note's extra searches few (the one-shot's time: benchmarks/speed).
CAP_DOUBLINGS = 3


@dataclass
class BatchFacts:
    """The batch decision in words and numbers (RecommendationCore, PolicySummary)."""

    rule: str  # how the global batch was decided
    planned: bool  # the planner chose it per GPU count (pretraining, not pinned)
    held: int  # the batch a held plan keeps: --batch-size, the recipe's, or where a free batch starts
    limit: int | None  # the family's published limit, when the batch is free
    scaling: str  # "weak" (each count at its planned batch) or "fixed" (one batch at every count)


def facts(p: Planner, chosen: Choice) -> BatchFacts:
    req, rec = p.req, p.recipe(chosen.config)
    held = p.target_batch
    if req.batch_size:
        return BatchFacts(f"--batch-size {req.batch_size} pins it (never changed)", False, held, None, "fixed")
    if p.batch_free:
        start, top = p.batch_span
        rng = p.defaults.batch_range[p.model.family]
        at = (f"{chosen.global_batch:,} at {chosen.gpus} GPU{'s' if chosen.gpus > 1 else ''}"
              + (f" (doubled from {start:,} while a doubling sped the plan up by more than 5%)"
                 if chosen.global_batch > start else ""))
        return BatchFacts(f"pretraining without --batch-size: planned per GPU count from {start:,} up to {top:,}, the "
                          f"family's published limit ({rng.source}); {at}; the lr follows by the recipe's "
                          f"{rec.scaling} rule; --batch-size N pins it", True, held, top, "weak")
    if req.keep_global_batch:
        return BatchFacts(f"--keep-global-batch holds the {rec.task} recipe's batch {held:,}", False, held, None, "fixed")
    why = ("a fine-tune keeps its recipe's batch" if rec.task == "finetune" else
           "the recipe's batch for this size" if p.model.family in p.defaults.batch_range else
           "no published range to grow it in for this family")
    return BatchFacts(f"the {rec.task} recipe's batch {held:,} ({why}; {rec.source}); --batch-size N pins another",
                      False, held, None, "fixed")


def scaling_words(b: BatchFacts, rows: list[Choice]) -> str:
    """Which efficiency the policy compared (docs/design.md "Decision policy")."""
    if b.scaling == "weak":
        at = ", ".join(f"{c.gpus}: {c.global_batch:,}" for c in sorted(rows, key=lambda c: c.gpus))
        return f"weak scaling: each count at its own planned global batch ({at})"
    return f"fixed global batch {b.held:,} at every count"


def cap_note(ctx: TreeContext, b: BatchFacts) -> str | None:
    """When the batch is held and the GPUs at hand are not all used (or the deadline is missed) because
    the per-GPU batch is small: the batch that lifts the cap on the GPUs at hand, with its lr."""
    p, pick = ctx.planner, ctx.pick
    if b.planned or pick is None or p.available < 2 or p.req.strategy is not None:
        return None
    n = p.available
    if pick.kind == "efficiency" and pick.choice.gpus < n:
        # pretraining: only inside the family's published range (none: no larger batch is published as
        # safe, as for decoders past GPT-3's table); a fine-tune: up to CAP_DOUBLINGS doublings
        rec = p.recipe()
        rng = p.defaults.batch_range.get(p.model.family)
        if rec.task == "pretrain" and rng is None:
            return None
        limit = (rng.max_batch or rec.base_batch) if rec.task == "pretrain" else None
        base = min(ctx.rows, key=lambda c: c.gpus) if ctx.rows else None
        if not isinstance(base, Choice):
            return None
        per_gpu = base.samples_per_s / base.gpus
        now = p.best(n)
        if not isinstance(now, Choice):
            return None
        floor = p.defaults.search.min_scaling_efficiency
        batch = b.held
        for _ in range(CAP_DOUBLINGS):
            batch *= 2
            if limit is not None and batch > limit:
                return None
            ch = p.best(n, batch=batch)
            if isinstance(ch, Choice) and (eff := ch.samples_per_s / n / per_gpu) >= floor:
                fix = f"--batch-size {batch}" + (", or drop --batch-size to let cardwise plan it"
                                                 if p.req.batch_size and limit else "")
                return (f"scaling is capped by the per-GPU batch: {b.held // n:,} per GPU at {n} GPUs keeps "
                        f"{format_efficiency(now.samples_per_s / n / per_gpu)}; at global batch {batch:,} "
                        f"(lr {ch.lr.lr:.3g}, {ch.lr.lr_scaling} from {ch.lr.base_lr:g} at {ch.lr.base_batch:,}) "
                        f"all {n} keep {format_efficiency(eff)}" + (f", inside the family's limit {limit:,}" if limit else "")
                        + f" ({fix})")
    return None


def at_limit(ctx: TreeContext, b: BatchFacts, hypothetical_max: int) -> str | None:
    """A missed deadline at a held batch of a pretraining run with a published range: the fewest GPUs
    of this kind that meet it at the family's limit (a capacity statement names its batch)."""
    from rules.policy import deadline_hours

    p = ctx.planner
    rng = p.defaults.batch_range.get(p.model.family)
    if (b.planned or ctx.deadline is None or rng is None or not rng.max_batch or p.recipe().task != "pretrain"
            or rng.max_batch <= b.held):
        return None
    limit = ctx.deadline * (1 - ctx.req.margin)
    for n in p.counts(hypothetical_max=hypothetical_max):
        ch = p.best(n, hypothetical=True, batch=rng.max_batch)
        if isinstance(ch, Choice) and (t := deadline_hours(ch.estimate)) is not None and t <= limit:
            return (f"at {rng.max_batch:,} (the family's limit; lr {ch.lr.lr:.3g}) {n} GPUs would "
                    + ("(drop --batch-size)" if p.req.batch_size else "(--batch-size " + str(rng.max_batch) + ")"))
    return None


def for_deadline(p: Planner, n: int, limit_h: float, hypothetical: bool = False):
    """The best plan on ``n`` GPUs for a deadline: at its planned batch, or, when that misses the deadline
    less the margin (``limit_h``), at the smallest larger batch of the family's range that meets it (the
    fewest GPUs that meet a deadline may need a larger batch than throughput alone asks for)."""
    from rules.policy import deadline_hours

    ch = p.best(n, hypothetical)
    if not p.batch_free or not isinstance(ch, Choice):
        return ch
    t = deadline_hours(ch.estimate)
    if t is None or t <= limit_h:
        return ch
    def meets(b: int) -> Choice | None:
        alt = p.best(n, hypothetical, batch=b)
        ok = isinstance(alt, Choice) and (ta := deadline_hours(alt.estimate)) is not None and ta <= limit_h
        return alt if ok else None

    larger = [b for b in p.batch_ladder(n) if b > ch.global_batch]
    # the family's limit first: where even it misses, no batch in the range meets it (a larger batch is
    # not slower), and one search says so (the bound on the estimator's calls: tests/test_bounded_search.py)
    if not larger or meets(larger[-1]) is None:
        return ch
    return next(a for a in (meets(b) for b in larger) if a is not None)


def held_rows(ctx: TreeContext) -> list[Choice]:
    """The best plan per GPU count at hand with the batch held where the planner grew it."""
    p = ctx.planner
    out = []
    for n in p.counts():
        r = p.best(n, batch=p.target_batch)
        if isinstance(r, Choice):
            out.append(r)
    return out


def held_pick(ctx: TreeContext) -> "Choice | None":
    """The batch-held plan, by the same policy (rules.policy.pick), when the planner grew the batch."""
    from rules.policy import pick

    p = ctx.planner
    if not p.batch_free or ctx.pick is None or ctx.pick.choice.global_batch == p.target_batch:
        return None
    rows = held_rows(ctx)
    if not rows:
        return None
    got = pick(rows, deadline_h=ctx.deadline, margin=ctx.req.margin,
               min_efficiency=p.defaults.search.min_scaling_efficiency, per_node=p.hw.gpus_per_node)
    return got.choice if got is not None else None


def held_summary(ch: Choice, ctx: TreeContext) -> str:
    t = ch.time_h
    return (f"lr {ch.lr.lr:.3g}; {ch.strategy.value.upper()} on {ch.gpus} "
            f"GPU{'s' if ch.gpus > 1 else ''}, {ch.samples_per_s:,.1f} samples/s"
            + (f", {format_hours(t)} to train" if t is not None else "")
            + f"; the recipe's batch at every count, where the plan grows it to {ctx.pick.choice.global_batch:,}")
