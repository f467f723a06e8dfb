"""Per-GPU memory breakdown as one stacked bar against the GPU's memory.

The parts are the peak moment's, by kind, named as everywhere else (``advisor.memory.part_label``:
the JSON key's words, so "optimizer 15.0" is ``memory.optimizer_gib``); they add up to the predicted
peak (issue 40). The bar's cells past the GPU's capacity are drawn in red, the capacity
itself as a thick mark.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from rich.text import Text
from textual.widget import Widget

from advisor.memory import part_label
from tui.css import tcss

if TYPE_CHECKING:
    from advisor.memory import MemoryEstimate

# (JSON key, label, colour): the labels are advisor.memory's, never a TUI abbreviation.
PARTS: tuple[tuple[str, str, str], ...] = tuple((key, part_label(key), color) for key, color in (
    ("weights_gib", "dodger_blue2"),
    ("gradients_gib", "medium_purple"),
    ("optimizer_gib", "dark_orange"),
    ("autocast_copies_gib", "spring_green3"),
    ("activations_gib", "green3"),
    ("other_gib", "cyan"),
))


def part_sizes(memory: MemoryEstimate) -> list[float]:
    """GiB of each of ``PARTS``, in their order."""
    return [getattr(memory, key) for key, _, _ in PARTS]


def bar_cells(sizes: Sequence[float], gpu_gib: float, width: int) -> list[tuple[str, str]]:
    """(char, style) per cell: the stacked parts (GiB, in ``PARTS`` order), then empty cells up to
    the larger of total and GPU."""
    scale = max(sum(sizes), gpu_gib, 1e-9)
    cells: list[tuple[str, str]] = []
    edge = 0.0
    for size, (_, _, color) in zip(sizes, PARTS):
        edge += size
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
        self.memory: MemoryEstimate | None = None
        self.gpu_gib: float = 0.0

    def show(self, memory: MemoryEstimate, gpu_gib: float) -> None:
        self.memory = memory
        self.gpu_gib = float(gpu_gib)
        self.refresh()

    def render(self) -> Text:
        if self.memory is None:
            return Text("memory: -", style="dim")
        width = max(10, self.size.width - 2)
        sizes = part_sizes(self.memory)
        t = Text(no_wrap=True, overflow="crop")
        for ch, style in bar_cells(sizes, self.gpu_gib, width):
            t.append(ch, style=style)
        t.append("\n")
        items = [(f"{name} {size:.1f}", color) for size, (_, name, color) in zip(sizes, PARTS)] + [("GiB", None)]
        used = 0
        for text, color in items:  # the legend wraps between items, never inside one (a narrow terminal)
            shown = len(text) + (2 if color else 0)  # "■ " + text
            if used and used + shown > width:
                t.append("\n")
                used = 0
            if color:
                t.append("■ ", style=color)
            t.append(text + "  ")
            used += shown + 2
        t.append("\n")
        peak, fits = self.memory.peak_gib, self.memory.fits
        pct = f" ({peak / self.gpu_gib:.0%})" if self.gpu_gib else ""
        t.append(f"peak {peak:.1f} GiB of {self.gpu_gib:.0f} GiB{pct}")
        t.append(f", nvidia-smi ~{self.memory.device_gib:.1f} GiB")
        t.append(" · ")
        t.append("fits" if fits else "does not fit", style="bold green" if fits else "bold red")
        return t
