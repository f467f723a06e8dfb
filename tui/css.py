"""Each widget's styles live in a ``.tcss`` file next to its module (screens use ``CSS_PATH``)."""

from __future__ import annotations

from pathlib import Path


def tcss(module_file: str) -> str:
    """The text of ``<module>.tcss`` beside ``module_file``, for a widget's ``DEFAULT_CSS``."""
    return Path(module_file).with_suffix(".tcss").read_text()
