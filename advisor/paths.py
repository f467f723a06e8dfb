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


def write_private_atomic(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` with mode 0600, atomically: a reader sees the old file or the
    whole new one, never half (calibration, probe factors, submissions)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path
