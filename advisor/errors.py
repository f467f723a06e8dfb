"""User-facing errors: what went wrong, where, and how to fix it.

The CLI turns a ``UserError`` into one message and exit status 2; anything else is a bug and
keeps its traceback.
"""

from __future__ import annotations

from collections.abc import Iterable


class UserError(Exception):
    """A mistake in what the user asked for (a flag, a file, a name), not a bug.

    Not a ValueError on purpose: pydantic validators let it through unwrapped.
    """

    def __init__(self, what: str, *, where: str | None = None, fix: str | None = None):
        self.what = what
        self.where = where
        self.fix = fix
        super().__init__(self.message())

    def message(self) -> str:
        text = self.what if self.where is None else f"{self.where}: {self.what}"
        if self.fix:
            text += f"\n  fix: {self.fix}"
        return text


class ResourceShortage(UserError):
    """Not a mistake and not for good: the disk is full (ENOSPC, EDQUOT), memory ran out. The CLI exits
    ``EXIT_TEMPFAIL`` (sysexits.h's EX_TEMPFAIL, 75) instead of 2, so the shipped systemd unit, which does
    not restart on 2 (``RestartPreventExitStatus=2``: a wrong flag stays wrong), restarts the queue
    once space is freed."""

    exit_code = 75


EXIT_TEMPFAIL = ResourceShortage.exit_code


def close_names(name: str, choices: Iterable[str], n: int = 4) -> list[str]:
    """Names from ``choices`` that look like ``name`` (case-insensitive), best first."""
    import difflib  # only on the error path: not a cost of every `advise` run

    lowered = {c.lower(): c for c in choices}
    hits = difflib.get_close_matches(name.lower(), list(lowered), n=n, cutoff=0.5)
    # Substring matches are what people mean by "h100" -> "H100-SXM"; difflib misses them.
    subs = [c for lc, c in lowered.items() if name.lower() in lc and c not in hits]
    return [lowered[h] for h in hits] + subs[: max(0, n - len(hits))]


def unknown_name(kind: str, name: str, choices: Iterable[str], list_cmd: str) -> UserError:
    """An error for an unknown catalog name that suggests the closest known ones."""
    choices = list(choices)
    near = close_names(name, choices)
    hint = f"did you mean {', '.join(near)}? " if near else ""
    return UserError(f"unknown {kind} '{name}'", fix=f"{hint}`{list_cmd}` lists every {kind}")
