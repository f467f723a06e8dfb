"""The top line of every step screen: the steps with their keys, the current one marked."""

from __future__ import annotations

from rich.text import Text
from textual.widget import Widget

from tui.css import tcss

# (mode name, key, title): the wizard's steps in order; F1 is help.
STEPS: tuple[tuple[str, str, str], ...] = (
    ("hardware", "f2", "Hardware"),
    ("model", "f3", "Model"),
    ("workload", "f4", "Workload"),
    ("recommendation", "f5", "Advice"),
    ("launch", "f6", "Launch"),
    ("runs", "f7", "Runs"),
)


class StepBar(Widget):
    DEFAULT_CSS = tcss(__file__)

    def __init__(self, current: str, **kwargs):
        super().__init__(**kwargs)
        self.current = current

    def render(self) -> Text:
        t = Text(no_wrap=True, overflow="crop")
        t.append("cardwise ", style="bold")
        for mode, key, title in STEPS:
            label = f" {key.upper()} {title} "
            t.append(label, style="bold reverse" if mode == self.current else "")
        return t
