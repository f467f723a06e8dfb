"""Where cardwise keeps state (run store, run directories, calibration): resolution only.

``--home DIR``, else ``$CARDWISE_HOME``, else the user's XDG data directory. Creating it (with
owner-only modes) is the launcher's job (``launcher/home.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

ENV_HOME = "CARDWISE_HOME"


def resolve_home(explicit: str | os.PathLike | None = None) -> Path:
    """The home directory to use, without creating it."""
    if explicit:
        return Path(explicit).expanduser().absolute()
    env = os.environ.get(ENV_HOME)
    if env:
        return Path(env).expanduser().absolute()
    from platformdirs import user_data_dir

    return Path(user_data_dir("cardwise"))
