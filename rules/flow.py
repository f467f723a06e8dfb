"""The steps of one recommendation, in the order ``rules.api.recommend`` runs them.

  start          the family's defaults (base lr and batch) and the starting config (pins, else standard)
  setup_rules    rules/data/precision.toml: precision, optimizer, channels_last
  tree           the decision tree A–J (``rules.nodes`` over ``rules.planner``): GPUs, strategy,
                 micro-batch, accumulation, checkpointing; each choice carries its learning rate
  plan_rules     compile, dataloader workers, SyncBatchNorm, warmup
  final_estimate the estimate of the configuration the plan rules leave, then the final rules
  outputs        alternatives, warnings, the launch command, the 1..N GPU table, the ``Plan``

Each step reads what the ones before it left on the ``Run`` and adds its own part. Flags given
pin a choice (a rule that would change it does not fire); the rules fill in the rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from advisor.calibration import Calibration
from advisor.setup import FIELDS as COMPROMISE_FIELDS, NO_ACCUMULATION, no_accumulation, offloads, one_process
from advisor.setup.constraints import SHARDING_ROWS, Combo, check, refusal
from advisor.config import Optimizer, Precision, Strategy, TrainConfig
from advisor.errors import UserError
from advisor.hardware import HardwareSpec, Machine
from advisor.models import ModelSpec
from advisor.plan import ModelRef, Plan
from advisor.request import Request
from advisor.starting_config import starting_config
from rules import alternatives as alts
from rules.defaults import load_defaults
from rules.engine import Engine, RuleTrace, get_rule
from rules.facts import Facts
from rules.nodes import deadline_measures, walk
from rules.lr import batch_range as lr_batch_range, recipe as lr_recipe
from rules.planner import Choice, Infeasible, Planner
from rules.practice import base_facts, with_plan
from rules.recommend import (Alternative, FiredRule, PathStep, PolicySummary, Recommendation, RecommendationCore, RuleSummary,
                             ScalingRow, launch_command)
from rules.tree import Step, TreeContext


@dataclass
class Run:
    """One recommendation in the making: what each step reads and adds, in order."""

    req: Request
    planner: Planner
    engine: Engine
    lr_defaulted: bool
    defaults_source: str
    defaults_applied: list[str]
    traces: list[RuleTrace] = field(default_factory=list)
    facts: Facts | None = None  # after the setup rules
    ctx: TreeContext | None = None  # after the tree
    steps: list[Step] = field(default_factory=list)
    fits: bool = False  # the configuration recommended fits (the standard one, or node H's compromise)
    compromise: str | None = None  # node H's compromise (rules.compromise), None for the standard setup
    compromise_rule: str | None = None  # which part of node H's policy chose it
    risk_rule: str | None = None  # which part of node H's risk rule chose it within its tier
    gives_up: str | None = None
    tree_choice: Choice | None = None  # what the tree chose (or the closest attempt when nothing fits)
    path: str = ""
    plan_set: dict[str, Any] = field(default_factory=dict)  # what the plan rules set
    final: Choice | None = None  # tree_choice with the plan rules applied: the recommendation
    final_facts: Facts | None = None  # the facts the final rules saw
    batch: Any = None  # rules.batch_plan.BatchFacts: how the global batch was decided (outputs)


def check_request(req: Request, spec: ModelSpec, hardware: HardwareSpec) -> None:
    """Pins that cannot work together, refused before any search (advisor.setup.constraints' table).
    --strategy single runs on one of the GPUs at hand."""
    ranks = 1 if req.strategy is Strategy.single else hardware.total_gpus
    check(Combo.of_request(req, ranks=ranks, model=spec.name, transformer=spec.arch is not None,
                           linear_blocks=spec.linear_blocks,
                           compute_capability=hardware.gpu.compute_capability))


def check_pins(p: Planner) -> None:
    """Pinned --micro-batch/--grad-accum/--strategy that no GPU count at hand can run with the global
    batch (the user's --batch-size or the recipe's), refused before any search: one line, the fix."""
    req, target = p.req, p.target_batch
    pm, pa = req.micro_batch, req.grad_accum
    per = (pm or 1) * (pa or 1)
    source = "--batch-size" if req.batch_size else "the recipe's global batch"
    pins = " x ".join(f for f in (f"--micro-batch {pm}" if pm else "", f"--grad-accum {pa}" if pa else "") if f)
    if per > 1 and target % per:
        raise UserError(f"{pins} does not divide {source} {target}: micro-batch x accumulation x GPUs must equal it",
                        fix=f"pick values whose product divides {target}, give --batch-size, or drop "
                            f"{'--grad-accum' if pa else '--micro-batch'} and let cardwise derive it")
    counts = [n for n in p.counts() if p.strategies(n) and not (one_process(req) and n > 1)]
    if not any(target % (n * per) == 0 for n in counts):
        over = ", ".join(map(str, counts[:-1])) + (" or " if len(counts) > 1 else "") + str(counts[-1]) if counts else "any"
        with_pins = f" x {pins}" if pins else ""
        raise UserError(f"{source} {target} does not split evenly over {over} GPUs{with_pins}"
                        f"{' (the counts --strategy ' + req.strategy.value + ' runs at hand)' if req.strategy else ''}",
                        fix=f"give --batch-size a multiple of {counts[0] * per if counts else per}, or change --gpus")


def start(req: Request, spec: ModelSpec, hardware: HardwareSpec, cal: Calibration, host_ram_gib: float | None = None) -> Run:
    """The family's defaults (base lr and batch) and the starting config: the pins, else the standard."""
    defaults = load_defaults()
    seq_len = None if spec.is_vision else req.seq_len or (spec.default_seq_len if spec.is_text else None)
    rec = lr_recipe(req, spec, defaults, seq_len=seq_len, adapter=req.adapters,
                    optimizer=req.optimizer.value if req.optimizer else None)
    base_lr, base_batch, lr_defaulted = rec.base_lr, rec.base_batch, rec.defaulted
    applied = [f"task {rec.task_rule}"] + ([f"base lr {base_lr:g} at batch {base_batch} ({rec.source})"] if lr_defaulted else [])
    # The one Request -> TrainConfig step (advisor.starting_config); its notes are the setup rules' to
    # say (precision, optimizer), and the planner searches micro-batch, accumulation and strategy.
    cfg, _ = starting_config(req.model_copy(update={"strategy": Strategy.single}), spec, device="gpu",
                             gpu=hardware.gpu)
    planner = Planner(req, spec, hardware, cal, defaults, cfg, base_lr, base_batch)
    planner.host_ram_gib = host_ram_gib
    planner.start_recipe = rec
    if not (req.batch_size or req.keep_global_batch or req.adapters or no_accumulation(req)):
        planner.batch_span = lr_batch_range(defaults, spec, rec)
    check_pins(planner)
    return Run(req, planner, Engine(), lr_defaulted, f"{rec.task} recipe: {rec.source}", applied)


def setup_rules(run: Run) -> None:
    """Setup rules (rules/data/precision.toml) choose precision, optimizer and channels_last."""
    p = run.planner
    facts = base_facts(p, p.base, lr_defaulted=run.lr_defaulted, defaults_source=run.defaults_source)
    setup = run.engine.run("setup", facts, run.req.pinned())
    run.traces += setup
    chosen = _applied(setup)
    p.base = p.base.model_copy(update={k: _coerce(k, v) for k, v in chosen.items() if k in TrainConfig.model_fields})
    run.facts = base_facts(p, p.base, lr_defaulted=run.lr_defaulted, defaults_source=run.defaults_source)


def tree(run: Run) -> None:
    """The decision tree A–J: GPUs, strategy, micro-batch, accumulation, checkpointing, learning rate."""
    ctx = run.ctx = TreeContext(run.planner)
    run.steps = walk(ctx)
    if run.req.strategy is not None and run.req.strategy.keeps_gathered:
        _keep_fits_or_refuse(run.planner, run.req.strategy)
    choice = ctx.choice
    strategy = run.req.strategy
    # A pinned multi-GPU strategy uses the GPUs at hand, also when a one-GPU FSDP (CPU offload) fits.
    one_fsdp = isinstance(choice, Choice) and choice.gpus == 1 and run.planner.available > 1
    if strategy is not None and (not isinstance(choice, Choice) or choice.strategy is not strategy
                                 or (strategy is not Strategy.single and one_fsdp)):
        choice = _pinned_strategy(ctx, strategy)  # a pinned flag is never overridden
    row = refusal(Combo.of_config(choice.config, ranks=choice.gpus), only=SHARDING_ROWS) \
        if isinstance(choice, Choice) else None
    if row is not None:  # the pinned 8-bit optimizer or 4-bit base fits only under FSDP
        what = row.what(Combo.of_config(choice.config)).split(" with ")[0]
        raise UserError(f"{what} on {choice.gpus}x {run.planner.hw.gpu.name} needs FSDP (a full replica does not fit "
                        f"one GPU), and {row.why}",
                        fix=f"drop {what} (the rules pick a compromise that fits), or use GPUs that hold a replica")
    run.fits = isinstance(choice, Choice)
    out = ctx.compromise
    if out is not None and out.chosen is not None and choice is out.chosen.result:
        from rules.compromise import gives_up, name_of

        run.compromise = name_of(out.chosen.level, choice, run.planner)
        run.gives_up = gives_up(out.chosen.level, choice, run.planner)
        run.compromise_rule = out.rule
        run.risk_rule = out.risk_rule
    elif isinstance(choice, Choice):
        from rules.compromise import level_gives_up, pinned

        lvs = pinned(choice.config, run.req)
        if lvs:
            run.compromise = "+".join(lv.name for lv in lvs)
            run.gives_up = "; and ".join(level_gives_up(lv, choice.config) for lv in lvs) + " (pinned)"
            if offloads(choice.config) and choice.estimate.memory.host_node_gib:
                from rules.host_ram import host_text

                run.gives_up += f"; {host_text(choice.estimate)}"
    run.tree_choice = choice if run.fits else _closest_as_choice(ctx, choice)
    run.path = ">".join(s.node for s in run.steps)


def plan_rules(run: Run) -> None:
    """Plan rules (rules/data/practice.toml): compile, dataloader workers, SyncBatchNorm, warmup."""
    ch = run.tree_choice
    facts = with_plan(run.facts, run.ctx, ch, ch.estimate, ch.strategy, run.path)
    traces = run.engine.run("plan", facts, run.req.pinned())
    run.traces += traces
    run.plan_set = _applied(traces)


def final_estimate(run: Run) -> None:
    """The estimate of what the plan rules leave (compile only if it still fits), then the final rules."""
    p, ch = run.planner, run.tree_choice
    cfg = ch.config
    if run.plan_set.get("compile") and not cfg.compile:
        c2 = cfg.model_copy(update={"compile": True})
        if p.est(c2, ch.gpus).memory.fits or not run.fits:
            cfg = c2
    run.final = ch.with_config(cfg, p.est(cfg, ch.gpus, hypothetical=False))
    run.final_facts = with_plan(run.facts, run.ctx, run.final, run.final.estimate, ch.strategy, run.path)
    run.traces += run.engine.run("final", run.final_facts, run.req.pinned())


def outputs(run: Run, machine: Machine | None) -> Recommendation:
    """The launch command, alternatives, warnings, the 1..N GPU table and the Plan."""
    req, p, ctx, ch = run.req, run.planner, run.ctx, run.final
    hardware = p.hw

    def cmd(c: Choice, *, model: str | None = None, epochs: float | None = None, hypothetical: bool = False,
            no_accumulation: bool | None = None) -> str:
        r2 = req.model_copy(update={"epochs": epochs}) if epochs else req
        ref = ModelRef(name=model) if model else req.model
        hw = c.estimate.hardware
        return launch_command(r2.model_copy(update={"model": ref}), config=c.config, strategy=c.strategy.value,
                              gpu_arg=hardware.gpu.name if (hypothetical or req.gpu or hardware.assumed) else None,
                              gpus_per_node=hw.per_node, nodes=hw.nodes, global_batch=c.global_batch,
                              base_lr=c.lr.base_lr, base_batch=c.lr.base_batch,
                              reads_tokens=not p.model.is_vision, reads_images=not p.model.is_text,
                              no_accumulation=_no_accumulation(req, run.compromise) if no_accumulation is None and c is run.final
                              else bool(no_accumulation))

    alt_list = []
    # Compromises when the standard setup does not fit on one GPU (node B said so) or on the GPUs
    # at hand, or when asked for; never chosen for the user.
    if not run.fits or run.compromise or req.alternatives or not isinstance(ctx.one, Choice):
        if ctx.min_fit is None and not isinstance(ctx.one, Choice):
            ctx.min_fit = p.min_gpus()
        alt_list += alts.compromises(ctx, cmd)
        so = alts.scale_out(ctx, cmd)
        if so and (not run.fits or run.compromise or so.gpus != ch.gpus):
            alt_list.append(so)
    alt_list += alts.host_ram_short(ctx, cmd)  # CPU offload beyond the node's RAM: more nodes, optimizer-only
    if not ctx.measures and run.final_facts.estimate.deadline_missed_h:
        deadline_measures(ctx, ch)
    alt_list += alts.from_measures(ctx, cmd)

    fired = [t for t in run.traces if t.fired]
    warnings = [t.why for t in fired if t.level == "warning"]
    if hardware.assumed:
        warnings.insert(0, f"no GPU detected on this machine ({(machine.nvml_error if machine else None) or 'NVML reports 0 GPUs'}): "
                           f"planned for {hardware.total_gpus}x {hardware.gpu.name}, a stated default, not your "
                           "hardware; name yours with --gpu NAME --gpus N")
    from rules import batch_plan

    run.batch = batch_plan.facts(p, ch)
    held = batch_plan.held_pick(ctx) if isinstance(ch, Choice) and run.fits and not run.compromise else None
    if held is not None:
        alt_list.append(Alternative(
            name=f"global batch held at {held.global_batch:,}", kind="batch", summary=batch_plan.held_summary(held, ctx),
            fits=True, gpus=held.gpus, strategy=held.strategy.value, peak_gib=held.estimate.memory.peak_gib,
            device_gib=held.estimate.memory.device_gib, samples_per_s=held.samples_per_s, time_to_train_h=held.time_h,
            meets_deadline=(held.time_h <= req.deadline_h * (1 - req.margin)) if req.deadline_h and held.time_h else None,
            source=p.recipe(held.config).source, command=cmd(held)))
    core = _core(run, cmd(ch))
    rec = Recommendation(
        recommendation=core, estimate=ch.estimate,
        decision_path=[PathStep(node=s.node, question=s.question, answer=s.answer, why=s.why, key=s.key) for s in run.steps],
        rules_fired=[FiredRule(id=t.id, why=t.why, name=get_rule(t.id).name, level=t.level, phase=t.phase) for t in fired],
        alternatives=alt_list, warnings=warnings, plan=_plan(run, core), scaling=_scaling(ctx, ch),
        rules_evaluated=[RuleSummary(id=t.id, phase=t.phase, fired=t.fired, blocked_by_pin=t.blocked_by_pin)
                         for t in run.traces],
        defaults_applied=run.defaults_applied, policy=_policy_summary(run),
    )
    rec._trace = run.traces  # every rule evaluated, with its leaves: Recommendation.trace
    rec._candidates = p.candidates  # every configuration the planner scored at hand
    return rec


# The recommendation's fields that are the chosen config's own, as they are (the sizes, the toggles, the
# compromises' toggles and rank); its enums are written as their values.
_CORE_AS_IS = tuple(k for k in RecommendationCore.model_fields if k in TrainConfig.model_fields
                    and not isinstance(TrainConfig.model_fields[k].default, Enum))


def _core(run: Run, command: str) -> RecommendationCore:
    req, ch, extra = run.req, run.final, run.plan_set
    cfg, est, lr = ch.config, ch.estimate, ch.lr
    return RecommendationCore(
        **{k: getattr(cfg, k) for k in _CORE_AS_IS},
        strategy=ch.strategy.value, gpus=ch.gpus, nodes=est.hardware.nodes, global_batch=ch.global_batch,
        precision=cfg.precision.value, lr=lr.lr, lr_scaling=lr.lr_scaling,
        warmup_steps=extra.get("warmup_steps", lr.warmup_steps), num_workers=extra.get("num_workers", 0),
        fits=run.fits, command=command, gpu=run.planner.hw.gpu.name, task=lr.task, optimizer=cfg.optimizer.value,
        sync_batchnorm=bool(extra.get("sync_batchnorm", False)),
        pin_memory=bool(extra.get("pin_memory", True)), prefetch_factor=int(extra.get("prefetch_factor", 2)),
        base_lr=lr.base_lr, base_batch=lr.base_batch, total_steps=lr.total_steps,
        task_rule=run.planner.recipe(cfg).task_rule, task_flag=run.planner.recipe(cfg).task_flag,
        batch_rule=run.batch.rule, batch_planned=run.batch.planned, batch_held=run.batch.held,
        batch_limit=run.batch.limit,
        time_to_train_h=est.time_to_train_h, deadline_h=req.deadline_h,
        compromise=run.compromise, gives_up=run.gives_up, compromise_rule=run.compromise_rule,
        risk_rule=run.risk_rule, numerical_risk=_numerical_risk(run.compromise, cfg),
        standard_verdict=(run.ctx.verdict or None) if (not run.fits or run.ctx.compromise_name) else None,
    )


def _numerical_risk(compromise: str | None, cfg: TrainConfig) -> str | None:
    """The compromise's numerical-risk class (rules.risk.RISK_CLASSES); None for the standard setup."""
    if not compromise:
        return None
    from rules.compromise import risk_of

    return risk_of(cfg).id


def _plan(run: Run, core: RecommendationCore) -> Plan:
    req, ch = run.req, run.final
    lr, workers = ch.lr, core.num_workers
    return Plan(
        model=req.model, config=ch.config, gpu=core.gpu, processes_per_node=ch.estimate.hardware.per_node,
        nodes=core.nodes, global_batch=ch.global_batch, lr=lr.lr, base_lr=lr.base_lr, base_batch=lr.base_batch,
        lr_scaling=lr.lr_scaling, warmup_steps=core.warmup_steps, total_steps=lr.total_steps, epochs=req.epochs,
        warmup=run.planner.recipe(ch.config).warmup,
        dataset_size=req.dataset_size, num_workers=workers, pin_memory=core.pin_memory, task=lr.task,
        prefetch_factor=core.prefetch_factor if workers else None, sync_batchnorm=core.sync_batchnorm,
        no_accumulation=_no_accumulation(req, core.compromise),
    )


def _no_accumulation(req, compromise: str | None) -> bool:
    """The plan must keep accumulation at 1: node H's no-accumulation compromise fits only so, and a
    pinned --grad-accum 1 is never overridden (launcher.oom keeps it on an OOM retry)."""
    return req.grad_accum == 1 or NO_ACCUMULATION in (compromise or "").split("+")


def _applied(traces: list[RuleTrace]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for t in traces:
        if t.fired:
            out.update(t.set)
    return out


def _coerce(field: str, value: Any) -> Any:
    if field == "precision":
        return Precision(value)
    if field == "optimizer":
        return Optimizer(value)
    return value


def _pinned_strategy(ctx: TreeContext, strategy: Strategy) -> Choice | Infeasible:
    p = ctx.planner
    if strategy is Strategy.single:
        return ctx.one
    cur = ctx.choice
    n = cur.gpus if isinstance(cur, Choice) and cur.gpus > 1 else p.available
    ch = p.search(n, strategy)
    if isinstance(ch, Infeasible) and ch.kind == "batch":
        raise UserError(f"--strategy {strategy.value} on {n} GPUs: {ch.reason}",
                        fix="pick a --batch-size divisible by the GPU count (and the micro-batch), or another --gpus")
    if isinstance(ch, Infeasible) and ch.kind == "strategy" and strategy.keeps_gathered:
        raise UserError(f"--strategy {strategy.value} on {n} GPU{'s' if n > 1 else ''}: {ch.reason}",
                        fix="use --strategy fsdp (the same without kept weights), or a --batch-size that leaves "
                            "accumulation on each GPU (more than one micro-batch per GPU)")
    return ch


def _keep_fits_or_refuse(p: Planner, strategy: Strategy) -> None:
    """A pinned --strategy fsdp-keep that fits no count at hand is refused, not turned into a memory
    compromise (LoRA, 8-bit, ...): it spends memory to save communication, and plain FSDP, which the
    message names when it fits, is the same training without that trade."""
    counts = [n for n in p.counts() if n >= 2]
    rows = [p.best(n) for n in counts]
    if any(isinstance(r, Choice) for r in rows):
        return
    mem = [r for r in rows if isinstance(r, Infeasible) and r.kind == "memory"]
    if not mem:
        return  # no accumulation at any count, or the batch does not split: _pinned_strategy says which
    plain = next((c for c in (p.search(n, Strategy.fsdp) for n in reversed(counts)) if isinstance(c, Choice)), None)
    raise UserError(f"--strategy {strategy.value} does not fit the {p.available}x {p.hw.gpu.name} at hand: {mem[-1].reason} "
                    "(it keeps a full unsharded copy of the weights and gradients on every GPU)",
                    fix=(f"use --strategy fsdp (fits on {plain.gpus} GPUs, ~{plain.estimate.memory.device_gib:.1f} GiB "
                         "per GPU), or drop --strategy" if plain is not None else
                         "drop --strategy: the rules rank the memory compromises that fit"))


def _closest_as_choice(ctx: TreeContext, inf: Infeasible | None) -> Choice:
    """A not-fitting result still needs numbers to show: the closest attempt."""
    p = ctx.planner
    e = inf.closest if inf is not None and inf.closest is not None else None
    n = inf.gpus if inf is not None else 1
    strategy = inf.strategy if inf is not None else Strategy.single
    if e is None:
        if one_process(p.base):
            strategy, n = Strategy.single, 1
        cfg = p.base.model_copy(update={"strategy": strategy, "micro_batch": 1, "grad_accum": 1, "grad_ckpt": True})
        e = p.est(cfg, n)
    target = p.target_batch
    cfg = e.config
    share = max(1, target // n)
    if share % cfg.micro_batch == 0 and not no_accumulation(cfg):
        cfg = cfg.model_copy(update={"grad_accum": share // cfg.micro_batch})
        e = p.est(cfg, n)
    gb = cfg.micro_batch * cfg.grad_accum * n
    return Choice(n, strategy, cfg, e, gb, lr=p.lr_for(gb, cfg))


def _scaling(ctx: TreeContext, chosen: Choice) -> list[ScalingRow]:
    """The best plan per GPU count at hand (the planner's rows, the policy's counts), efficiency and
    speedup against the smallest count that fits (rules.policy.efficiencies: the policy's number)."""
    from rules.policy import efficiencies

    p = ctx.planner
    results = {n: (ctx.one if ctx.one is not None else p.search(1, Strategy.single)) if n == 1 else p.best(n)
               for n in p.counts()}
    # the rows the policy compared (a deadline may have taken a count at a larger batch: rules.batch_plan)
    results.update({r.gpus: r for r in ctx.rows if isinstance(r, Choice) and r.gpus in results})
    fitting = [r for r in results.values() if isinstance(r, Choice)]
    base_n, eff = efficiencies(fitting) if fitting else (None, {})
    base = results.get(base_n)
    rows: list[ScalingRow] = []
    for n, ch in results.items():
        if isinstance(ch, Choice):
            e = ch.estimate
            rows.append(ScalingRow(
                gpus=n, strategy=ch.strategy.value, fits=True, micro_batch=ch.config.micro_batch,
                grad_accum=ch.config.grad_accum, global_batch=ch.global_batch, lr=ch.lr.lr, peak_gib=e.memory.peak_gib,
                device_gib=e.memory.device_gib, samples_per_s=e.throughput.samples_per_s, step_s=e.throughput.step_s,
                time_to_train_h=e.time_to_train_h, scaling_efficiency=eff[n],
                speedup=ch.samples_per_s / base.samples_per_s, baseline=n == base_n, measured=e.throughput.calibrated,
                chosen=(n == chosen.gpus and ch.strategy is chosen.strategy),
                changed=_changed(base.config, ch.config) if n != base_n else []))
        else:
            rows.append(ScalingRow(gpus=n, strategy=ch.strategy.value, fits=False,
                                   device_gib=ch.closest.memory.device_gib if ch.closest else None, note=ch.reason,
                                   chosen=(n == chosen.gpus)))
    if not any(r.chosen for r in rows):
        for r in rows:
            r.chosen = r.gpus == chosen.gpus
    return rows


def _policy_summary(run: Run) -> PolicySummary:
    """The policy line of the report: which rule chose the plan (docs/design.md "Decision policy")."""
    from rules.policy import DEADLINE_RATE

    ctx, req, p = run.ctx, run.req, run.planner
    pick = ctx.pick
    floor = p.defaults.search.min_scaling_efficiency
    common = dict(deadline_h=req.deadline_h, margin=req.margin, min_scaling_efficiency=floor,
                  effective_deadline_h=req.deadline_h * (1 - req.margin) if req.deadline_h else None,
                  needed_gpus=ctx.needed_gpus, counts_compared=p.counts(), candidates_scored=len(p.candidates),
                  deadline_rate=DEADLINE_RATE if req.deadline_h else None)
    from rules import batch_plan

    b = run.batch
    common["scaling"] = b.scaling
    common["batch_note"] = batch_plan.cap_note(ctx, b)
    ch = run.final
    if run.compromise and ctx.compromise_name:
        return PolicySummary(rule=f"node H: the standard setup does not fit the GPUs at hand; the lowest-risk memory "
                             f"compromise that fits ({run.compromise})", kind="compromise", **common)
    if not run.fits:
        return PolicySummary(rule="nothing fits: the closest configuration is shown", kind="none", **common)
    if pick is not None and ch.gpus == pick.choice.gpus:
        from rules.nodes import HYPOTHETICAL_MAX_GPUS

        rule = pick.rule
        if ctx.needed_gpus:
            rule += f"; at global batch {ctx.needed_batch or ch.global_batch:,}, {ctx.needed_gpus} GPUs of this kind would meet it"
        elif pick.kind == "deadline-missed":
            at = f"at batches planned up to the family's limit {b.limit:,}" if b.planned else f"at global batch {b.held:,}"
            rule += f"; {at} no count up to {HYPOTHETICAL_MAX_GPUS:,} GPUs of this kind would meet it"
        if pick.kind == "deadline-missed" and not ctx.needed_gpus:
            more = batch_plan.at_limit(ctx, b, HYPOTHETICAL_MAX_GPUS)
            if more:
                rule += f"; {more}"
        if pick.kind != "deadline-missed" or len(ctx.rows) > 1:
            rule += f"; {batch_plan.scaling_words(b, [r for r in ctx.rows if isinstance(r, Choice)])}"
        return PolicySummary(rule=rule, kind=pick.kind, baseline_gpus=pick.baseline_gpus,
                             strategy_rule=(ch.strategy_rule or None) if ch.gpus > 1 else None, **common)
    if req.strategy is not None and run.tree_choice is not None and ctx.choice is not None and \
            getattr(ctx.choice, "gpus", None) != ch.gpus:
        return PolicySummary(rule=f"--strategy {req.strategy.value} pinned: it runs on the GPUs at hand ({ch.gpus})",
                             kind="pinned", **common)
    d = next((s for s in run.steps if s.node == "D"), None)
    h = next((s for s in run.steps if s.node == "H"), None)
    why = d.answer if d is not None and ctx.end == "E" else h.answer if h is not None else "one GPU"
    # node H's "faster": one GPU at hand misses the deadline (as rules.policy.deadline_hours counts it)
    missed = ctx.end == "H" and h is not None and h.key == "faster"
    return PolicySummary(rule=f"one GPU: {why}", kind="deadline-missed" if missed else "single", baseline_gpus=1, **common)


def _changed(one: TrainConfig | None, cfg: TrainConfig) -> list[str]:
    """What a scaling row changed besides the GPU count, against the 1-GPU row."""
    if one is None:
        return []
    out = []
    if cfg.strategy.sharded and not one.strategy.sharded:  # 1/N of the optimizer step per GPU: can exceed 100%
        out.append(f"{cfg.strategy.value.upper()}: optimizer step sharded")
    if cfg.grad_ckpt != one.grad_ckpt:
        out.append("checkpointing " + ("on" if cfg.grad_ckpt else "off"))
    if cfg.micro_batch != one.micro_batch:
        out.append(f"micro-batch {cfg.micro_batch} (baseline: {one.micro_batch})")
    if cfg.compile != one.compile:
        out.append("compile " + ("on" if cfg.compile else "off"))
    for k in COMPROMISE_FIELDS:  # node H's settings (advisor.setup, rules.compromise.LEVELS)
        if getattr(cfg, k) != getattr(one, k):
            out.append(f"{k.replace('_', ' ')} {getattr(cfg, k).value if hasattr(getattr(cfg, k), 'value') else getattr(cfg, k)}")
    return out
