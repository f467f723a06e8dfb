"""Step 6, Runs: the history from the run store, newest first, with the queue on top.

The store is the one ``advise launch``, ``advise runs`` and the queue service (``advise serve``)
use, so queued and running runs from the service show here too; the list refreshes every two
seconds while the screen is shown (read in a worker). Enter opens a run: plan, metrics, logs.
"""

from __future__ import annotations

import time

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Static

from tui.messages import RunsLoaded
from tui.screens.base import StepScreen

REFRESH_S = 2.0


def when(t: float | None) -> str:
    return "-" if t is None else time.strftime("%m-%d %H:%M", time.localtime(t))


def took(rec) -> str:
    if rec.started is None:
        return "-"
    s = (rec.ended or time.time()) - rec.started
    return f"{s:.0f}s" if s < 120 else f"{s / 60:.0f}m" if s < 7200 else f"{s / 3600:.1f}h"


STATUS_STYLE = {"queued": "cyan", "running": "bold yellow", "succeeded": "green", "failed": "bold red",
                "cancelled": "dim"}


class RunsScreen(StepScreen):
    STEP = "runs"
    CSS_PATH = "runs.tcss"
    AUTO_FOCUS = "#runs-table"
    BINDINGS = [
        Binding("g", "refresh", "Refresh"),
    ]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.records: list = []
        self._timer = None

    def compose_body(self) -> ComposeResult:
        yield Static("", id="runs-title", classes="title")
        yield Static("", id="queue", classes="note")
        yield DataTable(id="runs-table", cursor_type="row", zebra_stripes=True)

    def on_mount(self) -> None:
        self.query_one("#runs-table", DataTable).add_columns("id", "status", "created", "time", "steps", "loss", "what")
        self.query_one("#runs-title", Static).update(f"Runs in {self.wizard.home}")

    def on_screen_resume(self) -> None:
        self.action_refresh()
        if self._timer is None:
            self._timer = self.set_interval(REFRESH_S, self.action_refresh)

    def on_screen_suspend(self) -> None:
        if self._timer is not None:
            self._timer.stop()
            self._timer = None

    def action_refresh(self) -> None:
        self._load(self.wizard.store)

    @work(thread=True, exclusive=True, group="runs")
    def _load(self, store) -> None:
        try:
            records = store.list()
            if any(r.slurm and not r.terminal for r in records):  # Slurm's state, as `advise runs` reads it
                from launcher.slurm_jobs import refresh

                records = refresh(store.settler(), records)
        except Exception as exc:  # a locked or damaged store: say so, keep the screen
            self.post_message(RunsLoaded([], f"{type(exc).__name__}: {exc}"))
            return
        self.post_message(RunsLoaded(records[::-1]))

    def on_runs_loaded(self, message: RunsLoaded) -> None:
        queue = self.query_one("#queue", Static)
        if message.error:
            queue.update(f"[b red]cannot read the run store: {message.error}[/]")
            return
        self.records = message.records
        counts = {s: sum(r.status == s for r in self.records) for s in STATUS_STYLE}
        live = counts["queued"] + counts["running"]
        queue.update(f"{len(self.records)} run(s) · queue: {counts['queued']} queued, {counts['running']} running"
                     + ("" if live else " · the queue service (`advise serve`) shares this store")
                     + ("\n[dim]Enter: open a run · g: refresh[/dim]" if self.records else
                        "\n[dim]no runs yet: launch one (F6) or `advise launch ...`[/dim]"))
        from launcher.slurm_jobs import status_text as slurm_status

        table = self.query_one("#runs-table", DataTable)
        keep = table.cursor_row
        table.clear()
        for r in self.records:
            m = r.metrics
            loss = "-" if m is None or m.last_loss is None else f"{m.last_loss:.4g}"
            status = slurm_status(r) if r.slurm else r.status  # "failed (TIMEOUT)": Slurm's words for its runs
            table.add_row(r.id, Text(status, style=STATUS_STYLE.get(r.status, "")), when(r.created), took(r),
                          "-" if m is None else str(m.steps), loss, r.label, key=r.id)
        if self.records:
            table.move_cursor(row=min(keep, len(self.records) - 1))

    @on(DataTable.RowSelected, "#runs-table")
    def _selected(self, event: DataTable.RowSelected) -> None:
        self._open(str(event.row_key.value))

    def action_open(self) -> None:
        table = self.query_one("#runs-table", DataTable)
        if self.records and table.cursor_row < len(self.records):
            self._open(self.records[table.cursor_row].id)

    def _open(self, run_id: str) -> None:
        rec = next((r for r in self.records if r.id == run_id), None)
        if rec is None:
            return
        from tui.screens.run_detail import RunDetailScreen

        self.app.push_screen(RunDetailScreen(rec))
