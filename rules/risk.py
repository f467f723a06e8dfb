"""Numerical risk: how far a way of training's arithmetic departs from the standard setup's, and the rule
node H ranks by within a tier (DESIGN.md node H, issue 38): less risk wins unless it is more than
``RISK_SLACK`` slower than the tier's fastest, or the deadline less the margin needs the faster one.

The classes are data (id, rank, summary, why, source; `advise rules fit.compromise` lists them); each of
node H's levels names its class (``rules.compromise.Level.numerical_risk``), and a configuration's class is
its riskiest compromise's (``rules.compromise.risk_of``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rules.policy import _h, deadline_hours, effective_deadline

# Within a tier a lower numerical risk is taken unless it is more than this much slower than the tier's
# fastest (DESIGN.md node H: "unless it is more than ~10% slower"): a run 10% longer costs less than a
# run whose updates round away and must be repeated.
RISK_SLACK = 0.10


@dataclass(frozen=True)
class RiskClass:
    """How far a way of training's arithmetic departs from the standard setup's (fp32 master weights,
    fp32 AdamW states, clipping by the global gradient norm); ``rank`` orders them, 0 = none."""

    id: str
    rank: int
    summary: str
    why: str
    source: str


RISK_CLASSES: tuple[RiskClass, ...] = (
    RiskClass("none", 0, "the standard arithmetic: fp32 master weights and states, global-norm clipping",
              "Every update lands on fp32 weights; offload, a smaller batch or adapters change where or what is "
              "trained, not how an update is rounded.", "Micikevicius et al. 2018 (Mixed Precision Training)"),
    RiskClass("quantized-states", 1, "fp32 master weights; AdamW's moments (or a frozen base) block-quantized",
              "The update still lands on fp32 weights; only the moments are stored in 8 bits, block-wise with "
              "dynamic quantization, which Dettmers et al. report at parity with 32-bit Adam on their benchmarks "
              "(QLoRA's NF4 base: 16-bit LoRA quality).",
              "Dettmers et al. 2022 (8-bit Optimizers via Block-wise Quantization), Table 1; Dettmers et al. 2023 (QLoRA)"),
    RiskClass("compensated-bf16", 2, "bf16 weights, the update Kahan-compensated",
              "The weights are bf16, but a compensation buffer carries what rounding dropped into the next "
              "step; Zamirai et al. find bf16 with Kahan summation close to fp32, not identical.",
              "Zamirai et al. 2020 (Revisiting BFloat16 Training)"),
    RiskClass("no-global-clip", 3, "no clipping by the global gradient norm (the step in backward)",
              "Each parameter steps as its gradient is ready, before the global norm is known: a loss spike "
              "reaches the weights unclipped.", "PyTorch tutorial: optimizer step in backward"),
    RiskClass("uncompensated-bf16", 4, "bf16 weights stepped without compensation",
              "An update below 1/256 of a weight rounds away in bf16 (8 mantissa bits): at fine-tuning learning "
              "rates most updates do, and the run stalls or drifts.",
              "Zamirai et al. 2020 (Revisiting BFloat16 Training); Micikevicius et al. 2018"),
)
RISK = {c.id: c for c in RISK_CLASSES}


def _sps(t) -> float:
    return t.result.estimate.throughput.samples_per_s


def _risk(t) -> RiskClass:
    return t.risk


def least_risk(rows: list, p) -> tuple:
    """Within one tier (``rows``: rules.compromise.Tried that fit, fastest first; ``p``: the planner): the least
    numerical risk unless it is more than RISK_SLACK slower than the fastest, or the deadline less the margin
    needs a faster one. Returns (the row, the rule that applied with its numbers)."""
    fastest, top = rows[0], _sps(rows[0])
    order = lambda t: (_risk(t).rank, -_sps(t))  # noqa: E731 - the rule's order: risk, then speed
    near = [t for t in rows if _sps(t) >= (1 - RISK_SLACK) * top]
    pick = min(near, key=order)
    slower = lambda t: f"{1 - _sps(t) / top:.1%} slower than {fastest.name}"  # noqa: E731
    said = lambda t: f"{t.name} ({_risk(t).id})"  # noqa: E731
    req = p.req
    if req.deadline_h is not None:
        limit = effective_deadline(req.deadline_h, req.margin)
        meets = lambda t: (h := deadline_hours(t.result.estimate)) is not None and h <= limit  # noqa: E731
        if not meets(pick) and any(meets(t) for t in rows):
            faster = min((t for t in rows if meets(t)), key=order)
            return faster, (f"the deadline needs the faster one: {said(pick)} takes "
                            f"{_h(deadline_hours(pick.result.estimate))}, over the deadline less the {req.margin:.0%} "
                            f"margin ({_h(limit)}); {said(faster)} finishes in {_h(deadline_hours(faster.result.estimate))}")
    safest = min(rows, key=order)
    if _risk(safest).rank < _risk(pick).rank:
        return pick, (f"speed before risk: {said(safest)} is {slower(safest)}, more than {RISK_SLACK:.0%}; "
                      f"{said(pick)} is the least risk within {RISK_SLACK:.0%}")
    if pick is not fastest:
        return pick, (f"less numerical risk before speed: {said(pick)} is {slower(pick)} ({_risk(fastest).id}), "
                      f"within {RISK_SLACK:.0%}")
    if len(rows) == 1:
        return pick, f"{said(pick)}: the only one of its tier that fits"
    return pick, f"{said(pick)}: the fastest of its tier and the least numerical risk within {RISK_SLACK:.0%}"
