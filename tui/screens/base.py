"""What every step screen has: the step bar on top, the footer of keys at the bottom."""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer

from tui.widgets.step_bar import StepBar


class StepScreen(Screen):
    STEP: ClassVar[str] = ""

    def compose(self) -> ComposeResult:
        yield StepBar(self.STEP)
        yield from self.compose_body()
        yield Footer()

    def compose_body(self) -> ComposeResult:
        return iter(())

    @property
    def wizard(self):
        """The CardwiseApp (typed loosely: screens are built by the app's modes)."""
        return self.app
