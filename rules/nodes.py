"""The decision tree's nodes A–J: per node id, the function that computes its answer, and the walk.

The questions, the why and where each answer leads are data (``rules/data/tree.toml``, loaded by
``rules.tree``); the functions here answer them with the planner's searches and record what the
recommendation needs on the ``TreeContext`` (node B's single-GPU choice, G/I's rows, H's
measures, the choice the walk ends with).
"""

from __future__ import annotations

import math
from typing import Callable

from advisor.config import Precision, Strategy
from advisor.estimate import Estimate
from advisor.setup import compromise_words, labels, one_process
from advisor.setup.precision import precision_text
from advisor.units import format_efficiency, format_hours
from rules.planner import Choice, Infeasible
from rules.tree import Answer, Measure, Step, TreeContext, load_tree

# How far node H's "more GPUs" measure looks, hypothetically (whole 8-GPU nodes beyond one).
HYPOTHETICAL_MAX_GPUS = 1024


def _gib(x: float) -> str:
    return f"{x:.1f} GiB"


def describe(ch: Choice) -> str:
    c = ch.config
    parts = [f"micro-batch {c.micro_batch} x accumulation {c.grad_accum}" + (f" x {ch.gpus} GPUs" if ch.gpus > 1 else "")
             + f" = global batch {ch.global_batch}", precision_text(c), c.optimizer.value]
    if c.strategy.keeps_gathered:
        parts.insert(1, keep_gathered_text(c.grad_accum))
    parts += labels(c, style="sentence")  # the ways of training it runs (advisor.setup)
    if c.grad_ckpt:
        parts.append("activation checkpointing")
    return ", ".join(parts)


def keep_gathered_text(grad_accum: int) -> str:
    """fsdp-keep in one phrase: what it keeps, and the all-gathers it saves (advisor.comm.fsdp_keep_comm)."""
    return (f"FSDP, weights kept gathered across the {grad_accum} accumulation steps: the weights all-gathered "
            f"once per optimizer step instead of {2 * grad_accum} times, gradients reduce-scattered once")


def _mem_text(e: Estimate) -> str:
    m = e.memory
    return f"peak {_gib(m.peak_gib)} allocated, ~{_gib(m.device_gib)} in nvidia-smi, of {m.gpu_memory_gib:.0f} GiB"


def _time_text(e: Estimate) -> str:
    t = e.time_to_train_h
    return f"{format_hours(t)} to train" if t is not None else f"{e.throughput.samples_per_s:,.1f} samples/s"


def node_A(ctx: TreeContext) -> Answer:
    p = ctx.planner
    hw = p.hw
    where = "detected" if hw.detected else "assumed: no GPU detected" if hw.assumed else "as named"
    work = []
    if ctx.req.dataset_size:
        work.append(f"{ctx.req.dataset_size:,} samples x {ctx.req.epochs:g} epochs")
    if ctx.deadline:
        work.append(f"deadline {format_hours(ctx.deadline)}")
    return Answer("start", f"{p.model.name} ({p.model.params / 1e6:,.0f}M parameters, {p.model.family}) on "
                  f"{hw.total_gpus}x {hw.gpu.name} ({hw.gpu.memory_gib:.0f} GiB, {where})"
                  + (f"; {', '.join(work)}" if work else "; no dataset size or deadline given"),
                  load_tree()["A"].why, {"gpus_at_hand": hw.total_gpus})


def node_B(ctx: TreeContext) -> Answer:
    p = ctx.planner
    ch = p.search(1, Strategy.single)
    ctx.one = ch
    if isinstance(ch, Choice):
        ckpt = ("checkpointing needed: without it no micro-batch fits" if ch.ckpt_needed
                else "checkpointing pinned" if p.req.grad_ckpt else
                "checkpointing on: a larger micro-batch with it is faster" if ch.config.grad_ckpt
                else "no checkpointing")
        return Answer("fits", f"yes: {describe(ch)}; {_mem_text(ch.estimate)}",
                      f"Standard setup ({ckpt}); the global batch {p.target_batch} "
                      + ("(where a planned pretraining batch starts; more GPUs may grow it)" if p.batch_free else "kept exactly")
                      + "; every micro-batch "
                      "(powers of two) with and without checkpointing scored, the fastest that fits taken.",
                      {"peak_gib": ch.estimate.memory.peak_gib, "device_gib": ch.estimate.memory.device_gib})
    e = ch.closest
    from rules.compromise import standard_cause

    ctx.verdict = f"the standard setup does not fit on 1x {p.hw.gpu.name}: {standard_cause(e)}"
    why = f"Compromises ({compromise_words()}) are not assumed here: node H ranks them when the GPUs at hand need one."
    if e is not None:
        m = e.memory
        why = (f"At micro-batch {e.config.micro_batch} x accumulation {e.config.grad_accum}"
               f"{' with checkpointing' if e.config.grad_ckpt else ''}, the peak ({m.peak_at}): "
               + " + ".join(f"{x.name} {_gib(x.gib)}" for x in m.peak_parts) + f"; {m.other_moment}. " + why)
    return Answer("too-big", f"no: {standard_cause(e)}", why,
                  {"device_gib": e.memory.device_gib if e else None})


def node_C(ctx: TreeContext) -> Answer:
    p = ctx.planner
    ctx.min_fit = p.min_gpus()
    need = ctx.min_fit.gpus if ctx.min_fit else None
    need_text = (f"at least {need}x {p.hw.gpu.name} ({ctx.min_fit.strategy.value.upper()})" if need
                 else "more than 256 GPUs of this kind")
    one = one_process(p.base)
    pinned_single = ctx.req.strategy is Strategy.single or one is not None
    if p.available < 2 or pinned_single or need is None or need > p.available:
        have = ((f"{one.flag} runs on one GPU" if one is not None else "--strategy single is pinned")
                if pinned_single else f"{p.available} at hand")
        return Answer("unavailable", f"it needs {need_text}; {have}: node H finds what runs on the GPUs given",
                      "No standard configuration runs here; node H ranks the memory compromises that would.",
                      {"min_gpus": need})
    return Answer("several", f"yes: {need_text}; {p.available} at hand", load_tree()["C"].why, {"min_gpus": need})


def _policy(ctx: TreeContext, rows: list[Choice | Infeasible]) -> tuple[Choice, str]:
    """The policy's pick among the best plan per count (rules.policy), recorded on the context."""
    from rules.policy import pick

    p = ctx.planner
    got = pick(rows, deadline_h=ctx.deadline, margin=ctx.req.margin,
               min_efficiency=p.defaults.search.min_scaling_efficiency, per_node=p.hw.gpus_per_node)
    ctx.pick = got
    if got.kind == "deadline-missed":
        ctx.deadline_missed = True
    return got.choice, got.rule


def _rows_text(rows: list[Choice | Infeasible], eff: dict[int, float]) -> str:
    out = []
    base = min(eff) if eff else None  # the smallest count that fits: efficiency's reference (rules.policy)
    batches = {r.global_batch for r in rows if isinstance(r, Choice)}
    for r in rows:
        if isinstance(r, Choice):
            t = r.time_h
            at = f" at batch {r.global_batch:,}" if len(batches) > 1 else ""  # a planned batch (issue 37)
            out.append(f"{r.gpus}: {r.strategy.value}{at} {format_hours(t) if t is not None else f'{r.samples_per_s:,.1f}/s'}"
                       f" ({'baseline' if r.gpus == base else format_efficiency(eff[r.gpus]) + ' eff.'})")
        else:
            out.append(f"{r.gpus}: {'no fit' if r.kind == 'memory' else 'batch does not split' if r.kind == 'batch' else 'n/a'}")
    return "; ".join(out)


def _best_for(ctx: TreeContext, n: int, hypothetical: bool = False) -> Choice | Infeasible:
    """The best plan on ``n`` GPUs the policy compares: with a deadline and a planned batch, at the
    smallest batch of the family's range that meets it when the planned one does not (rules.batch_plan)."""
    p = ctx.planner
    if ctx.deadline is None:
        return p.best(n, hypothetical)
    from rules.batch_plan import for_deadline

    return for_deadline(p, n, ctx.deadline * (1 - ctx.req.margin), hypothetical)


def node_I(ctx: TreeContext) -> Answer:
    p = ctx.planner
    counts = [n for n in p.counts() if n >= 2]
    rows = [_best_for(ctx, n) for n in counts]
    ctx.rows = rows
    feasible = [r for r in rows if isinstance(r, Choice)]
    if not feasible:
        reason = _why_none(rows, p.target_batch)
        ctx.verdict = f"the standard setup does not fit on the {p.available} GPUs at hand: {reason}"
        return Answer("none", f"no standard configuration fits on the {p.available} GPUs at hand: {reason}",
                      "Node H ranks the memory compromises that would.")
    ch, rule = _policy(ctx, feasible)
    ctx.choice, ctx.tree_strategy = ch, ch.strategy.value
    if ctx.deadline_missed:
        deadline_measures(ctx, ch)
    # Planner.best's rule: DDP whenever a replica fits, sharding when memory needs it or a measurement says so
    lead = ch.strategy_rule or {Strategy.ddp: "a full replica fits per GPU: DDP",
                                Strategy.hsdp: "HSDP: sharded inside each node, replicated across nodes"}.get(
        ch.strategy, f"{ch.strategy.value.upper()}")
    return Answer(ch.strategy.value, f"{lead} on {ch.gpus} GPUs ({rule}); {describe(ch)}; {_mem_text(ch.estimate)}; "
                  f"{_time_text(ch.estimate)}",
                  f"By GPU count (best plan each): {_rows_text(rows, ctx.pick.efficiency)}. " + load_tree()["I"].why,
                  {"gpus": ch.gpus, "strategy": ch.strategy.value})


def _why_none(rows: list[Choice | Infeasible], target: int) -> str:
    """Why no count at hand runs it: memory first, else that no count divides the global batch."""
    mem = [r for r in rows if isinstance(r, Infeasible) and r.kind == "memory"]
    if mem:
        return mem[-1].reason
    if rows and all(isinstance(r, Infeasible) and r.kind == "batch" for r in rows):
        return (f"no GPU count at hand ({', '.join(str(r.gpus) for r in rows)}) splits the global batch {target} "
                "evenly with the pinned flags; give --batch-size a multiple of the count")
    return rows[-1].reason if rows else "no GPU counts to try"


def node_D(ctx: TreeContext) -> Answer:
    ch = ctx.one
    t = ch.time_h
    p = ctx.planner
    if ctx.deadline is None:
        limit = p.defaults.search.one_gpu_enough_h
        if t is not None:
            if t <= limit:
                return Answer("yes", f"yes: no deadline, and one GPU finishes the work in {format_hours(t)} (<= {format_hours(limit)})",
                              "Without a deadline one GPU is enough when it finishes within an hour.", {"time_to_train_h": t})
            return Answer("no", f"no: no deadline, but one GPU needs {format_hours(t)} (> {format_hours(limit)})",
                          "Without a deadline, more GPUs are worth it when one GPU needs more than an hour; "
                          "--deadline or --strategy single decides otherwise.", {"time_to_train_h": t})
        return Answer("yes", "yes: no deadline and no dataset size given" + _faster_at_hand(ctx),
                      "Without a deadline or the amount of work, one GPU is enough when the model fits on it; "
                      "--deadline, --dataset-size/--epochs or --strategy decide otherwise.")
    from rules.policy import deadline_hours

    limit = ctx.deadline * (1 - ctx.req.margin)
    t = deadline_hours(ch.estimate)  # without gains measured only on another GPU kind (rules.policy)
    thr = ch.estimate.throughput
    counted = (f"; the deadline counts {thr.conservative_samples_per_s:,.1f} samples/s, without gains measured only "
               f"on another GPU kind" if t != ch.time_h else "")
    if t <= limit:
        return Answer("yes", f"yes: {format_hours(t)} on one GPU <= deadline {format_hours(ctx.deadline)} less the "
                      f"{ctx.req.margin:.0%} margin ({format_hours(limit)})",
                      f"{ch.estimate.throughput.samples_per_s:,.1f} samples/s x {ctx.req.dataset_size:,} samples x {ctx.req.epochs:g} epochs"
                      + (" (with torch.compile, which repays its compile time over this run)" if ch.config.compile else "")
                      + counted + ".", {"time_to_train_h": ch.time_h})
    over = (f"over by {format_hours(t - ctx.deadline)}, {(t - ctx.deadline) / ctx.deadline:.0%}" if t > ctx.deadline
            else f"inside it, but not inside the {ctx.req.margin:.0%} margin: {format_hours(limit)}")
    return Answer("no", f"no: {format_hours(t)} on one GPU vs deadline {format_hours(ctx.deadline)} ({over})",
                  f"{ch.estimate.throughput.samples_per_s:,.1f} samples/s with the standard setup"
                  + (" (with torch.compile, which repays its compile time over this run)" if ch.config.compile else "")
                  + counted + ".", {"time_to_train_h": ch.time_h})


def _faster_at_hand(ctx: TreeContext) -> str:
    """How much faster the GPUs at hand would be, and the flags that decide (node D with no workload)."""
    p = ctx.planner
    if p.available < 2 or ctx.req.strategy is Strategy.single:
        return "; --deadline with --dataset-size/--epochs says whether more GPUs would be worth it"
    multi = p.best(p.available)
    if not isinstance(multi, Choice):
        return ""
    from rules.policy import row_efficiency

    x = multi.samples_per_s / ctx.one.samples_per_s
    at = f" at global batch {multi.global_batch:,}" if multi.global_batch != ctx.one.global_batch else ""
    how = f"{multi.strategy.value.upper()}{at}, {format_efficiency(row_efficiency(multi, ctx.one))} of linear scaling"
    if x < 1.05:  # "~0.9x faster" said slower in the words of faster (issue 40)
        return (f"; the {p.available} GPUs at hand would not be faster ({x:.2f}x one GPU's samples/s; {how}): "
                "one GPU is the plan")
    return (f"; the {p.available} GPUs at hand would be ~{x:.1f}x faster ({how}): give --deadline with "
            f"--dataset-size/--epochs, or --strategy {multi.strategy.value}, to use them")


def node_E(ctx: TreeContext) -> Answer:
    ctx.choice, ctx.end, ctx.tree_strategy = ctx.one, "E", "single"
    return Answer("single", f"single GPU: {describe(ctx.one)}", load_tree()["E"].why)


def node_F(ctx: TreeContext) -> Answer:
    p = ctx.planner
    if ctx.req.strategy is Strategy.single:
        return Answer("no", "no: --strategy single is pinned", "A pinned flag is never overridden.")
    if p.available > 1:
        src = "detected" if p.hw.detected else "given"
        return Answer("yes", f"yes: {p.available} GPUs ({src})", load_tree()["F"].why, {"gpus": p.available})
    return Answer("no", f"no: 1 GPU {'detected' if p.hw.detected else 'given'}",
                  "Give --gpus N (and --nodes) to plan for more.")


def node_G(ctx: TreeContext) -> Answer:
    p = ctx.planner
    counts = [n for n in p.counts() if n >= 2]
    rows = [ctx.one] + [_best_for(ctx, n) for n in counts]
    ctx.rows = rows
    ch, rule = _policy(ctx, rows)
    ctx.choice, ctx.tree_strategy = ch, ch.strategy.value
    if ctx.deadline_missed:
        deadline_measures(ctx, ch)
    what = "one GPU" if ch.gpus == 1 else f"{ch.strategy.value.upper()} on {ch.gpus} GPUs"
    why_strategy = f"; {ch.strategy_rule}" if ch.gpus > 1 and ch.strategy_rule else ""
    return Answer(ch.strategy.value, f"{what}: {_time_text(ch.estimate)} ({rule}){why_strategy}",
                  f"By GPU count (best plan each): {_rows_text(rows, ctx.pick.efficiency)}. " + load_tree()["G"].why,
                  {"gpus": ch.gpus})


def node_H(ctx: TreeContext) -> Answer:
    if not isinstance(ctx.one, Choice) or ctx.verdict:
        from rules.compromise import answer_memory

        return answer_memory(ctx)
    ch = ctx.one
    ctx.choice, ctx.end, ctx.tree_strategy = ch, "H", "single"
    if ctx.deadline is None:  # node D's one-hour rule said more GPUs would be worth it; there are none
        return Answer("single", f"one GPU: {format_hours(ch.time_h)} to train on it; {describe(ch)}",
                      "More GPUs would shorten it: give --gpus N (and --nodes) to plan for them.",
                      {"time_to_train_h": ch.time_h})
    from rules.policy import deadline_hours

    deadline_measures(ctx, ch)
    limit = ctx.deadline * (1 - ctx.req.margin)
    counted = deadline_hours(ch.estimate)
    miss = counted - limit
    closing = [m for m in ctx.measures if m.meets]
    close = ("; would close it: " + ", ".join(f"{m.name} ({format_hours(m.time_h)})" for m in closing)) if closing else \
        "; no single measure closes it"
    return Answer("faster", f"missed by {format_hours(miss)} ({miss / limit:.0%}): {format_hours(counted)} vs "
                  f"{format_hours(limit)} (deadline {format_hours(ctx.deadline)} less the {ctx.req.margin:.0%} margin){close}",
                  "Estimated: " + "; ".join(f"{m.name}: {m.summary}" for m in ctx.measures), {"missed_h": miss})


def deadline_measures(ctx: TreeContext, ch: Choice) -> None:
    """Ways to close a missed deadline, each with an estimate (node H; G when even all GPUs miss)."""
    from advisor.catalog import catalog_model, catalog_names
    from rules.policy import deadline_hours

    p, req = ctx.planner, ctx.req
    dl = ctx.deadline * (1 - req.margin)  # a measure closes the deadline when it meets it with the margin
    out: list[Measure] = []
    cfg = ch.config
    t0 = ch.time_h

    def meas(name: str, summary: str, flags: list[str], alt: Choice, source: str = "", model: str | None = None,
             hypothetical: bool = False) -> None:
        e = alt.estimate
        t = e.time_to_train_h
        counted = deadline_hours(e)  # a gain measured only on another GPU kind closes nothing (rules.policy)
        out.append(Measure(name, summary, flags, t, counted is not None and counted <= dl, gpus=alt.gpus, strategy=alt.strategy.value,
                           samples_per_s=e.throughput.samples_per_s, peak_gib=e.memory.peak_gib,
                           device_gib=e.memory.device_gib, model=model, source=source, choice=alt,
                           hypothetical=hypothetical))

    def variant(update: dict) -> Choice:
        c2 = cfg.model_copy(update=update)
        return ch.with_config(c2, p.est(c2, ch.gpus))

    if cfg.precision in (Precision.fp32, Precision.tf32):
        amp = Precision.bf16 if p.hw.gpu.supports_bf16 else Precision.fp16
        alt = p.search(ch.gpus, ch.strategy, base=p.base.model_copy(update={"precision": amp}), batch=ch.global_batch)
        if isinstance(alt, Choice):
            meas(f"AMP ({amp.value})", f"{amp.value} autocast: {format_hours(alt.time_h)} ({t0 / alt.time_h:.1f}x faster)",
                 ["--precision", amp.value], alt, "Micikevicius et al. 2018")
    if not cfg.compile:
        alt = variant({"compile": True})
        meas("torch.compile", f"{format_hours(alt.time_h)} ({(1 - alt.time_h / t0):.0%} less, plus a few minutes of compiling)",
             ["--compile"], alt, "PyTorch 2 torch.compile (inductor)")
    if p.model.family == "cnn" and not cfg.channels_last:
        alt = variant({"channels_last": True})
        meas("channels_last", f"{format_hours(alt.time_h)}", ["--channels-last"], alt,
             "PyTorch channels_last tutorial (22% on ResNet-50 with AMP on V100)")
    # smaller models of the same family from the catalog
    if p.model.source == "catalog":
        smaller = []
        for name in catalog_names():
            try:
                m = catalog_model(name)
            except Exception:
                continue
            if m.family == p.model.family and m.params < p.model.params and m.name != p.model.name:
                smaller.append(m)
        for m in sorted(smaller, key=lambda m: -m.params)[:2]:
            alt = p.search(ch.gpus, ch.strategy, base=cfg.model_copy(update={"micro_batch": 1, "grad_accum": 1}), model=m,
                           batch=ch.global_batch)
            if isinstance(alt, Choice):
                meas(f"smaller model: {m.name}", f"{m.params / 1e6:,.0f}M parameters: {format_hours(alt.time_h)}",
                     ["--model", m.name], alt, model=m.name)
    # more GPUs of this kind (hypothetical beyond what is at hand): the fewest that meet it
    ctx.needed_gpus = None
    for n in p.counts(hypothetical_max=HYPOTHETICAL_MAX_GPUS):
        if n <= ch.gpus:
            continue
        alt = _best_for(ctx, n, hypothetical=True)
        if isinstance(alt, Choice) and (ta := deadline_hours(alt.estimate)) is not None and ta <= dl:
            ctx.needed_gpus, ctx.needed_batch = n, alt.global_batch
            per_node = max(p.hw.gpus_per_node, 8)
            flags = ["--gpus", str(n)] if n <= per_node else ["--gpus", str(per_node), "--nodes", str(n // per_node)]
            meas(f"{n} GPUs", f"{alt.strategy.value.upper()} on {n}x {p.hw.gpu.name}: {format_hours(alt.time_h)}",
                 flags, alt, hypothetical=n > p.available)
            break
    # less work
    counted = deadline_hours(ch.estimate)
    if req.epochs and counted:
        fit_epochs = math.floor(req.epochs * dl / counted * 10) / 10
        if fit_epochs > 0:
            e = ch.estimate
            out.append(Measure("fewer epochs", f"{fit_epochs:g} of {req.epochs:g} epochs fit in the deadline",
                               ["--epochs", f"{fit_epochs:g}"], t0 * fit_epochs / req.epochs, True, gpus=ch.gpus,
                               strategy=ch.strategy.value, samples_per_s=e.throughput.samples_per_s,
                               peak_gib=e.memory.peak_gib, device_gib=e.memory.device_gib, choice=ch, epochs=fit_epochs))
    ctx.measures = out


def node_J(ctx: TreeContext) -> Answer:
    ctx.end = "J"
    lr = ctx.choice.lr  # G and I lead here only with a configuration that fits
    return Answer(lr.lr_scaling, f"lr {lr.lr:.3g}: {lr.text}; warmup {lr.warmup_steps} steps ({lr.warmup_rule})",
                  load_tree()["J"].why + f" Base: {lr.base_lr:g} at batch {lr.base_batch}.", lr.as_dict())


NODE_FUNCS: dict[str, Callable[[TreeContext], Answer]] = {
    "A": node_A, "B": node_B, "C": node_C, "D": node_D, "E": node_E,
    "F": node_F, "G": node_G, "H": node_H, "I": node_I, "J": node_J,
}


def walk(ctx: TreeContext) -> list[Step]:
    """Visit nodes from A, each answer choosing the next, until a node leads nowhere."""
    tree = load_tree()
    if set(tree) - set(NODE_FUNCS):
        raise RuntimeError(f"tree.toml: node(s) {sorted(set(tree) - set(NODE_FUNCS))} have no function in rules/nodes.py")
    steps: list[Step] = []
    node_id: str | None = "A"
    while node_id is not None:
        node = tree[node_id]
        ans = NODE_FUNCS[node_id](ctx)
        steps.append(Step(node=node_id, question=node.question, answer=ans.answer, why=ans.why, key=ans.key, data=ans.data))
        ctx.end = node_id
        node_id = node.next.get(ans.key)
    return steps
