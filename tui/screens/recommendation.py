"""Step 4, Recommendation: what to run and why, from the rules layer.

Tabs: Summary (the configuration, memory bar against the GPU's memory, speed, the launch
command), Tree (the decision tree with the path taken), Scaling (throughput and time-to-train on
1..N GPUs), Rules (each rule fired, with its why) and Alternatives (compromises with their cost,
and warnings). ``s`` saves the plan, ``c`` copies the launch command, ``l`` goes to Launch.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rich.markup import escape
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import DataTable, Static, TabbedContent, TabPane, Tree

from advisor.errors import UserError
from advisor.setup.checkpointing import checkpointing_words
from advisor.setup import labels
from advisor.units import format_efficiency
from advisor.units import format_hours
from tui import compute
from tui.messages import RecommendationReady
from tui.screens.base import StepScreen
from tui.widgets.decision_tree import DecisionTree
from tui.widgets.memory_bar import MemoryBar

if TYPE_CHECKING:
    from rules.recommend import Alternative, Recommendation, ScalingRow

TABS = ("tab-summary", "tab-tree", "tab-scaling", "tab-rules", "tab-alts")


def _yn(v: bool) -> str:
    return "yes" if v else "no"


def config_text(rec: Recommendation) -> str:
    r = rec.recommendation
    where = f"{r.gpus} GPU(s)" + (f" on {r.nodes} nodes" if r.nodes > 1 else "")
    lines = []
    if r.standard_verdict:
        lines.append(f"[red]{escape(r.standard_verdict)}[/red]")
    if r.compromise:
        lines.append(f"[b yellow]compromise: {r.compromise}[/] · gives up {escape(r.gives_up or '')}")
    lines += [
        f"[b]{r.strategy.upper()}[/b] on {where} · precision [b]{r.precision}[/b]"
        f" · compile {_yn(r.compile)} · checkpointing "
        + (_yn(r.grad_ckpt) if (ckpt := checkpointing_words(r)) in ("on", "off") else ckpt)
        + "".join(f" · {t}" for t in labels(r, r.compromise, style="tui")),
        f"micro-batch {r.micro_batch} x {r.grad_accum} accumulation x {r.gpus} GPU(s)"
        f" = global batch [b]{r.global_batch}[/b]",
        f"LR {r.lr:.3g} ({r.lr_scaling} scaling) · warmup {r.warmup_steps} steps"
        f" · {r.num_workers} dataloader workers per GPU",
    ]
    m = rec.estimate.memory
    if m.peak_parts:  # the peak moment's parts: they sum to the peak (the bar shows the totals by kind)
        lines.append(f"peak at the {m.peak_at}: " + " + ".join(f"{p.name} {p.gib:.1f}" for p in m.peak_parts)
                     + f" = {m.peak_gib:.1f} GiB" + (f" · {m.other_moment}" if m.other_moment else ""))
    return "\n".join(lines)


def speed_text(rec: Recommendation) -> str:
    t = rec.estimate.throughput
    parts = [f"{t.samples_per_s:,.1f} samples/s"]
    if t.tokens_per_s:
        parts[0] += f" ({t.tokens_per_s:,.0f} tokens/s)"
    parts.append(f"step {t.step_s:.3g} s")
    parts.append(f"MFU {t.mfu:.0%}")
    parts.append(f"time to train [b]{format_hours(rec.estimate.time_to_train_h)}[/b]")
    return " · ".join(parts)


def rules_table(rec: Recommendation):
    """Each rule fired: its id (warnings in yellow) and why, as a two-column table that wraps."""
    from rich.table import Table
    from rich.text import Text

    if not rec.rules_fired:
        return Text("no rules fired", style="dim")
    t = Table(show_header=False, box=None, padding=(0, 1, 0, 0), expand=True)
    t.add_column("id", style="bold", no_wrap=True, max_width=28)
    t.add_column("why", ratio=1)
    for r in rec.rules_fired:
        t.add_row(Text(r.id, style="bold yellow" if r.level == "warning" else "bold"), r.why)
    return t


def _alt_line(a: Alternative) -> str:
    """One alternative: name, summary, numbers, cost."""
    mark = "" if a.fits is None else (" [green](fits)[/]" if a.fits else " [red](does not fit)[/]")
    out = f"• [b]{a.name}[/b]{mark}: {a.summary}"
    nums = [f"{a.strategy} on {a.gpus} GPU(s)"]
    if a.peak_gib is not None:
        nums.append(f"peak {a.peak_gib:.1f} GiB")
    if a.samples_per_s is not None:
        nums.append(f"{a.samples_per_s:,.1f} samples/s")
    if a.time_to_train_h is not None:
        nums.append(f"time to train {format_hours(a.time_to_train_h)}")
    costs = [f"{k.replace('_', ' ')}: {v}" for k, v in a.cost.model_dump().items() if v]
    out += f"\n  [dim]{' · '.join(nums)}[/dim]"
    if costs:
        out += f"\n  [yellow]cost[/yellow] {'; '.join(costs)}"
    if a.command:
        out += f"\n  [dim]$ {a.command}[/dim]"
    return out


def alternatives_text(rec: Recommendation) -> str:
    out = ["[b]Alternatives[/b]"] + ([_alt_line(a) for a in rec.alternatives] or ["[dim]none needed[/dim]"])
    if rec.warnings:
        out += ["", "[b yellow]Warnings[/b yellow]"] + [f"! {w}" for w in rec.warnings]
    return "\n".join(out)


def _num(v: float | None, fmt: str, none: str = "-") -> str:
    return none if v is None else fmt.format(v)


def scaling_cells(row: ScalingRow) -> tuple[str, ...]:
    """One row of the rules' 1..N GPU table."""
    gpus = f"{'▶' if row.chosen else ' '}{row.gpus}"
    if not row.fits:
        return (gpus, row.strategy, "-", "-", "-", "-", _num(row.device_gib, "{:.0f}*"), "no")
    accum = f"{row.micro_batch}x{row.grad_accum}" if row.micro_batch else "-"
    eff = "base" if row.baseline else ("" if row.scaling_efficiency is None else format_efficiency(row.scaling_efficiency, row.measured))
    speed = " ".join(x for x in (_num(row.speedup, "{:.2f}x", ""), eff) if x)
    return (gpus, row.strategy, accum, _num(row.samples_per_s, "{:,.1f}"), speed or "-",
            format_hours(row.time_to_train_h), _num(row.peak_gib, "{:.1f}"), "yes")


SCALING_COLUMNS = ("GPUs", "strategy", "micro", "samples/s", "speedup eff", "time", "peak GiB", "fits")


class RecommendationScreen(StepScreen):
    STEP = "recommendation"
    CSS_PATH = "recommendation.tcss"
    BINDINGS = [
        Binding("s", "save_plan", "Save plan"),
        Binding("c", "copy_command", "Copy command"),
        Binding("l", "launch", "Launch"),
        Binding("g", "recompute", "Recompute", show=False),
        *[Binding(str(i + 1), f"tab('{t}')", t.removeprefix("tab-").title(), show=False) for i, t in enumerate(TABS)],
    ]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.shown_version = -1

    def compose_body(self) -> ComposeResult:
        yield Static("", id="rec-title", classes="title")
        with TabbedContent(id="rec-tabs"):
            with TabPane("1 Summary", id="tab-summary"):
                yield Static("", id="rec-config")
                yield MemoryBar(id="membar")
                yield Static("", id="rec-speed")
                yield Static("", id="rec-command")
            with TabPane("2 Tree", id="tab-tree"):
                yield DecisionTree(id="tree")
                yield Static("", id="tree-why")
            with TabPane("3 Scaling", id="tab-scaling"):
                yield DataTable(id="scaling", cursor_type="row", zebra_stripes=True)
                yield Static("", id="scaling-note", classes="note")
            with TabPane("4 Rules", id="tab-rules"):
                with VerticalScroll():
                    yield Static("", id="rules")
            with TabPane("5 Alternatives", id="tab-alts"):
                with VerticalScroll():
                    yield Static("", id="alts")

    def on_mount(self) -> None:
        self.query_one("#scaling", DataTable).add_columns(*SCALING_COLUMNS)

    def on_screen_resume(self) -> None:
        view = self.wizard.recommendation
        if view is not None and self.shown_version == self.wizard.version:
            return
        if view is not None:
            self._show_view(view)
            return
        self.action_recompute()

    # -------------------------------------------------------------- computing
    def action_recompute(self) -> None:
        if self.wizard.problems:
            step, message = next(iter(self.wizard.problems.items()))
            key = {"hardware": "F2", "workload": "F4"}.get(step, "")
            self.query_one("#rec-title", Static).update(f"[b red]{message}[/] — fix it on the {step.title()} screen ({key})")
            return
        if self.wizard.state.model is None:
            self.query_one("#rec-title", Static).update("[b red]no model chosen[/] — pick one on the Model screen (F3)")
            return
        self.query_one("#rec-title", Static).update("computing the recommendation …")
        self._compute(self.wizard.version, self.wizard.state.snapshot(), self.wizard.machine, self.wizard.home)

    @work(thread=True, exclusive=True, group="recommend")
    def _compute(self, version: int, state, machine, home) -> None:
        try:
            view = compute.recommend(state, machine, home)
        except UserError as exc:
            self.post_message(RecommendationReady(version, None, exc.message()))
            return
        except Exception as exc:  # shown, not raised: the wizard keeps running
            self.post_message(RecommendationReady(version, None, f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(RecommendationReady(version, view))

    def on_recommendation_ready(self, message: RecommendationReady) -> None:
        if message.token != self.wizard.version:
            return
        if message.view is None:
            self.query_one("#rec-title", Static).update(f"[b red]{message.error}[/]")
            return
        self.wizard.recommendation = message.view
        self._show_view(message.view)

    # -------------------------------------------------------------- rendering
    def _show_view(self, view: compute.RecView) -> None:
        self.shown_version = self.wizard.version
        rec, r = view.rec, view.rec.recommendation
        fits = "" if r.fits else " [b red](does not fit)[/]"
        if r.compromise and r.fits:
            fits = f" [b yellow](compromise: {r.compromise})[/]"
        self.query_one("#rec-title", Static).update(
            f"{view.model.name} on {view.hardware_label}: [b]{r.strategy.upper()}[/b] on {r.gpus} GPU(s){fits}")
        self.query_one("#rec-config", Static).update(config_text(rec))
        self.query_one("#membar", MemoryBar).show(rec.estimate.memory, rec.estimate.hardware.memory_gib)
        self.query_one("#rec-speed", Static).update(speed_text(rec))
        cmd = view.command
        self.query_one("#rec-command", Static).update(
            (f"[b]$[/b] {cmd}\n" if cmd else "") + "[dim]c: copy command · s: save plan · l: launch[/dim]")
        tree = self.query_one("#tree", DecisionTree)
        tree.show(view.tree, rec.decision_path)
        self._explain(tree.cursor_node.data if tree.cursor_node else None)
        table = self.query_one("#scaling", DataTable)
        table.clear()
        for row in rec.scaling:
            table.add_row(*scaling_cells(row))
        # the policy that chose the count (docs/design.md "Decision policy"), first
        notes = [f"[b]policy:[/b] {escape(rec.policy.rule)}"] if rec.policy is not None else []
        if rec.policy is not None and rec.policy.batch_note:  # a small per-GPU batch caps scaling (issue 37)
            notes.append(f"[b]batch:[/b] {escape(rec.policy.batch_note)}")
        notes += [f"{row.gpus} GPU(s): {row.note}" for row in rec.scaling if row.note]
        notes += [f"{row.gpus} GPU(s) changed besides the count: {', '.join(row.changed)}" for row in rec.scaling if row.changed]
        self.query_one("#scaling-note", Static).update(
            "\n".join(notes + ["▶ recommended · micro = micro-batch x accumulation · * GiB needed per GPU when it "
                                "does not fit · estimates: `advise bench` measures and calibrates"])
            if rec.scaling else "no plan to scale")
        self.query_one("#rules", Static).update(rules_table(rec))
        self.query_one("#alts", Static).update(alternatives_text(rec))

    @on(Tree.NodeHighlighted, "#tree")
    def _highlight(self, event: Tree.NodeHighlighted) -> None:
        self._explain(event.node.data)

    def _explain(self, info) -> None:
        self.query_one("#tree-why", Static).update(DecisionTree.explain(info))

    # -------------------------------------------------------------- actions
    def action_tab(self, tab: str) -> None:
        self.query_one("#rec-tabs", TabbedContent).active = tab

    def action_copy_command(self) -> None:
        view = self.wizard.recommendation
        if view is None or not view.command:
            self.notify("no command yet", severity="warning")
            return
        self.app.copy_to_clipboard(view.command)
        self.action_tab("tab-summary")
        self.notify(f"copied: {view.command}", title="launch command", timeout=4)

    def action_save_plan(self) -> None:
        view = self.wizard.recommendation
        if view is None:
            self.notify("no plan yet", severity="warning")
            return
        from tui.screens.save_plan import SavePlanScreen

        default = Path.cwd() / f"plan-{view.model.name.replace('/', '_')}.json"

        def save(path: str | None) -> None:
            if not path:
                return
            target = Path(path).expanduser()
            try:
                target.parent.mkdir(parents=True, exist_ok=True)
                view.plan.save(target)
            except OSError as exc:
                self.notify(f"cannot write {target}: {exc.strerror}", severity="error")
                return
            except UserError as exc:  # Plan.save names the file and the fix
                self.notify(exc.message(), severity="error")
                return
            self.notify(f"saved plan to {target}\nlaunch it with: advise launch --plan {target} --recipe synthetic",
                        title="plan saved", timeout=6)

        self.app.push_screen(SavePlanScreen(str(default)), save)

    def action_launch(self) -> None:
        self.app.action_step("launch")
