"""Ask where to save the plan (Enter saves, Escape cancels); dismisses with the path or None."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Input, Label


class SavePlanScreen(ModalScreen[str | None]):
    CSS_PATH = "save_plan.tcss"
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, default: str):
        super().__init__()
        self.default = default

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("[b]Save the plan[/b] (plan.json for `advise launch --plan`)")
            yield Input(self.default, id="plan-path")
            yield Label("[dim]Enter: save · Escape: cancel[/dim]")

    @on(Input.Submitted, "#plan-path")
    def _submit(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)

    def action_cancel(self) -> None:
        self.dismiss(None)
