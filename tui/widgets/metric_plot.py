"""A titled sparkline with its latest value: the loss or the throughput of a run so far."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import Label, Sparkline

from tui.css import tcss


class MetricPlot(Vertical):
    DEFAULT_CSS = tcss(__file__)

    def __init__(self, title: str, fmt: str = "{:.4g}", keep: int = 400, **kwargs):
        super().__init__(**kwargs)
        self.title = title
        self.fmt = fmt
        self.keep = keep
        self.values: list[float] = []

    def compose(self) -> ComposeResult:
        yield Label(f"{self.title}: -", classes="plot-title")
        yield Sparkline([], summary_function=max)

    def extend(self, values: list[float]) -> None:
        if not values:
            return
        self.values = (self.values + [float(v) for v in values])[-self.keep:]
        self._redraw()

    def reset(self, values: list[float] | None = None) -> None:
        self.values = [float(v) for v in values or []][-self.keep:]
        self._redraw()

    def _redraw(self) -> None:
        last = self.fmt.format(self.values[-1]) if self.values else "-"
        lo_hi = f"  (min {self.fmt.format(min(self.values))}, max {self.fmt.format(max(self.values))})" if len(self.values) > 1 else ""
        self.query_one(".plot-title", Label).update(f"{self.title}: {last}{lo_hi}")
        self.query_one(Sparkline).data = list(self.values)
