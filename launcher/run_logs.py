"""What a launch's logs and exit status say: the failing rank, each rank's log files, an exit in words.

Read after a launch ends (``launcher.runner``) and by anything showing a run's logs; plain text
parsing of torchrun's and Accelerate's own reports, no processes.
"""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path


def exit_text(rc: int) -> str:
    if rc < 0:
        try:
            return f"signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"signal {-rc}"
    return f"exit code {rc}"


def read_tail(path: Path, limit: int = 200_000) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - limit))
            return f.read().decode(errors="replace")
    except OSError:
        return ""


_ROOT_RE = re.compile(r"Root Cause.*?rank\s*:\s*(\d+).*?exitcode\s*:\s*(-?\d+)", re.S)
_CALLED_RE = re.compile(r"returned non-zero exit status (-?\d+)")
_DIED_RE = re.compile(r"died with <Signals\.\w+: (\d+)>")


def failing_rank(launcher_log: str) -> tuple[int | None, int | None]:
    """(rank, exit code) of the first failure, from torchrun's report or the single-process launcher's."""
    m = _ROOT_RE.search(launcher_log)
    if m:
        return int(m.group(1)), int(m.group(2))
    m = _CALLED_RE.search(launcher_log)
    if m:
        return 0, int(m.group(1))
    m = _DIED_RE.search(launcher_log)
    if m:
        return 0, -int(m.group(1))
    return None, None


def rank_logs(attempt_dir: Path, node_rank: int = 0, procs_per_node: int = 1) -> dict[int, list[Path]]:
    """Global rank -> its log files. With several ranks torchrun writes ``ranks/<id>/attempt_0/<local>/``;
    a single rank's output is the launcher's own log."""
    attempt_dir = Path(attempt_dir)
    found: dict[int, list[Path]] = {}
    for f in sorted((attempt_dir / "ranks").glob("*/attempt_*/*/std*.log")):
        local = int(f.parent.name)
        found.setdefault(node_rank * procs_per_node + local, []).append(f)
    if not found and (attempt_dir / "launcher.log").exists():
        found[node_rank * procs_per_node] = [attempt_dir / "launcher.log"]
    return found
