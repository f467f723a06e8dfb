"""Every key, by where it works, built from the bindings themselves (so it cannot go stale)."""

from __future__ import annotations

import re

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

# Keys the widgets themselves handle (Textual's own bindings), listed for completeness.
WIDGET_KEYS: tuple[tuple[str, str], ...] = (
    ("tab / shift+tab", "next / previous field"),
    ("enter", "pick the row (tables), use the value (fields), open a run"),
    ("up / down", "move in tables, trees and lists; in a form, field to field"),
    ("left / right", "switch tabs when the tab bar has focus"),
    ("escape", "close this help, a dialog or a run's detail"),
    ("ctrl+p", "command palette (Textual)"),
)

_NAMES = {"question_mark": "?", "escape": "esc"}


def key_name(key: str) -> str:
    """'f1' -> 'F1', 'question_mark' -> '?', 'escape,f1' -> 'esc / F1'."""
    names = []
    for k in (part.strip() for part in key.split(",")):
        k = _NAMES.get(k, k)
        names.append(k.upper() if re.fullmatch(r"f\d+", k) else k)
    return " / ".join(names)


def binding_lines(bindings) -> list[tuple[str, str]]:
    out = []
    for b in bindings:
        if isinstance(b, Binding):
            key, desc = b.key, b.description or b.action
        else:
            key, _action, desc = (list(b) + ["", ""])[:3]
        out.append((key_name(key), desc))
    return out


def help_text(sections: list[tuple[str, list]]) -> str:
    lines = []
    for title, bindings in sections:
        rows = binding_lines(bindings)
        if not rows:
            continue
        lines.append(f"[b]{title}[/b]")
        lines += [f"  [b $accent]{k:<16}[/] {d}" for k, d in rows]
        lines.append("")
    lines.append("[b]In fields, tables and tabs[/b]")
    lines += [f"  [b $accent]{k:<16}[/] {d}" for k, d in WIDGET_KEYS]
    return "\n".join(lines)


class HelpScreen(ModalScreen[None]):
    CSS_PATH = "help.tcss"
    BINDINGS = [Binding("escape,f1,q", "dismiss", "Close help")]

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-box"):
            yield Static("[b]cardwise wizard: keys[/b]   [dim]Escape closes[/dim]\n", id="help-head")
            yield Static(help_text(self.app.help_sections()), id="help-text")
