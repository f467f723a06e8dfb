"""Node H's tiers, read from what a configuration changes of the user's training (not from the
compromise's name): the tests' own re-derivation of docs/design.md "Decision policy", shared by
tests/test_policy_regret.py and tests/test_practitioner_panel.py, independent of rules.compromise."""

from __future__ import annotations

EXACT_LIMIT = 2.0  # issue 27: exact compromises first unless more than 2x slower than the best lossy tier
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
