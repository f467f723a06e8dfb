"""Per-GPU memory breakdown as one stacked bar against the GPU's memory.

The parts are the estimator's (weights, gradients, optimizer states, activations, other); the
predicted peak is the larger of the two moments the estimator models, so the parts can add up
to more than the peak. The bar's cells past the GPU's capacity are drawn in red, the capacity
itself as a thick mark.
"""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from tui.css import tcss

PARTS: tuple[tuple[str, str, str], ...] = (
    ("weights_gib", "weights", "dodger_blue2"),
    ("gradients_gib", "grads", "medium_purple"),
    ("optimizer_gib", "optim", "dark_orange"),
    ("activations_gib", "activ", "green3"),
    ("other_gib", "other", "cyan"),
)


def bar_cells(memory: dict, gpu_gib: float, width: int) -> list[tuple[str, str]]:
    """(char, style) per cell: the stacked parts, then empty cells up to the larger of total and GPU."""
    total = sum(float(memory.get(k) or 0.0) for k, _, _ in PARTS)
    scale = max(total, gpu_gib, 1e-9)
    cells: list[tuple[str, str]] = []
    edge = 0.0
    for key, _, color in PARTS:
        edge += float(memory.get(key) or 0.0)
        upto = round(edge / scale * width)
        cells += [("█", color)] * max(0, upto - len(cells))
    cells += [("░", "grey37")] * (width - len(cells))
    cap = min(width, round(gpu_gib / scale * width))
    for i in range(cap, width):
        if cells[i][0] == "█":
            cells[i] = ("█", "red")
    if 0 < cap < width:
        cells.insert(cap, ("┃", "bold white"))
        cells.pop()
    return cells


class MemoryBar(Widget):
    DEFAULT_CSS = tcss(__file__)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.memory: dict = {}
        self.gpu_gib: float = 0.0

    def show(self, memory: dict, gpu_gib: float) -> None:
        self.memory = dict(memory)
        self.gpu_gib = float(gpu_gib)
        self.refresh()

    def render(self) -> Text:
        if not self.memory:
            return Text("memory: -", style="dim")
        width = max(10, self.size.width - 2)
        t = Text(no_wrap=True, overflow="crop")
        for ch, style in bar_cells(self.memory, self.gpu_gib, width):
            t.append(ch, style=style)
        t.append("\n")
        for key, name, color in PARTS:
            t.append("■ ", style=color)
            t.append(f"{name} {float(self.memory.get(key) or 0):.1f}  ")
        t.append("GiB\n")
        peak = float(self.memory.get("peak_gib") or 0)
        fits = bool(self.memory.get("fits"))
        pct = f" ({peak / self.gpu_gib:.0%})" if self.gpu_gib else ""
        t.append(f"peak {peak:.1f} GiB of {self.gpu_gib:.0f} GiB{pct}")
        device = self.memory.get("device_gib")
        if device is not None:
            t.append(f", nvidia-smi ~{float(device):.1f} GiB")
        t.append(" · ")
        t.append("fits" if fits else "does not fit", style="bold green" if fits else "bold red")
        return t
