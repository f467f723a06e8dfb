"""The one policy that picks a GPU count from the planner's candidates (docs/design.md "Decision policy").

Given the best plan per GPU count (``Planner.best``; counts are the divisors of the node size, then
whole nodes, so never 3, 5 or 7 of 8 unless the node has that many), sorted by count:

- **deadline**: the fewest GPUs whose time-to-train fits inside the deadline less the margin
  (``--margin``, default 15%); when no count at hand does, the fastest at hand, and the report says
  how many GPUs of this kind would (``needed``). The time tested is at
  ``throughput.conservative_samples_per_s``: without gains measured only on another GPU kind
  (torch.compile's, fit on the H200: ``advisor.estimate._mark_transferred_compile``), so a deadline is
  never promised on a speed-up nobody measured on this GPU kind (``deadline_hours``);
- **no deadline**: the most GPUs whose plan keeps at least ``search.min_scaling_efficiency`` (80%)
  of linear scaling against the best plan on the smallest count that fits (the baseline: one GPU
  when it fits, else the smallest count that holds the model sharded).

Scaling efficiency of a row = (samples/s per GPU of its best plan) / (samples/s per GPU of the
baseline's best plan), and never more than the row's own scaling (``own_scaling``: what communication
and stragglers leave of its step), so never above 100%
unless ``advise bench`` measured the row (DESIGN.md; issue 40: the table said 131% where a rule said
100%). A count that fits a faster configuration than the baseline shows it in its speedup and in what
the table says changed, not as efficiency over 100%. The same number in the table, the policy line, the
tree's answers and the rules (``efficiencies``). Pure functions of the rows:
``tests/test_policy_regret.py`` re-derives every pick from the candidate list.
"""

from __future__ import annotations

from dataclasses import dataclass

from advisor.estimate import Estimate
from advisor.units import format_efficiency, format_hours
from rules.planner import Choice, Infeasible

# What the deadline test counts on (PolicySummary.deadline_rate, the report's policy line).
DEADLINE_RATE = ("throughput.conservative_samples_per_s: samples/s without gains measured only on another GPU kind "
                 "(torch.compile's speed-up is fit on the H200)")


@dataclass
class Pick:
    """The policy's answer: the row chosen, the rule that chose it (one line), and its numbers."""

    choice: Choice
    rule: str
    kind: str  # "deadline", "deadline-missed", "efficiency"
    baseline_gpus: int
    efficiency: dict[int, float]
    effective_deadline_h: float | None = None


def _h(hours: float | None) -> str:
    """Hours as the policy line states them: two decimals under a day, so 3.67 h never reads as 3.7 h
    next to a limit of 3.66 h."""
    if hours is None or hours >= 24:
        return format_hours(hours)
    return f"{hours:.2f} h"


def own_scaling(t) -> float:
    """What communication and stragglers leave of a plan's step (``ThroughputEstimate`` ``t``): the share of
    the step not spent on exposed collectives or waiting for the slowest rank, and at most the estimate's
    own ``scaling_efficiency`` (the same plan against one GPU, capped at 100%). Below 100% wherever the
    estimate exposes any communication, so an estimate never reads a bare 100% at N GPUs (DESIGN.md)."""
    if not t.step_s:
        return t.scaling_efficiency
    return min(t.scaling_efficiency, 1.0 - (t.exposed_comm_s + t.sync_s) / t.step_s)


def row_efficiency(c: Choice, base: Choice) -> float:
    """The scaling efficiency of row ``c`` against the baseline row ``base`` (the module's docstring)."""
    ratio = (c.samples_per_s / c.gpus) / (base.samples_per_s / base.gpus)
    t = c.estimate.throughput
    if c.gpus == base.gpus or t.calibrated:
        return ratio  # the baseline itself, or a measured row
    return min(ratio, own_scaling(t))


def efficiencies(rows: list[Choice]) -> tuple[int, dict[int, float]]:
    """(baseline count, {count: scaling efficiency}) against the smallest count that fits."""
    base = min(rows, key=lambda c: c.gpus)
    return base.gpus, {c.gpus: row_efficiency(c, base) for c in rows}


def effective_deadline(deadline_h: float, margin: float) -> float:
    return deadline_h * (1.0 - margin)


def deadline_hours(est: Estimate) -> float | None:
    """Time-to-train a deadline is tested on: at ``throughput.conservative_samples_per_s`` (the rate without gains
    measured only on another GPU kind), not at samples/s; the same as ``time_to_train_h`` where no gain is transferred."""
    t, thr = est.time_to_train_h, est.throughput
    if t is None or not thr.conservative_samples_per_s or thr.conservative_samples_per_s >= thr.samples_per_s:
        return t
    return t * thr.samples_per_s / thr.conservative_samples_per_s


def _counted(c: Choice) -> str:
    """A row's time as the deadline test counts it, and its time with the transferred gains when they differ."""
    t = deadline_hours(c.estimate)
    return _h(t) + (f"; {_h(c.time_h)} with them" if t != c.time_h else "")


def pick(rows: list[Choice | Infeasible], *, deadline_h: float | None, margin: float, min_efficiency: float,
         per_node: int) -> Pick | None:
    """The count the policy takes among ``rows`` (one best plan per count); None when none fits."""
    fitting = sorted((r for r in rows if isinstance(r, Choice)), key=lambda c: c.gpus)
    if not fitting:
        return None
    base, eff = efficiencies(fitting)
    if deadline_h is not None:
        limit = effective_deadline(deadline_h, margin)
        meets = [c for c in fitting if (t := deadline_hours(c.estimate)) is not None and t <= limit]
        transferred = any(deadline_hours(c.estimate) != c.time_h for c in fitting)
        basis = " without gains measured only on another GPU kind" if transferred else ""
        if meets:
            fewest = meets[0].gpus
            # Prefer a count that divides the node (or whole nodes) among equally few: all counts
            # compared already are, so the fewest is the pick.
            ch = min((c for c in meets if c.gpus == fewest), key=lambda c: deadline_hours(c.estimate))
            return Pick(ch, f"deadline {_h(deadline_h)} less the {margin:.0%} margin = {_h(limit)}: "
                        f"the fewest GPUs that finish inside it{basis} ({ch.gpus}, {_counted(ch)})",
                        "deadline", base, eff, limit)
        ch = max(fitting, key=lambda c: c.samples_per_s)
        return Pick(ch, f"no count at hand finishes inside the deadline less the {margin:.0%} margin "
                    f"({_h(limit)}){basis}: the fastest is taken ({ch.gpus} GPUs, {_counted(ch)})",
                    "deadline-missed", base, eff, limit)
    good = [c for c in fitting if eff[c.gpus] >= min_efficiency]
    ch = max(good, key=lambda c: c.gpus)  # the baseline itself is at 100%: never empty
    others = [c.gpus for c in fitting if c.gpus > ch.gpus]
    tail = (f"; {others[0]} GPUs would keep {format_efficiency(eff[others[0]])}" if others else "")
    where = "one GPU" if base == 1 else f"{base} GPUs, the fewest that hold it"
    return Pick(ch, f"no deadline: the most GPUs that keep >= {min_efficiency:.0%} of linear scaling against the best "
                f"plan on {where} ({ch.gpus} GPUs at {format_efficiency(eff[ch.gpus]) if ch.gpus != base else '100%'}){tail}",
                "efficiency", base, eff)
