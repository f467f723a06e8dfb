"""Node H's memory compromises: when no standard configuration fits the GPUs at hand, the
configuration that fits, ranked by how much of the user's training it keeps (DESIGN.md node H).

Three tiers:
- exact: the same arithmetic and global batch (FSDP CPU offload; checkpointing is already part of the
  standard search, more GPUs are the scale-out alternative);
- close arithmetic: pure-bf16 with the Kahan-compensated update, 8-bit AdamW and paged 8-bit AdamW
  (bitsandbytes; one GPU or DDP, never FSDP), the optimizer step in backward, no accumulation when
  it changes the global batch by 2x at most;
- a different training: LoRA, QLoRA (4-bit NF4 base), and last any change of the global batch by
  more than 2x (no accumulation down to a batch of 1 is never a low-risk answer).

The policy (docs/design.md "Memory compromises at launch"): the fastest exact compromise that fits,
unless it is more than ``EXACT_SLOWDOWN_LIMIT`` times slower than the fastest fitting compromise of
the best lossy tier; then that tier. Within a tier, less numerical risk wins (``rules.risk.RISK_CLASSES``: fp32
master weights with 8-bit states, then compensated pure-bf16, then uncompensated) unless it is more
than ``RISK_SLACK`` slower than the tier's fastest or the deadline (less the margin) needs the faster
one (DESIGN.md node H). Every level is evaluated with checkpointing off/on and the micro-batch the
search picks; each combination with lower levels (``with_lower``: 8-bit AdamW alone, with fp32
master weights, and with pure-bf16) is a variant of its own, ranked and listed. ``Outcome.rule``
says which part of the tier policy applied, ``Outcome.risk_rule`` which part of the risk rule; the
others are listed as alternatives with their numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from advisor import setup as names
from advisor.setup.base import Setup
from advisor.setup.checkpointing import checkpointing_pinned
from advisor.setup.constraints import SHARDING_ROWS, Combo, refusal
from advisor.config import Strategy
from advisor.estimate import Estimate
from rules.host_ram import host_short, host_text
from rules.planner import Choice, Infeasible, Planner
from rules.risk import RISK, RISK_SLACK, RiskClass, least_risk

GIB = float(2**30)
# An exact compromise is preferred to a lossy one unless it is more than this many times slower
# (issue 27's policy: keep the user's arithmetic when it costs at most 2x in speed).
EXACT_SLOWDOWN_LIMIT = 2.0
# A change of the global batch by more than this factor is a different training (ranked last).
BATCH_CHANGE_LIMIT = 2.0
TIERS = ("exact", "close", "different", "batch")  # "batch": the global batch changed > 2x (last)


@dataclass(frozen=True)
class Level:
    name: str  # recommendation.compromise
    update: dict
    gives_up: str
    risk: str
    source: str
    accum1: bool = False  # grad_accum must be 1
    single_only: bool = False  # one process only
    with_lower: tuple[str, ...] = ()  # lower-risk levels it may be combined with (same risk level then)
    tier: str = "close"  # exact | close | different (TIERS)
    numerical_risk: str = "none"  # rules.risk.RISK_CLASSES id (a lower partner may raise it: Setup.risk_class)
    setup: Setup | None = None  # the way of training it is (None: no accumulation, not a setting)
    rank: int = 0  # its place on the ladder (Setup.ladder_rank)

    @property
    def host_offload(self) -> bool:
        """It keeps the training state in host RAM: the node's RAM is checked, FSDP runs it."""
        return self.setup is not None and self.setup.host_offload

    @classmethod
    def of(cls, s: Setup) -> Level:
        """A compromise's level, from its declaration (advisor.setup: its ladder_* attributes)."""
        lower = tuple(x.name for x in names.COMPROMISES if x.lower_partner) if s.takes_partners else ()
        return cls(s.name, s.ladder_setting(), s.gives_up, s.risk, s.source, accum1=s.accum1, single_only=s.single_only,
                   with_lower=lower, tier=s.tier, numerical_risk=s.numerical_risk, setup=s, rank=s.ladder_rank)


# No accumulation is not a setting (the plan holds grad_accum at 1): its level is the ladder's own.
_NO_ACCUMULATION = Level(
    names.NO_ACCUMULATION, {}, "gradient accumulation: the global batch shrinks to what fits in one micro-batch "
    "per GPU, and the learning rate follows it",
    "the same arithmetic on a smaller batch: close when the batch changes by 2x at most, else a different "
    "training (another batch, learning rate and number of steps)",
    "Goyal et al. 2017 (linear scaling rule); Malladi et al. 2022 (sqrt rule for Adam)", accum1=True, rank=20)
LEVELS: tuple[Level, ...] = tuple(sorted([_NO_ACCUMULATION, *(Level.of(s) for s in names.COMPROMISES)],
                                         key=lambda lv: lv.rank))


@dataclass
class Tried:
    level: Level
    result: Choice | Infeasible | None  # None: not applicable here
    why_not: str = ""
    label: str = ""  # the variant: the level's name with the lower levels it combines ("pure-bf16+adamw-8bit")

    @property
    def name(self) -> str:
        return self.label or self.level.name

    @property
    def risk(self) -> RiskClass:
        """The numerical-risk class of the configuration it fits with (rules.risk)."""
        return risk_of(self.result.config)


@dataclass
class Outcome:
    chosen: Tried | None
    tried: list[Tried] = field(default_factory=list)
    rule: str = ""  # which part of the policy chose it (exact vs lossy, tiers)
    risk_rule: str = ""  # which part of the risk rule chose it within its tier


def risk_of(config) -> RiskClass:
    """The numerical-risk class of ``config``: its riskiest compromise's, each in this configuration
    (``Setup.risk_class``: a bf16 model stepped without compensation is riskier than its level says)."""
    classes = [RISK[lv.setup.risk_class(config)] for lv in LEVELS if lv.setup is not None and lv.setup.on(config)]
    return max(classes, key=lambda c: c.rank, default=RISK["none"])


def ranked() -> list[Level]:
    """The ladder, exact first."""
    return list(LEVELS)


def _update(p: Planner, level: Level) -> dict:
    """The level's config update for this request (QLoRA quantizes the base of the rank the user pinned, if any)."""
    return level.setup.ladder_setting(p.req) if level.setup is not None else dict(level.update)


def batch_change(ch: Choice, p: Planner) -> float:
    """By how much ``ch`` changes the global batch the user (or the recipe) asked for (1: kept)."""
    target = p.target_batch
    return max(ch.global_batch / target, target / ch.global_batch)


def tier(t: Tried, p: Planner) -> str:
    """The tier a fitting result ranks in: any level that changes the global batch (no accumulation,
    the optimizer step in backward: both run with accumulation 1) by more than 2x is "batch" (last);
    by 2x at most, close arithmetic at best. The others keep the batch the standard search uses."""
    ch = t.result
    change = batch_change(ch, p) if isinstance(ch, Choice) else 1.0
    if change > BATCH_CHANGE_LIMIT:
        return "batch"
    if change > 1 and t.level.tier == "exact":
        return "close"
    if t.level.tier == "exact" and isinstance(ch, Choice) and ch.config is not None and \
            set(names.in_config(ch.config)) - set(names.in_config(p.base)) - {t.level.name}:
        return "close"  # offload combined with pure-bf16 (not the user's pin): the arithmetic changes
    return t.level.tier


def _blocked(p: Planner, level: Level, n: int) -> str:
    """Why a level cannot be offered here ('' when it can)."""
    req, base = p.req, p.base
    u = level.update
    if level.setup is not None:  # its own reasons first (pins, the GPU, the model)
        own = level.setup.ladder_blocked(req, base, p.model, p.hw.gpu, lambda rows: _refused(p, level, n, rows))
        if own is not None:
            return own
    for field, value in u.items():  # --no-... given: the user pinned it off
        if value is True and getattr(req, field) is False:
            return f"--no-{field.replace('_', '-')} is pinned"
    if level.accum1 and req.grad_accum is not None and req.grad_accum > 1:
        return "--grad-accum is pinned"
    row = _refused(p, level, n, ("in-backward.one-process", "8bit.not-fsdp", "offload.fsdp-only"))
    if row is not None:  # the table refuses; the ladder says it in a word
        if row.id == "offload.fsdp-only":
            return f"CPU offload runs under FSDP; --strategy {req.strategy.value} is pinned"
        if not level.host_offload:
            return "needs one process without FSDP (strategy single)"
        return ("the optimizer step in backward needs strategy single; CPU offload is FSDP's" if row.id.startswith("in-")
                else "bitsandbytes' 8-bit AdamW steps on the GPU; CPU offload steps on the CPU")
    if any(getattr(base, k) == v for k, v in u.items()) or (level.accum1 and names.no_accumulation(base) is not None):
        return "already part of the configuration"
    return ""


def _refused(p: Planner, level: Level, n: int, rows: tuple[str, ...], strategy: Strategy | None = None):
    """The row of advisor.setup.constraints that refuses ``level`` on ``n`` GPUs (the pinned strategy, or
    ``strategy``), or None."""
    c = Combo.of_config(p.base.model_copy(update=_update(p, level)), ranks=n)
    return refusal(c.but(strategy=strategy or p.req.strategy, grad_accum=None), only=rows)


def _strategies(p: Planner, level: Level, n: int) -> list[Strategy]:
    if level.host_offload or names.offloads(p.base):
        out = [Strategy.fsdp]
    else:
        out = [Strategy.single] if n == 1 else [Strategy.ddp, Strategy.fsdp]
    out = [s for s in out if _refused(p, level, n, SHARDING_ROWS, strategy=s) is None]  # 8-bit, 4-bit: not FSDP
    pin = p.req.strategy
    return [s for s in out if pin is None or s is pin]


def variants(p: Planner, level: Level, n: int) -> list[Tried]:
    """The level on ``n`` GPUs: one Tried per variant, alone and combined with each lower level of
    ``with_lower`` that applies here (8-bit AdamW with fp32 master weights, and with pure-bf16): each is
    ranked by its own numerical risk (``risk_of``) and listed, so the fp32-master variant is never hidden
    behind a faster but riskier combination. Blocked: one Tried saying why."""
    why = _blocked(p, level, n)
    if why:
        return [Tried(level, None, why)]
    updates = [([], _update(p, level))]
    for name in level.with_lower:
        partner = next(lv for lv in LEVELS if lv.name == name)
        if not _blocked(p, partner, n):
            updates.append(([partner.name], {**partner.update, **level.update}))
    return [try_level(p, level, n, update, "+".join(partners + [level.name]) if partners else "")
            for partners, update in updates]


def try_level(p: Planner, level: Level, n: int, update: dict | None = None, label: str = "") -> Tried:
    """The fastest fitting configuration of one variant of ``level`` (``update``: the level's own by
    default): checkpointing off/on, DDP before FSDP, the micro-batch the search picks."""
    if update is None:
        why = _blocked(p, level, n)
        if why:
            return Tried(level, None, why)
        update = _update(p, level)
    ckpts = [bool(p.req.grad_ckpt)] if checkpointing_pinned(p.req) else [False, True]
    fitting: list[Choice] = []
    closest: Infeasible | None = None
    for strategy in _strategies(p, level, n):
        base = p.base.model_copy(update=update)
        for ck in ckpts:
            if level.accum1:
                r = p.search_accum1(n, strategy, base, ck)
            else:
                r = p.search(n, strategy, base=base, ckpt=ck)  # a pinned --grad-accum holds
            if isinstance(r, Choice):
                fitting.append(r)
            elif closest is None or (r.closest is not None and closest.closest is not None
                                     and r.closest.memory.device_gib < closest.closest.memory.device_gib):
                closest = r
        if fitting:  # DDP before FSDP: the first strategy that fits (node I's rule)
            break
    ram = p.host_ram_gib
    if fitting and ram and level.host_offload:
        # host RAM must hold what every rank of a node offloads (HOST_RAM_FRACTION of it: the rest of the machine)
        over = [c for c in fitting if host_short(c.estimate, p)]
        if len(over) == len(fitting):
            why = host_short(over[0].estimate, p)
            return Tried(level, Infeasible(n, over[0].strategy, "memory", why, over[0].estimate), why, label)
        fitting = [c for c in fitting if c not in over]
    if fitting:
        return Tried(level, max(fitting, key=lambda c: c.estimate.throughput.samples_per_s), label=label)
    return Tried(level, closest, closest.reason if closest else "does not fit", label)


def _sps(t: Tried) -> float:
    return t.result.estimate.throughput.samples_per_s


def find(p: Planner, n: int) -> Outcome:
    """Every level on ``n`` GPUs, chosen by the policy: the fastest exact compromise unless it is more
    than EXACT_SLOWDOWN_LIMIT x slower than the fastest of the best lossy tier that fits; within the
    chosen tier, the least numerical risk unless more than RISK_SLACK slower (``least_risk``)."""
    tried = [t for lv in ranked() for t in variants(p, lv, n)]
    fitting = [t for t in tried if isinstance(t.result, Choice)]
    by_tier = {name: sorted((t for t in fitting if tier(t, p) == name), key=lambda t: -_sps(t)) for name in TIERS}
    exact = by_tier["exact"][0] if by_tier["exact"] else None
    lossy_tier = next((name for name in TIERS[1:] if by_tier[name]), None)
    lossy = by_tier[lossy_tier][0] if lossy_tier else None
    if exact is None and lossy is None:
        return Outcome(None, tried, "nothing fits")
    if exact is not None and lossy is not None:
        slow = _sps(lossy) / _sps(exact)
        fast = name_of(lossy.level, lossy.result, p)
        if slow <= EXACT_SLOWDOWN_LIMIT:
            chosen, rule = exact, (f"exact before lossy: {exact.level.name} keeps the arithmetic and is "
                                   f"{slow:.2f}x slower than {fast}, within {EXACT_SLOWDOWN_LIMIT:g}x")
        else:
            chosen, rule = lossy, (f"{exact.level.name} (exact) is {slow:.2f}x slower than {fast}, more than "
                                   f"{EXACT_SLOWDOWN_LIMIT:g}x: the {_TIER_TEXT[lossy_tier]} with the least risk instead")
    elif exact is not None:
        chosen, rule = exact, f"exact: {exact.level.name} keeps the arithmetic; no lossy compromise fits"
    else:
        chosen, rule = lossy, f"no exact compromise fits: the {_TIER_TEXT[lossy_tier]} with the least risk"
    pick, risk_rule = least_risk(by_tier[tier(chosen, p)], p)
    return Outcome(pick, tried, rule, risk_rule)


_TIER_TEXT = {"close": "close-arithmetic compromise", "different": "different training (adapters)",
              "batch": "compromise, which changes the global batch by more than 2x (a different training)"}


def standard_cause(e: Estimate | None) -> str:
    """Why the standard configuration does not fit, from its peak moment's parts."""
    if e is None:
        return "no micro-batch fits"
    m = e.memory
    parts = {x.key: x.gib for x in m.peak_parts}  # by JSON key (advisor.memory.PART_KEYS)
    total = f"~{m.device_gib:.1f} GiB per GPU ({m.peak_gib:.1f} GiB allocated at the {m.peak_at})"
    if m.peak_at == "backward" and e.config.grad_accum > 1 and parts.get("gradients_gib") and parts.get("autocast_copies_gib"):
        return (f"{total}: the fp32 gradients ({parts['gradients_gib']:.1f} GiB) accumulated over {e.config.grad_accum} "
                f"micro-batches are alive while the next micro-batch's autocast copies "
                f"({parts['autocast_copies_gib']:.1f} GiB) fill")
    if m.peak_at == "optimizer-step":
        return (f"{total}: weights {parts.get('weights_gib', 0):.1f} + gradients {parts.get('gradients_gib', 0):.1f} + "
                f"optimizer {parts.get('optimizer_gib', 0):.1f} GiB alone, before any activation")
    top = sorted(m.peak_parts, key=lambda x: -x.gib)[:3]
    return f"{total}: " + ", ".join(f"{x.name} {x.gib:.1f} GiB" for x in top)


def _partners(level: Level, ch: Choice, p: Planner) -> list[Level]:
    """The lower-risk levels the chosen variant of ``level`` combines with (not pinned by the user)."""
    out = []
    for name in level.with_lower:
        lv = next(x for x in LEVELS if x.name == name)
        if all(getattr(ch.config, k) == v for k, v in lv.update.items()) and not _blocked(p, lv, ch.gpus):
            out.append(lv)
    return out


def risk_text(level: Level, ch: Choice, p: Planner) -> str:
    """The variant's accuracy risk: its members' (the lower levels it combines first) and its class."""
    cls = risk_of(ch.config)
    texts = [f"high: {RISK[cls.id].summary}" if lv.setup is not None and lv.setup.risk_class(ch.config) == cls.id
             != lv.numerical_risk else lv.risk for lv in _partners(level, ch, p) + [level]]
    return "; ".join(texts) + f" (numerical risk: {cls.id})"


def name_of(level: Level, ch: Choice, p: Planner) -> str:
    """``recommendation.compromise``: the level's name, with the lower levels it combines ("pure-bf16+adamw-8bit")."""
    return "+".join([lv.name for lv in _partners(level, ch, p)] + [level.name])


def level_gives_up(level: Level, config) -> str:
    """The level's ``gives_up``, for the update ``config`` runs (``Setup.gives_up_in``)."""
    return level.setup.gives_up_in(config) if level.setup is not None else level.gives_up


def gives_up(level: Level, ch: Choice, p: Planner) -> str:
    """What this compromise gives up, with its numbers."""
    partners = _partners(level, ch, p)
    if partners:
        return "; and ".join(level_gives_up(lv, ch.config) for lv in partners) + "; and " + _gives_up_one(level, ch, p)
    return _gives_up_one(level, ch, p)


def _batch_text(ch: Choice, p: Planner) -> str:
    return (f"global batch {ch.global_batch} instead of {p.target_batch}"
            + (" (a different training: the batch changes by more than 2x)" if batch_change(ch, p) > BATCH_CHANGE_LIMIT else "")
            + f"; learning rate {ch.lr.lr:.3g} ({ch.lr.text})")


def _gives_up_one(level: Level, ch: Choice, p: Planner) -> str:
    if level.name == names.NO_ACCUMULATION:
        return "gradient accumulation: " + _batch_text(ch, p)
    if level.accum1 and ch.global_batch != p.target_batch:  # the optimizer step in backward: accumulation 1
        return level_gives_up(level, ch.config) + "; and the " + _batch_text(ch, p)
    if level.host_offload:
        checked = (f"; the node has {p.host_ram_gib:.0f} GiB ({p.host_ram_source})" if p.host_ram_gib else
                   "; not checked against the node's RAM: give --host-ram")
        return level.gives_up + f"; {host_text(ch.estimate)}{checked}"
    return level_gives_up(level, ch.config)



def answer_memory(ctx):
    """Node H when no standard configuration fits: the ladder on the GPUs at hand (one, or too few)."""
    from rules.nodes import _mem_text, _time_text, describe
    from rules.tree import Answer

    p = ctx.planner
    n = 1 if p.available < 2 or p.req.strategy is Strategy.single else p.available
    out = ctx.compromise = find(p, n)
    if not ctx.verdict:
        ctx.verdict = "the standard setup does not fit"
    ladder = "; ".join(f"{t.name}: " + ("fits" if isinstance(t.result, Choice) else
                                               f"no ({t.why_not or (t.result.reason if t.result else 'n/a')})")
                       for t in out.tried)
    if out.chosen is None:
        ctx.choice = ctx.one
        need = f"at least {ctx.min_fit.gpus}x {p.hw.gpu.name} with FSDP" if ctx.min_fit else "more GPUs or a smaller model"
        return Answer("nothing-fits", f"{ctx.verdict}; no compromise fits either: it needs {need}",
                      f"Ranked by risk: {ladder}.")
    ch = out.chosen.result
    ctx.choice, ctx.tree_strategy = ch, ch.strategy.value
    lv = out.chosen.level
    ctx.compromise_name, ctx.gives_up = name_of(lv, ch, p), gives_up(lv, ch, p)
    return Answer("compromise", f"{ctx.verdict}. Compromise: {ctx.compromise_name} on {ch.gpus}x {p.hw.gpu.name}, giving up "
                  f"{gives_up(lv, ch, p)}; {describe(ch)}; {_mem_text(ch.estimate)}; {_time_text(ch.estimate)}",
                  f"Policy: {out.rule}; within the tier, {out.risk_rule}. Exact compromises before lossy ones unless "
                  f"more than {EXACT_SLOWDOWN_LIMIT:g}x slower; a global batch changed by more than "
                  f"{BATCH_CHANGE_LIMIT:g}x last; within a tier, less numerical risk unless more than "
                  f"{RISK_SLACK:.0%} slower or the deadline needs the faster one (tried: {ladder}). "
                  f"Risk: {risk_of(ch.config).id}: {lv.risk}.",
                  {"compromise": ctx.compromise_name, "gpus": ch.gpus, "rule": out.rule, "risk_rule": out.risk_rule})


def pinned(cfg, req) -> list[Level]:
    """The compromises the user pinned (--precision pure-bf16, --optimizer adamw-8bit, --lora-rank,
    --optimizer-in-backward, --cpu-offload) that the configuration has, in ladder order."""
    return [lv for lv in LEVELS if lv.update and names.has(cfg, lv.name)
            and all(getattr(req, k) is not None for k in lv.update)]
