"""One labelled form field: label, compact input, and a hint that turns into the error message.

The input carries a ``ParserValidator`` built on the CLI's own parsers; an invalid value gets
Textual's ``-invalid`` style on the input and its message in the hint column, and the row's
``value`` stays the last valid one, so the screen never computes with a bad value.
"""

from __future__ import annotations

from typing import Any

from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import Input, Label, Static

from tui.css import tcss
from tui.fields import FieldSpec, ParserValidator, parse_optional


class FormRow(Horizontal):
    DEFAULT_CSS = tcss(__file__)

    def __init__(self, spec: FieldSpec, value: str = "", **kwargs):
        super().__init__(id=f"row-{spec.name}", classes="form-row", **kwargs)
        self.spec = spec
        self._initial = value
        self.error: str | None = None
        self.problem: str | None = None  # a cross-field problem the screen sets

    def compose(self) -> ComposeResult:
        yield Label(self.spec.label, classes="form-label")
        yield Input(self._initial, placeholder=self.spec.placeholder, id=f"in-{self.spec.name}", compact=True,
                    validators=[ParserValidator(self.spec.parse)], validate_on=["changed", "submitted"],
                    classes="form-input")
        yield Static(self.spec.hint, classes="form-hint")

    @property
    def input(self) -> Input:
        return self.query_one(Input)

    @property
    def valid(self) -> bool:
        return self.error is None

    @property
    def value(self) -> Any:
        """The parsed value (None when empty); only meaningful while ``valid``."""
        try:
            return parse_optional(self.spec.parse, self.input.value)
        except ValueError:
            return None

    def on_input_changed(self, event: Input.Changed) -> None:
        result = event.validation_result
        self.error = None if result is None or result.is_valid else "; ".join(result.failure_descriptions)
        self._show()

    def set_problem(self, message: str | None) -> None:
        self.problem = message
        self._show()

    def set_placeholder(self, text: str) -> None:
        self.input.placeholder = text

    def _show(self) -> None:
        hint = self.query_one(".form-hint", Static)
        message = self.error or self.problem
        hint.update(message or self.spec.hint)
        hint.set_class(message is not None, "-error")
        self.set_class(self.error is not None, "-invalid")
        self.input.set_class(message is not None, "-problem")
