"""One run from the store: its plan and attempts, its metrics (loss and throughput), its logs.

Files (``metrics.jsonl``, the last attempt's ``launcher.log``) are read in a worker; Escape goes
back to the list.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.markup import escape
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.screen import Screen
from textual.widgets import Footer, Log, Static, TabbedContent, TabPane
from textual import work

from tui.messages import RunDetailLoaded
from tui.monitor import data_bound_text, read_metrics, read_tail
from tui.widgets.metric_plot import MetricPlot

DETAIL_TABS = ("detail-summary", "detail-metrics", "detail-logs")


def _when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))


def summary_text(rec) -> str:
    lines = [f"[b]{rec.label or rec.id}[/b]",
             f"created {_when(rec.created)} · started {_when(rec.started)} · ended {_when(rec.ended)}",
             f"run dir: {rec.run_dir or '-'}"]
    if rec.error:
        lines.append(f"[red]error: {rec.error}[/]")
    plan = rec.plan or {}
    if plan:
        c = plan.get("config", {})
        where = (f"{plan.get('processes_per_node')} CPU process(es)" if plan.get("cpu")
                 else f"{plan.get('processes_per_node')}x {plan.get('gpu')}") + (
            f" x {plan.get('nodes')} nodes" if (plan.get("nodes") or 1) > 1 else "")
        lines += ["", "[b]plan[/b]",
                  f"{c.get('strategy')} on {where} · {c.get('precision')} · optimizer {c.get('optimizer')}"
                  f" · compile {c.get('compile')} · checkpointing {c.get('grad_ckpt')}",
                  f"micro-batch {c.get('micro_batch')} x {c.get('grad_accum')} accumulation = global batch "
                  f"{plan.get('global_batch')} · LR {plan.get('lr'):.3g} ({plan.get('lr_scaling')}) · "
                  f"warmup {plan.get('warmup_steps')}" if isinstance(plan.get("lr"), (int, float)) else ""]
        if c.get("seq_len") or c.get("image_size"):
            lines.append(f"seq len {c.get('seq_len')}" if c.get("seq_len") else f"image size {c.get('image_size')}")
    if rec.attempts:
        lines += ["", "[b]attempts[/b]"]
        for a in rec.attempts:
            dur = f", {a.ended - a.started:.1f} s" if a.started and a.ended else ""
            lines.append(f"{a.n}: micro-batch {a.micro_batch} x {a.grad_accum}: {a.status}"
                         + (f" (exit {a.exit_code})" if a.exit_code not in (None, 0) else "") + dur
                         + (f" — {a.error}" if a.error else ""))
    m = rec.metrics
    if m is not None:
        parts = [f"{m.steps} steps", f"{m.ranks} rank(s)"]
        if m.first_loss is not None and m.last_loss is not None:
            parts.append(f"loss {m.first_loss:.4g} → {m.last_loss:.4g}")
        if m.samples_per_s:
            parts.append(f"{m.samples_per_s:,.1f} samples/s")
        if m.peak_gib is not None:
            parts.append(f"peak {m.peak_gib:.2f} GiB")
        lines += ["", "[b]metrics[/b] " + ", ".join(parts)]
        data = data_bound_text(m.data_bound)
        if data:
            lines.append("[b]data[/b] " + escape(data))
    return "\n".join(line for line in lines if line is not None)


class RunDetailScreen(Screen):
    CSS_PATH = "run_detail.tcss"
    BINDINGS = [
        Binding("escape", "app.pop_screen", "Back"),
        *[Binding(str(i + 1), f"tab('{t}')", t.removeprefix("detail-").title(), show=False)
          for i, t in enumerate(DETAIL_TABS)],
    ]

    def __init__(self, record):
        super().__init__()
        self.record = record

    def compose(self) -> ComposeResult:
        r = self.record
        yield Static(f"run [b]{r.id}[/b]: {r.status}" + (f" (exit code {r.exit_code})" if r.exit_code is not None else "")
                     + "   [dim]Escape: back[/dim]", classes="title", id="detail-title")
        with TabbedContent(id="detail-tabs"):
            with TabPane("1 Summary", id="detail-summary"):
                with VerticalScroll():
                    yield Static(summary_text(r), id="detail-text")
            with TabPane("2 Metrics", id="detail-metrics"):
                with Horizontal(id="detail-plots"):
                    yield MetricPlot("loss", id="detail-loss")
                    yield MetricPlot("samples/s (rank 0)", fmt="{:,.1f}", id="detail-thr")
                yield Static("", id="detail-rows")
            with TabPane("3 Logs", id="detail-logs"):
                yield Log(id="detail-log", max_lines=2000)
        yield Footer()

    def on_mount(self) -> None:
        self._load(self.record)

    @work(thread=True, exclusive=True, group="detail")
    def _load(self, rec) -> None:
        rows: list[dict] = []
        log: list[str] = []
        if rec.run_dir:
            rows = read_metrics(Path(rec.run_dir) / "metrics.jsonl")
            if rec.attempts and rec.attempts[-1].log_dir:
                log = read_tail(Path(rec.attempts[-1].log_dir) / "launcher.log", lines=400)
        self.post_message(RunDetailLoaded(rec.id, rows, log))

    def on_run_detail_loaded(self, message: RunDetailLoaded) -> None:
        lead = [r for r in message.rows if r.get("rank", 0) == 0]
        self.query_one("#detail-loss", MetricPlot).reset([r["loss"] for r in lead if r.get("loss") is not None])
        self.query_one("#detail-thr", MetricPlot).reset(
            [r["samples_per_s"] for r in lead if r.get("samples_per_s") is not None])
        table = ["step   loss       samples/s  (rank 0)"] + [
            f"{r['step']:<6} {r.get('loss', float('nan')):<10.4g} {r.get('samples_per_s') or 0:,.1f}" for r in lead[-12:]]
        self.query_one("#detail-rows", Static).update("\n".join(table) if lead else "[dim]no metrics recorded[/dim]")
        log = self.query_one("#detail-log", Log)
        log.clear()
        log.write_lines(message.log or ["(no log)"])

    def action_tab(self, tab: str) -> None:
        self.query_one("#detail-tabs", TabbedContent).active = tab
