"""Node H's tiers, read from what a configuration changes of the user's training (not from the
compromise's name): the tests' own re-derivation of docs/design.md "Decision policy", shared by
tests/test_policy_regret.py and tests/test_practitioner_panel.py, independent of rules.compromise."""

from __future__ import annotations

EXACT_LIMIT = 2.0  # issue 27: exact compromises first unless more than 2x slower than the best lossy tier
RISK_SLACK = 0.10  # issue 38: within a tier, less numerical risk unless more than ~10% slower
TIER_ORDER = ("standard", "exact", "close", "different", "batch")
LOSSY = ("close", "different", "batch")


def tier(cfg, global_batch: int, target: int) -> str:
    """standard: the user's setup; exact: CPU offload (same arithmetic); close: pure-bf16, 8-bit
    optimizers, the optimizer step in backward, a global batch changed by 2x at most; different:
    LoRA/QLoRA; batch: a global batch changed by more than 2x."""
    change = max(global_batch / target, target / global_batch)
    out = ["standard"]
    if cfg.cpu_offload:
        out.append("exact")
    if (cfg.precision.value == "pure-bf16" or cfg.optimizer.value in ("adamw-8bit", "paged-adamw-8bit")
            or cfg.optimizer_in_backward or change > 1):
        out.append("close")
    if cfg.lora_rank or cfg.quantize_base:
        out.append("different")
    if change > EXACT_LIMIT:
        out.append("batch")
    return max(out, key=TIER_ORDER.index)


def fastest_by_tier(rows, target: int) -> dict[str, float]:
    """samples/s of the fastest fitting row of each tier (rows: rules.planner.Candidate)."""
    best: dict[str, float] = {}
    for c in rows:
        t = tier(c.config, c.global_batch, target)
        best[t] = max(best.get(t, 0.0), c.samples_per_s)
    return best


def expected_tiers(best: dict[str, float], near: float) -> tuple[set[str], float | None]:
    """The tiers the compromise policy allows given the fastest row of each: the fastest exact
    compromise unless it is more than 2x slower than the best lossy tier that fits (on the 2x line,
    within ``near``, either). Returns (allowed tiers, lossy/exact speed ratio or None)."""
    exact = best.get("exact")
    lossy_tier = next((t for t in LOSSY if t in best), None)
    lossy = best.get(lossy_tier) if lossy_tier else None
    ratio = lossy / exact if exact and lossy else None
    if ratio is not None and abs(ratio - EXACT_LIMIT) <= EXACT_LIMIT * near:
        return {"exact", lossy_tier}, ratio
    if exact and (ratio is None or ratio <= EXACT_LIMIT):
        return {"exact"}, ratio
    return ({lossy_tier} if lossy_tier else set()), ratio


def risk_rank(cfg) -> int:
    """Numerical risk read from the configuration (DESIGN.md node H): 0 the standard arithmetic (offload,
    a smaller batch, LoRA); 1 fp32 master weights with 8-bit states or a 4-bit base; 2 Kahan-compensated
    pure-bf16; 3 the step in backward (no global-norm clipping); 4 pure-bf16 stepped without compensation."""
    eight_bit = cfg.optimizer.value in ("adamw-8bit", "paged-adamw-8bit")
    pure = cfg.precision.value == "pure-bf16"
    if pure and (eight_bit or cfg.pure_bf16_update.value == "plain"):
        return 4
    if cfg.optimizer_in_backward:
        return 3
    if pure:
        return 2
    return 1 if eight_bit or cfg.quantize_base else 0


def risk_allows(pick, rows, near: float, limit_h=None, hours=None) -> str:
    """'' when ``pick`` (a fitting Candidate) is what the risk rule allows among ``rows`` (its tier, fitting):
    no row clearly within RISK_SLACK of the tier's fastest has a lower risk (among those meeting the deadline
    ``limit_h`` when the pick meets it; ``hours``: a row's time as the deadline counts it), and the pick is
    within RISK_SLACK of the fastest unless the deadline needs it; else why not."""
    top = max(c.samples_per_s for c in rows)
    meets = (lambda c: hours(c) is not None and hours(c) <= limit_h) if limit_h is not None else (lambda c: True)
    clearly = [c for c in rows if c.samples_per_s >= (1 - RISK_SLACK + near) * top]
    if limit_h is not None and any(meets(c) for c in rows):
        if not meets(pick):
            return "the pick misses the deadline while a row of its tier meets it"
        clearly = [c for c in clearly if meets(c)]
    elif pick.samples_per_s < (1 - RISK_SLACK - near) * top:
        return f"the pick is {1 - pick.samples_per_s / top:.0%} slower than its tier's fastest, beyond {RISK_SLACK:.0%}"
    safer = [c for c in clearly if risk_rank(c.config) < risk_rank(pick.config)]
    if safer:
        return f"a lower-risk row within {RISK_SLACK:.0%} ({safer[0].as_dict()}) was passed over"
    return ""
