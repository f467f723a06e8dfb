"""Per-device utilisation and memory bars (GPUs from NVML, or the CPU when there is none)."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from tui.css import tcss


def _bar(frac: float | None, width: int) -> Text:
    t = Text()
    if frac is None:
        return t.append("?".center(width), style="dim")
    filled = round(max(0.0, min(1.0, frac)) * width)
    style = "green" if frac < 0.7 else "yellow" if frac < 0.9 else "red"
    t.append("█" * filled, style=style)
    t.append("░" * (width - filled), style="grey37")
    return t


class DeviceBars(Widget):
    DEFAULT_CSS = tcss(__file__)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.samples: list = []

    def show(self, samples: list) -> None:
        self.samples = list(samples)
        self.refresh(layout=True)

    def get_content_height(self, container, viewport, width: int) -> int:
        return max(1, len(self.samples))

    def render(self) -> Text:
        if not self.samples:
            return Text("devices: -", style="dim")
        width = max(4, (self.size.width - 26) // 2)
        t = Text(no_wrap=True, overflow="crop")
        for i, s in enumerate(self.samples):
            if i:
                t.append("\n")
            t.append(f"{s.label:<5}")
            t.append_text(_bar(None if s.util_pct is None else s.util_pct / 100, width))
            t.append(" ?%  " if s.util_pct is None else f"{s.util_pct:3.0f}% ")
            frac = None if not s.mem_total_gib else (s.mem_used_gib or 0) / s.mem_total_gib
            t.append_text(_bar(frac, width))
            if s.mem_total_gib:
                t.append(f" {s.mem_used_gib or 0:.1f}/{s.mem_total_gib:.0f}G")
        return t
