"""The tail of a run's log, by rank: all lines, or one rank's (``r`` cycles on the launch screen)."""

from __future__ import annotations

import collections

from textual.widgets import Log

from tui.css import tcss


class RankLog(Log):
    DEFAULT_CSS = tcss(__file__)

    def __init__(self, keep: int = 2000, **kwargs):
        super().__init__(max_lines=keep, auto_scroll=True, **kwargs)
        self.entries: collections.deque[tuple[int | None, str]] = collections.deque(maxlen=keep)
        self.rank: int | None = None  # None = every line
        self.ranks: set[int] = set()

    def add(self, entries: list[tuple[int | None, str]]) -> None:
        shown = []
        for rank, text in entries:
            self.entries.append((rank, text))
            if rank is not None:
                self.ranks.add(rank)
            if self.rank is None or rank == self.rank:
                shown.append(self._fmt(rank, text))
        if shown:
            self.write_lines(shown)

    def reset(self, ranks=()) -> None:
        """Empty it; ``ranks`` are the run's ranks (listed by the filter even before they print)."""
        self.entries.clear()
        self.ranks = set(ranks)
        self.rank = None
        self.clear()

    def cycle(self) -> str:
        """Next filter: all -> rank 0 -> rank 1 -> ... -> all. Returns its name."""
        order: list[int | None] = [None, *sorted(self.ranks)]
        i = order.index(self.rank) if self.rank in order else 0
        self.rank = order[(i + 1) % len(order)]
        self.clear()
        self.write_lines([self._fmt(r, t) for r, t in self.entries if self.rank is None or r == self.rank])
        return self.filter_name

    @property
    def filter_name(self) -> str:
        return "all ranks" if self.rank is None else f"rank {self.rank}"

    def _fmt(self, rank: int | None, text: str) -> str:
        if self.rank is not None:
            return text
        return f"[{rank}] {text}" if rank is not None else text
