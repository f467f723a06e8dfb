"""``advise [--model NAME ...]``: the recommendation, as a rich report or DESIGN.md's JSON.

Thin: parse flags into a Request, call ``rules.api.recommend``, render. Rich is imported only for the
readable report, so ``--json`` stays fast.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from advisor.allocator import fit_word
from advisor.units import format_efficiency, format_hours
from cli.flags import (add_config_flags, add_hardware_flags, add_home_flag, add_json_flag, add_model_flags,
                       add_workload_flags, check_output_file)


def add_parser(parser: argparse.ArgumentParser, name: str) -> None:
    add_model_flags(parser, required=True)
    add_config_flags(parser)
    add_hardware_flags(parser)
    add_workload_flags(parser)
    add_home_flag(parser)
    add_json_flag(parser)
    parser.add_argument("--save-plan", type=Path, metavar="FILE", help="write the plan `advise launch --plan FILE` runs")
    parser.add_argument("--alternatives", action="store_true",
                        help="also list node H's memory compromises (no accumulation, pure-bf16, 8-bit AdamW, optimizer in backward, CPU offload, LoRA) when the standard setup fits")
    parser.epilog = ("Given flags pin a choice; the rules fill in the rest. Examples:\n"
                     "  advise --model llama3-8b --gpu A100-80GB --gpus 8 --seq-len 2048\n"
                     "  advise --model resnet50 --gpu A100-80GB --gpus 8 --dataset-size 1281167 --epochs 90 --deadline 6h")
    parser.formatter_class = argparse.RawDescriptionHelpFormatter


def run(args: argparse.Namespace) -> int:
    from advisor.calibration import load_calibration
    from advisor.errors import UserError
    from cli.flags import home_dir, request_from_namespace
    from rules.api import recommend

    check_output_file(args.save_plan, "--save-plan", "plan.json")
    # No GPU detected and none named: plan for advisor.hardware.ASSUMED_GPU, and say so.
    rec = recommend(request_from_namespace(args), calibration=load_calibration(home_dir(args)),
                    assume_if_none=True)
    if args.json:
        sys.stdout.write(rec.to_json() + "\n")
    else:
        render_report(rec)
    if args.save_plan:
        if not rec.recommendation.fits:
            raise UserError("nothing fits, so no plan was written", where=str(args.save_plan),
                            fix="pin one of the alternatives above (their commands are listed) and save that")
        rec.plan.save(args.save_plan)
        if not args.json:
            print(f"plan written to {args.save_plan}; run it with: advise launch --plan {args.save_plan}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------- rendering (shared with estimate_cmd)

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


def _tree(rec):
    """The decision tree of rules/data/tree.toml with the path taken highlighted."""
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


def render_report(rec, console=None) -> None:
    from rich.console import Group

    from cli.console import report_console
    from rich.panel import Panel
    from rich.table import Table
    from rich.text import Text

    console = console or report_console()
    r, e = rec.recommendation, rec.estimate
    hw, m = e.hardware, e.model

    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    given, given_nodes = hw.gpus_at_hand or hw.count, hw.nodes_at_hand or hw.nodes  # the hardware, not the plan
    uses = ""
    if (hw.count, hw.nodes) != (given, given_nodes):
        uses = f"; the plan uses {hw.count}" + (f" on {hw.nodes} node{'s' if hw.nodes > 1 else ''}"
                                                if hw.nodes != given_nodes else "")
    head.add_row("hardware", f"{given}x {hw.gpu} ({hw.memory_gib:.0f} GiB), {hw.interconnect}, "
                 f"{given_nodes} node{'s' if given_nodes > 1 else ''}{uses}; {'detected' if hw.detected else 'ASSUMED (no GPU detected; name yours with --gpu)' if hw.assumed else 'as named (not detected)'}")
    if hw.network:
        head.add_row("network", hw.network)
    t = e.throughput
    if t.loader is not None and (t.loader.data in ("jpeg", "decoded") or t.loader_bound):  # text never waits on it
        head.add_row("input", f"{t.loader.data} via {t.loader.loader}, {t.loader.cpus_per_gpu:g} CPU cores per GPU "
                     f"({t.loader.cpus_source})" + (f": LIMITS samples/s to {t.samples_per_s:,.0f}" if t.loader_bound else ""))
        if t.loader_bound:
            from advisor.loader import per_core_words

            head.add_row("", f"loader rate: {per_core_words(t.loader)}")
    head.add_row("model", f"{m.name}: {m.params:,} parameters ({m.family}, {m.source}); estimated as "
                 f"{m.implementation or 'unnamed code'}" + (f", loss {m.loss}" if m.loss else "")
                 + (f", trainable {m.trainable_params:,}" if m.trainable_params != m.params else ""))
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
    head.add_row("calibration", "; ".join(c.summary() for c in e.calibration) or "packaged constants only")
    console.print(Panel(head, title="[bold]cardwise[/bold]", title_align="left"))

    console.print(Panel(_tree(rec), title="decision tree (path taken highlighted)", title_align="left"))

    console.print(Panel(memory_bar(e.memory), title=f"memory per GPU ({r.strategy}, micro-batch {r.micro_batch})",
                        title_align="left"))

    if rec.scaling:
        t = Table(title="throughput and time-to-train by GPU count", title_justify="left", show_edge=False)
        for col in ("GPUs", "strategy", "micro x accum", "global", "GiB/GPU", "samples/s", "speedup", "efficiency", "time to train",
                    "changed vs baseline"):
            t.add_column(col, justify="right" if col not in ("strategy", "changed vs baseline") else "left",
                         no_wrap=col == "strategy")  # fsdp-keep whole, not "fsdp-ke…"
        for row in rec.scaling:
            style = "bold green" if row.chosen else None
            if row.fits:
                t.add_row(str(row.gpus), row.strategy, f"{row.micro_batch} x {row.grad_accum}", str(row.global_batch),
                          f"{row.device_gib:.1f}", f"{row.samples_per_s:,.1f}",
                          f"{row.speedup:.2f}x" if row.speedup else "-",
                          "baseline" if row.baseline else format_efficiency(row.scaling_efficiency, row.measured),
                          format_hours(row.time_to_train_h),
                          ", ".join(row.changed) or "-", style=style)
            else:
                # the whole note, in the wrapping last column (it was cut to 30 characters)
                t.add_row(str(row.gpus), row.strategy, "-", "-", f"{row.device_gib:.1f}" if row.device_gib else "-",
                          "does not fit" if "GiB" in row.note else "-", "-", "-", "-",
                          "-" if "GiB" in row.note else row.note or "-", style="red")
        console.print(t)
        over = [r for r in rec.scaling if r.fits and not r.baseline and (r.scaling_efficiency or 0) > 1.0]
        if over:
            console.print(f"efficiency over 100% ({', '.join(str(r.gpus) for r in over)} GPUs): that count fits a faster "
                          "configuration than the baseline, or shards the optimizer step (see 'changed'); the "
                          "per-GPU rate, not scaling headroom", style="dim")
        console.print()

    kv = Table.grid(padding=(0, 2))
    kv.add_column(style="bold")
    kv.add_column()
    fit = Text("fits", style="bold green") if r.fits else Text("DOES NOT FIT", style="bold red")
    if r.compromise and r.fits:
        fit = Text(f"fits (compromise: {r.compromise})", style="bold yellow")
    kv.add_row("strategy", Text.assemble(f"{r.strategy} on {r.gpus}x {r.gpu}" + (f" ({r.nodes} nodes)" if r.nodes > 1 else "") + "  ", fit))
    if rec.policy is not None:
        kv.add_row("policy", rec.policy.rule)
    if r.standard_verdict:
        kv.add_row("standard setup", Text(r.standard_verdict, style="red"))
    if r.compromise:
        kv.add_row("compromise", Text.assemble((r.compromise, "bold yellow"), f": gives up {r.gives_up}"))
        if r.compromise_rule:
            kv.add_row("policy", r.compromise_rule)
        if r.risk_rule:
            kv.add_row("numerical risk", f"{r.numerical_risk}: {r.risk_rule}")
    kv.add_row("batch", f"micro-batch {r.micro_batch} x accumulation {r.grad_accum} x {r.gpus} GPUs = global batch {r.global_batch}"
               + (f" (planned for pretraining, within the family's limit {r.batch_limit:,})" if r.batch_planned
                  and r.batch_limit else ""))
    if rec.policy is not None and rec.policy.batch_note:
        kv.add_row("", Text(rec.policy.batch_note, style="yellow"))
    extras = [f"precision {r.precision}", f"optimizer {r.optimizer}", f"compile {'on' if r.compile else 'off'}",
              f"checkpointing {'on' if r.grad_ckpt else 'off'}"]
    if r.channels_last:
        extras.append("channels_last")
    if r.sync_batchnorm:
        extras.append("SyncBatchNorm")
    if r.lora_rank:
        extras.append(f"LoRA r{r.lora_rank}")
    if r.optimizer_in_backward:
        extras.append("optimizer step in backward")
    if r.cpu_offload:
        extras.append("FSDP CPU offload")
    kv.add_row("training", ", ".join(extras))
    kv.add_row("learning rate", f"{r.lr:.3g} ({r.task + ' recipe, ' if r.task else ''}{r.lr_scaling} from {r.base_lr:g} at batch "
               f"{r.base_batch}), warmup {r.warmup_steps} steps"
               + (f" of {r.total_steps:,}" if r.total_steps else ""))
    if r.task_rule:
        kv.add_row("task", f"{r.task}: {r.task_rule}" + (f" ({r.task_flag} overrides)" if r.task_flag != r.task_rule else ""))
    kv.add_row("data loading", f"{r.num_workers} workers per GPU, pin_memory={r.pin_memory}, prefetch_factor={r.prefetch_factor}")
    tp = e.throughput
    speed = f"{tp.samples_per_s:,.1f} samples/s" + (f", {tp.tokens_per_s:,.0f} tokens/s" if tp.tokens_per_s else "") + \
        f", {tp.step_s:.3g} s per step, MFU {tp.mfu:.0%}"
    kv.add_row("speed", speed)
    kv.add_row("time to train", format_hours(r.time_to_train_h) + ("" if r.time_to_train_h is not None else " (give --dataset-size and --epochs)"))
    console.print(Panel(kv, title="recommendation", title_align="left", border_style="green" if r.fits else "red"))

    if rec.warnings:
        console.print(Panel(Group(*[Text(f"! {w}", style="yellow") for w in rec.warnings]), title="warnings",
                            title_align="left", border_style="yellow"))

    rules = Table(title="rules fired", title_justify="left", show_edge=False, show_lines=False)
    rules.add_column("id", style="bold", no_wrap=True)
    rules.add_column("why")
    for f in rec.rules_fired:
        rules.add_row(f.id, Text(f.why, style="yellow" if f.level == "warning" else ""))
    console.print(rules)
    console.print(Text("  `advise rules ID` explains a rule: what, why, example, source", style="dim"))
    console.print()

    if rec.alternatives:
        alt = Table(title="alternatives", title_justify="left", show_edge=False, show_lines=True)
        alt.add_column("option", style="bold")
        alt.add_column("fits", justify="center")
        alt.add_column("estimate")
        alt.add_column("cost / risk")
        for a in rec.alternatives:
            fits = "-" if a.fits is None else ("[green]yes[/green]" if a.fits else "[red]no[/red]")
            risk = "; ".join(x for x in (a.cost.accuracy_risk, a.cost.speed if a.kind == "offload" else "") if x)
            body = Text(a.summary)
            if a.command:
                body.append(f"\n{a.command}", style="dim")
            alt.add_row(a.name, fits, body, risk or "-")
        console.print(alt)
        console.print()

    console.print(Panel(Text(r.command, style="bold"), title=("launch it" + (f" (compromise: {r.compromise})" if r.compromise else ""))
                        if r.fits else "launch (will refuse: does not fit)",
                        title_align="left", border_style="green" if r.fits else "red"))
