"""The console the report commands print to: the terminal's own width at a terminal, plain text when piped.

``advise`` and ``advise estimate`` used to force 100 columns whatever the terminal, so an 80-column
terminal wrapped every panel line in two. At a terminal rich measures it (and follows a resize between
runs); piped or redirected there is no width to measure, so the report keeps the width it was designed
for (``PIPED_WIDTH``, or ``$COLUMNS`` when set) and carries no colour or style codes: a file or ``less``
gets readable text.
"""

from __future__ import annotations

import os
import sys

PIPED_WIDTH = 100  # the report's design width (panels, the scaling table's ten columns) when nothing is measured


def report_console(*, stderr: bool = False):
    """A rich Console for a report on stdout (or stderr)."""
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(stderr=stderr, soft_wrap=False)
    columns = os.environ.get("COLUMNS", "")
    width = int(columns) if columns.isdigit() and 40 <= int(columns) <= 500 else PIPED_WIDTH
    return Console(stderr=stderr, soft_wrap=False, width=width, color_system=None, force_terminal=False,
                   highlight=False, emoji=False)
