"""What a refused command looks like, for tests that run ``advise`` as a child process.

DESIGN.md: a user's mistake is refused before anything starts, with exit 2, one line saying what is
wrong and one saying the fix (``advise: error: ...`` then ``  fix: ...``), never a traceback. Notes
(``advise: note: ...``) may come before it and are not counted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from launcher.store import RunStore

Advise = Callable[..., tuple[int, str, str]]


def assert_refused(advise: Advise, argv: list[str], *words: str) -> str:
    """Run ``advise(*argv)``; it exits 2 with at most the two lines (what, fix), naming every one of ``words``."""
    rc, out, err = advise(*argv)
    said = [line for line in err.splitlines() if not line.startswith("advise: note:")]
    assert rc == 2 and 1 <= len(said) <= 2 and "Traceback" not in err, (argv, rc, out, err)
    for w in words:
        assert w in err, err
    return err


def home_with_a_run(tmp_path: Path) -> Path:
    """A cardwise home whose store holds one queued run labelled "a run" (the record the attacks aim at)."""
    home = tmp_path / "home"
    RunStore.open(home).create(label="a run")
    return home
