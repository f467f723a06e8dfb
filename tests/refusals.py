"""What a refused command looks like, for tests that run ``advise`` in this process (``run_cli``) or as a child.

DESIGN.md: a user's mistake is refused before anything starts, with exit 2, one line saying what is
wrong and one saying the fix (``advise: error: ...`` then ``  fix: ...``), never a traceback. Notes
(``advise: note: ...``) may come before it and are not counted.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from cli.main import main
from launcher.store import RunStore

Advise = Callable[..., tuple[int, str, str]]


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """``advise ARGV`` in this process: (exit status, stdout, stderr); argparse's exits count too."""
    try:
        rc = main(argv)
    except SystemExit as exc:
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


def check_refusal(rc: int, err: str, *words: str, fix_line: bool = False) -> None:
    """Exit 2, no traceback, one ``error:`` line, at most a ``  fix:`` (or ``  see``) line after it (required
    with ``fix_line``), naming every one of ``words``."""
    said = [line for line in err.splitlines() if not line.startswith("advise: note:")]
    assert rc == 2 and "Traceback" not in err, (rc, err)
    assert len([line for line in said if "error:" in line]) == 1, err
    assert len(said) <= 2 and all(line.startswith(("  fix:", "  see")) for line in said[1:]), err
    assert len(said) == 2 or not fix_line, err
    for w in words:
        assert w in err, err


def assert_refused(advise: Advise, argv: list[str], *words: str, fix_line: bool = False) -> str:
    """Run ``advise(*argv)`` and check it was refused (``check_refusal``); its stderr."""
    rc, out, err = advise(*argv)
    check_refusal(rc, err, *words, fix_line=fix_line)
    return err


def home_with_a_run(tmp_path: Path) -> Path:
    """A cardwise home whose store holds one queued run labelled "a run" (the record the attacks aim at)."""
    home = tmp_path / "home"
    RunStore.open(home).create(label="a run")
    return home
