"""The text report of ``advise``: an ordered list of sections, each a function of the Recommendation.

Issue 40: the report printed 274 lines at 100 columns, the recommendation at line 68 after a tree that
drew every branch, and ~130 lines of alternatives whose launch commands wrapped inside a 30-column cell.
Now the default report fits two screens: the header, the recommendation, memory, the scaling table, the
*path taken* through the tree, warnings, a compact alternatives table with each command listed once below
it, the ids of the rules fired and the launch command. ``--show tree,alternatives,rules`` (or ``--full``)
adds the long forms: the whole tree, each alternative's description and risk, each rule's why.

Sections are data (``SECTIONS``): a name, whether the default report shows it, and a function that
returns a rich renderable or None. The recommendation panel is rows (``RECOMMENDATION_ROWS``): a function
of the Recommendation giving (label, value) or None. A new part of the report is one entry in either list.
Nothing is cut with an ellipsis: text wraps at words, the scaling table drops the columns every row shares
into its title, and what differs from the baseline is written under the table, not in a narrow cell.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from advisor.setup.base import UNMEASURED
from advisor.setup.checkpointing import checkpointing_words
from advisor.units import format_efficiency, format_hours

# ---------------------------------------------------------------- the recommendation panel's rows


def _row_strategy(rec):
    from rich.text import Text

    r = rec.recommendation
    fit = Text("fits", style="bold green") if r.fits else Text("DOES NOT FIT", style="bold red")
    if r.compromise and r.fits:
        fit = Text(f"fits (compromise: {r.compromise})", style="bold yellow")
    return "strategy", Text.assemble(f"{r.strategy} on {r.gpus}x {r.gpu}"
                                     + (f" ({r.nodes} nodes)" if r.nodes > 1 else "") + "  ", fit)


def _row_policy(rec):
    return ("policy", rec.policy.rule) if rec.policy is not None else None


def _row_standard(rec):
    from rich.text import Text

    r = rec.recommendation
    return ("standard setup", Text(r.standard_verdict, style="red")) if r.standard_verdict else None


def _row_compromise(rec):
    from rich.text import Text

    r = rec.recommendation
    if not r.compromise:
        return None
    return "compromise", Text.assemble((r.compromise, "bold yellow"), f": gives up {r.gives_up}")


def _row_compromise_rule(rec):
    r = rec.recommendation
    return ("why this one", r.compromise_rule) if r.compromise and r.compromise_rule else None


def _row_risk(rec):
    r = rec.recommendation
    return ("numerical risk", f"{r.numerical_risk}: {r.risk_rule}") if r.compromise and r.risk_rule else None


def _row_batch(rec):
    r = rec.recommendation
    return "batch", (f"micro-batch {r.micro_batch} x accumulation {r.grad_accum} x {r.gpus} GPUs = global batch "
                     f"{r.global_batch}" + (f" (planned for pretraining, within the family's limit {r.batch_limit:,})"
                                            if r.batch_planned and r.batch_limit else ""))


def _row_batch_note(rec):
    from rich.text import Text

    return ("", Text(rec.policy.batch_note, style="yellow")) if rec.policy is not None and rec.policy.batch_note else None


def _row_task(rec):
    r = rec.recommendation
    if not r.task_rule:
        return None
    return "task", f"{r.task}: {r.task_rule}" + (f" ({r.task_flag} overrides)" if r.task_flag != r.task_rule else "")


def _row_training(rec):
    from advisor.setup import labels

    r = rec.recommendation
    extras = [f"precision {r.precision}", f"optimizer {r.optimizer}", f"compile {'on' if r.compile else 'off'}",
              f"checkpointing {checkpointing_words(r)}"]
    if r.channels_last:
        extras.append("channels_last")
    if r.sync_batchnorm:
        extras.append("SyncBatchNorm")
    extras += labels(r, style="report")  # the ways of training it runs (advisor.setup)
    return "training", ", ".join(extras)


def _row_lr(rec):
    r = rec.recommendation
    return "learning rate", (f"{r.lr:.3g} ({r.task + ' recipe, ' if r.task else ''}{r.lr_scaling} from {r.base_lr:g} at "
                             f"batch {r.base_batch}), warmup {r.warmup_steps} steps"
                             + (f" of {r.total_steps:,}" if r.total_steps else ""))


def _row_loading(rec):
    r = rec.recommendation
    return "data loading", f"{r.num_workers} workers per GPU, pin_memory={r.pin_memory}, prefetch_factor={r.prefetch_factor}"


def _row_speed(rec):
    tp = rec.estimate.throughput
    return "speed", (f"{tp.samples_per_s:,.1f} samples/s" + (f", {tp.tokens_per_s:,.0f} tokens/s" if tp.tokens_per_s else "")
                     + f", {tp.step_s:.3g} s per step, MFU {tp.mfu:.0%}")


def _row_time(rec):
    r = rec.recommendation
    return "time to train", format_hours(r.time_to_train_h) + (
        "" if r.time_to_train_h is not None else " (give --dataset-size and --epochs)")


# The recommendation panel, in order: each a function of the Recommendation -> (label, value) or None.
RECOMMENDATION_ROWS: list[Callable[[Any], tuple[str, Any] | None]] = [
    _row_strategy, _row_policy, _row_standard, _row_compromise, _row_compromise_rule, _row_risk, _row_batch,
    _row_batch_note, _row_training, _row_lr, _row_task, _row_loading, _row_speed, _row_time,
]


# ---------------------------------------------------------------- sections


def _header(rec, ctx):
    from rich.panel import Panel
    from rich.table import Table

    r, e = rec.recommendation, rec.estimate
    hw, m = e.hardware, e.model
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold", no_wrap=True)
    head.add_column()
    given, given_nodes = hw.gpus_at_hand or hw.count, hw.nodes_at_hand or hw.nodes  # the hardware, not the plan
    uses = ""
    if (hw.count, hw.nodes) != (given, given_nodes):
        uses = f"; the plan uses {hw.count}" + (f" on {hw.nodes} node{'s' if hw.nodes > 1 else ''}"
                                                if hw.nodes != given_nodes else "")
    how = ("detected" if hw.detected else "ASSUMED (no GPU detected; name yours with --gpu)" if hw.assumed
           else "as named (not detected)")
    head.add_row("hardware", f"{given}x {hw.gpu} ({hw.memory_gib:.0f} GiB), {hw.interconnect}, "
                 f"{given_nodes} node{'s' if given_nodes > 1 else ''}{uses}; {how}")
    if hw.network:
        head.add_row("network", hw.network)
    t = e.throughput
    if t.loader is not None and (t.loader.data in ("jpeg", "decoded") or t.loader_bound):  # text never waits on it
        # the rate itself is stated once, in the input-bound warning with its basis (issue 40: three figures
        # disagreed); a loader that keeps up says its per-core rate here (advisor.loader.per_core_words)
        from advisor.loader import per_core_words

        words = per_core_words(t.loader) if t.loader.data in ("jpeg", "decoded") and not t.loader_bound else None
        head.add_row("input", f"{t.loader.data} via {t.loader.loader}, {t.loader.cpus_per_gpu:g} CPU cores per GPU "
                     f"({t.loader.cpus_source})" + ("; the loader sets samples/s (see warnings)" if t.loader_bound
                                                    else f"; {words}" if words else ""))
    head.add_row("model", f"{m.name}: {m.params:,} parameters ({m.family}, {m.source}); estimated as "
                 f"{m.implementation or 'unnamed code'}" + (f", loss {m.loss}" if m.loss else "")
                 + (f", trainable {m.trainable_params:,}" if m.trainable_params != m.params else "")
                 + (" (--implementation transformers: the class a script loads)" if _has_class(m) else ""))
    shape = []
    if r.seq_len:
        shape.append(f"seq len {r.seq_len}")
    if r.image_size:
        shape.append(f"image {r.image_size}px")
    if rec.plan.dataset_size:
        shape.append(f"{rec.plan.dataset_size:,} samples x {rec.plan.epochs:g} epochs")
    if r.deadline_h:
        shape.append(f"deadline {format_hours(r.deadline_h)}")
    head.add_row("workload", ", ".join(shape) or "-")
    head.add_row("calibration", calibration_words(e))
    return Panel(head, title="[bold]cardwise[/bold]", title_align="left")


def calibration_words(e) -> str:
    """What the estimate's numbers rest on: the measured calibration applied (or the packaged constants),
    then any prior no run has measured yet (a setup's note saying UNMEASURED), whichever calibration is on."""
    measured = [c.summary() for c in e.calibration] or ["packaged constants only"]
    return "; ".join(measured + [n.split(":")[0] for n in e.notes if UNMEASURED in n])


def _has_class(m) -> bool:
    """A catalog model estimated as cardwise's own code that a script would load as a transformers class."""
    if m.source != "catalog" or not m.implementation.startswith("cardwise"):
        return False
    from advisor.catalog import has_transformers_class

    return has_transformers_class(m.name)


def _recommendation(rec, ctx):
    from rich.panel import Panel
    from rich.table import Table

    kv = Table.grid(padding=(0, 2))
    kv.add_column(style="bold", no_wrap=True)
    kv.add_column()
    for row in RECOMMENDATION_ROWS:
        got = row(rec)
        if got is not None:
            kv.add_row(*got)
    r = rec.recommendation
    return Panel(kv, title="recommendation", title_align="left", border_style="green" if r.fits else "red")


def _memory(rec, ctx):
    from rich.panel import Panel

    r = rec.recommendation
    return Panel(memory_bar(rec.estimate.memory, width=min(56, ctx.width - 24)),
                 title=f"memory per GPU ({r.strategy}, micro-batch {r.micro_batch})", title_align="left")


def _scaling(rec, ctx):
    if not rec.scaling:
        return None
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    rows = rec.scaling
    fitting = [r for r in rows if r.fits]
    globals_ = {r.global_batch for r in fitting}
    one_global = len(globals_) == 1
    any_time = any(r.time_to_train_h is not None for r in fitting)
    title = "throughput and time-to-train by GPU count" if any_time else "throughput by GPU count"
    title += f" (GiB per GPU; global batch {fitting[0].global_batch} on every row)" if one_global and fitting \
        else " (GiB per GPU)"
    t = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    cols = ["GPUs", "strategy", "micro x accum"] + ([] if one_global else ["global"]) + \
        ["GiB", "samples/s", "speedup", "efficiency"] + (["time"] if any_time else [])
    for col in cols:
        # a cell never cut: the words of a header wrap, a value stays whole (no_wrap on values is fine: they are short)
        t.add_column(col, justify="left" if col == "strategy" else "right", overflow="fold")
    notes: list[str] = []
    unfit: list[str] = []
    base = next((r for r in rows if r.baseline), None)
    for row in rows:
        style = "bold green" if row.chosen else None
        if row.fits:
            cells = [str(row.gpus), row.strategy, f"{row.micro_batch} x {row.grad_accum}"] + \
                ([] if one_global else [str(row.global_batch)]) + \
                [f"{row.device_gib:.1f}", f"{row.samples_per_s:,.1f}", f"{row.speedup:.2f}x" if row.speedup else "-",
                 "baseline" if row.baseline else format_efficiency(row.scaling_efficiency, row.measured)] + \
                ([format_hours(row.time_to_train_h)] if any_time else [])
            if row.changed:
                notes.append(f"{_gpus(row.gpus)}: {', '.join(row.changed)}")
        else:
            cells = [str(row.gpus), row.strategy, "-"] + ([] if one_global else ["-"]) + \
                [f"{row.device_gib:.1f}" if row.device_gib else "-", "no fit", "-", "-"] + (["-"] if any_time else [])
            if row.note:
                unfit.append(f"{_gpus(row.gpus)}: {row.note}")
        t.add_row(*cells, style=style if row.fits else "red")
    out: list[Any] = [t]
    if notes:
        lead = f"changed vs the {base.gpus}-GPU baseline" if base is not None else "notes"
        out.append(Text(f"{lead}: " + "; ".join(notes), style="dim"))
    out += [Text(note, style="dim") for note in unfit]
    return Group(*out, Text(""))


def _gpus(n: int) -> str:
    return f"{n} GPU" + ("" if n == 1 else "s")


def _path(rec, ctx):
    """The path the tree took: each node's question and its answer (the whole tree: --show tree)."""
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    g = Table.grid(padding=(0, 1))
    g.add_column(style="bold green", no_wrap=True)
    g.add_column()
    for s in rec.decision_path:
        if s.node == "A":  # the start: what is trained on what, which the header says
            continue
        g.add_row(s.node, Text.assemble((s.question, "bold"), "\n", (s.answer, "green")))
    return Panel(g, title="decision path (--show tree: the whole tree)", title_align="left")


def _tree(rec, ctx):
    from rich.panel import Panel

    return Panel(decision_tree(rec), title="decision tree (path taken highlighted)", title_align="left")


def _warnings(rec, ctx):
    if not rec.warnings:
        return None
    from rich.console import Group
    from rich.panel import Panel
    from rich.text import Text

    return Panel(Group(*[Text(f"! {w}", style="yellow") for w in rec.warnings]), title="warnings",
                 title_align="left", border_style="yellow")


def _short_risk(a) -> str:
    """An alternative's risk in a few words: its cost up to the first explanation."""
    risk = a.cost.accuracy_risk or ""
    for sep in (":", ";", " ("):
        risk = risk.split(sep, 1)[0]
    return risk.strip() or "-"


def _alternatives(rec, ctx):
    """The compact table: one line an alternative (numbers, risk in a few words), the commands once below."""
    if not rec.alternatives:
        return None
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    t = Table(title="alternatives (--show alternatives: what each gives up, in full)", title_justify="left",
              show_edge=False, pad_edge=False)
    longest = max(len(w) for a in rec.alternatives for w in a.name.split())
    for col, just in (("#", "right"), ("option", "left"), ("GiB/GPU", "right"), ("samples/s", "right"), ("risk", "left")):
        # numbers whole; an option's name wraps between its words, never inside one; the risk's words wrap
        # (a fixed width, not min_width: rich 15 wraps a later column's cells at their uncollapsed width and
        # crops the line when a min_width column is collapsed)
        t.add_column(col, justify=just, overflow="fold", no_wrap=col not in ("option", "risk"),
                     width=longest if col == "option" else None)
    commands = Table.grid(padding=(0, 2))
    commands.add_column(justify="right", style="bold", no_wrap=True)
    commands.add_column(style="dim")
    # the ones that do not fit either, on one line under the table (their long form: --show alternatives)
    unfit = [a for a in rec.alternatives if a.fits is False]
    i = 0
    for a in rec.alternatives:
        if a.fits is False:
            continue
        i += 1
        rate = f"{a.samples_per_s:,.2f}" if a.samples_per_s else "-"
        t.add_row(str(i) if a.command else "", a.name, f"{a.device_gib:.1f}" if a.device_gib else "-", rate,
                  _short_risk(a))
        if a.command:
            commands.add_row(str(i), a.command)
    out: list[Any] = [t] if t.row_count else []
    if unfit:
        out.append(Text("do not fit: " + ", ".join(
            f"{a.name} ({a.device_gib:.1f} GiB)" if a.device_gib else a.name for a in unfit), style="dim"))
    if commands.row_count:
        out += [Text("their commands:", style="bold"), commands]
    return Group(*out, Text(""))


def _alternatives_full(rec, ctx):
    if not rec.alternatives:
        return None
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    alt = Table(title="alternatives", title_justify="left", show_edge=False, show_lines=True, pad_edge=False)
    alt.add_column("option", style="bold", overflow="fold")
    alt.add_column("fits", justify="center")
    alt.add_column("estimate", ratio=3)
    alt.add_column("cost / risk", ratio=2)
    for a in rec.alternatives:
        fits = "-" if a.fits is None else ("[green]yes[/green]" if a.fits else "[red]no[/red]")
        risk = "; ".join(x for x in (a.cost.accuracy_risk, a.cost.speed if a.kind == "offload" else "") if x)
        alt.add_row(a.name, fits, a.summary, risk or "-")
    return Group(alt, Text(""))


def _rules(rec, ctx):
    from rich.text import Text

    ids = ", ".join(f.id for f in rec.rules_fired)
    return Text.assemble(("rules fired: ", "bold"), ids,
                         ("\n  `advise rules ID` explains one; --show rules: each one's why", "dim"), "\n")


def _rules_full(rec, ctx):
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    rules = Table(title="rules fired", title_justify="left", show_edge=False, show_lines=False, pad_edge=False)
    rules.add_column("id", style="bold", no_wrap=True)
    rules.add_column("why")
    for f in rec.rules_fired:
        rules.add_row(f.id, Text(f.why, style="yellow" if f.level == "warning" else ""))
    return Group(rules, Text("  `advise rules ID` explains a rule: what, why, example, source", style="dim"), Text(""))


def _launch(rec, ctx):
    from rich.panel import Panel
    from rich.text import Text

    r = rec.recommendation
    return Panel(Text(r.command, style="bold"), title=("launch it" + (f" (compromise: {r.compromise})" if r.compromise else ""))
                 if r.fits else "launch (will refuse: does not fit)",
                 title_align="left", border_style="green" if r.fits else "red")


@dataclass(frozen=True)
class Section:
    """One part of the report. ``full``: the long form ``--show NAME`` (or ``--full``) prints instead."""

    name: str
    render: Callable[[Any, "Context"], Any]
    full: Callable[[Any, "Context"], Any] | None = None
    help: str = ""


@dataclass(frozen=True)
class Context:
    width: int
    show: frozenset[str]


# The report, in order. The recommendation comes second, so it is on the first screen.
SECTIONS: list[Section] = [
    Section("header", _header),
    Section("recommendation", _recommendation),
    Section("memory", _memory),
    Section("scaling", _scaling),
    Section("tree", _path, _tree, "the whole decision tree, every branch drawn (default: the path taken)"),
    Section("warnings", _warnings),
    Section("alternatives", _alternatives, _alternatives_full,
            "each alternative's whole description and risk (default: one line each, commands below)"),
    Section("rules", _rules, _rules_full, "each fired rule's why (default: their ids)"),
    Section("launch", _launch),
]

SHOWABLE = {s.name: s.help for s in SECTIONS if s.full is not None}


def render_report(rec, console=None, *, show: frozenset[str] | set[str] = frozenset()) -> None:
    """Print ``rec`` to ``console`` (``cli.console.report_console()``); ``show``: the sections printed in
    their long form (``SHOWABLE``'s names; ``{"all"}`` for every one)."""
    from cli.console import report_console

    console = console or report_console()
    show = frozenset(SHOWABLE) if "all" in show else frozenset(show)
    ctx = Context(width=console.width, show=show)
    for s in SECTIONS:
        fn = s.full if s.full is not None and s.name in show else s.render
        part = fn(rec, ctx)
        if part is not None:
            console.print(part)


# ---------------------------------------------------------------- shared with `advise estimate`

# Colours of the peak moment's parts (advisor.memory.MemoryEstimate.peak_parts), by JSON key.
_COLORS = {"weights_gib": "blue", "gradients_gib": "magenta", "detail.live_gradients_gib": "magenta",
           "optimizer_gib": "yellow", "autocast_copies_gib": "bright_green", "activations_gib": "green",
           "detail.activations_without_copies_gib": "green", "detail.loss_temporaries_gib": "cyan",
           "detail.ddp_buckets_gib": "bright_cyan", "detail.fsdp_gathered_gib": "bright_blue",
           "detail.fsdp_kept_weights_gib": "bright_blue",
           "detail.workspace_gib": "grey62"}


def memory_bar(memory, width: int = 56):
    """A bar of the peak moment's parts (their sum is the peak) against the GPU's memory (rich Text)."""
    from rich.text import Text

    from advisor.allocator import fit_word

    width = max(20, width)
    total = memory.gpu_memory_gib
    scale = width / max(total, memory.device_gib)
    parts = memory.peak_parts
    bar = Text()
    used = 0
    for part in parts:
        n = int(round(part.gib * scale))
        n = min(n, width - used)
        bar.append("█" * n, style=_COLORS.get(part.key, "white"))
        used += n
    overhead = int(round((memory.device_gib - memory.peak_gib) * scale))
    overhead = max(0, min(overhead, width - used))
    bar.append("▒" * overhead, style="grey50")
    used += overhead
    gpu_cells = int(round(total * scale))
    if used < gpu_cells:
        bar.append("░" * (gpu_cells - used), style="grey30")
    elif used > gpu_cells:
        bar.stylize("bold red", gpu_cells, used)
    bar.append(f"  {memory.device_gib:.1f} / {total:.0f} GiB", style="bold green" if memory.fits else "bold red")
    legend = Text("  ")
    for part in parts:
        legend.append("█ ", style=_COLORS.get(part.key, "white"))
        legend.append(f"{part.name} {part.gib:.1f}  ")
    legend.append("▒ ", style="grey50")
    legend.append("allocator + CUDA context")
    out = Text()
    out.append_text(bar)
    out.append("\n")
    out.append_text(legend)
    out.append(f"\n  peak {memory.peak_gib:.1f} GiB allocated (torch.cuda.max_memory_allocated) at the "
               f"{memory.peak_at}: the parts above, which sum to it; ~{memory.device_gib:.1f} GiB in nvidia-smi; "
               + fit_word(memory), style="dim")
    if memory.other_moment:
        out.append(f"\n  {memory.other_moment}", style="dim")
    if memory.host_gib:
        per_node = (f" per node ({memory.host_node_gib / memory.host_gib:.0f} ranks x ~{memory.host_gib:.0f} GiB)"
                    if memory.host_node_gib > memory.host_gib * 1.01 else " per node")
        out.append(f"\n  host RAM: ~{memory.host_node_gib:.0f} GiB{per_node}", style="dim")
    return out


def decision_tree(rec):
    """The decision tree of rules/data/tree.toml with the path taken highlighted (rich Tree)."""
    from rich.text import Text
    from rich.tree import Tree

    from rules.tree import load_tree

    nodes = load_tree()
    steps = {s.node: s for s in rec.decision_path}
    order = [s.node for s in rec.decision_path]

    def label(node_id: str, on: bool, edge: str | None) -> Text:
        n = nodes[node_id]
        t = Text()
        if edge:
            t.append(f"{edge} → ", style="bold" if on else "grey42")
        t.append(f"{node_id} ", style="bold reverse green" if on else "grey42")
        t.append(n.question, style="bold" if on else "grey42")
        if on and node_id in steps:
            t.append(f"\n{steps[node_id].answer}", style="green")
        return t

    def grow(branch, node_id: str, on: bool, depth: int = 0) -> None:
        n = nodes[node_id]
        taken = steps[node_id].key if on and node_id in steps else None
        for key, child in n.next.items():
            child_on = on and key == taken and node_id in order and order.index(node_id) + 1 < len(order) \
                and order[order.index(node_id) + 1] == child
            sub = branch.add(label(child, child_on, key), guide_style="green" if child_on else "grey30")
            if depth < 8:
                grow(sub, child, child_on, depth + 1)

    root = Tree(label("A", True, None), guide_style="green")
    grow(root, "A", True)
    return root
