"""Reading a live run: metrics rows as they are appended, log lines by rank, device usage.

Plain Python for the launch screen's workers (no textual). The runner echoes the launcher's
log, where torchrun prefixes every rank's line with ``[defaultN]:``; ``LineSink`` is the file
object it echoes into, and ``split_rank`` files each line under its rank.
"""

from __future__ import annotations

import collections
import json
import re
import threading
from pathlib import Path

# Device usage is read by the one sampler (advisor.sampling) that detection and bench use too;
# the OOM retry line is the runner's (launcher.oom). Both re-exported for the screens.
from advisor.sampling import DeviceSample, DeviceSampler, FixedSampler  # noqa: F401
from launcher.data_wait import DataBound, check, on_cpu, wait_share
from launcher.oom import OOM_RETRY_MARK  # noqa: F401

_RANK_RE = re.compile(r"^\[default(\d+)\]:(.*)$")


def split_rank(line: str) -> tuple[int | None, str]:
    """``'[default1]:step 3 ...'`` -> ``(1, 'step 3 ...')``; unprefixed lines -> ``(None, line)``."""
    m = _RANK_RE.match(line)
    if m:
        return int(m.group(1)), m.group(2)
    return None, line


class LineSink:
    """A write-only text file that keeps whole lines for another thread to drain (thread-safe)."""

    def __init__(self, keep: int = 2000):
        self._lock = threading.Lock()
        self._lines: collections.deque[str] = collections.deque(maxlen=keep)
        self._partial = ""

    def write(self, text: str) -> int:
        with self._lock:
            parts = (self._partial + text).split("\n")
            self._partial = parts.pop()
            self._lines.extend(p.rstrip("\r") for p in parts)
        return len(text)

    def flush(self) -> None:
        pass

    def drain(self, final: bool = False) -> list[str]:
        with self._lock:
            out = list(self._lines)
            self._lines.clear()
            if final and self._partial:
                out.append(self._partial)
                self._partial = ""
        return out


class MetricsTail:
    """New rows of a growing ``metrics.jsonl`` on each ``read()`` (a cut-off last line waits)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.offset = 0
        self._partial = b""

    def read(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read()
        except OSError:
            return []
        self.offset += len(chunk)
        data = self._partial + chunk
        lines = data.split(b"\n")
        self._partial = lines.pop()
        rows = []
        for line in lines:
            try:
                row = json.loads(line)
            except (ValueError, RecursionError):  # a line cut short, or nested thousands deep
                continue
            if isinstance(row, dict) and "step" in row:
                rows.append(row)
        return rows


def read_metrics(path: Path) -> list[dict]:
    return MetricsTail(path).read()


def read_tail(path: Path, lines: int = 200, limit: int = 200_000) -> list[str]:
    """The last ``lines`` lines of a text file ([] when it is missing)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - limit))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


class LiveDataCheck:
    """The data-bound check (``launcher.data_wait``) over a live run: the ranks' data-wait rows
    and the monitor's own GPU readings, taken while training rows arrive."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.util: list[float] = []
        # The steps the rows cover, kept as rows arrive: rebuilt from all rows, every tick would cost O(n).
        self.steps: set = set()

    def add(self, rows: list[dict], devices: list) -> DataBound | None:
        new = [r for r in rows if "data_wait_s" in r]
        self.rows += new
        self.steps.update(r.get("step") for r in new)
        gpus = [d.util_pct for d in devices if d.label.startswith("GPU") and d.util_pct is not None]
        if gpus and len(self.steps) > 1:  # past the first logged interval
            self.util.append(sum(gpus) / len(gpus))
        return check(wait_share(self.rows), self.util, cpu=on_cpu(self.rows))


def data_bound_text(bound) -> str | None:
    """One line for the screens: the verdict (a ``DataBound`` or its JSON), and the fix when flagged."""
    if bound is None:
        return None
    b = bound if isinstance(bound, DataBound) else DataBound.model_validate(bound)
    return b.message + (f"; fix: {b.fix}" if b.flagged and b.fix else "")
