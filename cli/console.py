"""The console the report commands print to: the terminal's own width at a terminal, plain text when piped.

``advise`` and ``advise estimate`` used to force 100 columns whatever the terminal, so an 80-column
terminal wrapped every panel line in two. At a terminal rich measures it (and follows a resize between
runs). Piped or redirected (``advise ... | less``), the output follows the terminal the command was typed
in when one is known (stderr's or stdin's, issue 40), else the width the report was designed for
(``PIPED_WIDTH``); ``$COLUMNS``, when set, wins over both. Piped output carries no colour or style codes:
a file or ``less`` gets readable text.
"""

from __future__ import annotations

import os
import sys

PIPED_WIDTH = 100  # the report's design width when nothing is measured
_WIDTHS = (40, 500)  # a width outside this is a mistake, not a terminal


def _terminal_width() -> int | None:
    """The width of the terminal behind stderr or stdin (the one the command was typed in), if any."""
    for fd in (2, 0):
        try:
            if os.isatty(fd):
                cols = os.get_terminal_size(fd).columns
                if _WIDTHS[0] <= cols <= _WIDTHS[1]:
                    return cols
        except OSError:
            continue
    return None


def piped_width() -> int:
    """The width of a report that does not go to a terminal: $COLUMNS, else the terminal behind stderr or
    stdin, else ``PIPED_WIDTH``."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and _WIDTHS[0] <= int(columns) <= _WIDTHS[1]:
        return int(columns)
    return _terminal_width() or PIPED_WIDTH


def report_console(*, stderr: bool = False):
    """A rich Console for a report on stdout (or stderr)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr, soft_wrap=False)
    return Console(stderr=stderr, soft_wrap=False, width=piped_width(), color_system=None, force_terminal=False,
                   highlight=False, emoji=False)
